"""Shared helpers for the grammar tests: a client for bench/grammar/grammar_driver (JSON lines).

Python cannot call the C++ engine yet, so the tests drive the `grammar_driver` executable from
$DEEPINFER_BUILD (default: build/). No tests live here.
"""
import itertools
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures"


def driver_path():
    build = Path(os.environ.get("DEEPINFER_BUILD", REPO / "build"))
    return build / "bench" / "grammar" / "grammar_driver"


class Driver:
    def __init__(self):
        path = driver_path()
        if not path.exists():
            pytest.skip(f"grammar_driver not built at {path}")
        self.proc = subprocess.Popen(
            [str(path), str(FIXTURES / "tokenizer-deepseek-v3" / "tokenizer.json")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8",
            cwd=REPO)
        ready = json.loads(self.proc.stdout.readline())
        assert ready["ready"]
        self.n_vocab = ready["n_vocab"]

    def call(self, **req):
        self.proc.stdin.write(json.dumps(req, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "grammar_driver died"
        return json.loads(line)

    def compile(self, kind, text, max_whitespace=0):
        return self.call(op="compile", kind=kind, grammar=text, max_whitespace=max_whitespace)

    def match(self, gid, strings):
        r = self.call(op="match", id=gid, strings=list(strings))
        assert r["ok"], r
        return r["results"]

    def generate(self, gid, seed, n=1, random_tokens=64, max_tokens=400):
        r = self.call(op="generate", id=gid, seed=seed, n=n, random_tokens=random_tokens,
                      max_tokens=max_tokens)
        assert r["ok"], r
        return r

    def free(self, gid):
        self.call(op="free", id=gid)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def normalize_numbers(v):
    """Our literal/number policy: integral floats are written as integers."""
    if isinstance(v, float) and math.isfinite(v) and v == math.floor(v) and abs(v) <= 2**53:
        return int(v)
    if isinstance(v, list):
        return [normalize_numbers(x) for x in v]
    if isinstance(v, dict):
        return {k: normalize_numbers(x) for k, x in v.items()}
    return v


def serialisations(v, limit=64):
    """Compact serialisations of v under our policy, over member orders (objects are unordered,
    our grammars fix an order). Yields at most `limit` strings."""
    def ser(x):
        if isinstance(x, dict):
            keys = list(x.keys())
            orders = (list(itertools.permutations(keys)) if len(keys) <= 4
                      else [keys, sorted(keys), sorted(keys, reverse=True)])
            out = []
            for order in orders:
                parts = [[json.dumps(k, ensure_ascii=False) + ":" + s for s in ser(x[k])] for k in order]
                for combo in itertools.islice(itertools.product(*parts), limit):
                    out.append("{" + ",".join(combo) + "}")
                    if len(out) >= limit:
                        return out
            return out
        if isinstance(x, list):
            parts = [ser(e) for e in x]
            return ["[" + ",".join(c) + "]" for c in itertools.islice(itertools.product(*parts), limit)]
        return [json.dumps(x, ensure_ascii=False)]
    return ser(normalize_numbers(v))[:limit]


def encodable(s):
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
