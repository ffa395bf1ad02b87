"""Speculative decoding through the command line, the server and Python (issue 15 deliverable 5):
--speculative-method / --num-speculative-tokens / --spec-scheduling on generate, serve and
bench, and speculative_method=... in deepinfer.LLM.

The reference for every output is the same command with --speculative-method none (the plain
generate loop, or the engine without drafts): greedy speculative output must equal it token for
token. Checkpoints: the golden tiny V4.1 with a DSpark drafter and the golden tiny V4 with an
MTP module (random weights, no tokenizer: token-id prompts; serve detokenizes with
models/tiny/tokenizer.json). The drafters are random, so acceptance is near 0: these tests
check that drafts are verified and counted, not how many are accepted.
"""
import http.client
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD", ROOT / "build"))
EXE = BUILD / "deepinfer"
DSPARK = ROOT / "tests" / "data" / "golden_v41" / "dspark_quant" / "fp8"
MTP = ROOT / "tests" / "data" / "golden_mtp" / "model"
TINY_TOKENIZER = ROOT / "models" / "tiny" / "tokenizer.json"
PROMPT = "3,14,15,9,26,5,35"

pytestmark = pytest.mark.skipif(not EXE.exists(), reason=f"{EXE} not built")

CHECKPOINTS = [pytest.param(DSPARK, "dspark", 5, id="dspark"), pytest.param(MTP, "mtp", 1, id="mtp")]


def run(*args, timeout=300):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=timeout)


def speculative_line(stderr):
    m = re.search(r"^  speculative\s{2,}(.*)$", stderr, re.M)
    assert m, "no speculative line in:\n" + stderr
    return m.group(1)


def generate(model, *flags):
    r = run("generate", "--model", str(model), "--prompt-ids", PROMPT, "--max-tokens", "40", "--ignore-eos", *flags)
    assert r.returncode == 0, r.stderr
    tokens = [int(t) for t in re.findall(r"\[(\d+)\]", r.stdout)]
    assert len(tokens) == 40, r.stdout
    return tokens, r.stderr


@pytest.mark.parametrize("model,method,k", CHECKPOINTS)
def test_generate_speculative_equals_none(model, method, k):
    plain, err = generate(model, "--speculative-method", "none")
    assert speculative_line(err) == "none"
    assert "plain generate loop" in err
    for flags in (["--speculative-method", "auto"], ["--speculative-method", method],
                  ["--speculative-method", method, "--spec-scheduling", "confidence"]):
        tokens, err = generate(model, *flags)
        assert tokens == plain, flags
        line = speculative_line(err)
        assert line.startswith(method), line
        assert f"{k} draft" in line and ("confidence" in line) == ("confidence" in flags), line
    if method == "dspark":
        tokens, err = generate(model, "--num-speculative-tokens", "3")
        assert tokens == plain
        assert "3 drafts per verification" in speculative_line(err)


def test_generate_without_drafter_auto_is_plain():
    r = run("generate", "--prompt-ids", "1,2,3", "--max-tokens", "4")
    assert r.returncode == 0, r.stderr
    assert speculative_line(r.stderr) == "none (auto: the checkpoint has no drafter)"


@pytest.mark.parametrize("model,flags,message", [
    (MTP, ["--speculative-method", "dspark"], "speculative_method dspark, but the model on cpu (official) has a mtp drafter"),
    (DSPARK, ["--speculative-method", "mtp"], "speculative_method mtp, but the model on cpu (official) has a dspark drafter"),
    (None, ["--speculative-method", "mtp"], "speculative_method mtp, but the model on cpu (official) has no drafter"),
    (DSPARK, ["--speculative-method", "eagle"], "--speculative-method must be auto, dspark, mtp or none, got 'eagle'"),
    (DSPARK, ["--spec-scheduling", "greedy"], "--spec-scheduling must be fixed or confidence, got 'greedy'"),
    (DSPARK, ["--num-speculative-tokens", "-1"], "--num-speculative-tokens must be >= 0"),
    (DSPARK, ["--num-speculative-tokens", "6"], "6 speculative tokens, but the DSpark drafter drafts blocks of 5"),
    (DSPARK, ["--speculative-method", "none", "--num-speculative-tokens", "2"], "need speculative decoding"),
])
def test_bad_speculative_options_are_clear_errors(model, flags, message):
    for command in ("generate", "bench"):
        args = [command] + (["--model", str(model)] if model else []) + flags
        args += ["--prompt-ids", "1,2"] if command == "generate" else ["--num-prompts", "1", "--input-len", "2"]
        r = run(*args)
        assert r.returncode == 1, (command, r.stdout, r.stderr)
        assert message in r.stderr, (command, r.stderr)


def test_bench_refuses_speculative_flags_for_a_server():
    r = run("bench", "--base-url", "http://127.0.0.1:9", "--speculative-method", "none")
    assert r.returncode == 1 and "--speculative-method configures the in-process engine" in r.stderr


def bench(model, *flags):
    r = run("bench", "--model", str(model), "--input-len", "8", "--output-len", "12", "--num-prompts", "4",
            "--concurrency", "2", "--no-overlap-table", *flags)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def spec_block(stdout):
    m = re.search(r"-+Speculative Decoding-+\n((?:.*\n)*?)=+\n", stdout)
    return None if m is None else dict(re.match(r"(.*?):\s+(.*)", l).groups() for l in m.group(1).splitlines())


@pytest.mark.parametrize("model,method,k", CHECKPOINTS)
def test_bench_prints_acceptance(model, method, k):
    r = bench(model)
    assert speculative_line(r.stderr).startswith(f"{method} (auto), {k} draft")
    assert "deepinfer bench: startup summary" in r.stderr
    block = spec_block(r.stdout)
    assert block is not None, r.stdout
    drafts, draft_tokens, accepted = (int(block[k_]) for k_ in ("Drafts", "Draft tokens", "Accepted tokens"))
    # 4 requests of 12 outputs: every output after the first comes from a verification step.
    assert drafts >= 4 * 11 // (k + 1) and k * drafts >= draft_tokens >= drafts
    assert float(block["Acceptance length"]) == pytest.approx(1 + accepted / drafts, abs=0.006)
    assert float(block["Acceptance rate (%)"]) == pytest.approx(100 * accepted / draft_tokens, abs=0.006)
    per_pos = [float(x) for x in block["Per-position acceptance (%)"].split(",")]
    assert len(per_pos) == k and all(0 <= p <= 100 for p in per_pos)
    assert 1 <= float(block["Verified tokens per step"]) <= 2 * (k + 1)
    assert 0 < float(block["Draft time share (%)"]) < 100
    # Greedy, EOS ignored: the same number of tokens with speculative decoding off, and no block.
    off = bench(model, "--speculative-method", "none")
    assert spec_block(off.stdout) is None and speculative_line(off.stderr) == "none"
    total = re.compile(r"Total generated tokens:\s+(\d+)")
    assert total.findall(off.stdout) == total.findall(r.stdout) == ["48"]


class Server:
    def __init__(self, model, *flags):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.proc = subprocess.Popen([str(EXE), "serve", "--port", "0", "--model", str(model),
                                      "--tokenizer", str(TINY_TOKENIZER), "--served-model-name", "spec", *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        self.port = None
        while time.time() < deadline and self.port is None:
            m = re.search(r"serving \S+ on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise AssertionError(self.text())
            time.sleep(0.1)
        assert self.port, self.text()

    def text(self):
        return open(self.log.name).read()

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read().decode()
        conn.close()
        assert resp.status == 200, data
        return data

    def complete(self, prompt):
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        return json.loads(self.request("POST", "/v1/completions", body))["choices"][0]["text"]

    def metrics(self):
        values = {}
        for line in self.request("GET", "/metrics").splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        os.unlink(self.log.name)


@pytest.mark.parametrize("model,method,k", CHECKPOINTS)
def test_serve_speculative_equals_none_and_counts(model, method, k):
    prompts = [[3, 14, 15, 9, 26], [5, 35, 8, 9, 7, 9, 3, 2]]
    off = Server(model, "--speculative-method", "none")
    try:
        expected = [off.complete(p) for p in prompts]
        assert not any(name.startswith(("deepinfer_spec_", "vllm:spec_decode")) for name in off.metrics())
        assert re.search(r"^  speculative\s+none$", off.text(), re.M)
    finally:
        off.stop()
    on = Server(model, "--speculative-method", method)
    try:
        assert re.search(rf"^  speculative\s+{method}, {k} draft", on.text(), re.M), on.text()
        before = on.metrics()
        assert before["deepinfer_spec_verifications_total"] == 0
        assert before["deepinfer_spec_num_speculative_tokens"] == k
        assert [on.complete(p) for p in prompts] == expected
        m = on.metrics()
        labels = '{model_name="spec",engine="0"}'
        n = m["deepinfer_spec_verifications_total"]
        assert n >= 2 * 23 // (k + 1)  # 2 requests of 24 outputs, at most k + 1 per verification
        drafts = m["deepinfer_spec_draft_tokens_total"]
        accepted = m["deepinfer_spec_accepted_tokens_total"]
        per_pos = [m[f'deepinfer_spec_accepted_tokens_per_pos_total{{position="{i}"}}'] for i in range(k)]
        verified = [m[f'deepinfer_spec_verified_per_pos_total{{position="{i}"}}'] for i in range(k)]
        assert sum(verified) == drafts and sum(per_pos) == accepted and n * k >= drafts >= n
        assert m["deepinfer_spec_verified_tokens_total"] == n + drafts  # [y, drafts] per verification
        assert m[f"vllm:spec_decode_num_drafts_total{labels}"] == n
        assert m[f"vllm:spec_decode_num_draft_tokens_total{labels}"] == drafts
        assert m[f"vllm:spec_decode_num_accepted_tokens_total{labels}"] == accepted
        assert [m[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="spec",engine="0",position="{i}"}}']
                for i in range(k)] == per_pos
        # Committed tokens: accepted drafts + one per verification, each request's first token, and
        # plain decodes where no draft fits (the last token before max_tokens).
        assert accepted + n + len(prompts) <= m["deepinfer_engine_output_tokens_total"] == 2 * 24
    finally:
        on.stop()


@pytest.mark.parametrize("model,method,k", CHECKPOINTS)
def test_python_llm_speculative_equals_none(model, method, k):
    deepinfer = pytest.importorskip("deepinfer")
    params = deepinfer.SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    prompts = [[3, 14, 15, 9, 26], [5, 35, 8, 9, 7, 9, 3, 2]]
    off = deepinfer.LLM(str(model), speculative_method="none")
    expected = [o.outputs[0].token_ids for o in off.generate(prompts, params)]
    assert off.stats().num_speculative_tokens == 0 and off.stats().n_verifications == 0
    for kwargs in ({}, {"speculative_method": method}, {"speculative_method": method, "spec_scheduling": "confidence"}):
        llm = deepinfer.LLM(str(model), **kwargs)
        assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == expected, kwargs
        stats = llm.stats()
        assert stats.num_speculative_tokens == k
        # Confidence scheduling verifies only drafts worth their step time under a curve timed at
        # start-up, so on a loaded machine it may verify none (random drafters: low confidence);
        # fixed scheduling verifies every step.
        if kwargs.get("spec_scheduling") != "confidence":
            assert stats.n_verifications > 0
        if stats.n_verifications:
            assert stats.mean_acceptance_length() == pytest.approx(1 + stats.n_drafts_accepted / stats.n_verifications)
    with pytest.raises(Exception, match="has a (dspark|mtp) drafter"):
        deepinfer.LLM(str(model), speculative_method="mtp" if method == "dspark" else "dspark")


def test_async_llm_speculative_equals_none():
    deepinfer = pytest.importorskip("deepinfer")
    import asyncio
    params = deepinfer.SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    prompts = [[3, 14, 15, 9, 26], [5, 35, 8, 9, 7, 9, 3, 2]]
    expected = [o.token_ids for o in deepinfer.LLM(str(DSPARK), speculative_method="none").generate(prompts, params)]

    async def tokens(llm, prompt):
        ids = []
        async for delta in llm.stream(prompt, params):
            ids += delta.token_ids
        return ids

    async def main():
        async with deepinfer.AsyncLLM(str(DSPARK), speculative_method="dspark", num_speculative_tokens=3) as llm:
            got = await asyncio.gather(*(tokens(llm, p) for p in prompts))
            stats = llm._llm.stats()  # the engine thread is idle once both streams ended
            return got, stats.num_speculative_tokens, stats.n_verifications

    got, k, n = asyncio.run(main())
    assert got == expected and k == 3 and n > 0
