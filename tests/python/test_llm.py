"""The deepinfer Python package: LLM.generate / generate_stream / chat over the batched
engine. Most tests use a small random-weight model (a golden test config with
--dummy-weights, vocabulary 256) with the V4 tokenizer for text; one uses the built-in
tiny model. Runs against the extension of $DEEPINFER_BUILD (see the Makefile) or an
installed package."""

import os

import pytest

deepinfer = pytest.importorskip("deepinfer")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SMALL_CONFIG_DIR = os.path.join(ROOT, "tests", "data", "golden", "csa", "hf")
TOKENIZER = os.path.join(ROOT, "models", "tiny", "tokenizer.json")
SP = deepinfer.SamplingParams


@pytest.fixture(scope="module")
def small():
    return deepinfer.LLM(SMALL_CONFIG_DIR, dummy_weights=True, dummy_seed=5,
                         tokenizer_path=TOKENIZER, max_model_len=256, batch_invariant=True,
                         max_num_batched_tokens=32)


@pytest.fixture(scope="module")
def tiny():
    return deepinfer.LLM()


def prompts(n, length=6):
    # Token-id prompts: the small model's vocabulary is only the first 256 V4 ids.
    return [[(7 * i + 13 * j + 3) % 256 for j in range(length + i % 5)] for i in range(n)]


def test_tiny_model_generates_text(tiny):
    out = tiny.generate(["hi"])
    assert len(out) == 1
    o = out[0]
    assert isinstance(o.text, str) and o.text
    assert 1 <= len(o.token_ids) <= 16
    assert o.finish_reason in ("length", "stop")
    assert o.prompt_token_ids == tiny.encode("hi")
    assert o.text == tiny.decode(o.token_ids)
    assert o.outputs[0] is o


def test_greedy_batch_equals_each_alone(small):
    ps = prompts(12)
    params = SP(temperature=0, max_tokens=10, ignore_eos=True)
    batched = small.generate(ps, params)
    for p, b in zip(ps, batched):
        alone = small.generate([p], params)[0]
        assert alone.token_ids == b.token_ids
        assert alone.text == b.text
        assert b.finish_reason == "length" and len(b.token_ids) == 10


def test_seeded_sampling_is_reproducible(small):
    ps = prompts(6)
    params = [SP(temperature=1.0, top_p=0.95, max_tokens=12, seed=100 + i, ignore_eos=True)
              for i in range(len(ps))]
    a = small.generate(ps, params)
    # Reversed order, inside a larger batch with other requests.
    extra = prompts(9, length=3)
    b = small.generate(extra + ps[::-1], [SP(temperature=0.5, seed=1)] * 9 + params[::-1])[9:][::-1]
    for x, y in zip(a, b):
        assert x.token_ids == y.token_ids
    # Other seeds give other samples.
    c = small.generate(ps, [SP(temperature=1.0, top_p=0.95, max_tokens=12, seed=200 + i,
                               ignore_eos=True) for i in range(len(ps))])
    assert [x.token_ids for x in a] != [x.token_ids for x in c]


def test_stop_string_cuts_the_text(small):
    p = prompts(1, length=9)[0]
    full = small.generate(p, SP(temperature=0, max_tokens=40, ignore_eos=True))[0]
    text = full.text
    assert len(text) >= 8
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = small.generate(p, SP(temperature=0, max_tokens=40, ignore_eos=True, stop=[stop]))[0]
    assert cut.finish_reason == "stop"
    assert cut.stop_reason == stop
    assert cut.text == text[:text.index(stop)]
    assert cut.token_ids == full.token_ids[:len(cut.token_ids)]
    assert stop in small.decode(cut.token_ids)


def test_stream_equals_generate_and_close_aborts(small):
    p = prompts(1, length=4)[0]
    params = SP(temperature=0, max_tokens=12, ignore_eos=True)
    whole = small.generate(p, params)[0]
    deltas = list(small.generate_stream(p, params))
    assert "".join(d.text for d in deltas) == whole.text
    assert sum((d.token_ids for d in deltas), []) == whole.token_ids
    assert deltas[-1].finished and deltas[-1].finish_reason == "length"
    assert not any(d.finished for d in deltas[:-1])
    # Closing a stream early aborts its request; the engine carries on.
    stream = small.generate_stream(p, SP(temperature=0, max_tokens=200, ignore_eos=True))
    next(stream)
    stream.close()
    assert small.generate(p, params)[0].token_ids == whole.token_ids


def test_two_streams_interleaved(small):
    a, b = prompts(2)
    params = SP(temperature=0, max_tokens=6, ignore_eos=True)
    want = small.generate([a, b], params)
    sa, sb = small.generate_stream(a, params), small.generate_stream(b, params)
    got_a, got_b = [], []
    for da, db in zip(sa, sb):
        got_a += da.token_ids
        got_b += db.token_ids
    got_a += sum((d.token_ids for d in sa), [])
    got_b += sum((d.token_ids for d in sb), [])
    assert got_a == want[0].token_ids and got_b == want[1].token_ids


def test_logprobs(small):
    out = small.generate(prompts(1)[0], SP(temperature=0, max_tokens=5, logprobs=3,
                                           ignore_eos=True))[0]
    assert len(out.logprobs) == 5
    for tok, lp in zip(out.token_ids, out.logprobs):
        assert tok in lp
        assert 3 <= len(lp) <= 4
        assert all(v <= 0 for v in lp.values())
        assert lp[tok] == max(lp.values())  # greedy picks the most likely token
    assert small.generate(prompts(1)[0], SP(max_tokens=2))[0].logprobs is None


def test_errors(small):
    p = prompts(1)[0]
    with pytest.raises(ValueError):
        small.generate(p, SP(max_tokens=300))           # prompt + max_tokens > max_model_len
    with pytest.raises(ValueError):
        small.generate(p, SP(top_p=0))
    with pytest.raises(ValueError):
        small.generate(p, SP(temperature=-1))
    with pytest.raises(ValueError):
        small.generate([[1, 2, 256]])                   # outside the vocabulary
    with pytest.raises(ValueError):
        small.generate([[]])
    with pytest.raises(ValueError):
        small.generate([p, p], [SP()])
    with pytest.raises(TypeError):
        deepinfer.LLM(SMALL_CONFIG_DIR, dummy_weights=True, no_such_argument=1)
    assert isinstance(deepinfer.Error("x"), ValueError)
    assert not small.abort("no-such-request")
    # A failed batch adds nothing: the next one runs normally.
    ok = small.generate(p, SP(temperature=0, max_tokens=3, ignore_eos=True))[0]
    assert len(ok.token_ids) == 3


def test_chat_prompt_matches_deepseek_recipe(tiny):
    dr = pytest.importorskip("deepseek_recipe")
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is 2+2?"}]
    out = tiny.chat(messages, SP(temperature=0, max_tokens=6))[0]
    encoding = dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(TOKENIZER))
    want = encoding.encode(dr.Conversation(
        [dr.SystemMessage("You are terse.", [], None), dr.UserMessage("What is 2+2?", [])],
        thinking_mode=False, tools=None, tool_choice="auto", reasoning_effort=None))
    assert out.prompt_token_ids == list(want)
    assert isinstance(out.content, str)
    assert out.reasoning_content == ""
    assert out.tool_calls == []
    assert len(out.token_ids) <= 6


def test_n_completions_use_consecutive_seeds(small):
    p = prompts(1)[0]
    out = small.generate(p, SP(temperature=1.0, max_tokens=8, seed=40, n=3, ignore_eos=True))[0]
    assert len(out.outputs) == 3 and out.outputs[0] is out
    for k, choice in enumerate(out.outputs):
        alone = small.generate(p, SP(temperature=1.0, max_tokens=8, seed=40 + k, ignore_eos=True))[0]
        assert choice.token_ids == alone.token_ids
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1
    with pytest.raises(ValueError):
        SP(n=0)


def test_generate_from_token_ids(small, tiny):
    """prompt_token_ids= (one list or several), plain id lists and {"prompt_token_ids"} dicts
    are the same prompts; the text prompt that encodes to those ids gives the same output."""
    params = SP(temperature=0, max_tokens=5, ignore_eos=True)
    ps = prompts(3)
    by_keyword = small.generate(prompt_token_ids=ps, sampling_params=params)
    by_list = small.generate(ps, params)
    by_dict = small.generate([{"prompt_token_ids": p} for p in ps], params)
    one = small.generate(prompt_token_ids=ps[1], sampling_params=params)
    assert len(by_keyword) == 3 and len(one) == 1
    for a, b, c in zip(by_keyword, by_list, by_dict):
        assert a.token_ids == b.token_ids == c.token_ids and len(a.token_ids) == 5
        assert a.text == b.text == c.text == small.decode(a.token_ids)
    assert one[0].token_ids == by_keyword[1].token_ids
    assert [o.prompt_token_ids for o in by_keyword] == ps
    # The tiny model has the real vocabulary: a text prompt and its ids are the same request.
    text_ids = tiny.encode("Hello, world")
    by_text = tiny.generate("Hello, world", params)[0]
    by_ids = tiny.generate(prompt_token_ids=text_ids, sampling_params=params)[0]
    assert by_text.prompt_token_ids == text_ids and by_text.token_ids == by_ids.token_ids
    with pytest.raises(ValueError):
        small.generate(ps, params, prompt_token_ids=ps)
    with pytest.raises(ValueError):
        small.generate(prompt_token_ids=[[1, 2, 999999]], sampling_params=params)
