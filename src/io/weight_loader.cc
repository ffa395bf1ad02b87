#include "io/weight_loader.h"

#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <algorithm>
#include <cstring>

#include "base/logging.h"
#include "io/dequant.h"
#include "io/weight_names.h"

namespace deepinfer {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string stem(const std::string& name, const std::string& suffix) {
  return name.substr(0, name.size() - suffix.size());
}

bool is_float(DType d) {
  return d == DType::F64 || d == DType::F32 || d == DType::F16 || d == DType::BF16;
}

// One line on stderr, redrawn at most every 100 ms.
class ProgressBar {
 public:
  ProgressBar(bool enabled, size_t total_bytes, size_t total_items)
      : enabled_(enabled), total_bytes_(total_bytes), total_items_(total_items) {}
  void advance(size_t bytes) {
    done_bytes_ += bytes;
    ++done_items_;
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done_items_ < total_items_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    draw();
  }
  void finish() {
    if (enabled_) std::fputc('\n', stderr);
  }

 private:
  void draw() const {
    constexpr int kWidth = 30;
    const double frac = total_bytes_ ? static_cast<double>(done_bytes_) / total_bytes_
                                     : static_cast<double>(done_items_) / std::max<size_t>(1, total_items_);
    const int filled = static_cast<int>(frac * kWidth);
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
    bar[kWidth] = '\0';
    std::fprintf(stderr, "\rloading weights [%s] %3d%%  %zu/%zu tensors  %.2f/%.2f GB", bar,
                 static_cast<int>(frac * 100), done_items_, total_items_, done_bytes_ / 1e9,
                 total_bytes_ / 1e9);
    std::fflush(stderr);
  }

  bool enabled_;
  size_t total_bytes_, total_items_;
  size_t done_bytes_ = 0, done_items_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

// Engram tables (V4.1 `layers.N.engram.embed.{weight,scale}`: FP8 rows with one e8m0 per
// 32 columns, up to hundreds of GB) stay in their checkpoint format, as views.
bool is_raw_tensor(const std::string& native) {
  return native.find(".engram.embed.") != std::string::npos;
}

// The vision tower of V4.1 checkpoints (the engine is text only for now).
bool is_vision_tensor(const std::string& native) {
  return starts_with(native, "vision.") || starts_with(native, "aligner.") ||
         starts_with(native, "image_start") || starts_with(native, "image_end") ||
         starts_with(native, "image_newline");
}

enum class JobKind { kPlain, kRaw, kFp8, kFp4, kHfExperts };

struct Job {
  JobKind kind = JobKind::kPlain;
  std::string native;  // output name (kHfExperts: unused)
  std::string origin;  // checkpoint name of the weight
  Tensor weight;
  Tensor scale;
  std::string scale_origin;
  size_t bytes = 0;
};

// What convert_plain_tensor turns `t` into, with its checks on the dtype.
DType plain_result_dtype(const std::string& native, const std::string& origin, const Tensor& t) {
  if (ends_with(native, ".tid2eid")) {
    CHECK(t.dtype() == DType::I32 || t.dtype() == DType::I64)
        << "tensor '" << origin << "' has dtype " << dtype_name(t.dtype()) << ", expected I32 or I64";
    return DType::I32;
  }
  if (is_float(t.dtype())) return DType::F32;
  CHECK(t.dtype() != DType::F8_E4M3)
      << "FP8 tensor '" << origin << "' has no scale tensor (expected '"
      << (ends_with(native, ".weight") ? stem(native, ".weight") + ".scale" : native + ".scale")
      << "' or its HF name '*.weight_scale_inv')";
  return t.dtype();
}

}  // namespace

Tensor convert_plain_tensor(const std::string& native, const std::string& origin, const Tensor& t) {
  const DType to = plain_result_dtype(native, origin, t);
  if (ends_with(native, ".tid2eid")) {
    Tensor out = Tensor::empty(DType::I32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t v = 0;
      if (t.dtype() == DType::I64) {
        std::memcpy(&v, static_cast<const uint8_t*>(t.raw()) + 8 * i, 8);
      } else {
        int32_t v32 = 0;
        std::memcpy(&v32, static_cast<const uint8_t*>(t.raw()) + 4 * i, 4);
        v = v32;
      }
      CHECK(v >= 0 && v <= INT32_MAX) << "tensor '" << origin << "' holds expert id " << v;
      out.data<int32_t>()[i] = static_cast<int32_t>(v);
    }
    return out;
  }
  if (to == DType::F32) return convert_to_f32(t, origin);
  return t.clone();
}

WeightStore WeightStore::load(const std::string& path, const ModelConfig& config,
                              const LoadOptions& options) {
  return load(Checkpoint::open(path), config, options);
}

WeightStore WeightStore::load(const Checkpoint& checkpoint, const ModelConfig& config,
                              const LoadOptions& options) {
  std::map<std::string, Tensor> views;
  for (const std::string& name : checkpoint.names()) views.emplace(name, checkpoint.tensor(name));
  return build(views, config, checkpoint.path(), options, true);
}

WeightStore WeightStore::from_tensors(const std::map<std::string, Tensor>& tensors,
                                      const ModelConfig& config, const std::string& source,
                                      const LoadOptions& options) {
  return build(tensors, config, source, options, false);
}

WeightStore WeightStore::build(const std::map<std::string, Tensor>& tensors,
                               const ModelConfig& config, const std::string& source,
                               const LoadOptions& options, bool mapped) {
  WeightStore store;
  store.source_ = source;
  std::vector<std::string> all_names;
  for (const auto& entry : tensors) all_names.push_back(entry.first);
  store.hf_names_ = uses_hf_names(all_names);

  // 1. Native names (fused HF experts become their own jobs).
  std::vector<Job> jobs;
  std::map<std::string, std::pair<std::string, Tensor>> by_native;  // native -> (origin, view)
  int64_t n_vision = 0;
  for (const auto& [name, tensor] : tensors) {
    if (config.is_v41() && is_vision_tensor(name)) {
      ++n_vision;
      continue;
    }
    int64_t layer = 0;
    bool gate_up = false;
    if (store.hf_names_ && is_hf_fused_experts(name, &layer, &gate_up)) {
      Job job;
      job.kind = JobKind::kHfExperts;
      job.origin = name;
      job.weight = tensor;
      job.bytes = tensor.nbytes();
      jobs.push_back(std::move(job));
      continue;
    }
    const std::string native = store.hf_names_ ? hf_to_native(name) : name;
    auto [it, inserted] = by_native.emplace(native, std::make_pair(name, tensor));
    CHECK(inserted) << "checkpoint '" << source << "': tensors '" << it->second.first << "' and '"
                    << name << "' both map to '" << native << "'";
  }

  if (n_vision > 0) {
    LOG(INFO) << "checkpoint '" << source << "': skipping " << n_vision
              << " vision tensors (the engine runs the text model only)";
  }

  // 2. Pair quantised weights with their scales.
  std::map<std::string, bool> consumed;
  for (const auto& [native, entry] : by_native) {
    if (!ends_with(native, ".scale") || is_raw_tensor(native)) continue;
    const std::string weight_name = stem(native, ".scale") + ".weight";
    auto w = by_native.find(weight_name);
    if (w == by_native.end()) continue;
    const DType wd = w->second.second.dtype();
    CHECK(wd == DType::F8_E4M3 || wd == DType::I8 || wd == DType::U8)
        << "tensor '" << entry.first << "' is a scale, but '" << w->second.first
        << "' is not quantised (" << dtype_name(wd) << ")";
    consumed[native] = true;
  }
  for (const auto& [native, entry] : by_native) {
    if (consumed.count(native)) continue;
    Job job;
    job.native = native;
    job.origin = entry.first;
    job.weight = entry.second;
    job.bytes = entry.second.nbytes();
    const DType wd = job.weight.dtype();
    if (is_raw_tensor(native)) {
      job.kind = JobKind::kRaw;
    } else if (ends_with(native, ".weight") && (wd == DType::F8_E4M3 || wd == DType::I8 || wd == DType::U8)) {
      auto s = by_native.find(stem(native, ".weight") + ".scale");
      if (s != by_native.end()) {
        job.scale = s->second.second;
        job.scale_origin = s->second.first;
        job.bytes += job.scale.nbytes();
        if (wd == DType::F8_E4M3) {
          job.kind = JobKind::kFp8;
        } else {
          CHECK(is_fp4_pair(job.weight, job.scale))
              << "tensor '" << job.origin << "' (" << job.weight.str() << ") with scale '"
              << job.scale_origin << "' (" << job.scale.str()
              << ") is not packed FP4: expected a weight [N, K/2] and an F8_E8M0 scale [N, K/32]";
          job.kind = JobKind::kFp4;
        }
      }
    }
    jobs.push_back(std::move(job));
  }

  // 3. Convert.
  size_t total_bytes = 0;
  for (const Job& job : jobs) total_bytes += job.bytes;
  const bool show = options.progress == LoadOptions::Progress::kOn ||
                    (options.progress == LoadOptions::Progress::kAuto && ::isatty(STDERR_FILENO));
  ProgressBar bar(show && !options.defer, total_bytes, jobs.size());
  auto put = [&](const std::string& native, Tensor tensor, const std::string& origin) {
    auto [it, inserted] =
        store.entries_.emplace(native, Entry{std::move(tensor), origin == native ? "" : origin});
    CHECK(inserted) << "checkpoint '" << source << "': tensors '"
                    << (it->second.origin.empty() ? native : it->second.origin) << "' and '"
                    << origin << "' both map to '" << native << "'";
  };
  auto defer = [&](const Job& job, StoredTensor::Kind kind) {
    auto st = std::make_shared<StoredTensor>();
    st->kind = kind;
    st->native = job.native;
    st->origin = job.origin;
    st->weight = job.weight;
    st->scale = job.scale;
    st->scale_origin = job.scale_origin;
    st->mapped = mapped;
    if (kind == StoredTensor::Kind::kPlain) {
      st->shape = job.weight.shape();
      st->dtype = plain_result_dtype(job.native, job.origin, job.weight);
    } else if (kind == StoredTensor::Kind::kFp8) {
      st->block_n = config.quant.weight_block_n;
      st->block_k = config.quant.weight_block_k;
      check_fp8_block_pair(job.weight, job.scale, st->block_n, st->block_k, job.origin);
      st->shape = job.weight.shape();
    } else {
      check_fp4_pair(job.weight, job.scale, job.origin);
      st->shape = {job.weight.size(0), 2 * job.weight.size(1)};
    }
    auto [it, inserted] = store.entries_.emplace(
        job.native, Entry{Tensor(), job.origin == job.native ? "" : job.origin, false, false, st});
    CHECK(inserted) << "checkpoint '" << source << "': tensors '"
                    << (it->second.origin.empty() ? job.native : it->second.origin) << "' and '"
                    << job.origin << "' both map to '" << job.native << "'";
  };
  for (const Job& job : jobs) {
    if (options.defer && job.kind != JobKind::kRaw && job.kind != JobKind::kHfExperts) {
      defer(job, job.kind == JobKind::kFp8   ? StoredTensor::Kind::kFp8
                 : job.kind == JobKind::kFp4 ? StoredTensor::Kind::kFp4
                                             : StoredTensor::Kind::kPlain);
      continue;
    }
    switch (job.kind) {
      case JobKind::kPlain:
        put(job.native, convert_plain_tensor(job.native, job.origin, job.weight), job.origin);
        break;
      case JobKind::kRaw:
        put(job.native, job.weight, job.origin);
        store.entries_.at(job.native).mapped_view = mapped;
        break;
      case JobKind::kFp8:
        put(job.native,
            dequant_fp8_block(job.weight, job.scale, config.quant.weight_block_n,
                              config.quant.weight_block_k, job.origin),
            job.origin);
        break;
      case JobKind::kFp4:
        put(job.native, dequant_fp4(job.weight, job.scale, job.origin), job.origin);
        break;
      case JobKind::kHfExperts: {
        CHECK_KIND(kUnsupported, is_float(job.weight.dtype()))
            << "tensor '" << job.origin << "' has dtype " << dtype_name(job.weight.dtype())
            << "; quantised fused HF experts are not supported";
        const Tensor fused = convert_to_f32(job.weight, job.origin);
        for (auto& [native, view] : split_hf_experts(job.origin, fused)) put(native, view, job.origin);
        break;
      }
    }
    bar.advance(job.bytes);
  }
  if (!options.defer) bar.finish();
  return store;
}

WeightStore::Entry& WeightStore::lookup(const std::string& name, const Shape& expected,
                                        std::optional<DType> want) {
  const DType dtype = want ? *want : ends_with(name, ".tid2eid") ? DType::I32 : DType::F32;
  auto it = entries_.find(name);
  CHECK_KIND(kNotFound, it != entries_.end())
      << "missing tensor '" << name << "' in checkpoint '" << source_ << "'";
  Entry& e = it->second;
  const std::string origin = e.origin.empty() ? "" : " (checkpoint tensor '" + e.origin + "')";
  const Shape& shape = e.stored ? e.stored->shape : e.tensor.shape();
  const DType have = e.stored ? e.stored->dtype : e.tensor.dtype();
  CHECK(shape == expected) << "tensor '" << name << "'" << origin << " has shape "
                           << shape_str(shape) << ", expected " << shape_str(expected);
  CHECK(have == dtype) << "tensor '" << name << "'" << origin << " has dtype "
                       << dtype_name(have) << ", expected " << dtype_name(dtype);
  return e;
}

Tensor WeightStore::take(const std::string& name, const Shape& expected,
                         std::optional<DType> dtype) {
  Entry& e = lookup(name, expected, dtype);
  ICHECK(!e.stored) << "WeightStore::take('" << name << "') on a deferred store: use take_stored";
  e.taken = true;
  return e.tensor;
}

StoredTensor WeightStore::take_stored(const std::string& name, const Shape& expected,
                                     std::optional<DType> dtype) {
  Entry& e = lookup(name, expected, dtype);
  e.taken = true;
  if (e.stored) return *e.stored;
  StoredTensor st;
  st.native = name;
  st.origin = e.origin.empty() ? name : e.origin;
  st.weight = e.tensor;
  st.shape = e.tensor.shape();
  st.dtype = e.tensor.dtype();
  st.mapped = e.mapped_view;
  return st;
}

const StoredTensor* WeightStore::deferred(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.stored.get();
}

size_t WeightStore::largest_stored_bytes() const {
  size_t out = 0;
  for (const auto& [name, e] : entries_) {
    if (!e.stored) continue;
    const StoredTensor& t = *e.stored;
    out = std::max(out, t.weight.nbytes() + (t.scale.defined() ? t.scale.nbytes() : 0));
  }
  return out;
}

Tensor WeightStore::take_optional(const std::string& name, const Shape& expected,
                                  std::optional<DType> dtype) {
  if (!has(name)) return Tensor();
  return take(name, expected, dtype);
}

const Tensor& WeightStore::peek(const std::string& name) const {
  auto it = entries_.find(name);
  CHECK_KIND(kNotFound, it != entries_.end())
      << "missing tensor '" << name << "' in checkpoint '" << source_ << "'";
  return it->second.tensor;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (const auto& entry : entries_) out.push_back(entry.first);
  return out;
}

std::vector<std::string> WeightStore::untaken(const std::string& prefix) const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) {
    if (!e.taken && starts_with(name, prefix)) out.push_back(name);
  }
  return out;
}

std::vector<std::string> WeightStore::untaken_excluding(const std::string& excluded_prefix) const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) {
    if (!e.taken && !(excluded_prefix.size() && starts_with(name, excluded_prefix))) {
      out.push_back(name);
    }
  }
  return out;
}

void WeightStore::check_all_taken(const std::string& excluded_prefix) const {
  const std::vector<std::string> left = untaken_excluding(excluded_prefix);
  if (left.empty()) return;
  std::string list;
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < left.size() && i < kShown; ++i) {
    const Entry& e = entries_.at(left[i]);
    list += (i ? ", '" : "'") + left[i] + "'" +
            (e.origin.empty() ? "" : " (checkpoint tensor '" + e.origin + "')");
  }
  if (left.size() > kShown) list += " and " + std::to_string(left.size() - kShown) + " more";
  THROW(kInvalidInput) << "unexpected tensor" << (left.size() > 1 ? "s " : " ") << list
                       << " in checkpoint '" << source_ << "'";
}

}  // namespace deepinfer
