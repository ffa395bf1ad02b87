// WeightSource: where the model gets its parameters, by native checkpoint name
// (MODEL_SPEC §B.5). Implementations: a loaded checkpoint (io::WeightStore, dequantised to
// fp32) and deterministic random weights (the built-in tiny model, --dummy-weights).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/model_config.h"
#include "tensor/tensor.h"

namespace deepinfer {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Returns the tensor `name` with exactly `shape` (F32, or I32 for tid2eid); throws an
  // Error naming the tensor when it is missing or has another shape.
  virtual Tensor take(const std::string& name, const Shape& shape) = 0;
  // A tensor kept in its checkpoint format (`dtype`, e.g. F8_E4M3 Engram table codes and
  // their F8_E8M0 scales), never converted; same errors as take().
  // The default has no such tensors.
  virtual Tensor take_raw(const std::string& name, const Shape& shape, DType dtype) {
    THROW(kNotFound) << "missing tensor '" << name << "' (" << dtype_name(dtype) << " "
                     << shape_str(shape) << ")";
    return Tensor();  // not reached: THROW throws
  }
  // The Engram compressed token map (io/engram_token_map.h) that goes with this model's
  // tokenizer: `engram_token_map.bin` beside a checkpoint if it has one, else the map of the
  // shipped DeepSeek-V4 / V4.1 vocabulary (models/engram/token_map.bin; env
  // DEEPINFER_ENGRAM_TOKEN_MAP overrides both).
  virtual std::string engram_token_map_path() const;
  // Whether the source holds `name` (decides optional modules: V4's MTP-1 loads when the
  // checkpoint has mtp.0.e_proj.weight). The default holds nothing optional.
  virtual bool has(const std::string& name) const { return false; }
  // Names present in the source that nobody took (excluding drafter `mtp.*` tensors,
  // which are kept for speculative decoding).
  virtual std::vector<std::string> untaken() const = 0;
};

// Opens a checkpoint directory (config.json + safetensors, native or HF names).
std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& dir,
                                                      const ModelConfig& config);

// Deterministic random weights: each tensor is drawn from a generator seeded by
// (seed, name), so the same name always gets the same values whatever the load order.
// Scales follow the parameter's role (1/sqrt(fan_in) for projections, ~1 for norms).
// `with_mtp`: the source also holds V4's MTP-1 module (mtp.0.*), so a V4 config with
// num_nextn_predict_layers >= 1 gets a random MTP drafter; off by default (dummy checkpoints of
// real configs stay backbone-only).
std::unique_ptr<WeightSource> random_weights(const ModelConfig& config, uint64_t seed,
                                             bool with_mtp = false);

}  // namespace deepinfer
