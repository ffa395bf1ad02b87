"""deepinfer.AsyncLLM (issue 21, deliverable 4): asyncio streaming over the batched engine.
Greedy streams equal LLM.generate of the same model (batch-invariant numerics, so running
several at once changes nothing), leaving a stream early aborts its request, and bad
requests raise from the iteration. A small random-weight model (vocabulary 256) with the V4
tokenizer, as test_llm.py."""
import asyncio
import os

import pytest

deepinfer = pytest.importorskip("deepinfer")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SMALL_CONFIG_DIR = os.path.join(ROOT, "tests", "data", "golden", "csa", "hf")
TOKENIZER = os.path.join(ROOT, "models", "tiny", "tokenizer.json")
SP = deepinfer.SamplingParams
ARGS = dict(dummy_weights=True, dummy_seed=5, tokenizer_path=TOKENIZER, max_model_len=256,
            batch_invariant=True, max_num_batched_tokens=32)


def prompt(i, length=7):
    return [(11 * i + 5 * j + 1) % 256 for j in range(length + i % 4)]


@pytest.fixture(scope="module")
def reference():
    return deepinfer.LLM(SMALL_CONFIG_DIR, **ARGS)


@pytest.fixture(scope="module")
def allm():
    llm = deepinfer.AsyncLLM(SMALL_CONFIG_DIR, **ARGS)
    yield llm
    llm.close()


def test_concurrent_streams_equal_generate(reference, allm):
    params = SP(temperature=0, max_tokens=12, ignore_eos=True)
    want = reference.generate([prompt(i) for i in range(4)], params)

    async def one(i):
        seen = []
        async for out in allm.generate(prompt(i), params):
            seen.append(out)
        return seen

    async def main():
        return await asyncio.gather(*(one(i) for i in range(4)))

    for seen, w in zip(asyncio.run(main()), want):
        assert seen[-1].finished and seen[-1].finish_reason == "length"
        assert not any(o.finished for o in seen[:-1])
        assert seen[-1].token_ids == w.token_ids and seen[-1].text == w.text
        assert seen[-1].prompt_token_ids == w.prompt_token_ids
        # cumulative: each yield extends the previous one
        for a, b in zip(seen, seen[1:]):
            assert b.token_ids[:len(a.token_ids)] == a.token_ids and len(b.token_ids) > len(a.token_ids)


def test_stream_deltas_add_up(reference, allm):
    params = SP(temperature=1.0, seed=9, max_tokens=10, ignore_eos=True)
    want = reference.generate(prompt(5), params)[0]

    async def main():
        return [d async for d in allm.stream({"prompt_token_ids": prompt(5)}, params, request_id="mine")]

    deltas = asyncio.run(main())
    assert [t for d in deltas for t in d.token_ids] == want.token_ids
    assert "".join(d.text for d in deltas) == want.text
    assert deltas[-1].finished and deltas[-1].finish_reason == "length"
    assert {d.request_id for d in deltas} == {"mine"}


def test_leaving_early_aborts_and_the_engine_goes_on(reference, allm):
    params = SP(temperature=0, max_tokens=200, ignore_eos=True)

    async def main():
        n = 0
        async for _ in allm.generate(prompt(1), params, request_id="left"):
            n += 1
            if n == 2:
                break
        # The same id is free again once the abort has gone through the engine.
        for _ in range(200):
            try:
                out = [o async for o in allm.generate(prompt(2), SP(temperature=0, max_tokens=3, ignore_eos=True),
                                                      request_id="left")]
                return out
            except ValueError:
                await asyncio.sleep(0.01)
        raise AssertionError("the aborted request never ended")

    out = asyncio.run(main())
    want = reference.generate(prompt(2), SP(temperature=0, max_tokens=3, ignore_eos=True))[0]
    assert out[-1].token_ids == want.token_ids


def test_bad_requests_raise_from_the_iteration(allm):
    async def drain(p, params):
        return [o async for o in allm.generate(p, params)]

    with pytest.raises(ValueError, match="vocabulary"):
        asyncio.run(drain([1, 2, 100000], SP(max_tokens=2)))
    with pytest.raises(ValueError, match="n must be 1"):
        asyncio.run(drain([1, 2], SP(n=2)))
    with pytest.raises(ValueError):
        asyncio.run(drain([1, 2], SP(temperature=-1)))


def test_close_ends_waiting_streams():
    llm = deepinfer.AsyncLLM(SMALL_CONFIG_DIR, **ARGS)

    async def main():
        agen = llm.generate(prompt(0), SP(temperature=0, max_tokens=200, ignore_eos=True))
        first = await agen.__anext__()
        await asyncio.get_running_loop().run_in_executor(None, llm.close)
        with pytest.raises(RuntimeError, match="closed"):
            async for _ in agen:
                pass
        return first

    assert not asyncio.run(main()).finished
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(anext_of(llm.generate(prompt(0))))


async def anext_of(agen):
    return await agen.__anext__()
