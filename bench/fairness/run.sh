#!/usr/bin/env bash
# Fairness while a long prompt is prefilled (issue 12, deliverable 6), before/after side by
# side in one run: `deepinfer bench --fairness` with the prefill limits off (the old
# scheduler: a prefill chunk takes all of max_num_batched_tokens) and with the defaults
# (max_prefill_tokens_with_decodes 512, long_prefill_token_threshold 256), then any
# "P T" pairs in SWEEP. Writes $OUT/fairness-<date>-<commit>.md with the machine and command.
#   bash bench/fairness/run.sh                                   # CPU, built-in tiny model
#   BIN=build-cuda/deepinfer ARGS="--device cuda --dummy-weights --model bench/configs/v4-flash-4l \
#     --weight-format fp8 --max-model-len 32768" bash bench/fairness/run.sh   # H200
# Env: BIN (default build/deepinfer), ARGS (engine options), LONG (20000), STREAMS (4),
# REPEAT (2), SWEEP (e.g. "1024 512,256 128"), OUT (bench/results).
set -u
cd "$(dirname "$0")/../.."
B=${BIN:-build/deepinfer}
OUT=${OUT:-bench/results}
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
FILE="$OUT/fairness-$(date +%F)-$COMMIT.md"
COMMON="bench --fairness --long-len ${LONG:-20000} --streams ${STREAMS:-4} --repeat ${REPEAT:-2} ${ARGS:-}"
{
  echo "# Fairness: streams and a short request while a ${LONG:-20000}-token prompt is prefilled"
  echo
  echo "$(date -u +%FT%TZ), commit $COMMIT, $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name --format=csv,noheader | head -1; fi
  echo
  echo "Command: \`$B $COMMON [--max-prefill-tokens-with-decodes P --long-prefill-token-threshold T]\`"
  echo
} > "$FILE"
run() {  # P T [--no-alone]
  "$B" $COMMON --max-prefill-tokens-with-decodes "$1" --long-prefill-token-threshold "$2" ${3:-} --out /tmp/fairness.$$.md 2>/dev/null
  echo "rc=$?" >&2
  # Header once, then the rows.
  if ! grep -q '^| run' "$FILE"; then cat /tmp/fairness.$$.md; else grep -v '^| run\|^|---' /tmp/fairness.$$.md; fi >> "$FILE"
}
run 0 0
run 512 256
IFS=',' read -ra PAIRS <<< "${SWEEP:-}"
for pt in "${PAIRS[@]}"; do run $pt --no-alone; done
rm -f /tmp/fairness.$$.md
cat "$FILE"
