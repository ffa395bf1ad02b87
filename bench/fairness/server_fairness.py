#!/usr/bin/env python3
"""Issue 12's scenario against `deepinfer serve` (HTTP, the built-in tiny model by default):
--streams streamed chats run; a ~--long-words-token prompt arrives (max_tokens 1); a second
later a 1-token chat. Reports the streams' inter-token gaps while the long prompt is prefilled
(p50/p99/max), the chat's latency and the long request's. Extra arguments go to the server:

  DEEPINFER_BUILD=build python3 bench/fairness/server_fairness.py -- --max-prefill-tokens-with-decodes 0 \
      --long-prefill-token-threshold 0          # the old scheduler
  DEEPINFER_BUILD=build python3 bench/fairness/server_fairness.py   # defaults
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time

MODEL = "deepinfer-tiny"


def start_server(extra):
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    binary = os.path.join(os.environ.get("DEEPINFER_BUILD", "build"), "deepinfer")
    proc = subprocess.Popen([binary, "serve", "--port", "0", *extra], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while time.time() < deadline:
        m = re.search(r"serving \S+ on http://127\.0\.0\.1:(\d+)", open(log.name).read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            sys.exit("server exited:\n" + open(log.name).read())
        time.sleep(0.2)
    sys.exit("server did not start")


def body(content, **kw):
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}],
                       "temperature": 0, **kw}).encode()


async def open_post(port, data):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    await w.drain()
    return r, w


async def stream(port, i, times, stop):
    r, w = await open_post(port, body(f"Tell a long story {i}", stream=True, max_tokens=30000,
                                      ignore_eos=True))
    while not stop.is_set():
        line = await r.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            times.append(time.monotonic())
    w.close()


async def timed(port, data):
    t0 = time.monotonic()
    r, w = await open_post(port, data)
    resp = await r.read()
    w.close()
    assert resp.startswith(b"HTTP/1.1 200"), resp[:300]
    return t0, time.monotonic()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else 0.0


async def scenario(port, n_streams, long_words):
    stop = asyncio.Event()
    times = [[] for _ in range(n_streams)]
    tasks = [asyncio.create_task(stream(port, i, times[i], stop)) for i in range(n_streams)]
    await asyncio.sleep(3)
    long_task = asyncio.create_task(timed(port, body("word " * long_words, max_tokens=1)))
    await asyncio.sleep(1)
    chat = await timed(port, body("Hello", max_tokens=1))
    long = await long_task
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    gaps = [b - a for t in times for a, b in zip(t, t[1:]) if long[0] <= a and b <= long[1]]
    return gaps, chat[1] - chat[0], long[1] - long[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--long-words", type=int, default=20000)
    ap.add_argument("server_args", nargs="*")
    args = ap.parse_args()
    proc, port = start_server(args.server_args)
    try:
        gaps, chat_s, long_s = asyncio.run(scenario(port, args.streams, args.long_words))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print(f"server args {' '.join(args.server_args) or '(defaults)'}: stream gaps during the long prefill "
          f"p50 {pct(gaps, 0.5) * 1e3:.0f} ms, p99 {pct(gaps, 0.99) * 1e3:.0f} ms, max {max(gaps, default=0) * 1e3:.0f} ms "
          f"({len(gaps)} gaps); 1-token chat {chat_s:.2f} s; long prompt {long_s:.1f} s")


if __name__ == "__main__":
    main()
