// grammar_walk_profile: cost of one mask-cache entry, the trie walk and the whole compute, for the
// stack tops a random constrained generation meets (for profiling the mask tail with perf).
//
//   grammar_walk_profile [--steps N] [--repeat R] schema.json...
// Per schema: follows up to N uniformly random allowed tokens (seeded by the path, as
// bench_grammar.py does); for every distinct (element, state) top it meets, prints the thread CPU
// time (minimum over R) of the single-top trie walk over the full trie (walk_token_trie), of the
// plain walk (walk_token_trie_plain), and the nodes visited. Thread CPU time leaves out the time
// other processes hold the core, so numbers stay comparable on a loaded machine.
#include <time.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "grammar/compile.h"
#include "grammar/hf_vocab.h"
#include "grammar/token_walk.h"

using namespace deepinfer;
using namespace deepinfer::grammar;

namespace {
double cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}
}  // namespace

int main(int argc, char** argv) {
  int steps = 64, repeat = 3;
  auto vocab = testing::load_hf_vocab(testing::kDeepSeekTokenizer, testing::kDeepSeekVocabSize);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) { steps = std::stoi(argv[++i]); continue; }
    if (a == "--repeat" && i + 1 < argc) { repeat = std::stoi(argv[++i]); continue; }
    std::ifstream in(a);
    std::stringstream ss;
    ss << in.rdbuf();
    auto g = compile_grammar({"json_schema", ss.str()}, vocab);
    GrammarMatcher m(g);
    uint64_t seed = 0;
    for (unsigned char c : a) seed += c;
    std::mt19937_64 rng(seed);
    std::set<std::pair<int32_t, int32_t>> seen;
    std::vector<uint32_t> mask(vocab->n_mask_words()), acc(vocab->n_mask_words());
    double sum_fast = 0, sum_plain = 0, max_fast = 0;
    for (int s = 0; s < steps && !m.is_terminated(); ++s) {
      for (const Top& top : m.current_tops()) {
        const int32_t pos = top.pos, state = top.state;
        if (!seen.insert({pos, state}).second) continue;
        double fast = 1e18, plain = 1e18;
        int64_t visited = 0;
        for (int r = 0; r < repeat; ++r) {
          StackPool pool;
          std::vector<int32_t> unc;
          std::fill(acc.begin(), acc.end(), 0);
          double t0 = cpu_us();
          visited = walk_token_trie(g->grammar(), vocab->full_trie(), pool, {{pos, state, kUnknownParent}}, acc.data(), &unc);
          fast = std::min(fast, cpu_us() - t0);
          t0 = cpu_us();
          walk_token_trie_plain(g->grammar(), vocab->full_trie(), pool, {{pos, state, kUnknownParent}}, acc.data(), &unc);
          plain = std::min(plain, cpu_us() - t0);
        }
        sum_fast += fast, sum_plain += plain, max_fast = std::max(max_fast, fast);
        std::printf("  pos %d state %d: fast %.0f us plain %.0f us visited %lld\n", pos, state, fast, plain,
                    static_cast<long long>(visited));
      }
      m.fill_next_token_bitmask(mask.data());
      std::vector<int32_t> allowed;
      for (int32_t w = 0; w < vocab->n_mask_words(); ++w)
        for (uint32_t x = mask[w]; x; x &= x - 1) allowed.push_back(w * 32 + __builtin_ctz(x));
      if (allowed.empty()) break;
      m.accept_token(allowed[rng() % allowed.size()]);
    }
    std::printf("%s: %zu tops, full-trie walk fast sum %.0f max %.0f us, plain sum %.0f us\n", a.c_str(), seen.size(),
                sum_fast, max_fast, sum_plain);
  }
  return 0;
}
