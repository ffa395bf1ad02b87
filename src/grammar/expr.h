// Grammar expressions: the common front-end tree that regex, EBNF and JSON Schema all produce.
//
// Expressions are over Unicode code points (kClass) and raw byte strings (kBytes); they are lowered
// to byte-level automata (dfa.h) and rules (grammar.h). kRef names a rule of the grammar being built;
// an expression without kRef is "regular" and becomes one DFA.
// Immutable and shared: build with the helpers below, never mutate after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::grammar {

struct Dfa;

enum class ExprKind : uint8_t {
  kEpsilon,  // the empty string
  kNothing,  // the empty language (matches nothing)
  kClass,    // one code point from `ranges` (inclusive, sorted, disjoint; surrogates never match)
  kBytes,    // the literal byte string `bytes`
  kSeq,      // children in order
  kAlt,      // any one child
  kRepeat,   // child repeated [min, max] times; max == kUnbounded for no upper bound
  kRef,      // rule number `rule`
  kAutomaton,  // the language of the prebuilt byte-level `dfa` (regular; see dfa.h)
};

inline constexpr int32_t kUnbounded = -1;
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

struct Expr {
  ExprKind kind = ExprKind::kEpsilon;
  CodeRanges ranges;            // kClass
  std::string bytes;            // kBytes
  std::vector<ExprPtr> children;  // kSeq, kAlt, kRepeat (one child)
  int32_t min = 0, max = 0;     // kRepeat
  int32_t rule = -1;            // kRef
  std::shared_ptr<const Dfa> dfa;  // kAutomaton
};

ExprPtr epsilon();
ExprPtr nothing();
ExprPtr cls(CodeRanges ranges);  // normalises (sorts, merges); empty ranges -> nothing()
ExprPtr chr(uint32_t code_point);
ExprPtr lit(std::string utf8_bytes);  // empty -> epsilon()
ExprPtr seq(std::vector<ExprPtr> children);
ExprPtr alt(std::vector<ExprPtr> children);
ExprPtr repeat(ExprPtr child, int32_t min, int32_t max);
ExprPtr ref(int32_t rule);
ExprPtr automaton(std::shared_ptr<const Dfa> dfa);  // an empty automaton -> nothing()
inline ExprPtr star(ExprPtr e) { return repeat(std::move(e), 0, kUnbounded); }
inline ExprPtr plus(ExprPtr e) { return repeat(std::move(e), 1, kUnbounded); }
inline ExprPtr opt(ExprPtr e) { return repeat(std::move(e), 0, 1); }

// Sorted, merged, and clipped to [0, kMaxCodePoint].
CodeRanges normalize_ranges(CodeRanges ranges);
CodeRanges complement_ranges(const CodeRanges& ranges);
CodeRanges intersect_ranges(const CodeRanges& a, const CodeRanges& b);
bool ranges_contain(const CodeRanges& ranges, uint32_t cp);

bool has_refs(const Expr& e);
// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace deepinfer::grammar
