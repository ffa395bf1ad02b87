// Streaming conversion of a deferred WeightStore's tensors (LoadOptions::defer), a row range
// at a time, for loaders that must not hold a whole converted model on the host (the GPU
// loader, runtime/gpu_weight_stream.h):
//  * convert_rows: rows [row0, row0 + rows) of the tensor take() would have returned, written
//    to `out` (F32, I32 or the stored dtype: StoredTensor::dtype), bitwise what the eager
//    WeightStore computes for those rows (the same io/dequant.h functions on row slices);
//  * stored_row_align: the row granularity a range must respect (kFp8: the block height,
//    except for a range that ends at the last row);
//  * row_chunks: a tensor's rows cut into ranges of at most `max_bytes` converted bytes, each
//    aligned as above (at least one aligned group of rows per range, whatever max_bytes);
//  * release_mapped_rows: drops the process's pages of a row range's stored bytes (weight and
//    scale) from a mapped checkpoint (madvise MADV_DONTNEED on the read-only file mapping; the
//    file stays in the page cache and a later read faults the pages back in), so the resident
//    set stays bounded while a checkpoint larger than memory streams through. A no-op for
//    tensors that are not views of a mapping (StoredTensor::mapped false).
// Row = index along the first axis (a 1-D tensor's rows are its elements; a 0-D one has one).
// Thread-safety: pure functions of their arguments (convert_rows uses the shared thread pool).
#pragma once

#include <cstdint>
#include <vector>

#include "io/weight_loader.h"

namespace deepinfer {

int64_t stored_rows(const StoredTensor& t);
// Bytes of one converted row.
int64_t converted_row_bytes(const StoredTensor& t);
int64_t stored_row_align(const StoredTensor& t);

struct RowRange {
  int64_t begin = 0, end = 0;
};
std::vector<RowRange> row_chunks(const StoredTensor& t, int64_t max_bytes);

// `out` holds (end - begin) * converted_row_bytes(t) bytes. Throws the io errors (naming the
// tensor) for bad values, e.g. a tid2eid id out of range or an unsupported dtype; ICHECKs the
// range's alignment.
void convert_rows(const StoredTensor& t, int64_t begin, int64_t end, void* out);

// The stored (weight, scale) row slices of a range: views into the stored tensors.
struct StoredRows {
  Tensor weight, scale;
};
StoredRows stored_rows_slice(const StoredTensor& t, int64_t begin, int64_t end);

void release_mapped_rows(const StoredTensor& t, int64_t begin, int64_t end);
// Drops the pages of [p, p + n) (rounded out to whole pages) from a read-only file mapping.
void release_mapped_bytes(const void* p, size_t n);

}  // namespace deepinfer
