#!/usr/bin/env python3
"""Tokenizer encode throughput: deepinfer (C++) vs HF tokenizers, side by side in one run.

Usage: bench/tokenizer/run.py [--build build] [--mb 4] [--repeat 3] [--out bench/results]
Builds the corpus of bench/tokenizer/corpus.py, then for each tokenizer (V3 fixture, V4
of models/tiny) measures single-thread and all-thread (batch) encode throughput of
deepinfer_tokenize and of HF tokenizers (a fresh tokenizer per configuration; "cold" is
the first pass with an empty word cache, "warm" the best of --repeat further passes).
Writes a markdown table to bench/results/tokenizer-<date>.md and prints it.
"""
import argparse
import datetime
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

V3 = ROOT.parent / "shared" / "fixtures" / "tokenizer-deepseek-v3" / "tokenizer.json"
V4 = ROOT / "models" / "tiny" / "tokenizer.json"
# (row label, tokenizer, corpus kinds): the full mixed corpus for both tokenizers, then
# single-kind corpora with the V4 tokenizer to show how the ratio depends on the text.
CASES = [
    ("V3 fixture, mixed corpus", V3, corpus.KINDS),
    ("V4 models/tiny, mixed corpus", V4, corpus.KINDS),
    ("V4, English prose", V4, ("english",)),
    ("V4, code", V4, ("code",)),
    ("V4, Chinese", V4, ("chinese",)),
    ("V4, random Unicode", V4, ("unicode",)),
]

HF_WORKER = r"""
import json, sys, time, tokenizers
path, docs_file, repeat, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
docs = json.load(open(docs_file, encoding="utf-8"))
tok = tokenizers.Tokenizer.from_file(path)
times = []
for r in range(repeat + 1):
    t0 = time.perf_counter()
    tok.encode_batch(docs)
    times.append(time.perf_counter() - t0)
print(json.dumps({"cold": times[0], "warm": min(times[1:])}))
"""


def hf_measure(path, docs_file, repeat, batch, threads):
    env = dict(os.environ)
    env["RAYON_NUM_THREADS"] = str(threads if batch else 1)
    env["TOKENIZERS_PARALLELISM"] = "true" if batch else "false"
    out = subprocess.run([sys.executable, "-c", HF_WORKER, str(path), docs_file, str(repeat), "1" if batch else "0"],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def machine():
    cpu = platform.processor() or "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("DEEPINFER_BUILD", str(ROOT / "build")))
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    exe = Path(args.build) / "bench" / "tokenizer" / "deepinfer_tokenize"
    if not exe.exists():
        sys.exit(f"build {exe} first (cmake --build {args.build} --target deepinfer_tokenize)")
    threads = os.cpu_count()
    load_at_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    import tokenizers
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, kinds in CASES:
            added = [t["content"] for t in json.loads(path.read_text(encoding="utf-8"))["added_tokens"]]
            docs = corpus.make_corpus(42, int(args.mb * 1e6), added, kinds)
            n_bytes = sum(len(d.encode()) for d in docs)
            framed = Path(tmp) / "docs.bin"
            with open(framed, "wb") as f:
                for d in docs:
                    b = d.encode()
                    f.write(struct.pack("<I", len(b)) + b)
            docs_json = Path(tmp) / "docs.json"
            docs_json.write_text(json.dumps(docs), encoding="utf-8")
            ours = json.loads(subprocess.run([str(exe), "bench", str(path), str(framed), "--repeat", str(args.repeat),
                                              "--threads", str(threads)], capture_output=True, text=True,
                                             check=True).stdout)
            hf1 = hf_measure(path, str(docs_json), args.repeat, False, threads)
            hfn = hf_measure(path, str(docs_json), args.repeat, True, threads)
            mb = n_bytes / 1e6
            rows.append((name, mb, len(docs), ours["tokens"],
                         ours["single_cold_mbps"], mb / hf1["cold"], ours["single_mbps"], mb / hf1["warm"],
                         ours["batch_cold_mbps"], mb / hfn["cold"], ours["batch_mbps"], mb / hfn["warm"]))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src/recipe", "bench/tokenizer"],
                           capture_output=True, text=True).stdout.strip()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    lines = [
        f"# Tokenizer encode throughput, {date}",
        "",
        f"- Command: `bench/tokenizer/run.py --mb {args.mb} --repeat {args.repeat}` (build `{args.build}`)",
        f"- Commit: `{commit}`{' (with uncommitted changes in src/recipe or bench/tokenizer)' if dirty else ''}",
        f"- Machine: {machine()}; HF tokenizers {tokenizers.__version__}; threads for batch: {threads}",
        "- Corpus: bench/tokenizer/corpus.py (seed 42): English, CJK, code, emoji/ZWJ, digits, whitespace,",
        "  newlines, embedded added tokens, random Unicode. MB = 10^6 bytes of UTF-8 input.",
        "- cold = first pass with an empty word cache; warm = best of the next passes. Single thread:",
        "  ours: one encode() per document; HF: encode_batch with TOKENIZERS_PARALLELISM=false and",
        "  RAYON_NUM_THREADS=1 (serial in Rust, no Python loop). All threads: encode_batch on both.",
        f"- Load average at start: {load_at_start}",
        "",
        "| case | MB | docs | tokens | 1 thread cold: ours / HF (MB/s) | ratio | 1 thread warm: ours / HF | ratio "
        "| all threads cold: ours / HF | ratio | all threads warm: ours / HF | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, mb, n_docs, n_tok, oc, hc, ow, hw, obc, hbc, obw, hbw) in rows:
        lines.append(f"| {name} | {mb:.2f} | {n_docs} | {n_tok} | {oc:.2f} / {hc:.2f} | {oc / hc:.2f}x "
                     f"| {ow:.2f} / {hw:.2f} | {ow / hw:.2f}x | {obc:.2f} / {hbc:.2f} | {obc / hbc:.2f}x "
                     f"| {obw:.2f} / {hbw:.2f} | {obw / hbw:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"tokenizer-{date}.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
