// Chat request types shared by the V4 and V4.1 prompt encoders (chat_encoding.h) and the
// output parser (output_parser.h). They mirror deepseek-recipe's `Conversation` model:
// the encoders render exactly what deepseek-recipe 0.2.0 renders for the same conversation.
//
// Strings are UTF-8. Plain data, no invariants beyond those checked by validate_conversation()
// (chat_encoding.h), which every encoder calls first. Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::recipe {

// JSON with object keys kept in insertion order (tool schemas and tool-call arguments are
// rendered in the order the caller wrote them, as deepseek-recipe does).
using OrderedJson = nlohmann::ordered_json;

enum class Role { kSystem, kUser, kAssistant, kTool, kLatestReminder };

// "system" | "user" | "assistant" | "tool" | "latest_reminder"; anything else throws
// deepinfer::Error (kInvalidInput) naming the role.
Role parse_role(std::string_view name);
const char* role_name(Role role);

// A tool call recorded in an assistant message of the history.
struct ToolCall {
  std::string id;
  std::string name;       // must be non-empty
  std::string arguments;  // JSON object text; anything else is rendered as one string
                          // parameter named "arguments" (deepseek-recipe's behaviour)
};

// A client function tool. `parameters` is a JSON Schema object, or null when absent.
struct ToolDefinition {
  std::string name;                        // must be non-empty
  std::optional<std::string> description;  // rendered as "" when absent
  OrderedJson parameters;                  // object or null; anything else is rejected
  // Deferred tools are left out of the "## Tools" section (they are announced later, in a
  // system message's tools). `strict` is passed through and not rendered.
  bool defer_loading = false;
  std::optional<bool> strict;
};

struct Message {
  Role role = Role::kUser;
  std::string content;
  // Assistant only: the model's reasoning (nullopt = none given, distinct from "").
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;         // assistant only
  std::optional<std::string> tool_call_id;  // tool only
  // System, user and tool messages: number of attached images. The first `n_images`
  // occurrences of the image token's spelling in `content` are the image placeholders
  // (special tokens); later occurrences are plain text.
  int n_images = 0;
  // Assistant only: the message is continued by the model instead of closing the turn.
  bool prefix = false;
  // System only: tools announced by this message. V4.1 appends them to the message as
  // "### Updated Tool Schemas"; V4 does not render them.
  std::vector<ToolDefinition> tools;
};

enum class ToolChoice { kAuto, kNone, kRequired };
ToolChoice parse_tool_choice(std::string_view name);  // "auto" | "none" | "required"

enum class ResponseFormat { kText, kJsonObject, kJsonSchema, kRegex };

// How much the model should think (thinking mode only).
//   "none" turns thinking off (the conversation renders in chat mode), as deepseek-recipe's
//   request conversion does.
//   V4 (0731 release): unset or high/xhigh -> "Absolute maximum" paragraph, max -> "Beyond
//   maximum" paragraph, low -> no paragraph. V4 April variant: only max adds a paragraph
//   (the "Absolute maximum" one). Numbers are rejected for V4.
//   V4.1: a number 1..100; unset/high/xhigh = 75, low = 50, max = 100.
struct ReasoningEffort {
  enum class Tier { kUnset, kNone, kLow, kHigh, kXHigh, kMax, kNumeric };
  Tier tier = Tier::kUnset;
  int value = 0;  // 1..100, only for kNumeric
};
// Accepts "none" | "low" | "high" | "xhigh" | "max" or a decimal integer 1..100 (as text);
// anything else throws kInvalidInput naming the value.
ReasoningEffort parse_reasoning_effort(std::string_view text);
ReasoningEffort reasoning_effort_value(int value);  // 1..100, else throws

// Which V4 release's effort paragraphs to render.
enum class V4EffortStyle { k0731, kApril };

struct Conversation {
  std::vector<Message> messages;
  bool thinking_mode = true;  // deepseek-recipe's default
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  ReasoningEffort reasoning_effort;
  ResponseFormat response_format = ResponseFormat::kText;
  OrderedJson response_schema;  // kJsonSchema only
  std::string response_regex;   // kRegex only (not rendered into the prompt)
  // true (deepseek-recipe): reasoning of history turns is dropped unless the encoder keeps it
  // (tools declared, or a trailing prefix message). false keeps every turn's reasoning.
  bool drop_thinking = true;
  V4EffortStyle v4_effort_style = V4EffortStyle::k0731;
};

}  // namespace deepinfer::recipe
