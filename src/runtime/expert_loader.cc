#include "runtime/expert_loader.h"

#include "base/error.h"
#include "io/dequant.h"
#include "io/weight_names.h"

namespace deepinfer {
namespace {

constexpr int64_t kFp8Block = 128;  // the GPU's FP8 GEMMs read 128x128 weight blocks

std::string scale_name(const std::string& weight_name) {
  return weight_name.substr(0, weight_name.size() - std::string(".weight").size()) + ".scale";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

CheckpointExperts::CheckpointExperts(const std::string& path, const ModelConfig& config)
    : checkpoint_(Checkpoint::open(path)),
      block_n_(config.quant.weight_block_n),
      block_k_(config.quant.weight_block_k) {}

ExpertStorage CheckpointExperts::storage(int64_t layer, int64_t expert,
                                         const std::string& w) const {
  const std::string name = native_expert_name(layer, expert, w);
  const std::string sname = scale_name(name);
  if (!checkpoint_.has(name) || !checkpoint_.has(sname)) return ExpertStorage::kOther;
  const TensorInfo& wi = checkpoint_.info(name);
  const TensorInfo& si = checkpoint_.info(sname);
  if (si.dtype != DType::F8_E8M0) return ExpertStorage::kOther;
  if (wi.dtype == DType::I8 || wi.dtype == DType::U8) return ExpertStorage::kFp4;
  if (wi.dtype == DType::F8_E4M3 && block_n_ == kFp8Block && block_k_ == kFp8Block) {
    return ExpertStorage::kFp8Block;
  }
  return ExpertStorage::kOther;
}

Fp4Packed CheckpointExperts::fp4(int64_t layer, int64_t expert, const std::string& w) const {
  ICHECK(storage(layer, expert, w) == ExpertStorage::kFp4)
      << "CheckpointExperts::fp4: layer " << layer << " expert " << expert << " " << w
      << " is not stored as FP4";
  const std::string name = native_expert_name(layer, expert, w);
  return Fp4Packed{checkpoint_.tensor(name), checkpoint_.tensor(scale_name(name))};
}

std::optional<Fp8BlockWeight> CheckpointExperts::fp8(int64_t layer, int64_t expert,
                                                     const std::string& w, int64_t n, int64_t k) {
  const ExpertStorage how = storage(layer, expert, w);
  if (how == ExpertStorage::kOther) return std::nullopt;
  const std::string name = native_expert_name(layer, expert, w);
  const std::string where = "' in checkpoint '" + checkpoint_.path() + "'";
  if (how == ExpertStorage::kFp4) {
    const Fp4Packed p = fp4(layer, expert, w);
    CHECK(is_fp4_pair(p.codes, p.scale) && p.codes.size(0) == n && 2 * p.codes.size(1) == k)
        << "FP4 expert tensor '" << name << where << " is " << p.codes.str() << " with scale "
        << p.scale.str() << ", expected packed [" << n << ", " << k / 2 << "] with F8_E8M0 ["
        << n << ", " << ceil_div(k, 32) << "]";
    Fp8BlockWeight out = fp4_to_fp8_block(p.codes, p.scale, name, Fp4ToFp8Policy::kExact);
    ++n_fp4_converted_;
    return out;
  }
  Fp8BlockWeight out;
  out.weight = checkpoint_.tensor(name);
  out.scale = checkpoint_.tensor(scale_name(name));
  const Shape grid{ceil_div(n, kFp8Block), ceil_div(k, kFp8Block)};
  CHECK(out.weight.shape() == (Shape{n, k}) && out.scale.shape() == grid)
      << "FP8 expert tensor '" << name << where << " is " << out.weight.str() << " with scale "
      << out.scale.str() << ", expected [" << n << ", " << k << "] with F8_E8M0"
      << shape_str(grid);
  const auto* s = static_cast<const uint8_t*>(out.scale.raw());
  for (int64_t i = 0; i < out.scale.numel(); ++i) {
    CHECK(s[i] != 255) << "scale of FP8 expert tensor '" << name << where << " at [" << i / grid[1]
                       << ", " << i % grid[1] << "] is the e8m0 NaN code 255";
  }
  ++n_fp8_as_stored_;
  return out;
}

}  // namespace deepinfer
