// Helpers for engine tests of grammar-constrained requests whose masks the runner applies
// (RowRequest::bitmask): constrained jobs on tests/model's small config (vocabulary of 300)
// with the tiny tokenizer, a CPU runner that samples kSample rows with the engine's rule, and
// the run of a job list to per-request tokens, text and finish reason.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine_test_util.h"
#include "recipe/tokenizer.h"

namespace deepinfer::testing {

inline std::shared_ptr<const recipe::Tokenizer> constrained_test_tokenizer() {
  static auto t = std::make_shared<const recipe::Tokenizer>(
      recipe::Tokenizer::from_file("models/tiny/tokenizer.json"));
  return t;
}

inline const char* kMaskPattern = "[a-z]{2,6}(-[0-9]{1,3})?@(ab|cd)\\.(com|org)";
inline const char* kMaskSchema = R"({"type": "object", "properties": {
    "n": {"type": "integer", "minimum": -5, "maximum": 500},
    "s": {"type": "string", "maxLength": 6}},
  "required": ["n", "s"], "additionalProperties": false})";

// n requests alternating regex and json_schema constraints; greedy when temperature is 0,
// else seeded sampling at `temperature` (some with top-k / top-p / min-p); every fifth has
// min_tokens (the grammar, not min_tokens, decides EOS on constrained rows); with
// `with_host_rows`, every fourth has a repetition penalty (a host row beside masked rows).
inline std::vector<EngineRequest> constrained_requests(int n, float temperature, bool with_host_rows,
                                                       uint32_t seed) {
  std::vector<EngineRequest> out;
  for (int i = 0; i < n; ++i) {
    EngineRequest r;
    r.id = "c" + std::to_string(i);
    r.prompt = random_tokens(1 + (i * 7 + int(seed)) % 30, small_config().vocab_size,
                             seed * 100 + uint32_t(i));
    r.params.temperature = temperature;
    r.params.seed = 700 + uint64_t(i);
    r.params.max_tokens = 20 + (i * 5) % 30;
    if (temperature > 0 && i % 3 == 1) {
      r.params.top_k = 40;
      r.params.top_p = 0.9f;
    } else if (temperature > 0 && i % 3 == 2) {
      r.params.min_p = 0.02f;
    }
    if (i % 5 == 3) r.params.min_tokens = 4;
    if (with_host_rows && i % 4 == 2) r.params.repetition_penalty = 1.2f;
    r.constraint_kind = i % 2 == 0 ? "regex" : "json_schema";
    r.constraint = i % 2 == 0 ? kMaskPattern : kMaskSchema;
    out.push_back(std::move(r));
  }
  return out;
}

struct ConstrainedResult {
  std::vector<int32_t> tokens;
  std::string text, finish_reason;
};

inline std::map<std::string, ConstrainedResult> run_constrained(Engine& engine,
                                                                const std::vector<EngineRequest>& requests) {
  for (const EngineRequest& r : requests) engine.add_request(r);
  std::map<std::string, ConstrainedResult> out;
  for (auto& [id, outs] : drain(engine)) {
    ConstrainedResult& r = out[id];
    for (const RequestOutput& o : outs) {
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      r.text += o.new_text;
      if (o.finished) r.finish_reason = o.finish_reason;
    }
  }
  return out;
}

}  // namespace deepinfer::testing
