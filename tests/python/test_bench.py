"""deepinfer bench (issue 21, deliverable 3): closed-loop TTFT counts from each request's own
send (at concurrency 1 it is the prefill time, not the queue), the open loop (--request-rate)
runs, goodput follows its SLO, and --base-url benchmarks a running `deepinfer serve` over
streaming HTTP with the token counts the server itself reports. The result block is vLLM's
(`vllm bench serve`); the checks compare measurements of this machine with each other, never
with constants."""
import os
import re
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD", ROOT / "build"))
EXE = BUILD / "deepinfer"

pytestmark = pytest.mark.skipif(not EXE.exists(), reason=f"{EXE} not built")


def run(*args, timeout=600, env=None):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=timeout, env=env)


def results(stdout):
    """The result blocks of a bench run: [{field: number or text}], one per run."""
    blocks = []
    for block in re.findall(r"=+ Serving Benchmark Result =+\n(.*?)\n=+\n", stdout, re.S):
        fields = {}
        for line in block.splitlines():
            m = re.match(r"(.+?):\s+(.*\S)\s*$", line)
            if m:
                key, value = m.group(1), m.group(2)
                try:
                    fields[key] = float(value)
                except ValueError:
                    fields[key] = value
        blocks.append(fields)
    return blocks


def check_consistent(s, n_requests, input_len, output_len):
    assert s["Successful requests"] == n_requests, s
    assert s["Total input tokens"] == n_requests * input_len, s
    assert s["Total generated tokens"] == n_requests * output_len, s  # EOS ignored
    d = s["Benchmark duration (s)"]
    rel = 0.0051 / d + 1e-3  # the block prints the duration to 10 ms
    assert s["Request throughput (req/s)"] == pytest.approx(n_requests / d, rel=rel, abs=0.01)
    assert s["Output token throughput (tok/s)"] == pytest.approx(n_requests * output_len / d, rel=rel, abs=0.01)
    assert s["Total Token throughput (tok/s)"] == pytest.approx(
        n_requests * (input_len + output_len) / d, rel=rel, abs=0.01)
    for name in ("TTFT", "TPOT", "ITL", "E2EL"):
        assert 0 < s[f"Median {name} (ms)"] <= s[f"P99 {name} (ms)"] + 0.01, (name, s)
    assert s["Mean TTFT (ms)"] < s["Mean E2EL (ms)"]


def test_concurrency_1_ttft_is_one_prefill():
    # The single request's prefill time on the same engine (the built-in tiny model on the CPU),
    # timed here around a one-token request through the Python package: median of three prompts
    # of the benchmark's length after a warm-up.
    deepinfer = pytest.importorskip("deepinfer")
    input_len = 256
    llm = deepinfer.LLM()
    one_token = deepinfer.SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    prefill_ms = []
    for k in range(4):
        ids = [(7919 * i + 11 * k) % 100000 for i in range(input_len)]
        t0 = time.perf_counter()
        assert len(llm.generate(prompt_token_ids=ids, sampling_params=one_token)[0].token_ids) == 1
        prefill_ms.append((time.perf_counter() - t0) * 1e3)
    del llm
    n = 6
    r = run("bench", "--concurrency", "1", "--num-prompts", str(n), "--input-len", str(input_len),
            "--output-len", "4", "--no-overlap-table")
    assert r.returncode == 0, r.stderr
    (s,) = results(r.stdout)
    check_consistent(s, n, input_len, 4)
    assert s["Traffic"] == "concurrency 1"
    # Timing the queue instead (the clock starting when all requests were submitted) makes the
    # median TTFT about three whole requests long.
    assert s["Median TTFT (ms)"] < 2 * statistics.median(prefill_ms[1:]), (s, prefill_ms)


def test_request_rate_and_goodput():
    common = ("--num-prompts", "8", "--input-len", "16", "--output-len", "4", "--seed", "3")
    r = run("bench", "--request-rate", "40,inf", "--goodput", "ttft:1000000", "tpot:1000000", *common)
    assert r.returncode == 0, r.stderr
    rate, burst = results(r.stdout)
    assert (rate["Traffic"], burst["Traffic"]) == ("rate 40/s", "rate inf")
    for s in (rate, burst):
        check_consistent(s, 8, 16, 4)
        assert s["Request goodput (req/s)"] == s["Request throughput (req/s)"]  # every request met it
    assert "| rate 40/s |" in r.stdout and "| rate inf |" in r.stdout  # the sweep's table
    r = run("bench", "--request-rate", "40", "--max-concurrency", "2", "--goodput", "e2el:0.001", *common)
    assert r.returncode == 0, r.stderr
    (s,) = results(r.stdout)
    assert s["Traffic"] == "rate 40/s (max 2)"
    assert s["Request goodput (req/s)"] == 0  # no request ends within a microsecond


def test_metrics_equal_numpy_on_the_saved_requests(tmp_path):
    """The summary is recomputed with numpy from the per-request records --save-result writes
    (vLLM's definitions: TPOT per request excluding the first token, ITL over every gap,
    percentiles interpolated linearly, goodput = requests meeting every SLO / duration); the
    printed block shows the same numbers."""
    np = pytest.importorskip("numpy")
    import json
    path = tmp_path / "runs.jsonl"
    r = run("bench", "--request-rate", "30", "--max-concurrency", "3", "--num-prompts", "10", "--input-len", "24",
            "--output-len", "6", "--goodput", "ttft:400", "tpot:150", "--save-result", str(path))
    assert r.returncode == 0, r.stderr
    (j,) = [json.loads(line) for line in path.read_text().splitlines()]
    (block,) = results(r.stdout)
    ttft, e2el = np.array(j["ttfts"]), np.array(j["e2els"])
    out = np.array(j["output_lens"])
    assert j["completed"] == len(ttft) == 10 and list(out) == [6] * 10 and j["input_lens"] == [24] * 10
    tpot = (e2el - ttft) / (out - 1)
    itl = np.concatenate([np.array(x) for x in j["itls"]])
    for gaps, t0, t1 in zip(j["itls"], ttft, e2el):
        assert sum(gaps) == pytest.approx(t1 - t0, abs=1e-6)  # the gaps span first to last token
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        for stat, ref in (("mean", np.mean(values)), ("median", np.median(values)),
                          ("p99", np.percentile(values, 99))):
            assert j[f"{stat}_{name}_ms"] == pytest.approx(ref * 1e3, rel=1e-9, abs=1e-9), (stat, name)
            label = {"mean": "Mean", "median": "Median", "p99": "P99"}[stat]
            assert block[f"{label} {name.upper()} (ms)"] == pytest.approx(ref * 1e3, abs=0.006)
    good = np.sum((ttft * 1e3 <= 400) & (tpot * 1e3 <= 150))
    assert j["request_goodput"] == pytest.approx(good / j["duration"], rel=1e-9)
    assert j["request_throughput"] == pytest.approx(10 / j["duration"], rel=1e-9)
    assert j["output_throughput"] == pytest.approx(60 / j["duration"], rel=1e-9)
    assert j["total_token_throughput"] == pytest.approx(300 / j["duration"], rel=1e-9)
    assert j["request_rate"] == 30 and j["max_concurrency"] == 3 and j["errors"] == []


def test_outputs_and_plot(tmp_path):
    prefix = tmp_path / "sweep"
    r = run("bench", "--concurrency", "1,2", "--num-prompts", "4", "--input-len", "16", "--output-len", "4",
            "--no-overlap-table", "--out", str(prefix))
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "sweep.csv").read_text().splitlines()
    assert rows[0].startswith("concurrency,") and len(rows) == 3
    assert "| concurrency 2 |" in (tmp_path / "sweep.md").read_text()
    pytest.importorskip("matplotlib")
    assert (tmp_path / "sweep.png").stat().st_size > 0


@pytest.mark.parametrize("args,needle", [
    (("--goodput", "ttfx:5"), "unknown metric 'ttfx'"),
    (("--goodput", "ttft"), "is not METRIC:MS"),
    (("--request-rate", "0"), "must be > 0"),
    (("--concurrency", "2", "--request-rate", "1"), "--max-concurrency"),
    (("--base-url", "https://example.com"), "https is not supported"),
    (("--base-url", "http://127.0.0.1:9", "--device", "cpu"), "--device configures the in-process engine"),
    (("--base-url", "http://127.0.0.1:9"), "cannot reach"),  # the discard port: nobody listens
    (("--endpoint", "/v1/completions"), "--endpoint needs --base-url"),
    (("stray",), "unexpected argument 'stray'"),
])
def test_bad_arguments_fail_cleanly(args, needle):
    r = run("bench", *args)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert needle in r.stderr, r.stderr


class Server:
    """`deepinfer serve` on a port it picks itself (read from its log)."""

    def __init__(self, *args):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.proc = subprocess.Popen([str(EXE), "serve", "--port", "0", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + 300
        while time.time() < deadline and self.port is None:
            m = re.search(r"serving \S+ on http://127\.0\.0\.1:(\d+)", open(self.log.name).read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise AssertionError(f"server exited:\n{open(self.log.name).read()}")
            time.sleep(0.2)
        assert self.port, open(self.log.name).read()

    def metric(self, name):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=60).read().decode()
        return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log.name)


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", "bench-key")
    yield s
    s.stop()


def test_base_url_benchmarks_a_running_server(server):
    before = server.metric("deepinfer_generation_tokens_total")
    env = dict(os.environ, OPENAI_API_KEY="bench-key")
    r = run("bench", "--base-url", f"http://127.0.0.1:{server.port}", "--concurrency", "1,3",
            "--num-prompts", "6", "--input-len", "32", "--output-len", "5", env=env)
    assert r.returncode == 0, r.stderr
    runs = results(r.stdout)
    assert [s["Traffic"] for s in runs] == ["concurrency 1", "concurrency 3"]
    for s in runs:
        check_consistent(s, 6, 32, 5)  # the generated tokens are the server's usage counts
    assert "/v1/completions" in runs[0]["Backend"]
    # The server generated exactly what the benchmark counted, plus one warm-up request per run.
    assert server.metric("deepinfer_generation_tokens_total") - before == 2 * 6 * 5 + 2 * 5
    r = run("bench", "--base-url", f"http://127.0.0.1:{server.port}", "--request-rate", "20",
            "--num-prompts", "4", "--input-len", "8", "--output-len", "3", env=env)
    assert r.returncode == 0, r.stderr
    check_consistent(results(r.stdout)[0], 4, 8, 3)


def test_base_url_failures_are_reported(server):
    # Without the API key every request is refused: the run reports them and exits 1.
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    r = run("bench", "--base-url", f"http://127.0.0.1:{server.port}", "--model", "deepinfer-tiny",
            "--concurrency", "1", "--num-prompts", "2", "--no-warmup", env=env)
    assert r.returncode == 1
    (s,) = results(r.stdout)
    assert s["Successful requests"] == 0 and s["Failed requests"] == 2
    assert "First failure: HTTP 401" in r.stdout, r.stdout
