#include "recipe/chat_encoding.h"

#include "base/error.h"
#include "recipe/encoding_v4.h"
#include "recipe/encoding_v41.h"
#include "recipe/tokenizer.h"

namespace deepinfer::recipe {

RenderedPrompt render_prompt(const Conversation& conv, ChatVersion version,
                             const SpecialTokens& tokens) {
  return version == ChatVersion::kV4 ? render_prompt_v4(conv, tokens)
                                     : render_prompt_v41(conv, tokens);
}

ParserOptions parser_options_for(const Conversation& conv,
                                 std::vector<std::string> stop_sequences) {
  ParserOptions o;
  const bool has_tools = conv.tool_choice != ToolChoice::kNone && !conv.tools.empty();
  const bool thinking =
      conv.thinking_mode && conv.reasoning_effort.tier != ReasoningEffort::Tier::kNone;
  o.parse_tool_calls = has_tools;
  o.starts_in_tool_calls = has_tools && conv.tool_choice == ToolChoice::kRequired;
  o.parse_json_output = conv.response_format == ResponseFormat::kJsonObject;
  o.start = ParseStart::kAnswer;
  if (thinking) {
    o.start = ParseStart::kReasoningStart;
    if (!conv.messages.empty() && conv.messages.back().role == Role::kAssistant &&
        conv.messages.back().prefix) {
      const Message& m = conv.messages.back();
      if (!m.content.empty()) {
        o.start = ParseStart::kContentContinuation;
      } else if (m.reasoning_content && !m.reasoning_content->empty()) {
        o.start = ParseStart::kReasoningContinuation;
      }
    }
  }
  o.stop_sequences = std::move(stop_sequences);
  return o;
}

std::vector<int32_t> encode_prompt(const RenderedPrompt& prompt, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  const std::string_view text = prompt.prompt;
  size_t pos = 0;
  auto plain = [&](size_t end) {
    if (end <= pos) return;
    const std::vector<int32_t> part = tokenizer.encode_ordinary(text.substr(pos, end - pos));
    ids.insert(ids.end(), part.begin(), part.end());
  };
  for (const auto& [begin, end] : prompt.special_ranges) {
    ICHECK(begin >= pos && end <= text.size()) << "special ranges out of order";
    plain(begin);
    const std::string_view spelling = text.substr(begin, end - begin);
    const std::optional<int32_t> id = tokenizer.token_to_id(spelling);
    CHECK(id.has_value() && tokenizer.is_added(*id))
        << "special token \"" << spelling << "\" is not in the tokenizer's added vocabulary";
    ids.push_back(*id);
    pos = end;
  }
  plain(text.size());
  return ids;
}

std::vector<int32_t> encode_conversation(const Conversation& conv, ChatVersion version,
                                         const Tokenizer& tokenizer, const SpecialTokens& tokens) {
  return encode_prompt(render_prompt(conv, version, tokens), tokenizer);
}

}  // namespace deepinfer::recipe
