// Tool-call grammar (tool_calls.h). The JSON pieces come from the JSON Schema front end
// (json_schema_rules.h) in the same builder; string-typed parameters are written raw, so their
// automata are the JSON string bodies read back through the escapes.
#include "grammar/tool_calls.h"

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "grammar/dfa.h"
#include "grammar/json_schema_merge.h"
#include "grammar/json_schema_rules.h"
#include "grammar/json_strings.h"

namespace deepinfer::grammar {
namespace {

using json = nlohmann::ordered_json;

struct Syntax {
  std::string call_open, call_name_end, param_open, param_string, param_json, param_close,
      empty_params, call_close, end, value_forbidden;
};

Syntax read_syntax(const json& j) {
  CHECK(j.is_object()) << "tool_calls spec: 'syntax' must be an object";
  auto get = [&](const char* k) {
    CHECK(j.contains(k) && j[k].is_string()) << "tool_calls spec: syntax." << k << " must be a string";
    return j[k].get<std::string>();
  };
  return Syntax{get("call_open"),   get("call_name_end"), get("param_open"), get("param_string"),
                get("param_json"),  get("param_close"),   get("empty_params"), get("call_close"),
                get("end"),         get("value_forbidden")};
}

// Raw text -> the JSON string-body encodings json_schema.h allows, in order of preference.
std::vector<std::string> json_encodings(uint8_t b) {
  static const char* hex = "0123456789abcdef";
  static const char* hex_upper = "0123456789ABCDEF";
  switch (b) {
    case '"': return {"\\\""};
    case '\\': return {"\\\\"};
    case '/': return {"/", "\\/"};
    case '\b': return {"\\b"};
    case '\f': return {"\\f"};
    case '\n': return {"\\n"};
    case '\r': return {"\\r"};
    case '\t': return {"\\t"};
    default: break;
  }
  if (b < 0x20) {
    return {std::string("\\u00") + hex[b >> 4] + hex[b & 15],
            std::string("\\u00") + hex_upper[b >> 4] + hex_upper[b & 15]};
  }
  return {std::string(1, static_cast<char>(b))};
}

// The decoded language of a JSON string-body automaton. Bodies built from code-point languages
// (json_encode) accept every encoding of a code point wherever they accept one, so following the
// first live encoding of each byte is exact.
Dfa decode_json_body(const Dfa& body) {
  if (body.empty()) return Dfa{};
  const int32_t n = body.n_states();
  Dfa out;
  out.start = body.start;
  out.next.assign(static_cast<size_t>(n) * 256, kDead);
  out.accept = body.accept;
  out.has_out.assign(n, 0);
  for (int32_t s = 0; s < n; ++s) {
    for (int b = 0; b < 256; ++b) {
      for (const std::string& e : json_encodings(static_cast<uint8_t>(b))) {
        int32_t t = s;
        for (char c : e) {
          t = body.at(t, static_cast<uint8_t>(c));
          if (t == kDead) break;
        }
        if (t != kDead) {
          out.next[static_cast<size_t>(s) * 256 + b] = t;
          out.has_out[s] = 1;
          break;
        }
      }
    }
  }
  return trim_dfa(out);
}

// Is `s` a string schema we can write raw: {"type": "string", length / pattern / format}?
bool is_plain_string_schema(const json& s) {
  if (!s.is_object() || !s.contains("type") || s["type"] != "string") return false;
  static const std::set<std::string> allowed = {"type", "minLength", "maxLength", "pattern", "format"};
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!allowed.count(it.key()) && !is_annotation(it.key())) return false;
  return true;
}

// The string values of an enum / const schema of strings alone, else nullopt.
std::optional<std::vector<std::string>> string_literals(const json& s) {
  if (!s.is_object() || (s.contains("enum") == s.contains("const"))) return std::nullopt;
  for (auto it = s.begin(); it != s.end(); ++it)
    if (it.key() != "enum" && it.key() != "const" && !is_annotation(it.key())) return std::nullopt;
  std::vector<std::string> out;
  const json values = s.contains("enum") ? s["enum"] : json::array({s["const"]});
  if (!values.is_array()) return std::nullopt;
  for (const auto& v : values) {
    if (!v.is_string()) return std::nullopt;
    out.push_back(v.get<std::string>());
  }
  return out;
}

// The property name as the JSON key text a DSML reader takes it for (up to the next space).
std::string key_text(const std::string& name) {
  std::string q = json_quote(name), out;
  for (char c : q) {
    if (c == ' ') out += "\\u0020";
    else out += c;
  }
  return out;
}

class ToolCallsCompiler {
 public:
  ToolCallsCompiler(const json& spec, const JsonSchemaOptions& options, const NumberLiterals& literals)
      : spec_(spec), options_(options), literals_(literals), b_("tool calls") {
    CHECK(spec_.is_object()) << "tool_calls spec must be a JSON object";
    syntax_ = read_syntax(spec_.contains("syntax") ? spec_["syntax"] : json());
    CHECK(!syntax_.value_forbidden.empty()) << "tool_calls spec: syntax.value_forbidden must not be empty";
    const ExprPtr any = star(cls({{0, kMaxCodePoint}}));
    contains_forbidden_ = build_dfa(*seq({any, lit(syntax_.value_forbidden), any}), "tool-call value end");
  }

  Grammar compile() {
    CHECK(spec_.contains("tools") && spec_["tools"].is_array() && !spec_["tools"].empty())
        << "tool_calls spec: 'tools' must be a non-empty array";
    std::vector<ExprPtr> calls;
    std::set<std::string> seen;
    for (size_t i = 0; i < spec_["tools"].size(); ++i) {
      const json& t = spec_["tools"][i];
      CHECK(t.is_object() && t.contains("name") && t["name"].is_string())
          << "tool_calls spec: tools[" << i << "] needs a string 'name'";
      const std::string name = t["name"].get<std::string>();
      if (!seen.insert(name).second) continue;
      calls.push_back(call_expr(name, t.contains("parameters") ? t["parameters"] : json()));
    }
    const int32_t call = b_.declare("call");
    b_.define(call, alt(std::move(calls)));
    const bool parallel = spec_.value("parallel", true);
    const int32_t root = b_.declare("root");
    b_.define(root, seq({parallel ? plus(ref(call)) : ref(call), lit(syntax_.end)}));
    Grammar g = b_.build(root);
    forbid_in_values(g);
    return g;
  }

 private:
  const json& spec_;
  JsonSchemaOptions options_;
  const NumberLiterals& literals_;  // of the spec's text: exact numeric keywords
  GrammarBuilder b_;
  Syntax syntax_;
  Dfa contains_forbidden_;
  std::vector<std::unique_ptr<JsonSchemaRules>> schemas_;  // one per tool (its own $defs)
  std::vector<int32_t> value_rules_;                        // JSON values: forbid_in_values

  [[noreturn]] void unsupported(const std::string& tool, const std::string& what) {
    THROW(kUnsupported) << "tool '" << tool << "': parameters " << what << " is not supported";
  }

  ExprPtr call_expr(const std::string& name, const json& params) {
    CHECK_KIND(kUnsupported, name.find('"') == std::string::npos && !name.empty())
        << "tool name '" << name << "' cannot be written in a tool call (empty or with '\"')";
    std::vector<ExprPtr> entries;
    std::vector<bool> required;
    if (!params.is_null()) read_params(name, params, entries, required);
    const int32_t n = static_cast<int32_t>(entries.size());
    // tail[i]: the entries from i on; first[i]: the same with at least one entry written.
    std::vector<int32_t> tail(n + 1), first(n);
    for (int32_t i = 0; i <= n; ++i) tail[i] = b_.declare(name + "/params/" + std::to_string(i));
    for (int32_t i = 0; i < n; ++i) first[i] = b_.declare(name + "/params+/" + std::to_string(i));
    b_.define(tail[n], epsilon());
    for (int32_t i = n - 1; i >= 0; --i) {
      ExprPtr with = seq({entries[i], ref(tail[i + 1])});
      b_.define(tail[i], required[i] ? with : alt({with, ref(tail[i + 1])}));
      b_.define(first[i], required[i] || i + 1 == n ? with : alt({with, ref(first[i + 1])}));
    }
    bool any_required = false;
    for (bool r : required) any_required = any_required || r;
    std::vector<ExprPtr> bodies;
    if (n > 0) bodies.push_back(ref(first[0]));
    if (!any_required) bodies.push_back(lit(syntax_.empty_params));
    return seq({lit(syntax_.call_open + name + syntax_.call_name_end), alt(std::move(bodies)),
                lit(syntax_.call_close)});
  }

  void read_params(const std::string& tool, const json& params, std::vector<ExprPtr>& entries,
                   std::vector<bool>& required) {
    if (params.is_boolean()) {
      if (!params.get<bool>()) unsupported(tool, "schema false");
      return;
    }
    CHECK(params.is_object()) << "tool '" << tool << "': parameters must be a JSON schema object";
    static const std::set<std::string> known = {"type", "properties", "required", "additionalProperties",
                                                "$defs", "definitions"};
    for (auto it = params.begin(); it != params.end(); ++it)
      if (!known.count(it.key()) && !is_annotation(it.key())) unsupported(tool, "keyword '" + it.key() + "'");
    if (params.contains("type") && params["type"] != "object") unsupported(tool, "type other than object");
    const json props = params.value("properties", json::object());
    CHECK(props.is_object()) << "tool '" << tool << "': parameters.properties must be an object";
    std::vector<std::string> req;
    if (params.contains("required")) {
      CHECK(params["required"].is_array()) << "tool '" << tool << "': parameters.required must be an array";
      for (const auto& r : params["required"]) {
        CHECK(r.is_string()) << "tool '" << tool << "': parameters.required entries must be strings";
        if (std::find(req.begin(), req.end(), r.get<std::string>()) == req.end()) req.push_back(r.get<std::string>());
      }
    }
    const json additional = params.value("additionalProperties", json(true));
    schemas_.push_back(std::make_unique<JsonSchemaRules>(b_, params, options_, &literals_));
    JsonSchemaRules& rules = *schemas_.back();
    auto add = [&](const std::string& key, const json& schema, bool is_required, const std::string& path) {
      entries.push_back(entry_expr(tool, key, schema, path, rules));
      required.push_back(is_required);
    };
    for (auto it = props.begin(); it != props.end(); ++it)
      add(it.key(), it.value(), std::find(req.begin(), req.end(), it.key()) != req.end(),
          "#/properties/" + it.key());
    for (const auto& r : req)
      if (!props.contains(r)) add(r, additional, true, "#/additionalProperties");
  }

  ExprPtr entry_expr(const std::string& tool, const std::string& key, const json& schema,
                     const std::string& path, JsonSchemaRules& rules) {
    const std::string head = syntax_.param_open + key_text(key);
    const ExprPtr close = lit(syntax_.param_close);
    if (is_plain_string_schema(schema)) {
      const std::string what = "tool '" + tool + "' parameter '" + key + "'";
      Dfa raw = subtract_dfa(decode_json_body(*rules.string_body(schema, path)), contains_forbidden_, what);
      return seq({lit(head + syntax_.param_string), automaton(std::make_shared<const Dfa>(std::move(raw))), close});
    }
    if (auto values = string_literals(schema)) {
      std::vector<ExprPtr> alts;
      for (const std::string& v : *values)
        if (v.find(syntax_.value_forbidden) == std::string::npos) alts.push_back(lit(v));
      return seq({lit(head + syntax_.param_string), alt(std::move(alts)), close});
    }
    const int32_t r = rules.value_rule(schema, path);
    value_rules_.push_back(r);
    return seq({lit(head + syntax_.param_json), ref(r), close});
  }

  // JSON values never contain value_forbidden: it can only occur inside a JSON string, which
  // always lies within one automaton, so every automaton the value rules reach loses the
  // strings that contain it (the tags of the calls themselves are in other rules).
  void forbid_in_values(Grammar& g) {
    std::vector<uint8_t> in_value(g.n_rules(), 0);
    std::vector<int32_t> work;
    for (int32_t r : value_rules_)
      if (!in_value[r]) { in_value[r] = 1; work.push_back(r); }
    while (!work.empty()) {
      const int32_t r = work.back();
      work.pop_back();
      for (int32_t a : g.rule_alts[r])
        for (int32_t p = a; g.elements[p].kind != ElementKind::kEnd; ++p)
          if (g.elements[p].kind == ElementKind::kRef && !in_value[g.elements[p].arg]) {
            in_value[g.elements[p].arg] = 1;
            work.push_back(g.elements[p].arg);
          }
    }
    std::map<int32_t, int32_t> filtered;
    for (int32_t r = 0; r < g.n_rules(); ++r) {
      if (!in_value[r]) continue;
      for (int32_t a : g.rule_alts[r])
        for (int32_t p = a; g.elements[p].kind != ElementKind::kEnd; ++p) {
          Element& el = g.elements[p];
          if (el.kind != ElementKind::kDfa) continue;
          auto it = filtered.find(el.arg);
          if (it == filtered.end()) {
            Dfa d = subtract_dfa(g.dfas[el.arg], contains_forbidden_, "tool-call values");
            CHECK_KIND(kUnsupported, !d.empty())
                << "a tool's parameters schema allows only values containing '" << syntax_.value_forbidden
                << "', which cannot be written in a tool call";
            g.dfas.push_back(std::move(d));
            it = filtered.emplace(el.arg, static_cast<int32_t>(g.dfas.size()) - 1).first;
          }
          el.arg = it->second;
        }
    }
  }
};

}  // namespace

Grammar tool_calls_grammar(std::string_view spec_json, const JsonSchemaOptions& options) {
  json spec;
  try {
    spec = json::parse(spec_json);
  } catch (const json::exception& e) {
    THROW(kInvalidInput) << "tool_calls spec is not valid JSON: " << e.what();
  }
  JsonSchemaOptions opts = options;
  if (spec.is_object() && spec.contains("max_whitespace")) {
    CHECK(spec["max_whitespace"].is_number_integer() && spec["max_whitespace"].get<int64_t>() >= 0 &&
          spec["max_whitespace"].get<int64_t>() <= 8)
        << "tool_calls spec: max_whitespace must be an integer in 0..8";
    opts.max_whitespace = std::max<int32_t>(opts.max_whitespace, spec["max_whitespace"].get<int32_t>());
  }
  const NumberLiterals literals(spec_json);
  ToolCallsCompiler c(spec, opts, literals);
  return c.compile();
}

}  // namespace deepinfer::grammar
