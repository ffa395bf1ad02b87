#include "server/spec_metrics.h"

#include <sstream>

namespace deepinfer::server {

SpecDecodeCounters spec_counters(const EngineStats& stats) {
  SpecDecodeCounters c;
  c.num_speculative_tokens = static_cast<int64_t>(stats.accepted_at.size());
  c.verifications = stats.n_verifications;
  c.draft_tokens = stats.n_drafts_verified;
  c.accepted_tokens = stats.n_drafts_accepted;
  c.verified_at = stats.verified_at;
  c.accepted_at = stats.accepted_at;
  c.verify_steps = stats.n_verify_steps;
  c.verified_tokens = stats.n_verified_tokens;
  c.draft_seconds = stats.draft_seconds;
  return c;
}

namespace {

class SpecStatsTap final : public StepEngine {
 public:
  SpecStatsTap(std::unique_ptr<Engine> engine, std::shared_ptr<SpecStatsBoard> board)
      : engine_(engine.get()), inner_(make_step_engine(std::move(engine))), board_(std::move(board)) {
    board_->set(spec_counters(engine_->stats()));
  }
  void add_request(EngineRequest request) override { inner_->add_request(std::move(request)); }
  bool abort(const std::string& id) override { return inner_->abort(id); }
  std::vector<RequestOutput> step() override {
    std::vector<RequestOutput> out = inner_->step();
    board_->set(spec_counters(engine_->stats()));
    return out;
  }
  bool has_unfinished() const override { return inner_->has_unfinished(); }
  EngineLoad load() const override { return inner_->load(); }
  std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(const std::string& kind,
                                                                     const std::string& text) override {
    return inner_->compile_constraint(kind, text);
  }

 private:
  const Engine* engine_;  // owned by inner_
  std::unique_ptr<StepEngine> inner_;
  std::shared_ptr<SpecStatsBoard> board_;
};

}  // namespace

std::unique_ptr<StepEngine> make_spec_stats_tap(std::unique_ptr<Engine> engine, std::shared_ptr<SpecStatsBoard> board) {
  return std::make_unique<SpecStatsTap>(std::move(engine), std::move(board));
}

std::string render_spec_metrics(const SpecDecodeCounters& c, const std::string& labels) {
  if (c.num_speculative_tokens == 0) return "";
  std::ostringstream s;
  auto head = [&](const std::string& name, const char* type, const char* help) {
    s << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  auto plain = [&](const std::string& name, const char* type, const char* help, auto value) {
    head(name, type, help);
    s << name << " " << value << "\n";
  };
  auto per_pos = [&](const std::string& name, const char* help, const std::vector<int64_t>& v,
                     const std::string& lab) {
    head(name, "counter", help);
    for (size_t i = 0; i < v.size(); ++i) {
      s << name << "{" << lab << (lab.empty() ? "" : ",") << "position=\"" << i << "\"} " << v[i] << "\n";
    }
  };
  plain("deepinfer_spec_num_speculative_tokens", "gauge", "Drafts per verification (k).", c.num_speculative_tokens);
  plain("deepinfer_spec_verifications_total", "counter", "Verifications (one request's [y, drafts] chunk).",
        c.verifications);
  plain("deepinfer_spec_draft_tokens_total", "counter", "Draft tokens verified.", c.draft_tokens);
  plain("deepinfer_spec_accepted_tokens_total", "counter", "Draft tokens accepted.", c.accepted_tokens);
  per_pos("deepinfer_spec_verified_per_pos_total", "Verifications that carried draft i.", c.verified_at, "");
  per_pos("deepinfer_spec_accepted_tokens_per_pos_total", "Verifications that accepted draft i.", c.accepted_at, "");
  plain("deepinfer_spec_verify_steps_total", "counter", "Engine steps with at least one verification.",
        c.verify_steps);
  plain("deepinfer_spec_verified_tokens_total", "counter", "Tokens of the verification chunks in those steps.",
        c.verified_tokens);
  plain("deepinfer_spec_draft_seconds_total", "counter", "Time spent drafting.", c.draft_seconds);
  auto counter = [&](const char* name, const char* help, int64_t value) {
    head(name, "counter", help);
    s << name << "{" << labels << "} " << value << "\n";
  };
  counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", c.verifications);
  counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", c.draft_tokens);
  counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", c.accepted_tokens);
  per_pos("vllm:spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position.",
          c.accepted_at, labels);
  return s.str();
}

}  // namespace deepinfer::server
