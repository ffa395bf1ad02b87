// Engram before a layer (MODEL_SPEC §C.8).
#include "model/model_batch.h"

namespace deepinfer {

void Model::engram_block(int64_t layer, const Batch& batch, float* X) const {
  THROW(kUnsupported) << "Engram (layer " << layer << ") is not wired into the CPU forward yet";
}

}  // namespace deepinfer
