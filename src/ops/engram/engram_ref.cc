#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_set>

#include "base/dtype.h"
#include "base/error.h"
#include "base/parallel.h"
#include "ops/engram/engram.h"
#include "ops/linear/linear.h"
#include "ops/rms_norm/rms_norm.h"

namespace deepinfer {
namespace {

struct MultiplierRow {
  int64_t compressed_vocab_size;
  int layer;
  int64_t mu[kEngramMaxNgram];
};

// NumPy PCG64 draws, generated once by tools/make_engram_tables.py (the engine does not
// reimplement NumPy's RNG, MODEL_SPEC §C.8.2).
constexpr MultiplierRow kMultiplierTable[] = {
#include "ops/engram/engram_multipliers.inc"
};

uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t pow_mod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  for (a %= m; e; e >>= 1, a = mul_mod(a, a, m)) {
    if (e & 1) r = mul_mod(r, a, m);
  }
  return r;
}

// Deterministic Miller-Rabin for 64-bit n (these bases suffice below 3.3e24).
bool is_prime(uint64_t n) {
  static constexpr uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (uint64_t p : kBases) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  for (; d % 2 == 0; d /= 2) ++s;
  for (uint64_t a : kBases) {
    uint64_t x = pow_mod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int i = 1; i < s && composite; ++i) {
      x = mul_mod(x, x, n);
      composite = x != n - 1;
    }
    if (composite) return false;
  }
  return true;
}

int64_t next_prime(int64_t n) {
  do {
    ++n;
  } while (!is_prime(static_cast<uint64_t>(n)));
  return n;
}


}  // namespace

std::vector<int64_t> engram_multipliers(int layer_id, int64_t compressed_vocab_size, int max_ngram) {
  CHECK(max_ngram >= 2 && max_ngram <= kEngramMaxNgram)
      << "engram_max_ngram_size " << max_ngram << " outside [2, " << kEngramMaxNgram << "]";
  for (const MultiplierRow& row : kMultiplierTable) {
    if (row.layer == layer_id && row.compressed_vocab_size == compressed_vocab_size) {
      return std::vector<int64_t>(row.mu, row.mu + max_ngram);
    }
  }
  CHECK_KIND(kNotFound, false)
      << "no Engram hash multipliers for layer " << layer_id << " and compressed vocab size "
      << compressed_vocab_size
      << " in src/ops/engram/engram_multipliers.inc (regenerate it with "
         "tools/make_engram_tables.py)";
  return {};
}

std::vector<EngramLayerTables> engram_primes(const EngramConfig& cfg) {
  const int max_ngram = static_cast<int>(cfg.max_ngram_size);
  const int n_heads = static_cast<int>(cfg.n_heads);
  const int head_dim = static_cast<int>(cfg.head_dim);
  CHECK(!cfg.layer_ids.empty()) << "engram_layer_ids is empty";
  CHECK(cfg.num_embeddings.size() == cfg.layer_ids.size())
      << "engram_num_embeddings has " << cfg.num_embeddings.size() << " entries, engram_layer_ids "
      << cfg.layer_ids.size();
  CHECK(max_ngram >= 2 && max_ngram <= kEngramMaxNgram)
      << "engram_max_ngram_size " << max_ngram << " outside [2, " << kEngramMaxNgram << "]";
  CHECK(n_heads > 0) << "engram_n_heads " << n_heads << " must be positive";
  CHECK(head_dim > 0 && head_dim % 32 == 0)
      << "engram_head_dim " << head_dim << " must be a positive multiple of 32";
  CHECK(cfg.vocab_size > 1) << "engram_vocab_size " << cfg.vocab_size << " must exceed 1";
  CHECK(cfg.compressed_vocab_size > 0)
      << "engram_compressed_vocab_size " << cfg.compressed_vocab_size << " must be positive";
  CHECK(cfg.pad_token_id >= 0) << "engram_pad_token_id " << cfg.pad_token_id << " is negative";

  std::unordered_set<int64_t> used;
  std::vector<EngramLayerTables> out;
  for (size_t li = 0; li < cfg.layer_ids.size(); ++li) {
    EngramLayerTables t;
    t.layer_id = cfg.layer_ids[li];
    t.max_ngram = max_ngram;
    t.n_heads = n_heads;
    t.head_dim = head_dim;
    t.n_cols = (max_ngram - 1) * n_heads;
    for (int n = 0; n + 1 < max_ngram; ++n) {
      int64_t cur = cfg.vocab_size - 1;
      for (int h = 0; h < n_heads; ++h) {
        int64_t p = next_prime(cur);
        while (used.count(p)) p = next_prime(p);
        used.insert(p);
        t.offsets.push_back(t.n_rows);
        t.primes.push_back(p);
        t.n_rows += p;
        cur = p;
      }
    }
    CHECK(t.n_rows == cfg.num_embeddings[li])
        << "engram_num_embeddings[" << li << "] = " << cfg.num_embeddings[li] << " but the prime walk"
        << " of engram layer " << t.layer_id << " (engram_vocab_size " << cfg.vocab_size << ", "
        << n_heads << " heads, max n-gram " << max_ngram << ") sums to " << t.n_rows;
    t.multipliers = engram_multipliers(t.layer_id, cfg.compressed_vocab_size, max_ngram);
    t.compressed_vocab_size = cfg.compressed_vocab_size;
    out.push_back(std::move(t));
  }
  return out;
}

void engram_ngram_rows(const int32_t* seq_tokens, int64_t pos_begin, int64_t pos_end, int max_ngram,
                       int32_t* rows) {
  ICHECK(pos_begin >= 0 && pos_begin <= pos_end && max_ngram >= 1);
  for (int64_t p = pos_begin; p < pos_end; ++p) {
    int32_t* r = rows + (p - pos_begin) * max_ngram;
    for (int k = 0; k < max_ngram; ++k) r[k] = p - k >= 0 ? seq_tokens[p - k] : -1;
  }
}

void engram_hash_ids(const EngramHashParams& p, const int32_t* rows, int64_t n_rows, int64_t* ids) {
  const EngramLayerTables& t = *p.layer;
  CHECK(p.compressed_vocab_size == t.compressed_vocab_size)
      << "Engram token map has compressed vocab size " << p.compressed_vocab_size
      << " but layer " << t.layer_id << "'s multipliers are for " << t.compressed_vocab_size;
  CHECK(p.pad_token_id >= 0 && p.pad_token_id < p.n_tokens)
      << "engram_pad_token_id " << p.pad_token_id << " outside the token map (" << p.n_tokens << ")";
  const int mg = t.max_ngram;
  const int64_t pad = p.token_map[p.pad_token_id];
  for (int64_t r = 0; r < n_rows; ++r) {
    const int32_t* row = rows + r * mg;
    uint64_t prod[kEngramMaxNgram];
    bool dead = false;
    for (int k = 0; k < mg; ++k) {
      dead = dead || row[k] < 0;
      int64_t s = pad;
      if (!dead) {
        CHECK(row[k] < p.n_tokens) << "token id " << row[k] << " outside the Engram token map ("
                                   << p.n_tokens << " ids)";
        s = p.token_map[row[k]];
      }
      CHECK(s >= 0 && s < p.compressed_vocab_size)
          << "Engram token map value " << s << " outside [0, " << p.compressed_vocab_size << ")";
      // s < C and mu <= 2 * floor(floor((2^63 - 1) / C) / 2) + 1, so s * mu < 2^63.
      prod[k] = static_cast<uint64_t>(s) * static_cast<uint64_t>(t.multipliers[k]);
    }
    uint64_t rho = prod[0];
    int64_t* out = ids + r * t.n_cols;
    for (int n = 0; n + 1 < mg; ++n) {
      rho ^= prod[n + 1];
      for (int h = 0; h < t.n_heads; ++h) {
        const int c = n * t.n_heads + h;
        out[c] = static_cast<int64_t>(rho % static_cast<uint64_t>(t.primes[c])) + t.offsets[c];
      }
    }
  }
}

float engram_gate(const float* x, const float* key, const float* w, int64_t dim, float eps,
                  float clamp) {
  double dot = 0.0;
  for (int64_t i = 0; i < dim; ++i) dot += static_cast<double>(x[i] * w[i]) * key[i];
  const float delta = static_cast<float>(dot) * rms_inv(x, dim, eps) * rms_inv(key, dim, eps) /
                      std::sqrt(static_cast<float>(dim));
  const float sign = delta > 0.0f ? 1.0f : (delta < 0.0f ? -1.0f : 0.0f);
  const float v = sign * std::sqrt(std::max(std::fabs(delta), clamp));
  return 1.0f / (1.0f + std::exp(-v));
}

void engram_layer_ref(const EngramLayerParams& p, float* x) {
  if (p.n_rows == 0) return;
  const EngramLayerTables& t = *p.layer;
  CHECK(p.embed != nullptr && p.embed_scale != nullptr && p.wkv != nullptr &&
        p.q_weight != nullptr && p.k_weight != nullptr && p.ids != nullptr)
      << "engram layer " << t.layer_id << ": a table, scale, wkv, q/k weight or id pointer is null";
  CHECK(p.n_table_rows >= t.n_rows)
      << "engram layer " << t.layer_id << ": table has " << p.n_table_rows << " rows, the prime walk"
      << " needs " << t.n_rows;
  CHECK(p.n_hc > 0 && p.dim > 0) << "engram layer " << t.layer_id << ": bad n_hc/dim";
  for (int64_t i = 0; i < p.n_rows * t.n_cols; ++i) {
    CHECK(p.ids[i] >= 0 && p.ids[i] < p.n_table_rows)
        << "engram layer " << t.layer_id << ": hash id " << p.ids[i] << " outside the table ("
        << p.n_table_rows << " rows)";
  }
  const int hc = p.n_hc;
  const int64_t d = p.dim, hd = t.head_dim, n_sc = hd / 32;
  const int64_t k = static_cast<int64_t>(t.n_cols) * hd, n_kv = (hc + 1) * d;
  const auto& e4m3 = e4m3_values();

  std::vector<float> w(hc * d);
  for (int64_t i = 0; i < hc * d; ++i) w[i] = p.q_weight[i] * p.k_weight[i];

  // Row blocks bound the scratch (the real layer: 6144 inputs, 25600 outputs per row).
  constexpr int64_t kBlock = 16;
  std::vector<float> e(kBlock * k), kv(kBlock * n_kv);
  for (int64_t r0 = 0; r0 < p.n_rows; r0 += kBlock) {
    const int64_t nb = std::min(kBlock, p.n_rows - r0);
    parallel_for(nb * t.n_cols, [&](int64_t begin, int64_t end) {
      for (int64_t rc = begin; rc < end; ++rc) {
        const int64_t id = p.ids[r0 * t.n_cols + rc];
        const uint8_t* codes = p.embed + id * hd;
        const uint8_t* sc = p.embed_scale + id * n_sc;
        float* dst = e.data() + rc * hd;  // row rc / n_cols, column rc % n_cols: contiguous
        for (int64_t i = 0; i < hd; ++i) {
          dst[i] = e4m3[codes[i]] * std::ldexp(1.0f, static_cast<int>(sc[i / 32]) - 127);
        }
      }
    });
    linear_ref(e.data(), nb, k, p.wkv, n_kv, kv.data(), GemmMode::kFixedOrder);
    parallel_for(nb * hc, [&](int64_t begin, int64_t end) {
      for (int64_t rs = begin; rs < end; ++rs) {
        const int64_t r = rs / hc, s = rs % hc;
        if (p.skip_rows != nullptr && p.skip_rows[r0 + r]) continue;
        float* xs = x + ((r0 + r) * hc + s) * d;
        const float* key = kv.data() + r * n_kv + s * d;
        const float* value = kv.data() + r * n_kv + hc * d;
        const float gamma = engram_gate(xs, key, w.data() + s * d, d, p.eps, p.clamp);
        for (int64_t i = 0; i < d; ++i) {
          const float y = xs[i] + gamma * value[i];
          xs[i] = p.round_bf16 ? round_bf16(y) : y;
        }
      }
    });
  }
}

}  // namespace deepinfer
