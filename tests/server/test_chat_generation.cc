// ChatGeneration / CompletionGeneration fed scripted engine outputs (real tokenizer, text
// tokenized and replayed one token per output): the non-streaming message and the
// accumulation of streamed deltas (as OpenAI clients accumulate them) agree; DSML tool calls
// become tool_calls without markup leaking into content; reasoning goes to reasoning_content;
// usage adds up. The output parser itself is checked against deepseek-recipe in
// tests/python/test_recipe_vs_deepseek.py; here the OpenAI mapping is under test.
#include <gtest/gtest.h>

#include "recipe/tokenizer.h"
#include "server/chat_generation.h"
#include "server/completion_generation.h"

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

Json chat_body(bool stream, bool thinking) {
  Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
               {"max_tokens", 200},
               {"stream", stream},
               {"tools", Json::array({{{"type", "function"},
                                       {"function", {{"name", "get_weather"},
                                                     {"parameters", {{"type", "object"}}}}}}})}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  if (thinking) body["chat_template_kwargs"] = {{"thinking", true}};
  return body;
}

// Replays `text` as engine outputs of every choice, one token each, then EOS.
struct Replay {
  std::vector<std::string> events;
  std::vector<std::string> aborts;
};
Replay replay(Generation& gen, const std::vector<EngineRequest>& requests, const std::string& text,
              bool eos = true) {
  Replay r;
  const std::vector<int32_t> ids = tokenizer().encode(text, /*add_special_tokens=*/false);
  for (const EngineRequest& req : requests) {
    for (size_t k = 0; k <= ids.size(); ++k) {
      RequestOutput out;
      out.id = req.id;
      if (k < ids.size()) {
        out.new_tokens = {ids[k]};
      } else {
        if (eos) out.new_tokens = {1};
        out.finished = true;
        out.finish_reason = eos ? "stop" : "length";
      }
      gen.on_output(out, "", r.events, r.aborts);
      if (gen.done()) break;
    }
  }
  return r;
}

// Accumulates streamed chat deltas into messages, as the OpenAI client's helpers do.
struct Accumulated {
  std::string content, reasoning, finish_reason;
  std::vector<std::pair<std::string, std::string>> tools;  // name, arguments
  std::vector<std::string> tool_ids;
  Json usage;
};
std::vector<Accumulated> accumulate(const std::vector<std::string>& events, size_t n) {
  std::vector<Accumulated> acc(n);
  for (const std::string& e : events) {
    const Json chunk = Json::parse(e);
    if (chunk.contains("usage") && !chunk["usage"].is_null()) acc[0].usage = chunk["usage"];
    for (const Json& c : chunk["choices"]) {
      Accumulated& a = acc[c["index"].get<size_t>()];
      const Json& d = c["delta"];
      if (d.contains("content")) a.content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) a.reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const Json& t : d["tool_calls"]) {
          const size_t k = t["index"].get<size_t>();
          if (a.tools.size() <= k) {
            a.tools.resize(k + 1);
            a.tool_ids.resize(k + 1);
          }
          if (t.contains("id")) a.tool_ids[k] = t["id"].get<std::string>();
          if (t.contains("function") && t["function"].contains("name")) {
            a.tools[k].first += t["function"]["name"].get<std::string>();
          }
          if (t.contains("function") && t["function"].contains("arguments")) {
            a.tools[k].second += t["function"]["arguments"].get<std::string>();
          }
        }
      }
      if (!c["finish_reason"].is_null()) {
        EXPECT_TRUE(a.finish_reason.empty()) << "two finish reasons for one choice";
        a.finish_reason = c["finish_reason"].get<std::string>();
      }
    }
  }
  return acc;
}

const std::string kToolOutput =
    "Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter "
    "name=\"city\" string=\"true\">Pa\"ris 東京</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" "
    "string=\"false\">[1, 2]</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"noop\">\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

TEST(ChatGeneration, ToolCallsNonStreaming) {
  const RequestLimits limits;
  ChatGeneration gen(parse_chat_request(chat_body(false, false), limits), model_info());
  const auto requests = gen.take_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].skip_special_tokens);
  Replay r = replay(gen, requests, kToolOutput + "ignored after the block");
  ASSERT_TRUE(gen.done());
  EXPECT_TRUE(r.events.empty());
  // The closed tool-call block ended the choice: its engine request is to be aborted.
  EXPECT_EQ(r.aborts, std::vector<std::string>{requests[0].id});
  const Json body = Json::parse(gen.response_body());
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const Json& msg = choice["message"];
  EXPECT_EQ(msg["content"], "Checking.");
  ASSERT_EQ(msg["tool_calls"].size(), 2u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Pa\"ris 東京", "days": [1, 2]})"));
  EXPECT_EQ(msg["tool_calls"][1]["function"]["name"], "noop");
  EXPECT_EQ(Json::parse(msg["tool_calls"][1]["function"]["arguments"].get<std::string>()), Json::object());
  EXPECT_NE(msg["tool_calls"][0]["id"], msg["tool_calls"][1]["id"]);
  EXPECT_EQ(body["usage"]["completion_tokens"], gen.n_completion_tokens());
}

TEST(ChatGeneration, StreamedToolCallsMatchNonStreaming) {
  const RequestLimits limits;
  for (bool thinking : {false, true}) {
    const std::string text = (thinking ? std::string("Let me think.\nStill thinking.</think>") : "") + kToolOutput;
    ChatGeneration whole(parse_chat_request(chat_body(false, thinking), limits), model_info());
    replay(whole, whole.take_requests(), text);
    const Json msg = Json::parse(whole.response_body())["choices"][0]["message"];

    ChatGeneration gen(parse_chat_request(chat_body(true, thinking), limits), model_info());
    Replay r = replay(gen, gen.take_requests(), text);
    ASSERT_TRUE(gen.done());
    for (const std::string& e : gen.final_events()) r.events.push_back(e);
    for (const std::string& e : r.events) EXPECT_EQ(e.find("DSML"), std::string::npos) << e;
    const std::vector<Accumulated> acc = accumulate(r.events, 1);
    EXPECT_EQ(acc[0].content, msg["content"].get<std::string>());
    EXPECT_EQ(acc[0].reasoning, thinking ? msg["reasoning_content"].get<std::string>() : "");
    if (thinking) {
      EXPECT_EQ(acc[0].reasoning, "Let me think.\nStill thinking.");
    }
    ASSERT_EQ(acc[0].tools.size(), msg["tool_calls"].size());
    for (size_t k = 0; k < acc[0].tools.size(); ++k) {
      EXPECT_EQ(acc[0].tools[k].first, msg["tool_calls"][k]["function"]["name"].get<std::string>());
      EXPECT_EQ(Json::parse(acc[0].tools[k].second),
                Json::parse(msg["tool_calls"][k]["function"]["arguments"].get<std::string>()));
      EXPECT_EQ(acc[0].tool_ids[k].rfind("call_", 0), 0u);
    }
    EXPECT_EQ(acc[0].finish_reason, "tool_calls");
    ASSERT_TRUE(acc[0].usage.is_object());
    EXPECT_EQ(acc[0].usage["completion_tokens"], gen.n_completion_tokens());
    const int64_t reasoning = acc[0].usage["completion_tokens_details"]["reasoning_tokens"];
    if (thinking) {
      EXPECT_GT(reasoning, 0);
      EXPECT_LT(reasoning, gen.n_completion_tokens());
    } else {
      EXPECT_EQ(reasoning, 0);
    }
  }
}

TEST(ChatGeneration, RequiredToolChoiceStartsInsideTheBlock) {
  const RequestLimits limits;
  Json body = chat_body(false, false);
  body["tool_choice"] = "required";
  ChatGeneration gen(parse_chat_request(body, limits), model_info());
  // The prompt opened the block, so the output starts with an invoke.
  replay(gen, gen.take_requests(),
         "<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Oslo"
         "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  const Json msg = Json::parse(gen.response_body())["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(Json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Oslo"})"));
  EXPECT_TRUE(msg["content"].is_null());
}

TEST(ChatGeneration, NamedToolChoiceKeepsOnlyThatTool) {
  const RequestLimits limits;
  Json body = chat_body(false, false);
  body["tools"].push_back({{"type", "function"}, {"function", {{"name", "other"}}}});
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "other"}}}};
  const ChatRequest req = parse_chat_request(body, limits);
  ASSERT_EQ(req.conversation.tools.size(), 1u);
  EXPECT_EQ(req.conversation.tools[0].name, "other");
  EXPECT_TRUE(req.parser.starts_in_tool_calls);
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "missing"}}}};
  EXPECT_THROW(parse_chat_request(body, limits), ApiError);
  // Thinking turns cannot be forced into a tool call (deepseek-recipe refuses it too).
  body["tool_choice"] = "required";
  body["thinking"] = {{"type", "enabled"}};
  EXPECT_THROW(parse_chat_request(body, limits), ApiError);
  body["thinking"] = {{"type", "disabled"}};
  EXPECT_NO_THROW(parse_chat_request(body, limits));
  body.erase("thinking");
  EXPECT_THROW(parse_chat_request(body, limits, recipe::ChatVersion::kV4, /*default_thinking=*/true), ApiError);
}

TEST(ChatGeneration, StopSequenceEndsChoicesAndNStreams) {
  const RequestLimits limits;
  Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "x"}}})},
               {"max_tokens", 50}, {"n", 2}, {"stop", "END"}, {"stream", true}};
  ChatGeneration gen(parse_chat_request(body, limits), model_info());
  const auto requests = gen.take_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_NE(requests[0].params.seed, requests[1].params.seed);
  Replay r = replay(gen, requests, "alpha beta ENDgamma");
  ASSERT_TRUE(gen.done());
  EXPECT_EQ(r.aborts.size(), 2u);
  const std::vector<Accumulated> acc = accumulate(r.events, 2);
  for (const Accumulated& a : acc) {
    EXPECT_EQ(a.content, "alpha beta ");
    EXPECT_EQ(a.finish_reason, "stop");
  }
}

TEST(CompletionGeneration, StopAcrossTokensAndLogprobShapes) {
  const RequestLimits limits;
  for (bool stream : {false, true}) {
    Json body = {{"prompt", "Hello"}, {"max_tokens", 50}, {"stop", Json::array({"xyz", "lo wor"})},
                 {"stream", stream}};
    CompletionGeneration gen(parse_completion_request(body, tokenizer(), limits), model_info());
    const auto requests = gen.take_requests();
    EXPECT_EQ(requests[0].prompt, tokenizer().encode("Hello", true));
    EXPECT_EQ(requests[0].stop, (std::vector<std::string>{"xyz", "lo wor"}));
    Replay r = replay(gen, requests, "say hello world again");
    ASSERT_TRUE(gen.done());
    if (stream) {
      std::string text, reason;
      for (const std::string& e : r.events) {
        const Json c = Json::parse(e)["choices"][0];
        text += c["text"].get<std::string>();
        if (!c["finish_reason"].is_null()) reason = c["finish_reason"];
      }
      EXPECT_EQ(text, "say hel");
      EXPECT_EQ(reason, "stop");
    } else {
      const Json c = Json::parse(gen.response_body())["choices"][0];
      EXPECT_EQ(c["text"], "say hel");
      EXPECT_EQ(c["finish_reason"], "stop");
    }
  }
}

TEST(CompletionGeneration, EngineErrorFailsTheRequest) {
  const RequestLimits limits;
  Json body = {{"prompt", "Hello"}, {"max_tokens", 5}, {"n", 2}};
  CompletionGeneration gen(parse_completion_request(body, tokenizer(), limits), model_info());
  const auto requests = gen.take_requests();
  std::vector<std::string> events, aborts;
  RequestOutput out;
  out.id = requests[0].id;
  out.finished = true;
  out.finish_reason = "error";
  gen.on_output(out, "boom", events, aborts);
  EXPECT_TRUE(gen.done());
  ASSERT_TRUE(gen.error().has_value());
  EXPECT_EQ(gen.error()->status, 500);
  EXPECT_EQ(aborts, std::vector<std::string>{requests[1].id});
}

TEST(OpenAIRequest, Validation) {
  const RequestLimits limits;
  EXPECT_THROW(parse_body("{\"a\": ", limits), ApiError);
  EXPECT_THROW(parse_body("[1]", limits), ApiError);
  EXPECT_THROW(parse_body(std::string(100, '[') + std::string(100, ']'), limits), ApiError);
  EXPECT_NO_THROW(parse_body("{\"a\": [[[1]]]}", limits));
  try {
    check_model(Json{{"model", "other"}}, "m");
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    const Json err = Json::parse(e.body())["error"];
    EXPECT_EQ(err["code"], "model_not_found");
    EXPECT_EQ(err["param"], "model");
  }
  auto bad = [&](Json body, const std::string& param) {
    try {
      parse_sampling(body, true, limits);
      ADD_FAILURE() << "accepted " << body.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, param) << body.dump();
    }
  };
  bad({{"temperature", -1}}, "temperature");
  bad({{"temperature", "hot"}}, "temperature");
  bad({{"top_p", 0}}, "top_p");
  bad({{"n", 0}}, "n");
  bad({{"n", 1000}}, "n");
  bad({{"max_tokens", 0}}, "max_tokens");
  bad({{"stop", 3}}, "stop");
  bad({{"top_logprobs", 2}}, "top_logprobs");
  bad({{"stream_options", {{"include_usage", true}}}}, "stream_options");
  bad({{"logit_bias", {{"x1", 5}}}}, "logit_bias");
  bad({{"logit_bias", {{"-3", 5}}}}, "logit_bias");
  bad({{"logit_bias", {{"7", 100.5}}}}, "logit_bias");
  bad({{"logit_bias", {{"7", "5"}}}}, "logit_bias");
  bad({{"logit_bias", Json::array({1, 2})}}, "logit_bias");
  const SamplingRequest biased = parse_sampling({{"logit_bias", {{"7", -100}, {"12", 2.5}}}}, true, limits);
  using Bias = std::vector<std::pair<int32_t, float>>;
  EXPECT_EQ(biased.params.logit_bias, (Bias{{7, -100.0f}, {12, 2.5f}}));
  EXPECT_NO_THROW(check_token_ids(biased, 13));
  EXPECT_THROW(check_token_ids(biased, 12), ApiError);
  const SamplingRequest s = parse_sampling(
      {{"max_completion_tokens", 7}, {"seed", 5}, {"logprobs", true}, {"top_logprobs", 3},
       {"stop", Json::array({"a", ""})}, {"top_k", -1}},
      true, limits);
  EXPECT_EQ(*s.max_tokens, 7);
  EXPECT_EQ(*s.seed, 5u);
  EXPECT_EQ(s.n_logprobs, 3);
  EXPECT_EQ(s.stop, std::vector<std::string>{"a"});
  EXPECT_EQ(s.params.top_k, 0);
  EXPECT_EQ(resolve_max_tokens(s, 10, 100, 1000), 7);
  EXPECT_THROW(resolve_max_tokens(s, 95, 100, 1000), ApiError);
  SamplingRequest none;
  EXPECT_EQ(resolve_max_tokens(none, 10, 100, 1000), 90);
  EXPECT_EQ(resolve_max_tokens(none, 10, 100, 16), 16);
}

}  // namespace
}  // namespace deepinfer::server
