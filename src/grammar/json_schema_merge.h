// Schema algebra for the JSON Schema front end (internal to src/grammar): resolving local $ref,
// merging allOf into one schema, deciding that oneOf branches are disjoint.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::grammar {

class NumberLiterals;

// Internal keyword holding the extra `pattern`s of merged schemas (all must match).
inline constexpr const char* kExtraPatterns = "x-deepinfer-patterns";

bool is_annotation(const std::string& keyword);
// Compact serialisation with integral floats written as integers (the literal policy).
std::string canonical_dump(const nlohmann::ordered_json& v);
// JSON Schema equality (1 == 1.0; object member order ignored).
bool json_equal(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);
// Resolves a local reference ("#", "#/json/pointer"); throws kUnsupported for others.
const nlohmann::ordered_json& resolve_ref(const std::string& ref, const nlohmann::ordered_json& root,
                                          const std::string& path);
// Removes $ref (when it has sibling constraints) and allOf by merging everything into one schema.
// Numeric keywords merge by their exact values (`literals`: those of the schema's text; null:
// none known, see NumberLiterals::exact).
nlohmann::ordered_json flatten_all_of(const nlohmann::ordered_json& s, const nlohmann::ordered_json& root,
                                      const std::string& path, int depth = 0,
                                      const NumberLiterals* literals = nullptr);
// True if no instance can match two of the (flattened) branches.
bool provably_disjoint(const std::vector<nlohmann::ordered_json>& branches,
                       const nlohmann::ordered_json& root);

}  // namespace deepinfer::grammar
