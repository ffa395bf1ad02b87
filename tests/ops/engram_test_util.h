// Helpers shared by the Engram op tests (test_engram.cc: CPU op vs the float64 reference;
// test_engram_cuda.cc: device kernels vs the CPU op): the released V4.1-Flash Engram config,
// the shipped compressed token map and typed reads of the fixture's tensors.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/engram_token_map.h"
#include "io/safetensors.h"
#include "ops/engram/engram.h"

namespace deepinfer::testing {

// tools/make_engram_tables.py's fixture (tests/data/engram).
constexpr const char* kEngramFixture = "tests/data/engram/fixture.safetensors";

// The released DeepSeek-V4.1-Flash text_config (MODEL_SPEC §C.1).
inline EngramConfig engram_real_config() {
  EngramConfig c;
  c.layer_ids = {1, 14};
  c.num_embeddings = {384006168, 384016682};
  c.max_ngram_size = 4;
  c.vocab_size = 16000000;
  c.n_heads = 8;
  c.head_dim = 256;
  c.pad_token_id = 2;
  c.compressed_vocab_size = 99092;
  return c;
}

// The DeepSeek vocabulary's compressed token map (models/engram/).
inline const EngramTokenMap& shipped_engram_map() {
  static const EngramTokenMap m = load_engram_token_map(kEngramTokenMapPath);
  return m;
}

// A fixture tensor's bytes as T values (its size must be a multiple of sizeof(T)).
template <typename T>
std::vector<T> read_tensor(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo& info = f.info(name);
  EXPECT_EQ(info.nbytes % sizeof(T), 0u) << name;
  std::vector<T> v(info.nbytes / sizeof(T));
  std::memcpy(v.data(), f.bytes(name), info.nbytes);
  return v;
}

}  // namespace deepinfer::testing
