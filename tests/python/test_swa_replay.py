"""SWA bounded replay through the front ends (--swa-bounded-replay[=KEEP], LLM(swa_bounded_replay=...);
model/swa_replay.h): the built-in tiny V4.1 model (window 128) generates with it; KEEP covering the
prompt gives the output of a run without it; a chunked prefill gives the unchunked one's output;
prefix caching is off with it; refusals name the flag (V4 has no ratio-1 source, KEEP below the
window + rollback depth)."""
import os
import random
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD", ROOT / "build"))
EXE = BUILD / "deepinfer"

random.seed(5)
LONG = [random.randrange(3, 4000) for _ in range(400)]


def run(*args, timeout=300):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=timeout)


def ids(tokens):
    return ",".join(map(str, tokens))


@pytest.mark.skipif(not EXE.exists(), reason=f"{EXE} not built")
def test_cli_flag():
    args = ("generate", "--model", "tiny-v4.1", "--max-tokens", "4", "--speculative-method", "none")
    short = ("--prompt-ids", ids(LONG[:100]))
    plain = run(*args, *short)
    keep_all = run(*args, *short, "--swa-bounded-replay")  # KEEP 140 >= 100 prompt tokens
    assert plain.returncode == 0 and keep_all.returncode == 0, plain.stderr + keep_all.stderr
    assert keep_all.stdout == plain.stdout
    long = run(*args, "--prompt-ids", ids(LONG), "--swa-bounded-replay=134")
    assert long.returncode == 0, long.stderr
    bad = run(*args, *short, "--swa-bounded-replay=100")
    assert bad.returncode != 0 and "--swa-bounded-replay" in bad.stderr and "128" in bad.stderr
    v4 = run("generate", "--model", "tiny", "--max-tokens", "2", *short, "--swa-bounded-replay")
    assert v4.returncode != 0 and "ratio-1" in v4.stderr, v4.stderr
    assert "--swa-bounded-replay" in run("generate", "--help").stdout


def test_llm_chunked_equals_unchunked_and_no_prefix_cache():
    pytest.importorskip("deepinfer")
    import deepinfer

    sp = deepinfer.SamplingParams(temperature=0, max_tokens=6)
    out = {}
    for chunk in (2048, 48):
        llm = deepinfer.LLM("tiny-v4.1", swa_bounded_replay=True, batch_invariant=True,
                            max_num_batched_tokens=chunk, speculative_method="none")
        out[chunk] = llm.generate(prompt_token_ids=[LONG], sampling_params=sp)[0].token_ids
        llm.generate(prompt_token_ids=[LONG], sampling_params=sp)
        assert llm.stats().prefix_cache_queries == 0  # prefix caching is off with replay
    assert out[48] == out[2048]
    with pytest.raises(deepinfer.Error, match="ratio-1"):
        deepinfer.LLM("tiny", swa_bounded_replay=140)
