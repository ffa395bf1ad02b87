// libFuzzer harness for the structured-output compilers: the input is a JSON schema, a regex
// or an EBNF grammar (the kind is fixed per binary: FUZZ_GRAMMAR_KIND, one of "json_schema",
// "regex", "ebnf"), compiled with small budgets (states, memory, wall time) against a small
// vocabulary as the server would (compile_grammar: front end, emptiness check, token masks),
// then a matcher walks it: up to 24 steps of mask -> first allowed token (or a stop token
// when the grammar may end) -> accept, with forced-bytes queries and a rollback.
// Expected outcomes: a compiled grammar, or deepinfer::Error (invalid, unsupported, empty
// language, over budget); kInternal errors are findings, so is a matcher that refuses a token
// its own mask allowed.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "grammar/compile.h"
#include "grammar/grammar_matcher.h"
#include "grammar/vocabulary.h"

#ifndef FUZZ_GRAMMAR_KIND
#error "define FUZZ_GRAMMAR_KIND"
#endif

using namespace deepinfer;
using namespace deepinfer::grammar;

namespace {

// Two vocabularies, picked by the input's length: one that spells every byte (plus multi-byte
// tokens), one without most single bytes (token-level dead ends become possible).
std::shared_ptr<const Vocabulary> make_vocab(bool every_byte) {
  std::vector<std::string> tokens;
  tokens.push_back("</s>");  // id 0: the stop token
  if (every_byte) {
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  } else {
    for (const char* s : {"a", "b", "0", "1", "\"", "{", "}", "[", "]", ",", ":", " "}) tokens.push_back(s);
  }
  for (const char* s : {"{\"", "\":", "\",", "\"}", "true", "false", "null", "  ", "\n", "\n  ", "12", "123",
                        "-1", "0.5", "e+", "abc", "ab", "ba", "aa", "Hello", " world", "é", "中", "中文",
                        "\xF0\x9F\x98\x80", "\xE4\xB8", "\xAD", "\\n", "\\u00", "[\"", "\"]", "},{"}) {
    tokens.push_back(s);
  }
  return std::make_shared<Vocabulary>(std::move(tokens), std::vector<int32_t>{0});
}

void walk(const std::shared_ptr<const CompiledGrammar>& g, const Vocabulary& vocab) {
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(vocab.n_mask_words());
  for (int step = 0; step < 24 && !m.is_terminated(); ++step) {
    m.fill_next_token_bitmask(mask.data());
    int32_t pick = -1;
    // Alternate between the first and the last allowed token for variety.
    for (int32_t i = 0; i < vocab.size(); ++i) {
      const int32_t id = step % 2 ? vocab.size() - 1 - i : i;
      if (mask[id / 32] >> (id % 32) & 1) {
        pick = id;
        break;
      }
    }
    if (pick < 0) break;  // a dead end is allowed only where the vocabulary cannot spell the grammar
    if (!m.accept_token(pick)) fuzz::finding("GrammarMatcher", "refused a token its mask allowed");
    if (step % 5 == 4) (void)m.find_forced_bytes();
  }
  if (m.n_accepted() > 2) m.rollback(2);
  (void)m.find_forced_tokens();
  m.reset();
  (void)m.accept_bytes("{\"a\": 1}");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<const Vocabulary> full = make_vocab(true);
  static const std::shared_ptr<const Vocabulary> partial = make_vocab(false);
  const std::shared_ptr<const Vocabulary>& vocab = size % 4 == 3 ? partial : full;
  GrammarSpec spec;
  spec.kind = FUZZ_GRAMMAR_KIND;
  spec.text.assign(reinterpret_cast<const char*>(data), size);
  spec.max_whitespace = static_cast<int32_t>(size % 3);
  spec.limits.max_states = 20000;
  spec.limits.max_memory_bytes = 32 << 20;
  spec.limits.timeout_ms = 500;
  std::shared_ptr<const CompiledGrammar> g;
  fuzz::expect_ok_or_refusal([&] { g = compile_grammar(spec, vocab); });
  if (g) fuzz::expect_ok_or_refusal([&] { walk(g, *vocab); });
  return 0;
}
