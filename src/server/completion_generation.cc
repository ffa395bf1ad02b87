#include "server/completion_generation.h"

#include <utility>

namespace deepinfer::server {

CompletionGeneration::CompletionGeneration(const CompletionRequest& request, const ModelInfo& model)
    : Generation(random_id("cmpl-"), "text_completion", model, request.sampling,
                 /*keep_special=*/!request.sampling.skip_special_tokens) {
  const int64_t max_model_len = model.max_model_len;
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    const std::vector<int32_t>& prompt = request.prompts[p];
    const int64_t max_tokens = resolve_max_tokens(request.sampling, static_cast<int64_t>(prompt.size()),
                                                  max_model_len, kDefaultMaxTokens);
    const std::string echo = request.echo ? request.prompt_texts.at(p) : std::string();
    for (int64_t j = 0; j < request.sampling.n; ++j) {
      add_choice(prompt, max_tokens, j == 0);
      // Non-streaming text starts with the echo; a stream sends it in the choice's first chunk.
      texts_.push_back(Text{StopMatcher(request.sampling.stop), stream() ? "" : echo, Json(), 0,
                            stream() ? echo : ""});
    }
  }
}

Json CompletionGeneration::logprobs_of(Text& t, const RequestOutput& out) {
  Json lp = {{"tokens", Json::array()}, {"token_logprobs", Json::array()},
             {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
  for (const TokenLogprob& l : out.logprobs) {
    const std::string text = token_text(l.token);
    lp["tokens"].push_back(text);
    lp["token_logprobs"].push_back(l.logprob);
    Json top = Json::object();
    for (const auto& [id, value] : l.top) top[token_text(id)] = value;
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(t.offset);
    t.offset += static_cast<int64_t>(text.size());
  }
  return lp;
}

void CompletionGeneration::handle_output(size_t i, const RequestOutput& out, const std::string& new_text,
                                         std::vector<Json>& chunks) {
  Text& t = texts_[i];
  const std::string text = std::exchange(t.echo, std::string()) + t.stop.feed(new_text);
  t.text += text;
  Json lp = nullptr;
  if (sampling_.n_logprobs >= 0 && !out.logprobs.empty()) {
    lp = logprobs_of(t, out);
    if (!stream()) {
      if (t.logprobs.is_null()) {
        t.logprobs = lp;
      } else {
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
          for (Json& x : lp[key]) t.logprobs[key].push_back(std::move(x));
        }
      }
    }
  }
  if (t.stop.hit()) end_early(i, "stop");
  if (stream() && (!text.empty() || !lp.is_null())) {
    chunks.push_back({{"index", i}, {"text", text}, {"logprobs", lp}, {"finish_reason", nullptr}});
  }
}

void CompletionGeneration::handle_finish(size_t i, std::string& reason, std::vector<Json>& chunks) {
  Text& t = texts_[i];
  const std::string rest = std::exchange(t.echo, std::string()) + t.stop.flush();
  t.text += rest;
  if (stream()) {
    chunks.push_back({{"index", i}, {"text", rest}, {"logprobs", nullptr}, {"finish_reason", reason}});
  }
}

std::string CompletionGeneration::response_body() {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Json lp = texts_[i].logprobs;
    if (sampling_.n_logprobs >= 0 && lp.is_null()) {
      lp = {{"tokens", Json::array()}, {"token_logprobs", Json::array()},
            {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
    }
    choices.push_back({{"index", i}, {"text", texts_[i].text}, {"logprobs", lp},
                       {"finish_reason", choices_[i].finish_reason}});
  }
  Json body = {{"id", id_}, {"object", object_}, {"created", created_}, {"model", model_},
               {"choices", std::move(choices)}, {"usage", usage()}};
  return dump(body);
}

}  // namespace deepinfer::server
