// The built-in tiny model: a small DeepSeek-V4 configuration (every layer type: sliding,
// CSA ratio 4 with indexer, HCA ratio 128; hash and top-k MoE) with the real 129,280-token
// vocabulary, whose weights are generated deterministically from kTinySeed. Used by
// `deepinfer generate` without --model, the server's default, tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>

#include "io/model_config.h"

namespace deepinfer {

constexpr uint64_t kTinySeed = 20261129;

ModelConfig tiny_model_config();

// The built-in tiny DeepSeek-V4.1: every V4.1 role in 8 layers (0-1 window only with
// Engram before layer 1, 2 ratio-2 KV+index source, 3 its reuse layer, 4 ratio-1 source
// and candidate source, 5 reuse, 6 reindex inside layer 4's candidates, 7 reuse of
// layer 6's top-k; Engram before layers 1 and 4), single-pass mHC, no hash layers, the
// real vocabulary.
ModelConfig tiny_v41_model_config();

// Names accepted for --model / LLM(model=...) that select a built-in model instead of a
// checkpoint directory: "tiny" (the default, V4), "tiny-v4", "tiny-v4.1". Empty = default.
bool is_builtin_model(const std::string& name);
// Whether `--model` / `LLM(model=...)` selects a built-in model: a built-in name with no
// directory of that name (a directory always wins).
bool selects_builtin_model(const std::string& model);
// The built-in V4.1 model's tokenizer is V4's with V4.1's spellings (recipe/v41_tokenizer.h).
bool builtin_model_uses_v41_tokenizer(const std::string& model);
// Throws kInvalidInput for a name that is not built in.
ModelConfig builtin_model_config(const std::string& name);
std::string builtin_model_label(const std::string& name);  // e.g. "deepinfer-tiny-v4.1"

// The model the front ends (deepinfer generate / serve / bench, Python LLM()) run when none is
// named (issue 16): $DEEPINFER_DEFAULT_MODEL when it is set and not empty (a checkpoint
// directory or a built-in name), else the trained tiny V4.1 model shipped in the source tree
// (models/trained-v41: real weights that continue Python code), else "" (the built-in random
// tiny model) when that directory is missing, e.g. a package installed without the tree.
// Library callers (EngineArgs, ModelRunner) keep "" = the built-in tiny model.
std::string default_model();
// `requested` when not empty, else default_model().
std::string model_or_default(const std::string& requested);

}  // namespace deepinfer
