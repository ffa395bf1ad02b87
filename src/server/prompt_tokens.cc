#include "server/prompt_tokens.h"

#include <string_view>

#include "base/error.h"

namespace deepinfer::server {

std::vector<int32_t> prompt_token_ids(const recipe::RenderedPrompt& prompt,
                                      const recipe::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  const std::string_view text = prompt.prompt;
  size_t pos = 0;
  auto plain = [&](size_t end) {
    if (end > pos) {
      const std::vector<int32_t> part = tokenizer.encode_ordinary(text.substr(pos, end - pos));
      ids.insert(ids.end(), part.begin(), part.end());
    }
  };
  for (const auto& [begin, end] : prompt.special_ranges) {
    ICHECK(begin >= pos && end > begin && end <= text.size()) << "special ranges out of order";
    plain(begin);
    const std::string_view token = text.substr(begin, end - begin);
    const std::optional<int32_t> id = tokenizer.token_to_id(token);
    CHECK(id.has_value()) << "the tokenizer has no special token '" << token << "'";
    ids.push_back(*id);
    pos = end;
  }
  plain(text.size());
  return ids;
}

}  // namespace deepinfer::server
