// Structured output through the engine on tests/model's small config (vocabulary of 300: the
// DeepSeek-V3 tokenizer's specials, byte tokens and first merges) with the tiny tokenizer.
// With overlap on, the grammar masks of a step's rows are computed while its forward runs; the
// outputs must be bitwise those of overlap off and of each request run alone, also across
// preemption (tiny pools). Finished outputs are checked by references we did not write:
// std::regex for patterns, nlohmann::json for JSON documents.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "engine_test_util.h"
#include "engine/structured_output.h"
#include "recipe/tokenizer.h"

namespace deepinfer::testing {
namespace {

std::shared_ptr<const recipe::Tokenizer> tiny_tokenizer() {
  static auto t = std::make_shared<const recipe::Tokenizer>(
      recipe::Tokenizer::from_file("models/tiny/tokenizer.json"));
  return t;
}

std::unique_ptr<Engine> structured_engine(const EngineArgs& args) {
  return std::make_unique<Engine>(args, small_model(), tiny_tokenizer());
}

const char* kPattern = "[a-z]{2,6}(-[0-9]{1,3})?@(ab|cd)\\.(com|org)";
const char* kSchema = R"({"type": "object", "properties": {
    "n": {"type": "integer", "minimum": -5, "maximum": 500},
    "s": {"type": "string", "maxLength": 6},
    "t": {"type": "array", "items": {"enum": ["x", "yz", true]}, "maxItems": 3}},
  "required": ["n", "s"], "additionalProperties": false})";
const char* kGrammar = "root ::= expr\nexpr ::= term ([+*-] term)*\nterm ::= [1-9] [0-9]? | \"(\" expr \")\"\n";

struct StructuredJob {
  EngineRequest request;
  std::string kind;
};

std::vector<StructuredJob> jobs() {
  std::vector<StructuredJob> out;
  const std::vector<std::pair<std::string, std::string>> constraints = {
      {"regex", kPattern}, {"json_schema", kSchema}, {"ebnf", kGrammar}, {"json_object", ""}, {"", ""}};
  for (int i = 0; i < 15; ++i) {
    StructuredJob j;
    EngineRequest& r = j.request;
    r.id = "q" + std::to_string(i);
    r.prompt = random_tokens(1 + (i * 7) % 40, small_config().vocab_size, 50 + uint32_t(i));
    r.params.temperature = i % 3 == 0 ? 0.0f : (i % 3 == 1 ? 0.8f : 1.6f);
    r.params.seed = 900 + uint64_t(i);
    r.params.max_tokens = 24 + (i * 5) % 40;
    if (i % 4 == 1) {
      r.params.top_k = 30;
      r.params.top_p = 0.9f;
      r.params.repetition_penalty = 1.2f;
    }
    j.kind = constraints[size_t(i) % constraints.size()].first;
    r.constraint_kind = j.kind;
    r.constraint = constraints[size_t(i) % constraints.size()].second;
    out.push_back(std::move(j));
  }
  return out;
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text, finish_reason;
};

std::map<std::string, Result> run_all(Engine& engine, const std::vector<StructuredJob>& js) {
  for (const StructuredJob& j : js) engine.add_request(j.request);
  std::map<std::string, Result> out;
  for (auto& [id, outs] : drain(engine)) {
    Result& r = out[id];
    for (const RequestOutput& o : outs) {
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      r.text += o.new_text;
      if (o.finished) r.finish_reason = o.finish_reason;
    }
  }
  return out;
}

TEST(EngineStructured, OverlapOnOffAndAloneAreBitwiseEqual) {
  const auto js = jobs();
  auto off = structured_engine(tiny_pool_args(false));
  const auto ref = run_all(*off, js);
  auto on = structured_engine(tiny_pool_args(true));
  const auto ovl = run_all(*on, js);
  EXPECT_GT(on->stats().n_preemptions + off->stats().n_preemptions, 0) << "tiny pools should preempt";
  ASSERT_EQ(ref.size(), js.size());
  ASSERT_EQ(ovl.size(), js.size());
  int n_stop = 0;
  for (const StructuredJob& j : js) {
    const std::string& id = j.request.id;
    EXPECT_EQ(ovl.at(id).tokens, ref.at(id).tokens) << id << " " << j.kind;
    EXPECT_EQ(ovl.at(id).finish_reason, ref.at(id).finish_reason) << id;
    auto alone = structured_engine(tiny_pool_args(true));
    EXPECT_EQ(run_all(*alone, {j}).at(id).tokens, ref.at(id).tokens) << id << " alone";
    const Result& r = ref.at(id);
    if (j.kind.empty() || r.finish_reason != "stop") continue;
    ++n_stop;
    if (j.kind == "regex") {
      EXPECT_TRUE(std::regex_match(r.text, std::regex(kPattern))) << id << ": " << r.text;
    } else if (j.kind == "json_schema") {
      const auto doc = nlohmann::json::parse(r.text);  // throws if not JSON
      ASSERT_TRUE(doc.is_object()) << r.text;
      EXPECT_TRUE(doc.at("n").is_number_integer()) << r.text;
      EXPECT_GE(doc.at("n").get<int64_t>(), -5);
      EXPECT_LE(doc.at("n").get<int64_t>(), 500);
      EXPECT_TRUE(doc.at("s").is_string()) << r.text;
      for (const auto& [key, value] : doc.items()) EXPECT_TRUE(key == "n" || key == "s" || key == "t") << key;
    } else if (j.kind == "json_object") {
      try {
        EXPECT_TRUE(nlohmann::json::parse(r.text).is_object()) << r.text;
      } catch (const nlohmann::json::out_of_range& e) {
        // Valid JSON whose number exceeds a double (e.g. 1E999): nlohmann refuses to store it.
        EXPECT_EQ(e.id, 406) << r.text;
      }
    }
  }
  std::printf("constrained outputs finished: %d; preemptions: overlap off %lld, on %lld\n", n_stop,
              (long long)off->stats().n_preemptions, (long long)on->stats().n_preemptions);
  EXPECT_GT(n_stop, 0) << "no constrained output finished";
}

// The compile cache keeps the most recently used grammars; an evicted grammar lives on in the
// matchers that use it.
TEST(EngineStructured, CompileCacheEvictsTheLeastRecentlyUsed) {
  StructuredOutput so(*tiny_tokenizer(), small_config().vocab_size, {1}, 2);
  auto a1 = so.make_matcher("regex", "a+");
  auto b1 = so.make_matcher("regex", "b+");
  EXPECT_EQ(&so.make_matcher("regex", "a+")->compiled(), &a1->compiled());  // hit: a is newest
  auto c1 = so.make_matcher("regex", "c+");                                  // evicts b
  EXPECT_EQ(so.n_cached(), 2u);
  EXPECT_EQ(&so.make_matcher("regex", "a+")->compiled(), &a1->compiled());
  EXPECT_EQ(&so.make_matcher("regex", "c+")->compiled(), &c1->compiled());
  auto b2 = so.make_matcher("regex", "b+");  // recompiled, evicts a
  EXPECT_NE(&b2->compiled(), &b1->compiled());
  EXPECT_NE(&so.make_matcher("regex", "a+")->compiled(), &a1->compiled());
  EXPECT_TRUE(b1->accept_bytes("bb") && b1->can_terminate());  // the evicted grammar still works
  EXPECT_THROW(so.make_matcher("regex", "("), Error);
  EXPECT_EQ(so.n_cached(), 2u);
}

// ignore_eos would let the output run past the constraint's end, where nothing is allowed.
TEST(EngineStructured, IgnoreEosWithAConstraintIsRefused) {
  auto engine = structured_engine(tiny_pool_args(true));
  EngineRequest r;
  r.id = "x";
  r.prompt = {5, 6};
  r.params.ignore_eos = true;
  r.constraint_kind = "regex";
  r.constraint = "ab";
  EXPECT_THROW(engine->add_request(r), Error);
  r.params.ignore_eos = false;
  const auto out = engine->generate({r});
  EXPECT_EQ(out[0].new_text, "ab");
  EXPECT_EQ(out[0].finish_reason, "stop");
}

}  // namespace
}  // namespace deepinfer::testing
