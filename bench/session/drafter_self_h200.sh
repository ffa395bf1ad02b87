#!/usr/bin/env bash
# Session 13: the self-distilled DSpark drafter of models/trained-v41 on the H200 (issue 15).
# Same recipe as the committed drafter (batch 32 x 512, anchors 96, distill 0.5) plus
# --self-windows (windows the frozen backbone continued itself, greedy and T 0.7 in turn, 75 %
# of the batches). Generation stops after the batch that passes GEN_SECS (default 90 s:
# --self-seconds; it prints each batch's time, so the call measures it), then SECS (default
# 200 s) of training; the result
# comes back as one tarball: $OUT/v41-dspark-self.tgz (drafter.safetensors, config.json,
# model.safetensors.index.json, drafter_manifest.json, train.log).
# LIMIT (default 420 s) must stay below the device call's limit_s, and the trainer's --deadline
# (LIMIT - 20 s) makes the run export before LIMIT whatever generation took: the training
# budget is what is left of the deadline after generation, minus 60 s for evaluation + export
# (capped at SECS). Why: in session 13 the call got 499 s, the trainer's own 520 s limit never
# fired, the call was killed and nothing came back; in session 14 (LIMIT 500, SECS 330,
# GEN_SECS 90) generation stopped only after its second batch, at 160 s (80 s per batch of
# 256 windows of 512 tokens: the stop is checked between batches), training was killed at
# step ~2300 by the timeout and nothing came back either.
set -uo pipefail
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}; D=/tmp/v41-dspark-self
timeout ${LIMIT:-420} python3 tools/train_drafter.py --backbone models/trained-v41 --out $D --device cuda \
  --steps auto:${SECS:-200} --deadline $(( ${LIMIT:-420} - 20 )) --batch 32 --seq-len 512 --anchors 96 --eval-windows 32 --eval-batch 8 \
  --log-every 50 --cache '' --self-windows ${WINDOWS:-1024} --self-batch 256 --self-seconds ${GEN_SECS:-90} --self-mix 0.75 \
  > /tmp/train.log 2>&1
echo "rc $?"; grep -iE "generat|held|self-seconds|windows|error|Traceback" /tmp/train.log | head -20; tail -5 /tmp/train.log
cp /tmp/train.log $D/ 2>/dev/null
(cd $D 2>/dev/null && tar czf "$O/v41-dspark-self.tgz" drafter.safetensors config.json model.safetensors.index.json drafter_manifest.json train.log)
ls -la "$O"
