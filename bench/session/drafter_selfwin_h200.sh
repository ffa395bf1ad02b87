#!/usr/bin/env bash
# Issue 15: the DSpark drafter of models/trained-v41 trained on windows the *engine* generated
# (tools/gen_self_windows.py, before the call, on the CPU here) instead of train_drafter's own
# PyTorch generation (80 s per 256 windows on the H200, which left session 14's run 256
# windows and an overfit drafter: engine greedy acceptance 1.92 vs the committed one's 2.06).
# Before the call, here (2 cores: ~1150 generated tokens/s, so 4096 windows of 448 new tokens
# take ~27 min; run it in the background at the start of the session). How many: the call's
# ~50 K self samples see 4096 windows ~12 times each; the CPU A/B of 2026-12-04
# (bench/results/drafter-selfwin-cpu-2026-12-04-b788683.md) lost to overfitting at 9.4 passes
# and gained nothing past ~2; the file is ~1.15 bytes per token (4096 x 512: ~2.4 MB).
#   make build   # the Python package
#   mkdir -p .carry/selfwin && PYTHONPATH=python DEEPINFER_BUILD=build OMP_NUM_THREADS=2 \
#     python3 tools/gen_self_windows.py --backbone models/trained-v41 --windows 4096 \
#       --seq-len 512 --batch 128 --out .carry/selfwin/windows.npz
# Then one device call with carry [".carry/selfwin"] (no debs: nothing is built there):
#   LIMIT=500 SECS=330 bash bench/session/drafter_selfwin_h200.sh      # call timeout >= 530
# Same recipe as the committed drafter (batch 32 x 512, anchors 96, distill 0.5, auto:SECS)
# plus --self-windows-file (75 % of the batches); --deadline (LIMIT - 20) makes it export
# before LIMIT; EXTRA adds trainer arguments (e.g. EXTRA="--experts 8 --markov-rank 32" for a
# larger drafter; the engine reads its shape from config.json). The result: $OUT/v41-dspark-selfwin.tgz; then, here, the engine's acceptance:
#   cp -r models/trained-v41 /tmp/ck && tar xzf v41-dspark-selfwin.tgz -C /tmp/ck &&
#   python3 tools/train_drafter.py --acceptance /tmp/ck      # compare 2.06 greedy (official)
set -uo pipefail
cd "$(dirname "$0")/../.."
W=.carry/selfwin/windows.npz
[ -f "$W" ] || { echo "drafter_selfwin_h200.sh: $W missing (see the header)" >&2; exit 2; }
O=${OUT:-/tmp}; D=/tmp/v41-dspark-selfwin
timeout ${LIMIT:-500} python3 tools/train_drafter.py --backbone models/trained-v41 --out $D --device cuda \
  --steps auto:${SECS:-330} --deadline $(( ${LIMIT:-500} - 20 )) --batch 32 --seq-len 512 --anchors 96 \
  --eval-windows 32 --eval-batch 8 --log-every 100 --cache '' --self-windows-file $W --self-mix ${MIX:-0.75} \
  ${EXTRA:-} > /tmp/train.log 2>&1
echo "rc $?"; grep -iE "self-generated|deadline|ms/step|held|error|Traceback" /tmp/train.log | head -12; tail -3 /tmp/train.log
cp /tmp/train.log $D/ 2>/dev/null
(cd $D 2>/dev/null && tar czf "$O/v41-dspark-selfwin.tgz" drafter.safetensors config.json model.safetensors.index.json drafter_manifest.json train.log)
ls -la "$O"
