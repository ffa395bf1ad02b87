#!/usr/bin/env python3
"""Generate tiny random DeepSeek-V4.1 checkpoints and their mlx-lm reference outputs.

Usage (needs mlx[cpu] 0.32.4 and mlx-lm 0.32.2 from PyPI; any Linux CPU):

    python3 tools/make_goldens_v41.py --out tests/data/golden_v41

Writes, for every model in MODELS:

    <out>/<name>/bf16/config.json + model.safetensors   DeepSeek-native names, BF16 weights (F32 hc_*,
                                                         attn_sink, ffn.gate.bias, ffn.gate.bias_vl)
    <out>/<name>/fp8/config.json  + model.safetensors   the same model: FP8 e4m3 + 32x32 UE8M0 scales,
                                                         FP4 e2m1 routed experts + 1x32 UE8M0 scales
    <out>/<name>/reference.safetensors                  mlx-lm full-forward logits (reference and
                                                         official numerics), a second batch row,
                                                         greedy continuation by repeated full forwards
    <out>/manifest.json                                 versions, seeds, structure, self-checks

The independent reference is mlx-lm's `mlx_lm/models/deepseek_v41.py`, called as a library. It is
run in float32 on MLX's CPU: MLX accepts float64 there, but its float64 exp/sin/cos/sigmoid and its
fast rms_norm/softmax/rope/sdpa kernels compute at float32 precision (measured by `probe_float64`,
recorded in the manifest), so float64 would not be float64. "reference" numerics = the module with
its two QAT functions `_fake_quant_fp8` / `_fake_quant_fp4` monkeypatched to the identity;
"official" numerics = the module unpatched. The module's global `mx` is also replaced by a proxy that
records the inputs of `mx.argpartition` (instrumentation only; the values are unchanged) so that the
top-k boundary gaps can be reported.

Weights are drawn with numpy from fixed seeds and rounded to their storage format first (FP8/FP4
tensors to their block formats, BF16 tensors to bf16, F32 to fp32); the rounded values are the model's
weights everywhere, so the bf16 and fp8 files hold the same numbers and one reference serves both.
The safetensors writer and the FP8/FP4 quantisers are those of tools/make_goldens.py (imported).
"""

import argparse
import hashlib
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens as mg  # noqa: E402  (writer, quantisers, bf16 rounding)

BLOCK = 32  # V4.1 weight block (32x32 FP8, 1x32 FP4)

# --------------------------------------------------------------------------------------------
# Model zoo
# --------------------------------------------------------------------------------------------

COMMON = dict(
    vocab_size=64,
    hidden_size=32,
    moe_intermediate_size=32,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
    qk_rope_head_dim=32,
    q_lora_rank=32,
    o_lora_rank=32,
    o_groups=2,
    swiglu_limit=10.0,
    rms_norm_eps=1e-20,
    max_position_embeddings=16384,
    rope_theta=10000.0,
    rope_scaling={"rope_type": "yarn", "factor": 16.0, "beta_fast": 32, "beta_slow": 1,
                  "original_max_position_embeddings": 1024},
    n_routed_experts=4,
    n_shared_experts=1,
    num_experts_per_tok=2,
    scoring_func="sqrtsoftplus",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=1.5,
    sliding_window=8,
    compress_rope_theta=160000.0,
    index_n_heads=4,
    index_head_dim=64,
    index_topk=5,  # <= (candidate_topk_blocks - 1) * candidate_block_size + 1
    candidate_topk_blocks=2,
    candidate_block_size=4,
    hc_mult=4,
    hc_sinkhorn_iters=20,
    hc_eps=1e-6,
    engram_layer_ids=[],
    bos_token_id=0,
    eos_token_id=1,
)

DSPARK = dict(dspark_block_size=5, dspark_markov_rank=32, dspark_n_routed_experts=2,
              dspark_num_experts_per_tok=1)

MODELS = [
    dict(name="base", seed=4101, ratios=[0, 2, 2, 1, 1, 1, 1], kv=[1, 3], index=[1, 3, 5], cand=3,
         seq_len=80, stages=0, fp8_stress=False,
         covers="V4.1 roles shrunk: SWA (0), ratio-2 KV+index source (1), ratio-2 reuse (2), ratio-1 "
                "KV+index+candidate source (3), ratio-1 reuse of 3 (4), reindex scoring 3's keys inside "
                "3's candidates (5), reuse of 5's top-k (6)"),
    dict(name="dspark_quant", seed=4102, ratios=[0, 2, 1, 1], kv=[1, 2], index=[1, 2, 3], cand=2,
         seq_len=80, stages=3, fp8_stress=True,
         covers="ratio-2 source (1), ratio-1 candidate source (2), reindex as the last layer (3); "
                "FP8/FP4 stressed (per-block scale exponents spread over 2^-5..2^2, one all-zero 32x32 "
                "FP8 block in each FP8 tensor of >= 4 blocks, one all-zero FP4 group per expert matrix); the checkpoint carries 3 "
                "DSpark stages mtp.0..2.* (random, ignored by mlx: it drops mtp.*)"),
    dict(name="r2only", seed=4103, ratios=[0, 2, 2, 2], kv=[1], index=[1, 3], cand=-1,
         seq_len=80, stages=0, fp8_stress=False,
         covers="ratio 2 only, no candidate stage (candidate_source_layer_id -1): source 1, reuse 2, "
                "reindex 3 scoring 1's keys without candidates"),
    dict(name="deep", seed=4104, ratios=[1, 1, 1, 1, 1], kv=[0], index=[0, 1, 3], cand=0,
         seq_len=80, stages=0, fp8_stress=False,
         covers="no SWA layer (layer 0 is the ratio-1 KV+index+candidate source, as V4-Pro starts "
                "compressed); two reindex layers (1, 3) each followed by a reuse layer (2, 4), both "
                "consuming layer 0's candidates"),
]

GREEDY_STEPS = 8


def roles_of(spec):
    """Per-layer role strings (same derivation as MODEL_SPEC §C.6)."""
    out = []
    last_kv = last_index = None
    for i, r in enumerate(spec["ratios"]):
        if r == 0:
            out.append("swa")
            continue
        kv, ix = i in spec["kv"], i in spec["index"]
        if kv:
            last_kv = i
        if kv and ix:
            role = f"kv+index source (ratio {r})"
        elif ix:
            role = f"reindex (scores layer {last_kv}'s index keys)"
        elif kv:
            role = f"kv source only (ratio {r})"
        else:
            role = f"reuse (kv of {last_kv}, top-k of {last_index})"
        if ix:
            last_index = i
        if i == spec["cand"]:
            role += " + candidate source"
        elif ix and 0 <= spec["cand"] < i:
            role += f" + candidate consumer (of {spec['cand']})"
        out.append(role)
    out += [f"dspark stage {k} (mtp.{k}, ratio 0)" for k in range(spec["stages"])]
    return out


# --------------------------------------------------------------------------------------------
# Random weights (native names)
# --------------------------------------------------------------------------------------------

def stress_scale(value, kind, rng, zero=True):
    """fp8_stress: spread the block scale exponents, and zero one block / one FP4 group."""
    v = value.copy()
    n, k = v.shape
    if kind == "fp8":
        for i in range(0, n, BLOCK):
            for j in range(0, k, BLOCK):
                v[i:i + BLOCK, j:j + BLOCK] *= 2.0 ** int(rng.integers(-5, 3))
        if zero and n * k >= 4 * BLOCK * BLOCK:  # never a whole (or half a) small matrix
            v[:BLOCK, :BLOCK] = 0.0
    else:
        f = 2.0 ** rng.integers(-5, 3, size=(n, k // BLOCK)).astype(np.float64)
        v *= np.repeat(f, BLOCK, axis=1)
        v[0, :BLOCK] = 0.0
    return v


def gen_block(w, prefix, ratio, kv_src, ix_src, n_experts, cfg, rng, stress):
    D, H, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["head_dim"]
    Rq, G, Ro = cfg["q_lora_rank"], cfg["o_groups"], cfg["o_lora_rank"]
    I = cfg["moe_intermediate_size"]
    hc = cfg["hc_mult"]
    HI, dI = cfg["index_n_heads"], cfg["index_head_dim"]
    mix = (2 + hc) * hc
    draw = mg.draw

    def q(name, kind, value):
        if stress and kind in ("fp8", "fp4"):
            value = stress_scale(value, kind, rng)
        w.add(name, kind, value)

    def norm_w(n):
        return draw(rng, (n,), 0.1, 1.0)

    def hc_site(site):
        w.add(f"{prefix}hc_{site}_fn", "f32", draw(rng, (mix, hc * D), (hc * D) ** -0.5))
        w.add(f"{prefix}hc_{site}_base", "f32", np.concatenate(
            [draw(rng, (2 * hc,), 0.5), draw(rng, (hc * hc,), 4.0)]))
        w.add(f"{prefix}hc_{site}_scale", "f32", rng.uniform(0.5, 1.5, (3,)))

    w.add(f"{prefix}attn_norm.weight", "bf16", norm_w(D))
    w.add(f"{prefix}ffn_norm.weight", "bf16", norm_w(D))
    hc_site("attn")
    hc_site("ffn")
    a = prefix + "attn."
    q(a + "wq_a.weight", "fp8", draw(rng, (Rq, D), D ** -0.5))
    w.add(a + "q_norm.weight", "bf16", norm_w(Rq))
    q(a + "wq_b.weight", "fp8", draw(rng, (H * d, Rq), Rq ** -0.5))
    q(a + "wkv.weight", "fp8", draw(rng, (d, D), D ** -0.5))
    w.add(a + "kv_norm.weight", "bf16", norm_w(d))
    q(a + "wo_a.weight", "fp8", draw(rng, (G * Ro, H * d // G), (H * d // G) ** -0.5))
    q(a + "wo_b.weight", "fp8", draw(rng, (D, G * Ro), (G * Ro) ** -0.5))
    w.add(a + "attn_sink", "f32", draw(rng, (H,), 1.0, 0.5))
    if ratio and kv_src:
        cp = a + "compressor."
        w.add(cp + "wkv.weight", "bf16", draw(rng, (d, D), D ** -0.5))
        if ratio > 1:
            w.add(cp + "wgate.weight", "bf16", draw(rng, (d, D), D ** -0.5))
        w.add(cp + "norm.weight", "bf16", norm_w(d))
    if ratio and ix_src:
        ip = a + "indexer."
        # Head 2p+1 is head 2p negated (after the stress scaling, which keeps signs): with 4 random
        # heads a query often has q_h . k <= 0 for every head and many keys, and the ReLU makes their
        # scores exactly 0, i.e. exact ties at the top-k and candidate-block boundaries. With
        # antipodal pairs every pair contributes g0 relu(a) + g1 relu(-a) != 0.
        half = draw(rng, (HI // 2, dI, Rq), Rq ** -0.5)
        if stress:
            half = stress_scale(half.reshape(-1, Rq), "fp8", rng, zero=False).reshape(half.shape)
        w.add(ip + "wq_b.weight", "fp8", np.stack([half, -half], axis=1).reshape(HI * dI, Rq))
        w.add(ip + "weights_proj.weight", "bf16", draw(rng, (HI, D), D ** -0.5))
        if kv_src:
            w.add(ip + "wk.weight", "bf16", draw(rng, (dI, d), d ** -0.5))
            w.add(ip + "k_norm.weight", "bf16", norm_w(dI))
    f = prefix + "ffn."
    w.add(f + "gate.weight", "bf16", draw(rng, (n_experts, D), 0.3))
    w.add(f + "gate.bias", "f32", draw(rng, (n_experts,), 0.2))
    w.add(f + "gate.bias_vl", "f32", draw(rng, (n_experts,), 0.2))
    # Large w1/w3 make some SwiGLU clamps fire; small w2 keeps the outputs O(1).
    for e in range(n_experts):
        q(f"{f}experts.{e}.w1.weight", "fp4", draw(rng, (I, D), 5.0 * D ** -0.5))
        q(f"{f}experts.{e}.w2.weight", "fp4", draw(rng, (D, I), 0.03))
        q(f"{f}experts.{e}.w3.weight", "fp4", draw(rng, (I, D), 5.0 * D ** -0.5))
    q(f + "shared_experts.w1.weight", "fp8", draw(rng, (I, D), 5.0 * D ** -0.5))
    q(f + "shared_experts.w2.weight", "fp8", draw(rng, (D, I), 0.03))
    q(f + "shared_experts.w3.weight", "fp8", draw(rng, (I, D), 5.0 * D ** -0.5))


def gen_weights(spec, cfg):
    rng = np.random.default_rng(spec["seed"])
    D, V = cfg["hidden_size"], cfg["vocab_size"]
    w = mg.Weights()
    w.add("embed.weight", "bf16", mg.draw(rng, (V, D), 1.0))
    for i, r in enumerate(spec["ratios"]):
        gen_block(w, f"layers.{i}.", r, i in spec["kv"], i in spec["index"], cfg["n_routed_experts"],
                  cfg, rng, spec["fp8_stress"])
    w.add("norm.weight", "bf16", mg.draw(rng, (D,), 0.1, 1.0))
    w.add("head.weight", "bf16", mg.draw(rng, (V, D), 2.5 * D ** -0.5))
    if spec["stages"]:
        R = DSPARK["dspark_markov_rank"]
        # MODEL_SPEC §D.5 names; stage blocks are ratio-0 blocks with the DSpark expert count
        w.add("mtp.0.main_proj.weight", "fp8", mg.draw(rng, (D, 3 * D), (3 * D) ** -0.5))
        w.add("mtp.0.main_norm.weight", "bf16", mg.draw(rng, (D,), 0.1, 1.0))
        for k in range(spec["stages"]):
            gen_block(w, f"mtp.{k}.", 0, False, False, DSPARK["dspark_n_routed_experts"], cfg, rng,
                      spec["fp8_stress"])
        p = f"mtp.{spec['stages'] - 1}."
        w.add(p + "norm.weight", "bf16", mg.draw(rng, (D,), 0.1, 1.0))
        w.add(p + "markov_head.embed.weight", "bf16", mg.draw(rng, (V, R), 1.0))
        w.add(p + "markov_head.head.weight", "bf16", mg.draw(rng, (V, R), R ** -0.5))
        w.add(p + "confidence_head.proj.weight", "bf16", mg.draw(rng, (1, D + R), (D + R) ** -0.5))
    return w


def finalize(weights):
    """Round every tensor to its storage format.

    Returns {name: (kind, value float64, bf16-file entries, fp8-file entries)}."""
    out = {}
    for name, (kind, v) in weights.items.items():
        if kind == "f32":
            val = v.astype(np.float32).astype(np.float64)
            e = [mg.np_tensor(name, val, "F32")]
            out[name] = (kind, val, e, e)
        elif kind == "bf16":
            val = mg.round_bf16(v)
            e = [mg.np_tensor(name, val, "BF16")]
            out[name] = (kind, val, e, e)
        elif kind in ("fp8", "fp4"):
            if kind == "fp8":
                codes, scales, val = mg.quantize_fp8_block(v, BLOCK)
                qe = [mg.np_tensor(name, codes, "F8_E4M3")]
            else:
                packed, scales, val = mg.quantize_fp4_rows(v, BLOCK)
                qe = [mg.np_tensor(name, packed, "I8")]
            assert np.array_equal(mg.round_bf16(val), val), name
            qe.append(mg.np_tensor(name[: -len(".weight")] + ".scale", scales, "F8_E8M0"))
            out[name] = (kind, val, [mg.np_tensor(name, val, "BF16")], qe)
        else:
            raise ValueError(kind)
    return out


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------

def text_config(spec):
    c = {k: v for k, v in COMMON.items()}
    n = len(spec["ratios"])
    c = {"model_type": "deepseek_v41_text", **c}
    c["num_hidden_layers"] = n
    c["compress_ratios"] = list(spec["ratios"]) + [0] * spec["stages"]
    c["kv_source_layer_ids"] = list(spec["kv"])
    c["index_source_layer_ids"] = list(spec["index"])
    c["candidate_source_layer_id"] = spec["cand"]
    c["num_nextn_predict_layers"] = spec["stages"]
    if spec["stages"]:
        c.update(DSPARK)
        c["dspark_noise_token_id"] = COMMON["vocab_size"] - 1
        c["dspark_target_layer_ids"] = [n - 3, n - 2, n - 1]
    return c


def config(spec, fp8):
    top = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
           "text_config": text_config(spec)}
    if fp8:
        top["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                      "fmt": "e4m3", "scale_fmt": "ue8m0",
                                      "weight_block_size": [BLOCK, BLOCK], "expert_dtype": "fp4"}
    return top


# --------------------------------------------------------------------------------------------
# mlx-lm reference
# --------------------------------------------------------------------------------------------

class ArgpartitionRecorder:
    """Stands in for the module's global `mx`: every attribute is mlx.core's, except that
    argpartition records its input (as numpy) before calling the real one."""

    def __init__(self, mx):
        self._mx = mx
        self.records = None

    def __getattr__(self, name):
        return getattr(self._mx, name)

    def argpartition(self, a, kth, axis=-1):
        if self.records is not None:
            self.records.append((np.array(a.astype(self._mx.float32)), int(kth)))
        return self._mx.argpartition(a, kth, axis=axis)


def boundary_gaps(records, n_experts):
    """Smallest gap between the (kth+1)-th and (kth+2)-th smallest finite entries (the selection
    boundary of argpartition(-scores)) per kind of call: router or indexer/candidate blocks."""
    out = {}
    for a, kth in records:
        kind = "router" if a.shape[-1] == n_experts else "indexer_and_candidate_blocks"
        if kth + 1 >= a.shape[-1]:
            continue
        s = np.sort(a.astype(np.float64), axis=-1)
        lo, hi = s[..., kth], s[..., kth + 1]
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            g = float((hi[ok] - lo[ok]).min())
            out[kind] = min(out.get(kind, math.inf), g)
    return out


class Mlx:
    def __init__(self):
        import mlx.core as mx
        from mlx_lm.models import deepseek_v41 as M
        mx.set_default_device(mx.cpu)
        self.mx, self.M = mx, M
        self.fq8, self.fq4 = M._fake_quant_fp8, M._fake_quant_fp4
        self.rec = ArgpartitionRecorder(mx)
        M.mx = self.rec

    def numerics(self, name):
        M = self.M
        if name == "reference":
            M._fake_quant_fp8 = lambda x, block_size=32: x
            M._fake_quant_fp4 = lambda x, *, block_size, e4m3_scale=False: x
        else:
            M._fake_quant_fp8, M._fake_quant_fp4 = self.fq8, self.fq4

    def build(self, cfg, final, dtype=None, overrides=None):
        from mlx.utils import tree_flatten
        mx, M = self.mx, self.M
        dtype = dtype or mx.float32
        npdt = np.float64 if dtype == mx.float64 else np.float32
        cfg = json.loads(json.dumps(cfg))
        cfg["text_config"].update(overrides or {})
        model = M.Model(M.ModelArgs.from_dict(cfg))
        weights = {n: mx.array(v[1].astype(npdt), dtype=dtype) for n, v in final.items()}
        clean = model.sanitize(weights)
        model.load_weights(list(clean.items()), strict=True)
        model.eval()
        params = tree_flatten(model.parameters())
        assert all(p.dtype == dtype for _, p in params), {k: str(p.dtype) for k, p in params}
        kept = sorted(k for k in final if not k.startswith("mtp.") and not k.endswith(".bias_vl"))
        return model, {"mlx_params": len(params), "native_tensors_used": len(kept),
                       "native_tensors_dropped_by_mlx": sorted(set(final) - set(kept))[:6] +
                       ([f"... {len(set(final) - set(kept)) - 6} more"] if len(set(final) - set(kept)) > 6 else [])}

    def forward(self, model, ids):
        """Full forward of a [B, T] batch; float64 numpy logits."""
        mx = self.mx
        out = model(mx.array(np.asarray(ids, dtype=np.int32)))
        mx.eval(out)
        return np.array(out.astype(mx.float32)).astype(np.float64)

    def cached(self, model, ids, chunks):
        """mlx's incremental path: consecutive calls with one make_cache()."""
        mx = self.mx
        cache = model.make_cache()
        outs, pos = [], 0
        for n in chunks:
            o = model(mx.array(np.asarray(ids[None, pos:pos + n], dtype=np.int32)), cache)
            mx.eval(o)
            outs.append(np.array(o.astype(mx.float32))[0])
            pos += n
        assert pos == len(ids)
        return np.concatenate(outs).astype(np.float64)


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def top2_margin(logits):
    s = np.sort(logits, axis=-1)
    return s[..., -1] - s[..., -2]


def coverage(spec, T):
    c = COMMON
    W, k, b, nb = c["sliding_window"], c["index_topk"], c["candidate_block_size"], c["candidate_topk_blocks"]
    cov = {"positions_window_full": int(sum(t + 1 > W for t in range(T)))}
    for m in sorted(set(r for r in spec["ratios"] if r)):
        cov[f"ratio{m}_positions_topk_saturated"] = int(sum((t + 1) // m > k for t in range(T)))
        if spec["cand"] >= 0 and spec["ratios"][spec["cand"]] == m:
            cov[f"ratio{m}_positions_more_visible_blocks_than_candidate_topk_blocks"] = int(
                sum(-(-((t + 1) // m) // b) > nb for t in range(T)))
    return cov


def run_reference(spec, final, out_dir, mlxr):
    cfg = config(spec, fp8=False)
    T, V = spec["seq_len"], COMMON["vocab_size"]
    ids_a = np.random.default_rng(spec["seed"] + 7).integers(2, V, size=T).astype(np.int32)
    ids_b = np.random.default_rng(spec["seed"] + 8).integers(2, V, size=T).astype(np.int32)
    rep = {"seed": spec["seed"], "input_seeds": [spec["seed"] + 7, spec["seed"] + 8],
           "seq_len": T, "greedy_steps": GREEDY_STEPS, "covers": spec["covers"],
           "compress_ratios": text_config(spec)["compress_ratios"], "kv_source_layer_ids": spec["kv"],
           "index_source_layer_ids": spec["index"], "candidate_source_layer_id": spec["cand"],
           "roles": roles_of(spec), "coverage": coverage(spec, T)}

    mlxr.numerics("reference")
    model, info = mlxr.build(cfg, final)
    rep.update(info)
    mlxr.rec.records = []
    both = mlxr.forward(model, np.stack([ids_a, ids_b]))
    rep["topk_boundary_min_gap_reference"] = boundary_gaps(mlxr.rec.records, COMMON["n_routed_experts"])
    mlxr.rec.records = None
    ref_a, ref_b = both[0], both[1]
    single = mlxr.forward(model, ids_a[None])[0]
    checks = {"batch2_row0_vs_single_maxdiff_rel": rel(ref_a, single),
              "logits_margin_min": float(top2_margin(ref_a).min()),
              "logits_margin_min_b": float(top2_margin(ref_b).min()),
              "max_abs_logit": float(np.abs(ref_a).max())}
    # mlx's own incremental path (a second opinion; MODEL_SPEC §C.7 defect would show here)
    P = T // 2 - 1
    dec = mlxr.cached(model, ids_a, [P] + [1] * (T - P))
    checks["mlx_cache_prefill_then_decode_vs_full_maxdiff_rel"] = rel(dec, ref_a)
    checks["mlx_cache_prefill_then_decode_prefill_len"] = P
    ch7 = [7] * (T // 7) + ([T % 7] if T % 7 else [])
    checks["mlx_cache_chunks7_vs_full_maxdiff_rel"] = rel(mlxr.cached(model, ids_a, ch7), ref_a)
    checks["mlx_cache_decode_argmax_agree"] = f"{int((dec.argmax(-1) == ref_a.argmax(-1)).sum())}/{T}"
    # greedy continuation, each step one full forward
    seq, g_ids, g_m = list(ids_a), [], []
    for _ in range(GREEDY_STEPS):
        lg = mlxr.forward(model, np.array(seq, dtype=np.int32)[None])[0, -1]
        nxt = int(lg.argmax())
        g_ids.append(nxt)
        g_m.append(float(top2_margin(lg)))
        seq.append(nxt)
    checks["greedy_margin_min"] = float(min(g_m))
    # sensitivity: one structural knob changed, same weights
    sens = {}
    for key, val in [("sliding_window", COMMON["sliding_window"] - 1),
                     ("index_topk", COMMON["index_topk"] - 1),
                     ("candidate_block_size", 2 * COMMON["candidate_block_size"]),
                     ("candidate_topk_blocks", 1000), ("hc_sinkhorn_iters", 19)]:
        if key.startswith("candidate") and spec["cand"] < 0:
            continue
        mp, _ = mlxr.build(cfg, final, overrides={key: val})
        sens[f"{key}->{val}"] = rel(mlxr.forward(mp, ids_a[None])[0], ref_a)
    checks["sensitivity_maxdiff_rel"] = sens

    # official numerics (QAT fake-quants on)
    mlxr.numerics("official")
    mo, _ = mlxr.build(cfg, final)
    off = mlxr.forward(mo, ids_a[None])[0]
    checks["official_vs_reference_maxdiff_rel"] = rel(off, ref_a)
    checks["official_vs_reference_argmax_agree"] = f"{int((off.argmax(-1) == ref_a.argmax(-1)).sum())}/{T}"
    dec_o = mlxr.cached(mo, ids_a, [P] + [1] * (T - P))
    checks["official_mlx_cache_prefill_then_decode_vs_full_maxdiff_rel"] = rel(dec_o, off)
    mlxr.numerics("reference")
    rep["checks"] = checks

    tensors = [mg.np_tensor("input_ids", ids_a, "I32"),
               mg.np_tensor("logits_reference", ref_a, "F32"),
               mg.np_tensor("logits_official", off, "F32"),
               mg.np_tensor("greedy_ids", np.array(g_ids, dtype=np.int32), "I32"),
               mg.np_tensor("greedy_margins", np.array(g_m), "F32"),
               mg.np_tensor("input_ids_b", ids_b, "I32"),
               mg.np_tensor("logits_reference_b", ref_b, "F32")]
    mg.write_safetensors(os.path.join(out_dir, spec["name"], "reference.safetensors"), tensors)
    rep["greedy_ids"] = g_ids
    return rep


# --------------------------------------------------------------------------------------------
# Checkpoints and self-checks of the files
# --------------------------------------------------------------------------------------------

def read_tensors(path):
    """Minimal safetensors reader -> {name: (dtype, shape, raw bytes)}."""
    header, start = mg.read_safetensors_header(path)
    with open(path, "rb") as f:
        data = f.read()[start:]
    return {n: (h["dtype"], h["shape"], data[h["data_offsets"][0]:h["data_offsets"][1]])
            for n, h in header.items() if n != "__metadata__"}


def dequant_file_check(d, final):
    """Decode both files independently of the writer and compare with the float64 values."""
    bf = read_tensors(os.path.join(d, "bf16", "model.safetensors"))
    q8 = read_tensors(os.path.join(d, "fp8", "model.safetensors"))
    e4m3 = np.concatenate([mg.E4M3_VALUES, [np.nan]])
    e4m3 = np.concatenate([e4m3, -e4m3])
    fp4 = np.concatenate([mg.E2M1_VALUES, -mg.E2M1_VALUES])

    def dec(t):
        dt, shape, raw = t
        if dt == "BF16":
            return mg.bf16_bits_to_f64(np.frombuffer(raw, "<u2")).reshape(shape)
        if dt == "F32":
            return np.frombuffer(raw, "<f4").astype(np.float64).reshape(shape)
        raise ValueError(dt)

    n_q = 0
    for name, (kind, val, _, _) in final.items():
        assert np.array_equal(dec(bf[name]), val), name
        if kind == "fp8":
            codes = np.frombuffer(q8[name][2], np.uint8).reshape(q8[name][1])
            sc = np.frombuffer(q8[name[:-7] + ".scale"][2], np.uint8).reshape(q8[name[:-7] + ".scale"][1])
            s = np.ldexp(1.0, sc.astype(np.int64) - 127)
            s = np.repeat(np.repeat(s, BLOCK, 0), BLOCK, 1)[: codes.shape[0], : codes.shape[1]]
            got = e4m3[codes] * s
            n_q += 1
        elif kind == "fp4":
            packed = np.frombuffer(q8[name][2], np.uint8).reshape(q8[name][1])
            nib = np.stack([packed & 15, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
            sc = np.frombuffer(q8[name[:-7] + ".scale"][2], np.uint8).reshape(q8[name[:-7] + ".scale"][1])
            got = fp4[nib] * np.repeat(np.ldexp(1.0, sc.astype(np.int64) - 127), BLOCK, 1)
            n_q += 1
        else:
            got = dec(q8[name])
        assert np.array_equal(got, val), name
    return {"fp8_file_dequantises_to_bf16_file_bit_exact": True, "quantised_tensors": n_q,
            "tensors_bf16_file": len(bf), "tensors_fp8_file": len(q8)}


def build_checkpoint(spec, out_dir):
    cfg = {**COMMON}
    final = finalize(gen_weights(spec, cfg))
    d = os.path.join(out_dir, spec["name"])
    for sub, fp8 in (("bf16", False), ("fp8", True)):
        mg.write_json(os.path.join(d, sub, "config.json"), config(spec, fp8))
        mg.write_safetensors(os.path.join(d, sub, "model.safetensors"),
                             [e for v in final.values() for e in (v[3] if fp8 else v[2])])
    return final


def probe_float64():
    """Does MLX's CPU compute float64 at float64 precision? max relative error vs numpy."""
    import mlx.core as mx
    import mlx.nn as nn
    x = np.random.default_rng(0).standard_normal((4, 64)) * 3
    a = mx.array(x, dtype=mx.float64)
    res = {}
    for n, f, g in [("exp", mx.exp, np.exp), ("sin", mx.sin, np.sin),
                    ("sigmoid", mx.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
                    ("softmax", lambda v: mx.softmax(v, axis=-1),
                     lambda v: np.exp(v - v.max(-1, keepdims=True)) / np.exp(v - v.max(-1, keepdims=True)).sum(-1, keepdims=True)),
                    ("fast.rms_norm", lambda v: mx.fast.rms_norm(v, None, 1e-20),
                     lambda v: v / np.sqrt((v * v).mean(-1, keepdims=True))),
                    ("softplus", nn.softplus, lambda v: np.logaddexp(v, 0)),
                    ("matmul", lambda v: v @ v.T, lambda v: v @ v.T)]:
        r = np.array(f(a))
        assert r.dtype == np.float64
        res[n] = float(np.abs(r - g(x)).max() / np.abs(g(x)).max())
    return res


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", help="model names (default: all)")
    args = ap.parse_args()
    import mlx.core as mx
    import mlx_lm
    from importlib.metadata import version
    mlxr = Mlx()
    report = {}
    for spec in MODELS:
        if args.only and spec["name"] not in args.only:
            continue
        final = build_checkpoint(spec, args.out)
        d = os.path.join(args.out, spec["name"])
        rep = run_reference(spec, final, args.out, mlxr)
        rep["file_checks"] = dequant_file_check(d, final)
        if spec["stages"]:
            rep["fp8_tensor_list"] = [f"{e[0]} {e[1]} {list(e[2])}" for v in final.values() for e in v[3]]
        report[spec["name"]] = rep
        print(json.dumps({k: v for k, v in rep.items() if k != "fp8_tensor_list"}, indent=1), flush=True)
    files = sorted(os.path.relpath(os.path.join(r, f), args.out)
                   for r, _, fs in os.walk(args.out) for f in fs
                   if f.endswith((".safetensors", ".json")) and f != "manifest.json")
    manifest = {
        "generator": "tools/make_goldens_v41.py",
        "command": "python3 tools/make_goldens_v41.py --out tests/data/golden_v41",
        "reference": "mlx-lm mlx_lm/models/deepseek_v41.py (full forward, cache=None)",
        "mlx": mx.__version__, "mlx_lm": mlx_lm.__version__, "numpy": np.__version__,
        "mlx_distribution": f"mlx {version('mlx')}",
        "device": "mlx cpu, float32 (weights and activations)",
        "float64_probe_max_rel_err": probe_float64(),
        "numerics": {"reference": "deepseek_v41._fake_quant_fp8/_fake_quant_fp4 replaced by identity",
                     "official": "module unpatched"},
        "greedy_steps": GREEDY_STEPS, "common": COMMON, "dspark": DSPARK,
        "models": report,
        "sha256": {f: sha256(os.path.join(args.out, f)) for f in files},
    }
    mg.write_json(os.path.join(args.out, "manifest.json"), manifest)


if __name__ == "__main__":
    main()
