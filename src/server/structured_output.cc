#include "server/structured_output.h"

#include <cctype>
#include <cstdio>

#include "base/error.h"
#include "grammar/compile.h"

namespace deepinfer::server {
namespace {

Constraint from_response_format(const Json& rf) {
  const Json* type = rf.is_object() ? find_field(rf, "type") : nullptr;
  if (!type || !type->is_string()) throw bad_request("response_format.type is required", "response_format");
  const std::string t = type->get<std::string>();
  auto field = [&](const char* a, const char* b) -> const Json* {
    const Json* v = find_field(rf, a);
    return v ? v : find_field(rf, b);
  };
  Constraint c;
  c.param = "response_format";
  if (t == "json_object") {
    c.kind = "json_object";
    c.for_encoder = Json{{"type", "json_object"}};
  } else if (t == "json_schema") {
    // OpenAI: {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}.
    const Json* js = find_field(rf, "json_schema");
    const Json* schema = js && js->is_object() ? find_field(*js, "schema") : find_field(rf, "schema");
    if (!schema || !(schema->is_object() || schema->is_boolean())) {
      throw bad_request("response_format json_schema needs json_schema.schema (an object)", "response_format");
    }
    c.kind = "json_schema";
    c.text = schema->dump();
    c.for_encoder = Json{{"type", "json_schema"}, {"schema", *schema}};
  } else if (t == "regex") {
    const Json* v = field("regex", "pattern");
    if (!v || !v->is_string()) throw bad_request("response_format regex needs \"regex\" (a string)", "response_format");
    c.kind = "regex";
    c.text = v->get<std::string>();
    c.for_encoder = Json{{"type", "regex"}, {"regex", c.text}};
  } else if (t == "ebnf" || t == "grammar") {
    const Json* v = field("ebnf", "grammar");
    if (!v || !v->is_string()) throw bad_request("response_format ebnf needs \"ebnf\" (a string)", "response_format");
    c.kind = "ebnf";
    c.text = v->get<std::string>();
  } else if (t != "text") {
    throw bad_request("unknown response_format type '" + t + "'", "response_format");
  }
  return c;
}

std::string choices_of(const Json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) throw bad_request(param + " must be a non-empty array of strings", param);
  std::vector<std::string> choices;
  for (const Json& x : v) {
    if (!x.is_string()) throw bad_request(param + " must be a non-empty array of strings", param);
    choices.push_back(x.get<std::string>());
  }
  return choice_regex(choices);
}

// One vLLM-style constraint value -> (kind, text). `what`: json, regex, grammar or choice.
void read_value(const std::string& what, const Json& v, const std::string& param, Constraint& c) {
  c.param = param;
  if (what == "json") {
    if (!(v.is_string() || v.is_object() || v.is_boolean())) {
      throw bad_request(param + " must be a JSON schema (an object, or its text)", param);
    }
    c.kind = "json_schema";
    c.text = v.is_string() ? v.get<std::string>() : v.dump();
  } else if (what == "regex" || what == "grammar") {
    if (!v.is_string()) throw bad_request(param + " must be a string", param);
    c.kind = what == "regex" ? "regex" : "ebnf";
    c.text = v.get<std::string>();
  } else {
    c.kind = "regex";
    c.text = choices_of(v, param);
  }
}

}  // namespace

std::string choice_regex(const std::vector<std::string>& choices) {
  std::string re = "(?:";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i) re += '|';
    for (unsigned char ch : choices[i]) {
      if (ch < 0x20 || ch == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "\\x%02X", ch);
        re += hex;
      } else if (ch < 0x80 && std::ispunct(ch)) {
        re += '\\';
        re += static_cast<char>(ch);
      } else {
        re += static_cast<char>(ch);
      }
    }
  }
  return re + ")";
}

Constraint parse_structured_output(const Json& r) {
  Constraint c;
  auto take = [&](Constraint next) {
    if (next.kind.empty()) return;
    if (!c.kind.empty()) {
      throw bad_request("give one structured-output constraint, not " + next.param + " as well as " + c.param,
                        next.param);
    }
    c = std::move(next);
  };
  if (const Json* rf = find_field(r, "response_format")) take(from_response_format(*rf));
  for (const auto& [key, what] : {std::pair<const char*, const char*>{"guided_json", "json"},
                                  {"guided_regex", "regex"},
                                  {"guided_grammar", "grammar"},
                                  {"guided_choice", "choice"}}) {
    if (const Json* v = find_field(r, key)) {
      Constraint next;
      read_value(what, *v, key, next);
      take(std::move(next));
    }
  }
  if (const Json* so = find_field(r, "structured_outputs")) {
    if (!so->is_object()) throw bad_request("structured_outputs must be an object", "structured_outputs");
    for (const auto& [key, v] : so->items()) {
      const std::string param = "structured_outputs." + key;
      if (v.is_null()) continue;
      if (key == "json" || key == "regex" || key == "grammar" || key == "choice") {
        Constraint next;
        read_value(key, v, param, next);
        take(std::move(next));
      } else if (key == "json_object") {
        if (!v.is_boolean()) throw bad_request(param + " must be a boolean", param);
        if (v.get<bool>()) take(Constraint{"json_object", "", param, {}});
      } else if (!(v.is_boolean() && !v.get<bool>())) {
        throw ApiError(400, param + " is not supported", "invalid_request_error", param, "unsupported_parameter");
      }
    }
  }
  return c;
}

std::shared_ptr<const grammar::CompiledGrammar> check_constraint(
    const std::string& kind, const std::string& text, const std::string& param,
    const grammar::CompileLimits& limits, const ConstraintCompiler& compile) {
  if (kind.empty()) return nullptr;
  grammar::GrammarSpec spec{kind, text};
  spec.limits = limits;
  try {
    // Malformed, unsupported, empty or over budget -> 400, before any work.
    if (compile) {
      if (auto compiled = compile(kind, text)) return compiled;
    }
    grammar::build_grammar(spec);
    return nullptr;
  } catch (const Error& e) {
    const char* code = e.kind() == ErrorKind::kUnsupported         ? "unsupported"
                       : e.kind() == ErrorKind::kResourceExhausted ? "grammar_too_complex"
                                                                   : "";
    throw ApiError(400, param + ": " + e.what(), "invalid_request_error", param, code);
  }
}

}  // namespace deepinfer::server
