// The byte-level recogniser shared by the matcher and the mask cache: a set of parse stacks over
// the grammar IR, advanced one byte at a time.
//
// A stack's top frame is a Top: a kDfa element position, the DFA state inside it, and its parent
// (an interned StackPool node holding a return position, kRootParent at the bottom of the
// grammar, or kUnknownParent when computing context-independent caches). Returning from a rule
// whose call was the last element of its alternative reuses the caller's parent (tail calls), so
// repetition does not grow stacks.
// Not thread-safe: each matcher / cache computation owns its StackPool and ByteStepper.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

inline constexpr int32_t kRootParent = -1;
inline constexpr int32_t kUnknownParent = -2;

struct Top {
  int32_t pos;     // element position (kDfa)
  int32_t state;   // state of that element's DFA
  int32_t parent;  // StackPool node id, kRootParent or kUnknownParent
  bool operator<(const Top& o) const {
    return pos != o.pos ? pos < o.pos : state != o.state ? state < o.state : parent < o.parent;
  }
  bool operator==(const Top& o) const { return pos == o.pos && state == o.state && parent == o.parent; }
};

class StackPool {
 public:
  struct Node { int32_t ret_pos, parent; };  // resume at ret_pos + 1, then continue with parent
  int32_t intern(int32_t ret_pos, int32_t parent);
  const Node& node(int32_t id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }

 private:
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> ids_;
};

struct StepFlags {
  bool can_end = false;  // some path completed the root rule
  bool escaped = false;  // some path returned into kUnknownParent
};

class ByteStepper {
 public:
  ByteStepper(const Grammar& g, StackPool& pool) : g_(g), pool_(pool) {}

  // Tops reached from "about to match element `pos`" with the given parent (descends into rules,
  // returns from finished ones). Appends to `out`; does not sort.
  void expand(int32_t pos, int32_t parent, std::vector<Top>& out, StepFlags& flags);
  // The initial tops of the grammar (sorted, unique).
  void initial(std::vector<Top>& out, StepFlags& flags);
  // Advances tops [in, in + n) by `byte`, appending the result (sorted, unique) to `out`.
  void advance(const Top* in, size_t n, uint8_t byte, std::vector<Top>& out, StepFlags& flags);
  // Advances a whole byte string; returns false if some byte kills every stack.
  bool advance_bytes(std::vector<Top>& tops, StepFlags& flags, std::string_view bytes);

  const Grammar& grammar() const { return g_; }

 private:
  const Grammar& g_;
  StackPool& pool_;
  std::vector<uint64_t> visited_;
  std::vector<Top> scratch_;
  void expand_rec(int32_t pos, int32_t parent, std::vector<Top>& out, StepFlags& flags, int depth);
  bool visit(int32_t pos, int32_t parent);
};

// Sorts and removes duplicates of out[from, end).
void sort_unique_tail(std::vector<Top>& out, size_t from);

// Whole-string recognition with a fresh stepper (tests, the driver, front-end self-checks).
bool grammar_matches(const Grammar& g, std::string_view bytes);

}  // namespace deepinfer::grammar
