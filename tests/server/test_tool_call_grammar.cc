// The tool-call grammar (grammar/tool_calls.h with recipe/tool_call_constraint.h's DSML spec)
// against the output parser: random walks of a GrammarMatcher over the tiny model's vocabulary
// always end, and every text they produce parses (recipe::parse_output, as the server reads a
// required choice's output) to tool calls of the allowed tools whose arguments are valid for the
// tool's schema (checked by a small validator written here, independent of the grammar engine).
// The encoder's own rendering of a call is in the language; malformed calls are not; the
// request conversion maps tool_choice onto the constraint and refuses what cannot work.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "grammar/compile.h"
#include "recipe/dsml.h"
#include "recipe/output_parser.h"
#include "recipe/tokenizer.h"
#include "recipe/tool_call_constraint.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace deepinfer {
namespace {

using json = nlohmann::ordered_json;
using recipe::DsmlDialect;

const recipe::Tokenizer& tokenizer() {
  static const recipe::Tokenizer t = recipe::Tokenizer::from_file("models/tiny/tokenizer.json");
  return t;
}

// The engine's grammar vocabulary (engine/structured_output.cc): every non-special token's bytes.
std::shared_ptr<const grammar::Vocabulary> vocab() {
  static const auto v = [] {
    const recipe::Tokenizer& t = tokenizer();
    std::vector<std::string> bytes(static_cast<size_t>(t.vocab_size()));
    for (int32_t id = 0; id < t.vocab_size(); ++id)
      if (t.has_token(id) && !t.is_special(id)) bytes[id] = std::string(t.token_bytes(id));
    return std::make_shared<const grammar::Vocabulary>(std::move(bytes), std::vector<int32_t>{1});
  }();
  return v;
}

const json& tools_json() {
  static const json t = json::parse(R"([
    {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
      "required": ["city"]}},
    {"name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "pattern": "^[a-z]+( [a-z]+)*$", "maxLength": 20},
        "filters": {"type": "object", "properties": {
            "lang": {"type": "string", "maxLength": 8},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}},
          "required": ["lang"], "additionalProperties": false},
        "limit": {"type": ["integer", "null"]}},
      "required": ["query", "filters"]}},
    {"name": "now", "parameters": null},
    {"name": "plot", "parameters": {"type": "object", "properties": {
        "point": {"$ref": "#/$defs/P"}, "a b": {"type": "boolean"}, "say\"": {"type": "string", "maxLength": 5}},
      "required": ["point", "a b", "say\""],
      "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "boolean"}},
                      "required": ["x", "y"], "additionalProperties": false}}}}
  ])");
  return t;
}

std::vector<recipe::ToolDefinition> tools(const std::set<std::string>& only = {}) {
  std::vector<recipe::ToolDefinition> out;
  for (const json& t : tools_json()) {
    if (!only.empty() && !only.count(t["name"].get<std::string>())) continue;
    recipe::ToolDefinition d;
    d.name = t["name"].get<std::string>();
    d.parameters = t["parameters"];
    out.push_back(d);
  }
  return out;
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// A validator for the keywords the schemas above use; returns "" or what is wrong.
std::string check(const json& s, const json& v, const json& root) {
  if (s.is_null()) return v.is_object() && v.empty() ? "" : "no parameters expected";
  if (s.contains("$ref")) {
    const std::string r = s["$ref"].get<std::string>();
    return check(root["$defs"][r.substr(std::string("#/$defs/").size())], v, root);
  }
  if (s.contains("enum")) {
    for (const auto& e : s["enum"]) if (e == v) return "";
    return "not in enum: " + v.dump();
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_array()) for (const auto& t : s["type"]) types.push_back(t.get<std::string>());
    else types.push_back(s["type"].get<std::string>());
    bool ok = false;
    for (const auto& t : types) {
      ok = ok || (t == "string" && v.is_string()) || (t == "integer" && v.is_number() && std::floor(v.get<double>()) == v.get<double>()) ||
           (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
           (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "number" && v.is_number());
    }
    if (!ok) return "wrong type: " + v.dump();
  }
  if (v.is_string()) {
    const std::string x = v.get<std::string>();
    if (s.contains("minLength") && code_points(x) < s["minLength"].get<size_t>()) return "too short";
    if (s.contains("maxLength") && code_points(x) > s["maxLength"].get<size_t>()) return "too long";
    if (s.contains("pattern") && !std::regex_search(x, std::regex(s["pattern"].get<std::string>())))
      return "pattern: " + x;
  }
  if (v.is_number()) {
    if (s.contains("minimum") && v.get<double>() < s["minimum"].get<double>()) return "below minimum";
    if (s.contains("maximum") && v.get<double>() > s["maximum"].get<double>()) return "above maximum";
  }
  if (v.is_array()) {
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return "too many items";
    for (const auto& e : v)
      if (auto w = check(s.value("items", json::object()), e, root); !w.empty()) return w;
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    for (const auto& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return "missing " + r.get<std::string>();
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (auto w = check(props[it.key()], it.value(), root); !w.empty()) return it.key() + ": " + w;
      } else if (s.value("additionalProperties", json(true)) == false) {
        return "unexpected " + it.key();
      }
    }
  }
  return "";
}

bool bit(const std::vector<uint32_t>& m, int32_t t) { return (m[t >> 5] >> (t & 31)) & 1u; }

// A random walk: uniform over the allowed tokens for `random_steps`, then closing (stop token,
// forced bytes, tokens starting a closing tag or bracket, else a random single byte).
std::string walk(const std::shared_ptr<const grammar::CompiledGrammar>& g, uint64_t seed, int random_steps) {
  const grammar::Vocabulary& v = g->vocab();
  grammar::GrammarMatcher m(g);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(v.n_mask_words());
  std::string text;
  for (int n = 0; n < 3000 && !m.is_terminated(); ++n) {
    m.fill_next_token_bitmask(mask.data());
    std::vector<int32_t> allowed;
    for (int32_t w = 0; w < v.n_mask_words(); ++w)
      for (uint32_t x = mask[w]; x; x &= x - 1) allowed.push_back(w * 32 + __builtin_ctz(x));
    EXPECT_FALSE(allowed.empty()) << "stuck after " << text;
    if (allowed.empty()) break;
    int32_t tok = -1;
    if (n >= random_steps) {
      if (bit(mask, 1)) tok = 1;
      const std::string forced = tok < 0 ? m.find_forced_bytes() : "";
      for (const std::string& want : {forced.substr(0, 1), std::string("<"), std::string("\""),
                                      std::string("}"), std::string("]")}) {
        if (tok >= 0 || want.empty()) continue;
        for (int32_t t : allowed)
          if (v.token_bytes(t) == want) { tok = t; break; }
      }
      if (tok < 0) {
        std::vector<int32_t> singles;
        for (int32_t t : allowed) if (v.token_bytes(t).size() == 1) singles.push_back(t);
        if (!singles.empty()) tok = singles[rng() % singles.size()];
      }
    }
    if (tok < 0) tok = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.accept_token(tok));
    if (tok != 1) text += v.token_bytes(tok);
  }
  EXPECT_TRUE(m.is_terminated()) << text;
  return text;
}

std::shared_ptr<const grammar::CompiledGrammar> compile(const std::vector<recipe::ToolDefinition>& t,
                                                        DsmlDialect dialect, bool parallel) {
  return grammar::compile_grammar({recipe::kToolCallConstraintKind,
                                   recipe::dsml_tool_call_constraint(t, dialect, parallel)},
                                  vocab());
}

recipe::ParsedOutput parse(const std::string& text) {
  recipe::ParserOptions o;
  o.starts_in_tool_calls = true;
  return recipe::parse_output(text, o);
}

struct WalkStats {
  int n_walks = 0, n_multi = 0;
  std::set<std::string> names;
};

// Every walk parses to valid calls of `allowed`; returns what was seen.
WalkStats check_walks(DsmlDialect dialect, const std::set<std::string>& allowed, bool parallel, int n) {
  auto g = compile(tools(allowed), dialect, parallel);
  std::map<std::string, json> schema;
  for (const json& t : tools_json()) schema[t["name"].get<std::string>()] = t["parameters"];
  WalkStats st;
  for (int i = 0; i < n; ++i) {
    const std::string text = walk(g, 1000 + i, i % 4 == 0 ? 4 : 40);
    const recipe::ParsedOutput out = parse(text);
    SCOPED_TRACE(text);
    EXPECT_TRUE(out.ended);
    EXPECT_TRUE(out.content.empty());
    EXPECT_FALSE(out.tool_calls.empty());
    if (!parallel) EXPECT_EQ(out.tool_calls.size(), 1u);
    st.n_multi += out.tool_calls.size() > 1;
    for (const auto& call : out.tool_calls) {
      st.names.insert(call.name);
      EXPECT_TRUE(allowed.empty() || allowed.count(call.name)) << call.name;
      if (!schema.count(call.name)) { ADD_FAILURE() << call.name; continue; }
      json args;
      try {
        args = json::parse(call.arguments);
      } catch (const json::exception&) {
        ADD_FAILURE() << "arguments are not JSON: " << call.arguments;
        continue;
      }
      const json& s = schema[call.name];
      EXPECT_EQ(check(s, args, s), "") << call.name << " " << call.arguments;
    }
    ++st.n_walks;
  }
  return st;
}

TEST(ToolCallGrammar, RandomWalksParseToSchemaValidCallsV4) {
  WalkStats st = check_walks(DsmlDialect::kV4, {}, true, 60);
  EXPECT_EQ(st.names.size(), 4u);  // every tool gets called
  EXPECT_GT(st.n_multi, 0);        // parallel: several calls happen
}

TEST(ToolCallGrammar, RandomWalksParseToSchemaValidCallsV41) {
  WalkStats st = check_walks(DsmlDialect::kV41, {}, true, 60);
  EXPECT_EQ(st.names.size(), 4u);
  EXPECT_GT(st.n_multi, 0);
}

TEST(ToolCallGrammar, NamedToolAndNoParallel) {
  WalkStats st = check_walks(DsmlDialect::kV4, {"search"}, false, 30);
  EXPECT_EQ(st.names, std::set<std::string>{"search"});
  EXPECT_EQ(st.n_multi, 0);
  st = check_walks(DsmlDialect::kV41, {"plot"}, false, 20);
  EXPECT_EQ(st.names, std::set<std::string>{"plot"});
}

// What the encoder writes for a call in the history is what the grammar allows.
std::string rendered(const std::vector<recipe::ToolCall>& calls, DsmlDialect dialect) {
  recipe::SpecialTokens tokens;
  recipe::PromptBuilder b(tokens);
  recipe::render_dsml_tool_calls(b, calls, dialect, recipe::JsonFloatStyle());
  std::string s = b.take().prompt;
  // The prompt of a required choice already holds the block's opening.
  recipe::PromptBuilder o(tokens);
  recipe::render_required_tool_calls_opening(o, dialect);
  const std::string opening = o.take().prompt;
  EXPECT_EQ(s.substr(0, opening.size()), opening);
  return s.substr(opening.size());
}

bool accepts(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_terminate();
}

TEST(ToolCallGrammar, EncoderRenderingIsInTheLanguage) {
  const std::vector<recipe::ToolCall> one = {
      {"1", "get_weather", R"({"city": "Paris", "unit": "celsius", "days": 3})"}};
  const std::vector<recipe::ToolCall> two = {
      {"1", "search", R"({"query": "red shoes", "filters": {"lang": "en", "tags": ["a"]}, "limit": null})"},
      {"2", "now", "{}"}};
  for (DsmlDialect d : {DsmlDialect::kV4, DsmlDialect::kV41}) {
    auto par = compile(tools(), d, true);
    auto single = compile(tools(), d, false);
    EXPECT_TRUE(accepts(par, rendered(one, d))) << rendered(one, d);
    EXPECT_TRUE(accepts(par, rendered(two, d))) << rendered(two, d);
    EXPECT_TRUE(accepts(single, rendered(one, d)));
    EXPECT_FALSE(accepts(single, rendered(two, d)));  // parallel_tool_calls false: one call
    // Malformed calls are outside the language.
    for (const char* args : {R"({"unit": "celsius"})",              // required city missing
                             R"({"city": "Paris", "unit": "kelvin"})",  // not in enum
                             R"({"city": "Paris", "days": 30})",        // above maximum
                             R"({"city": ""})",                          // below minLength
                             R"({"city": "Paris", "wind": 1})"}) {       // undeclared
      EXPECT_FALSE(accepts(par, rendered({{"1", "get_weather", args}}, d))) << args;
    }
    EXPECT_FALSE(accepts(par, rendered({{"1", "nope", "{}"}}, d)));
    // A named choice allows only that tool.
    EXPECT_FALSE(accepts(compile(tools({"now"}), d, true), rendered(one, d)));
    // A value may not hold the marker that ends it.
    EXPECT_FALSE(accepts(par, rendered({{"1", "get_weather", R"({"city": "a</｜DSML｜b"})"}}, d)));
  }
}

TEST(ToolCallGrammar, UnsupportedSchemasAreNamed) {
  auto refuse = [](const char* params, const char* what) {
    recipe::ToolDefinition t;
    t.name = "f";
    t.parameters = json::parse(params);
    try {
      compile({t}, DsmlDialect::kV4, true);
      ADD_FAILURE() << params << " compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refuse(R"({"type": "object", "anyOf": [{"required": ["a"]}]})", "anyOf");
  refuse(R"({"type": "object", "minProperties": 1})", "minProperties");
  refuse(R"({"type": "array"})", "type other than object");
  // Unsatisfiable: a required property of an empty language.
  refuse(R"({"properties": {"a": {"type": "string", "minLength": 3, "maxLength": 2}}, "required": ["a"]})",
         "empty");
  recipe::ToolDefinition quoted;
  quoted.name = "a\"b";
  EXPECT_THROW(compile({quoted}, DsmlDialect::kV4, true), Error);
}

// ---- request conversion ----------------------------------------------------------------------

server::Json request(server::Json extra) {
  server::Json r = {{"messages", server::Json::array({{{"role", "user"}, {"content", "hi"}}})},
                    {"tools", server::Json::array()}};
  for (const json& t : tools_json()) {
    server::Json fn = {{"name", t["name"]}, {"parameters", server::Json::parse(t["parameters"].dump())}};
    r["tools"].push_back({{"type", "function"}, {"function", fn}});
  }
  for (auto it = extra.begin(); it != extra.end(); ++it) r[it.key()] = it.value();
  return r;
}

TEST(ToolCallGrammar, RequestConversion) {
  server::RequestLimits limits;
  auto req = server::parse_chat_request(request({{"tool_choice", "required"}}), limits);
  EXPECT_EQ(req.sampling.constraint_kind, "tool_calls");
  EXPECT_EQ(req.sampling.constraint_param, "tool_choice");
  EXPECT_TRUE(req.parser.starts_in_tool_calls);
  EXPECT_EQ(json::parse(req.sampling.constraint)["parallel"], true);
  EXPECT_EQ(json::parse(req.sampling.constraint)["tools"].size(), 4u);

  req = server::parse_chat_request(
      request({{"tool_choice", {{"type", "function"}, {"function", {{"name", "now"}}}}},
               {"parallel_tool_calls", false}}),
      limits, recipe::ChatVersion::kV41);
  const json spec = json::parse(req.sampling.constraint);
  EXPECT_EQ(spec["parallel"], false);
  ASSERT_EQ(spec["tools"].size(), 1u);
  EXPECT_EQ(spec["tools"][0]["name"], "now");
  EXPECT_EQ(spec["syntax"]["end"], "</｜DSML｜ calls>");

  EXPECT_TRUE(server::parse_chat_request(request({{"tool_choice", "auto"}}), limits).sampling.constraint_kind.empty());
  EXPECT_TRUE(server::parse_chat_request(request({}), limits).sampling.constraint_kind.empty());
  EXPECT_TRUE(server::parse_chat_request(request({{"tool_choice", "none"}}), limits).sampling.constraint_kind.empty());

  auto refused = [&](server::Json extra, const std::string& field) {
    try {
      server::parse_chat_request(request(extra), limits);
      ADD_FAILURE() << extra.dump() << " accepted";
    } catch (const server::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, field) << e.what();
    }
  };
  refused({{"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}, "tool_choice");
  refused({{"tool_choice", "required"}, {"guided_regex", "a+"}}, "tool_choice");
  refused({{"tool_choice", {{"type", "function"}, {"function", {{"name", "missing"}}}}}}, "tool_choice");
  refused({{"tool_choice", "required"}, {"tools", server::Json::array()}}, "tool_choice");
  refused({{"tool_choice", "required"}, {"thinking", {{"type", "enabled"}}}}, "tool_choice");
  refused({{"tool_choice", "required"}, {"parallel_tool_calls", "no"}}, "parallel_tool_calls");
}

}  // namespace
}  // namespace deepinfer
