#!/usr/bin/env python3
"""serve_bench.py: aggregate generation throughput of an OpenAI-compatible server with N
parallel streams, for `kinetic serve` and (optionally) `llama-server` on the same model.

  python bench/serve_bench.py --model M.gguf --kinetic build/kinetic \\
      [--llama-server /path/llama-server] [--parallel 4] [--tokens 128] [--rounds 2]

Each server is started with --parallel P; after a warm-up request, every round sends
P completions at once (different prompts, temperature 0.8, fixed seeds) and measures the
wall time until the last one ends. Throughput = generated tokens (from `usage`) / wall
time, summed over rounds. A random-weight model may emit an end token early, so both
servers are asked to ignore it where they can (llama-server: ignore_eos) and the tokens
actually generated are what is counted. Python standard library only.
"""
import argparse
import json
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, body, timeout=1800):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(base, proc, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    return False


def bench(name, cmd, args):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(cmd(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_ready(base, proc):
            print(f"{name}: the server did not start: {' '.join(cmd(port))}")
            return None
        post(base, {"prompt": "warm up", "max_tokens": 8, "temperature": 0})
        total_tokens, total_time = 0, 0.0
        for rnd in range(args.rounds):
            results = [None] * args.parallel

            def one(i):
                results[i] = post(base, {
                    "prompt": f"Stream {i} of round {rnd}: tell a long story about the sea.",
                    "max_tokens": args.tokens, "temperature": 0.8, "seed": 100 * rnd + i,
                    "ignore_eos": True})
            ts = [threading.Thread(target=one, args=(i,)) for i in range(args.parallel)]
            t0 = time.time()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            dt = time.time() - t0
            n = sum(r["usage"]["completion_tokens"] for r in results)
            total_tokens += n
            total_time += dt
            print(f"{name}: round {rnd + 1}: {n} tokens in {dt:.2f} s = {n / dt:.1f} tokens/s",
                  flush=True)
        tps = total_tokens / total_time
        print(f"{name}: {args.parallel} streams: {total_tokens} tokens in {total_time:.2f} s = "
              f"{tps:.1f} tokens/s aggregate", flush=True)
        return tps
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--kinetic", default="kinetic")
    ap.add_argument("--kinetic-args", default="")
    ap.add_argument("--llama-server")
    ap.add_argument("--llama-args", default="-ngl 0")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128, help="tokens per stream per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=1024, help="context per slot")
    args = ap.parse_args()
    k = bench("kinetic serve", lambda p: [
        args.kinetic, "serve", args.model, "--parallel", str(args.parallel), "--port", str(p),
        "--ctx-size", str(args.ctx_size), *shlex.split(args.kinetic_args)], args)
    ll = None
    if args.llama_server:
        # llama-server divides -c among its slots: give it the same context per slot.
        ll = bench("llama-server", lambda p: [
            args.llama_server, "-m", args.model, "--parallel", str(args.parallel),
            "--port", str(p), "--host", "127.0.0.1", "-c", str(args.ctx_size * args.parallel),
            *shlex.split(args.llama_args)], args)
    if k and ll:
        print(f"kinetic / llama-server: {k / ll:.2f}x")
    return 0 if k else 1


if __name__ == "__main__":
    sys.exit(main())
