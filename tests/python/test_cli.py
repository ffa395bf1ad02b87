"""The deepinfer CLI: generation with the tiny model and golden checkpoints, and clear
errors (exit code 1, a message naming the culprit, never a crash) on bad input."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD", ROOT / "build"))
EXE = BUILD / "deepinfer"
GOLDEN = ROOT / "tests" / "data" / "golden"

pytestmark = pytest.mark.skipif(not EXE.exists(), reason=f"{EXE} not built")


def run(*args, timeout=300):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=timeout)


def test_generate_with_tiny_model_prints_text_and_speed():
    r = run("generate", "--prompt", "Hello, world", "--max-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "no text generated"
    assert "tok/s" in r.stderr


def test_seeded_sampling_is_reproducible():
    args = ("generate", "--prompt-ids", "0,100,200,300", "--max-tokens", "8", "--temperature", "1.0",
            "--top-p", "0.9", "--seed", "5")
    assert run(*args).stdout == run(*args).stdout


def test_golden_checkpoint_generates():
    r = run("generate", "--model", str(GOLDEN / "mixed_quant" / "native"), "--prompt-ids", "1,2,3",
            "--max-tokens", "4", "--numerics", "reference")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("[") == 4  # no tokenizer.json: ids are printed


@pytest.mark.parametrize("args,needle", [
    (("generate", "--prompt-ids", "1,2,999999"), "outside the vocabulary"),
    (("generate", "--prompt-ids", "1,x"), "is not a token id"),
    (("generate", "--prompt", "hi", "--temperature", "-1"), "temperature"),
    (("generate", "--bogus", "1"), "unknown option --bogus"),
    (("generate", "--model", "/nonexistent/dir", "--prompt-ids", "1"), "/nonexistent/dir"),
])
def test_bad_arguments_fail_cleanly(args, needle):
    r = run(*args)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr


def test_corrupt_checkpoint_names_the_problem(tmp_path):
    src = GOLDEN / "swa" / "hf"
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    data = (dst / "model.safetensors").read_bytes()
    (dst / "model.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    r = run("generate", "--model", str(dst), "--prompt-ids", "1")
    assert r.returncode == 1 and "model.safetensors" in r.stderr, r.stderr


def test_wrong_shape_names_the_tensor(tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(GOLDEN / "swa" / "hf", dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["q_lora_rank"] = cfg["q_lora_rank"] * 2
    (dst / "config.json").write_text(json.dumps(cfg))
    r = run("generate", "--model", str(dst), "--prompt-ids", "1")
    assert r.returncode == 1 and "has shape" in r.stderr, r.stderr


def test_inconsistent_config_is_rejected(tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(GOLDEN / "swa" / "hf", dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["layer_types"] = cfg["layer_types"] + ["sliding_attention"]
    (dst / "config.json").write_text(json.dumps(cfg))
    r = run("generate", "--model", str(dst), "--prompt-ids", "1")
    assert r.returncode == 1 and "layer_types" in r.stderr, r.stderr
