#!/usr/bin/env python3
"""Generate the committed Engram tables of DeepSeek-V4.1 (MODEL_SPEC.md §C.8) and the op fixture.

    python3 tools/make_engram_tables.py            # all three, written in place
    python3 tools/make_engram_tables.py --check    # regenerate in memory, fail on any difference

Writes:

  models/engram/token_map.bin         compressed token map of models/tiny/tokenizer.json
  models/engram/token_map.json        its provenance: tokenizer / vocabulary sha256, counts
  src/ops/engram/engram_multipliers.inc
                                      odd int64 hash multipliers for layers 0..63 and every
                                      compressed vocabulary size in MULTIPLIER_VOCAB_SIZES
  tests/data/engram/fixture.safetensors
                                      a tiny Engram config with float64 reference outputs
                                      (tools/engram_reference.py) for tests/ops/test_engram.cc

token_map.bin (little-endian): magic "DIENGMP1"; u32 n_tokens; u32 compressed_vocab_size;
u32 n_repeats; 32 bytes sha256 of the vocabulary (engram_reference.vocabulary_sha256); then
n_repeats pairs (u32 token_id, u32 compressed_id), ascending token_id, for the tokens whose key
repeats an earlier token's. Every other token, in id order, takes the next new id (0, 1, ...):
that is how the map is built, so storing only the repeats is lossless.

The multipliers need NumPy's PCG64 stream; they are computed here once so the engine never
reimplements it. `numpy.random.Generator.integers` draws one value after another, so the first
k of a size-8 draw equal a size-k draw (checked below): one row of 8 serves max_ngram 2..8.
"""

import argparse
import hashlib
import io
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram_reference as R  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "models/tiny/tokenizer.json")
MAP_BIN = os.path.join(ROOT, "models/engram/token_map.bin")
MAP_JSON = os.path.join(ROOT, "models/engram/token_map.json")
MULT_INC = os.path.join(ROOT, "src/ops/engram/engram_multipliers.inc")
FIXTURE = os.path.join(ROOT, "tests/data/engram/fixture.safetensors")

MAGIC = b"DIENGMP1"
EXPECTED_VOCAB = 99092  # what DeepSeek's V4.1 reference asserts (config engram_compressed_vocab_size)
MULTIPLIER_LAYERS = range(64)
MULTIPLIER_WIDTH = 8  # multipliers per layer row: supports engram_max_ngram_size <= 8

# V4.1 spells two added tokens of the V4 file differently (models/tiny/TOKENIZER_SOURCE.md):
# 129264 is the config's image_token_id (`<｜deepseek_image｜>`, V4 `<｜image2｜>`); 128799 is
# `<｜System｜>` (V4 `<｜place▁holder▁no▁799｜>`) in third-party V4.1 token lists. The map is
# computed with and without them and must be the same (checked in build_map).
V41_RENAMES = {128799: "<｜System｜>", 129264: "<｜deepseek_image｜>"}


# ------------------------------------------------------------------------------------------
# Token map
# ------------------------------------------------------------------------------------------


def encode_map(token_map, c, vocab_sha):
    repeats, next_new = [], 0
    for i, v in enumerate(token_map.tolist()):
        if v == next_new:
            next_new += 1
        else:
            assert v < next_new
            repeats.append((i, v))
    assert next_new == c
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(struct.pack("<III", len(token_map), c, len(repeats)))
    buf.write(bytes.fromhex(vocab_sha))
    for i, v in repeats:
        buf.write(struct.pack("<II", i, v))
    return buf.getvalue(), len(repeats)


def decode_map(data):
    assert data[:8] == MAGIC
    n, c, n_rep = struct.unpack_from("<III", data, 8)
    pairs = np.frombuffer(data, dtype="<u4", count=2 * n_rep, offset=8 + 12 + 32).reshape(-1, 2)
    out = np.empty(n, np.int32)
    rep = dict(pairs.tolist())
    nxt = 0
    for i in range(n):
        if i in rep:
            out[i] = rep[i]
        else:
            out[i] = nxt
            nxt += 1
    assert nxt == c
    return out, c


def build_map(tokenizer_path):
    tok = R.load_tokenizer(tokenizer_path)
    token_map, c, stats = R.compressed_token_map(tok)
    tok41 = R.load_tokenizer(tokenizer_path, V41_RENAMES)
    map41, c41, _ = R.compressed_token_map(tok41)
    assert c41 == c and np.array_equal(map41, token_map), "the V4.1 renames change the map"
    assert tok.token_to_id("<｜▁pad▁｜>") == 2
    with open(tokenizer_path, "rb") as f:
        file_sha = hashlib.sha256(f.read()).hexdigest()
    vocab_sha = R.vocabulary_sha256(tok)
    blob, n_rep = encode_map(token_map, c, vocab_sha)
    meta = {
        "generator": "tools/make_engram_tables.py",
        "tokenizer": os.path.relpath(tokenizer_path, ROOT),
        "tokenizer_json_sha256": file_sha,
        "vocabulary_sha256": vocab_sha,
        "vocabulary_sha256_with_v41_renames": R.vocabulary_sha256(tok41),
        "v41_renames": {str(k): v for k, v in V41_RENAMES.items()},
        "v41_renames_change_map": False,
        "n_tokens": int(len(token_map)),
        "compressed_vocab_size": int(c),
        "deepseek_expects": EXPECTED_VOCAB,
        "pad_token_id": 2,
        "compressed_pad_id": int(token_map[2]),
        "n_repeated_keys": n_rep,
        "n_raw_key_fffd": stats["raw_key_fffd"],
        "n_empty_normalisation": stats["empty_normalisation"],
        "token_map_bin_sha256": hashlib.sha256(blob).hexdigest(),
    }
    return token_map, c, blob, json.dumps(meta, indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------------------------------
# Multipliers
# ------------------------------------------------------------------------------------------


def build_multipliers(vocab_sizes):
    lines = [
        "// Generated by tools/make_engram_tables.py: do not edit. Odd int64 Engram hash",
        "// multipliers mu_{l,k} = 2 * U + 1, U = numpy.random.default_rng(10007 * l).integers(",
        "//     0, max(1, ((2^63 - 1) // C) // 2), size=8, dtype=int64),",
        f"// for layers l = 0..{MULTIPLIER_LAYERS[-1]}; numpy {np.__version__}. Row k < max_ngram is used.",
        "// {compressed_vocab_size C, layer l, {mu_0, ..., mu_7}}",
    ]
    for c in vocab_sizes:
        for layer in MULTIPLIER_LAYERS:
            row = R.hash_multipliers(layer, c, MULTIPLIER_WIDTH)
            for k in range(2, MULTIPLIER_WIDTH):
                assert R.hash_multipliers(layer, c, k) == row[:k], "PCG64 draws are not a prefix"
            assert all(v % 2 == 1 and 0 < v < 2**63 for v in row)
            assert (c - 1) * max(row) < 2**63, "s * mu can overflow int64"
            lines.append(f"{{{c}, {layer}, {{{', '.join(str(v) for v in row)}}}}},")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------
# Op fixture
# ------------------------------------------------------------------------------------------

FIX = dict(layer_ids=[1, 3], vocab_size=61, n_heads=2, max_ngram=4, head_dim=64, hc=4, dim=32,
           seq_lens=[9, 14], seed=20261)


def _tensor(name, arr, dtype):
    arr = np.ascontiguousarray(arr)
    if dtype == "BF16":
        f = arr.astype(np.float32).view(np.uint32).astype(np.uint64)
        assert np.all((f & 0xFFFF) == 0), f"{name}: not exactly bf16"
        raw = (f >> 16).astype("<u2").tobytes()
    else:
        np_type = {"F64": "<f8", "F32": "<f4", "I64": "<i8", "I32": "<i4", "U8": "u1"}[dtype]
        raw = arr.astype(np_type).tobytes()
    return name, dtype, list(arr.shape), raw


def _safetensors(tensors, metadata):
    header, off = {"__metadata__": metadata}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(t[3] for t in tensors)


def _random_e4m3(rng, shape):
    codes = rng.integers(0, 256, size=shape).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] ^= 1  # no NaN codes
    return codes


def build_fixture(token_map, c):
    f = FIX
    rng = np.random.default_rng(f["seed"])
    hc, d, hd, nh, mg = f["hc"], f["dim"], f["head_dim"], f["n_heads"], f["max_ngram"]
    n_cols = (mg - 1) * nh
    # Raw tokens: random ids, a few special ones, and repeats (same compressed id, new n-gram).
    seqs = []
    for n in f["seq_lens"]:
        t = rng.integers(0, len(token_map), size=n)
        t[rng.integers(0, n, size=2)] = [2, 128803]
        seqs.append(t)
    seqs[1][5:9] = seqs[0][0:4]  # one n-gram repeated in another sequence, away from its start
    tokens = np.concatenate(seqs)
    rows = np.concatenate([R.ngram_rows(s, mg) for s in seqs])
    n_rows = len(tokens)
    x = rng.standard_normal((n_rows, hc, d)).astype(np.float32)
    primes = R.prime_walk(len(f["layer_ids"]), f["vocab_size"], nh, mg)
    tensors = [
        _tensor("tokens", tokens, "I32"),
        _tensor("seq_lens", np.array(f["seq_lens"]), "I32"),
        _tensor("x", x, "F32"),
    ]
    for li, layer in enumerate(f["layer_ids"]):
        offs, n_tab = R.column_offsets(primes[li])
        mult = R.hash_multipliers(layer, c, mg)
        ids = R.hash_ids(rows, token_map, 2, primes[li], mult)
        table = _random_e4m3(rng, (n_tab, hd))
        scale = rng.integers(118, 128, size=(n_tab, hd // 32)).astype(np.uint8)
        k = n_cols * hd
        w_codes = _random_e4m3(rng, ((hc + 1) * d, k))
        w_scale = rng.integers(112, 118, size=(-(-(hc + 1) * d // 32), -(-k // 32)))
        wkv = R.E4M3[w_codes] * np.ldexp(1.0, np.repeat(np.repeat(w_scale, 32, 0), 32, 1) - 127)
        qw = rng.standard_normal((hc, d)).astype(np.float32)
        kw = (1.0 + 0.5 * rng.standard_normal((hc, d))).astype(np.float32)
        out, gamma = R.engram_layer(x, ids, table, scale, wkv, qw, kw)
        p = f"layer{layer}."
        tensors += [
            _tensor(p + "primes", np.array(primes[li]).reshape(-1), "I64"),
            _tensor(p + "offsets", np.array(offs), "I64"),
            _tensor(p + "multipliers", np.array(mult, dtype=np.int64), "I64"),
            _tensor(p + "ids", ids, "I64"),
            _tensor(p + "embed.weight", table, "U8"),
            _tensor(p + "embed.scale", scale, "U8"),
            _tensor(p + "wkv", wkv, "BF16"),
            _tensor(p + "q_weight", qw, "F32"),
            _tensor(p + "k_weight", kw, "F32"),
            _tensor(p + "out", out, "F64"),
            _tensor(p + "gamma", gamma, "F64"),
        ]
    meta = {k: json.dumps(v) for k, v in f.items()}
    meta["compressed_vocab_size"] = str(c)
    meta["generator"] = "tools/make_engram_tables.py (reference: tools/engram_reference.py)"
    return _safetensors(tensors, meta)


# ------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=TOKENIZER)
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    args = ap.parse_args()

    token_map, c, blob, meta = build_map(args.tokenizer)
    print(f"compressed vocabulary: {c} (DeepSeek expects {EXPECTED_VOCAB})")
    if c != EXPECTED_VOCAB:
        print("  differs from the V4.1 config's engram_compressed_vocab_size", file=sys.stderr)
    assert np.array_equal(decode_map(blob)[0], token_map)
    sizes = sorted({EXPECTED_VOCAB, c})
    outputs = {
        MAP_BIN: blob,
        MAP_JSON: meta.encode(),
        MULT_INC: build_multipliers(sizes).encode(),
        FIXTURE: build_fixture(token_map, c),
    }
    bad = 0
    for path, data in outputs.items():
        rel = os.path.relpath(path, ROOT)
        if args.check:
            with open(path, "rb") as fh:
                same = fh.read() == data
            print(f"{'ok  ' if same else 'DIFF'} {rel}")
            bad += not same
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(data)
            print(f"wrote {rel} ({len(data)} bytes)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
