#!/usr/bin/env python3
"""How `deepinfer serve`'s memory returns to idle after bursts, and how noisy that is.

Starts the server on the built-in tiny model, warms it up, then runs --rounds rounds of the
same bursts and after each burst records, once the server has trimmed its heap (it does so
half a second after it goes quiet), the resident size (VmRSS) and malloc's own statistics
from /metrics (deepinfer_heap_in_use_bytes: bytes handed out and not freed;
deepinfer_heap_free_bytes: free bytes not yet given back). Bursts:
  streams   500 concurrent streamed chats (max_tokens 2)
  refused   300 concurrent 100 kB bodies for a model the server does not serve (404)
  too_long  20 concurrent prompts longer than --max-model-len (400 after tokenization)
  big_body  10 concurrent 6 MB bodies refused as too long (400)
--hog N runs N busy-looping processes meanwhile (a loaded machine). Prints a markdown table:
per burst kind, the levels after each round minus idle, in MiB.

  DEEPINFER_BUILD=build-h python3 bench/server/memory_noise.py --rounds 5 --hog 2
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time

MODEL = "deepinfer-tiny"


def binary():
    return os.path.join(os.environ.get("DEEPINFER_BUILD", "build"), "deepinfer")


def hog():
    while True:
        pass


class Server:
    def __init__(self, *args):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.proc = subprocess.Popen([binary(), "serve", "--port", "0", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        self.port = None
        while time.time() < deadline and self.port is None:
            m = re.search(r"serving \S+ on http://127\.0\.0\.1:(\d+)", open(self.log.name).read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                sys.exit("server exited:\n" + open(self.log.name).read())
            time.sleep(0.2)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


async def post(port, body, path=b"/v1/chat/completions"):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % (path, len(body)) + body)
    await w.drain()
    data = await r.read()
    w.close()
    return data


async def get(port, path):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
    await w.drain()
    data = await r.read()
    w.close()
    return data.decode(errors="replace")


def chat(content, model=MODEL, **kw):
    return json.dumps({"model": model, "messages": [{"role": "user", "content": content}],
                       "max_tokens": 2, "temperature": 0, **kw}).encode()


BURSTS = {
    "streams": lambda i: (chat(f"Request {i}", stream=True), b"HTTP/1.1 200", 500),
    "refused": lambda i: (chat("word " * 20000, model="elsewhere"), b"HTTP/1.1 404", 300),
    "too_long": lambda i: (chat("word " * 70000), b"HTTP/1.1 400", 20),
    "big_body": lambda i: (chat("word " * 1_200_000), b"HTTP/1.1 4", 10),
}


def run_burst(port, kind):
    make = BURSTS[kind]
    n = make(0)[2]

    async def all_of():
        return await asyncio.gather(*[post(port, make(i)[0]) for i in range(n)])

    results = asyncio.run(all_of())
    want = make(0)[1]
    bad = [r[:80] for r in results if not r.startswith(want)]
    assert not bad, (kind, bad[:3])


def levels(server):
    text = asyncio.run(get(server.port, "/metrics"))
    def gauge(name):
        return int(float(re.search(rf"^{name} (\S+)", text, re.M).group(1)))
    rss = int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{server.proc.pid}/status").read()).group(1)) * 1024
    return rss, gauge("deepinfer_heap_in_use_bytes"), gauge("deepinfer_heap_free_bytes")


def settle(server, seconds):
    # The server trims after 0.5-1 s of quiet; wait a fixed time so every sample is alike.
    time.sleep(seconds)
    return levels(server)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hog", type=int, default=0)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--bursts", default="streams,refused,too_long,big_body")
    ap.add_argument("--out")
    args = ap.parse_args()
    hogs = [multiprocessing.Process(target=hog, daemon=True) for _ in range(args.hog)]
    for h in hogs:
        h.start()
    server = Server("--max-model-len", "32768", "--io-threads", "2")
    mib = 1 / 1048576
    rows = []
    try:
        asyncio.run(post(server.port, chat("warm up")))
        idle = settle(server, args.settle)
        kinds = args.bursts.split(",")
        series = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for k in kinds:
                run_burst(server.port, k)
                series[k].append(settle(server, args.settle))
        for k in kinds:
            rss = " ".join(f"{(v[0] - idle[0]) * mib:+.1f}" for v in series[k])
            use = " ".join(f"{(v[1] - idle[1]) * mib:+.2f}" for v in series[k])
            free = " ".join(f"{v[2] * mib:.1f}" for v in series[k])
            rows.append(f"| {k} | {args.hog} | {rss} | {use} | {free} |")
    finally:
        server.stop()
        for h in hogs:
            h.terminate()
    table = (f"idle: RSS {idle[0] * mib:.1f} MiB, heap in use {idle[1] * mib:.2f} MiB, heap free "
             f"{idle[2] * mib:.1f} MiB; settle {args.settle} s after each burst\n\n"
             "| burst | hogs | RSS - idle per round MiB | heap in use - idle MiB | heap free MiB |\n"
             "|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    print(table)
    if args.out:
        with open(args.out, "a") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
