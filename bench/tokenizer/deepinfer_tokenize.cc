// deepinfer_tokenize: runs the recipe tokenizer over files, for tests and benchmarks.
//
//   deepinfer_tokenize encode   TOKENIZER_JSON IN_TEXTS OUT_IDS [--threads N] [--ordinary]
//   deepinfer_tokenize decode   TOKENIZER_JSON IN_IDS OUT_TEXTS [--skip-special] [--stream]
//   deepinfer_tokenize bytes    TOKENIZER_JSON OUT_TEXTS     (token_bytes of every id)
//   deepinfer_tokenize bench    TOKENIZER_JSON IN_TEXTS [--repeat R] [--threads N]
//
// Framed formats (little-endian): texts are records [u32 n_bytes][bytes]; id lists are
// records [u32 n_ids][n_ids x i32]. `decode --stream` feeds ids one by one to a
// StreamDetokenizer and writes the concatenated output. `bench` prints one JSON line with
// single-thread and batch encode throughput in MB/s.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <omp.h>

#include "base/error.h"
#include "recipe/detokenizer.h"
#include "recipe/tokenizer.h"

namespace {

using deepinfer::recipe::StreamDetokenizer;
using deepinfer::recipe::Tokenizer;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK_KIND(kNotFound, in.good()) << "cannot open '" << path << "'";
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint32_t read_u32(const std::string& data, size_t& pos) {
  CHECK(pos + 4 <= data.size()) << "truncated framed file";
  uint32_t v;
  std::memcpy(&v, data.data() + pos, 4);
  pos += 4;
  return v;
}

std::vector<std::string> read_texts(const std::string& path) {
  const std::string data = read_file(path);
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < data.size();) {
    const uint32_t n = read_u32(data, pos);
    CHECK(pos + n <= data.size()) << "truncated framed text file";
    texts.emplace_back(data.substr(pos, n));
    pos += n;
  }
  return texts;
}

std::vector<std::vector<int32_t>> read_ids(const std::string& path) {
  const std::string data = read_file(path);
  std::vector<std::vector<int32_t>> lists;
  for (size_t pos = 0; pos < data.size();) {
    const uint32_t n = read_u32(data, pos);
    CHECK(pos + 4ull * n <= data.size()) << "truncated framed id file";
    std::vector<int32_t> ids(n);
    if (n) std::memcpy(ids.data(), data.data() + pos, 4ull * n);
    pos += 4ull * n;
    lists.push_back(std::move(ids));
  }
  return lists;
}

void write_u32(std::ofstream& out, uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); }

void write_texts(const std::string& path, const std::vector<std::string>& texts) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& t : texts) {
    write_u32(out, static_cast<uint32_t>(t.size()));
    out.write(t.data(), static_cast<std::streamsize>(t.size()));
  }
}

void write_ids(const std::string& path, const std::vector<std::vector<int32_t>>& lists) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& ids : lists) {
    write_u32(out, static_cast<uint32_t>(ids.size()));
    out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(4 * ids.size()));
  }
}

bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

int int_option(int argc, char** argv, const char* flag, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return std::stoi(argv[i + 1]);
  return fallback;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
  CHECK(argc >= 4) << "usage: deepinfer_tokenize encode|decode|bytes|bench TOKENIZER_JSON ...";
  const std::string mode = argv[1];
  const auto t_load = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::from_file(argv[2]);
  const double load_s = seconds_since(t_load);
  if (mode == "encode") {
    CHECK(argc >= 5) << "encode needs IN_TEXTS OUT_IDS";
    const auto texts = read_texts(argv[3]);
    std::vector<std::vector<int32_t>> ids;
    if (has_flag(argc, argv, "--ordinary")) {
      for (const auto& t : texts) ids.push_back(tok.encode_ordinary(t));
    } else {
      ids = tok.encode_batch(texts, true, int_option(argc, argv, "--threads", 0));
    }
    write_ids(argv[4], ids);
  } else if (mode == "decode") {
    CHECK(argc >= 5) << "decode needs IN_IDS OUT_TEXTS";
    const bool skip = has_flag(argc, argv, "--skip-special");
    const bool stream = has_flag(argc, argv, "--stream");
    std::vector<std::string> texts;
    for (const auto& ids : read_ids(argv[3])) {
      if (!stream) {
        texts.push_back(tok.decode(ids, skip));
        continue;
      }
      StreamDetokenizer detok(tok, skip);
      std::string text;
      for (int32_t id : ids) text += detok.push(id);
      text += detok.flush();
      texts.push_back(std::move(text));
    }
    write_texts(argv[4], texts);
  } else if (mode == "bytes") {
    std::vector<std::string> texts;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) texts.emplace_back(tok.token_bytes(id));
    write_texts(argv[3], texts);
  } else if (mode == "bench") {
    const auto texts = read_texts(argv[3]);
    const int repeat = int_option(argc, argv, "--repeat", 3);
    const int threads = int_option(argc, argv, "--threads", omp_get_max_threads());
    size_t n_bytes = 0, n_tokens = 0;
    for (const auto& t : texts) n_bytes += t.size();
    // Each configuration uses a fresh tokenizer so both start with an empty word cache;
    // the first (cold) pass is reported separately from the best warm pass.
    auto measure = [&](bool batch, double& cold, double& warm) {
      const Tokenizer fresh = Tokenizer::from_file(argv[2]);
      cold = 1e30;
      warm = 1e30;
      for (int r = 0; r <= repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        size_t n = 0;
        if (batch) {
          for (const auto& ids : fresh.encode_batch(texts, true, threads)) n += ids.size();
        } else {
          for (const auto& t : texts) n += fresh.encode(t).size();
        }
        const double s = seconds_since(t0);
        n_tokens = n;
        (r == 0 ? cold : warm) = std::min(r == 0 ? cold : warm, s);
      }
    };
    double single_cold, single_warm, batch_cold, batch_warm;
    measure(false, single_cold, single_warm);
    measure(true, batch_cold, batch_warm);
    const double mb = static_cast<double>(n_bytes) / 1e6;
    std::printf(
        "{\"bytes\": %zu, \"docs\": %zu, \"tokens\": %zu, \"threads\": %d, \"load_s\": %.3f, "
        "\"single_cold_mbps\": %.3f, \"single_mbps\": %.3f, \"batch_cold_mbps\": %.3f, \"batch_mbps\": %.3f}\n",
        n_bytes, texts.size(), n_tokens, threads, load_s, mb / single_cold, mb / single_warm, mb / batch_cold,
        mb / batch_warm);
  } else {
    THROW(kInvalidInput) << "unknown mode '" << mode << "'";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepinfer_tokenize: %s\n", e.what());
    return 1;
  }
}
