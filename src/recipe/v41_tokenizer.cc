#include "recipe/v41_tokenizer.h"

#include <fstream>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::recipe {
namespace {

struct Rename {
  int64_t id;
  const char* v4;
  const char* v41;
};

constexpr Rename kRenames[] = {
    {128799, "<｜place▁holder▁no▁799｜>", "<｜System｜>"},
    {129264, "<｜image2｜>", "<｜deepseek_image｜>"},
};

}  // namespace

std::string v41_tokenizer_json_from_v4(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK_KIND(kNotFound, in.good()) << "cannot open tokenizer " << path;
  nlohmann::json tok;
  try {
    tok = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  } catch (const nlohmann::json::exception& e) {
    THROW(kInvalidInput) << "tokenizer " << path << " is not valid JSON (" << e.what() << ")";
  }
  CHECK(tok.contains("added_tokens") && tok["added_tokens"].is_array())
      << "tokenizer " << path << " has no added_tokens list";
  for (const Rename& r : kRenames) {
    bool found = false;
    for (nlohmann::json& t : tok["added_tokens"]) {
      if (!t.contains("id") || t["id"] != r.id) continue;
      CHECK(t.value("content", "") == r.v4)
          << "tokenizer " << path << ": added token " << r.id << " is '" << t.value("content", "")
          << "', expected the V4 spelling '" << r.v4 << "'";
      t["content"] = r.v41;
      found = true;
    }
    CHECK(found) << "tokenizer " << path << " has no added token " << r.id;
  }
  return tok.dump();
}

}  // namespace deepinfer::recipe
