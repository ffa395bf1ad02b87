"""Plain float64 NumPy reference of the DeepSeek-V4.1 Engram layer (MODEL_SPEC.md §C.8).

Written from the spec and from what DeepInfer 0.1.0 does (`v4_modules/engram_metadata.py`,
`engram.py`, `csrc/engine/input_metadata/prepare_tensor_input_base.cpp`); no code of theirs.
Importable (tools/make_engram_tables.py and the fixture generator use it); nothing here needs
more than numpy, and `compressed_token_map` needs HF `tokenizers`.

Pieces, in the order the model uses them:

  compressed_token_map(tokenizer.json)   raw token id -> compressed id, and the vocabulary size C
  prime_walk(...) / column_offsets(...)  the 24 (in general (max_ngram-1)*n_heads) bucket primes
  hash_multipliers(layer, C, max_ngram)  odd int64 multipliers from NumPy's PCG64
  ngram_rows(tokens, ...)                per position: its token and the max_ngram-1 before it,
                                         -1 before the sequence start
  hash_ids(rows, ...)                    absolute table rows [N, n_cols]
  gather_rows(table, scale, ids)         FP8 e4m3 rows times 2^(s-127), concatenated by column
  engram_layer(x, ids, ...)              kv projection, gate, X_k += gamma_k * value
"""

import hashlib
import json

import numpy as np

EPS = 1e-20  # rms_norm_eps of V4.1, used by the gate's two RMS factors
CLAMP = 1e-6  # the gate's floor on |delta| before the square root

# ------------------------------------------------------------------------------------------
# 1. Compressed token map (§C.8.1)
# ------------------------------------------------------------------------------------------


def _normalizer():
    from tokenizers import Regex, normalizers

    sentinel = "\ue000"  # a private-use character protects a token that is exactly one space
    return normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), sentinel),
        normalizers.Strip(),
        normalizers.Replace(sentinel, " "),
    ])


def load_tokenizer(path, renames=None):
    """A `tokenizers.Tokenizer` from `path`, with added tokens renamed ({id: new content})."""
    from tokenizers import Tokenizer

    if not renames:
        return Tokenizer.from_file(str(path))
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    seen = set()
    for tok in spec["added_tokens"]:
        if tok["id"] in renames:
            tok["content"] = renames[tok["id"]]
            seen.add(tok["id"])
    missing = set(renames) - seen
    assert not missing, f"renamed ids are not added tokens of {path}: {sorted(missing)}"
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))


def vocabulary_sha256(tok):
    """sha256 of the vocabulary in id order: the UTF-8 JSON list of id_to_token(0..n-1)."""
    n = tok.get_vocab_size()
    names = [tok.id_to_token(i) for i in range(n)]
    return hashlib.sha256(json.dumps(names, ensure_ascii=False).encode("utf-8")).hexdigest()


def compressed_token_map(tok):
    """(map int32 [vocab], C, stats). Each id is decoded alone with special tokens kept; a
    decode containing U+FFFD (a partial UTF-8 byte piece) is keyed by its raw token string,
    anything else by its normalisation (or the decode itself when that is empty). Distinct
    keys get consecutive ids in token-id order."""
    norm = _normalizer()
    key_to_id = {}
    out = np.empty(tok.get_vocab_size(), dtype=np.int32)
    stats = {"raw_key_fffd": 0, "empty_normalisation": 0}
    for i in range(len(out)):
        text = tok.decode([i], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(i)
            stats["raw_key_fffd"] += 1
        else:
            key = norm.normalize_str(text)
            if not key:
                key = text
                stats["empty_normalisation"] += 1
        out[i] = key_to_id.setdefault(key, len(key_to_id))
    return out, len(key_to_id), stats


# ------------------------------------------------------------------------------------------
# 2. Primes, offsets, multipliers (§C.8.2-3)
# ------------------------------------------------------------------------------------------


def _is_prime(n):
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):  # deterministic below 3.3e24
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _next_prime(n):
    """Smallest prime > n."""
    n += 1
    while not _is_prime(n):
        n += 1
    return n


def prime_walk(n_layers, vocab_size, n_heads, max_ngram):
    """primes[layer][ngram][head]: layers in config order, then n-gram index, then heads; each
    (layer, n-gram) starts from vocab_size - 1 and every head takes the smallest prime above the
    previous one that no earlier (layer, n-gram, head) took."""
    seen, out = set(), []
    for _ in range(n_layers):
        per_layer = []
        for _ in range(max_ngram - 1):
            cur, row = vocab_size - 1, []
            for _ in range(n_heads):
                p = _next_prime(cur)
                while p in seen:
                    p = _next_prime(p)
                seen.add(p)
                row.append(p)
                cur = p
            per_layer.append(row)
        out.append(per_layer)
    return out


def column_offsets(primes_of_layer):
    """offset_c = sum of the primes of the columns before c (c = ngram * n_heads + head)."""
    flat = [p for row in primes_of_layer for p in row]
    return [sum(flat[:c]) for c in range(len(flat))], sum(flat)


def hash_multipliers(layer_id, compressed_vocab_size, max_ngram):
    """mu_{l,k} = 2 U + 1, U ~ default_rng(10007 l).integers(0, (int64max // C) // 2)."""
    bound = max(1, (int(np.iinfo(np.int64).max) // compressed_vocab_size) // 2)
    u = np.random.default_rng(10007 * layer_id).integers(0, bound, size=(max_ngram,), dtype=np.int64)
    return [int(v) * 2 + 1 for v in u]


# ------------------------------------------------------------------------------------------
# 3. N-gram rows and hash ids
# ------------------------------------------------------------------------------------------


def ngram_rows(tokens, max_ngram, begin=0, end=None):
    """rows[p - begin, k] = tokens[p - k] for p in [begin, end), -1 where p - k < 0 (before the
    sequence start). `tokens` is one sequence (raw ids, or negative for dead positions)."""
    end = len(tokens) if end is None else end
    rows = np.full((end - begin, max_ngram), -1, dtype=np.int64)
    for p in range(begin, end):
        for k in range(max_ngram):
            if p - k >= 0:
                rows[p - begin, k] = tokens[p - k]
    return rows


def hash_ids(rows, token_map, pad_token_id, primes_of_layer, multipliers):
    """rows [N, max_ngram] raw token ids (negative = before the start / dead: that shift and all
    larger ones become the compressed pad). Returns absolute table rows [N, n_cols] int64."""
    pad = int(token_map[pad_token_id])
    offsets, _ = column_offsets(primes_of_layer)
    n_heads = len(primes_of_layer[0])
    max_ngram = len(primes_of_layer) + 1
    out = np.zeros((rows.shape[0], len(offsets)), dtype=np.int64)
    for r in range(rows.shape[0]):
        s, dead = [], False
        for k in range(max_ngram):
            t = int(rows[r, k])
            dead = dead or t < 0
            s.append(pad if dead else int(token_map[t]))
        prods = [s[k] * multipliers[k] for k in range(max_ngram)]
        assert all(0 <= v < 2**63 for v in prods)
        rho = prods[0]
        for n in range(max_ngram - 1):
            rho ^= prods[n + 1]
            for h in range(n_heads):
                c = n * n_heads + h
                out[r, c] = rho % primes_of_layer[n][h] + offsets[c]
    return out


# ------------------------------------------------------------------------------------------
# 4. Lookup and the layer (§C.8.4-7)
# ------------------------------------------------------------------------------------------


def e4m3_values():
    """float64 value of every e4m3fn code 0..255 (0x7f / 0xff NaN)."""
    v = np.empty(256)
    for code in range(256):
        e, m = (code >> 3) & 15, code & 7
        mag = m / 8.0 * 2.0**-6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        v[code] = -mag if code & 0x80 else mag
    v[0x7F] = v[0xFF] = np.nan
    return v


E4M3 = e4m3_values()


def gather_rows(table, scale, ids):
    """table uint8 [rows, hd] e4m3, scale uint8 [rows, hd/32] e8m0 -> float64 [N, n_cols*hd],
    element c*hd + i = e4m3(table[ids[c], i]) * 2^(scale[ids[c], i/32] - 127)."""
    hd = table.shape[1]
    vals = E4M3[table[ids]]  # [N, n_cols, hd]
    s = np.ldexp(1.0, scale[ids].astype(np.int64) - 127)  # [N, n_cols, hd/32]
    return (vals * np.repeat(s, 32, axis=-1)).reshape(ids.shape[0], ids.shape[1] * hd)


def engram_layer(x, ids, table, scale, wkv, q_weight, k_weight, eps=EPS, clamp=CLAMP):
    """x [N, hc, D] streams; returns (x + gamma * value, gamma [N, hc]) in float64.
    wkv [(hc+1) D, n_cols hd]: rows 0..hc*D-1 are the keys [hc, D], the last D the value."""
    x = np.asarray(x, dtype=np.float64)
    n, hc, d = x.shape
    e = gather_rows(table, scale, ids)
    kv = e @ np.asarray(wkv, dtype=np.float64).T  # [N, (hc+1) D]
    key = kv[:, : hc * d].reshape(n, hc, d)
    value = kv[:, hc * d:]
    w = np.asarray(q_weight, np.float64) * np.asarray(k_weight, np.float64)  # [hc, D]
    rms_x = np.sqrt(np.mean(x * x, axis=-1) + eps)
    rms_k = np.sqrt(np.mean(key * key, axis=-1) + eps)
    delta = np.sum(x * w[None] * key, axis=-1) / (rms_x * rms_k * np.sqrt(d))
    gamma = 1.0 / (1.0 + np.exp(-np.sign(delta) * np.sqrt(np.maximum(np.abs(delta), clamp))))
    return x + gamma[..., None] * value[:, None, :], gamma
