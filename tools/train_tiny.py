#!/usr/bin/env python3
"""Train a tiny DeepSeek-V4.1 model on the CPython standard library and export it in the native
checkpoint format (issue 16, deliverables 1-3 for V4.1). Needs PyTorch (not in scripts/setup: CI
does not run this) and HF `tokenizers`.

    # the GPU run (train + export + engine check), see --help for the knobs
    python3 tools/train_tiny.py --out models/trained-v41 --device cuda --steps auto:420 \
        --check-engine-after --engine-bin build-g/tests/tools/model_logits
    # compare an exported checkpoint with the engine (tests/tools/model_logits)
    python3 tools/train_tiny.py --check-engine models/trained-v41
    # retrain the committed tokenizer (models/trained/tokenizer.json)
    python3 tools/train_tiny.py --train-tokenizer models/trained/tokenizer.json
    # the tiny V4 model (tools/tiny_v4.py: SWA, CSA, HCA, hash + top-k MoE, multi-pass mHC)
    python3 tools/train_tiny.py --preset v4 --out models/trained-v4 --device cuda --steps auto:330

The forward (`V41`) is the project's V4.1 math (MODEL_SPEC §C, engine src/model/*.cc) in PyTorch:
single-pass mHC with Sinkhorn, attention without q-norm, sliding window + sink, ratio-2 / ratio-1
compressors in the KV-source layers, index keys from the pre-RoPE latent, indexer top-k and the
candidate blocks of the candidate source, reuse / reindex layers from the layer plan (the Python
twin of src/io/layer_plan.cc), MoE with sqrt-softplus routing + selection-only bias, clamped
SwiGLU, shared expert, RMSNorm eps 1e-20. No Engram: the engine's Engram hash multipliers exist only
for the compressed vocabulary of DeepSeek's tokenizer (src/ops/engram/engram_multipliers.inc), and
this model uses its own tokenizer. No DSpark drafter yet.

`--preset v4` / `v4-small` train the DeepSeek-V4 architecture instead (tools/tiny_v4.py, whose
docstring lists its math and QAT roundings); everything else below applies to both. V4 weights
use V4's 128x128 FP8 grid and ship `gate.tid2eid` (int32) in the hash layers.

Numerics. Weights are fp32 masters; the forward uses them in their storage format through a
straight-through estimator (value of the rounded weight, gradient to the master): FP8 e4m3 with one
power-of-two scale per 32x32 block for the dense projections, FP4 e2m1 with one power-of-two scale
per 1x32 input group for the routed experts, bf16 for embed/head/norms/compressor/gate/indexer
weights_proj and wk. So the exported checkpoint holds exactly the weights the model was trained
with (checked at export against tools/make_goldens.py's NumPy quantisers, which write the file).
With `--qat` (default on) the forward also applies the official activation roundings of
MODEL_SPEC §C.4/§C.5/§C.7 (STE): window K=V FP8 (all dims, 32-blocks), compressed entries FP4 with
e4m3 scales per 16, index keys and index queries FP4 (32-blocks, ue8m0). Evaluation and the engine
check run in fp32 (`official` = QAT roundings on, `reference` = off); training may use bf16
autocast for the matmuls (`--amp bf16`, default on CUDA).

Selections. The indexer's top-k and the candidate blocks are not differentiable; they enter the
attention as boolean masks (as DeepSeek trains). The indexer (index-source wq_b, weights_proj; the
key owner's wk, k_norm) gets no gradient from the LM loss; it is trained with a KL loss towards the
layer's own attention distribution over all visible compressed entries (dense: the main attention
probabilities of those entries summed over heads, L1-normalised, detached), on detached inputs, as
DeepSeek-V3.2 trains its lightning indexer. Expert balance: DeepSeek-V3's auxiliary-loss-free bias
update (bias += u * sign(mean load - load) after each step); the bias only selects.

Data. tools/tiny_corpus.py: the running interpreter's stdlib, deduplicated, held-out files by hash
of the relative path; documents `<bos> text <eos>` concatenated; training windows of seq_len + 1
tokens at seeded random offsets; held-out = consecutive non-overlapping windows of the held-out
stream (the first --eval-windows of them), each a sequence starting at position 0.
"""

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tiny_corpus as corpus  # noqa: E402

TOKENIZER = os.path.join(ROOT, "models", "trained", "tokenizer.json")
BLOCK = 32

# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------

# Every V4.1 role (src/model/tiny_model.cc tiny_v41_model_config's layout): 0-1 SWA, 2 ratio-2
# KV+index source, 3 ratio-2 reuse, 4 ratio-1 KV+index+candidate source, 5 reuse, 6 reindex
# (scores 4's keys inside 4's candidates), 7 reuse of 6's top-k.
PRESETS = {
    "v41": dict(hidden_size=256, num_hidden_layers=8, num_attention_heads=4, head_dim=128,
                qk_rope_head_dim=64, q_lora_rank=128, o_groups=2, o_lora_rank=64,
                n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                n_shared_experts=1, sliding_window=128, index_n_heads=4, index_head_dim=128,
                index_topk=64, candidate_topk_blocks=16, candidate_block_size=8,
                compress_ratios=[0, 0, 2, 2, 1, 1, 1, 1], kv_source_layer_ids=[2, 4],
                index_source_layer_ids=[2, 4, 6], candidate_source_layer_id=4),
    # Same roles, smaller: for CPU verification of the pipeline.
    "v41-small": dict(hidden_size=64, num_hidden_layers=8, num_attention_heads=2, head_dim=64,
                      qk_rope_head_dim=32, q_lora_rank=64, o_groups=2, o_lora_rank=32,
                      n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                      n_shared_experts=1, sliding_window=32, index_n_heads=2, index_head_dim=64,
                      index_topk=16, candidate_topk_blocks=4, candidate_block_size=8,
                      compress_ratios=[0, 0, 2, 2, 1, 1, 1, 1], kv_source_layer_ids=[2, 4],
                      index_source_layer_ids=[2, 4, 6], candidate_source_layer_id=4),
}

FIXED = dict(num_key_value_heads=1, swiglu_limit=10.0, rms_norm_eps=1e-20, rope_theta=10000.0,
             rope_scaling={"rope_type": "yarn", "factor": 16.0, "beta_fast": 32, "beta_slow": 1,
                           "original_max_position_embeddings": 65536},
             max_position_embeddings=65536, scoring_func="sqrtsoftplus", topk_method="noaux_tc",
             norm_topk_prob=True, routed_scaling_factor=1.5, compress_rope_theta=160000.0,
             hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, engram_layer_ids=[],
             num_nextn_predict_layers=0)


def is_v4(c):
    """A V4 config (tools/tiny_v4.py: flat, model_type deepseek_v4) rather than V4.1's text_config."""
    return c.get("model_type") == "deepseek_v4"


def weight_block(c):
    return 128 if is_v4(c) else BLOCK


def make_text_config(preset, vocab_size, bos, eos):
    """V4.1: the text_config; V4 (tools/tiny_v4.py presets): the flat config."""
    if preset.startswith("v4-") or preset == "v4":
        import tiny_v4
        return tiny_v4.make_config(preset, vocab_size, bos, eos)
    c = {"model_type": "deepseek_v41_text", **FIXED, **PRESETS[preset]}
    c["vocab_size"] = vocab_size
    c["bos_token_id"], c["eos_token_id"] = bos, eos
    return c


def full_config(text_config):
    if is_v4(text_config):
        return dict(text_config)
    return {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
            "text_config": text_config,
            "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                    "scale_fmt": "ue8m0", "weight_block_size": [BLOCK, BLOCK],
                                    "expert_dtype": "fp4"}}


def layer_plan(c):
    """Python twin of src/io/layer_plan.cc plan_v41 (no checks: the engine checks the config)."""
    kv, ix, cand = set(c["kv_source_layer_ids"]), set(c["index_source_layer_ids"]), c["candidate_source_layer_id"]

    def latest(l, pred):
        return next((j for j in range(l, -1, -1) if pred(j)), -1)

    plan = []
    for l, r in enumerate(c["compress_ratios"][: c["num_hidden_layers"]]):
        p = dict(ratio=r, owns_compressor=False, kv_from=-1, owns_index_keys=False, index_keys_from=-1,
                 topk_from=-1, candidate_source=False, candidates_from=-1)
        if r:
            p["owns_compressor"] = l in kv
            p["kv_from"] = latest(l, lambda j: j in kv)
            p["owns_index_keys"] = l in kv and l in ix
            if l in ix:
                p["index_keys_from"] = latest(l, lambda j: j in kv and j in ix)
                p["topk_from"] = l
                p["candidate_source"] = l == cand
                if 0 <= cand < l:
                    p["candidates_from"] = cand
            else:
                p["topk_from"] = latest(l, lambda j: j in ix)
        plan.append(p)
    return plan


# --------------------------------------------------------------------------------------------
# Quantisers (torch): bit-identical to tools/make_goldens.py's NumPy ones and src/ops/quant
# --------------------------------------------------------------------------------------------

def _torch():
    import torch
    return torch


def pow2_exponent(r):
    """ceil(log2(r)) from the fp32 bits (exponent - 127 + [mantissa != 0]); r > 0 normal."""
    torch = _torch()
    bits = r.float().contiguous().view(torch.int32)
    e = ((bits >> 23) & 0xFF) - 127
    return e + ((bits & 0x7FFFFF) != 0).to(torch.int32)


def e2m1_round(y):
    """|y| <= 6 to the nearest e2m1 value, ties to the even code."""
    torch = _torch()
    a = y.abs()
    q = torch.where(a <= 0.25, 0.0, torch.where(a < 0.75, 0.5, torch.where(a <= 1.25, 1.0, torch.where(
        a < 1.75, 1.5, torch.where(a <= 2.5, 2.0, torch.where(a < 3.5, 3.0, torch.where(a <= 5.0, 4.0, 6.0)))))))
    return torch.copysign(q.to(y.dtype), y)


def e4m3_round(y):
    torch = _torch()
    return y.to(torch.float8_e4m3fn).to(torch.float32)


def _blocks_rt(x, block, qmax, floor, rnd, e4m3_scale=False):
    """Round trip of the last dim in blocks of `block` values."""
    torch = _torch()
    shape = x.shape
    xb = x.float().reshape(*shape[:-1], shape[-1] // block, block)
    amax = xb.abs().amax(-1, keepdim=True).clamp_min(floor)
    if e4m3_scale:
        s = e4m3_round((amax / qmax).clamp(max=448.0))
    else:
        s = torch.ldexp(torch.ones_like(amax), pow2_exponent(amax / qmax))
    return (rnd((xb / s).clamp(-qmax, qmax)) * s).reshape(shape)


def fp8_rt(x, block):
    return _blocks_rt(x, block, 448.0, 1e-4, e4m3_round)


def fp4_rt(x, block):
    return _blocks_rt(x, block, 6.0, 6.0 * 2.0 ** -126, e2m1_round)


def fp4_e4m3_rt(x, block):
    return _blocks_rt(x, block, 6.0, 6.0 * 2.0 ** -9, e2m1_round, e4m3_scale=True)


def fp8_weight(w, block=BLOCK):
    """[N, K] -> dequantised FP8 with one pow-2 scale per block x block (edges: partial blocks)."""
    torch = _torch()
    n, k = w.shape
    nb, kb = -(-n // block), -(-k // block)
    wp = torch.zeros(nb * block, kb * block, dtype=torch.float32, device=w.device)
    wp[:n, :k] = w.float()
    blk = wp.view(nb, block, kb, block)
    amax = blk.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-4)
    s = torch.ldexp(torch.ones_like(amax), pow2_exponent(amax / 448.0))
    q = e4m3_round((blk / s).clamp(-448.0, 448.0)) * s
    return q.view(nb * block, kb * block)[:n, :k]


def fp4_weight(w, block=BLOCK):
    return fp4_rt(w, block)


def bf16(w):
    return w.to(_torch().bfloat16).float()


def ste(w, q):
    return w + (q - w).detach()


# --------------------------------------------------------------------------------------------
# Parameters (native names, storage kinds)
# --------------------------------------------------------------------------------------------

def param_specs(c):
    """[(native name, shape, kind, init)] with kind in fp8/fp4/bf16/f32 (i32: V4's tid2eid);
    init (kind, value)."""
    if is_v4(c):
        import tiny_v4
        return tiny_v4.param_specs(c)
    D, H, d, Rq = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, Ro, I, E = c["o_groups"], c["o_lora_rank"], c["moe_intermediate_size"], c["n_routed_experts"]
    HI, dI, hc, V = c["index_n_heads"], c["index_head_dim"], c["hc_mult"], c["vocab_size"]
    L = c["num_hidden_layers"]
    mix = (2 + hc) * hc
    out_std = 1.0 / math.sqrt(2 * L)
    specs = [("embed.weight", (V, D), "bf16", ("normal", 1.0))]
    plan = layer_plan(c)
    for l in range(L):
        p, pl = f"layers.{l}.", plan[l]
        specs += [(p + "attn_norm.weight", (D,), "bf16", ("ones",)),
                  (p + "ffn_norm.weight", (D,), "bf16", ("ones",))]
        for site in ("attn", "ffn"):
            specs += [(f"{p}hc_{site}_fn", (mix, hc * D), "f32", ("normal", 1e-3 / math.sqrt(hc * D))),
                      (f"{p}hc_{site}_base", (mix,), "f32", ("hc_base", hc)),
                      (f"{p}hc_{site}_scale", (3,), "f32", ("ones",))]
        a = p + "attn."
        specs += [(a + "wq_a.weight", (Rq, D), "fp8", ("fan_in",)),
                  (a + "q_norm.weight", (Rq,), "bf16", ("ones",)),
                  (a + "wq_b.weight", (H * d, Rq), "fp8", ("fan_in",)),
                  (a + "wkv.weight", (d, D), "fp8", ("fan_in",)),
                  (a + "kv_norm.weight", (d,), "bf16", ("ones",)),
                  (a + "wo_a.weight", (G * Ro, H * d // G), "fp8", ("fan_in",)),
                  (a + "wo_b.weight", (D, G * Ro), "fp8", ("fan_in", out_std)),
                  (a + "attn_sink", (H,), "f32", ("zeros",))]
        if pl["owns_compressor"]:
            cp = a + "compressor."
            specs.append((cp + "wkv.weight", (d, D), "bf16", ("fan_in",)))
            if pl["ratio"] > 1:
                specs.append((cp + "wgate.weight", (d, D), "bf16", ("fan_in", 0.1)))
            specs.append((cp + "norm.weight", (d,), "bf16", ("ones",)))
        if pl["index_keys_from"] >= 0:
            ip = a + "indexer."
            specs += [(ip + "wq_b.weight", (HI * dI, Rq), "fp8", ("fan_in",)),
                      (ip + "weights_proj.weight", (HI, D), "bf16", ("fan_in",))]
            if pl["owns_index_keys"]:
                specs += [(ip + "wk.weight", (dI, d), "bf16", ("fan_in",)),
                          (ip + "k_norm.weight", (dI,), "bf16", ("ones",))]
        f = p + "ffn."
        specs += [(f + "gate.weight", (E, D), "bf16", ("fan_in",)),
                  (f + "gate.bias", (E,), "f32", ("zeros",)),
                  (f + "gate.bias_vl", (E,), "f32", ("zeros",))]
        for e in range(E):
            specs += [(f"{f}experts.{e}.w1.weight", (I, D), "fp4", ("fan_in",)),
                      (f"{f}experts.{e}.w2.weight", (D, I), "fp4", ("fan_in", out_std)),
                      (f"{f}experts.{e}.w3.weight", (I, D), "fp4", ("fan_in",))]
        Is = I * c["n_shared_experts"]
        specs += [(f + "shared_experts.w1.weight", (Is, D), "fp8", ("fan_in",)),
                  (f + "shared_experts.w2.weight", (D, Is), "fp8", ("fan_in", out_std)),
                  (f + "shared_experts.w3.weight", (Is, D), "fp8", ("fan_in",))]
    specs += [("norm.weight", (D,), "bf16", ("ones",)),
              ("head.weight", (V, D), "bf16", ("fan_in",))]
    return specs


# Buffers: updated outside the gradient (selection-only router bias, MODEL_SPEC §A.8).
# V4's hash table gate.tid2eid is a fixed (seeded) buffer too.
def is_buffer(name):
    return name.endswith("gate.bias") or name.endswith("gate.bias_vl") or name.endswith("gate.tid2eid")


def storage_bytes(c):
    total, block = 0, weight_block(c)
    for _, shape, kind, _ in param_specs(c):
        n = math.prod(shape)
        if kind == "fp8":
            total += n + math.prod(-(-s // block) for s in shape)
        elif kind == "fp4":
            total += n // 2 + n // BLOCK
        elif kind == "bf16":
            total += 2 * n
        else:  # f32, i32
            total += 4 * n
    return total


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

def build_model(c, seed, device):
    torch = _torch()
    nn = torch.nn

    class V41(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = c
            self.v4 = is_v4(c)
            self.block = weight_block(c)
            self.plan = None if self.v4 else layer_plan(c)
            self.kinds = {}
            self.params = nn.ParameterDict()
            g = torch.Generator().manual_seed(seed)
            for name, shape, kind, init in param_specs(c):
                self.kinds[name] = kind
                t = torch.zeros(shape)
                if init[0] == "normal":
                    t = torch.randn(shape, generator=g) * init[1]
                elif init[0] == "fan_in":
                    t = torch.randn(shape, generator=g) * (shape[-1] ** -0.5) * (init[1] if len(init) > 1 else 1.0)
                elif init[0] == "ones":
                    t = torch.ones(shape)
                elif init[0] == "tid2eid":  # k distinct experts per token, uniformly drawn
                    t = torch.argsort(torch.rand(shape[0], init[1], generator=g), dim=1)[:, : shape[1]]
                elif init[0] == "hc_head_base":
                    t = torch.full(shape, -math.log(init[1] - 1.0))
                elif init[0] == "hc_base":
                    hc = init[1]
                    # pre = sigmoid(b) + eps ~ 1/hc (the mean of the streams), post = 2 sigmoid(0) = 1,
                    # comb logits favour the identity (Sinkhorn of softmax(3 I) ~ 0.87 on the diagonal).
                    t = torch.cat([torch.full((hc,), -math.log(hc - 1.0)), torch.zeros(hc),
                                   3.0 * torch.eye(hc).flatten()])
                key = name.replace(".", "__")
                if is_buffer(name):
                    self.register_buffer(key, t)
                else:
                    self.params[key] = nn.Parameter(t)
            self._rope = {}

        # weights as the forward sees them (storage format, STE)
        def w(self, name):
            key = name.replace(".", "__")
            if is_buffer(name):
                return getattr(self, key)
            p = self.params[key]
            kind = self.kinds[name]
            if kind == "fp8":
                return ste(p, fp8_weight(p.detach(), self.block))
            if kind == "fp4":
                return ste(p, fp4_weight(p.detach()))
            if kind == "bf16":
                return ste(p, bf16(p.detach()))
            return p

        def experts(self, l, which):
            """Routed experts' `which` matrices of layer l stacked [E, out, in], FP4-rounded at once
            (the same values as w() per matrix: the 1x32 groups never cross matrices)."""
            st = torch.stack([self.params[f"layers__{l}__ffn__experts__{e}__{which}__weight"]
                              for e in range(c["n_routed_experts"])])
            return ste(st, fp4_weight(st.detach()))

        def has(self, name):
            return name in self.kinds

        def rope_freqs(self, compressed, dev):
            key = (compressed, str(dev))
            if key not in self._rope:
                self._rope[key] = torch.tensor(rope_inv_freq(c, compressed), dtype=torch.float32, device=dev)
            return self._rope[key]

        def forward(self, tokens, qat=True, indexer_loss=False, return_streams=False):
            if self.v4:
                return v4_forward(self, tokens, qat, indexer_loss, return_streams)
            return v41_forward(self, tokens, qat, indexer_loss)

    return V41().to(device)


def v4_forward(m, tokens, qat, indexer_loss, return_streams=False):
    """The V4 forward (tools/tiny_v4.py): (logits, aux), aux["streams"] = X^L with return_streams."""
    import tiny_v4
    return tiny_v4.v4_forward(m, tokens, qat, indexer_loss, return_streams)


def rope_inv_freq(c, compressed):
    """The engine's RopeTable (src/ops/rope/rope_ref.cc) in float32 arithmetic."""
    f32 = np.float32
    r = c["qk_rope_head_dim"]
    half = r // 2
    theta = c["compress_rope_theta"] if compressed else c["rope_theta"]
    base = f32(theta)
    inv = np.array([f32(1.0) / np.power(base, f32(2 * i) / f32(r), dtype=f32) for i in range(half)], dtype=f32)
    y = c.get("rope_scaling") or {}
    if not compressed or y.get("rope_type", y.get("type")) != "yarn":  # V4 configs say "type"
        return inv

    def corr(rot):
        L0 = float(y["original_max_position_embeddings"])
        return (r * math.log(L0 / (rot * 2.0 * math.pi))) / (2.0 * math.log(theta))

    low = max(math.floor(corr(y["beta_fast"])), 0.0)
    high = min(math.ceil(corr(y["beta_slow"])), float(r - 1))
    if low == high:
        high += 0.001
    lowf, highf, factor = f32(low), f32(high), f32(y["factor"])
    out = np.empty(half, dtype=f32)
    for i in range(half):
        ramp = min(f32(1.0), max(f32(0.0), (f32(i) - lowf) / (highf - lowf)))
        extra = f32(1.0) - ramp
        pos_freq = f32(1.0) / inv[i]
        interp = f32(1.0) / (factor * pos_freq)
        out[i] = interp * (f32(1.0) - extra) + inv[i] * extra
    return out


def apply_rope(x, pos, inv_freq, r, inverse=False):
    """Interleaved pairs of the trailing r dims of x [..., T, (heads,) width]; pos [T] (broadcast
    over the leading dims: x is [B, T, ...])."""
    torch = _torch()
    ang = pos.float()[:, None] * inv_freq[None, :]  # [T, r/2]
    cos, sin = torch.cos(ang), torch.sin(ang)
    if inverse:
        sin = -sin
    shape = [1] * x.dim()
    shape[1] = ang.shape[0]
    shape[-1] = ang.shape[1]
    if x.dim() == 4:  # [B, T, heads, width]
        cos, sin = cos[:, None, :], sin[:, None, :]
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    xr = x[..., -r:].float()
    a, b = xr[..., 0::2], xr[..., 1::2]
    ra, rb = a * cos - b * sin, b * cos + a * sin
    rot = torch.stack([ra, rb], dim=-1).flatten(-2)
    return torch.cat([x[..., :-r].float(), rot], dim=-1)


def rms_norm(x, w, eps):
    torch = _torch()
    x = x.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def lin(x, w):
    torch = _torch()
    return torch.nn.functional.linear(x, w).float()


def hc_mix(m, X, pfx, c):
    torch = _torch()
    hc, iters, hc_eps, eps = c["hc_mult"], c["hc_sinkhorn_iters"], c["hc_eps"], c["rms_norm_eps"]
    fn, base, scale = m.w(pfx + "fn"), m.w(pfx + "base"), m.w(pfx + "scale")
    B, T = X.shape[:2]
    xf = X.reshape(B, T, -1).float()
    mix = lin(xf, fn) * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    pre = torch.sigmoid(mix[..., :hc] * scale[0] + base[:hc]) + hc_eps
    post = 2.0 * torch.sigmoid(mix[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    C = (mix[..., 2 * hc:] * scale[2] + base[2 * hc:]).view(B, T, hc, hc)
    C = torch.softmax(C, dim=-1) + hc_eps
    C = C / (C.sum(-2, keepdim=True) + hc_eps)
    for _ in range(iters - 1):
        C = C / (C.sum(-1, keepdim=True) + hc_eps)
        C = C / (C.sum(-2, keepdim=True) + hc_eps)
    return pre, post, C


def hc_collapse(X, pre):
    return (pre[..., None] * X.float()).sum(2)


def hc_expand(X, y, post, C):
    torch = _torch()
    return torch.einsum("btjk,btjd->btkd", C, X.float()) + post[..., None] * y.float()[:, :, None, :]


def stable_topk_mask(scores, k):
    """Boolean mask of the top-k of the last dim, ties to the lower index (the engine's
    topk_indices), without the -inf entries."""
    torch = _torch()
    n = scores.shape[-1]
    k = min(k, n)
    if k <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]
    mask = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, order, True)
    return mask & (scores > -math.inf)


def candidate_blocks(scores, n_vis, block, n_pick):
    """MODEL_SPEC §C.7 step 4 / the engine's candidate_mask: scores [B, T, Nc] (-inf where not
    visible), n_vis [T] -> mask [B, T, Nc]."""
    torch = _torch()
    B, T, Nc = scores.shape
    nb = -(-Nc // block)
    pad = nb * block - Nc
    s = torch.nn.functional.pad(scores, (0, pad), value=-math.inf) if pad else scores
    bmax = s.view(B, T, nb, block).amax(-1)
    newest = ((n_vis - 1) // block).clamp_min(0)
    force = torch.zeros(T, nb, dtype=torch.bool, device=scores.device)
    force[torch.arange(T, device=scores.device), newest] = True
    force &= (n_vis > 0)[:, None]
    bmax = torch.where(force[None], torch.full_like(bmax, math.inf), bmax)
    pick = stable_topk_mask(bmax, n_pick)
    mask = pick[..., None].expand(B, T, nb, block).reshape(B, T, nb * block)[..., :Nc]
    return mask


def v41_forward(m, tokens, qat, indexer_loss):
    """tokens [B, T] (positions 0..T-1) -> (logits [B, T, V] fp32, aux dict)."""
    torch = _torch()
    c = m.c
    B, T = tokens.shape
    dev = tokens.device
    D, H, d, r = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["qk_rope_head_dim"]
    hc, eps, W = c["hc_mult"], c["rms_norm_eps"], c["sliding_window"]
    HI, dI = c["index_n_heads"], c["index_head_dim"]
    G, Ro = c["o_groups"], c["o_lora_rank"]
    pos = torch.arange(T, device=dev)
    win = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - W)  # [T(query), T(key)]
    emb = m.w("embed.weight")[tokens].float()  # [B, T, D]
    X = emb[:, :, None, :].expand(B, T, hc, D)
    pre_mix = torch.zeros(B, T, hc, device=dev)
    pre_mix[..., 0] = 1.0
    state = dict(entries={}, index_keys={}, picks={}, cands={})
    aux = dict(kl=[], loads=[])
    for l in range(c["num_hidden_layers"]):
        p = f"layers.{l}."
        a_pre, a_post, a_C = hc_mix(m, X, p + "hc_attn_", c)
        x = rms_norm(hc_collapse(X, pre_mix), m.w(p + "attn_norm.weight"), eps)
        y = attention(m, l, x, pos, win, state, qat, indexer_loss, aux)
        X = hc_expand(X, y, a_post, a_C)
        f_pre, f_post, f_C = hc_mix(m, X, p + "hc_ffn_", c)
        x = rms_norm(hc_collapse(X, a_pre), m.w(p + "ffn_norm.weight"), eps)
        y = moe(m, l, x, aux)
        X = hc_expand(X, y, f_post, f_C)
        pre_mix = f_pre
    h = rms_norm(hc_collapse(X, pre_mix), m.w("norm.weight"), eps)
    with torch.autocast(device_type=dev.type, enabled=False):  # fp32 head and logits
        logits = torch.nn.functional.linear(h.float(), m.w("head.weight").float())
    return logits, aux


def attention(m, l, x, pos, win, state, qat, indexer_loss, aux):
    torch = _torch()
    c, pl = m.c, m.plan[l]
    B, T, _ = x.shape
    D, H, d, r = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["qk_rope_head_dim"]
    G, Ro, eps = c["o_groups"], c["o_lora_rank"], c["rms_norm_eps"]
    a = f"layers.{l}.attn."
    freqs = m.rope_freqs(pl["ratio"] > 0, x.device)
    q_r = rms_norm(lin(x, m.w(a + "wq_a.weight")), m.w(a + "q_norm.weight"), eps)
    q = lin(q_r, m.w(a + "wq_b.weight")).view(B, T, H, d)
    q = apply_rope(q, pos, freqs, r)
    kv = rms_norm(lin(x, m.w(a + "wkv.weight")), m.w(a + "kv_norm.weight"), eps)
    kv = apply_rope(kv, pos, freqs, r)
    if qat:
        kv = ste(kv, fp8_rt(kv.detach(), 32))
    if pl["owns_compressor"]:
        compress(m, l, x, state, qat)
    if pl["index_keys_from"] >= 0:
        select(m, l, x, q_r, pos, state, qat, indexer_loss, aux)
    keys, mask = kv, win[None].expand(B, T, T)
    dense_scores = None
    if pl["kv_from"] >= 0:
        ent = state["entries"][pl["kv_from"]]
        keys = torch.cat([kv, ent], dim=1)
        mask = torch.cat([mask, state["picks"][pl["topk_from"]]], dim=-1)
    scores = torch.einsum("bthd,bsd->bhts", q, keys) * (d ** -0.5)
    if indexer_loss and pl["index_keys_from"] >= 0 and ent.shape[1] > 0:
        dense_scores = scores[..., T:]  # every compressed entry (visibility applied below)
    scores = scores.masked_fill(~mask[:, None], -math.inf)
    sink = m.w(a + "attn_sink").float()[None, :, None, None].expand(B, H, T, 1)
    probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    o = torch.einsum("bhts,bsd->bthd", probs, keys)
    o = apply_rope(o, pos, freqs, r, inverse=True)
    gw = H * d // G
    z = torch.einsum("btgk,grk->btgr", o.reshape(B, T, G, gw), m.w(a + "wo_a.weight").view(G, Ro, gw))
    out = lin(z.reshape(B, T, G * Ro), m.w(a + "wo_b.weight"))
    if dense_scores is not None:
        indexer_kl(l, pl, dense_scores.detach(), scores[..., :T].detach(), sink.detach(), state, aux)
    return out


def compress(m, l, x, state, qat):
    """KV source: entries (RoPE at ratio*j, FP4/e4m3 when qat) and, as index-key owner, the keys
    k_norm(wk . latent) from the pre-RoPE latent (RoPE, FP4 when qat)."""
    torch = _torch()
    c, pl = m.c, m.plan[l]
    B, T, _ = x.shape
    d, r, dI, eps, ratio = c["head_dim"], c["qk_rope_head_dim"], c["index_head_dim"], c["rms_norm_eps"], pl["ratio"]
    cp = f"layers.{l}.attn.compressor."
    nc = T // ratio
    av = lin(x, m.w(cp + "wkv.weight"))[:, : nc * ratio]
    if ratio > 1:
        zv = lin(x, m.w(cp + "wgate.weight"))[:, : nc * ratio]
        wts = torch.softmax(zv.view(B, nc, ratio, d), dim=2)
        pooled = (wts * av.view(B, nc, ratio, d)).sum(2)
    else:
        pooled = av
    latent = rms_norm(pooled, m.w(cp + "norm.weight"), eps)
    epos = torch.arange(nc, device=x.device) * ratio
    freqs = m.rope_freqs(True, x.device)
    if pl["owns_index_keys"]:
        ip = f"layers.{l}.attn.indexer."
        key = rms_norm(lin(latent.detach(), m.w(ip + "wk.weight")), m.w(ip + "k_norm.weight"), eps)
        key = apply_rope(key, epos, freqs, r)
        if qat:
            key = ste(key, fp4_rt(key.detach(), 32))
        state["index_keys"][l] = key
    ent = apply_rope(latent, epos, freqs, r)
    if qat:
        ent = ste(ent, fp4_e4m3_rt(ent.detach(), 16))
    state["entries"][l] = ent


def select(m, l, x, q_r, pos, state, qat, indexer_loss, aux):
    torch = _torch()
    c, pl = m.c, m.plan[l]
    B, T, _ = x.shape
    HI, dI, r, ratio = c["index_n_heads"], c["index_head_dim"], c["qk_rope_head_dim"], pl["ratio"]
    ip = f"layers.{l}.attn.indexer."
    qi = lin(q_r.detach(), m.w(ip + "wq_b.weight")).view(B, T, HI, dI)
    qi = apply_rope(qi, pos, m.rope_freqs(True, x.device), r)
    if qat:
        qi = ste(qi, fp4_rt(qi.detach(), 32))
    g = lin(x.detach(), m.w(ip + "weights_proj.weight")) * (HI ** -0.5)  # [B, T, HI]
    keys = state["index_keys"][pl["index_keys_from"]]  # [B, Nc, dI]
    Nc = keys.shape[1]
    dots = torch.relu(torch.einsum("bthi,bsi->bths", qi, keys)) * (dI ** -0.5)
    I = (g[..., None] * dots).sum(2)  # [B, T, Nc]
    n_vis = (pos + 1) // ratio
    vis = torch.arange(Nc, device=x.device)[None, :] < n_vis[:, None]  # [T, Nc]
    Ivis = I.masked_fill(~vis[None], -math.inf)
    with torch.no_grad():
        s = Ivis.detach()
        if pl["candidate_source"]:
            state["cands"][l] = candidate_blocks(s, n_vis, c["candidate_block_size"], c["candidate_topk_blocks"])
        if pl["candidates_from"] >= 0:
            s = s.masked_fill(~state["cands"][pl["candidates_from"]], -math.inf)
        state["picks"][l] = stable_topk_mask(s, c["index_topk"])
    if indexer_loss:
        state.setdefault("index_logits", {})[l] = (Ivis, vis)


def indexer_kl(l, pl, dense_scores, win_scores, sink, state, aux):
    """KL(target || softmax(index scores)) over the visible entries: target = the layer's main
    attention probabilities of every visible compressed entry (dense: window + all visible entries
    + sink in one softmax), summed over heads, L1-normalised."""
    torch = _torch()
    Ivis, vis = state["index_logits"][l]
    T = win_scores.shape[-1]
    ent = dense_scores.masked_fill(~vis[None, None], -math.inf)
    allp = torch.softmax(torch.cat([win_scores, ent, sink], dim=-1), dim=-1)[..., T:-1].sum(1)  # [B, T, Nc]
    rows = vis.any(-1)  # queries with at least one visible entry
    tgt = allp / allp.sum(-1, keepdim=True).clamp_min(1e-30)
    logq = torch.log_softmax(Ivis[:, rows], dim=-1)
    tg = tgt[:, rows]
    kl = torch.where(tg > 0, tg * (torch.log(tg.clamp_min(1e-30)) - logq), torch.zeros_like(tg)).sum(-1)
    aux["kl"].append(kl.mean())


def moe(m, l, x, aux, tokens=None):
    """V4.1 / V4 MoE; a V4 hash layer (gate.tid2eid) routes by token id."""
    torch = _torch()
    F = torch.nn.functional
    c = m.c
    B, T, D = x.shape
    E, k, I, lim = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"], c["swiglu_limit"]
    f = f"layers.{l}.ffn."
    xf = x.reshape(B * T, D)
    with torch.autocast(device_type=x.device.type, enabled=False):  # fp32 router (MODEL_SPEC §A.11 D2)
        logits = F.linear(xf.float(), m.w(f + "gate.weight").float())
    s = torch.sqrt(F.softplus(logits))
    hashed = tokens is not None and m.has(f + "gate.tid2eid")
    if hashed:
        idx = m.w(f + "gate.tid2eid").long()[tokens.reshape(-1)]
    else:
        idx = torch.topk(s.detach() + m.w(f + "gate.bias")[None], k, dim=-1).indices
    sel = s.gather(-1, idx)
    sum_eps = 0.0 if getattr(m, "v4", False) else 1e-20  # the engine's route_norm_eps trait
    wts = sel / (sel.sum(-1, keepdim=True) + sum_eps) * c["routed_scaling_factor"]
    dense_w = torch.zeros_like(s).scatter(-1, idx, wts)  # [N, E]
    if not hashed:
        aux["loads"].append((l, torch.zeros(E, device=x.device).scatter_add_(
            0, idx.flatten(), torch.ones(idx.numel(), device=x.device)).detach()))
    W1, W3, W2 = (m.experts(l, k) for k in ("w1", "w3", "w2"))  # [E, I, D], [E, I, D], [E, D, I]
    gte = torch.einsum("nd,eid->nei", xf, W1).float().clamp(max=lim)
    up = torch.einsum("nd,eid->nei", xf, W3).float().clamp(-lim, lim)
    act = F.silu(gte) * up * dense_w[..., None]
    y = torch.einsum("nei,edi->nd", act, W2).float()
    sg = lin(xf, m.w(f + "shared_experts.w1.weight")).clamp(max=lim)
    su = lin(xf, m.w(f + "shared_experts.w3.weight")).clamp(-lim, lim)
    y = y + lin(F.silu(sg) * su, m.w(f + "shared_experts.w2.weight"))
    return y.view(B, T, D)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

def load_data(tokenizer_path, cache_dir=None):
    """-> dict(train ids np.int32, held ids np.int32, manifest part)."""
    data = corpus.collect()
    tok = corpus.load_tokenizer(tokenizer_path)
    key = hashlib.sha256(json.dumps([data["stats"], sha256(tokenizer_path)]).encode()).hexdigest()[:16]
    cache = os.path.join(cache_dir, f"corpus-{key}.npz") if cache_dir else None
    if cache and os.path.exists(cache):
        z = np.load(cache)
        train, held, tcounts, hcounts = z["train"], z["held"], z["tcounts"], z["hcounts"]
    else:
        tr = corpus.encode_docs(tok, data["train"])
        he = corpus.encode_docs(tok, data["held_out"])
        train = np.array([t for doc in tr for t in doc], dtype=np.int32)
        held = np.array([t for doc in he for t in doc], dtype=np.int32)
        tcounts = np.array([len(x) for x in tr], dtype=np.int64)
        hcounts = np.array([len(x) for x in he], dtype=np.int64)
        if cache:
            os.makedirs(cache_dir, exist_ok=True)
            np.savez(cache, train=train, held=held, tcounts=tcounts, hcounts=hcounts)
    info = dict(data["stats"], python=sys.version.split()[0], train_tokens=int(train.size),
                held_out_tokens=int(held.size),
                held_out_files_list=[[rel, int(n)] for (rel, _), n in zip(data["held_out"], hcounts)],
                train_files_sha256=hashlib.sha256("\n".join(r for r, _ in data["train"]).encode()).hexdigest())
    return dict(train=train, held=held, info=info, tok=tok)


def eval_windows(held, seq_len, n):
    """The first n non-overlapping windows of seq_len + 1 held-out tokens [n, seq_len + 1]."""
    w = seq_len + 1
    n = min(n, held.size // w)
    return held[: n * w].reshape(n, w)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def evaluate(model, windows, qat, batch, device):
    """Mean next-token NLL (nats) over every position of the windows, fp32, no autocast."""
    torch = _torch()
    F = torch.nn.functional
    tot, n = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(windows), batch):
            w = torch.as_tensor(windows[i:i + batch], dtype=torch.long, device=device)
            logits, _ = model(w[:, :-1], qat=qat)
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), w[:, 1:].reshape(-1),
                                  reduction="sum")
            tot += float(nll)
            n += w[:, 1:].numel()
    model.train()
    return tot / n


def train(args):
    torch = _torch()
    F = torch.nn.functional
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    t0 = time.time()
    data = load_data(args.tokenizer, args.cache)
    tok = data["tok"]
    V = tok.get_vocab_size()
    c = make_text_config(args.preset, V, tok.token_to_id(corpus.BOS), tok.token_to_id(corpus.EOS))
    model = build_model(c, args.seed, device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[train] preset {args.preset}: {n_params / 1e6:.2f} M parameters, checkpoint "
          f"{storage_bytes(c) / 2**20:.2f} MiB; corpus {data['info']['train_tokens']} train / "
          f"{data['info']['held_out_tokens']} held-out tokens ({time.time() - t0:.0f} s)", flush=True)
    decay = [p for n, p in model.params.items() if p.dim() >= 2 and "hc_" not in n]
    other = [p for n, p in model.params.items() if not (p.dim() >= 2 and "hc_" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    train_ids = torch.as_tensor(data["train"].astype(np.int64))
    windows = eval_windows(data["held"], args.seq_len, args.eval_windows)
    rng = np.random.default_rng(args.seed)
    amp = args.amp == "bf16"
    T, Bsz = args.seq_len, args.batch

    def batch_at():
        starts = rng.integers(0, train_ids.numel() - T - 1, size=Bsz)
        b = torch.stack([train_ids[s:s + T + 1] for s in starts]).to(device)
        return b[:, :-1], b[:, 1:]

    steps = args.steps
    auto_budget = None
    if isinstance(steps, str) and steps.startswith("auto:"):
        auto_budget = float(steps.split(":")[1])
        steps = None
    log, step, t_train = [], 0, time.time()
    timing_steps = 10
    total = steps if steps is not None else 10 ** 9
    while step < total:
        if steps is None and step == timing_steps + 3:
            # step time measured over steps 3..12 (after warm-up): fix the schedule's length
            if device.type == "cuda":
                torch.cuda.synchronize()
            dt = (time.time() - t_timing) / timing_steps
            total = max(step + 1, int(auto_budget / dt))
            print(f"[train] {dt * 1e3:.1f} ms/step -> {total} steps for {auto_budget:.0f} s", flush=True)
        if step == 3:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t_timing = time.time()
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        if steps is not None or step >= timing_steps + 3:
            prog = step / max(1, total)
            lr *= 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, prog)))
        for gp in opt.param_groups:
            gp["lr"] = lr
        x, y = batch_at()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            logits, aux = model(x, qat=args.qat, indexer_loss=True)
        lm = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))
        kl = torch.stack(aux["kl"]).mean() if aux["kl"] else torch.zeros((), device=device)
        loss = lm + args.kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        with torch.no_grad():  # auxiliary-loss-free balance (bias selects only)
            for l, load in aux["loads"]:
                b = getattr(model, f"layers__{l}__ffn__gate__bias")
                b += args.bias_update * torch.sign(load.mean() - load)
        step += 1
        if step % args.log_every == 0 or step == 1 or step == total:
            rec = dict(step=step, lm=round(lm.item(), 5), kl=round(kl.item(), 5), lr=lr,
                       grad_norm=round(float(gn), 4), t=round(time.time() - t_train, 1))
            log.append(rec)
            print(f"[train] {json.dumps(rec)}", flush=True)
        if args.time_budget and time.time() - t_train > args.time_budget:
            print(f"[train] time budget {args.time_budget} s reached at step {step}", flush=True)
            break
    train_s = time.time() - t_train
    ev = {}
    for name, qat in (("official", True), ("reference", False)):
        ev[name] = evaluate(model, windows, qat, args.eval_batch, device)
        print(f"[eval] held-out {name}: loss {ev[name]:.5f} ppl {math.exp(ev[name]):.3f} "
              f"({windows.shape[0]} windows x {args.seq_len} tokens)", flush=True)
    info = dict(preset=args.preset, seed=args.seed, steps=step, steps_arg=str(args.steps), batch=Bsz,
                seq_len=T, lr=args.lr, warmup=args.warmup, weight_decay=args.weight_decay, clip=args.clip,
                kl_weight=args.kl_weight, bias_update=args.bias_update, qat=args.qat, amp=args.amp,
                device=str(device), device_name=(torch.cuda.get_device_name(device) if device.type == "cuda"
                                                 else "cpu"),
                torch=torch.__version__, train_seconds=round(train_s, 1), parameters=n_params,
                log=log, final_train_lm_loss=log[-1]["lm"] if log else None,
                held_out=dict(windows=int(windows.shape[0]), seq_len=T, tokens=int(windows.shape[0] * T),
                              loss_official=ev["official"], loss_reference=ev["reference"],
                              ppl_official=math.exp(ev["official"]), ppl_reference=math.exp(ev["reference"])))
    return model, c, data, info


# --------------------------------------------------------------------------------------------
# Export (native checkpoint) and loading back
# --------------------------------------------------------------------------------------------

def export(model, c, out_dir, tokenizer_path, manifest, extra=None):
    """Native checkpoint of the model: config.json, model.safetensors (FP8 block-scaled dense
    weights, FP4 experts, bf16 / fp32 / int32 as the official checkpoints), tokenizer and
    manifest. `extra`: {name: (kind, float64 array)} of drafter tensors (`mtp.0.*` of V4's
    MTP-1, trained by tools/train_drafter.py) written with the same formats; MTP tensors set
    num_nextn_predict_layers = 1 (and a ratio-0 entry after the backbone's compress_ratios)."""
    import make_goldens as mg
    import make_goldens_v41 as mgv41
    torch = _torch()
    os.makedirs(out_dir, exist_ok=True)
    w = mg.Weights()
    worst, block = 0.0, weight_block(c)
    for name, shape, kind, _ in param_specs(c):
        t = model.w(name).detach().float().cpu()
        master = (getattr(model, name.replace(".", "__")) if is_buffer(name)
                  else model.params[name.replace(".", "__")]).detach().float().cpu()
        w.add(name, kind, master.numpy().astype(np.int64 if kind == "i32" else np.float64))
        if kind in ("fp8", "fp4", "bf16"):
            ref = {"fp8": lambda v: mg.quantize_fp8_block(v, block)[2],
                   "fp4": lambda v: mg.quantize_fp4_rows(v, BLOCK)[2],
                   "bf16": mg.round_bf16}[kind](master.numpy().astype(np.float64))
            worst = max(worst, float(np.abs(ref - t.numpy().astype(np.float64)).max()))
    assert worst == 0.0, f"torch storage rounding differs from make_goldens' quantisers by {worst}"
    cfg = full_config(c)
    if extra:
        for name, (kind, value) in extra.items():
            assert name.startswith("mtp.") and name not in w.items, name
            w.add(name, kind, value)
        if is_v4(c) and any(n.startswith("mtp.0.") for n in extra):
            cfg["num_nextn_predict_layers"] = 1
            cfg["compress_ratios"] = list(c["compress_ratios"][: c["num_hidden_layers"]]) + [0]
    if is_v4(c):  # FP8 128x128 (make_goldens' V4 grid)
        entries = [e for (_, _, v4_entries) in mg.finalize(w, True).values() for e in v4_entries]
    else:
        entries = [e for (_, _, _, fp8_entries) in mgv41.finalize(w).values() for e in fp8_entries]
    st = os.path.join(out_dir, "model.safetensors")
    mg.write_safetensors(st, entries)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    import shutil
    shutil.copyfile(tokenizer_path, os.path.join(out_dir, "tokenizer.json"))
    corpus.tokenizer_config(os.path.join(out_dir, "tokenizer_config.json"))
    files = {}
    for fn in sorted(os.listdir(out_dir)):
        if fn != "manifest.json":
            files[fn] = dict(bytes=os.path.getsize(os.path.join(out_dir, fn)), sha256=sha256(os.path.join(out_dir, fn)))
    manifest["files"] = files
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"[export] {out_dir}: " + ", ".join(f"{k} {v['bytes'] / 2**20:.2f} MiB" for k, v in files.items()),
          flush=True)


def load_checkpoint(ckpt, device):
    """Exported checkpoint -> model whose masters are the dequantised stored values (so the STE
    forward reproduces them exactly)."""
    import make_goldens as mg
    torch = _torch()
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    c = cfg.get("text_config", cfg)
    if is_v4(c):  # the backbone's config (an exported MTP-1 adds a drafter ratio)
        c = dict(c, num_nextn_predict_layers=0, compress_ratios=c["compress_ratios"][: c["num_hidden_layers"]])
    block = weight_block(c)
    header, off = mg.read_safetensors_header(os.path.join(ckpt, "model.safetensors"))
    raw = open(os.path.join(ckpt, "model.safetensors"), "rb").read()

    def arr(name):
        h = header[name]
        b = raw[off + h["data_offsets"][0]: off + h["data_offsets"][1]]
        dt = {"F32": "<f4", "BF16": "<u2", "F8_E4M3": "u1", "F8_E8M0": "u1", "I8": "i1", "I32": "<i4"}[h["dtype"]]
        return h["dtype"], np.frombuffer(b, dtype=dt).reshape(h["shape"])

    model = build_model(c, 0, device)
    e4m3 = mg.E4M3_VALUES
    with torch.no_grad():
        for name, shape, kind, _ in param_specs(c):
            dt, v = arr(name)
            if dt == "F32" or dt == "I32":
                val = v.astype(np.float64)
            elif dt == "BF16":
                val = mg.bf16_bits_to_f64(v)
            elif dt == "F8_E4M3":
                _, s = arr(name[: -len(".weight")] + ".scale")
                mag = e4m3[v & 0x7F] * np.where(v & 0x80, -1.0, 1.0)
                sc = np.ldexp(1.0, s.astype(np.int64) - 127)
                sc = np.repeat(np.repeat(sc, block, 0), block, 1)[: v.shape[0], : v.shape[1]]
                val = mag * sc
            elif dt == "I8":
                _, s = arr(name[: -len(".weight")] + ".scale")
                u = v.view(np.uint8)
                nib = np.stack([u & 0xF, u >> 4], axis=-1).reshape(u.shape[0], -1)
                mag = mg.E2M1_VALUES[nib & 7] * np.where(nib & 8, -1.0, 1.0)
                val = mag * np.repeat(np.ldexp(1.0, s.astype(np.int64) - 127), BLOCK, 1)
            else:
                raise ValueError(dt)
            t = torch.as_tensor(val.astype(np.int64 if kind == "i32" else np.float32).reshape(shape), device=device)
            key = name.replace(".", "__")
            if is_buffer(name):
                getattr(model, key).copy_(t)
            else:
                model.params[key].copy_(t)
    return model, c


# --------------------------------------------------------------------------------------------
# Engine check
# --------------------------------------------------------------------------------------------

def find_engine_bin(arg):
    cands = [arg] if arg else [os.path.join(ROOT, ".carry", "train_tiny", "model_logits")] + [
        os.path.join(ROOT, b, "tests", "tools", "model_logits") for b in ("build-g", "build", "build-cuda")]
    for p in cands:
        if p and os.path.exists(p):
            return p
    raise SystemExit("model_logits not found (build it: cmake --build BUILD --target model_logits) "
                     f"tried {cands}")


def check_engine(ckpt, engine_bin, n_windows, device, threshold=0.01):
    """The engine (tests/tools/model_logits, CPU) against this forward on the exported weights:
    full logits of the first held-out window and held-out perplexity over n_windows windows, in
    both numerics. Returns the report (also written to ckpt/engine_check.json)."""
    torch = _torch()
    F = torch.nn.functional
    model, c = load_checkpoint(ckpt, device)
    man = json.load(open(os.path.join(ckpt, "manifest.json")))
    T = man["training"]["seq_len"]
    data = load_data(os.path.join(ckpt, "tokenizer.json"))
    windows = eval_windows(data["held"], T, n_windows)
    tmp = os.path.join(ckpt, ".check")
    os.makedirs(tmp, exist_ok=True)
    ids_path = os.path.join(tmp, "ids.txt")
    with open(ids_path, "w") as f:
        for w in windows:
            f.write(",".join(map(str, w.tolist())) + "\n")
    V = c["vocab_size"]
    report = dict(engine_bin=engine_bin, windows=int(len(windows)), seq_len=T, tokens=int(len(windows) * T))
    ok = True
    for numerics, qat in (("official", True), ("reference", False)):
        t0 = time.time()
        env = dict(os.environ)
        libdir = os.path.join(os.path.dirname(os.path.abspath(engine_bin)), "lib")
        if os.path.isdir(libdir):  # tools/pack_model_logits.sh: OpenBLAS carried beside the binary
            env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        out = subprocess.run([engine_bin, "--model", ckpt, "--ids", ids_path, "--out",
                              os.path.join(tmp, numerics), "--numerics", numerics, "--full-logits", "1"],
                             capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise SystemExit(f"engine failed: {out.stderr}")
        eng = json.loads(out.stdout.strip().splitlines()[-1])
        t_eng = time.time() - t0
        eng_logits = np.fromfile(os.path.join(tmp, numerics + ".logits.f32"), dtype=np.float32).reshape(-1, V)
        eng_nll = np.fromfile(os.path.join(tmp, numerics + ".nll.f32"), dtype=np.float32)
        model.eval()
        with torch.no_grad():
            w0 = torch.as_tensor(windows[:1], dtype=torch.long, device=device)
            ours = model(w0, qat=qat)[0][0].double().cpu().numpy()
            nll = []
            for i in range(0, len(windows), 8):
                w = torch.as_tensor(windows[i:i + 8], dtype=torch.long, device=device)
                lg, _ = model(w[:, :-1], qat=qat)
                nll.append(F.cross_entropy(lg.double().reshape(-1, V), w[:, 1:].reshape(-1),
                                           reduction="none").cpu().numpy())
            nll = np.concatenate(nll)
        # per position: max |diff| / max |logit| of that position; positions of window 0
        diff = np.abs(eng_logits.astype(np.float64) - ours)
        scale = np.abs(ours).max(-1)
        rel_pos = diff.max(-1) / scale
        argmax_agree = float((eng_logits.argmax(-1) == ours.argmax(-1)).mean())
        eng_loss, our_loss = float(eng_nll.astype(np.float64).mean()), float(nll.mean())
        ppl_rel = abs(math.exp(eng_loss) / math.exp(our_loss) - 1.0)
        r = dict(max_rel_diff=float(rel_pos.max()), median_rel_diff=float(np.median(rel_pos)),
                 positions_over_1e_3=int((rel_pos > 1e-3).sum()), positions=int(len(rel_pos)),
                 argmax_agreement=argmax_agree, engine_loss=eng_loss, torch_loss=our_loss,
                 engine_ppl=math.exp(eng_loss), torch_ppl=math.exp(our_loss), ppl_rel_diff=ppl_rel,
                 per_token_nll_max_abs_diff=float(np.abs(eng_nll.astype(np.float64) - nll).max()),
                 engine_seconds=round(t_eng, 1), engine_tokens=eng["tokens"])
        report[numerics] = r
        ok &= ppl_rel < threshold
        print(f"[check] {numerics}: logits max rel diff {r['max_rel_diff']:.2e} (median "
              f"{r['median_rel_diff']:.2e}, argmax agree {argmax_agree:.4f}); held-out ppl engine "
              f"{r['engine_ppl']:.4f} torch {r['torch_ppl']:.4f} (rel {ppl_rel:.2e})", flush=True)
    report["pass"] = bool(ok)
    with open(os.path.join(ckpt, "engine_check.json"), "w") as f:
        json.dump(report, f, indent=1)
    for fn in os.listdir(tmp):
        os.remove(os.path.join(tmp, fn))
    os.rmdir(tmp)
    print(f"[check] {'PASS' if ok else 'FAIL'}: engine held-out perplexity within {threshold:.0%} in both "
          "numerics" if ok else "[check] FAIL", flush=True)
    return report


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------

REPRODUCED = ("preset", "seed", "steps", "batch", "seq_len", "lr", "warmup", "weight_decay", "clip",
              "kl_weight", "bias_update", "qat", "amp")


def reproduce(args, tolerance=0.02):
    """Acceptance of issue 16: re-running the training with its seeds reproduces the recorded
    held-out loss within 2%. A fixed step count (the executed one, not auto:SECONDS) makes the
    schedule and the seeded data order identical; the CPU run is then bitwise identical, a CUDA
    run differs only by its nondeterministic kernels (atomics in the embedding / scatter
    backward, bf16 autocast)."""
    man = json.load(open(os.path.join(args.reproduce, "manifest.json")))
    rec = man["training"]
    for k in REPRODUCED:
        setattr(args, k, rec[k])
    args.eval_windows, args.time_budget = rec["held_out"]["windows"], 0.0
    print(f"[reproduce] {args.reproduce}: " + ", ".join(f"{k}={rec[k]}" for k in REPRODUCED), flush=True)
    _, _, data, info = train(args)
    same_corpus = all(data["info"].get(k) == man["corpus"].get(k) for k in ("train_tokens", "held_out_tokens",
                                                                         "train_files_sha256"))
    report = dict(recorded=args.reproduce, corpus_matches=same_corpus, device=info["device_name"], numerics={})
    ok = same_corpus
    for numerics in ("official", "reference"):
        want, got = rec["held_out"][f"loss_{numerics}"], info["held_out"][f"loss_{numerics}"]
        rel = got / want - 1.0
        report["numerics"][numerics] = dict(recorded_loss=want, loss=got, rel_diff=rel)
        ok &= abs(rel) < tolerance
        print(f"[reproduce] held-out {numerics}: recorded {want:.5f}, now {got:.5f} (rel {rel:+.2e})", flush=True)
    report["pass"] = bool(ok)
    if not same_corpus:
        print("[reproduce] the corpus differs from the recorded one (another Python stdlib?)", flush=True)
    print(f"[reproduce] {'PASS' if ok else 'FAIL'}: held-out loss within {tolerance:.0%}", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "reproduce.json"), "w") as f:
            json.dump(report, f, indent=1)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="train, then export the checkpoint into this directory")
    ap.add_argument("--check-engine", metavar="DIR", help="compare the engine with this script on DIR")
    ap.add_argument("--check-engine-after", action="store_true", help="after --out, run --check-engine on it")
    ap.add_argument("--reproduce", metavar="DIR",
                    help="re-run the training recorded in DIR/manifest.json (preset, seed, executed steps, "
                         "hyper-parameters) and compare the held-out loss with the recorded one (2%%); "
                         "writes reproduce.json into --out if given (no export)")
    ap.add_argument("--train-tokenizer", metavar="JSON", help="train the BPE tokenizer and write it")
    ap.add_argument("--tokenizer-vocab", type=int, default=4096)
    ap.add_argument("--tokenizer", default=TOKENIZER)
    ap.add_argument("--engine-bin", help="tests/tools/model_logits binary (default: build-g/, build/)")
    ap.add_argument("--preset", default="v41", choices=sorted(PRESETS) + ["v4", "v4-small"],
                    help="v41 / v41-small: V4.1; v4 / v4-small: V4 (tools/tiny_v4.py)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=1601)
    ap.add_argument("--steps", default="2000", help="N, or auto:SECONDS (time 10 steps, then fit)")
    ap.add_argument("--time-budget", type=float, default=0.0, help="stop training after this many seconds")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--kl-weight", type=float, default=1.0)
    ap.add_argument("--bias-update", type=float, default=1e-3)
    ap.add_argument("--qat", type=int, default=1, help="official activation roundings in training (1/0)")
    ap.add_argument("--amp", default=None, choices=["bf16", "none"], help="default: bf16 on cuda")
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--eval-batch", type=int, default=16)
    ap.add_argument("--check-windows", type=int, default=16)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--cache", default=os.path.join(ROOT, ".cache", "train_tiny"),
                    help="tokenized-corpus cache directory ('' = none)")
    args = ap.parse_args()
    if args.reproduce:
        return reproduce(args)
    if args.amp is None:
        args.amp = "bf16" if args.device.startswith("cuda") else "none"
    if args.steps.isdigit():
        args.steps = int(args.steps)
    args.qat = bool(args.qat)
    if args.train_tokenizer:
        data = corpus.collect()
        os.makedirs(os.path.dirname(os.path.abspath(args.train_tokenizer)), exist_ok=True)
        corpus.train_tokenizer([t for _, t in data["train"]], args.tokenizer_vocab, args.train_tokenizer)
        print(f"[tokenizer] {args.train_tokenizer}: vocab {args.tokenizer_vocab}, trained on "
              f"{data['stats']['train_files']} files of {data['root']}")
    if args.out:
        model, c, data, info = train(args)
        family = "V4" if is_v4(c) else "V4.1"
        manifest = dict(model=f"trained tiny DeepSeek-{family} (tools/train_tiny.py --preset {args.preset})",
                        text_config=c,
                        command=" ".join(sys.argv), corpus=data["info"], training=info,
                        tokenizer=dict(path=os.path.relpath(args.tokenizer, ROOT), sha256=sha256(args.tokenizer),
                                       vocab=c["vocab_size"]))
        export(model, c, args.out, args.tokenizer, manifest)
        if args.check_engine_after:
            rep = check_engine(args.out, find_engine_bin(args.engine_bin), args.check_windows, args.device)
            manifest["engine_check"] = rep
            with open(os.path.join(args.out, "manifest.json"), "w") as f:
                json.dump(manifest, f, indent=1)
    if args.check_engine:
        check_engine(args.check_engine, find_engine_bin(args.engine_bin), args.check_windows, args.device)


if __name__ == "__main__":
    sys.exit(main())
