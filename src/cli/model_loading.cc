#include "cli/model_loading.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "base/logging.h"
#include "model/tiny_model.h"
#include "recipe/detokenizer.h"
#include "recipe/v41_tokenizer.h"

namespace deepinfer {

std::string tiny_tokenizer_path() {
  if (const char* env = std::getenv("DEEPINFER_TINY_TOKENIZER")) return env;
  return std::string(DEEPINFER_SOURCE_DIR) + "/models/tiny/tokenizer.json";
}

std::vector<int32_t> LoadedModel::encode(const std::string& text) const {
  CHECK(tokenizer != nullptr) << "this model has no tokenizer.json: use --prompt-ids or --tokenizer PATH";
  return tokenizer->encode(text, /*add_special_tokens=*/true);
}

std::function<std::string(int32_t)> LoadedModel::make_stream() const {
  if (tokenizer == nullptr) {
    return [](int32_t id) { return "[" + std::to_string(id) + "]"; };
  }
  auto detok = std::make_shared<recipe::StreamDetokenizer>(*tokenizer, /*skip_special_tokens=*/false);
  return [detok](int32_t id) { return detok->push(id); };
}

LoadedModel load_model_for_cli(const std::string& model_dir, const ModelOptions& options,
                               const std::string& tokenizer_override) {
  LoadedModel loaded;
  const auto t0 = std::chrono::steady_clock::now();
  std::string tokenizer_path;
  if (selects_builtin_model(model_dir)) {
    const ModelConfig config = builtin_model_config(model_dir);
    auto source = random_weights(config, kTinySeed);
    loaded.model = Model::from_source(config, *source, options);
    tokenizer_path = tiny_tokenizer_path();
    LOG(INFO) << "built-in " << builtin_model_label(model_dir) << " model (random weights, seed "
              << kTinySeed << "), numerics " << numerics_name(options.numerics);
  } else {
    loaded.model = Model::load(model_dir, options);
    tokenizer_path = model_dir + "/tokenizer.json";
    LOG(INFO) << "loaded " << model_dir << ", numerics " << numerics_name(options.numerics);
  }
  if (!tokenizer_override.empty()) {
    loaded.tokenizer = std::make_unique<recipe::Tokenizer>(recipe::Tokenizer::from_file(tokenizer_override));
  } else if (std::filesystem::exists(tokenizer_path)) {
    loaded.tokenizer = std::make_unique<recipe::Tokenizer>(
        builtin_model_uses_v41_tokenizer(model_dir) ? recipe::Tokenizer::from_json(recipe::v41_tokenizer_json_from_v4(tokenizer_path))
                    : recipe::Tokenizer::from_file(tokenizer_path));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  LOG(INFO) << "model ready in " << secs << " s";
  return loaded;
}

}  // namespace deepinfer
