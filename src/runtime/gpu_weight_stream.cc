// GpuWeightStream (runtime/gpu_weight_stream.h): checkpoint tensors converted a row range at a
// time into pinned staging and copied to GpuModel's device buffers.
#include "runtime/gpu_weight_stream.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "cuda/cuda_check.h"
#include "io/fp4_to_fp8.h"
#include "io/weight_stream.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe_w4a8.h"
#include "runtime/fp8_weight_quant.h"

namespace deepinfer {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<GpuWeightStream*>& registry() {
  static std::vector<GpuWeightStream*> r;
  return r;
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }


}  // namespace

struct GpuWeightStream::Staging {
  uint8_t* host[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  bool pending[2] = {false, false};
  size_t half = 0;
  int cur = 0;
};

GpuWeightStream::GpuWeightStream(const std::string& path, const ModelConfig& config,
                                 const GpuWeightStreamOptions& options)
    : opt_(options), streamed_(path, config), staging_(std::make_unique<Staging>()) {
  Staging& st = *staging_;
  st.half = std::max<size_t>(opt_.staging_bytes / 2, size_t{1} << 20);
  for (int i = 0; i < 2; ++i) {
    CUDA_CHECK(cudaMallocHost(&st.host[i], st.half));
    CUDA_CHECK(cudaEventCreateWithFlags(&st.done[i], cudaEventDisableTiming));
  }
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(this);
}

GpuWeightStream::~GpuWeightStream() {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto& r = registry();
    r.erase(std::remove(r.begin(), r.end(), this), r.end());
  }
  for (int i = 0; i < 2; ++i) {
    if (staging_->done[i] != nullptr) {
      cudaEventSynchronize(staging_->done[i]);
      cudaEventDestroy(staging_->done[i]);
    }
    cudaFreeHost(staging_->host[i]);
  }
}

GpuWeightStream* GpuWeightStream::owner_of(const void* host) {
  if (host == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (GpuWeightStream* s : registry()) {
    if (s->streamed_.contains(host)) return s;
  }
  return nullptr;
}

const StoredTensor* GpuWeightStream::stored_tensor(const void* host) const {
  const auto where = streamed_.find(host);
  return where.has_value() ? where->tensor : nullptr;
}

uint8_t* GpuWeightStream::acquire(size_t bytes) {
  Staging& st = *staging_;
  ICHECK(bytes <= st.half) << "GpuWeightStream: " << bytes << " bytes for a staging half of " << st.half;
  if (!started_) {
    started_ = true;
    t0_ = last_log_ = std::chrono::steady_clock::now();
  }
  st.cur ^= 1;
  if (st.pending[st.cur]) CUDA_CHECK(cudaEventSynchronize(st.done[st.cur]));
  st.pending[st.cur] = false;
  return st.host[st.cur];
}

void GpuWeightStream::submit(void* device, size_t bytes, void* stream) {
  Staging& st = *staging_;
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(device, st.host[st.cur], bytes, cudaMemcpyHostToDevice, as_stream(stream)));
  CUDA_CHECK(cudaEventRecord(st.done[st.cur], as_stream(stream)));
  st.pending[st.cur] = true;
}

void GpuWeightStream::stage(const void* src, size_t bytes, void* device, void* stream) {
  const size_t half = staging_->half;
  for (size_t done = 0; done < bytes; done += half) {
    const size_t n = std::min(half, bytes - done);
    uint8_t* buf = acquire(n);
    std::memcpy(buf, static_cast<const uint8_t*>(src) + done, n);
    submit(static_cast<uint8_t*>(device) + done, n, stream);
  }
}

void GpuWeightStream::account(double read, double uploaded) {
  stats_.bytes_read += read;
  stats_.bytes_uploaded += uploaded;
  if (!opt_.progress) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_log_ < std::chrono::seconds(1)) return;
  last_log_ = now;
  const double s = std::chrono::duration<double>(now - t0_).count();
  LOG(INFO) << "loading weights: " << stats_.bytes_read / 1e9 << " of at most "
            << streamed_.stored_bytes() / 1e9 << " GB read, " << stats_.bytes_uploaded / 1e9
            << " GB to the device, " << stats_.bytes_read / 1e9 / std::max(s, 1e-9) << " GB/s";
}

void GpuWeightStream::finish(void* stream) {
  CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
  if (started_) {
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  if (opt_.progress) {
    LOG(INFO) << "loaded weights from " << streamed_.path() << ": " << stats_.bytes_read / 1e9
              << " GB read, " << stats_.bytes_uploaded / 1e9 << " GB to the device in "
              << stats_.seconds << " s (" << stats_.bytes_read / 1e9 / std::max(stats_.seconds, 1e-9)
              << " GB/s); " << stats_.fp8_as_stored << " FP8 tensors as stored, "
              << stats_.fp4_converted << " FP4 converted exactly to FP8, " << stats_.fp4_as_stored
              << " FP4 as stored (W4A8), " << stats_.fp8_requantised
              << " quantised to FP8, " << stats_.f32_tensors << " fp32";
  }
}

void GpuWeightStream::convert_range(const StoredTensor& t, int64_t b, int64_t e, void* out) {
  const int64_t align = stored_row_align(t), rows = stored_rows(t);
  if (b % align == 0 && (e % align == 0 || e == rows)) {
    convert_rows(t, b, e, out);
    return;
  }
  // Off the stored block grid (e.g. one wo_a group of a small model): the enclosing blocks.
  const int64_t ab = b / align * align, ae = std::min(rows, ceil_div(e, align) * align);
  const int64_t rb = converted_row_bytes(t);
  std::vector<uint8_t> tmp(static_cast<size_t>((ae - ab) * rb));
  convert_rows(t, ab, ae, tmp.data());
  std::memcpy(out, tmp.data() + (b - ab) * rb, static_cast<size_t>((e - b) * rb));
}

void GpuWeightStream::upload_f32(const void* host, int64_t n, void* device, void* stream) {
  const auto where = streamed_.find(host);
  ICHECK(where.has_value()) << "GpuWeightStream::upload_f32: not a placeholder";
  const StoredTensor& t = *where->tensor;
  ICHECK(dtype_size(t.dtype) == 4) << "GpuWeightStream: tensor '" << t.origin << "' is "
                                   << dtype_name(t.dtype) << ", uploaded as 4-byte values";
  const int64_t rows = stored_rows(t), numel = shape_numel(t.shape);
  const int64_t width = rows == 0 ? 1 : std::max<int64_t>(1, numel / rows);
  ICHECK(where->offset % width == 0 && (n % width == 0) && where->offset + n <= numel)
      << "GpuWeightStream: elements [" << where->offset << ", +" << n << ") of '" << t.origin
      << "' " << shape_str(t.shape) << " are not whole rows";
  const int64_t r0 = where->offset / width, r1 = r0 + n / width;
  const int64_t rb = converted_row_bytes(t), align = stored_row_align(t);
  const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(staging_->half) / (rb * align)) * align;
  for (int64_t b = r0; b < r1;) {
    const int64_t e = std::min(r1, b / align * align + per);
    const size_t bytes = static_cast<size_t>((e - b) * rb);
    uint8_t* dst = static_cast<uint8_t*>(device) + (b - r0) * rb;
    if (bytes <= staging_->half) {
      convert_range(t, b, e, acquire(bytes));
      submit(dst, bytes, stream);
    } else {  // one block row wider than a staging half: through host memory, in pieces
      std::vector<uint8_t> tmp(bytes);
      convert_range(t, b, e, tmp.data());
      stage(tmp.data(), bytes, dst, stream);
    }
    const StoredRows sr = stored_rows_slice(t, b, e);
    account(static_cast<double>(sr.weight.nbytes() + (sr.scale.defined() ? sr.scale.nbytes() : 0)),
            static_cast<double>((e - b) * rb));
    release_mapped_rows(t, b, e);
    b = e;
  }
  ++stats_.f32_tensors;
}

void GpuWeightStream::read_f32(const void* host, int64_t n, float* out) {
  const auto where = streamed_.find(host);
  ICHECK(where.has_value()) << "GpuWeightStream::read_f32: not a placeholder";
  const StoredTensor& t = *where->tensor;
  ICHECK(t.dtype == DType::F32) << "GpuWeightStream: tensor '" << t.origin << "' is "
                                << dtype_name(t.dtype) << ", read as fp32";
  const int64_t rows = stored_rows(t), numel = shape_numel(t.shape);
  const int64_t width = rows == 0 ? 1 : std::max<int64_t>(1, numel / rows);
  ICHECK(where->offset % width == 0 && n % width == 0 && where->offset + n <= numel)
      << "GpuWeightStream: elements [" << where->offset << ", +" << n << ") of '" << t.origin
      << "' " << shape_str(t.shape) << " are not whole rows";
  const int64_t r0 = where->offset / width, r1 = r0 + n / width;
  convert_range(t, r0, r1, out);
  const StoredRows sr = stored_rows_slice(t, r0, r1);
  account(static_cast<double>(sr.weight.nbytes() + (sr.scale.defined() ? sr.scale.nbytes() : 0)), 0);
  release_mapped_rows(t, r0, r1);
}

void GpuWeightStream::upload_fp8(const void* host, int64_t n, int64_t k, uint8_t* q, float* s,
                                 void* stream, int64_t block) {
  ICHECK(fp8_gemm_block_ok(block)) << "GpuWeightStream::upload_fp8: block " << block;
  const auto where = streamed_.find(host);
  ICHECK(where.has_value()) << "GpuWeightStream::upload_fp8: not a placeholder";
  const StoredTensor& t = *where->tensor;
  ICHECK(t.dtype == DType::F32 && t.shape.size() == 2 && t.shape[1] == k &&
         where->offset % k == 0 && where->offset / k + n <= t.shape[0])
      << "GpuWeightStream: [" << n << ", " << k << "] at element " << where->offset << " of '"
      << t.origin << "' " << shape_str(t.shape);
  const int64_t r0 = where->offset / k, rows = t.shape[0];
  const int64_t ld = fp8_weight_scale_ld(k, block), kb = ceil_div(k, block);
  const bool on_grid = r0 % block == 0 && (n % block == 0 || r0 + n == rows);
  const std::string where_s = "' in checkpoint '" + streamed_.path() + "'";
  auto check_ue8m0 = [&](const uint8_t* g, int64_t count, const std::string& name) {
    for (int64_t i = 0; i < count; ++i) {
      CHECK(g[i] != 255) << "scale of FP8 tensor '" << name << where_s << " at [" << i / kb << ", "
                         << i % kb << "] is the e8m0 NaN code 255";
    }
  };
  auto upload_scales_ue8m0 = [&](const uint8_t* grid, int64_t rows_n) {
    const std::vector<float> sw = expand_weight_scales_ue8m0(grid, rows_n, k, block);
    stage(sw.data(), sw.size() * sizeof(float), s, stream);
  };
  const bool stored_fp8 = t.kind == StoredTensor::Kind::kFp8 && t.scale.dtype() == DType::F8_E8M0 &&
                          t.block_n == block && t.block_k == block;
  if (stored_fp8 && on_grid) {  // the checkpoint's codes and scales as they are
    const StoredRows sr = stored_rows_slice(t, r0, r0 + n);
    const auto* grid = static_cast<const uint8_t*>(sr.scale.raw());
    check_ue8m0(grid, sr.scale.numel(), t.origin);
    stage(sr.weight.raw(), static_cast<size_t>(n * k), q, stream);
    upload_scales_ue8m0(grid, n);
    account(static_cast<double>(sr.weight.nbytes() + sr.scale.nbytes()),
            static_cast<double>(n * k + ceil_div(n, block) * ld * 4));
    release_mapped_rows(t, r0, r0 + n);
    ++stats_.fp8_as_stored;
    return;
  }
  if (t.kind == StoredTensor::Kind::kFp4 && on_grid && block == kFp8GemmBlock) {  // exact FP4 -> 128-block FP8
    const StoredRows sr = stored_rows_slice(t, r0, r0 + n);
    const Fp8BlockWeight w = fp4_to_fp8_block(sr.weight, sr.scale, t.origin, Fp4ToFp8Policy::kExact);
    stage(w.weight.raw(), static_cast<size_t>(n * k), q, stream);
    upload_scales_ue8m0(static_cast<const uint8_t*>(w.scale.raw()), n);
    account(static_cast<double>(sr.weight.nbytes() + sr.scale.nbytes()),
            static_cast<double>(n * k + ceil_div(n, block) * ld * 4));
    release_mapped_rows(t, r0, r0 + n);
    ++stats_.fp4_converted;
    return;
  }
  // fp32 values quantised as GpuModel quantises host weights, whole block rows at a time
  // from r0: the blocks are independent, so this equals quantising the whole matrix.
  const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(staging_->half) /
                                               (k * 4 * block)) * block;
  std::vector<float> values;
  std::vector<uint8_t> codes;
  std::vector<float> grid;
  for (int64_t b = 0; b < n; b += per) {
    const int64_t m = std::min(per, n - b);
    values.resize(static_cast<size_t>(m * k));
    codes.resize(static_cast<size_t>(m * k));
    grid.resize(static_cast<size_t>(ceil_div(m, block) * kb));
    convert_range(t, r0 + b, r0 + b + m, values.data());
    quantize_fp8_blocks(values.data(), m, k, codes.data(), grid.data(), false, block);
    const std::vector<float> sw = expand_weight_scales_f32(grid.data(), m, k, block);
    stage(codes.data(), codes.size(), q + b * k, stream);
    stage(sw.data(), sw.size() * sizeof(float), s + b / block * ld, stream);
    const StoredRows sr = stored_rows_slice(t, r0 + b, r0 + b + m);
    account(static_cast<double>(sr.weight.nbytes() + (sr.scale.defined() ? sr.scale.nbytes() : 0)),
            static_cast<double>(m * k + sw.size() * 4));
    release_mapped_rows(t, r0 + b, r0 + b + m);
  }
  ++stats_.fp8_requantised;
}

void GpuWeightStream::upload_w4a8(const void* host, int64_t n, int64_t k, uint8_t* codes,
                                  uint8_t* scales, void* stream) {
  const auto where = streamed_.find(host);
  ICHECK(where.has_value()) << "GpuWeightStream::upload_w4a8: not a placeholder";
  const StoredTensor& t = *where->tensor;
  const std::string where_s = "' in checkpoint '" + streamed_.path() + "'";
  CHECK_KIND(kUnsupported, t.kind == StoredTensor::Kind::kFp4 && t.scale.defined() &&
                               t.scale.dtype() == DType::F8_E8M0)
      << "expert_format w4a8: tensor '" << t.origin << where_s << " is not stored as FP4 (codes + "
      << "F8_E8M0 scales per 32); use expert_format fp8";
  CHECK_KIND(kUnsupported, t.shape.size() == 2 && t.shape[1] == k && k % 32 == 0 &&
                               where->offset % k == 0 && where->offset / k + n <= t.shape[0])
      << "expert_format w4a8: [" << n << ", " << k << "] at element " << where->offset << " of '"
      << t.origin << where_s << " " << shape_str(t.shape) << " (K a multiple of 32)";
  const int64_t r0 = where->offset / k, kp = w4a8_padded_k(k);
  const int64_t code_row = kp / 2, scale_row = kp / 32;
  // Rows per range: as many packed code rows as a staging half holds, in whole row groups of
  // the device layout (a range that starts on a group packs to the whole matrix's bytes).
  const int64_t per = static_cast<int64_t>(staging_->half) / code_row / kW4a8RowGroup * kW4a8RowGroup;
  CHECK_KIND(kUnsupported, per >= kW4a8RowGroup)
      << "expert_format w4a8: a staging half of " << staging_->half << " bytes holds fewer than "
      << kW4a8RowGroup << " packed rows of '" << t.origin << where_s << " (" << code_row << " bytes each)";
  std::vector<uint8_t> packed_scales;
  for (int64_t b = 0; b < n;) {
    const int64_t m = std::min(per, n - b);
    const StoredRows sr = stored_rows_slice(t, r0 + b, r0 + b + m);
    CHECK((sr.weight.dtype() == DType::U8 || sr.weight.dtype() == DType::I8) &&
          sr.weight.numel() == m * (k / 2) && sr.scale.numel() == m * (k / 32))
        << "expert_format w4a8: FP4 tensor '" << t.origin << where_s << " rows [" << r0 + b << ", "
        << r0 + b + m << ") are " << sr.weight.str() << " with scale " << sr.scale.str()
        << ", expected packed [" << m << ", " << k / 2 << "] with F8_E8M0 [" << m << ", " << k / 32
        << "]";
    const auto* sc = static_cast<const uint8_t*>(sr.scale.raw());
    check_fp4_scales(sc, m, k / 32, r0 + b, t.origin + "' in checkpoint '" + streamed_.path());
    packed_scales.resize(static_cast<size_t>(m * scale_row));
    uint8_t* buf = acquire(static_cast<size_t>(m * code_row));
    w4a8_pack(static_cast<const uint8_t*>(sr.weight.raw()), sc, m, k, buf, packed_scales.data());
    submit(codes + b * code_row, static_cast<size_t>(m * code_row), stream);
    stage(packed_scales.data(), packed_scales.size(), scales + b * scale_row, stream);
    account(static_cast<double>(sr.weight.nbytes() + sr.scale.nbytes()),
            static_cast<double>(m * (code_row + scale_row)));
    release_mapped_rows(t, r0 + b, r0 + b + m);
    b += m;
  }
  ++stats_.fp4_as_stored;
}

}  // namespace deepinfer
