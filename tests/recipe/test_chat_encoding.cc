// Unit tests of the V4/V4.1 chat encoders: bad input, options deepseek-recipe 0.2.0 does not
// expose (numeric V4.1 effort, the April V4 effort variant, drop_thinking=false), the JSON
// spelling, special ranges and token ids. Byte parity with deepseek-recipe on generated
// conversations is tests/python/test_recipe_vs_deepseek.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "base/error.h"
#include "recipe/chat_encoding.h"
#include "recipe/chat_json.h"
#include "recipe/chat_request.h"
#include "recipe/encoding_v4.h"
#include "recipe/tokenizer.h"

namespace deepinfer::recipe {
namespace {

Conversation parse(const std::string& json) {
  return conversation_from_json(OrderedJson::parse(json));
}

std::string render(const std::string& json, ChatVersion version) {
  return render_prompt(parse(json), version).prompt;
}

// Runs `fn`, expects deepinfer::Error of `kind` whose message contains `needle`.
template <typename Fn>
void expect_error(Fn fn, ErrorKind kind, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ChatEncoding, RejectsBadInput) {
  const auto v4 = ChatVersion::kV4;
  expect_error([] { parse(R"({"messages": [{"role": "robot", "content": "x"}]})"); },
               ErrorKind::kInvalidInput, "robot");
  expect_error([] { parse(R"({"messages": [{"content": "x"}]})"); }, ErrorKind::kInvalidInput,
               "role");
  expect_error([] { parse(R"({"tools": [{"name": "f", "parameters": [1, 2]}]})"); },
               ErrorKind::kInvalidInput, "parameters");
  expect_error([] { parse(R"({"tools": [{"name": "f", "parameters": "object"}]})"); },
               ErrorKind::kInvalidInput, "'f'");
  expect_error([] { parse(R"({"tools": [{"description": "no name"}]})"); },
               ErrorKind::kInvalidInput, "name");
  expect_error([] { parse(R"({"reasoning_effort": "medium"})"); }, ErrorKind::kInvalidInput,
               "medium");
  expect_error([] { parse(R"({"reasoning_effort": 0})"); }, ErrorKind::kInvalidInput, "1-100");
  expect_error([] { parse(R"({"reasoning_effort": 101})"); }, ErrorKind::kInvalidInput, "1-100");
  expect_error([] { parse(R"({"reasoning_effort": "12x"})"); }, ErrorKind::kInvalidInput, "12x");
  expect_error([] { parse(R"({"tool_choice": "sometimes"})"); }, ErrorKind::kInvalidInput,
               "sometimes");
  expect_error(
      [] {
        parse(R"({"messages": [{"role": "assistant", "content": "",
                  "tool_calls": [{"id": "1", "function": {"arguments": "{}"}}]}]})");
      },
      ErrorKind::kInvalidInput, "name");
  expect_error([] { parse(R"({"messages": [{"role": "user", "content": 5}]})"); },
               ErrorKind::kInvalidInput, "content");
  expect_error([&] { render(R"({"reasoning_effort": 50, "messages": []})", v4); },
               ErrorKind::kInvalidInput, "V4");
  expect_error(
      [&] {
        render(R"({"messages": [{"role": "user", "content": "x", "reasoning_content": "r"}]})",
               v4);
      },
      ErrorKind::kInvalidInput, "reasoning_content");
  expect_error(
      [&] {
        render(R"({"messages": [{"role": "user", "content": "x", "prefix": true}]})", v4);
      },
      ErrorKind::kInvalidInput, "prefix");
  // Malformed tool-call arguments are not an error: deepseek-recipe renders them as one
  // string parameter named "arguments".
  const std::string p = render(R"({"thinking_mode": false, "messages": [
      {"role": "user", "content": "q"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "name": "f",
       "arguments": "{not json"}]}]})",
                               v4);
  EXPECT_NE(p.find("name=\"arguments\" string=\"true\">{not json<"), std::string::npos) << p;
}

TEST(ChatEncoding, V41NumericReasoningEffort) {
  const std::string conv = R"({"messages": [{"role": "user", "content": "Hi"}],
                               "reasoning_effort": EFFORT})";
  for (const auto& [effort, value] : std::vector<std::pair<std::string, std::string>>{
           {"42", "42"}, {"\"42\"", "42"}, {"1", "1"}, {"100", "100"}, {"\"low\"", "50"},
           {"\"high\"", "75"}, {"\"xhigh\"", "75"}, {"\"max\"", "100"}, {"null", "75"}}) {
    std::string json = conv;
    json.replace(json.find("EFFORT"), 6, effort);
    EXPECT_EQ(render(json, ChatVersion::kV41),
              "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: " + value +
                  " (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
                  "<｜User｜>Hi<｜Assistant｜><think>")
        << effort;
  }
  // "none" turns thinking off.
  EXPECT_EQ(render(R"({"messages": [{"role": "user", "content": "Hi"}],
                      "reasoning_effort": "none"})",
                   ChatVersion::kV41),
            "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>");
}

TEST(ChatEncoding, V4EffortStyles) {
  using Tier = ReasoningEffort::Tier;
  const std::string high = v4_effort_paragraph({Tier::kHigh, 0}, V4EffortStyle::k0731);
  const std::string max = v4_effort_paragraph({Tier::kMax, 0}, V4EffortStyle::k0731);
  EXPECT_EQ(high.rfind("Reasoning Effort: Absolute maximum", 0), 0u);
  EXPECT_EQ(max.rfind("Reasoning Effort: Beyond maximum", 0), 0u);
  EXPECT_EQ(v4_effort_paragraph({Tier::kUnset, 0}, V4EffortStyle::k0731), high);
  EXPECT_EQ(v4_effort_paragraph({Tier::kLow, 0}, V4EffortStyle::k0731), "");
  // April release: only max adds a paragraph, the "Absolute maximum" one.
  EXPECT_EQ(v4_effort_paragraph({Tier::kMax, 0}, V4EffortStyle::kApril), high);
  EXPECT_EQ(v4_effort_paragraph({Tier::kHigh, 0}, V4EffortStyle::kApril), "");
  EXPECT_EQ(v4_effort_paragraph({Tier::kUnset, 0}, V4EffortStyle::kApril), "");

  const std::string april = render(R"({"v4_effort_style": "april", "reasoning_effort": "max",
      "messages": [{"role": "user", "content": "Hi"}]})",
                                   ChatVersion::kV4);
  EXPECT_EQ(april, "<｜begin▁of▁sentence｜>" + high + "<｜User｜>Hi<｜Assistant｜><think>");
}

TEST(ChatEncoding, DropThinkingFalseKeepsHistoryReasoning) {
  const std::string conv = R"({"drop_thinking": DROP, "messages": [
      {"role": "user", "content": "a"},
      {"role": "assistant", "content": "x", "reasoning_content": "R1"},
      {"role": "user", "content": "b"}]})";
  for (ChatVersion version : {ChatVersion::kV4, ChatVersion::kV41}) {
    std::string keep = conv, drop = conv;
    keep.replace(keep.find("DROP"), 4, "false");
    drop.replace(drop.find("DROP"), 4, "true");
    EXPECT_NE(render(keep, version).find("<｜Assistant｜><think>R1</think>x"), std::string::npos);
    EXPECT_EQ(render(drop, version).find("R1"), std::string::npos);
  }
}

TEST(ChatEncoding, SpecialRangesHoldOnlySpecialSpellings) {
  const Conversation conv = parse(R"({"messages": [
      {"role": "system", "content": "sys <｜User｜> <｜image｜>", "n_images": 1},
      {"role": "user", "content": "<think> typed by a user"},
      {"role": "assistant", "content": "ok", "tool_calls": [{"id": "1", "name": "f",
       "arguments": "{\"a\": 1}"}]},
      {"role": "tool", "content": "r", "tool_call_id": "1"}],
      "tools": [{"name": "f", "parameters": {"type": "object"}}]})");
  const SpecialTokens t;
  for (ChatVersion version : {ChatVersion::kV4, ChatVersion::kV41}) {
    const RenderedPrompt r = render_prompt(conv, version);
    size_t prev_end = 0;
    int n_user_text_specials = 0;
    for (const auto& [b, e] : r.special_ranges) {
      ASSERT_LE(prev_end, b);
      ASSERT_LT(b, e);
      prev_end = e;
      const std::string s = r.prompt.substr(b, e - b);
      EXPECT_TRUE(s == t.bos || s == t.eos || s == t.thinking_start || s == t.thinking_end ||
                  s == t.system || s == t.user || s == t.assistant || s == t.dsml || s == t.image)
          << s;
      // The user's "<think>" and the system's "<｜User｜>" are plain text.
      if (s == t.user && b < r.prompt.find("<｜User｜><think> typed")) ++n_user_text_specials;
    }
    EXPECT_EQ(n_user_text_specials, 0);
    EXPECT_EQ(r.n_images, 1);
  }
}

TEST(ChatJson, PythonAndV4FloatSpelling) {
  // Python repr (V4.1) and deepseek-recipe's V4 spelling of the same doubles.
  struct Case {
    double value;
    const char* python;
    const char* v4;
  };
  for (const Case& c : std::vector<Case>{{1e-5, "1e-05", "0.00001"},
                                         {1e-7, "1e-07", "1e-7"},
                                         {0.0001, "0.0001", "0.0001"},
                                         {1e16, "1e+16", "1e+16"},
                                         {1e15, "1000000000000000.0", "1000000000000000.0"},
                                         {100000.0, "100000.0", "100000.0"},
                                         {1.5, "1.5", "1.5"},
                                         {-0.0, "-0.0", "-0.0"},
                                         {0.1, "0.1", "0.1"},
                                         {1.7976931348623157e308, "1.7976931348623157e+308",
                                          "1.7976931348623157e+308"},
                                         {5e-324, "5e-324", "5e-324"},
                                         {123456789.125, "123456789.125", "123456789.125"}}) {
    EXPECT_EQ(format_float(c.value, JsonFloatStyle::kPython), c.python);
    EXPECT_EQ(format_float(c.value, JsonFloatStyle::kV4), c.v4);
  }
  const OrderedJson j = OrderedJson::parse(
      R"({"z": 1, "a": [true, null, "q\"\\\n\t\u0001é"], "n": 18446744073709551615, "m": -3})");
  EXPECT_EQ(dump_json(j, JsonFloatStyle::kPython),
            "{\"z\": 1, \"a\": [true, null, \"q\\\"\\\\\\n\\t\\u0001é\"], "
            "\"n\": 18446744073709551615, \"m\": -3}");
  OrderedJson out;
  EXPECT_TRUE(parse_json_object(" {\"a\": 1} ", out));
  EXPECT_FALSE(parse_json_object("[1]", out));
  EXPECT_FALSE(parse_json_object("{\"a\": 1} x", out));
  EXPECT_FALSE(parse_json_object("{\"a\": 1e400}", out));
}

TEST(ChatEncoding, TokenIdsUseSpecialTokensOnlyForRanges) {
  const Tokenizer tok = Tokenizer::from_file("models/tiny/tokenizer.json");
  const Conversation conv = parse(R"({"thinking_mode": false, "messages": [
      {"role": "user", "content": "<｜User｜>"}]})");
  const std::vector<int32_t> ids = encode_conversation(conv, ChatVersion::kV4, tok);
  const int32_t user = *tok.token_to_id("<｜User｜>");
  // BOS, <｜User｜> (the role marker), the user's text as ordinary tokens, <｜Assistant｜>, </think>.
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids[0], *tok.token_to_id("<｜begin▁of▁sentence｜>"));
  EXPECT_EQ(ids[1], user);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), user), 1);
  EXPECT_EQ(ids[ids.size() - 2], *tok.token_to_id("<｜Assistant｜>"));
  EXPECT_EQ(ids.back(), *tok.token_to_id("</think>"));
  // The V4 tokenizer has no <｜System｜>: V4.1 prompts cannot be encoded with it.
  const Conversation with_system = parse(R"({"messages": [{"role": "system", "content": "s"}]})");
  expect_error([&] { encode_conversation(with_system, ChatVersion::kV41, tok); },
               ErrorKind::kInvalidInput, "<｜System｜>");
}

}  // namespace
}  // namespace deepinfer::recipe
