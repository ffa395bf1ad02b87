#!/usr/bin/env python3
"""Generate tiny random DeepSeek-V4 checkpoints and their HF transformers reference outputs.

Usage (needs torch and transformers >= 5.17; CPU is enough):

    python3 tools/make_goldens.py --out tests/data/golden

Writes, for every model in MODELS:

    <out>/<name>/hf/config.json + model.safetensors        HF naming (model.layers.N.self_attn...)
    <out>/<name>/native/config.json + model.safetensors    (quantised models only) official naming,
                                                           FP8 block-scaled dense weights, FP4 experts
    <out>/<name>/reference.safetensors                     input_ids, logits of one full forward in
                                                           float64, greedy continuation by repeated
                                                           full forwards (never HF's KV cache)
    <out>/manifest.json                                    versions, seeds, per-model checks

Weights are drawn with numpy from fixed seeds, so the checkpoints are byte-identical on every run;
the reference outputs depend on torch's float64 CPU kernels only through rounding far below the
test tolerances. The safetensors files are written by this script (8-byte header length, JSON
header, raw little-endian bytes) because numpy has no bf16 / fp8 dtypes.

For the quantised models the drawn weights are first rounded to their storage format (FP8 e4m3
with one power-of-two scale per 128x128 block, FP4 e2m1 with one power-of-two scale per 1x32
block, bf16 elsewhere) and the rounded values are the model's weights everywhere, so the HF BF16
file and the native FP8/FP4 file hold the same numbers and one reference serves both.

`--weights-only` writes the checkpoints without torch (no reference, no checks).
"""

import argparse
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

# --------------------------------------------------------------------------------------------
# Model zoo
# --------------------------------------------------------------------------------------------

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
RATIO = {SLIDING: 0, CSA: 4, HCA: 128}

COMMON = dict(
    vocab_size=256,
    hidden_size=128,
    num_attention_heads=4,
    head_dim=128,
    qk_rope_head_dim=64,
    q_lora_rank=64,
    o_groups=2,
    o_lora_rank=32,
    index_n_heads=8,
    index_head_dim=128,
    index_topk=8,
    n_routed_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    hc_mult=4,
    hc_sinkhorn_iters=20,
    hc_eps=1e-6,
    rms_norm_eps=1e-6,
    sliding_window=16,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
    yarn_factor=16.0,
    yarn_original_max_position_embeddings=1024,
    yarn_beta_fast=32.0,
    yarn_beta_slow=1.0,
    routed_scaling_factor=1.5,
    swiglu_limit=10.0,
    max_position_embeddings=16384,  # = yarn_factor * yarn_original_max_position_embeddings
)

# The fp32 models use a narrower hidden size to keep the committed files small; the quantised model
# keeps hidden 128 so that its FP8 128x128 blocks are full along the hidden axis.
SMALL = dict(hidden_size=64)

MODELS = [
    dict(name="swa", overrides=SMALL, seed=1001, layers=[SLIDING, SLIDING], num_hash_layers=1, seq_len=64,
         prompt_len=24, quantized=False, mtp=False,
         covers="2 sliding-window layers (window 16 < S); hash MoE (layer 0), top-k MoE (layer 1)"),
    dict(name="csa", overrides=SMALL, seed=1002, layers=[SLIDING, CSA, CSA], num_hash_layers=1, seq_len=160,
         prompt_len=24, quantized=False, mtp=False,
         covers="CSA (ratio 4, overlapping compressor, lightning indexer) with 40 compressed entries "
                "vs index_topk 8; YaRN on the compressed layers"),
    dict(name="hca", overrides=SMALL, seed=1003, layers=[SLIDING, HCA], num_hash_layers=1, seq_len=424,
         prompt_len=100, quantized=False, mtp=False,
         covers="HCA (ratio 128) with 3 full windows + 40 trailing tokens; greedy crosses position 127"),
    dict(name="mixed_quant", seed=1004, layers=[SLIDING, CSA, HCA, CSA], num_hash_layers=1,
         seq_len=424, prompt_len=100, quantized=True, mtp=True,
         covers="all layer types; weights exact in FP8 (128x128 ue8m0) / FP4 (1x32 ue8m0) / bf16; "
                "native file with mtp.0.* drafter tensors"),
]

GREEDY_STEPS = 64


def cfg_of(spec):
    return {**COMMON, **spec.get("overrides", {})}


# --------------------------------------------------------------------------------------------
# Number formats (numpy only)
# --------------------------------------------------------------------------------------------

def _e4m3_table():
    """Non-negative finite e4m3fn values indexed by code 0..126 (0x7f is NaN)."""
    vals = []
    for code in range(127):
        e, m = code >> 3, code & 7
        vals.append(m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(vals, dtype=np.float64)


E4M3_VALUES = _e4m3_table()
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _round_to_table(y, table):
    """Round |y| (already within the table's range) to the nearest table code, ties to even code."""
    a = np.abs(y)
    hi = np.clip(np.searchsorted(table, a, side="left"), 0, len(table) - 1)
    lo = np.clip(hi - 1, 0, len(table) - 1)
    d_lo, d_hi = a - table[lo], table[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo)
    return code.astype(np.uint8), np.signbit(y) & (code > 0)


def pow2_scale_exponent(amax, qmax):
    """Exponent k of the ue8m0 scale 2^k = 2^ceil(log2(amax / qmax)), computed on the fp32 value."""
    r = (np.asarray(amax, dtype=np.float32) / np.float32(qmax)).astype(np.float64)
    mant, exp = np.frexp(r)  # r = mant * 2^exp, mant in [0.5, 1)
    return np.where(mant == 0.5, exp - 1, exp).astype(np.int64)


def quantize_fp8_block(w, block=128):
    """w [N, K] -> (codes uint8 [N, K], e8m0 bytes uint8 [ceil(N/b), ceil(K/b)], dequantised float64)."""
    n, k = w.shape
    nb, kb = -(-n // block), -(-k // block)
    codes = np.zeros((n, k), np.uint8)
    scales = np.zeros((nb, kb), np.uint8)
    deq = np.zeros((n, k), np.float64)
    for i in range(nb):
        for j in range(kb):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            amax = max(float(np.abs(blk).max()), 1e-4)
            e = int(pow2_scale_exponent(amax, 448.0))
            s = 2.0 ** e
            y = np.clip(blk / s, -448.0, 448.0)
            mag, neg = _round_to_table(y, E4M3_VALUES)
            codes[i * block:(i + 1) * block, j * block:(j + 1) * block] = mag | (neg.astype(np.uint8) << 7)
            deq[i * block:(i + 1) * block, j * block:(j + 1) * block] = np.where(neg, -1, 1) * E4M3_VALUES[mag] * s
            scales[i, j] = e + 127
    return codes, scales, deq


def quantize_fp4_rows(w, block=32):
    """w [N, K] (K % 32 == 0) -> (packed int8 [N, K/2], e8m0 uint8 [N, K/32], dequantised float64)."""
    n, k = w.shape
    assert k % block == 0 and k % 2 == 0
    wb = w.reshape(n, k // block, block)
    amax = np.maximum(np.abs(wb).max(axis=-1), 6.0 * 2.0 ** -126)
    e = pow2_scale_exponent(amax, 6.0)
    s = np.ldexp(1.0, e)[..., None]
    y = np.clip(wb / s, -6.0, 6.0)
    mag, neg = _round_to_table(y, E2M1_VALUES)
    deq = (np.where(neg, -1, 1) * E2M1_VALUES[mag] * s).reshape(n, k)
    nib = (mag | (neg.astype(np.uint8) << 3)).reshape(n, k)
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8).view(np.int8)
    return packed, (e + 127).astype(np.uint8), deq


def to_bf16_bits(x):
    """float64 -> bf16 bit patterns (uint16), round to nearest even via fp32."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_bits_to_f64(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_bf16(x):
    return bf16_bits_to_f64(to_bf16_bits(x))


# --------------------------------------------------------------------------------------------
# safetensors writer / reader
# --------------------------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype string, shape, raw little-endian bytes)."""
    header, offset = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    header = {"__metadata__": dict(metadata or {"format": "pt"}), **header}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, _, _, raw in tensors:
            f.write(raw)


def read_safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def np_tensor(name, arr, dtype):
    """Encode a float64/int numpy array as a safetensors entry of the given dtype."""
    if dtype == "F32":
        raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
    elif dtype == "BF16":
        raw = to_bf16_bits(arr).astype("<u2").tobytes()
    elif dtype == "I64":
        raw = np.ascontiguousarray(arr, dtype="<i8").tobytes()
    elif dtype == "I32":
        raw = np.ascontiguousarray(arr, dtype="<i4").tobytes()
    elif dtype in ("I8", "F8_E4M3", "F8_E8M0", "U8"):
        raw = np.ascontiguousarray(arr).tobytes()
    else:
        raise ValueError(dtype)
    return (name, dtype, arr.shape, raw)


# --------------------------------------------------------------------------------------------
# Random weights (native names)
# --------------------------------------------------------------------------------------------

class Weights:
    """Ordered native-named tensors: value (float64 or int) + storage kind."""

    def __init__(self):
        self.items = {}  # name -> (kind, value)

    def add(self, name, kind, value):
        assert name not in self.items, name
        self.items[name] = (kind, value)


def draw(rng, shape, std, mean=0.0):
    return mean + std * rng.standard_normal(shape)


def gen_block(w, prefix, layer_type, is_hash, cfg, rng):
    D, H, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["head_dim"]
    Rq, G, Ro = cfg["q_lora_rank"], cfg["o_groups"], cfg["o_lora_rank"]
    E, I, k = cfg["n_routed_experts"], cfg["moe_intermediate_size"], cfg["num_experts_per_tok"]
    hc, V = cfg["hc_mult"], cfg["vocab_size"]
    HI, dI = cfg["index_n_heads"], cfg["index_head_dim"]
    mix = (2 + hc) * hc

    def norm_w(n):
        return draw(rng, (n,), 0.1, 1.0)

    def hc_site(site):
        # mix logits O(1); a wide comb base keeps Sinkhorn far from converged after 20 iterations,
        # so the iteration count is visible in the logits
        w.add(f"{prefix}hc_{site}_fn", "f32", draw(rng, (mix, hc * D), (hc * D) ** -0.5))
        w.add(f"{prefix}hc_{site}_base", "f32", np.concatenate(
            [draw(rng, (2 * hc,), 0.5), draw(rng, (hc * hc,), 4.0)]))
        w.add(f"{prefix}hc_{site}_scale", "f32", rng.uniform(0.5, 1.5, (3,)))

    w.add(f"{prefix}attn_norm.weight", "bf16", norm_w(D))
    w.add(f"{prefix}ffn_norm.weight", "bf16", norm_w(D))
    hc_site("attn")
    hc_site("ffn")
    a = prefix + "attn."
    w.add(a + "wq_a.weight", "fp8", draw(rng, (Rq, D), D ** -0.5))
    w.add(a + "q_norm.weight", "bf16", norm_w(Rq))
    w.add(a + "wq_b.weight", "fp8", draw(rng, (H * d, Rq), Rq ** -0.5))
    w.add(a + "wkv.weight", "fp8", draw(rng, (d, D), D ** -0.5))
    w.add(a + "kv_norm.weight", "bf16", norm_w(d))
    w.add(a + "wo_a.weight", "fp8", draw(rng, (G * Ro, H * d // G), (H * d // G) ** -0.5))
    w.add(a + "wo_b.weight", "fp8", draw(rng, (D, G * Ro), (G * Ro) ** -0.5))
    w.add(a + "attn_sink", "f32", draw(rng, (H,), 1.0, 0.5))
    m = RATIO[layer_type]
    if m:
        c = 2 if m == 4 else 1
        cp = a + "compressor."
        w.add(cp + "wkv.weight", "bf16", draw(rng, (c * d, D), D ** -0.5))
        w.add(cp + "wgate.weight", "bf16", draw(rng, (c * d, D), D ** -0.5))
        w.add(cp + "norm.weight", "bf16", norm_w(d))
        w.add(cp + "ape", "f32", draw(rng, (m, c * d), 1.0))
        if m == 4:
            ip = a + "indexer."
            w.add(ip + "wq_b.weight", "fp8", draw(rng, (HI * dI, Rq), Rq ** -0.5))
            w.add(ip + "weights_proj.weight", "bf16", draw(rng, (HI, D), D ** -0.5))
            w.add(ip + "compressor.wkv.weight", "bf16", draw(rng, (2 * dI, D), D ** -0.5))
            w.add(ip + "compressor.wgate.weight", "bf16", draw(rng, (2 * dI, D), D ** -0.5))
            w.add(ip + "compressor.norm.weight", "bf16", norm_w(dI))
            w.add(ip + "compressor.ape", "f32", draw(rng, (4, 2 * dI), 1.0))
    f = prefix + "ffn."
    w.add(f + "gate.weight", "bf16", draw(rng, (E, D), 0.1))
    if is_hash:
        tid2eid = np.argsort(rng.random((V, E)), axis=1)[:, :k].astype(np.int32)
        w.add(f + "gate.tid2eid", "i32", tid2eid)
    else:
        w.add(f + "gate.bias", "f32", draw(rng, (E,), 0.2))
    # Large w1/w3 make some SwiGLU clamps (gate > 10, |up| > 10) fire; small w2 keeps outputs O(1).
    for e in range(E):
        w.add(f"{f}experts.{e}.w1.weight", "fp4", draw(rng, (I, D), 4.0 * D ** -0.5))
        w.add(f"{f}experts.{e}.w2.weight", "fp4", draw(rng, (D, I), 0.015))
        w.add(f"{f}experts.{e}.w3.weight", "fp4", draw(rng, (I, D), 4.0 * D ** -0.5))
    w.add(f + "shared_experts.w1.weight", "fp8", draw(rng, (I, D), 4.0 * D ** -0.5))
    w.add(f + "shared_experts.w2.weight", "fp8", draw(rng, (D, I), 0.015))
    w.add(f + "shared_experts.w3.weight", "fp8", draw(rng, (I, D), 4.0 * D ** -0.5))


def gen_weights(spec, cfg):
    rng = np.random.default_rng(spec["seed"])
    D, V, hc = cfg["hidden_size"], cfg["vocab_size"], cfg["hc_mult"]
    w = Weights()
    w.add("embed.weight", "bf16", draw(rng, (V, D), 1.0))
    for i, lt in enumerate(spec["layers"]):
        gen_block(w, f"layers.{i}.", lt, i < spec["num_hash_layers"], cfg, rng)
    w.add("norm.weight", "bf16", draw(rng, (D,), 0.1, 1.0))
    w.add("head.weight", "bf16", draw(rng, (V, D), 2.5 * D ** -0.5))
    w.add("hc_head_fn", "f32", draw(rng, (hc, hc * D), (hc * D) ** -0.5))
    w.add("hc_head_base", "f32", draw(rng, (hc,), 0.5))
    w.add("hc_head_scale", "f32", rng.uniform(0.5, 1.5, (1,)))
    mtp = Weights()
    if spec["mtp"]:
        p = "mtp.0."
        mtp.add(p + "e_proj.weight", "fp8", draw(rng, (D, D), D ** -0.5))
        mtp.add(p + "h_proj.weight", "fp8", draw(rng, (D, D), D ** -0.5))
        mtp.add(p + "enorm.weight", "bf16", draw(rng, (D,), 0.1, 1.0))
        mtp.add(p + "hnorm.weight", "bf16", draw(rng, (D,), 0.1, 1.0))
        mtp.add(p + "norm.weight", "bf16", draw(rng, (D,), 0.1, 1.0))
        mtp.add(p + "hc_head_fn", "f32", draw(rng, (hc, hc * D), (hc * D) ** -0.5))
        mtp.add(p + "hc_head_base", "f32", draw(rng, (hc,), 0.5))
        mtp.add(p + "hc_head_scale", "f32", rng.uniform(0.5, 1.5, (1,)))
        gen_block(mtp, p, SLIDING, False, cfg, rng)
    return w, mtp


def finalize(weights, quantized):
    """Round every tensor to its storage format. Returns {name: (kind, value f64/int, native entries)}."""
    out = {}
    for name, (kind, v) in weights.items.items():
        if kind == "i32":
            out[name] = (kind, v, [np_tensor(name, v, "I32")])
        elif not quantized or kind == "f32":
            val = v.astype(np.float32).astype(np.float64)
            out[name] = ("f32", val, [np_tensor(name, val, "F32")])
        elif kind == "bf16":
            val = round_bf16(v)
            out[name] = (kind, val, [np_tensor(name, val, "BF16")])
        elif kind == "fp8":
            codes, scales, val = quantize_fp8_block(v)
            assert np.array_equal(round_bf16(val), val)
            sname = name[: -len(".weight")] + ".scale"
            out[name] = (kind, val, [np_tensor(name, codes, "F8_E4M3"), np_tensor(sname, scales, "F8_E8M0")])
        elif kind == "fp4":
            packed, scales, val = quantize_fp4_rows(v)
            assert np.array_equal(round_bf16(val), val)
            sname = name[: -len(".weight")] + ".scale"
            out[name] = (kind, val, [np_tensor(name, packed, "I8"), np_tensor(sname, scales, "F8_E8M0")])
        else:
            raise ValueError(kind)
    return out


# --------------------------------------------------------------------------------------------
# Naming: native -> HF (MODEL_SPEC §B.5); routed experts are fused in HF
# --------------------------------------------------------------------------------------------

_LAYER_MAP = [
    ("attn_norm.weight", "input_layernorm.weight"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("hc_attn_fn", "attn_hc.fn"), ("hc_attn_base", "attn_hc.base"), ("hc_attn_scale", "attn_hc.scale"),
    ("hc_ffn_fn", "ffn_hc.fn"), ("hc_ffn_base", "ffn_hc.base"), ("hc_ffn_scale", "ffn_hc.scale"),
    ("attn.wq_a.weight", "self_attn.q_a_proj.weight"),
    ("attn.q_norm.weight", "self_attn.q_a_norm.weight"),
    ("attn.wq_b.weight", "self_attn.q_b_proj.weight"),
    ("attn.wkv.weight", "self_attn.kv_proj.weight"),
    ("attn.kv_norm.weight", "self_attn.kv_norm.weight"),
    ("attn.wo_a.weight", "self_attn.o_a_proj.weight"),
    ("attn.wo_b.weight", "self_attn.o_b_proj.weight"),
    ("attn.attn_sink", "self_attn.sinks"),
    ("attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"),
    ("attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"),
    ("attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"),
    ("attn.compressor.ape", "self_attn.compressor.position_bias"),
    ("attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"),
    ("attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"),
    ("attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"),
    ("attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"),
    ("attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"),
    ("attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"),
    ("ffn.gate.weight", "mlp.gate.weight"),
    ("ffn.gate.bias", "mlp.gate.e_score_correction_bias"),
    ("ffn.gate.tid2eid", "mlp.gate.tid2eid"),
    ("ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"),
    ("ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"),
    ("ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"),
]
_TOP_MAP = {
    "embed.weight": "model.embed_tokens.weight",
    "head.weight": "lm_head.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}


def to_hf(final, n_layers, n_experts):
    """{native: (kind, value)} -> {hf name: (kind, value)} with fused expert tensors."""
    hf = {}
    for name, (kind, val, _) in final.items():
        if name in _TOP_MAP:
            hf[_TOP_MAP[name]] = (kind, val)
            continue
        parts = name.split(".", 2)
        assert parts[0] == "layers", name
        rest = parts[2]
        if rest.startswith("ffn.experts."):
            continue
        mapped = dict(_LAYER_MAP)[rest]
        hf[f"model.layers.{parts[1]}.{mapped}"] = (kind, val)
    for l in range(n_layers):
        p = f"layers.{l}.ffn.experts."
        w1 = [final[f"{p}{e}.w1.weight"] for e in range(n_experts)]
        w2 = [final[f"{p}{e}.w2.weight"] for e in range(n_experts)]
        w3 = [final[f"{p}{e}.w3.weight"] for e in range(n_experts)]
        gate_up = np.stack([np.concatenate([a[1], b[1]], axis=0) for a, b in zip(w1, w3)])
        hf[f"model.layers.{l}.mlp.experts.gate_up_proj"] = (w1[0][0], gate_up)
        hf[f"model.layers.{l}.mlp.experts.down_proj"] = (w2[0][0], np.stack([a[1] for a in w2]))
    return hf


def hf_entries(hf, quantized):
    out = []
    for name in sorted(hf):
        kind, val = hf[name]
        if kind == "i32":
            out.append(np_tensor(name, val, "I32"))
        elif kind == "f32" or not quantized:
            out.append(np_tensor(name, val, "F32"))
        else:
            out.append(np_tensor(name, val, "BF16"))
    return out


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------

def hf_config(spec, quantized):
    c = cfg_of(spec)
    n = len(spec["layers"])
    prf = c["qk_rope_head_dim"] / c["head_dim"]
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"],
        "num_hidden_layers": n,
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": 1,
        "head_dim": c["head_dim"],
        "partial_rotary_factor": prf,
        "q_lora_rank": c["q_lora_rank"],
        "o_groups": c["o_groups"],
        "o_lora_rank": c["o_lora_rank"],
        "sliding_window": c["sliding_window"],
        "layer_types": list(spec["layers"]),
        "compress_rates": {CSA: 4, HCA: 128},
        "rope_theta": c["rope_theta"],
        "compress_rope_theta": c["compress_rope_theta"],
        "rope_parameters": {
            "main": {"rope_type": "default", "rope_theta": c["rope_theta"], "partial_rotary_factor": prf},
            "compress": {
                "rope_type": "yarn",
                "rope_theta": c["compress_rope_theta"],
                "partial_rotary_factor": prf,
                "factor": c["yarn_factor"],
                "original_max_position_embeddings": c["yarn_original_max_position_embeddings"],
                "beta_fast": c["yarn_beta_fast"],
                "beta_slow": c["yarn_beta_slow"],
                "attention_factor": 1.0,
            },
        },
        "index_n_heads": c["index_n_heads"],
        "index_head_dim": c["index_head_dim"],
        "index_topk": c["index_topk"],
        "n_routed_experts": c["n_routed_experts"],
        "n_shared_experts": 1,
        "num_experts_per_tok": c["num_experts_per_tok"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "mlp_layer_types": ["hash_moe" if i < spec["num_hash_layers"] else "moe" for i in range(n)],
        "scoring_func": "sqrtsoftplus",
        "norm_topk_prob": True,
        "routed_scaling_factor": c["routed_scaling_factor"],
        "swiglu_limit": c["swiglu_limit"],
        "hc_mult": c["hc_mult"],
        "hc_sinkhorn_iters": c["hc_sinkhorn_iters"],
        "hc_eps": c["hc_eps"],
        "rms_norm_eps": c["rms_norm_eps"],
        "hidden_act": "silu",
        "max_position_embeddings": c["max_position_embeddings"],
        "num_nextn_predict_layers": 1 if spec["mtp"] else 0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "initializer_range": 0.02,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "dtype": "bfloat16" if quantized else "float32",
    }


def native_config(spec):
    """Legacy / official form, as in DeepSeek-V4-Flash's config.json (MODEL_SPEC §0, §B.1)."""
    c = cfg_of(spec)
    n = len(spec["layers"])
    ratios = [RATIO[t] for t in spec["layers"]] + ([0] if spec["mtp"] else [])
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"],
        "num_hidden_layers": n,
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": 1,
        "head_dim": c["head_dim"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "q_lora_rank": c["q_lora_rank"],
        "o_groups": c["o_groups"],
        "o_lora_rank": c["o_lora_rank"],
        "sliding_window": c["sliding_window"],
        "compress_ratios": ratios,
        "compress_rope_theta": c["compress_rope_theta"],
        "rope_theta": c["rope_theta"],
        "rope_scaling": {
            "type": "yarn",
            "factor": c["yarn_factor"],
            "original_max_position_embeddings": c["yarn_original_max_position_embeddings"],
            "beta_fast": c["yarn_beta_fast"],
            "beta_slow": c["yarn_beta_slow"],
        },
        "index_n_heads": c["index_n_heads"],
        "index_head_dim": c["index_head_dim"],
        "index_topk": c["index_topk"],
        "n_routed_experts": c["n_routed_experts"],
        "n_shared_experts": 1,
        "num_experts_per_tok": c["num_experts_per_tok"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "num_hash_layers": spec["num_hash_layers"],
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "routed_scaling_factor": c["routed_scaling_factor"],
        "swiglu_limit": c["swiglu_limit"],
        "hc_mult": c["hc_mult"],
        "hc_sinkhorn_iters": c["hc_sinkhorn_iters"],
        "hc_eps": c["hc_eps"],
        "rms_norm_eps": c["rms_norm_eps"],
        "hidden_act": "silu",
        "max_position_embeddings": c["max_position_embeddings"],
        "num_nextn_predict_layers": 1 if spec["mtp"] else 0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "initializer_range": 0.02,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "scale_fmt": "ue8m0",
            "weight_block_size": [128, 128],
            "activation_scheme": "dynamic",
        },
        "expert_dtype": "fp4",
    }


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, default=str)
        f.write("\n")


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------

def build_checkpoint(spec, out_dir):
    """Draw, round and write one model's checkpoint(s). Returns (hf state {name: (kind, value)}, info)."""
    cfg = cfg_of(spec)
    w, mtp = gen_weights(spec, cfg)
    q = spec["quantized"]
    final = finalize(w, q)
    final_mtp = finalize(mtp, q)
    hf = to_hf(final, len(spec["layers"]), cfg["n_routed_experts"])
    d = os.path.join(out_dir, spec["name"])
    write_json(os.path.join(d, "hf", "config.json"), hf_config(spec, q))
    write_safetensors(os.path.join(d, "hf", "model.safetensors"), hf_entries(hf, q))
    info = {"native_tensors": None}
    if q:
        entries = [e for name in final for e in final[name][2]]
        entries += [e for name in final_mtp for e in final_mtp[name][2]]
        write_json(os.path.join(d, "native", "config.json"), native_config(spec))
        write_safetensors(os.path.join(d, "native", "model.safetensors"), entries)
        info["native_tensors"] = [(e[0], e[1], list(e[2])) for e in entries]
        info["native_values"] = {name: v[1] for name, v in final.items()}
    return hf, info


def input_ids_for(spec):
    rng = np.random.default_rng(spec["seed"] + 7)
    return rng.integers(0, cfg_of(spec)["vocab_size"], size=spec["seq_len"], dtype=np.int64)


# --------------------------------------------------------------------------------------------
# HF reference (torch)
# --------------------------------------------------------------------------------------------

def run_reference(spec, hf, info, out_dir, report):
    import torch
    import torch.nn.functional as F
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    torch.manual_seed(0)
    name = spec["name"]
    d = os.path.join(out_dir, name)
    rep = report.setdefault(name, {})
    rep["layer_types"] = spec["layers"]
    rep["num_hash_layers"] = spec["num_hash_layers"]
    rep["seq_len"] = spec["seq_len"]
    rep["prompt_len"] = spec["prompt_len"]
    rep["seed"] = spec["seed"]
    rep["covers"] = spec["covers"]
    rep["overrides"] = spec.get("overrides", {})

    config = DeepseekV4Config.from_pretrained(os.path.join(d, "hf"))
    config._experts_implementation = "eager"
    config._attn_implementation = "eager"
    assert config.qk_rope_head_dim == cfg_of(spec)["qk_rope_head_dim"]
    assert list(config.layer_types) == spec["layers"]

    model = DeepseekV4ForCausalLM(config)
    sd = {}
    for k, (kind, v) in hf.items():
        sd[k] = torch.from_numpy(np.ascontiguousarray(v)) if kind == "i32" else torch.from_numpy(v.copy())
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    model = model.to(torch.float64).eval()
    state = model.state_dict()
    for k, v in sd.items():
        p = state[k]
        assert torch.equal(p.double(), v.double()) if v.is_floating_point() else torch.equal(p.long(), v.long()), k
    rep["experts_implementation"] = model.config._experts_implementation

    ids = torch.from_numpy(input_ids_for(spec))

    def forward(m, x):
        with torch.no_grad():
            return m(input_ids=x[None], use_cache=False).logits[0]

    # hooks: indexer selections / scores, clamps, activation scale
    probes = Probes(model, config)
    logits = forward(model, ids)
    probes.remove()
    assert logits.dtype == torch.float64
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1])

    # greedy continuation by repeated full forwards (never HF's cache)
    prompt = ids[: spec["prompt_len"]].clone()
    seq = prompt.clone()
    g_ids, g_margin = [], []
    for _ in range(GREEDY_STEPS):
        last = forward(model, seq)[-1]
        v, i = last.topk(2)
        g_ids.append(int(i[0]))
        g_margin.append(float(v[0] - v[1]))
        seq = torch.cat([seq, i[:1]])

    tensors = [
        np_tensor("input_ids", ids.numpy(), "I64"),
        np_tensor("logits", logits.numpy(), "F32"),
        np_tensor("logits_margin", margin.numpy(), "F32"),
        np_tensor("greedy_prompt_ids", prompt.numpy(), "I64"),
        np_tensor("greedy_ids", np.array(g_ids, dtype=np.int64), "I64"),
        np_tensor("greedy_margins", np.array(g_margin, dtype=np.float64), "F32"),
    ]
    for l, sel in sorted(probes.selections.items()):
        tensors.append(np_tensor(f"indexer_topk.layers.{l}", np.sort(sel, axis=-1).astype(np.int32), "I32"))
    write_safetensors(os.path.join(d, "reference.safetensors"), tensors,
                      {"format": "pt", "model": name, "seq_len": str(spec["seq_len"]),
                       "greedy_steps": str(GREEDY_STEPS)})
    print(f"[{name}] reference written", flush=True)

    # ---- checks (each guarded: a failing check is reported, the reference stays) ----
    def guarded(key, fn):
        try:
            rep[key] = fn()
        except Exception as exc:  # noqa: BLE001 - report and go on
            import traceback
            rep[key] = {"error": repr(exc), "trace": traceback.format_exc()[-2000:]}

    guarded("probes", lambda: probes.summary(spec, ids))

    def stats():
        diffs = (logits[1:] - logits[:-1]).abs().amax(-1)
        return {
            "logits_absmax": float(logits.abs().max()),
            "logits_std_mean_over_positions": float(logits.std(dim=-1).mean()),
            "distinct_argmax": int(torch.unique(logits.argmax(-1)).numel()),
            "min_adjacent_position_maxdiff": float(diffs.min()),
            "margin_min": float(margin.min()),
            "margin_median": float(margin.median()),
            "positions_margin_below_1e-4": int((margin < 1e-4).sum()),
            "greedy_margin_min": min(g_margin),
            "greedy_steps_margin_below_1e-4": sum(m < 1e-4 for m in g_margin),
            "greedy_distinct_tokens": len(set(g_ids)),
            "greedy_first_equals_full_argmax": g_ids[0] == int(logits[spec["prompt_len"] - 1].argmax()),
        }
    guarded("stats", stats)

    if spec["quantized"]:
        def legacy_cfg():
            legacy = DeepseekV4Config.from_pretrained(os.path.join(d, "native"))
            bad = []
            for key in ("layer_types", "mlp_layer_types", "qk_rope_head_dim", "partial_rotary_factor",
                        "num_hidden_layers", "compress_rates", "rope_theta", "compress_rope_theta"):
                if getattr(legacy, key) != getattr(config, key):
                    bad.append((key, getattr(legacy, key), getattr(config, key)))
            for rt in ("main", "compress"):
                a, b = legacy.rope_parameters[rt], config.rope_parameters[rt]
                for key in sorted((set(a) | set(b)) - {"type"}):
                    if a.get(key) != b.get(key):
                        bad.append((rt, key, a.get(key), b.get(key)))
            return {"mismatches": bad, "legacy_rope_parameters": legacy.rope_parameters}
        guarded("native_config_vs_hf_config", legacy_cfg)

    def reload():
        loaded, load_info = DeepseekV4ForCausalLM.from_pretrained(
            os.path.join(d, "hf"), config=config, dtype=torch.float64, output_loading_info=True)
        loaded = loaded.to(torch.float64).eval()
        return {"loading_info": {k: list(v) for k, v in load_info.items()},
                "logits_maxdiff": float((forward(loaded, ids) - logits).abs().max())}
    guarded("from_pretrained_reload", reload)

    if info.get("native_values") is not None:
        guarded("native_checks", lambda: check_native(spec, d, info, hf, model, ids, logits, forward))

    def cached_decode():
        # Diagnostic only (never the oracle): HF's own cache path, prefill of the greedy prompt then
        # one token at a time over the rest of input_ids, compared with the full forward.
        P, S = spec["prompt_len"], len(ids)
        with torch.no_grad():
            out = model(input_ids=ids[None, :P], use_cache=True)
            pkv, rows = out.past_key_values, [out.logits[0]]
            for t in range(P, S):
                out = model(input_ids=ids[None, t:t + 1], past_key_values=pkv, use_cache=True)
                pkv = out.past_key_values
                rows.append(out.logits[0])
        rel = (torch.cat(rows) - logits).abs().amax(-1) / logits.abs().max()
        bad = (rel > 1e-6).nonzero().flatten()
        return {"prefill_len": P, "max_rel_diff": float(rel.max()),
                "max_rel_diff_prefill": float(rel[:P].max()),
                "first_position_rel_diff_gt_1e-6": int(bad[0]) if len(bad) else None}
    guarded("hf_cached_decode_vs_full (diagnostic)", cached_decode)

    guarded("non_fp64_ops", lambda: dtype_audit(model, ids))
    guarded("sensitivity", lambda: sensitivity(model, config, ids, logits, forward))

    def fp32_run():
        model.to(torch.float32)
        try:
            l32 = forward(model, ids).double()
        finally:
            model.to(torch.float64)
        return float((l32 - logits).abs().max() / logits.abs().max())
    guarded("fp32_model_vs_fp64_maxdiff_rel", fp32_run)


def dtype_audit(model, ids):
    """Run one forward under a TorchFunctionMode; list ops in the V4 modeling file whose floating
    outputs are not float64 (file line -> dtypes)."""
    import torch
    from torch.overrides import TorchFunctionMode

    found = {}

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else (out,)
            bad = {str(o.dtype) for o in outs
                   if isinstance(o, torch.Tensor) and o.is_floating_point() and o.dtype != torch.float64}
            if bad:
                f = sys._getframe(1)
                while f is not None and "deepseek_v4" not in f.f_code.co_filename:
                    f = f.f_back
                if f is not None:
                    import linecache
                    key = f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} {f.f_code.co_name}: " \
                          f"{linecache.getline(f.f_code.co_filename, f.f_lineno).strip()}"
                    found.setdefault(key, set()).update(bad)
            return out

    with torch.no_grad(), Mode():
        model(input_ids=ids[None], use_cache=False)
    return {k: sorted(v) for k, v in sorted(found.items())}


class Probes:
    """Forward hooks: indexer scores and picks, SwiGLU clamp counts, stream RMS per layer."""

    def __init__(self, model, config):
        import torch
        self.handles = []
        self.scores, self.selections = {}, {}
        self.clamp = {}
        self.stream_rms = []
        self.limit = config.swiglu_limit
        for l, layer in enumerate(model.model.layers):
            comp = layer.self_attn.compressor
            if comp is not None and hasattr(comp, "indexer"):
                self.handles.append(comp.indexer.scorer.register_forward_hook(self._score_hook(l)))
                self.handles.append(comp.indexer.register_forward_hook(self._sel_hook(l)))
            self.handles.append(layer.mlp.experts.register_forward_pre_hook(self._experts_hook(l)))
            self.handles.append(layer.mlp.shared_experts.register_forward_pre_hook(self._shared_hook(l)))
            self.handles.append(layer.register_forward_hook(
                lambda m, a, o: self.stream_rms.append(float(o.pow(2).mean().sqrt()))))
        self.torch = torch

    def _score_hook(self, l):
        def hook(m, args, out):
            self.scores[l] = out[0].detach().double().numpy()
        return hook

    def _sel_hook(self, l):
        def hook(m, args, out):
            self.selections[l] = out[0].detach().numpy()
        return hook

    def _count(self, l, key, gate, up):
        c = self.clamp.setdefault(l, {"gate_gt_limit": 0, "up_abs_gt_limit": 0, "elements": 0,
                                      "shared_gate_gt_limit": 0, "shared_up_abs_gt_limit": 0})
        c[key + "gate_gt_limit"] += int((gate > self.limit).sum())
        c[key + "up_abs_gt_limit"] += int((up.abs() > self.limit).sum())
        if not key:
            c["elements"] += int(gate.numel())

    def _experts_hook(self, l):
        def hook(m, args):
            import torch.nn.functional as F
            h, idx = args[0], args[1]
            for e in range(m.num_experts):
                rows = (idx == e).any(-1).nonzero().flatten()
                if rows.numel():
                    gu = F.linear(h[rows], m.gate_up_proj[e])
                    g, u = gu.chunk(2, dim=-1)
                    self._count(l, "", g, u)
        return hook

    def _shared_hook(self, l):
        def hook(m, args):
            x = args[0]
            self._count(l, "shared_", m.gate_proj(x), m.up_proj(x))
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()

    def summary(self, spec, ids):
        out = {"stream_rms_per_layer": [round(x, 4) for x in self.stream_rms], "swiglu_clamps": self.clamp}
        k = cfg_of(spec)["index_topk"]
        S = len(ids)
        idx = {}
        for l, sc in self.scores.items():
            n_entries = S // 4
            gaps, rel = [], []
            for t in range(S):
                vis = (t + 1) // 4
                if vis > k:
                    s = np.sort(sc[t, :vis])[::-1]
                    gaps.append(s[k - 1] - s[k])
                    rel.append((s[k - 1] - s[k]) / max(abs(s[k - 1]), 1e-30))
            sel = self.selections[l]
            valid = (sel >= 0).sum(-1)
            idx[l] = {
                "compressed_entries": n_entries,
                "index_topk": k,
                "positions_with_more_visible_entries_than_topk": len(gaps),
                "first_such_position": int(4 * (k + 1) - 1),
                "valid_picks_last_position": int(valid[-1]),
                "min_boundary_gap": float(min(gaps)) if gaps else None,
                "min_boundary_gap_rel": float(min(rel)) if rel else None,
                "exact_boundary_ties": int(sum(g == 0 for g in gaps)),
            }
        out["indexer"] = idx
        return out


def sensitivity(model, config, ids, ref, forward):
    import torch
    res = {}
    scale = float(ref.abs().max())

    def measure(label, apply, undo):
        apply()
        try:
            res[label] = float((forward(model, ids) - ref).abs().max() / scale)
        finally:
            undo()

    hcs = [m for m in model.modules() if hasattr(m, "hc_sinkhorn_iters")]
    measure("hc_sinkhorn_iters 20->19",
            lambda: [setattr(m, "hc_sinkhorn_iters", 19) for m in hcs],
            lambda: [setattr(m, "hc_sinkhorn_iters", 20) for m in hcs])
    measure("sliding_window 16->15", lambda: setattr(model.config, "sliding_window", 15),
            lambda: setattr(model.config, "sliding_window", 16))
    idxs = [m for m in model.modules() if type(m).__name__ == "DeepseekV4Indexer"]
    if idxs:
        measure("index_topk 8->7", lambda: [setattr(m, "index_topk", 7) for m in idxs],
                lambda: [setattr(m, "index_topk", 8) for m in idxs])
    exps = [m for m in model.modules() if hasattr(m, "limit")]
    measure("swiglu_limit 10->9", lambda: [setattr(m, "limit", 9.0) for m in exps],
            lambda: [setattr(m, "limit", 10.0) for m in exps])

    def zero_param(pred):
        saved = [(p, p.detach().clone()) for n, p in
                 list(model.named_parameters()) + list(model.named_buffers()) if pred(n)]
        return (lambda: [p.data.zero_() for p, _ in saved]), (lambda: [p.data.copy_(v) for p, v in saved])

    for label, pred in [("attn sinks -> 0", lambda n: n.endswith(".sinks")),
                        ("compressor position_bias -> 0", lambda n: n.endswith("position_bias")),
                        ("gate e_score_correction_bias -> 0", lambda n: n.endswith("e_score_correction_bias"))]:
        a, u = zero_param(pred)
        if any(pred(n) for n, _ in list(model.named_parameters()) + list(model.named_buffers())):
            measure(label, a, u)
    rots = [m for m in model.modules() if hasattr(m, "compress_inv_freq")]
    if any(type(l.self_attn.compressor).__name__ != "NoneType" for l in model.model.layers):
        r = config.qk_rope_head_dim
        plain = 1.0 / (config.compress_rope_theta ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
        saved = [m.compress_inv_freq.clone() for m in rots]
        measure("YaRN off on compressed layers",
                lambda: [m.compress_inv_freq.copy_(plain) for m in rots],
                lambda: [m.compress_inv_freq.copy_(s) for m, s in zip(rots, saved)])
    return res


def check_native(spec, d, info, hf, model, ids, logits, forward):
    """Native file: torch's own float8 decoding of our bytes gives the HF weights bit-exactly;
    HF's native->HF renaming of a dequantised native-named copy gives the same state and logits."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV4ForCausalLM

    res = {}
    path = os.path.join(d, "native", "model.safetensors")
    try:
        nat = load_file(path)
        res["read_by"] = "safetensors.torch.load_file"
    except Exception as exc:  # older safetensors without F8_E8M0: decode raw bytes with torch views
        res["read_by"] = f"raw bytes + torch dtype views (load_file failed: {exc})"
        header, base = read_safetensors_header(path)
        raw = open(path, "rb").read()
        tdt = {"F8_E4M3": torch.float8_e4m3fn, "F8_E8M0": torch.float8_e8m0fnu, "I8": torch.int8,
               "BF16": torch.bfloat16, "F32": torch.float32, "I32": torch.int32}
        nat = {}
        for k, h in header.items():
            if k == "__metadata__":
                continue
            a, b = h["data_offsets"]
            u8 = torch.frombuffer(bytearray(raw[base + a: base + b]), dtype=torch.uint8)
            nat[k] = u8.view(tdt[h["dtype"]]).reshape(h["shape"])
    res["tensors"] = len(nat)
    res["dtypes"] = sorted({str(v.dtype) for v in nat.values()})
    fp4_table = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                             dtype=torch.float64)
    deq = {}
    n_checked = 0
    for name, t in nat.items():
        if name.endswith(".scale"):
            continue
        if t.dtype == torch.float8_e4m3fn:
            s = nat[name[:-len(".weight")] + ".scale"].to(torch.float64)
            s = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: t.shape[0], : t.shape[1]]
            deq[name] = t.to(torch.float64) * s
        elif t.dtype == torch.int8:
            b = t.view(torch.uint8).to(torch.int64)
            codes = torch.stack([b & 15, b >> 4], dim=-1).reshape(t.shape[0], -1)
            s = nat[name[:-len(".weight")] + ".scale"].to(torch.float64).repeat_interleave(32, 1)
            deq[name] = fp4_table[codes] * s
        else:
            deq[name] = t
    for name, val in info["native_values"].items():
        got = deq[name]
        assert torch.equal(got.to(torch.float64) if got.is_floating_point() else got.to(torch.int64),
                           torch.from_numpy(np.asarray(val, dtype=np.float64 if got.is_floating_point()
                                                       else np.int64))), name
        n_checked += 1
    res["dequantised_equal_to_hf_values"] = n_checked
    # native-named BF16/F32 copy (no scales, mtp kept) loaded by HF's own renaming rules
    with tempfile.TemporaryDirectory() as tmp:
        plain = {}
        for name, t in deq.items():
            if t.is_floating_point():
                plain[name] = t.to(torch.float32 if nat[name].dtype == torch.float32 else torch.bfloat16)
            else:
                plain[name] = t.contiguous()
        save_file(plain, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        write_json(os.path.join(tmp, "config.json"), hf_config(spec, True))
        m2, li = DeepseekV4ForCausalLM.from_pretrained(tmp, config=model.config, dtype=torch.float64,
                                                       output_loading_info=True)
        res["hf_renaming_missing"] = list(li["missing_keys"])
        res["hf_renaming_unexpected_non_mtp"] = [k for k in li["unexpected_keys"] if "mtp" not in k]
        m2 = m2.to(torch.float64).eval()
        sd1, sd2 = model.state_dict(), m2.state_dict()
        res["hf_renaming_state_equal"] = all(torch.equal(sd1[k], sd2[k].to(sd1[k].dtype)) for k in sd1)
        res["hf_renaming_logits_maxdiff"] = float((forward(m2, ids) - logits).abs().max())
    return res


# --------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--weights-only", action="store_true")
    ap.add_argument("--only", nargs="*", help="model names (default: all)")
    args = ap.parse_args()
    report = {}
    for spec in MODELS:
        if args.only and spec["name"] not in args.only:
            continue
        hf, info = build_checkpoint(spec, args.out)
        print(f"[{spec['name']}] checkpoint written", flush=True)
        if info["native_tensors"]:
            report.setdefault(spec["name"], {})["native_tensor_list"] = info["native_tensors"]
        if not args.weights_only:
            try:
                run_reference(spec, hf, info, args.out, report)
            except Exception:  # noqa: BLE001 - keep going with the other models, report the failure
                import traceback
                traceback.print_exc()
                report.setdefault(spec["name"], {})["FAILED"] = traceback.format_exc()[-3000:]
            print(json.dumps({k: v for k, v in report[spec["name"]].items() if k != "native_tensor_list"},
                             indent=1, default=str), flush=True)
    if not args.weights_only:
        import torch
        import transformers
        manifest = {
            "generator": "tools/make_goldens.py",
            "command": "python3 tools/make_goldens.py --out tests/data/golden",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "device": "cpu, float64, use_cache=False, eager attention and experts",
            "greedy_steps": GREEDY_STEPS,
            "common": COMMON,
            "models": report,
        }
        write_json(os.path.join(args.out, "manifest.json"), manifest)


if __name__ == "__main__":
    main()
