// Test helper: the grammar Vocabulary of a HF byte-level BPE tokenizer.json (e.g. DeepSeek-V3's).
//
// Vocab strings are mapped back to raw bytes through the GPT-2 byte<->unicode table; added tokens
// are special (empty bytes, never allowed by a grammar). Stop tokens: the added tokens whose
// content is `eos_content`. Kept in tests/ so the grammar engine does not depend on the tokenizer.
#pragma once

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar::testing {

inline constexpr int32_t kDeepSeekVocabSize = 129280;
inline const char* const kDeepSeekTokenizer = "../shared/fixtures/tokenizer-deepseek-v3/tokenizer.json";

inline std::shared_ptr<const Vocabulary> load_hf_vocab(const std::string& path, int32_t n_vocab,
                                                       const std::string& eos_content = "<｜end▁of▁sentence｜>") {
  std::ifstream f(path);
  CHECK(f.good()) << "cannot open tokenizer " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  auto tj = nlohmann::json::parse(ss.str());
  // GPT-2 bytes_to_unicode inverse: code point -> byte.
  std::vector<int> cp_to_byte(512, -1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = printable ? b : 256 + extra++;
    cp_to_byte[cp] = b;
  }
  std::vector<std::string> bytes(n_vocab);
  std::vector<uint8_t> added(n_vocab, 0);
  for (const auto& t : tj["added_tokens"]) added.at(t["id"].get<int32_t>()) = 1;
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it) {
    int32_t id = it.value().get<int32_t>();
    CHECK(id >= 0 && id < n_vocab) << "token id " << id << " outside vocab size " << n_vocab;
    if (added[id]) continue;
    const std::string& s = it.key();
    std::string out;
    for (size_t i = 0; i < s.size();) {
      unsigned char c = s[i];
      int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
      for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      CHECK(cp < 512 && cp_to_byte[cp] >= 0) << "token '" << s << "' is not byte-level BPE";
      out += static_cast<char>(cp_to_byte[cp]);
      i += n;
    }
    bytes[id] = out;
  }
  std::vector<int32_t> stops;
  for (const auto& t : tj["added_tokens"]) {
    int32_t id = t["id"].get<int32_t>();
    bytes[id].clear();
    if (t["content"].get<std::string>() == eos_content) stops.push_back(id);
  }
  CHECK(!stops.empty()) << "EOS token '" << eos_content << "' not found in " << path;
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(stops));
}

}  // namespace deepinfer::grammar::testing
