// A scripted StepEngine for the HTTP server tests (no model): every request yields the tokens
// of kScript in order, one per step, up to its max_tokens ("length"). While `*hold` is set,
// steps wait (requests stay live).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/async_engine.h"
#include "recipe/tokenizer.h"

namespace deepinfer::server {

inline const recipe::Tokenizer& tokenizer() {
  static const recipe::Tokenizer t = recipe::Tokenizer::from_file("models/tiny/tokenizer.json");
  return t;
}

inline const std::string kScript = " Hello world, this is the scripted engine speaking.";

class ScriptEngine : public StepEngine {
 public:
  explicit ScriptEngine(std::atomic<bool>* hold) : hold_(hold), script_(tokenizer().encode(kScript, false)) {}
  void add_request(EngineRequest r) override { live_[r.id] = {r.params.max_tokens, 0}; }
  bool abort(const std::string& id) override { return live_.erase(id) > 0; }
  std::vector<RequestOutput> step() override {
    while (hold_->load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::vector<RequestOutput> outs;
    for (auto it = live_.begin(); it != live_.end();) {
      auto& [max_tokens, produced] = it->second;
      RequestOutput o;
      o.id = it->first;
      o.new_tokens = {script_[static_cast<size_t>(produced) % script_.size()]};
      ++produced;
      o.finished = produced >= max_tokens;
      if (o.finished) o.finish_reason = "length";
      outs.push_back(o);
      it = o.finished ? live_.erase(it) : std::next(it);
    }
    return outs;
  }
  bool has_unfinished() const override { return !live_.empty(); }

 private:
  std::atomic<bool>* hold_;
  std::vector<int32_t> script_;
  std::map<std::string, std::pair<int64_t, int64_t>> live_;
};

}  // namespace deepinfer::server
