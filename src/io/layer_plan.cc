#include "io/layer_plan.h"

#include <algorithm>
#include <set>

#include "base/error.h"
#include "io/model_config.h"

namespace deepinfer {
namespace {

std::set<int64_t> checked_ids(const std::vector<int64_t>& ids, int64_t n_layers,
                              const char* key) {
  std::set<int64_t> out;
  for (int64_t id : ids) {
    CHECK(id >= 0 && id < n_layers) << "config: '" << key << "' has layer " << id
                                    << ", outside the " << n_layers << " backbone layers";
    CHECK(out.insert(id).second) << "config: '" << key << "' lists layer " << id << " twice";
  }
  return out;
}

// The latest layer j <= l with pred(j), or -1.
template <typename Pred>
int64_t latest(int64_t l, Pred pred) {
  for (int64_t j = l; j >= 0; --j) {
    if (pred(j)) return j;
  }
  return -1;
}

void plan_v4(ModelConfig* c) {
  for (int64_t l = 0; l < c->num_layers; ++l) {
    LayerPlan& p = c->plan[l];
    p.ratio = c->compress_ratios[l];
    if (p.ratio == 0) continue;
    p.owns_compressor = true;
    p.kv_from = l;
    if (p.ratio == 4) {
      p.owns_index_keys = true;
      p.own_index_compressor = true;
      p.index_keys_from = l;
      p.topk_from = l;
    }
  }
}

void plan_v41(ModelConfig* c) {
  const int64_t n = c->num_layers;
  const std::set<int64_t> kv = checked_ids(c->kv_source_layer_ids, n, "kv_source_layer_ids");
  const std::set<int64_t> index =
      checked_ids(c->index_source_layer_ids, n, "index_source_layer_ids");
  for (int64_t l = 0; l < n; ++l) {
    CHECK(c->compress_ratios[l] >= 0) << "config: 'compress_ratios' has " << c->compress_ratios[l]
                                      << " for layer " << l;
  }
  for (int64_t id : kv) {
    CHECK(c->compress_ratios[id] > 0) << "config: 'kv_source_layer_ids' has layer " << id
                                      << ", whose compress ratio is 0 (a source compresses)";
  }
  for (int64_t id : index) {
    CHECK(c->compress_ratios[id] > 0) << "config: 'index_source_layer_ids' has layer " << id
                                      << ", whose compress ratio is 0";
  }
  const int64_t cand = c->candidate_source_layer_id;
  if (cand >= 0) {
    CHECK(cand < n) << "config: 'candidate_source_layer_id' " << cand << " is outside the " << n
                    << " backbone layers";
    CHECK(index.count(cand)) << "config: 'candidate_source_layer_id' " << cand
                             << " is not in 'index_source_layer_ids' (the source scores)";
    CHECK(c->candidate_topk_blocks > 0) << "config: 'candidate_topk_blocks' must be positive "
                                           "when 'candidate_source_layer_id' is set";
    CHECK(c->candidate_block_size > 0) << "config: 'candidate_block_size' must be positive "
                                          "when 'candidate_source_layer_id' is set";
  }
  for (int64_t l = 0; l < n; ++l) {
    LayerPlan& p = c->plan[l];
    p.ratio = c->compress_ratios[l];
    if (p.ratio == 0) continue;
    p.owns_compressor = kv.count(l) != 0;
    p.kv_from = latest(l, [&](int64_t j) { return kv.count(j) != 0; });
    CHECK(p.kv_from >= 0) << "config: layer " << l << " has compress ratio " << p.ratio
                          << " but no 'kv_source_layer_ids' entry at or before it";
    CHECK(c->compress_ratios[p.kv_from] == p.ratio)
        << "config: layer " << l << " (compress ratio " << p.ratio << ") reads kv source layer "
        << p.kv_from << " of ratio " << c->compress_ratios[p.kv_from] << " ('compress_ratios')";
    p.owns_index_keys = p.owns_compressor && index.count(l) != 0;
    if (index.count(l)) {
      p.index_keys_from =
          latest(l, [&](int64_t j) { return kv.count(j) != 0 && index.count(j) != 0; });
      // The first ratio>0 layer must be a kv source (kv_from) and an index source (the
      // topk_from of the layers after it), so every index source has a key owner.
      ICHECK(p.index_keys_from >= 0) << "layer " << l;
      CHECK(p.index_keys_from == p.kv_from)
          << "config: index source layer " << l << " would score the index keys of layer "
          << p.index_keys_from << " but attend the entries of layer " << p.kv_from
          << " ('kv_source_layer_ids' / 'index_source_layer_ids')";
      p.topk_from = l;
      p.candidate_source = l == cand;
      if (cand >= 0 && cand < l) {
        CHECK(c->compress_ratios[cand] == p.ratio)
            << "config: index source layer " << l << " uses the candidates of layer " << cand
            << " of another compress ratio ('candidate_source_layer_id')";
        p.candidates_from = cand;
      }
    } else {
      p.topk_from = latest(l, [&](int64_t j) { return index.count(j) != 0; });
      CHECK(p.topk_from >= 0) << "config: layer " << l << " has compress ratio " << p.ratio
                              << " but no 'index_source_layer_ids' entry at or before it";
      CHECK(c->compress_ratios[p.topk_from] == p.ratio)
          << "config: layer " << l << " reuses the top-k of layer " << p.topk_from
          << " of another compress ratio ('compress_ratios')";
      CHECK(c->plan[p.topk_from].index_keys_from >= 0 &&
            c->plan[p.topk_from].kv_from == p.kv_from)
          << "config: layer " << l << " reuses the top-k of layer " << p.topk_from
          << ", which selects from another kv source ('kv_source_layer_ids')";
    }
  }
  const std::set<int64_t> engram = checked_ids(c->engram.layer_ids, n, "engram_layer_ids");
  for (int64_t id : engram) c->plan[id].engram = true;
}

}  // namespace

void derive_layer_plan(ModelConfig* c) {
  ICHECK(static_cast<int64_t>(c->compress_ratios.size()) == c->num_layers);
  c->plan.assign(c->num_layers, LayerPlan{});
  if (c->is_v41()) {
    plan_v41(c);
  } else {
    plan_v4(c);
  }
}

std::string layer_role_name(const LayerPlan& p, int64_t layer) {
  if (p.ratio == 0) return "window";
  if (p.own_index_compressor) return "csa";
  if (p.owns_compressor && p.topk_from < 0) return "hca";
  if (p.owns_compressor) return p.candidate_source ? "source+candidates" : "source";
  if (p.scores() && p.index_keys_from != layer) return "reindex";
  return "reuse";
}

}  // namespace deepinfer
