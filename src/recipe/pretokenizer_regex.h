// A compiled pre-tokenizer regex (PCRE2 with JIT) that reproduces the Oniguruma
// semantics HF tokenizers uses for `Split` patterns:
//   - Unicode properties (\p{L}, \p{N}, ...) and Unicode \s / \S; PCRE2 counts U+180E as
//     \s but Oniguruma does not, so \s and \S are rewritten to Oniguruma's set
//     [\t-\r\x{85}\p{Z}] (\S inside a bracket class is rejected as unsupported).
//   - Unicode 16 general categories: PCRE2 10.42 has Unicode 14 tables, so \p{L}, \p{M},
//     \p{N}, \p{P}, \p{S} and \p{Z} (and \P{..} outside classes) get the code points
//     Unicode 15-16 added to them (unicode_categories.inc, made by
//     tools/gen_unicode_categories.py). Two-letter categories and scripts keep PCRE2's tables.
//   - Ruby syntax: ^ and $ are line anchors (PCRE2_MULTILINE).
//   - find_iter: leftmost-first matches, non-overlapping; an empty match advances by one
//     character.
// Thread-safety: a Regex is immutable after construction; find_iter may be called from
// any number of threads at once (match data is per thread).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::recipe {

class Regex {
 public:
  // Compiles `pattern` (Oniguruma syntax); `literal` treats it as a plain string.
  // Throws deepinfer::Error (kInvalidInput) naming the pattern when it does not compile.
  Regex(std::string_view pattern, bool literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte offsets of all matches in `subject` (valid UTF-8) to
  // `out` as consecutive pairs. Lookarounds see only `subject`.
  void find_all(std::string_view subject, std::vector<size_t>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Oniguruma pattern -> PCRE2 pattern (the \s / \S rewrite described above). Exposed for tests.
std::string onig_to_pcre2(std::string_view pattern);

}  // namespace deepinfer::recipe
