// make_step_engine() apart from async_engine.cc so that AsyncEngine links without Engine
// (its tests drive a fake StepEngine).
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

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace

std::unique_ptr<StepEngine> make_step_engine(std::unique_ptr<Engine> engine) {
  return std::make_unique<EngineAdapter>(std::move(engine));
}

}  // namespace deepinfer
