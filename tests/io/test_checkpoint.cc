#include <gtest/gtest.h>

#include <filesystem>

#include "io/checkpoint.h"
#include "io_test_util.h"

namespace deepinfer {
namespace {

using test::expect_error;
using test::TempDir;
using test::write_bytes;

// Two shards and an index in the HF layout.
struct Sharded {
  TempDir dir;
  Tensor a = test::random_tensor(DType::BF16, {4, 3}, 1);
  Tensor b = test::random_tensor(DType::F32, {5}, 2);
  Tensor c = test::random_tensor(DType::I32, {2, 2}, 3);

  Sharded() {
    write_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"a", a}, {"b", b}});
    write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"c", c}});
  }
  void write_index(const std::string& weight_map) const {
    write_bytes(dir.file("model.safetensors.index.json"),
                R"({"metadata":{"total_size":0},"weight_map":)" + weight_map + "}");
  }
};

TEST(Checkpoint, OpensAShardedCheckpointThroughItsIndex) {
  Sharded s;
  s.write_index(R"({"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
                R"("c":"model-00002-of-00002.safetensors"})");
  const Checkpoint ckpt = Checkpoint::open(s.dir.str());
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(test::same_bytes(ckpt.tensor("a"), s.a));
  EXPECT_TRUE(test::same_bytes(ckpt.tensor("b"), s.b));
  EXPECT_TRUE(test::same_bytes(ckpt.tensor("c"), s.c));
  EXPECT_NE(ckpt.file_of("c").path().find("00002"), std::string::npos);
  EXPECT_EQ(ckpt.total_bytes(), s.a.nbytes() + s.b.nbytes() + s.c.nbytes());
  expect_error([&] { ckpt.tensor("d"); }, ErrorKind::kNotFound, {"'d'", s.dir.str()});
}

TEST(Checkpoint, MissingShardIsAnErrorNamingIt) {
  Sharded s;
  s.write_index(R"({"a":"model-00001-of-00002.safetensors","c":"model-00003-of-00003.safetensors"})");
  expect_error([&] { Checkpoint::open(s.dir.str()); }, ErrorKind::kNotFound,
               {"model-00003-of-00003.safetensors", "'c'", "does not exist"});
}

TEST(Checkpoint, TensorMissingFromItsShardIsAnError) {
  Sharded s;
  s.write_index(R"({"a":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors"})");
  expect_error([&] { Checkpoint::open(s.dir.str()); }, ErrorKind::kNotFound,
               {"'c'", "missing from shard", "model-00001-of-00002.safetensors"});
}

TEST(Checkpoint, MalformedIndexIsAnError) {
  Sharded s;
  write_bytes(s.dir.file("model.safetensors.index.json"), R"({"weights":{}})");
  expect_error([&] { Checkpoint::open(s.dir.str()); }, ErrorKind::kInvalidInput,
               {"weight_map", "model.safetensors.index.json"});
  write_bytes(s.dir.file("model.safetensors.index.json"), R"({"weight_map":{"a":"../x"}})");
  expect_error([&] { Checkpoint::open(s.dir.str()); }, ErrorKind::kInvalidInput,
               {"'a'", "../x"});
}

TEST(Checkpoint, SingleFileDirectoryAndGlob) {
  TempDir dir;
  const Tensor x = test::random_tensor(DType::F16, {3}, 4);
  write_safetensors(dir.file("model.safetensors"), {{"x", x}});
  // model.safetensors wins over other files in the directory.
  write_safetensors(dir.file("other.safetensors"), {{"y", x}});
  EXPECT_EQ(Checkpoint::open(dir.str()).names(), std::vector<std::string>{"x"});
  EXPECT_EQ(Checkpoint::open(dir.file("other.safetensors")).names(), std::vector<std::string>{"y"});

  TempDir glob;
  write_safetensors(glob.file("part-b.safetensors"), {{"b", x}});
  write_safetensors(glob.file("part-a.safetensors"), {{"a", x}});
  write_bytes(glob.file("README.md"), "not a tensor file");
  const Checkpoint ckpt = Checkpoint::open(glob.str());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(test::same_bytes(ckpt.tensor("b"), x));
}

TEST(Checkpoint, DuplicateTensorAcrossFilesIsAnError) {
  TempDir dir;
  const Tensor x = Tensor::zeros(DType::F32, {1});
  write_safetensors(dir.file("a.safetensors"), {{"w", x}});
  write_safetensors(dir.file("b.safetensors"), {{"w", x}});
  expect_error([&] { Checkpoint::open(dir.str()); }, ErrorKind::kInvalidInput,
               {"'w'", "a.safetensors", "b.safetensors"});
}

TEST(Checkpoint, EmptyOrMissingDirectoryIsNotFound) {
  TempDir dir;
  expect_error([&] { Checkpoint::open(dir.str()); }, ErrorKind::kNotFound, {dir.str()});
  expect_error([&] { Checkpoint::open(dir.file("absent")); }, ErrorKind::kNotFound, {"absent"});
}

}  // namespace
}  // namespace deepinfer
