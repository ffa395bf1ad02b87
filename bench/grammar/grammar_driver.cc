// grammar_driver: reads JSON requests (one per line) on stdin, writes one JSON reply per line.
//
//   grammar_driver [tokenizer.json] [n_vocab]
//   {"op":"compile","kind":"json_schema"|"regex"|"ebnf","grammar":"...","max_whitespace":0}
//        optional "limits":{"max_states":..,"max_memory_mb":..,"timeout_ms":..} (0: off; absent:
//        the defaults of grammar/budget.h)
//       -> {"ok":true,"id":1,"compile_us":..,"n_rules":..,"n_dfas":..,"usage":{..}}
//        | {"ok":false,"error_kind":"unsupported"|"invalid_input"|...,"error":"...","usage":{..}}
//      usage: {"states":..,"peak_bytes":..,"elapsed_ms":..} as the budget counted them.
//   {"op":"match","id":1,"strings":["..",..]}        -> {"ok":true,"results":[true,false,..]}
//   {"op":"generate","id":1,"seed":7,"n":2,"random_tokens":64,"max_tokens":400}
//       -> {"ok":true,"outputs":[{"text":"..","terminated":true,"n_tokens":..}],
//           "mask_us":[..],"n_forced_checks":..}
//      Uniform random choice among allowed tokens for `random_tokens` steps, then a finisher that
//      prefers stop tokens, forced bytes and closing punctuation (still only allowed tokens).
//      Every step also checks accept_token/rollback consistency.
//   {"op":"free","id":1}
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "grammar/compile.h"
#include "grammar/hf_vocab.h"

using namespace deepinfer;
using namespace deepinfer::grammar;
using json = nlohmann::json;

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool bit(const std::vector<uint32_t>& m, int32_t t) { return (m[t >> 5] >> (t & 31)) & 1u; }

json generate(const std::shared_ptr<const CompiledGrammar>& g, uint64_t seed, int random_tokens,
              int max_tokens, std::vector<double>& mask_us) {
  const Vocabulary& vocab = g->vocab();
  GrammarMatcher m(g);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(vocab.n_mask_words());
  std::string text;
  int n = 0;
  for (; n < max_tokens && !m.is_terminated(); ++n) {
    double t0 = now_us();
    m.fill_next_token_bitmask(mask.data());
    mask_us.push_back(now_us() - t0);
    std::vector<int32_t> allowed;
    for (int32_t w = 0; w < vocab.n_mask_words(); ++w)
      for (uint32_t x = mask[w]; x; x &= x - 1) allowed.push_back(w * 32 + __builtin_ctz(x));
    if (allowed.empty()) break;
    int32_t tok = -1;
    if (n >= random_tokens) {
      for (int32_t s : vocab.stop_tokens())
        if (bit(mask, s)) { tok = s; break; }
      if (tok < 0) {
        std::string forced = m.find_forced_bytes();
        std::vector<std::string> wants;
        if (!forced.empty()) wants.push_back(forced.substr(0, 1));
        else if (rng() % 2) wants = {"\"", "}", "]"};
        for (const auto& want : wants) {
          for (int32_t t : allowed)
            if (vocab.token_bytes(t) == want) { tok = t; break; }
          if (tok >= 0) break;
        }
        if (tok < 0) {  // a random single-byte token keeps random walks short
          std::vector<int32_t> singles;
          for (int32_t t : allowed)
            if (vocab.token_bytes(t).size() == 1) singles.push_back(t);
          if (!singles.empty()) tok = singles[std::uniform_int_distribution<size_t>(0, singles.size() - 1)(rng)];
        }
      }
    }
    if (tok < 0) tok = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    ICHECK(m.accept_token(tok)) << "allowed token " << tok << " rejected by accept_token";
    text += vocab.token_bytes(tok);
  }
  // stuck: no token allowed although the matcher has not terminated (a dead end in the engine,
  // or a grammar whose language is empty).
  const bool stuck = !m.is_terminated() && n < max_tokens;
  return json{{"text", text}, {"terminated", m.is_terminated()}, {"n_tokens", n}, {"stuck", stuck},
              {"empty_language", g->empty_language()}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path = argc > 1 ? argv[1] : testing::kDeepSeekTokenizer;
  int32_t n_vocab = argc > 2 ? std::stoi(argv[2]) : testing::kDeepSeekVocabSize;
  auto vocab = testing::load_hf_vocab(tok_path, n_vocab);
  std::map<int64_t, std::shared_ptr<const CompiledGrammar>> grammars;
  int64_t next_id = 1;
  std::string line;
  std::cout << json{{"ok", true}, {"ready", true}, {"n_vocab", vocab->size()}}.dump() << std::endl;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json reply;
    try {
      json req = json::parse(line);
      std::string op = req.at("op");
      if (op == "compile") {
        GrammarSpec spec;
        spec.kind = req.at("kind");
        spec.text = req.at("grammar");
        spec.max_whitespace = req.value("max_whitespace", 0);
        spec.allow_empty_language = true;  // conformance: the language itself, empty or not
        if (req.contains("limits")) {
          const json& l = req["limits"];
          spec.limits.max_states = l.value("max_states", spec.limits.max_states);
          spec.limits.max_memory_bytes = l.value("max_memory_mb", spec.limits.max_memory_bytes >> 20) << 20;
          spec.limits.timeout_ms = l.value("timeout_ms", spec.limits.timeout_ms);
        }
        CompileUsage usage;
        auto usage_json = [&] {
          return json{{"states", usage.states}, {"peak_bytes", usage.peak_bytes}, {"elapsed_ms", usage.elapsed_ms}};
        };
        double t0 = now_us();
        std::shared_ptr<const CompiledGrammar> g;
        try {
          g = compile_grammar(spec, vocab, &usage);
        } catch (const Error& e) {
          reply = {{"ok", false}, {"error_kind", error_kind_name(e.kind())}, {"error", e.what()},
                   {"compile_us", now_us() - t0}, {"usage", usage_json()}};
          std::cout << reply.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
          continue;
        }
        double dt = now_us() - t0;
        grammars[next_id] = g;
        reply = {{"ok", true}, {"id", next_id++}, {"compile_us", dt}, {"usage", usage_json()},
                 {"n_rules", g->grammar().n_rules()}, {"n_dfas", g->grammar().dfas.size()}};
      } else if (op == "match") {
        auto g = grammars.at(req.at("id"));
        json results = json::array();
        for (const auto& s : req.at("strings")) {
          GrammarMatcher m(g);
          std::string str = s.get<std::string>();
          bool ok = str.empty() ? m.can_terminate() : (m.accept_bytes(str) && m.can_terminate());
          results.push_back(ok);
        }
        reply = {{"ok", true}, {"results", results}};
      } else if (op == "generate") {
        auto g = grammars.at(req.at("id"));
        std::vector<double> mask_us;
        json outs = json::array();
        uint64_t seed = req.value("seed", 0);
        for (int i = 0; i < req.value("n", 1); ++i)
          outs.push_back(generate(g, seed + i, req.value("random_tokens", 64), req.value("max_tokens", 400), mask_us));
        reply = {{"ok", true}, {"outputs", outs}, {"mask_us", mask_us}};
      } else if (op == "free") {
        grammars.erase(req.at("id").get<int64_t>());
        reply = {{"ok", true}};
      } else {
        reply = {{"ok", false}, {"error", "unknown op " + op}};
      }
    } catch (const Error& e) {
      reply = {{"ok", false}, {"error_kind", error_kind_name(e.kind())}, {"error", e.what()}};
    } catch (const std::exception& e) {
      reply = {{"ok", false}, {"error_kind", "exception"}, {"error", e.what()}};
    }
    std::cout << reply.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
  }
  return 0;
}
