#!/usr/bin/env python3
"""Structured-output benchmark: deepinfer's grammar engine vs llguidance vs XGrammar.

Same JSONSchemaBench schemas, same tokenizer (DeepSeek-V3, 129,280 ids, EOS = 1), compact JSON
(no free whitespace) and draft 2020-12 default semantics (additional properties allowed) for all.
Per schema and engine: compile (ours: parse + automata, mask cache filled lazily; llguidance:
grammar + matcher creation, lazy; XGrammar: compile_json_schema incl. its mask precomputation,
1 thread, cache off), then one constrained generation of up to --tokens tokens choosing uniformly
among allowed tokens (seeded), timing every next-token mask. Ours is timed inside C++ (driver),
the peers through their Python bindings (adds ~1-3 us per call). Ours is also run a second time
on the same compiled grammar ("warm": mask cache already filled by the first request).
Each engine runs in a worker process with a per-schema timeout, so a crash or hang is counted,
not fatal.

  python3 bench/grammar/bench_grammar.py [--sample N|--all] [--tokens 64] [--out FILE]
Installs llguidance and xgrammar with pip if they are missing (not in scripts/setup: large).
"""
import argparse
import datetime
import json
import os
import platform
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIX = REPO.parent / "shared" / "fixtures"
TOKENIZER = FIX / "tokenizer-deepseek-v3" / "tokenizer.json"
N_VOCAB, EOS = 129280, 1


def ensure_peers():
    try:
        import llguidance  # noqa: F401
        import xgrammar  # noqa: F401
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "llguidance", "xgrammar"])


def allowed_from_words(words):
    import numpy as np
    w = np.asarray(words, dtype=np.uint32)
    bits = np.unpackbits(w.view(np.uint8), bitorder="little")
    return np.nonzero(bits[:N_VOCAB])[0]


# ---------------------------------------------------------------- workers (one engine each)
def worker(engine, tokens):
    import numpy as np
    out = sys.stdout
    if engine == "ours":
        sys.path.insert(0, str(REPO / "tests" / "python"))
        from test_grammar_util import Driver
        d = Driver()
    else:
        from transformers import PreTrainedTokenizerFast
        hf = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
        if engine == "llguidance":
            import llguidance
            import llguidance.hf
            tok = llguidance.hf.from_tokenizer(hf, n_vocab=N_VOCAB, eos_token=EOS)
        else:
            import torch
            import xgrammar as xgr
            info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=N_VOCAB, stop_token_ids=[EOS])
            compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            bitmask = xgr.allocate_token_bitmask(1, N_VOCAB)
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        path = line.strip()
        text = Path(path).read_text()
        seed = sum(path.encode()) % 100000
        rng = random.Random(seed)
        res = {"path": path, "ok": False, "mask_us": [], "warm_mask_us": []}
        try:
            if engine == "ours":
                r = d.compile("json_schema", text)
                if r["ok"]:
                    res["ok"], res["compile_us"] = True, r["compile_us"]
                    g1 = d.generate(r["id"], seed=seed, n=1, random_tokens=tokens, max_tokens=tokens)
                    g2 = d.generate(r["id"], seed=seed + 1, n=1, random_tokens=tokens, max_tokens=tokens)
                    res["mask_us"], res["warm_mask_us"] = g1["mask_us"], g2["mask_us"]
                    d.free(r["id"])
                else:
                    res["error"] = r["error"][:200]
            elif engine == "llguidance":
                t0 = time.perf_counter()
                grm = llguidance.LLMatcher.grammar_from_json_schema(
                    text, defaults={"whitespace_flexible": False})
                m = llguidance.LLMatcher(tok, grm)
                dt = (time.perf_counter() - t0) * 1e6
                if m.is_error():
                    res["error"] = m.get_error()[:200]
                else:
                    res["ok"], res["compile_us"] = True, dt
                    for _ in range(tokens):
                        t0 = time.perf_counter()
                        mask = m.compute_bitmask()
                        res["mask_us"].append((time.perf_counter() - t0) * 1e6)
                        allowed = allowed_from_words(np.frombuffer(mask, dtype=np.uint32))
                        if len(allowed) == 0:
                            break
                        t = int(allowed[rng.randrange(len(allowed))])
                        if not m.consume_token(t) or m.is_stopped():
                            break
            else:
                t0 = time.perf_counter()
                cg = compiler.compile_json_schema(text, any_whitespace=False, strict_mode=False)
                m = xgr.GrammarMatcher(cg)
                res["ok"], res["compile_us"] = True, (time.perf_counter() - t0) * 1e6
                for _ in range(tokens):
                    t0 = time.perf_counter()
                    m.fill_next_token_bitmask(bitmask)
                    res["mask_us"].append((time.perf_counter() - t0) * 1e6)
                    allowed = allowed_from_words(bitmask[0].numpy().view(np.uint32))
                    if len(allowed) == 0:
                        break
                    t = int(allowed[rng.randrange(len(allowed))])
                    if not m.accept_token(t) or m.is_terminated():
                        break
        except Exception as e:  # compile errors surface as exceptions in the peers
            res["ok"] = False
            res["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        out.write(json.dumps(res) + "\n")
        out.flush()


# ---------------------------------------------------------------- driver of the workers
def run_engine(engine, paths, tokens, timeout_s):
    results, i = [], 0
    while i < len(paths):
        p = subprocess.Popen([sys.executable, __file__, "--worker", engine, "--tokens", str(tokens)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
        q = queue.Queue()
        threading.Thread(target=lambda: [q.put(l) for l in p.stdout] + [q.put(None)], daemon=True).start()
        ready = q.get(timeout=600)
        assert ready and json.loads(ready)["ready"], f"{engine} worker failed to start"
        while i < len(paths):
            p.stdin.write(str(paths[i]) + "\n")
            p.stdin.flush()
            try:
                line = q.get(timeout=timeout_s)
            except queue.Empty:
                line = "TIMEOUT"
            if line is None or line == "TIMEOUT":
                results.append({"path": str(paths[i]), "ok": False,
                                "error": "timeout" if line == "TIMEOUT" else "crash", "mask_us": []})
                i += 1
                p.kill()
                break
            results.append(json.loads(line))
            i += 1
            if i % 200 == 0:
                print(f"  {engine}: {i}/{len(paths)}", file=sys.stderr, flush=True)
        else:
            p.stdin.close()
            p.wait(timeout=60)
    return results


def merge_repeats(runs):
    """Per schema and mask step, the minimum over repeated runs of one engine (same seeds, so the
    same token path): a machine stall rarely hits the same step in every run. The raw maximum
    of all runs is kept as raw_mask_max_us."""
    merged = []
    for rs in zip(*runs):
        r = dict(rs[0])
        ok = all(x["ok"] for x in rs)
        r["ok"] = ok
        if ok:
            r["compile_us"] = min(x["compile_us"] for x in rs)
            n = min(len(x["mask_us"]) for x in rs)
            r["mask_us"] = [min(x["mask_us"][i] for x in rs) for i in range(n)]
            r["raw_mask_max_us"] = max((m for x in rs for m in x["mask_us"]), default=0.0)
            if r.get("warm_mask_us"):
                n = min(len(x.get("warm_mask_us", [])) for x in rs)
                r["warm_mask_us"] = [min(x["warm_mask_us"][i] for x in rs) for i in range(n)]
        elif "error" not in r:
            r["error"] = next((x.get("error") for x in rs if not x["ok"]), "failed in a repeat")
        merged.append(r)
    return merged


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(engine, results):
    ok = [r for r in results if r["ok"]]
    comp = [r["compile_us"] / 1000 for r in ok]
    masks = [m for r in ok for m in r["mask_us"]]
    row = {"engine": engine, "schemas": len(results), "compiled": len(ok),
           "crash_or_timeout": sum(r.get("error") in ("crash", "timeout") for r in results),
           "compile_p50_ms": pct(comp, .5), "compile_p99_ms": pct(comp, .99),
           "masks": len(masks), "mask_p50_us": pct(masks, .5), "mask_p99_us": pct(masks, .99),
           "mask_max_us": max(masks) if masks else float("nan"),
           "compile_max_ms": max(comp) if comp else float("nan"),
           "raw_mask_max_us": max((r.get("raw_mask_max_us", max(r["mask_us"], default=0.0)) for r in ok),
                                  default=float("nan"))}
    warm = [m for r in ok for m in r.get("warm_mask_us", [])]
    if warm:
        row["warm"] = {"masks": len(warm), "mask_p50_us": pct(warm, .5), "mask_p99_us": pct(warm, .99),
                       "mask_max_us": max(warm)}
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--only", help="a file listing schema paths relative to the data folder (e.g. Github_easy/o1.json)")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--engines", default="ours,llguidance,xgrammar")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each engine N times (fresh workers); per-mask and compile minimum over the runs")
    ap.add_argument("--xgrammar-every", type=int, default=1,
                    help="XGrammar only on every k-th of the schemas (its compile takes seconds)")
    ap.add_argument("--out")
    ap.add_argument("--rows-from", help="add the summary rows of engines not run now from an earlier run's .json "
                                        "(same schemas and settings; the table says so)")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.tokens)
    ensure_peers()
    files = sorted(p for d in sorted((FIX / "jsonschemabench" / "data").iterdir()) for p in sorted(d.glob("*.json")))
    if args.only:
        wanted = {l.strip() for l in Path(args.only).read_text().splitlines() if l.strip()}
        files = [f for f in files if str(f).split("/data/")[-1] in wanted]
    elif not args.all:
        step = max(1, len(files) // args.sample)
        files = files[::step][:args.sample]
    rows, per_engine = [], {}
    for engine in args.engines.split(","):
        t0 = time.time()
        eng_files = files[::args.xgrammar_every] if engine == "xgrammar" else files
        runs = [run_engine(engine, eng_files, args.tokens, args.timeout) for _ in range(args.repeat)]
        res = merge_repeats(runs) if args.repeat > 1 else runs[0]
        per_engine[engine] = res
        rows.append(summarize(engine, res))
        print(json.dumps(rows[-1]), f"({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    compiled_by = {e: {r["path"] for r in res if r["ok"]} for e, res in per_engine.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    for r in rows:
        r["commit"] = commit
    if args.rows_from:
        earlier = json.loads(Path(args.rows_from).read_text())
        earlier_rows = earlier["rows"] if isinstance(earlier, dict) else earlier
        for r in earlier_rows:
            if r["engine"] not in per_engine:
                r.setdefault("commit", "earlier run")
                r["engine"] += " (earlier run)"
                rows.append(r)
    date = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else REPO / "bench" / "results" / f"grammar-{date}.md"
    lines = [f"# Structured output: deepinfer vs llguidance vs XGrammar ({date})", "",
             f"- command: `python3 bench/grammar/bench_grammar.py {' '.join(sys.argv[1:])}`",
             f"- commit: {commit}; machine: {platform.node()} ({os.cpu_count()} CPUs, {platform.processor() or platform.machine()}), single thread per engine",
             f"- schemas: {len(files)} JSONSchemaBench files ({'listed in ' + args.only if args.only else 'all' if args.all else 'every ' + str(max(1, 6070 // args.sample)) + 'th'}); "
             f"tokenizer DeepSeek-V3 (129,280 ids); up to {args.tokens} uniformly random allowed tokens per schema", "",
             f"- repeats: {args.repeat} run(s) per engine; with more than one, compile time and every mask time are the "
             f"minimum over the runs (same seeds, same token paths) and 'raw max' is the largest single mask of all runs"
             + (f"; XGrammar on every {args.xgrammar_every}th of these schemas" if args.xgrammar_every > 1 else ""), "",
             "| engine | commit | compiled | share | crash/timeout | compile p50 (ms) | compile p99 (ms) | compile max (ms) | masks | mask p50 (us) | mask p99 (us) | mask max (us) | raw mask max (us) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['engine']} | {r.get('commit', '')} | {r['compiled']}/{r['schemas']} | {100 * r['compiled'] / r['schemas']:.1f}% | "
                     f"{r['crash_or_timeout']} | {r['compile_p50_ms']:.2f} | {r['compile_p99_ms']:.2f} | {r.get('compile_max_ms', float('nan')):.1f} | {r['masks']} | "
                     f"{r['mask_p50_us']:.1f} | {r['mask_p99_us']:.1f} | {r['mask_max_us']:.0f} | {r.get('raw_mask_max_us', float('nan')):.0f} |")
        if "warm" in r:
            w = r["warm"]
            lines.append(f"| {r['engine']} (warm: 2nd request, same grammar) | | | | | | | {w['masks']} | "
                         f"{w['mask_p50_us']:.1f} | {w['mask_p99_us']:.1f} | {w['mask_max_us']:.0f} |")
    if "ours" in compiled_by:
        lines += ["", "Overlap of compiled schemas:"]
        for e, s in compiled_by.items():
            if e != "ours":
                lines.append(f"- ours and {e}: {len(s & compiled_by['ours'])}; only {e}: {len(s - compiled_by['ours'])}; "
                             f"only ours: {len(compiled_by['ours'] - s)}")
    if "ours" in per_engine:
        ours = {r["path"]: r for r in per_engine["ours"] if r["ok"]}
        lines += ["", "Same schemas (compiled by both engines of a pair):", "",
                  "| pair | schemas | compile p50 ours / peer (ms) | compile p99 ours / peer (ms) | mask p99 ours / peer (us) | mask max ours / peer (us) |",
                  "|---|---|---|---|---|---|"]
        for e, res in per_engine.items():
            if e == "ours":
                continue
            both = [(ours[r["path"]], r) for r in res if r["ok"] and r["path"] in ours]
            if not both:
                continue
            co = [a["compile_us"] / 1000 for a, _ in both]
            cp = [b["compile_us"] / 1000 for _, b in both]
            mo = [m for a, _ in both for m in a["mask_us"]]
            mp = [m for _, b in both for m in b["mask_us"]]
            lines.append(f"| ours vs {e} | {len(both)} | {pct(co, .5):.2f} / {pct(cp, .5):.2f} | {pct(co, .99):.2f} / {pct(cp, .99):.2f} | "
                         f"{pct(mo, .99):.1f} / {pct(mp, .99):.1f} | {max(mo, default=0):.0f} / {max(mp, default=0):.0f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    per_schema = {e: [[r["path"].split("/data/")[-1], r["ok"], r.get("compile_us"), r.get("error"),
                       max(r["mask_us"], default=None), sum(m > 1000 for m in r["mask_us"])] for r in res]
                  for e, res in per_engine.items()}
    (out.with_suffix(".json")).write_text(json.dumps({"commit": commit, "rows": rows, "per_schema": per_schema}, indent=1))


if __name__ == "__main__":
    main()
