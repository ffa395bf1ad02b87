// The golden checkpoints under tests/data/golden (tools/make_goldens.py): which exist and
// how to read their reference tensors. Shared by the CPU golden test and the GPU ones.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/decision_trace.h"
#include "model/model.h"

namespace deepinfer::testing {

inline const char* kGoldenDir = "tests/data/golden";

// Token ids (stored as i64 or i32) as int32.
inline std::vector<int32_t> read_ids(const SafetensorsFile& f, const std::string& name) {
  Tensor t = f.tensor(name);
  std::vector<int32_t> ids(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    ids[i] = t.dtype() == DType::I64 ? static_cast<int32_t>(t.data<int64_t>()[i]) : t.data<int32_t>()[i];
  }
  return ids;
}

inline std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
  Tensor t = f.tensor(name);
  EXPECT_EQ(t.dtype(), DType::F32) << name;
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// One full prefill of `tokens` on a fresh sequence of the CPU `model`: the logits of every
// row and the discrete choices it made (model/decision_trace.h).
struct RecordedForward {
  DecisionTrace trace;
  std::vector<float> logits;
};
inline RecordedForward record_forward(Model& model, const std::vector<int32_t>& tokens) {
  RecordedForward r{DecisionTrace(model.config(), static_cast<int64_t>(tokens.size())), {}};
  auto state = model.new_state();
  SequenceChunk c{state.get(), tokens, true};
  model.set_decision_trace(&r.trace);
  Tensor l = model.forward(std::span<const SequenceChunk>(&c, 1));
  model.set_decision_trace(nullptr);
  r.logits.assign(l.f32(), l.f32() + l.numel());
  return r;
}

// Positions where max |ours - ref| over the row > 1e-4 * max |ref| over the row; reports
// the first five through ADD_FAILURE when `what` is non-empty.
inline int64_t rows_out_of_tolerance(const std::vector<float>& ours, const std::vector<float>& ref,
                                     int64_t vocab, const std::string& what = "") {
  const int64_t rows = static_cast<int64_t>(ref.size()) / vocab;
  int64_t n_bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float diff = 0.0f, scale = 0.0f;
    for (int64_t v = 0; v < vocab; ++v) {
      diff = std::max(diff, std::abs(ours[r * vocab + v] - ref[r * vocab + v]));
      scale = std::max(scale, std::abs(ref[r * vocab + v]));
    }
    if (diff > 1e-4f * scale && ++n_bad <= 5 && !what.empty()) {
      ADD_FAILURE() << what << ": position " << r << " max|diff| " << diff << " > 1e-4 * " << scale;
    }
  }
  return n_bad;
}

// Per-position check: max |ours - ref| over the row <= 1e-4 * max |ref| over the row.
inline void expect_rows_match(const std::vector<float>& ours, const std::vector<float>& ref, int64_t vocab,
                              const std::string& what) {
  ASSERT_EQ(ours.size(), ref.size()) << what;
  const int64_t n_bad = rows_out_of_tolerance(ours, ref, vocab, what);
  EXPECT_EQ(n_bad, 0) << what << ": " << n_bad << " of " << ref.size() / vocab
                      << " positions out of tolerance";
}

// Greedy continuation after `prompt`, teacher-forced on the reference's own tokens so that
// one near-tie cannot derail the rest: our argmax equals the reference's at every step whose
// reference top-1 margin exceeds 1e-4, and more than half of the steps are checked.
inline void expect_greedy_matches(const Model& model, const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& greedy, const std::vector<float>& margins) {
  const int64_t V = model.config().vocab_size;
  auto state = model.new_state();
  SequenceChunk c{state.get(), prompt, false};
  Tensor out = model.forward(std::span<const SequenceChunk>(&c, 1));
  int checked = 0;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const float* row = out.f32();
    const int32_t ours = static_cast<int32_t>(std::max_element(row, row + V) - row);
    if (margins[i] > 1e-4f) {
      EXPECT_EQ(ours, greedy[i]) << "greedy step " << i << " (reference margin " << margins[i] << ")";
      ++checked;
    }
    SequenceChunk step{state.get(), std::span<const int32_t>(&greedy[i], 1), false};
    out = model.forward(std::span<const SequenceChunk>(&step, 1));
  }
  EXPECT_GT(checked, static_cast<int>(greedy.size()) / 2) << "too few greedy steps had a clear margin";
}

// Names of the golden models under `dir` that have a reference.safetensors, sorted.
inline std::vector<std::string> golden_models(const std::string& dir = kGoldenDir) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (fs::exists(entry.path() / "reference.safetensors")) names.push_back(entry.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace deepinfer::testing
