"""The fixed JSONSchemaBench sample shared by test_grammar_jsonschemabench.py (grammar driver)
and test_structured_jsonschemabench.py (engine), and the PyPI `jsonschema` reference validator.
No tests live here.
"""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO.parent / "shared" / "fixtures" / "jsonschemabench" / "data"
N_SAMPLE = 500


def sample_files():
    """Every k-th schema file of BENCH (sorted by folder, then name), N_SAMPLE of them."""
    files = sorted(p for d in sorted(BENCH.iterdir()) for p in sorted(d.glob("*.json")))
    step = max(1, len(files) // N_SAMPLE)
    return files[::step][:N_SAMPLE]


def reference_validator(schema):
    """jsonschema's validator for the draft the schema declares (2020-12 by default), formats checked."""
    import jsonschema  # imported here: callers decide whether a missing jsonschema skips or fails

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)
