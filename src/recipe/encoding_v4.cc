#include "recipe/encoding_v4.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>

#include "recipe/chat_encoding.h"
#include "recipe/chat_json.h"
#include "recipe/dsml.h"

namespace deepinfer::recipe {
namespace {

constexpr const char* kAbsoluteMaximum =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

constexpr const char* kBeyondMaximum =
    "Reasoning Effort: Beyond maximum \xE2\x80\x94 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every causal "
    "chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

// Sort key of a message in the window after a tool-calling turn: tool results by the id of
// the call they answer (V4 orders calls by id too), everything else after them.
// A tool result without an id sorts first.
std::pair<int, std::string_view> result_key(const Message& m) {
  if (m.role == Role::kTool) return {m.tool_call_id ? 1 : 0, m.tool_call_id.value_or("")};
  return {2, {}};
}

}  // namespace

std::string v4_effort_paragraph(const ReasoningEffort& effort, V4EffortStyle style) {
  using Tier = ReasoningEffort::Tier;
  if (style == V4EffortStyle::kApril) {
    return effort.tier == Tier::kMax ? kAbsoluteMaximum : "";
  }
  switch (effort.tier) {
    case Tier::kUnset:
    case Tier::kHigh:
    case Tier::kXHigh:
      return kAbsoluteMaximum;
    case Tier::kMax:
      return kBeyondMaximum;
    default:
      return "";
  }
}

RenderedPrompt render_prompt_v4(const Conversation& conv, const SpecialTokens& tokens) {
  validate_conversation(conv, ChatVersion::kV4);
  constexpr JsonFloatStyle kStyle = JsonFloatStyle::kV4;
  PromptBuilder b(tokens);
  const bool thinking =
      conv.thinking_mode && conv.reasoning_effort.tier != ReasoningEffort::Tier::kNone;
  const bool has_tools = conv.tool_choice != ToolChoice::kNone && !conv.tools.empty();
  const bool keep_all_reasoning = has_tools || !conv.drop_thinking;

  b.special(tokens.bos);
  if (thinking) b.text(v4_effort_paragraph(conv.reasoning_effort, conv.v4_effort_style));
  // Turns: every non-system message, a run of consecutive user messages forming one turn.
  std::vector<std::vector<const Message*>> turns;
  bool first_system = true;
  for (const Message& m : conv.messages) {
    if (m.role != Role::kSystem) {
      if (m.role == Role::kUser && !turns.empty() && turns.back().front()->role == Role::kUser) {
        turns.back().push_back(&m);
      } else {
        turns.push_back({&m});
      }
      continue;
    }
    if (m.content.empty()) continue;
    if (!first_system) b.text("\n\n");
    first_system = false;
    b.content(m.content, m.n_images);
  }
  if (has_tools) {
    b.text("\n\n");
    render_tools_section(b, conv.tools, DsmlDialect::kV4, kStyle);
  }
  if (conv.response_format == ResponseFormat::kJsonObject) {
    b.text("\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\n"
           "Reply with JSON object ONLY.");
  } else if (conv.response_format == ResponseFormat::kJsonSchema) {
    b.text("\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
           "reply:\n" + dump_json(conv.response_schema, kStyle));
  }

  // Tool results answer the calls in order: the k turns after a k-call assistant turn are
  // sorted. The windows are taken from the positions before any sorting and then sorted one
  // after the other, so an assistant turn inside an earlier window can move behind results.
  std::vector<std::pair<size_t, size_t>> windows;
  for (size_t i = 0; i < turns.size(); ++i) {
    const Message& m = *turns[i].front();
    const size_t n_calls = m.tool_calls.size();
    if (m.role != Role::kAssistant || n_calls == 0 || i + n_calls >= turns.size()) continue;
    windows.emplace_back(i + 1, i + 1 + n_calls);
  }
  for (const auto& [begin, end] : windows) {
    std::stable_sort(turns.begin() + begin, turns.begin() + end,
                     [](const auto& a, const auto& c) {
                       return result_key(*a.front()) < result_key(*c.front());
                     });
  }

  Role prev = Role::kSystem;
  bool in_user_turn = false;
  bool ends_with_prefix = false;
  for (size_t i = 0; i < turns.size(); ++i) {
    const Message& m = *turns[i].front();
    const bool last = i + 1 == turns.size();
    switch (m.role) {
      case Role::kUser: {
        // The non-empty contents of the run, joined by "\n\n".
        if (in_user_turn) {
          b.text("\n\n");
        } else {
          b.special(tokens.user);
        }
        bool wrote = false;
        for (const Message* part : turns[i]) {
          if (part->content.empty()) continue;
          if (wrote) b.text("\n\n");
          b.content(part->content, part->n_images);
          wrote = true;
        }
        in_user_turn = true;
        break;
      }
      case Role::kTool:
        if (in_user_turn && prev == Role::kTool) {
          b.text("\n\n");
        } else {
          b.special(tokens.user);
        }
        b.text("<tool_result>");
        b.content(m.content, m.n_images);
        b.text("</tool_result>");
        in_user_turn = true;
        break;
      case Role::kLatestReminder:
        b.special(tokens.latest_reminder);
        b.text(m.content);
        in_user_turn = false;
        break;
      case Role::kAssistant: {
        const bool is_prefix = m.prefix && last;
        b.special(tokens.assistant);
        if ((keep_all_reasoning || m.prefix) && m.reasoning_content) {
          b.special(tokens.thinking_start);
          b.text(*m.reasoning_content);
        }
        // A thinking-mode prefix without answer text leaves the reasoning open.
        if (!(m.prefix && thinking && m.content.empty())) b.special(tokens.thinking_end);
        b.text(m.content);
        if (!m.tool_calls.empty()) {
          std::vector<ToolCall> calls = m.tool_calls;
          std::stable_sort(calls.begin(), calls.end(),
                           [](const ToolCall& a, const ToolCall& c) { return a.id < c.id; });
          render_dsml_tool_calls(b, calls, DsmlDialect::kV4, kStyle);
        }
        if (is_prefix) {
          ends_with_prefix = true;
        } else {
          b.special(tokens.eos);
        }
        in_user_turn = false;
        break;
      }
      case Role::kSystem:
        break;
    }
    prev = m.role;
  }
  if (!ends_with_prefix) {
    b.special(tokens.assistant);
    b.special(thinking ? tokens.thinking_start : tokens.thinking_end);
  }
  if (has_tools && conv.tool_choice == ToolChoice::kRequired) {
    render_required_tool_calls_opening(b, DsmlDialect::kV4);
  }
  return b.take();
}

}  // namespace deepinfer::recipe
