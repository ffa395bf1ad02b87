// Row-range conversion of deferred checkpoint tensors (io/weight_stream.h).
#include "io/weight_stream.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "io/dequant.h"

namespace deepinfer {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows [begin, end) of a tensor viewed along its first axis (0-D: the one element).
Tensor rows_of(const Tensor& t, int64_t begin, int64_t end) {
  if (t.dim() == 0) return t;
  return t.slice_rows(begin, end);
}

}  // namespace

int64_t stored_rows(const StoredTensor& t) { return t.shape.empty() ? 1 : t.shape[0]; }

int64_t converted_row_bytes(const StoredTensor& t) {
  const int64_t rows = stored_rows(t);
  const int64_t numel = shape_numel(t.shape);
  return rows == 0 ? 0 : numel / rows * static_cast<int64_t>(dtype_size(t.dtype));
}

int64_t stored_row_align(const StoredTensor& t) {
  return t.kind == StoredTensor::Kind::kFp8 ? t.block_n : 1;
}

std::vector<RowRange> row_chunks(const StoredTensor& t, int64_t max_bytes) {
  const int64_t rows = stored_rows(t), align = stored_row_align(t);
  const int64_t row_bytes = std::max<int64_t>(1, converted_row_bytes(t));
  const int64_t per = std::max<int64_t>(1, max_bytes / (row_bytes * align)) * align;
  std::vector<RowRange> out;
  for (int64_t b = 0; b < rows; b += per) out.push_back({b, std::min(rows, b + per)});
  return out;
}

StoredRows stored_rows_slice(const StoredTensor& t, int64_t begin, int64_t end) {
  StoredRows r;
  r.weight = rows_of(t.weight, begin, end);
  if (t.kind == StoredTensor::Kind::kFp8) {
    r.scale = t.scale.slice_rows(begin / t.block_n, ceil_div(end, t.block_n));
  } else if (t.kind == StoredTensor::Kind::kFp4) {
    r.scale = t.scale.slice_rows(begin, end);
  }
  return r;
}

void convert_rows(const StoredTensor& t, int64_t begin, int64_t end, void* out) {
  const int64_t rows = stored_rows(t), align = stored_row_align(t);
  ICHECK(0 <= begin && begin <= end && end <= rows && begin % align == 0 &&
         (end % align == 0 || end == rows))
      << "convert_rows('" << t.origin << "'): rows [" << begin << ", " << end << ") of " << rows
      << " (aligned to " << align << ")";
  if (begin == end) return;
  const StoredRows r = stored_rows_slice(t, begin, end);
  Tensor converted;
  switch (t.kind) {
    case StoredTensor::Kind::kPlain:
      converted = t.dtype == t.weight.dtype() && t.dtype != DType::I32
                      ? r.weight
                      : convert_plain_tensor(t.native, t.origin, r.weight);
      break;
    case StoredTensor::Kind::kFp8:
      converted = dequant_fp8_block(r.weight, r.scale, t.block_n, t.block_k, t.origin);
      break;
    case StoredTensor::Kind::kFp4:
      converted = dequant_fp4(r.weight, r.scale, t.origin);
      break;
  }
  const size_t bytes = static_cast<size_t>((end - begin) * converted_row_bytes(t));
  ICHECK(converted.nbytes() == bytes && converted.dtype() == t.dtype)
      << "convert_rows('" << t.origin << "'): " << converted.str() << " for " << bytes << " bytes";
  std::memcpy(out, converted.raw(), bytes);
}

void release_mapped_bytes(const void* p, size_t n) {
  if (p == nullptr || n == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
  // Advisory: a failure leaves the pages resident, nothing worse.
  ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

void release_mapped_rows(const StoredTensor& t, int64_t begin, int64_t end) {
  if (!t.mapped || begin >= end) return;
  const StoredRows r = stored_rows_slice(t, begin, end);
  release_mapped_bytes(r.weight.raw(), r.weight.nbytes());
  if (r.scale.defined()) release_mapped_bytes(r.scale.raw(), r.scale.nbytes());
}

}  // namespace deepinfer
