// GpuEngram (contract in gpu_engram.h): uploads one engram layer and runs its launches: the
// plain path (hash, dequantisation from the table) or, after prefetch(), the staged one.
#include "runtime/gpu_engram.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/parallel.h"
#include "cuda/cuda_check.h"
#include "cuda/device_tensor.h"
#include "ops/gemm/gemm.h"
#include "runtime/fp8_weight_quant.h"
#include "runtime/gpu_weight_stream.h"

namespace deepinfer {
namespace {

// From a streamed checkpoint the table is a view of the mapped file: its rows' pages are
// dropped once packed (StreamedWeights::release_view_bytes checks that the range is such a
// view and does nothing otherwise), so the resident set does not keep the stored table on top
// of its packed copy; a later read faults them back in from the file.
void release_table_rows(const GpuWeightStream* ws, const EngramWeights& w, int64_t r0, int64_t r1) {
  if (ws == nullptr || r1 <= r0) return;
  const int64_t hd = w.table.size(1), n_sc = w.table_scale.size(1);
  const auto* codes = static_cast<const uint8_t*>(w.table.raw());
  const auto* scales = static_cast<const uint8_t*>(w.table_scale.raw());
  ws->streamed().release_view_bytes(codes + r0 * hd, static_cast<size_t>((r1 - r0) * hd));
  ws->streamed().release_view_bytes(scales + r0 * n_sc, static_cast<size_t>((r1 - r0) * n_sc));
}

void check_shape(const Tensor& t, const Shape& shape, DType dtype, const std::string& what) {
  CHECK(t.defined() && t.shape() == shape && t.dtype() == dtype)
      << "GpuEngram: " << what << " is " << (t.defined() ? t.str() : std::string("undefined"))
      << ", expected " << dtype_name(dtype) << shape_str(shape);
}

Tensor upload(const void* host, DType dtype, Shape shape) {
  Tensor t = cuda::device_empty(dtype, std::move(shape));
  cuda::copy_h2d(t.raw(), host, t.nbytes());
  return t;
}

// Pinned host memory mapped into the device's address space, freed with the tensor.
Tensor pinned_mapped(int64_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocMapped | cudaHostAllocPortable));
  return Tensor::wrap(p, DType::U8, {bytes}, std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); }));
}

}  // namespace

GpuEngram::GpuEngram(const ModelConfig& cfg, int64_t layer, const EngramWeights& w,
                     const EngramTokenMap& map, const GpuEngramOptions& options)
    : options_(options), layer_(layer) {
  const auto& ids_cfg = cfg.engram.layer_ids;
  const auto it = std::find(ids_cfg.begin(), ids_cfg.end(), layer);
  CHECK(it != ids_cfg.end()) << "GpuEngram: layer " << layer << " is not in engram_layer_ids";
  CHECK(options_.max_rows > 0) << "GpuEngram: max_rows " << options_.max_rows << " (must be positive)";
  tables_ = engram_primes(cfg.engram)[it - ids_cfg.begin()];
  n_hc_ = static_cast<int>(cfg.hc_mult);
  dim_ = cfg.hidden_size;
  eps_ = static_cast<float>(cfg.rms_norm_eps);
  const int64_t hd = tables_.head_dim, n_sc = hd / 32, n_cols = tables_.n_cols;
  const int64_t k = n_cols * hd, n_kv = (n_hc_ + 1) * dim_;

  // Shapes (load_model_weights checked them against the config; a hand-built struct may not be).
  CHECK(w.table.defined() && w.table.dim() == 2 && w.table.size(1) == hd &&
        w.table.dtype() == DType::F8_E4M3)
      << "GpuEngram: layer " << layer << " table " << (w.table.defined() ? w.table.str() : "undefined")
      << ", expected F8_E4M3[rows, " << hd << "]";
  const int64_t n_table_rows = w.table.size(0);
  CHECK(n_table_rows >= tables_.n_rows)
      << "GpuEngram: layer " << layer << " table has " << n_table_rows << " rows, the prime walk needs "
      << tables_.n_rows;
  check_shape(w.table_scale, {n_table_rows, n_sc}, DType::F8_E8M0, "table_scale");
  check_shape(w.wkv, {n_kv, k}, DType::F32, "wkv");
  check_shape(w.q_weight, {n_hc_, dim_}, DType::F32, "q_weight");
  check_shape(w.k_weight, {n_hc_, dim_}, DType::F32, "k_weight");
  CHECK(!map.ids.empty() && map.compressed_vocab_size == cfg.engram.compressed_vocab_size)
      << "GpuEngram: the Engram token map has compressed vocab size " << map.compressed_vocab_size
      << ", the config's engram_compressed_vocab_size is " << cfg.engram.compressed_vocab_size;

  // Token map and hash constants.
  const int64_t n_tokens = static_cast<int64_t>(map.ids.size());
  token_map_ = upload(map.ids.data(), DType::I32, {n_tokens});
  hash_params_ = engram_hash_cuda_params(
      {&tables_, map.ids.data(), n_tokens, map.compressed_vocab_size,
       static_cast<int32_t>(cfg.engram.pad_token_id)},
      token_map_.data<int32_t>());
  device_bytes_ += static_cast<int64_t>(token_map_.nbytes());

  // Gate weight and projection. Streamed checkpoint tensors (GpuModel::load) are placeholders:
  // the gate weights are read into host memory, wkv goes through the stream's converters.
  GpuWeightStream* ws = GpuWeightStream::owner_of(w.wkv.raw());
  std::vector<float> qw(n_hc_ * dim_), kw(n_hc_ * dim_);
  for (auto [t, out] : {std::pair{&w.q_weight, &qw}, std::pair{&w.k_weight, &kw}}) {
    if (GpuWeightStream* s = GpuWeightStream::owner_of(t->raw())) {
      s->read_f32(t->raw(), n_hc_ * dim_, out->data());
    } else {
      std::memcpy(out->data(), t->f32(), n_hc_ * dim_ * sizeof(float));
    }
  }
  std::vector<float> gate(n_hc_ * dim_);
  for (int64_t i = 0; i < n_hc_ * dim_; ++i) gate[i] = qw[i] * kw[i];
  w_gate_ = upload(gate.data(), DType::F32, {n_hc_, dim_});
  device_bytes_ += static_cast<int64_t>(w_gate_.nbytes());
  wkv_.n = n_kv;
  wkv_.k = k;
  if (options_.fp8_wkv) {
    CHECK_KIND(kUnsupported, k % 16 == 0)
        << "GpuEngram: FP8 wkv with K=" << k << " (the FP8 GEMMs need K % 16 == 0)";
    const int64_t b = fp8_weight_block(cfg);  // V4.1: 32x32 blocks, activations 1x32
    wkv_.block = b;
    if (ws != nullptr) {  // as stored when on the b grid, else quantised as below
      wkvq_ = cuda::device_empty(DType::F8_E4M3, {n_kv, k});
      wkvs_ = cuda::device_empty(DType::F32, {fp8_weight_scale_count(n_kv, k, b)});
      ws->upload_fp8(w.wkv.raw(), n_kv, k, wkvq_.data<uint8_t>(), wkvs_.data<float>(), nullptr, b);
      CUDA_CHECK(cudaStreamSynchronize(nullptr));
    } else {
      std::vector<float> copy(w.wkv.f32(), w.wkv.f32() + n_kv * k);
      std::vector<uint8_t> codes(n_kv * k);
      std::vector<float> grid(ceil_div64(n_kv, b) * ceil_div64(k, b));
      quantize_fp8_blocks(copy.data(), n_kv, k, codes.data(), grid.data(), false, b);
      const std::vector<float> sw = expand_weight_scales_f32(grid.data(), n_kv, k, b);
      wkvq_ = upload(codes.data(), DType::F8_E4M3, {n_kv, k});
      wkvs_ = upload(sw.data(), DType::F32, {static_cast<int64_t>(sw.size())});
    }
    wkv_.q = wkvq_.data<uint8_t>();
    wkv_.s = wkvs_.data<float>();
    device_bytes_ += static_cast<int64_t>(wkvq_.nbytes() + wkvs_.nbytes());
  } else if (ws != nullptr) {
    wkv32_ = cuda::device_empty(DType::F32, {n_kv, k});
    ws->upload_f32(w.wkv.raw(), n_kv * k, wkv32_.raw(), nullptr);
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  } else {
    wkv32_ = upload(w.wkv.f32(), DType::F32, {n_kv, k});
  }
  if (!options_.fp8_wkv) {
    wkv_.w32 = wkv32_.data<float>();
    device_bytes_ += static_cast<int64_t>(wkv32_.nbytes());
  }

  // Table, packed per row.
  const int64_t row_bytes = engram_packed_row_bytes(hd);
  table_bytes_ = n_table_rows * row_bytes;
  table_on_device_ = options_.placement == EngramTablePlacement::kDevice ||
                     (options_.placement == EngramTablePlacement::kAuto &&
                      table_bytes_ <= options_.device_table_max_bytes);
  const uint8_t* base = nullptr;
  if (table_on_device_) {
    // A range of rows at a time (64 MB packed), never a host copy of the whole table (the
    // table itself may be the checkpoint's mapping: GpuWeightStream's views).
    table_device_ = cuda::device_empty(DType::U8, {table_bytes_});
    const int64_t per = std::max<int64_t>(1, (int64_t{64} << 20) / row_bytes);
    std::vector<uint8_t> packed(static_cast<size_t>(std::min(per, n_table_rows) * row_bytes));
    for (int64_t r0 = 0; r0 < n_table_rows; r0 += per) {
      const int64_t r1 = std::min(n_table_rows, r0 + per);
      pack_table(w, packed.data(), r0, r1);
      cuda::copy_h2d(table_device_.data<uint8_t>() + r0 * row_bytes, packed.data(),
                     (r1 - r0) * row_bytes);
      release_table_rows(ws, w, r0, r1);
    }
    base = table_device_.data<uint8_t>();
    device_bytes_ += table_bytes_;
  } else {
    pinned_ = pinned_mapped(table_bytes_);
    pack_table(w, pinned_.data<uint8_t>(), 0, n_table_rows);
    release_table_rows(ws, w, 0, n_table_rows);
    void* dev = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, pinned_.raw(), 0));
    base = static_cast<const uint8_t*>(dev);
  }
  view_.codes = base;
  view_.scales = base + hd;
  view_.code_stride = view_.scale_stride = row_bytes;
  view_.n_rows = n_table_rows;
  view_.head_dim = hd;

  // Scratch for max_rows rows.
  const int64_t m = options_.max_rows;
  ids_ = cuda::device_empty(DType::I64, {m, n_cols});
  e_ = cuda::device_empty(DType::F32, {m, k});
  kv_ = cuda::device_empty(DType::F32, {m, n_kv});
  device_bytes_ += static_cast<int64_t>(ids_.nbytes() + e_.nbytes() + kv_.nbytes());
  if (options_.fp8_wkv) {
    act_q_ = cuda::device_empty(DType::F8_E4M3, {m, k});
    act_s_ = cuda::device_empty(DType::F32, {ceil_div64(k, wkv_.block), m});
    device_bytes_ += static_cast<int64_t>(act_q_.nbytes() + act_s_.nbytes());
  }
  if (options_.prefetch) {
    staging_ = cuda::device_empty(DType::U8, {m * n_cols * row_bytes});
    device_bytes_ += static_cast<int64_t>(staging_.nbytes());
    CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
}

GpuEngram::~GpuEngram() {
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (done_ != nullptr) cudaEventDestroy(done_);
}

void GpuEngram::pack_table(const EngramWeights& w, uint8_t* dst, int64_t r0, int64_t r1) const {
  const int64_t hd = tables_.head_dim, n_sc = hd / 32;
  const int64_t row_bytes = engram_packed_row_bytes(hd);
  const auto* codes = static_cast<const uint8_t*>(w.table.raw());
  const auto* scales = static_cast<const uint8_t*>(w.table_scale.raw());
  parallel_for(r1 - r0, [&](int64_t begin, int64_t end) {
    for (int64_t r = r0 + begin; r < r0 + end; ++r) {
      uint8_t* d = dst + (r - r0) * row_bytes;
      std::memcpy(d, codes + r * hd, hd);
      std::memcpy(d + hd, scales + r * n_sc, n_sc);
      std::memset(d + hd + n_sc, 0, row_bytes - hd - n_sc);
    }
  }, 4096);
}

void GpuEngram::apply(cuda::DeviceContext& ctx, const int32_t* history, int64_t n_rows, float* x) {
  CHECK(n_rows >= 0 && n_rows <= options_.max_rows)
      << "GpuEngram layer " << layer_ << ": " << n_rows << " rows, max_rows is " << options_.max_rows;
  cudaStream_t s = ctx.stream();
  const bool staged_rows = prefetched_rows_ >= 0;
  if (staged_rows) {
    CHECK(n_rows == prefetched_rows_ && history == prefetched_history_)
        << "GpuEngram layer " << layer_ << ": apply(" << n_rows << " rows) after a prefetch of "
        << prefetched_rows_ << " rows from another history";
    prefetched_rows_ = -1;
    CUDA_CHECK(cudaStreamWaitEvent(s, done_, 0));  // joins the side stream even for 0 rows
  }
  if (n_rows == 0) return;
  CHECK(history != nullptr && x != nullptr) << "GpuEngram layer " << layer_ << ": null history or x";
  if (staged_rows) {
    const int64_t row_bytes = view_.code_stride;
    const EngramTableView staged{staging_.data<uint8_t>(), staging_.data<uint8_t>() + view_.head_dim,
                                 row_bytes, row_bytes, n_rows * tables_.n_cols, view_.head_dim};
    engram_dequant_cuda(s, staged, nullptr, n_rows, tables_.n_cols, e_.data<float>());
  } else {
    engram_hash_cuda(s, hash_params_, history, n_rows, ids_.data<int64_t>());
    engram_dequant_cuda(s, view_, ids_.data<int64_t>(), n_rows, tables_.n_cols, e_.data<float>());
  }
  linear_run(ctx, wkv_, e_.data<float>(), n_rows, kv_.data<float>(),
             ActScratch{act_q_.data<uint8_t>(), act_s_.data<float>(), wkv_.block},
             options_.batch_invariant);
  EngramGateCudaParams g;
  g.n = n_rows;
  g.n_hc = n_hc_;
  g.dim = dim_;
  g.kv = kv_.data<float>();
  g.kv_stride = wkv_.n;
  g.w = w_gate_.data<float>();
  g.eps = eps_;
  g.clamp = 1e-6f;
  g.history = history;
  g.history_stride = tables_.max_ngram;
  g.round_bf16 = options_.round_bf16;
  g.x = x;
  engram_gate_cuda(s, g);
}

void GpuEngram::prefetch(cuda::DeviceContext& ctx, cudaStream_t side, const int32_t* history,
                         int64_t n_rows) {
  CHECK(options_.prefetch) << "GpuEngram layer " << layer_ << ": prefetch() needs options.prefetch";
  CHECK(n_rows >= 0 && n_rows <= options_.max_rows)
      << "GpuEngram layer " << layer_ << ": " << n_rows << " rows, max_rows is " << options_.max_rows;
  CHECK(history != nullptr) << "GpuEngram layer " << layer_ << ": null history";
  CUDA_CHECK(cudaEventRecord(ready_, ctx.stream()));
  CUDA_CHECK(cudaStreamWaitEvent(side, ready_, 0));
  engram_hash_cuda(side, hash_params_, history, n_rows, ids_.data<int64_t>());
  engram_gather_rows_cuda(side, view_.codes, view_.code_stride, ids_.data<int64_t>(), n_rows,
                          tables_.n_cols, staging_.data<uint8_t>());
  CUDA_CHECK(cudaEventRecord(done_, side));
  prefetched_history_ = history;
  prefetched_rows_ = n_rows;
}

}  // namespace deepinfer
