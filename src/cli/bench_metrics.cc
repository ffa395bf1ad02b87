#include "cli/bench_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer {

Slo parse_slo(const std::vector<std::string>& items) {
  Slo slo;
  for (const std::string& item : items) {
    std::stringstream ss(item);
    std::string part;
    while (std::getline(ss, part, ',')) {
      if (part.empty()) continue;
      const size_t colon = part.find(':');
      CHECK(colon != std::string::npos) << "--goodput: '" << part << "' is not METRIC:MS (e.g. ttft:500)";
      const std::string name = part.substr(0, colon), value = part.substr(colon + 1);
      double ms = 0;
      try {
        size_t used = 0;
        ms = std::stod(value, &used);
        CHECK(used == value.size()) << "--goodput: '" << value << "' is not a number of ms";
      } catch (const std::logic_error&) {
        THROW(kInvalidInput) << "--goodput: '" << value << "' is not a number of ms";
      }
      CHECK(ms >= 0) << "--goodput: " << name << " must be >= 0 ms";
      if (name == "ttft") {
        slo.ttft_ms = ms;
      } else if (name == "tpot") {
        slo.tpot_ms = ms;
      } else if (name == "e2el") {
        slo.e2el_ms = ms;
      } else {
        THROW(kInvalidInput) << "--goodput: unknown metric '" << name << "' (ttft, tpot or e2el)";
      }
    }
  }
  return slo;
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(values.size() - 1, lo + 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

Stat stat_of(const std::vector<double>& values) {
  Stat s;
  if (values.empty()) return s;
  for (double v : values) s.mean += v;
  s.mean /= static_cast<double>(values.size());
  s.median = percentile(values, 50);
  s.p99 = percentile(values, 99);
  return s;
}

namespace {

double tpot_of(const RequestRecord& r) {
  return r.n_output_tokens > 1 ? (r.e2el_s - r.ttft_s) / static_cast<double>(r.n_output_tokens - 1) : 0.0;
}

bool meets(const RequestRecord& r, const Slo& slo) {
  if (slo.ttft_ms && r.ttft_s * 1e3 > *slo.ttft_ms) return false;
  if (slo.tpot_ms && tpot_of(r) * 1e3 > *slo.tpot_ms) return false;
  if (slo.e2el_ms && r.e2el_s * 1e3 > *slo.e2el_ms) return false;
  return true;
}

}  // namespace

BenchSummary summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo) {
  BenchSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t good = 0;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      if (s.n_failed++ == 0) s.first_error = r.error;
      continue;
    }
    ++s.n_completed;
    s.total_input_tokens += r.n_prompt_tokens;
    s.total_output_tokens += r.n_output_tokens;
    ttft.push_back(r.ttft_s);
    e2el.push_back(r.e2el_s);
    if (r.n_output_tokens > 1) tpot.push_back(tpot_of(r));
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    if (meets(r, slo)) ++good;
  }
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.n_completed) / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput = static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    if (slo.any()) s.goodput = static_cast<double>(good) / duration_s;
  }
  s.ttft = stat_of(ttft);
  s.tpot = stat_of(tpot);
  s.itl = stat_of(itl);
  s.e2el = stat_of(e2el);
  return s;
}

namespace {

void line(std::ostringstream& o, const char* name, double v, const char* fmt = "%.2f") {
  char value[64];
  std::snprintf(value, sizeof(value), fmt, v);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-40s %-10s\n", name, value);
  o << buf;
}

void heading(std::ostringstream& o, const std::string& title) {
  const size_t width = 50, pad = width > title.size() ? width - title.size() : 0;
  o << std::string(pad / 2, '-') << title << std::string(pad - pad / 2, '-') << "\n";
}

void latency(std::ostringstream& o, const std::string& title, const std::string& name, const Stat& s) {
  heading(o, title);
  line(o, ("Mean " + name + " (ms):").c_str(), s.mean * 1e3);
  line(o, ("Median " + name + " (ms):").c_str(), s.median * 1e3);
  line(o, ("P99 " + name + " (ms):").c_str(), s.p99 * 1e3);
}

}  // namespace

std::string format_summary(const BenchSummary& s, const std::string& backend) {
  std::ostringstream o;
  o << "============ Serving Benchmark Result ============\n";
  o << "Backend:                                 " << backend << "\n";
  o << "Traffic:                                 " << s.label << "\n";
  line(o, "Successful requests:", static_cast<double>(s.n_completed), "%.0f");
  if (s.n_failed > 0) line(o, "Failed requests:", static_cast<double>(s.n_failed), "%.0f");
  line(o, "Benchmark duration (s):", s.duration_s);
  line(o, "Total input tokens:", static_cast<double>(s.total_input_tokens), "%.0f");
  line(o, "Total generated tokens:", static_cast<double>(s.total_output_tokens), "%.0f");
  line(o, "Request throughput (req/s):", s.request_throughput);
  if (s.goodput) line(o, "Request goodput (req/s):", *s.goodput);
  line(o, "Output token throughput (tok/s):", s.output_throughput);
  line(o, "Total Token throughput (tok/s):", s.total_token_throughput);
  latency(o, "Time to First Token", "TTFT", s.ttft);
  latency(o, "Time per Output Token (excl. 1st token)", "TPOT", s.tpot);
  latency(o, "Inter-token Latency", "ITL", s.itl);
  latency(o, "End-to-end Latency", "E2EL", s.e2el);
  o << "==================================================\n";
  if (!s.first_error.empty()) o << "First failure: " << s.first_error << "\n";
  return o.str();
}

namespace {

std::string msd(const Stat& s) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.1f / %.1f / %.1f", s.mean * 1e3, s.median * 1e3, s.p99 * 1e3);
  return buf;
}

}  // namespace

std::string markdown_table(const std::vector<BenchSummary>& runs) {
  std::ostringstream o;
  o << "| traffic | ok/failed | duration s | req/s | out tok/s | total tok/s | TTFT ms mean / median / p99 | "
       "TPOT ms | ITL ms | E2EL ms | goodput req/s |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const BenchSummary& s : runs) {
    char head[256];
    std::snprintf(head, sizeof(head), "| %s | %lld/%lld | %.2f | %.2f | %.1f | %.1f | ", s.label.c_str(),
                  static_cast<long long>(s.n_completed), static_cast<long long>(s.n_failed), s.duration_s,
                  s.request_throughput, s.output_throughput, s.total_token_throughput);
    char goodput[32] = "-";
    if (s.goodput) std::snprintf(goodput, sizeof(goodput), "%.2f", *s.goodput);
    o << head << msd(s.ttft) << " | " << msd(s.tpot) << " | " << msd(s.itl) << " | " << msd(s.e2el) << " | "
      << goodput << " |\n";
  }
  return o.str();
}

std::string csv_table(const std::vector<BenchSummary>& runs) {
  std::ostringstream o;
  o << "concurrency,request_rate,label,out_tok_s_per_device,tok_s_per_user,ttft_p50_s,tpot_s,"
       "completed,failed,duration_s,request_throughput,total_token_throughput,goodput,"
       "ttft_mean_s,ttft_p99_s,tpot_p50_s,tpot_p99_s,itl_mean_s,itl_p50_s,itl_p99_s,"
       "e2el_mean_s,e2el_p50_s,e2el_p99_s\n";
  for (const BenchSummary& s : runs) {
    o << s.max_concurrency << "," << s.request_rate << ",\"" << s.label << "\"," << s.output_throughput << ","
      << (s.tpot.mean > 0 ? 1.0 / s.tpot.mean : 0.0) << "," << s.ttft.median << "," << s.tpot.mean << ","
      << s.n_completed << "," << s.n_failed << "," << s.duration_s << "," << s.request_throughput << ","
      << s.total_token_throughput << "," << (s.goodput ? std::to_string(*s.goodput) : "") << ","
      << s.ttft.mean << "," << s.ttft.p99 << "," << s.tpot.median << "," << s.tpot.p99 << "," << s.itl.mean
      << "," << s.itl.median << "," << s.itl.p99 << "," << s.e2el.mean << "," << s.e2el.median << ","
      << s.e2el.p99 << "\n";
  }
  return o.str();
}

std::string summary_json(const BenchSummary& s, const std::vector<RequestRecord>& records) {
  nlohmann::json j = {{"label", s.label},
                      {"max_concurrency", s.max_concurrency},
                      {"duration", s.duration_s},
                      {"completed", s.n_completed},
                      {"failed", s.n_failed},
                      {"total_input_tokens", s.total_input_tokens},
                      {"total_output_tokens", s.total_output_tokens},
                      {"request_throughput", s.request_throughput},
                      {"output_throughput", s.output_throughput},
                      {"total_token_throughput", s.total_token_throughput}};
  // inf is not JSON: an unbounded rate is written as null.
  j["request_rate"] = std::isinf(s.request_rate) ? nlohmann::json() : nlohmann::json(s.request_rate);
  j["request_goodput"] = s.goodput ? nlohmann::json(*s.goodput) : nlohmann::json();
  for (auto [name, stat] : {std::pair<const char*, const Stat*>{"ttft", &s.ttft}, {"tpot", &s.tpot},
                            {"itl", &s.itl}, {"e2el", &s.e2el}}) {
    j[std::string("mean_") + name + "_ms"] = stat->mean * 1e3;
    j[std::string("median_") + name + "_ms"] = stat->median * 1e3;
    j[std::string("p99_") + name + "_ms"] = stat->p99 * 1e3;
  }
  nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(),
                 ttfts = nlohmann::json::array(), e2els = nlohmann::json::array(), itls = nlohmann::json::array(),
                 errors = nlohmann::json::array();
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      errors.push_back(r.error);
      continue;
    }
    input_lens.push_back(r.n_prompt_tokens);
    output_lens.push_back(r.n_output_tokens);
    ttfts.push_back(r.ttft_s);
    e2els.push_back(r.e2el_s);
    itls.push_back(r.itl_s);
  }
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["ttfts"] = ttfts;
  j["e2els"] = e2els;
  j["itls"] = itls;
  j["errors"] = errors;
  return j.dump();
}

}  // namespace deepinfer
