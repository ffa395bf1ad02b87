"""deepinfer: offline inference for the DeepSeek-V4 family.

    import deepinfer
    llm = deepinfer.LLM()                       # the trained tiny V4.1 model (models/trained-v41)
    out = llm.generate(["hi"], deepinfer.SamplingParams(temperature=0, max_tokens=8))
    print(out[0].text, out[0].token_ids, out[0].finish_reason)
    llm.generate(prompt_token_ids=[[0, 100, 200]])            # prompts as token ids
    llm.chat([{"role": "user", "content": "Weather?"}], tools=[...], thinking=True,
             reasoning_effort="high")[0].tool_calls      # chat with tools and reasoning
    async for out in deepinfer.AsyncLLM().generate("hi"):    # asyncio streaming
        ...

`LLM(model=None, **engine_args)`: `model` is a checkpoint directory (config.json,
safetensors, tokenizer.json), a built-in name ("tiny", "tiny-v4", "tiny-v4.1": random weights),
or None for the default: $DEEPINFER_DEFAULT_MODEL when set, else the trained tiny V4.1 model
of the source tree (models/trained-v41), else the built-in tiny model. Engine arguments:
device ("cpu" | "cuda"; cuda needs a build with the CUDA backend), gpu_memory_utilization,
weight_format ("fp32" | "fp8", cuda only), kv_cache_dtype ("auto" | "fp8" | "bf16", cuda
only), cuda_graphs (cuda only),
batch_invariant, numerics ("official" | "reference"), swa_bounded_replay (V4.1 on cpu, an
approximation: True or KEEP, the decoder layers of a prefill compute only the last KEEP
positions, default 140; 0 / False: off; turns prefix caching off), dummy_weights, dummy_seed, max_num_seqs,
max_num_batched_tokens, max_prefill_tokens_with_decodes, long_prefill_token_threshold
(fairness while a long prompt is prefilled, 0: off), max_model_len, state_budget_bytes, overlap, priority, tokenizer_path,
block_size, grammar_max_states, grammar_max_memory_mb, grammar_timeout_ms (budgets of each
structured-output compilation, 0: off; see src/grammar/budget.h) (see src/engine/engine.h).

The C++ core is `deepinfer._core`; with a source checkout, set PYTHONPATH=python and
DEEPINFER_BUILD=<cmake build dir> to use the extension built there.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import secrets
import threading
from typing import Any, Iterable, Iterator, Optional, Sequence, Union


def _load_core():
    try:
        from . import _core  # installed next to this file (pip install .)
        return _core
    except ImportError:
        build = os.environ.get("DEEPINFER_BUILD")
        where = os.path.join(build, "python", "deepinfer") if build else None
        if not where or not os.path.isdir(where):
            raise
        __path__.append(where)  # the extension of a CMake build directory
        from . import _core
        return _core


_core = _load_core()
Error = _core.Error  # a ValueError: bad arguments, requests or inputs

__all__ = ["LLM", "AsyncLLM", "SamplingParams", "RequestOutput", "StreamDelta", "Error"]


class SamplingParams:
    """How to sample one request. `seed=None` draws a fresh random seed, so only requests
    with an explicit seed are reproducible (the sampled tokens then depend only on the
    prompt, the parameters and the seed, never on the batch). `logprobs=k` returns the
    chosen token's and the top-k log-probabilities of the raw model distribution. `n > 1`
    samples n completions of the prompt; completion k uses seed + k. `logit_bias` maps token
    ids to a bias in [-100, 100] added to that token's raw logit before the penalties and the
    temperature (OpenAI's and vLLM's meaning: +100 practically forces a token, -100 bans it);
    logprobs are still those of the raw logits."""

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 min_p: float = 0.0, max_tokens: int = 16, min_tokens: int = 0,
                 seed: Optional[int] = None, stop: Union[None, str, Sequence[str]] = None,
                 stop_token_ids: Optional[Sequence[int]] = None, ignore_eos: bool = False,
                 repetition_penalty: float = 1.0, presence_penalty: float = 0.0,
                 frequency_penalty: float = 0.0, logprobs: Optional[int] = None,
                 skip_special_tokens: bool = True, priority: int = 0, n: int = 1,
                 json_schema: Union[None, str, dict] = None, json_object: bool = False,
                 regex: Optional[str] = None, grammar: Optional[str] = None,
                 logit_bias: Optional[dict] = None):
        if int(n) < 1:
            raise ValueError(f"SamplingParams: n must be >= 1, got {n}")
        self.n = int(n)
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.seed = seed
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop_token_ids = list(stop_token_ids or [])
        self.logit_bias = {int(k): float(v) for k, v in (logit_bias or {}).items()}
        self.ignore_eos = ignore_eos
        self.repetition_penalty = repetition_penalty
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.logprobs = logprobs
        self.skip_special_tokens = skip_special_tokens
        self.priority = priority
        # Structured output: at most one of json_schema (dict or JSON text), json_object,
        # regex (whole-output match) and grammar (EBNF, GBNF dialect, root rule "root").
        constraints = [(k, v) for k, v in (("json_schema", json_schema), ("regex", regex),
                                           ("ebnf", grammar)) if v is not None]
        if json_object:
            constraints.append(("json_object", ""))
        if len(constraints) > 1:
            raise ValueError("SamplingParams: give at most one of json_schema, json_object, regex, grammar")
        self.constraint = constraints[0] if constraints else None
        if self.constraint and self.constraint[0] == "json_schema" and not isinstance(json_schema, str):
            self.constraint = ("json_schema", json.dumps(json_schema))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"SamplingParams({fields})"

    def _core(self, choice: int = 0) -> Any:
        p = _core.SamplingParams()
        p.temperature = float(self.temperature)
        p.top_p = float(self.top_p)
        p.top_k = int(self.top_k)
        p.min_p = float(self.min_p)
        p.max_tokens = int(self.max_tokens)
        p.min_tokens = int(self.min_tokens)
        p.seed = (int(self.seed) + choice) if self.seed is not None else secrets.randbits(63)
        p.stop_token_ids = [int(t) for t in self.stop_token_ids]
        p.logit_bias = [(int(t), float(b)) for t, b in self.logit_bias.items()]
        p.ignore_eos = bool(self.ignore_eos)
        p.repetition_penalty = float(self.repetition_penalty)
        p.presence_penalty = float(self.presence_penalty)
        p.frequency_penalty = float(self.frequency_penalty)
        p.validate()
        return p


class RequestOutput:
    """The result of one prompt: `text`, `token_ids`, `finish_reason` ("stop", "length",
    "abort", or "error" with the reason in `error`: a failure of this request alone),
    `stop_reason` (the stop string, if one ended it), `prompt_token_ids`,
    `logprobs` (per token: {token_id: logprob} of the chosen and top-k tokens, or None).
    Chat results also have `content`, `reasoning_content` and `tool_calls`.
    `outputs` lists the n completions (SamplingParams.n); the object itself is outputs[0]
    (vLLM-style access)."""

    def __init__(self, request_id: str, prompt: Optional[str], prompt_token_ids: list[int]):
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.text = ""
        self.token_ids: list[int] = []
        self.logprobs: Optional[list[dict[int, float]]] = None
        self.finished = False
        self.finish_reason: Optional[str] = None
        self.stop_reason: Optional[str] = None
        self.error: Optional[str] = None
        self.num_preemptions = 0
        # Prompt tokens served from the engine's prefix cache (vLLM's num_cached_tokens).
        self.num_cached_tokens = 0
        # Set by LLM.chat: the completion parsed as the chat encoding's output.
        self.content: Optional[str] = None
        self.reasoning_content: Optional[str] = None
        self.tool_calls: Optional[list[dict[str, str]]] = None
        self._choices: list["RequestOutput"] = [self]

    @property
    def outputs(self) -> list["RequestOutput"]:
        return self._choices

    def _add(self, o: Any, want_logprobs: bool) -> None:
        self.text += o.new_text
        self.token_ids.extend(o.new_tokens)
        if want_logprobs:
            if self.logprobs is None:
                self.logprobs = []
            for lp in o.logprobs:
                d = {tok: val for tok, val in lp.top}
                d[lp.token] = lp.logprob
                self.logprobs.append(d)
        self.num_preemptions = o.n_preemptions
        self.num_cached_tokens = o.n_cached_tokens
        if o.finished:
            self.finished = True
            self.finish_reason = o.finish_reason
            self.stop_reason = o.stop_reason or None
            self.error = o.error or None

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id!r}, text={self.text!r}, "
                f"token_ids={self.token_ids!r}, finish_reason={self.finish_reason!r})")


class StreamDelta:
    """One streamed piece of a request: the new `text` and `token_ids` since the previous
    piece; the last piece has `finished` True and a `finish_reason` (and with "error", the
    reason in `error`)."""

    def __init__(self, request_id: str, text: str, token_ids: list[int], finished: bool,
                 finish_reason: Optional[str], error: Optional[str] = None):
        self.request_id = request_id
        self.text = text
        self.token_ids = token_ids
        self.finished = finished
        self.finish_reason = finish_reason
        self.error = error

    def __repr__(self) -> str:
        return (f"StreamDelta(text={self.text!r}, token_ids={self.token_ids!r}, "
                f"finished={self.finished}, finish_reason={self.finish_reason!r})")


def _packaged_tiny_tokenizer() -> Optional[str]:
    path = os.path.join(os.path.dirname(__file__), "data", "tiny_tokenizer.json")
    return path if os.path.exists(path) else None


Prompt = Union[str, Sequence[int], dict]


def _as_prompt_list(prompts: Union[Prompt, Sequence[Prompt]]) -> list[Prompt]:
    if isinstance(prompts, (str, dict)) or (
            isinstance(prompts, Sequence) and prompts and isinstance(prompts[0], int)):
        return [prompts]
    return list(prompts)


class LLM:
    """An engine serving one model in this process. Calls are serialized by a lock; one
    LLM may be used from several threads, but they take turns.

    Engine arguments are EngineArgs' fields as keywords. Speculative decoding:
    speculative_method "auto" (default: the checkpoint's DSpark or MTP drafter when it has
    one and the backend verifies drafts, else none), "dspark", "mtp" (an error when the
    checkpoint lacks it) or "none"; num_speculative_tokens (0: the drafter's default);
    spec_scheduling "fixed" or "confidence". stats() has its counters."""

    def __init__(self, model: Optional[str] = None, **engine_args: Any):
        # Data / expert / context parallelism is one process per device with its own
        # scheduler (src/parallel/dp): not something one in-process engine can be.
        for key, flag in (("data_parallel_size", "--data-parallel-size"),
                          ("expert_parallel_size", "--expert-parallel-size"),
                          ("context_parallel_size", "--context-parallel-size")):
            size = engine_args.pop(key, 1)
            if size is None or int(size) != 1:
                raise ValueError(
                    f"LLM: {key}={size} needs one process per rank, which an in-process LLM is not; "
                    f"serve the model with `deepinfer serve {flag} N` (it starts the ranks and an "
                    "OpenAI-compatible front) and use its HTTP API")
        args = _core.EngineArgs()
        args.speculative_method = "auto"  # as the command line's --speculative-method
        if not model:
            model = _core.default_model()
        if model:
            args.model_dir = os.fspath(model)
        elif not engine_args.get("tokenizer_path") and not os.environ.get("DEEPINFER_TINY_TOKENIZER"):
            packaged = _packaged_tiny_tokenizer()
            if packaged:
                args.tokenizer_path = packaged
        for key, value in engine_args.items():
            if key == "numerics" and isinstance(value, str):
                value = getattr(_core.Numerics, value)
            if key == "swa_bounded_replay" and isinstance(value, bool):
                value = 140 if value else 0  # DeepInfer's recommended KEEP
            if key.startswith("_") or not hasattr(args, key):
                raise TypeError(f"LLM: unknown engine argument {key!r}")
            setattr(args, key, value)
        self._engine = _core.Engine(args)
        self._lock = threading.RLock()
        self._ids = itertools.count()
        self._buffered: dict[str, list[Any]] = {}  # outputs of streams not being read now

    def stats(self) -> Any:
        """The engine's counters (EngineStats): steps, and speculative decoding's
        n_verifications, n_drafts_verified / _accepted, accepted_at / verified_at per position,
        num_speculative_tokens (0: off), mean_acceptance_length(), verified_tokens_per_step(),
        draft_time_share(); prefix caching's prefix_cache_queries / _hits / _lookup_tokens /
        _query_tokens / _hit_tokens / _block_tokens (0: off) and prefix_cache_hit_rate()."""
        with self._lock:
            return self._engine.stats()

    # -- tokenizer -------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text` (with BOS when add_special_tokens); needs a tokenizer."""
        return self._engine.encode(text, add_special_tokens)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of `token_ids`; needs a tokenizer."""
        return self._engine.decode(list(token_ids), skip_special_tokens)

    # -- requests --------------------------------------------------------------------------
    def _request(self, prompt: Prompt, params: SamplingParams, choice: int = 0
                 ) -> tuple[Any, Optional[str]]:
        text: Optional[str] = None
        if isinstance(prompt, str):
            text = prompt
            ids = self._engine.encode(prompt, True)
        elif isinstance(prompt, dict):
            ids = list(prompt["prompt_token_ids"])
        else:
            ids = [int(t) for t in prompt]
        r = _core.EngineRequest()
        r.id = f"req-{next(self._ids)}"
        r.prompt = ids
        r.params = params._core(choice)
        r.stop = list(params.stop)
        r.priority = int(params.priority)
        r.n_logprobs = -1 if params.logprobs is None else int(params.logprobs)
        r.skip_special_tokens = bool(params.skip_special_tokens)
        if params.constraint is not None:
            r.constraint_kind, r.constraint = params.constraint
        return r, text

    def generate(self, prompts: Union[None, Prompt, Sequence[Prompt]] = None,
                 sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
                 *, prompt_token_ids: Union[None, Sequence[int], Sequence[Sequence[int]]] = None
                 ) -> list[RequestOutput]:
        """Runs every prompt to completion, batched; returns one RequestOutput per prompt, in
        order. A prompt is text, a list of token ids, or {"prompt_token_ids": [...]};
        `prompt_token_ids` (one list of ids or a list of them) gives token-id prompts instead
        of `prompts`, as vLLM's older API did. Ids must be below the model's vocabulary size
        (ValueError otherwise); no tokenizer is needed for them, except to fill `text`."""
        if prompt_token_ids is not None:
            if prompts is not None:
                raise ValueError("generate: give prompts or prompt_token_ids, not both")
            ids = list(prompt_token_ids)
            prompts = [ids] if not ids or isinstance(ids[0], int) else [list(p) for p in ids]
        if prompts is None:
            raise ValueError("generate: no prompts")
        prompts = _as_prompt_list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params_list = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params_list = list(sampling_params)
            if len(params_list) != len(prompts):
                raise ValueError(f"{len(params_list)} sampling params for {len(prompts)} prompts")
        reqs, results, firsts = [], [], []
        for prompt, params in zip(prompts, params_list):
            choices = []
            for k in range(params.n):
                r, text = self._request(prompt, params, k)
                reqs.append(r)
                choices.append(RequestOutput(r.id, text, list(r.prompt)))
                results.append((choices[-1], params.logprobs is not None))
            choices[0]._choices = choices
            firsts.append(choices[0])
        if not reqs:
            return []
        with self._lock:
            outs = self._engine.generate(reqs)
        for (res, want_lp), o in zip(results, outs):
            res._add(o, want_lp)
        return firsts

    def generate_stream(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None
                        ) -> Iterator[StreamDelta]:
        """Yields StreamDelta pieces of one prompt (text, token ids or {"prompt_token_ids"})
        as they are produced. Closing the iterator early aborts the request. Several streams
        may be read in turns. For asyncio, see AsyncLLM."""
        r, _ = self._request(prompt, sampling_params or SamplingParams())
        with self._lock:
            self._engine.add_request(r)
            self._buffered[r.id] = []
        finished = False
        try:
            while not finished:
                with self._lock:
                    mine = self._buffered[r.id]
                    if not mine:
                        for o in self._engine.step():
                            if o.id in self._buffered:
                                self._buffered[o.id].append(o)
                    pending, self._buffered[r.id] = self._buffered[r.id], []
                for o in pending:
                    finished = finished or o.finished
                    yield StreamDelta(r.id, o.new_text, list(o.new_tokens), o.finished,
                                      o.finish_reason if o.finished else None, o.error or None)
        finally:
            with self._lock:
                if not finished:
                    self._engine.abort(r.id)
                self._buffered.pop(r.id, None)

    # -- chat ------------------------------------------------------------------------------
    def chat(self, messages: Union[Sequence[dict], Sequence[Sequence[dict]]],
             sampling_params: Optional[SamplingParams] = None, *, thinking: Optional[bool] = None,
             reasoning_effort: Union[None, str, int] = None, tools: Optional[Sequence[dict]] = None,
             tool_choice: Union[None, str, dict] = None, parallel_tool_calls: Optional[bool] = None,
             chat_template_kwargs: Optional[dict] = None, chat_version: Optional[str] = None,
             **request_fields: Any) -> list[RequestOutput]:
        """Chat completion through the DeepSeek V4/V4.1 chat encoding, with the server's
        Chat Completions conversion (OpenAI-style messages and tools).

        `messages`: one conversation (a list of {"role", "content", ...}; assistant turns may
        carry "reasoning_content" and "tool_calls", tool results "tool_call_id") or a list of
        them. `tools`: OpenAI function tools ({"type": "function", "function": {"name",
        "description", "parameters"}}) or {"name", "description", "parameters"}; `tool_choice`
        "auto" (default) | "none" | "required" (enforced by the tool-call grammar) | a named
        function; `parallel_tool_calls` False: at most one call. Reasoning: `thinking` turns
        thinking mode on (default off); `reasoning_effort` is "low" | "high" | "xhigh" | "max" |
        "none" or 1..100; `chat_template_kwargs` may give {"thinking": bool} (or
        "enable_thinking") as vLLM users pass it. Other request fields (response_format,
        drop_thinking, ...) are those of recipe/chat_request.h.

        Each output also has `content`, `reasoning_content` (the thinking text, "" without
        thinking) and `tool_calls` ([{"name", "arguments"}], arguments as JSON text) parsed
        from the completion. `chat_version` ("v4" or "v4.1") defaults to the model's: V4.1
        for model_type deepseek_v41*."""
        if chat_version is None:
            chat_version = "v4.1" if self._engine.model_type.startswith("deepseek_v41") else "v4"
        kwargs = dict(chat_template_kwargs or {})
        unknown = set(kwargs) - {"thinking", "enable_thinking", "reasoning_effort"}
        if unknown:
            raise ValueError(f"chat: unsupported chat_template_kwargs {sorted(unknown)}")
        if thinking is None:
            thinking = bool(kwargs.get("thinking", kwargs.get("enable_thinking", False)))
        if reasoning_effort is None:
            reasoning_effort = kwargs.get("reasoning_effort")
        fields = dict(request_fields)
        for key, value in (("reasoning_effort", reasoning_effort), ("tool_choice", tool_choice),
                           ("parallel_tool_calls", parallel_tool_calls)):
            if value is not None:
                fields[key] = value
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        params = sampling_params or SamplingParams()
        reqs, prompts, per_prompt = [], [], []
        eos = set(self._engine.eos_token_ids)
        for conv in conversations:
            body = dict(fields, messages=list(conv), thinking_mode=bool(thinking))
            if tools:
                body["tools"] = list(tools)
            request_json = json.dumps(body)
            ids = self._engine.encode_chat(request_json, chat_version, openai=True)
            reqs.append(request_json)
            prompts.append({"prompt_token_ids": ids})
            # tool_choice "required": the DSML tool-call grammar with each tool's schema.
            spec = _core.tool_call_constraint(request_json, chat_version, openai=True)
            if spec is None:
                per_prompt.append(params)
            else:
                if params.constraint is not None:
                    raise ValueError("chat: tool_choice required cannot be combined with another "
                                     "structured-output constraint")
                constrained = copy.copy(params)
                constrained.constraint = ("tool_calls", spec)
                per_prompt.append(constrained)
        outs = self.generate(prompts, per_prompt)
        for first, request_json in zip(outs, reqs):
            for out in first.outputs:
                self._parse_chat(out, request_json, eos)
        return outs

    def _parse_chat(self, out: RequestOutput, request_json: str, eos: set[int]) -> None:
        ids = list(out.token_ids)
        if ids and ids[-1] in eos and out.finish_reason == "stop":
            ids = ids[:-1]
        raw = self._engine.decode(ids, False)
        if out.stop_reason:
            cut = raw.find(out.stop_reason)
            raw = raw[:cut] if cut >= 0 else raw
        reasoning, content, calls = _core.parse_chat_output(request_json, raw)
        out.reasoning_content = reasoning
        out.content = content
        out.tool_calls = [{"name": n, "arguments": a} for n, a in calls]

    def abort(self, request_id: str) -> bool:
        """Cancels a running request (its id is RequestOutput.request_id); False if unknown
        or finished."""
        with self._lock:
            return self._engine.abort(request_id)


from ._async import AsyncLLM  # noqa: E402  (it builds on LLM)
