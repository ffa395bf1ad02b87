#!/usr/bin/env bash
# Issue 22, deliverable 1: OUR kernels and DeepGEMM at the same problems, in ONE device call.
# From the repository root of the GPU machine, with .carry/dg carried (deepgemm.txz +
# anchor_deepgemm.py, as bench/anchors/deepgemm_run.sh wants):
#     bash bench/anchors/side_by_side.sh
#  (0) dumps the anchor's seeded top-6/256 routing (routing_counts() of anchor_deepgemm.py, the
#      same torch generator calls) as int32 ids, so our MoE cases route exactly as DeepGEMM's;
#  (a) builds (bench/anchors/build_ours.sh) and runs bench/anchors/ours_at_anchor_shapes;
#  (b) runs bench/anchors/deepgemm_run.sh with ANCHOR_ONLY = the same cases;
#  (c) with SBS_FLASHMLA=1 (and .carry/snap, .carry/anchors present), bench/attention_decode/run_h200.sh;
#  then joins (a) and (b) by case name into $OUT/side-by-side.md. The steps run one after the
#  other (never two programs on the GPU at once). Our run goes first: it is the shorter one.
# Env: SBS_ONLY (regex of case names), SBS_TOTAL_S (540: the whole script's wall budget),
#      OURS_BUDGET_S (130), ANCHOR_BUDGET_S (from what is left), ANCHOR_JIT_WORKERS (12).
set -uo pipefail
OUT=${OUT:-/tmp/sbs}
mkdir -p "$OUT"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
TOTAL=${SBS_TOTAL_S:-540}
ONLY=${SBS_ONLY:-'^(dense (wq_a|wq_b|wo_b|sh_w13|sh_w2|head) M=(1|64|256|4096|16384)$|contig T=(4096|16384) w(13|2)$|masked B=(1|16|64|256) w(13|2)$|mqa (prefill|decode) )'}
NPROC=$(nproc)

echo "=== (0) anchor routing ids  [t=$(el)s]"
RDIR=/tmp/sbs_routing
mkdir -p "$RDIR"
python3 - "$RDIR" <<'PY' || echo "routing dump failed: our MoE cases use their own uniform top-6"
import sys, struct, torch
for t in (1, 16, 64, 256, 4096, 16384):   # anchor_deepgemm.routing_counts(tokens), before bincount
    gen = torch.Generator().manual_seed(1000 + t)
    idx = torch.rand(t, 256, generator=gen).topk(6, dim=1).indices.to(torch.int32).flatten().tolist()
    with open(f'{sys.argv[1]}/routing_T{t}.i32', 'wb') as f:
        f.write(struct.pack(f'<{len(idx)}i', *idx))
    cnt = torch.bincount(torch.tensor(idx), minlength=256)
    print(f'T={t}: experts={int((cnt > 0).sum())} max rows/expert={int(cnt.max())}')
PY

echo "=== (a) ours: build  [t=$(el)s]"
if ! bench/anchors/build_ours.sh /tmp/ours_at_anchor "$NPROC" > "$OUT/ours-build.log" 2>&1; then
  tail -40 "$OUT/ours-build.log"
else
  echo "=== (a) ours: run  [t=$(el)s]"
  timeout $(( ${OURS_BUDGET_S:-130} + 60 )) /tmp/ours_at_anchor --routing "$RDIR" --out "$OUT/ours.md" \
    --only "$ONLY|^moe layer T=" --budget "${OURS_BUDGET_S:-130}" > "$OUT/ours.log" 2>&1
  echo "ours rc=$? [t=$(el)s]"
  cat "$OUT/ours.log"
fi

echo "=== (b) DeepGEMM  [t=$(el)s]"
LEFT=$(( TOTAL - $(el) ))
# deepgemm_run.sh builds DeepGEMM (up to twice) before the anchor's own clock starts: ~150 s kept.
export ANCHOR_BUDGET_S=${ANCHOR_BUDGET_S:-$(( LEFT > 330 ? LEFT - 150 : 180 ))}
export ANCHOR_JIT_WORKERS=${ANCHOR_JIT_WORKERS:-12} ANCHOR_ONLY="$ONLY"
echo "ANCHOR_BUDGET_S=$ANCHOR_BUDGET_S"
OUT=$OUT timeout $(( LEFT > 120 ? LEFT - 20 : 100 )) bash bench/anchors/deepgemm_run.sh > /dev/null 2>&1
echo "deepgemm_run rc=$? [t=$(el)s]"
tail -15 "$OUT/deepgemm-run.log" 2>/dev/null

if [ "${SBS_FLASHMLA:-0}" = 1 ] && [ -d .carry/snap/src ] && [ -d .carry/anchors ]; then
  echo "=== (c) FlashMLA sparse decode vs ours  [t=$(el)s]"
  OUT=/tmp/sbs_fmla timeout 200 bash bench/attention_decode/run_h200.sh > "$OUT/flashmla.txt" 2>&1
  for f in /tmp/sbs_fmla/bench.txt /tmp/sbs_fmla/anchor.txt; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; } >> "$OUT/flashmla.txt"; done
fi

echo "=== join  [t=$(el)s]"
python3 - "$OUT" <<'PY'
import json, os, re, sys
out = sys.argv[1]
ours, hdr = [], ''
try:
    for l in open(f'{out}/ours.md'):
        if l.startswith('device='): hdr = l.strip()
        c = [x.strip() for x in l.strip().strip('|').split('|')]
        if l.startswith('| ') and len(c) == 8 and c[0] != 'case' and not c[0].startswith('---'):
            ours.append(dict(case=c[0], impl=c[1], us=float(c[3] or 'nan'), tflops=float(c[4] or 'nan'),
                             gbps=float(c[5] or 'nan'), diff=c[6], note=c[7]))
except OSError as e:
    print('no ours.md:', e)
anc, info = {}, {}
try:
    j = json.load(open(f'{out}/anchor-deepgemm.json')); info = j.get('info', {})
    anc = {r['case']: r for r in j.get('rows', [])}
except (OSError, ValueError) as e:
    print('no anchor-deepgemm.json:', e)
def fom(case):   # the anchor's figure of merit for the family (its LEGEND)
    m = re.match(r'dense .* M=(\d+)', case)
    if m: return 'gbps' if int(m.group(1)) <= 256 else 'tflops'
    return 'gbps' if case.startswith(('masked', 'mqa decode')) else 'tflops'
def f(v):
    return '' if v is None or v != v else f'{v:.2f}' if v < 10 else f'{v:.1f}' if v < 100 else f'{v:.0f}'
rows = ['| case | ours: impl | ours us | DeepGEMM us | FoM | ours | DeepGEMM | ours/DeepGEMM (speed) | ours rel.err | DeepGEMM rel.err / note |',
        '|---|---|---|---|---|---|---|---|---|---|']
for r in ours:
    a, k = anc.get(r['case'], {}), fom(r['case'])
    au = a.get('us')
    ratio = f'{au / r["us"]:.2f}x' if au and r['us'] == r['us'] and r['us'] > 0 else ''
    bad = ' BAD' if r['note'].startswith('BAD') else ''
    anote = (f'{a["diff"]:.1e}' if a.get('diff') is not None else '') + (' ' + a.get('note', '') if a.get('note', '').startswith(('BAD', 'ERROR', 'skipped')) else '')
    rows.append(f'| {r["case"]} | {r["impl"]} | {f(r["us"])} | {f(au)} | {"GB/s" if k == "gbps" else "TFLOP/s"} | '
                f'{f(r[k])} | {f(a.get(k))} | {ratio} | {r["diff"]}{bad} | {anote} |')
missing = [c for c in anc if c not in {r['case'] for r in ours}]
txt = '\n'.join(['# Ours vs DeepGEMM at identical problems (one device call)', '',
                 f'ours: {hdr}', '', 'DeepGEMM: ' + ', '.join(f'{k}={v}' for k, v in info.items()), '',
                 'ours/DeepGEMM (speed) = DeepGEMM us / ours us (> 1: ours faster). FoM = the anchor\'s figure of merit '
                 '(dense M <= 256, masked, mqa decode: GB/s; else TFLOP/s over real rows). MoE: same top-6/256 routing '
                 'when ours.md notes "anchor routing"; our w13 is W1+W3 (N = 2048 each) in one launch, fp32 out. '
                 'Timers: ours = CUDA events around one call (launch latency included, a few us: it weighs on the '
                 'smallest cases); DeepGEMM = kineto kernel time (events where its note says so).', ''] + rows
                + ([''] + [f'anchor-only case: {c}' for c in missing] if missing else []))
open(f'{out}/side-by-side.md', 'w').write(txt + '\n')
print(txt)
PY
echo "=== all done  [t=$(el)s]"
