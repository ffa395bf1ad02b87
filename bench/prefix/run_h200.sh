#!/usr/bin/env bash
# Prefix caching on the CUDA backend (issue 18), on the GPU machine, from the repository root,
# with a deepinfer binary built with -DDEEPINFER_CUDA=ON (BIN, default build-cuda/deepinfer):
#   COMMIT=<sha> bash bench/prefix/run_h200.sh
# V4-Flash shapes truncated to 4 layers (bench/configs/v4-flash-4l: ratios 0, 0, 4, 128),
# FP8 dummy weights generated on the device, FP8 KV cache, default engine settings (2048
# tokens per step, prefix blocks of 128 tokens). Two `deepinfer bench --multi-turn` runs, each
# with prefix caching on and then off (a fresh engine each):
#  1. Re-sent 16K prompt: 6 one-turn conversations that share a 16384-token system prompt,
#     each adding a 1-token user message (prompt 16385, 1 output token), one at a time. With
#     caching on the first is cold and the other five hit all 16384 shared tokens (the state
#     at 16384 is exported where the last prefill chunk of the first request ends); with it
#     off all six prefill 16385 tokens. TTFT of the hits vs the cold runs.
#     (A 16384-token prompt re-sent exactly hits 14336 only: a hit may cover at most
#     prompt - 1 tokens, so its deepest block boundary is 16256, and states are exported
#     where prefill chunks start, every 2048 tokens.)
#  2. Multi-turn chat: 16 conversations of 6 turns, 8 at once, each turn 1024 user tokens +
#     64 reply tokens re-sent with the history; TTFT p50 / p99 over all turns and over turns
#     >= 2, caching on vs off.
# Prints one markdown table (the runs' own output goes to $OUT/prefix-*.log, their records
# to $OUT/prefix-*.jsonl). Runtime on the H200: about 2-3 minutes (LIMIT1 / LIMIT2 cap each).
set -u
cd "$(dirname "$0")/../.."
B=${BIN:-build-cuda/deepinfer}
OUT=${OUT:-.}
mkdir -p "$OUT"
COMMON=(--device cuda --dummy-weights --model bench/configs/v4-flash-4l --weight-format fp8
        --kv-cache-dtype fp8 --max-model-len 17408 --seed 0)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

timeout "${LIMIT1:-120}" "$B" bench "${COMMON[@]}" --multi-turn 1 --system-len 16384 --input-len 1 \
  --output-len 1 --num-prompts 6 --concurrency 1 --save-result "$OUT/prefix-16k.jsonl" \
  > "$OUT/prefix-16k.log" 2>&1
RC1=$?
timeout "${LIMIT2:-150}" "$B" bench "${COMMON[@]}" --multi-turn 6 --input-len 1024 --output-len 64 \
  --num-prompts 16 --concurrency 8 --save-result "$OUT/prefix-chat.jsonl" \
  > "$OUT/prefix-chat.log" 2>&1
RC2=$?

python3 - "$OUT/prefix-16k.jsonl" "$OUT/prefix-chat.jsonl" "$RC1" "$RC2" "${COMMIT:-unknown}" "$GPU" <<'EOF'
import json, sys

def runs(path):
    try:
        with open(path) as f:
            return {r["prefix_caching"]: r for r in (json.loads(l) for l in f if l.strip())}
    except (OSError, ValueError):
        return {}

def pct(v, q):
    v = sorted(v)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q  # linear interpolation between closest ranks
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)

def row(name, caching, recs, base_p50=None):
    ok = [r for r in recs if r["ok"]]
    t = [1e3 * r["ttft"] for r in ok]
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = sum(r["cached_tokens"] for r in ok)
    p50, p99 = pct(t, 0.5), pct(t, 0.99)
    speed = f"{base_p50 / p50:.1f}x" if base_p50 and p50 == p50 and p50 > 0 else "-"
    share = f"{100.0 * cached / prompt:.1f}%" if prompt else "-"
    print(f"| {name} | {caching} | {len(ok)} | {share} | {p50:.1f} | {p99:.1f} | {speed} |")
    return p50

k16, chat = runs(sys.argv[1]), runs(sys.argv[2])
rc1, rc2, commit, gpu = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
print(f"\nPrefix caching on CUDA ({gpu}, commit {commit}): V4-Flash shapes, 4 layers, FP8 dummy weights, "
      f"FP8 KV, 2048 tokens per step, blocks of 128 tokens (bench rc {rc1} / {rc2})\n")
print("| workload | prefix caching | requests | cached / prompt tokens | TTFT p50 ms | TTFT p99 ms | p50 vs off |")
print("|---|---|---|---|---|---|---|")
if False in k16 and True in k16:
    cold = k16[False]["records"]
    on = k16[True]["records"]
    base = row("16K prompt (16384 shared + 1), cold", "off", cold)
    row("16K prompt, first request (cold)", "on", [r for r in on if r["cached_tokens"] == 0])
    row("16K prompt re-sent (cache hit)", "on", [r for r in on if r["cached_tokens"] > 0], base)
else:
    print("| 16K re-sent prompt | - | run failed: see prefix-16k.log | | | | |")
if False in chat and True in chat:
    off, on = chat[False]["records"], chat[True]["records"]
    base = row("chat 16 x 6 turns (1024 + 64 per turn), all turns", "off", off)
    row("chat, all turns", "on", on, base)
    base = row("chat, turns >= 2", "off", [r for r in off if r["turn"] >= 2])
    row("chat, turns >= 2", "on", [r for r in on if r["turn"] >= 2], base)
else:
    print("| multi-turn chat | - | run failed: see prefix-chat.log | | | | |")
EOF
[ "$RC1" = 0 ] && [ "$RC2" = 0 ] || { echo "a bench run failed: tails of the logs"; tail -5 "$OUT"/prefix-*.log; exit 1; }
