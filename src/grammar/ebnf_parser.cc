#include "grammar/ebnf_parser.h"

#include <map>

#include "base/error.h"

namespace deepinfer::grammar {

namespace {

class EbnfParser {
 public:
  EbnfParser(std::string_view text, GrammarBuilder& b) : t_(text), b_(b) {}

  void parse() {
    skip_space(true);
    while (!at_end()) {
      size_t start = pos_;
      std::string name = parse_name();
      skip_space(true);
      if (t_.substr(pos_, 3) != "::=") { pos_ = start; fail("expected 'name ::='"); }
      pos_ += 3;
      int32_t r = rule(name);
      if (b_.is_defined(r)) { pos_ = start; fail("rule '" + name + "' defined twice"); }
      b_.define(r, parse_alternatives(0));
      skip_space(true);
    }
  }

  int32_t rule(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    int32_t r = b_.declare(name);
    rules_[name] = r;
    return r;
  }
  bool has_rule(const std::string& name) const { return rules_.count(name) > 0; }

 private:
  std::string_view t_;
  GrammarBuilder& b_;
  size_t pos_ = 0;
  // Nesting bounds: the parser and the passes over its Expr trees recurse once per level, so a
  // deeper grammar (200,000 '(' or '"a"****...') overflowed the stack.
  static constexpr int kMaxGroupDepth = 256;
  static constexpr int kMaxStackedPostfix = 8;
  std::map<std::string, int32_t> rules_;

  bool at_end() const { return pos_ >= t_.size(); }
  [[noreturn]] void fail(const std::string& msg) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    THROW(kInvalidInput) << "EBNF " << line << ":" << col << ": " << msg;
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }
  // Skips blanks and comments; newlines only if `newlines` (inside groups they are always allowed).
  void skip_space(bool newlines) {
    while (!at_end()) {
      char c = t_[pos_];
      if (c == '#') { while (!at_end() && t_[pos_] != '\n') ++pos_; continue; }
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) { ++pos_; continue; }
      break;
    }
  }
  std::string parse_name() {
    size_t s = pos_;
    while (!at_end() && name_char(t_[pos_])) ++pos_;
    if (s == pos_) fail("expected a rule name");
    return std::string(t_.substr(s, pos_ - s));
  }
  // True if a `name ::=` starts at the current position (the end of the previous rule).
  bool at_rule_start() {
    size_t save = pos_;
    if (at_end() || !name_char(t_[pos_])) return false;
    while (!at_end() && name_char(t_[pos_])) ++pos_;
    skip_space(true);
    bool yes = t_.substr(pos_, 3) == "::=";
    pos_ = save;
    return yes;
  }

  ExprPtr parse_alternatives(int depth) {
    std::vector<ExprPtr> alts;
    alts.push_back(parse_sequence(depth));
    while (true) {
      skip_space(true);
      if (!at_end() && t_[pos_] == '|') { ++pos_; alts.push_back(parse_sequence(depth)); continue; }
      break;
    }
    return alt(std::move(alts));
  }

  ExprPtr parse_sequence(int depth) {
    std::vector<ExprPtr> items;
    while (true) {
      skip_space(true);
      if (at_end()) break;
      char c = t_[pos_];
      if (c == '|' || c == ')') break;
      if (depth == 0 && at_rule_start()) break;
      items.push_back(parse_postfix(parse_primary(depth)));
    }
    return seq(std::move(items));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (int n = 0; !at_end(); ++n) {
      char c = t_[pos_];
      if (n == kMaxStackedPostfix && (c == '*' || c == '+' || c == '?' || c == '{')) {
        THROW(kResourceExhausted) << "EBNF: more than " << kMaxStackedPostfix << " repetition operators on one term";
      }
      if (c == '*') { ++pos_; e = star(e); }
      else if (c == '+') { ++pos_; e = plus(e); }
      else if (c == '?') { ++pos_; e = opt(e); }
      else if (c == '{') {
        ++pos_;
        int32_t lo = parse_int(), hi = lo;
        skip_space(false);
        if (!at_end() && t_[pos_] == ',') {
          ++pos_;
          skip_space(false);
          hi = (!at_end() && t_[pos_] == '}') ? kUnbounded : parse_int();
        }
        skip_space(false);
        if (at_end() || t_[pos_] != '}') fail("expected '}'");
        ++pos_;
        if (hi != kUnbounded && hi < lo) fail("repetition {m,n} with n < m");
        e = repeat(e, lo, hi);
      } else {
        break;
      }
    }
    return e;
  }

  int32_t parse_int() {
    skip_space(false);
    size_t s = pos_;
    int64_t v = 0;
    while (!at_end() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      v = v * 10 + (t_[pos_++] - '0');
      if (v > 100000) fail("repetition count too large");
    }
    if (s == pos_) fail("expected a number");
    return static_cast<int32_t>(v);
  }

  ExprPtr parse_primary(int depth) {
    char c = t_[pos_];
    if (c == '"' || c == '\'') return parse_literal(c);
    if (c == '[') return parse_class();
    if (c == '.') { ++pos_; return cls({{0, kMaxCodePoint}}); }
    if (c == '(') {
      if (depth >= kMaxGroupDepth) THROW(kResourceExhausted) << "EBNF: groups nested deeper than " << kMaxGroupDepth;
      ++pos_;
      ExprPtr e = parse_alternatives(depth + 1);
      skip_space(true);
      if (at_end() || t_[pos_] != ')') fail("expected ')'");
      ++pos_;
      return e;
    }
    if (name_char(c)) return ref(rule(parse_name()));
    fail(std::string("unexpected character '") + c + "'");
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (at_end()) fail("truncated escape");
      char h = t_[pos_++];
      int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit");
      v = v * 16 + d;
    }
    return v;
  }

  uint32_t parse_char() {
    if (at_end()) fail("unterminated literal");
    unsigned char c = t_[pos_];
    if (c == '\\') {
      ++pos_;
      if (at_end()) fail("trailing backslash");
      char e = t_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': return static_cast<unsigned char>(e);
        default: fail(std::string("unknown escape \\") + e);
      }
    }
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (pos_ + n > t_.size()) fail("truncated UTF-8");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(t_[pos_ + i]) & 0x3F);
    pos_ += n;
    return cp;
  }

  ExprPtr parse_literal(char quote) {
    ++pos_;
    std::string bytes;
    while (true) {
      if (at_end()) fail("unterminated string literal");
      if (t_[pos_] == quote) { ++pos_; break; }
      append_utf8(bytes, parse_char());
    }
    return lit(bytes);
  }

  ExprPtr parse_class() {
    ++pos_;
    bool negate = false;
    if (!at_end() && t_[pos_] == '^') { negate = true; ++pos_; }
    CodeRanges ranges;
    while (true) {
      if (at_end()) fail("unterminated character class");
      if (t_[pos_] == ']') { ++pos_; break; }
      uint32_t lo = parse_char(), hi = lo;
      if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail("character class range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ranges = normalize_ranges(std::move(ranges));
    return cls(negate ? complement_ranges(ranges) : ranges);
  }
};

}  // namespace

Grammar ebnf_grammar(std::string_view text, const std::string& root) {
  GrammarBuilder b("EBNF grammar");
  EbnfParser p(text, b);
  p.parse();
  CHECK(p.has_rule(root)) << "EBNF grammar has no rule '" << root << "'";
  return b.build(p.rule(root));
}

}  // namespace deepinfer::grammar
