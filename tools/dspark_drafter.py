"""DSpark drafter of a trained tiny DeepSeek-V4.1 (MODEL_SPEC §D; the engine's src/model/dspark.cc)
in PyTorch, for tools/train_drafter.py (which documents the training): parameters under the
native `mtp.*` names, the frozen backbone's taps, the stages, the heads and the training loss."""

import math

import train_tiny as tt

BLOCK = tt.BLOCK


def _torch():
    import torch
    return torch


# --------------------------------------------------------------------------------------------
# Config and parameters (native names)
# --------------------------------------------------------------------------------------------

def dspark_config(c, args):
    """The backbone's text_config plus the DSpark keys the engine reads (src/io/model_config_v41.cc)."""
    L = c["num_hidden_layers"]
    d = dict(c)
    d.update(num_nextn_predict_layers=args.stages, dspark_block_size=args.block,
             dspark_noise_token_id=args.noise_token, dspark_target_layer_ids=list(range(L - 3, L)),
             dspark_markov_rank=args.markov_rank, dspark_n_routed_experts=args.experts,
             dspark_num_experts_per_tok=args.top_k)
    return d


def param_specs(c):
    """[(native name, shape, kind)] of the drafter (MODEL_SPEC §D.5; engine weights.cc take_dspark)."""
    D, H, d, Rq = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, Ro, I, hc, V = c["o_groups"], c["o_lora_rank"], c["moe_intermediate_size"], c["hc_mult"], c["vocab_size"]
    E, R, S = c["dspark_n_routed_experts"], c["dspark_markov_rank"], c["num_nextn_predict_layers"]
    n_taps = len(c["dspark_target_layer_ids"])
    mix = (2 + hc) * hc
    specs = [("mtp.0.main_proj.weight", (D, n_taps * D), "fp8"), ("mtp.0.main_norm.weight", (D,), "bf16")]
    for k in range(S):
        p = f"mtp.{k}."
        specs += [(p + "attn_norm.weight", (D,), "bf16"), (p + "ffn_norm.weight", (D,), "bf16")]
        for site in ("attn", "ffn"):
            specs += [(f"{p}hc_{site}_fn", (mix, hc * D), "f32"), (f"{p}hc_{site}_base", (mix,), "f32"),
                      (f"{p}hc_{site}_scale", (3,), "f32")]
        a = p + "attn."
        specs += [(a + "wq_a.weight", (Rq, D), "fp8"), (a + "q_norm.weight", (Rq,), "bf16"),
                  (a + "wq_b.weight", (H * d, Rq), "fp8"), (a + "wkv.weight", (d, D), "fp8"),
                  (a + "kv_norm.weight", (d,), "bf16"), (a + "wo_a.weight", (G * Ro, H * d // G), "fp8"),
                  (a + "wo_b.weight", (D, G * Ro), "fp8"), (a + "attn_sink", (H,), "f32")]
        f = p + "ffn."
        specs += [(f + "gate.weight", (E, D), "bf16"), (f + "gate.bias", (E,), "f32"),
                  (f + "gate.bias_vl", (E,), "f32")]
        for e in range(E):
            specs += [(f"{f}experts.{e}.w1.weight", (I, D), "fp4"), (f"{f}experts.{e}.w2.weight", (D, I), "fp4"),
                      (f"{f}experts.{e}.w3.weight", (I, D), "fp4")]
        Is = I * c["n_shared_experts"]
        specs += [(f + "shared_experts.w1.weight", (Is, D), "fp8"), (f + "shared_experts.w2.weight", (D, Is), "fp8"),
                  (f + "shared_experts.w3.weight", (Is, D), "fp8")]
    last = f"mtp.{S - 1}."
    specs += [(last + "norm.weight", (D,), "bf16"), (last + "markov_head.embed.weight", (V, R), "bf16"),
              (last + "markov_head.head.weight", (V, R), "bf16"),
              (last + "confidence_head.proj.weight", (1, D + R), "bf16")]
    return specs


def storage_bytes(c):
    total = 0
    for _, shape, kind in param_specs(c):
        n = math.prod(shape)
        total += {"fp8": n + math.prod(-(-s // BLOCK) for s in shape), "fp4": n // 2 + n // BLOCK,
                  "bf16": 2 * n, "f32": 4 * n}[kind]
    return total


# --------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------

def build_drafter(c, bb, seed, init_from_backbone, device):
    """The drafter module; bb = the frozen backbone (tools/train_tiny.py V41), whose embedding
    and LM head it shares (w('embed.weight'), w('head.weight') delegate to it)."""
    torch = _torch()
    nn = torch.nn
    L = c["num_hidden_layers"]

    class DSpark(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = c
            self.kinds = {}
            self.params = nn.ParameterDict()
            g = torch.Generator().manual_seed(seed)
            for name, shape, kind in param_specs(c):
                self.kinds[name] = kind
                t = self._init(name, shape, g, init_from_backbone)
                key = name.replace(".", "__")
                if tt.is_buffer(name):
                    self.register_buffer(key, t)
                else:
                    self.params[key] = nn.Parameter(t)
            self._bb = [bb]  # not a submodule: frozen, not saved, not in parameters()
            self._freqs = {}

        def _init(self, name, shape, g, from_bb):
            k, tail = name.split(".", 2)[1:]
            if from_bb and tail not in ("main_proj.weight", "main_norm.weight", "norm.weight") \
                    and not tail.startswith(("markov_head.", "confidence_head.")):
                src = f"layers.{L - c['num_nextn_predict_layers'] + int(k)}." + tail
                if bb.has(src):
                    v = bb.w(src).detach().float().cpu()
                    return v[tuple(slice(0, s) for s in shape)].clone()
            if tail in ("main_norm.weight", "norm.weight") or tail.endswith(("norm.weight",)):
                return torch.ones(shape)
            if tail.endswith("_scale"):
                return torch.ones(shape)
            if tail.endswith("_base"):
                hc = c["hc_mult"]
                return torch.cat([torch.full((hc,), -math.log(hc - 1.0)), torch.zeros(hc), 3.0 * torch.eye(hc).flatten()])
            if tail == "main_proj.weight":  # m starts as the normalised last tap
                D = c["hidden_size"]
                w = torch.randn(shape, generator=g) * 0.02 * shape[1] ** -0.5
                w[:, -D:] += torch.eye(D)
                return w
            if tail == "markov_head.embed.weight":
                return torch.randn(shape, generator=g)
            if tail in ("markov_head.head.weight", "confidence_head.proj.weight") or "bias" in tail \
                    or tail.endswith("attn_sink"):
                return torch.zeros(shape)
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
                return tt.ste(p, tt.fp8_weight(p.detach()))
            if kind == "fp4":
                return tt.ste(p, tt.fp4_weight(p.detach()))
            if kind == "bf16":
                return tt.ste(p, tt.bf16(p.detach()))
            return p

        def experts(self, k, which):
            st = torch.stack([self.params[f"mtp__{k}__ffn__experts__{e}__{which}__weight"]
                              for e in range(c["dspark_n_routed_experts"])])
            return tt.ste(st, tt.fp4_weight(st.detach()))

        def inv_freq(self, dev):
            if str(dev) not in self._freqs:
                self._freqs[str(dev)] = torch.tensor(tt.rope_inv_freq(c, False), dtype=torch.float32, device=dev)
            return self._freqs[str(dev)]

    return DSpark().to(device)


# --------------------------------------------------------------------------------------------
# Forward pieces
# --------------------------------------------------------------------------------------------

def backbone_taps(bb, tokens, qat):
    """The frozen backbone on tokens [B, T]: (logits [B, T, V], taps [B, T, n_taps, D]), taps =
    the streams entering the last three layers, mean over streams. The layer loop of
    tools/train_tiny.py v41_forward (its building blocks), recording the taps; check_taps_loop
    asserts it reproduces v41_forward's logits."""
    torch = _torch()
    c = bb.c
    B, T = tokens.shape
    dev = tokens.device
    hc, eps, W, L = c["hc_mult"], c["rms_norm_eps"], c["sliding_window"], c["num_hidden_layers"]
    pos = torch.arange(T, device=dev)
    win = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - W)
    X = bb.w("embed.weight")[tokens].float()[:, :, None, :].expand(B, T, hc, c["hidden_size"])
    pre_mix = torch.zeros(B, T, hc, device=dev)
    pre_mix[..., 0] = 1.0
    state = dict(entries={}, index_keys={}, picks={}, cands={})
    aux = dict(kl=[], loads=[])
    taps = []
    for l in range(L):
        if l >= L - 3:
            taps.append(X.float().mean(2))
        p = f"layers.{l}."
        a_pre, a_post, a_C = tt.hc_mix(bb, X, p + "hc_attn_", c)
        x = tt.rms_norm(tt.hc_collapse(X, pre_mix), bb.w(p + "attn_norm.weight"), eps)
        X = tt.hc_expand(X, tt.attention(bb, l, x, pos, win, state, qat, False, aux), a_post, a_C)
        f_pre, f_post, f_C = tt.hc_mix(bb, X, p + "hc_ffn_", c)
        x = tt.rms_norm(tt.hc_collapse(X, a_pre), bb.w(p + "ffn_norm.weight"), eps)
        X = tt.hc_expand(X, tt.moe(bb, l, x, aux), f_post, f_C)
        pre_mix = f_pre
    h = tt.rms_norm(tt.hc_collapse(X, pre_mix), bb.w("norm.weight"), eps)
    logits = torch.nn.functional.linear(h.float(), bb.w("head.weight").float())
    return logits, torch.stack(taps, dim=2)


def check_taps_loop(bb, tokens):
    """backbone_taps' loop reproduces tools/train_tiny.py's v41_forward bit for bit (both numerics)."""
    torch = _torch()
    with torch.no_grad():
        for qat in (True, False):
            want = bb(tokens, qat=qat)[0]
            got = backbone_taps(bb, tokens, qat)[0]
            assert torch.equal(want, got), f"backbone_taps differs from v41_forward (qat {qat})"


def rope_at(x, pos, inv_freq, r, inverse=False):
    """Interleaved RoPE of the trailing r dims of x [N, S, (heads,) w] at per-row positions pos [N, S]."""
    torch = _torch()
    ang = pos.float()[..., None] * inv_freq  # [N, S, r/2]
    if x.dim() == 4:
        ang = ang[:, :, None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    if inverse:
        sin = -sin
    xr = x[..., -r:].float()
    a, b = xr[..., 0::2], xr[..., 1::2]
    rot = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    return torch.cat([x[..., :-r].float(), rot], dim=-1)


def main_features(dr, taps):
    """m = main_norm(main_proj . concat taps) [B, T, D]."""
    B, T = taps.shape[:2]
    return tt.rms_norm(tt.lin(taps.reshape(B, T, -1), dr.w("mtp.0.main_proj.weight")),
                       dr.w("mtp.0.main_norm.weight"), dr.c["rms_norm_eps"])


def context_kv(dr, m, qat):
    """Per stage k: kappa_k = QAT(RoPE_p(kv_norm_k(wkv_k . m_p))) -> [S][B, T, d]."""
    torch = _torch()
    c = dr.c
    pos = torch.arange(m.shape[1], device=m.device)
    out = []
    for k in range(c["num_nextn_predict_layers"]):
        a = f"mtp.{k}.attn."
        kv = tt.rms_norm(tt.lin(m, dr.w(a + "wkv.weight")), dr.w(a + "kv_norm.weight"), c["rms_norm_eps"])
        kv = tt.apply_rope(kv, pos, dr.inv_freq(m.device), c["qk_rope_head_dim"])
        out.append(tt.ste(kv, tt.fp8_rt(kv.detach(), 32)) if qat else kv)
    return out


def stage_attention(dr, k, x, kappa, batch_idx, anchors, qat):
    """DSpark attention of stage k for blocks x [N, g, D] (attn-normed) anchored at positions
    anchors [N] of sequences batch_idx [N]: keys = the stage's context of positions
    anchors-W .. anchors-1 (those >= 0) then the block's own K=V, every block row sees all."""
    torch = _torch()
    c = dr.c
    N, g, _ = x.shape
    H, d, r, G, Ro, Wn = (c["num_attention_heads"], c["head_dim"], c["qk_rope_head_dim"], c["o_groups"],
                          c["o_lora_rank"], c["sliding_window"])
    eps, a = c["rms_norm_eps"], f"mtp.{k}.attn."
    freqs = dr.inv_freq(x.device)
    bpos = anchors[:, None] + torch.arange(g, device=x.device)[None]
    q_r = tt.rms_norm(tt.lin(x, dr.w(a + "wq_a.weight")), dr.w(a + "q_norm.weight"), eps)
    q = rope_at(tt.lin(q_r, dr.w(a + "wq_b.weight")).view(N, g, H, d), bpos, freqs, r)
    bkv = tt.rms_norm(tt.lin(x, dr.w(a + "wkv.weight")), dr.w(a + "kv_norm.weight"), eps)
    bkv = rope_at(bkv, bpos, freqs, r)
    if qat:
        bkv = tt.ste(bkv, tt.fp8_rt(bkv.detach(), 32))
    cpos = anchors[:, None] - Wn + torch.arange(Wn, device=x.device)[None]  # [N, W]
    ctx = kappa[k][batch_idx[:, None], cpos.clamp_min(0)]  # [N, W, d]
    keys = torch.cat([ctx, bkv], dim=1)
    valid = torch.cat([cpos >= 0, torch.ones(N, g, dtype=torch.bool, device=x.device)], dim=1)
    s = torch.einsum("nihd,nsd->nhis", q, keys) * d ** -0.5
    s = s.masked_fill(~valid[:, None, None, :], -math.inf)
    sink = dr.w(a + "attn_sink").float()[None, :, None, None].expand(N, H, g, 1)
    probs = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
    o = rope_at(torch.einsum("nhis,nsd->nihd", probs, keys), bpos, freqs, r, inverse=True)
    gw = H * d // G
    z = torch.einsum("nigk,grk->nigr", o.reshape(N, g, G, gw), dr.w(a + "wo_a.weight").view(G, Ro, gw))
    return tt.lin(z.reshape(N, g, G * Ro), dr.w(a + "wo_b.weight"))


def stage_moe(dr, k, x, loads):
    """Score-routed MoE of stage k (sqrt-softplus, selection-only bias, weights normalised when
    norm_topk_prob and top_k > 1 (V4.1), x routed_scaling_factor, clamped SwiGLU, shared expert)."""
    torch = _torch()
    F = torch.nn.functional
    c = dr.c
    E, K, lim = c["dspark_n_routed_experts"], c["dspark_num_experts_per_tok"], c["swiglu_limit"]
    f = f"mtp.{k}.ffn."
    shape = x.shape
    xf = x.reshape(-1, shape[-1])
    with torch.autocast(device_type=x.device.type, enabled=False):
        s = torch.sqrt(F.softplus(F.linear(xf.float(), dr.w(f + "gate.weight").float())))
    idx = torch.topk(s.detach() + dr.w(f + "gate.bias")[None], K, dim=-1).indices
    sel = s.gather(-1, idx)
    if c.get("norm_topk_prob", True) and K > 1:
        sel = sel / (sel.sum(-1, keepdim=True) + 1e-20)
    dense_w = torch.zeros_like(s).scatter(-1, idx, sel * c["routed_scaling_factor"])
    loads.append((k, torch.zeros(E, device=x.device).scatter_add_(
        0, idx.flatten(), torch.ones(idx.numel(), device=x.device)).detach()))
    W1, W3, W2 = (dr.experts(k, n) for n in ("w1", "w3", "w2"))
    act = F.silu(torch.einsum("nd,eid->nei", xf, W1).float().clamp(max=lim)) * \
        torch.einsum("nd,eid->nei", xf, W3).float().clamp(-lim, lim) * dense_w[..., None]
    y = torch.einsum("nei,edi->nd", act, W2).float()
    sg = tt.lin(xf, dr.w(f + "shared_experts.w1.weight")).clamp(max=lim)
    su = tt.lin(xf, dr.w(f + "shared_experts.w3.weight")).clamp(-lim, lim)
    return (y + tt.lin(F.silu(sg) * su, dr.w(f + "shared_experts.w2.weight"))).view(shape)


def draft_block(dr, kappa, batch_idx, anchors, anchor_ids, qat, loads=None):
    """The stages on blocks [anchor_ids, nu, ..] at positions anchors.. -> (base logits
    [N, g, V] fp32, pre-norm hidden h [N, g, D])."""
    torch = _torch()
    c = dr.c
    g, hc, eps, nu = c["dspark_block_size"], c["hc_mult"], c["rms_norm_eps"], c["dspark_noise_token_id"]
    N = anchors.shape[0]
    ids = torch.full((N, g), nu, dtype=torch.long, device=anchors.device)
    ids[:, 0] = anchor_ids
    X = dr.w("embed.weight")[ids].float()[:, :, None, :].expand(N, g, hc, c["hidden_size"])
    pre_mix = torch.zeros(N, g, hc, device=anchors.device)
    pre_mix[..., 0] = 1.0
    loads = [] if loads is None else loads
    for k in range(c["num_nextn_predict_layers"]):
        p = f"mtp.{k}."
        a_pre, a_post, a_C = tt.hc_mix(dr, X, p + "hc_attn_", c)
        x = tt.rms_norm(tt.hc_collapse(X, pre_mix), dr.w(p + "attn_norm.weight"), eps)
        X = tt.hc_expand(X, stage_attention(dr, k, x, kappa, batch_idx, anchors, qat), a_post, a_C)
        f_pre, f_post, f_C = tt.hc_mix(dr, X, p + "hc_ffn_", c)
        x = tt.rms_norm(tt.hc_collapse(X, a_pre), dr.w(p + "ffn_norm.weight"), eps)
        X = tt.hc_expand(X, stage_moe(dr, k, x, loads), f_post, f_C)
        pre_mix = f_pre
    h = tt.hc_collapse(X, pre_mix)
    last = f"mtp.{c['num_nextn_predict_layers'] - 1}."
    with torch.autocast(device_type=anchors.device.type, enabled=False):
        base = torch.nn.functional.linear(tt.rms_norm(h.float(), dr.w(last + "norm.weight"), eps),
                                          dr.w("head.weight").float())
    return base, h


def markov_and_confidence(dr, base, h, prev_tokens=None, first=None):
    """Teacher-forced (prev_tokens [N, g]: the token preceding each draft) or greedy (first [N]:
    tok_0, then each argmax) Markov head and confidence -> (logits, confidence logits, tokens)."""
    torch = _torch()
    c = dr.c
    last = f"mtp.{c['num_nextn_predict_layers'] - 1}."
    W1, W2 = dr.w(last + "markov_head.embed.weight"), dr.w(last + "markov_head.head.weight").float()
    wc = dr.w(last + "confidence_head.proj.weight").float()
    if prev_tokens is not None:
        e = W1[prev_tokens].float()
        logits = base + e @ W2.T
        conf = (torch.cat([h.detach(), e.detach()], dim=-1) @ wc.T)[..., 0]
        return logits, conf, None
    g = base.shape[1]
    tok, rows, confs, toks = first, [], [], []
    for i in range(g):
        e = W1[tok].float()
        row = base[:, i] + e @ W2.T
        confs.append((torch.cat([h[:, i], e], dim=-1) @ wc.T)[..., 0])
        rows.append(row)
        tok = row.argmax(-1)
        toks.append(tok)
    return torch.stack(rows, 1), torch.stack(confs, 1), torch.stack(toks, 1)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

def drafter_loss(dr, bb, tokens, n_anchors, args, rng, loads, frozen=None):
    """One batch of windows tokens [B, T]: anchors, block forward, losses and acceptance stats.
    frozen: the backbone's (logits, taps) of these windows when precomputed (--cache-windows)."""
    torch = _torch()
    F = torch.nn.functional
    c = dr.c
    g = c["dspark_block_size"]
    B, T = tokens.shape
    dev = tokens.device
    if frozen is None:
        with torch.no_grad(), torch.autocast(device_type=tokens.device.type, enabled=False):  # fp32 target
            frozen = backbone_taps(bb, tokens, args.qat)
    tlogits, taps = frozen
    kappa = context_kv(dr, main_features(dr, taps), args.qat)
    a = torch.as_tensor(rng.integers(1, T - g, size=(B, n_anchors)), device=dev)  # a + g <= T - 1
    bi = torch.arange(B, device=dev)[:, None].expand(B, n_anchors).reshape(-1)
    a = a.reshape(-1)
    slots = a[:, None] + torch.arange(g, device=dev)[None]  # positions a..a+g-1
    base, h = draft_block(dr, kappa, bi, a, tokens[bi, a], args.qat, loads)
    logits, conf, _ = markov_and_confidence(dr, base, h, prev_tokens=tokens[bi[:, None], slots])
    labels = tokens[bi[:, None], slots + 1]
    tgt = tlogits[bi[:, None], slots].float()  # the target's distribution for the same positions
    V = logits.shape[-1]
    wpos = torch.exp(-torch.arange(g, device=dev, dtype=torch.float32) / args.pos_decay)
    ce = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none").view(-1, g)
    logq = torch.log_softmax(logits, -1)
    logp = torch.log_softmax(tgt, -1)
    kl = (logp.exp() * (logp - logq)).sum(-1)
    per_slot = (1 - args.distill) * ce + args.distill * kl
    lm = (per_slot * wpos).sum(-1).mean() / wpos.sum()
    with torch.no_grad():
        acc = (logits.argmax(-1) == tgt.argmax(-1)).float()  # [N, g]
        reach = torch.cat([torch.ones_like(acc[:, :1]), torch.cumprod(acc, 1)[:, :-1]], 1)
        accept_len = 1.0 + torch.cumprod(acc, 1).sum(-1).mean()
        data_acc = (logits.argmax(-1) == labels).float().mean(0)
    bce = F.binary_cross_entropy_with_logits(conf, acc, reduction="none")
    conf_loss = (bce * reach).sum() / reach.sum().clamp_min(1.0)
    stats = dict(lm=lm.item(), ce=ce.mean().item(), kl=kl.mean().item(), conf=conf_loss.item(),
                 accept_len_tf=accept_len.item(), acc_at=[round(v, 4) for v in acc.mean(0).tolist()],
                 data_acc_at=[round(v, 4) for v in data_acc.tolist()])
    return lm + args.conf_weight * conf_loss, stats
