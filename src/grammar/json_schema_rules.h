// JSON Schema sub-grammars inside a grammar that another front end builds (tool_calls.h): the
// rules of one root schema (its $defs / $ref resolve against that root) go into the caller's
// GrammarBuilder, with the policies of json_schema.h.
// Not thread-safe; lives as long as the builder's compilation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/dfa.h"
#include "grammar/grammar.h"
#include "grammar/json_numbers.h"
#include "grammar/json_schema.h"

namespace deepinfer::grammar {

class JsonSchemaRules {
 public:
  // `builder` must outlive this object; `root` is copied. `literals`: the number literals of
  // the text `root` was parsed from (json_numbers.h; must outlive this object), null if unknown.
  JsonSchemaRules(GrammarBuilder& builder, const nlohmann::ordered_json& root,
                  const JsonSchemaOptions& options = {}, const NumberLiterals* literals = nullptr);
  ~JsonSchemaRules();

  // A rule of `builder` matching the JSON text of the instances of `schema` (a subschema of
  // root, or root itself); `path` names it in errors. Throws as json_schema_grammar does.
  int32_t value_rule(const nlohmann::ordered_json& schema, const std::string& path);
  // The JSON-encoded string bodies (no quotes) a string schema allows (minLength, maxLength,
  // pattern, format; `schema` must be a "type": "string" schema).
  std::shared_ptr<const Dfa> string_body(const nlohmann::ordered_json& schema, const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::grammar
