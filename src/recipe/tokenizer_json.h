// Fast reading of a tokenizer.json: the BPE vocabulary (~130k entries) and merges are
// taken out while parsing instead of being inserted into nlohmann's std::map-based
// object, which is where most of the load time went. Everything else stays in `doc`.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::recipe {

struct TokenizerJson {
  nlohmann::json doc;  // the file, with model.vocab emptied and model.merges emptied when taken out
  std::vector<std::pair<std::string, nlohmann::json>> vocab;  // model.vocab entries, in file order
  std::vector<nlohmann::json> merges;                          // model.merges elements, in order
};

// Parses `text`; throws nlohmann::json::parse_error for malformed JSON.
TokenizerJson parse_tokenizer_json(std::string_view text);

}  // namespace deepinfer::recipe
