#include "parallel/parallel_metrics.h"

#include <sstream>

namespace deepinfer {
namespace {

template <typename T>
void line(std::ostringstream& s, const char* name, const char* type, const char* help, T value) {
  s << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << value << "\n";
}

}  // namespace

int64_t model_routed_expert_bytes(const ModelConfig& c) {
  return c.num_layers * c.n_routed_experts * 3 * c.moe_intermediate_size * c.hidden_size *
         static_cast<int64_t>(sizeof(float));
}

std::string routed_expert_metrics_text(int64_t ep_size, int64_t held_bytes, int64_t model_bytes) {
  std::ostringstream s;
  line(s, "deepinfer_ep_size", "gauge", "Ranks of this rank's expert-parallel group (1: no expert parallelism).",
       ep_size);
  line(s, "deepinfer_ep_expert_bytes", "gauge", "Routed-expert weight bytes this process holds.", held_bytes);
  line(s, "deepinfer_ep_model_expert_bytes", "gauge", "Routed-expert weight bytes of the whole model, one copy each.",
       model_bytes);
  return s.str();
}

std::string expert_parallel_metrics_text(const ExpertParallelMetrics& m, int64_t model_bytes) {
  std::ostringstream s;
  s << routed_expert_metrics_text(m.ep_size, m.expert_bytes, model_bytes);
  line(s, "deepinfer_ep_steps_total", "counter", "Expert-parallel forwards run (collective steps).", m.steps);
  line(s, "deepinfer_ep_dispatch_bytes_total", "counter", "Bytes of token rows this rank dispatched to its peers.",
       m.dispatch_bytes);
  line(s, "deepinfer_ep_combine_bytes_total", "counter", "Bytes of expert outputs this rank sent back to its peers.",
       m.combine_bytes);
  line(s, "deepinfer_eplb_imbalance", "gauge",
       "Max / mean rank load of routed tokens over the EPLB window, mean over layers (1: balanced).", m.imbalance);
  line(s, "deepinfer_eplb_imbalance_before", "gauge", "deepinfer_eplb_imbalance just before the last rebalance.",
       m.imbalance_before);
  line(s, "deepinfer_eplb_imbalance_after", "gauge", "deepinfer_eplb_imbalance just after the last rebalance.",
       m.imbalance_after);
  line(s, "deepinfer_eplb_rebalances_total", "counter", "EPLB rebalances that re-placed at least one layer's experts.",
       m.rebalances);
  line(s, "deepinfer_eplb_last_rebalance_step", "gauge", "The step of the last rebalance (-1: none yet).",
       m.last_rebalance_step);
  line(s, "deepinfer_eplb_weight_bytes_received_total", "counter", "Expert weight bytes this rank received from EPLB moves.",
       m.weight_bytes_received);
  return s.str();
}

}  // namespace deepinfer
