// Prometheus lines of expert parallelism and EPLB for `deepinfer serve`'s GET /metrics (issue 19
// deliverable 4); serve hands them to the server as text (ServerOptions::extra_metrics), so the
// server needs no parallel/ header.
//
//   deepinfer_ep_size                gauge    ranks of this rank's expert-parallel group (1: none)
//   deepinfer_ep_expert_bytes        gauge    routed-expert weight bytes this process holds now
//   deepinfer_ep_model_expert_bytes  gauge    the model's routed experts, one copy of each
//                                             (fp32, as the CPU backend holds them)
// and with expert parallelism (ExpertParallelMetrics; the load numbers are the EP group's, equal
// on every rank):
//   deepinfer_ep_steps_total                   counter  forwards run (collective steps)
//   deepinfer_ep_dispatch_bytes_total /
//   deepinfer_ep_combine_bytes_total           counter  bytes this rank sent to its peers
//   deepinfer_eplb_imbalance                   gauge    max / mean rank load over the window
//                                                       (mean over layers; 1 = balanced)
//   deepinfer_eplb_imbalance_before / _after   gauge    the same around the last rebalance
//   deepinfer_eplb_rebalances_total            counter  rebalances that moved experts
//   deepinfer_eplb_last_rebalance_step         gauge    the step of the last one (-1: none)
//   deepinfer_eplb_weight_bytes_received_total counter  expert weights this rank received
#pragma once

#include <cstdint>
#include <string>

#include "io/model_config.h"
#include "parallel/expert_parallel.h"

namespace deepinfer {

// fp32 bytes of every routed expert of every layer, one copy each (w1, w3 [I, D], w2 [D, I]).
int64_t model_routed_expert_bytes(const ModelConfig& config);

// The three deepinfer_ep_* gauges above.
std::string routed_expert_metrics_text(int64_t ep_size, int64_t held_bytes, int64_t model_bytes);

// Everything above for an expert-parallel rank.
std::string expert_parallel_metrics_text(const ExpertParallelMetrics& m, int64_t model_bytes);

}  // namespace deepinfer
