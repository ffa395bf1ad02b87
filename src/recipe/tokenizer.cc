#include "recipe/tokenizer.h"

#include <omp.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/logging.h"
#include "recipe/bpe.h"
#include "recipe/byte_level.h"
#include "recipe/pretokenizer.h"
#include "recipe/scratch.h"
#include "recipe/tokenizer_json.h"
#include "recipe/unicode_utf8.h"

namespace deepinfer::recipe {
namespace {

// The identity normalizer: null or (nested) empty Sequences.
void check_normalizer(const nlohmann::json& n) {
  if (n.is_null()) return;
  CHECK(n.is_object() && n.contains("type")) << "tokenizer.json: normalizer must be an object with a 'type'";
  const std::string type = n["type"].get<std::string>();
  CHECK_KIND(kUnsupported, type == "Sequence") << "tokenizer.json: normalizer type '" << type << "' is not supported";
  CHECK(n.contains("normalizers") && n["normalizers"].is_array()) << "normalizer Sequence needs 'normalizers'";
  for (const auto& inner : n["normalizers"]) check_normalizer(inner);
}

void check_component(const nlohmann::json& j, const char* field, bool allow_null) {
  if (j.is_null()) {
    CHECK_KIND(kUnsupported, allow_null) << "tokenizer.json: a null " << field << " is not supported";
    return;
  }
  CHECK(j.is_object() && j.contains("type") && j["type"].is_string())
      << "tokenizer.json: " << field << " must be an object with a string 'type'";
  const std::string type = j["type"].get<std::string>();
  CHECK_KIND(kUnsupported, type == "ByteLevel")
      << "tokenizer.json: " << field << " type '" << type << "' is not supported (only ByteLevel)";
}

bool get_flag(const nlohmann::json& t, const char* key, bool fallback) {
  if (!t.contains(key)) return fallback;
  CHECK(t[key].is_boolean()) << "tokenizer.json: added token field '" << key << "' must be a boolean";
  return t[key].get<bool>();
}

// HF ignores the ids written in "added_tokens": it re-adds the tokens in file order and
// gives each the id of an earlier added token with the same content, or of the same
// content in the model vocabulary, or else the model vocabulary's entry count, or one
// past the largest added id so far once that reaches the entry count. For DeepSeek files this reproduces the
// written ids; where it does not, HF's ids win (with a warning, as HF prints one).
void assign_added_ids(const BpeModel& model, std::vector<AddedToken>& added) {
  const auto model_size = static_cast<int64_t>(model.vocab().size());
  std::unordered_map<std::string, int32_t> seen;
  int64_t max_added = -1;
  for (AddedToken& a : added) {
    int32_t id;
    if (auto it = seen.find(a.content); it != seen.end()) {
      id = it->second;
    } else if (auto m = model.token_to_id(a.content)) {
      id = *m;
    } else {
      id = static_cast<int32_t>(max_added < 0 ? model_size
                                : (max_added >= model_size || model_size == 0) ? max_added + 1
                                                                               : model_size);
    }
    if (id != a.id) {
      LOG(WARNING) << "tokenizer.json: added token '" << a.content << "' is written with id " << a.id
                   << " but HF tokenizers gives it id " << id << "; using " << id;
      a.id = id;
    }
    seen.emplace(a.content, id);
    max_added = std::max<int64_t>(max_added, id);
  }
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK_KIND(kNotFound, in.good()) << "cannot open tokenizer file '" << path << "'";
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return from_json(ss.str());
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(e.what()) + " (in '" + path + "')");
  }
}

Tokenizer Tokenizer::from_json(std::string_view text) {
  TokenizerJson parsed;
  try {
    parsed = parse_tokenizer_json(text);
  } catch (const nlohmann::json::exception& e) {
    THROW(kInvalidInput) << "tokenizer.json is not valid JSON: " << e.what();
  }
  const nlohmann::json& j = parsed.doc;
  CHECK(j.is_object()) << "tokenizer.json: top level must be an object";
  CHECK(j.contains("model")) << "tokenizer.json: missing 'model'";
  CHECK_KIND(kUnsupported, j.value("truncation", nlohmann::json()).is_null())
      << "tokenizer.json: truncation is not supported";
  CHECK_KIND(kUnsupported, j.value("padding", nlohmann::json()).is_null())
      << "tokenizer.json: padding is not supported";

  Tokenizer tok;
  try {
    check_normalizer(j.value("normalizer", nlohmann::json()));
    check_component(j.value("post_processor", nlohmann::json()), "post_processor", true);
    check_component(j.value("decoder", nlohmann::json()), "decoder", false);
    tok.pre_tokenizer_ = std::make_unique<PreTokenizer>(j.value("pre_tokenizer", nlohmann::json()));
    CHECK_KIND(kUnsupported, tok.pre_tokenizer_->byte_level())
        << "tokenizer.json: only byte-level BPE is supported (the pre_tokenizer has no ByteLevel step)";
    tok.model_ = std::make_unique<BpeModel>(j["model"], BpeInput{std::move(parsed.vocab), std::move(parsed.merges)});

    std::vector<AddedToken> added;
    const auto& list = j.value("added_tokens", nlohmann::json::array());
    CHECK(list.is_array()) << "tokenizer.json: 'added_tokens' must be an array";
    for (const auto& t : list) {
      CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
            t["content"].is_string())
          << "tokenizer.json: each added token needs an integer 'id' and a string 'content'";
      AddedToken a;
      const int64_t id = t["id"].get<int64_t>();
      CHECK(id >= 0 && id < INT32_MAX) << "tokenizer.json: added token id out of range: " << id;
      a.id = static_cast<int32_t>(id);
      a.content = t["content"].get<std::string>();
      CHECK(utf8_valid_prefix(a.content) == a.content.size()) << "added token " << id << " is not valid UTF-8";
      a.special = get_flag(t, "special", false);
      a.lstrip = get_flag(t, "lstrip", false);
      a.rstrip = get_flag(t, "rstrip", false);
      a.normalized = get_flag(t, "normalized", !a.special);
      a.single_word = get_flag(t, "single_word", false);
      added.push_back(std::move(a));
    }

    assign_added_ids(*tok.model_, added);

    int32_t n_ids = 0;
    for (const auto& [token, id] : tok.model_->vocab()) n_ids = std::max(n_ids, id + 1);
    for (const AddedToken& a : added) n_ids = std::max(n_ids, a.id + 1);
    tok.tokens_.assign(n_ids, std::string());
    tok.token_bytes_.assign(n_ids, std::string());
    tok.kinds_.assign(n_ids, kNone);
    for (const auto& [token, id] : tok.model_->vocab()) {
      tok.tokens_[id] = token;
      tok.kinds_[id] = kModel;
      if (!byte_level_decode(token, tok.token_bytes_[id])) tok.token_bytes_[id] = token;
    }
    for (const AddedToken& a : added) {
      tok.tokens_[a.id] = a.content;
      tok.token_bytes_[a.id] = a.content;
      tok.kinds_[a.id] = a.special ? kSpecial : kAdded;
      tok.added_ids_[a.content] = a.id;
    }
    tok.added_ = AddedVocabulary(std::move(added));
  } catch (const nlohmann::json::exception& e) {
    THROW(kInvalidInput) << "tokenizer.json has a field of the wrong type: " << e.what();
  }
  return tok;
}

void Tokenizer::encode_segment(std::string_view segment, std::vector<int32_t>& out) const {
  thread_local std::vector<Piece> pieces;
  pre_tokenizer_->split(segment, pieces);
  for (const Piece& p : pieces) model_->encode(segment.substr(p.begin, p.end - p.begin), out);
  release_large_scratch(pieces);
}

void Tokenizer::encode_into(std::string_view text, bool parse_added, std::vector<int32_t>& out) const {
  const size_t valid = utf8_valid_prefix(text);
  CHECK(valid == text.size()) << "text to encode is not valid UTF-8 (first bad byte at offset " << valid << ")";
  if (!parse_added) {
    encode_segment(text, out);
    return;
  }
  std::vector<TextSegment> segments;
  added_.split(text, segments);
  for (const TextSegment& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      encode_segment(text.substr(s.begin, s.end - s.begin), out);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, true, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, false, out);
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          bool add_special_tokens, int n_threads) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  if (n_threads <= 0) n_threads = omp_get_max_threads();
  const auto n = static_cast<int64_t>(texts.size());
  std::vector<std::string> errors(texts.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
  for (int64_t i = 0; i < n; ++i) {
    try {
      out[i] = encode(texts[i], add_special_tokens);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  }
  for (size_t i = 0; i < errors.size(); ++i)
    CHECK(errors[i].empty()) << "encode_batch: text #" << i << ": " << errors[i];
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out, run;
  for (int32_t id : ids) {
    if (!has_token(id)) continue;
    const Kind kind = static_cast<Kind>(kinds_[id]);
    if (kind == kModel) {
      run += token_bytes_[id];
      continue;
    }
    if (kind == kSpecial && skip_special_tokens) continue;
    append_utf8_lossy(out, run);
    run.clear();
    out += token_bytes_[id];
  }
  append_utf8_lossy(out, run);
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = added_ids_.find(std::string(token));
  if (it != added_ids_.end()) return it->second;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (!has_token(id)) return std::nullopt;
  return tokens_[id];
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!has_token(id)) return {};
  return token_bytes_[id];
}

bool Tokenizer::has_token(int32_t id) const {
  return id >= 0 && id < vocab_size() && kinds_[id] != kNone;
}

bool Tokenizer::is_added(int32_t id) const { return has_token(id) && kinds_[id] >= kAdded; }

bool Tokenizer::is_special(int32_t id) const { return has_token(id) && kinds_[id] == kSpecial; }

}  // namespace deepinfer::recipe
