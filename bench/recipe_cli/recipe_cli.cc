// recipe_cli: the recipe layer's chat encoding and output parsing over JSON lines.
//
//   recipe_cli render [--tokenizer tokenizer.json]
//                       each input line: a conversation (chat_request.h) plus "version":
//                       "v4" | "v4.1"; output line: {"prompt": ..., "special_ranges":
//                       [[begin, end], ...] (bytes), "ids": [...] (with --tokenizer)} or
//                       {"error": ..., "kind": ...}
//   recipe_cli parse    each input line: {"text": ..., "options": {"parse_tool_calls",
//                       "starts_in_tool_calls", "parse_json_output", "start": "answer" |
//                       "reasoning_start" | "reasoning_continuation" | "content_continuation",
//                       "stop_sequences": [...]}, "finish": "stop" | "length" | "content_filter"};
//                       output line: {"whole": R, "bytewise": R, "finish_reason": ...}
//                       where R is the result of feeding the text at once / one byte at a time.
//   recipe_cli parser-options   each input line: a conversation (+ "stop_sequences"); output
//                       line: parser_options_for() of it.
#include <iostream>
#include <memory>
#include <string>

#include "base/error.h"
#include "recipe/chat_encoding.h"
#include "recipe/chat_request.h"
#include "recipe/output_parser.h"
#include "recipe/tokenizer.h"

namespace {

using deepinfer::recipe::OrderedJson;
namespace recipe = deepinfer::recipe;

std::string dump(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

OrderedJson render_line(const OrderedJson& req, const recipe::Tokenizer* tokenizer) {
  CHECK(req.is_object()) << "request must be a JSON object";
  std::string version = "v4.1";
  if (auto it = req.find("version"); it != req.end()) {
    CHECK(it->is_string()) << "version must be a string";
    version = it->get<std::string>();
  }
  const recipe::ChatVersion chat_version = recipe::parse_chat_version(version);
  // "openai": true reads the request the way deepseek-recipe's Chat Completions conversion does.
  const recipe::ChatRequestOptions options =
      req.value("openai", false)
          ? recipe::chat_completions_request_options(chat_version == recipe::ChatVersion::kV41)
          : recipe::ChatRequestOptions();
  const recipe::Conversation conv = recipe::conversation_from_json(req, options);
  const recipe::RenderedPrompt r = recipe::render_prompt(conv, chat_version);
  OrderedJson out;
  out["prompt"] = r.prompt;
  out["special_ranges"] = OrderedJson::array();
  for (const auto& [b, e] : r.special_ranges) out["special_ranges"].push_back({b, e});
  out["n_images"] = r.n_images;
  if (tokenizer != nullptr) out["ids"] = recipe::encode_prompt(r, *tokenizer);
  return out;
}

recipe::ParserOptions parser_options(const OrderedJson& j) {
  recipe::ParserOptions o;
  if (j.is_null()) return o;
  o.parse_tool_calls = j.value("parse_tool_calls", true);
  o.starts_in_tool_calls = j.value("starts_in_tool_calls", false);
  o.parse_json_output = j.value("parse_json_output", false);
  const std::string start = j.value("start", std::string("answer"));
  if (start == "answer") {
    o.start = recipe::ParseStart::kAnswer;
  } else if (start == "reasoning_start") {
    o.start = recipe::ParseStart::kReasoningStart;
  } else if (start == "reasoning_continuation") {
    o.start = recipe::ParseStart::kReasoningContinuation;
  } else if (start == "content_continuation") {
    o.start = recipe::ParseStart::kContentContinuation;
  } else {
    THROW(kInvalidInput) << "unknown parse start '" << start << "'";
  }
  if (j.contains("stop_sequences")) o.stop_sequences = j["stop_sequences"].get<std::vector<std::string>>();
  return o;
}

const char* start_name(recipe::ParseStart start) {
  switch (start) {
    case recipe::ParseStart::kAnswer: return "answer";
    case recipe::ParseStart::kReasoningStart: return "reasoning_start";
    case recipe::ParseStart::kReasoningContinuation: return "reasoning_continuation";
    case recipe::ParseStart::kContentContinuation: return "content_continuation";
  }
  return "?";
}

OrderedJson options_line(const OrderedJson& req) {
  const recipe::ParserOptions o = recipe::parser_options_for(
      recipe::conversation_from_json(req),
      req.value("stop_sequences", std::vector<std::string>()));
  return {{"parse_tool_calls", o.parse_tool_calls},
          {"starts_in_tool_calls", o.starts_in_tool_calls},
          {"parse_json_output", o.parse_json_output},
          {"start", start_name(o.start)},
          {"stop_sequences", o.stop_sequences}};
}

OrderedJson result_json(const recipe::ParsedOutput& r) {
  OrderedJson out;
  out["reasoning_content"] = r.reasoning_content;
  out["content"] = r.content;
  out["tool_calls"] = OrderedJson::array();
  for (const auto& call : r.tool_calls) {
    out["tool_calls"].push_back({{"name", call.name}, {"arguments", call.arguments}});
  }
  out["stop_sequence_hit"] = r.stop_sequence_hit;
  out["ended"] = r.ended;
  return out;
}

OrderedJson parse_line(const OrderedJson& req) {
  const std::string text = req.at("text").get<std::string>();
  const recipe::ParserOptions options = parser_options(req.value("options", OrderedJson()));
  OrderedJson out;
  out["whole"] = result_json(recipe::parse_output(text, options));
  recipe::OutputParser bytewise(options);
  std::string streamed_content;
  for (char c : text) {
    for (const auto& ev : bytewise.feed(std::string_view(&c, 1))) {
      if (ev.kind == recipe::OutputEvent::Kind::kContent) streamed_content += ev.text;
    }
  }
  for (const auto& ev : bytewise.finish()) {
    if (ev.kind == recipe::OutputEvent::Kind::kContent) streamed_content += ev.text;
  }
  out["bytewise"] = result_json(bytewise.result());
  const std::string finish = req.value("finish", std::string("stop"));
  const recipe::BackendFinish backend = finish == "length"           ? recipe::BackendFinish::kLength
                                        : finish == "content_filter" ? recipe::BackendFinish::kContentFilter
                                                                     : recipe::BackendFinish::kStop;
  out["finish_reason"] = recipe::finish_reason(bytewise.result(), backend);
  out["bytewise_events_content"] = streamed_content;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "render" && mode != "parse" && mode != "parser-options") {
    std::cerr << "usage: recipe_cli render|parse|parser-options < requests.jsonl > results.jsonl\n";
    return 2;
  }
  std::unique_ptr<recipe::Tokenizer> tokenizer;
  if (argc > 3 && std::string(argv[2]) == "--tokenizer") {
    try {
      tokenizer = std::make_unique<recipe::Tokenizer>(recipe::Tokenizer::from_file(argv[3]));
    } catch (const std::exception& e) {
      std::cerr << "recipe_cli: " << e.what() << "\n";
      return 1;
    }
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    OrderedJson out;
    try {
      const OrderedJson req = OrderedJson::parse(line);
      if (mode == "render") {
        out = render_line(req, tokenizer.get());
      } else if (mode == "parse") {
        out = parse_line(req);
      } else {
        out = options_line(req);
      }
    } catch (const deepinfer::Error& e) {
      out = {{"error", e.what()}, {"kind", deepinfer::error_kind_name(e.kind())}};
    } catch (const std::exception& e) {
      out = {{"error", e.what()}, {"kind", "exception"}};
    }
    std::cout << dump(out) << '\n';
  }
  return 0;
}
