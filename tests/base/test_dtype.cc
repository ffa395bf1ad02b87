#include <gtest/gtest.h>

#include <cmath>

#include "base/dtype.h"
#include "base/error.h"

namespace deepinfer {
namespace {

TEST(DType, E4M3RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(v)) continue;
    const uint8_t back = f32_to_e4m3(v);
    if (v == 0.0f) {
      EXPECT_EQ(e4m3_to_f32(back), 0.0f);
    } else {
      EXPECT_EQ(back, c) << "value " << v;
    }
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(DType, E4M3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(round_e4m3(1000.0f), 448.0f);
  EXPECT_EQ(round_e4m3(-1000.0f), -448.0f);
  EXPECT_EQ(round_e4m3(1.0625f), 1.0f);   // halfway between 1 and 1.125 -> even (1.0)
  EXPECT_EQ(round_e4m3(1.1875f), 1.25f);  // halfway between 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(round_e4m3(15.5f), 16.0f);    // rounds into the next binade
}

TEST(DType, E2M1Values) {
  const float expected[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_f32(c), expected[c]);
    EXPECT_EQ(e2m1_to_f32(c | 8), -expected[c]);
    EXPECT_EQ(f32_to_e2m1(expected[c]), c);
  }
  EXPECT_EQ(round_e2m1(5.0f), 4.0f);   // tie -> even mantissa
  EXPECT_EQ(round_e2m1(2.5f), 2.0f);
  EXPECT_EQ(round_e2m1(0.25f), 0.0f);
  EXPECT_EQ(round_e2m1(0.75f), 1.0f);
  EXPECT_EQ(round_e2m1(100.0f), 6.0f);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(120), std::ldexp(1.0f, -7));
}

TEST(Error, CheckThrowsTypedErrorWithMessage) {
  try {
    CHECK(1 == 2) << "tensor " << "x" << " is wrong";
    FAIL() << "CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_STREQ(e.what(), "tensor x is wrong");
  }
  EXPECT_NO_THROW(CHECK(true) << "never");
}

// what() may reach clients (HTTP error bodies): no source location in it; where() keeps it.
TEST(Error, InternalErrorsNameNoSourcePath) {
  try {
    ICHECK(1 + 1 == 3) << "arithmetic";
    FAIL() << "ICHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_STREQ(e.what(), "internal error (1 + 1 == 3): arithmetic");
    EXPECT_NE(e.where().find("test_dtype.cc:"), std::string::npos) << e.where();
  }
}

}  // namespace
}  // namespace deepinfer
