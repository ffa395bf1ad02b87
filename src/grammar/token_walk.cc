#include "grammar/token_walk.h"

#include <algorithm>

#include "base/error.h"
#include "grammar/budget.h"

namespace deepinfer::grammar {

namespace {
// At a character boundary: b is an ASCII character in the set, or the lead byte of a non-ASCII
// character and the set holds Vocabulary::kNonAscii.
bool in_set(const Vocabulary::AsciiSet* set, int b) {
  if (!set) return false;
  if (b >= 128) return ((*set)[0] >> Vocabulary::kNonAscii) & 1;
  return (*set)[b >> 6] >> (b & 63) & 1;
}
}  // namespace

Vocabulary::AsciiSet dead_plain_ascii(const Grammar& g, const Top& top) {
  const Dfa& d = g.dfas[g.elements[top.pos].arg];
  Vocabulary::AsciiSet out{};
  for (int b = 0; b < 128; ++b)
    if (plain_char_step(0, static_cast<uint8_t>(b)) == 0 && d.at(top.state, static_cast<uint8_t>(b)) == kDead)
      out[b >> 6] |= uint64_t{1} << (b & 63);
  return out;
}

SliceVerdict classify_slice(const Grammar& g, const Top& top) {
  const Dfa& d = g.dfas[g.elements[top.pos].arg];
  SliceVerdict v;
  v.excluded = dead_plain_ascii(g, top);
  // level: the DFA states after `chars` plain characters avoiding `excluded` (all survived so far).
  std::vector<int32_t> level{top.state}, next;
  std::vector<std::pair<int32_t, int>> work;
  std::vector<int32_t> stamp(static_cast<size_t>(d.n_states()) * 4, -1);
  for (int chars = 0; chars < Vocabulary::kSliceMaxChars; ++chars) {
    bool all_alive = true, any_alive = false;
    next.clear();
    work.clear();
    for (int32_t s : level) {
      if (d.accept[s]) return {};  // a slice token could leave the DFA here: walk it
      work.push_back({s, 0});
    }
    for (size_t i = 0; i < work.size(); ++i) {
      auto [s, u] = work[i];
      for (int b = 0; b < 256; ++b) {
        const int u2 = plain_char_step(u, static_cast<uint8_t>(b));
        if (u2 < 0) continue;
        const int32_t t = d.at(s, static_cast<uint8_t>(b));
        if (u == 0 && in_set(&v.excluded, b)) {
          if (t != kDead) return {};  // an excluded character alive later on
          continue;
        }
        if (t == kDead) { all_alive = false; continue; }
        any_alive = true;
        if (u2 != 0 && d.accept[t]) return {};
        int32_t& mark = stamp[static_cast<size_t>(t) * 4 + u2];
        if (mark == chars) continue;
        mark = chars;
        if (u2 != 0) work.push_back({t, u2});
        else next.push_back(t);
      }
    }
    if (!all_alive) {
      if (any_alive) return {};  // some sequences of chars + 1 characters die, others not
      v.closed = true;
      v.max_chars = chars;
      return v;
    }
    if (next.size() > 256) return {};
    level.swap(next);
  }
  v.closed = true;
  v.max_chars = Vocabulary::kSliceMaxChars;
  return v;
}

SliceAlphabet slice_alphabet(const Dfa& d, const Vocabulary& vocab) {
  SliceAlphabet a;
  // Open addressing on the packed class sequence (a few thousand characters, a few groups).
  const auto& chars = vocab.slice_nonascii_chars();
  size_t cap = 64;
  while (cap < 2 * chars.size()) cap *= 2;
  std::vector<uint64_t> keys(cap, 0);
  std::vector<int32_t> ids(cap, -1);
  for (int32_t c = 0; c < static_cast<int32_t>(chars.size()); ++c) {
    uint64_t key = chars[c].size();
    for (unsigned char b : chars[c]) key = key << 8 | d.byte_class[b];
    size_t h = (key * 0x9E3779B97F4A7C15ull) >> 20;
    while (true) {
      h &= cap - 1;
      if (ids[h] < 0) {
        keys[h] = key;
        ids[h] = static_cast<int32_t>(a.reps.size());
        a.reps.push_back(chars[c]);
        a.chars.emplace_back();
        break;
      }
      if (keys[h] == key) break;
      ++h;
    }
    a.chars[ids[h]].push_back(c);
  }
  return a;
}

SliceVerdict classify_slice_chars(const Grammar& g, const Top& top, const SliceAlphabet& alphabet) {
  constexpr size_t kMaxGroups = 512, kMaxLevel = 256;
  const Dfa& d = g.dfas[g.elements[top.pos].arg];
  if (alphabet.reps.size() > kMaxGroups) return {};
  // The state after a character, kDead; -2 if an accepting state comes before its last byte.
  auto step = [&](int32_t s, const std::string& bytes) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      s = d.at(s, static_cast<uint8_t>(bytes[i]));
      if (s == kDead) return kDead;
      if (i + 1 < bytes.size() && d.accept[s]) return -2;
    }
    return s;
  };
  SliceVerdict v;
  v.excluded = dead_plain_ascii(g, top);
  std::vector<uint8_t> dead_group(alphabet.reps.size(), 0);
  for (size_t k = 0; k < alphabet.reps.size(); ++k) dead_group[k] = step(top.state, alphabet.reps[k]) == kDead;
  std::vector<int32_t> level{top.state}, next;
  int max_chars = Vocabulary::kSliceMaxChars;
  for (int chars = 0; chars < Vocabulary::kSliceMaxChars; ++chars) {
    bool all_alive = true, any_alive = false;
    next.clear();
    for (int32_t s : level) {
      if (d.accept[s]) return {};  // a slice token could leave the DFA here: walk it
      for (int b = 0x20; b < 0x7F; ++b) {
        if (b == '"' || b == '\\') continue;
        const int32_t t = d.at(s, static_cast<uint8_t>(b));
        if (in_set(&v.excluded, b)) {
          if (t != kDead) return {};  // an excluded character alive later on
        } else if (t == kDead) {
          all_alive = false;
        } else {
          any_alive = true;
          next.push_back(t);
        }
      }
      for (size_t k = 0; k < alphabet.reps.size(); ++k) {
        const int32_t t = step(s, alphabet.reps[k]);
        if (t == -2) return {};
        if (dead_group[k]) {
          if (t != kDead) return {};
        } else if (t == kDead) {
          all_alive = false;
        } else {
          any_alive = true;
          next.push_back(t);
        }
      }
    }
    if (!all_alive) {
      if (any_alive) return {};  // some sequences of chars + 1 characters die, others not
      max_chars = chars;
      break;
    }
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
    if (next.size() > kMaxLevel) return {};
    level.swap(next);
  }
  v.closed = true;
  v.max_chars = max_chars;
  if (std::all_of(dead_group.begin(), dead_group.end(), [](uint8_t x) { return x != 0; })) {
    v.excluded[0] |= uint64_t{1} << Vocabulary::kNonAscii;  // every non-ASCII character dies
    return v;
  }
  for (size_t k = 0; k < alphabet.reps.size(); ++k)
    if (dead_group[k]) v.dead_chars.insert(v.dead_chars.end(), alphabet.chars[k].begin(), alphabet.chars[k].end());
  std::sort(v.dead_chars.begin(), v.dead_chars.end());
  return v;
}

int slice_survival_chars(const Grammar& g, const Top& top, const Vocabulary::AsciiSet* excluded) {
  const Dfa& d = g.dfas[g.elements[top.pos].arg];
  // BFS over (dfa state, utf-8 state) by character depth; a pair first met at the smallest depth
  // needs its continuations checked for the most remaining characters, so visiting once suffices.
  // No character can even start (e.g. inside a multi-byte character): no slice token survives.
  bool any_start = false;
  for (int b = 0; b < 256 && !any_start; ++b)
    any_start = plain_char_step(0, static_cast<uint8_t>(b)) >= 0 && !in_set(excluded, b) &&
                d.at(top.state, static_cast<uint8_t>(b)) != kDead;
  if (!any_start) return -1;
  std::vector<std::pair<int32_t, int>> level{{top.state, 0}}, next;
  std::vector<uint8_t> seen(static_cast<size_t>(d.n_states()) * 4, 0);
  seen[static_cast<size_t>(top.state) * 4] = 1;
  for (int chars = 0; chars < Vocabulary::kSliceMaxChars; ++chars) {
    // Does every (chars + 1)-th character survive from this level?
    next.clear();
    for (size_t i = 0; i < level.size(); ++i) {
      auto [s, u] = level[i];
      for (int b = 0; b < 256; ++b) {
        int u2 = plain_char_step(u, static_cast<uint8_t>(b));
        if (u2 < 0 || (u == 0 && in_set(excluded, b))) continue;
        int32_t s2 = d.at(s, static_cast<uint8_t>(b));
        if (s2 == kDead) return chars;
        uint8_t& mark = seen[static_cast<size_t>(s2) * 4 + u2];
        if (mark) continue;
        mark = 1;
        // Continuation bytes stay within the same character: process them at this depth.
        if (u2 != 0) level.push_back({s2, u2});
        else next.push_back({s2, 0});
      }
    }
    level.swap(next);
    if (level.empty()) return Vocabulary::kSliceMaxChars;
  }
  return Vocabulary::kSliceMaxChars;
}

namespace {

// The plain walk over the trie nodes [first, last): consecutive sibling subtrees whose roots have
// depth base_depth + 1, entered from the tops `init` (the stacks after the bytes above them).
// The whole trie is first = 1, last = n_nodes, base_depth = 0.
int64_t walk_range(const Grammar& g, const TokenTrie& token_trie, StackPool& pool, const Top* init, size_t n_init,
                   int32_t first, int32_t last, int base_depth, uint32_t* accepted, std::vector<int32_t>* uncertain,
                   const SliceSkip* skip) {
  const auto& trie = token_trie.nodes;
  const auto& tokens = token_trie.tokens;
  ByteStepper stepper(g, pool);
  // Tops of every depth on the current branch live in one buffer: level d is [begin[d], begin[d+1]).
  std::vector<Top> buf(init, init + n_init);
  std::vector<size_t> begin(base_depth + 2, 0);
  begin[base_depth + 1] = n_init;
  std::vector<uint8_t> esc_above(base_depth + 1, 0);
  std::vector<Top> parent_tops;  // a stack escaped before reaching this depth
  auto set_bit = [&](int32_t t) { accepted[t >> 5] |= 1u << (t & 31); };
  auto mark_uncertain = [&](int32_t from, int32_t to) {
    if (!uncertain) return;
    for (int32_t k = from; k < to; ++k) uncertain->push_back(tokens[k]);
  };
  int64_t visited = 0;
  // Compilation walks the first mask under the request's budget; serving-time walks have none.
  CompileBudget* budget = active_budget();
  int32_t i = first;
  while (i < last) {
    if (budget) budget->tick();
    const auto& node = trie[i];
    if (skip && skip->skips(i)) {
      if (skip->accept)
        for (int32_t k = node.token_begin; k < trie[node.end].token_begin; ++k) set_bit(tokens[k]);
      i = node.end;
      continue;
    }
    const int d = node.depth;
    ++visited;
    // Drop levels deeper than the parent (d - 1).
    buf.resize(begin[d]);
    begin.resize(d + 1);
    esc_above.resize(d);
    StepFlags flags;
    const size_t pb = begin[d - 1], pe = begin[d];
    if (pe - pb == 1) {
      // Fast path: one stack, a plain DFA step.
      const Top t = buf[pb];
      const Dfa& dfa = g.dfas[g.elements[t.pos].arg];
      int32_t s = dfa.at(t.state, node.byte);
      if (s != kDead) {
        if (dfa.has_out[s]) buf.push_back({t.pos, s, t.parent});
        if (dfa.accept[s]) {
          stepper.expand(t.pos + 1, t.parent, buf, flags);
          sort_unique_tail(buf, pe);
        }
      }
    } else {
      // advance() appends to buf: read the parent level from a copy (buf may reallocate).
      parent_tops.assign(buf.begin() + pb, buf.begin() + pe);
      stepper.advance(parent_tops.data(), parent_tops.size(), node.byte, buf, flags);
    }
    const bool alive = buf.size() > pe;
    const bool above = esc_above[d - 1] != 0;
    const bool here = flags.escaped;
    if (node.n_tokens) {
      if (alive || flags.can_end || here) {
        for (int32_t k = 0; k < node.n_tokens; ++k) set_bit(tokens[node.token_begin + k]);
      } else if (above) {
        mark_uncertain(node.token_begin, node.token_begin + node.n_tokens);
      }
    }
    if (!alive) {
      if (above || here) mark_uncertain(node.token_begin + node.n_tokens, trie[node.end].token_begin);
      i = node.end;
      continue;
    }
    begin.push_back(buf.size());
    esc_above.push_back(above || here);
    ++i;
  }
  return visited;
}

// One top: while the bytes stay inside its DFA in live, non-accepting states (nothing can
// leave the rule, nothing is uncertain), a node costs one table lookup on a per-depth state
// array; a subtree whose first byte reaches an accepting state (the rule may end there) or a
// state without live bytes is handed to walk_range from the state above it. Equals walk_range
// from the root.
int64_t walk_single_top(const Grammar& g, const TokenTrie& token_trie, StackPool& pool, const Top& top,
                        uint32_t* accepted, std::vector<int32_t>* uncertain,
                        const SliceSkip* skip) {
  const auto& trie = token_trie.nodes;
  const auto& tokens = token_trie.tokens;
  const int32_t n_nodes = token_trie.n_nodes();
  const Dfa& dfa = g.dfas[g.elements[top.pos].arg];
  const int32_t* next = dfa.next.data();
  const int32_t n_classes = dfa.n_classes;
  const uint8_t* cls = dfa.byte_class.data();
  // leaves[s]: s accepts or has no live byte (the plain walk decides what follows).
  std::vector<uint8_t> leaves(dfa.n_states());
  for (int32_t s = 0; s < dfa.n_states(); ++s) leaves[s] = dfa.accept[s] || !dfa.has_out[s];
  std::vector<int32_t> state{top.state};
  int64_t visited = 0;
  CompileBudget* budget = active_budget();
  int32_t i = 1;
  while (i < n_nodes) {
    if (budget) budget->tick();
    const auto& node = trie[i];
    if (skip && skip->skips(i)) {
      if (skip->accept)
        for (int32_t k = node.token_begin; k < trie[node.end].token_begin; ++k)
          accepted[tokens[k] >> 5] |= 1u << (tokens[k] & 31);
      i = node.end;
      continue;
    }
    const int d = node.depth;
    const int32_t from = state[d - 1];
    const int32_t s = next[static_cast<size_t>(from) * n_classes + cls[node.byte]];
    if (s == kDead) {
      ++visited;
      i = node.end;
      continue;
    }
    if (leaves[s]) {
      const Top above{top.pos, from, top.parent};
      visited += walk_range(g, token_trie, pool, &above, 1, i, node.end, d - 1, accepted, uncertain, skip);
      i = node.end;
      continue;
    }
    ++visited;
    for (int32_t k = node.token_begin; k < node.token_begin + node.n_tokens; ++k)
      accepted[tokens[k] >> 5] |= 1u << (tokens[k] & 31);
    if (static_cast<int>(state.size()) <= d) state.resize(d + 1);
    state[d] = s;
    ++i;
  }
  return visited;
}

}  // namespace

int64_t walk_token_trie_plain(const Grammar& g, const TokenTrie& token_trie, StackPool& pool,
                              const std::vector<Top>& init, uint32_t* accepted, std::vector<int32_t>* uncertain,
                              const SliceSkip* skip) {
  return walk_range(g, token_trie, pool, init.data(), init.size(), 1, token_trie.n_nodes(), 0, accepted, uncertain,
                    skip);
}

int64_t walk_token_trie(const Grammar& g, const TokenTrie& token_trie, StackPool& pool,
                        const std::vector<Top>& init, uint32_t* accepted, std::vector<int32_t>* uncertain,
                        const SliceSkip* skip) {
  if (init.size() == 1 && g.elements[init[0].pos].kind == ElementKind::kDfa)
    return walk_single_top(g, token_trie, pool, init[0], accepted, uncertain, skip);
  return walk_token_trie_plain(g, token_trie, pool, init, accepted, uncertain, skip);
}

}  // namespace deepinfer::grammar
