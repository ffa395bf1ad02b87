#include "grammar/budget.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer::grammar {
namespace {
thread_local CompileBudget* t_budget = nullptr;
}  // namespace

CompileBudget::CompileBudget(const CompileLimits& limits, std::string what)
    : limits_(limits), what_(std::move(what)), start_(std::chrono::steady_clock::now()) {}

void CompileBudget::add_states(int64_t n) {
  states_ += n;
  CHECK_KIND(kResourceExhausted, limits_.max_states <= 0 || states_ <= limits_.max_states)
      << what_ << " is too complex to compile: it needs more than " << limits_.max_states
      << " automaton states (the grammar states budget, grammar_max_states)";
  tick();
}

void CompileBudget::add_bytes(int64_t n) {
  live_bytes_ += n;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  CHECK_KIND(kResourceExhausted, limits_.max_memory_bytes <= 0 || live_bytes_ <= limits_.max_memory_bytes)
      << what_ << " is too complex to compile: it needs more than "
      << (limits_.max_memory_bytes >> 20) << " MiB of automata (the grammar memory budget, "
      << "grammar_max_memory_mb)";
  tick();
}

void CompileBudget::check_time() {
  if (limits_.timeout_ms <= 0) return;
  const auto elapsed = std::chrono::steady_clock::now() - start_;
  CHECK_KIND(kResourceExhausted, elapsed <= std::chrono::milliseconds(limits_.timeout_ms))
      << what_ << " is too complex to compile: it took more than " << limits_.timeout_ms
      << " ms (the grammar time budget, grammar_timeout_ms)";
}

CompileUsage CompileBudget::usage() const {
  CompileUsage u;
  u.states = states_;
  u.peak_bytes = peak_bytes_;
  u.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  return u;
}

CompileBudget* active_budget() { return t_budget; }

BudgetScope::BudgetScope(const CompileLimits& limits, std::string what) {
  if (t_budget) return;
  own_ = std::make_unique<CompileBudget>(limits, std::move(what));
  t_budget = own_.get();
}

BudgetScope::~BudgetScope() {
  if (!own_) return;
  t_budget = nullptr;
}

}  // namespace deepinfer::grammar
