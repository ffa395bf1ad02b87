"""SamplingParams.logit_bias in the Python API (GitHub issue 5, deliverable 4): OpenAI's and
vLLM's meaning, a bias in [-100, 100] added to the token's raw logit; +100 forces a token,
-100 bans it; reported logprobs stay those of the raw logits. Small random-weight model as in
test_llm.py (vocabulary 256)."""

import os

import pytest

deepinfer = pytest.importorskip("deepinfer")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SMALL_CONFIG_DIR = os.path.join(ROOT, "tests", "data", "golden", "csa", "hf")
TOKENIZER = os.path.join(ROOT, "models", "tiny", "tokenizer.json")
SP = deepinfer.SamplingParams
PROMPTS = [[5, 9, 17, 33, 65], [200, 3, 3, 140]]


@pytest.fixture(scope="module")
def small():
    return deepinfer.LLM(SMALL_CONFIG_DIR, dummy_weights=True, dummy_seed=5,
                         tokenizer_path=TOKENIZER, max_model_len=128, max_num_batched_tokens=32)


def test_plus_hundred_forces_the_token(small):
    for temperature in (0.0, 0.9):
        outs = small.generate(PROMPTS, SP(temperature=temperature, seed=4, max_tokens=5,
                                          ignore_eos=True, logit_bias={77: 100}))
        for o in outs:
            assert o.token_ids == [77] * 5


def test_minus_hundred_bans_the_greedy_choice(small):
    plain = small.generate(PROMPTS, SP(temperature=0, max_tokens=6, ignore_eos=True))
    for p, o in zip(PROMPTS, plain):
        banned = small.generate([p], SP(temperature=0, max_tokens=6, ignore_eos=True,
                                        logit_bias={o.token_ids[0]: -100.0}))[0]
        assert o.token_ids[0] not in banned.token_ids
        # A bias on a token that is never close to winning changes nothing.
        same = small.generate([p], SP(temperature=0, max_tokens=6, ignore_eos=True,
                                      logit_bias={str(o.token_ids[0] ^ 1): 0.0}))[0]
        assert same.token_ids == o.token_ids


def test_logprobs_are_those_of_the_raw_logits(small):
    prompt = PROMPTS[0]
    plain = small.generate([prompt], SP(temperature=0, max_tokens=1, logprobs=3))[0]
    forced = small.generate([prompt], SP(temperature=0, max_tokens=1, logprobs=3,
                                         logit_bias={77: 100}))[0]
    assert forced.token_ids == [77]
    # The same first position: the top-3 of the raw distribution are unchanged by the bias,
    # and the forced token's logprob is its raw one (far from the biased ~0).
    top_plain = sorted(plain.logprobs[0].items(), key=lambda kv: -kv[1])[:3]
    for tok, lp in top_plain:
        assert forced.logprobs[0][tok] == pytest.approx(lp, abs=1e-6)
    assert forced.logprobs[0][77] < -1.0


def test_invalid_logit_bias_is_refused(small):
    with pytest.raises(deepinfer.Error, match="logit_bias"):
        small.generate([PROMPTS[0]], SP(logit_bias={3: 100.5}))
    with pytest.raises(deepinfer.Error, match="logit_bias"):
        small.generate([PROMPTS[0]], SP(logit_bias={256: 1.0}))  # vocabulary is 0..255
    # The engine is still usable afterwards.
    assert len(small.generate([PROMPTS[0]], SP(max_tokens=2))[0].token_ids) == 2
