"""Corpus and tokenizer of the trained tiny models (tools/train_tiny.py; issue 16).

Corpus: the Python sources of the standard library of the interpreter that runs this script
(`sysconfig.get_paths()["stdlib"]`: /usr/lib/python3.12 on the GPU machine, pyenv's 3.11 here),
every `*.py` below it except site-packages / dist-packages, read as UTF-8 (files that are not are
skipped and counted), deduplicated by content (sha256; the first relative path in sorted order is
kept), and split by file: a file is held out iff int(sha256(relative path)[:8], 16) % 20 == 0
(about 5%), so the split does not depend on the order of the walk or on the other files.

Tokenizer (`train_tokenizer`): a byte-level BPE trained on the training files with HF `tokenizers`,
with DeepSeek's pre-tokenizer (the three Split regexes + ByteLevel of models/tiny/tokenizer.json,
so the engine's tokenizer reads it) and DeepSeek's special and chat-template tokens first:
ids 0/1/2 = <｜begin▁of▁sentence｜> / <｜end▁of▁sentence｜> / <｜▁pad▁｜> (as in DeepSeek's
vocabulary), then every named added token of models/tiny/tokenizer.json (FIM, User/Assistant,
tool calls, <think>, DSML, ...; not the ~1200 place-holders (`place` in the name)) and V4.1's <｜System｜> (the DSpark
noise token) and <｜deepseek_image｜>. Documents are `<bos> file text <eos>`.
"""

import hashlib
import json
import os
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEEPSEEK_TOKENIZER = os.path.join(ROOT, "models", "tiny", "tokenizer.json")
BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
V41_EXTRA = ["<｜System｜>", "<｜deepseek_image｜>"]
HELD_OUT_MODULUS = 20


def stdlib_dir():
    return os.path.realpath(sysconfig.get_paths()["stdlib"])


def held_out(relpath):
    return int(hashlib.sha256(relpath.encode()).hexdigest()[:8], 16) % HELD_OUT_MODULUS == 0


def collect(root=None):
    """-> dict(root, train=[(relpath, text)], held_out=[...], stats)."""
    root = root or stdlib_dir()
    paths = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
        for f in files:
            if f.endswith(".py"):
                paths.append(os.path.relpath(os.path.join(d, f), root))
    paths.sort()
    seen, train, held = {}, [], []
    n_binary = n_dup = 0
    for rel in paths:
        with open(os.path.join(root, rel), "rb") as fh:
            raw = fh.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            n_binary += 1
            continue
        h = hashlib.sha256(raw).hexdigest()
        if h in seen:
            n_dup += 1
            continue
        seen[h] = rel
        (held if held_out(rel) else train).append((rel, text))
    stats = dict(root=root, files_found=len(paths), not_utf8=n_binary, duplicates=n_dup,
                 train_files=len(train), held_out_files=len(held),
                 train_bytes=sum(len(t.encode()) for _, t in train),
                 held_out_bytes=sum(len(t.encode()) for _, t in held))
    return dict(root=root, train=train, held_out=held, stats=stats)


def special_tokens():
    t = json.load(open(DEEPSEEK_TOKENIZER, encoding="utf-8"))
    named = [a["content"] for a in sorted(t["added_tokens"], key=lambda a: a["id"])
             if "place" not in a["content"] and a["content"] not in (BOS, EOS, PAD)]
    out = [BOS, EOS, PAD]
    for s in named + V41_EXTRA:
        if s not in out:
            out.append(s)
    return out


def train_tokenizer(train_texts, vocab_size, out_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

    ds = json.load(open(DEEPSEEK_TOKENIZER, encoding="utf-8"))
    tok = Tokenizer(models.BPE())
    specials = special_tokens()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    # DeepSeek's pre-tokenizer, taken verbatim from its tokenizer.json.
    tmp = json.loads(tok.to_str())
    tmp["pre_tokenizer"] = ds["pre_tokenizer"]
    tmp["decoder"] = ds["decoder"]
    tok = Tokenizer.from_str(json.dumps(tmp))
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(train_texts, trainer=trainer)
    data = json.loads(tok.to_str())
    data["decoder"] = ds["decoder"]
    data["post_processor"] = None
    for a in data["added_tokens"]:
        # BOS/EOS/PAD are special (skipped on decode) as in DeepSeek's file; the chat tokens are not.
        a["special"] = a["content"] in (BOS, EOS, PAD)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    return out_path


def tokenizer_config(path):
    def added(s):
        return {"__type": "AddedToken", "content": s, "lstrip": False, "normalized": True,
                "rstrip": False, "single_word": False}
    cfg = {"add_bos_token": False, "add_eos_token": False, "bos_token": added(BOS),
           "clean_up_tokenization_spaces": False, "eos_token": added(EOS), "legacy": True,
           "model_max_length": 1048576, "pad_token": added(EOS), "sp_model_kwargs": {},
           "unk_token": None, "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)


def load_tokenizer(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)


def encode_docs(tok, docs):
    """docs [(rel, text)] -> list of id lists, each <bos> text <eos>."""
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    encs = tok.encode_batch([t for _, t in docs], add_special_tokens=False)
    return [[bos] + e.ids + [eos] for e in encs]
