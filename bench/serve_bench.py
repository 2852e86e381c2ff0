#!/usr/bin/env python3
"""serve_bench.py: aggregate generation throughput of OpenAI-compatible servers with N
parallel streams: `kinetic serve` against llama-server (or any server of that family,
e.g. ik_llama.cpp's) on the same model, or against servers already running.

  python bench/serve_bench.py --model M.gguf --kinetic build/kinetic --threads 2 \\
      [--llama-server /path/llama-server] [--peer-server ik_llama.cpp=/path/llama-server] \\
      [--url name=http://host:port] [--parallel 1,4,8,16] [--tokens 128] [--rounds 2]

Each started server gets --parallel P and the same threads; a --url server is used as
it runs (start it with the same settings). With a list of P, the servers are started
afresh for each P in turn and a table of aggregate tokens/s per P ends the output. After a warm-up request, every round sends
P completions at once (different prompts, temperature 0.8, fixed seeds) and measures the
wall time until the last one ends. Throughput = generated tokens (from `usage`) / wall
time, summed over rounds. All servers start first; then each round runs on one server
at a time while the others idle, so the machine's changing load falls on all alike. A
random-weight model may emit an end token early, so servers are asked to ignore it where
they can (ignore_eos) and the tokens actually generated are what is counted. Python standard library only.
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


def one_round(name, base, args, rnd):
    """Sends P completions at once; returns (generated tokens, seconds)."""
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
    print(f"{name}: round {rnd + 1}: {n} tokens in {dt:.2f} s = {n / dt:.1f} tokens/s", flush=True)
    return n, dt


def start(name, cmd):
    """Starts a server; returns (process, base URL), or (None, None) if it did not come up."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(cmd(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_ready(base, proc):
        print(f"{name}: the server did not start: {' '.join(cmd(port))}")
        stop(proc)
        return None, None
    return proc, base


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def name_value(spec, what):
    if "=" not in spec:
        sys.exit(f"serve_bench: {what} wants NAME=VALUE, not {spec!r}")
    return spec.split("=", 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="GGUF file the started servers load")
    ap.add_argument("--kinetic", default="kinetic", help="kinetic binary ('' to skip)")
    ap.add_argument("--kinetic-args", default="")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary")
    ap.add_argument("--peer-server", action="append", default=[], metavar="NAME=PATH",
                    help="another llama-server-compatible binary (repeatable)")
    ap.add_argument("--llama-args", default="-ngl 0", help="extra arguments for llama-server binaries")
    ap.add_argument("--url", action="append", default=[], metavar="NAME=URL",
                    help="a server already running at URL (repeatable)")
    ap.add_argument("--threads", type=int, default=0, help="threads for started servers (0: their default)")
    ap.add_argument("--parallel", default="4", help="streams, or a list of them: 1,4,8,16")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per stream per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=1024, help="context per slot")
    args = ap.parse_args()
    if (args.kinetic or args.llama_server or args.peer_server) and not args.model:
        sys.exit("serve_bench: --model is needed to start servers")
    try:
        ns = [int(x) for x in args.parallel.split(",")]
    except ValueError:
        ns = []
    if not ns or min(ns) < 1:
        sys.exit(f"serve_bench: --parallel wants stream counts like 4 or 1,4,8,16, not {args.parallel!r}")
    table = []
    for n in ns:
        args.parallel = n
        tps = measure(args)
        if tps is None:
            return 1
        table.append((n, tps))
    if len(ns) > 1:
        names = [name for name, _ in table[0][1]]
        print("\n| streams | " + " | ".join(f"{n} t/s" for n in names) +
              "".join(f" | {names[0]} / {n}" for n in names[1:]) + " |")
        print("|---:|" + "---:|" * (2 * len(names) - 1))
        for n, tps in table:
            v = [t for _, t in tps]
            print(f"| {n} | " + " | ".join(f"{t:.1f}" for t in v) +
                  "".join(f" | {v[0] / t:.2f}x" for t in v[1:]) + " |")
    return 0


def measure(args):
    """Starts the servers with args.parallel slots, runs the rounds, stops them; returns
    [(name, aggregate tokens/s)], or None when a server did not start."""
    servers = []  # (name, command or None, url or None)
    if args.kinetic:
        th = ["--threads", str(args.threads)] if args.threads else []
        servers.append(("kinetic serve", lambda p: [
            args.kinetic, "serve", args.model, "--parallel", str(args.parallel), "--port", str(p),
            "--ctx-size", str(args.ctx_size), *th, *shlex.split(args.kinetic_args)], None))
    peers = ([("llama-server", args.llama_server)] if args.llama_server else []) + \
        [name_value(s, "--peer-server") for s in args.peer_server]
    for name, path in peers:
        th = ["-t", str(args.threads)] if args.threads else []
        # llama-server divides -c among its slots: give it the same context per slot.
        servers.append((name, lambda p, path=path: [
            path, "-m", args.model, "--parallel", str(args.parallel),
            "--port", str(p), "--host", "127.0.0.1", "-c", str(args.ctx_size * args.parallel),
            *th, *shlex.split(args.llama_args)], None))
    for name, url in (name_value(s, "--url") for s in args.url):
        servers.append((name, None, url.rstrip("/")))
    if not servers:
        sys.exit("serve_bench: nothing to measure")
    procs, bases = [], []
    try:
        for name, cmd, url in servers:
            proc, base = start(name, cmd) if cmd else (None, url)
            if base is None:
                return None
            procs.append(proc)
            bases.append(base)
            post(base, {"prompt": "warm up", "max_tokens": 8, "temperature": 0})
        # Round by round, one server at a time (the others idle), so a change in the
        # machine's load falls on every server alike.
        totals = [[0, 0.0] for _ in servers]
        for rnd in range(args.rounds):
            for i, (name, _, _) in enumerate(servers):
                n, dt = one_round(name, bases[i], args, rnd)
                totals[i][0] += n
                totals[i][1] += dt
    finally:
        for p in procs:
            if p:
                stop(p)
    tps = []
    for (name, _, _), (n, dt) in zip(servers, totals):
        tps.append(n / dt)
        print(f"{name}: {args.parallel} streams: {n} tokens in {dt:.2f} s = {n / dt:.1f} tokens/s aggregate")
    for i in range(1, len(servers)):
        print(f"{servers[0][0]} / {servers[i][0]}: {tps[0] / tps[i]:.2f}x")
    return [(name, t) for (name, _, _), t in zip(servers, tps)]


if __name__ == "__main__":
    sys.exit(main())
