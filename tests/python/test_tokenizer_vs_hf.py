"""Acceptance: the C++ tokenizer (through the deepinfer_tokenize driver) against HF
`tokenizers` on a generated multilingual corpus of >= 2 MB, for the DeepSeek-V3 fixture
tokenizer and the V4 tokenizer of the built-in tiny model.

Checks: identical ids for every document; decode(encode(x)) == x; decode() identical to
HF on the corpus ids and on random id sequences (with and without skip_special_tokens);
the streaming detokenizer equals decode(); token_bytes(id) of every id equals HF's
decode of that id; encode_ordinary() equals HF with the added vocabulary removed; every
code point of the planes with assigned characters encodes like HF.
"""
import json
import os
import random
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "tokenizer"))
import corpus  # noqa: E402

TOKENIZERS = {
    "v3": ROOT.parent / "shared" / "fixtures" / "tokenizer-deepseek-v3" / "tokenizer.json",
    "v4": ROOT / "models" / "tiny" / "tokenizer.json",
}
CORPUS_BYTES = 2_100_000


def _driver():
    build = os.environ.get("DEEPINFER_BUILD", str(ROOT / "build"))
    exe = Path(build) / "bench" / "tokenizer" / "deepinfer_tokenize"
    if not exe.exists():
        pytest.skip(f"deepinfer_tokenize not built at {exe} (set DEEPINFER_BUILD to the build dir)")
    return exe


def _write_texts(path, texts):
    with open(path, "wb") as f:
        for t in texts:
            b = t if isinstance(t, bytes) else t.encode("utf-8")
            f.write(struct.pack("<I", len(b)))
            f.write(b)


def _read_texts(path):
    data, out, p = Path(path).read_bytes(), [], 0
    while p < len(data):
        (n,) = struct.unpack_from("<I", data, p)
        out.append(data[p + 4 : p + 4 + n])
        p += 4 + n
    return out


def _write_ids(path, lists):
    with open(path, "wb") as f:
        for ids in lists:
            f.write(struct.pack("<I%di" % len(ids), len(ids), *ids))


def _read_ids(path):
    data, out, p = Path(path).read_bytes(), [], 0
    while p < len(data):
        (n,) = struct.unpack_from("<I", data, p)
        out.append(list(struct.unpack_from("<%di" % n, data, p + 4)))
        p += 4 + 4 * n
    return out


def _run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def setup(request, tmp_path_factory):
    path = TOKENIZERS[request.param]
    if not path.exists():
        pytest.skip(f"missing tokenizer {path}")
    exe = _driver()
    spec = json.loads(path.read_text(encoding="utf-8"))
    added = [t["content"] for t in spec["added_tokens"]]
    docs = corpus.make_corpus(1234, CORPUS_BYTES, added)
    hf = tokenizers.Tokenizer.from_file(str(path))
    tmp = tmp_path_factory.mktemp("tok_" + request.param)
    _write_texts(tmp / "docs.bin", docs)
    _run(exe, "encode", path, tmp / "docs.bin", tmp / "ours.bin")
    return dict(name=request.param, path=path, exe=exe, docs=docs, hf=hf, tmp=tmp, spec=spec,
                ours=_read_ids(tmp / "ours.bin"))


def test_corpus_is_large_and_diverse(setup):
    docs = setup["docs"]
    text = "".join(docs)
    assert len(text.encode()) >= 2_000_000
    for needle in ["\r\n", "\u200d", "\u3000", "def ", "<｜User｜>", "<think>"]:
        assert needle in text or setup["name"] == "v3" and needle == "<think>", needle
    assert re.search(r"[0-9]{10}", text) and re.search(r" {20}", text)
    assert re.search("[\u4e00-\u9fa5]{5}", text) and re.search("[\u3040-\u309f]", text)
    assert re.search("[\uac00-\ud7a3]", text)
    assert any(ord(c) > 0xFFFF for c in text)


def test_encode_matches_hf(setup):
    hf_ids = [e.ids for e in setup["hf"].encode_batch(setup["docs"], add_special_tokens=True)]
    ours = setup["ours"]
    assert len(ours) == len(hf_ids)
    bad = [i for i, (a, b) in enumerate(zip(ours, hf_ids)) if a != b]
    if bad:
        i = bad[0]
        a, b = ours[i], hf_ids[i]
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        pytest.fail(f"{len(bad)} of {len(ours)} documents differ; first #{i} at token {k}: "
                    f"ours {a[k:k+8]} hf {b[k:k+8]} text {setup['docs'][i][:200]!r}")


def test_every_code_point(setup):
    """Every code point of planes 0-3 and the start of plane 14 (the planes with assigned
    non-private characters in Unicode 16), each as " " + c + c + "1": the space joins a
    letter / mark / digit / symbol piece only when the pre-tokenizer classes agree with HF's
    Oniguruma (Unicode 16), so a class mismatch changes the ids."""
    if setup["name"] != "v4":
        pytest.skip("run for one tokenizer only (the pre-tokenizer is the same)")
    cps = [c for c in list(range(0x40000)) + list(range(0xE0000, 0xE1000)) if not 0xD800 <= c < 0xE000]
    docs = ["".join(" " + chr(c) + chr(c) + "1" for c in cps[i : i + 2048]) for i in range(0, len(cps), 2048)]
    tmp, exe = setup["tmp"], setup["exe"]
    _write_texts(tmp / "all.bin", docs)
    _run(exe, "encode", setup["path"], tmp / "all.bin", tmp / "all_ids.bin")
    ours = _read_ids(tmp / "all_ids.bin")
    theirs = [e.ids for e in setup["hf"].encode_batch(docs)]
    bad = [i for i in range(len(docs)) if ours[i] != theirs[i]]
    assert not bad, f"{len(bad)} blocks differ, first starts at U+{cps[bad[0] * 2048]:04X}"


def test_decode_roundtrip_and_stream(setup):
    tmp, exe = setup["tmp"], setup["exe"]
    _run(exe, "decode", setup["path"], tmp / "ours.bin", tmp / "dec.bin")
    _run(exe, "decode", setup["path"], tmp / "ours.bin", tmp / "sdec.bin", "--stream")
    dec = _read_texts(tmp / "dec.bin")
    sdec = _read_texts(tmp / "sdec.bin")
    docs = [d.encode() for d in setup["docs"]]
    assert sum(a != b for a, b in zip(dec, docs)) == 0
    assert sdec == dec


@pytest.mark.parametrize("skip", [False, True])
def test_decode_matches_hf_on_random_ids(setup, skip):
    hf, tmp, exe = setup["hf"], setup["tmp"], setup["exe"]
    r = random.Random(7)
    n_vocab = hf.get_vocab_size(with_added_tokens=True)
    special = [t["id"] for t in setup["spec"]["added_tokens"]]
    lists = []
    for _ in range(3000):
        ids = []
        for _ in range(r.randint(0, 40)):
            x = r.random()
            ids.append(r.choice(special) if x < 0.1 else r.randrange(256) if x < 0.4 else r.randrange(n_vocab))
        lists.append(ids)
    lists += setup["ours"][:300]
    _write_ids(tmp / "rand.bin", lists)
    flags = ["--skip-special"] if skip else []
    _run(exe, "decode", setup["path"], tmp / "rand.bin", tmp / "rdec.bin", *flags)
    _run(exe, "decode", setup["path"], tmp / "rand.bin", tmp / "rsdec.bin", "--stream", *flags)
    ours = [b.decode("utf-8") for b in _read_texts(tmp / "rdec.bin")]
    theirs = hf.decode_batch(lists, skip_special_tokens=skip)
    bad = [i for i in range(len(lists)) if ours[i] != theirs[i]]
    assert not bad, f"{len(bad)} differ; first ids {lists[bad[0]]}: ours {ours[bad[0]]!r} hf {theirs[bad[0]]!r}"
    assert [b.decode("utf-8") for b in _read_texts(tmp / "rsdec.bin")] == ours


def test_token_bytes_match_hf(setup):
    hf, tmp, exe = setup["hf"], setup["tmp"], setup["exe"]
    _run(exe, "bytes", setup["path"], tmp / "bytes.bin")
    raw = _read_texts(tmp / "bytes.bin")
    assert len(raw) == hf.get_vocab_size(with_added_tokens=True)
    singles = hf.decode_batch([[i] for i in range(len(raw))], skip_special_tokens=False)
    bad = [i for i in range(len(raw)) if raw[i].decode("utf-8", errors="replace") != singles[i]]
    assert not bad, f"{len(bad)} ids differ, first {bad[:5]}"
    # Raw bytes of multi-token characters: pairs of byte tokens rebuild what HF decodes.
    by_id = {i: raw[i] for i in range(len(raw))}
    r = random.Random(3)
    pairs = [[r.randrange(128000), r.randrange(128000)] for _ in range(2000)]
    want = hf.decode_batch(pairs, skip_special_tokens=False)
    got = [(by_id[a] + by_id[b]).decode("utf-8", errors="replace") for a, b in pairs]
    assert got == want


def test_encode_ordinary_matches_hf_without_added_vocab(setup):
    spec = dict(setup["spec"])
    spec["added_tokens"] = []
    hf_plain = tokenizers.Tokenizer.from_str(json.dumps(spec))
    docs = [d for d in setup["docs"] if "<" in d or "｜" in d][:400]
    tmp, exe = setup["tmp"], setup["exe"]
    _write_texts(tmp / "plain.bin", docs)
    _run(exe, "encode", setup["path"], tmp / "plain.bin", tmp / "plain_ids.bin", "--ordinary")
    assert _read_ids(tmp / "plain_ids.bin") == [e.ids for e in hf_plain.encode_batch(docs)]


def test_bad_tokenizer_files_are_rejected(setup, tmp_path):
    exe = setup["exe"]
    cases = {
        "not_json.json": "{ this is not json",
        "unknown_model.json": json.dumps({**setup["spec"], "model": {"type": "WordPiece", "vocab": {}}}),
        "unknown_pretok.json": json.dumps({**setup["spec"], "pre_tokenizer": {"type": "Metaspace"}}),
        "unknown_decoder.json": json.dumps({**setup["spec"], "decoder": {"type": "WordPiece"}}),
        "nfkc.json": json.dumps({**setup["spec"], "normalizer": {"type": "NFKC"}}),
    }
    _write_texts(tmp_path / "in.bin", ["hello"])
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        r = subprocess.run([str(exe), "encode", str(tmp_path / name), str(tmp_path / "in.bin"),
                            str(tmp_path / "o.bin")], capture_output=True, text=True)
        assert r.returncode == 1 and "deepinfer_tokenize:" in r.stderr, (name, r.stderr)


def _variant_matches_hf(setup, spec, docs, label):
    tmp, exe = setup["tmp"], setup["exe"]
    path = tmp / f"variant_{label}.json"
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    _write_texts(tmp / "variant_docs.bin", docs)
    _run(exe, "encode", path, tmp / "variant_docs.bin", tmp / "variant_ids.bin")
    hf = tokenizers.Tokenizer.from_str(json.dumps(spec))
    ours, theirs = _read_ids(tmp / "variant_ids.bin"), [e.ids for e in hf.encode_batch(docs)]
    bad = [i for i in range(len(docs)) if ours[i] != theirs[i]]
    assert not bad, f"{label}: {len(bad)} docs differ, first {docs[bad[0]][:120]!r}"


def _small_spec(spec, n_keep=8000):
    """The spec with its vocabulary cut to ids < n_keep (plus the 256 byte tokens) and the
    merges that stay inside it: same pipeline, much faster to load for variant tests."""
    spec = json.loads(json.dumps(spec))
    vocab = spec["model"]["vocab"]
    keep = {t: i for t, i in vocab.items() if i < n_keep or len(t) == 1}
    merges = []
    for m in spec["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in keep and b in keep and a + b in keep:
            merges.append(m)
    spec["model"]["vocab"], spec["model"]["merges"] = keep, merges
    return spec


def test_split_behaviors_and_byte_level_regex_match_hf(setup):
    """Pre-tokenizer options DeepSeek files do not use but we accept: every Split
    behavior with and without invert, a String pattern, ByteLevel(use_regex=true)."""
    if setup["name"] != "v4":
        pytest.skip("run for one tokenizer only")
    docs = corpus.make_corpus(99, 60_000, [], ("english", "digits", "whitespace", "code", "unicode"))
    small = _small_spec(setup["spec"])
    for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        for invert in [False, True]:
            spec = json.loads(json.dumps(small))
            step = spec["pre_tokenizer"]["pretokenizers"][0]
            step["behavior"], step["invert"] = behavior, invert
            _variant_matches_hf(setup, spec, docs, f"{behavior}_{invert}")
    spec = json.loads(json.dumps(small))
    spec["pre_tokenizer"]["pretokenizers"][1] = {"type": "Split", "pattern": {"String": "e "},
                                                 "behavior": "MergedWithNext", "invert": False}
    _variant_matches_hf(setup, spec, docs, "string_pattern")
    spec = json.loads(json.dumps(small))
    spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True}
    _variant_matches_hf(setup, spec, docs, "gpt2_byte_level")


def test_added_token_flags_match_hf(setup):
    """lstrip / rstrip / single_word / normalized on added tokens (DeepSeek files set none
    of them): flip them on a few tokens and compare on text full of added tokens."""
    if setup["name"] != "v4":
        pytest.skip("run for one tokenizer only")
    spec = _small_spec(setup["spec"])
    flags = {"<｜User｜>": "lstrip", "<｜Assistant｜>": "rstrip", "<think>": "single_word",
             "</think>": "single_word", "｜DSML｜": "lstrip", "<｜end▁of▁sentence｜>": "rstrip"}
    for t in spec["added_tokens"]:
        if t["content"] in flags:
            t[flags[t["content"]]] = True
        if t["content"] == "<｜begin▁of▁sentence｜>":
            t["normalized"] = True
    added = list(flags) + ["<｜begin▁of▁sentence｜>", "<｜tool▁sep｜>"]
    r = random.Random(5)
    docs = []
    for _ in range(400):
        parts = []
        for _ in range(r.randint(1, 12)):
            parts.append(r.choice(["", " ", "  ", "\n", "\t \n", "x", "word", "字", "1", "_", "é", "\u3000"]))
            parts.append(r.choice(added))
        parts.append(r.choice(["", " ", "  x", "\n", "y"]))
        docs.append("".join(parts))
    _variant_matches_hf(setup, spec, docs, "flags")
