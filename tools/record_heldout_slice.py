#!/usr/bin/env python3
"""Record the fixed held-out slice of a trained tiny model (issue 16): the first N held-out
windows that `tools/train_tiny.py --check-engine` evaluates, as token ids, with PyTorch's
held-out loss on them in both numerics. tests/python/test_trained_model.py checks that the
engine's perplexity on this slice stays within 1% of the recorded one.

    python3 tools/record_heldout_slice.py models/trained-v41 --windows 4
writes <dir>/heldout_slice.txt (one window per line) and <dir>/heldout_slice.json."""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("--windows", type=int, default=4)
    args = ap.parse_args()
    torch = train_tiny._torch()
    F = torch.nn.functional
    model, c = train_tiny.load_checkpoint(args.ckpt, "cpu")
    man = json.load(open(os.path.join(args.ckpt, "manifest.json")))
    T = man["training"]["seq_len"]
    data = train_tiny.load_data(os.path.join(args.ckpt, "tokenizer.json"))
    windows = train_tiny.eval_windows(data["held"], T, args.windows)
    with open(os.path.join(args.ckpt, "heldout_slice.txt"), "w") as f:
        for w in windows:
            f.write(",".join(map(str, w.tolist())) + "\n")
    record = {"windows": int(len(windows)), "seq_len": T, "python": sys.version.split()[0]}
    model.eval()
    for numerics, qat in (("official", True), ("reference", False)):
        with torch.no_grad():
            w = torch.as_tensor(np.asarray(windows), dtype=torch.long)
            lg, _ = model(w[:, :-1], qat=qat)
            nll = F.cross_entropy(lg.double().reshape(-1, c["vocab_size"]), w[:, 1:].reshape(-1))
        record[numerics] = {"loss": float(nll), "ppl": math.exp(float(nll))}
    json.dump(record, open(os.path.join(args.ckpt, "heldout_slice.json"), "w"), indent=1)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
