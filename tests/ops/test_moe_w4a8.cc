// W4A8 device layout (ops/moe/moe_w4a8.h) on the CPU: every element of w4a8_pack's output
// decodes, by the documented byte rule written out here independently of the offset helpers,
// to the checkpoint's code and scale; row slices that start on a row group pack to the same
// bytes as the whole matrix (how the streaming loader packs); bad shapes are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "base/error.h"
#include "ops/moe/moe_w4a8.h"
#include "op_test_util.h"

namespace deepinfer {
namespace {

struct Fp4 {
  std::vector<uint8_t> codes, scales;  // [n, k/2], [n, k/32] (checkpoint format)
};

Fp4 random_fp4(std::mt19937_64& rng, int64_t n, int64_t k) {
  Fp4 m;
  m.codes.resize(n * k / 2);
  m.scales.resize(n * k / 32);
  for (auto& c : m.codes) c = static_cast<uint8_t>(rng());
  for (auto& s : m.scales) s = static_cast<uint8_t>(100 + rng() % 40);
  return m;
}

TEST(MoeW4a8Pack, LayoutDecodesToTheCheckpoint) {
  auto rng = test::fresh_rng();
  for (const int64_t n : {5, 16, 37}) {
    for (const int64_t K : {32, 96, 128, 288}) {
      const Fp4 m = random_fp4(rng, n, K);
      const int64_t kp = w4a8_padded_k(K);
      std::vector<uint8_t> dc(w4a8_code_bytes(n, K)), ds(w4a8_scale_bytes(n, K));
      w4a8_pack(m.codes.data(), m.scales.data(), n, K, dc.data(), ds.data());
      for (int64_t i = 0; i < n; ++i) {
        // Row group of row i: first row g0, h rows; chunk-major inside it.
        const int64_t g0 = i / 16 * 16, h = std::min<int64_t>(16, n - g0), r = i - g0;
        for (int64_t j = 0; j < kp; ++j) {
          // Element j: chunk c = j / 128, scale block jb = (j % 128) / 32, lane t = (j % 32) / 8,
          // byte 4 jb + (j % 8) / 2 of that lane's 16 bytes, low nibble for even j.
          const int64_t c = j / 128, jb = (j % 128) / 32, t = (j % 32) / 8;
          const uint8_t byte = dc[g0 * kp / 2 + c * h * 64 + r * 64 + 16 * t + 4 * jb + (j % 8) / 2];
          const uint8_t code = j % 2 == 0 ? (byte & 0xf) : (byte >> 4);
          const uint8_t scale = ds[g0 * kp / 32 + c * h * 4 + r * 4 + jb];
          if (j < K) {
            const uint8_t want = j % 2 == 0 ? (m.codes[i * K / 2 + j / 2] & 0xf) : (m.codes[i * K / 2 + j / 2] >> 4);
            ASSERT_EQ(code, want) << "n " << n << " K " << K << " row " << i << " element " << j;
            ASSERT_EQ(scale, m.scales[i * K / 32 + j / 32]) << "n " << n << " K " << K << " row " << i << " element " << j;
          } else {
            ASSERT_EQ(code, 0) << "n " << n << " K " << K << " padding element " << j;
            ASSERT_EQ(scale, 127) << "n " << n << " K " << K << " padding block of element " << j;
          }
        }
      }
    }
  }
}

// The offset helpers the kernel uses agree with the rule above.
TEST(MoeW4a8Pack, OffsetHelpersFollowTheRowGroups) {
  const int64_t n = 37, kp = 256;
  EXPECT_EQ(w4a8_group_rows(n, 0), 16);
  EXPECT_EQ(w4a8_group_rows(n, 32), 5);
  EXPECT_EQ(w4a8_code_offset(n, kp, 0, 0), 0);
  EXPECT_EQ(w4a8_code_offset(n, kp, 1, 0), 64);
  EXPECT_EQ(w4a8_code_offset(n, kp, 0, 1), 16 * 64);
  EXPECT_EQ(w4a8_code_offset(n, kp, 33, 1), 32 * 128 + 5 * 64 + 64);
  EXPECT_EQ(w4a8_scale_offset(n, kp, 33, 1), 32 * 8 + 5 * 4 + 4);
  EXPECT_EQ(w4a8_code_offset(n, kp, 36, 1) + 64, w4a8_code_bytes(n, kp));  // the last chunk ends the matrix
  EXPECT_EQ(w4a8_scale_offset(n, kp, 36, 1) + 4, w4a8_scale_bytes(n, kp));
}

TEST(MoeW4a8Pack, RowSlicesOnGroupBoundariesPackToTheSameBytes) {
  auto rng = test::fresh_rng();
  const int64_t n = 53, K = 160, kp = w4a8_padded_k(K);
  const Fp4 m = random_fp4(rng, n, K);
  std::vector<uint8_t> whole_c(w4a8_code_bytes(n, K)), whole_s(w4a8_scale_bytes(n, K));
  w4a8_pack(m.codes.data(), m.scales.data(), n, K, whole_c.data(), whole_s.data());
  for (const int64_t step : {16, 32}) {
    std::vector<uint8_t> c(whole_c.size(), 0xee), s(whole_s.size(), 0xee);
    for (int64_t b = 0; b < n; b += step) {
      const int64_t rows = std::min(step, n - b);
      w4a8_pack(m.codes.data() + b * K / 2, m.scales.data() + b * K / 32, rows, K, c.data() + b * kp / 2,
                s.data() + b * kp / 32);
    }
    EXPECT_EQ(c, whole_c) << "slices of " << step << " rows";
    EXPECT_EQ(s, whole_s) << "slices of " << step << " rows";
  }
}

TEST(MoeW4a8Pack, RefusesKNotAMultipleOf32) {
  std::vector<uint8_t> dummy(4096);
  EXPECT_THROW(w4a8_pack(dummy.data(), dummy.data(), 2, 48, dummy.data(), dummy.data()), Error);
  EXPECT_THROW(w4a8_pack(dummy.data(), dummy.data(), 0, 64, dummy.data(), dummy.data()), Error);
}

}  // namespace
}  // namespace deepinfer
