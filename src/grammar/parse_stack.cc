#include "grammar/parse_stack.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer::grammar {

namespace {
constexpr int kMaxExpandDepth = 100000;
}

int32_t StackPool::intern(int32_t ret_pos, int32_t parent) {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ret_pos)) << 32) |
                 static_cast<uint32_t>(parent);
  auto [it, fresh] = ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (fresh) nodes_.push_back({ret_pos, parent});
  return it->second;
}

void sort_unique_tail(std::vector<Top>& out, size_t from) {
  if (out.size() - from <= 1) return;
  std::sort(out.begin() + from, out.end());
  out.erase(std::unique(out.begin() + from, out.end()), out.end());
}

bool ByteStepper::visit(int32_t pos, int32_t parent) {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) |
                 static_cast<uint32_t>(parent);
  for (uint64_t v : visited_)
    if (v == key) return false;
  visited_.push_back(key);
  return true;
}

void ByteStepper::expand(int32_t pos, int32_t parent, std::vector<Top>& out, StepFlags& flags) {
  visited_.clear();
  expand_rec(pos, parent, out, flags, 0);
}

void ByteStepper::expand_rec(int32_t pos, int32_t parent, std::vector<Top>& out, StepFlags& flags,
                             int depth) {
  ICHECK(depth < kMaxExpandDepth) << "grammar expansion too deep";
  const Element& el = g_.elements[pos];
  switch (el.kind) {
    case ElementKind::kEnd:
      if (parent == kRootParent) {
        flags.can_end = true;
      } else if (parent == kUnknownParent) {
        flags.escaped = true;
      } else {
        const auto& node = pool_.node(parent);
        if (visit(node.ret_pos + 1, node.parent))
          expand_rec(node.ret_pos + 1, node.parent, out, flags, depth + 1);
      }
      return;
    case ElementKind::kRef: {
      int32_t child_parent =
          g_.elements[pos + 1].kind == ElementKind::kEnd ? parent : pool_.intern(pos, parent);
      for (int32_t a : g_.rule_alts[el.arg])
        if (visit(a, child_parent)) expand_rec(a, child_parent, out, flags, depth + 1);
      return;
    }
    case ElementKind::kDfa: {
      const Dfa& d = g_.dfas[el.arg];
      if (d.has_out[d.start]) out.push_back({pos, d.start, parent});
      if (d.accept[d.start] && visit(pos + 1, parent)) expand_rec(pos + 1, parent, out, flags, depth + 1);
      return;
    }
  }
}

void ByteStepper::initial(std::vector<Top>& out, StepFlags& flags) {
  size_t from = out.size();
  visited_.clear();
  for (int32_t a : g_.rule_alts[g_.root])
    if (visit(a, kRootParent)) expand_rec(a, kRootParent, out, flags, 0);
  sort_unique_tail(out, from);
}

void ByteStepper::advance(const Top* in, size_t n, uint8_t byte, std::vector<Top>& out,
                          StepFlags& flags) {
  size_t from = out.size();
  bool cleared = false;
  for (size_t i = 0; i < n; ++i) {
    const Top& t = in[i];
    const Dfa& d = g_.dfas[g_.elements[t.pos].arg];
    int32_t s = d.at(t.state, byte);
    if (s == kDead) continue;
    if (d.has_out[s]) out.push_back({t.pos, s, t.parent});
    if (d.accept[s]) {
      if (!cleared) { visited_.clear(); cleared = true; }
      if (visit(t.pos + 1, t.parent)) expand_rec(t.pos + 1, t.parent, out, flags, 0);
    }
  }
  sort_unique_tail(out, from);
}

bool ByteStepper::advance_bytes(std::vector<Top>& tops, StepFlags& flags, std::string_view bytes) {
  std::vector<Top>& next = scratch_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (tops.empty()) return false;
    next.clear();
    flags = StepFlags{};
    advance(tops.data(), tops.size(), static_cast<uint8_t>(bytes[i]), next, flags);
    tops.swap(next);
  }
  return !tops.empty() || flags.can_end || flags.escaped;
}

bool grammar_matches(const Grammar& g, std::string_view bytes) {
  if (g.rule_alts[g.root].empty()) return false;
  StackPool pool;
  ByteStepper stepper(g, pool);
  std::vector<Top> tops;
  StepFlags flags;
  stepper.initial(tops, flags);
  if (bytes.empty()) return flags.can_end;
  if (!stepper.advance_bytes(tops, flags, bytes)) return false;
  return flags.can_end;
}

}  // namespace deepinfer::grammar
