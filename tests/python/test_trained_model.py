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


def _without_default_override():
    env = dict(os.environ)
    env.pop("DEEPINFER_DEFAULT_MODEL", None)  # conftest.py sets it to the random tiny model
    return env


def test_the_default_model_is_the_trained_v41():
    """`deepinfer generate` and `LLM()` without a model run models/trained-v41 (issue 16)."""
    exe = BUILD / "deepinfer"
    r = subprocess.run([str(exe), "generate", "--prompt", "def main():\n", "--max-tokens", "16",
                        "--temperature", "0"], capture_output=True, text=True, timeout=300,
                       env=_without_default_override())
    assert r.returncode == 0, r.stderr
    assert "trained-v41" in r.stderr, r.stderr  # the startup summary names the model
    assert "deepseek_v41" in r.stderr or "V4.1" in r.stderr, r.stderr
    # The same continuation as naming the directory explicitly.
    named = subprocess.run([str(exe), "generate", "--model", str(ROOT / "models" / "trained-v41"), "--prompt",
                            "def main():\n", "--max-tokens", "16", "--temperature", "0"],
                           capture_output=True, text=True, timeout=300)
    assert named.returncode == 0, named.stderr
    assert r.stdout == named.stdout
    py = ("import deepinfer; llm = deepinfer.LLM(); print(llm._engine.model_type); "
          "print(deepinfer._core.default_model())")
    env = _without_default_override()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH")]))
    p = subprocess.run(["python3", "-c", py], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    model_type, path = p.stdout.split()
    assert model_type.startswith("deepseek_v41"), p.stdout
    assert Path(path).resolve() == (ROOT / "models" / "trained-v41").resolve()


def test_the_default_model_can_be_overridden():
    env = _without_default_override()
    env["DEEPINFER_DEFAULT_MODEL"] = "tiny"
    r = subprocess.run([str(BUILD / "deepinfer"), "generate", "--prompt", "hi", "--max-tokens", "2"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "deepinfer-tiny" in r.stderr and "trained-v41" not in r.stderr, r.stderr
