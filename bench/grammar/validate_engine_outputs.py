#!/usr/bin/env python3
"""Every JSONSchemaBench fixture schema through the engine (tiny model, as
tests/python/test_structured_jsonschemabench.py does for its two 500-schema samples): counts
compiled / refused schemas, outputs that stopped (each parsed and validated with PyPI
`jsonschema`) and outputs cut by max_tokens; lists every invalid output. Reports, never asserts.

  PYTHONPATH=python DEEPINFER_BUILD=build python3 bench/grammar/validate_engine_outputs.py \
      [--closing-bias 5] [--max-tokens 256] [--chunk 500] [--out FILE.json]
"""
import argparse
import json
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))
from jsonschemabench_util import BENCH, reference_validator  # noqa: E402


def run_chunk(core, engine, prompt, files, args, stats, bad, cut, base):
    schemas = {}
    for k, path in enumerate(files):
        r = core.EngineRequest()
        r.id = f"s{base + k}"
        r.prompt = prompt
        p = core.SamplingParams()
        p.temperature, p.top_k, p.seed, p.max_tokens = 1.0, 256, base + k, args.max_tokens
        p.closing_bias = args.closing_bias
        r.params = p
        r.constraint_kind = "json_schema"
        r.constraint = path.read_text()
        try:
            engine.add_request(r)
        except Exception:  # refused at compile time (deepinfer.Error)
            stats["rejected"] += 1
            continue
        schemas[r.id] = path
    stats["compiled"] += len(schemas)
    text, reason = {rid: "" for rid in schemas}, {}
    while engine.has_unfinished():
        for o in engine.step():
            text[o.id] += o.new_text
            stats["output_tokens"] += len(o.new_tokens)
            if o.finished:
                reason[o.id] = o.finish_reason
    for rid, path in schemas.items():
        name = f"{path.parent.name}/{path.name}"
        stats[reason.get(rid, "unfinished")] += 1
        if reason.get(rid) == "length":
            cut.append(name)
            continue
        try:
            instance = json.loads(text[rid])
        except ValueError as e:
            bad.append(f"{name}: not JSON ({e}): {text[rid][:200]!r}")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                errors = list(reference_validator(json.loads(path.read_text())).iter_errors(instance))
        except Exception:
            stats["reference_failed"] += 1
            continue
        stats["validated"] += 1
        if errors:
            bad.append(f"{name}: {text[rid][:200]!r}: {errors[0].message[:200]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--closing-bias", type=float, default=5.0)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=500)
    ap.add_argument("--out")
    args = ap.parse_args()
    import deepinfer
    core = deepinfer._core
    ea = core.EngineArgs()
    ea.tokenizer_path = str(REPO / "models" / "tiny" / "tokenizer.json")
    ea.max_num_seqs = 128
    ea.max_model_len = args.max_tokens + 16
    engine = core.Engine(ea)
    prompt = engine.encode("Answer in JSON:", True)
    files = sorted(p for d in sorted(BENCH.iterdir()) for p in sorted(d.glob("*.json")))
    stats, bad, cut = Counter(schemas=len(files)), [], []
    t0 = time.time()
    for i in range(0, len(files), args.chunk):
        run_chunk(core, engine, prompt, files[i:i + args.chunk], args, stats, bad, cut, i)
        print(f"{min(i + args.chunk, len(files))}/{len(files)} {dict(stats)} invalid {len(bad)} "
              f"({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    stats["cut_share_percent"] = round(100 * len(cut) / max(1, stats["compiled"]), 2)
    stats["invalid"] = len(bad)
    print(json.dumps(dict(stats)))
    print("invalid:\n  " + "\n  ".join(bad))
    if args.out:
        Path(args.out).write_text(json.dumps({"stats": stats, "invalid": bad, "cut": cut}, indent=1))


if __name__ == "__main__":
    main()
