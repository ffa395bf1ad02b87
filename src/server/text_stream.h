// Text helpers for streamed responses.
//
// StopMatcher: finds stop strings in text that arrives in pieces. feed() returns the text
// that is final: everything before the stop string that completes first (ties: the longer)
// once one is seen, else everything
// except the longest tail that could still start a stop string (held back). After a hit,
// later text is ignored. flush() returns what is held back at the end of the stream.
//
// Utf8Holdback: appends bytes and releases only complete UTF-8 characters (a JSON string
// cannot carry half a character); flush() releases the rest.
//
// Thread-safety: one object per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  std::string feed(std::string_view text);
  std::string flush();
  bool hit() const { return hit_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool hit_ = false;
};

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary, given that
// `s` starts on one (bytes of a character still incomplete at the end are excluded).
size_t complete_utf8_prefix(std::string_view s);

class Utf8Holdback {
 public:
  std::string push(std::string_view bytes);
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace deepinfer::server
