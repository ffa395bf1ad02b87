#!/usr/bin/env bash
# Held-out perplexity of the trained tiny models computed by the engine on each backend and
# format (issue 16, deliverable 5), next to PyTorch's evaluation of the same held-out tokens
# (models/<m>/heldout_slice.json, written by tools/record_heldout_slice.py).
#
#   bench/perplexity/run_gpu.sh BUILD_DIR [MODEL_DIR ...]     (default: models/trained-*)
#
# For each model: CPU (reference, official) and CUDA fp32 weights + bf16 KV (reference,
# official), FP8 weights + FP8 KV (official), FP8 weights + bf16 KV (official). Prints one
# markdown table; a row whose runner refuses the model (e.g. V4.1 on CUDA before issue 14)
# says so instead of a number.
set -uo pipefail
build=${1:?usage: run_gpu.sh BUILD_DIR [MODEL_DIR ...]}
shift
tool="$build/tests/tools/model_logits"
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(models/trained-*)
tmp=$(mktemp -d)
echo "| model | device | weights | kv cache | numerics | engine ppl | PyTorch ppl | engine / PyTorch - 1 | seconds |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  [ -f "$m/heldout_slice.json" ] || continue
  while read -r device weights kv numerics; do
    t0=$(date +%s.%N)
    if out=$("$tool" --model "$m" --ids "$m/heldout_slice.txt" --out "$tmp/x" --numerics "$numerics" \
             --full-logits 0 --device "$device" --weight-format "$weights" --kv-cache-dtype "$kv" 2>"$tmp/err"); then
      t1=$(date +%s.%N)
      python3 - "$m" "$numerics" "$out" "$t0" "$t1" "$device" "$weights" "$kv" <<'PY'
import json, math, sys
m, numerics, out, t0, t1, device, weights, kv = sys.argv[1:]
rec = json.load(open(f"{m}/heldout_slice.json"))
r = json.loads(out.strip().splitlines()[-1])
assert r["tokens"] == rec["windows"] * rec["seq_len"], (r, rec)
ppl = math.exp(r["nll_sum"] / r["tokens"])
want = rec[numerics]["ppl"]
print(f"| {m.split('/')[-1]} | {device} | {weights} | {kv} | {numerics} | {ppl:.4f} | {want:.4f} | "
      f"{ppl / want - 1:+.3%} | {float(t1) - float(t0):.1f} |")
PY
    else
      why=$(tail -n 1 "$tmp/err" | tr '|' '/' | cut -c1-160)
      echo "| ${m##*/} | $device | $weights | $kv | $numerics | refused: $why | | | |"
    fi
  done <<'ROWS'
cpu fp32 auto reference
cpu fp32 auto official
cuda fp32 bf16 reference
cuda fp32 bf16 official
cuda fp8 fp8 official
cuda fp8 bf16 official
ROWS
done
rm -rf "$tmp"
