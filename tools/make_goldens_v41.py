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

The `engram` model has Engram layers, which mlx-lm lacks (it refuses configs with engram_layer_ids).
Its reference is composed (run_reference_engram): mlx's model is built with engram_layer_ids=(),
`loop_forward` writes TextModel.__call__ out (embed, the mlx DecoderLayer objects with their caches
and shared dict, collapse by pre_mix, norm, lm_head) and inserts the float64 NumPy Engram of
tools/engram_reference.py (cast to float32) on the streams entering each engram layer. With Engram
off the loop reproduces mlx's own forward exactly (checked). The Engram part is therefore this
repository's own reference, not an independent implementation.
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
import engram_reference as ER  # noqa: E402  (float64 NumPy Engram, MODEL_SPEC §C.8)

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
    # Engram (MODEL_SPEC §C.8) at layers 1 and 4: mlx-lm has no Engram, so its reference is mlx's
    # backbone driven layer by layer with the NumPy Engram of tools/engram_reference.py inserted
    # (run_reference_engram). Six layers, not seven, to keep the two files small.
    dict(name="engram", seed=4105, ratios=[0, 2, 2, 1, 1, 1], kv=[1, 3], index=[1, 3, 5], cand=3,
         seq_len=80, stages=0, fp8_stress=False,
         engram=dict(layers=[1, 4], max_ngram=3, n_heads=2, head_dim=64, vocab=128, pad=2,
                     compressed_vocab=99092, table_std=1.0, wkv_std=0.1, q_std=1.0, k_std=0.5),
         covers="Engram before layer 1 (the ratio-2 KV+index source) and before layer 4 (ratio-1 reuse "
                "of 3); backbone as base without its last layer: SWA (0), ratio-2 source (1), reuse (2), "
                "ratio-1 KV+index+candidate source (3), reuse (4), reindex consuming 3's candidates (5); "
                "the inputs repeat n-grams (within a row, across rows, at the sequence start)"),
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


def engram_primes(e):
    return ER.prime_walk(len(e["layers"]), e["vocab"], e["n_heads"], e["max_ngram"])


def engram_num_embeddings(e):
    """Table rows per engram layer = the sum of that layer's bucket primes (§C.8.3)."""
    return [ER.column_offsets(p)[1] for p in engram_primes(e)]


def gen_engram(w, spec, cfg):
    """layers.N.engram.*: FP8 e4m3 table with one e8m0 scale per 1x32 group (kind "e4m3_rows"),
    wkv (bf16 / FP8 32x32), q_weight and k_weight (F32). Drawn from their own rng (seed + 50)."""
    e = spec["engram"]
    rng = np.random.default_rng(spec["seed"] + 50)
    D, hc, hd = cfg["hidden_size"], cfg["hc_mult"], e["head_dim"]
    n_cols = (e["max_ngram"] - 1) * e["n_heads"]
    for layer, rows in zip(e["layers"], engram_num_embeddings(e)):
        p = f"layers.{layer}.engram."
        # O(1) values; each 32-column group scaled by 2^k, k in [-1, 1], so the two e8m0 scales of a
        # row usually differ (a scale-index bug changes the values)
        tab = mg.draw(rng, (rows, hd), e["table_std"])
        tab *= np.repeat(2.0 ** rng.integers(-1, 2, size=(rows, hd // BLOCK)), BLOCK, axis=1)
        w.add(p + "embed.weight", "e4m3_rows", tab)
        w.add(p + "wkv.weight", "fp8", mg.draw(rng, ((hc + 1) * D, n_cols * hd), e["wkv_std"]))
        w.add(p + "q_weight", "f32", mg.draw(rng, (hc, D), e["q_std"]))
        w.add(p + "k_weight", "f32", mg.draw(rng, (hc, D), e["k_std"], 1.0))


def quantize_e4m3_rows(v):
    """v [R, K] -> (e4m3 codes uint8 [R, K], e8m0 uint8 [R, K/32], dequantised float64): one
    2^ceil(log2(amax/448)) scale per 1x32 group, amax floored at 1e-4, e4m3 RNE."""
    n, k = v.shape
    vb = v.reshape(n, k // BLOCK, BLOCK)
    amax = np.maximum(np.abs(vb).max(axis=-1), 1e-4)
    ex = mg.pow2_scale_exponent(amax, 448.0)
    s = np.ldexp(1.0, ex)[..., None]
    y = np.clip(vb / s, -448.0, 448.0)
    mag, neg = mg._round_to_table(y, mg.E4M3_VALUES)
    codes = (mag | (neg.astype(np.uint8) << 7)).reshape(n, k)
    deq = (np.where(neg, -1, 1) * mg.E4M3_VALUES[mag] * s).reshape(n, k)
    return codes, (ex + 127).astype(np.uint8), deq


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
        elif kind == "e4m3_rows":  # Engram table: the same FP8 bytes in both files
            codes, scales, val = quantize_e4m3_rows(v)
            assert np.array_equal(mg.round_bf16(val), val), name
            e = [mg.np_tensor(name, codes, "F8_E4M3"),
                 mg.np_tensor(name[: -len(".weight")] + ".scale", scales, "F8_E8M0")]
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
    if spec.get("engram"):
        e = spec["engram"]
        c["engram_layer_ids"] = list(e["layers"])
        c["engram_num_embeddings"] = engram_num_embeddings(e)
        c["engram_max_ngram_size"] = e["max_ngram"]
        c["engram_vocab_size"] = e["vocab"]
        c["engram_n_heads"] = e["n_heads"]
        c["engram_head_dim"] = e["head_dim"]
        c["engram_pad_token_id"] = e["pad"]
        c["engram_compressed_vocab_size"] = e["compressed_vocab"]
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
# Engram model: mlx backbone driven layer by layer + the NumPy Engram
# --------------------------------------------------------------------------------------------

TOKEN_MAP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "models", "engram", "token_map.bin")


def load_token_map():
    import make_engram_tables as MT  # decode_map only
    with open(TOKEN_MAP, "rb") as f:
        data = f.read()
    tm, c = MT.decode_map(data)
    return tm, c, hashlib.sha256(data).hexdigest()


class EngramRef:
    """tools/engram_reference.py for one model: per engram layer the hash ids of a sequence and
    the update X_k += gamma_k * value (float64; the caller casts the result to float32)."""

    def __init__(self, spec, final, token_map):
        e = spec["engram"]
        self.e, self.layers, self.mg = e, list(e["layers"]), e["max_ngram"]
        self.token_map = token_map
        self.primes = engram_primes(e)
        self.mult = [ER.hash_multipliers(l, e["compressed_vocab"], self.mg) for l in self.layers]
        self.w = []
        for l in self.layers:
            p = f"layers.{l}.engram."
            ents = {n: (dt, sh, raw) for n, dt, sh, raw in final[p + "embed.weight"][2]}
            table = np.frombuffer(ents[p + "embed.weight"][2], np.uint8).reshape(ents[p + "embed.weight"][1])
            scale = np.frombuffer(ents[p + "embed.scale"][2], np.uint8).reshape(ents[p + "embed.scale"][1])
            assert np.array_equal(ER.gather_rows(table, scale, np.arange(len(table))[:, None]),
                                  final[p + "embed.weight"][1])
            self.w.append(dict(table=table, scale=scale, wkv=final[p + "wkv.weight"][1],
                               q=final[p + "q_weight"][1], k=final[p + "k_weight"][1]))
        self.forget_history = False
        self.active = set(self.layers)  # sensitivity variants switch layers off
        self.record = None  # when a list: per applied layer its ids, gamma and magnitudes

    def ids(self, slot, seq, begin, end):
        if self.forget_history:  # sensitivity variant only
            seq, begin, end = seq[begin:end], 0, end - begin
        rows = ER.ngram_rows(np.asarray(seq), self.mg, begin, end)
        return ER.hash_ids(rows, self.token_map, self.e["pad"], self.primes[slot], self.mult[slot])

    def apply(self, layer, x, seqs, begin, end):
        """x [B, n, hc, D] (float64) streams of positions begin..end-1 of each sequence."""
        slot = self.layers.index(layer)
        B, n, hc, D = x.shape
        ids = np.concatenate([self.ids(slot, s, begin, end) for s in seqs])
        w = self.w[slot]
        out, gamma = ER.engram_layer(x.reshape(B * n, hc, D), ids, w["table"], w["scale"], w["wkv"],
                                     w["q"], w["k"])
        if self.record is not None:
            value = (ER.gather_rows(w["table"], w["scale"], ids) @ w["wkv"].T)[:, hc * D:]
            self.record.append(dict(layer=layer, ids=ids.reshape(B, n, -1), gamma=gamma,
                                    value_rms=float(np.sqrt((value ** 2).mean())),
                                    x_rms=float(np.sqrt((x ** 2).mean()))))
        return out.reshape(B, n, hc, D)


def loop_forward(mlxr, model, ids, engram=None, chunks=None):
    """TextModel.__call__ of mlx-lm written out (single pipeline stage): embed, the DecoderLayer
    objects with their caches and one shared dict per call, collapse by the last pre_mix, norm,
    lm_head. With `engram`, the streams entering each engram layer get the NumPy Engram update
    (float64, cast to float32). `chunks`: consecutive calls with one cache (default: one call).
    Returns float64 logits [B, T, V]."""
    mx, M = mlxr.mx, mlxr.M
    tm, args = model.model, model.model.args
    ids = np.asarray(ids, dtype=np.int32)
    B, T = ids.shape
    cache = tm.make_cache()
    outs, pos = [], 0
    for n in chunks or [T]:
        h = tm.embed_tokens(mx.array(ids[:, pos:pos + n]))
        start_pos = cache[0].offset
        assert start_pos == pos
        previous = 0 if cache[0].window is None else cache[0].window.shape[1]
        window_idx = M._window_indices(previous=previous, length=n, window=args.sliding_window)
        window_idx = mx.broadcast_to(window_idx, (B, *window_idx.shape))
        streams = mx.broadcast_to(h[:, :, None, :], (B, n, args.hc_mult, args.hidden_size))
        pre_mix = mx.zeros((B, n, args.hc_mult), dtype=mx.float32)
        pre_mix[..., 0] = 1.0
        shared = {}
        for li, (layer, lc) in enumerate(zip(tm.pipeline_layers, cache, strict=True)):
            if engram is not None and li in engram.active:
                x = np.array(streams.astype(mx.float32)).astype(np.float64)
                x = engram.apply(li, x, ids, pos, pos + n)
                streams = mx.array(x.astype(np.float32))
            streams, pre_mix = layer(streams, pre_mix, start_pos=start_pos, window_idx=window_idx,
                                     cache=lc, shared=shared)
        logits = model.lm_head(tm.norm(M._collapse(streams, pre_mix)))
        mx.eval(logits)
        outs.append(np.array(logits.astype(mx.float32)))
        pos += n
    assert pos == T
    return np.concatenate(outs, axis=1).astype(np.float64)


def engram_inputs(spec):
    """Random ids as the other models, then n-grams repeated: inside row a (8 tokens), from row a
    into row b (10 tokens), and row b starting with row a's first 4 tokens (pad-filled shifts)."""
    T, V = spec["seq_len"], COMMON["vocab_size"]
    a = np.random.default_rng(spec["seed"] + 7).integers(2, V, size=T).astype(np.int32)
    b = np.random.default_rng(spec["seed"] + 8).integers(2, V, size=T).astype(np.int32)
    a[40:48] = a[8:16]
    a[70:73] = a[30:33]
    b[20:30] = a[50:60]
    b[0:4] = a[0:4]
    return a, b


def run_reference_engram(spec, final, out_dir, mlxr):
    import copy
    cfg = config(spec, fp8=False)
    T, V = spec["seq_len"], COMMON["vocab_size"]
    e = spec["engram"]
    ids_a, ids_b = engram_inputs(spec)
    tm_full, C, tm_sha = load_token_map()
    assert C == e["compressed_vocab"]
    token_map = tm_full[:V]  # the shipped map restricted to the model's ids
    pad = int(token_map[e["pad"]])
    eng = EngramRef(spec, final, token_map)
    backbone = {n: v for n, v in final.items() if ".engram." not in n}
    no_engram = {"engram_layer_ids": []}  # mlx refuses Engram configs
    rep = {"seed": spec["seed"], "input_seeds": [spec["seed"] + 7, spec["seed"] + 8],
           "seq_len": T, "greedy_steps": GREEDY_STEPS, "covers": spec["covers"],
           "compress_ratios": text_config(spec)["compress_ratios"], "kv_source_layer_ids": spec["kv"],
           "index_source_layer_ids": spec["index"], "candidate_source_layer_id": spec["cand"],
           "roles": roles_of(spec), "coverage": coverage(spec, T)}
    n_cols = (e["max_ngram"] - 1) * e["n_heads"]
    rep["engram"] = {
        "reference": "mlx-lm DecoderLayer objects driven by tools/make_goldens_v41.py loop_forward "
                     "(mlx built with engram_layer_ids=()) + tools/engram_reference.py engram_layer "
                     "(float64, result cast to float32) applied to the streams entering each engram "
                     "layer; not an independent Engram implementation",
        "layer_ids": e["layers"], "max_ngram_size": e["max_ngram"], "n_heads": e["n_heads"],
        "head_dim": e["head_dim"], "vocab_size": e["vocab"], "pad_token_id": e["pad"],
        "pad_compressed_id": pad, "compressed_vocab_size": C, "n_cols": n_cols,
        "token_map": "models/engram/token_map.bin restricted to ids < vocab_size (identity on 0..63)"
                     if np.array_equal(token_map, np.arange(V)) else "models/engram/token_map.bin[:vocab_size]",
        "token_map_bin_sha256": tm_sha,
        "primes": eng.primes, "column_offsets": [ER.column_offsets(p)[0] for p in eng.primes],
        "num_embeddings": engram_num_embeddings(e), "multipliers": eng.mult,
        "weight_draw": {k: e[k] for k in ("table_std", "wkv_std", "q_std", "k_std")},
    }

    mlxr.numerics("reference")
    model, info = mlxr.build(cfg, backbone, overrides=no_engram)
    rep.update(info)
    rep["engram_tensors_not_given_to_mlx"] = sorted(n for n in final if ".engram." in n)
    both_ids = np.stack([ids_a, ids_b])
    checks = {}
    # 1. the loop is mlx's own forward when Engram is off
    own = mlxr.forward(model, both_ids)
    mine = loop_forward(mlxr, model, both_ids)
    checks["loop_vs_mlx_forward_engram_off_maxdiff_abs"] = float(np.abs(mine - own).max())
    own_c = mlxr.cached(model, ids_a, [T // 2 - 1] + [1] * (T - T // 2 + 1))
    mine_c = loop_forward(mlxr, model, ids_a[None], chunks=[T // 2 - 1] + [1] * (T - T // 2 + 1))[0]
    checks["loop_vs_mlx_cached_prefill_decode_engram_off_maxdiff_abs"] = float(np.abs(mine_c - own_c).max())
    # 2. Engram on: the goldens
    mlxr.rec.records = []
    eng.record = []
    both = loop_forward(mlxr, model, both_ids, engram=eng)
    rec = eng.record
    eng.record = None
    rep["topk_boundary_min_gap_reference"] = boundary_gaps(mlxr.rec.records, COMMON["n_routed_experts"])
    mlxr.rec.records = None
    ref_a, ref_b = both[0], both[1]
    single = loop_forward(mlxr, model, ids_a[None], engram=eng)[0]
    checks["batch2_row0_vs_single_maxdiff_rel"] = rel(ref_a, single)
    checks["engram_on_vs_off_maxdiff_abs"] = float(np.abs(ref_a - own[0]).max())
    checks["engram_on_vs_off_maxdiff_rel"] = rel(own[0], ref_a)
    checks["engram_on_vs_off_maxdiff_rel_b"] = rel(own[1], ref_b)
    checks["engram_on_vs_off_argmax_agree"] = f"{int((own[0].argmax(-1) == ref_a.argmax(-1)).sum())}/{T}"
    checks["logits_margin_min"] = float(top2_margin(ref_a).min())
    checks["logits_margin_min_b"] = float(top2_margin(ref_b).min())
    checks["max_abs_logit"] = float(np.abs(ref_a).max())
    gate = {}
    for r in rec:
        g, ids = r["gamma"], r["ids"]
        first = {}
        repeats = 0
        for row in ids.reshape(-1, n_cols):
            key = tuple(row.tolist())
            repeats += key in first
            first[key] = 1
        ab = set(map(tuple, ids[0].tolist())) & set(map(tuple, ids[1].tolist()))
        gate[f"layer{r['layer']}"] = {
            "gamma_min": float(g.min()), "gamma_max": float(g.max()), "gamma_mean": float(g.mean()),
            # gamma = sigmoid(sign(d) sqrt(max(|d|, 1e-6))), so |d| = logit(gamma)^2 unless clamped
            "delta_abs_min": float((np.log(g / (1 - g)) ** 2).min()),
            "delta_abs_max": float((np.log(g / (1 - g)) ** 2).max()),
            "positions_streams_at_clamp": int((np.abs(np.log(g / (1 - g))) <= 1e-3 + 1e-9).sum()),
            "value_rms": r["value_rms"], "streams_rms": r["x_rms"],
            "positions_whose_id_tuple_repeats_an_earlier_one": repeats,
            "id_tuples_shared_by_rows_a_and_b": len(ab),
            "distinct_table_rows_used": int(len(np.unique(ids))),
        }
    checks["engram_gate_and_rows_batch2"] = gate
    # the loop's own incremental path (Engram n-grams reach back into earlier chunks)
    P = T // 2 - 1
    dec = loop_forward(mlxr, model, ids_a[None], engram=eng, chunks=[P] + [1] * (T - P))[0]
    checks["loop_cache_prefill_then_decode_vs_full_maxdiff_rel"] = rel(dec, ref_a)
    checks["loop_cache_prefill_then_decode_prefill_len"] = P
    ch7 = [7] * (T // 7) + ([T % 7] if T % 7 else [])
    checks["loop_cache_chunks7_vs_full_maxdiff_rel"] = rel(
        loop_forward(mlxr, model, ids_a[None], engram=eng, chunks=ch7)[0], ref_a)
    checks["loop_cache_decode_argmax_agree"] = f"{int((dec.argmax(-1) == ref_a.argmax(-1)).sum())}/{T}"
    # greedy continuation, each step one full forward
    seq, g_ids, g_m = list(ids_a), [], []
    for _ in range(GREEDY_STEPS):
        lg = loop_forward(mlxr, model, np.array(seq, dtype=np.int32)[None], engram=eng)[0, -1]
        nxt = int(lg.argmax())
        g_ids.append(nxt)
        g_m.append(float(top2_margin(lg)))
        seq.append(nxt)
    checks["greedy_margin_min"] = float(min(g_m))
    # Engram sensitivity (same weights, one piece of the Engram changed)
    sens = {}

    def variant(name, change, chunks=None):
        v = copy.deepcopy(eng)
        change(v)
        sens[name] = rel(loop_forward(mlxr, model, ids_a[None], engram=v, chunks=chunks)[0], ref_a)

    def swap_scale_columns(v):  # the e8m0 of columns 32..63 used for 0..31 and vice versa
        for w in v.w:
            w["scale"] = w["scale"][:, ::-1].copy()

    def slot_multipliers(v):  # multipliers seeded by the config slot (0, 1), not the layer id
        v.mult = [ER.hash_multipliers(i, C, v.mg) for i in range(len(v.layers))]

    def pad_zero(v):  # pad = map[0] instead of map[2]
        v.e["pad"] = 0

    def forget(v):  # each chunk's n-grams start fresh (no max_ngram-1 tokens kept between calls)
        v.forget_history = True

    for l in e["layers"]:
        variant(f"only_layer_{l}", lambda v, l=l: setattr(v, "active", {l}))
    variant("table_scale_columns_swapped", swap_scale_columns)
    variant("multipliers_of_config_slot_not_layer_id", slot_multipliers)
    variant("pad_is_map_of_token_0", pad_zero)
    variant("chunks7_ngrams_without_history", forget, chunks=ch7)
    checks["engram_sensitivity_maxdiff_rel"] = sens
    # backbone sensitivity, as the other models
    bsens = {}
    for key, val in [("sliding_window", COMMON["sliding_window"] - 1),
                     ("index_topk", COMMON["index_topk"] - 1),
                     ("candidate_block_size", 2 * COMMON["candidate_block_size"]),
                     ("candidate_topk_blocks", 1000), ("hc_sinkhorn_iters", 19)]:
        mp, _ = mlxr.build(cfg, backbone, overrides={**no_engram, key: val})
        bsens[f"{key}->{val}"] = rel(loop_forward(mlxr, mp, ids_a[None], engram=eng)[0], ref_a)
    checks["sensitivity_maxdiff_rel"] = bsens

    # official numerics (QAT fake-quants on), same loop and Engram
    mlxr.numerics("official")
    mo, _ = mlxr.build(cfg, backbone, overrides=no_engram)
    off = loop_forward(mlxr, mo, ids_a[None], engram=eng)[0]
    checks["official_loop_vs_mlx_forward_engram_off_maxdiff_abs"] = float(
        np.abs(loop_forward(mlxr, mo, ids_a[None])[0] - mlxr.forward(mo, ids_a[None])[0]).max())
    checks["official_vs_reference_maxdiff_rel"] = rel(off, ref_a)
    checks["official_vs_reference_argmax_agree"] = f"{int((off.argmax(-1) == ref_a.argmax(-1)).sum())}/{T}"
    dec_o = loop_forward(mlxr, mo, ids_a[None], engram=eng, chunks=[P] + [1] * (T - P))[0]
    checks["official_loop_cache_prefill_then_decode_vs_full_maxdiff_rel"] = rel(dec_o, off)
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
        if kind == "e4m3_rows":  # F8_E4M3 rows x F8_E8M0 per 1x32 group, in both files
            sname = name[: -len(".weight")] + ".scale"
            for f in (bf, q8):
                assert f[name][0] == "F8_E4M3" and f[sname][0] == "F8_E8M0", name
                codes = np.frombuffer(f[name][2], np.uint8).reshape(f[name][1])
                sc = np.frombuffer(f[sname][2], np.uint8).reshape(f[sname][1])
                got = e4m3[codes] * np.repeat(np.ldexp(1.0, sc.astype(np.int64) - 127), BLOCK, 1)
                assert np.array_equal(got, val), name
            n_q += 1
            continue
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
    w = gen_weights(spec, cfg)
    if spec.get("engram"):
        gen_engram(w, spec, cfg)
    final = finalize(w)
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
        run = run_reference_engram if spec.get("engram") else run_reference
        rep = run(spec, final, args.out, mlxr)
        rep["file_checks"] = dequant_file_check(d, final)
        if spec.get("engram"):
            for sub, i in (("bf16", 2), ("fp8", 3)):
                rep[f"engram_tensor_list_{sub}"] = [f"{e[0]} {e[1]} {list(e[2])}" for n, v in final.items()
                                                    if ".engram." in n for e in v[i]]
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
