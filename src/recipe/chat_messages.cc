#include <cctype>
#include <charconv>

#include "base/error.h"
#include "recipe/chat_encoding.h"
#include "recipe/messages.h"

namespace deepinfer::recipe {

Role parse_role(std::string_view name) {
  if (name == "system") return Role::kSystem;
  if (name == "user") return Role::kUser;
  if (name == "assistant") return Role::kAssistant;
  if (name == "tool") return Role::kTool;
  if (name == "latest_reminder") return Role::kLatestReminder;
  THROW(kInvalidInput) << "unknown message role '" << name
                       << "' (expected system, user, assistant, tool or latest_reminder)";
}

const char* role_name(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
    case Role::kLatestReminder: return "latest_reminder";
  }
  return "?";
}

ToolChoice parse_tool_choice(std::string_view name) {
  if (name == "auto") return ToolChoice::kAuto;
  if (name == "none") return ToolChoice::kNone;
  if (name == "required") return ToolChoice::kRequired;
  THROW(kInvalidInput) << "unknown tool_choice '" << name << "' (expected auto, none or required)";
}

ReasoningEffort reasoning_effort_value(int value) {
  CHECK(value >= 1 && value <= 100) << "reasoning effort " << value << " is out of range 1-100";
  return ReasoningEffort{ReasoningEffort::Tier::kNumeric, value};
}

ReasoningEffort parse_reasoning_effort(std::string_view text) {
  using Tier = ReasoningEffort::Tier;
  if (text == "none") return {Tier::kNone, 0};
  if (text == "low") return {Tier::kLow, 0};
  if (text == "high") return {Tier::kHigh, 0};
  if (text == "xhigh") return {Tier::kXHigh, 0};
  if (text == "max") return {Tier::kMax, 0};
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  CHECK(!text.empty() && ec == std::errc() && ptr == text.data() + text.size())
      << "invalid reasoning effort '" << text
      << "' (expected none, low, high, xhigh, max or an integer 1-100)";
  return reasoning_effort_value(value);
}

ChatVersion parse_chat_version(std::string_view name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "v4") return ChatVersion::kV4;
  if (lower == "v4.1" || lower == "v41") return ChatVersion::kV41;
  THROW(kInvalidInput) << "unknown chat encoding version '" << name << "' (expected v4 or v4.1)";
}

void validate_conversation(const Conversation& conv, ChatVersion version) {
  using Tier = ReasoningEffort::Tier;
  const Tier tier = conv.reasoning_effort.tier;
  if (version == ChatVersion::kV4) {
    CHECK(tier != Tier::kNumeric) << "V4 takes reasoning effort none, low, high, xhigh or max, "
                                  << "not the number " << conv.reasoning_effort.value;
  } else {
    CHECK(tier != Tier::kNumeric ||
          (conv.reasoning_effort.value >= 1 && conv.reasoning_effort.value <= 100))
        << "reasoning effort " << conv.reasoning_effort.value << " is out of range 1-100";
  }
  auto check_tools = [](const std::vector<ToolDefinition>& tools, const std::string& where) {
    for (size_t i = 0; i < tools.size(); ++i) {
      const ToolDefinition& tool = tools[i];
      CHECK(!tool.name.empty()) << where << "[" << i << "] has an empty name";
      CHECK(tool.parameters.is_object() || tool.parameters.is_null())
          << where << "[" << i << "] ('" << tool.name
          << "'): parameters must be a JSON Schema object, got " << tool.parameters.type_name();
    }
  };
  check_tools(conv.tools, "tools");
  if (conv.response_format == ResponseFormat::kJsonSchema) {
    CHECK(!conv.response_schema.is_null()) << "response_format json_schema needs a schema";
  }
  int n_prefix = 0;
  for (size_t i = 0; i < conv.messages.size(); ++i) {
    const Message& m = conv.messages[i];
    const char* role = role_name(m.role);
    CHECK(m.n_images >= 0) << "messages[" << i << "]: negative image count";
    CHECK(m.tools.empty() || m.role == Role::kSystem)
        << "messages[" << i << "] (" << role << ") has tools; only system messages may";
    check_tools(m.tools, "messages[" + std::to_string(i) + "].tools");
    if (m.role != Role::kAssistant) {
      CHECK(m.tool_calls.empty()) << "messages[" << i << "] (" << role << ") has tool_calls; "
                                  << "only assistant messages may";
      CHECK(!m.reasoning_content) << "messages[" << i << "] (" << role
                                  << ") has reasoning_content; only assistant messages may";
      CHECK(!m.prefix) << "messages[" << i << "] (" << role
                       << ") has prefix set; only an assistant message may be a prefix";
    }
    if (m.role == Role::kAssistant) {
      CHECK(m.n_images == 0) << "messages[" << i << "]: assistant messages cannot carry images";
    }
    if (m.role != Role::kTool) {
      CHECK(!m.tool_call_id) << "messages[" << i << "] (" << role << ") has tool_call_id; "
                             << "only tool messages may";
    }
    for (size_t j = 0; j < m.tool_calls.size(); ++j) {
      CHECK(!m.tool_calls[j].name.empty())
          << "messages[" << i << "].tool_calls[" << j << "] has an empty function name";
    }
    n_prefix += m.prefix ? 1 : 0;
  }
  CHECK(n_prefix <= 1) << "at most one assistant message may be a prefix, got " << n_prefix;
}

}  // namespace deepinfer::recipe
