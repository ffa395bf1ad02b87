// StreamedWeights (runtime/streamed_weights.h): placeholder ModelWeights over a deferred
// WeightStore.
#include "runtime/streamed_weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "io/checkpoint.h"
#include "io/weight_stream.h"

namespace deepinfer {
namespace {

constexpr size_t kSpanAlign = 64;

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<StreamedWeights*>& registry() {
  static std::vector<StreamedWeights*> r;
  return r;
}

size_t span_bytes(const StoredTensor& t) {
  const size_t n = static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
  return std::max(kSpanAlign, (n + kSpanAlign - 1) / kSpanAlign * kSpanAlign);
}

}  // namespace

// The WeightSource load_model_weights reads: take() checks through WeightStore::take_stored
// and hands out a placeholder of a deferred tensor (or the converted tensor itself).
class StreamedWeights::Source : public WeightSource {
 public:
  explicit Source(StreamedWeights* owner) : owner_(owner) {}
  Tensor take(const std::string& name, const Shape& shape) override {
    const bool is_table = name.size() >= 7 && name.compare(name.size() - 7, 7, "tid2eid") == 0;
    StoredTensor st = owner_->store_.take_stored(name, shape, is_table ? DType::I32 : DType::F32);
    if (owner_->store_.deferred(name) == nullptr) {
      owner_->note_view(st);
      return st.weight;
    }
    return owner_->placeholder(std::move(st));
  }
  Tensor take_raw(const std::string& name, const Shape& shape, DType dtype) override {
    StoredTensor st = owner_->store_.take_stored(name, shape, dtype);
    CHECK_KIND(kUnsupported, owner_->store_.deferred(name) == nullptr)
        << "tensor '" << name << "' of checkpoint '" << owner_->path_
        << "' is needed in its stored form, which the streaming loader does not hand out";
    owner_->note_view(st);
    return st.weight;
  }
  bool has(const std::string& name) const override { return owner_->store_.has(name); }
  std::vector<std::string> untaken() const override {
    return owner_->store_.untaken_excluding("mtp.");
  }

 private:
  StreamedWeights* owner_;
};

StreamedWeights::StreamedWeights(const std::string& path, const ModelConfig& config) : path_(path) {
  LoadOptions lo;
  lo.defer = true;
  lo.progress = LoadOptions::Progress::kOff;
  store_ = WeightStore::load(Checkpoint::open(path), config, lo);
  for (const std::string& name : store_.names()) {
    if (const StoredTensor* t = store_.deferred(name)) reserved_ += span_bytes(*t);
  }
  reserved_ = std::max<size_t>(reserved_, kSpanAlign);
  void* p = ::mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK_KIND(kResourceExhausted, p != MAP_FAILED)
      << "streaming loader: cannot reserve " << reserved_ / 1e9
      << " GB of address space for the placeholders of '" << path << "': " << std::strerror(errno);
  base_ = static_cast<uint8_t*>(p);
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().push_back(this);
  }
  Source source(this);
  try {
    weights_ = load_model_weights(config, source);
  } catch (...) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(std::find(registry().begin(), registry().end(), this));
    ::munmap(base_, reserved_);
    throw;
  }
}

StreamedWeights::~StreamedWeights() {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto& r = registry();
    r.erase(std::remove(r.begin(), r.end(), this), r.end());
  }
  if (base_ != nullptr) ::munmap(base_, reserved_);
}

Tensor StreamedWeights::placeholder(StoredTensor st) {
  const size_t bytes = span_bytes(st);
  ICHECK(used_ + bytes <= reserved_) << "StreamedWeights: tensor '" << st.origin
                                     << "' taken twice (placeholder range exhausted)";
  uint8_t* p = base_ + used_;
  used_ += bytes;
  const size_t stored = st.weight.nbytes() + (st.scale.defined() ? st.scale.nbytes() : 0);
  stored_bytes_ += stored;
  largest_stored_bytes_ = std::max(largest_stored_bytes_, stored);
  const DType dtype = st.dtype;
  const Shape shape = st.shape;
  spans_.emplace(reinterpret_cast<uintptr_t>(p), std::make_unique<StoredTensor>(std::move(st)));
  return Tensor::wrap(p, dtype, shape, nullptr);
}

bool StreamedWeights::contains(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  return b >= base_ && b < base_ + reserved_;
}

std::optional<StreamedWeights::Where> StreamedWeights::find(const void* p) const {
  if (!contains(p)) return std::nullopt;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = spans_.upper_bound(a);
  if (it == spans_.begin()) return std::nullopt;
  --it;
  const StoredTensor& t = *it->second;
  const size_t elem = dtype_size(t.dtype);
  const size_t off = a - it->first;
  if (off >= static_cast<size_t>(shape_numel(t.shape)) * elem && !(off == 0)) return std::nullopt;
  ICHECK(off % elem == 0) << "StreamedWeights: pointer inside an element of '" << t.origin << "'";
  return Where{&t, static_cast<int64_t>(off / elem)};
}

double host_fp32_load_bytes(const std::string& path) {
  const Checkpoint ckpt = Checkpoint::open(path);
  double total = 0;
  for (const std::string& name : ckpt.names()) {
    const TensorInfo& t = ckpt.info(name);
    if (t.dtype == DType::F8_E8M0 || name.find(".engram.embed.") != std::string::npos) continue;
    const bool packed = t.dtype == DType::I8 || t.dtype == DType::U8;
    total += packed ? 8.0 * static_cast<double>(t.nbytes) : 4.0 * static_cast<double>(shape_numel(t.shape));
  }
  return total;
}

double host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024.0;
  }
  return -1;
}

StreamedWeights* StreamedWeights::owner_of(const void* p) {
  if (p == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (StreamedWeights* w : registry()) {
    if (w->contains(p)) return w;
  }
  return nullptr;
}

void StreamedWeights::note_view(const StoredTensor& st) {
  if (!st.mapped || !st.weight.defined() || st.weight.nbytes() == 0) return;
  const auto b = reinterpret_cast<uintptr_t>(st.weight.raw());
  mapped_views_[b] = b + st.weight.nbytes();
}

bool StreamedWeights::in_mapped_view(const void* p, size_t n) const {
  const auto b = reinterpret_cast<uintptr_t>(p);
  auto it = mapped_views_.upper_bound(b);
  if (p == nullptr || it == mapped_views_.begin()) return false;
  --it;
  return b >= it->first && b + n <= it->second;
}

void StreamedWeights::release_view_bytes(const void* p, size_t n) const {
  if (n > 0 && in_mapped_view(p, n)) release_mapped_bytes(p, n);
}

}  // namespace deepinfer
