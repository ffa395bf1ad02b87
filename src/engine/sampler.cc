#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <unordered_map>

#include "base/error.h"

namespace deepinfer {

void SamplingParams::validate() const {
  CHECK(std::isfinite(temperature) && temperature >= 0.0f) << "temperature must be >= 0, got " << temperature;
  CHECK(top_k >= 0) << "top_k must be >= 0, got " << top_k;
  CHECK(top_p > 0.0f && top_p <= 1.0f) << "top_p must be in (0, 1], got " << top_p;
  CHECK(min_p >= 0.0f && min_p <= 1.0f) << "min_p must be in [0, 1], got " << min_p;
  CHECK(repetition_penalty > 0.0f) << "repetition_penalty must be > 0, got " << repetition_penalty;
  CHECK(std::abs(presence_penalty) <= 2.0f) << "presence_penalty must be in [-2, 2]";
  CHECK(std::abs(frequency_penalty) <= 2.0f) << "frequency_penalty must be in [-2, 2]";
  CHECK(max_tokens >= 1) << "max_tokens must be >= 1, got " << max_tokens;
  CHECK(min_tokens >= 0 && min_tokens <= max_tokens) << "min_tokens must be in [0, max_tokens]";
  CHECK(std::isfinite(closing_bias) && closing_bias >= -100.0f && closing_bias <= 100.0f)
      << "closing_bias must be in [-100, 100], got " << closing_bias;
  for (const auto& [token, bias] : logit_bias) {
    CHECK(token >= 0) << "logit_bias token id must be >= 0, got " << token;
    CHECK(std::isfinite(bias) && bias >= -100.0f && bias <= 100.0f)
        << "logit_bias of token " << token << " must be in [-100, 100], got " << bias;
  }
}

double sample_uniform(uint64_t seed, int64_t position) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(position) * 0xd1b54a32d192ed03ull +
               0x2545f4914f6cdd1dull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

void apply_penalties(std::span<float> logits, const SamplingParams& p,
                     std::span<const int32_t> history) {
  for (const auto& [token, bias] : p.logit_bias) {
    if (token >= 0 && static_cast<size_t>(token) < logits.size()) logits[token] += bias;
  }
  if (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  std::unordered_map<int32_t, int> counts;
  for (int32_t t : history) ++counts[t];
  for (const auto& [token, count] : counts) {
    if (token < 0 || static_cast<size_t>(token) >= logits.size()) continue;
    float& l = logits[token];
    if (p.repetition_penalty != 1.0f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
  }
}

namespace {

// Key whose ascending order is (logit descending, id ascending): the logit's bits mapped to an
// unsigned order (-0 counts as +0, as the float comparison does) and inverted, above the id.
inline uint64_t candidate_key(float logit, int32_t id) {
  uint32_t b;
  std::memcpy(&b, &logit, sizeof(b));
  if (logit == 0.0f) b = 0;
  const uint32_t ascending = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(id);
}

// The logit of a key (a -0 logit comes back as +0, which gives the same probability).
inline float key_logit(uint64_t key) {
  const uint32_t ascending = ~static_cast<uint32_t>(key >> 32);
  const uint32_t b = (ascending & 0x80000000u) ? (ascending & 0x7fffffffu) : ~ascending;
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

// The ids of the first k (0: all) candidates (logit > -inf) in (logit desc, id asc) order. The
// order is a strict total order, so any correct sort gives the same sequence; a full order uses
// a stable LSD radix sort on the logit half of the key (ids go in ascending, which settles
// ties), a short top-k a partial sort of the keys. Fills per-thread buffers: the ids and their
// logits in that order (read from the keys, so the caller never gathers from the vocabulary).
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<float> logits;
};
const Candidates& ordered_candidates(std::span<const float> logits, int64_t top_k) {
  thread_local std::vector<uint64_t> keys, tmp;
  thread_local Candidates out;
  keys.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > -INFINITY) keys.push_back(candidate_key(logits[i], static_cast<int32_t>(i)));
  }
  const size_t n = keys.size();
  const size_t k = top_k > 0 ? std::min(static_cast<size_t>(top_k), n) : n;
  if (k * 16 < n) {
    std::partial_sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k), keys.end());
  } else if (n > 1) {
    tmp.resize(n);
    // Three passes of 11, 11 and 10 bits over the logit half (bits 32..63).
    constexpr int kBits = 11;
    constexpr uint64_t kDigits = uint64_t(1) << kBits;
    for (int shift = 32; shift < 64; shift += kBits) {
      size_t count[kDigits + 1] = {};
      for (uint64_t key : keys) ++count[((key >> shift) & (kDigits - 1)) + 1];
      if (count[((keys[0] >> shift) & (kDigits - 1)) + 1] == n) continue;  // one digit: no change
      for (uint64_t d = 0; d < kDigits; ++d) count[d + 1] += count[d];
      for (uint64_t key : keys) tmp[count[(key >> shift) & (kDigits - 1)]++] = key;
      keys.swap(tmp);
    }
  }
  out.ids.resize(k);
  out.logits.resize(k);
  for (size_t i = 0; i < k; ++i) {
    out.ids[i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
    out.logits[i] = key_logit(keys[i]);
  }
  return out;
}

}  // namespace

namespace {

// The candidates a non-greedy draw chooses from and their probabilities before the final
// renormalisation: temperature softmax over ordered_candidates(top_k), then min_p and top_p
// cuts (at least one kept). Fills `probs` with the first `keep` probabilities (normalised
// over all k candidates) and returns keep; 0 when every token is masked. sample_token and
// token_distribution share it, so the distribution is exactly the one drawn from.
int64_t kept_probabilities(const Candidates& c, const SamplingParams& p, std::vector<double>& probs) {
  const int64_t k = static_cast<int64_t>(c.ids.size());
  if (k == 0) return 0;
  const float mx = c.logits[0];
  probs.resize(static_cast<size_t>(k));
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    probs[i] = std::exp((static_cast<double>(c.logits[i]) - mx) / p.temperature);
    total += probs[i];
  }
  int64_t keep = k;
  for (int64_t i = 0; i < k; ++i) {
    probs[i] /= total;
    if (p.min_p > 0.0f && probs[i] < p.min_p * probs[0]) keep = std::min(keep, i);
  }
  double cum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += probs[i];
    if (cum >= p.top_p) {
      keep = i + 1;
      break;
    }
  }
  keep = std::max<int64_t>(keep, 1);
  probs.resize(static_cast<size_t>(keep));
  return keep;
}

}  // namespace

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, int64_t position) {
  const int64_t n = static_cast<int64_t>(logits.size());
  ICHECK(n > 0);
  if (p.temperature == 0.0f || p.top_k == 1) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates ordered by (logit desc, id asc), the first k kept. Tokens with logit -inf
  // (masked by a grammar, EOS before min_tokens) have probability 0 and can never be drawn,
  // so they are left out: a grammar mask that allows a few hundred tokens then costs a few
  // hundred keys instead of the vocabulary.
  const Candidates& c = ordered_candidates(logits, p.top_k);
  thread_local std::vector<double> probs;
  const int64_t keep = kept_probabilities(c, p, probs);
  if (keep == 0) return 0;  // nothing can be drawn; callers never mask every token
  double mass = 0.0;
  for (int64_t i = 0; i < keep; ++i) mass += probs[i];
  const double u = sample_uniform(p.seed, position) * mass;
  double acc = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return c.ids[i];
  }
  return c.ids[keep - 1];
}

void token_distribution(std::span<const float> logits, const SamplingParams& p, TokenDistribution& out) {
  out.ids.clear();
  out.probs.clear();
  ICHECK(!logits.empty());
  if (p.temperature == 0.0f || p.top_k == 1) {
    out.ids.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    out.probs.push_back(1.0);
    return;
  }
  const Candidates& c = ordered_candidates(logits, p.top_k);
  const int64_t keep = kept_probabilities(c, p, out.probs);
  if (keep == 0) return;
  double mass = 0.0;
  for (double q : out.probs) mass += q;
  for (double& q : out.probs) q /= mass;
  out.ids.assign(c.ids.begin(), c.ids.begin() + keep);
}

int32_t sample_row_request(std::span<const float> logits, const RowRequest& row) {
  SamplingParams p;
  p.temperature = row.temperature;
  p.top_k = row.top_k;
  p.top_p = row.top_p;
  p.min_p = row.min_p;
  p.seed = row.seed;
  return sample_token(logits, p, row.position);
}

}  // namespace deepinfer
