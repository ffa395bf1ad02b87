#include "recipe/encoding_v41.h"

#include <algorithm>

#include "recipe/chat_encoding.h"
#include "recipe/chat_json.h"
#include "recipe/dsml.h"

namespace deepinfer::recipe {
namespace {

// Sort key of a tool result with an id: the index of the call it answers, 0 when no call of
// the latest tool-calling turn has that id.
size_t call_index(const Message& m, const std::vector<ToolCall>* calls) {
  if (calls == nullptr) return 0;
  for (size_t i = 0; i < calls->size(); ++i) {
    if ((*calls)[i].id == *m.tool_call_id) return i;
  }
  return 0;
}

}  // namespace

int v41_effort_value(const ReasoningEffort& effort) {
  using Tier = ReasoningEffort::Tier;
  switch (effort.tier) {
    case Tier::kLow: return 50;
    case Tier::kMax: return 100;
    case Tier::kNumeric: return effort.value;
    default: return 75;
  }
}

RenderedPrompt render_prompt_v41(const Conversation& conv, const SpecialTokens& tokens) {
  validate_conversation(conv, ChatVersion::kV41);
  constexpr JsonFloatStyle kStyle = JsonFloatStyle::kPython;
  PromptBuilder b(tokens);
  const bool thinking =
      conv.thinking_mode && conv.reasoning_effort.tier != ReasoningEffort::Tier::kNone;
  const bool has_tools = conv.tool_choice != ToolChoice::kNone && !conv.tools.empty();
  const bool has_format = conv.response_format == ResponseFormat::kJsonObject ||
                          conv.response_format == ResponseFormat::kJsonSchema;
  const bool keep_all_reasoning = thinking && (has_tools || !conv.drop_thinking);
  const std::vector<Message>& msgs = conv.messages;

  b.special(tokens.bos);
  size_t start = 0;
  {
    b.special(tokens.system);
    const size_t body_begin = b.size();
    if (thinking && (!msgs.empty() || has_tools || has_format)) {
      b.text("Reasoning Effort: " + std::to_string(v41_effort_value(conv.reasoning_effort)) +
             " (range 1-100, the higher the value, the more thorough the reasoning)\n\n");
    }
    bool consumed_system = false;
    if (!msgs.empty() && msgs[0].role == Role::kSystem) {
      b.content(msgs[0].content, msgs[0].n_images);
      consumed_system = true;
      start = 1;
    }
    if (has_tools) {
      b.text("\n\n");
      render_tools_section(b, conv.tools, DsmlDialect::kV41, kStyle);
    }
    if (conv.response_format == ResponseFormat::kJsonObject) {
      b.text("\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
             "reply:\n{\"type\": \"json_object\"}");
    } else if (conv.response_format == ResponseFormat::kJsonSchema) {
      b.text("\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
             "reply:\n" + dump_json(conv.response_schema, kStyle));
    }
    if (consumed_system && !msgs[0].tools.empty()) {
      render_updated_tool_schemas(b, msgs[0].tools, kStyle);
    }
    if (b.size() == body_begin && !consumed_system) b.strip_suffix(tokens.system);
  }

  const std::vector<ToolCall>* last_calls = nullptr;
  bool ends_with_prefix = false;
  for (size_t i = start; i < msgs.size();) {
    const Message& m = msgs[i];
    switch (m.role) {
      case Role::kSystem:
        b.special(tokens.system);
        b.content(m.content, m.n_images);
        if (!m.tools.empty()) render_updated_tool_schemas(b, m.tools, kStyle);
        ++i;
        break;
      case Role::kLatestReminder:
        // Of consecutive reminders only the first is rendered.
        if (i == 0 || msgs[i - 1].role != Role::kLatestReminder) {
          b.special(tokens.latest_reminder);
          b.text(m.content);
        }
        ++i;
        break;
      case Role::kUser:
      case Role::kTool: {
        size_t end = i;
        while (end < msgs.size() && (msgs[end].role == Role::kUser || msgs[end].role == Role::kTool)) {
          ++end;
        }
        std::vector<const Message*> block;
        std::vector<size_t> tool_slots;
        std::vector<const Message*> tools;
        for (size_t j = i; j < end; ++j) {
          block.push_back(&msgs[j]);
          if (msgs[j].role == Role::kTool && msgs[j].tool_call_id) {
            tool_slots.push_back(j - i);
            tools.push_back(&msgs[j]);
          }
        }
        std::stable_sort(tools.begin(), tools.end(), [&](const Message* a, const Message* c) {
          return call_index(*a, last_calls) < call_index(*c, last_calls);
        });
        for (size_t k = 0; k < tool_slots.size(); ++k) block[tool_slots[k]] = tools[k];
        b.special(tokens.user);
        for (size_t k = 0; k < block.size(); ++k) {
          if (k > 0) b.text("\n\n");
          if (block[k]->role == Role::kTool) {
            b.text("<tool_result>");
            b.content(block[k]->content, block[k]->n_images);
            b.text("</tool_result>");
          } else {
            b.content(block[k]->content, block[k]->n_images);
          }
        }
        i = end;
        break;
      }
      case Role::kAssistant: {
        const bool last = i + 1 == msgs.size();
        b.special(tokens.assistant);
        // A prefix message keeps its reasoning unless it opens the conversation and the
        // system block holds nothing but the effort line.
        const bool keep =
            thinking && (keep_all_reasoning || (m.prefix && (i > 0 || has_tools || has_format)));
        if (keep) {
          b.special(tokens.thinking_start);
          b.text(m.reasoning_content.value_or(""));
        }
        b.special(tokens.thinking_end);
        b.text(m.content);
        if (!m.tool_calls.empty()) {
          render_dsml_tool_calls(b, m.tool_calls, DsmlDialect::kV41, kStyle);
          last_calls = &m.tool_calls;
        }
        if (m.prefix) {
          if (keep && m.content.empty() && m.tool_calls.empty()) {
            b.strip_suffix(tokens.thinking_end);
          }
          ends_with_prefix = last;
        } else {
          b.special(tokens.eos);
        }
        ++i;
        break;
      }
    }
  }
  if (!ends_with_prefix) {
    b.special(tokens.assistant);
    b.special(thinking ? tokens.thinking_start : tokens.thinking_end);
  }
  if (has_tools && conv.tool_choice == ToolChoice::kRequired) {
    render_required_tool_calls_opening(b, DsmlDialect::kV41);
  }
  return b.take();
}

}  // namespace deepinfer::recipe
