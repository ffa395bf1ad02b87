#include "recipe/bpe.h"

#include <algorithm>
#include <climits>
#include <queue>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "recipe/byte_level.h"
#include "recipe/scratch.h"
#include "recipe/unicode_utf8.h"

namespace deepinfer::recipe {
namespace {

constexpr int64_t kMaxUnusedIds = int64_t{1} << 20;  // ids a vocabulary may leave unused

constexpr uint64_t kEmpty = ~0ull;
// Words up to this many symbols use the quadratic scan; longer ones the heap.
constexpr size_t kShortWord = 48;
constexpr size_t kMinCachedBytes = 4;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

size_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return static_cast<size_t>(k);
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, BpeInput input) {
  CHECK(model.is_object()) << "tokenizer.json: 'model' must be an object";
  const std::string type = model.value("type", std::string("BPE"));
  CHECK_KIND(kUnsupported, type == "BPE") << "tokenizer.json: model type '" << type
                                          << "' is not supported (only BPE)";
  auto null_or = [&](const char* key, auto fallback) {
    return model.contains(key) && !model[key].is_null() ? model[key].get<decltype(fallback)>() : fallback;
  };
  CHECK_KIND(kUnsupported, null_or("dropout", 0.0) == 0.0) << "BPE dropout is not supported";
  CHECK_KIND(kUnsupported, null_or("continuing_subword_prefix", std::string()).empty())
      << "BPE continuing_subword_prefix is not supported";
  CHECK_KIND(kUnsupported, null_or("end_of_word_suffix", std::string()).empty())
      << "BPE end_of_word_suffix is not supported";
  CHECK_KIND(kUnsupported, !null_or("byte_fallback", false)) << "BPE byte_fallback is not supported";
  fuse_unk_ = null_or("fuse_unk", false);
  ignore_merges_ = null_or("ignore_merges", false);

  CHECK(model.contains("vocab") && model["vocab"].is_object()) << "tokenizer.json: BPE model needs a 'vocab' object";
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) input.vocab.emplace_back(it.key(), it.value());
  vocab_.reserve(input.vocab.size());
  for (const auto& [token, value] : input.vocab) {
    CHECK(value.is_number_integer()) << "BPE vocab entry '" << token << "' has a non-integer id";
    const int64_t id = value.get<int64_t>();
    CHECK(id >= 0 && id < INT32_MAX) << "BPE vocab entry '" << token << "' has id out of range: " << id;
    // Ids index dense per-id tables (the tokenizer's, the grammar vocabulary's): an id far past
    // the vocabulary's size would make them take gigabytes.
    CHECK(id < static_cast<int64_t>(input.vocab.size()) + kMaxUnusedIds)
        << "BPE vocab entry '" << token << "' has id " << id << ", more than " << kMaxUnusedIds
        << " past the vocabulary's " << input.vocab.size() << " entries";
    vocab_.emplace(token, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, byte_level_char(static_cast<uint8_t>(b)));
    auto it = vocab_.find(ch);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  int32_t max_byte_id = -1;
  for (int32_t id : byte_ids_) max_byte_id = std::max(max_byte_id, id);
  id_byte_.assign(max_byte_id + 1, -1);
  for (int b = 0; b < 256; ++b)
    if (byte_ids_[b] >= 0) id_byte_[byte_ids_[b]] = static_cast<int16_t>(b);
  byte_pairs_.assign(1 << 16, MergeEntry{kEmpty, 0, 0});
  if (ignore_merges_) {
    for (const auto& [token, id] : vocab_) {
      std::string bytes;
      if (byte_level_decode(token, bytes)) bytes_vocab_.emplace(std::move(bytes), id);
    }
  }
  const std::string unk = null_or("unk_token", std::string());
  if (!unk.empty()) {
    auto it = vocab_.find(unk);
    CHECK(it != vocab_.end()) << "BPE unk_token '" << unk << "' is not in the vocabulary";
    unk_id_ = it->second;
  }

  if (model.contains("merges")) {
    CHECK(model["merges"].is_array()) << "tokenizer.json: BPE 'merges' must be an array";
    for (const auto& m : model["merges"]) input.merges.push_back(m);
  }
  const std::vector<nlohmann::json>& merges = input.merges;
  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity <<= 1;
  merges_.assign(capacity, MergeEntry{kEmpty, 0, 0});
  merge_mask_ = capacity - 1;
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    std::string_view left, right;
    if (m.is_string()) {
      const std::string_view s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      CHECK(space != std::string_view::npos && s.find(' ', space + 1) == std::string_view::npos)
          << "BPE merge #" << rank << " '" << s << "' is not two tokens separated by one space";
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {
      CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
          << "BPE merge #" << rank << " must be a string or a pair of strings";
      left = m[0].get_ref<const std::string&>();
      right = m[1].get_ref<const std::string&>();
    }
    joined.assign(left);
    joined.append(right);
    auto l = vocab_.find(left), r = vocab_.find(right), n = vocab_.find(std::string_view(joined));
    CHECK(l != vocab_.end() && r != vocab_.end()) << "BPE merge #" << rank << " uses a token not in the vocabulary: '"
                                                  << (l == vocab_.end() ? left : right) << "'";
    CHECK(n != vocab_.end()) << "BPE merge #" << rank << " produces '" << joined
                             << "', which is not in the vocabulary";
    add_merge(l->second, r->second, static_cast<int32_t>(rank), n->second);
  }
  n_merges_ = merges.size();
}

BpeModel::~BpeModel() = default;

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::MergeEntry* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  if (static_cast<size_t>(left) < id_byte_.size() && static_cast<size_t>(right) < id_byte_.size() &&
      id_byte_[left] >= 0 && id_byte_[right] >= 0) {
    const MergeEntry& e = byte_pairs_[(id_byte_[left] << 8) | id_byte_[right]];
    return e.key == key ? &e : nullptr;
  }
  for (size_t slot = mix(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    const MergeEntry& e = merges_[slot];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
  }
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t rank, int32_t new_id) {
  const uint64_t key = pair_key(left, right);
  if (static_cast<size_t>(left) < id_byte_.size() && static_cast<size_t>(right) < id_byte_.size() &&
      id_byte_[left] >= 0 && id_byte_[right] >= 0) {
    byte_pairs_[(id_byte_[left] << 8) | id_byte_[right]] = {key, rank, new_id};
    return;
  }
  // A repeated pair takes the later rank, as HF's map collection does.
  size_t slot = mix(key) & merge_mask_;
  while (merges_[slot].key != kEmpty && merges_[slot].key != key) slot = (slot + 1) & merge_mask_;
  merges_[slot] = {key, rank, new_id};
}

void BpeModel::merge_word(std::vector<int32_t>& sym) const {
  size_t n = sym.size();
  if (n < 2) return;
  if (n > kShortWord) {
    merge_word_long(sym);
    return;
  }
  int32_t rank[kShortWord];
  int32_t new_id[kShortWord];
  auto set_pair = [&](size_t i) {
    const MergeEntry* m = find_merge(sym[i], sym[i + 1]);
    rank[i] = m ? m->rank : INT32_MAX;
    new_id[i] = m ? m->new_id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) set_pair(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == INT32_MAX) break;
    sym[best] = new_id[best];
    for (size_t i = best + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      rank[i] = rank[i + 1];
      new_id[i] = new_id[i + 1];
    }
    --n;
    if (best > 0) set_pair(best - 1);
    if (best + 1 < n) set_pair(best);
  }
  sym.resize(n);
}

// HF's algorithm for long words: a min-heap of (rank, position) over a linked list.
void BpeModel::merge_word_long(std::vector<int32_t>& sym) const {
  const int32_t n = static_cast<int32_t>(sym.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Item {
    int32_t rank, pos, new_id;
    bool operator>(const Item& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  auto push_pair = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeEntry* m = find_merge(sym[i], sym[next[i]])) heap.push({m->rank, i, m->new_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Item top = heap.top();
    heap.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const MergeEntry* m = find_merge(sym[top.pos], sym[next[top.pos]]);
    if (m == nullptr || m->new_id != top.new_id) continue;
    const int32_t right = next[top.pos];
    sym[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push_pair(prev[top.pos]);
    push_pair(top.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i < n; ++i)
    if (alive[i]) sym[w++] = sym[i];
  sym.resize(w);
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    auto it = bytes_vocab_.find(piece);
    if (it != bytes_vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1 && byte_ids_[static_cast<uint8_t>(piece[0])] >= 0) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  // Short pieces merge faster than a cache probe costs.
  const bool use_cache = piece.size() >= kMinCachedBytes;
  const uint64_t h = use_cache ? BpeCache::hash(piece) : 0;
  if (use_cache && cache_.lookup(piece, h, out)) return;
  thread_local std::vector<int32_t> sym;
  sym.clear();
  bool last_unk = false;
  for (char c : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      sym.push_back(id);
      last_unk = false;
    } else if (unk_id_) {
      if (!(fuse_unk_ && last_unk)) sym.push_back(*unk_id_);
      last_unk = true;
    }
  }
  merge_word(sym);
  if (use_cache) cache_.insert(piece, h, sym.data(), sym.size());
  out.insert(out.end(), sym.begin(), sym.end());
  release_large_scratch(sym);
}

}  // namespace deepinfer::recipe
