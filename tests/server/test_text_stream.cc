// StopMatcher and Utf8Holdback against whole-text references on random splits (byte-wise,
// so UTF-8 characters are split too).
#include "server/text_stream.h"

#include <gtest/gtest.h>

#include <random>

namespace deepinfer::server {
namespace {

TEST(StopMatcher, AnySplitGivesTheTextBeforeTheFirstStop) {
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", "ab", "x", "é", "東", "\n"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = rng() % 20;
    for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const int n_stops = rng() % 3;
    for (int s = 0; s < n_stops; ++s) {
      std::string stop;
      const int len = 1 + rng() % 3;
      for (int i = 0; i < len; ++i) stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    // Reference: scan end positions; the first stop ending there (longest on ties) cuts.
    size_t first = std::string::npos;
    for (size_t end = 1; end <= text.size() && first == std::string::npos; ++end) {
      for (const std::string& s : stops) {
        if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
          first = std::min(first, end - s.size());
        }
      }
    }
    const std::string want = first == std::string::npos ? text : text.substr(0, first);

    StopMatcher m(stops);
    std::string got;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t len = std::min<size_t>(text.size() - pos, rng() % 4);
      got += m.feed(std::string_view(text).substr(pos, len));
      pos += len;
    }
    got += m.flush();
    EXPECT_EQ(got, want) << "text '" << text << "'";
    EXPECT_EQ(m.hit(), first != std::string::npos);
  }
}

TEST(Utf8Holdback, ReleasesOnlyWholeCharacters) {
  const std::string text = "a\xC3\xA9\xE6\x9D\xB1\xF0\x9F\x98\x80z";  // a é 東 😀 z
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Utf8Holdback h;
    const std::string first = h.push(std::string_view(text).substr(0, cut));
    const std::string second = h.push(std::string_view(text).substr(cut));
    EXPECT_EQ(first + second, text);
    EXPECT_EQ(h.flush(), "");
    // What was released first ends on a character boundary.
    EXPECT_EQ(complete_utf8_prefix(first), first.size());
  }
  Utf8Holdback h;
  EXPECT_EQ(h.push("x\xE6\x9D"), "x");
  EXPECT_EQ(h.flush(), "\xE6\x9D");
  EXPECT_EQ(complete_utf8_prefix("\x80\x80"), 2u);  // stray continuation bytes pass through
}

}  // namespace
}  // namespace deepinfer::server
