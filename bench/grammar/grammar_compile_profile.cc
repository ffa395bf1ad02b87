// grammar_compile_profile: compile time of JSON schemas without a vocabulary (front end + automata,
// i.e. build_grammar), for profiling the compile tail with perf.
//
//   grammar_compile_profile [--repeat N] [--fingerprint] schema.json...
// Prints one line per schema: path, best and first time (ms) over N compilations, the budget's
// states, and the error if it is refused; --fingerprint adds a hash of the grammar's automata
// (their fingerprints, in order) and rule count, to check that a faster build gives the same
// automata. Process-wide automaton memos stay warm after the first
// compilation of a schema, so "first" is the cold time and "best" the warm one.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/error.h"
#include "grammar/compile.h"

using namespace deepinfer;
using namespace deepinfer::grammar;

int main(int argc, char** argv) {
  int repeat = 1;
  bool fingerprint = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::stoi(argv[++i]);
      continue;
    }
    if (a == "--fingerprint") {
      fingerprint = true;
      continue;
    }
    std::ifstream in(a);
    std::stringstream ss;
    ss << in.rdbuf();
    GrammarSpec spec;
    spec.kind = "json_schema";
    spec.text = ss.str();
    double first = 0, best = 1e18;
    CompileUsage usage;
    std::string error;
    uint64_t fp = 0;
    for (int r = 0; r < repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      try {
        Grammar g = build_grammar(spec, &usage);
        if (fingerprint && r == 0) {
          fp = static_cast<uint64_t>(g.n_rules()) * 0x9E3779B97F4A7C15ull;
          auto mix = [&](uint64_t v) { fp = (fp ^ v) * 1099511628211ull; };
          for (const Dfa& d : g.dfas) {  // every field, independent of Dfa::fingerprint
            mix(d.start);
            mix(d.n_classes);
            for (uint8_t c : d.byte_class) mix(c);
            for (int32_t v : d.next) mix(static_cast<uint32_t>(v));
            for (uint8_t a : d.accept) mix(a);
            for (uint8_t o : d.has_out) mix(o + 2);
          }
        }
      } catch (const Error& e) {
        error = e.what();
      }
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r == 0) first = ms;
      best = std::min(best, ms);
    }
    std::printf("%s first %.2f best %.2f states %lld", a.c_str(), first, best, static_cast<long long>(usage.states));
    if (fingerprint) std::printf(" fp %016llx", static_cast<unsigned long long>(fp));
    std::printf(" %s\n", error.substr(0, 120).c_str());
  }
  return 0;
}
