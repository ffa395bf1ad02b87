// Shared by the libFuzzer harnesses (fuzz/*.cc): what counts as an expected outcome.
//
// A harness feeds hostile bytes to one parser. Refusing them with deepinfer::Error (any kind but
// kInternal, a broken invariant of ours) or with server::ApiError (a 4xx refusal) is expected.
// Everything else is a finding and aborts, so libFuzzer records the input: a sanitizer report,
// an Error of kind kInternal, an ApiError with a 5xx status, and any other exception (a
// nlohmann type_error escaping a parser, std::bad_alloc, std::length_error, ...). Timeouts
// and memory over -rss_limit_mb are reported by libFuzzer itself.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include "base/error.h"

#ifndef DEEPINFER_SOURCE_DIR
#define DEEPINFER_SOURCE_DIR "."
#endif

namespace deepinfer::fuzz {

[[noreturn]] inline void finding(const char* what, const char* detail) {
  std::fprintf(stderr, "FUZZ FINDING: %s: %s\n", what, detail);
  std::fflush(stderr);
  std::abort();
}

// Runs `fn`; returns true when it completed, false when it refused the input the expected way.
template <class Fn>
bool expect_ok_or_refusal(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInternal) finding("internal error (kInternal)", e.what());
    return false;
  } catch (const std::exception& e) {
    // ApiError is caught by the caller where a harness reaches the server layer.
    finding(typeid(e).name(), e.what());
  } catch (...) {
    finding("non-std exception", "?");
  }
}

inline std::string source_path(const std::string& relative) {
  if (const char* root = std::getenv("DEEPINFER_SOURCE_DIR")) return std::string(root) + "/" + relative;
  return std::string(DEEPINFER_SOURCE_DIR) + "/" + relative;
}

// The tokenizer the project ships (models/tiny/tokenizer.json, DeepSeek-V4's vocabulary).
inline std::string shipped_tokenizer_path() { return source_path("models/tiny/tokenizer.json"); }

}  // namespace deepinfer::fuzz
