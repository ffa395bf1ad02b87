#include "grammar/regex_parser.h"

#include <array>
#include <string>

#include "base/error.h"

namespace deepinfer::grammar {

CodeRanges digit_ranges() { return {{'0', '9'}}; }
CodeRanges word_ranges() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
CodeRanges space_ranges() {
  return normalize_ranges({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680},
                           {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                           {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
}
CodeRanges dot_ranges() {
  return complement_ranges(normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
}

namespace {

// The pattern as named in messages: quoted, at most 64 bytes of it (a 400 KB pattern must not
// come back whole in a 400 response or a log line).
std::string named(std::string_view pattern) {
  constexpr size_t kMax = 64;
  if (pattern.size() <= kMax) return "regex '" + std::string(pattern) + "'";
  return "regex '" + std::string(pattern.substr(0, kMax)) + "...' (" + std::to_string(pattern.size()) +
         " bytes)";
}

class RegexParser {
 public:
  RegexParser(std::string_view p, RegexMode mode, RegexFlavor flavor) : p_(p), mode_(mode), flavor_(flavor) {}

  // Search mode: the top-level branches are grouped by their anchors and each group gets one
  // shared prefix / suffix loop: .*(b1|b2|..).* rather than .*b1.*|.*b2.*|.. , whose subset
  // construction tracks every branch's own trailing loop (2^branches states: a 5-word
  // unanchored alternation ran past the 2 s budget).
  // The top-level branches' alternation per anchor kind (index: anchored start * 2 + anchored end);
  // null where no branch has that kind.
  std::array<ExprPtr, 4> parse_groups() {
    std::vector<ExprPtr> groups[4];
    do {
      auto [body, anchored_start, anchored_end] = parse_top_branch();
      groups[anchored_start * 2 + anchored_end].push_back(body);
    } while (eat('|'));
    CHECK(pos_ == p_.size()) << named(p_) << ": unbalanced ')' at offset " << pos_;
    std::array<ExprPtr, 4> out;
    for (int g = 0; g < 4; ++g)
      if (!groups[g].empty()) out[g] = alt(std::move(groups[g]));
    return out;
  }

  ExprPtr parse() {
    std::array<ExprPtr, 4> groups = parse_groups();
    std::vector<ExprPtr> alts;
    for (int g = 0; g < 4; ++g) {
      if (!groups[g]) continue;
      ExprPtr body = groups[g];
      if (mode_ == RegexMode::kFullMatch) { alts.push_back(body); continue; }
      std::vector<ExprPtr> parts;
      if (!(g & 2)) parts.push_back(star(any_char()));
      parts.push_back(body);
      if (!(g & 1)) parts.push_back(star(any_char()));
      // Python's `$` also matches before a final "\n" (ECMA's only at the end): under kWide
      // (either meaning) an end-anchored branch may be followed by one. kNarrow needs the end.
      if ((g & 1) && flavor_ == RegexFlavor::kWide) parts.push_back(opt(chr('\n')));
      alts.push_back(seq(std::move(parts)));
    }
    return alt(std::move(alts));
  }

 private:
  std::string_view p_;
  RegexMode mode_;
  RegexFlavor flavor_;
  size_t pos_ = 0;
  // Nesting bounds: the parser and the passes over its Expr tree recurse once per level, so a
  // deeper pattern (200,000 '(' or 'a****...') overflowed the stack.
  static constexpr int kMaxGroupDepth = 256;
  static constexpr int kMaxStackedQuantifiers = 8;
  int group_depth_ = 0;

  // Python's str-pattern classes (a superset of ECMA's for \d \w; \s differs) are approximated
  // by "every non-ASCII code point" where Unicode tables would be needed.
  static CodeRanges python_space() {
    return normalize_ranges({{'\t', '\r'}, {' ', ' '}, {0x1C, 0x1F}, {0x85, 0x85}, {0xA0, 0xA0},
                             {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                             {0x205F, 0x205F}, {0x3000, 0x3000}});
  }
  CodeRanges flavored(char c) {
    const CodeRanges non_ascii{{0x80, kMaxCodePoint}};
    auto uni = [&](CodeRanges r) { r.insert(r.end(), non_ascii.begin(), non_ascii.end()); return normalize_ranges(r); };
    switch (flavor_) {
      case RegexFlavor::kEcma:
        switch (c) {
          case 'd': return digit_ranges();
          case 'D': return complement_ranges(digit_ranges());
          case 'w': return word_ranges();
          case 'W': return complement_ranges(normalize_ranges(word_ranges()));
          case 's': return space_ranges();
          default: return complement_ranges(space_ranges());
        }
      case RegexFlavor::kNarrow:
        switch (c) {
          case 'd': return digit_ranges();
          case 'D': return intersect_ranges(complement_ranges(digit_ranges()), {{0, 0x7F}});
          case 'w': return word_ranges();
          case 'W': return intersect_ranges(complement_ranges(normalize_ranges(word_ranges())), {{0, 0x7F}});
          case 's': return intersect_ranges(space_ranges(), python_space());
          default: return complement_ranges(normalize_ranges([&] { CodeRanges u = space_ranges(); auto p = python_space(); u.insert(u.end(), p.begin(), p.end()); return u; }()));
        }
      case RegexFlavor::kWide:
        switch (c) {
          case 'd': return uni(digit_ranges());
          case 'D': return complement_ranges(digit_ranges());
          case 'w': return uni(word_ranges());
          case 'W': return complement_ranges(normalize_ranges(word_ranges()));
          case 's': return normalize_ranges([&] { CodeRanges u = space_ranges(); auto p = python_space(); u.insert(u.end(), p.begin(), p.end()); return u; }());
          default: return complement_ranges(intersect_ranges(space_ranges(), python_space()));
        }
    }
    return {};
  }
  CodeRanges flavored_dot() {
    return flavor_ == RegexFlavor::kWide ? complement_ranges({{'\n', '\n'}}) : dot_ranges();
  }

  bool at_end() const { return pos_ >= p_.size(); }
  bool eat(char c) {
    if (!at_end() && p_[pos_] == c) { ++pos_; return true; }
    return false;
  }
  [[noreturn]] void fail(const std::string& msg) {
    THROW(kInvalidInput) << named(p_) << ": " << msg << " at offset " << pos_;
  }
  [[noreturn]] void unsupported(const std::string& feature) {
    THROW(kUnsupported) << named(p_) << ": unsupported feature: " << feature;
  }

  uint32_t next_cp() {
    unsigned char c = p_[pos_];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (pos_ + n > p_.size()) fail("truncated UTF-8");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_ + i]) & 0x3F);
    pos_ += n;
    return cp;
  }

  ExprPtr any_char() { return cls({{0, kMaxCodePoint}}); }

  struct TopBranch {
    ExprPtr body;
    bool anchored_start, anchored_end;
  };
  TopBranch parse_top_branch() {
    bool anchored_start = eat('^');
    std::vector<ExprPtr> items;
    bool anchored_end = false;
    while (!at_end() && p_[pos_] != '|' && p_[pos_] != ')') {
      if (p_[pos_] == '$') {
        ++pos_;
        if (at_end() || p_[pos_] == '|') { anchored_end = true; break; }
        unsupported("'$' anchor before the end of the pattern");
      }
      items.push_back(parse_quantified());
    }
    return {seq(std::move(items)), anchored_start, anchored_end};
  }

  ExprPtr parse_alternation() {
    std::vector<ExprPtr> branches;
    do {
      std::vector<ExprPtr> items;
      while (!at_end() && p_[pos_] != '|' && p_[pos_] != ')') items.push_back(parse_quantified());
      branches.push_back(seq(std::move(items)));
    } while (eat('|'));
    return alt(std::move(branches));
  }

  bool parse_int(int32_t& v) {
    size_t start = pos_;
    int64_t x = 0;
    while (!at_end() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      x = x * 10 + (p_[pos_++] - '0');
      if (x > 100000) fail("repetition count too large");
    }
    v = static_cast<int32_t>(x);
    return pos_ > start;
  }

  ExprPtr parse_quantified() {
    ExprPtr atom = parse_atom();
    for (int n = 0; !at_end(); ++n) {
      if (n == kMaxStackedQuantifiers) {
        THROW(kResourceExhausted) << "regex: more than " << kMaxStackedQuantifiers << " quantifiers on one atom";
      }
      char c = p_[pos_];
      int32_t lo, hi;
      if (c == '*') { ++pos_; lo = 0; hi = kUnbounded; }
      else if (c == '+') { ++pos_; lo = 1; hi = kUnbounded; }
      else if (c == '?') { ++pos_; lo = 0; hi = 1; }
      else if (c == '{') {
        size_t save = pos_++;
        if (!parse_int(lo)) { pos_ = save; break; }  // a literal '{' (Annex B)
        hi = lo;
        if (eat(',')) { if (!parse_int(hi)) hi = kUnbounded; }
        if (!eat('}')) { pos_ = save; break; }
        if (hi != kUnbounded && hi < lo) fail("repetition {m,n} with n < m");
      } else {
        break;
      }
      eat('?');  // lazy: same language
      if (!at_end() && p_[pos_] == '+') unsupported("possessive quantifier");
      atom = repeat(atom, lo, hi);
    }
    return atom;
  }

  ExprPtr parse_atom() {
    char c = p_[pos_];
    switch (c) {
      case '(': {
        ++pos_;
        if (eat('?')) {
          if (eat(':')) {
          } else if (!at_end() && (p_[pos_] == '=' || p_[pos_] == '!')) {
            unsupported("lookahead");
          } else if (eat('<')) {
            if (!at_end() && (p_[pos_] == '=' || p_[pos_] == '!')) unsupported("lookbehind");
            while (!at_end() && p_[pos_] != '>') ++pos_;
            if (!eat('>')) fail("unterminated group name");
          } else {
            unsupported("group flags (?...)");
          }
        }
        if (++group_depth_ > kMaxGroupDepth) {
          THROW(kResourceExhausted) << "regex: groups nested deeper than " << kMaxGroupDepth;
        }
        ExprPtr inner = parse_alternation();
        if (!eat(')')) fail("missing ')'");
        --group_depth_;
        return inner;
      }
      case '[': return parse_class();
      case '.': ++pos_; return cls(flavored_dot());
      case '\\': return cls(parse_escape(false));
      case '^': unsupported("'^' anchor after the start of the pattern");
      case '$': unsupported("'$' anchor before the end of the pattern");
      case '*': case '+': case '?': fail("nothing to repeat");
      case '{': {
        size_t save = pos_;
        ++pos_;
        int32_t v;
        if (parse_int(v)) { pos_ = save; fail("nothing to repeat"); }
        return chr('{');
      }
      default: return chr(next_cp());
    }
  }

  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (at_end()) fail("truncated hex escape");
      char h = p_[pos_++];
      int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit");
      v = v * 16 + d;
    }
    return v;
  }

  // After a backslash. Returns the set of code points the escape denotes.
  CodeRanges parse_escape(bool in_class) {
    ++pos_;  // the backslash
    if (at_end()) fail("trailing backslash");
    char c = p_[pos_++];
    switch (c) {
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S': return flavored(c);
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0':
        if (!at_end() && p_[pos_] >= '0' && p_[pos_] <= '9') unsupported("octal escape");
        return {{0, 0}};
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        unsupported("word boundary \\b");
      case 'B': unsupported("non-word boundary \\B");
      case 'x': { uint32_t v = parse_hex(2); return {{v, v}}; }
      case 'u': {
        uint32_t v;
        if (eat('{')) {
          v = 0;
          while (!at_end() && p_[pos_] != '}') v = v * 16 + parse_hex(1);
          if (!eat('}') || v > kMaxCodePoint) fail("bad \\u{...} escape");
        } else {
          v = parse_hex(4);
          if (v >= 0xD800 && v <= 0xDBFF && pos_ + 6 <= p_.size() && p_[pos_] == '\\' &&
              p_[pos_ + 1] == 'u') {
            size_t save = pos_;
            pos_ += 2;
            uint32_t lo = parse_hex(4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return {{0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00),
                                                       0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00)}};
            pos_ = save;
          }
          if (v >= 0xD800 && v <= 0xDFFF) unsupported("lone surrogate escape");
        }
        return {{v, v}};
      }
      case 'c': {
        if (at_end()) fail("bad \\c escape");
        char l = p_[pos_++];
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) fail("bad \\c escape");
        uint32_t v = static_cast<uint32_t>(l) % 32;
        return {{v, v}};
      }
      case 'p': case 'P': unsupported("Unicode property escape \\p");
      case 'k': unsupported("named backreference");
      default:
        if (c >= '1' && c <= '9') unsupported("backreference");
        if (static_cast<unsigned char>(c) >= 0x80) {
          --pos_;
          uint32_t cp = next_cp();
          return {{cp, cp}};
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail(std::string("unknown escape \\") + c);
        return {{static_cast<uint32_t>(c), static_cast<uint32_t>(c)}};
    }
  }

  ExprPtr parse_class() {
    ++pos_;  // '['
    bool negate = eat('^');
    // The complement of a class narrows what it widens: [^\s] under kNarrow (strings matching
    // under both meanings) is the complement of \s under kWide (either meaning), and vice versa.
    const RegexFlavor outer = flavor_;
    if (negate && outer != RegexFlavor::kEcma) {
      flavor_ = outer == RegexFlavor::kNarrow ? RegexFlavor::kWide : RegexFlavor::kNarrow;
    }
    CodeRanges set;
    bool first = true;
    while (true) {
      if (at_end()) fail("unterminated character class");
      if (p_[pos_] == ']' && !first) { ++pos_; break; }
      if (p_[pos_] == ']' && first) { ++pos_; break; }  // ECMA: [] matches nothing, [^] anything
      first = false;
      CodeRanges lo_set = class_atom();
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        CodeRanges hi_set = class_atom();
        if (lo_set.size() != 1 || hi_set.size() != 1 || lo_set[0].first != lo_set[0].second ||
            hi_set[0].first != hi_set[0].second) {
          // ECMA Annex B: a class escape in a range makes '-' literal.
          set.insert(set.end(), lo_set.begin(), lo_set.end());
          set.push_back({'-', '-'});
          set.insert(set.end(), hi_set.begin(), hi_set.end());
          continue;
        }
        if (hi_set[0].first < lo_set[0].first) fail("character class range out of order");
        set.push_back({lo_set[0].first, hi_set[0].first});
        continue;
      }
      set.insert(set.end(), lo_set.begin(), lo_set.end());
    }
    flavor_ = outer;
    set = normalize_ranges(std::move(set));
    if (negate) set = complement_ranges(set);
    return cls(std::move(set));
  }

  CodeRanges class_atom() {
    if (p_[pos_] == '\\') return parse_escape(true);
    uint32_t cp = next_cp();
    return {{cp, cp}};
  }
};

}  // namespace

ExprPtr parse_regex(std::string_view pattern, RegexMode mode, RegexFlavor flavor) {
  return RegexParser(pattern, mode, flavor).parse();
}

SearchParts parse_search_regex(std::string_view pattern, RegexFlavor flavor) {
  auto g = RegexParser(pattern, RegexMode::kSearch, flavor).parse_groups();
  return SearchParts{g[3], g[2], g[1], g[0]};
}

}  // namespace deepinfer::grammar

namespace deepinfer::grammar {
Grammar regex_grammar(std::string_view pattern) {
  GrammarBuilder b(named(pattern));
  int32_t root = b.declare("root");
  b.define(root, parse_regex(pattern, RegexMode::kFullMatch));
  return b.build(root);
}
}  // namespace deepinfer::grammar
