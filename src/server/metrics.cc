#include "server/metrics.h"

#include <malloc.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace deepinfer::server {

void Metrics::Histogram::add(double x) {
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    if (x <= kBuckets[b]) {
      ++counts[b];
      break;
    }
  }
  ++count;
  sum += x;
}

void Metrics::observe(const std::string& endpoint, int status, int64_t prompt_tokens,
                      int64_t completion_tokens, double e2e_seconds, double ttft_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += completion_tokens;
  if (ttft_seconds >= 0) ttft_.add(ttft_seconds);
  if (ttft_seconds >= 0 && completion_tokens > 1) {
    tpot_.add((e2e_seconds - ttft_seconds) / static_cast<double>(completion_tokens - 1));
  }
  if (completion_tokens > 0 || prompt_tokens > 0) e2e_.add(e2e_seconds);
}

void Metrics::render_histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  std::ostringstream s;
  s << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  int64_t cumulative = 0;
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    cumulative += h.counts[b];
    s << name << "_bucket{le=\"" << kBuckets[b] << "\"} " << cumulative << "\n";
  }
  s << name << "_bucket{le=\"+Inf\"} " << h.count << "\n";
  s << name << "_sum " << h.sum << "\n" << name << "_count " << h.count << "\n";
  out += s.str();
}

std::string Metrics::render(const AsyncEngineStats& engine) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream s;
  s << "# HELP deepinfer_requests_total HTTP requests by endpoint and status.\n"
    << "# TYPE deepinfer_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    s << "deepinfer_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n
      << "\n";
  }
  s << "# HELP deepinfer_prompt_tokens_total Prompt tokens of finished requests.\n"
    << "# TYPE deepinfer_prompt_tokens_total counter\n"
    << "deepinfer_prompt_tokens_total " << prompt_tokens_ << "\n"
    << "# HELP deepinfer_generation_tokens_total Tokens generated for finished requests.\n"
    << "# TYPE deepinfer_generation_tokens_total counter\n"
    << "deepinfer_generation_tokens_total " << generation_tokens_ << "\n"
    << "# HELP deepinfer_requests_running Engine requests admitted and unfinished.\n"
    << "# TYPE deepinfer_requests_running gauge\n"
    << "deepinfer_requests_running " << engine.n_live << "\n"
    << "# HELP deepinfer_requests_queued Engine requests not yet handed to the engine.\n"
    << "# TYPE deepinfer_requests_queued gauge\n"
    << "deepinfer_requests_queued " << engine.n_queued << "\n"
    << "# HELP deepinfer_engine_steps_total Engine steps run.\n"
    << "# TYPE deepinfer_engine_steps_total counter\n"
    << "deepinfer_engine_steps_total " << engine.n_steps << "\n"
    << "# HELP deepinfer_engine_step_seconds_total Time spent inside engine steps.\n"
    << "# TYPE deepinfer_engine_step_seconds_total counter\n"
    << "deepinfer_engine_step_seconds_total " << engine.step_seconds << "\n"
    << "# HELP deepinfer_engine_output_tokens_total Tokens the engine delivered.\n"
    << "# TYPE deepinfer_engine_output_tokens_total counter\n"
    << "deepinfer_engine_output_tokens_total " << engine.n_output_tokens << "\n"
    << "# HELP deepinfer_state_slots_used Requests holding state-cache slots (after the latest step).\n"
    << "# TYPE deepinfer_state_slots_used gauge\n"
    << "deepinfer_state_slots_used " << engine.load.n_state_slots_used << "\n"
    << "# HELP deepinfer_state_slots Requests the state cache can hold.\n"
    << "# TYPE deepinfer_state_slots gauge\n"
    << "deepinfer_state_slots " << engine.load.n_state_slots << "\n"
    << "# HELP deepinfer_state_block_usage Fullest state-cache block pool, used / total.\n"
    << "# TYPE deepinfer_state_block_usage gauge\n"
    << "deepinfer_state_block_usage " << engine.load.max_block_usage << "\n"
    << "# HELP deepinfer_preemptions_total Requests preempted (state dropped, recomputed).\n"
    << "# TYPE deepinfer_preemptions_total counter\n"
    << "deepinfer_preemptions_total " << engine.load.n_preemptions << "\n";
  // Memory: the resident size, and malloc's own count of the bytes handed out and not freed
  // (mallinfo2: heap chunks in use + mmapped chunks). Resident size also holds free pages not
  // yet trimmed and the threads' caches; the in-use count does not, so a leak shows in it as
  // growth across identical bursts while scheduling noise (when the trim ran) does not.
  int64_t resident_pages = 0;
  {
    std::ifstream statm("/proc/self/statm");
    int64_t size_pages = 0;
    statm >> size_pages >> resident_pages;
  }
  const struct mallinfo2 mi = mallinfo2();
  s << "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
    << "# TYPE process_resident_memory_bytes gauge\n"
    << "process_resident_memory_bytes " << resident_pages * int64_t(sysconf(_SC_PAGESIZE)) << "\n"
    << "# HELP deepinfer_heap_in_use_bytes Bytes malloc has handed out and not had back (all arenas).\n"
    << "# TYPE deepinfer_heap_in_use_bytes gauge\n"
    << "deepinfer_heap_in_use_bytes " << mi.uordblks + mi.hblkhd << "\n"
    << "# HELP deepinfer_heap_free_bytes Free bytes malloc holds (not yet trimmed back to the OS).\n"
    << "# TYPE deepinfer_heap_free_bytes gauge\n"
    << "deepinfer_heap_free_bytes " << mi.fordblks << "\n";
  std::string out = s.str();
  render_histogram(out, "deepinfer_time_to_first_token_seconds", "Time to the first token.", ttft_);
  render_histogram(out, "deepinfer_time_per_output_token_seconds", "Time per output token after the first.", tpot_);
  render_histogram(out, "deepinfer_e2e_request_latency_seconds", "Request latency, end to end.", e2e_);
  return out;
}

}  // namespace deepinfer::server
