"""Regex suite: our regex grammars against Python's `re` (fullmatch) as the reference.

For each pattern: (1) outputs of constrained random generation must fullmatch under `re`;
(2) random strings over a small alphabet and random edits of generated matches must get the same
accept/reject answer from our matcher as from `re.fullmatch`. Patterns keep to the part of the
syntax where ECMA-262 (our semantics) and Python agree under re.ASCII, and the alphabet avoids
characters where they differ (\\r, Unicode spaces).
"""
import random
import re

import pytest

from test_grammar_util import Driver

PATTERNS = [
    r"abc", r"a|bc|", r"[a-c]+x?", r"[^a-c]*", r"\d{2,4}", r"\w+\s\W", r"a{3}", r"a{2,}b{0,2}",
    r"(ab|cd)*e", r"(a|ab)(c|bcd)(d*)", r"[0-9]+(\.[0-9]{1,2})?", r"-?(0|[1-9][0-9]*)",
    r"[a-z]+@[a-z]+\.(com|org)", r".+", r"(x|y|z){1,3}[_\-.]?", r"\s*\d+\s*", r"[\w.-]+",
    r"(a*)*b", r"(?:ab)+|ba", r"é+[ü中]?", r"[^\n]{0,5}", r"^\$\d+$", r"(1|01)*0", r"[A-Z][a-z]*( [A-Z][a-z]*)*",
    r"([01]\d|2[0-3]):[0-5]\d",
]
ALPHABET = list("abcdexyz019_-. \t\n@$:ABZé中ü")
ECMA_SPACE = "\\t\\n\\v\\f\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"


def ecma_reference(pattern):
    """The pattern with ECMA-262 meanings of \\s, \\S and `.` spelled out for Python's `re`
    (generation may produce characters where the two engines disagree)."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            e = pattern[i:i + 2]
            if e == "\\s":
                out.append(ECMA_SPACE if in_class else "[" + ECMA_SPACE + "]")
            elif e == "\\S" and not in_class:
                out.append("[^" + ECMA_SPACE + "]")
            else:
                out.append(e)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        elif c == "." and not in_class:
            c = "[^\\n\\r\\u2028\\u2029]"
        out.append(c)
        i += 1
    return "".join(out)


@pytest.fixture(scope="module")
def driver():
    d = Driver()
    yield d
    d.close()


def mutate(rng, s):
    s = list(s)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(3)
        if op == 0 or not s:
            s.insert(rng.randint(0, len(s)), rng.choice(ALPHABET))
        elif op == 1:
            del s[rng.randrange(len(s))]
        else:
            s[rng.randrange(len(s))] = rng.choice(ALPHABET)
    return "".join(s)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_against_python_re(driver, pattern):
    ref = re.compile(ecma_reference(pattern), re.ASCII)
    r = driver.compile("regex", pattern)
    assert r["ok"], r
    gid = r["id"]
    gen = driver.generate(gid, seed=11, n=8, random_tokens=6, max_tokens=120)
    positives = [o["text"] for o in gen["outputs"] if o["terminated"]]
    assert positives, "no generation terminated"
    for text in positives:
        assert ref.fullmatch(text), f"generated {text!r} does not match {pattern!r}"
    rng = random.Random(pattern)
    cands = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8))) for _ in range(300)]
    cands += [mutate(rng, p[:40]) for p in positives for _ in range(20)]
    cands += [p[:40] for p in positives if len(p) <= 40]
    ours = driver.match(gid, cands)
    mismatches = [(c, o) for c, o in zip(cands, ours) if o != bool(ref.fullmatch(c))]
    assert not mismatches, mismatches[:10]
    n_pos = sum(ours)
    print(f"{pattern!r}: {len(cands)} strings, {n_pos} matches")
