// The zigzag split and the CP row exchange (parallel/context_parallel.h).
#include "parallel/context_parallel.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/error.h"

namespace deepinfer {

ZigzagSplit::ZigzagSplit(int64_t length, int cp) : length_(length), cp_(cp) {
  CHECK(length >= 0) << "zigzag split: negative length " << length;
  CHECK(cp >= 1) << "zigzag split: context-parallel size " << cp << " (must be at least 1)";
  piece_ = (length + 2 * cp - 1) / (2 * cp);
}

std::vector<int64_t> ZigzagSplit::offsets(int rank) const {
  CHECK(rank >= 0 && rank < cp_) << "zigzag split: rank " << rank << " outside 0.." << cp_ - 1;
  std::vector<int64_t> out;
  for (int64_t j : {int64_t{rank}, int64_t{2 * cp_ - 1 - rank}}) {
    for (int64_t o = j * piece_; o < std::min((j + 1) * piece_, length_); ++o) out.push_back(o);
  }
  return out;
}

int ZigzagSplit::owner(int64_t offset) const {
  CHECK(offset >= 0 && offset < length_) << "zigzag split: offset " << offset << " outside 0.." << length_ - 1;
  const int64_t j = offset / piece_;
  return static_cast<int>(j < cp_ ? j : 2 * cp_ - 1 - j);
}

ContextParallel::ContextParallel(Communicator& comm) : comm_(&comm) {
  CHECK(comm.memory() == CommMemory::kHost)
      << "context parallel: the CPU forward needs a host-memory communicator, got '" << comm.backend() << "'";
}

void ContextParallel::gather_rows(const ZigzagSplit& split, const float* mine, int64_t width,
                                  float* full) const {
  const int cp = size();
  CHECK(split.cp() == cp) << "context parallel: a split over " << split.cp() << " ranks used in a group of " << cp;
  const int64_t slot = split.max_rows() * width;  // floats per rank
  if (slot == 0) return;
  const int64_t n_mine = static_cast<int64_t>(split.offsets(rank()).size());
  std::vector<float> send(slot, 0.0f), recv(slot * cp);
  if (n_mine > 0) std::memcpy(send.data(), mine, n_mine * width * sizeof(float));
  comm_->all_gather(send.data(), recv.data(), slot * static_cast<int64_t>(sizeof(float)));
  for (int r = 0; r < cp; ++r) {
    const std::vector<int64_t> offs = split.offsets(r);
    for (size_t i = 0; i < offs.size(); ++i) {
      std::memcpy(full + offs[i] * width, &recv[r * slot + static_cast<int64_t>(i) * width], width * sizeof(float));
    }
  }
}

void ContextParallel::check_agree(const std::vector<int64_t>& values, const char* what) const {
  const int cp = size();
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<int64_t> all(n * cp);
  comm_->all_gather(values.data(), all.data(), n * static_cast<int64_t>(sizeof(int64_t)));
  for (int r = 1; r < cp; ++r) {
    if (!std::equal(all.begin(), all.begin() + n, all.begin() + r * n)) {
      std::ostringstream a, b;
      for (int64_t i = 0; i < n; ++i) {
        a << (i ? "," : "") << all[i];
        b << (i ? "," : "") << all[r * n + i];
      }
      THROW(kInvalidInput) << "context parallel: the ranks disagree on " << what << ": rank 0 has ("
                           << a.str() << "), rank " << r << " (" << b.str() << ")";
    }
  }
}

int64_t hash_tokens(const int32_t* tokens, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

}  // namespace deepinfer
