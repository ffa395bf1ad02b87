"""The trained tiny models (models/trained-*, tools/train_tiny.py on the H200; issue 16): for every
trained model directory with a recorded held-out slice (tools/record_heldout_slice.py), the
engine's held-out perplexity on that slice stays within 1% of PyTorch's recorded value in both
numerics, and the model continues Python code with Python-like text."""
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD", ROOT / "build"))
TOOL = BUILD / "tests" / "tools" / "model_logits"
MODELS = sorted(d for d in (ROOT / "models").glob("trained-*") if (d / "heldout_slice.json").exists())

pytestmark = pytest.mark.skipif(not TOOL.exists(), reason=f"{TOOL} not built")


def test_the_trained_models_are_present():
    names = [d.name for d in MODELS]
    assert "trained-v41" in names, names  # the built-in default


@pytest.mark.parametrize("numerics", ["reference", "official"])
@pytest.mark.parametrize("model", MODELS, ids=[d.name for d in MODELS])
def test_heldout_perplexity_matches_the_recorded_value(tmp_path, model, numerics):
    record = json.loads((model / "heldout_slice.json").read_text())
    out = subprocess.run([str(TOOL), "--model", str(model), "--ids", str(model / "heldout_slice.txt"),
                          "--out", str(tmp_path / numerics), "--numerics", numerics, "--full-logits", "0"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["sequences"] == record["windows"]
    assert result["tokens"] == record["windows"] * record["seq_len"]
    ppl = math.exp(result["nll_sum"] / result["tokens"])
    want = record[numerics]["ppl"]
    assert abs(ppl / want - 1) < 0.01, (model.name, numerics, ppl, want)


@pytest.mark.parametrize("model", MODELS, ids=[d.name for d in MODELS])
def test_continues_python_code(model):
    exe = BUILD / "deepinfer"
    prompt = "import os\n\n\ndef read_lines(path):\n"
    r = subprocess.run([str(exe), "generate", "--model", str(model), "--prompt", prompt, "--max-tokens", "48"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    # Python-like: indentation and at least one Python keyword or builtin in the continuation.
    assert "\n    " in text or text.startswith("    "), text
    assert any(word in text for word in ("return", "if ", "for ", "with ", "open(", "self", "=")), text
