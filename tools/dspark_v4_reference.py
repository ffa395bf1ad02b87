#!/usr/bin/env python3
"""Plain float64 NumPy reference of the DSpark drafter of DeepSeek-V4-Flash-DSpark / V4-Flash-0731
(MODEL_SPEC.md §D with the V4 block of §A.2/§A.3/§A.8/§A.9/§A.10) and the golden
tests/data/golden_v4_dspark/ (a tiny random V4 + DSpark checkpoint generated here with a fixed seed,
and the reference's outputs), used by tests/model/test_dspark_v4.cc and
tests/engine/test_engine_speculative.cc.

Written from MODEL_SPEC §A/§D; the V4 block (local-pre mHC, attention with the per-head q norm,
window QAT of §A.10, score-routed MoE, hc_head) is tools/mtp_reference.py's and the shared helpers
(mHC mix / collapse / expand, RoPE, SwiGLU, MoE, FP8 round trip) are tools/dspark_reference.py's,
both by import; no code from elsewhere. Formula choices: tests/data/golden_v4_dspark/README.md.

Usage:

    python3 tools/dspark_v4_reference.py            # write the checkpoint, the golden, the manifest
    python3 tools/dspark_v4_reference.py --check    # recompute from the committed checkpoint, compare

What differs from V4.1's DSpark (tools/dspark_reference.py):
  * taps: the OUTPUT of each target block l (the streams after block l, mean over the hc streams);
    the target layers are the last three backbone layers;
  * stages mtp.0..mtp.2 are V4 blocks (each site collapses with its own pre, per-head q norm, V4
    window rounding: FP8 on the NoPE dims in 64-blocks, bf16 rope dims), MoE with the backbone's
    experts and top-k (there are no dspark_n_* keys), routing weights always normalised;
  * the collapse after the last stage is mtp.2.hc_head_{fn,base,scale} (as V4's final hc_head);
  * Markov tensors mtp.2.markov_head.markov_w1 / markov_w2; confidence proj [1, D + R];
  * num_nextn_predict_layers stays 1 in the config although there are 3 stages.
The backbone is window-only (ratio 0 layers: mtp_reference.py's float64 V4 backbone has no
compressor), so official numerics are the window K=V rounding of §A.10 on the backbone, the context
keys and the block keys; both reference and official numerics are in the golden.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_goldens as mg  # noqa: E402  (bf16 / FP8 codecs, safetensors writer)
import dspark_reference as DR  # noqa: E402  (rmsnorm, collapse, sigmoid, shared helpers)
import mtp_reference as MR  # noqa: E402  (V4 block, window K=V, attention, hc_head, weights)

OUT = os.path.join(ROOT, "tests", "data", "golden_v4_dspark")
CKPT = os.path.join(OUT, "model")
GOLDEN = os.path.join(OUT, "dspark_v4_reference.safetensors")
T = 40                          # tokens of the reference sequence
DECODE_POSITIONS = (3, 8, 30)   # p < W, p = W (position 0 has left the window), p >> W
SEED = 20260731
N_STAGES = 3

CONFIG = dict(MR.CONFIG)
CONFIG.update({
    "num_hidden_layers": 4, "compress_ratios": [0, 0, 0, 0, 0], "moe_intermediate_size": 16,
    "num_nextn_predict_layers": 1,  # as in the V4-DSpark config: 1, although there are 3 stages
    "dspark_block_size": 5, "dspark_noise_token_id": 63, "dspark_target_layer_ids": [1, 2, 3],
    "dspark_markov_rank": 16,
})

F32_SUFFIXES = MR.F32_SUFFIXES
FP8_NAMES = ("mtp.0.main_proj.weight",)


# ------------------------------------------------------------------------------------------
# Checkpoint
# ------------------------------------------------------------------------------------------

def gen_weights(cfg):
    rng = np.random.default_rng(SEED)
    D, V, hc, R = cfg["hidden_size"], cfg["vocab_size"], cfg["hc_mult"], cfg["dspark_markov_rank"]
    n_taps = len(cfg["dspark_target_layer_ids"])
    W = {}

    def add(n, v):
        W[n] = np.asarray(v, dtype=np.float64)

    MR.gen_backbone(add, rng, cfg)
    add("mtp.0.main_proj.weight", rng.standard_normal((D, n_taps * D)) / np.sqrt(n_taps * D))
    add("mtp.0.main_norm.weight", 1.0 + 0.1 * rng.standard_normal(D))
    for k in range(N_STAGES):
        MR.gen_block(add, rng, f"mtp.{k}.", cfg)
    last = f"mtp.{N_STAGES - 1}."
    add(last + "norm.weight", 1.0 + 0.1 * rng.standard_normal(D))
    add(last + "hc_head_fn", rng.standard_normal((hc, hc * D)) / np.sqrt(hc * D))
    add(last + "hc_head_base", 0.1 * rng.standard_normal(hc))
    add(last + "hc_head_scale", 0.5 + 0.1 * rng.standard_normal(1))
    add(last + "markov_head.markov_w1.weight", 0.3 * rng.standard_normal((V, R)))
    add(last + "markov_head.markov_w2.weight", rng.standard_normal((V, R)) / np.sqrt(R))
    add(last + "confidence_head.proj.weight", rng.standard_normal((1, D + R)) / np.sqrt(D + R))
    entries = []
    for n, v in W.items():
        if n in FP8_NAMES:
            codes, scales, deq = mg.quantize_fp8_block(v, 128)
            W[n] = deq
            entries += [mg.np_tensor(n, codes, "F8_E4M3"),
                        mg.np_tensor(n[:-len(".weight")] + ".scale", scales, "F8_E8M0")]
        elif n.endswith(F32_SUFFIXES):
            W[n] = v.astype(np.float32).astype(np.float64)
            entries.append(mg.np_tensor(n, v, "F32"))
        else:
            W[n] = mg.round_bf16(v)
            entries.append(mg.np_tensor(n, v, "BF16"))
    return W, entries


# ------------------------------------------------------------------------------------------
# Backbone with the taps (V4, window-only)
# ------------------------------------------------------------------------------------------

def backbone(W, cfg, ids, qat):
    """mtp_reference.backbone's loop, recording each block's output streams: returns the streams
    after every block [L, T, hc, D] and the logits [T, V]."""
    n, hc = len(ids), cfg["hc_mult"]
    X = np.repeat(W["embed.weight"][ids][:, None, :], hc, axis=1)
    pos = np.arange(n)
    valid = MR.causal_window(n, cfg["sliding_window"])
    outs = []
    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."

        def attn_fn(x, p=p):
            kv = MR.window_kv(W, p, cfg, x, pos, qat)
            return MR.attention(W, p, cfg, x, pos, np.broadcast_to(kv, (n, *kv.shape)), valid)

        X = MR.block(W, p, cfg, X, attn_fn)
        outs.append(X)
    h = MR.hc_head(X, W["hc_head_fn"], W["hc_head_base"], W["hc_head_scale"], cfg)
    return np.stack(outs), MR.head_logits(W, cfg, h, "norm.weight")


def taps_of(outs, layers):
    """§D.1 (V4-DSpark): f_l = mean over hc of the streams after block l; [T, n_taps, D]."""
    return np.stack([outs[l].mean(axis=1) for l in layers], axis=1)


def main_features(W, cfg, taps):
    return DR.rmsnorm(taps.reshape(taps.shape[0], -1) @ W["mtp.0.main_proj.weight"].T,
                      W["mtp.0.main_norm.weight"], cfg["rms_norm_eps"])


def context_kv(W, cfg, m, qat):
    """Per stage k: kappa_p = QAT(RoPE_p(kv_norm_k(wkv_k m_p))), raw m, V4 window rounding."""
    pos = np.arange(m.shape[0])
    return np.stack([MR.window_kv(W, f"mtp.{k}.", cfg, m, pos, qat) for k in range(N_STAGES)])


# ------------------------------------------------------------------------------------------
# Draft (§D.2-§D.4, V4 stages)
# ------------------------------------------------------------------------------------------

def draft(W, cfg, kappa, p, y, qat, noise=None, variant=None):
    """Draft block at decode position p with anchor y. variant (sensitivity table only):
    'collapse_last_pre' (V4.1's last-site collapse instead of hc_head), 'ctx_excl_p',
    'no_q_norm' (V4.1 attention), 'v41_stage_mhc' (single-pass pre threading in the stages)."""
    g, hc, Wn, eps = cfg["dspark_block_size"], cfg["hc_mult"], cfg["sliding_window"], cfg["rms_norm_eps"]
    nu = cfg["dspark_noise_token_id"] if noise is None else noise
    ids = np.array([y] + [nu] * (g - 1))
    X = np.repeat(W["embed.weight"][ids][:, None, :], hc, axis=1)
    bpos = p + 1 + np.arange(g)
    lo, hi = max(0, p - Wn + 1), (p if variant == "ctx_excl_p" else p + 1)
    pre_mix = DR.e0(g, hc)
    last_pre = None
    for k in range(N_STAGES):
        pre = f"mtp.{k}."
        ctx = kappa[k, lo:hi]

        def attn_fn(x, pre=pre, ctx=ctx):
            keys = np.concatenate([ctx, MR.window_kv(W, pre, cfg, x, bpos, qat)], axis=0)
            keys = np.broadcast_to(keys, (g, *keys.shape))
            if variant == "no_q_norm":
                return DR.attention(W, pre, cfg, x, bpos, keys)
            return MR.attention(W, pre, cfg, x, bpos, keys, np.ones(keys.shape[:2], bool))

        if variant == "v41_stage_mhc":
            X, pre_mix = DR.block(W, pre, cfg, X, pre_mix, attn_fn, cfg["n_routed_experts"],
                                  cfg["num_experts_per_tok"], normalise_top1=True)
            last_pre = pre_mix
        else:
            X = MR.block(W, pre, cfg, X, attn_fn)
            f_pre, _, _ = DR.hc_mix(X, W[pre + "hc_ffn_fn"], W[pre + "hc_ffn_base"], W[pre + "hc_ffn_scale"], cfg)
            last_pre = f_pre
    last = f"mtp.{N_STAGES - 1}."
    if variant in ("collapse_last_pre", "v41_stage_mhc"):
        h = DR.collapse(X, last_pre)
    else:
        h = MR.hc_head(X, W[last + "hc_head_fn"], W[last + "hc_head_base"], W[last + "hc_head_scale"], cfg)
    base = DR.rmsnorm(h, W[last + "norm.weight"], eps) @ W["head.weight"].T
    W1, W2 = W[last + "markov_head.markov_w1.weight"], W[last + "markov_head.markov_w2.weight"]
    wc = W[last + "confidence_head.proj.weight"][0]
    logits = base.copy()
    toks, conf = [int(y)], []
    for i in range(g):
        e = W1[toks[i]]
        logits[i] += W2 @ e
        toks.append(int(np.argmax(logits[i])))
        conf.append(float(wc @ np.concatenate([h[i], e])))
    return dict(logits=logits, base_logits=base, draft_ids=np.array(toks[1:]), hidden=h,
                confidence=np.array(conf))


# ------------------------------------------------------------------------------------------
# Golden
# ------------------------------------------------------------------------------------------

def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def margin(x):
    s = np.sort(x, axis=-1)
    return s[..., -1] - s[..., -2]


def compute(W, cfg):
    ids = np.random.default_rng(SEED + 1).integers(2, cfg["vocab_size"] - 1, T)
    layers = cfg["dspark_target_layer_ids"]
    out = {"input_ids": (ids.astype(np.int32), "I32"),
           "decode_positions": (np.array(DECODE_POSITIONS, np.int32), "I32")}
    rep = {"decode_positions": list(DECODE_POSITIONS), "checks": {}, "invariants": {}, "sensitivity": {}}
    res = {}
    for numerics, qat in (("reference", False), ("official", True)):
        outs, logits = backbone(W, cfg, ids, qat)
        # self-check: this loop is mtp_reference.backbone with the streams kept
        _, logits_mr = MR.backbone(W, cfg, ids, qat)
        assert np.array_equal(logits, logits_mr)
        taps = taps_of(outs, layers)
        m = main_features(W, cfg, taps)
        kappa = context_kv(W, cfg, m, qat)
        rows = []
        for p in DECODE_POSITIONS:
            y = int(np.argmax(logits[p]))
            r = draft(W, cfg, kappa, p, y, qat)
            r["p"], r["y"], r["y_margin"] = p, y, float(margin(logits[p]))
            rows.append(r)
        res[numerics] = dict(outs=outs, logits=logits, taps=taps, m=m, kappa=kappa, rows=rows)
        s = "" if numerics == "reference" else "_official"
        out["backbone_logits" + s] = (logits, "F32")
        out["tap_features" + s] = (taps, "F32")
        out["context_kv" + s] = (kappa, "F32")
        out["anchor_ids" + s] = (np.array([r["y"] for r in rows], np.int32), "I32")
        out["logits" + s] = (np.stack([r["logits"] for r in rows]), "F32")
        out["draft_ids" + s] = (np.stack([r["draft_ids"] for r in rows]).astype(np.int32), "I32")
        out["confidence" + s] = (np.stack([r["confidence"] for r in rows]), "F32")
        out["hidden" + s] = (np.stack([r["hidden"] for r in rows]), "F32")
        rep[f"anchors_{numerics}"] = [r["y"] for r in rows]
        rep[f"draft_ids_{numerics}"] = [r["draft_ids"].tolist() for r in rows]
        rep["checks"][f"anchor_margin_min_{numerics}"] = min(r["y_margin"] for r in rows)
        rep["checks"][f"draft_logits_top2_margin_min_{numerics}"] = float(
            min(margin(r["logits"]).min() for r in rows))
    R, O = res["reference"], res["official"]
    g = cfg["dspark_block_size"]
    # §E.16: bidirectional block (another noise token changes slot 0), determinism.
    inv = rep["invariants"]
    r = R["rows"][-1]
    alt = draft(W, cfg, R["kappa"], r["p"], r["y"], False, noise=(cfg["dspark_noise_token_id"] + 1) % cfg["vocab_size"])
    inv["E16_other_noise_changes_slot0_logits_maxabs"] = float(np.abs(alt["base_logits"][0] - r["base_logits"][0]).max())
    assert inv["E16_other_noise_changes_slot0_logits_maxabs"] > 1e-3
    again = draft(W, cfg, R["kappa"], r["p"], r["y"], False)
    inv["temperature0_deterministic_bit_exact"] = bool(np.array_equal(again["logits"], r["logits"]))
    # The context window: position p-W does not matter, p-W+1 does.
    p = DECODE_POSITIONS[-1]
    for q, key in ((p - cfg["sliding_window"], "tap_at_p_minus_W_changes_nothing"),
                   (p - cfg["sliding_window"] + 1, "tap_at_p_minus_W_plus_1_changes_logits_maxabs")):
        tp = R["taps"].copy()
        tp[q] += 1.0
        d = float(np.abs(draft(W, cfg, context_kv(W, cfg, main_features(W, cfg, tp), False), p, r["y"], False)["logits"]
                         - r["logits"]).max())
        inv[key] = d if "maxabs" in key else d == 0.0
    assert inv["tap_at_p_minus_W_changes_nothing"] and inv["tap_at_p_minus_W_plus_1_changes_logits_maxabs"] > 1e-3
    # Taps moved by one layer (= V4.1's reading "streams entering layer l" here).
    moved = taps_of(R["outs"], [l - 1 for l in layers])
    km = context_kv(W, cfg, main_features(W, cfg, moved), False)
    mv = [draft(W, cfg, km, x["p"], x["y"], False) for x in R["rows"]]
    rep["sensitivity"]["taps_moved_by_one_layer_or_entering"] = {
        "logits_maxdiff_rel": max(rel(a["logits"], x["logits"]) for a, x in zip(mv, R["rows"])),
        "draft_ids_agree": f"{sum(int((a['draft_ids'] == x['draft_ids']).sum()) for a, x in zip(mv, R['rows']))}/{g * len(mv)}"}
    for v in ("collapse_last_pre", "ctx_excl_p", "no_q_norm", "v41_stage_mhc"):
        alts = [draft(W, cfg, R["kappa"], x["p"], x["y"], False, variant=v) for x in R["rows"]]
        rep["sensitivity"][v] = {
            "logits_maxdiff_rel": max(rel(a["logits"], x["logits"]) for a, x in zip(alts, R["rows"])),
            "draft_ids_agree": f"{sum(int((a['draft_ids'] == x['draft_ids']).sum()) for a, x in zip(alts, R['rows']))}/{g * len(alts)}"}
    rep["official_vs_reference"] = {
        "backbone_logits_maxdiff_rel": rel(O["logits"], R["logits"]),
        "draft_logits_maxdiff_rel": max(rel(a["logits"], b["logits"]) for a, b in zip(O["rows"], R["rows"]))}
    return out, rep


def read_golden(path):
    raw = DR._read_raw(path)
    return {n: (dt, shape, buf) for n, (dt, shape, buf) in raw.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="recompute from the committed checkpoint, compare")
    args = ap.parse_args()
    if args.check:
        W, cfg = MR.load_checkpoint(CKPT)
        out, rep = compute(W, cfg)
        have = read_golden(GOLDEN)
        for n, (v, dt) in out.items():
            e = mg.np_tensor(n, np.asarray(v), dt)
            assert have[n][0] == dt and list(have[n][1]) == list(e[2]) and have[n][2] == e[3], n
        print(json.dumps(rep, indent=1))
        print("golden matches bit for bit")
        return
    cfg = CONFIG
    W, entries = gen_weights(cfg)
    os.makedirs(CKPT, exist_ok=True)
    mg.write_safetensors(os.path.join(CKPT, "model.safetensors"), entries,
                         metadata={"format": "pt", "generator": "tools/dspark_v4_reference.py"})
    mg.write_json(os.path.join(CKPT, "config.json"), cfg)
    W2, _ = MR.load_checkpoint(CKPT)
    assert W2.keys() == W.keys() and all(np.array_equal(W[n], W2[n]) for n in W), "stored weights differ"
    out, rep = compute(W2, cfg)
    mg.write_safetensors(GOLDEN, [mg.np_tensor(n, np.asarray(v), dt) for n, (v, dt) in out.items()],
                         metadata={"format": "pt", "generator": "tools/dspark_v4_reference.py"})
    with open(GOLDEN, "rb") as f:
        rep["golden_sha256"] = hashlib.sha256(f.read()).hexdigest()
    rep["bytes"] = {"checkpoint": os.path.getsize(os.path.join(CKPT, "model.safetensors")),
                    "golden": os.path.getsize(GOLDEN)}
    rep["tensors"] = {n: f"{dt} {list(np.shape(v))}" for n, (v, dt) in out.items()}
    mg.write_json(os.path.join(OUT, "manifest.json"), rep)
    print(json.dumps({k: v for k, v in rep.items() if k != "tensors"}, indent=1))


if __name__ == "__main__":
    main()
