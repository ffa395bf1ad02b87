"""The DeepSeek-V4 architecture of tools/train_tiny.py (`--preset v4` / `v4-small`; issue 16).

The forward (`v4_forward`) is the project's V4 math (MODEL_SPEC §A, the engine's V4 paths in
src/model: traits of a `deepseek_v4` config, io/layer_plan.cc plan_v4) in PyTorch, fp32:
  * multi-pass mHC (each site collapses with its own `pre`), final `hc_head` collapse;
  * attention with the per-head unweighted q RMS norm, shared K = V, sliding window + sink,
    inverse RoPE, grouped output projection;
  * ratio 4 (CSA): overlapping compressor (two series, 8 slots of stride 4, `ape` position
    bias) and the lightning indexer with its own overlapping compressor of width
    index_head_dim; top-k of the visible entries;
  * ratio 128 (HCA): non-overlapping compressor, every visible entry;
  * MoE: hash routing by `tid2eid[token]` in the first `num_hash_layers` layers, top-k by
    sqrt-softplus score + selection-only bias elsewhere; weights always normalised (no eps).
QAT (`qat=True`, the engine's `official` numerics, MODEL_SPEC §A.10): window K=V and main
compressed entries FP8 (64-blocks, pow-2 scales) on the d - r NoPE dims and bf16 on the rope
dims; index keys and index queries Hadamard-rotated then FP4 (32-blocks, ue8m0). Weights are
FP8 with 128x128 blocks (V4's official grid), FP4 1x32 experts, bf16 / fp32 as the checkpoint.

Imported by train_tiny.py (and by the drafter trainer through it): `param_specs`, `v4_forward`
(`return_streams=True` also returns the final streams X^L [B, T, hc, D] before hc_head, the
MTP-1 input).
"""

import math

import train_tiny as tt

BLOCK = 128  # V4's FP8 weight grid (MODEL_SPEC §0)

# 6 layers: 0-1 sliding window, then CSA / HCA alternating as in V4-Flash ([0,0] + [4,128]x2;
# 8 layers would be 11.4 MiB, over the models/ budget); hash-routed MoE in layers 0-1 (V4-Flash
# hashes its first 3 of 43), score-routed top-2 with bias in 2-5. Index top-k 32 of the <= 128
# CSA entries of a 512-token window (selection active from position 131 on); HCA sees at most 4
# entries at 512 tokens (visible from positions 127, 255, 383, 511): the window covers 128
# tokens, the HCA summaries of 0..255 reach further back. 9.4 MiB.
PRESETS = {
    "v4": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4, head_dim=128,
               qk_rope_head_dim=64, q_lora_rank=128, o_groups=2, o_lora_rank=64,
               n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
               n_shared_experts=1, sliding_window=128, index_n_heads=4, index_head_dim=128,
               index_topk=32, num_hash_layers=2, compress_ratios=[0, 0, 4, 128, 4, 128]),
    # Same roles, smaller: CPU verification of the pipeline.
    "v4-small": dict(hidden_size=64, num_hidden_layers=6, num_attention_heads=2, head_dim=64,
                     qk_rope_head_dim=32, q_lora_rank=64, o_groups=2, o_lora_rank=32,
                     n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                     n_shared_experts=1, sliding_window=32, index_n_heads=2, index_head_dim=64,
                     index_topk=16, num_hash_layers=2, compress_ratios=[0, 0, 4, 128, 4, 128]),
}

FIXED = dict(num_key_value_heads=1, swiglu_limit=10.0, rms_norm_eps=1e-6, rope_theta=10000.0,
             rope_scaling={"type": "yarn", "factor": 16.0, "beta_fast": 32, "beta_slow": 1,
                           "original_max_position_embeddings": 65536},
             max_position_embeddings=65536, scoring_func="sqrtsoftplus", topk_method="noaux_tc",
             norm_topk_prob=True, routed_scaling_factor=1.5, compress_rope_theta=160000.0,
             hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, num_nextn_predict_layers=0,
             hidden_act="silu", tie_word_embeddings=False)


def make_config(preset, vocab_size, bos, eos):
    """The flat V4 config (model_type deepseek_v4, as DeepSeek-V4-Flash's config.json)."""
    c = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", **FIXED,
         **PRESETS[preset]}
    c["vocab_size"] = vocab_size
    c["bos_token_id"], c["eos_token_id"] = bos, eos
    c["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                "scale_fmt": "ue8m0", "weight_block_size": [BLOCK, BLOCK],
                                "expert_dtype": "fp4"}
    return c


def param_specs(c):
    """[(native name, shape, kind, init)], kind in fp8/fp4/bf16/f32/i32 (train_tiny.param_specs)."""
    D, H, d, Rq = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, Ro, I, E = c["o_groups"], c["o_lora_rank"], c["moe_intermediate_size"], c["n_routed_experts"]
    HI, dI, hc, V = c["index_n_heads"], c["index_head_dim"], c["hc_mult"], c["vocab_size"]
    L, k = c["num_hidden_layers"], c["num_experts_per_tok"]
    mix = (2 + hc) * hc
    out_std = 1.0 / math.sqrt(2 * L)
    specs = [("embed.weight", (V, D), "bf16", ("normal", 1.0))]

    def compressor(prefix, m, width):
        cw = (2 if m == 4 else 1) * width
        return [(prefix + "wkv.weight", (cw, D), "bf16", ("fan_in",)),
                (prefix + "wgate.weight", (cw, D), "bf16", ("fan_in", 0.1)),
                (prefix + "ape", (m, cw), "f32", ("zeros",)),
                (prefix + "norm.weight", (width,), "bf16", ("ones",))]

    for l in range(L):
        p, m = f"layers.{l}.", c["compress_ratios"][l]
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
        if m:
            specs += compressor(a + "compressor.", m, d)
        if m == 4:
            ip = a + "indexer."
            specs += [(ip + "wq_b.weight", (HI * dI, Rq), "fp8", ("fan_in",)),
                      (ip + "weights_proj.weight", (HI, D), "bf16", ("fan_in",))]
            specs += compressor(ip + "compressor.", 4, dI)
        f = p + "ffn."
        specs.append((f + "gate.weight", (E, D), "bf16", ("fan_in",)))
        if l < c["num_hash_layers"]:
            specs.append((f + "gate.tid2eid", (V, k), "i32", ("tid2eid", E)))
        else:
            specs.append((f + "gate.bias", (E,), "f32", ("zeros",)))
        for e in range(E):
            specs += [(f"{f}experts.{e}.w1.weight", (I, D), "fp4", ("fan_in",)),
                      (f"{f}experts.{e}.w2.weight", (D, I), "fp4", ("fan_in", out_std)),
                      (f"{f}experts.{e}.w3.weight", (I, D), "fp4", ("fan_in",))]
        specs += [(f + "shared_experts.w1.weight", (I, D), "fp8", ("fan_in",)),
                  (f + "shared_experts.w2.weight", (D, I), "fp8", ("fan_in", out_std)),
                  (f + "shared_experts.w3.weight", (I, D), "fp8", ("fan_in",))]
    specs += [("norm.weight", (D,), "bf16", ("ones",)),
              ("head.weight", (V, D), "bf16", ("fan_in",)),
              ("hc_head_fn", (hc, hc * D), "f32", ("normal", 1e-3 / math.sqrt(hc * D))),
              ("hc_head_base", (hc,), "f32", ("hc_head_base", hc)),
              ("hc_head_scale", (1,), "f32", ("ones",))]
    return specs


# --------------------------------------------------------------------------------------------
# QAT roundings (the engine's kv_rounding.h / qat_ref.cc for a V4 config)
# --------------------------------------------------------------------------------------------

def round_entry(x, r):
    """Window K=V / main compressed entry: FP8 64-blocks on the NoPE dims, bf16 rope dims (STE)."""
    torch = tt._torch()
    nope = x.shape[-1] - r
    block = 64 if nope % 64 == 0 else nope  # a narrower NoPE part is one partial block
    assert nope < 64 or nope % 64 == 0, nope
    q = torch.cat([tt.fp8_rt(x[..., :-r].detach(), block), tt.bf16(x[..., -r:].detach())], dim=-1)
    return tt.ste(x, q)


_HADAMARD = {}


def hadamard(x):
    """Sylvester-ordered Walsh-Hadamard over the last dim, / sqrt(n) (as hadamard_transform)."""
    torch = tt._torch()
    n = x.shape[-1]
    key = (n, str(x.device))
    if key not in _HADAMARD:
        h = torch.ones(1, 1)
        while h.shape[0] < n:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        assert h.shape[0] == n, f"Hadamard size must be a power of two, got {n}"
        _HADAMARD[key] = (h / math.sqrt(n)).to(x.device)
    return x.float() @ _HADAMARD[key]


def round_index(x):
    """Index keys / queries: Hadamard, then FP4 32-blocks with ue8m0 scales (STE)."""
    x = hadamard(x)
    return tt.ste(x, tt.fp4_rt(x.detach(), 32))


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------

def v4_forward(m, tokens, qat, indexer_loss, return_streams=False):
    """tokens [B, T] (positions 0..T-1) -> (logits [B, T, V] fp32, aux dict); with
    return_streams aux["streams"] = X^L [B, T, hc, D] (before hc_head)."""
    torch = tt._torch()
    c = m.c
    B, T = tokens.shape
    dev = tokens.device
    D, hc, eps, W = c["hidden_size"], c["hc_mult"], c["rms_norm_eps"], c["sliding_window"]
    pos = torch.arange(T, device=dev)
    win = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - W)  # [T(query), T(key)]
    X = m.w("embed.weight")[tokens].float()[:, :, None, :].expand(B, T, hc, D)
    aux = dict(kl=[], loads=[])
    for l in range(c["num_hidden_layers"]):
        p = f"layers.{l}."
        pre, post, C = tt.hc_mix(m, X, p + "hc_attn_", c)
        x = tt.rms_norm(tt.hc_collapse(X, pre), m.w(p + "attn_norm.weight"), eps)
        X = tt.hc_expand(X, attention(m, l, x, pos, win, qat, indexer_loss, aux), post, C)
        pre, post, C = tt.hc_mix(m, X, p + "hc_ffn_", c)
        x = tt.rms_norm(tt.hc_collapse(X, pre), m.w(p + "ffn_norm.weight"), eps)
        X = tt.hc_expand(X, tt.moe(m, l, x, aux, tokens), post, C)
    if return_streams:
        aux["streams"] = X
    logits = head(m, X)
    return logits, aux


def hc_head_collapse(m, X, prefix=""):
    """h = sum_j pre_j X_j with pre = sigmoid(mix * scale + base) + hc_eps (MODEL_SPEC §A.2)."""
    torch = tt._torch()
    c = m.c
    B, T = X.shape[:2]
    xf = X.reshape(B, T, -1).float()
    mix = tt.lin(xf, m.w(prefix + "hc_head_fn")) * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + c["rms_norm_eps"])
    pre = torch.sigmoid(mix * m.w(prefix + "hc_head_scale")[0] + m.w(prefix + "hc_head_base")) + c["hc_eps"]
    return tt.hc_collapse(X, pre)


def head(m, X, prefix=""):
    """Final streams -> logits: hc_head, RMSNorm `norm`, fp32 LM head (MODEL_SPEC §A.9).
    prefix "mtp.0." uses the MTP module's hc_head and norm with the shared LM head."""
    torch = tt._torch()
    h = tt.rms_norm(hc_head_collapse(m, X, prefix), m.w(prefix + "norm.weight"), m.c["rms_norm_eps"])
    with torch.autocast(device_type=X.device.type, enabled=False):  # fp32 head and logits
        return torch.nn.functional.linear(h.float(), m.w("head.weight").float())


def attention(m, l, x, pos, win, qat, indexer_loss, aux):
    torch = tt._torch()
    c = m.c
    B, T, _ = x.shape
    H, d, r, eps = c["num_attention_heads"], c["head_dim"], c["qk_rope_head_dim"], c["rms_norm_eps"]
    G, Ro, ratio = c["o_groups"], c["o_lora_rank"], c["compress_ratios"][l]
    a = f"layers.{l}.attn."
    freqs = m.rope_freqs(ratio > 0, x.device)
    q_r = tt.rms_norm(tt.lin(x, m.w(a + "wq_a.weight")), m.w(a + "q_norm.weight"), eps)
    q = tt.lin(q_r, m.w(a + "wq_b.weight")).view(B, T, H, d)
    q = tt.apply_rope(tt.rms_norm(q, None, eps), pos, freqs, r)  # V4: per-head q norm
    kv = tt.rms_norm(tt.lin(x, m.w(a + "wkv.weight")), m.w(a + "kv_norm.weight"), eps)
    kv = tt.apply_rope(kv, pos, freqs, r)
    if qat:
        kv = round_entry(kv, r)
    keys, mask = kv, win[None].expand(B, T, T)
    index = None
    if ratio:
        ent = compress(m, a + "compressor.", x, ratio, d, qat, main=True)
        Nc = ent.shape[1]
        vis = torch.arange(Nc, device=x.device)[None, :] < ((pos + 1) // ratio)[:, None]  # [T, Nc]
        if ratio == 4:
            index = select(m, l, x, q_r, pos, vis, qat)
            picks = index[2]
        else:
            picks = vis[None].expand(B, T, Nc)
        keys = torch.cat([kv, ent], dim=1)
        mask = torch.cat([mask, picks], dim=-1)
    scores = torch.einsum("bthd,bsd->bhts", q, keys) * (d ** -0.5)
    dense = scores[..., T:] if (indexer_loss and index is not None and keys.shape[1] > T) else None
    scores = scores.masked_fill(~mask[:, None], -math.inf)
    sink = m.w(a + "attn_sink").float()[None, :, None, None].expand(B, H, T, 1)
    probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    o = tt.apply_rope(torch.einsum("bhts,bsd->bthd", probs, keys), pos, freqs, r, inverse=True)
    gw = H * d // G
    z = torch.einsum("btgk,grk->btgr", o.reshape(B, T, G, gw), m.w(a + "wo_a.weight").view(G, Ro, gw))
    out = tt.lin(z.reshape(B, T, G * Ro), m.w(a + "wo_b.weight"))
    if dense is not None:
        state = {"index_logits": {l: index[:2]}}
        tt.indexer_kl(l, None, dense.detach(), scores[..., :T].detach(), sink.detach(), state, aux)
    return out


def compress(m, prefix, x, ratio, width, qat, main):
    """Compressed entries of the chunk [B, T // ratio, width] (MODEL_SPEC §A.5): per channel a
    softmax over the window's slots of (wgate x + ape[t mod m]) pooling wkv x; ratio 4 pools 8
    slots (the A halves of window w - 1, weight 0 before the first window, and the B halves of
    window w). RMSNorm, RoPE at position ratio * w; main entries QAT-rounded as window entries,
    index keys Hadamard + FP4 (both only with qat)."""
    torch = tt._torch()
    c = m.c
    B, T, _ = x.shape
    nc = T // ratio
    cw = (2 if ratio == 4 else 1) * width
    av = tt.lin(x, m.w(prefix + "wkv.weight"))[:, : nc * ratio].reshape(B, nc, ratio, cw)
    zv = tt.lin(x, m.w(prefix + "wgate.weight"))[:, : nc * ratio].reshape(B, nc, ratio, cw)
    zv = zv + m.w(prefix + "ape")[None, None]
    if ratio == 4:
        def prev(v, fill):  # window w - 1's rows at w, `fill` at w = 0
            return torch.cat([torch.full_like(v[:, :1], fill), v[:, :-1]], dim=1)
        av = torch.cat([prev(av[..., :width], 0.0), av[..., width:]], dim=2)  # [B, nc, 8, width]
        zv = torch.cat([prev(zv[..., :width], -math.inf), zv[..., width:]], dim=2)
    pooled = (torch.softmax(zv, dim=2) * av).sum(2)
    latent = tt.rms_norm(pooled, m.w(prefix + "norm.weight"), c["rms_norm_eps"])
    epos = torch.arange(nc, device=x.device) * ratio
    ent = tt.apply_rope(latent, epos, m.rope_freqs(True, x.device), c["qk_rope_head_dim"])
    if qat:
        ent = round_entry(ent, c["qk_rope_head_dim"]) if main else round_index(ent)
    return ent


def select(m, l, x, q_r, pos, vis, qat):
    """Lightning indexer of a CSA layer (MODEL_SPEC §A.6) -> (scores [B, T, Nc] with -inf where
    not visible, vis [T, Nc], top-k mask [B, T, Nc]). Its parameters see detached inputs: they
    learn from the KL loss only (train_tiny.indexer_kl)."""
    torch = tt._torch()
    c = m.c
    B, T, _ = x.shape
    HI, dI, r = c["index_n_heads"], c["index_head_dim"], c["qk_rope_head_dim"]
    ip = f"layers.{l}.attn.indexer."
    keys = compress(m, ip + "compressor.", x.detach(), 4, dI, qat, main=False)  # [B, Nc, dI]
    qi = tt.lin(q_r.detach(), m.w(ip + "wq_b.weight")).view(B, T, HI, dI)
    qi = tt.apply_rope(qi, pos, m.rope_freqs(True, x.device), r)
    if qat:
        qi = round_index(qi)
    g = tt.lin(x.detach(), m.w(ip + "weights_proj.weight")) * (HI ** -0.5)  # [B, T, HI]
    dots = torch.relu(torch.einsum("bthi,bsi->bths", qi, keys)) * (dI ** -0.5)
    scores = (g[..., None] * dots).sum(2).masked_fill(~vis[None], -math.inf)
    with torch.no_grad():
        picks = tt.stable_topk_mask(scores.detach(), c["index_topk"])
    return scores, vis, picks
