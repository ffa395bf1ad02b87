"""The fixed JSONSchemaBench sample shared by test_grammar_jsonschemabench.py (grammar driver)
and test_structured_jsonschemabench.py (engine), and the PyPI `jsonschema` reference validator.
No tests live here.
"""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO.parent / "shared" / "fixtures" / "jsonschemabench" / "data"
N_SAMPLE = 500


def sample_files(offset=0):
    """Every k-th schema file of BENCH (sorted by folder, then name), N_SAMPLE of them, starting
    at index `offset` (0: the CI sample; any 0 < offset < k gives a disjoint sample of the same
    size, e.g. k // 2 for the held-out check of the engine test)."""
    files = sorted(p for d in sorted(BENCH.iterdir()) for p in sorted(d.glob("*.json")))
    step = max(1, len(files) // N_SAMPLE)
    assert 0 <= offset < step, (offset, step)
    return files[offset::step][:N_SAMPLE]


def sample_step():
    """k of sample_files()."""
    n = sum(1 for d in BENCH.iterdir() for _ in d.glob("*.json"))
    return max(1, n // N_SAMPLE)


def reference_validator(schema):
    """jsonschema's validator for the draft the schema declares (2020-12 by default), formats checked."""
    import jsonschema  # imported here: callers decide whether a missing jsonschema skips or fails

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)
