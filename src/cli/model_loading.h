// Loading a model and its tokenizer for the command line: a checkpoint directory
// (config.json, safetensors, tokenizer.json) or, without one, the built-in tiny model
// with the repository's V4 tokenizer (models/tiny/tokenizer.json).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "recipe/tokenizer.h"

namespace deepinfer {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<recipe::Tokenizer> tokenizer;  // null when the checkpoint has none

  std::vector<int32_t> encode(const std::string& text) const;
  // A fresh streaming detokenizer: token id -> complete UTF-8 text so far.
  std::function<std::string(int32_t)> make_stream() const;
};

// Path of the built-in tiny model's tokenizer (env DEEPINFER_TINY_TOKENIZER overrides).
std::string tiny_tokenizer_path();

// `tokenizer_path` (--tokenizer, or resolve_tokenizer's choice) replaces the model's own
// tokenizer.json when not empty.
LoadedModel load_model_for_cli(const std::string& model_dir, const ModelOptions& options,
                               const std::string& tokenizer_path = "");

}  // namespace deepinfer
