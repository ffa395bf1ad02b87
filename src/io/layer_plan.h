// LayerPlan: what one backbone layer owns and which layers' state it reads, derived once
// from the config (DESIGN.md §1a; MODEL_SPEC §A.3-A.6 for V4, §C.6-C.7 for V4.1). The CPU
// forward, the loader and the state planners read the plan instead of the model type.
//
//   V4:   ratio 0 window only; ratio 4 owns a compressor and an indexer (its own index
//         compressor) and selects its own top-k; ratio 128 owns a compressor and attends
//         every visible entry.
//   V4.1: ratio 0 window only; a KV source (ratio 2 or 1) owns the compressor and, when it
//         is also an index source, the index keys (from its pre-RoPE latent); an index
//         source scores the index keys of the latest KV+index source at or before it
//         (a "reindex" layer when that is another layer), inside the candidate source's
//         blocks when the candidate source precedes it; every other ratio>0 layer reuses
//         the latest KV source's entries and the latest index source's top-k.
#pragma once

#include <cstdint>
#include <string>

namespace deepinfer {

struct ModelConfig;

struct LayerPlan {
  int64_t ratio = 0;              // tokens per compressed entry of the cache it reads; 0: window only
  bool owns_compressor = false;   // computes and stores compressed entries
  int64_t kv_from = -1;           // layer whose compressed entries it attends (-1: none)
  bool owns_index_keys = false;   // computes and stores index keys
  bool own_index_compressor = false;  // V4: index keys from a separate gated compressor
  int64_t index_keys_from = -1;   // layer whose index keys it scores (-1: it does not score)
  int64_t topk_from = -1;         // layer whose top-k it attends (itself when it scores;
                                  // -1 with kv_from >= 0: every visible entry)
  bool candidate_source = false;  // publishes candidate blocks from its scores
  int64_t candidates_from = -1;   // scores only inside this layer's candidate blocks
  bool engram = false;            // Engram updates the streams before this layer

  bool scores() const { return index_keys_from >= 0; }
  bool operator==(const LayerPlan&) const = default;
};

// Fills config->plan (one entry per backbone layer) and checks the sharing structure;
// throws kInvalidInput naming the key (e.g. "'kv_source_layer_ids' ...") when a layer
// would read state nobody writes, a source has ratio 0, ratios of a reader and its source
// differ, or an id is out of range.
void derive_layer_plan(ModelConfig* config);

// "window", "source", "source+candidates", "reindex", "reuse", "csa", "hca": for logs/tests.
std::string layer_role_name(const LayerPlan& plan, int64_t layer);

}  // namespace deepinfer
