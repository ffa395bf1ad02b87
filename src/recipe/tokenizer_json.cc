#include "recipe/tokenizer_json.h"

namespace deepinfer::recipe {

TokenizerJson parse_tokenizer_json(std::string_view text) {
  TokenizerJson out;
  std::vector<std::string> keys;  // keys[d]: the last key read at depth d
  std::vector<char> open;         // open[d]: kind ('o' object, 'a' array) of the container opened at depth d
  auto inside_model_member = [&](std::string_view name, char kind) {
    return open.size() >= 3 && keys.size() >= 3 && open[0] == 'o' && open[1] == 'o' && keys[1] == "model" &&
           keys[2] == name && open[2] == kind;
  };
  using Event = nlohmann::json::parse_event_t;
  auto callback = [&](int depth, Event event, nlohmann::json& parsed) {
    const auto d = static_cast<size_t>(depth);
    switch (event) {
      case Event::key:
        if (keys.size() <= d) keys.resize(d + 1);
        keys[d] = parsed.get<std::string>();
        // A vocab key is kept here and never inserted into the DOM (false drops key and value).
        return !(d == 3 && inside_model_member("vocab", 'o'));
      case Event::object_start:
      case Event::array_start:
        if (open.size() <= d) open.resize(d + 1);
        open[d] = event == Event::object_start ? 'o' : 'a';
        return true;
      case Event::value:
      case Event::object_end:
      case Event::array_end:
        if (d != 3) return true;
        if (inside_model_member("vocab", 'o')) {
          out.vocab.emplace_back(keys[3], std::move(parsed));
          return false;
        }
        if (inside_model_member("merges", 'a')) {
          out.merges.push_back(std::move(parsed));
          return false;
        }
        return true;
    }
    return true;
  };
  out.doc = nlohmann::json::parse(text.begin(), text.end(), callback);
  return out;
}

}  // namespace deepinfer::recipe
