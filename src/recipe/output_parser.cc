#include "recipe/output_parser.h"

#include <algorithm>

#include "recipe/chat_json.h"

namespace deepinfer::recipe {
namespace {

constexpr std::string_view kDsmlOpen = "<｜DSML｜";
constexpr std::string_view kDsmlClose = "</｜DSML｜";
constexpr std::string_view kThinkEnd = "</think>";

// Incremental matcher of one pattern against the most recent bytes.
//   kString:            the pattern itself (KMP, so overlapping prefixes are kept);
//   kNewlinesAndString: the pattern preceded by any run of '\n' (the newlines are swallowed);
//   kLeadingNewline:    a '\n' as the very first byte of the stage.
class Matcher {
 public:
  enum class Kind { kString, kNewlinesAndString, kLeadingNewline };

  Matcher(Kind kind, std::string_view pattern) : kind_(kind), pattern_(pattern) {
    fail_.assign(pattern_.size(), 0);
    for (size_t i = 1, k = 0; i < pattern_.size();) {
      if (pattern_[i] == pattern_[k]) {
        fail_[i++] = ++k;
      } else if (k > 0) {
        k = fail_[k - 1];
      } else {
        fail_[i++] = 0;
      }
    }
  }

  // Returns true when the pattern completes with `byte`.
  bool feed(char byte) {
    switch (kind_) {
      case Kind::kString:
        len_ = advance(len_, byte);
        return len_ == pattern_.size();
      case Kind::kNewlinesAndString: {
        if (len_ == 0 && byte == '\n') {
          ++newlines_;
        } else {
          const size_t next = advance(len_, byte);
          if (next <= len_) newlines_ = 0;
          len_ = next;
        }
        return len_ == pattern_.size();
      }
      case Kind::kLeadingNewline:
        if (first_) matched_ = byte == '\n';
        first_ = false;
        return matched_;
    }
    return false;
  }

  // Bytes at the end of the input that may belong to a match.
  size_t matching_len() const {
    switch (kind_) {
      case Kind::kString: return len_;
      case Kind::kNewlinesAndString: return len_ + newlines_;
      case Kind::kLeadingNewline: return matched_ ? 1 : 0;
    }
    return 0;
  }

 private:
  size_t advance(size_t len, char byte) const {
    while (len > 0 && pattern_[len] != byte) len = fail_[len - 1];
    if (len < pattern_.size() && pattern_[len] == byte) ++len;
    return len;
  }

  Kind kind_;
  std::string pattern_;
  std::vector<size_t> fail_;
  size_t len_ = 0;
  size_t newlines_ = 0;
  bool first_ = true;
  bool matched_ = false;
};

enum class Stage {
  kAnswer, kJson, kMatchedJson, kToolCalls, kToolName, kToolArgs, kParamName, kParamType,
  kParamValue, kReasoning, kFinished,
};

// A stage with its flag: `leading` for kAnswer/kToolArgs/kReasoning, `string` for kParamValue.
struct StageState {
  Stage stage;
  bool flag = false;
};

enum class Action {
  kContent, kToSpace, kDrop, kStop, kToolCallBegin, kToolName, kArgsLabel, kArgsRaw,
  kArgsString, kArgsEnd, kReasoning, kContentLabel, kToolNameEnd,
};

struct Branch {
  Matcher matcher;
  StageState next;
  Action action;
  std::string_view label;  // kArgsLabel / kArgsEnd / kContentLabel
};

}  // namespace

struct OutputParser::Impl {
  ParserOptions options;
  StageState state{Stage::kAnswer, true};
  std::vector<Branch> branches;
  Action unmatched = Action::kContent;
  std::string stash;  // bytes of this stage not yet decided
  Action last_action = Action::kDrop;
  std::string pending_name;  // name of the tool call being read; the call exists once it ends
  ParsedOutput result;
  std::vector<OutputEvent>* events = nullptr;

  explicit Impl(ParserOptions opts) : options(std::move(opts)) {
    auto& stops = options.stop_sequences;
    stops.erase(std::remove(stops.begin(), stops.end(), std::string()), stops.end());
    StageState start{Stage::kAnswer, true};
    if (options.starts_in_tool_calls) {
      start = {Stage::kToolCalls};
    } else {
      switch (options.start) {
        case ParseStart::kAnswer: start = {Stage::kAnswer, true}; break;
        case ParseStart::kReasoningStart: start = {Stage::kReasoning, true}; break;
        case ParseStart::kReasoningContinuation: start = {Stage::kReasoning, false}; break;
        case ParseStart::kContentContinuation: start = {Stage::kAnswer, false}; break;
      }
    }
    enter(start);
  }

  void add(Matcher::Kind kind, std::string_view pattern, StageState next, Action action,
           std::string_view label = {}) {
    branches.push_back(Branch{Matcher(kind, pattern), next, action, label});
  }
  void add(std::string_view pattern, StageState next, Action action, std::string_view label = {}) {
    add(Matcher::Kind::kString, pattern, next, action, label);
  }
  void add_stops() {
    for (const std::string& s : options.stop_sequences) add(s, {Stage::kFinished}, Action::kStop);
  }
  void add_tool_call_begin() {
    add(Matcher::Kind::kNewlinesAndString, kDsmlOpen, {Stage::kToolCalls}, Action::kDrop);
  }

  void enter(StageState next) {
    state = next;
    branches.clear();
    stash.clear();
    const bool flag = next.flag;
    switch (next.stage) {
      case Stage::kAnswer:
        if (options.parse_json_output) {
          add("```json\n", {Stage::kJson}, Action::kDrop);
          add("```\n", {Stage::kJson}, Action::kDrop);
          add("{", {Stage::kJson}, Action::kContentLabel, "{");
          add("[", {Stage::kJson}, Action::kContentLabel, "[");
        } else {
          add_stops();
        }
        if (options.parse_tool_calls) add_tool_call_begin();
        if (flag) add(Matcher::Kind::kLeadingNewline, "", {Stage::kAnswer, true}, Action::kDrop);
        add(kThinkEnd, {Stage::kAnswer, false}, Action::kDrop);
        unmatched = options.parse_json_output ? Action::kToSpace : Action::kContent;
        break;
      case Stage::kJson:
        add_stops();
        add("\n```", {Stage::kMatchedJson}, Action::kDrop);
        unmatched = Action::kContent;
        break;
      case Stage::kMatchedJson:
        if (options.parse_tool_calls) add_tool_call_begin();
        unmatched = Action::kToSpace;
        break;
      case Stage::kToolCalls:
        add("invoke name=\"", {Stage::kToolName}, Action::kToolCallBegin);
        add("</｜DSML｜tool_calls>", {Stage::kFinished}, Action::kDrop);
        add("</｜DSML｜ calls>", {Stage::kFinished}, Action::kDrop);
        unmatched = Action::kDrop;
        break;
      case Stage::kToolName:
        add("\"", {Stage::kToolArgs, true}, Action::kToolNameEnd);
        unmatched = Action::kToolName;
        break;
      case Stage::kToolArgs:
        add("parameter name=", {Stage::kParamName}, Action::kArgsLabel, flag ? "{" : ", ");
        add(kDsmlClose, {Stage::kToolCalls}, Action::kArgsEnd, flag ? "{}" : "}");
        unmatched = Action::kDrop;
        break;
      case Stage::kParamName:
        // The name is copied with its quotes: name="p" string=... gives "p" then ": ".
        add(" ", {Stage::kParamType}, Action::kArgsLabel, ": ");
        unmatched = Action::kArgsRaw;
        break;
      case Stage::kParamType:
        add("true\">", {Stage::kParamValue, true}, Action::kArgsLabel, "\"");
        add("false\">", {Stage::kParamValue, false}, Action::kDrop);
        unmatched = Action::kDrop;
        break;
      case Stage::kParamValue:
        if (flag) {
          add(kDsmlClose, {Stage::kToolArgs, false}, Action::kArgsLabel, "\"");
        } else {
          add(kDsmlClose, {Stage::kToolArgs, false}, Action::kDrop);
        }
        unmatched = flag ? Action::kArgsString : Action::kArgsRaw;
        break;
      case Stage::kReasoning:
        if (options.parse_tool_calls) add_tool_call_begin();
        if (flag) add(Matcher::Kind::kLeadingNewline, "", {Stage::kReasoning, true}, Action::kDrop);
        add(Matcher::Kind::kNewlinesAndString, kThinkEnd, {Stage::kAnswer, true}, Action::kDrop);
        unmatched = Action::kReasoning;
        break;
      case Stage::kFinished:
        result.ended = true;
        unmatched = Action::kDrop;
        break;
    }
  }

  void emit(Action action, std::string_view bytes, std::string_view label) {
    emit_action(action, bytes, label);
    last_action = action;
  }

  void emit_action(Action action, std::string_view bytes, std::string_view label) {
    using Kind = OutputEvent::Kind;
    const int tool_index = static_cast<int>(result.tool_calls.size()) - 1;
    auto push = [&](Kind kind, std::string_view text, std::string* target) {
      if (target != nullptr) target->append(text);
      if (events != nullptr) events->push_back(OutputEvent{kind, tool_index, std::string(text)});
    };
    auto args = [&]() -> std::string* {
      return tool_index >= 0 ? &result.tool_calls.back().arguments : nullptr;
    };
    switch (action) {
      case Action::kContent: push(Kind::kContent, bytes, &result.content); break;
      case Action::kToSpace:
        // Text around JSON output becomes one space per run, however the run was split.
        if (last_action != Action::kToSpace) push(Kind::kContent, " ", &result.content);
        break;
      case Action::kContentLabel: push(Kind::kContent, label, &result.content); break;
      case Action::kReasoning: push(Kind::kReasoning, bytes, &result.reasoning_content); break;
      case Action::kDrop: break;
      case Action::kStop:
        result.stop_sequence_hit = true;
        if (events != nullptr) events->push_back(OutputEvent{Kind::kStop, -1, std::string(bytes)});
        break;
      case Action::kToolCallBegin:
        pending_name.clear();
        break;
      case Action::kToolName:
        pending_name.append(bytes);
        break;
      case Action::kToolNameEnd:
        result.tool_calls.push_back(ParsedToolCall{std::move(pending_name), std::string()});
        pending_name.clear();
        if (events != nullptr) {
          events->push_back(OutputEvent{Kind::kToolCallBegin, tool_index + 1, std::string()});
          events->push_back(
              OutputEvent{Kind::kToolName, tool_index + 1, result.tool_calls.back().name});
        }
        break;
      case Action::kArgsLabel:
      case Action::kArgsEnd:
        if (tool_index >= 0) push(Kind::kToolArguments, label, args());
        break;
      case Action::kArgsRaw:
        if (tool_index >= 0) push(Kind::kToolArguments, bytes, args());
        break;
      case Action::kArgsString:
        if (tool_index >= 0) {
          std::string escaped;
          append_json_escaped(escaped, bytes);
          push(Kind::kToolArguments, escaped, args());
        }
        break;
    }
  }

  void feed(std::string_view text) {
    for (char byte : text) {
      stash.push_back(byte);
      Branch* hit = nullptr;
      for (Branch& branch : branches) {
        if (branch.matcher.feed(byte)) {
          hit = &branch;
          break;
        }
      }
      if (hit == nullptr) continue;
      const size_t matched = hit->matcher.matching_len();
      const std::string bytes = std::move(stash);
      if (matched < bytes.size()) {
        emit(unmatched, std::string_view(bytes).substr(0, bytes.size() - matched), {});
      }
      const Action action = hit->action;
      const std::string_view label = hit->label;
      const StageState next = hit->next;
      if (matched > 0) emit(action, std::string_view(bytes).substr(bytes.size() - matched), label);
      enter(next);
    }
    size_t keep = 0;
    for (const Branch& branch : branches) keep = std::max(keep, branch.matcher.matching_len());
    if (keep < stash.size()) {
      emit(unmatched, std::string_view(stash).substr(0, stash.size() - keep), {});
      stash.erase(0, stash.size() - keep);
    }
  }

  void finish() {
    if (!stash.empty()) emit(unmatched, stash, {});
    stash.clear();
  }
};

OutputParser::OutputParser(ParserOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

std::vector<OutputEvent> OutputParser::feed(std::string_view text) {
  std::vector<OutputEvent> events;
  impl_->events = &events;
  impl_->feed(text);
  impl_->events = nullptr;
  return events;
}

std::vector<OutputEvent> OutputParser::finish() {
  std::vector<OutputEvent> events;
  impl_->events = &events;
  impl_->finish();
  impl_->events = nullptr;
  return events;
}

const ParsedOutput& OutputParser::result() const { return impl_->result; }
bool OutputParser::ended() const { return impl_->result.ended; }

ParsedOutput parse_output(std::string_view text, const ParserOptions& options) {
  OutputParser parser(options);
  parser.feed(text);
  parser.finish();
  return parser.result();
}

const char* finish_reason(const ParsedOutput& output, BackendFinish finish) {
  if (output.stop_sequence_hit) return "stop";
  if (finish == BackendFinish::kLength) return "length";
  if (finish == BackendFinish::kContentFilter) return "content_filter";
  return output.tool_calls.empty() ? "stop" : "tool_calls";
}

}  // namespace deepinfer::recipe
