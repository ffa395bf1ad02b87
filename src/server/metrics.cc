#include "server/metrics.h"

#include "server/spec_metrics.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace deepinfer::server {
namespace {

const std::vector<double> kDeepinferBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
// vLLM's buckets (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0, 15.0, 20.0,
                                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// 1, 2, 5, 10, 20, 50, ... up to `max_value` (vLLM's build_1_2_5_buckets).
std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> b;
  for (int64_t scale = 1; scale <= max_value && scale <= INT64_MAX / 10; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale <= max_value) b.push_back(static_cast<double>(m * scale));
    }
  }
  return b;
}

// A Prometheus label value: backslash, quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// vLLM's finished_reason for one of our finish reasons ("" for none: not a success).
std::string vllm_finish_reason(const std::string& reason) {
  if (reason == "stop" || reason == "tool_calls") return "stop";
  if (reason == "length" || reason == "abort") return reason;
  return "";
}

// Automatic prefix caching's lines (metrics.h), ours and vLLM's; all 0 while caching is off.
std::string prefix_cache_metrics(const EngineLoad& e, const std::string& labels) {
  std::ostringstream s;
  auto line = [&](const char* name, const char* type, const char* help, auto value, const std::string& lab) {
    s << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << (lab.empty() ? "" : "{" + lab + "}") << " " << value << "\n";
  };
  const double rate = e.prefix_cache_query_tokens > 0
                          ? double(e.prefix_cache_hit_tokens) / double(e.prefix_cache_query_tokens)
                          : 0.0;
  line("deepinfer_prefix_cache_block_tokens", "gauge", "Tokens per cached prefix block (0: caching off).",
       e.prefix_cache_block_tokens, "");
  line("deepinfer_prefix_cache_queries_total", "counter", "Prefix-cache lookups (request admissions).",
       e.prefix_cache_queries, "");
  line("deepinfer_prefix_cache_hits_total", "counter", "Lookups that hit at least one block.",
       e.prefix_cache_hits, "");
  line("deepinfer_prefix_cache_lookup_tokens_total", "counter", "Tokens of the requests looked up.",
       e.prefix_cache_lookup_tokens, "");
  line("deepinfer_prefix_cache_query_tokens_total", "counter",
       "Tokens the lookups could have hit (their full blocks before the last token).",
       e.prefix_cache_query_tokens, "");
  line("deepinfer_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
       e.prefix_cache_hit_tokens, "");
  line("deepinfer_prefix_cache_hit_rate", "gauge",
       "Hit tokens / query tokens since start (1: every full block that could hit did).", rate, "");
  line("deepinfer_prefix_cache_blocks", "gauge", "Cached block boundaries (entries) now.", e.prefix_cache_entries,
       "");
  line("deepinfer_prefix_cache_blocks_in_use", "gauge", "Cached entries held by admitted requests' hits now.",
       e.prefix_cache_pinned, "");
  line("deepinfer_prefix_cache_bytes", "gauge", "Host memory the cached entries hold.", e.prefix_cache_bytes, "");
  line("deepinfer_prefix_cache_evicted_blocks_total", "counter", "Cached entries evicted (least recently used).",
       e.prefix_cache_evictions, "");
  line("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
       e.prefix_cache_lookup_tokens, labels);
  line("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
       e.prefix_cache_hit_tokens, labels);
  return s.str();
}

}  // namespace

Metrics::Histogram::Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}

void Metrics::Histogram::add(double x) {
  const auto it = std::lower_bound(bounds.begin(), bounds.end(), x);  // first bound >= x: le is inclusive
  if (it != bounds.end()) ++counts[it - bounds.begin()];
  ++count;
  sum += x;
}

Metrics::Metrics()
    : ttft_(kDeepinferBuckets), tpot_(kDeepinferBuckets), e2e_(kDeepinferBuckets), vllm_ttft_(kTtftBuckets),
      vllm_itl_(kTokenLatencyBuckets), vllm_tpot_(kTokenLatencyBuckets), vllm_e2e_(kRequestLatencyBuckets) {
  configure("deepinfer", 1 << 20);
}

void Metrics::configure(const std::string& model_name, int64_t max_model_len) {
  std::lock_guard<std::mutex> lock(mu_);
  labels_ = "model_name=\"" + label_value(model_name) + "\",engine=\"0\"";
  vllm_prompt_ = Histogram(buckets_1_2_5(std::max<int64_t>(1, max_model_len)));
  vllm_generation_ = Histogram(buckets_1_2_5(std::max<int64_t>(1, max_model_len)));
}

void Metrics::observe(const RequestRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{r.endpoint, r.status}];
  prompt_tokens_ += r.prompt_tokens;
  generation_tokens_ += r.completion_tokens;
  if (r.ttft_seconds >= 0) {
    ttft_.add(r.ttft_seconds);
    vllm_ttft_.add(r.ttft_seconds);
  }
  if (r.ttft_seconds >= 0 && r.completion_tokens > 1) {
    const double tpot = (r.e2e_seconds - r.ttft_seconds) / static_cast<double>(r.completion_tokens - 1);
    tpot_.add(tpot);
    vllm_tpot_.add(tpot);
  }
  for (double gap : r.inter_token_seconds) vllm_itl_.add(gap);
  if (r.completion_tokens > 0 || r.prompt_tokens > 0) {
    e2e_.add(r.e2e_seconds);
    vllm_e2e_.add(r.e2e_seconds);
    vllm_prompt_.add(static_cast<double>(r.prompt_tokens));
    vllm_generation_.add(static_cast<double>(r.completion_tokens));
  }
  for (const std::string& reason : r.finish_reasons) {
    const std::string v = vllm_finish_reason(reason);
    if (!v.empty()) ++successes_[v];
  }
}

void Metrics::render_histogram(std::string& out, const std::string& name, const char* help, const Histogram& h,
                               const std::string& labels) {
  std::ostringstream s;
  const std::string sep = labels.empty() ? "" : labels + ",";
  const std::string plain = labels.empty() ? "" : "{" + labels + "}";
  s << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  int64_t cumulative = 0;
  for (size_t b = 0; b < h.bounds.size(); ++b) {
    cumulative += h.counts[b];
    s << name << "_bucket{" << sep << "le=\"" << h.bounds[b] << "\"} " << cumulative << "\n";
  }
  s << name << "_bucket{" << sep << "le=\"+Inf\"} " << h.count << "\n";
  s << name << "_sum" << plain << " " << h.sum << "\n" << name << "_count" << plain << " " << h.count << "\n";
  out += s.str();
}

std::string Metrics::render(const AsyncEngineStats& engine, const SpecDecodeCounters* spec) const {
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

  // vLLM's names (metrics.h).
  std::ostringstream v;
  const std::string& l = labels_;
  const int64_t running = engine.load.n_state_slots_used;
  const int64_t waiting = std::max<int64_t>(0, engine.n_live - running);
  auto gauge = [&](const char* name, const char* help, auto value) {
    v << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << "{" << l << "} "
      << value << "\n";
  };
  auto counter = [&](const char* name, const char* help, int64_t value) {
    v << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << "{" << l << "} "
      << value << "\n";
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running);
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting);
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engine.load.max_block_usage);
  gauge("vllm:gpu_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage (older name).",
        engine.load.max_block_usage);
  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", prompt_tokens_);
  counter("vllm:generation_tokens_total", "Number of generation tokens processed.", engine.n_output_tokens);
  counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", engine.load.n_preemptions);
  v << "# HELP vllm:request_success_total Count of successfully processed requests.\n"
    << "# TYPE vllm:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort"}) {
    const auto it = successes_.find(reason);
    v << "vllm:request_success_total{" << l << ",finished_reason=\"" << reason << "\"} "
      << (it == successes_.end() ? 0 : it->second) << "\n";
  }
  out += v.str();
  render_histogram(out, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                   vllm_ttft_, l);
  render_histogram(out, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                   vllm_itl_, l);
  render_histogram(out, "vllm:time_per_output_token_seconds",
                   "Histogram of time per output token in seconds (older name of the inter-token latency).",
                   vllm_itl_, l);
  render_histogram(out, "vllm:request_time_per_output_token_seconds",
                   "Histogram of time_per_output_token_seconds per request.", vllm_tpot_, l);
  render_histogram(out, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                   vllm_e2e_, l);
  render_histogram(out, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", vllm_prompt_, l);
  render_histogram(out, "vllm:request_generation_tokens", "Number of generation tokens processed.",
                   vllm_generation_, l);
  out += prefix_cache_metrics(engine.load, l);
  if (spec != nullptr) out += render_spec_metrics(*spec, l);
  return out;
}

}  // namespace deepinfer::server
