// Incremental parser of DeepSeek V4/V4.1 model output (deepseek-recipe's stream state
// machine): generated text -> reasoning_content, content, tool_calls.
//
// A byte-level state machine: feed() any split of the text (single bytes, split UTF-8
// characters included); the accumulated result is identical however the text was split.
// Markers that may still be completing are held back until decided, and finish() flushes.
//
// Stages: reasoning (thinking mode) until "</think>" (newlines before it are dropped, leading
// newlines of a fresh turn too); answer text, where stop sequences end the output, a stray
// "</think>" is dropped and leading newlines are skipped; a DSML block opened by
// "<｜DSML｜" (newlines before it dropped, from reasoning or answer) holding invoke name="f"
// and parameter name="p" string="true|false" elements, turned into JSON arguments
// ({"p": "escaped string"} or the raw JSON value; the name is copied as written, quotes
// included, up to the next space); "</｜DSML｜tool_calls>" (V4) or "</｜DSML｜ calls>" (V4.1)
// ends the output. Text after the end is ignored.
// Optional JSON mode: a "```json\n" / "```\n" fence or a bare "{" / "[" starts JSON content,
// "\n```" ends it; each run of other answer text becomes one space.
// Events carry complete UTF-8 whenever the input chunks do.
//
// Never throws on model output. Not thread-safe (one parser per stream).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::recipe {

// Where parsing begins (deepseek-recipe `ThinkingInitialStage`).
enum class ParseStart {
  kAnswer,                 // chat mode: answer text, leading newlines skipped
  kReasoningStart,         // thinking mode, new turn: reasoning, leading newlines skipped
  kReasoningContinuation,  // thinking-mode prefix continuation inside the reasoning
  kContentContinuation,    // prefix continuation inside the answer (newlines kept)
};

struct ParserOptions {
  bool parse_tool_calls = true;
  bool starts_in_tool_calls = false;  // the prompt opened a tool-call block (required choice)
  bool parse_json_output = false;
  ParseStart start = ParseStart::kAnswer;
  std::vector<std::string> stop_sequences;  // empty strings are ignored
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON object text, e.g. {"city": "Paris", "days": 3}
};

struct ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool stop_sequence_hit = false;  // a stop sequence ended the output
  bool ended = false;  // the output ended (stop sequence or closed tool-call block)
};

// One increment of the result, for streaming to a client. A tool call appears (kToolCallBegin,
// then kToolName with the whole name) once its name is complete; a call whose name never
// completes is dropped, as deepseek-recipe does.
struct OutputEvent {
  enum class Kind { kReasoning, kContent, kToolCallBegin, kToolName, kToolArguments, kStop };
  Kind kind;
  int tool_index = -1;  // tool events
  std::string text;     // bytes appended (may end inside a UTF-8 character)
};

class OutputParser {
 public:
  explicit OutputParser(ParserOptions options = ParserOptions());
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  // Consumes `text`; returns what it decided (held-back bytes come later).
  std::vector<OutputEvent> feed(std::string_view text);
  // End of the stream: flushes held-back bytes as their stage's text.
  std::vector<OutputEvent> finish();

  const ParsedOutput& result() const;
  // True once the output has ended (later text is ignored).
  bool ended() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convenience: parse a whole completion.
ParsedOutput parse_output(std::string_view text, const ParserOptions& options);

// Why generation stopped, as the engine saw it.
enum class BackendFinish { kStop, kLength, kContentFilter };
// The OpenAI finish_reason deepseek-recipe reports: "stop" when a stop sequence ended the
// output; otherwise "length" / "content_filter" for those backend reasons; otherwise
// "tool_calls" when a tool call was parsed, else "stop".
const char* finish_reason(const ParsedOutput& output, BackendFinish finish);

}  // namespace deepinfer::recipe
