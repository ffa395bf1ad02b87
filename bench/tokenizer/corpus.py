"""Synthetic multilingual corpus for the tokenizer acceptance test and benchmark.

make_corpus(seed, target_bytes, added_tokens) returns a list of documents (str) that
together hold at least target_bytes of UTF-8: English prose, Chinese, Japanese, Korean,
source code, emoji with ZWJ / skin-tone / flag / keycap sequences, digit runs, whitespace
runs (incl. NBSP, U+3000, U+2028, U+0085), mixed \\r\\n / \\n / \\r newlines, every added token
spelling embedded in text (and near-miss spellings), random Unicode from all planes (any scalar
value, with extra weight on assigned code points), and a few long documents
(long words and whitespace runs that exercise long BPE words).
Deterministic for a given seed.
"""
import random
import unicodedata

_WORDS = (
    "the of and to in is was that for it with as his on be at by had are but from not this have they "
    "which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do "
    "first any my now such like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people Mr how too little "
    "state good very make world still own see men work long get here between both life being under never "
    "day same another know while last might us great old year off come since against go came right used "
    "take three tokenizer inference DeepSeek transformer attention Überprüfung naïve café résumé"
).split()
_CONTRACTIONS = ["don't", "it's", "I'll", "we've", "they're", "she'd", "I'm", "can't", "O'Brien", "'quoted'"]
_PUNCT = [".", ",", "!", "?", ";", ":", "...", " -", " —", "\"", "(", ")", "[", "]", "'", "&", "%", "$", "#", "@"]
_CODE = [
    "def {f}(x, y=None):\n    \"\"\"Docstring.\"\"\"\n    if x is None:\n        return {{'a': [1, 2, 3]}}\n    return x ** 2 + y\n",
    "#include <vector>\nint {f}(const std::vector<int>& v) {{\n\tint s = 0;\n\tfor (auto x : v) s += x;  // sum\n\treturn s;\n}}\n",
    "const {f} = async (req, res) => {{\n  const {{ id }} = req.params;\n  res.json({{ ok: true, id }});\n}};\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%{f}%' ORDER BY id DESC;\n",
    "{{\"name\": \"{f}\", \"values\": [1.5e-3, -2, 3.14159], \"nested\": {{\"k\": null, \"t\": true}}}}\n",
    "fn {f}<'a>(s: &'a str) -> Option<&'a str> {{ s.split_whitespace().next() }}\n",
    "<div class=\"{f}\">\n  <p>Hello&nbsp;world</p>\n</div>\n",
    "    x_{f} = np.array([[1,2],[3,4]]) @ W.T  # matmul\r\n",
]
_EMOJI = [
    "😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🏴‍☠️", "🇯🇵", "🇺🇸", "1️⃣", "❤️", "🧑‍🤝‍🧑", "🐕‍🦺",
    "👁️‍🗨️", "🤷‍♀️", "✊🏿", "🫠", "🥲", "😶‍🌫️", "🏃‍➡️",
]
_SPACES = [" ", "  ", "   ", "\t", "\u00a0", "\u3000", "\u2028", "\u0085", "\u2003", " \t ", "\u200b", "\u180e"]
_NEWLINES = ["\n", "\r\n", "\r", "\n\n", "\r\n\r\n", "\n\r", " \n", "\n ", "\r\r\n"]


def _assigned_codepoints():
    cps = []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        if unicodedata.category(chr(cp)) != "Cn":
            cps.append(cp)
    return cps


_ASSIGNED = None


def _english(r, n):
    out = []
    for i in range(n):
        w = r.choice(_WORDS) if r.random() > 0.08 else r.choice(_CONTRACTIONS)
        if r.random() < 0.1:
            w = w.capitalize()
        if r.random() < 0.03:
            w = w.upper()
        out.append(w)
        if r.random() < 0.12:
            out.append(r.choice(_PUNCT))
        if r.random() < 0.02:
            out.append(r.choice(_NEWLINES))
    return " ".join(out)


def _cjk(r, n, lo, hi, punct):
    s = []
    for _ in range(n):
        x = r.random()
        if x < 0.8:
            s.append(chr(r.randint(lo, hi)))
        elif x < 0.92:
            s.append(r.choice(punct))
        elif x < 0.96:
            s.append(r.choice(["AI", "GPU", " 2024年", "v4", " ", "123", "Python"]))
        else:
            s.append(r.choice(_NEWLINES))
    return "".join(s)


def _japanese(r, n):
    s = []
    for _ in range(n):
        x = r.random()
        if x < 0.4:
            s.append(chr(r.randint(0x3041, 0x3096)))
        elif x < 0.65:
            s.append(chr(r.randint(0x30A1, 0x30FA)))
        elif x < 0.85:
            s.append(chr(r.randint(0x4E00, 0x9FA5)))
        elif x < 0.95:
            s.append(r.choice(["。", "、", "「", "」", "ー", "！", "？", "・", "ｶﾀｶﾅ", "ゝ"]))
        else:
            s.append(r.choice(_NEWLINES + [" "]))
    return "".join(s)


def _korean(r, n):
    s = []
    for _ in range(n):
        word = "".join(chr(r.randint(0xAC00, 0xD7A3)) for _ in range(r.randint(1, 5)))
        s.append(word)
        s.append(r.choice([" ", " ", " ", ". ", ", ", "\n", "? ", "ㅋㅋ "]))
    return "".join(s)


def _code(r, n):
    return "".join(r.choice(_CODE).format(f="fn_%d" % r.randint(0, 999)) for _ in range(n))


def _emoji(r, n):
    return "".join(r.choice(_EMOJI) + (r.choice(_SPACES + ["", "", "a", "文"]) if r.random() < 0.5 else "")
                   for _ in range(n))


def _digits(r, n):
    s = []
    for _ in range(n):
        k = r.choice([1, 2, 3, 4, 5, 7, 10, 16, 40])
        d = "".join(r.choice("0123456789") for _ in range(k))
        if r.random() < 0.1:
            d = "".join(r.choice("٠١٢٣٤٥٦٧٨٩０１２３４５６７８９①②½²") for _ in range(k))
        s.append(d + r.choice([" ", ".", ",", "", "-", "/", ":", "e", "x", "\n", "%", " 年"]))
    return "".join(s)


def _whitespace(r, n):
    s = []
    for _ in range(n):
        s.append(r.choice(_SPACES) * r.randint(1, 12))
        s.append(r.choice(["word", "字", "", "!", "1", "\n", "é"]))
        if r.random() < 0.3:
            s.append(r.choice(_NEWLINES) * r.randint(1, 4))
    return "".join(s)


def _newlines(r, n):
    return "".join(_english(r, r.randint(1, 6)) + r.choice(_NEWLINES) for _ in range(n))


def _specials(r, n, added_tokens):
    s = []
    for _ in range(n):
        t = r.choice(added_tokens)
        x = r.random()
        if x < 0.15 and len(t) > 2:
            t = t[: r.randint(1, len(t) - 1)]  # near miss: a prefix only
        elif x < 0.25:
            t = t + t
        s.append(r.choice(["", " ", "  ", "\n", "word", "中", "1", "<", "｜"]) + t)
        if r.random() < 0.5:
            s.append(_english(r, r.randint(0, 4)))
    return "".join(s)


def _random_unicode(r, n):
    global _ASSIGNED
    if _ASSIGNED is None:
        _ASSIGNED = _assigned_codepoints()
    s = []
    for _ in range(n):
        x = r.random()
        if x < 0.35:
            s.append(chr(r.choice(_ASSIGNED)))
        elif x < 0.6:
            cp = r.randrange(0x110000 - 0x800)
            s.append(chr(cp + 0x800 if cp >= 0xD800 else cp))  # any scalar value
        elif x < 0.75:
            s.append(chr(r.randint(0x20, 0x7E)))
        elif x < 0.85:
            s.append(chr(r.choice(_ASSIGNED[-60000:])))  # astral planes, private use
        else:
            s.append(r.choice(_SPACES + _NEWLINES + ["\u0301", "\u200d", "\ufe0f", "\ufffd", "\x00", "\x7f"]))
    return "".join(s)


def _long(r):
    kind = r.randint(0, 4)
    if kind == 0:
        return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(200, 3000)))
    if kind == 1:
        return " " * r.randint(100, 5000) + "x" + "\n" * r.randint(50, 500)
    if kind == 2:
        import base64
        return base64.b64encode(bytes(r.getrandbits(8) for _ in range(r.randint(500, 4000)))).decode()
    if kind == 3:
        return "".join(chr(r.randint(0xAC00, 0xD7A3)) for _ in range(r.randint(200, 2000)))
    return "-" * r.randint(100, 2000) + "=" * 300 + "ab" * 500


KINDS = ("english", "chinese", "japanese", "korean", "code", "emoji", "digits", "whitespace", "newlines",
         "specials", "unicode")


def make_corpus(seed, target_bytes, added_tokens=(), kinds=KINDS):
    """All kinds (the default) also adds each added token alone, long documents and mixed
    documents; a subset of kinds gives documents of only those kinds."""
    r = random.Random(seed)
    added_tokens = list(added_tokens) or ["<|endoftext|>"]
    all_makers = {
        "english": lambda: _english(r, r.randint(20, 600)),
        "chinese": lambda: _cjk(r, r.randint(20, 800), 0x4E00, 0x9FA5, "，。！？、：；「」（）《》"),
        "japanese": lambda: _japanese(r, r.randint(20, 800)),
        "korean": lambda: _korean(r, r.randint(10, 300)),
        "code": lambda: _code(r, r.randint(1, 12)),
        "emoji": lambda: _emoji(r, r.randint(5, 200)),
        "digits": lambda: _digits(r, r.randint(5, 200)),
        "whitespace": lambda: _whitespace(r, r.randint(5, 200)),
        "newlines": lambda: _newlines(r, r.randint(5, 100)),
        "specials": lambda: _specials(r, r.randint(5, 100), added_tokens),
        "unicode": lambda: _random_unicode(r, r.randint(10, 1500)),
    }
    makers = [all_makers[k] for k in kinds]
    full = tuple(kinds) == KINDS
    docs = [t for t in added_tokens] if full else []  # each added token alone
    total = sum(len(d.encode()) for d in docs)
    while total < target_bytes:
        if not full:
            d = r.choice(makers)()
        elif r.random() < 0.01:
            d = _long(r)
        elif r.random() < 0.2:
            d = "".join(r.choice(makers)() for _ in range(r.randint(2, 5)))  # mixed document
        else:
            d = r.choice(makers)()
        docs.append(d)
        total += len(d.encode())
    return docs
