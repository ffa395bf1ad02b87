// Request fields of issue 12 (items 5, 8) at the parsing layer: each refusal names its field,
// no-op values of unimplemented fields pass, guided_choice's regex matches exactly its
// strings (std::regex, ECMAScript, is the independent reader), structured_outputs and
// guided_* map onto the constraint kinds, continue_final_message makes a prefix message,
// special tokens make no chat text unless asked for, echo prefixes completions.
#include <gtest/gtest.h>

#include <regex>

#include "recipe/tokenizer.h"
#include "server/chat_generation.h"
#include "server/completion_generation.h"
#include "server/openai_request.h"
#include "server/structured_output.h"

namespace deepinfer::server {
namespace {

const recipe::Tokenizer& tokenizer() {
  static const recipe::Tokenizer t = recipe::Tokenizer::from_file("models/tiny/tokenizer.json");
  return t;
}

ModelInfo model_info() {
  ModelInfo m;
  m.tokenizer = &tokenizer();
  m.name = "m";
  m.max_model_len = 4096;
  m.eos_ids = {1};
  return m;
}

Json chat(Json extra) {
  Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 4}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

std::string refused_param(const Json& body, bool is_chat = true) {
  try {
    if (is_chat) {
      parse_chat_request(body, RequestLimits{});
    } else {
      parse_completion_request(body, tokenizer(), RequestLimits{});
    }
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "<accepted>";
}

TEST(RequestFields, RefusalsNameTheField) {
  EXPECT_EQ(refused_param(chat({{"stop_token_ids", {4294967297ull}}})), "stop_token_ids");
  EXPECT_EQ(refused_param(chat({{"stop_token_ids", {-1}}})), "stop_token_ids");
  EXPECT_EQ(refused_param(chat({{"user", 5}})), "user");
  EXPECT_EQ(refused_param(chat({{"parallel_tool_calls", "yes"}})), "parallel_tool_calls");
  EXPECT_EQ(refused_param(chat({{"tools", {{{"type", "code_interpreter"}}}}})), "tools");
  EXPECT_EQ(refused_param(chat({{"tools", {{{"type", "function"}, {"function", {{"name", 3}}}}}}})), "tools");
  EXPECT_EQ(refused_param(chat({{"messages", {{{"role", "user"}}}}})), "messages");
  EXPECT_EQ(refused_param(chat({{"prompt_logprobs", 0}})), "prompt_logprobs");
  EXPECT_EQ(refused_param(chat({{"stream", true}, {"stream_options", {{"x", 1}}}})), "stream_options.x");
  EXPECT_EQ(refused_param(chat({{"structured_outputs", {{"structural_tag", "t"}}}})),
            "structured_outputs.structural_tag");
  EXPECT_EQ(refused_param(chat({{"guided_choice", {"a"}}, {"guided_regex", "b"}})), "guided_choice");
  EXPECT_EQ(refused_param(chat({{"continue_final_message", true}})), "continue_final_message");
  EXPECT_EQ(refused_param({{"prompt", "x"}, {"echo", true}, {"logprobs", 2}}, false), "echo");
  EXPECT_EQ(refused_param({{"prompt", "x"}, {"suffix", "y"}}, false), "suffix");
}

TEST(RequestFields, NoOpValuesOfUnimplementedFieldsPass) {
  EXPECT_EQ(refused_param(chat({{"use_beam_search", false},
                                {"length_penalty", 1.0},
                                {"bad_words", Json::array()},
                                {"prompt_logprobs", nullptr},
                                {"include_stop_str_in_output", false},
                                {"modalities", {"text"}},
                                {"user", "u"},
                                {"parallel_tool_calls", false},
                                {"structured_outputs", {{"json_object", false}, {"disable_fallback", false}}}})),
            "<accepted>");
  EXPECT_EQ(refused_param(chat({{"length_penalty", 0.5}})), "length_penalty");
  EXPECT_EQ(refused_param(chat({{"modalities", {"text", "audio"}}})), "modalities");
}

TEST(StructuredOutput, ChoiceRegexMatchesExactlyTheChoices) {
  const std::vector<std::string> choices = {"a.b", "(x)|y", "[z]*", "back\\slash", "tab\there", "", "\xC3\xBC+?"};
  const std::regex re(choice_regex(choices), std::regex::ECMAScript);
  for (const std::string& c : choices) EXPECT_TRUE(std::regex_match(c, re)) << c;
  for (const std::string& other : {"aXb", "x", "y", "(x)", "[z]", "zz", "backslash", "\xC3\xBC\xC3\xBC"}) {
    EXPECT_FALSE(std::regex_match(std::string(other), re)) << other;
  }
  SamplingRequest s;
  parse_constraint({{"guided_choice", choices}}, s);  // and our regex compiler takes it
  EXPECT_EQ(s.constraint_kind, "regex");
  EXPECT_EQ(s.constraint_param, "guided_choice");
}

TEST(StructuredOutput, SpellingsMapOntoConstraintKinds) {
  const Json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  struct Case {
    Json request;
    std::string kind, param;
  };
  const std::vector<Case> cases = {
      {{{"guided_json", schema}}, "json_schema", "guided_json"},
      {{{"guided_json", schema.dump()}}, "json_schema", "guided_json"},
      {{{"guided_regex", "a+"}}, "regex", "guided_regex"},
      {{{"guided_grammar", "root ::= \"a\""}}, "ebnf", "guided_grammar"},
      {{{"structured_outputs", {{"json", schema}}}}, "json_schema", "structured_outputs.json"},
      {{{"structured_outputs", {{"regex", "a+"}}}}, "regex", "structured_outputs.regex"},
      {{{"structured_outputs", {{"grammar", "root ::= \"a\""}}}}, "ebnf", "structured_outputs.grammar"},
      {{{"structured_outputs", {{"choice", {"p", "q"}}}}}, "regex", "structured_outputs.choice"},
      {{{"structured_outputs", {{"json_object", true}}}}, "json_object", "structured_outputs.json_object"},
      {{{"response_format", {{"type", "regex"}, {"regex", "a"}}}}, "regex", "response_format"},
  };
  for (const Case& c : cases) {
    SamplingRequest s;
    parse_constraint(c.request, s);
    EXPECT_EQ(s.constraint_kind, c.kind) << c.request.dump();
    EXPECT_EQ(s.constraint_param, c.param) << c.request.dump();
  }
  SamplingRequest s;
  parse_constraint({{"guided_json", schema}}, s);
  EXPECT_EQ(Json::parse(s.constraint), schema);
}

TEST(ChatRequestFields, ContinueFinalMessageMakesAPrefixMessage) {
  Json body = chat({{"continue_final_message", true}, {"add_generation_prompt", false}});
  body["messages"].push_back({{"role", "assistant"}, {"content", "The answer is"}});
  const ChatRequest r = parse_chat_request(body, RequestLimits{});
  ASSERT_EQ(r.conversation.messages.size(), 2u);
  EXPECT_TRUE(r.conversation.messages.back().prefix);
  body.erase("continue_final_message");
  body.erase("add_generation_prompt");
  EXPECT_FALSE(parse_chat_request(body, RequestLimits{}).conversation.messages.back().prefix);
}

// A chat choice fed `ids` one per output; returns the non-streaming content.
std::string chat_content(const Json& body, const std::vector<int32_t>& ids) {
  ChatGeneration gen(parse_chat_request(body, RequestLimits{}), model_info());
  const std::string id = gen.take_requests().at(0).id;
  std::vector<std::string> events, aborts;
  for (size_t k = 0; k < ids.size(); ++k) {
    RequestOutput out;
    out.id = id;
    out.new_tokens = {ids[k]};
    out.finished = k + 1 == ids.size();
    if (out.finished) out.finish_reason = "length";
    gen.on_output(out, "", events, aborts);
  }
  return Json::parse(gen.response_body())["choices"][0]["message"]["content"].get<std::string>();
}

TEST(ChatRequestFields, SpecialTokensMakeNoTextUnlessAskedFor) {
  std::vector<int32_t> ids = tokenizer().encode("Hi", false);
  ids.insert(ids.begin() + 1, 2);  // <｜▁pad▁｜>, special
  ids.push_back(0);                // <｜begin▁of▁sentence｜>, special
  EXPECT_EQ(chat_content(chat({}), ids), "Hi");
  EXPECT_EQ(chat_content(chat({{"skip_special_tokens", false}}), ids),
            tokenizer().decode(std::vector<int32_t>(ids.begin(), ids.end()), false));
  // The parser's markers still work: "</think>" is not text in chat mode's answer either way.
  std::vector<int32_t> with_end = tokenizer().encode("</think>ok", false);
  EXPECT_EQ(chat_content(chat({}), with_end), "ok");
}

TEST(CompletionRequestFields, EchoPrefixesThePromptText) {
  const Json body = {{"prompt", "Hello"}, {"echo", true}, {"max_tokens", 2}};
  CompletionGeneration gen(parse_completion_request(body, tokenizer(), RequestLimits{}), model_info());
  const std::string id = gen.take_requests().at(0).id;
  std::vector<std::string> events, aborts;
  RequestOutput out;
  out.id = id;
  out.new_tokens = tokenizer().encode(" world", false);
  out.finished = true;
  out.finish_reason = "length";
  gen.on_output(out, "", events, aborts);
  EXPECT_EQ(Json::parse(gen.response_body())["choices"][0]["text"], "Hello world");
}

}  // namespace
}  // namespace deepinfer::server
