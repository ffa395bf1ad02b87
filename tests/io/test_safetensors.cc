#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace deepinfer {
namespace {

using test::expect_error;
using test::raw_safetensors;
using test::TempDir;
using test::write_bytes;

const DType kAllDTypes[] = {DType::F64, DType::F32,  DType::F16, DType::BF16,
                            DType::F8_E4M3, DType::F8_E8M0, DType::I64, DType::I32,
                            DType::I16, DType::I8, DType::U8, DType::BOOL};

TEST(Safetensors, RoundTripsEveryDType) {
  TempDir dir;
  std::map<std::string, Tensor> tensors;
  uint32_t seed = 1;
  for (DType d : kAllDTypes) {
    // Odd sizes so that a naive layout would misalign the wider dtypes.
    tensors[std::string("t_") + dtype_name(d)] = test::random_tensor(d, {3, 5}, seed++);
  }
  tensors["empty"] = Tensor::zeros(DType::F32, {0, 4});
  tensors["scalar"] = test::random_tensor(DType::F32, {}, seed++);
  tensors["vec"] = test::random_tensor(DType::BF16, {7}, seed++);
  const std::string path = dir.file("rt.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "io test"}});

  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->names().size(), tensors.size());
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("note"), "io test");
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(file->has(name)) << name;
    const TensorInfo& info = file->info(name);
    EXPECT_EQ(info.dtype, t.dtype()) << name;
    EXPECT_EQ(info.shape, t.shape()) << name;
    EXPECT_EQ(info.nbytes, t.nbytes()) << name;
    const Tensor view = file->tensor(name);
    EXPECT_TRUE(test::same_bytes(view, t)) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view.raw()) % dtype_size(t.dtype()), 0u)
        << name << " is misaligned";
  }
  // The header is padded to a multiple of 8 bytes.
  EXPECT_EQ((file->info("t_F64").offset) % 8, 0u);
}

TEST(Safetensors, ViewOutlivesTheFileHandle) {
  TempDir dir;
  const Tensor t = test::random_tensor(DType::I32, {4, 4}, 7);
  write_safetensors(dir.file("a.safetensors"), {{"x", t}});
  Tensor view = SafetensorsFile::open(dir.file("a.safetensors"))->tensor("x");
  EXPECT_TRUE(test::same_bytes(view, t));
}

TEST(Safetensors, MissingTensorAndFileAreNotFound) {
  TempDir dir;
  write_safetensors(dir.file("a.safetensors"), {{"x", Tensor::zeros(DType::F32, {2})}});
  auto file = SafetensorsFile::open(dir.file("a.safetensors"));
  expect_error([&] { file->info("y"); }, ErrorKind::kNotFound, {"'y'", "a.safetensors"});
  expect_error([&] { SafetensorsFile::open(dir.file("nope.safetensors")); }, ErrorKind::kNotFound,
               {"nope.safetensors"});
}

// Each malformed file gives an invalid-input Error naming the file (and the tensor).
struct BadCase {
  const char* label;
  std::string bytes;
  std::vector<std::string> needles;
};

TEST(Safetensors, RejectsMalformedFiles) {
  const std::string good_entry = R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  std::vector<BadCase> cases = {
      {"empty file", "", {"truncated"}},
      {"short length field", std::string("\x05\x00\x00", 3), {"truncated"}},
      {"header length beyond file", raw_safetensors("{" + good_entry + "}", 16, 4096),
       {"runs past the end of the file"}},
      {"absurd header length", raw_safetensors("{}", 0, int64_t{1} << 40), {"header length"}},
      {"invalid JSON", raw_safetensors(R"({"a":{"dtype":"F32",)", 16), {"not valid JSON"}},
      {"header not an object", raw_safetensors("[1, 2]", 0), {"not a JSON object"}},
      {"entry not an object", raw_safetensors(R"({"a": 3})", 0), {"'a'", "not a JSON object"}},
      {"missing dtype", raw_safetensors(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4),
       {"'a'", "dtype"}},
      {"missing shape", raw_safetensors(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4),
       {"'a'", "shape"}},
      {"missing offsets", raw_safetensors(R"({"a":{"dtype":"F32","shape":[1]}})", 4),
       {"'a'", "data_offsets"}},
      {"unknown dtype",
       raw_safetensors(R"({"a":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,4]}})", 4),
       {"'a'", "unknown dtype 'Q4_K'"}},
      {"negative dim",
       raw_safetensors(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       {"'a'", "shape entry -1"}},
      // A dimension past INT64_MAX beside a zero one (numel 0) was accepted as a negative
      // dimension (found while writing fuzz/fuzz_safetensors.cc).
      {"dim past int64",
       raw_safetensors(R"({"a":{"dtype":"F32","shape":[0,9223372036854775808],"data_offsets":[0,0]}})", 0),
       {"'a'", "shape entry 9223372036854775808 is too large"}},
      {"end before begin",
       raw_safetensors(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8),
       {"'a'", "end before they begin"}},
      {"offsets out of bounds",
       raw_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
       {"'a'", "past the end of the data section"}},
      {"truncated data", raw_safetensors("{" + good_entry + "}", 15),
       {"'a'", "past the end of the data section"}},
      {"byte length mismatch",
       raw_safetensors(R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", 16),
       {"'a'", "16 bytes of data", "need 8 bytes"}},
      {"overlap",
       raw_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}})",
                       16),
       {"'a'", "'b'", "overlap"}},
      {"bad metadata", raw_safetensors(R"({"__metadata__":{"k":1}})", 0), {"__metadata__", "'k'"}},
  };
  TempDir dir;
  int i = 0;
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = dir.file("bad" + std::to_string(i++) + ".safetensors");
    write_bytes(path, c.bytes);
    std::vector<std::string> needles = c.needles;
    needles.push_back(path);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::kInvalidInput, needles);
  }
}

TEST(Safetensors, AcceptsEdgeCasesOfTheFormat) {
  TempDir dir;
  // Empty header, zero-size tensors sharing an offset, a gap, trailing bytes.
  write_bytes(dir.file("empty.safetensors"), raw_safetensors("{}", 0));
  EXPECT_TRUE(SafetensorsFile::open(dir.file("empty.safetensors"))->names().empty());
  write_bytes(dir.file("edge.safetensors"),
              raw_safetensors(R"({"z1":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
                              R"("z2":{"dtype":"I64","shape":[0],"data_offsets":[4,4]},)"
                              R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})",
                              16));
  auto file = SafetensorsFile::open(dir.file("edge.safetensors"));
  EXPECT_EQ(file->names(), (std::vector<std::string>{"a", "b", "z1", "z2"}));
  EXPECT_EQ(file->tensor("z1").numel(), 0);
  EXPECT_EQ(file->tensor("b").data<uint8_t>()[1], 0x11);
}

}  // namespace
}  // namespace deepinfer
