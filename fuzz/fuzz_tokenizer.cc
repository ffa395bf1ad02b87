// libFuzzer harness for the tokenizer, two inputs in one corpus:
//  - text starting with '{': a tokenizer.json document for Tokenizer::from_json; when it loads,
//    a few fixed strings are encoded and decoded with it;
//  - anything else, with the shipped tokenizer (models/tiny/tokenizer.json, DeepSeek-V4's):
//    byte 0 picks the mode, the rest is the payload. Modes: encode (added tokens parsed) and
//    encode_ordinary of the payload (refused unless valid UTF-8), checking that decoding gives
//    the text back; or the payload read as little-endian int32 ids (any value, out-of-range
//    ones included) for decode and the streaming detokenizer, whose concatenated output must
//    equal decode() of the same ids.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "recipe/detokenizer.h"
#include "recipe/tokenizer.h"

using namespace deepinfer;
using recipe::Tokenizer;

namespace {

const Tokenizer& shipped() {
  static const Tokenizer t = Tokenizer::from_file(fuzz::shipped_tokenizer_path());
  return t;
}

void fuzz_json(std::string_view json) {
  fuzz::expect_ok_or_refusal([&] {
    const Tokenizer t = Tokenizer::from_json(json);
    for (std::string_view text : {"", "Hello world", " 12345 ", "中文 テキスト", "a\r\n\tb", "<｜User｜>x"}) {
      fuzz::expect_ok_or_refusal([&] {
        const std::vector<int32_t> ids = t.encode(text);
        (void)t.decode(ids);
        (void)t.decode(ids, /*skip_special_tokens=*/true);
      });
    }
    for (int32_t id = -1; id < 8 && id < t.vocab_size(); ++id) {
      (void)t.id_to_token(id);
      if (t.has_token(id)) (void)t.token_bytes(id);
    }
  });
}

void fuzz_text(const Tokenizer& t, std::string_view text, bool parse_added) {
  fuzz::expect_ok_or_refusal([&] {
    const std::vector<int32_t> ids = parse_added ? t.encode(text) : t.encode_ordinary(text);
    for (int32_t id : ids) {
      if (!t.has_token(id)) fuzz::finding("encode", "produced an id the tokenizer does not have");
    }
    // Byte-level BPE with no normalizer is lossless on valid UTF-8.
    if (t.decode(ids) != text) fuzz::finding("encode/decode", "decode(encode(text)) != text");
  });
}

void fuzz_ids(const Tokenizer& t, std::string_view payload, bool skip_special) {
  std::vector<int32_t> ids(payload.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), payload.data(), ids.size() * 4);
  fuzz::expect_ok_or_refusal([&] {
    const std::string whole = t.decode(ids, skip_special);
    recipe::StreamDetokenizer stream(t, skip_special);
    std::string streamed;
    for (size_t i = 0; i < ids.size(); ++i) {
      streamed += (i % 3 == 2) ? stream.push(std::span<const int32_t>(&ids[i], 1)) : stream.push(ids[i]);
    }
    streamed += stream.flush();
    if (streamed != whole) fuzz::finding("StreamDetokenizer", "streamed text != decode() of the same ids");
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)shipped();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  if (all[0] == '{') {
    fuzz_json(all);
    return 0;
  }
  const uint8_t mode = data[0];
  const std::string_view payload = all.substr(1);
  switch (mode % 4) {
    case 0: fuzz_text(shipped(), payload, true); break;
    case 1: fuzz_text(shipped(), payload, false); break;
    case 2: fuzz_ids(shipped(), payload, false); break;
    case 3: fuzz_ids(shipped(), payload, true); break;
  }
  return 0;
}
