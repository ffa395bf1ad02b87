// GpuModel's per-forward staging ring (gpu_model_impl.h: row metadata and changed block-table
// columns staged in pinned slots used in turn, each guarded by its own event), on each golden
// checkpoint (kFp8, paged KV with 8-entry blocks so that blocks are taken every few steps):
//  * many forwards enqueued without reading anything, while a gate holds the stream back so
//    that the host is forced past the ring: the forwards' logits (copied on the device after
//    each one, read at the end) are bitwise those of the same script run with forward() one
//    step at a time (which syncs every step and so never reuses a slot early); the host had
//    to wait (host_waits() >= 1), the synchronous run never (0). Sequences join, leave and
//    reuse freed slots and blocks; eager and CUDA-graph decode steps;
//  * the engine's overlapped step loop (CudaRunner::launch of step t+1, its decode tokens
//    sample references into step t, before collect() of step t), 55 steps with sequences
//    joining (new blocks), one leaving and its slot reused, positions crossing block
//    boundaries: host_waits() stays 0, and every sampled (greedy) token is a maximum of the
//    logits of the same step replayed through forward() on a second runner.
// Label cuda: needs a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "io/config_parser.h"
#include "model/compare_util.h"
#include "model/weight_source.h"
#include "model/weights.h"
#include "runtime/cuda_runner.h"
#include "runtime/gpu_model.h"
#include "../model/golden_data.h"
#include "stream_gate.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using testing::golden_models;
using testing::kGoldenDir;

// A script of forwards over "people" (script sequences, each with its own token stream);
// people join (new_sequence) before a step and leave (free_sequence) after one.
struct ScriptChunk {
  int who;
  int64_t len;
  bool all_logits;
};
struct ScriptStep {
  std::vector<int> join;   // before the step
  std::vector<ScriptChunk> chunks;
  std::vector<int> leave;  // after the step
};

std::vector<ScriptStep> make_script() {
  std::vector<ScriptStep> s;
  s.push_back({{0}, {{0, 13, true}}, {}});
  s.push_back({{1}, {{0, 1, false}, {1, 21, false}}, {}});
  for (int t = 2; t < 45; ++t) {
    ScriptStep st;
    std::vector<int> live = t < 20 ? std::vector<int>{0, 1} : std::vector<int>{0};
    if (t >= 10) live.push_back(2);
    if (t >= 23) live.push_back(3);
    if (t == 10) st.join.push_back(2);
    if (t == 23) st.join.push_back(3);  // into person 1's freed slot and blocks
    for (int who : live) {
      int64_t len = 1;
      bool all = false;
      if (t == 10 && who == 2) len = 30, all = true;  // a prefill next to decodes
      if (t == 23 && who == 3) len = 9;
      if (t == 30 && who == 2) len = 12;  // a chunk spanning blocks mid-run
      st.chunks.push_back({who, len, all});
    }
    if (t == 19) st.leave.push_back(1);
    s.push_back(std::move(st));
  }
  return s;
}

// Runs the script on `m`. synchronous: forward() per step, logits appended on the host.
// Otherwise forward_device() per step, each step's logits copied on the device into one
// buffer, read once at the end; `before_forward(i)` runs before the i-th forward.
std::vector<float> run_script(GpuModel& m, bool synchronous,
                              const std::function<void(int)>& before_forward = {}) {
  const int64_t V = m.config().vocab_size;
  const std::vector<ScriptStep> script = make_script();
  std::map<int, std::vector<int32_t>> stream;
  std::map<int, int64_t> id, used;
  int64_t total_rows = 0;
  for (const ScriptStep& st : script) {
    for (const ScriptChunk& c : st.chunks) total_rows += c.all_logits ? c.len : 1;
  }
  auto cs = static_cast<cudaStream_t>(m.stream());
  float* dev = nullptr;
  if (!synchronous) {
    EXPECT_EQ(cudaMalloc(&dev, total_rows * V * sizeof(float)), cudaSuccess);
  }
  std::vector<float> out;
  int64_t row = 0;
  for (size_t i = 0; i < script.size(); ++i) {
    const ScriptStep& st = script[i];
    for (int who : st.join) {
      id[who] = m.new_sequence();
      stream[who] = random_tokens(200, V, 300 + who);
      used[who] = 0;
    }
    std::vector<GpuChunk> chunks;
    for (const ScriptChunk& c : st.chunks) {
      chunks.push_back({id[c.who], std::span<const int32_t>(stream[c.who].data() + used[c.who], c.len),
                        c.all_logits});
      used[c.who] += c.len;
    }
    if (before_forward) before_forward(static_cast<int>(i));
    if (synchronous) {
      const Tensor l = m.forward(chunks);
      out.insert(out.end(), l.f32(), l.f32() + l.numel());
    } else {
      m.forward_device(chunks);
      const int64_t n = m.n_logits_rows();
      EXPECT_EQ(cudaMemcpyAsync(dev + row * V, m.device_logits(), n * V * sizeof(float),
                                cudaMemcpyDeviceToDevice, cs), cudaSuccess);
      row += n;
    }
    for (int who : st.leave) m.free_sequence(id[who]);
  }
  if (!synchronous) {
    EXPECT_EQ(row, total_rows);
    out.resize(total_rows * V);
    EXPECT_EQ(cudaMemcpyAsync(out.data(), dev, out.size() * sizeof(float), cudaMemcpyDeviceToHost, cs),
              cudaSuccess);
    m.synchronize();
    cudaFree(dev);
  }
  return out;
}

class GpuStagingCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path hf_dir() const { return fs::path(kGoldenDir) / GetParam() / "hf"; }
};

TEST_P(GpuStagingCudaTest, ForwardsPilingUpWithoutReadsKeepTheirInputs) {
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "cuda graphs" : "eager");
    GpuModelOptions opt;
    opt.max_sequences = 4;
    opt.max_context = 256;
    opt.max_batch_tokens = 64;
    opt.weight_format = WeightFormat::kFp8;  // grouped device MoE: no host sync in a forward
    opt.kv_block_size = 8;
    opt.cuda_graphs = graphs;
    auto ref = GpuModel::load(hf_dir().string(), opt);
    const std::vector<float> want = run_script(*ref, true);
    EXPECT_EQ(ref->host_waits(), 0) << "forward() syncs every step: no slot is reused early";

    auto m = GpuModel::load(hf_dir().string(), opt);
    m->synchronize();
    // The stream is held back from just before the first forward until ~0.3 s after the
    // host starts the fourth: that forward's slot is the first's, whose copies have not run.
    testing::StreamGate gate;
    std::atomic<bool> armed{false};
    std::thread opener([&] {
      const auto t0 = std::chrono::steady_clock::now();
      while (!armed.load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      gate.open();
    });
    const std::vector<float> got = run_script(*m, false, [&](int i) {
      if (i == 0) gate.close(static_cast<cudaStream_t>(m->stream()));
      if (i == 3) armed.store(true);
    });
    opener.join();
    EXPECT_FALSE(gate.timed_out());
    std::printf("  %s (%s): %zu logits rows, host waits %lld (synchronous run: %lld)\n",
                GetParam().c_str(), graphs ? "graphs" : "eager",
                want.size() / static_cast<size_t>(m->config().vocab_size),
                static_cast<long long>(m->host_waits()), static_cast<long long>(ref->host_waits()));
    EXPECT_GE(m->host_waits(), 1) << "the fourth forward did not wait for the first's upload";
    ASSERT_EQ(got.size(), want.size());
    int64_t n_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) n_diff += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
    EXPECT_EQ(n_diff, 0) << "logits differ from the synchronous run";
    if (graphs) {
      EXPECT_GT(m->graph_stats().replays, 0);
    }
  }
}

// The largest logit of a row.
float row_max(const float* row, int64_t V) { return *std::max_element(row, row + V); }

TEST_P(GpuStagingCudaTest, EngineStepLoopNeverWaitsOnStaging) {
  const std::string dir = hf_dir().string();
  const ModelConfig cfg = load_model_config(dir);
  auto source = open_checkpoint_weights(dir, cfg);
  const ModelWeights w = load_model_weights(cfg, *source);
  CudaRunnerOptions o;
  o.max_sequences = 3;
  o.max_context = 256;
  o.max_batch_tokens = 128;
  o.fp8_weights = true;
  o.expert_checkpoint = dir;
  CudaRunner run(cfg, w, o), ref(cfg, w, o);
  const int64_t V = cfg.vocab_size;
  // Person p: prompt, then greedy tokens. Joins: 0 at step 0 (prompt 40: crosses the 64-entry
  // window block at step ~24), 1 at 5, 2 at 20 (prompt 60); 1 leaves after step 29 and 3 takes
  // its slot at step 33.
  const std::map<int, int> join_at{{0, 0}, {1, 5}, {2, 20}, {3, 33}};
  const std::map<int, int64_t> prompt_len{{0, 40}, {1, 7}, {2, 60}, {3, 11}};
  const int leave_person = 1, leave_after = 29, n_steps = 55;
  struct Person {
    int64_t run_id = -1, ref_id = -1;
    std::vector<int32_t> prompt, out;
    bool live = false;
  };
  std::map<int, Person> people;
  // Per step: the people in row order.
  std::vector<std::vector<int>> rows_of(n_steps);
  std::map<int, int64_t> prev_row;  // person -> row in the previous launch
  auto collect = [&](int step) {
    const StepResult r = run.collect();
    ASSERT_EQ(r.tokens.size(), rows_of[step].size());
    for (size_t i = 0; i < r.tokens.size(); ++i) people[rows_of[step][i]].out.push_back(r.tokens[i]);
  };
  for (int t = 0; t < n_steps; ++t) {
    for (const auto& [p, at] : join_at) {
      if (at != t) continue;
      Person& q = people[p];
      q.run_id = run.new_sequence();
      q.prompt = random_tokens(prompt_len.at(p), V, 500 + p);
      q.live = true;
    }
    std::vector<RowRequest> rows;
    std::map<int, int64_t> row_now;
    for (auto& [p, q] : people) {
      if (!q.live || (p == leave_person && t > leave_after)) continue;
      row_now[p] = static_cast<int64_t>(rows.size());
      rows_of[t].push_back(p);
      RowRequest r;
      r.mode = RowMode::kSample;
      r.temperature = 0.0f;
      rows.push_back(r);
    }
    // A joiner's prompt, else the reference to the token sampled for it in the last launch.
    std::vector<int32_t> refs(rows.size());
    std::vector<RunnerChunk> chunks;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int p = rows_of[t][i];
      const Person& q = people[p];
      if (join_at.at(p) == t) {
        chunks.push_back({q.run_id, q.prompt, false});
      } else {
        refs[i] = sample_ref(prev_row.at(p));
        chunks.push_back({q.run_id, std::span<const int32_t>(&refs[i], 1), false});
      }
    }
    run.launch(chunks, rows);
    if (t > 0) collect(t - 1);
    if (t == leave_after + 1) {  // its last step (leave_after) is collected now
      run.free_sequence(people[leave_person].run_id);
      people[leave_person].live = false;
    }
    prev_row = row_now;
  }
  collect(n_steps - 1);
  std::printf("  %s: %d overlapped steps, host waits %lld\n", GetParam().c_str(), n_steps,
              static_cast<long long>(run.host_waits()));
  EXPECT_EQ(run.host_waits(), 0) << "the engine's step loop waited for a staging slot";

  // Replay: the same steps through forward() with the sampled tokens as inputs.
  std::map<int, int64_t> fed;  // person -> outputs fed back so far
  for (int t = 0; t < n_steps; ++t) {
    for (const auto& [p, at] : join_at) {
      if (at == t) people[p].ref_id = ref.new_sequence();
    }
    std::vector<RunnerChunk> chunks;
    std::vector<int32_t> toks(rows_of[t].size());
    for (size_t i = 0; i < rows_of[t].size(); ++i) {
      const int p = rows_of[t][i];
      const Person& q = people[p];
      if (join_at.at(p) == t) {
        chunks.push_back({q.ref_id, q.prompt, false});
      } else {
        toks[i] = q.out[fed[p]++];
        chunks.push_back({q.ref_id, std::span<const int32_t>(&toks[i], 1), false});
      }
    }
    const Tensor l = ref.forward(chunks);
    ASSERT_EQ(l.numel(), static_cast<int64_t>(rows_of[t].size()) * V);
    for (size_t i = 0; i < rows_of[t].size(); ++i) {
      const int p = rows_of[t][i];
      const Person& q = people[p];
      const int64_t j = fed[p];  // this step's output index of p
      ASSERT_LT(j, static_cast<int64_t>(q.out.size()));
      const float* r = l.f32() + i * V;
      EXPECT_EQ(r[q.out[j]], row_max(r, V)) << "step " << t << " person " << p;
    }
    if (t == leave_after) ref.free_sequence(people[leave_person].ref_id);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GpuStagingCudaTest, ::testing::ValuesIn(golden_models()));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuStagingCudaTest);

}  // namespace
}  // namespace deepinfer
