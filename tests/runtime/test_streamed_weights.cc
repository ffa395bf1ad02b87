// The CPU side of the streaming GPU loader (runtime/gpu_weight_stream.h), no GPU needed:
//  * StreamedWeights (runtime/streamed_weights.h) over every golden checkpoint (F32 / BF16 HF
//    forms and the native FP8 + FP4 form): the placeholder ModelWeights has exactly the eager
//    load_model_weights' tensors (same names, shapes, dtypes, MTP detection), every placeholder
//    resolves to its own stored tensor, and converting it a row range at a time
//    (io/weight_stream.h convert_rows over row_chunks, with small chunks so that most tensors
//    take several, FP8 chunks on the 128-row block grid) gives bitwise the eager fp32 tensor;
//    ranges off the grid are refused;
//  * releasing a range's mapped pages keeps the values (they fault back in from the file);
//  * host_fp32_load_bytes (the runner factory's refusal of V4.1 checkpoints too large for the
//    host path) is exactly what the eager store holds;
//  * bad checkpoints fail at construction naming the tensor, with the eager loader's messages
//    (a wrong shape, a missing tensor, an unexpected one, an FP8 weight without its scale).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/checkpoint.h"
#include "io/config_parser.h"
#include "io/safetensors.h"
#include "io/weight_loader.h"
#include "io/weight_stream.h"
#include "model/weights.h"
#include "runtime/streamed_weights.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = "tests/data/golden";

// Calls f(name, eager, streamed) for every tensor pair of two ModelWeights.
void for_each_pair(const ModelWeights& a, const ModelWeights& b,
                   const std::function<void(const std::string&, const Tensor&, const Tensor&)>& f) {
  auto hc = [&](const std::string& p, const HcWeightsT& x, const HcWeightsT& y) {
    f(p + "fn", x.fn, y.fn);
    f(p + "base", x.base, y.base);
    f(p + "scale", x.scale, y.scale);
  };
  auto cmp = [&](const std::string& p, const CompressorWeights& x, const CompressorWeights& y) {
    f(p + "wkv", x.wkv, y.wkv);
    f(p + "wgate", x.wgate, y.wgate);
    f(p + "ape", x.ape, y.ape);
    f(p + "norm", x.norm, y.norm);
  };
  auto expert = [&](const std::string& p, const ExpertWeightsT& x, const ExpertWeightsT& y) {
    f(p + "w1", x.w1, y.w1);
    f(p + "w3", x.w3, y.w3);
    f(p + "w2", x.w2, y.w2);
  };
  auto attn = [&](const std::string& p, const AttentionWeights& x, const AttentionWeights& y) {
    f(p + "wq_a", x.wq_a, y.wq_a);
    f(p + "q_norm", x.q_norm, y.q_norm);
    f(p + "wq_b", x.wq_b, y.wq_b);
    f(p + "wkv", x.wkv, y.wkv);
    f(p + "kv_norm", x.kv_norm, y.kv_norm);
    f(p + "wo_a", x.wo_a, y.wo_a);
    f(p + "wo_b", x.wo_b, y.wo_b);
    f(p + "sink", x.sink, y.sink);
    EXPECT_EQ(x.has_compressor, y.has_compressor) << p;
    EXPECT_EQ(x.has_indexer, y.has_indexer) << p;
    cmp(p + "compressor.", x.compressor, y.compressor);
    f(p + "indexer.wq_b", x.indexer.wq_b, y.indexer.wq_b);
    f(p + "indexer.weights_proj", x.indexer.weights_proj, y.indexer.weights_proj);
    cmp(p + "indexer.compressor.", x.indexer.compressor, y.indexer.compressor);
  };
  auto moe = [&](const std::string& p, const MoeWeights& x, const MoeWeights& y) {
    f(p + "gate", x.gate, y.gate);
    f(p + "bias", x.bias, y.bias);
    f(p + "tid2eid", x.tid2eid, y.tid2eid);
    ASSERT_EQ(x.experts.size(), y.experts.size()) << p;
    for (size_t e = 0; e < x.experts.size(); ++e) {
      expert(p + "experts." + std::to_string(e) + ".", x.experts[e], y.experts[e]);
    }
    expert(p + "shared.", x.shared, y.shared);
  };
  f("embed", a.embed, b.embed);
  f("head", a.head, b.head);
  f("norm", a.norm, b.norm);
  hc("hc_head.", a.hc_head, b.hc_head);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const LayerWeights &x = a.layers[l], &y = b.layers[l];
    f(p + "attn_norm", x.attn_norm, y.attn_norm);
    f(p + "ffn_norm", x.ffn_norm, y.ffn_norm);
    hc(p + "hc_attn.", x.hc_attn, y.hc_attn);
    hc(p + "hc_ffn.", x.hc_ffn, y.hc_ffn);
    attn(p + "attn.", x.attn, y.attn);
    moe(p + "ffn.", x.moe, y.moe);
  }
  ASSERT_EQ(a.has_mtp, b.has_mtp);
  if (a.has_mtp) {
    f("mtp.e_proj", a.mtp.e_proj, b.mtp.e_proj);
    f("mtp.h_proj", a.mtp.h_proj, b.mtp.h_proj);
    f("mtp.enorm", a.mtp.enorm, b.mtp.enorm);
    f("mtp.hnorm", a.mtp.hnorm, b.mtp.hnorm);
    f("mtp.norm", a.mtp.norm, b.mtp.norm);
    hc("mtp.hc_head.", a.mtp.hc_head, b.mtp.hc_head);
    f("mtp.attn_norm", a.mtp.block.attn_norm, b.mtp.block.attn_norm);
    f("mtp.ffn_norm", a.mtp.block.ffn_norm, b.mtp.block.ffn_norm);
    hc("mtp.hc_attn.", a.mtp.block.hc_attn, b.mtp.block.hc_attn);
    hc("mtp.hc_ffn.", a.mtp.block.hc_ffn, b.mtp.block.hc_ffn);
    attn("mtp.attn.", a.mtp.block.attn, b.mtp.block.attn);
    moe("mtp.ffn.", a.mtp.block.moe, b.mtp.block.moe);
  }
}

// The converted bytes of a whole placeholder, in chunks of at most max_bytes.
std::vector<uint8_t> convert_chunked(const StoredTensor& t, int64_t max_bytes, int64_t* n_chunks) {
  std::vector<uint8_t> out(static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype));
  const int64_t rb = converted_row_bytes(t);
  const std::vector<RowRange> chunks = row_chunks(t, max_bytes);
  *n_chunks = static_cast<int64_t>(chunks.size());
  int64_t next = 0;
  for (const RowRange& r : chunks) {
    EXPECT_EQ(r.begin, next) << t.origin;
    EXPECT_EQ(r.begin % stored_row_align(t), 0) << t.origin;
    convert_rows(t, r.begin, r.end, out.data() + r.begin * rb);
    next = r.end;
  }
  EXPECT_EQ(next, stored_rows(t)) << t.origin;
  return out;
}

void check_matches_eager(const std::string& dir) {
  SCOPED_TRACE(dir);
  const ModelConfig cfg = load_model_config(dir);
  auto source = open_checkpoint_weights(dir, cfg);
  const ModelWeights eager = load_model_weights(cfg, *source);
  const StreamedWeights streamed(dir, cfg);
  EXPECT_EQ(StreamedWeights::owner_of(eager.embed.raw()), nullptr);
  int64_t n_tensors = 0, n_multi_chunk = 0, n_fp8 = 0, n_fp4 = 0, n_converted = 0;
  for_each_pair(eager, streamed.weights(), [&](const std::string& name, const Tensor& e, const Tensor& s) {
    SCOPED_TRACE(name);
    ASSERT_EQ(e.defined(), s.defined());
    if (!e.defined()) return;
    ASSERT_EQ(e.shape(), s.shape());
    ASSERT_EQ(e.dtype(), s.dtype());
    if (StreamedWeights::owner_of(s.raw()) == nullptr) {  // converted at load (fused HF experts)
      EXPECT_EQ(std::memcmp(e.raw(), s.raw(), e.nbytes()), 0);
      ++n_converted;
      return;
    }
    ASSERT_EQ(StreamedWeights::owner_of(s.raw()), &streamed);
    const auto where = streamed.find(s.raw());
    ASSERT_TRUE(where.has_value());
    EXPECT_EQ(where->offset, 0);
    const StoredTensor& t = *where->tensor;
    EXPECT_TRUE(t.mapped);
    EXPECT_EQ(t.shape, e.shape());
    n_fp8 += t.kind == StoredTensor::Kind::kFp8;
    n_fp4 += t.kind == StoredTensor::Kind::kFp4;
    // A pointer one row in resolves to the same tensor at that offset.
    if (e.dim() >= 1 && e.size(0) > 1) {
      const int64_t width = e.numel() / e.size(0);
      const auto inner = streamed.find(static_cast<const uint8_t*>(s.raw()) + width * dtype_size(e.dtype()));
      ASSERT_TRUE(inner.has_value());
      EXPECT_EQ(inner->tensor, &t);
      EXPECT_EQ(inner->offset, width);
    }
    int64_t chunks = 0;
    const std::vector<uint8_t> got = convert_chunked(t, 4096, &chunks);
    ASSERT_EQ(got.size(), e.nbytes());
    EXPECT_EQ(std::memcmp(got.data(), e.raw(), e.nbytes()), 0) << "converted values differ";
    n_multi_chunk += chunks > 1;
    ++n_tensors;
  });
  EXPECT_EQ(static_cast<size_t>(n_tensors), streamed.placeholders());
  EXPECT_GT(n_multi_chunk, 0);
  EXPECT_GT(streamed.stored_bytes(), 0u);
  if (fs::path(dir).filename() == "native") {
    EXPECT_GT(n_fp8, 0);
    EXPECT_GT(n_fp4, 0);
  }
  std::printf("%s: %lld placeholders (%lld FP8, %lld FP4), %lld in several chunks, %.3f MB stored; "
              "%lld converted at load\n",
              dir.c_str(), static_cast<long long>(n_tensors), static_cast<long long>(n_fp8),
              static_cast<long long>(n_fp4), static_cast<long long>(n_multi_chunk),
              streamed.stored_bytes() / 1e6, static_cast<long long>(n_converted));
}

TEST(StreamedWeights, GoldenCheckpointsMatchEagerLoad) {
  for (const char* name : {"swa", "csa", "hca", "mixed_quant"}) {
    check_matches_eager((kGolden / name / "hf").string());
  }
  check_matches_eager((kGolden / "mixed_quant" / "native").string());
}

TEST(StreamedWeights, OffGridRangesAreRefusedAndReleaseKeepsValues) {
  const std::string dir = (kGolden / "mixed_quant" / "native").string();
  const ModelConfig cfg = load_model_config(dir);
  LoadOptions lo;
  lo.defer = true;
  lo.progress = LoadOptions::Progress::kOff;
  WeightStore store = WeightStore::load(dir, cfg, lo);
  const StoredTensor* fp8 = nullptr;
  for (const std::string& n : store.names()) {
    const StoredTensor* t = store.deferred(n);
    if (t != nullptr && t->kind == StoredTensor::Kind::kFp8 && stored_rows(*t) > t->block_n) fp8 = t;
  }
  ASSERT_NE(fp8, nullptr) << "no FP8 tensor taller than one block in " << dir;
  std::vector<uint8_t> buf(static_cast<size_t>(stored_rows(*fp8) * converted_row_bytes(*fp8)));
  EXPECT_THROW(convert_rows(*fp8, 1, 2, buf.data()), Error);
  int64_t chunks = 0;
  const std::vector<uint8_t> before = convert_chunked(*fp8, 1, &chunks);
  EXPECT_EQ(chunks, (stored_rows(*fp8) + fp8->block_n - 1) / fp8->block_n);  // one block row each
  release_mapped_rows(*fp8, 0, stored_rows(*fp8));
  EXPECT_EQ(convert_chunked(*fp8, 1 << 20, &chunks), before);
  // take() refuses a deferred entry; take_stored checks shapes as take does.
  EXPECT_THROW(store.take(fp8->native, fp8->shape), Error);
  EXPECT_THROW(store.take_stored(fp8->native, {1, 2}), Error);
  EXPECT_EQ(store.take_stored(fp8->native, fp8->shape).origin, fp8->origin);
}

// Engram tables are handed out as views of the mapped checkpoint; release_view_bytes drops
// their pages only inside such a view (values read back unchanged from the file) and leaves
// any other memory alone (on anonymous memory dropping pages would zero it).
TEST(StreamedWeights, EngramTablesAreMappedViewsWhosePagesCanBeDropped) {
  for (const char* q : {"bf16", "fp8"}) {
    const std::string dir = std::string("tests/data/golden_v41/engram/") + q;
    const ModelConfig cfg = load_model_config(dir);
    const StreamedWeights streamed(dir, cfg);
    int64_t tables = 0;
    for (const LayerWeights& l : streamed.weights().layers) {
      for (const Tensor* t : {&l.engram.table, &l.engram.table_scale}) {
        if (!t->defined()) continue;
        ++tables;
        const auto* p = static_cast<const uint8_t*>(t->raw());
        const size_t n = t->nbytes();
        ASSERT_GT(n, 2u);
        EXPECT_TRUE(streamed.in_mapped_view(p, n)) << dir;
        EXPECT_TRUE(streamed.in_mapped_view(p + 1, n - 2)) << dir;
        EXPECT_FALSE(streamed.in_mapped_view(p, n + 1)) << dir;       // one byte past its end
        EXPECT_FALSE(streamed.in_mapped_view(p - 1, 2)) << dir;       // one byte before it
        const std::vector<uint8_t> before(p, p + n);
        streamed.release_view_bytes(p, n);
        EXPECT_EQ(std::memcmp(before.data(), p, n), 0) << dir << ": values changed after the release";
      }
    }
    EXPECT_EQ(tables, 2 * static_cast<int64_t>(cfg.engram.layer_ids.size()))
        << dir << ": each engram layer's table and scales";
    // Memory that is not a view of the checkpoint: not released, not changed.
    std::vector<uint8_t> heap(1 << 16, 0x5a);
    EXPECT_FALSE(streamed.in_mapped_view(heap.data(), heap.size()));
    streamed.release_view_bytes(heap.data(), heap.size());
    EXPECT_EQ(heap[0], 0x5a);
    EXPECT_EQ(heap[heap.size() - 1], 0x5a);
  }
}

TEST(StreamedWeights, HostFp32EstimateIsWhatTheEagerStoreHolds) {
  for (const char* sub : {"mixed_quant/native", "mixed_quant/hf", "csa/hf"}) {
    const std::string dir = (kGolden / sub).string();
    const ModelConfig cfg = load_model_config(dir);
    WeightStore store = WeightStore::load(dir, cfg, LoadOptions{LoadOptions::Progress::kOff});
    double held = 0;
    for (const std::string& n : store.names()) held += static_cast<double>(store.peek(n).nbytes());
    EXPECT_EQ(host_fp32_load_bytes(dir), held) << dir;
  }
  EXPECT_GT(host_memory_available(), 0);
}

// A modified copy of the native mixed_quant checkpoint in a temporary directory.
class BadCheckpoint {
 public:
  explicit BadCheckpoint(const std::function<void(std::map<std::string, Tensor>&)>& edit) {
    std::string tmpl = (fs::temp_directory_path() / "deepinfer_stream_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    const fs::path src = kGolden / "mixed_quant" / "native";
    fs::copy_file(src / "config.json", dir_ / "config.json");
    const Checkpoint ckpt = Checkpoint::open(src.string());
    std::map<std::string, Tensor> tensors;
    for (const std::string& n : ckpt.names()) tensors[n] = ckpt.tensor(n).clone();
    edit(tensors);
    write_safetensors((dir_ / "model.safetensors").string(), tensors);
  }
  ~BadCheckpoint() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

std::string error_of(const std::string& dir) {
  const ModelConfig cfg = load_model_config(dir);
  try {
    StreamedWeights w(dir, cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StreamedWeights, BadCheckpointsFailNamingTheTensor) {
  {
    BadCheckpoint c([](std::map<std::string, Tensor>& t) { t.erase("layers.0.attn.wkv.weight"); t.erase("layers.0.attn.wkv.scale"); });
    EXPECT_NE(error_of(c.dir()).find("layers.0.attn.wkv.weight"), std::string::npos) << error_of(c.dir());
  }
  {
    BadCheckpoint c([](std::map<std::string, Tensor>& t) {
      t["layers.0.attn_norm.weight"] = Tensor::zeros(DType::F32, {3});
    });
    const std::string msg = error_of(c.dir());
    EXPECT_NE(msg.find("layers.0.attn_norm.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
  }
  {
    BadCheckpoint c([](std::map<std::string, Tensor>& t) {
      t["layers.0.attn.bogus"] = Tensor::zeros(DType::F32, {4});
    });
    const std::string msg = error_of(c.dir());
    EXPECT_NE(msg.find("unexpected tensor 'layers.0.attn.bogus'"), std::string::npos) << msg;
  }
  {
    std::string fp8;  // the first FP8 weight: its scale removed
    BadCheckpoint c([&](std::map<std::string, Tensor>& t) {
      for (const auto& [n, v] : t) {
        if (v.dtype() == DType::F8_E4M3) {
          fp8 = n;
          break;
        }
      }
      ASSERT_FALSE(fp8.empty());
      t.erase(fp8.substr(0, fp8.size() - 7) + ".scale");
    });
    const std::string msg = error_of(c.dir());
    EXPECT_NE(msg.find("FP8 tensor '" + fp8 + "' has no scale"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace deepinfer
