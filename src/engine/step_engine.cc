// make_step_engine() apart from async_engine.cc so that AsyncEngine links without Engine
// (its tests drive a fake StepEngine).
#include <algorithm>

#include "cache/state_cache.h"
#include "engine/async_engine.h"

namespace deepinfer {
namespace {

class EngineAdapter final : public StepEngine {
 public:
  explicit EngineAdapter(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}
  void add_request(EngineRequest request) override { engine_->add_request(std::move(request)); }
  bool abort(const std::string& id) override { return engine_->abort(id); }
  std::vector<RequestOutput> step() override { return engine_->step(); }
  bool has_unfinished() const override { return engine_->has_unfinished(); }
  std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(const std::string& kind,
                                                                     const std::string& text) override {
    return engine_->compile_constraint(kind, text);
  }
  EngineLoad load() const override {
    const StateCache& cache = engine_->state_cache();
    EngineLoad l;
    l.n_state_slots = cache.num_slots();
    l.n_state_slots_used = cache.num_slots() - cache.num_free_slots();
    for (int64_t g = 0; g < cache.n_groups(); ++g) {
      if (cache.num_blocks(g) > 0) {
        l.max_block_usage = std::max(l.max_block_usage, 1.0 - double(cache.num_free(g)) / double(cache.num_blocks(g)));
      }
    }
    const EngineStats& s = engine_->stats();
    l.n_preemptions = s.n_preemptions;
    l.prefix_cache_block_tokens = s.prefix_cache_block_tokens;
    l.prefix_cache_queries = s.prefix_cache_queries;
    l.prefix_cache_hits = s.prefix_cache_hits;
    l.prefix_cache_lookup_tokens = s.prefix_cache_lookup_tokens;
    l.prefix_cache_query_tokens = s.prefix_cache_query_tokens;
    l.prefix_cache_hit_tokens = s.prefix_cache_hit_tokens;
    l.prefix_cache_entries = s.prefix_cache_blocks;
    l.prefix_cache_pinned = s.prefix_cache_pinned;
    l.prefix_cache_bytes = s.prefix_cache_bytes;
    l.prefix_cache_evictions = s.prefix_cache_evictions;
    return l;
  }

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace

std::unique_ptr<StepEngine> make_step_engine(std::unique_ptr<Engine> engine) {
  return std::make_unique<EngineAdapter>(std::move(engine));
}

}  // namespace deepinfer
