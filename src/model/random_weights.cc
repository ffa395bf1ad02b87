// Deterministic random weights for the built-in tiny model and --dummy-weights.
#include <cmath>
#include <functional>
#include <string>

#include "base/parallel.h"
#include "model/weight_source.h"

namespace deepinfer {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class RandomWeights : public WeightSource {
 public:
  RandomWeights(const ModelConfig& config, uint64_t seed, bool with_mtp)
      : config_(config), seed_(seed), with_mtp_(with_mtp) {}

  bool has(const std::string& name) const override {
    return with_mtp_ || name.compare(0, 4, "mtp.") != 0;
  }

  Tensor take(const std::string& name, const Shape& shape) override {
    if (ends_with(name, "tid2eid")) return random_expert_table(name, shape);
    Tensor t = Tensor::empty(DType::F32, shape);
    float mean = 0.0f, std = 1.0f;
    const int64_t fan_in = shape.size() == 2 ? shape[1] : 1;
    if (name == "embed.weight") {
      std = 1.0f;
    } else if (ends_with(name, "norm.weight") || ends_with(name, "q_weight") ||
               ends_with(name, "k_weight")) {
      mean = 1.0f, std = 0.1f;
    } else if (ends_with(name, "_base") || ends_with(name, "gate.bias") ||
               ends_with(name, "gate.bias_vl")) {
      std = 0.1f;
    } else if (ends_with(name, "_scale")) {
      mean = 0.5f, std = 0.1f;
    } else if (ends_with(name, "ape")) {
      std = 0.5f;
    } else if (ends_with(name, "attn_sink")) {
      std = 1.0f;
    } else {
      std = 1.0f / std::sqrt(static_cast<float>(fan_in));
    }
    fill_normal(t.f32(), t.numel(), fnv1a(name) ^ seed_, mean, std);
    return t;
  }

  // FP8 e4m3 codes (never the NaN codes 0x7f / 0xff) or e8m0 exponents 2^-9 .. 2^-6, so
  // that a table row is at most 448 * 2^-6 = 7 in magnitude.
  Tensor take_raw(const std::string& name, const Shape& shape, DType dtype) override {
    CHECK(dtype == DType::F8_E4M3 || dtype == DType::F8_E8M0)
        << "random weights: tensor '" << name << "' of dtype " << dtype_name(dtype);
    Tensor t = Tensor::empty(dtype, shape);
    uint8_t* out = static_cast<uint8_t*>(t.raw());
    uint64_t state = fnv1a(name) ^ seed_;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const uint8_t r = static_cast<uint8_t>(splitmix64(state) >> 56);
      if (dtype == DType::F8_E8M0) {
        out[i] = static_cast<uint8_t>(127 - 9 + (r & 3));
      } else {
        out[i] = (r & 0x7f) == 0x7f ? static_cast<uint8_t>(r - 1) : r;
      }
    }
    return t;
  }

  std::vector<std::string> untaken() const override { return {}; }

 private:
  // Each block of 4096 values gets its own stream so filling can run in parallel and
  // still give the same values.
  static void fill_normal(float* out, int64_t n, uint64_t key, float mean, float std) {
    constexpr int64_t kBlock = 4096;
    parallel_for((n + kBlock - 1) / kBlock, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        uint64_t state = key + static_cast<uint64_t>(b) * 0x632be59bd9b4e019ull;
        for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); i += 2) {
          const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53;
          const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
          const double radius = std::sqrt(-2.0 * std::log(u1));
          out[i] = mean + std * static_cast<float>(radius * std::cos(2.0 * M_PI * u2));
          if (i + 1 < n) out[i + 1] = mean + std * static_cast<float>(radius * std::sin(2.0 * M_PI * u2));
        }
      }
    });
  }

  // tid2eid [V, k]: k distinct experts per token.
  Tensor random_expert_table(const std::string& name, const Shape& shape) {
    Tensor t = Tensor::empty(DType::I32, shape);
    uint64_t state = fnv1a(name) ^ seed_;
    int32_t* ids = t.data<int32_t>();
    const int64_t n_exp = config_.n_routed_experts;
    for (int64_t row = 0; row < shape[0]; ++row) {
      for (int64_t j = 0; j < shape[1]; ++j) {
        int32_t e;
        bool dup;
        do {
          e = static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(n_exp));
          dup = false;
          for (int64_t i = 0; i < j; ++i) dup |= ids[row * shape[1] + i] == e;
        } while (dup && shape[1] <= n_exp);
        ids[row * shape[1] + j] = e;
      }
    }
    return t;
  }

  ModelConfig config_;
  uint64_t seed_;
  bool with_mtp_;
};

}  // namespace

std::unique_ptr<WeightSource> random_weights(const ModelConfig& config, uint64_t seed,
                                             bool with_mtp) {
  return std::make_unique<RandomWeights>(config, seed, with_mtp);
}

}  // namespace deepinfer
