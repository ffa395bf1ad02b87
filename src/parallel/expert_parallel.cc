#include "parallel/expert_parallel.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "ops/moe/moe.h"
#include "ops/quant/act_quant.h"

namespace deepinfer {
namespace {

// One routed (row, expert) pair as it travels: the row's index in the message, the slot of
// the receiving rank, the routing weight.
struct Assign {
  int32_t row;
  int32_t slot;
  float weight;
};
static_assert(sizeof(Assign) == 12);

constexpr int64_t kHeaderBytes = 2 * sizeof(int64_t);

int64_t row_wire_bytes(EpWire wire, int64_t dim, int64_t block) {
  if (wire == EpWire::kF32) return dim * static_cast<int64_t>(sizeof(float));
  return dim + ((dim + block - 1) / block) * static_cast<int64_t>(sizeof(float));
}

// A non-null pointer for empty buffers (MPI wants valid addresses even for zero bytes).
template <typename T>
T* data_or_dummy(std::vector<T>& v) {
  static T dummy[1];
  return v.empty() ? dummy : v.data();
}

}  // namespace

const char* ep_wire_name(EpWire wire) { return wire == EpWire::kF32 ? "fp32" : "fp8"; }

EpWire parse_ep_wire(const std::string& name) {
  if (name == "fp32") return EpWire::kF32;
  if (name == "fp8") return EpWire::kFp8;
  THROW(kInvalidInput) << "unknown expert-parallel wire format '" << name
                       << "' (expected fp32 or fp8)";
}

std::shared_ptr<ExpertParallel> ExpertParallel::create(std::shared_ptr<Communicator> comm,
                                                       const ModelConfig& config,
                                                       const ExpertParallelOptions& options) {
  CHECK(comm != nullptr) << "expert parallelism needs a communicator";
  CHECK(comm->memory() == CommMemory::kHost)
      << "the CPU model's expert parallelism needs a host-memory communicator (got "
      << comm->backend() << ")";
  return std::shared_ptr<ExpertParallel>(new ExpertParallel(std::move(comm), config, options));
}

ExpertParallel::ExpertParallel(std::shared_ptr<Communicator> comm, const ModelConfig& config,
                               const ExpertParallelOptions& options)
    : comm_(std::move(comm)),
      options_(options),
      n_layers_(config.num_layers),
      n_experts_(config.n_routed_experts) {
  CHECK(options.fp8_block > 0) << "expert-parallel FP8 wire block must be positive (got "
                               << options.fp8_block << ")";
  CHECK(options.eplb.interval >= 0) << "EPLB interval must be >= 0 steps (got "
                                    << options.eplb.interval << ")";
  const ExpertPlacement initial =
      ExpertPlacement::contiguous(n_experts_, comm_->size(), options.eplb.extra_slots_per_rank);
  placements_.assign(n_layers_, initial);
  experts_.assign(n_layers_, std::vector<ExpertTensors>(n_experts_));
  window_ = ExpertLoadWindow(n_layers_, n_experts_, options.eplb.window);
  step_counts_.assign(n_layers_ * n_experts_, 0);
  metrics_.ep_size = comm_->size();
  metrics_.rank = comm_->rank();
  metrics_.slots_per_rank = initial.slots_per_rank();
}

const ExpertPlacement& ExpertParallel::placement(int64_t layer) const {
  ICHECK(layer >= 0 && layer < n_layers_) << "layer " << layer;
  return placements_[layer];
}

bool ExpertParallel::keeps(int64_t layer, int64_t expert) const {
  return placement(layer).holds(rank(), expert);
}

void ExpertParallel::set_expert(int64_t layer, int64_t expert, ExpertTensors weights) {
  ICHECK(keeps(layer, expert)) << "expert " << expert << " of layer " << layer
                               << " is not on rank " << rank();
  experts_[layer][expert] = std::move(weights);
}

void ExpertParallel::check_loaded(int64_t dim, int64_t inter) {
  dim_ = dim;
  inter_ = inter;
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (int32_t e : placements_[l].experts_of(rank())) {
      const ExpertTensors& w = experts_[l][e];
      CHECK(w.w1.defined() && w.w3.defined() && w.w2.defined())
          << "expert parallelism: rank " << rank() << " holds expert " << e << " of layer " << l
          << " but has no weights for it";
      CHECK(w.w1.shape() == Shape({inter, dim}) && w.w3.shape() == Shape({inter, dim}) &&
            w.w2.shape() == Shape({dim, inter}))
          << "expert parallelism: expert " << e << " of layer " << l << " has shapes "
          << shape_str(w.w1.shape()) << " " << shape_str(w.w3.shape()) << " "
          << shape_str(w.w2.shape()) << ", expected [" << inter << ", " << dim << "] / [" << dim
          << ", " << inter << "]";
    }
  }
  metrics_.expert_bytes = held_expert_bytes();
  publish();
}

void ExpertParallel::routed_contributions(int64_t layer, const float* x, int64_t N, int64_t D,
                                          int64_t inter, float limit, const int32_t* ids,
                                          const float* weights, int64_t k, float* contrib,
                                          GemmMode mode) {
  ICHECK(layer == next_layer_) << "expert-parallel exchange for layer " << layer
                                << " while layer " << next_layer_ << " is next";
  ++next_layer_;
  const ExpertPlacement& pl = placement(layer);
  const int64_t P = size(), me = rank();
  const EpWire wire = options_.wire;
  const int64_t block = options_.fp8_block, n_kb = (D + block - 1) / block;
  const int64_t row_bytes = row_wire_bytes(wire, D, block);

  // 1. Which peer computes each (row, j), and the rows each peer needs (once per peer).
  std::vector<std::vector<int64_t>> out_rows(P);
  std::vector<std::vector<Assign>> out_assign(P);
  std::vector<int32_t> row_in_peer(P * N, -1);
  std::vector<int32_t> peer_of(N * k), assign_of(N * k);
  std::vector<int64_t> ordinal(n_experts_, 0);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[r * k + j];
      ICHECK(e >= 0 && e < n_experts_) << "routed expert " << e;
      if (counting()) ++step_counts_[layer * n_experts_ + e];
      const ExpertCopy& c = pl.choose(e, me, ordinal[e]++);
      int32_t& idx = row_in_peer[c.rank * N + r];
      if (idx < 0) {
        idx = static_cast<int32_t>(out_rows[c.rank].size());
        out_rows[c.rank].push_back(r);
      }
      peer_of[r * k + j] = c.rank;
      assign_of[r * k + j] = static_cast<int32_t>(out_assign[c.rank].size());
      out_assign[c.rank].push_back({idx, c.slot, weights[r * k + j]});
    }
  }

  // 2. Dispatch.
  std::vector<int64_t> send_bytes(P), recv_bytes(P);
  int64_t total_send = 0;
  for (int64_t p = 0; p < P; ++p) {
    send_bytes[p] = kHeaderBytes + static_cast<int64_t>(out_assign[p].size() * sizeof(Assign)) +
                    static_cast<int64_t>(out_rows[p].size()) * row_bytes;
    total_send += send_bytes[p];
    if (p != me) metrics_.dispatch_bytes += send_bytes[p];
  }
  std::vector<uint8_t> send(total_send);
  std::vector<float> rows_f32;
  std::vector<uint8_t> q;
  std::vector<float> scales;
  uint8_t* at = send.data();
  for (int64_t p = 0; p < P; ++p) {
    const int64_t n_rows = static_cast<int64_t>(out_rows[p].size());
    const int64_t header[2] = {n_rows, static_cast<int64_t>(out_assign[p].size())};
    std::memcpy(at, header, kHeaderBytes);
    at += kHeaderBytes;
    std::memcpy(at, out_assign[p].data(), out_assign[p].size() * sizeof(Assign));
    at += out_assign[p].size() * sizeof(Assign);
    rows_f32.resize(n_rows * D);
    for (int64_t i = 0; i < n_rows; ++i) {
      std::memcpy(&rows_f32[i * D], x + out_rows[p][i] * D, D * sizeof(float));
    }
    if (wire == EpWire::kF32) {
      std::memcpy(at, rows_f32.data(), rows_f32.size() * sizeof(float));
    } else {
      q.resize(n_rows * D);
      scales.resize(n_rows * n_kb);
      if (n_rows > 0) act_quant_ref(rows_f32.data(), n_rows, D, block, q.data(), scales.data());
      std::memcpy(at, q.data(), q.size());
      std::memcpy(at + q.size(), scales.data(), scales.size() * sizeof(float));
    }
    at += n_rows * row_bytes;
  }
  comm_->all_to_all_counts(send_bytes, recv_bytes);
  int64_t total_recv = 0;
  for (int64_t b : recv_bytes) total_recv += b;
  std::vector<uint8_t> recv(total_recv);
  comm_->all_to_all_v(data_or_dummy(send), send_bytes, data_or_dummy(recv), recv_bytes);

  // 3. Parse, then run every local slot over its rows (peers in rank order).
  std::vector<std::vector<float>> in_rows(P);
  std::vector<std::vector<Assign>> in_assign(P);
  const std::array<float, 256>& e4m3 = e4m3_values();
  const uint8_t* from = recv.data();
  for (int64_t p = 0; p < P; ++p) {
    ICHECK(recv_bytes[p] >= kHeaderBytes) << "expert-parallel dispatch from rank " << p;
    int64_t header[2];
    std::memcpy(header, from, kHeaderBytes);
    const int64_t n_rows = header[0], n_assign = header[1];
    ICHECK(recv_bytes[p] == kHeaderBytes + n_assign * static_cast<int64_t>(sizeof(Assign)) +
                                n_rows * row_bytes)
        << "expert-parallel dispatch from rank " << p << ": " << recv_bytes[p] << " bytes";
    const uint8_t* a = from + kHeaderBytes;
    in_assign[p].resize(n_assign);
    std::memcpy(in_assign[p].data(), a, n_assign * sizeof(Assign));
    a += n_assign * sizeof(Assign);
    in_rows[p].resize(n_rows * D);
    if (wire == EpWire::kF32) {
      std::memcpy(in_rows[p].data(), a, n_rows * D * sizeof(float));
    } else {
      const uint8_t* codes = a;
      const uint8_t* scale_bytes = a + n_rows * D;
      for (int64_t i = 0; i < n_rows; ++i) {
        for (int64_t b = 0; b < n_kb; ++b) {
          float s;
          std::memcpy(&s, scale_bytes + (i * n_kb + b) * sizeof(float), sizeof(float));
          for (int64_t c = b * block; c < std::min(D, (b + 1) * block); ++c) {
            in_rows[p][i * D + c] = e4m3[codes[i * D + c]] * s;
          }
        }
      }
    }
    from += recv_bytes[p];
  }
  const int64_t S = pl.slots_per_rank();
  std::vector<std::vector<std::pair<int32_t, int32_t>>> by_slot(S);  // (peer, assignment)
  for (int64_t p = 0; p < P; ++p) {
    for (size_t i = 0; i < in_assign[p].size(); ++i) {
      const Assign& as = in_assign[p][i];
      ICHECK(as.slot >= 0 && as.slot < S && as.row >= 0 &&
             as.row < static_cast<int64_t>(in_rows[p].size()) / std::max<int64_t>(D, 1))
          << "expert-parallel dispatch from rank " << p << ": slot " << as.slot << " row "
          << as.row;
      by_slot[as.slot].push_back({static_cast<int32_t>(p), static_cast<int32_t>(i)});
    }
  }
  std::vector<int64_t> ret_bytes(P), back_bytes(P);
  std::vector<int64_t> ret_offset(P + 1, 0);
  for (int64_t p = 0; p < P; ++p) {
    ret_bytes[p] = static_cast<int64_t>(in_assign[p].size()) * D * sizeof(float);
    back_bytes[p] = static_cast<int64_t>(out_assign[p].size()) * D * sizeof(float);
    ret_offset[p + 1] = ret_offset[p] + static_cast<int64_t>(in_assign[p].size()) * D;
    if (p != me) metrics_.combine_bytes += ret_bytes[p];
  }
  std::vector<float> ret(ret_offset[P]);
  std::vector<float> xs, out, wts;
  std::vector<int64_t> iota;
  for (int64_t s = 0; s < S; ++s) {
    const auto& list = by_slot[s];
    if (list.empty()) continue;
    const int32_t e = pl.expert_at(me, s);
    ICHECK(e >= 0) << "expert-parallel dispatch to empty slot " << s << " of rank " << me;
    const ExpertTensors& w = experts_[layer][e];
    ICHECK(w.w1.defined()) << "expert " << e << " of layer " << layer << " has no weights on rank "
                           << me;
    const int64_t n = static_cast<int64_t>(list.size());
    xs.resize(n * D);
    wts.resize(n);
    iota.resize(n);
    out.assign(n * D, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const Assign& as = in_assign[list[i].first][list[i].second];
      std::memcpy(&xs[i * D], &in_rows[list[i].first][as.row * D], D * sizeof(float));
      wts[i] = as.weight;
      iota[i] = i;
    }
    expert_ffn_accumulate_ref(xs.data(), D, iota, wts, {w.w1.f32(), w.w3.f32(), w.w2.f32()},
                              inter, limit, out.data(), mode);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(&ret[ret_offset[list[i].first] + list[i].second * D], &out[i * D],
                  D * sizeof(float));
    }
  }

  // 4. Combine.
  std::vector<int64_t> back_offset(P + 1, 0);
  for (int64_t p = 0; p < P; ++p) {
    back_offset[p + 1] = back_offset[p] + static_cast<int64_t>(out_assign[p].size()) * D;
  }
  std::vector<float> back(back_offset[P]);
  comm_->all_to_all_v(data_or_dummy(ret), ret_bytes, data_or_dummy(back), back_bytes);
  for (int64_t i = 0; i < N * k; ++i) {
    std::memcpy(contrib + i * D, &back[back_offset[peer_of[i]] + assign_of[i] * D],
                D * sizeof(float));
  }
}

bool ExpertParallel::rebalance_due() const {
  const int64_t interval = options_.eplb.interval;
  if (interval <= 0 || window_.n_steps() == 0) return false;
  const int64_t s = metrics_.steps, first = std::max<int64_t>(1, interval / 4);
  return s == first || (s > first && (s - first) % interval == 0);
}

void ExpertParallel::begin_step() {
  next_layer_ = 0;
  if (rebalance_due()) rebalance();
}

void ExpertParallel::end_step() {
  while (next_layer_ < n_layers_) {
    routed_contributions(next_layer_, nullptr, 0, std::max<int64_t>(dim_, 1), inter_, 0.0f,
                         nullptr, nullptr, 1, nullptr, GemmMode::kFixedOrder);
  }
  next_layer_ = 0;
  ++metrics_.steps;
  if (counting()) {
    comm_->all_reduce(step_counts_.data(), step_counts_.data(),
                      static_cast<int64_t>(step_counts_.size()), DType::I64, ReduceOp::kSum);
    window_.push(step_counts_);
    std::fill(step_counts_.begin(), step_counts_.end(), 0);
    metrics_.imbalance = window_imbalance(placements_);
  }
  publish();
}

double ExpertParallel::window_imbalance(const std::vector<ExpertPlacement>& placements) const {
  if (window_.n_steps() == 0 || n_layers_ == 0) return 1.0;
  double sum = 0.0;
  for (int64_t l = 0; l < n_layers_; ++l) {
    sum += placement_imbalance(placements[l], window_.layer_counts(l), window_.n_steps());
  }
  return sum / static_cast<double>(n_layers_);
}

bool ExpertParallel::rebalance() {
  // Every rank computes the policy on the same all-reduced window; rank 0's tables are then
  // broadcast so that all ranks switch to one placement whatever their floating point does.
  const int64_t S = placements_.empty() ? 0 : placements_[0].slots_per_rank();
  const int64_t P = size(), per_layer = P * S;
  std::vector<int32_t> tables(n_layers_ * per_layer);
  for (int64_t l = 0; l < n_layers_; ++l) {
    const ExpertPlacement& now = placements_[l];
    const std::vector<int64_t> counts = window_.layer_counts(l);
    const ExpertPlacement next = eplb_placement(counts, window_.n_steps(), now);
    const bool better = placement_imbalance(next, counts, window_.n_steps()) <
                        placement_imbalance(now, counts, window_.n_steps());
    const std::vector<int32_t>& chosen = better ? next.slot_experts() : now.slot_experts();
    std::copy(chosen.begin(), chosen.end(), tables.begin() + l * per_layer);
  }
  comm_->broadcast(tables.data(), static_cast<int64_t>(tables.size() * sizeof(int32_t)), 0);
  std::vector<ExpertPlacement> next(placements_);
  bool changed = false;
  for (int64_t l = 0; l < n_layers_; ++l) {
    next[l] = ExpertPlacement::from_slots(
        n_experts_, P, S,
        std::vector<int32_t>(tables.begin() + l * per_layer, tables.begin() + (l + 1) * per_layer));
    changed = changed || !(next[l] == placements_[l]);
  }
  if (!changed) return false;
  metrics_.imbalance_before = window_imbalance(placements_);
  for (int64_t l = 0; l < n_layers_; ++l) {
    if (next[l] == placements_[l]) continue;
    move_weights(l, next[l]);
    placements_[l] = next[l];
  }
  metrics_.imbalance_after = metrics_.imbalance = window_imbalance(placements_);
  ++metrics_.rebalances;
  metrics_.last_rebalance_step = metrics_.steps;
  metrics_.expert_bytes = held_expert_bytes();
  publish();
  return true;
}

void ExpertParallel::move_weights(int64_t layer, const ExpertPlacement& next) {
  const ExpertPlacement& old = placements_[layer];
  const int64_t P = size(), me = rank();
  // Every (destination, expert) it gains, with its source: destination-major, ascending expert.
  struct Move {
    int64_t dst, src;
    int32_t expert;
  };
  std::vector<Move> moves;
  for (int64_t dst = 0; dst < P; ++dst) {
    for (int32_t e : next.experts_of(dst)) {
      if (!old.holds(dst, e)) moves.push_back({dst, old.choose(e, dst, 0).rank, e});
    }
  }
  ICHECK(dim_ > 0 && inter_ > 0) << "EPLB: experts re-placed before check_loaded";
  const Shape s13{inter_, dim_}, s2{dim_, inter_};
  const int64_t n13 = inter_ * dim_, n2 = dim_ * inter_;
  const int64_t expert_floats = 2 * n13 + n2;
  std::vector<int64_t> send_bytes(P, 0), recv_bytes(P, 0);
  for (const Move& m : moves) {
    if (m.src == me) send_bytes[m.dst] += expert_floats * sizeof(float);
    if (m.dst == me) recv_bytes[m.src] += expert_floats * sizeof(float);
  }
  std::vector<float> send, recv;
  for (int64_t dst = 0; dst < P; ++dst) {  // rank order, ascending expert within a rank
    for (const Move& m : moves) {
      if (m.dst != dst || m.src != me) continue;
      const ExpertTensors& w = experts_[layer][m.expert];
      ICHECK(w.w1.defined()) << "EPLB: rank " << me << " was to send expert " << m.expert;
      send.insert(send.end(), w.w1.f32(), w.w1.f32() + n13);
      send.insert(send.end(), w.w3.f32(), w.w3.f32() + n13);
      send.insert(send.end(), w.w2.f32(), w.w2.f32() + n2);
    }
  }
  int64_t total_recv = 0;
  for (int64_t b : recv_bytes) total_recv += b;
  recv.resize(total_recv / sizeof(float));
  comm_->all_to_all_v(data_or_dummy(send), send_bytes, data_or_dummy(recv), recv_bytes);
  metrics_.weight_bytes_received += total_recv;

  std::vector<ExpertTensors> kept(n_experts_);
  for (int32_t e : next.experts_of(me)) {
    if (old.holds(me, e)) kept[e] = experts_[layer][e];
  }
  const float* at = recv.data();
  for (int64_t src = 0; src < P; ++src) {
    for (const Move& m : moves) {
      if (m.dst != me || m.src != src) continue;
      ExpertTensors w{Tensor::empty(DType::F32, s13), Tensor::empty(DType::F32, s13),
                      Tensor::empty(DType::F32, s2)};
      std::memcpy(w.w1.f32(), at, n13 * sizeof(float));
      std::memcpy(w.w3.f32(), at + n13, n13 * sizeof(float));
      std::memcpy(w.w2.f32(), at + 2 * n13, n2 * sizeof(float));
      at += expert_floats;
      kept[m.expert] = std::move(w);
    }
  }
  experts_[layer] = std::move(kept);
}

int64_t ExpertParallel::held_expert_bytes() const {
  int64_t bytes = 0;
  for (const std::vector<ExpertTensors>& layer : experts_) {
    for (const ExpertTensors& w : layer) {
      if (w.w1.defined()) bytes += w.w1.nbytes() + w.w3.nbytes() + w.w2.nbytes();
    }
  }
  return bytes;
}

ExpertParallelMetrics ExpertParallel::metrics() const {
  ExpertParallelMetrics m = metrics_;
  if (window_.n_steps() > 0) m.window_tokens = window_.totals();
  return m;
}

void ExpertParallel::publish() {
  std::lock_guard<std::mutex> lock(published_mu_);
  published_ = metrics_;
}

ExpertParallelMetrics ExpertParallel::published_metrics() const {
  std::lock_guard<std::mutex> lock(published_mu_);
  return published_;
}

}  // namespace deepinfer
