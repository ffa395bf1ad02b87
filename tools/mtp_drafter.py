"""MTP-1 drafter of the trained tiny DeepSeek-V4 (MODEL_SPEC §A.9 / §D.7; the engine's
src/model/mtp.cc), for tools/train_drafter.py --kind mtp.

MTP position t: Z_j = e_proj(enorm(embed(x_{t+1}))) + h_proj(hnorm(X^L[t, j])) per stream j
(X^L: the frozen backbone's final streams before hc_head), one V4 block `mtp.0` (multi-pass
mHC, per-head unweighted q norm, sliding window over the MTP keys of positions t-W+1..t with
the sink, RoPE at t with rope_theta, score-routed MoE with selection-only bias, weights always
normalised), then logits = head . norm(hc_head_mtp(streams)): the prediction for x_{t+2}.
Training runs every position of a window at once (the MTP keys are causal like the backbone's
window); loss (1 - distill) CE(x_{t+2}) + distill KL(target || draft), the target being the
backbone's distribution at t+1. Weights in V4's formats (FP8 128x128, FP4 1x32 experts, bf16
norms / gate, f32 hc); exported by tools/train_drafter.py into drafter.safetensors + index.
"""

import math

import train_tiny as tt
import tiny_v4


def param_specs(c):
    """[(native name, shape, kind)] of mtp.0 (engine weights.cc take_mtp)."""
    D, H, d, Rq = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, Ro, I, hc, E = c["o_groups"], c["o_lora_rank"], c["moe_intermediate_size"], c["hc_mult"], c["n_routed_experts"]
    mix = (2 + hc) * hc
    p = "mtp.0."
    specs = [(p + "e_proj.weight", (D, D), "fp8"), (p + "h_proj.weight", (D, D), "fp8"),
             (p + "enorm.weight", (D,), "bf16"), (p + "hnorm.weight", (D,), "bf16"), (p + "norm.weight", (D,), "bf16"),
             (p + "hc_head_fn", (hc, hc * D), "f32"), (p + "hc_head_base", (hc,), "f32"),
             (p + "hc_head_scale", (1,), "f32"),
             (p + "attn_norm.weight", (D,), "bf16"), (p + "ffn_norm.weight", (D,), "bf16")]
    for site in ("attn", "ffn"):
        specs += [(f"{p}hc_{site}_fn", (mix, hc * D), "f32"), (f"{p}hc_{site}_base", (mix,), "f32"),
                  (f"{p}hc_{site}_scale", (3,), "f32")]
    a = p + "attn."
    specs += [(a + "wq_a.weight", (Rq, D), "fp8"), (a + "q_norm.weight", (Rq,), "bf16"),
              (a + "wq_b.weight", (H * d, Rq), "fp8"), (a + "wkv.weight", (d, D), "fp8"),
              (a + "kv_norm.weight", (d,), "bf16"), (a + "wo_a.weight", (G * Ro, H * d // G), "fp8"),
              (a + "wo_b.weight", (D, G * Ro), "fp8"), (a + "attn_sink", (H,), "f32")]
    f = p + "ffn."
    specs += [(f + "gate.weight", (E, D), "bf16"), (f + "gate.bias", (E,), "f32")]
    for e in range(E):
        specs += [(f"{f}experts.{e}.w1.weight", (I, D), "fp4"), (f"{f}experts.{e}.w2.weight", (D, I), "fp4"),
                  (f"{f}experts.{e}.w3.weight", (I, D), "fp4")]
    Is = I * c["n_shared_experts"]
    specs += [(f + "shared_experts.w1.weight", (Is, D), "fp8"), (f + "shared_experts.w2.weight", (D, Is), "fp8"),
              (f + "shared_experts.w3.weight", (Is, D), "fp8")]
    return specs


def storage_bytes(c):
    b = tt.weight_block(c)
    total = 0
    for _, shape, kind in param_specs(c):
        n = math.prod(shape)
        total += {"fp8": n + math.prod(-(-s // b) for s in shape), "fp4": n // 2 + n // tt.BLOCK,
                  "bf16": 2 * n, "f32": 4 * n}[kind]
    return total


def build(c, bb, seed, init_from_backbone, device):
    """The MTP module; bb = the frozen V4 backbone (embedding, LM head shared). With
    init_from_backbone the block starts as the backbone's last layer and hc_head / norm as the
    backbone's; e_proj = h_proj = identity / 2 (Z = mean of the two normalised inputs)."""
    torch = tt._torch()
    nn = torch.nn
    L, block = c["num_hidden_layers"], tt.weight_block(c)

    class MTP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.v4 = c, True
            self.kinds = {}
            self.params = nn.ParameterDict()
            g = torch.Generator().manual_seed(seed)
            for name, shape, kind in param_specs(c):
                self.kinds[name] = kind
                t = self._init(name.split(".", 2)[2], shape, g, init_from_backbone)
                key = name.replace(".", "__")
                if tt.is_buffer(name):
                    self.register_buffer(key, t)
                else:
                    self.params[key] = nn.Parameter(t)
            self._bb = [bb]

        def _init(self, tail, shape, g, from_bb):
            if tail in ("e_proj.weight", "h_proj.weight"):
                return torch.eye(shape[0]) * 0.5 + torch.randn(shape, generator=g) * 0.01 * shape[1] ** -0.5
            if from_bb:
                src = tail if tail.startswith(("hc_head_", "norm.")) else f"layers.{L - 1}." + tail
                if bb.has(src):
                    return bb.w(src).detach().float().cpu().clone()
            if tail.endswith(("norm.weight", "_scale")):
                return torch.ones(shape)
            if "bias" in tail or tail.endswith("attn_sink"):
                return torch.zeros(shape)
            if tail.endswith("_base"):
                hc = c["hc_mult"]
                if shape[0] == hc:
                    return torch.zeros(shape)
                return torch.cat([torch.full((hc,), -math.log(hc - 1.0)), torch.zeros(hc), 3.0 * torch.eye(hc).flatten()])
            if tail.endswith("_fn"):
                return torch.randn(shape, generator=g) * 1e-3 / math.sqrt(shape[1])
            return torch.randn(shape, generator=g) * shape[-1] ** -0.5

        @property
        def bb(self):
            return self._bb[0]

        def has(self, name):
            return name in self.kinds

        def w(self, name):
            if name not in self.kinds:
                return self.bb.w(name).detach()
            key = name.replace(".", "__")
            if tt.is_buffer(name):
                return getattr(self, key)
            p = self.params[key]
            kind = self.kinds[name]
            if kind == "fp8":
                return tt.ste(p, tt.fp8_weight(p.detach(), block))
            if kind == "fp4":
                return tt.ste(p, tt.fp4_weight(p.detach()))
            if kind == "bf16":
                return tt.ste(p, tt.bf16(p.detach()))
            return p

        def experts(self, which):
            st = torch.stack([self.params[f"mtp__0__ffn__experts__{e}__{which}__weight"]
                              for e in range(c["n_routed_experts"])])
            return tt.ste(st, tt.fp4_weight(st.detach()))

    return MTP().to(device)


def backbone(bb, tokens, qat):
    """Frozen V4 backbone: (logits [B, T, V], final streams X^L [B, T, hc, D])."""
    logits, aux = bb(tokens, qat=qat, return_streams=True)
    return logits, aux["streams"]


def forward(mt, streams, next_tokens, qat, loads=None):
    """MTP over positions 0..T-1 of windows: streams X^L [B, T, hc, D], next_tokens [B, T] (the
    token t+1 of each position t) -> logits [B, T, V] (predictions for t+2)."""
    torch = tt._torch()
    F = torch.nn.functional
    c = mt.c
    B, T = next_tokens.shape
    D, H, d, r, hc, eps = (c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["qk_rope_head_dim"],
                           c["hc_mult"], c["rms_norm_eps"])
    G, Ro, W = c["o_groups"], c["o_lora_rank"], c["sliding_window"]
    p = "mtp.0."
    dev = streams.device
    e = tt.lin(tt.rms_norm(mt.w("embed.weight")[next_tokens].float(), mt.w(p + "enorm.weight"), eps),
               mt.w(p + "e_proj.weight"))
    hp = tt.lin(tt.rms_norm(streams.float(), mt.w(p + "hnorm.weight"), eps), mt.w(p + "h_proj.weight"))
    Z = e[:, :, None, :] + hp  # [B, T, hc, D]
    pos = torch.arange(T, device=dev)
    win = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - W)
    freqs = torch.tensor(tt.rope_inv_freq(c, False), dtype=torch.float32, device=dev)
    pre, post, C = tt.hc_mix(mt, Z, p + "hc_attn_", c)
    x = tt.rms_norm(tt.hc_collapse(Z, pre), mt.w(p + "attn_norm.weight"), eps)
    a = p + "attn."
    q_r = tt.rms_norm(tt.lin(x, mt.w(a + "wq_a.weight")), mt.w(a + "q_norm.weight"), eps)
    q = tt.lin(q_r, mt.w(a + "wq_b.weight")).view(B, T, H, d)
    q = tt.apply_rope(tt.rms_norm(q, None, eps), pos, freqs, r)
    kv = tt.apply_rope(tt.rms_norm(tt.lin(x, mt.w(a + "wkv.weight")), mt.w(a + "kv_norm.weight"), eps), pos, freqs, r)
    if qat:
        kv = tiny_v4.round_entry(kv, r)
    s = torch.einsum("bthd,bsd->bhts", q, kv) * d ** -0.5
    s = s.masked_fill(~win[None, None], -math.inf)
    sink = mt.w(a + "attn_sink").float()[None, :, None, None].expand(B, H, T, 1)
    probs = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
    o = tt.apply_rope(torch.einsum("bhts,bsd->bthd", probs, kv), pos, freqs, r, inverse=True)
    gw = H * d // G
    z = torch.einsum("btgk,grk->btgr", o.reshape(B, T, G, gw), mt.w(a + "wo_a.weight").view(G, Ro, gw))
    Z = tt.hc_expand(Z, tt.lin(z.reshape(B, T, G * Ro), mt.w(a + "wo_b.weight")), post, C)
    pre, post, C = tt.hc_mix(mt, Z, p + "hc_ffn_", c)
    x = tt.rms_norm(tt.hc_collapse(Z, pre), mt.w(p + "ffn_norm.weight"), eps)
    Z = tt.hc_expand(Z, moe(mt, x, loads), post, C)
    return tiny_v4.head(mt, Z, prefix=p)


def moe(mt, x, loads):
    """mtp.0's score-routed MoE: sqrt-softplus, top-k by score + bias, weights normalised (V4: no
    eps) x routed_scaling_factor, clamped SwiGLU, shared expert."""
    torch = tt._torch()
    F = torch.nn.functional
    c = mt.c
    E, K, lim = c["n_routed_experts"], c["num_experts_per_tok"], c["swiglu_limit"]
    f = "mtp.0.ffn."
    shape = x.shape
    xf = x.reshape(-1, shape[-1])
    with torch.autocast(device_type=x.device.type, enabled=False):
        s = torch.sqrt(F.softplus(F.linear(xf.float(), mt.w(f + "gate.weight").float())))
    idx = torch.topk(s.detach() + mt.w(f + "gate.bias")[None], K, dim=-1).indices
    sel = s.gather(-1, idx)
    dense_w = torch.zeros_like(s).scatter(-1, idx, sel / sel.sum(-1, keepdim=True) * c["routed_scaling_factor"])
    if loads is not None:
        loads.append(torch.zeros(E, device=x.device).scatter_add_(
            0, idx.flatten(), torch.ones(idx.numel(), device=x.device)).detach())
    W1, W3, W2 = (mt.experts(n) for n in ("w1", "w3", "w2"))
    act = F.silu(torch.einsum("nd,eid->nei", xf, W1).float().clamp(max=lim)) * \
        torch.einsum("nd,eid->nei", xf, W3).float().clamp(-lim, lim) * dense_w[..., None]
    y = torch.einsum("nei,edi->nd", act, W2).float()
    sg = tt.lin(xf, mt.w(f + "shared_experts.w1.weight")).clamp(max=lim)
    su = tt.lin(xf, mt.w(f + "shared_experts.w3.weight")).clamp(-lim, lim)
    return (y + tt.lin(F.silu(sg) * su, mt.w(f + "shared_experts.w2.weight"))).view(shape)


def loss(mt, bb, tokens, args, loads, frozen=None):
    """Windows tokens [B, T]: MTP at positions 0..T-3 -> (loss, stats)."""
    torch = tt._torch()
    F = torch.nn.functional
    if frozen is None:
        with torch.no_grad(), torch.autocast(device_type=tokens.device.type, enabled=False):  # fp32 target
            frozen = backbone(bb, tokens, args.qat)
    tlogits, streams = frozen
    lg = forward(mt, streams[:, :-2], tokens[:, 1:-1], args.qat, loads)  # position t predicts t+2
    V = lg.shape[-1]
    labels = tokens[:, 2:]
    tgt = tlogits[:, 1:-1].float()
    ce = F.cross_entropy(lg.reshape(-1, V), labels.reshape(-1))
    logq, logp = torch.log_softmax(lg, -1), torch.log_softmax(tgt, -1)
    kl = (logp.exp() * (logp - logq)).sum(-1).mean()
    with torch.no_grad():
        acc = (lg.argmax(-1) == tgt.argmax(-1)).float().mean()
    total = (1 - args.distill) * ce + args.distill * kl
    return total, dict(lm=total.item(), ce=ce.item(), kl=kl.item(), acc=round(acc.item(), 4),
                       accept_len_tf=round(1 + acc.item(), 4))
