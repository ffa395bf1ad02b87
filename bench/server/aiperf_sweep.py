#!/usr/bin/env python3
"""Load benchmark of `deepinfer serve` with NVIDIA aiperf (PyPI `aiperf`): streaming chat at
several concurrencies; prints a markdown table (tokens/s, TTFT and inter-token latency
percentiles) plus the server's own cost per output token, measured as the CPU time of its
HTTP threads ("di-http", /proc/PID/task/*/stat) divided by the tokens served, next to the
engine loop thread's ("di-engine") CPU time per token.

  python3 bench/server/aiperf_sweep.py [--build build] [--concurrency 1,16,64,256]
      [--isl 64] [--osl 16] [--requests-per-level 2x] [--out bench/results/server-aiperf.md]

Starts the server itself (built-in tiny model unless --model) on a free loopback port.
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """CPU seconds by thread name."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


def metric(port, name):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("DEEPINFER_BUILD", "build"))
    ap.add_argument("--model", default="")
    ap.add_argument("--concurrency", default="1,16,64,256")
    ap.add_argument("--isl", type=int, default=64)
    ap.add_argument("--osl", type=int, default=16)
    ap.add_argument("--requests-per-level", type=float, default=2.0,
                    help="requests sent per level, as a multiple of its concurrency (at least 8)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tokenizer = args.model or os.path.join(root, "models", "tiny")
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    cmd = [os.path.join(args.build, "deepinfer"), "serve", "--port", "0"]
    if args.model:
        cmd += ["--model", args.model]
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    port = None
    for _ in range(1500):
        m = re.search(r"serving (\S+) on http://127\.0\.0\.1:(\d+)", open(log.name).read())
        if m:
            model_name, port = m.group(1), int(m.group(2))
            break
        assert server.poll() is None, open(log.name).read()
        time.sleep(0.2)
    assert port, "server did not start"

    rows = []
    try:
        for conc in [int(c) for c in args.concurrency.split(",")]:
            n_req = max(8, int(conc * args.requests_per_level))
            cpu0, tok0 = thread_cpu(server.pid), metric(port, "deepinfer_generation_tokens_total")
            step0 = metric(port, "deepinfer_engine_step_seconds_total")
            with tempfile.TemporaryDirectory() as art:
                run = subprocess.run(
                    ["aiperf", "profile", "--model", model_name, "--url", f"http://127.0.0.1:{port}",
                     "--endpoint-type", "chat", "--streaming", "--concurrency", str(conc),
                     "--request-count", str(n_req), "--prompt-input-tokens-mean", str(args.isl),
                     "--prompt-input-tokens-stddev", "0", "--prompt-output-tokens-mean", str(args.osl),
                     "--prompt-output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
                     "--tokenizer", tokenizer, "--no-gpu-telemetry", "--no-auto-plot",
                     "--output-artifact-dir", art],
                    capture_output=True, text=True)
                if run.returncode != 0:
                    sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
                    raise SystemExit(f"aiperf failed at concurrency {conc}")
                res = json.load(open(os.path.join(art, "profile_export_aiperf.json")))
            cpu1, tok1 = thread_cpu(server.pid), metric(port, "deepinfer_generation_tokens_total")
            step1 = metric(port, "deepinfer_engine_step_seconds_total")
            tokens = max(tok1 - tok0, 1.0)
            http_cpu = cpu1.get("di-http", 0.0) - cpu0.get("di-http", 0.0)
            engine_cpu = cpu1.get("di-engine", 0.0) - cpu0.get("di-engine", 0.0)

            def get(key, stat):
                return res.get(key, {}).get(stat, float("nan"))

            rows.append({
                "conc": conc, "requests": n_req,
                "completed": get("request_count", "avg"),
                "error_rate": get("request_error_rate", "avg") if "request_error_rate" in res else 0.0,
                "tok_s": get("output_token_throughput", "avg"),
                "ttft": [get("time_to_first_token", s) for s in ("p50", "p90", "p99")],
                "itl": [get("inter_token_latency", s) for s in ("p50", "p90", "p99")],
                "http_us_per_tok": 1e6 * http_cpu / tokens,
                "step_ms_per_tok": 1e3 * (step1 - step0) / tokens,
            })
            print(rows[-1], flush=True)
    finally:
        server.terminate()
        server.wait(timeout=120)

    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [
        f"# deepinfer serve under aiperf ({datetime.date.today()})",
        "",
        f"Command: `python3 bench/server/aiperf_sweep.py --concurrency {args.concurrency} --isl {args.isl} "
        f"--osl {args.osl} --requests-per-level {args.requests_per_level:g}`; commit {commit}; "
        f"machine: {platform.node()} ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end), "
        f"model: {model_name}. Streaming chat, ISL {args.isl}, OSL {args.osl} (ignore_eos).",
        "",
        "server CPU/token: CPU time of the HTTP threads per output token (parsing, tokenizing the "
        "prompt, JSON + SSE, socket writes); engine step/token: time inside Engine::step per output token.",
        "",
        "| concurrency | requests sent / completed | error % | output tok/s | TTFT p50/p90/p99 (ms) | "
        "ITL p50/p90/p99 (ms) | server CPU/token (µs) | engine step/token (ms) |",
        "|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['conc']} | {r['requests']} / {r['completed']:.0f} | {r['error_rate']:.1f} | "
                     f"{r['tok_s']:.1f} | "
                     + "/".join(f"{x:.0f}" for x in r["ttft"]) + " | "
                     + "/".join(f"{x:.0f}" for x in r["itl"])
                     + f" | {r['http_us_per_tok']:.0f} | {r['step_ms_per_tok']:.2f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
