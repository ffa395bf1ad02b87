// Exact JSON numbers for JSON Schema's numeric keywords (minimum, maximum, exclusive*, multipleOf)
// and the digit automata of the integers / numbers those bounds allow.
//
// nlohmann keeps integers up to 2^64 exactly but turns larger ones and every literal with a
// fraction or exponent into a double: 9223372036854775807.5 and 9223372036854775808 become the
// same value. NumberLiterals keeps the literal text of every such number of a schema document, so
// a bound means exactly what the schema wrote. Literals are told apart by their double and the
// member name they stand under (for array elements: the array's member name); two different
// literals under the same name that round to one double are refused where used (kUnsupported).
// Bounds of any magnitude are compared digit by digit; no step goes through a double.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "grammar/expr.h"

namespace deepinfer::grammar {

// Digits kept of one exact value (integer plus fraction part); longer values throw kUnsupported.
inline constexpr size_t kMaxDecimalDigits = 1100;

// An exact decimal value: (-1)^neg * int_digits.frac_digits.
struct Decimal {
  bool neg = false;         // never set for zero
  std::string int_digits;   // no leading zeros; "0" when |x| < 1
  std::string frac_digits;  // no trailing zeros; "" for integers
  bool is_integer() const { return frac_digits.empty(); }
  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
  std::string text() const;  // plain notation, no exponent
};

// A JSON number literal ("-12.5e-3") as an exact Decimal. Throws kInvalidInput when the text is
// not a JSON number, kUnsupported when its value needs more than kMaxDecimalDigits digits.
Decimal parse_decimal(std::string_view json_number);
int compare(const Decimal& a, const Decimal& b);  // -1, 0, 1
Decimal floor_decimal(const Decimal& x);
Decimal ceil_decimal(const Decimal& x);
Decimal add_integer(const Decimal& x, int delta);  // x integer, delta in {-1, +1}

class NumberLiterals {
 public:
  NumberLiterals() = default;
  // Records the literal of every number of `json_text` that nlohmann stores as a double.
  // The text must be valid JSON (parse it first).
  explicit NumberLiterals(std::string_view json_text);
  // The exact value of the number `v`, a value of that document (or a copy of one) standing
  // under member name `key`. A double without a recorded literal is taken as its shortest
  // round-trip spelling. `where` names the keyword in errors.
  Decimal exact(const nlohmann::ordered_json& v, const std::string& key, const std::string& where) const;
  // Compact JSON text of `v` (standing under `key`) with every number written as its exact value
  // (integral values as integers: 1.0 -> 1, 1e20 -> 100000000000000000000); object keys sorted
  // when `sort_keys` (a text for equality: JSON Schema's 1 == 1.0, member order ignored).
  std::string dump(const nlohmann::ordered_json& v, const std::string& key, bool sort_keys) const;

 private:
  // (member name, double bits) -> literal; nullopt when two literals with different values
  // share both.
  std::map<std::pair<std::string, uint64_t>, std::optional<Decimal>> literals_;
};

// Canonical JSON integers ("0", "-12"; never "-0") in [lo, hi]; each bound must be an integer,
// nullopt for no bound.
ExprPtr integer_range_expr(const std::optional<Decimal>& lo, const std::optional<Decimal>& hi);

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};
// JSON numbers without exponent (-?(0|[1-9][0-9]*)(\.[0-9]+)?) whose exact value is within the
// bounds (at least one given).
ExprPtr bounded_number_expr(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi);

}  // namespace deepinfer::grammar
