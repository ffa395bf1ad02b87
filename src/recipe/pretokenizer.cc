#include "recipe/pretokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "recipe/scratch.h"

namespace deepinfer::recipe {
namespace {

// The split ByteLevel(use_regex=true) applies (GPT-2's pattern).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const nlohmann::json& j) {
  CHECK(j.is_string()) << "pre_tokenizer Split: 'behavior' must be a string";
  const std::string b = j.get<std::string>();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  THROW(kUnsupported) << "pre_tokenizer Split: unknown behavior '" << b << "'";
}

struct Part {
  size_t begin, end;
  bool is_match;
};

// HF's SplitDelimiterBehavior applied to a partition of a piece into match/non-match parts.
void apply_behavior(SplitBehavior behavior, const std::vector<Part>& parts, std::vector<Part>& acc) {
  acc.clear();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Part& p : parts)
        if (!p.is_match) acc.push_back(p);
      return;
    case SplitBehavior::kIsolated:
      acc = parts;
      return;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !acc.empty()) {
          acc.back().end = p.end;
        } else {
          acc.push_back(p);
        }
        previous_match = p.is_match;
      }
      return;
    case SplitBehavior::kMergedWithNext:
      for (size_t k = parts.size(); k-- > 0;) {
        const Part& p = parts[k];
        if (p.is_match && !previous_match && !acc.empty()) {
          acc.back().begin = p.begin;
        } else {
          acc.push_back(p);
        }
        previous_match = p.is_match;
      }
      std::reverse(acc.begin(), acc.end());
      return;
    case SplitBehavior::kContiguous:
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !acc.empty()) {
          acc.back().end = p.end;
        } else {
          acc.push_back(p);
        }
        previous_match = p.is_match;
      }
      return;
  }
}

struct Scratch {
  std::vector<Piece> next;
  std::vector<size_t> matches;
  std::vector<Part> parts;
  std::vector<Part> merged;
};

}  // namespace

PreTokenizer::PreTokenizer(const nlohmann::json& config) {
  if (config.is_null()) return;
  CHECK(config.is_object() && config.contains("type")) << "pre_tokenizer must be an object with a 'type'";
  if (config["type"] == "Sequence") {
    CHECK(config.contains("pretokenizers") && config["pretokenizers"].is_array())
        << "pre_tokenizer Sequence needs a 'pretokenizers' array";
    const auto& list = config["pretokenizers"];
    for (size_t i = 0; i < list.size(); ++i) add_step(list[i], i + 1 == list.size());
  } else {
    add_step(config, true);
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::add_step(const nlohmann::json& c, bool is_last) {
  CHECK(c.is_object() && c.contains("type") && c["type"].is_string())
      << "pre_tokenizer step must be an object with a string 'type'";
  const std::string type = c["type"].get<std::string>();
  CHECK_KIND(kUnsupported, !byte_level_) << "pre_tokenizer: a ByteLevel step must be the last step";
  if (type == "Split") {
    CHECK(c.contains("pattern") && c["pattern"].is_object()) << "pre_tokenizer Split needs a 'pattern' object";
    const auto& pat = c["pattern"];
    Step step;
    if (pat.contains("Regex")) {
      step.regex = std::make_unique<Regex>(pat["Regex"].get<std::string>(), false);
    } else if (pat.contains("String")) {
      step.regex = std::make_unique<Regex>(pat["String"].get<std::string>(), true);
    } else {
      THROW(kInvalidInput) << "pre_tokenizer Split: pattern must have 'Regex' or 'String'";
    }
    step.behavior = parse_behavior(c.value("behavior", nlohmann::json()));
    step.invert = c.value("invert", false);
    steps_.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    CHECK_KIND(kUnsupported, !c.value("add_prefix_space", false))
        << "pre_tokenizer ByteLevel with add_prefix_space=true is not supported";
    if (c.value("use_regex", true)) {
      steps_.push_back({std::make_unique<Regex>(kGpt2Pattern, false), SplitBehavior::kIsolated, false});
    }
    byte_level_ = true;
    (void)is_last;
  } else {
    THROW(kUnsupported) << "pre_tokenizer type '" << type << "' is not supported";
  }
}

void PreTokenizer::split(std::string_view segment, std::vector<Piece>& out) const {
  thread_local Scratch s;
  out.clear();
  if (segment.empty()) return;
  out.push_back({0, segment.size()});
  for (const Step& step : steps_) {
    s.next.clear();
    for (const Piece& piece : out) {
      const std::string_view sub = segment.substr(piece.begin, piece.end - piece.begin);
      s.matches.clear();
      step.regex->find_all(sub, s.matches);
      if (s.matches.empty() && !step.invert && step.behavior != SplitBehavior::kRemoved) {
        s.next.push_back(piece);  // fast path: nothing to split
        continue;
      }
      // Partition into match / non-match parts (HF Pattern::find_matches).
      s.parts.clear();
      size_t prev = 0;
      for (size_t k = 0; k < s.matches.size(); k += 2) {
        const size_t b = s.matches[k], e = s.matches[k + 1];
        if (prev != b) s.parts.push_back({prev, b, false});
        s.parts.push_back({b, e, true});
        prev = e;
      }
      if (prev != sub.size()) s.parts.push_back({prev, sub.size(), false});
      if (step.invert)
        for (Part& p : s.parts) p.is_match = !p.is_match;
      apply_behavior(step.behavior, s.parts, s.merged);
      for (const Part& p : s.merged)
        if (p.end > p.begin) s.next.push_back({piece.begin + p.begin, piece.begin + p.end});
    }
    out.swap(s.next);
  }
  release_large_scratch(s.next);
  release_large_scratch(s.matches);
  release_large_scratch(s.parts);
  release_large_scratch(s.merged);
}

}  // namespace deepinfer::recipe
