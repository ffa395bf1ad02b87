#include "recipe/pretokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/error.h"

namespace deepinfer::recipe {
namespace {

// Oniguruma's \s for UTF-8 is the White_Space property; PCRE2 (UCP) adds U+180E.
constexpr std::string_view kSpaceItems = "\\t-\\r\\x{85}\\p{Z}";

// Code points Unicode 16 (Oniguruma in HF) adds to each major category over Unicode 14
// (PCRE2 10.42), as PCRE2 class items.
struct CategoryExtra {
  const char* category;
  const char* items;
};
constexpr CategoryExtra kCategoryExtras[] = {
#include "recipe/unicode_categories.inc"
};

const char* category_extra(std::string_view name) {
  for (const CategoryExtra& e : kCategoryExtras)
    if (name == e.category) return e.items;
  return nullptr;
}

// One match data per thread, reused for every match (only group 0 is read).
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder holder;
  return holder.md;
}

}  // namespace

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if ((n == 'p' || n == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
        const size_t close = p.find('}', i + 3);
        CHECK(close != std::string_view::npos) << "unterminated \\p{...} in regex: " << p;
        const std::string_view name = p.substr(i + 3, close - i - 3);
        const std::string_view prop = p.substr(i, close + 1 - i);
        const char* extra = category_extra(name);
        if (extra == nullptr) {
          out += prop;
        } else if (in_class) {
          CHECK_KIND(kUnsupported, n == 'p')
              << "regex pattern uses \\P{" << name << "} inside a bracket class, which is not supported: " << p;
          out += prop;
          out += extra;
        } else {
          out += n == 'p' ? "[" : "[^";
          out += "\\p{";
          out += name;
          out += "}";
          out += extra;
          out += "]";
        }
        i = close;
        continue;
      }
      if (n == 's' || n == 'S') {
        if (in_class) {
          CHECK_KIND(kUnsupported, n == 's')
              << "regex pattern uses \\S inside a bracket class, which is not supported: " << p;
          out += kSpaceItems;
        } else {
          out += n == 's' ? "[" : "[^";
          out += kSpaceItems;
          out += "]";
        }
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t close = p.find(":]", i + 2);
      CHECK(close != std::string_view::npos) << "unterminated POSIX class in regex: " << p;
      out += p.substr(i, close + 2 - i);
      i = close + 1;
      continue;
    }
    if (in_class && c == '[') {
      CHECK_KIND(kUnsupported, false) << "nested bracket classes are not supported in regex: " << p;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  const std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  if (literal) options = PCRE2_UTF | PCRE2_LITERAL;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    CHECK(false) << "cannot compile pre-tokenizer regex '" << pattern_ << "' at offset " << error_offset
                 << ": " << reinterpret_cast<const char*>(message);
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view subject, std::vector<size_t>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = thread_match_data();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t n = subject.size();
  size_t pos = 0;
  while (pos <= n) {
    const int rc = jit_ ? pcre2_jit_match(code, data, n, pos, PCRE2_NO_UTF_CHECK, md, nullptr)
                        : pcre2_match(code, data, n, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    CHECK(rc >= 0) << "regex '" << pattern_ << "' failed with PCRE2 error " << rc;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0], end = ov[1];
    out.push_back(begin);
    out.push_back(end);
    if (end > begin) {
      pos = end;
    } else {
      // Empty match: step over one whole character.
      if (end >= n) break;
      pos = end + 1;
      while (pos < n && (static_cast<uint8_t>(subject[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace deepinfer::recipe
