// ExpertParallel: MoE expert parallelism of the CPU backend over a Communicator (issue 19
// deliverables 3 and 4; DESIGN.md §1 `parallel`). One per rank of an EP group; the Model holds
// it through ModelOptions::expert_parallel and keeps only the routed experts of its rank's
// slots (ExpertPlacement), the shared expert and everything else replicated.
//
// One MoE layer of one step (routed_contributions, called by the Model on every rank in the
// same layer order; a rank with no rows still calls it with n_rows = 0):
//   1. the home rank routes its own rows (the Model does), and for each (row, j) picks the copy
//      of expert ids[row, j] (ExpertPlacement::choose);
//   2. dispatch: each peer gets one message: {n_rows, n_assign}, n_assign records
//      {row, slot, routing weight}, then the x rows it needs, each row once per peer:
//      fp32 (EpWire::kF32, the default: bitwise the single-process inputs) or FP8 e4m3 codes +
//      one fp32 scale per `fp8_block` columns (EpWire::kFp8, act_quant_ref's format and
//      rounding, the wire of the CUDA path; the experts then see q * s);
//      byte counts by all_to_all_counts, the messages by all_to_all_v;
//   3. each rank runs every local slot over the rows it received for it (all peers, rank
//      order) with expert_ffn_accumulate_ref into zeros: the weighted expert output per
//      assignment, NOT summed over experts;
//   4. combine: the outputs go back (fp32, all_to_all_v) and land as contrib[row * k + j].
// The Model then sums each row's contributions in ascending expert id from zero and adds the
// shared expert (model/block_parts.h moe_ordered_sum), exactly the single-process order, so
// with batch-invariant GEMMs (fixed reduction order: an expert's output row does not depend on
// the rows it runs with) the logits equal the single-process ones bitwise.
//
// Steps: begin_step() / end_step() bracket every Model::forward (collective, lockstep). With
// EPLB on (EplbOptions::interval > 0) or track_load, routed_contributions counts the home
// rank's routed ids per layer and expert, end_step all-reduces them into the window
// (parallel/eplb.h), and begin_step rebalances when due: every rank computes the same new
// placement from the same counts, a layer's placement changes only when it lowers the
// imbalance, the expert weights a rank gains come from a rank that holds them (the copy
// ExpertPlacement::choose(e, gaining rank, 0) names in the old placement) by all_to_all_v of
// their fp32 bytes, experts a rank no longer holds are dropped, and the new tables take effect
// for that step's layers. No request state depends on the placement, so in-flight requests
// continue unchanged.
//
// Thread-safety: one thread at a time (the Model's forward), except published_metrics(), which
// any thread may call at any time. Not copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "ops/linear/linear.h"
#include "parallel/communicator.h"
#include "parallel/eplb.h"
#include "parallel/expert_placement.h"
#include "tensor/tensor.h"

namespace deepinfer {

enum class EpWire : uint8_t { kF32, kFp8 };
const char* ep_wire_name(EpWire wire);    // "fp32", "fp8"
EpWire parse_ep_wire(const std::string& name);  // throws kInvalidInput naming the choices

struct ExpertParallelOptions {
  EpWire wire = EpWire::kF32;
  int64_t fp8_block = 128;  // columns per FP8 scale on the wire
  EplbOptions eplb;         // interval 0: EPLB off
  // Count routed tokens (and compute the imbalance for metrics) even with EPLB off: one
  // all-reduce of n_layers * n_experts int64 per step.
  bool track_load = false;
};

// The weights of one routed expert: w1 [I, D] gate, w3 [I, D] up, w2 [D, I] down, fp32.
struct ExpertTensors {
  Tensor w1, w3, w2;
};

// What /metrics shows (every rank holds the same load numbers; bytes are this rank's).
struct ExpertParallelMetrics {
  int64_t ep_size = 1, rank = 0, slots_per_rank = 0;
  int64_t steps = 0;       // forwards run
  int64_t rebalances = 0;  // rebalances that changed at least one layer
  int64_t last_rebalance_step = -1;
  // Mean over layers of placement_imbalance over the window: now, and before / after the last
  // rebalance (1 with no counts).
  double imbalance = 1.0, imbalance_before = 1.0, imbalance_after = 1.0;
  int64_t dispatch_bytes = 0, combine_bytes = 0;  // sent by this rank, all steps
  int64_t weight_bytes_received = 0;              // by EPLB re-placement
  int64_t expert_bytes = 0;  // routed-expert weights this rank holds (from check_loaded and each rebalance)
  // Routed tokens per (layer, expert) over the window, layer-major [n_layers * n_experts];
  // empty when nothing is counted.
  std::vector<int64_t> window_tokens;
};

class ExpertParallel {
 public:
  // `comm`: the EP group (its size is the EP size; every rank runs the Model in lockstep).
  // `config`: the backbone's; n_routed_experts must be divisible by comm->size(). Every MoE
  // layer starts from the contiguous placement with options.eplb.extra_slots_per_rank empty
  // slots. Host communicators only (kHost); throws kInvalidInput otherwise.
  static std::shared_ptr<ExpertParallel> create(std::shared_ptr<Communicator> comm,
                                                const ModelConfig& config,
                                                const ExpertParallelOptions& options = {});
  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  int64_t n_layers() const { return n_layers_; }
  int64_t n_experts() const { return n_experts_; }
  const ExpertParallelOptions& options() const { return options_; }
  Communicator& communicator() { return *comm_; }
  const ExpertPlacement& placement(int64_t layer) const;

  // Loading: whether this rank keeps expert `expert` of `layer` (the current placement), and
  // the weights of a kept expert (the Model hands them over; it keeps no routed experts).
  bool keeps(int64_t layer, int64_t expert) const;
  void set_expert(int64_t layer, int64_t expert, ExpertTensors weights);
  // Throws kInvalidInput naming the first kept expert without weights, or one with a shape other
  // than [inter, dim] / [dim, inter]; remembers the shapes for EPLB's weight moves. The Model
  // calls it once after handing the experts over.
  void check_loaded(int64_t dim, int64_t inter);

  // Collective step brackets (see the header comment). begin_step rebalances when due;
  // end_step first runs the exchanges of the layers this step has not reached yet with zero
  // rows (a rank with no chunks, or whose forward failed before the end), then all-reduces the
  // step's counts when counting.
  void begin_step();
  void end_step();
  // Forces a rebalance now (collective; tests and operators). Returns whether any layer's
  // placement changed.
  bool rebalance();

  // One layer's routed experts for this rank's rows (collective; layers of a step in
  // ascending order, each once; n_rows may be 0 and x, ids, weights, contrib then unused):
  // x [n_rows, dim],
  // ids / weights [n_rows, top_k] -> contrib [n_rows * top_k, dim], the weighted output of
  // expert ids[r, j] for row r. `inter`, `limit`: the experts' shape and SwiGLU clamp.
  void routed_contributions(int64_t layer, const float* x, int64_t n_rows, int64_t dim,
                            int64_t inter, float limit, const int32_t* ids, const float* weights,
                            int64_t top_k, float* contrib, GemmMode mode);

  ExpertParallelMetrics metrics() const;
  // metrics() without window_tokens as of the last check_loaded / end_step / rebalance
  // (a copy taken then on the model's thread). Thread-safe: the server's /metrics reads it
  // while the model steps.
  ExpertParallelMetrics published_metrics() const;

 private:
  ExpertParallel(std::shared_ptr<Communicator> comm, const ModelConfig& config,
                 const ExpertParallelOptions& options);
  bool counting() const { return options_.eplb.interval > 0 || options_.track_load; }
  bool rebalance_due() const;
  double window_imbalance(const std::vector<ExpertPlacement>& placements) const;
  // Moves weights so this rank holds what `next` gives it (collective).
  void move_weights(int64_t layer, const ExpertPlacement& next);
  int64_t held_expert_bytes() const;  // summed over experts_: only when they change
  void publish();  // copies metrics_ (no window_tokens) into published_

  std::shared_ptr<Communicator> comm_;
  ExpertParallelOptions options_;
  int64_t n_layers_ = 0, n_experts_ = 0;
  int64_t dim_ = 0, inter_ = 0;  // expert shapes (check_loaded)
  std::vector<ExpertPlacement> placements_;            // [n_layers]
  std::vector<std::vector<ExpertTensors>> experts_;    // [n_layers][n_experts]; kept ones defined
  ExpertLoadWindow window_;
  std::vector<int64_t> step_counts_;  // this rank's counts of the current step
  int64_t next_layer_ = 0;            // the layer this step's next exchange is for
  ExpertParallelMetrics metrics_;
  mutable std::mutex published_mu_;
  ExpertParallelMetrics published_;  // guarded by published_mu_
};

}  // namespace deepinfer
