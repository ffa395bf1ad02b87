// CPU emulation of GpuModel's FP8 activations, for tests: while an Fp8ActivationEmulation is
// active, every linear_ref (ops/linear/linear.h) whose weight is one of GpuModel's FP8
// projections quantises its input first, per row in 1 x b blocks along K (b =
// fp8_weight_block(cfg): 128, V4.1 32), as the GPU's
// act_quant does before each block-scaled FP8 GEMM (fp8_roundtrip of ops/quant/qat.h: the
// values act_quant_ref's codes times scales hold). Every other linear_ref (the router gate,
// the indexer's weights_proj, the mHC mixes: fp32 on the GPU too) runs as is. With the same
// FP8-rounded weights (GpuModel::fp8_round_trip), a CPU Model under this emulation computes
// what the GPU's FP8 path computes, up to fp32 summation order and the roundings that order
// tips; without it, the CPU differs from the GPU by the whole activation quantisation noise.
//
// The FP8 projections are those GpuModel uploads in FP8 (runtime/gpu_model.cc, gpu_mtp.cc)
// and fp8_round_trip rounds: the head; per layer wq_a, wq_b, wkv, each o-group of wo_a, wo_b,
// the compressors' wkv / wgate, the indexer's wq_b and compressor, routed and shared experts;
// the MTP block's e_proj, h_proj and the same block projections and experts.
//
// Mechanism: the test executable links with -Wl,--wrap for linear_ref's symbol
// (tests/runtime/CMakeLists.txt), so the model library's calls reach the wrapper in
// fp8_act_emulation.cc, which forwards to the real linear_ref. One emulation active at a
// time; thread-safe while active (read-only lookups, atomic counters).
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_map>

#include <vector>

#include "io/model_config.h"
#include "model/weights.h"

namespace deepinfer::testing {

class Fp8ActivationEmulation {
 public:
  // The FP8 projections of `w` (pointers into its tensors: keep the tensors alive; a Model
  // constructed from std::move(w) keeps them).
  Fp8ActivationEmulation(const ModelConfig& cfg, const ModelWeights& w);
  ~Fp8ActivationEmulation();
  Fp8ActivationEmulation(const Fp8ActivationEmulation&) = delete;
  Fp8ActivationEmulation& operator=(const Fp8ActivationEmulation&) = delete;

  // Turns the emulation on / off (off at construction). Only one may be on.
  void set_active(bool on);
  // seed != 0: before the quantisation, move every input value `ulps` fp32 ulps up or down (a
  // hash of seed, value and index picks), a stand-in for the GPU's fp32 arithmetic differing
  // from the CPU's in the last bits: which roundings such differences tip, and what that does
  // downstream, is what the GPU vs this emulation can show. 0 (default): off.
  void set_jitter(uint32_t seed, int ulps = 1) {
    jitter_ = seed;
    jitter_ulps_ = ulps;
  }
  // linear_ref calls since construction whose input was quantised / left fp32.
  int64_t quantised_calls() const { return quantised_; }
  int64_t plain_calls() const { return plain_; }
  // FP8 projections of the model, and how many of them a quantised call has used.
  int64_t fp8_projections() const { return static_cast<int64_t>(fp8_.size()); }
  int64_t projections_used() const;

  // The wrapper's hook: true (and x quantised into `xq`) when w is an FP8 projection.
  bool maybe_quantise(const float* x, int64_t m, int64_t k, const float* w, std::vector<float>& xq);

 private:
  struct Projection {
    int64_t k = 0;      // its K
    size_t index = 0;   // into used_
  };
  std::unordered_map<const float*, Projection> fp8_;  // FP8 weight -> its K
  std::vector<std::atomic<uint8_t>> used_;
  int64_t block_ = 128;  // fp8_weight_block(cfg)
  uint32_t jitter_ = 0;
  int jitter_ulps_ = 1;
  std::atomic<int64_t> quantised_{0}, plain_{0};
};

// RAII: the emulation on for a scope.
class EmulationScope {
 public:
  explicit EmulationScope(Fp8ActivationEmulation* e) : e_(e) {
    if (e_ != nullptr) e_->set_active(true);
  }
  ~EmulationScope() {
    if (e_ != nullptr) e_->set_active(false);
  }
  EmulationScope(const EmulationScope&) = delete;
  EmulationScope& operator=(const EmulationScope&) = delete;

 private:
  Fp8ActivationEmulation* e_;
};

}  // namespace deepinfer::testing
