#include "grammar/json_numbers.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "grammar/budget.h"
#include "grammar/dfa.h"

namespace deepinfer::grammar {

using json = nlohmann::ordered_json;

// ---- Decimal -------------------------------------------------------------------------------

std::string Decimal::text() const {
  std::string s = neg ? "-" : "";
  s += int_digits;
  if (!frac_digits.empty()) s += "." + frac_digits;
  return s;
}

Decimal parse_decimal(std::string_view t) {
  auto bad = [&]() -> Decimal {
    THROW(kInvalidInput) << "'" << std::string(t.substr(0, 64)) << "' is not a JSON number";
  };
  size_t i = 0;
  Decimal d;
  if (i < t.size() && t[i] == '-') { d.neg = true; ++i; }
  auto digits = [&]() {
    size_t b = i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
    return t.substr(b, i - b);
  };
  std::string_view ip = digits();
  if (ip.empty() || (ip.size() > 1 && ip[0] == '0')) return bad();
  std::string_view fp;
  if (i < t.size() && t[i] == '.') {
    ++i;
    fp = digits();
    if (fp.empty()) return bad();
  }
  int64_t exp = 0;
  bool exp_huge = false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) eneg = t[i++] == '-';
    std::string_view ed = digits();
    if (ed.empty()) return bad();
    size_t nz = ed.find_first_not_of('0');
    ed = nz == std::string_view::npos ? std::string_view{} : ed.substr(nz);
    if (ed.size() > 9) exp_huge = true;
    else for (char c : ed) exp = exp * 10 + (c - '0');
    if (eneg) exp = -exp;
  }
  if (i != t.size()) return bad();
  // All digits D with the decimal point after `point` of them.
  std::string all = std::string(ip) + std::string(fp);
  size_t lead = all.find_first_not_of('0');
  if (lead == std::string::npos) return Decimal{false, "0", ""};  // zero, whatever the exponent
  CHECK_KIND(kUnsupported, !exp_huge)
      << "the number '" << std::string(t.substr(0, 64)) << "' needs more than " << kMaxDecimalDigits << " digits";
  int64_t point = static_cast<int64_t>(ip.size()) + exp - static_cast<int64_t>(lead);
  all.erase(0, lead);
  all.erase(all.find_last_not_of('0') + 1);
  const int64_t n = static_cast<int64_t>(all.size());
  const int64_t total = std::max<int64_t>(point, n) - std::min<int64_t>(point, 0);
  CHECK_KIND(kUnsupported, total <= static_cast<int64_t>(kMaxDecimalDigits))
      << "the number '" << std::string(t.substr(0, 64)) << "' needs more than " << kMaxDecimalDigits << " digits";
  if (point <= 0) {
    d.int_digits = "0";
    d.frac_digits = std::string(static_cast<size_t>(-point), '0') + all;
  } else if (point >= n) {
    d.int_digits = all + std::string(static_cast<size_t>(point - n), '0');
  } else {
    d.int_digits = all.substr(0, static_cast<size_t>(point));
    d.frac_digits = all.substr(static_cast<size_t>(point));
  }
  return d;
}

namespace {

// Magnitudes |a| vs |b|.
int compare_abs(const Decimal& a, const Decimal& b) {
  if (a.int_digits.size() != b.int_digits.size()) return a.int_digits.size() < b.int_digits.size() ? -1 : 1;
  if (int c = a.int_digits.compare(b.int_digits)) return c < 0 ? -1 : 1;
  int c = a.frac_digits.compare(b.frac_digits);  // no trailing zeros: lexicographic is numeric
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

// Non-negative digit strings without leading zeros, plus or minus one.
std::string increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') { ++s[i]; return s; }
    s[i] = '0';
  }
  return "1" + s;
}
std::string decrement(std::string s) {  // s >= 1
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') { --s[i]; break; }
    s[i] = '9';
  }
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

}  // namespace

int compare(const Decimal& a, const Decimal& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  int c = compare_abs(a, b);
  return a.neg ? -c : c;
}

Decimal add_integer(const Decimal& x, int delta) {
  ICHECK(x.is_integer() && (delta == 1 || delta == -1));
  Decimal r = x;
  const bool away = (delta > 0) != x.neg;  // magnitude grows
  if (x.is_zero()) return Decimal{delta < 0, "1", ""};
  r.int_digits = away ? increment(x.int_digits) : decrement(x.int_digits);
  if (r.int_digits == "0") r.neg = false;
  return r;
}

Decimal floor_decimal(const Decimal& x) {
  if (x.is_integer()) return x;
  Decimal r{x.neg, x.int_digits, ""};
  return x.neg ? add_integer(Decimal{true, x.int_digits, ""}, -1) : (r.int_digits == "0" ? Decimal{false, "0", ""} : r);
}

Decimal ceil_decimal(const Decimal& x) {
  if (x.is_integer()) return x;
  if (!x.neg) return add_integer(Decimal{false, x.int_digits, ""}, 1);
  return x.int_digits == "0" ? Decimal{false, "0", ""} : Decimal{true, x.int_digits, ""};
}

// ---- NumberLiterals ------------------------------------------------------------------------

namespace {

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Sees every number of a document; keeps the literals of those nlohmann stores as doubles, under
// the member name they stand under (`names`: one entry per open container).
struct LiteralScanner : nlohmann::json_sax<json> {
  std::map<std::pair<std::string, uint64_t>, std::optional<Decimal>>* out;
  std::vector<std::string> names{""};
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t v, const string_t& literal) override {
    Decimal d = parse_decimal(literal);
    auto [it, fresh] = out->emplace(std::make_pair(names.back(), bits_of(v)), d);
    if (!fresh && it->second && compare(*it->second, d) != 0) it->second.reset();
    return true;
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { names.push_back(""); return true; }
  bool key(string_t& k) override { names.back() = k; return true; }
  bool end_object() override { names.pop_back(); return true; }
  bool start_array(std::size_t) override { names.push_back(names.back()); return true; }
  bool end_array() override { names.pop_back(); return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    THROW(kInvalidInput) << "JSON Schema is not valid JSON: " << e.what();
  }
};

}  // namespace

NumberLiterals::NumberLiterals(std::string_view json_text) {
  LiteralScanner scan;
  scan.out = &literals_;
  json::sax_parse(json_text, &scan);
}

Decimal NumberLiterals::exact(const json& v, const std::string& key, const std::string& where) const {
  if (v.is_number_unsigned()) return parse_decimal(std::to_string(v.get<uint64_t>()));
  if (v.is_number_integer()) return parse_decimal(std::to_string(v.get<int64_t>()));
  CHECK(v.is_number()) << where << " must be a number";
  const double d = v.get<double>();
  auto it = literals_.find({key, bits_of(d)});
  if (it != literals_.end()) {
    CHECK_KIND(kUnsupported, it->second.has_value())
        << where << ": the number " << v.dump() << " stands for two different literals under '" << key
        << "' (they round to one double); not supported";
    return *it->second;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d);
  return parse_decimal(std::string_view(buf, static_cast<size_t>(res.ptr - buf)));
}

std::string NumberLiterals::dump(const json& v, const std::string& key, bool sort_keys) const {
  if (v.is_number()) return exact(v, key, "a number under '" + key + "'").text();
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + dump(v[i], key, sort_keys);
    return out + "]";
  }
  if (v.is_object()) {
    std::vector<std::pair<std::string, std::string>> members;
    for (auto it = v.begin(); it != v.end(); ++it)
      members.emplace_back(json(it.key()).dump(), dump(it.value(), it.key(), sort_keys));
    if (sort_keys) std::sort(members.begin(), members.end());
    std::string out = "{";
    for (size_t i = 0; i < members.size(); ++i) out += (i ? "," : "") + members[i].first + ":" + members[i].second;
    return out + "}";
  }
  return v.dump();
}

// ---- digit automata ------------------------------------------------------------------------

namespace {

// Canonical non-negative integers m with lo <= m <= hi (digit strings; hi nullopt: unbounded),
// built directly: a state is (digits read, prefix vs lo's prefix, prefix vs hi's prefix), so its
// size is linear in the bounds' lengths (a regex expansion is quadratic).
Dfa nonneg_range_dfa(const std::string& lo_in, const std::optional<std::string>& hi) {
  const std::string lo = lo_in == "0" ? "1" : lo_in;  // the positive part; "0" is its own path
  const bool zero = lo_in == "0";
  const int64_t Llo = static_cast<int64_t>(lo.size());
  const int64_t Lhi = hi ? static_cast<int64_t>(hi->size()) : -1;
  if (hi && (Lhi < static_cast<int64_t>(lo_in.size()) ||
             (Lhi == static_cast<int64_t>(lo_in.size()) && *hi < lo_in)))
    return Dfa{};
  constexpr int8_t kLess = 0, kEqual = 1, kGreater = 2;
  using Key = std::tuple<int64_t, int8_t, int8_t>;  // (digits read, vs lo, vs hi)
  std::map<Key, int32_t> ids;
  std::vector<Key> keys;
  Dfa d;
  auto state = [&](Key k) {
    auto [it, fresh] = ids.emplace(k, static_cast<int32_t>(keys.size()));
    if (fresh) {
      budget_states(1);
      keys.push_back(k);
      d.next.resize(keys.size() * 256, kDead);
      d.accept.push_back(0);
    }
    return it->second;
  };
  auto cmp = [](char a, char b) -> int8_t { return a < b ? kLess : (a == b ? kEqual : kGreater); };
  const int32_t start = state({0, kEqual, kEqual});
  if (zero) {
    const int32_t z = state({-1, kEqual, kEqual});  // after a lone "0"
    d.accept[z] = 1;
    d.at(start, '0') = z;
  }
  for (size_t q = 0; q < keys.size(); ++q) {
    auto [i, cl, ch] = keys[q];
    if (i < 0) continue;
    const bool lo_ok = i > Llo || (i == Llo && cl != kLess);
    const bool hi_ok = !hi || i < Lhi || (i == Lhi && ch != kGreater);
    d.accept[q] = i > 0 && lo_ok && hi_ok;
    if (hi && i >= Lhi) continue;
    for (char c = i == 0 ? '1' : '0'; c <= '9'; ++c) {
      const int64_t j = i + 1;
      // Past lo's length the number is longer, hence larger; without hi, lengths beyond
      // Llo + 1 need no count (one looping state).
      int8_t cl2 = j > Llo ? kGreater : (cl != kEqual ? cl : cmp(c, lo[i]));
      int8_t ch2 = !hi ? kEqual : (ch != kEqual ? ch : cmp(c, (*hi)[i]));
      const int64_t j2 = !hi && j > Llo + 1 ? Llo + 1 : j;
      const int32_t t = state({j2, cl2, ch2});
      d.at(static_cast<int32_t>(q), static_cast<uint8_t>(c)) = t;
    }
  }
  d.start = start;
  return trim_dfa(d);
}

ExprPtr nonneg_range(const std::string& lo, const std::optional<std::string>& hi) {
  return automaton(std::make_shared<const Dfa>(nonneg_range_dfa(lo, hi)));
}

}  // namespace

ExprPtr integer_range_expr(const std::optional<Decimal>& lo, const std::optional<Decimal>& hi) {
  ICHECK((!lo || lo->is_integer()) && (!hi || hi->is_integer()));
  if (lo && hi && compare(*lo, *hi) > 0) return nothing();
  std::vector<ExprPtr> alts;
  if (!hi || !hi->neg) {
    std::string a = (!lo || lo->neg) ? "0" : lo->int_digits;
    std::optional<std::string> b;
    if (hi) b = hi->int_digits;
    alts.push_back(nonneg_range(a, b));
  }
  if (!lo || lo->neg) {  // -m with m in [max(1, -hi), -lo]
    std::string a = (hi && hi->neg) ? hi->int_digits : "1";
    std::optional<std::string> b;
    if (lo) b = lo->int_digits;
    alts.push_back(seq({chr('-'), nonneg_range(a, b)}));
  }
  return alt(std::move(alts));
}

namespace {

bool all_zeros(const std::string& s) { return s.find_first_not_of('0') == std::string::npos; }
ExprPtr any_digits() { return star(cls({{'0', '9'}})); }
ExprPtr some_nonzero() { return seq({any_digits(), cls({{'1', '9'}}), any_digits()}); }

// Fraction digit strings f ("" = 0) compared with the fraction s: f > s (greater) or f < s,
// or-equal unless strict.
ExprPtr frac_cmp(const std::string& s, size_t at, bool greater, bool strict) {
  const std::string rest = s.substr(at);
  if (greater) {
    if (all_zeros(rest)) return strict ? some_nonzero() : any_digits();
    std::vector<ExprPtr> alts;
    const char c = s[at];
    if (c < '9') alts.push_back(seq({cls({{static_cast<uint32_t>(c + 1), '9'}}), any_digits()}));
    alts.push_back(seq({chr(static_cast<uint32_t>(c)), frac_cmp(s, at + 1, greater, strict)}));
    return alt(std::move(alts));
  }
  if (rest.empty()) return strict ? nothing() : star(chr('0'));
  if (strict && all_zeros(rest)) return nothing();
  std::vector<ExprPtr> alts;
  alts.push_back(epsilon());  // f ends here: smaller, as rest has a nonzero digit
  const char c = s[at];
  if (c > '0') alts.push_back(seq({cls({{'0', static_cast<uint32_t>(c - 1)}}), any_digits()}));
  alts.push_back(seq({chr(static_cast<uint32_t>(c)), frac_cmp(s, at + 1, greater, strict)}));
  return alt(std::move(alts));
}

// "[.f]" after an integer part equal to the bound's, with f compared to the bound's fraction.
ExprPtr frac_part(const std::string& fp, bool greater, bool strict) {
  const bool empty_ok = greater ? (!strict && all_zeros(fp)) : (!strict || !all_zeros(fp));
  ExprPtr dotted = seq({chr('.'), frac_cmp(fp, 0, greater, strict)});
  return empty_ok ? alt({epsilon(), dotted}) : dotted;
}

// Numbers x >= b (lower) or x <= b (upper), strictly for exclusive bounds. A superset of the
// exact set only in spellings the base syntax removes ("1." etc.).
ExprPtr bound_expr(const Decimal& b, bool strict, bool lower) {
  const std::string& ip = b.int_digits;
  const std::string& fp = b.frac_digits;
  ExprPtr frac_any = opt(seq({chr('.'), plus(cls({{'0', '9'}}))}));
  ExprPtr nonneg = seq({nonneg_range("0", std::nullopt), frac_any});
  // Magnitudes m.f compared with |b|: bigger (> |b|) or smaller (< |b|), or-equal unless strict.
  auto magnitudes = [&](bool bigger) {
    std::vector<ExprPtr> alts;
    if (bigger) alts.push_back(seq({nonneg_range(increment(ip), std::nullopt), frac_any}));
    else if (ip != "0") alts.push_back(seq({nonneg_range("0", decrement(ip)), frac_any}));
    alts.push_back(seq({lit(ip), frac_part(fp, bigger, strict)}));
    return alt(std::move(alts));
  };
  if (lower && !b.neg) return magnitudes(true);
  if (lower && b.neg) return alt({nonneg, seq({chr('-'), magnitudes(false)})});
  ExprPtr negative = seq({chr('-'), alt({seq({nonneg_range("1", std::nullopt), frac_any}),
                                          seq({lit("0."), some_nonzero()})})});
  if (!lower && !b.neg) return alt({negative, magnitudes(false)});
  return seq({chr('-'), magnitudes(true)});
}

}  // namespace

ExprPtr bounded_number_expr(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi) {
  ICHECK(lo || hi);
  ExprPtr digits = plus(cls({{'0', '9'}}));
  ExprPtr int_part = alt({chr('0'), seq({cls({{'1', '9'}}), star(cls({{'0', '9'}}))})});
  ExprPtr base = seq({opt(chr('-')), int_part, opt(seq({chr('.'), digits}))});
  Dfa d = build_dfa(*base, "number bounds");
  if (lo) d = intersect_dfa(d, build_dfa(*bound_expr(lo->value, lo->exclusive, true), "number bounds"), "number bounds");
  if (hi) d = intersect_dfa(d, build_dfa(*bound_expr(hi->value, hi->exclusive, false), "number bounds"), "number bounds");
  return automaton(std::make_shared<const Dfa>(std::move(d)));
}

}  // namespace deepinfer::grammar
