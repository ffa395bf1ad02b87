"""The deepinfer CLI's first-use surface: --help / -h on every command and at the top level,
--tokenizer and the built-in tokenizer fallback of a config-only directory (so
`serve --dummy-weights --model bench/configs/v4-flash-4l` serves), and the startup summary."""
import http.client
import json
import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD", ROOT / "build"))
EXE = BUILD / "deepinfer"
GOLDEN = ROOT / "tests" / "data" / "golden"
TINY_TOKENIZER = ROOT / "models" / "tiny" / "tokenizer.json"
FLASH_4L = ROOT / "bench" / "configs" / "v4-flash-4l"

pytestmark = pytest.mark.skipif(not EXE.exists(), reason=f"{EXE} not built")

SUMMARY_FIELDS = ["model", "tokenizer", "device", "formats", "backend", "memory plan", "capacity",
                  "parallelism", "speculative", "prefix cache"]


def run(*args, timeout=300):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=timeout)


def summary_of(stderr):
    """The startup summary's fields as a dict (label -> value)."""
    m = re.search(r"deepinfer \w+: startup summary\n((?:  .*\n)+)", stderr)
    assert m, "no startup summary in:\n" + stderr
    fields = {}
    for line in m.group(1).splitlines():
        label, value = re.match(r"  (\S+(?: \S+)?)\s{2,}(.*)", line).groups()
        fields[label] = value
    return fields


def small_v4_config_dir(tmp_path):
    """A config-only directory (config.json alone) of V4-Flash's layout with tiny sizes and the
    real 129,280-token vocabulary, small enough for dummy weights on a CPU."""
    cfg = json.loads((FLASH_4L / "config.json").read_text())
    cfg.update(hidden_size=256, num_attention_heads=4, head_dim=128, q_lora_rank=128, o_groups=2,
               o_lora_rank=64, index_n_heads=4, index_head_dim=128, index_topk=16, n_routed_experts=16,
               num_experts_per_tok=2, moe_intermediate_size=128, compress_ratios=[0, 4, 128, 4],
               max_position_embeddings=65536)
    d = tmp_path / "v4-small"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


# -- help ----------------------------------------------------------------------------------

# Each command's flags a user looks for (README, the issue); the help must name all of them.
COMMAND_FLAGS = {
    "generate": ["--model", "--tokenizer", "--prompt", "--prompt-ids", "--max-tokens", "--temperature",
                 "--top-p", "--top-k", "--min-p", "--seed", "--numerics", "--dummy-weights", "--device",
                 "--weight-format", "--kv-cache-dtype", "--cuda-graphs", "--no-cuda-graphs",
                 "--gpu-memory-utilization"],
    "serve": ["--model", "--tokenizer", "--host", "--port", "--api-key", "--served-model-name",
              "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--chat-encoding",
              "--default-thinking", "--dummy-weights", "--device", "--weight-format", "--kv-cache-dtype",
              "--no-cuda-graphs", "--gpu-memory-utilization", "--max-prefill-tokens-with-decodes"],
    "bench": ["--model", "--tokenizer", "--input-len", "--output-len", "--num-prompts", "--concurrency",
              "--dummy-weights", "--device", "--weight-format", "--out"],
}


@pytest.mark.parametrize("command", sorted(COMMAND_FLAGS))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_of_every_command(command, flag):
    r = run(command, flag, timeout=30)
    assert r.returncode == 0, r.stderr
    assert f"deepinfer {command}" in r.stdout
    missing = [f for f in COMMAND_FLAGS[command] if not re.search(re.escape(f) + r"\b", r.stdout)]
    assert not missing, f"{command} --help does not name {missing}:\n{r.stdout}"
    assert "startup summary" not in r.stderr  # help returns before any model loads


def test_help_wins_over_other_arguments():
    # argparse's rule: -h anywhere prints the help, even after an unknown option.
    r = run("serve", "--bogus", "1", "-h", timeout=30)
    assert r.returncode == 0 and "--max-num-seqs" in r.stdout, r.stderr
    assert run("help", "serve", timeout=30).stdout == run("serve", "--help", timeout=30).stdout


def test_top_level_help():
    for args in (["--help"], ["-h"], ["help"]):
        r = run(*args, timeout=30)
        assert r.returncode == 0, r.stderr
        for command in COMMAND_FLAGS:
            assert re.search(rf"^  {command}\s", r.stdout, re.M), r.stdout
    r = run(timeout=30)
    assert r.returncode == 2 and "usage: deepinfer COMMAND" in r.stderr
    r = run("frobnicate", timeout=30)
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr


def test_unknown_option_points_to_help():
    r = run("generate", "--bogus", "1", timeout=30)
    assert r.returncode == 1
    assert "unknown option --bogus" in r.stderr and "deepinfer generate --help" in r.stderr, r.stderr


def test_flag_given_a_value_is_refused():
    r = run("generate", "--ignore-eos=yes", "--prompt-ids", "1", timeout=30)
    assert r.returncode == 1 and "--ignore-eos is a flag" in r.stderr, r.stderr


def test_bad_device_and_weight_format_are_named():
    r = run("generate", "--device", "tpu", "--prompt-ids", "1", timeout=30)
    assert r.returncode == 1 and "--device must be auto, cpu or cuda" in r.stderr, r.stderr
    r = run("generate", "--weight-format", "int4", "--prompt-ids", "1", timeout=30)
    assert r.returncode == 1 and "--weight-format must be auto, fp8 or fp32" in r.stderr, r.stderr
    r = run("generate", "--cuda-graphs", "--no-cuda-graphs", "--prompt-ids", "1", timeout=30)
    assert r.returncode == 1 and "not both" in r.stderr, r.stderr


# -- tokenizer -----------------------------------------------------------------------------

def test_tokenizer_option_detokenizes_a_checkpoint_without_one():
    model = str(GOLDEN / "mixed_quant" / "native")  # no tokenizer.json: ids are printed
    args = ("generate", "--model", model, "--prompt-ids", "1,2,3", "--max-tokens", "4", "--numerics", "reference")
    ids = run(*args)
    assert ids.returncode == 0, ids.stderr
    assert re.fullmatch(r"(\[\d+\]){4}", ids.stdout.strip()), ids.stdout
    text = run(*args, "--tokenizer", str(TINY_TOKENIZER))
    assert text.returncode == 0, text.stderr
    assert not re.fullmatch(r"(\[\d+\])+", text.stdout.strip()), text.stdout
    assert summary_of(text.stderr)["tokenizer"] == f"{TINY_TOKENIZER} (--tokenizer)"
    # The same ids, decoded by the tokenizer given (an independent decoder: HF tokenizers).
    tokenizers = pytest.importorskip("tokenizers")
    generated = [int(t) for t in re.findall(r"\[(\d+)\]", ids.stdout)]
    decoded = tokenizers.Tokenizer.from_file(str(TINY_TOKENIZER)).decode(generated, skip_special_tokens=False)
    # A trailing incomplete UTF-8 sequence: the plain loop's streaming detokenizer holds it back, the
    # engine (this checkpoint has an MTP module, so generate speculates through the engine) ends
    # with U+FFFD as HF does.
    assert text.stdout.rstrip("\n").rstrip("\ufffd") == decoded.rstrip("\ufffd")


def test_missing_tokenizer_file_is_named():
    r = run("generate", "--tokenizer", "/nonexistent/tokenizer.json", "--prompt-ids", "1", timeout=60)
    assert r.returncode == 1 and "/nonexistent/tokenizer.json" in r.stderr, r.stderr


def test_serve_without_any_tokenizer_fails_before_loading():
    model = str(GOLDEN / "swa" / "hf")
    r = run("serve", "--model", model, "--port", "0", timeout=60)
    assert r.returncode == 1, r.stderr
    assert "serving needs a tokenizer" in r.stderr and "--tokenizer PATH" in r.stderr, r.stderr
    assert "startup summary" not in r.stderr


def test_flash_config_dir_falls_back_to_the_builtin_tokenizer():
    # bench/configs/v4-flash-4l is config-only. Its dummy weights (~100 GB fp32 on the CPU) do not
    # fit here, so the port is taken: the tokenizer is chosen (and logged) before the port is
    # bound and the model loads, and the run ends at the bind.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run("serve", "--dummy-weights", "--model", str(FLASH_4L), "--port", str(port), timeout=60)
    assert r.returncode == 1, r.stderr
    assert "serving needs a tokenizer" not in r.stderr
    assert re.search(r"tokenizer: built-in V4 tokenizer \(.*models/tiny/tokenizer\.json\): .*v4-flash-4l/"
                     r"tokenizer\.json does not exist", r.stderr), r.stderr


class Server:
    def __init__(self, *args):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.proc = subprocess.Popen([str(EXE), "serve", "--port", "0", *args], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + 300
        while time.time() < deadline and self.port is None:
            m = re.search(r"serving \S+ on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.text()}")
            else:
                time.sleep(0.2)
        assert self.port, "server did not start:\n" + self.text()

    def text(self):
        return open(self.log.name).read()

    def post(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = json.loads(resp.read())
        conn.close()
        return resp.status, data

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log.name)


def test_config_only_dir_serves_with_the_builtin_tokenizer(tmp_path):
    model = small_v4_config_dir(tmp_path)
    server = Server("--dummy-weights", "--model", str(model), "--max-model-len", "1024")
    try:
        status, data = server.post("/v1/completions", {"model": "v4-small", "prompt": "Hello, world",
                                                       "max_tokens": 4, "temperature": 0})
        log = server.text()
    finally:
        server.stop()
    assert status == 200, data
    assert data["usage"]["completion_tokens"] == 4
    # The prompt was tokenized with the built-in V4 tokenizer (HF tokenizers as the reference).
    tokenizers = pytest.importorskip("tokenizers")
    expected = tokenizers.Tokenizer.from_file(str(TINY_TOKENIZER)).encode("Hello, world").ids
    assert data["usage"]["prompt_tokens"] == len(expected)
    assert "tokenizer: built-in V4 tokenizer" in log
    fields = summary_of(log)
    assert fields["tokenizer"].startswith("built-in V4 tokenizer")
    assert fields["model"].startswith(f"{model} (deepseek_v4, 4 layers, hidden 256, 16 experts top-2")
    assert "dummy weights (seed 0)" in fields["model"]


# -- startup summary -----------------------------------------------------------------------

def engine_log_capacity(stderr):
    """(requests, tokens, tokens per step) from the engine's own start-up log line."""
    m = re.search(r"engine: .*, up to (\d+) requests of (\d+) tokens, (\d+) tokens per step", stderr)
    assert m, stderr
    return tuple(int(g) for g in m.groups())


def test_summary_of_the_engine_path(tmp_path):
    model = small_v4_config_dir(tmp_path)
    r = run("generate", "--dummy-weights", "--model", str(model), "--prompt", "Hi", "--max-tokens", "2")
    assert r.returncode == 0, r.stderr
    fields = summary_of(r.stderr)
    assert list(fields) == SUMMARY_FIELDS
    n_requests, max_len, per_step = engine_log_capacity(r.stderr)
    assert fields["capacity"] == f"up to {n_requests} concurrent requests of {max_len} tokens, {per_step} tokens per step"
    assert n_requests == 1  # generate runs one request
    # --speculative-method auto (the default) on a checkpoint without a drafter.
    assert re.fullmatch(r"none \(auto: the (cpu|cuda) runner has no drafter for this checkpoint\)", fields["speculative"])
    # The engine's prefix cache is on by default on both backends (cached states in host memory
    # on the CPU, device memory on cuda).
    memory = "host" if fields["device"].startswith("cpu") else "device"
    assert fields["prefix cache"] == f"on, blocks of 128 tokens, up to 1.00 GiB of {memory} memory"
    assert fields["parallelism"].startswith("single device")
    if fields["device"].startswith("cpu"):
        assert re.match(r"cpu \(auto: (this build has no CUDA backend|no CUDA device found)\)", fields["device"])
        assert fields["formats"].startswith("weights fp32, kv cache fp32 (official numerics")
        assert fields["backend"].startswith("cpu (official")
        assert re.match(r"host: weights ~\d+\.\d\d GiB fp32 \(estimate\); state pools of \d+ blocks", fields["memory plan"])
    else:  # a CUDA build with a GPU: the fast formats without any flag
        assert fields["formats"] == "weights fp8, kv cache fp8, cuda graphs on, numerics official"
        assert "fp8" in fields["backend"] and "kv fp8" in fields["backend"] and "cuda graphs" in fields["backend"]


def test_summary_of_serve_matches_the_engine_log():
    server = Server("--max-num-seqs", "3", "--max-model-len", "2048", "--numerics", "reference")
    try:
        log = server.text()
    finally:
        server.stop()
    fields = summary_of(log)
    assert list(fields) == SUMMARY_FIELDS
    assert fields["model"].startswith("deepinfer-tiny (deepseek_v4, 4 layers")
    assert fields["tokenizer"].endswith("models/tiny/tokenizer.json (built-in)")
    n_requests, max_len, per_step = engine_log_capacity(log)
    assert (n_requests, max_len) == (3, 2048)
    assert fields["capacity"] == f"up to 3 concurrent requests of 2048 tokens, {per_step} tokens per step"
    assert "reference" in fields["formats"]


def test_summary_of_the_plain_generate_loop():
    r = run("generate", "--prompt-ids", "1,2,3", "--max-tokens", "2")
    assert r.returncode == 0, r.stderr
    fields = summary_of(r.stderr)
    assert list(fields) == SUMMARY_FIELDS
    assert fields["model"].startswith("deepinfer-tiny (deepseek_v4, 4 layers, hidden 256")
    if fields["device"].startswith("cpu"):
        assert "plain generate loop" in fields["backend"]


def test_summary_says_when_prefix_caching_is_turned_off(tmp_path):
    model = small_v4_config_dir(tmp_path)
    r = run("generate", "--dummy-weights", "--model", str(model), "--prompt", "Hi", "--max-tokens", "2",
            "--no-enable-prefix-caching")
    assert r.returncode == 0, r.stderr
    assert summary_of(r.stderr)["prefix cache"] == "off (--no-enable-prefix-caching)"
    both = run("generate", "--dummy-weights", "--model", str(model), "--prompt", "Hi", "--max-tokens", "2",
               "--enable-prefix-caching", "--no-enable-prefix-caching")
    assert both.returncode != 0 and "not both" in both.stderr
