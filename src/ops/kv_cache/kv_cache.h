// Paged K=V cache of DeepSeek-V4 attention (MODEL_SPEC §A.3, §A.10; research/kernels.md §1.3):
// entries of head_dim values (V4: 512 = 448 NoPE + 64 RoPE) stored in page blocks of
// `block_size` entries, addressed by physical slot = block * block_size + offset (the caller
// resolves a logical position to a slot with the request's block table; -1 = no entry).
//
// Two formats (the `--kv-cache-dtype` setting):
//
//  * kFp8 (official numerics; FlashMLA's "MODEL1" layout for head_dim 512, rope_dim 64):
//    per entry the NoPE dims as e4m3 codes, one UE8M0 scale per 64 NoPE dims, the RoPE dims
//    as bf16. A page block holds every entry's data part first, then every entry's scale
//    group, then zero or more pad bytes up to a multiple of data_bytes:
//
//      block b, at cache + b * block_bytes (V4, block_size B):
//      +-------------------+-----------------+-------------------+-----------------+-----+
//      | e0 nope e4m3[448] | e0 rope bf16[64]| e1 nope e4m3[448] | e1 rope bf16[64]| ... |  B x 576 B
//      +-------------------+-----------------+-------------------+-----------------+-----+
//      | e0 scales[7] 0    | e1 scales[7] 0  | ...               |                          B x 8 B
//      +-------------------+-----------------+-------------------+
//      | zero or more pad bytes up to a multiple of 576 B        |
//      +---------------------------------------------------------+
//      scale group of one entry (scale_bytes = 8): [s0 s1 s2 s3 s4 s5 s6 | 0]
//      s_g = UE8M0 code (value 2^(s_g - 127)) of NoPE dims [64 g, 64 g + 64)
//      entry_bytes = 584, block_bytes = round_up(block_size * 584, 576) (37440 for 64 entries).
//
//    Storing an entry x: for each 64-dim NoPE group, amax = max(max|x|, 1e-4),
//    s = 2^ceil(log2(amax / 448)) (qat.h pow2_scale), code = e4m3(clamp(x / s, +-448)) (RNE);
//    RoPE dims: bf16(x) (RNE). Loading gives e4m3(code) * s and the bf16 value, so
//    load(store(x)) = fp8_roundtrip(x[0:nope], nope, 64) ++ round_bf16(x[nope:]) exactly.
//    (The amax floor is qat.h's; FlashMLA's test quantiser floors amax / 448 at 1e-4
//    instead, which differs only for groups with amax < 0.0448.)
//    Other head sizes use the same scheme: nope = head_dim - rope_dim (a multiple of 64),
//    scale_bytes = round_up(nope / 64, 8), e.g. 200 B per entry for head_dim 128 / rope 64.
//
//    That is KvEntryFormat::kModel1, the V4 entry. DeepSeek-V4.1 (MODEL_SPEC §C.4-§C.5,
//    research/deepinfer-source.md §1 "Caches") keeps two other fp8-setting entries, same block
//    structure (all data parts, then all scale groups; block_bytes = block_size * entry_bytes):
//    - kE4m3Block32, window entries: all head_dim dims as e4m3 codes, one UE8M0 scale per 32
//      dims (16 at head_dim 512: 512 + 16 = 528 B), no bf16 dims (rope_dim 0). Storing:
//      fp8_roundtrip's formula with block 32 (amax floor 1e-4, power-of-two scale), so
//      load(store(x)) = fp8_roundtrip(x, head_dim, 32) exactly.
//    - kE2m1E4m3Block16, compressed entries: e2m1 codes two per byte (dim 2i in the low
//      nibble of byte i), one e4m3 scale per 16 dims (head_dim 512: 256 + 32 = 288 B), rope_dim
//      0. Storing: fp4_roundtrip_e4m3_scale's formula with block 16 (amax floor 6 * 2^-9, s =
//      e4m3(amax / 6)), so load(store(x)) = fp4_roundtrip_e4m3_scale(x, head_dim, 16) exactly.
//    The layer plan's model traits pick the formats once (runtime/gpu_state_plan.h).
//
//  * kBf16 (reference numerics, accuracy checks): per entry head_dim bf16 values
//    (1024 B for V4), block_bytes = block_size * 2 * head_dim. load(store(x)) = round_bf16(x).
//
// The CPU official forward (src/model/attention_block.cc) keeps K=V in fp32: it applies
// fp8_roundtrip to the NoPE dims and leaves the RoPE dims unrounded, so the fp8 cache differs
// from it only by the bf16 rounding of the RoPE dims (DeepSeek's reference keeps them in
// bf16, as this cache does).
#pragma once

#include <cstdint>
#include <string>

namespace deepinfer {

enum class KvCacheDtype : uint8_t { kBf16, kFp8 };

const char* kv_cache_dtype_name(KvCacheDtype dtype);  // "bf16" / "fp8"
// Parses "bf16" / "fp8"; throws kInvalidInput naming the value otherwise.
KvCacheDtype kv_cache_dtype_from_string(const std::string& name);

// The entry layout of the fp8 setting (kv_cache_dtype fp8); unused with kBf16.
enum class KvEntryFormat : uint8_t {
  kModel1,           // V4: e4m3 NoPE dims, UE8M0 per 64, bf16 RoPE dims (584 B at 512)
  kE4m3Block32,      // V4.1 window: e4m3 all dims, UE8M0 per 32 (528 B at 512)
  kE2m1E4m3Block16,  // V4.1 compressed: e2m1 all dims, e4m3 scale per 16 (288 B at 512)
};

struct KvCacheLayout {
  static constexpr int64_t kScaleGroup = 64;  // NoPE dims per UE8M0 scale (kModel1)

  KvCacheDtype dtype = KvCacheDtype::kFp8;
  int64_t head_dim = 512;
  int64_t rope_dim = 64;     // trailing dims kept in bf16 (kModel1; 0 for the V4.1 formats)
  int64_t block_size = 64;   // entries per page block
  KvEntryFormat format = KvEntryFormat::kModel1;  // with dtype kFp8

  bool fp8() const { return dtype == KvCacheDtype::kFp8; }
  // The fp8 setting's format; kModel1 with bf16 (then nothing reads it).
  KvEntryFormat fp8_format() const { return fp8() ? format : KvEntryFormat::kModel1; }
  // Leading dims held as codes (fp8: all but the bf16 RoPE dims; bf16: none).
  int64_t nope_dim() const { return head_dim - rope_dim; }
  int64_t coded_dims() const { return fp8() ? nope_dim() : 0; }
  // Dims per scale: 64 / 32 / 16 by format.
  int64_t scale_group() const {
    switch (fp8_format()) {
      case KvEntryFormat::kE4m3Block32: return 32;
      case KvEntryFormat::kE2m1E4m3Block16: return 16;
      default: return kScaleGroup;
    }
  }
  int64_t n_scales() const { return fp8() ? coded_dims() / scale_group() : 0; }
  // Bytes of one entry's values (fp8: codes (a byte, or half a byte for e2m1, per dim) +
  // rope bf16; bf16: all dims).
  int64_t data_bytes() const {
    if (!fp8()) return 2 * head_dim;
    const int64_t codes = format == KvEntryFormat::kE2m1E4m3Block16 ? coded_dims() / 2 : coded_dims();
    return codes + 2 * rope_dim;
  }
  // Bytes of one entry's scale group (fp8: n_scales codes, zero-padded to a multiple of 8).
  int64_t scale_bytes() const { return (n_scales() + 7) / 8 * 8; }
  int64_t entry_bytes() const { return data_bytes() + scale_bytes(); }
  // kModel1 / bf16: rounded up to a multiple of data_bytes (FlashMLA's block); the V4.1
  // formats: block_size * entry_bytes (DeepInfer's).
  int64_t block_bytes() const {
    const int64_t raw = block_size * entry_bytes();
    if (fp8_format() != KvEntryFormat::kModel1) return raw;
    return (raw + data_bytes() - 1) / data_bytes() * data_bytes();
  }
  // Byte offsets of slot `slot`'s values and scale group from the start of the cache.
  int64_t data_offset(int64_t slot) const {
    return slot / block_size * block_bytes() + slot % block_size * data_bytes();
  }
  int64_t scale_offset(int64_t slot) const {
    return slot / block_size * block_bytes() + block_size * data_bytes() +
           slot % block_size * scale_bytes();
  }

  // Throws kInvalidInput naming the bad field: head_dim a positive multiple of 32 (at most
  // 512), block_size > 0; fp8 kModel1: 0 <= rope_dim < head_dim, nope a multiple of 64,
  // rope_dim a multiple of 4; the V4.1 formats: rope_dim 0.
  void validate() const;

  // V4 main-KV layout (head_dim 512, rope 64) in the given format.
  static KvCacheLayout v4(KvCacheDtype dtype, int64_t block_size);
  // V4.1 layouts (head_dim 512): window / compressed entries; bf16 as v4(kBf16).
  static KvCacheLayout v41_window(KvCacheDtype dtype, int64_t block_size);
  static KvCacheLayout v41_compressed(KvCacheDtype dtype, int64_t block_size);
};

const char* kv_entry_format_name(KvEntryFormat f);  // "model1" / "e4m3x32" / "e2m1-e4m3x16"

// Writes entries[i * row_stride + 0 .. head_dim) into slot slots[i] of `cache` (n_blocks page
// blocks of layout.block_bytes()) for i < n; slots[i] == -1 skips the row. Only the entry's
// data and scale-group bytes are written (pad bytes of the scale group as 0). Throws
// kInvalidInput for a slot outside [-1, n_blocks * block_size). Inputs must be finite.
void kv_store_ref(const KvCacheLayout& layout, const float* entries, int64_t n,
                  int64_t row_stride, const int32_t* slots, uint8_t* cache, int64_t n_blocks);

// out[i * head_dim + 0 .. head_dim) = dequantised entry at slots[i] for i < n; rows whose
// slot is -1 are set to 0. Same slot checks as kv_store_ref.
void kv_load_ref(const KvCacheLayout& layout, const uint8_t* cache, int64_t n_blocks,
                 const int32_t* slots, int64_t n, float* out);

// One pool of keys for paged attention and the per-row list of its slots to read.
struct KvSource {
  const uint8_t* cache = nullptr;
  KvCacheLayout layout;
  int64_t n_blocks = 0;                // checked by the CPU reference only
  const int32_t* indices = nullptr;    // [n_rows, max_indices] physical slots, -1 = skip
  const int32_t* n_indices = nullptr;  // [n_rows] entries used per row; nullptr: max_indices
  int64_t max_indices = 0;             // row stride of indices; 0: source unused
};

// Sparse attention with sink over paged caches (math of sparse_attention.h): for each row r
// and head h, one softmax over the keys at indices[r][0 .. n_indices[r]) of sources[0]
// followed by those of sources[1] (V4: the sliding-window pool and the compressed pool),
// skipping -1, with the per-head sink logit. Keys are dequantised from the cache.
// q, out [n_rows, n_heads, head_dim] fp32 (out may not alias q); sinks [n_heads] fp32.
// Both sources share dtype, head_dim and rope_dim; block sizes and fp8 formats may differ
// (V4.1: kE4m3Block32 window, kE2m1E4m3Block16 compressed).
struct PagedAttentionParams {
  const float* q = nullptr;
  float* out = nullptr;
  const float* sinks = nullptr;
  int64_t n_rows = 0, n_heads = 0;
  float scale = 1.0f;
  KvSource sources[2];
  // paged_attention_cuda only (kv_cache_cuda.h): fp32 scratch of split-K at small grids, at
  // least paged_attention_workspace_bytes(n_rows, n_heads, head_dim, max_keys) bytes,
  // 16-byte aligned; nullptr: never split. Ignored by the CPU reference.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// CPU reference: per row, kv_load_ref of the listed slots then sparse_attention_row_ref.
void paged_attention_ref(const PagedAttentionParams& p);

}  // namespace deepinfer
