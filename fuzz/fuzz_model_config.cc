// libFuzzer harness: config.json text -> ModelConfig (parse_model_config: V4 flat configs and
// V4.1's model_type deepseek_v41 with text_config, deepseek_v41_text flat), the layer plan it
// derives and the invariants the loader and the forward rely on (one plan entry, compress
// ratio and hash flag per layer; every cross-layer reference inside the backbone).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "io/config_parser.h"
#include "io/layer_plan.h"

using namespace deepinfer;

namespace {

void check_invariants(const ModelConfig& c) {
  const size_t n = static_cast<size_t>(c.num_layers);
  if (c.num_layers <= 0 || c.compress_ratios.size() != n || c.hash_layers.size() != n || c.plan.size() != n) {
    fuzz::finding("accepted config", "layer vectors do not match num_layers");
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    (void)layer_role_name(c.plan[l], l);
    (void)c.is_hash_layer(l);
    (void)c.compress_ratio(l);
    const LayerPlan& p = c.plan[l];
    for (int64_t from : {p.kv_from, p.index_keys_from, p.topk_from, p.candidates_from}) {
      if (from < -1 || from >= c.num_layers) fuzz::finding("accepted config", "a layer plan reference is out of range");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  // The loader refuses text that is not JSON before the parser sees it (load_model_config).
  nlohmann::json config = nlohmann::json::parse(text, text + size, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;
  fuzz::expect_ok_or_refusal([&] {
    const ModelConfig c = parse_model_config(config);
    check_invariants(c);
  });
  return 0;
}
