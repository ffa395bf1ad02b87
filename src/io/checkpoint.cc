#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace deepinfer {
namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  CHECK_KIND(kNotFound, in.good()) << "cannot open '" << path.string() << "'";
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    THROW(kInvalidInput) << "'" << path.string() << "' is not valid JSON (" << e.what() << ")";
  }
}

}  // namespace

void Checkpoint::add_file(std::shared_ptr<SafetensorsFile> file) {
  const size_t index = files_.size();
  for (const std::string& name : file->names()) {
    auto [it, inserted] = where_.emplace(name, index);
    CHECK(inserted) << "tensor '" << name << "' appears in both '" << files_[it->second]->path()
                    << "' and '" << file->path() << "'";
  }
  files_.push_back(std::move(file));
}

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint ckpt;
  ckpt.path_ = path;
  std::error_code ec;
  CHECK_KIND(kNotFound, fs::exists(path, ec)) << "checkpoint path '" << path
                                              << "' does not exist";
  if (!fs::is_directory(path, ec)) {
    ckpt.add_file(SafetensorsFile::open(path));
  } else if (const fs::path index_path = fs::path(path) / kIndexName; fs::exists(index_path)) {
    const nlohmann::json index = read_json_file(index_path);
    CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object())
        << "'" << index_path.string() << "' has no \"weight_map\" object";
    // shard file -> tensors the index puts there
    std::map<std::string, std::vector<std::string>> shards;
    for (const auto& [name, file] : index["weight_map"].items()) {
      CHECK(file.is_string()) << "'" << index_path.string() << "': weight_map entry '" << name
                              << "' is not a file name";
      const std::string shard = file.get<std::string>();
      CHECK(!shard.empty() && fs::path(shard).filename() == fs::path(shard))
          << "'" << index_path.string() << "': shard '" << shard << "' of tensor '" << name
          << "' is not a plain file name";
      shards[shard].push_back(name);
    }
    CHECK(!shards.empty()) << "'" << index_path.string() << "' lists no tensors";
    for (const auto& [shard, names] : shards) {
      const fs::path shard_path = fs::path(path) / shard;
      CHECK_KIND(kNotFound, fs::exists(shard_path))
          << "shard '" << shard << "' listed in '" << index_path.string()
          << "' (for tensor '" << names.front() << "') does not exist";
      auto file = SafetensorsFile::open(shard_path.string());
      for (const std::string& name : names) {
        CHECK_KIND(kNotFound, file->has(name))
            << "tensor '" << name << "' is listed in '" << index_path.string()
            << "' but missing from shard '" << shard_path.string() << "'";
      }
      ckpt.add_file(std::move(file));
    }
  } else if (fs::exists(fs::path(path) / kSingleName)) {
    ckpt.add_file(SafetensorsFile::open((fs::path(path) / kSingleName).string()));
  } else {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(path)) {
      if (entry.is_regular_file() && entry.path().extension() == ".safetensors") {
        found.push_back(entry.path().string());
      }
    }
    CHECK_KIND(kNotFound, !found.empty())
        << "checkpoint directory '" << path << "' has no " << kIndexName << ", no "
        << kSingleName << " and no *.safetensors files";
    std::sort(found.begin(), found.end());
    for (const std::string& file : found) ckpt.add_file(SafetensorsFile::open(file));
  }
  for (const auto& [name, index] : ckpt.where_) ckpt.names_.push_back(name);
  return ckpt;
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  CHECK_KIND(kNotFound, it != where_.end())
      << "tensor '" << name << "' not found in checkpoint '" << path_ << "'";
  return *files_[it->second];
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (const auto& file : files_) {
    for (const std::string& name : file->names()) total += file->info(name).nbytes;
  }
  return total;
}

}  // namespace deepinfer
