// Test helpers of expert-parallel dispatch / combine (test_ep_layout, test_ep_dispatch_cuda):
// random routed FP8 inputs per rank, the plain expected MoE output written from the definition
// (no layouts), the per-expert test op, and a host emulation of the whole exchange over P ranks
// built on the planner (parallel/ep_layout.h) with host byte buffers.
//
// The test op: expert e's output for slot (t, j) is y = (q * s) * (e + 1) * w[t, j] per element
// (q the e4m3 value of x_t, s its block scale), combined as bf16. So token t's output is
//   sum over j in ascending (ids[t, j], j): round_bf16(q * s * (id + 1) * w) + shared[t]
// in fp32, the same float operations in the same order wherever it is computed.
#pragma once

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "parallel/ep_layout.h"
#include "parallel/expert_placement.h"

namespace deepinfer::ep_test {

struct RankInput {
  int64_t n_tokens = 0;
  std::vector<int32_t> ids;     // [T, k]
  std::vector<float> weights;   // [T, k]
  std::vector<uint8_t> xq;      // [T, D] e4m3 codes
  std::vector<float> sx;        // [n_sb, T] block-major scales (ld = T)
  std::vector<float> shared;    // [T, D]
};

// k distinct experts per token, every `invalid_every`-th slot (if > 0) set to -1 (a masked
// padding slot), codes without NaN, power-of-two scales.
inline RankInput random_input(std::mt19937& rng, int64_t T, int64_t k, int64_t E, int64_t D,
                              int64_t n_sb, int64_t invalid_every = 0) {
  RankInput in;
  in.n_tokens = T;
  in.ids.resize(T * k);
  in.weights.resize(T * k);
  std::vector<int32_t> all(E);
  std::iota(all.begin(), all.end(), 0);
  std::uniform_real_distribution<float> w(0.05f, 1.5f), sh(-2.0f, 2.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < k; ++j) {
      in.ids[t * k + j] = all[j];
      in.weights[t * k + j] = w(rng);
      if (invalid_every > 0 && (t * k + j) % invalid_every == invalid_every - 1) {
        in.ids[t * k + j] = -1;
      }
    }
  }
  in.xq.resize(T * D);
  for (uint8_t& c : in.xq) {
    do c = static_cast<uint8_t>(rng() & 0xff); while ((c & 0x7f) == 0x7f);
  }
  in.sx.resize(n_sb * T);
  for (float& s : in.sx) s = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 6);
  in.shared.resize(T * D);
  for (float& v : in.shared) v = sh(rng);
  return in;
}

inline float op_value(float q, float s, int32_t expert, float w) {
  return q * s * static_cast<float>(expert + 1) * w;
}

// The output of every token of one rank from the definition.
inline std::vector<float> expected_output(const RankInput& in, int64_t k, int64_t D,
                                          int64_t scale_block) {
  const int64_t T = in.n_tokens;
  std::vector<float> out(T * D, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> js(k);
    std::iota(js.begin(), js.end(), 0);
    std::stable_sort(js.begin(), js.end(), [&](int32_t a, int32_t b) {
      return in.ids[t * k + a] < in.ids[t * k + b];
    });
    for (int64_t d = 0; d < D; ++d) {
      const float q = e4m3_to_f32(in.xq[t * D + d]), s = in.sx[(d / scale_block) * T + t];
      float acc = 0.0f;
      for (int32_t j : js) {
        const int32_t e = in.ids[t * k + j];
        if (e < 0) continue;
        acc += round_bf16(op_value(q, s, e, in.weights[t * k + j]));
      }
      out[t * D + d] = acc + in.shared[t * D + d];
    }
  }
  return out;
}

// What one rank holds after the host emulation.
struct HostRank {
  EpSendPlan plan;
  std::vector<uint8_t> send, recv;  // records
  std::vector<int64_t> recv_rows;   // [P] rows from each peer
  std::vector<int32_t> recv_slot;   // [n_recv]
  EpRecvGrouping grouping;
  std::vector<uint16_t> ret, back;  // bf16 rows out (receive order) and in (send order)
  std::vector<float> out;           // [T, D]
};

struct Geometry {
  int64_t k, D, scale_block, max_tokens, row_tile = 64;
  int64_t n_sb() const { return ep_scale_blocks(D, scale_block); }
  int64_t rec() const { return ep_record_bytes(D, scale_block); }
  int64_t meta() const { return ep_record_meta_offset(D, scale_block); }
};

inline void write_record(uint8_t* rec, const RankInput& in, int64_t t, int64_t s, int32_t slot,
                         const Geometry& g) {
  std::memcpy(rec, &in.xq[t * g.D], g.D);
  for (int64_t b = 0; b < g.n_sb(); ++b) {
    std::memcpy(rec + g.D + 4 * b, &in.sx[b * in.n_tokens + t], 4);
  }
  std::memcpy(rec + g.meta(), &slot, 4);
  std::memcpy(rec + g.meta() + 4, &in.weights[s], 4);
}

// Dispatch -> the test op on each rank's grouped rows -> combine, all on the host.
inline std::vector<HostRank> emulate(const ExpertPlacement& pl, const std::vector<RankInput>& in,
                                     EpExchange exchange, const Geometry& g) {
  const int64_t P = pl.ep_size(), k = g.k, D = g.D, rec = g.rec();
  const bool fixed = exchange == EpExchange::kFixedCapacity;
  const int64_t cap = ep_peer_capacity(g.max_tokens, k);
  std::vector<HostRank> ranks(P);
  std::vector<std::vector<int64_t>> base(P, std::vector<int64_t>(P + 1, 0));
  for (int64_t r = 0; r < P; ++r) {
    HostRank& h = ranks[r];
    h.plan = ep_plan_send(pl, r, in[r].ids.data(), in[r].n_tokens, k, fixed ? cap : 0);
    const int64_t rows = fixed ? P * cap
                               : std::accumulate(h.plan.peer_rows.begin(),
                                                 h.plan.peer_rows.end(), int64_t{0});
    h.send.assign(rows * rec, 0);
    for (int64_t p = 0; p < P; ++p) {
      base[r][p + 1] = fixed ? (p + 1) * cap : base[r][p] + h.plan.peer_rows[p];
      if (fixed) {
        for (int64_t i = h.plan.peer_rows[p]; i < cap; ++i) {
          const int32_t none = -1;
          std::memcpy(&h.send[(p * cap + i) * rec + g.meta()], &none, 4);
        }
      }
    }
    for (int64_t s = 0; s < in[r].n_tokens * k; ++s) {
      const int32_t pos = h.plan.slot_pos[s];
      if (pos >= 0) write_record(&h.send[pos * rec], in[r], s / k, s, h.plan.slot_local[s], g);
    }
  }
  for (int64_t r = 0; r < P; ++r) {  // the exchange: rank r gets its piece of every peer
    HostRank& h = ranks[r];
    h.recv_rows.assign(P, 0);
    for (int64_t p = 0; p < P; ++p) {
      const int64_t n = fixed ? cap : ranks[p].plan.peer_rows[r];
      h.recv_rows[p] = n;
      const uint8_t* src = &ranks[p].send[base[p][r] * rec];
      h.recv.insert(h.recv.end(), src, src + n * rec);
    }
    const int64_t n_recv = static_cast<int64_t>(h.recv.size()) / rec;
    h.recv_slot.resize(n_recv);
    for (int64_t i = 0; i < n_recv; ++i) std::memcpy(&h.recv_slot[i], &h.recv[i * rec + g.meta()], 4);
    h.grouping = ep_group_recv(h.recv_slot.data(), n_recv, pl.slots_per_rank(), g.row_tile);
    h.ret.assign(n_recv * D, 0);
    for (int64_t i = 0; i < n_recv; ++i) {
      if (h.grouping.recv_row[i] < 0) continue;
      const uint8_t* rc = &h.recv[i * rec];
      const int32_t e = pl.expert_at(r, h.recv_slot[i]);
      float w, s;
      std::memcpy(&w, rc + g.meta() + 4, 4);
      for (int64_t d = 0; d < D; ++d) {
        std::memcpy(&s, rc + D + 4 * (d / g.scale_block), 4);
        h.ret[i * D + d] = f32_to_bf16(op_value(e4m3_to_f32(rc[d]), s, e, w));
      }
    }
  }
  for (int64_t r = 0; r < P; ++r) {  // the way back, then the combine
    HostRank& h = ranks[r];
    h.back.assign((base[r][P]) * D, 0);
    for (int64_t p = 0; p < P; ++p) {
      int64_t at = 0;  // where rank r's piece starts in p's receive order
      for (int64_t q = 0; q < r; ++q) at += ranks[p].recv_rows[q];
      const int64_t n = fixed ? cap : h.plan.peer_rows[p];
      std::copy(&ranks[p].ret[at * D], &ranks[p].ret[at * D] + n * D, &h.back[base[r][p] * D]);
    }
    const int64_t T = in[r].n_tokens;
    h.out.assign(T * D, 0.0f);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t d = 0; d < D; ++d) {
        float acc = 0.0f;
        for (int64_t m = 0; m < k; ++m) {
          const int32_t j = h.plan.slot_order[t * k + m], pos = h.plan.slot_pos[t * k + j];
          if (pos >= 0) acc += bf16_to_f32(h.back[pos * D + d]);
        }
        h.out[t * D + d] = acc + in[r].shared[t * D + d];
      }
    }
  }
  return ranks;
}

}  // namespace deepinfer::ep_test
