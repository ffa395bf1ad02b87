"""AsyncLLM: the engine for asyncio code.

    import asyncio, deepinfer

    async def main():
        async with deepinfer.AsyncLLM() as llm:
            params = deepinfer.SamplingParams(temperature=0, max_tokens=16)
            async for out in llm.generate("Hello", params):
                print(out.text)            # the text so far (cumulative, vLLM-style)
            async for delta in llm.stream([1, 2, 3], params):
                print(delta.token_ids)     # only what is new

    asyncio.run(main())

One background thread owns the engine: it adds submitted requests between steps, runs
steps while any request is unfinished (the step releases the GIL) and hands each output to
the event loop of the coroutine that submitted it (loop.call_soon_threadsafe). Requests from
many coroutines, or from several event loops, are batched together. Leaving an `async for`
early, or cancelling the task reading it, aborts the request.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator, Callable, Optional

from . import LLM, Prompt, RequestOutput, SamplingParams, StreamDelta

_Sink = Callable[[Any], None]  # receives core outputs, or an exception that ends the request


class AsyncLLM:
    """An engine serving one model in this process to asyncio code. `model` and the engine
    arguments are those of LLM. Use it as an async context manager, or call close()."""

    def __init__(self, model: Optional[str] = None, **engine_args: Any):
        self._llm = LLM(model, **engine_args)
        self._engine = self._llm._engine  # touched only by the engine thread from now on
        self._cv = threading.Condition()
        self._adds: list[tuple[Any, _Sink]] = []
        self._aborts: list[str] = []
        self._sinks: dict[str, _Sink] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="deepinfer-async-engine", daemon=True)
        self._thread.start()

    # -- lifetime --------------------------------------------------------------------------
    def close(self) -> None:
        """Stops the engine thread; unfinished requests end with an error. Idempotent."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()

    async def __aenter__(self) -> "AsyncLLM":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    # -- tokenizer (thread-safe: the tokenizer is immutable) -------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; needs a tokenizer."""
        return self._llm.encode(text, add_special_tokens)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of `token_ids`; needs a tokenizer."""
        return self._llm.decode(token_ids, skip_special_tokens)

    # -- requests --------------------------------------------------------------------------
    async def generate(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
                       request_id: Optional[str] = None) -> AsyncIterator[RequestOutput]:
        """Yields the request's RequestOutput each time it grows: `text` and `token_ids` so far
        (each yield is a new object); the last has `finished` True and `finish_reason`. A prompt
        is text, token ids or {"prompt_token_ids": [...]}; SamplingParams.n must be 1. Bad
        parameters or prompts raise ValueError (deepinfer.Error) from the first iteration."""
        params = sampling_params or SamplingParams()
        out: Optional[RequestOutput] = None
        async for o, text, ids in self._outputs(prompt, params, request_id):
            if out is None:
                out = RequestOutput(o.id, text, ids)
            out._add(o, params.logprobs is not None)
            yield _snapshot(out)

    async def stream(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
                     request_id: Optional[str] = None) -> AsyncIterator[StreamDelta]:
        """Yields only what is new each time (StreamDelta, as LLM.generate_stream does)."""
        async for o, _, _ in self._outputs(prompt, sampling_params or SamplingParams(), request_id):
            yield StreamDelta(o.id, o.new_text, list(o.new_tokens), o.finished,
                              o.finish_reason if o.finished else None, o.error or None)

    async def abort(self, request_id: str) -> None:
        """Cancels a request; its stream then ends with finish_reason "abort"."""
        with self._cv:
            self._aborts.append(request_id)
            self._cv.notify()

    async def _outputs(self, prompt: Prompt, params: SamplingParams, request_id: Optional[str]
                       ) -> AsyncIterator[tuple[Any, Optional[str], list[int]]]:
        if params.n != 1:
            raise ValueError("AsyncLLM: SamplingParams.n must be 1 (submit n requests instead)")
        r, text = self._llm._request(prompt, params)
        if request_id is not None:
            r.id = str(request_id)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def sink(item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        with self._cv:
            if self._closed:
                raise RuntimeError("AsyncLLM is closed")
            self._adds.append((r, sink))
            self._cv.notify()
        finished = False
        try:
            while not finished:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                finished = item.finished
                yield item, text, list(r.prompt)
        finally:
            if not finished:
                with self._cv:
                    self._aborts.append(r.id)
                    self._cv.notify()

    # -- the engine thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not (self._closed or self._adds or self._aborts or self._engine.has_unfinished()):
                    self._cv.wait()
                if self._closed:
                    break
                adds, self._adds = self._adds, []
                aborts, self._aborts = self._aborts, []
            for r, sink in adds:
                try:
                    self._engine.add_request(r)
                    self._sinks[r.id] = sink
                except Exception as e:  # bad parameters, prompt too long, duplicate id
                    _deliver(sink, e)
            for request_id in aborts:
                self._engine.abort(request_id)  # its final output comes from the next step
            if not self._engine.has_unfinished():
                continue
            try:
                outs = self._engine.step()
            except Exception as e:  # the step itself failed: every running request ends
                self._fail_all(e)
                continue
            for o in outs:
                sink = self._sinks.get(o.id)
                if sink is not None:
                    _deliver(sink, o)
                    if o.finished:
                        del self._sinks[o.id]
        self._fail_all(RuntimeError("AsyncLLM was closed"))

    def _fail_all(self, error: BaseException) -> None:
        for request_id, sink in list(self._sinks.items()):
            self._engine.abort(request_id)
            _deliver(sink, error)
        self._sinks.clear()
        with self._cv:
            adds, self._adds = self._adds, []
        for _, sink in adds:
            _deliver(sink, error)


def _deliver(sink: _Sink, item: Any) -> None:
    try:
        sink(item)
    except RuntimeError:
        pass  # the reader's event loop is closed: nobody is waiting any more


def _snapshot(out: RequestOutput) -> RequestOutput:
    s = RequestOutput(out.request_id, out.prompt, list(out.prompt_token_ids))
    s.text = out.text
    s.token_ids = list(out.token_ids)
    s.logprobs = None if out.logprobs is None else list(out.logprobs)
    s.finished = out.finished
    s.finish_reason = out.finish_reason
    s.stop_reason = out.stop_reason
    s.error = out.error
    s.num_preemptions = out.num_preemptions
    return s
