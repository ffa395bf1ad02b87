// draft_acceptance: the acceptance of a checkpoint's drafter under the engine's greedy
// speculative decoding (spec/greedy_speculative) on given prompts, and whether its output
// equals plain greedy decoding (tools/train_drafter.py --acceptance,
// tests/python/test_trained_drafter.py):
//
//   draft_acceptance --model DIR --prompts FILE [--max-new N] [--k K]
//                    [--numerics official|reference] [--plain 0|1] [--temperature T]
//
// FILE holds one prompt per line (token ids separated by commas or spaces). Each prompt runs
// in a fresh state (batch-invariant GEMMs, so verification rows equal single-token rows):
// greedy_speculative with the model's drafter (DSpark or MTP-1: spec::model_drafter), k drafts
// per step (default: the drafter's draft length; the model's rollback depth is set to k),
// N new tokens (default 64); with --plain 1 (default) also greedy_plain, compared token for
// token. Prints one JSON line per prompt and a summary line:
//   {"prompt":i,"steps":..,"drafted":..,"accepted":..,"mean_acceptance_length":..,
//    "accepted_at":[..],"equal_to_plain":true|false|null,"tokens":[..]}
//   {"summary":true,"prompts":..,"k":..,"steps":..,"drafted":..,"accepted":..,
//    "mean_acceptance_length":..,"acceptance_rate_at":[..],"all_equal_to_plain":..}
// acceptance_rate_at[i] = (steps whose draft i was accepted) / steps;
// mean_acceptance_length = (accepted + steps) / steps (committed tokens per verification).
//
// With --temperature T > 0 the prompts run through the Engine instead (speculative_method
// "auto", k speculative tokens, sampled verification by rejection sampling, seed = prompt
// index, EOS ignored) and one summary line gives the engine's EngineStats acceptance
// ({"summary":true,...,"temperature":T,...}; no plain comparison: sampled output is only
// equal in distribution).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"
#include "tool_util.h"
#include "spec/greedy_speculative.h"

namespace {

using namespace deepinfer;

using tools::read_token_lists;

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::string rates(const std::vector<int64_t>& at, int64_t steps) {
  std::string s;
  char buf[32];
  for (size_t i = 0; i < at.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.6f", i ? "," : "", steps ? double(at[i]) / double(steps) : 0.0);
    s += buf;
  }
  return s;
}

// Sampled verification through the Engine (EngineStats acceptance).
int run_sampled(const std::string& model_dir, const std::vector<std::vector<int32_t>>& prompts,
                const std::string& numerics, int64_t max_new, int64_t k, float temperature) {
  EngineArgs args;
  args.model_dir = model_dir;
  args.model_options.numerics = parse_numerics(numerics);
  args.model_options.batch_invariant = true;
  args.speculative_method = "auto";
  args.num_speculative_tokens = k;
  Engine engine(args);
  std::vector<EngineRequest> requests;
  for (size_t s = 0; s < prompts.size(); ++s) {
    EngineRequest r;
    r.id = std::to_string(s);
    r.prompt = prompts[s];
    r.params.temperature = temperature;
    r.params.seed = s;
    r.params.max_tokens = max_new;
    r.params.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  engine.generate(std::move(requests));
  const EngineStats& st = engine.stats();
  std::vector<int64_t> at = st.accepted_at;
  at.resize(k, 0);
  std::printf("{\"summary\": true, \"prompts\": %zu, \"k\": %lld, \"max_new\": %lld, \"numerics\": \"%s\", "
              "\"temperature\": %g, \"steps\": %lld, \"drafted\": %lld, \"accepted\": %lld, "
              "\"mean_acceptance_length\": %.6f, \"acceptance_rate_at\": [%s], \"all_equal_to_plain\": null}\n",
              prompts.size(), static_cast<long long>(k), static_cast<long long>(max_new), numerics.c_str(),
              static_cast<double>(temperature), static_cast<long long>(st.n_verifications),
              static_cast<long long>(st.n_drafts_verified), static_cast<long long>(st.n_drafts_accepted),
              st.mean_acceptance_length(), rates(at, st.n_verifications).c_str());
  return 0;
}

int run(int argc, char** argv) {
  std::string model_dir, prompts_path, numerics = "official";
  int64_t max_new = 64, k = 0, plain = 1;
  float temperature = 0.0f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") model_dir = next();
    else if (a == "--prompts") prompts_path = next();
    else if (a == "--max-new") max_new = std::stoll(next());
    else if (a == "--k") k = std::stoll(next());
    else if (a == "--numerics") numerics = next();
    else if (a == "--plain") plain = std::stoll(next());
    else if (a == "--temperature") temperature = std::stof(next());
    else throw std::runtime_error("unknown argument " + a);
  }
  if (model_dir.empty() || prompts_path.empty()) {
    throw std::runtime_error("usage: draft_acceptance --model DIR --prompts FILE [--max-new N] [--k K] "
                             "[--numerics official|reference] [--plain 0|1]");
  }
  if (max_new < 2) throw std::runtime_error("--max-new must be at least 2");
  if (temperature < 0.0f) throw std::runtime_error("--temperature must be >= 0");
  if (temperature > 0.0f) {
    if (k <= 0) throw std::runtime_error("--temperature needs --k");
    return run_sampled(model_dir, read_token_lists(prompts_path), numerics, max_new, k, temperature);
  }
  ModelOptions options;
  options.numerics = parse_numerics(numerics);
  options.batch_invariant = true;
  if (k > 0) options.max_rollback = k;
  auto model = Model::load(model_dir, options);
  if (!model->has_drafter()) throw std::runtime_error(model_dir + " has no drafter");
  if (k == 0) k = model->rollback_depth();
  const Drafter drafter = model_drafter(*model);
  SpeculativeStats total;
  total.accepted_at.assign(k, 0);
  bool all_equal = true;
  const auto prompts = read_token_lists(prompts_path);
  for (size_t s = 0; s < prompts.size(); ++s) {
    auto state = model->new_state();
    const GreedyOutput spec = greedy_speculative(*model, *state, prompts[s], max_new, k, drafter);
    std::string equal = "null";
    if (plain) {
      auto plain_state = model->new_state();
      const GreedyOutput ref = greedy_plain(*model, *plain_state, prompts[s], max_new);
      const bool eq = ref.tokens == spec.tokens;
      all_equal &= eq;
      equal = eq ? "true" : "false";
    }
    const SpeculativeStats& st = spec.stats;
    total.steps += st.steps;
    total.drafted += st.drafted;
    total.accepted += st.accepted;
    for (int64_t i = 0; i < k; ++i) total.accepted_at[i] += st.accepted_at[i];
    std::vector<int64_t> toks(spec.tokens.begin(), spec.tokens.end());
    std::printf("{\"prompt\": %zu, \"steps\": %lld, \"drafted\": %lld, \"accepted\": %lld, "
                "\"mean_acceptance_length\": %.6f, \"accepted_at\": [%s], \"equal_to_plain\": %s, "
                "\"tokens\": [%s]}\n",
                s, static_cast<long long>(st.steps), static_cast<long long>(st.drafted),
                static_cast<long long>(st.accepted), st.mean_acceptance_length(), join(st.accepted_at).c_str(),
                equal.c_str(), join(toks).c_str());
    std::fflush(stdout);
  }
  std::printf("{\"summary\": true, \"prompts\": %zu, \"k\": %lld, \"max_new\": %lld, \"numerics\": \"%s\", "
              "\"steps\": %lld, \"drafted\": %lld, \"accepted\": %lld, \"mean_acceptance_length\": %.6f, "
              "\"acceptance_rate_at\": [%s], \"all_equal_to_plain\": %s}\n",
              prompts.size(), static_cast<long long>(k), static_cast<long long>(max_new), numerics.c_str(),
              static_cast<long long>(total.steps), static_cast<long long>(total.drafted),
              static_cast<long long>(total.accepted), total.mean_acceptance_length(),
              rates(total.accepted_at, total.steps).c_str(), plain ? (all_equal ? "true" : "false") : "null");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return deepinfer::tools::tool_main("draft_acceptance", run, argc, argv); }
