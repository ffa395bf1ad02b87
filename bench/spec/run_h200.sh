#!/usr/bin/env bash
# Speculative decoding on the GPU (issue 15): `deepinfer bench` with models/trained-v4 (a
# trained tiny V4 whose checkpoint ships its MTP-1 drafter) on device cuda, from the
# repository root, with a deepinfer binary built with -DDEEPINFER_CUDA=ON:
#   BIN=build-cuda/deepinfer COMMIT=<sha> bash bench/spec/run_h200.sh
# Runs, each at concurrency 1 and 64 (closed loop, random prompts of INPUT_LEN tokens, greedy
# outputs of OUTPUT_LEN tokens, EOS ignored): no speculation, then the device MTP drafter with
# k = 1, 2, 3 drafts per verification, fixed and confidence-scheduled verification. Prints one
# table (markdown): mean TPOT, output throughput, acceptance length (mean tokens committed per
# verification, bench_spec.h), draft time share, and TPOT / throughput relative to no
# speculation at the same concurrency. Raw outputs stay in $WORK (default a temp dir).
# Environment: BIN, DEVICE (cuda; cpu only to try the script), INPUT_LEN (128), OUTPUT_LEN (128), NUM_PROMPTS (64), CONCURRENCY (1,64),
# LIMIT (seconds per bench invocation, 240), ARGS (extra bench flags, e.g. --weight-format fp8),
# METHOD (mtp; dspark for models/trained-v41, whose checkpoint ships a DSpark drafter), KS (draft
# lengths, default "1 2 3"; DSpark drafts whole blocks: KS=5), TEMPERATURE (0: greedy; else
# sampled verification, request i seeded i).
cd "$(dirname "$0")/../.."
B=${BIN:-build-cuda/deepinfer}
MODEL=${MODEL:-models/trained-v4}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
CONC=${CONCURRENCY:-1,64}
COMMON=(bench --device "${DEVICE:-cuda}" --model "$MODEL" --max-model-len 512 --input-len "${INPUT_LEN:-128}"
        --output-len "${OUTPUT_LEN:-128}" --num-prompts "${NUM_PROMPTS:-64}" --concurrency "$CONC"
        --no-overlap-table --temperature "${TEMPERATURE:-0}")
METHOD=${METHOD:-mtp}
KS=${KS:-1 2 3}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
echo "commit ${COMMIT:-unknown}, model $MODEL, bench ${COMMON[*]:1} ${ARGS:-}"

run() {  # name, then the speculative flags
  local name=$1
  shift
  timeout "${LIMIT:-240}" "$B" "${COMMON[@]}" "$@" ${ARGS:-} --save-result "$WORK/$name.jsonl" \
    > "$WORK/$name.out" 2> "$WORK/$name.err"
  echo "$name: rc=$?" >&2
}

run none --speculative-method none
for k in $KS; do
  for s in fixed confidence; do
    run "$METHOD-k$k-$s" --speculative-method "$METHOD" --num-speculative-tokens "$k" --spec-scheduling "$s"
  done
done

python3 - "$WORK" "$METHOD" "$KS" <<'PY'
import json, os, re, sys
work, method, ks = sys.argv[1], sys.argv[2], sys.argv[3].split()
names = ["none"] + [f"{method}-k{k}-{s}" for k in ks for s in ("fixed", "confidence")]
rows, base = [], {}
for name in names:
    try:
        runs = [json.loads(l) for l in open(os.path.join(work, name + ".jsonl")) if l.strip()]
        out = open(os.path.join(work, name + ".out")).read()
    except OSError:
        rows.append((name, None, None, None, None, None))
        continue
    acc = [float(m) for m in re.findall(r"Acceptance length:\s+([0-9.]+)", out)]
    share = [float(m) for m in re.findall(r"Draft time share \(%\):\s+([0-9.]+)", out)]
    for i, r in enumerate(runs):
        c = r.get("max_concurrency")
        tpot, thr = r.get("mean_tpot_ms"), r.get("output_throughput")
        if name == "none":
            base[c] = (tpot, thr)
        rows.append((name, c, tpot, thr, acc[i] if i < len(acc) else None, share[i] if i < len(share) else None))
print("| run | concurrency | mean TPOT (ms) | output tok/s | acceptance length | draft time (%) | TPOT / none | tok/s / none |")
print("|---|---|---|---|---|---|---|---|")
f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
for name, c, tpot, thr, acc, share in rows:
    if c is None:
        print(f"| {name} | failed (see {work}/{name}.err) | | | | | | |")
        continue
    b = base.get(c)
    rt = tpot / b[0] if b and b[0] and tpot is not None else None
    rx = thr / b[1] if b and b[1] and thr is not None else None
    print(f"| {name} | {c} | {f(tpot, 3)} | {f(thr, 1)} | {f(acc)} | {f(share, 1)} | {f(rt)} | {f(rx)} |")
PY
