// WeightSource over a checkpoint directory: io::WeightStore dequantises FP8/FP4/BF16 to
// fp32 under native names, whichever naming the files use.
#include <cstdlib>
#include <filesystem>

#include "io/config_parser.h"
#include "io/weight_loader.h"
#include "model/model.h"
#include "model/weight_source.h"

namespace deepinfer {
namespace {

class CheckpointWeights : public WeightSource {
 public:
  CheckpointWeights(const std::string& dir, const ModelConfig& config)
      : dir_(dir), store_(WeightStore::load(dir, config)) {}

  std::string engram_token_map_path() const override {
    const std::string beside = dir_ + "/engram_token_map.bin";
    if (std::getenv("DEEPINFER_ENGRAM_TOKEN_MAP") == nullptr && std::filesystem::exists(beside)) {
      return beside;
    }
    return WeightSource::engram_token_map_path();
  }

  Tensor take(const std::string& name, const Shape& shape) override {
    const bool is_table = name.size() >= 7 && name.compare(name.size() - 7, 7, "tid2eid") == 0;
    return store_.take(name, shape, is_table ? DType::I32 : DType::F32);
  }

  Tensor take_raw(const std::string& name, const Shape& shape, DType dtype) override {
    return store_.take(name, shape, dtype);
  }

  bool has(const std::string& name) const override { return store_.has(name); }

  std::vector<std::string> untaken() const override { return store_.untaken_excluding("mtp."); }

 private:
  std::string dir_;
  WeightStore store_;
};

}  // namespace

std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& dir,
                                                      const ModelConfig& config) {
  return std::make_unique<CheckpointWeights>(dir, config);
}

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
  const ModelConfig config = load_model_config(dir);
  auto source = open_checkpoint_weights(dir, config);
  return from_source(config, *source, options);
}

}  // namespace deepinfer
