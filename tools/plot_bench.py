#!/usr/bin/env python3
"""Plots a `deepinfer bench` sweep: output tokens/s per device against tokens/s per user,
one point per run (a concurrency or a request rate). Usage: plot_bench.py SWEEP.csv OUT.png"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    with open(src) as f:
        rows = list(csv.DictReader(f))
    x = [float(r["tok_s_per_user"]) for r in rows]
    y = [float(r["out_tok_s_per_device"]) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, y, marker="o")
    for r, xi, yi in zip(rows, x, y):
        label = r.get("label") or f"c={r['concurrency']}"  # "concurrency 4", "rate 2/s"
        ax.annotate(label, (xi, yi), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("tokens/s per user")
    ax.set_ylabel("output tokens/s per device")
    ax.set_title("deepinfer bench")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
