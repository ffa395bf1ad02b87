// Engram (MODEL_SPEC §C.8) on the CUDA device: the kernels of one engram layer, each the
// device twin of a step of the CPU reference (engram.h, engram_ref.cc):
//
//   1. engram_hash_cuda      = engram_hash_ids: history [n, max_ngram] -> ids [n, n_cols]
//   2. engram_dequant_cuda   = the gather of engram_layer_ref: the n_cols table rows of each
//                              token, e4m3 * 2^(s - 127) per 32 columns -> e [n, n_cols * hd]
//      engram_gather_rows_cuda: the same rows copied raw (codes + scales, packed layout) into
//                              device memory, so a later engram_dequant_cuda (ids = nullptr)
//                              reads them from HBM (the prefetch of a later layer's rows)
//   3. (the projection kv = wkv . e: an ordinary linear, runtime/device_linear.h)
//   4. engram_gate_cuda      = the gate and update of engram_layer_ref: X_k += gamma_k value
//
// Tables are read through an EngramTableView: device memory, or pinned host memory mapped
// into the device's address space (cudaHostAlloc(cudaHostAllocMapped) +
// cudaHostGetDevicePointer; the kernels then read it zero-copy over PCIe). Either the
// checkpoint's layout (codes [rows, hd], scales [rows, hd / 32], two arrays) or the packed one
// (engram_packed_row_bytes: per row hd codes, then hd / 32 scales, padded to 16 bytes, so one
// row is one contiguous read; runtime/gpu_engram.h uses it).
//
// Exactness: ids are integer math (bitwise equal to engram_hash_ids); dequantised values are
// e4m3 * 2^(s - 127) computed in fp32 exactly as the CPU does (one rounded product, no
// flush to zero), so e is bitwise the CPU's; engram_gather_rows_cuda copies bytes. The gate's
// sums run in double in a fixed block-tree order (per (row, stream) block: batch invariant,
// but not the CPU's sequential order), gamma in fp32 (expf, sqrtf); the update is one fp32
// multiply and one add, rounded separately (no FMA), as the CPU rounds them.
//
// All entries: device pointers (or mapped host pointers for tables), run on `stream`, never
// allocate or synchronise, CUDA-graph capturable. Empty problems return early. Inputs are
// validated by the entries where it is cheap on the host (sizes, strides, alignment); values
// in device memory are the caller's contract (stated per entry).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/engram/engram.h"

namespace deepinfer {

// Columns one hash launch handles (primes and offsets travel in the kernel parameters).
constexpr int kEngramCudaMaxCols = 64;

// One engram layer's hash constants for the device (by value in the kernel parameters).
struct EngramHashCudaParams {
  int max_ngram = 0, n_heads = 0, n_cols = 0;
  int64_t primes[kEngramCudaMaxCols] = {};
  int64_t offsets[kEngramCudaMaxCols] = {};
  int64_t multipliers[kEngramMaxNgram] = {};
  const int32_t* token_map = nullptr;  // device [n_tokens] raw id -> compressed id
  int64_t n_tokens = 0;
  int32_t pad = 0;                     // compressed id of the pad token
};

// From the CPU parameters (host token map, layer tables, pad raw id) and the device copy of
// the same token map. Checks what engram_hash_ids checks per lookup once for the whole map
// (every value in [0, compressed_vocab_size); C matches the multipliers'; pad id in the map)
// and n_cols <= kEngramCudaMaxCols. Throws deepinfer::Error (kInvalidInput).
EngramHashCudaParams engram_hash_cuda_params(const EngramHashParams& host,
                                             const int32_t* device_token_map);

// history [n, max_ngram] int32 raw token ids, column k = k positions back (-1: before the
// sequence start or dead (image)); ids [n, n_cols] int64, bitwise engram_hash_ids. Ids outside
// [0, n_tokens) must not occur (the caller validates tokens; such an entry is hashed as -1,
// so the kernel never reads outside the map).
void engram_hash_cuda(cudaStream_t stream, const EngramHashCudaParams& p, const int32_t* history,
                      int64_t n, int64_t* ids);

// Bytes of one packed table row: head_dim codes, head_dim / 32 scales, zero padding to 16.
inline int64_t engram_packed_row_bytes(int64_t head_dim) {
  return (head_dim + head_dim / 32 + 15) / 16 * 16;
}

// A table on the device or in mapped pinned host memory. Row r: codes at
// codes + r * code_stride (head_dim bytes, e4m3), scales at scales + r * scale_stride
// (head_dim / 32 bytes, e8m0). The checkpoint layout: code_stride = head_dim, scale_stride =
// head_dim / 32; packed: scales = codes + head_dim, both strides engram_packed_row_bytes.
struct EngramTableView {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t code_stride = 0, scale_stride = 0;
  int64_t n_rows = 0;
  int64_t head_dim = 0;  // a positive multiple of 32
};

// e [n, n_cols * head_dim] fp32: e[r, c * hd + i] = e4m3(codes of row ids[r, c])[i] *
// 2^(scale[i / 32] - 127) (scale 0 -> 2^-127, 255 -> inf, as std::ldexp). ids == nullptr:
// table row r * n_cols + c (a staging buffer of engram_gather_rows_cuda). Ids must lie in
// [0, table.n_rows) (engram_hash_cuda's do when the table holds the layer's prime walk; the
// caller checks n_table_rows >= layer.n_rows once, as engram_layer_ref does). Codes are
// read 16 bytes at a time when codes and code_stride are 16-byte aligned, else bytewise.
void engram_dequant_cuda(cudaStream_t stream, const EngramTableView& table, const int64_t* ids,
                         int64_t n, int n_cols, float* e);

// out [n * n_cols, row_bytes] = the rows ids[0 .. n * n_cols) of a packed table (base
// `table`, rows of row_bytes, a multiple of 16, 16-byte aligned base), byte for byte.
void engram_gather_rows_cuda(cudaStream_t stream, const uint8_t* table, int64_t row_bytes,
                             const int64_t* ids, int64_t n, int n_cols, uint8_t* out);

struct EngramGateCudaParams {
  int64_t n = 0;           // rows
  int n_hc = 0;            // streams per row
  int64_t dim = 0;         // D
  const float* kv = nullptr;  // [n, kv_stride]: key_k at k * dim, value at n_hc * dim
  int64_t kv_stride = 0;      // >= (n_hc + 1) * dim
  const float* w = nullptr;   // [n_hc, dim] q_weight * k_weight (fp32 product)
  float eps = 1e-20f, clamp = 1e-6f;
  // Optional: gamma = 0 (X unchanged) for rows whose own token history[r * stride] < 0
  // (dead / image tokens), as engram_layer_ref's skip_rows.
  const int32_t* history = nullptr;
  int history_stride = 0;
  bool round_bf16 = false;  // round the updated X to bf16 (round to nearest even)
  float* x = nullptr;       // [n, n_hc, dim], updated in place
};

// delta_k = sum_i X_ki w_ki key_ki / (rms(X_k) rms(key_k) sqrt(D)), rms in double + eps;
// gamma_k = sigmoid(sign(delta_k) sqrt(max(|delta_k|, clamp))); X_k += gamma_k value.
// One block per (row, stream); X must not alias kv or w.
void engram_gate_cuda(cudaStream_t stream, const EngramGateCudaParams& p);

}  // namespace deepinfer
