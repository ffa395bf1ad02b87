// draft_logits: the engine's drafter output (Model::draft) for given tokens, for a training
// framework to check its drafter forward against (tools/train_drafter.py --check-engine):
//
//   draft_logits --model DIR --ids FILE --positions P1,P2,.. --out PREFIX
//                [--numerics official|reference]
//
// FILE holds one sequence per line (token ids separated by commas or spaces). For every
// sequence and every position p of --positions with p + 1 < the sequence's length, a fresh
// state prefills tokens 0..p in one forward and drafts after it with the anchor ids[p + 1]
// (the token for position p + 1). Rows are written in that order (sequence-major):
//   PREFIX.logits.f32      [rows, block, V]  the drafter's Markov-corrected fp32 logits
//   PREFIX.confidence.f32  [rows, block]     the raw confidence logits c_i
//   PREFIX.hidden.f32      [rows, block, D]  the collapsed pre-norm hidden h_i
// and prints one JSON line: {"rows":..,"block":..,"vocab":..,"hidden":..,"rows_at":[[s,p],..],
// "tokens":[[..],..]} (tokens: the greedy drafts of each row).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"
#include "tool_util.h"

namespace {

using deepinfer::Model;
using deepinfer::ModelOptions;
using deepinfer::SequenceChunk;

std::vector<int64_t> parse_list(std::string s) {
  for (char& ch : s) {
    if (ch == ',') ch = ' ';
  }
  std::istringstream ss(s);
  std::vector<int64_t> out;
  int64_t v;
  while (ss >> v) out.push_back(v);
  return out;
}

using deepinfer::tools::read_token_lists;

template <typename T>
void write_all(std::ofstream& f, const std::vector<T>& v) {
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

int run(int argc, char** argv) {
  std::string model_dir, ids_path, out_prefix, positions, numerics = "official";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") model_dir = next();
    else if (a == "--ids") ids_path = next();
    else if (a == "--positions") positions = next();
    else if (a == "--out") out_prefix = next();
    else if (a == "--numerics") numerics = next();
    else throw std::runtime_error("unknown argument " + a);
  }
  if (model_dir.empty() || ids_path.empty() || out_prefix.empty() || positions.empty()) {
    throw std::runtime_error("usage: draft_logits --model DIR --ids FILE --positions P1,P2,.. --out PREFIX "
                             "[--numerics official|reference]");
  }
  ModelOptions options;
  options.numerics = deepinfer::parse_numerics(numerics);
  auto model = Model::load(model_dir, options);
  if (!model->has_drafter()) throw std::runtime_error(model_dir + " has no drafter");
  const std::vector<int64_t> ps = parse_list(positions);
  for (int64_t p : ps) {
    if (p < 0) throw std::runtime_error("--positions: negative position " + std::to_string(p));
  }
  std::ofstream logits_out(out_prefix + ".logits.f32", std::ios::binary);
  std::ofstream conf_out(out_prefix + ".confidence.f32", std::ios::binary);
  std::ofstream hidden_out(out_prefix + ".hidden.f32", std::ios::binary);
  std::string rows_at, tokens;
  int64_t rows = 0, block = 0;
  const auto seqs = read_token_lists(ids_path);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t p : ps) {
      if (p + 1 >= static_cast<int64_t>(seqs[s].size())) continue;
      auto state = model->new_state();
      SequenceChunk c{state.get(), std::span<const int32_t>(seqs[s].data(), p + 1), false};
      model->forward(std::span<const SequenceChunk>(&c, 1));
      const deepinfer::DraftBlock b = model->draft(*state, seqs[s][p + 1]);
      write_all(logits_out, b.logits);
      write_all(conf_out, b.confidence);
      write_all(hidden_out, b.hidden);
      block = static_cast<int64_t>(b.tokens.size());
      rows_at += (rows ? "," : "") + std::string("[") + std::to_string(s) + "," + std::to_string(p) + "]";
      tokens += rows ? ",[" : "[";
      for (size_t i = 0; i < b.tokens.size(); ++i) tokens += (i ? "," : "") + std::to_string(b.tokens[i]);
      tokens += "]";
      ++rows;
    }
  }
  std::printf("{\"rows\": %lld, \"block\": %lld, \"vocab\": %lld, \"hidden\": %lld, \"rows_at\": [%s], "
              "\"tokens\": [%s]}\n",
              static_cast<long long>(rows), static_cast<long long>(block),
              static_cast<long long>(model->config().vocab_size),
              static_cast<long long>(model->config().hidden_size), rows_at.c_str(), tokens.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return deepinfer::tools::tool_main("draft_logits", run, argc, argv); }
