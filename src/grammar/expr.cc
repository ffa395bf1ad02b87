#include "grammar/expr.h"

#include <algorithm>

#include "base/error.h"
#include "grammar/dfa.h"

namespace deepinfer::grammar {

namespace {
ExprPtr make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }
}  // namespace

ExprPtr epsilon() { return make(Expr{}); }

ExprPtr nothing() {
  Expr e;
  e.kind = ExprKind::kNothing;
  return make(std::move(e));
}

CodeRanges normalize_ranges(CodeRanges ranges) {
  for (auto& r : ranges) r.second = std::min(r.second, kMaxCodePoint);
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                              [](const auto& r) { return r.first > r.second; }),
               ranges.end());
  std::sort(ranges.begin(), ranges.end());
  CodeRanges out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodeRanges complement_ranges(const CodeRanges& ranges) {
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& r : ranges) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

CodeRanges intersect_ranges(const CodeRanges& a, const CodeRanges& b) {
  CodeRanges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    uint32_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.push_back({lo, hi});
    if (a[i].second < b[j].second) ++i; else ++j;
  }
  return out;
}

bool ranges_contain(const CodeRanges& ranges, uint32_t cp) {
  for (const auto& r : ranges)
    if (cp >= r.first && cp <= r.second) return true;
  return false;
}

ExprPtr cls(CodeRanges ranges) {
  ranges = normalize_ranges(std::move(ranges));
  if (ranges.empty()) return nothing();
  Expr e;
  e.kind = ExprKind::kClass;
  e.ranges = std::move(ranges);
  return make(std::move(e));
}

ExprPtr chr(uint32_t cp) { return cls({{cp, cp}}); }

ExprPtr lit(std::string bytes) {
  if (bytes.empty()) return epsilon();
  Expr e;
  e.kind = ExprKind::kBytes;
  e.bytes = std::move(bytes);
  return make(std::move(e));
}

ExprPtr seq(std::vector<ExprPtr> children) {
  std::vector<ExprPtr> flat;
  for (auto& c : children) {
    if (c->kind == ExprKind::kNothing) return nothing();
    if (c->kind == ExprKind::kEpsilon) continue;
    if (c->kind == ExprKind::kSeq) {
      flat.insert(flat.end(), c->children.begin(), c->children.end());
    } else {
      flat.push_back(c);
    }
  }
  if (flat.empty()) return epsilon();
  if (flat.size() == 1) return flat[0];
  Expr e;
  e.kind = ExprKind::kSeq;
  e.children = std::move(flat);
  return make(std::move(e));
}

ExprPtr alt(std::vector<ExprPtr> children) {
  std::vector<ExprPtr> flat;
  for (auto& c : children) {
    if (c->kind == ExprKind::kNothing) continue;
    if (c->kind == ExprKind::kAlt) {
      flat.insert(flat.end(), c->children.begin(), c->children.end());
    } else {
      flat.push_back(c);
    }
  }
  if (flat.empty()) return nothing();
  if (flat.size() == 1) return flat[0];
  Expr e;
  e.kind = ExprKind::kAlt;
  e.children = std::move(flat);
  return make(std::move(e));
}

ExprPtr repeat(ExprPtr child, int32_t min, int32_t max) {
  CHECK(min >= 0 && (max == kUnbounded || max >= min))
      << "bad repetition bounds {" << min << "," << max << "}";
  if (max == 0) return epsilon();
  if (min == 1 && max == 1) return child;
  if (child->kind == ExprKind::kEpsilon) return epsilon();
  if (child->kind == ExprKind::kNothing) return min == 0 ? epsilon() : nothing();
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children = {std::move(child)};
  e.min = min;
  e.max = max;
  return make(std::move(e));
}

ExprPtr ref(int32_t rule) {
  Expr e;
  e.kind = ExprKind::kRef;
  e.rule = rule;
  return make(std::move(e));
}

ExprPtr automaton(std::shared_ptr<const Dfa> dfa) {
  if (dfa->empty()) return nothing();
  Expr e;
  e.kind = ExprKind::kAutomaton;
  e.dfa = std::move(dfa);
  return make(std::move(e));
}

bool has_refs(const Expr& e) {
  if (e.kind == ExprKind::kRef) return true;
  for (const auto& c : e.children)
    if (has_refs(*c)) return true;
  return false;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace deepinfer::grammar
