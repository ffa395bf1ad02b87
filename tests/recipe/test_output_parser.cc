// Unit tests of the output parser state machine (src/recipe/output_parser.h). The parity
// with deepseek-recipe on generated completions is tests/python/test_recipe_vs_deepseek.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "recipe/output_parser.h"

namespace deepinfer::recipe {
namespace {

ParserOptions thinking() {
  ParserOptions o;
  o.start = ParseStart::kReasoningStart;
  return o;
}

// Feeds `text` in pieces of the given sizes (cycled) and returns the result.
ParsedOutput parse_split(std::string_view text, const ParserOptions& options,
                         const std::vector<size_t>& sizes) {
  OutputParser parser(options);
  size_t pos = 0;
  for (size_t i = 0; pos < text.size(); ++i) {
    const size_t n = std::min(sizes[i % sizes.size()], text.size() - pos);
    parser.feed(text.substr(pos, n));
    pos += n;
  }
  parser.finish();
  return parser.result();
}

void expect_same(const ParsedOutput& a, const ParsedOutput& b, const std::string& what) {
  EXPECT_EQ(a.reasoning_content, b.reasoning_content) << what;
  EXPECT_EQ(a.content, b.content) << what;
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size()) << what;
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name) << what;
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments) << what;
  }
  EXPECT_EQ(a.stop_sequence_hit, b.stop_sequence_hit) << what;
  EXPECT_EQ(a.ended, b.ended) << what;
}

TEST(OutputParser, ReasoningThenContent) {
  const ParsedOutput r = parse_output("\n\nLet me think.\n\n</think>\n\nThe answer is 4.", thinking());
  EXPECT_EQ(r.reasoning_content, "Let me think.");  // leading and trailing newlines dropped
  EXPECT_EQ(r.content, "The answer is 4.");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_FALSE(r.ended);
}

TEST(OutputParser, ChatModeDropsStrayThinkEnd) {
  const ParsedOutput r = parse_output("\nHello</think> world", ParserOptions());
  EXPECT_EQ(r.reasoning_content, "");
  EXPECT_EQ(r.content, "Hello world");
}

TEST(OutputParser, ContinuationsKeepLeadingNewlines) {
  ParserOptions o;
  o.start = ParseStart::kContentContinuation;
  EXPECT_EQ(parse_output("\n\nabc", o).content, "\n\nabc");
  o.start = ParseStart::kReasoningContinuation;
  const ParsedOutput r = parse_output("\nmore</think>done", o);
  EXPECT_EQ(r.reasoning_content, "\nmore");
  EXPECT_EQ(r.content, "done");
}

TEST(OutputParser, StopSequenceOnlyInAnswerText) {
  ParserOptions o = thinking();
  o.stop_sequences = {"STOP", ""};
  const ParsedOutput r = parse_output("reason STOP here</think>answer STOP ignored", o);
  EXPECT_EQ(r.reasoning_content, "reason STOP here");
  EXPECT_EQ(r.content, "answer ");
  EXPECT_TRUE(r.stop_sequence_hit);
  EXPECT_TRUE(r.ended);

  // Not inside tool-call parameters either.
  o.stop_sequences = {"Paris"};
  const ParsedOutput t = parse_output(
      "r</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"c\" "
      "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
      o);
  EXPECT_FALSE(t.stop_sequence_hit);
  ASSERT_EQ(t.tool_calls.size(), 1u);
  EXPECT_EQ(t.tool_calls[0].arguments, "{\"c\": \"Paris\"}");
}

TEST(OutputParser, StopSequenceOverlappingPrefix) {
  ParserOptions o;
  o.stop_sequences = {"aab"};
  const ParsedOutput r = parse_split("xaaab tail", o, {1});
  EXPECT_EQ(r.content, "xa");
  EXPECT_TRUE(r.stop_sequence_hit);
}

TEST(OutputParser, DsmlToolCallsV4AndV41) {
  for (const std::string& d : {std::string("tool_calls"), std::string(" calls")}) {
    const std::string inv = d == "tool_calls" ? "invoke" : " invoke";
    const std::string par = d == "tool_calls" ? "parameter" : " parameter";
    const std::string text =
        "Checking.\n\n<｜DSML｜" + d + ">\n<｜DSML｜" + inv + " name=\"get_weather\">\n<｜DSML｜" +
        par + " name=\"city\" string=\"true\">Pa\"ris\n</｜DSML｜" + par + ">\n<｜DSML｜" + par +
        " name=\"days\" string=\"false\">[1, {\"a\": null}]</｜DSML｜" + par + ">\n</｜DSML｜" +
        inv + ">\n<｜DSML｜" + inv + " name=\"noop\">\n</｜DSML｜" + inv + ">\n</｜DSML｜" + d +
        ">after";
    const ParsedOutput r = parse_output(text, ParserOptions());
    EXPECT_EQ(r.content, "Checking.");
    ASSERT_EQ(r.tool_calls.size(), 2u) << d;
    EXPECT_EQ(r.tool_calls[0].name, "get_weather");
    const auto args = nlohmann::json::parse(r.tool_calls[0].arguments);
    EXPECT_EQ(args["city"], "Pa\"ris\n");
    EXPECT_EQ(args["days"], nlohmann::json::parse("[1, {\"a\": null}]"));
    EXPECT_EQ(r.tool_calls[1].name, "noop");
    EXPECT_EQ(r.tool_calls[1].arguments, "{}");
    EXPECT_TRUE(r.ended);  // text after the block is ignored
  }
}

TEST(OutputParser, ToolCallsCanBeDisabled) {
  ParserOptions o;
  o.parse_tool_calls = false;
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">";
  const ParsedOutput r = parse_output(text, o);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(OutputParser, RequiredToolChoiceStartsInBlock) {
  ParserOptions o;
  o.starts_in_tool_calls = true;
  const ParsedOutput r = parse_output(
      "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"n\" string=\"false\">3</｜DSML｜"
      "parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
      o);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"n\": 3}");
}

TEST(OutputParser, IncompleteToolNameIsDropped) {
  const ParsedOutput r =
      parse_output("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n"
                   "<｜DSML｜invoke name=\"trunc",
                   ParserOptions());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "f");
}

TEST(OutputParser, EventsConcatenateToResult) {
  const std::string text =
      "\nthink</think>hi <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter "
      "name=\"a\" string=\"true\">x</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  OutputParser parser(thinking());
  std::string reasoning, content, name, args;
  auto take = [&](const std::vector<OutputEvent>& events) {
    for (const OutputEvent& e : events) {
      switch (e.kind) {
        case OutputEvent::Kind::kReasoning: reasoning += e.text; break;
        case OutputEvent::Kind::kContent: content += e.text; break;
        case OutputEvent::Kind::kToolName: name += e.text; break;
        case OutputEvent::Kind::kToolArguments: args += e.text; break;
        default: break;
      }
    }
  };
  for (char c : text) take(parser.feed(std::string_view(&c, 1)));
  take(parser.finish());
  EXPECT_EQ(reasoning, parser.result().reasoning_content);
  EXPECT_EQ(content, parser.result().content);
  ASSERT_EQ(parser.result().tool_calls.size(), 1u);
  EXPECT_EQ(name, parser.result().tool_calls[0].name);
  EXPECT_EQ(args, parser.result().tool_calls[0].arguments);
  EXPECT_EQ(args, "{\"a\": \"x\"}");
}

// Random texts built from marker fragments: the result never depends on how the text is
// split, and arbitrary bytes (invalid UTF-8 included) never throw.
TEST(OutputParser, SplitInvariantOnRandomTexts) {
  const std::vector<std::string> pieces = {
      "\n", "\n\n", "</think>", "</thi", "<｜DSML｜", "</｜DSML｜", "tool_calls>", " calls>",
      "invoke name=\"", "parameter name=\"", "\" string=\"", "true\">", "false\">", "\"", ">",
      "STOP", "ST", "hello ", "世界", "😀", "{", "[", "```json\n", "```\n", "\n```", "\xff",
      "\xe4\xb8", " ", "x"};
  std::mt19937 rng(7);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 30)(rng);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    ParserOptions o;
    o.start = static_cast<ParseStart>(rng() % 4);
    o.parse_tool_calls = rng() % 8 != 0;
    o.starts_in_tool_calls = rng() % 16 == 0;
    o.parse_json_output = rng() % 4 == 0;
    if (rng() % 2) o.stop_sequences = {"STOP"};
    if (rng() % 4 == 0) o.stop_sequences.push_back("\n\n");
    const ParsedOutput whole = parse_split(text, o, {text.size() + 1});
    expect_same(whole, parse_split(text, o, {1}), "bytewise: " + text);
    expect_same(whole, parse_split(text, o, {3, 1, 7, 2}), "chunks: " + text);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace deepinfer::recipe
