// Engine: serves many requests at once on one model (DESIGN.md §1 `engine`).
// The step loop is  schedule -> execute -> update:
//   scheduler.schedule() picks each running request's chunk (prefill chunk, decode token,
//   recomputation after preemption) within the token budget; the model runs all chunks as
//   one batch; the sampler picks tokens for the requests whose chunk reached their end;
//   scheduler.update() appends them and finishes requests (max_tokens, EOS, stop ids); the
//   detokenizer finds stop strings.
// With overlap on, the CPU schedules step t+1 while step t executes.
//
// Thread-safety: Engine is single-threaded (one caller drives add_request/step/abort).
// AsyncEngine (async_engine.h) runs the loop on its own thread for the server.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"

namespace deepinfer {

struct EngineArgs {
  std::string model_dir;               // empty: the built-in tiny model
  ModelOptions model_options;          // numerics, batch_invariant
  bool dummy_weights = false;          // random weights for model_dir's config.json
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;           // 0: the model's max_position_embeddings
  int64_t state_budget_bytes = 0;      // 0: a default CPU budget; sizes the state pools
  bool overlap = true;                 // schedule step t+1 while step t runs
  bool priority = false;               // priority scheduling instead of FCFS
};

struct EngineRequest {
  std::string id;                      // unique among live requests
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::vector<std::string> stop;       // stop strings (matched on detokenized text)
  int64_t priority = 0;
  int64_t n_logprobs = -1;             // -1: none; k >= 0: chosen token + top-k logprobs
};

struct TokenLogprob {
  int32_t token;
  float logprob;
  std::vector<std::pair<int32_t, float>> top;  // top-k (id, logprob)
};

struct RequestOutput {
  std::string id;
  std::vector<int32_t> new_tokens;     // tokens produced since the last output of this id
  std::string new_text;                // their detokenized text (complete UTF-8 only)
  std::vector<TokenLogprob> logprobs;  // one per new token when requested
  bool finished = false;
  std::string finish_reason;           // "stop", "length", "abort" when finished
  int64_t n_prompt_tokens = 0;
  int64_t n_output_tokens = 0;
};

class Engine {
 public:
  explicit Engine(const EngineArgs& args);
  ~Engine();

  const ModelConfig& model_config() const;
  // Validates and queues a request; throws Error (bad params, prompt too long, duplicate id)
  // and leaves the engine unchanged.
  void add_request(EngineRequest request);
  // Cancels a request at any time, freeing its state. False if unknown or finished.
  bool abort(const std::string& id);
  // Runs one step; returns outputs for requests that produced tokens or finished.
  std::vector<RequestOutput> step();
  bool has_unfinished() const;
  // Blocking convenience: runs until every given request finishes; outputs in input order
  // with all tokens accumulated.
  std::vector<RequestOutput> generate(std::vector<EngineRequest> requests);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
