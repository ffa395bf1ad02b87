// Regex front end: accept/reject tables (expected results follow ECMA-262 full-match semantics),
// and unsupported features rejected at compile time with the feature named.
#include <gtest/gtest.h>

#include "base/error.h"
#include "grammar/dfa.h"
#include "grammar/parse_stack.h"
#include "grammar/regex_parser.h"

namespace deepinfer::grammar {
namespace {

struct Case {
  const char* pattern;
  std::vector<std::string> yes, no;
};

TEST(Regex, AcceptReject) {
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd", "Abc"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"[a-c]+x?", {"a", "cbax", "bbb"}, {"", "x", "ad"}},
      {"[^a-c]", {"d", "é", "中", "\n"}, {"a", "b", "", "dd"}},
      {"\\d{2,4}", {"12", "1234"}, {"1", "12345", "ab"}},
      {"\\w+\\s\\W", {"ab_9 !", "x\t-"}, {"ab !x", " a"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaaa"}, {"a"}},
      {"(ab|cd)*e", {"e", "abcde", "cdcdabe"}, {"abc", "ace"}},
      {"^\\$[0-9]+(\\.[0-9]{2})?$", {"$5", "$10.25"}, {"5", "$1.2", "$"}},
      {".+", {"a", "中文", "x y"}, {"", "a\nb", "\r"}},
      {"\\x41\\u00e9\\u{1F600}", {"Aé😀"}, {"Ae😀"}},
      {"[\\d-]+", {"1-2", "-"}, {"a"}},
      {"(?:x|y)(?<n>z)", {"xz", "yz"}, {"z"}},
      {"a+?b*?", {"a", "aab"}, {"b"}},
      {"[]", {}, {"", "a"}},
      {"colou?r", {"color", "colour"}, {"colouur"}},
      {"\\.\\*\\\\", {".*\\"}, {"a*\\"}},
      {"[\\s\\S]", {"\n", "x"}, {""}},
      {"x{", {"x{"}, {"x"}},
  };
  for (const auto& c : cases) {
    Grammar g = regex_grammar(c.pattern);
    for (const auto& s : c.yes) EXPECT_TRUE(grammar_matches(g, s)) << c.pattern << " should match '" << s << "'";
    for (const auto& s : c.no) EXPECT_FALSE(grammar_matches(g, s)) << c.pattern << " should not match '" << s << "'";
  }
}

TEST(Regex, SearchModeForJsonSchemaPattern) {
  Dfa unanchored = build_dfa(*parse_regex("b+", RegexMode::kSearch), "t");
  EXPECT_TRUE(unanchored.matches("abbc"));
  EXPECT_FALSE(unanchored.matches("ac"));
  Dfa anchored = build_dfa(*parse_regex("^b+$", RegexMode::kSearch), "t");
  EXPECT_TRUE(anchored.matches("bb"));
  EXPECT_FALSE(anchored.matches("abb"));
  Dfa start = build_dfa(*parse_regex("^a|b$", RegexMode::kSearch), "t");
  EXPECT_TRUE(start.matches("ax"));
  EXPECT_TRUE(start.matches("xb"));
  EXPECT_FALSE(start.matches("xa"));
}

TEST(Regex, FlavoursNarrowAndWide) {
  // \w: ECMA ASCII, Python Unicode. Narrow generates only strings both accept, wide excludes
  // strings either accepts.
  Dfa narrow = build_dfa(*parse_regex("^\\w$", RegexMode::kSearch, RegexFlavor::kNarrow), "t");
  Dfa wide = build_dfa(*parse_regex("^\\w$", RegexMode::kSearch, RegexFlavor::kWide), "t");
  EXPECT_TRUE(narrow.matches("a"));
  EXPECT_FALSE(narrow.matches("é"));
  EXPECT_TRUE(wide.matches("é"));
  Dfa narrow_not_word = build_dfa(*parse_regex("^\\W$", RegexMode::kSearch, RegexFlavor::kNarrow), "t");
  EXPECT_TRUE(narrow_not_word.matches("-"));
  EXPECT_FALSE(narrow_not_word.matches("é"));
  // `$`: ECMA at the end only, Python also before a final "\n".
  Dfa narrow_end = build_dfa(*parse_regex("^a+$", RegexMode::kSearch, RegexFlavor::kNarrow), "t");
  Dfa wide_end = build_dfa(*parse_regex("^a+$|b$", RegexMode::kSearch, RegexFlavor::kWide), "t");
  EXPECT_TRUE(narrow_end.matches("aa"));
  EXPECT_FALSE(narrow_end.matches("aa\n"));
  EXPECT_TRUE(wide_end.matches("aa"));
  EXPECT_TRUE(wide_end.matches("aa\n"));
  EXPECT_TRUE(wide_end.matches("xb\n"));
  EXPECT_FALSE(wide_end.matches("aa\n\n"));
}

TEST(Regex, UnsupportedFeaturesAreNamed) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"a(?=b)", "lookahead"}, {"(?<!a)b", "lookbehind"}, {"(a)\\1", "backreference"},
      {"\\bword", "word boundary"}, {"a^b", "anchor"}, {"a$b", "anchor"}, {"\\p{L}", "property"}};
  for (const auto& [p, feature] : cases) {
    try {
      regex_grammar(p);
      ADD_FAILURE() << p << " should be rejected";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << p;
      EXPECT_NE(std::string(e.what()).find(feature), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(regex_grammar("(ab"), Error);
  EXPECT_THROW(regex_grammar("a{3,2}"), Error);
  EXPECT_THROW(regex_grammar("*a"), Error);
}

TEST(Regex, DfaOperations) {
  Dfa a = build_dfa(*parse_regex("[a-z]+", RegexMode::kFullMatch), "a");
  Dfa b = build_dfa(*parse_regex("abc|xyz", RegexMode::kFullMatch), "b");
  Dfa diff = subtract_dfa(a, b, "diff");
  EXPECT_TRUE(diff.matches("abd"));
  EXPECT_FALSE(diff.matches("abc"));
  Dfa both = intersect_dfa(a, b, "both");
  EXPECT_TRUE(both.matches("xyz"));
  EXPECT_FALSE(both.matches("abd"));
  EXPECT_TRUE(intersect_dfa(b, build_dfa(*parse_regex("q+", RegexMode::kFullMatch), "q"), "e").empty());
  // Trimmed: every live state reaches acceptance.
  for (int32_t s = 0; s < diff.n_states(); ++s) {
    bool any = diff.accept[s];
    for (int c = 0; c < 256; ++c) any = any || diff.at(s, static_cast<uint8_t>(c)) != kDead;
    EXPECT_TRUE(any);
  }
}

}  // namespace
}  // namespace deepinfer::grammar
