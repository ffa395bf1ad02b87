// JSON Schema -> Grammar. Each distinct (sub)schema becomes one rule, memoised by its canonical
// text, so $ref recursion closes naturally and equal subschemas share rules (and mask caches).
#include "grammar/json_schema.h"
#include "grammar/json_schema_rules.h"

#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "grammar/json_numbers.h"
#include "grammar/json_schema_merge.h"
#include "grammar/json_strings.h"
#include "grammar/parse_stack.h"
#include "grammar/regex_parser.h"

namespace deepinfer::grammar {

using json = nlohmann::ordered_json;

namespace {

const std::set<std::string>& unsupported_keywords() {
  static const std::set<std::string> k = {
      "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
      "contains", "minContains", "maxContains", "propertyNames", "unevaluatedItems",
      "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
      "divisibleBy", "disallow", "extends"};
  return k;
}

constexpr int64_t kMaxCountedLength = 512;

// Canonical JSON integers ("-"? "0" | [1-9][0-9]*, and "-0") divisible by k: states track the
// remainder of the digits read so far.
Dfa multiple_of_dfa(int64_t k) {
  const int32_t n = static_cast<int32_t>(3 + k);  // 0 start, 1 after '-', 2 after a leading 0, 3 + r
  Dfa d;
  d.next.assign(static_cast<size_t>(n) * 256, kDead);
  d.accept.assign(n, 0);
  d.accept[2] = 1;
  d.accept[3] = 1;
  d.at(0, '-') = 1;
  for (int32_t from : {0, 1}) {
    d.at(from, '0') = 2;
    for (int c = 1; c <= 9; ++c) d.at(from, static_cast<uint8_t>('0' + c)) = static_cast<int32_t>(3 + c % k);
  }
  for (int64_t r = 0; r < k; ++r)
    for (int c = 0; c <= 9; ++c) d.at(static_cast<int32_t>(3 + r), static_cast<uint8_t>('0' + c)) = static_cast<int32_t>(3 + (10 * r + c) % k);
  return trim_dfa(d);
}

class JsonSchemaCompiler {
 public:
  // `shared`: rules go into that builder (JsonSchemaRules), else into one of our own.
  // `literals`: the number literals of the schema's text (json_numbers.h); null: none known.
  JsonSchemaCompiler(const json& root, const JsonSchemaOptions& options, GrammarBuilder* shared = nullptr,
                     const NumberLiterals* literals = nullptr)
      : root_(root), options_(options), own_("JSON Schema"), b_(shared ? *shared : own_),
        literals_(literals ? literals : &no_literals()) {}

  Grammar compile() {
    if (root_.is_object() && root_.contains("$schema")) {
      static const std::set<std::string> known = {
          "http://json-schema.org/draft-04/schema", "http://json-schema.org/draft-06/schema",
          "http://json-schema.org/draft-07/schema", "http://json-schema.org/schema",
          "https://json-schema.org/draft/2019-09/schema", "https://json-schema.org/draft/2020-12/schema"};
      std::string u = root_["$schema"].is_string() ? root_["$schema"].get<std::string>() : "";
      if (!u.empty() && u.back() == '#') u.pop_back();
      if (u.rfind("https://json-schema.org/draft-0", 0) == 0) u.replace(0, 5, "http");
      if (!known.count(u)) unsupported("#", "meta-schema '" + u + "' (only the official drafts)");
    }
    int32_t r = rule_for(root_, "#");
    return b_.build(r);
  }

  Grammar compile_any() { return b_.build(any_rule()); }

 private:
  const json& root_;
  JsonSchemaOptions options_;
  GrammarBuilder own_;
  GrammarBuilder& b_;
  const NumberLiterals* literals_;
  std::map<std::string, int32_t> memo_;
  std::map<std::string, std::shared_ptr<const Dfa>> string_bodies_;
  int32_t any_rule_ = -1;

  static const NumberLiterals& no_literals() {
    static const NumberLiterals k;
    return k;
  }

  [[noreturn]] void unsupported(const std::string& path, const std::string& what) {
    THROW(kUnsupported) << "JSON Schema at '" << path << "': " << what << " is not supported";
  }

  ExprPtr ws() {
    return options_.max_whitespace > 0
               ? repeat(cls({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}}), 0, options_.max_whitespace)
               : epsilon();
  }
  ExprPtr tok(const char* s) { return seq({ws(), lit(s), ws()}); }

  int32_t rule_for(const json& s, const std::string& path) {
    // Keyed by the schema without its pure annotations (a property's description does not make
    // its value a different rule: equal subschemas share rules, automata and mask caches).
    std::string key;
    if (s.is_object()) {
      json k = s;
      for (const char* a : {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"})
        k.erase(a);
      key = k.dump();
    } else {
      key = s.dump();
    }
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    int32_t r = b_.declare(path);
    memo_[key] = r;
    b_.define(r, expr_for(s, path));
    return r;
  }

  // ---- any JSON value -------------------------------------------------------------------
  int32_t any_rule() {
    if (any_rule_ >= 0) return any_rule_;
    any_rule_ = b_.declare("any");
    int32_t obj = b_.declare("any_object"), arr = b_.declare("any_array");
    ExprPtr str = string_literal_expr(star(json_char()));
    ExprPtr kv = seq({str, tok(":"), ref(any_rule_)});
    b_.define(obj, seq({lit("{"), ws(), opt(seq({kv, star(seq({tok(","), kv}))})), ws(), lit("}")}));
    b_.define(arr, seq({lit("["), ws(), opt(seq({ref(any_rule_), star(seq({tok(","), ref(any_rule_)}))})), ws(), lit("]")}));
    b_.define(any_rule_, alt({lit("null"), lit("true"), lit("false"), number_expr(),
                              str, ref(obj), ref(arr)}));
    return any_rule_;
  }

  ExprPtr string_literal_expr(ExprPtr body) { return seq({lit("\""), body, lit("\"")}); }

  ExprPtr number_expr() {
    ExprPtr digits = plus(cls({{'0', '9'}}));
    ExprPtr int_part = alt({chr('0'), seq({cls({{'1', '9'}}), star(cls({{'0', '9'}}))})});
    return seq({opt(chr('-')), int_part, opt(seq({chr('.'), digits})),
                opt(seq({cls({{'e', 'e'}, {'E', 'E'}}), opt(cls({{'+', '+'}, {'-', '-'}})), digits}))});
  }

  // ---- dispatch --------------------------------------------------------------------------
  ExprPtr expr_for(const json& s, const std::string& path) {
    if (s.is_boolean()) return s.get<bool>() ? ref(any_rule()) : nothing();
    CHECK(s.is_object()) << "JSON Schema at '" << path << "': a schema must be an object or a boolean";
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (unsupported_keywords().count(it.key())) unsupported(path, "keyword '" + it.key() + "'");
      if (it.key() == "uniqueItems" && it.value() == true) unsupported(path, "keyword 'uniqueItems'");
      if (it.key() == "unevaluatedProperties" && (s.contains("allOf") || s.contains("anyOf") ||
                                                  s.contains("oneOf") || s.contains("$ref")))
        unsupported(path, "'unevaluatedProperties' next to composition keywords");
    }
    if (s.contains("$ref")) {
      bool pure = true;
      for (auto it = s.begin(); it != s.end(); ++it)
        if (it.key() != "$ref" && !is_annotation(it.key())) pure = false;
      if (pure) {
        CHECK(s["$ref"].is_string()) << "JSON Schema at '" << path << "': $ref must be a string";
        const std::string r = s["$ref"].get<std::string>();
        return ref(rule_for(resolve_ref(r, root_, path), r));
      }
    }
    if (s.contains("$ref") || s.contains("allOf")) {
      json merged = flatten_all_of(s, root_, path, 0, literals_);
      return expr_for(merged, path);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) {
      CHECK_KIND(kUnsupported, !(s.contains("anyOf") && s.contains("oneOf")))
          << "JSON Schema at '" << path << "': anyOf together with oneOf is not supported";
      const bool one = s.contains("oneOf");
      const json& branches = s[one ? "oneOf" : "anyOf"];
      CHECK(branches.is_array() && !branches.empty())
          << "JSON Schema at '" << path << "': anyOf/oneOf must be a non-empty array";
      json siblings = s;
      siblings.erase(one ? "oneOf" : "anyOf");
      std::vector<json> merged;
      for (size_t i = 0; i < branches.size(); ++i) {
        json m = json::object();
        m["allOf"] = json::array({siblings, branches[i]});
        merged.push_back(flatten_all_of(m, root_, path + (one ? "/oneOf/" : "/anyOf/") + std::to_string(i), 0, literals_));
      }
      if (one && !provably_disjoint(merged, root_))
        unsupported(path, "'oneOf' whose branches are not provably disjoint");
      std::vector<ExprPtr> alts;
      for (size_t i = 0; i < merged.size(); ++i)
        alts.push_back(ref(rule_for(merged[i], path + (one ? "/oneOf/" : "/anyOf/") + std::to_string(i))));
      return alt(std::move(alts));
    }
    if (s.contains("const") || s.contains("enum")) return literal_expr(s, path);
    std::vector<std::string> types = schema_types(s, path);
    std::vector<ExprPtr> alts;
    for (const auto& t : types) alts.push_back(type_expr(s, t, path));
    return alt(std::move(alts));
  }

  std::vector<std::string> schema_types(const json& s, const std::string& path) {
    std::vector<std::string> all = {"null", "boolean", "object", "array", "number", "string"};
    if (!s.contains("type")) return all;
    std::vector<std::string> out;
    auto add = [&](const json& t) {
      CHECK(t.is_string()) << "JSON Schema at '" << path << "': 'type' entries must be strings";
      std::string n = t.get<std::string>();
      CHECK(n == "null" || n == "boolean" || n == "object" || n == "array" || n == "number" ||
            n == "string" || n == "integer")
          << "JSON Schema at '" << path << "': unknown type '" << n << "'";
      out.push_back(n);
    };
    if (s["type"].is_array()) for (const auto& t : s["type"]) add(t);
    else add(s["type"]);
    bool has_number = std::find(out.begin(), out.end(), "number") != out.end();
    if (has_number) out.erase(std::remove(out.begin(), out.end(), "integer"), out.end());
    return out;
  }

  // ---- enum / const ------------------------------------------------------------------------
  ExprPtr literal_expr(const json& s, const std::string& path) {
    std::vector<json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      CHECK(s["enum"].is_array()) << "JSON Schema at '" << path << "': 'enum' must be an array";
      std::vector<json> e(s["enum"].begin(), s["enum"].end());
      if (s.contains("const")) {
        bool found = false;
        for (const auto& v : e) found = found || literals_->dump(v, "enum", true) == literals_->dump(values[0], "const", true);
        if (!found) values.clear();
      } else {
        values = e;
      }
    }
    json siblings = s;
    siblings.erase("const");
    siblings.erase("enum");
    bool constrained = false;
    for (auto it = siblings.begin(); it != siblings.end(); ++it)
      if (!is_annotation(it.key())) constrained = true;
    std::optional<Grammar> check;
    if (constrained) {
      JsonSchemaCompiler sub(root_, JsonSchemaOptions{}, nullptr, literals_);
      sub.memo_.clear();
      check = sub.compile_subschema(siblings, path);
    }
    std::vector<ExprPtr> alts;
    std::set<std::string> seen;
    for (const auto& v : values) {
      std::string text = literals_->dump(v, s.contains("const") ? "const" : "enum", false);
      if (check && !grammar_matches(*check, text)) continue;
      if (!seen.insert(text).second) continue;
      alts.push_back(lit(text));
    }
    return alt(std::move(alts));
  }

 public:
  Grammar compile_subschema(const json& s, const std::string& path) { return b_.build(rule_for(s, path)); }

 private:
  // ---- per type --------------------------------------------------------------------------
  ExprPtr type_expr(const json& s, const std::string& t, const std::string& path) {
    if (t == "null") return lit("null");
    if (t == "boolean") return alt({lit("true"), lit("false")});
    if (t == "string") return string_expr(s, path);
    if (t == "integer" || t == "number") return numeric_expr(s, t == "integer", path);
    if (t == "array") return array_expr(s, path);
    if (t == "object") return object_expr(s, path);
    THROW(kInternal) << "type " << t;
  }

  // Bounds and multipleOf are exact decimals (json_numbers.h): no bound is dropped or rounded.
  ExprPtr numeric_expr(const json& s, bool integer, const std::string& path) {
    std::optional<NumberBound> lo, hi;
    auto num = [&](const char* k) -> std::optional<Decimal> {
      if (!s.contains(k)) return std::nullopt;
      const bool legacy = std::string_view(k).rfind("exclusive", 0) == 0 && s[k].is_boolean();
      if (legacy) return std::nullopt;  // draft-04 exclusiveMinimum/Maximum: true/false
      CHECK(s[k].is_number()) << "JSON Schema at '" << path << "': '" << k << "' must be a number";
      return literals_->exact(s[k], k, "JSON Schema at '" + path + "': '" + k + "'");
    };
    auto tighten = [&](std::optional<NumberBound>& b, std::optional<Decimal> v, bool excl, int sign) {
      if (!v) return;
      const int c = b ? compare(*v, b->value) * sign : 1;
      if (c > 0 || (c == 0 && excl)) b = NumberBound{*v, excl};
    };
    auto legacy = [&](const char* k) { return s.contains(k) && s[k].is_boolean() && s[k].get<bool>(); };
    tighten(lo, num("minimum"), legacy("exclusiveMinimum"), 1);
    tighten(lo, num("exclusiveMinimum"), true, 1);
    tighten(hi, num("maximum"), legacy("exclusiveMaximum"), -1);
    tighten(hi, num("exclusiveMaximum"), true, -1);
    if ((legacy("exclusiveMinimum") && !s.contains("minimum")) || (legacy("exclusiveMaximum") && !s.contains("maximum")))
      THROW(kInvalidInput) << "JSON Schema at '" << path << "': boolean 'exclusiveMinimum'/'exclusiveMaximum' without its bound";
    // multipleOf: integer divisors only, matched by a remainder automaton over integer
    // spellings (for "number" this narrows multiples to integer syntax, e.g. 4 but not 4.0).
    int64_t divisor = 0;
    if (s.contains("multipleOf")) {
      CHECK(s["multipleOf"].is_number()) << "JSON Schema at '" << path << "': 'multipleOf' must be a positive number";
      const Decimal m = literals_->exact(s["multipleOf"], "multipleOf", "JSON Schema at '" + path + "': 'multipleOf'");
      CHECK(!m.neg && !m.is_zero()) << "JSON Schema at '" << path << "': 'multipleOf' must be a positive number";
      if (!m.is_integer() || m.int_digits.size() > 5 || std::stoll(m.int_digits) > 10000)
        unsupported(path, "'multipleOf' " + m.text() + " (only integers up to 10000)");
      divisor = std::stoll(m.int_digits);
    }
    if (!integer && divisor == 0) return (lo || hi) ? bounded_number_expr(lo, hi) : number_expr();
    std::optional<Decimal> ilo, ihi;  // integers n: lo <= n <= hi
    if (lo) ilo = lo->exclusive ? add_integer(floor_decimal(lo->value), 1) : ceil_decimal(lo->value);
    if (hi) ihi = hi->exclusive ? add_integer(ceil_decimal(hi->value), -1) : floor_decimal(hi->value);
    ExprPtr range = integer_range_expr(ilo, ihi);
    if (divisor <= 1) return range;
    Dfa d = intersect_dfa(build_dfa(*range, "integer range"), multiple_of_dfa(divisor), "multipleOf at '" + path + "'");
    return automaton(std::make_shared<const Dfa>(std::move(d)));
  }

  // A count keyword (minLength, maxItems, ...): a non-negative integer, exactly (3.0 is 3; 2.5 is
  // refused, not rounded either way); values past 2^62 saturate there (every limit is far below).
  std::optional<int64_t> count(const json& s, const char* k, const std::string& path) {
    if (!s.contains(k)) return std::nullopt;
    const std::string where = "JSON Schema at '" + path + "': '" + k + "'";
    CHECK(s[k].is_number()) << where << " must be a non-negative integer";
    const Decimal d = literals_->exact(s[k], k, where);
    CHECK(!d.neg && d.is_integer()) << where << " must be a non-negative integer, not " << d.text();
    if (d.int_digits.size() > 18) return int64_t{1} << 62;
    return std::min<int64_t>(std::stoll(d.int_digits), int64_t{1} << 62);
  }

  // The JSON-encoded string bodies matching `pattern` under search semantics. A starts / contains
  // group is its shortest matches (of R, or of .*R) followed by any body, so no state after a
  // first match is ever built.
  static Dfa pattern_body_dfa(const std::string& pattern, const std::string& path) {
    const SearchParts parts = parse_search_regex(pattern, RegexFlavor::kNarrow);
    const std::string what = "pattern at '" + path + "'";
    static const auto any_body = std::make_shared<const Dfa>(build_dfa(*star(json_char()), "JSON string body"));
    const ExprPtr any = star(cls({{0, kMaxCodePoint}}));
    auto dfa = [](Dfa d) { return automaton(std::make_shared<const Dfa>(std::move(d))); };
    std::vector<ExprPtr> alts;
    if (parts.full) alts.push_back(dfa(build_dfa(*json_encode(parts.full), what)));
    if (parts.starts) alts.push_back(seq({dfa(build_shortest_match_dfa(*json_encode(parts.starts), what)), automaton(any_body)}));
    if (parts.ends) alts.push_back(dfa(build_dfa(*json_encode(seq({any, parts.ends})), what)));
    if (parts.contains)
      alts.push_back(seq({dfa(build_shortest_match_dfa(*json_encode(seq({any, parts.contains})), what)), automaton(any_body)}));
    return build_dfa(*alt(std::move(alts)), what);
  }

  // The JSON-encoded body language of a string schema as an automaton, one per distinct set of
  // string keywords (a 513-count length automaton is built once, however many properties use it).
  std::shared_ptr<const Dfa> string_body_dfa(const json& s, const std::string& path) {
    json keywords = json::object();
    for (const char* k : {"minLength", "maxLength", "pattern", "format", kExtraPatterns})
      if (s.contains(k)) keywords[k] = s[k];
    // Only exact integer counts are keyed by their dump (3.0000000000000001 dumps like 3.0).
    for (const char* k : {"minLength", "maxLength"})
      if (keywords.contains(k) && !keywords[k].is_number_integer()) return build_string_body_dfa(s, path);
    std::shared_ptr<const Dfa>& memo = string_bodies_[keywords.dump()];
    if (!memo) memo = build_string_body_dfa(s, path);
    return memo;
  }

  std::shared_ptr<const Dfa> build_string_body_dfa(const json& s, const std::string& path) {
    auto min_len = count(s, "minLength", path);
    auto max_len = count(s, "maxLength", path);
    // Length counters cost states: bounds above kMaxCountedLength are narrowed to it (json_schema.h).
    CHECK_KIND(kUnsupported, !min_len || *min_len <= kMaxCountedLength)
        << "JSON Schema at '" << path << "': minLength above " << kMaxCountedLength << " is not supported";
    if (max_len && *max_len > kMaxCountedLength) max_len = kMaxCountedLength;
    std::vector<ExprPtr> constraints;
    static const Dfa unit = build_dfa(*json_char(), "JSON string character");
    constraints.push_back(automaton(std::make_shared<const Dfa>(repeat_prefix_free_dfa(
        unit, static_cast<int32_t>(min_len.value_or(0)), max_len ? static_cast<int32_t>(*max_len) : kUnbounded,
        "string length at '" + path + "'"))));
    std::vector<std::string> patterns;
    if (s.contains("pattern")) patterns.push_back(s["pattern"].get<std::string>());
    if (s.contains(kExtraPatterns))
      for (const auto& p : s[kExtraPatterns]) patterns.push_back(p.get<std::string>());
    for (const auto& p : patterns) {
      try {
        constraints.push_back(automaton(std::make_shared<const Dfa>(pattern_body_dfa(p, path))));
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kResourceExhausted) throw;  // a budget stays a budget refusal
        THROW(kUnsupported) << "JSON Schema at '" << path << "': pattern: " << e.what();
      }
    }
    if (s.contains("format") && s["format"].is_string()) {
      std::string f = s["format"].get<std::string>();
      ExprPtr fe = format_expr(f);
      // Formats no specification or validator defines are annotations: ignoring them is exact.
      static const std::set<std::string> defined = {
          "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
          "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
          "json-pointer", "relative-json-pointer", "regex", "color", "host-name", "ip-address"};
      if (!fe && defined.count(f)) unsupported(path, "format '" + f + "'");
      if (fe) constraints.push_back(fe);
    }
    std::shared_ptr<const Dfa> acc;
    for (const auto& c : constraints) {
      Dfa d = c->kind == ExprKind::kAutomaton ? *c->dfa : build_dfa(*json_encode(c), "string constraints at '" + path + "'");
      acc = acc ? std::make_shared<const Dfa>(intersect_dfa(*acc, d, "string constraints at '" + path + "'"))
                : std::make_shared<const Dfa>(std::move(d));
    }
    return acc;
  }

  ExprPtr string_expr(const json& s, const std::string& path) {
    return string_literal_expr(automaton(string_body_dfa(s, path)));
  }

  ExprPtr array_expr(const json& s, const std::string& path) {
    std::vector<json> prefix;
    json items = true;
    if (s.contains("prefixItems")) {
      CHECK(s["prefixItems"].is_array()) << "JSON Schema at '" << path << "': 'prefixItems' must be an array";
      prefix.assign(s["prefixItems"].begin(), s["prefixItems"].end());
      if (s.contains("items")) items = s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {  // draft-04..2019 tuple form
      prefix.assign(s["items"].begin(), s["items"].end());
      if (s.contains("additionalItems")) items = s["additionalItems"];
    } else if (s.contains("items")) {
      items = s["items"];
    }
    int64_t m = count(s, "minItems", path).value_or(0);
    std::optional<int64_t> M = count(s, "maxItems", path);
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (items == false) M = M ? std::min<int64_t>(*M, k) : k;
    CHECK_KIND(kUnsupported, m <= 2000 && (!M || *M <= 2000 || *M >= (int64_t)1 << 31))
        << "JSON Schema at '" << path << "': minItems/maxItems above 2000 are not supported";
    if (M && *M > 2000) M.reset();
    if (M && *M < m) return nothing();
    auto elem = [&](int64_t i) -> ExprPtr {
      if (i < k) return ref(rule_for(prefix[i], path + "/prefixItems/" + std::to_string(i)));
      return ref(rule_for(items, path + "/items"));
    };
    // tail(i): the elements from index i on, each preceded by ','.
    std::function<ExprPtr(int64_t)> tail = [&](int64_t i) -> ExprPtr {
      if (M && i >= *M) return epsilon();
      if (i >= k) {
        int32_t lo = static_cast<int32_t>(std::max<int64_t>(0, m - i));
        int32_t hi = M ? static_cast<int32_t>(*M - i) : kUnbounded;
        return repeat(seq({tok(","), elem(i)}), lo, hi);
      }
      ExprPtr one = seq({tok(","), elem(i), tail(i + 1)});
      return i >= m ? opt(one) : one;
    };
    ExprPtr body;
    if (M && *M == 0) body = epsilon();
    else {
      ExprPtr first = seq({elem(0), tail(1)});
      body = m == 0 ? opt(first) : first;
    }
    return seq({lit("["), ws(), body, ws(), lit("]")});
  }

  ExprPtr object_expr(const json& s, const std::string& path);

  friend Grammar deepinfer::grammar::json_schema_grammar(std::string_view, const JsonSchemaOptions&);
  friend Grammar deepinfer::grammar::json_value_grammar(const JsonSchemaOptions&);
  friend class deepinfer::grammar::JsonSchemaRules;
};

}  // namespace
}  // namespace deepinfer::grammar

#include "grammar/json_schema_object.inc"

namespace deepinfer::grammar {

Grammar json_schema_grammar(std::string_view schema_json, const JsonSchemaOptions& options) {
  json root;
  // Bounded before any recursive pass (or copy) runs over the document: a schema given as text
  // is not depth-limited by the request parser, and 20,000 levels overflowed the stack.
  constexpr int kMaxDepth = 128;
  struct TooDeep {};
  try {
    root = json::parse(schema_json, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw TooDeep{};
      return true;
    });
  } catch (const TooDeep&) {
    THROW(kResourceExhausted) << "JSON Schema nests deeper than " << kMaxDepth << " levels";
  } catch (const json::exception& e) {
    THROW(kInvalidInput) << "JSON Schema is not valid JSON: " << e.what();
  }
  const NumberLiterals literals(schema_json);
  JsonSchemaCompiler c(root, options, nullptr, &literals);
  return c.compile();
}

Grammar json_value_grammar(const JsonSchemaOptions& options) {
  json root = true;
  JsonSchemaCompiler c(root, options);
  return c.compile_any();
}

}  // namespace deepinfer::grammar

namespace deepinfer::grammar {

struct JsonSchemaRules::Impl {
  json root;
  JsonSchemaCompiler compiler;
  Impl(json r, const JsonSchemaOptions& options, GrammarBuilder& b, const NumberLiterals* literals)
      : root(std::move(r)), compiler(root, options, &b, literals) {}
};

JsonSchemaRules::JsonSchemaRules(GrammarBuilder& builder, const nlohmann::ordered_json& root,
                                 const JsonSchemaOptions& options, const NumberLiterals* literals)
    : impl_(std::make_unique<Impl>(root, options, builder, literals)) {}
JsonSchemaRules::~JsonSchemaRules() = default;

int32_t JsonSchemaRules::value_rule(const nlohmann::ordered_json& schema, const std::string& path) {
  return impl_->compiler.rule_for(schema, path);
}

std::shared_ptr<const Dfa> JsonSchemaRules::string_body(const nlohmann::ordered_json& schema,
                                                        const std::string& path) {
  return impl_->compiler.string_body_dfa(schema, path);
}

}  // namespace deepinfer::grammar
