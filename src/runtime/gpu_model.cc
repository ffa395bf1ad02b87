// GpuModel: construction (weights uploaded from host tensors or generated on the device,
// activation buffers, state pools). Sequences and the forward: gpu_forward.cc; blocks:
// gpu_attention.cc, gpu_moe.cc.
#include "runtime/gpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "base/error.h"
#include "base/logging.h"
#include "cuda/cuda_check.h"
#include "io/config_parser.h"
#include "io/dequant.h"
#include "io/fp4_to_fp8.h"
#include "io/weight_names.h"
#include "model/rope_config.h"
#include "model/weight_source.h"
#include "ops/gemm/gemm.h"
#include "ops/kv_cache/kv_cache_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/moe/moe_w4a8.h"
#include "ops/rope/rope.h"
#include "runtime/gpu_kernels.h"
#include "runtime/gpu_model_impl.h"
#include "runtime/gpu_weight_stream.h"

namespace deepinfer {
namespace {

constexpr int64_t kExpertRowAlign = 64;  // keeps every per-expert GEMM operand 256-byte aligned

float proj_std(int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

// RMS of the e2m1 values of fill_random_e4m3's bytes read as FP4 nibbles (the e4m3 codes of
// uniform values in [-448, 448): high nibbles are mostly +-4 / +-6), for dummy W4A8 experts.
constexpr double kDummyFp4Rms = 4.27;

const char* const kExpertMats[3] = {"w1", "w3", "w2"};

}  // namespace

const char* expert_format_name(ExpertFormat format) {
  switch (format) {
    case ExpertFormat::kAuto: return "auto";
    case ExpertFormat::kFp8: return "fp8";
    case ExpertFormat::kW4a8: return "w4a8";
  }
  return "?";
}

ExpertFormat parse_expert_format(const std::string& name) {
  if (name == "auto") return ExpertFormat::kAuto;
  if (name == "fp8") return ExpertFormat::kFp8;
  if (name == "w4a8") return ExpertFormat::kW4a8;
  THROW(kInvalidInput) << "expert format '" << name << "' (auto, fp8 or w4a8)";
}

void* GpuModel::Impl::raw_alloc(int64_t bytes) {
  owned.emplace_back(static_cast<size_t>(std::max<int64_t>(bytes, 16)));
  return owned.back().data();
}

float* GpuModel::Impl::state_alloc(int64_t n_floats) {
  float* p = alloc(n_floats);
  state_pools.emplace_back(p, n_floats);
  return p;
}

const float* GpuModel::Impl::f32(const float* host, int64_t n, float mean, float std) {
  float* d = alloc(n);
  if (GpuWeightStream* ws = GpuWeightStream::owner_of(host)) {  // a streamed checkpoint tensor
    ws->upload_f32(host, n, d, ctx.stream());
  } else if (host != nullptr) {
    CUDA_CHECK(cudaMemcpy(d, host, n * sizeof(float), cudaMemcpyHostToDevice));
  } else {
    fill_uniform_f32(ctx.stream(), d, n, mean, std, seed * 1000003 + ++fill_counter);
  }
  weight_bytes_total += 4.0 * n;
  return d;
}

const float* GpuModel::Impl::f32(const Tensor* t, int64_t n, float mean, float std) {
  if (t == nullptr) return f32(static_cast<const float*>(nullptr), n, mean, std);
  ICHECK(t->defined() && (t->dtype() == DType::F32 || t->dtype() == DType::I32) && t->numel() == n)
      << "GpuModel: tensor " << t->str() << " where " << n << " fp32 values were expected";
  return f32(static_cast<const float*>(t->raw()), n, mean, std);
}

DeviceLinear GpuModel::Impl::linear(const float* host, int64_t n, int64_t k, float std,
                                    bool force_f32) {
  DeviceLinear w;
  w.n = n;
  w.k = k;
  if (!fp8() || force_f32) {
    w.w32 = f32(host, n * k, 0.0f, std);
    return w;
  }
  CHECK_KIND(kUnsupported, k % 16 == 0)
      << "GpuModel kFp8: a projection with K=" << k << " (the FP8 GEMMs need K % 16 == 0)";
  w.block = fp8_weight_block(cfg);
  auto* q = static_cast<uint8_t*>(raw_alloc(n * k));
  float* s = alloc(fp8_weight_scale_count(n, k, w.block));
  if (host != nullptr) {
    upload_fp8(host, n, k, q, s);
  } else {
    fill_fp8(q, s, 1, n, k, std);
  }
  w.q = q;
  w.s = s;
  weight_bytes_total += w.bytes();
  return w;
}

void GpuModel::Impl::upload_fp8(const float* host, int64_t n, int64_t k, uint8_t* q, float* s) {
  const int64_t b = fp8_weight_block(cfg);
  if (GpuWeightStream* ws = GpuWeightStream::owner_of(host)) {  // a streamed checkpoint tensor
    ws->upload_fp8(host, n, k, q, s, ctx.stream(), b);
    return;
  }
  std::vector<float> copy(host, host + n * k);
  std::vector<uint8_t> codes(n * k);
  std::vector<float> grid(ceil_div64(n, b) * ceil_div64(k, b));
  quantize_fp8_blocks(copy.data(), n, k, codes.data(), grid.data(), false, b);
  const std::vector<float> sw = expand_weight_scales_f32(grid.data(), n, k, b);
  CUDA_CHECK(cudaMemcpy(q, codes.data(), n * k, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(s, sw.data(), sw.size() * sizeof(float), cudaMemcpyHostToDevice));
}

void GpuModel::Impl::fill_fp8(uint8_t* q, float* s, int64_t count, int64_t n, int64_t k,
                              float std) {
  // Dummy weights (no host weights; the benchmark's), not a quantiser: codes uniform in
  // [-448, 448) times one constant scale (not a power of two), so std of the values = std.
  const int64_t n_scales = count * fp8_weight_scale_count(n, k, fp8_weight_block(cfg));
  fill_random_e4m3(ctx.stream(), q, count * n * k, seed * 1000003 + ++fill_counter);
  fill_const_f32(ctx.stream(), s, n_scales, std * 1.7320508f / 448.0f);
}

std::vector<DeviceLinear> GpuModel::Impl::expert_stack(const std::vector<const Tensor*>& host,
                                                       int64_t n_experts, int64_t n, int64_t k,
                                                       float std, MoeStack* stack,
                                                       CheckpointExperts* ckpt, int64_t layer,
                                                       const char* w) {
  ICHECK(host.empty() || static_cast<int64_t>(host.size()) == n_experts);
  for (const Tensor* t : host) {
    ICHECK(t->defined() && t->dtype() == DType::F32 && t->numel() == n * k)
        << "GpuModel: expert weight " << t->str() << " where [" << n << ", " << k
        << "] fp32 was expected";
  }
  std::vector<DeviceLinear> views(n_experts);
  if (!fp8()) {
    float* all = alloc(n_experts * n * k);
    if (host.empty()) fill_uniform_f32(ctx.stream(), all, n_experts * n * k, 0.0f, std,
                                       seed * 1000003 + ++fill_counter);
    for (int64_t e = 0; e < n_experts; ++e) {
      if (GpuWeightStream* ws = host.empty() ? nullptr : GpuWeightStream::owner_of(host[e]->raw())) {
        ws->upload_f32(host[e]->raw(), n * k, all + e * n * k, ctx.stream());
      } else if (!host.empty()) {
        CUDA_CHECK(cudaMemcpy(all + e * n * k, host[e]->f32(), n * k * sizeof(float),
                              cudaMemcpyHostToDevice));
      }
      views[e] = DeviceLinear{all + e * n * k, nullptr, nullptr, n, k};
      weight_bytes_total += views[e].bytes();
    }
    *stack = MoeStack{nullptr, nullptr, all};
    return views;
  }
  CHECK_KIND(kUnsupported, k % 16 == 0)
      << "GpuModel kFp8: an expert projection with K=" << k << " (the FP8 GEMMs need K % 16 == 0)";
  // 128x128 blocks only (the grouped MoE kernels and CheckpointExperts' FP4 -> FP8 are built
  // for them; V4.1's FP8 experts are refused in the constructor, fp8_weight_block).
  ICHECK(fp8_weight_block(cfg) == kFp8GemmBlock) << "GpuModel: FP8 routed experts off the 128 grid";
  const int64_t sn = ceil_div64(n, kFp8GemmBlock) * fp8_weight_scale_ld(k);
  auto* q = static_cast<uint8_t*>(raw_alloc(n_experts * n * k));
  float* s = alloc(n_experts * sn);
  if (host.empty()) fill_fp8(q, s, n_experts, n, k, std);
  for (int64_t e = 0; e < n_experts; ++e) {
    // Quantised in the checkpoint: its codes (FP4 converted exactly) and power-of-two scales;
    // otherwise the host fp32 values, re-quantised (expert_format kFp8; kW4a8 takes the FP4
    // codes as stored in expert_stack_w4a8).
    std::optional<Fp8BlockWeight> stored;
    if (!host.empty() && ckpt != nullptr) stored = ckpt->fp8(layer, e, w, n, k);
    if (stored) {
      const std::vector<float> sw =
          expand_weight_scales_ue8m0(static_cast<const uint8_t*>(stored->scale.raw()), n, k);
      ICHECK(static_cast<int64_t>(sw.size()) == sn);
      CUDA_CHECK(cudaMemcpy(q + e * n * k, stored->weight.raw(), n * k, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(s + e * sn, sw.data(), sn * sizeof(float), cudaMemcpyHostToDevice));
    } else if (!host.empty()) {
      upload_fp8(host[e]->f32(), n, k, q + e * n * k, s + e * sn);
    }
    views[e] = DeviceLinear{nullptr, q + e * n * k, s + e * sn, n, k};
    weight_bytes_total += views[e].bytes();
  }
  stack->q = q;
  stack->s = s;
  return views;
}

void GpuModel::Impl::expert_stack_w4a8(const std::vector<const Tensor*>& host, int64_t n_experts,
                                       int64_t n, int64_t k, float std, CheckpointExperts* ckpt,
                                       int64_t layer, const char* w, const uint8_t** codes,
                                       const uint8_t** scales) {
  ICHECK(host.empty() || static_cast<int64_t>(host.size()) == n_experts);
  const int64_t cb = w4a8_code_bytes(n, k), sb = w4a8_scale_bytes(n, k);
  auto* q = static_cast<uint8_t*>(raw_alloc(n_experts * cb));
  auto* s = static_cast<uint8_t*>(raw_alloc(n_experts * sb));
  if (host.empty()) {
    // Dummy weights: random nibbles, one power-of-two scale for a spread of about std. Codes
    // of the K padding (k not a multiple of 128) are random too; they meet zero activations.
    fill_random_e4m3(ctx.stream(), q, n_experts * cb, seed * 1000003 + ++fill_counter);
    const long e2 = std::lround(std::log2(static_cast<double>(std) / kDummyFp4Rms));
    CUDA_CHECK(cudaMemsetAsync(s, static_cast<int>(std::clamp<long>(127 + e2, 1, 254)),
                               static_cast<size_t>(n_experts * sb), ctx.stream()));
  }
  std::vector<uint8_t> packed_codes, packed_scales;  // one expert (checkpoint path)
  for (int64_t e = 0; e < static_cast<int64_t>(host.size()); ++e) {
    const void* placeholder = host[e]->raw();
    if (GpuWeightStream* ws = GpuWeightStream::owner_of(placeholder)) {
      ws->upload_w4a8(placeholder, n, k, q + e * cb, s + e * sb, ctx.stream());
      continue;
    }
    ICHECK(ckpt != nullptr) << "GpuModel kW4a8: no source of FP4 codes (resolve_expert_format)";
    const std::string name = native_expert_name(layer, e, w);
    const std::string where = "' in checkpoint '" + ckpt->path() + "'";
    CHECK_KIND(kUnsupported, ckpt->storage(layer, e, w) == ExpertStorage::kFp4)
        << "expert_format w4a8: routed expert tensor '" << name << where << " is not stored as FP4";
    const Fp4Packed p = ckpt->fp4(layer, e, w);
    CHECK(is_fp4_pair(p.codes, p.scale) && p.codes.size(0) == n && 2 * p.codes.size(1) == k &&
          p.scale.numel() == n * (k / 32))
        << "FP4 expert tensor '" << name << where << " is " << p.codes.str() << " with scale "
        << p.scale.str() << ", expected packed [" << n << ", " << k / 2 << "] with F8_E8M0 [" << n
        << ", " << k / 32 << "]";
    const auto* sc = static_cast<const uint8_t*>(p.scale.raw());
    check_fp4_scales(sc, n, k / 32, 0, name + "' in checkpoint '" + ckpt->path());
    packed_codes.resize(static_cast<size_t>(cb));
    packed_scales.resize(static_cast<size_t>(sb));
    w4a8_pack(static_cast<const uint8_t*>(p.codes.raw()), sc, n, k, packed_codes.data(),
              packed_scales.data());
    CUDA_CHECK(cudaMemcpy(q + e * cb, packed_codes.data(), cb, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s + e * sb, packed_scales.data(), sb, cudaMemcpyHostToDevice));
  }
  weight_bytes_total += static_cast<double>(n_experts * (cb + sb));
  *codes = q;
  *scales = s;
}

void GpuModel::Impl::resolve_expert_format(const ModelWeights* hw, GpuWeightStream* streamed,
                                           CheckpointExperts* ckpt) {
  const int64_t L = cfg.num_layers, E = cfg.n_routed_experts;
  const int64_t D = cfg.hidden_size, I = cfg.moe_intermediate_size;
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  // The first backbone expert matrix not stored FP4 ("" when all are), from the weights' source.
  auto non_fp4 = [&]() -> std::string {
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t e = 0; e < E; ++e) {
        for (const char* w : kExpertMats) {
          bool fp4 = false;
          if (streamed != nullptr) {
            const ExpertWeightsT& x = hw->layers[l].moe.experts[e];
            const Tensor& t = w[1] == '1' ? x.w1 : w[1] == '3' ? x.w3 : x.w2;
            const StoredTensor* st = streamed->stored_tensor(t.raw());
            fp4 = st != nullptr && st->kind == StoredTensor::Kind::kFp4;
          } else {
            fp4 = ckpt->storage(l, e, w) == ExpertStorage::kFp4;
          }
          if (!fp4) return native_expert_name(l, e, w);
        }
      }
    }
    return "";
  };
  const bool fp4_source = hw != nullptr && (streamed != nullptr || ckpt != nullptr);
  const bool shapes_ok = D % 32 == 0 && I % 32 == 0;
  if (opt.expert_format == ExpertFormat::kAuto) {
    const bool w4a8_ok = fp8() && grouped_moe && major == 9 && shapes_ok && fp4_source && E > 0 &&
                         non_fp4().empty();
    opt.expert_format = w4a8_ok ? ExpertFormat::kW4a8 : ExpertFormat::kFp8;
  }
  if (!w4a8()) return;
  CHECK_KIND(kUnsupported, major == 9)
      << "GpuModel: expert_format w4a8 needs an sm_90 device (the W4A8 kernel is built for "
         "sm_90a); this one is sm_" << major << "x";
  CHECK_KIND(kUnsupported, grouped_moe)
      << "GpuModel: expert_format w4a8 needs moe_impl kGrouped (the per-expert plain path runs "
         "weight_format's experts; compare with expert_format fp8)";
  CHECK_KIND(kUnsupported, shapes_ok)
      << "GpuModel: expert_format w4a8 needs hidden_size " << D << " and moe_intermediate_size "
      << I << " to be multiples of 32 (FP4 scale blocks)";
  if (hw != nullptr) {
    CHECK_KIND(kUnsupported, fp4_source)
        << "GpuModel: expert_format w4a8 needs the checkpoint's FP4 codes (streamed weights, or "
           "host weights with expert_checkpoint)";
    const std::string bad = non_fp4();
    CHECK_KIND(kUnsupported, bad.empty())
        << "GpuModel: expert_format w4a8: routed expert tensor '" << bad << "' is not stored as FP4 "
        << "in checkpoint '" << (streamed != nullptr ? streamed->streamed().path() : ckpt->path())
        << "'; use expert_format fp8";
  }
  w4a8_act_block = cfg.is_v41() ? 32 : 128;  // MODEL_SPEC §B.4: b_a
  w4a8_rows = std::min<int64_t>(opt.max_batch_tokens, kW4a8MaxTokens);
  expert_count_pieces = ceil_div64(opt.max_batch_tokens, w4a8_rows);
}

DeviceLinear GpuModel::Impl::linear(const Tensor* t, int64_t n, int64_t k, float std,
                                    bool force_f32) {
  if (t == nullptr) return linear(static_cast<const float*>(nullptr), n, k, std, force_f32);
  ICHECK(t->defined() && t->dtype() == DType::F32 && t->numel() == n * k)
      << "GpuModel: weight " << t->str() << " where [" << n << ", " << k << "] fp32 was expected";
  return linear(t->f32(), n, k, std, force_f32);
}

GpuModel::Impl::Impl(ModelConfig config, const ModelWeights* hw, uint64_t seed_,
                     const GpuModelOptions& options)
    : cfg(std::move(config)), opt(options), seed(seed_) {
  complete_model_config(&cfg);  // traits and the layer plan, as Model does
  CHECK(opt.max_sequences > 0 && opt.max_context > 0 && opt.max_batch_tokens > 0 &&
        opt.max_out_rows >= 0)
      << "GpuModel: max_sequences, max_context and max_batch_tokens must be positive";
  if (opt.max_out_rows == 0) opt.max_out_rows = opt.max_batch_tokens;
  CHECK(opt.kv_block_size > 0 && opt.kv_block_size % 8 == 0)
      << "GpuModel: kv_block_size " << opt.kv_block_size << " (a positive multiple of 8)";
  CHECK(opt.kv_window_block_size >= 0 && opt.kv_window_block_size % 8 == 0)
      << "GpuModel: kv_window_block_size " << opt.kv_window_block_size
      << " (0 for kv_block_size, or a positive multiple of 8)";
  CHECK(opt.max_rollback >= 0) << "GpuModel: max_rollback " << opt.max_rollback << " (>= 0)";
  CHECK_KIND(kUnsupported, opt.max_rollback == 0 || opt.paged_kv)
      << "GpuModel: max_rollback needs paged_kv (the plain path's window ring holds exactly W positions)";
  // V4.1 on the GPU (issue 14): fp32 weights, or weight_format fp8 with 32x32-block FP8 dense
  // projections (fp8_weight_block) and FP4 routed experts as stored (expert_format w4a8,
  // checked after resolve_expert_format); reference / official numerics, the fp32
  // per-sequence state or the paged cache in bf16 or fp8 (fp8: the 528 / 288 / 68-byte
  // formats, runtime/gpu_state_plan.h choose_cache_formats); the rest is refused here by name.
  if (cfg.is_v41()) {
    CHECK_KIND(kUnsupported, opt.weight_format == WeightFormat::kF32 || !opt.dspark)
        << "GpuModel: DeepSeek-V4.1 DSpark with weight_format fp8 is not supported yet (its "
           "drafter's FP8 activations are 1x128); use weight_format fp32";
    CHECK_KIND(kUnsupported, !cfg.engram.enabled() || hw != nullptr)
        << "GpuModel: Engram (engram_layer_ids) needs host weights (its tables), not dummy ones";
  }
  plan = plan_gpu_state(cfg, opt);
  if (plan.paged) {
    opt.kv_cache_dtype = plan.dtype;
    plan.kv.validate();
    plan.cmp_kv.validate();
    plan.idx.validate();
    LOG(INFO) << "GpuModel: paged " << kv_cache_dtype_name(plan.dtype) << " state: window "
              << kv_entry_format_name(plan.kv.fp8_format()) << " " << plan.kv.entry_bytes()
              << " B, compressed " << kv_entry_format_name(plan.cmp_kv.fp8_format()) << " "
              << plan.cmp_kv.entry_bytes() << " B, index keys "
              << (plan.idx_paged ? std::to_string(plan.idx.entry_bytes()) + " B paged" : std::string("fp32"))
              << "; " << paged_bytes_per_token(cfg, plan) << " B per context token, "
              << plan.state_bytes_per_sequence() << " B per sequence of " << opt.max_context
              << " tokens (blocks of " << plan.block_size << "; " << plan.window.n_blocks
              << " window blocks of " << plan.window_block_size() << ")";
  } else {
    opt.kv_cache_dtype.reset();
  }
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, T = opt.max_batch_tokens;
  // S: state slots; with cuda_graphs one more, scratch_slot, for the padding rows of a bucket.
  const int64_t S = opt.max_sequences + (opt.cuda_graphs ? 1 : 0);
  const int64_t hc = cfg.hc_mult, L = cfg.num_layers, V = cfg.vocab_size;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim, E = cfg.n_routed_experts;
  const int64_t k = cfg.n_experts_per_tok, I = cfg.moe_intermediate_size, Rq = cfg.q_lora_rank;
  const int64_t Is = I * cfg.n_shared_experts, G = cfg.o_groups, Ro = cfg.o_lora_rank;
  const int64_t R = opt.max_out_rows, nmix = (2 + hc) * hc;
  CHECK_KIND(kUnsupported, G > 0 && (H * d) % G == 0) << "GpuModel: o_groups " << G;
  const int64_t gw = H * d / G;
  const bool host = hw != nullptr;
  if (opt.moe_impl == MoeImpl::kAuto) opt.moe_impl = MoeImpl::kGrouped;
  grouped_moe = opt.moe_impl == MoeImpl::kGrouped;
  if (opt.cuda_graphs) {
    CHECK_KIND(kUnsupported, grouped_moe)
        << "GpuModel: cuda_graphs needs moe_impl kGrouped (kPerExpert reads the routing back to "
           "the host inside the forward)";
    const int64_t cap = std::min({T, opt.max_out_rows, opt.max_sequences});
    std::vector<int64_t>& b = opt.graph_buckets;
    if (b.empty()) {
      for (int64_t v = 1; v <= 256; v *= 2) b.push_back(v);
    }
    for (int64_t& v : b) {
      CHECK(v > 0) << "GpuModel: graph bucket " << v << " must be positive";
      v = std::min(v, cap);
    }
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    scratch_slot = opt.max_sequences;
    graphs_on = true;
  }

  embed = f32(host ? &hw->embed : nullptr, V * D, 0.0f, 1.0f);
  weight_bytes_total -= 4.0 * V * D;  // only the gathered rows are read
  head = linear(host ? &hw->head : nullptr, V, D, proj_std(D));
  norm = f32(host ? &hw->norm : nullptr, D, 1.0f, 0.1f);
  const bool single_pass = cfg.traits.single_pass_mhc;  // no hc_head (MODEL_SPEC §C.3)
  if (!single_pass) {
    hc_head = {f32(host ? &hw->hc_head.fn : nullptr, hc * hc * D, 0.0f, proj_std(hc * D)),
               f32(host ? &hw->hc_head.base : nullptr, hc, 0.0f, 0.1f),
               f32(host ? &hw->hc_head.scale : nullptr, 1, 0.5f, 0.1f)};
  }
  layers.resize(L);
  states.resize(L);
  bool any_indexer = false, any_latent_keys = false;
  int64_t min_score_ratio = 0;  // smallest ratio of a scoring layer
  // Streamed checkpoint weights (runtime/gpu_weight_stream.h): the stream converts every
  // tensor itself, routed experts included (as CheckpointExperts would).
  GpuWeightStream* streamed = host ? GpuWeightStream::owner_of(hw->embed.raw()) : nullptr;
  std::unique_ptr<CheckpointExperts> ckpt;
  if ((fp8() || opt.expert_format == ExpertFormat::kW4a8) && host && !streamed &&
      !opt.expert_checkpoint.empty()) {
    ckpt = std::make_unique<CheckpointExperts>(opt.expert_checkpoint, cfg);
  }
  resolve_expert_format(hw, streamed, ckpt.get());
  CHECK_KIND(kUnsupported, !fp8() || w4a8() || fp8_weight_block(cfg) == kFp8GemmBlock || E == 0)
      << "GpuModel: DeepSeek-V4.1 routed experts in expert_format fp8 are not supported (the "
         "FP8 expert kernels are 128x128-block; V4.1's are 32x32); use expert_format w4a8 (FP4 "
         "experts as stored: streamed weights, or host weights with expert_checkpoint)";
  for (int64_t l = 0; l < L; ++l) {
    const LayerWeights* lw = host ? &hw->layers[l] : nullptr;
    GpuLayerW& g = layers[l];
    const LayerPlan& lp = cfg.plan[l];
    const int64_t ratio = cfg.compress_ratio(l);
    auto hc_w = [&](const HcWeightsT* h) {
      return GpuHcW{f32(h ? &h->fn : nullptr, nmix * hc * D, 0.0f, proj_std(hc * D)),
                    f32(h ? &h->base : nullptr, nmix, 0.0f, 0.1f),
                    f32(h ? &h->scale : nullptr, 3, 0.5f, 0.1f)};
    };
    g.attn_norm = f32(host ? &lw->attn_norm : nullptr, D, 1.0f, 0.1f);
    g.ffn_norm = f32(host ? &lw->ffn_norm : nullptr, D, 1.0f, 0.1f);
    g.hc_attn = hc_w(host ? &lw->hc_attn : nullptr);
    g.hc_ffn = hc_w(host ? &lw->hc_ffn : nullptr);
    const AttentionWeights* a = host ? &lw->attn : nullptr;
    g.wq_a = linear(a ? &a->wq_a : nullptr, Rq, D, proj_std(D));
    g.q_norm = f32(a ? &a->q_norm : nullptr, Rq, 1.0f, 0.1f);
    g.wq_b = linear(a ? &a->wq_b : nullptr, H * d, Rq, proj_std(Rq));
    g.wkv = linear(a ? &a->wkv : nullptr, d, D, proj_std(D));
    g.kv_norm = f32(a ? &a->kv_norm : nullptr, d, 1.0f, 0.1f);
    if (a != nullptr) {
      ICHECK(a->wo_a.numel() == G * Ro * gw) << "GpuModel: wo_a " << a->wo_a.str();
    }
    for (int64_t grp = 0; grp < G; ++grp) {
      g.wo_a.push_back(linear(a ? a->wo_a.f32() + grp * Ro * gw : nullptr, Ro, gw, proj_std(gw)));
    }
    g.wo_b = linear(a ? &a->wo_b : nullptr, D, G * Ro, proj_std(G * Ro));
    g.sink = f32(a ? &a->sink : nullptr, H, 0.0f, 1.0f);
    // What the layer owns and reads: its LayerPlan (io/layer_plan.h), as the CPU forward.
    g.has_compressor = lp.owns_compressor;
    g.has_indexer = host ? a->has_indexer : lp.scores() && HI > 0;
    ICHECK(!host || (a->has_compressor == g.has_compressor && (!g.has_indexer || lp.scores())))
        << "GpuModel: layer " << l << " weights disagree with its plan";
    // A gate for ratios > 1 (V4.1 ratio 1 has none: one latent per token), a position bias
    // when the family has one (V4).
    auto cmp_w = [&](const CompressorWeights* c, int64_t m, int64_t width) {
      const int64_t cw = (m == 4 ? 2 : 1) * width;
      GpuCompressorW f;
      f.wkv = linear(c ? &c->wkv : nullptr, cw, D, proj_std(D));
      if (c ? c->wgate.defined() : m > 1) f.wgate = linear(c ? &c->wgate : nullptr, cw, D, proj_std(D));
      if (c ? c->ape.defined() : cfg.traits.compressor_ape) {
        f.ape = f32(c ? &c->ape : nullptr, m * cw, 0.0f, 0.5f);
      }
      f.norm = f32(c ? &c->norm : nullptr, width, 1.0f, 0.1f);
      return f;
    };
    if (g.has_compressor) g.cmp = cmp_w(a ? &a->compressor : nullptr, ratio, d);
    if (g.has_indexer) {
      if (lp.own_index_compressor) {
        CHECK_KIND(kUnsupported, ratio == 4) << "GpuModel: indexer compressor on a ratio-" << ratio
                                             << " layer";
        g.idx_cmp = cmp_w(a ? &a->indexer.compressor : nullptr, 4, dI);
      }
      g.idx_wq_b = linear(a ? &a->indexer.wq_b : nullptr, HI * dI, Rq, proj_std(Rq));
      g.idx_wproj = linear(a ? &a->indexer.weights_proj : nullptr, HI, D, proj_std(D), true);
      any_indexer = true;
      min_score_ratio = min_score_ratio == 0 ? ratio : std::min(min_score_ratio, ratio);
    }
    const bool index_keys = lp.owns_index_keys && HI > 0;  // as plan_gpu_state
    if (index_keys && !lp.own_index_compressor) {  // V4.1: keys from the latents
      g.idx_wk = linear(a ? &a->indexer.wk : nullptr, dI, d, proj_std(d));
      g.idx_k_norm = f32(a ? &a->indexer.k_norm : nullptr, dI, 1.0f, 0.1f);
      any_latent_keys = true;
    }
    const MoeWeights* m = host ? &lw->moe : nullptr;
    g.gate = linear(m ? &m->gate : nullptr, E, D, proj_std(D), true);
    if (cfg.is_hash_layer(l)) {
      CHECK_KIND(kUnsupported, host) << "GpuModel: dummy weights with hash-routed layer " << l;
      ICHECK(m->tid2eid.numel() == V * k) << "GpuModel: tid2eid " << m->tid2eid.str();
      g.tid2eid = reinterpret_cast<const int32_t*>(f32(&m->tid2eid, V * k, 0.0f, 0.0f));
    } else if (!host || m->bias.defined()) {
      g.bias = f32(m ? &m->bias : nullptr, E, 0.0f, 0.1f);
    }
    // Routed experts stacked [E, n, k] per matrix (moe_experts_fp8_cuda's and
    // moe_experts_f32_cuda's layout); the per-expert path uses views into the same storage.
    std::vector<const Tensor*> h1, h3, h2;
    for (int64_t e = 0; host && e < E; ++e) {
      h1.push_back(&m->experts[e].w1);
      h3.push_back(&m->experts[e].w3);
      h2.push_back(&m->experts[e].w2);
    }
    // Device bytes of one expert's matrix [n, k] (codes, scales) in the resolved format.
    auto mat_bytes = [&](int64_t n, int64_t kk) -> std::pair<int64_t, int64_t> {
      if (w4a8()) return {w4a8_code_bytes(n, kk), w4a8_scale_bytes(n, kk)};
      if (fp8()) return {n * kk, 4 * ceil_div64(n, kFp8GemmBlock) * fp8_weight_scale_ld(kk)};
      return {4 * n * kk, 0};
    };
    g.expert_bytes_each = 0;
    for (const auto& [n, kk] : {std::pair{I, D}, std::pair{I, D}, std::pair{D, I}}) {
      const auto [c, sc] = mat_bytes(n, kk);
      expert_bytes.codes += E * c;
      expert_bytes.scales += E * sc;
      g.expert_bytes_each += static_cast<double>(c + sc);
    }
    if (w4a8()) {  // FP4 as stored (moe_w4a8.h); no per-expert views
      MoeW4a8Weights& x = g.experts_w4a8;
      expert_stack_w4a8(h1, E, I, D, proj_std(D), ckpt.get(), l, "w1", &x.w1, &x.s1);
      expert_stack_w4a8(h3, E, I, D, proj_std(D), ckpt.get(), l, "w3", &x.w3, &x.s3);
      expert_stack_w4a8(h2, E, D, I, proj_std(I), ckpt.get(), l, "w2", &x.w2, &x.s2);
    } else {
      MoeStack s1, s3, s2;
      g.w1 = expert_stack(h1, E, I, D, proj_std(D), &s1, ckpt.get(), l, "w1");
      g.w3 = expert_stack(h3, E, I, D, proj_std(D), &s3, ckpt.get(), l, "w3");
      g.w2 = expert_stack(h2, E, D, I, proj_std(I), &s2, ckpt.get(), l, "w2");
      g.experts = MoeExpertsFp8Weights{s1.q, s1.s, s3.q, s3.s, s2.q, s2.s};
      g.experts_f32 = MoeExpertsF32Weights{s1.f, s3.f, s2.f};
    }
    g.sw1 = linear(m ? &m->shared.w1 : nullptr, Is, D, proj_std(D));
    g.sw3 = linear(m ? &m->shared.w3 : nullptr, Is, D, proj_std(D));
    g.sw2 = linear(m ? &m->shared.w2 : nullptr, D, Is, proj_std(Is));

    // State pools.
    // (paged: the window / compressed / FP8 indexer caches in alloc_paged_state()).
    GpuLayerState& st = states[l];
    if (!plan.paged) st.ring = state_alloc(S * cfg.sliding_window * d);
    if (g.has_compressor) {
      CHECK_KIND(kUnsupported, ratio > 0) << "GpuModel: compressor on layer " << l << " of ratio 0";
      const int64_t cw = (ratio == 4 ? 2 : 1) * d;
      st.cmp_a = state_alloc(S * compressor_ring_len(ratio, opt.max_rollback) * cw);
      st.cmp_z = state_alloc(S * compressor_ring_len(ratio, opt.max_rollback) * cw);
      st.cmp_max_entries = opt.max_context / ratio;
      if (!plan.paged) st.cmp_entries = state_alloc(S * st.cmp_max_entries * d);
      if (!emit_section.count(ratio)) emit_section[ratio] = 0;
    }
    if (index_keys && lp.own_index_compressor) {
      st.idx_a = state_alloc(S * compressor_ring_len(4, opt.max_rollback) * 2 * dI);
      st.idx_z = state_alloc(S * compressor_ring_len(4, opt.max_rollback) * 2 * dI);
    }
    if (index_keys) {
      st.idx_max_entries = opt.max_context / ratio;
      if (!plan.idx_paged) st.idx_entries = state_alloc(S * st.idx_max_entries * dI);
    }
    if (g.has_indexer) {
      st.sel = reinterpret_cast<int32_t*>(alloc(T * cfg.index_topk));
      st.n_sel = reinterpret_cast<int32_t*>(alloc(T));
    }
    if (lp.candidate_source) {
      cand_max_blocks = std::max<int64_t>(
          1, (opt.max_context / ratio + cfg.candidate_block_size - 1) / cfg.candidate_block_size);
      cand_mask = static_cast<uint8_t*>(raw_alloc(T * cand_max_blocks));
      cand_block_max = alloc(T * cand_max_blocks);
      cand_n_blocks = reinterpret_cast<int32_t*>(alloc(T));
      cand_picked = reinterpret_cast<int32_t*>(alloc(T * cfg.candidate_topk_blocks));
      cand_n_picked = reinterpret_cast<int32_t*>(alloc(T));
    }
  }
  LOG(INFO) << "GpuModel: routed experts " << expert_format_name(opt.expert_format)
            << (w4a8() ? (w4a8_act_block == 32 ? " (FP4 as stored, activations 1x32)"
                                               : " (FP4 as stored, activations 1x128)")
                       : fp8() ? " (128x128 block FP8)" : " (fp32)")
            << ": " << expert_bytes.total() / 1e6 << " MB on the device (" << expert_bytes.codes / 1e6
            << " MB codes + " << expert_bytes.scales / 1e6 << " MB scales)";
  if (ckpt && !w4a8()) {
    LOG(INFO) << "GpuModel: routed experts from " << ckpt->path() << ": "
              << ckpt->n_fp4_converted() << " FP4 tensors converted exactly to block FP8, "
              << ckpt->n_fp8_as_stored() << " block-FP8 tensors as stored, "
              << 3 * L * E - ckpt->n_fp4_converted() - ckpt->n_fp8_as_stored()
              << " re-quantised from fp32";
  }
  const RopeTable rope_main(rope_params(cfg, false)), rope_compress(rope_params(cfg, true));
  inv_freq_main = f32(rope_main.inv_freq().data(), cfg.rope_dim / 2, 0.0f, 0.0f);
  inv_freq_compress = f32(rope_compress.inv_freq().data(), cfg.rope_dim / 2, 0.0f, 0.0f);
  weight_bytes_total -= 4.0 * cfg.rope_dim;
  hp = HcMixParams{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps),
                   static_cast<float>(cfg.rms_norm_eps)};

  // Activations.
  X = alloc(T * hc * D);
  X2 = alloc(T * hc * D);
  u = alloc(T * D);
  x = alloc(T * D);
  y = alloc(T * D);
  pre = alloc(T * hc);
  post = alloc(T * hc);
  comb = alloc(T * hc * hc);
  mix_scratch = alloc(hc_mix_scratch_floats(std::max(T, R), hp));
  q_r = alloc(T * Rq);
  q = alloc(T * H * d);
  kv = alloc(T * d);
  o = alloc(T * H * d);
  og = alloc(T * gw);
  zg = alloc(T * Ro);
  zz = alloc(T * G * Ro);
  ca = alloc(T * 2 * std::max(d, dI));
  cz = alloc(T * 2 * std::max(d, dI));
  if (any_indexer) {
    qi = alloc(T * HI * dI);
    gi = alloc(T * HI);
    score_stride = std::max<int64_t>(1, opt.max_context / min_score_ratio);
    scores = alloc(T * score_stride);
  }
  if (any_latent_keys) {
    latent_stage = alloc(T * d);
    key_stage = alloc(T * dI);
  }
  if (cfg.engram.enabled()) {  // plan.engram layers; host weights (checked above)
    GpuEngramOptions eo;
    eo.max_rows = T;
    eo.fp8_wkv = fp8();
    eo.batch_invariant = opt.batch_invariant;
    engram.resize(L);
    for (int64_t l = 0; l < L; ++l) {
      if (!cfg.plan[l].engram) continue;
      engram[l] = std::make_unique<GpuEngram>(cfg, l, hw->layers[l].engram, hw->engram_map, eo);
      engram_ngram = engram[l]->max_ngram();
    }
    engram_ring_len = std::max<int64_t>(1, engram_ngram - 1 + opt.max_rollback);
    // Not a state pool: randomize_state must not put token ids outside the vocabulary here.
    engram_ring = static_cast<int32_t*>(raw_alloc(S * engram_ring_len * sizeof(int32_t)));
    CUDA_CHECK(cudaMemset(engram_ring, 0, S * engram_ring_len * sizeof(int32_t)));
    engram_hist = static_cast<int32_t*>(raw_alloc(T * engram_ngram * sizeof(int32_t)));
  }
  if (single_pass) {
    pre_ffn = alloc(T * hc);
    pre_mix = alloc(T * hc);
    std::vector<float> e0(T * hc, 0.0f);
    for (int64_t r = 0; r < T; ++r) e0[r * hc] = 1.0f;
    pre_e0 = f32(e0.data(), T * hc, 0.0f, 0.0f);
    weight_bytes_total -= 4.0 * T * hc;
  }
  router = alloc(T * E);
  route_w = alloc(T * k);
  route_ids = reinterpret_cast<int32_t*>(alloc(T * k));
  if (grouped_moe) {
    const MoeExpertsShape ms = moe_shape(w4a8() ? w4a8_rows : T);
    moe_ws = raw_alloc(static_cast<int64_t>(
        w4a8() ? moe_experts_w4a8_workspace_bytes(ms, w4a8_act_block)
               : fp8() ? moe_experts_fp8_workspace_bytes(ms) : moe_experts_f32_workspace_bytes(ms)));
    const int64_t n_counts = L * expert_count_pieces * E;
    expert_counts = reinterpret_cast<int32_t*>(alloc(n_counts));
    CUDA_CHECK(cudaMallocHost(&expert_counts_host, n_counts * sizeof(int32_t)));
  } else {
    moe_rows_cap = T * k + E * kExpertRowAlign;
    xs = alloc(moe_rows_cap * D);
    eg = alloc(moe_rows_cap * I);
    ev = alloc(moe_rows_cap * I);
    ys = alloc(moe_rows_cap * D);
    CUDA_CHECK(cudaMemset(eg, 0, moe_rows_cap * I * sizeof(float)));
    CUDA_CHECK(cudaMemset(ev, 0, moe_rows_cap * I * sizeof(float)));
  }
  sg = alloc(T * Is);
  sv = alloc(T * Is);
  ysh = alloc(T * D);
  Xo = alloc(R * hc * D);
  h = alloc(R * D);
  head_pre = alloc(R * hc);
  logits = alloc(R * V);
  if (fp8()) {
    const int64_t kmax = std::max({H * d, D, Rq, G * Ro, Is, I, gw});
    const int64_t b = fp8_weight_block(cfg);
    auto scratch = [&](int64_t rows, int64_t width) {
      return ActScratch{static_cast<uint8_t*>(raw_alloc(rows * width)),
                        alloc(rows * ceil_div64(width, b)), b};
    };
    a_in = scratch(T, D);
    a_r = scratch(T, Rq);
    a_gen = scratch(std::max(T, R), kmax);
    og_q = static_cast<uint8_t*>(raw_alloc(T * gw));
    if (!grouped_moe) {
      const int64_t kmoe = std::max(D, I);
      moe_q = static_cast<uint8_t*>(raw_alloc(moe_rows_cap * kmoe));
      moe_s_rm = alloc(moe_rows_cap * ceil_div64(kmoe, kFp8GemmBlock));
      moe_s_seg = alloc(moe_rows_cap * ceil_div64(kmoe, kFp8GemmBlock));
    }
  }

  int next = kNumFixedSections;
  for (auto& [ratio, section] : emit_section) section = next++;
  if (plan.paged) {
    for (auto& [ratio, section] : emit_section) cmp_slot_section[ratio] = next++;
  }
  n_sections = next;
  if (plan.paged) {
    alloc_paged_state();
    if (!opt.batch_invariant) {  // split-K paged attention at small batches (kv_cache_cuda.h)
      int64_t max_keys = 0;
      for (int64_t l = 0; l < cfg.num_layers; ++l) {
        max_keys = std::max(max_keys, cfg.sliding_window + paged_cmp_max_indices(l));
      }
      attn_ws_bytes = std::max(  // shared by the SIMT kernel and the sm90 decode kernel
          paged_attention_workspace_bytes(T, cfg.num_heads, cfg.head_dim, max_keys),
          sm90_paged_decode_workspace_bytes(T, cfg.num_heads, cfg.head_dim, max_keys));
      if (attn_ws_bytes > 0) attn_ws = raw_alloc(attn_ws_bytes);
    }
  }
  meta = reinterpret_cast<int32_t*>(alloc(meta_ints()));
  if (plan.paged) {
    staging_table_ints = win_pool.table_ints();
    for (const auto& [m, pool] : cmp_pools) staging_table_ints += pool.table_ints();
  }
  for (StagingSlot& slot : staging) {
    CUDA_CHECK(cudaMallocHost(&slot.host, (meta_ints() + staging_table_ints) * sizeof(int32_t)));
  }
  if (!grouped_moe) {
    const int64_t moe_meta_n = 4 * moe_rows_cap + T * k;
    moe_meta = reinterpret_cast<int32_t*>(alloc(moe_meta_n));
    CUDA_CHECK(cudaMallocHost(&moe_meta_host, moe_meta_n * sizeof(int32_t)));
    CUDA_CHECK(cudaMallocHost(&route_ids_host, T * k * sizeof(int32_t)));
    CUDA_CHECK(cudaMallocHost(&route_w_host, T * k * sizeof(float)));
  }
  if (opt.mtp) init_mtp(hw);  // MTP-1 drafter (gpu_mtp.cc)
  if (opt.dspark) init_dspark(hw);  // DSpark drafter (gpu_dspark.cc)
  seq_tokens.assign(opt.max_sequences, -1);
  rollback_floor.assign(opt.max_sequences, 0);
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  if (streamed) streamed->finish(ctx.stream());
}

GpuModel::Impl::~Impl() {
  if (mtp) cudaFreeHost(mtp->meta_host);
  if (dspark) {
    cudaFreeHost(dspark->meta_host);
    cudaFreeHost(dspark->out_host);
  }
  for (StagingSlot& slot : staging) cudaFreeHost(slot.host);
  cudaFreeHost(moe_meta_host);
  cudaFreeHost(route_ids_host);
  cudaFreeHost(route_w_host);
  cudaFreeHost(expert_counts_host);
}

GpuModel::GpuModel(ModelConfig config, const ModelWeights& weights, const GpuModelOptions& options)
    : impl_(std::make_unique<Impl>(std::move(config), &weights, 0, options)) {}

GpuModel::GpuModel(ModelConfig config, uint64_t seed, const GpuModelOptions& options)
    : impl_(std::make_unique<Impl>(std::move(config), nullptr, seed, options)) {}

GpuModel::~GpuModel() = default;

GpuModel::GpuModel(ModelConfig config, const GpuWeightStream& stream, const GpuModelOptions& options)
    : GpuModel(std::move(config), stream.weights(), options) {}

std::unique_ptr<GpuModel> GpuModel::load(const std::string& dir, const GpuModelOptions& options) {
  const ModelConfig config = load_model_config(dir);
  GpuModelOptions opt = options;
  if (opt.expert_checkpoint.empty()) opt.expert_checkpoint = dir;
  // Tensor by tensor from the mapped files (gpu_weight_stream.h), V4 and V4.1 alike.
  const GpuWeightStream stream(dir, config);
  return std::make_unique<GpuModel>(config, stream, opt);
}

GpuModel::ExpertFp8Copy GpuModel::download_expert_fp8(int64_t layer, int64_t expert,
                                                       const std::string& w) const {
  const Impl& m = *impl_;
  CHECK_KIND(kUnsupported, !m.w4a8())
      << "download_expert_fp8: the routed experts are in expert_format w4a8 (download_expert_w4a8)";
  CHECK(m.fp8() && layer >= 0 && layer < m.cfg.num_layers && expert >= 0 &&
        expert < m.cfg.n_routed_experts && (w == "w1" || w == "w2" || w == "w3"))
      << "download_expert_fp8: layer " << layer << " expert " << expert << " " << w
      << " (needs kFp8, a layer and expert in range, w1 / w2 / w3)";
  const GpuLayerW& g = m.layers[layer];
  const DeviceLinear& d = (w == "w1" ? g.w1 : w == "w3" ? g.w3 : g.w2)[expert];
  const int64_t n_nb = ceil_div64(d.n, d.block), ld = fp8_weight_scale_ld(d.k, d.block);
  ExpertFp8Copy out{Tensor::empty(DType::F8_E4M3, {d.n, d.k}), Tensor::empty(DType::F32, {n_nb, ld})};
  CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()));
  CUDA_CHECK(cudaMemcpy(out.codes.raw(), d.q, d.n * d.k, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(out.scales.raw(), d.s, n_nb * ld * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

GpuModel::ExpertW4a8Copy GpuModel::download_expert_w4a8(int64_t layer, int64_t expert,
                                                         const std::string& w) const {
  const Impl& m = *impl_;
  CHECK(m.w4a8() && layer >= 0 && layer < m.cfg.num_layers && expert >= 0 &&
        expert < m.cfg.n_routed_experts && (w == "w1" || w == "w2" || w == "w3"))
      << "download_expert_w4a8: layer " << layer << " expert " << expert << " " << w
      << " (needs expert_format w4a8, a layer and expert in range, w1 / w2 / w3)";
  const int64_t D = m.cfg.hidden_size, I = m.cfg.moe_intermediate_size;
  const int64_t n = w == "w2" ? D : I, k = w == "w2" ? I : D;
  const int64_t cb = w4a8_code_bytes(n, k), sb = w4a8_scale_bytes(n, k);
  const MoeW4a8Weights& x = m.layers[layer].experts_w4a8;
  const uint8_t* codes = w == "w1" ? x.w1 : w == "w3" ? x.w3 : x.w2;
  const uint8_t* scales = w == "w1" ? x.s1 : w == "w3" ? x.s3 : x.s2;
  const int64_t kp = w4a8_padded_k(k);
  ExpertW4a8Copy out{Tensor::empty(DType::U8, {n, kp / 2}), Tensor::empty(DType::U8, {n, kp / 32})};
  CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()));
  CUDA_CHECK(cudaMemcpy(out.codes.raw(), codes + expert * cb, cb, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(out.scales.raw(), scales + expert * sb, sb, cudaMemcpyDeviceToHost));
  return out;
}

GpuExpertBytes GpuModel::expert_bytes() const { return impl_->expert_bytes; }

void GpuModel::fp8_round_trip(const ModelConfig& cfg, ModelWeights& w, bool routed_experts) {
  const int64_t b = fp8_weight_block(cfg);
  auto rt = [b](Tensor& t, int64_t n, int64_t k) {
    ICHECK(t.defined() && t.dtype() == DType::F32 && t.numel() == n * k)
        << "fp8_round_trip: " << t.str() << " is not [" << n << ", " << k << "] fp32";
    std::vector<uint8_t> codes(n * k);
    std::vector<float> grid(ceil_div64(n, b) * ceil_div64(k, b));
    quantize_fp8_blocks(t.f32(), n, k, codes.data(), grid.data(), true, b);
  };
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, Rq = cfg.q_lora_rank;
  const int64_t I = cfg.moe_intermediate_size, Is = I * cfg.n_shared_experts;
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim;
  // clone: round a copy (a checkpoint's drafter tensor may wrap read-only memory).
  auto rtc = [&rt](Tensor& t, int64_t n, int64_t k, bool clone) {
    if (clone) t = t.clone();
    rt(t, n, k);
  };
  auto attention = [&](AttentionWeights& a, bool clone) {  // a block's FP8 projections
    rtc(a.wq_a, Rq, D, clone);
    rtc(a.wq_b, H * d, Rq, clone);
    rtc(a.wkv, d, D, clone);
    ICHECK(a.wo_a.numel() == G * Ro * gw) << "fp8_round_trip: wo_a " << a.wo_a.str();
    if (clone) a.wo_a = a.wo_a.clone();
    for (int64_t g = 0; g < G; ++g) {  // each group is its own FP8 matrix
      Tensor view = Tensor::empty(DType::F32, {Ro, gw});
      std::memcpy(view.f32(), a.wo_a.f32() + g * Ro * gw, Ro * gw * sizeof(float));
      rt(view, Ro, gw);
      std::memcpy(a.wo_a.f32() + g * Ro * gw, view.f32(), Ro * gw * sizeof(float));
    }
    rtc(a.wo_b, D, G * Ro, clone);
  };
  auto experts = [&](MoeWeights& m, bool routed, bool clone) {  // routed (if asked) and shared
    for (auto& e : m.experts) {
      if (!routed) break;
      rtc(e.w1, I, D, clone);
      rtc(e.w3, I, D, clone);
      rtc(e.w2, D, I, clone);
    }
    rtc(m.shared.w1, Is, D, clone);
    rtc(m.shared.w3, Is, D, clone);
    rtc(m.shared.w2, D, Is, clone);
  };
  rt(w.head, cfg.vocab_size, D);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    AttentionWeights& a = w.layers[l].attn;
    attention(a, false);
    const int64_t ratio = cfg.compress_ratio(l);
    if (a.has_compressor) {
      const int64_t cw = (ratio == 4 ? 2 : 1) * d;
      rt(a.compressor.wkv, cw, D);
      if (a.compressor.wgate.defined()) rt(a.compressor.wgate, cw, D);
    }
    if (a.has_indexer && a.indexer.compressor.wkv.defined()) {  // V4's index compressor
      rt(a.indexer.compressor.wkv, 2 * dI, D);
      rt(a.indexer.compressor.wgate, 2 * dI, D);
    }
    if (a.has_indexer) {
      rt(a.indexer.wq_b, HI * dI, Rq);
    }
    if (a.indexer.wk.defined()) rt(a.indexer.wk, dI, d);  // V4.1 index keys (idx_wk)
    Tensor& ewkv = w.layers[l].engram.wkv;  // GpuEngram fp8_wkv
    if (ewkv.defined()) rt(ewkv, ewkv.size(0), ewkv.size(1));
    // Routed experts unless kept exact (GpuModelOptions::expert_checkpoint).
    experts(w.layers[l].moe, routed_experts, false);
  }
  if (w.has_mtp) {  // the MTP-1 block as GpuModelOptions::mtp uploads it (gpu_mtp.cc)
    MtpWeights& mw = w.mtp;
    rt(mw.e_proj, D, D);
    rt(mw.h_proj, D, D);
    attention(mw.block.attn, false);
    experts(mw.block.moe, true, false);  // always re-quantised from the host values
  }
  // A DSpark drafter as init_dspark uploads it under kFp8: main_proj and each stage's FP8
  // projections, shared and routed experts (always re-quantised from the host values); the
  // router gate, norms, mHC, sinks, Markov tables and confidence stay fp32.
  if (!w.dspark.stages.empty()) {
    const int64_t n_taps = static_cast<int64_t>(cfg.dspark.target_layer_ids.size());
    rtc(w.dspark.main_proj, D, n_taps * D, true);
    for (DsparkStageWeights& st : w.dspark.stages) {
      attention(st.attn, true);
      experts(st.moe, true, true);
    }
  }
}

}  // namespace deepinfer
