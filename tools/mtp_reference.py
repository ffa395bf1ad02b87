#!/usr/bin/env python3
"""Plain float64 NumPy reference of DeepSeek-V4's MTP-1 drafter (MODEL_SPEC.md §A.9, §D.7) and the
golden tests/data/golden_mtp/ (a tiny random V4 checkpoint with an `mtp.0` module + the reference's
outputs), used by tests/model/test_mtp.cc.

Written from MODEL_SPEC §A (V4 block: §A.2 mHC with the local pre, §A.3 attention with the per-head
q norm, window and sink, §A.8 score-routed MoE, §A.9 hc_head / head / MTP, §A.10 QAT of the window
K=V); helpers shared with tools/dspark_reference.py (mHC mix / collapse / expand, RoPE, SwiGLU,
MoE) by import; no code from elsewhere.

Usage:

    python3 tools/mtp_reference.py            # write the checkpoint and the golden
    python3 tools/mtp_reference.py --check    # recompute from the committed checkpoint, compare

The model: V4 with two ratio-0 (sliding-window) layers and score-routed MoE, so that the backbone
is a short float64 loop too (the engine's backbone is checked against transformers elsewhere;
here the backbone logits are compared as well, which checks this file's V4 block against it).

MTP (§A.9): at MTP position t, Z_j = e_proj(enorm(embed(tok_{t+1}))) + h_proj(hnorm(X^L[t, j])),
one V4 block at position t (RoPE at t, theta = rope_theta, no YaRN) whose window attention reads
the MTP keys of positions t-W+1..t, then logits = head . norm(hc_head_mtp(streams)): the
prediction of token t+2. Teacher-forced over a sequence this gives `mtp_logits[t]` for every t;
the engine's Model::draft after positions 0..t with next = ids[t+1] must give the same. Chained
drafts (the engine's choice for n > 1): step i at position p+i feeds the block's own output
streams of step i-1 and its argmax, attending to the committed MTP keys (< p) and the chain's.

Importable API (float64): load_checkpoint(dir), backbone(W, cfg, ids, qat) -> (X^L, logits),
mtp_sequence(W, cfg, XL, ids, qat) -> (logits [T-1, V], keys), mtp_chain(W, cfg, XL, keys, p, y, n, qat).
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_goldens as mg  # noqa: E402  (bf16 / FP8 codecs, safetensors writer)
import dspark_reference as DR  # noqa: E402  (rmsnorm, hc_mix, collapse, expand, rope, moe)

OUT = os.path.join(ROOT, "tests", "data", "golden_mtp")
CKPT = os.path.join(OUT, "model")
GOLDEN = os.path.join(OUT, "mtp_reference.safetensors")
T = 40                      # tokens of the reference sequence
CHAIN_POSITIONS = (3, 8, 30)  # p < W, p = W (position 0 leaves the window), p >> W
CHAIN = 3                   # chained drafts per position
SEED = 20261202

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 64, "q_lora_rank": 32,
    "o_groups": 2, "o_lora_rank": 16, "sliding_window": 8, "compress_ratios": [0, 0, 0],
    "compress_rope_theta": 160000.0, "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 1024,
                     "beta_fast": 32.0, "beta_slow": 1.0},
    "index_n_heads": 2, "index_head_dim": 64, "index_topk": 4,
    "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "num_hash_layers": 0, "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
    "hidden_act": "silu", "max_position_embeddings": 4096, "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                            "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
}

# ------------------------------------------------------------------------------------------
# Checkpoint: random weights, stored BF16 (F32 for hc_*, attn_sink, gate.bias), e_proj / h_proj
# FP8 e4m3 with 128x128 ue8m0 scales as in the official checkpoints.
# ------------------------------------------------------------------------------------------

F32_SUFFIXES = ("_fn", "_base", "_scale", "attn_sink", "gate.bias")
FP8_NAMES = ("mtp.0.e_proj.weight", "mtp.0.h_proj.weight")


def gen_block(add, rng, p, cfg):
    D, H, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["head_dim"]
    Rq, G, Ro, hc = cfg["q_lora_rank"], cfg["o_groups"], cfg["o_lora_rank"], cfg["hc_mult"]
    E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    lin = lambda n, k: rng.standard_normal((n, k)) / np.sqrt(k)  # noqa: E731
    norm = lambda n: 1.0 + 0.1 * rng.standard_normal(n)  # noqa: E731
    add(p + "attn_norm.weight", norm(D))
    add(p + "ffn_norm.weight", norm(D))
    for site in ("attn", "ffn"):
        add(f"{p}hc_{site}_fn", rng.standard_normal(((2 + hc) * hc, hc * D)) / np.sqrt(hc * D))
        add(f"{p}hc_{site}_base", 0.1 * rng.standard_normal((2 + hc) * hc))
        add(f"{p}hc_{site}_scale", 0.5 + 0.1 * rng.standard_normal(3))
    a = p + "attn."
    add(a + "wq_a.weight", lin(Rq, D))
    add(a + "q_norm.weight", norm(Rq))
    add(a + "wq_b.weight", lin(H * d, Rq))
    add(a + "wkv.weight", lin(d, D))
    add(a + "kv_norm.weight", norm(d))
    add(a + "wo_a.weight", lin(G * Ro, H * d // G))
    add(a + "wo_b.weight", lin(D, G * Ro))
    add(a + "attn_sink", rng.standard_normal(H))
    f = p + "ffn."
    add(f + "gate.weight", lin(E, D))
    add(f + "gate.bias", 0.1 * rng.standard_normal(E))
    for e in [str(i) for i in range(E)] + ["shared"]:
        q = f + ("shared_experts." if e == "shared" else f"experts.{e}.")
        add(q + "w1.weight", lin(I, D))
        add(q + "w3.weight", lin(I, D))
        add(q + "w2.weight", lin(D, I))


def gen_backbone(add, rng, cfg):
    """The random V4 backbone (embedding, head, final norm, hc_head, the layers), drawn from
    `rng` in this order (tools/dspark_v4_reference.py draws its backbone with it too)."""
    D, V, hc = cfg["hidden_size"], cfg["vocab_size"], cfg["hc_mult"]
    add("embed.weight", rng.standard_normal((V, D)))
    add("head.weight", rng.standard_normal((V, D)) / np.sqrt(D))
    add("norm.weight", 1.0 + 0.1 * rng.standard_normal(D))
    add("hc_head_fn", rng.standard_normal((hc, hc * D)) / np.sqrt(hc * D))
    add("hc_head_base", 0.1 * rng.standard_normal(hc))
    add("hc_head_scale", 0.5 + 0.1 * rng.standard_normal(1))
    for l in range(cfg["num_hidden_layers"]):
        gen_block(add, rng, f"layers.{l}.", cfg)


def gen_weights(cfg):
    rng = np.random.default_rng(SEED)
    D, hc = cfg["hidden_size"], cfg["hc_mult"]
    W = {}

    def add(n, v):
        W[n] = np.asarray(v, dtype=np.float64)

    gen_backbone(add, rng, cfg)
    m = "mtp.0."
    gen_block(add, rng, m, cfg)
    add(m + "e_proj.weight", rng.standard_normal((D, D)) / np.sqrt(D))
    add(m + "h_proj.weight", rng.standard_normal((D, D)) / np.sqrt(D))
    for n in ("enorm", "hnorm", "norm"):
        add(f"{m}{n}.weight", 1.0 + 0.1 * rng.standard_normal(D))
    add(m + "hc_head_fn", rng.standard_normal((hc, hc * D)) / np.sqrt(hc * D))
    add(m + "hc_head_base", 0.1 * rng.standard_normal(hc))
    add(m + "hc_head_scale", 0.5 + 0.1 * rng.standard_normal(1))
    # Round to the storage formats: the stored values are the model's weights everywhere.
    entries = []
    for n, v in W.items():
        if n in FP8_NAMES:
            codes, scales, deq = mg.quantize_fp8_block(v, 128)
            W[n] = deq
            entries += [mg.np_tensor(n, codes, "F8_E4M3"), mg.np_tensor(n[:-len(".weight")] + ".scale", scales, "F8_E8M0")]
        elif n.endswith(F32_SUFFIXES):
            W[n] = v.astype(np.float32).astype(np.float64)
            entries.append(mg.np_tensor(n, v, "F32"))
        else:
            W[n] = mg.round_bf16(v)
            entries.append(mg.np_tensor(n, v, "BF16"))
    return W, entries


def load_checkpoint(d):
    """float64 weights of the committed checkpoint (BF16 / F32 / FP8 x 128-block ue8m0)."""
    raw = DR._read_raw(os.path.join(d, "model.safetensors"))
    out = {}
    for n, (dt, shape, buf) in raw.items():
        if n.endswith(".scale"):
            continue
        if dt == "BF16":
            out[n] = mg.bf16_bits_to_f64(np.frombuffer(buf, "<u2")).reshape(shape)
        elif dt == "F32":
            out[n] = np.frombuffer(buf, "<f4").astype(np.float64).reshape(shape)
        elif dt == "F8_E4M3":
            codes = np.frombuffer(buf, np.uint8).reshape(shape)
            _, sshape, sbuf = raw[n[:-len(".weight")] + ".scale"]
            s = np.ldexp(1.0, np.frombuffer(sbuf, np.uint8).reshape(sshape).astype(np.int64) - 127)
            s = np.repeat(np.repeat(s, 128, 0), 128, 1)[:shape[0], :shape[1]]
            out[n] = DR._E4M3_SIGNED[codes] * s
        else:
            raise ValueError(f"{n}: {dt}")
    with open(os.path.join(d, "config.json")) as f:
        return out, json.load(f)


# ------------------------------------------------------------------------------------------
# V4 block (float64)
# ------------------------------------------------------------------------------------------

def qat_window(kv, cfg):
    """§A.10 (V4): FP8 e4m3 round trip of the first d - r dims in 64-blocks (pow-2 scales), the
    rope dims to bf16."""
    r = cfg["qk_rope_head_dim"]
    out = kv.copy()
    out[..., :-r] = DR.fp8_roundtrip(kv[..., :-r], 64)
    out[..., -r:] = mg.round_bf16(kv[..., -r:])
    return out


def window_kv(W, pre, cfg, x, pos, qat):
    kv = DR.rmsnorm(x @ W[pre + "attn.wkv.weight"].T, W[pre + "attn.kv_norm.weight"], cfg["rms_norm_eps"])
    kv = DR.rope(kv, pos, cfg["rope_theta"], cfg["qk_rope_head_dim"])
    return qat_window(kv, cfg) if qat else kv


def attention(W, pre, cfg, x, qpos, keys, valid):
    """V4 attention (§A.3) of queries x [N, D] at qpos [N] over keys [N, K, d] (valid [N, K]):
    low-rank q with q_norm, per-head unweighted RMS norm, RoPE, one softmax with the sink,
    inverse RoPE, grouped output projection."""
    H, d, r = cfg["num_attention_heads"], cfg["head_dim"], cfg["qk_rope_head_dim"]
    G, Ro, eps = cfg["o_groups"], cfg["o_lora_rank"], cfg["rms_norm_eps"]
    qr = DR.rmsnorm(x @ W[pre + "attn.wq_a.weight"].T, W[pre + "attn.q_norm.weight"], eps)
    q = (qr @ W[pre + "attn.wq_b.weight"].T).reshape(-1, H, d)
    q = q / np.sqrt(np.mean(q * q, axis=-1, keepdims=True) + eps)
    q = DR.rope(q, np.asarray(qpos)[:, None], cfg["rope_theta"], r)
    s = np.where(valid[:, None, :], np.einsum("nhd,nkd->nhk", q, keys) * d ** -0.5, -np.inf)
    sink = W[pre + "attn.attn_sink"][None, :, None]
    mu = np.maximum(s.max(-1, keepdims=True), sink)
    e = np.exp(s - mu)
    o = np.einsum("nhk,nkd->nhd", e, keys) / (e.sum(-1, keepdims=True) + np.exp(sink - mu))
    o = DR.rope(o, np.asarray(qpos)[:, None], cfg["rope_theta"], r, inverse=True).reshape(-1, G, H * d // G)
    z = np.einsum("ngk,grk->ngr", o, W[pre + "attn.wo_a.weight"].reshape(G, Ro, H * d // G))
    return z.reshape(-1, G * Ro) @ W[pre + "attn.wo_b.weight"].T


def block(W, pre, cfg, X, attn_fn):
    """V4 block (§A.2): each site collapses with its own pre."""
    eps = cfg["rms_norm_eps"]
    a_pre, a_post, a_comb = DR.hc_mix(X, W[pre + "hc_attn_fn"], W[pre + "hc_attn_base"], W[pre + "hc_attn_scale"], cfg)
    X = DR.expand(X, attn_fn(DR.rmsnorm(DR.collapse(X, a_pre), W[pre + "attn_norm.weight"], eps)), a_post, a_comb)
    f_pre, f_post, f_comb = DR.hc_mix(X, W[pre + "hc_ffn_fn"], W[pre + "hc_ffn_base"], W[pre + "hc_ffn_scale"], cfg)
    x = DR.rmsnorm(DR.collapse(X, f_pre), W[pre + "ffn_norm.weight"], eps)
    y = DR.moe(W, pre, cfg, x, cfg["n_routed_experts"], cfg["num_experts_per_tok"], normalise_top1=True)
    return DR.expand(X, y, f_post, f_comb)


def hc_head(X, fn, base, scale, cfg):
    """§A.2 final head collapse: pre_j = sigma(m_j scale + base_j) + eps_hc, h = sum_j pre_j X_j."""
    N, hc, D = X.shape
    x = X.reshape(N, hc * D)
    m = (x @ fn.T) / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + cfg["rms_norm_eps"])
    return DR.collapse(X, DR.sigmoid(m * scale[0] + base) + cfg["hc_eps"])


def causal_window(T, Wn):
    j = np.arange(T)
    return (j[None, :] <= j[:, None]) & (j[None, :] > j[:, None] - Wn)


def head_logits(W, cfg, h, norm):
    return DR.rmsnorm(h, W[norm], cfg["rms_norm_eps"]) @ W["head.weight"].T


def backbone(W, cfg, ids, qat):
    """Ratio-0 V4 backbone: final streams X^L [T, hc, D] (before hc_head) and logits [T, V]."""
    n, hc = len(ids), cfg["hc_mult"]
    X = np.repeat(W["embed.weight"][ids][:, None, :], hc, axis=1)
    pos = np.arange(n)
    valid = causal_window(n, cfg["sliding_window"])
    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."

        def attn_fn(x, p=p):
            kv = window_kv(W, p, cfg, x, pos, qat)
            return attention(W, p, cfg, x, pos, np.broadcast_to(kv, (n, *kv.shape)), valid)

        X = block(W, p, cfg, X, attn_fn)
    h = hc_head(X, W["hc_head_fn"], W["hc_head_base"], W["hc_head_scale"], cfg)
    return X, head_logits(W, cfg, h, "norm.weight")


# ------------------------------------------------------------------------------------------
# MTP-1 (§A.9)
# ------------------------------------------------------------------------------------------

M = "mtp.0."


def mtp_input(W, cfg, h, tok):
    """Z [N, hc, D] = e_proj(enorm(embed(tok))) + h_proj(hnorm(h_j)) per stream, h [N, hc, D]."""
    eps = cfg["rms_norm_eps"]
    e = DR.rmsnorm(W["embed.weight"][np.asarray(tok)], W[M + "enorm.weight"], eps) @ W[M + "e_proj.weight"].T
    return e[:, None, :] + DR.rmsnorm(h, W[M + "hnorm.weight"], eps) @ W[M + "h_proj.weight"].T


def mtp_key(W, cfg, Z, pos, qat):
    """The MTP block's window K=V of inputs Z at positions pos (attention-site collapse)."""
    a_pre, _, _ = DR.hc_mix(Z, W[M + "hc_attn_fn"], W[M + "hc_attn_base"], W[M + "hc_attn_scale"], cfg)
    x = DR.rmsnorm(DR.collapse(Z, a_pre), W[M + "attn_norm.weight"], cfg["rms_norm_eps"])
    return window_kv(W, M, cfg, x, pos, qat)


def mtp_out(W, cfg, Z_out):
    h = hc_head(Z_out, W[M + "hc_head_fn"], W[M + "hc_head_base"], W[M + "hc_head_scale"], cfg)
    return h, head_logits(W, cfg, h, M + "norm.weight")


def mtp_sequence(W, cfg, XL, ids, qat):
    """Teacher-forced MTP at positions 0..T-2: logits [T-1, V] (prediction of t+2), hidden, and
    the MTP keys [T-1, d]."""
    n = len(ids) - 1
    Z = mtp_input(W, cfg, XL[:n], ids[1:])
    pos = np.arange(n)
    keys = mtp_key(W, cfg, Z, pos, qat)
    valid = causal_window(n, cfg["sliding_window"])
    Zo = block(W, M, cfg, Z, lambda x: attention(W, M, cfg, x, pos, np.broadcast_to(keys, (n, *keys.shape)), valid))
    h, logits = mtp_out(W, cfg, Zo)
    return logits, h, keys


def mtp_chain(W, cfg, XL, keys, p, y, n, qat):
    """n chained drafts after committed positions 0..p with the target's token y for p+1: step i
    at position p+i from (h, tok) = (X^L[p], y), then (own output streams, own argmax); keys of
    committed MTP positions < p from `keys` (teacher-forced), the chain's own after them."""
    Wn = cfg["sliding_window"]
    h, tok = XL[p][None], int(y)
    chain, out_logits, out_tokens, out_hidden = [], [], [], []
    for i in range(n):
        pos = p + i
        Z = mtp_input(W, cfg, h, [tok])
        chain.append(mtp_key(W, cfg, Z, np.array([pos]), qat)[0])
        lo = max(0, pos - Wn + 1)
        ks = np.stack([keys[t] if t < p else chain[t - p] for t in range(lo, pos + 1)])
        Zo = block(W, M, cfg, Z, lambda x: attention(W, M, cfg, x, [pos], ks[None], np.ones((1, len(ks)), bool)))
        hid, logits = mtp_out(W, cfg, Zo)
        tok = int(np.argmax(logits[0]))
        out_logits.append(logits[0])
        out_tokens.append(tok)
        out_hidden.append(hid[0])
        h = Zo
    return np.array(out_logits), np.array(out_tokens), np.array(out_hidden)


def compute(W, cfg):
    ids = np.random.default_rng(SEED + 1).integers(2, cfg["vocab_size"], T)
    out = {"input_ids": (ids.astype(np.int32), "I32")}
    report = {"chain_positions": list(CHAIN_POSITIONS), "chain": CHAIN}
    for numerics, qat in (("reference", False), ("official", True)):
        XL, logits = backbone(W, cfg, ids, qat)
        mlog, hid, keys = mtp_sequence(W, cfg, XL, ids, qat)
        anchors = [int(np.argmax(logits[p])) for p in CHAIN_POSITIONS]
        chains = [mtp_chain(W, cfg, XL, keys, p, y, CHAIN, qat) for p, y in zip(CHAIN_POSITIONS, anchors)]
        # step 0 of a chain with y = ids[p+1] is the teacher-forced MTP at p (self-check)
        tf = mtp_chain(W, cfg, XL, keys, 20, ids[21], 1, qat)[0][0]
        report[f"chain_step0_vs_sequence_maxdiff_{numerics}"] = float(np.abs(tf - mlog[20]).max())
        assert report[f"chain_step0_vs_sequence_maxdiff_{numerics}"] < 1e-9
        sfx = "" if numerics == "reference" else "_official"
        out["backbone_logits" + sfx] = (logits, "F32")
        out["mtp_logits" + sfx] = (mlog, "F32")
        out["mtp_hidden" + sfx] = (hid, "F32")
        out["mtp_keys" + sfx] = (keys, "F32")
        out["chain_anchors" + sfx] = (np.array(anchors, np.int32), "I32")
        out["chain_logits" + sfx] = (np.stack([c[0] for c in chains]), "F32")
        out["chain_tokens" + sfx] = (np.stack([c[1] for c in chains]).astype(np.int32), "I32")
        s = np.sort(mlog, axis=-1)
        report[f"mtp_top2_margin_min_{numerics}"] = float((s[:, -1] - s[:, -2]).min())
        report[f"chain_tokens_{numerics}"] = np.stack([c[1] for c in chains]).tolist()
    out["chain_positions"] = (np.array(CHAIN_POSITIONS, np.int32), "I32")
    # Sensitivity: the pairing (X^L[t] with tok_{t+1}) and the tap (final streams) are visible.
    XL, _ = backbone(W, cfg, ids, False)
    ref = out["mtp_logits"][0]
    shifted = mtp_sequence(W, cfg, XL[1:], ids[1:], False)[0]  # X^L[t+1] with tok_{t+1}
    report["pairing_shifted_by_one_maxdiff_rel"] = float(np.abs(shifted - ref[1:]).max() / np.abs(ref).max())
    return out, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="recompute from the committed checkpoint, compare")
    args = ap.parse_args()
    if args.check:
        W, cfg = load_checkpoint(CKPT)
        out, report = compute(W, cfg)
        import make_goldens_v41 as G
        have = G.read_tensors(GOLDEN)
        for n, (v, dt) in out.items():
            e = mg.np_tensor(n, np.asarray(v), dt)
            assert have[n][0] == dt and list(have[n][1]) == list(e[2]) and have[n][2] == e[3], n
        print(json.dumps(report, indent=1))
        print("golden matches bit for bit")
        return
    cfg = CONFIG
    W, entries = gen_weights(cfg)
    os.makedirs(CKPT, exist_ok=True)
    mg.write_safetensors(os.path.join(CKPT, "model.safetensors"), entries,
                         metadata={"format": "pt", "generator": "tools/mtp_reference.py"})
    mg.write_json(os.path.join(CKPT, "config.json"), cfg)
    W2, _ = load_checkpoint(CKPT)
    assert all(np.array_equal(W[n], W2[n]) for n in W), "stored weights differ from the generated ones"
    out, report = compute(W2, cfg)
    mg.write_safetensors(GOLDEN, [mg.np_tensor(n, np.asarray(v), dt) for n, (v, dt) in out.items()],
                         metadata={"format": "pt", "generator": "tools/mtp_reference.py"})
    report["bytes"] = {"checkpoint": os.path.getsize(os.path.join(CKPT, "model.safetensors")),
                       "golden": os.path.getsize(GOLDEN)}
    mg.write_json(os.path.join(OUT, "manifest.json"), report)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
