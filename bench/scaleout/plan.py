"""Scale-out on paper (issue 19 deliverable 8): memory per GPU, all-to-all bytes per decode step
and the expected decode step time of V4-Flash / V4.1-Flash under attention DP + MoE EP, from
the model sizes (MODEL_SPEC.md) and our single-H200 kernel timings (bench/results/
gpu-bench-2026-11-30-c560309.md). Every assumption is a named constant or argument below.

    python3 bench/scaleout/plan.py            # prints the markdown tables
"""
from __future__ import annotations

import math
from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class Model:
    name: str
    dim: int
    layers: int
    experts: int
    top_k: int
    inter: int
    other_params: float    # non-expert parameters (attention, shared experts, embed, head), FP8
    act_block: int         # activation scale block on the wire
    kv_bytes_per_seq_8k: float  # cache + state of one sequence at 8K context (see kv_* below)

    def expert_params(self) -> float:
        return self.layers * self.experts * 3 * self.inter * self.dim

    def expert_bytes(self, fmt: str) -> float:
        per = {"fp4": 0.5 + 1 / 32, "fp8": 1 + 1 / (128 * 128)}[fmt]  # + ue8m0/32 or fp32/128x128
        return self.expert_params() * per


def kv_v4_flash(ctx: int = 8192) -> float:
    """584-B FP8 entries (FlashMLA MODEL1), 132-B FP8 indexer keys; 2 window-only layers, 21
    ratio-4 layers (with indexer), 20 ratio-128 layers; 128-token window per layer."""
    window = 43 * 128 * 584
    c4 = 21 * (ctx // 4) * (584 + 132)
    c128 = 20 * (ctx // 128) * 584
    return window + c4 + c128


def kv_v41_flash(ctx: int = 8192) -> float:
    """528-B FP8 window ring per layer; compressed KV (288-B FP4 entries) and FP4 index keys
    (68 B) only in the sources 2, 8, 14 (ratio 2) and 20 (ratio 1) (cross-layer sharing)."""
    window = 40 * 128 * 528
    comp = 3 * (ctx // 2) + ctx
    return window + comp * (288 + 68)


V4_FLASH = Model("V4-Flash", 4096, 43, 256, 6, 2048, 7.0e9, 128, kv_v4_flash())
V41_FLASH = Model("V4.1-Flash", 5120, 40, 384, 6, 2304, 8.5e9, 32, kv_v41_flash())


def record_bytes(dim: int, block: int) -> int:
    """ep_layout.h: codes + fp32 scales + (slot, weight), padded to 16."""
    raw = dim + 4 * math.ceil(dim / block) + 8
    return (raw + 15) // 16 * 16


def memory_per_gpu(m: Model, ep: int, seqs: int, fmt: str) -> dict:
    experts = m.expert_bytes(fmt) / ep
    other = m.other_params * 1.0
    kv = seqs * m.kv_bytes_per_seq_8k
    return {"experts": experts, "other": other, "kv": kv, "total": experts + other + kv}


def remote_fraction_slots(ep: int) -> float:
    return (ep - 1) / ep


def distinct_remote_ranks(ep: int, k: int) -> float:
    """Expected remote ranks a token's k experts touch (uniform routing, experts spread evenly;
    with-replacement approximation): what a per-rank de-duplicated dispatch (DeepEP) sends."""
    return (ep - 1) * (1 - (1 - 1 / ep) ** k)


def a2a_bytes_per_step(m: Model, ep: int, seqs: int, dedup: bool = False) -> dict:
    """Bytes one GPU sends per decode step (all layers): dispatch FP8 records, combine bf16."""
    rows = seqs * (distinct_remote_ranks(ep, m.top_k) if dedup
                   else m.top_k * remote_fraction_slots(ep))
    dispatch = rows * record_bytes(m.dim, m.act_block) * m.layers
    combine = seqs * m.top_k * remote_fraction_slots(ep) * m.dim * 2 * m.layers
    return {"dispatch": dispatch, "combine": combine, "total": dispatch + combine}


# Measured on one H200 (gpu-bench-2026-11-30-c560309.md, V4-Flash shapes, 4 layers [4,128,4,128],
# FP8 weights, decode at 4K context): per-4-layer attention / MoE ms, total ms.
MEASURED = {64: (4.39, 11.77, 17.066, 675), 256: (11.72, 17.56, 31.099, 945)}
MEASURED_LAYERS = 4


@dataclass(frozen=True)
class Link:
    name: str
    gb_s: float         # per direction per GPU
    efficiency: float   # achieved fraction
    latency_us: float   # per all-to-all call


NVLINK = Link("NVLink 4 (450 GB/s/dir)", 450.0, 0.7, 15.0)
IB = Link("IB 8x400 Gb/s per node (50 GB/s/dir per GPU)", 50.0, 0.8, 25.0)


def moe_ms_per_layer(m: Model, ep: int, seqs: int, expert_bw_gb_s: float) -> float:
    """Weight-read bound: every local expert that gets a row is read once (FP8 experts, as our
    grouped GEMM runs them); rows per expert small at decode."""
    local = m.experts / ep
    rows_per_expert = ep * seqs * m.top_k / m.experts
    used = local * (1 - math.exp(-rows_per_expert))
    return used * 3 * m.inter * m.dim / (expert_bw_gb_s * GB) * 1e3


def effective_expert_bw(seqs: int) -> float:
    """GB/s our grouped FP8 MoE achieved single-GPU (experts used x expert bytes / MoE time)."""
    att, moe, total, used = MEASURED[seqs]
    expert = 3 * V4_FLASH.inter * V4_FLASH.dim
    return used * expert / (moe / 1e3) / GB


def step_ms(m: Model, ep: int, seqs: int, nodes: int = 1, dedup: bool = False) -> dict:
    att4, moe4, total4, _ = MEASURED[seqs]
    att_l = att4 / MEASURED_LAYERS * (m.dim / V4_FLASH.dim)  # projections scale with D
    other = total4 - att4 - moe4  # embedding, head, sampling: once per step
    moe_l = moe_ms_per_layer(m, ep, seqs, effective_expert_bw(seqs))
    b = a2a_bytes_per_step(m, ep, seqs, dedup)
    per_layer_bytes = b["dispatch"] / m.layers, b["combine"] / m.layers
    gpus_per_node = ep // nodes
    a2a_l = 0.0
    for part in per_layer_bytes:
        if nodes == 1:
            a2a_l += part / (NVLINK.gb_s * NVLINK.efficiency * GB) * 1e3 + NVLINK.latency_us / 1e3
        else:  # remote-node share over IB, the rest over NVLink, in parallel
            off_node = (ep - gpus_per_node) / (ep - 1)
            t_ib = part * off_node / (IB.gb_s * IB.efficiency * GB) * 1e3 + IB.latency_us / 1e3
            t_nv = part * (1 - off_node) / (NVLINK.gb_s * NVLINK.efficiency * GB) * 1e3
            a2a_l += max(t_ib, t_nv)
    total = m.layers * (att_l + moe_l + a2a_l) + other
    return {"attention": m.layers * att_l, "moe": m.layers * moe_l, "a2a": m.layers * a2a_l,
            "other": other, "total": total, "tok_s_gpu": seqs / total * 1e3}


SGLANG_4XH200 = {64: (41.27, 344), 256: (83.49, 380)}  # TPOT ms, ~output tok/s/GPU (peers.md 2.1)


def tables() -> str:
    out = []
    out.append("## Memory per GPU (8K context)\n")
    out.append("| model | GPUs | experts | expert fmt | experts GB | other GB | KV+state GB @64 | @256 | total @256 GB |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for m in (V4_FLASH, V41_FLASH):
        for ep, label in ((1, "1 (replicated)"), (8, "8 (EP8)"), (16, "16 (2x8)")):
            for fmt in ("fp4", "fp8"):
                a = memory_per_gpu(m, ep, 64, fmt)
                b = memory_per_gpu(m, ep, 256, fmt)
                out.append(f"| {m.name} | {label} | {m.experts // ep}/GPU | {fmt} | {a['experts']/GB:.1f} | "
                           f"{a['other']/GB:.1f} | {a['kv']/GB:.2f} | {b['kv']/GB:.2f} | {b['total']/GB:.1f} |")
    out.append("\n## All-to-all bytes per decode step per GPU (all layers, sent; received is the same)\n")
    out.append("| model | EP | seqs/GPU | record B | dispatch MB | combine MB | total MB | dispatch MB if de-duplicated per rank |")
    out.append("|---|---|---|---|---|---|---|---|")
    for m in (V4_FLASH, V41_FLASH):
        for ep in (8, 16):
            for s in (64, 256):
                b = a2a_bytes_per_step(m, ep, s)
                d = a2a_bytes_per_step(m, ep, s, dedup=True)
                out.append(f"| {m.name} | {ep} | {s} | {record_bytes(m.dim, m.act_block)} | {b['dispatch']/1e6:.1f} | "
                           f"{b['combine']/1e6:.1f} | {b['total']/1e6:.1f} | {d['dispatch']/1e6:.1f} |")
    out.append("\n## Expected decode step (ms) and output tok/s per GPU\n")
    out.append("| model | setup | seqs/GPU | attention | MoE | all-to-all | other | step | tok/s/GPU | SGLang 4xH200 V4-Flash FP8 (TPOT, tok/s/GPU) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for m in (V4_FLASH, V41_FLASH):
        for ep, nodes, label in ((8, 1, "8xH200 EP8"), (16, 2, "2x8 H200 EP16")):
            for s in (64, 256):
                r = step_ms(m, ep, s, nodes)
                sg = SGLANG_4XH200[s]
                out.append(f"| {m.name} | {label} | {s} | {r['attention']:.1f} | {r['moe']:.1f} | {r['a2a']:.2f} | "
                           f"{r['other']:.1f} | {r['total']:.1f} | {r['tok_s_gpu']:.0f} | {sg[0]} ms, {sg[1]} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(tables())
