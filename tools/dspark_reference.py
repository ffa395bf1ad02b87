#!/usr/bin/env python3
"""Plain float64 NumPy reference of the DeepSeek-V4.1 DSpark drafter (MODEL_SPEC.md §D, with the
V4.1 block of §C.3/§C.4/§C.9), and the golden tests/data/golden_v41/dspark_quant/dspark_reference.safetensors.

Written from MODEL_SPEC §C/§D and from reading DeepInfer 0.1.0 (`models/mtp/dflash.py`,
`models/v4_modules/attn.py` DFlashAttention, `layers/tilelang_ops/get_kv_index.py`,
`layers/tilelang_ops/dflash.py`, `models/decoder_layer.py`) and the official V4.1
`inference/model.py` (DSparkAttention / DSparkBlock / Gate); no code of theirs. The formula
choices are listed in tests/data/golden_v41/README.md ("DSpark reference").

Usage:

    python3 tools/dspark_reference.py            # check + write the golden and the manifest entry
    python3 tools/dspark_reference.py --check    # recompute, compare with the committed golden

Composition:
  * backbone: mlx-lm's deepseek_v41 model in float32 (tools/make_goldens_v41.py `Mlx` and
    `loop_forward`), driven layer by layer; the streams entering each dspark target layer are
    recorded (a recorder passed where loop_forward takes its Engram hook; it returns the streams
    unchanged). Reference numerics: mlx's QAT fake-quants replaced by the identity; official
    numerics: mlx unpatched.
  * everything after the taps is this file, float64 NumPy: f_l = mean over hc streams, m =
    main_norm(main_proj concat f), per stage context K=V, the three DSpark stages (single-pass
    mHC, DSpark attention, stage MoE), head, Markov head, confidence head.

Importable API (all arrays float64):
  load_checkpoint(dir)                    -> {name: array}, config (text_config dict)
  backbone_taps(ckpt, cfg, ids, numerics) -> taps [T, n_taps, D], logits [T, V]   (needs mlx)
  main_features(W, cfg, taps)             -> m [T, D]
  context_kv(W, cfg, m, qat)              -> kappa [n_stages, T, d]
  draft(W, cfg, kappa, p, y, qat, ...)    -> dict(logits, base_logits, draft_ids, confidence, hidden, ...)
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_goldens as mg  # noqa: E402  (bf16 decode, e4m3 table, rounding, safetensors writer)

GOLDEN_DIR = os.path.join(ROOT, "tests", "data", "golden_v41", "dspark_quant")
GOLDEN = os.path.join(GOLDEN_DIR, "dspark_reference.safetensors")
MANIFEST = os.path.join(ROOT, "tests", "data", "golden_v41", "manifest.json")
DECODE_POSITIONS = (3, 8, 45)  # p < W, the first p that drops position 0 (W = 8), p >> W
BLOCK = 32  # V4.1 FP8 block (weights 32x32, window K=V 1x32)

# ------------------------------------------------------------------------------------------
# Checkpoint
# ------------------------------------------------------------------------------------------

_E4M3_SIGNED = np.concatenate([mg.E4M3_VALUES, [np.nan], -mg.E4M3_VALUES, [np.nan]])
_E2M1_SIGNED = np.concatenate([mg.E2M1_VALUES, -mg.E2M1_VALUES])


def _read_raw(path):
    header, start = mg.read_safetensors_header(path)
    with open(path, "rb") as f:
        data = f.read()[start:]
    return {n: (h["dtype"], h["shape"], data[h["data_offsets"][0]:h["data_offsets"][1]])
            for n, h in header.items() if n != "__metadata__"}


def load_checkpoint(d):
    """Native-named float64 weights of `d` (a bf16 or fp8 directory with config.json +
    model.safetensors). FP8 e4m3 weights x 32x32 e8m0 scales and FP4 e2m1 experts x 1x32 e8m0
    scales are dequantised; Engram tables (FP8 rows) are skipped (this model has none)."""
    raw = _read_raw(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)["text_config"]
    out = {}
    for name, (dt, shape, buf) in raw.items():
        if name.endswith(".scale"):
            continue
        if dt == "BF16":
            v = mg.bf16_bits_to_f64(np.frombuffer(buf, "<u2")).reshape(shape)
        elif dt == "F32":
            v = np.frombuffer(buf, "<f4").astype(np.float64).reshape(shape)
        elif dt == "F8_E4M3":
            codes = np.frombuffer(buf, np.uint8).reshape(shape)
            sdt, sshape, sbuf = raw[name[:-len(".weight")] + ".scale"]
            assert sdt == "F8_E8M0"
            s = np.ldexp(1.0, np.frombuffer(sbuf, np.uint8).reshape(sshape).astype(np.int64) - 127)
            s = np.repeat(np.repeat(s, BLOCK, 0), BLOCK, 1)[:shape[0], :shape[1]]
            v = _E4M3_SIGNED[codes] * s
        elif dt == "I8":  # FP4 e2m1, two per byte, low nibble = even element
            packed = np.frombuffer(buf, np.uint8).reshape(shape)
            nib = np.stack([packed & 15, packed >> 4], axis=-1).reshape(shape[0], -1)
            sdt, sshape, sbuf = raw[name[:-len(".weight")] + ".scale"]
            s = np.ldexp(1.0, np.frombuffer(sbuf, np.uint8).reshape(sshape).astype(np.int64) - 127)
            v = _E2M1_SIGNED[nib] * np.repeat(s, BLOCK, 1)
        else:
            raise ValueError(f"{name}: {dt}")
        out[name] = v
    return out, cfg


# ------------------------------------------------------------------------------------------
# Building blocks (float64)
# ------------------------------------------------------------------------------------------

def rmsnorm(x, w, eps):
    return w * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def hc_mix(X, fn, base, scale, cfg):
    """MODEL_SPEC §A.2 mix of streams X [N, hc, D] -> pre [N, hc], post [N, hc], comb [N, hc, hc]."""
    N, hc, D = X.shape
    x = X.reshape(N, hc * D)
    m = (x @ fn.T) / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + cfg["rms_norm_eps"])
    eps = cfg["hc_eps"]
    pre = sigmoid(m[:, :hc] * scale[0] + base[:hc]) + eps
    post = 2.0 * sigmoid(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    c = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).reshape(N, hc, hc)
    c = np.exp(c - c.max(-1, keepdims=True))
    c = c / c.sum(-1, keepdims=True) + eps
    c = c / (c.sum(-2, keepdims=True) + eps)
    for _ in range(cfg["hc_sinkhorn_iters"] - 1):
        c = c / (c.sum(-1, keepdims=True) + eps)
        c = c / (c.sum(-2, keepdims=True) + eps)
    return pre, post, c


def collapse(X, mix):
    return np.einsum("nj,njd->nd", mix, X)


def expand(X, y, post, comb):
    """X'[k] = post_k y + sum_j comb[j, k] X[j]."""
    return post[:, :, None] * y[:, None, :] + np.einsum("njk,njd->nkd", comb, X)


def rope(x, pos, theta, r, inverse=False):
    """Interleaved RoPE on the trailing r dims of x [..., d] at positions pos (broadcast over the
    leading dims of x except the last: pos has shape x.shape[:-1] or is broadcastable to it)."""
    x = np.array(x, dtype=np.float64, copy=True)
    i = np.arange(r // 2)
    omega = theta ** (-2.0 * i / r)
    ang = np.asarray(pos, dtype=np.float64)[..., None] * omega
    if inverse:
        ang = -ang
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., -r::2].copy(), x[..., -r + 1::2].copy()
    x[..., -r::2] = a * c - b * s
    x[..., -r + 1::2] = a * s + b * c
    return x


def fp8_roundtrip(x, block=BLOCK):
    """Official-numerics QAT of the window K=V (MODEL_SPEC §B.4/§C.4): e4m3 RNE with one pow-2
    (ue8m0) scale per `block` values along the last dim, amax floored at 1e-4."""
    shape = x.shape
    b = x.reshape(*shape[:-1], shape[-1] // block, block)
    amax = np.maximum(np.abs(b).max(-1, keepdims=True), 1e-4)
    s = np.ldexp(1.0, mg.pow2_scale_exponent(amax, 448.0))
    y = np.clip(b / s, -448.0, 448.0)
    mag, neg = mg._round_to_table(y, mg.E4M3_VALUES)
    return (np.where(neg, -1.0, 1.0) * mg.E4M3_VALUES[mag] * s).reshape(shape)


def attention(W, pre, cfg, x, qpos, keys, key_valid=None):
    """V4.1 attention core for queries from x [N, D] (already attn_norm'ed) at positions qpos [N]
    against K=V rows keys [N, K, d] (key_valid [N, K] bool). No per-head q norm (§C.4)."""
    H, d, r = cfg["num_attention_heads"], cfg["head_dim"], cfg["qk_rope_head_dim"]
    G, Ro = cfg["o_groups"], cfg["o_lora_rank"]
    theta = cfg["rope_theta"]
    qr = rmsnorm(x @ W[pre + "attn.wq_a.weight"].T, W[pre + "attn.q_norm.weight"], cfg["rms_norm_eps"])
    q = (qr @ W[pre + "attn.wq_b.weight"].T).reshape(-1, H, d)
    q = rope(q, np.asarray(qpos)[:, None], theta, r)
    s = np.einsum("nhd,nkd->nhk", q, keys) * d ** -0.5
    if key_valid is not None:
        s = np.where(key_valid[:, None, :], s, -np.inf)
    sink = W[pre + "attn.attn_sink"][None, :, None]
    mu = np.maximum(s.max(-1, keepdims=True), sink)
    e = np.exp(s - mu)
    o = np.einsum("nhk,nkd->nhd", e, keys) / (e.sum(-1, keepdims=True) + np.exp(sink - mu))
    o = rope(o, np.asarray(qpos)[:, None], theta, r, inverse=True)
    o = o.reshape(-1, G, H * d // G)
    wo_a = W[pre + "attn.wo_a.weight"].reshape(G, Ro, H * d // G)
    z = np.einsum("ngk,grk->ngr", o, wo_a).reshape(-1, G * Ro)
    return z @ W[pre + "attn.wo_b.weight"].T


def window_kv(W, pre, cfg, x, pos, qat):
    """K=V rows kv_norm(wkv x) with RoPE at pos (theta = rope_theta, no YaRN: ratio-0 layers)."""
    kv = rmsnorm(x @ W[pre + "attn.wkv.weight"].T, W[pre + "attn.kv_norm.weight"], cfg["rms_norm_eps"])
    kv = rope(kv, pos, cfg["rope_theta"], cfg["qk_rope_head_dim"])
    return fp8_roundtrip(kv) if qat else kv


def swiglu(x, w1, w2, w3, limit):
    g = np.minimum(x @ w1.T, limit)
    u = np.clip(x @ w3.T, -limit, limit)
    return g / (1.0 + np.exp(-g)) * u, w2


def moe(W, pre, cfg, x, n_experts, top_k, normalise_top1=False, record=None):
    """Score-routed MoE (§A.8/§C.9): sqrt-softplus, bias for selection only, weights normalised
    with +1e-20 when k > 1 (official Gate / mlx: not for k = 1), x routed_scaling_factor,
    clamped SwiGLU, weight applied before the down projection, shared expert weight 1."""
    lim = cfg["swiglu_limit"]
    logits = x @ W[pre + "ffn.gate.weight"].T
    scores = np.sqrt(np.logaddexp(0.0, logits))
    biased = scores + W[pre + "ffn.gate.bias"]
    order = np.argsort(-biased, axis=-1, kind="stable")
    idx = order[:, :top_k]
    if record is not None and n_experts > top_k:
        sb = np.take_along_axis(biased, order, -1)
        record.append(float((sb[:, top_k - 1] - sb[:, top_k]).min()))
    w = np.take_along_axis(scores, idx, -1)
    if cfg.get("norm_topk_prob", True) and (top_k > 1 or normalise_top1):
        w = w / (w.sum(-1, keepdims=True) + 1e-20)
    w = w * cfg["routed_scaling_factor"]
    y = np.zeros_like(x)
    for e in range(n_experts):
        rows, slot = np.nonzero(idx == e)
        if len(rows) == 0:
            continue
        p = f"{pre}ffn.experts.{e}."
        a, w2 = swiglu(x[rows], W[p + "w1.weight"], W[p + "w2.weight"], W[p + "w3.weight"], lim)
        y[rows] += (w[rows, slot][:, None] * a) @ w2.T
    p = pre + "ffn.shared_experts."
    a, w2 = swiglu(x, W[p + "w1.weight"], W[p + "w2.weight"], W[p + "w3.weight"], lim)
    return y + a @ w2.T


def block(W, pre, cfg, X, pre_mix, attn_fn, n_experts, top_k, record=None, **moe_kw):
    """One V4.1 block with single-pass mHC (§C.3). attn_fn(x_normed) -> [N, D].
    Returns (streams, ffn-site pre = the next site's collapse weights)."""
    eps = cfg["rms_norm_eps"]
    a_pre, a_post, a_comb = hc_mix(X, W[pre + "hc_attn_fn"], W[pre + "hc_attn_base"], W[pre + "hc_attn_scale"], cfg)
    x = rmsnorm(collapse(X, pre_mix), W[pre + "attn_norm.weight"], eps)
    X = expand(X, attn_fn(x), a_post, a_comb)
    f_pre, f_post, f_comb = hc_mix(X, W[pre + "hc_ffn_fn"], W[pre + "hc_ffn_base"], W[pre + "hc_ffn_scale"], cfg)
    x = rmsnorm(collapse(X, a_pre), W[pre + "ffn_norm.weight"], eps)
    X = expand(X, moe(W, pre, cfg, x, n_experts, top_k, record=record, **moe_kw), f_post, f_comb)
    return X, f_pre


def e0(n, hc):
    m = np.zeros((n, hc))
    m[:, 0] = 1.0
    return m


# ------------------------------------------------------------------------------------------
# DSpark (§D)
# ------------------------------------------------------------------------------------------

def n_stages(cfg):
    return cfg["num_nextn_predict_layers"]


def main_features(W, cfg, taps):
    """m_p = RMSNorm_main_norm(main_proj . concat_l f_l)  (§D.2); taps [T, n_taps, D]."""
    T = taps.shape[0]
    return rmsnorm(taps.reshape(T, -1) @ W["mtp.0.main_proj.weight"].T, W["mtp.0.main_norm.weight"],
                   cfg["rms_norm_eps"])


def context_kv(W, cfg, m, qat=False):
    """Per stage k: kappa_p = QAT(RoPE_p(kv_norm_k(wkv_k m_p))), raw m (no attn_norm, no hc)."""
    pos = np.arange(m.shape[0])
    return np.stack([window_kv(W, f"mtp.{k}.", cfg, m, pos, qat) for k in range(n_stages(cfg))])


def draft(W, cfg, kappa, p, y, qat=False, ids=None, slot_embed=None, temperature=0.0, rng=None,
          variant=None, record=None):
    """Draft block at decode position p with anchor y (the backbone's token for p+1).

    kappa: [n_stages, >p, d] context K=V (only positions max(0, p-W+1)..p are read).
    ids: override of the block ids (default [y, nu, nu, nu, nu]); slot_embed: {slot: vector}
    replacing that slot's embedding (invariant checks). temperature 0 = argmax; else the
    exponential race of §D.5 with `rng`. variant: a deliberately wrong formula (sensitivity
    table only): 'ctx_excl_p', 'rope_p_plus_i', 'pre_mix_reset', 'conf_e_h', 'markov_block_id',
    'top1_normalised', 'ctx_own_stage0'.
    """
    D, hc, Wn = cfg["hidden_size"], cfg["hc_mult"], cfg["sliding_window"]
    g = cfg["dspark_block_size"]
    nu = cfg["dspark_noise_token_id"]
    E, K = cfg["dspark_n_routed_experts"], cfg["dspark_num_experts_per_tok"]
    if ids is None:
        ids = [y] + [nu] * (g - 1)
    ids = np.asarray(ids)
    emb = W["embed.weight"][ids].copy()
    for s, v in (slot_embed or {}).items():
        emb[s] = v
    X = np.repeat(emb[:, None, :], hc, axis=1)
    pre_mix = e0(g, hc)
    bpos = p + 1 + np.arange(g)
    if variant == "rope_p_plus_i":
        bpos = p + np.arange(g)
    lo = max(0, p - Wn + 1)
    hi = p if variant == "ctx_excl_p" else p + 1
    stages = []
    moe_kw = {"normalise_top1": variant == "top1_normalised"}
    for k in range(n_stages(cfg)):
        pre = f"mtp.{k}."
        kk = 0 if variant == "ctx_own_stage0" else k
        ctx = kappa[kk, lo:hi]
        rec = {}

        def attn_fn(x, pre=pre, ctx=ctx, rec=rec):
            bkv = window_kv(W, pre, cfg, x, bpos, qat)  # block K=V at p+1+i
            rec["block_kv"] = bkv
            keys = np.concatenate([ctx, bkv], axis=0)  # context then block, every row sees all
            return attention(W, pre, cfg, x, bpos, np.broadcast_to(keys, (g, *keys.shape)))

        if variant == "pre_mix_reset":
            pre_mix = e0(g, hc)
        X, pre_mix = block(W, pre, cfg, X, pre_mix, attn_fn, E, K, record=record, **moe_kw)
        stages.append(dict(block_kv=rec["block_kv"], streams=X.copy(), pre_mix=pre_mix.copy()))
    h = collapse(X, pre_mix)  # pre-norm hidden, last stage's FFN-site pre
    base = rmsnorm(h, W[f"mtp.{n_stages(cfg) - 1}.norm.weight"], cfg["rms_norm_eps"]) @ W["head.weight"].T
    last = f"mtp.{n_stages(cfg) - 1}."
    W1, W2 = W[last + "markov_head.embed.weight"], W[last + "markov_head.head.weight"]
    wc = W[last + "confidence_head.proj.weight"][0]
    logits = base.copy()
    toks = [int(y)]
    e_rows, conf = [], []
    for i in range(g):
        e = W1[ids[i]] if variant == "markov_block_id" else W1[toks[i]]
        logits[i] += W2 @ e
        if temperature == 0.0:
            nxt = int(np.argmax(logits[i]))
        else:
            z = logits[i] / temperature
            pr = np.exp(z - z.max())
            pr /= pr.sum()
            nxt = int(np.argmax(pr / rng.exponential(1.0, size=pr.shape)))
        toks.append(nxt)
        e_rows.append(e)
        feat = np.concatenate([e, h[i]]) if variant == "conf_e_h" else np.concatenate([h[i], e])
        conf.append(float(wc @ feat))
    conf = np.array(conf)
    return dict(ids=ids, logits=logits, base_logits=base, draft_ids=np.array(toks[1:]), hidden=h,
                markov_embed=np.array(e_rows), confidence=conf, confidence_sigmoid=sigmoid(conf),
                stages=stages)


# ------------------------------------------------------------------------------------------
# Backbone taps through mlx-lm (float32)
# ------------------------------------------------------------------------------------------

class _TapRecorder:
    """Passed to make_goldens_v41.loop_forward in place of its Engram hook: records the streams
    entering each target layer (after the previous layer's FFN expand, before this layer's mixes)
    and returns them unchanged (float32 -> float64 -> float32 is exact). loop_forward calls the
    hook before its Engram update, so for a model with Engram (not dspark_quant) the recorder
    would have to run after it (the spec's tap is after Engram)."""

    def __init__(self, targets):
        self.active = set(targets)
        self.streams = {}

    def apply(self, li, x, ids, start, end):
        self.streams[li] = x.copy()
        return x


_MLX = None


def _mlx():
    global _MLX
    if _MLX is None:
        import make_goldens_v41 as G
        _MLX = (G, G.Mlx())
    return _MLX


def backbone_taps(W, cfg, ids, numerics="reference", overrides=None, return_streams=False):
    """Tap features [T, n_taps, D] (mean over hc of the stream entering each dspark target layer)
    and the backbone logits [T, V], float64 from mlx float32. numerics: 'reference' (mlx QAT
    fake-quants off) or 'official' (mlx unpatched)."""
    G, mlxr = _mlx()
    mlxr.numerics(numerics)
    full = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "text_config": cfg}
    final = {n: (None, v) for n, v in W.items()}
    model, _ = mlxr.build(full, final, overrides=overrides)
    targets = list(cfg["dspark_target_layer_ids"])
    rec = _TapRecorder(targets + [1] if return_streams else targets)
    logits = G.loop_forward(mlxr, model, np.asarray(ids)[None], engram=rec)[0]
    taps = np.stack([rec.streams[l][0].mean(axis=1) for l in targets], axis=1)
    mlxr.numerics("reference")
    if return_streams:
        return taps, logits, {l: s[0] for l, s in rec.streams.items()}
    return taps, logits


# ------------------------------------------------------------------------------------------
# Self-checks against mlx: this file's block == mlx's layer 0 (a ratio-0 window layer)
# ------------------------------------------------------------------------------------------

def check_block_vs_mlx_layer0(W, cfg, ids, streams_in_1, top_k=None):
    """Run this file's block() as backbone layer 0 (causal window attention, the layer's MoE) on
    the embedding and compare with mlx's streams entering layer 1. Returns max rel diff."""
    T, hc, Wn = len(ids), cfg["hc_mult"], cfg["sliding_window"]
    X = np.repeat(W["embed.weight"][ids][:, None, :], hc, axis=1)
    pos = np.arange(T)

    def attn_fn(x):
        kv = window_kv(W, "layers.0.", cfg, x, pos, False)
        j = np.arange(T)
        valid = (j[None, :] <= pos[:, None]) & (j[None, :] > pos[:, None] - Wn)
        return attention(W, "layers.0.", cfg, x, pos, np.broadcast_to(kv, (T, T, kv.shape[-1])), valid)

    Y, _ = block(W, "layers.0.", cfg, X, e0(T, hc), attn_fn, cfg["n_routed_experts"],
                 top_k or cfg["num_experts_per_tok"])
    return float(np.abs(Y - streams_in_1).max() / np.abs(streams_in_1).max())


# ------------------------------------------------------------------------------------------
# Golden
# ------------------------------------------------------------------------------------------

def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def top2_margin(x):
    s = np.sort(x, axis=-1)
    return s[..., -1] - s[..., -2]


def compute(ckpt_dir=None):
    import make_goldens_v41 as G
    ckpt_dir = ckpt_dir or os.path.join(GOLDEN_DIR, "bf16")
    W, cfg = load_checkpoint(ckpt_dir)
    W8, _ = load_checkpoint(os.path.join(GOLDEN_DIR, "fp8"))
    assert W8.keys() == W.keys() and all(np.array_equal(W8[n], W[n]) for n in W), "fp8 != bf16 file"
    ref = {n: v[2] for n, v in G.read_tensors(os.path.join(GOLDEN_DIR, "reference.safetensors")).items()}
    ids = np.frombuffer(ref["input_ids"], "<i4").astype(np.int64)
    logits_mlx_ref = np.frombuffer(ref["logits_reference"], "<f4").reshape(len(ids), -1).astype(np.float64)
    logits_mlx_off = np.frombuffer(ref["logits_official"], "<f4").reshape(len(ids), -1).astype(np.float64)
    T, Wn, g = len(ids), cfg["sliding_window"], cfg["dspark_block_size"]
    checks, out = {}, {}

    taps, blogits, streams = backbone_taps(W, cfg, ids, "reference", return_streams=True)
    taps_o, blogits_o = backbone_taps(W, cfg, ids, "official")
    checks["loop_logits_vs_reference_safetensors_maxdiff_rel"] = rel(blogits, logits_mlx_ref)
    checks["loop_logits_official_vs_reference_safetensors_official_maxdiff_rel"] = rel(blogits_o, logits_mlx_off)
    checks["numpy_block_vs_mlx_layer0_maxdiff_rel"] = check_block_vs_mlx_layer0(W, cfg, ids, streams[1])
    _, _, streams_k1 = backbone_taps(W, cfg, ids, "reference", overrides={"num_experts_per_tok": 1},
                                     return_streams=True)
    checks["numpy_block_vs_mlx_layer0_top1_maxdiff_rel"] = check_block_vs_mlx_layer0(W, cfg, ids, streams_k1[1], 1)

    gaps = []
    res = {}
    for name, tp, bl, qat in (("reference", taps, blogits, False), ("official", taps_o, blogits_o, True)):
        m = main_features(W, cfg, tp)
        kappa = context_kv(W, cfg, m, qat)
        rows = []
        for p in DECODE_POSITIONS:
            y = int(np.argmax(bl[p]))
            r = draft(W, cfg, kappa, p, y, qat=qat, record=gaps if name == "reference" else None)
            r["p"], r["y"], r["y_margin"] = p, y, float(top2_margin(bl[p]))
            rows.append(r)
        res[name] = dict(taps=tp, m=m, kappa=kappa, rows=rows)

    R = res["reference"]
    sfx = {"reference": "", "official": "_official"}
    P = len(DECODE_POSITIONS)
    out["input_ids"] = ("I32", ids)
    out["decode_positions"] = ("I32", np.array(DECODE_POSITIONS))
    for name, s in sfx.items():
        X = res[name]
        out["tap_features" + s] = ("F32", X["taps"])
        out["main_hidden" + s] = ("F32", X["m"])
        out["context_kv" + s] = ("F32", X["kappa"])
        out["anchor_ids" + s] = ("I32", np.array([r["y"] for r in X["rows"]]))
        out["block_ids" + s] = ("I32", np.stack([r["ids"] for r in X["rows"]]))
        out["hidden" + s] = ("F32", np.stack([r["hidden"] for r in X["rows"]]))
        out["base_logits" + s] = ("F32", np.stack([r["base_logits"] for r in X["rows"]]))
        out["logits" + s] = ("F32", np.stack([r["logits"] for r in X["rows"]]))
        out["draft_ids" + s] = ("I32", np.stack([r["draft_ids"] for r in X["rows"]]))
        out["confidence" + s] = ("F32", np.stack([r["confidence"] for r in X["rows"]]))
        out["block_kv" + s] = ("F32", np.stack([np.stack([st["block_kv"] for st in r["stages"]]) for r in X["rows"]]))
    out["stage_streams"] = ("F32", np.stack([np.stack([st["streams"] for st in r["stages"]]) for r in R["rows"]]))
    out["stage_pre_mix"] = ("F32", np.stack([np.stack([st["pre_mix"] for st in r["stages"]]) for r in R["rows"]]))
    out["markov_embed"] = ("F32", np.stack([r["markov_embed"] for r in R["rows"]]))

    # ---- invariants -------------------------------------------------------------------------
    inv = {}
    kap, nu = R["kappa"], cfg["dspark_noise_token_id"]
    d16 = []
    for r in R["rows"]:
        alt = draft(W, cfg, kap, r["p"], r["y"], slot_embed={g - 1: W["embed.weight"][r["y"]]})
        d16.append(float(np.abs(alt["base_logits"][0] - r["base_logits"][0]).max()))
    inv["E16_slot4_embedding_changes_slot0_logits_min_maxabs"] = min(d16)
    assert min(d16) > 1e-3, d16
    rep = [draft(W, cfg, kap, r["p"], r["y"]) for r in R["rows"]]
    inv["temperature0_deterministic_bit_exact"] = all(
        np.array_equal(a["logits"], r["logits"]) and np.array_equal(a["draft_ids"], r["draft_ids"])
        and np.array_equal(a["confidence"], r["confidence"]) for a, r in zip(rep, R["rows"]))
    assert inv["temperature0_deterministic_bit_exact"]
    samp = [draft(W, cfg, kap, R["rows"][-1]["p"], R["rows"][-1]["y"], temperature=1.0,
                  rng=np.random.default_rng(7))["draft_ids"] for _ in range(2)]
    inv["temperature1_same_seed_same_drafts"] = bool(np.array_equal(*samp))
    # window of the context: position p-W+1 matters, p-W does not, p+1 (future) does not exist
    p = DECODE_POSITIONS[-1]
    r = R["rows"][-1]
    for q, key in ((p - Wn, "context_position_p_minus_W_changes_nothing"),
                   (p - Wn + 1, "context_position_p_minus_W_plus_1_changes_logits_maxabs"),
                   (p + 1, "tap_at_p_plus_1_changes_nothing")):
        tp = R["taps"].copy()
        tp[q] += 1.0
        kq = context_kv(W, cfg, main_features(W, cfg, tp))
        dq = float(np.abs(draft(W, cfg, kq, p, r["y"])["base_logits"] - r["base_logits"]).max())
        inv[key] = dq if "maxabs" in key else (dq == 0.0)
    assert inv["context_position_p_minus_W_changes_nothing"] and inv["tap_at_p_plus_1_changes_nothing"]
    assert inv["context_position_p_minus_W_plus_1_changes_logits_maxabs"] > 1e-3
    inv["E17_draft_rings_never_affect_backbone"] = (
        "not testable here: the reference backbone (mlx) never reads DSpark state; the taps and "
        "backbone logits are computed before and independently of any draft")
    # E.16 third part (tap moved by one layer): taps entering layers 0,1,2 instead of 1,2,3
    cfg_s = dict(cfg, dspark_target_layer_ids=[l - 1 for l in cfg["dspark_target_layer_ids"]])
    taps_s, _ = backbone_taps(W, cfg_s, ids, "reference")
    ks = context_kv(W, cfg, main_features(W, cfg, taps_s))
    moved = [draft(W, cfg, ks, r["p"], r["y"]) for r in R["rows"]]
    inv["tap_moved_by_one_layer_logits_maxdiff_rel"] = max(rel(a["logits"], r["logits"]) for a, r in zip(moved, R["rows"]))
    inv["tap_moved_by_one_layer_draft_ids_agree"] = f"{sum(int((a['draft_ids'] == r['draft_ids']).sum()) for a, r in zip(moved, R['rows']))}/{g * P}"
    inv["tap_moved_note"] = "random weights: acceptance is meaningless; only shows the tap choice is visible in the golden"

    # ---- how far each wrong reading moves the golden ----------------------------------------
    sens = {}
    for v in ("ctx_excl_p", "rope_p_plus_i", "pre_mix_reset", "conf_e_h", "markov_block_id",
              "top1_normalised", "ctx_own_stage0"):
        alts = [draft(W, cfg, kap, r["p"], r["y"], variant=v) for r in R["rows"]]
        sens[v] = {"logits_maxdiff_rel": max(rel(a["logits"], r["logits"]) for a, r in zip(alts, R["rows"])),
                   "confidence_maxdiff_abs": max(float(np.abs(a["confidence"] - r["confidence"]).max())
                                                 for a, r in zip(alts, R["rows"])),
                   "draft_ids_agree": f"{sum(int((a['draft_ids'] == r['draft_ids']).sum()) for a, r in zip(alts, R['rows']))}/{g * P}"}
    # anchor = input_ids[p+1] instead of the backbone's argmax at p
    alts = [draft(W, cfg, kap, r["p"], int(ids[r["p"] + 1])) for r in R["rows"]]
    sens["anchor_is_input_ids_p_plus_1"] = {
        "anchor_differs_at": int(sum(int(ids[r["p"] + 1]) != r["y"] for r in R["rows"])),
        "logits_maxdiff_rel": max(rel(a["logits"], r["logits"]) for a, r in zip(alts, R["rows"]))}
    # official vs reference
    O = res["official"]
    oref = {"tap_features_maxdiff_rel": rel(O["taps"], R["taps"]),
            "anchor_ids_agree": f"{sum(a['y'] == b['y'] for a, b in zip(O['rows'], R['rows']))}/{P}",
            "logits_maxdiff_rel": max(rel(a["logits"], b["logits"]) for a, b in zip(O["rows"], R["rows"])),
            "draft_ids_agree": f"{sum(int((a['draft_ids'] == b['draft_ids']).sum()) for a, b in zip(O['rows'], R['rows']))}/{g * P}"}
    # same taps, only the DSpark FP8 round trip on: isolates the K=V QAT
    q_only = [draft(W, cfg, context_kv(W, cfg, R["m"], True), r["p"], r["y"], qat=True) for r in R["rows"]]
    oref["dspark_kv_fp8_only_logits_maxdiff_rel"] = max(rel(a["logits"], r["logits"]) for a, r in zip(q_only, R["rows"]))

    checks["stage_router_min_gap_reference"] = min(gaps)
    checks["draft_logits_top2_margin_min_reference"] = float(min(top2_margin(r["logits"]).min() for r in R["rows"]))
    checks["anchor_margin_min_reference"] = min(r["y_margin"] for r in R["rows"])
    checks["max_abs_draft_logit_reference"] = float(max(np.abs(r["logits"]).max() for r in R["rows"]))
    report = {
        "generator": "tools/dspark_reference.py",
        "command": "python3 tools/dspark_reference.py",
        "file": "dspark_quant/dspark_reference.safetensors",
        "checkpoint": "dspark_quant/bf16 (fp8 file dequantised: identical values, checked)",
        "backbone": "mlx-lm deepseek_v41 float32 via make_goldens_v41.loop_forward, taps = streams entering "
                    f"layers {list(cfg['dspark_target_layer_ids'])}, mean over hc",
        "dspark": "float64 NumPy (this file)",
        "decode_positions": list(DECODE_POSITIONS),
        "anchors_reference": [r["y"] for r in R["rows"]],
        "draft_ids_reference": [r["draft_ids"].tolist() for r in R["rows"]],
        "anchors_official": [r["y"] for r in O["rows"]],
        "draft_ids_official": [r["draft_ids"].tolist() for r in O["rows"]],
        "checks": checks, "invariants": inv, "wrong_reading_sensitivity": sens,
        "official_vs_reference": oref,
        "tensors": {n: f"{dt} {list(np.shape(v))}" for n, (dt, v) in out.items()},
    }
    return out, report


def write(out, report):
    ents = [mg.np_tensor(n, np.asarray(v), dt) for n, (dt, v) in out.items()]
    mg.write_safetensors(GOLDEN, ents, metadata={"format": "pt", "generator": "tools/dspark_reference.py"})
    import hashlib
    with open(GOLDEN, "rb") as f:
        report["sha256"] = hashlib.sha256(f.read()).hexdigest()
    report["bytes"] = os.path.getsize(GOLDEN)
    with open(MANIFEST) as f:
        man = json.load(f)
    man["dspark_reference"] = report
    mg.write_json(MANIFEST, man)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed golden, write nothing")
    args = ap.parse_args()
    out, report = compute()
    print(json.dumps({k: v for k, v in report.items() if k != "tensors"}, indent=1))
    if args.check:
        import make_goldens_v41 as G
        have = G.read_tensors(GOLDEN)
        for n, (dt, v) in out.items():
            e = mg.np_tensor(n, np.asarray(v), dt)
            assert have[n][0] == dt and list(have[n][1]) == list(e[2]) and have[n][2] == e[3], n
        print("golden matches bit for bit")
        return
    write(out, report)
    print(f"wrote {GOLDEN} ({os.path.getsize(GOLDEN)} bytes)")


if __name__ == "__main__":
    main()
