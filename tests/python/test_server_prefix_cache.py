"""Automatic prefix caching surfaced (issue 18, deliverable 4): usage.prompt_tokens_details.
cached_tokens in Completions and Chat Completions (plain and the streamed usage chunk),
usage.input_tokens_details.cached_tokens in /v1/responses, the prefix-cache counters of
/metrics (ours and vLLM's, in tokens), and `deepinfer bench --multi-turn`.

The block size is the one the server runs (its startup summary's "prefix cache" line), never a
constant of this file; a re-sent prompt of n tokens must report exactly the full blocks of its
first n - 1 tokens (the last token is always computed: its logits give the first output).
Responses are validated by the installed `openai` package's pydantic types; /metrics is parsed
with prometheus_client.
"""

import json
import os
import random
import re
import subprocess
import tempfile

import pytest

from test_server import API_KEY, Server, binary

openai = pytest.importorskip("openai")
prometheus_parser = pytest.importorskip("prometheus_client.parser")

from openai.types import Completion  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from openai.types.responses import Response  # noqa: E402


def block_tokens_of(server):
    m = re.search(r"prefix cache\W+on, blocks of (\d+) tokens", server.log_text())
    assert m, "no prefix cache line in the startup summary:\n" + server.log_text()
    return int(m.group(1))


def ideal_hit(n_prompt, block):
    """Tokens a re-sent prompt of n_prompt tokens serves from the cache: its full blocks
    before the last token."""
    return (n_prompt - 1) // block * block


def metrics(server):
    """{sample name: value} of the unlabelled samples and vLLM's model_name-labelled ones."""
    resp, data = server.request("GET", "/metrics")
    assert resp.status == 200
    out = {}
    for family in prometheus_parser.text_string_to_metric_families(data.decode()):
        for s in family.samples:
            if not s.labels or set(s.labels) == {"model_name", "engine"}:
                out[s.name] = s.value
    return out


def random_ids(n, seed):
    rng = random.Random(seed)
    return [rng.randrange(1000, 100000) for _ in range(n)]  # ordinary tokens of the tokenizer


def served_model(server):
    resp, data = server.request("GET", "/v1/models")
    assert resp.status == 200
    return json.loads(data)["data"][0]["id"]


def completion(server, prompt, **extra):
    body = {"model": served_model(server), "prompt": prompt, "max_tokens": 2, "temperature": 0, **extra}
    resp, data = server.request("POST", "/v1/completions", body)
    assert resp.status == 200, data
    raw = json.loads(data)
    # Always present, as OpenAI sends it.
    assert "cached_tokens" in raw["usage"]["prompt_tokens_details"], raw["usage"]
    return Completion.model_validate(raw)


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", API_KEY, "--max-model-len", "4096")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def block(server):
    return block_tokens_of(server)


def test_resent_completion_reports_every_full_block(server, block):
    n = 2 * block + block // 3 + 1  # not a multiple of the block
    prompt = random_ids(n, seed=1)
    first = completion(server, prompt)
    assert first.usage.prompt_tokens == n
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    again = completion(server, prompt)
    assert again.usage.prompt_tokens_details.cached_tokens == ideal_hit(n, block)
    assert again.choices[0].text == first.choices[0].text  # greedy: the cache changes nothing
    # The prompt followed by more tokens (a conversation's next turn) hits what the first send
    # cached: its full blocks before its last token.
    longer = prompt + random_ids(block, seed=2)
    r = completion(server, longer)
    assert r.usage.prompt_tokens == n + block
    assert r.usage.prompt_tokens_details.cached_tokens == ideal_hit(n, block)


def test_streamed_usage_chunk_reports_cached_tokens(server, block):
    n = block + block // 2
    prompt = random_ids(n, seed=3)
    completion(server, prompt)
    body = {"model": served_model(server), "prompt": prompt, "max_tokens": 2, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    resp, data = server.request("POST", "/v1/completions", body)
    assert resp.status == 200
    payloads = [line[6:] for line in data.decode().split("\n") if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    last = json.loads(payloads[-2])
    assert last["choices"] == []
    assert last["usage"]["prompt_tokens_details"]["cached_tokens"] == ideal_hit(n, block)
    # The chunks before the usage chunk carry usage null (include_usage without continuous stats).
    assert all(json.loads(p)["usage"] is None for p in payloads[:-2])


def long_message(n_words, seed):
    rng = random.Random(seed)
    words = ["alpha", "river", "stone", "green", "quiet", "market", "window", "seven", "paper", "light"]
    return " ".join(rng.choice(words) for _ in range(n_words))


def test_chat_completion_plain_and_streamed(server, block):
    client = server.openai_client()
    messages = [{"role": "user", "content": long_message(3 * block // 2, seed=4)}]
    first = client.chat.completions.create(model=served_model(server), messages=messages, max_tokens=2, temperature=0)
    assert isinstance(first, ChatCompletion)
    n = first.usage.prompt_tokens
    assert n > block
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    again = client.chat.completions.create(model=served_model(server), messages=messages, max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == ideal_hit(n, block)
    chunks = list(client.chat.completions.create(model=served_model(server), messages=messages, max_tokens=2, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens == n
    assert usage.prompt_tokens_details.cached_tokens == ideal_hit(n, block)


def test_responses_input_tokens_details(server, block):
    client = server.openai_client()
    text = long_message(3 * block // 2, seed=5)
    first = client.responses.create(model=served_model(server), input=text, max_output_tokens=2, temperature=0)
    assert isinstance(first, Response)
    n = first.usage.input_tokens
    assert n > block
    assert first.usage.input_tokens_details.cached_tokens == 0
    again = client.responses.create(model=served_model(server), input=text, max_output_tokens=2, temperature=0)
    Response.model_validate(again.model_dump())
    assert again.usage.input_tokens_details.cached_tokens == ideal_hit(n, block)


def test_metrics_count_tokens_exactly(server, block):
    n = 3 * block - 5
    prompt = random_ids(n, seed=6)
    m0 = metrics(server)
    completion(server, prompt)
    m1 = metrics(server)
    completion(server, prompt)
    m2 = metrics(server)

    def delta(a, b, name):
        return b[name] - a[name]

    hit = ideal_hit(n, block)
    assert m2["deepinfer_prefix_cache_block_tokens"] == block  # read after a step
    # vLLM's counters, in tokens: every lookup queries its prompt, the re-send hits `hit`.
    assert delta(m0, m1, "vllm:prefix_cache_queries_total") == n
    assert delta(m0, m1, "vllm:prefix_cache_hits_total") == 0
    assert delta(m1, m2, "vllm:prefix_cache_queries_total") == n
    assert delta(m1, m2, "vllm:prefix_cache_hits_total") == hit
    # Ours: lookups, lookups that hit, tokens looked up / that could hit / that hit.
    assert delta(m0, m2, "deepinfer_prefix_cache_queries_total") == 2
    assert delta(m0, m2, "deepinfer_prefix_cache_hits_total") == 1
    assert delta(m0, m2, "deepinfer_prefix_cache_lookup_tokens_total") == 2 * n
    assert delta(m0, m2, "deepinfer_prefix_cache_query_tokens_total") == 2 * hit
    assert delta(m0, m2, "deepinfer_prefix_cache_hit_tokens_total") == hit
    assert m2["deepinfer_prefix_cache_hit_rate"] == pytest.approx(
        m2["deepinfer_prefix_cache_hit_tokens_total"] / m2["deepinfer_prefix_cache_query_tokens_total"])
    assert m2["deepinfer_prefix_cache_blocks"] > m0["deepinfer_prefix_cache_blocks"]
    assert m2["deepinfer_prefix_cache_bytes"] > 0
    assert m2["deepinfer_prefix_cache_blocks_in_use"] == 0  # nothing admitted now
    assert m2["deepinfer_prefix_cache_evicted_blocks_total"] == 0  # 1 GiB holds this module's prompts


def test_caching_off_reports_zero():
    s = Server("--api-key", API_KEY, "--no-enable-prefix-caching")
    try:
        assert re.search(r"prefix cache\W+off", s.log_text())
        prompt = random_ids(300, seed=7)
        completion(s, prompt)
        again = completion(s, prompt)
        assert again.usage.prompt_tokens_details.cached_tokens == 0
        m = metrics(s)
        for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                     "deepinfer_prefix_cache_block_tokens", "deepinfer_prefix_cache_hit_tokens_total"):
            assert m[name] == 0, name
    finally:
        s.stop()


# ------------------------------------------------------------- bench --multi-turn


def test_bench_multi_turn_hit_rate_matches_records():
    turns, convs, user, reply = 3, 2, 150, 4
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "runs.jsonl")
        r = subprocess.run([binary(), "bench", "--multi-turn", str(turns), "--num-prompts", str(convs),
                            "--input-len", str(user), "--output-len", str(reply), "--seed", "3",
                            "--save-result", path], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        runs = [json.loads(line) for line in open(path)]
    assert [run["prefix_caching"] for run in runs] == [True, False]
    printed = [float(x) for x in re.findall(r"Prefix cache hit rate \(hits / queried\):\s+(\S+)", r.stdout)]
    assert len(printed) == 2
    for run, shown in zip(runs, printed):
        recs = run["records"]
        assert len(recs) == turns * convs and all(rec["ok"] for rec in recs)
        assert run["completed"] == turns * convs and run["failed"] == 0
        prompt = sum(rec["prompt_tokens"] for rec in recs)
        cached = sum(rec["cached_tokens"] for rec in recs)
        # The engine's counters (hit and queried tokens over the run) against the records.
        assert run["prefix_cache_hit_tokens"] == cached
        assert run["hit_rate"] == pytest.approx(cached / prompt if run["prefix_caching"] else 0.0, abs=1e-12)
        assert shown == pytest.approx(run["hit_rate"], abs=5e-5)
        for rec in recs:
            # Turn k re-sends turn k-1's prompt and reply plus a new user message.
            assert rec["prompt_tokens"] == rec["turn"] * user + (rec["turn"] - 1) * reply
            assert rec["output_tokens"] == reply
        if not run["prefix_caching"]:
            assert run["prefix_cache_lookup_tokens"] == 0 and cached == 0
            continue
        assert run["prefix_cache_lookup_tokens"] == prompt
        block = run["prefix_cache_block_tokens"]
        assert block > 0
        by_key = {(rec["conversation"], rec["turn"]): rec for rec in recs}
        for (c, t), rec in by_key.items():
            if t == 1:
                assert rec["cached_tokens"] == 0  # no system prompt: conversations share nothing
                continue
            previous = by_key[(c, t - 1)]["prompt_tokens"]
            # At least every full block of the previous turn's prompt; never past this prompt's.
            assert previous // block * block <= rec["cached_tokens"] <= ideal_hit(rec["prompt_tokens"], block)
            assert rec["cached_tokens"] % block == 0


def test_bench_multi_turn_against_the_server(server, block):
    """--base-url: text turns; the hit rate is the server's /metrics delta, which must equal the
    records' cached / prompt tokens (from each response's usage)."""
    turns, convs, words, reply = 3, 2, block + 30, 6
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.jsonl")
        r = subprocess.run([binary(), "bench", "--base-url", f"http://127.0.0.1:{server.port}",
                            "--multi-turn", str(turns), "--num-prompts", str(convs), "--input-len", str(words),
                            "--output-len", str(reply), "--seed", "4", "--save-result", path],
                           capture_output=True, text=True, timeout=900, env=dict(os.environ, OPENAI_API_KEY=API_KEY))
        assert r.returncode == 0, r.stdout + r.stderr
        runs = [json.loads(line) for line in open(path)]
    assert len(runs) == 1
    run = runs[0]
    assert run["prefix_caching"] and run["prefix_cache_block_tokens"] == block
    recs = run["records"]
    assert len(recs) == turns * convs and all(rec["ok"] for rec in recs)
    prompt = sum(rec["prompt_tokens"] for rec in recs)
    cached = sum(rec["cached_tokens"] for rec in recs)
    assert run["prefix_cache_lookup_tokens"] == prompt
    assert run["prefix_cache_hit_tokens"] == cached
    assert run["hit_rate"] == pytest.approx(cached / prompt, abs=1e-12)
    by_key = {(rec["conversation"], rec["turn"]): rec for rec in recs}
    for (c, t), rec in by_key.items():
        assert rec["cached_tokens"] % block == 0
        assert rec["cached_tokens"] <= ideal_hit(rec["prompt_tokens"], block)
        if t > 1:
            assert rec["prompt_tokens"] > by_key[(c, t - 1)]["prompt_tokens"]
    assert cached > 0  # later turns re-send text that tokenizes to the earlier prompt's blocks


# ------------------------------------------------------------------ Python LLM


def test_llm_outputs_num_cached_tokens():
    deepinfer = pytest.importorskip("deepinfer")
    llm = deepinfer.LLM("tiny")
    block = llm.stats().prefix_cache_block_tokens
    assert block > 0  # on by default on the CPU
    n = 2 * block + 7
    ids = random_ids(n, seed=8)
    sp = deepinfer.SamplingParams(temperature=0, max_tokens=2)
    first = llm.generate(prompt_token_ids=[ids], sampling_params=sp)[0]
    again = llm.generate(prompt_token_ids=[ids], sampling_params=sp)[0]
    assert first.num_cached_tokens == 0
    assert again.num_cached_tokens == ideal_hit(n, block)
    assert again.token_ids == first.token_ids
    s = llm.stats()
    assert s.prefix_cache_hit_tokens == again.num_cached_tokens
    assert s.prefix_cache_lookup_tokens == 2 * n
    off = deepinfer.LLM("tiny", enable_prefix_caching=False)
    off.generate(prompt_token_ids=[ids], sampling_params=sp)
    assert off.generate(prompt_token_ids=[ids], sampling_params=sp)[0].num_cached_tokens == 0
    assert off.stats().prefix_cache_block_tokens == 0
