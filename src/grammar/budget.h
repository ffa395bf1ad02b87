// Compilation budgets: a constraint's compilation stops as soon as it has built more automaton
// states, holds more bytes of automata and construction tables, or has run longer than its
// limits allow. The checks sit inside the loops that can blow up (NFA expansion of counted
// repetition, subset construction, products, counter automata, minimisation, rule lowering,
// the grammar analyses and the first token walk), so a hostile 28-byte regex is refused after
// bounded work instead of after a minute and gigabytes.
//
//   CompileLimits limits{.max_states = 1000000, .max_memory_bytes = 256 << 20, .timeout_ms = 2000};
//   BudgetScope scope(limits, "the regex");   // compile_grammar / build_grammar do this
//   ... budget_states(n); budget_tick(); ScopedBytes work(n_bytes); ...
//
// What counts:
//   states: every automaton state built during the compilation, intermediate ones included
//           (NFA states, subset-construction states, product and counter states, grammar rules
//           and elements), i.e. a bound on the work, not on the result's size;
//   memory: the bytes of the automata and construction tables alive at once (NFA edges, subset
//           sets and their index, wide transition tables, the grammar's automata), approximate
//           but counted before the allocation it describes;
//   time:   wall time since the scope began, read every kTickStride ticks.
// A limit <= 0 disables that check. Exceeding one throws Error kResourceExhausted whose message
// names the budget and its setting (the server answers 400 with it).
// Thread-safety: the active budget is per thread (a compilation runs on one thread); with no
// scope active every helper is a no-op, so matchers at serving time pay one thread-local load.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace deepinfer::grammar {

struct CompileLimits {
  int64_t max_states = 1000000;
  int64_t max_memory_bytes = int64_t{256} << 20;
  int64_t timeout_ms = 2000;
  static CompileLimits unlimited() { return {0, 0, 0}; }
};

// What a compilation used (for tests, benchmarks and choosing defaults).
struct CompileUsage {
  int64_t states = 0;
  int64_t peak_bytes = 0;
  double elapsed_ms = 0.0;
};

class CompileBudget {
 public:
  CompileBudget(const CompileLimits& limits, std::string what);
  void add_states(int64_t n);
  void add_bytes(int64_t n);
  void sub_bytes(int64_t n) { live_bytes_ -= n; }
  void tick() {
    if (++ticks_ % kTickStride == 0) check_time();
  }
  void check_time();
  CompileUsage usage() const;
  const CompileLimits& limits() const { return limits_; }

  static constexpr int64_t kTickStride = 256;

 private:
  CompileLimits limits_;
  std::string what_;
  std::chrono::steady_clock::time_point start_;
  int64_t states_ = 0;
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t ticks_ = 0;
};

// The budget of the compilation running on this thread, or null.
CompileBudget* active_budget();

// Installs a budget for this thread for the scope's lifetime (nested scopes: the outer one
// stays in force, the inner scope does nothing, so one request has one budget).
class BudgetScope {
 public:
  BudgetScope(const CompileLimits& limits, std::string what);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;
  // The budget in force (this scope's, or the enclosing one's).
  CompileBudget& budget() { return *active_budget(); }

 private:
  std::unique_ptr<CompileBudget> own_;
};

inline void budget_states(int64_t n) {
  if (CompileBudget* b = active_budget()) b->add_states(n);
}
inline void budget_tick() {
  if (CompileBudget* b = active_budget()) b->tick();
}

// Bytes charged while the object lives (construction tables); grow() charges more.
class ScopedBytes {
 public:
  explicit ScopedBytes(int64_t n = 0) : budget_(active_budget()) { grow(n); }
  ~ScopedBytes() {
    if (budget_) budget_->sub_bytes(bytes_);
  }
  ScopedBytes(const ScopedBytes&) = delete;
  ScopedBytes& operator=(const ScopedBytes&) = delete;
  void grow(int64_t n) {
    if (!budget_ || n == 0) return;
    bytes_ += n;
    budget_->add_bytes(n);
  }
  // Keeps the bytes charged after this object goes (they moved into a result that stays).
  void keep() { bytes_ = 0; }

 private:
  CompileBudget* budget_;
  int64_t bytes_ = 0;
};

}  // namespace deepinfer::grammar
