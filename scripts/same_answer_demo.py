#!/usr/bin/env python3
"""same_answer_demo.py: does a busy server give the same answer to the same request?

Starts each server itself with --parallel 4, sends one chat request ten times at
temperature 0.8 with a fixed seed while three other clients keep the server busy with
different long requests, hashes every answer, and prints per server a table (run, the
answer's first 40 characters, the sha256 of the full answer) and the number of distinct
answers. Python standard library only.

  python scripts/same_answer_demo.py --model M.gguf --kinetic build/kinetic \\
      --kinetic-args "--device cpu" --receipt last.json \\
      [--llama-server llama-server --llama-args "-ngl 0 -c 4096"]

--receipt saves the receipt of Kinetic's last run (asked for with "receipt": true), made on
the busy server; `kinetic verify-receipt last.json` reruns it alone. Chat templates: a
model with tokenizer.chat_template gets it; one without (a base model) gets Kinetic's
documented fallback, the message text raw, as `kinetic run` does (force a family with
--kinetic-args "--chat-format chatml"); llama-server falls back to chatml. --kinetic-args
"--device vulkan" runs Kinetic's server on the first Vulkan device (kinetic devices).
"""
import argparse
import hashlib
import http.client
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

PROBE = "Invent a name for a café on the Moon and describe it in two sentences."
BUSY = [
    "Write a long story about a lighthouse keeper who finds a map in a bottle.",
    "Explain, step by step and at length, how a steam engine works.",
    "Describe a journey across a desert, day by day, for a whole week.",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body, timeout):
    """(HTTP status, JSON body); status 0 when the server could not be reached or went away
    (refused, reset, closed mid-answer), with the reason as the error message."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except (ValueError, OSError):
            return e.code, {"error": {"message": str(e)}}
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        # a stopped server: refused, reset (RemoteDisconnected), cut (IncompleteRead)
        return 0, {"error": {"message": f"no answer: {e!r}"}}


def wait_ready(base, proc, timeout):
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


class Busy(threading.Thread):
    """A client that keeps sending long requests until told to stop."""

    def __init__(self, base, k, args):
        super().__init__(daemon=True)
        self.base, self.k, self.args = base, k, args
        self.stop = threading.Event()
        self.sent = 0
        self.failed = None

    def run(self):
        while not self.stop.is_set():
            st, js = post(self.base, "/v1/chat/completions", {
                "messages": [{"role": "user", "content": BUSY[self.k]}],
                "max_tokens": self.args.busy_tokens, "temperature": 1.0,
                "seed": 1000 * (self.k + 1) + self.sent}, self.args.timeout)
            self.sent += 1
            if st != 200 and not self.stop.is_set():  # a stopped server is not a failure
                self.failed = js.get("error", {}).get("message", str(st))
                time.sleep(0.5)  # never spin on a refusing server


def demo(title, label, cmd, args, kinetic):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    full = cmd(port)
    print(f"{title}, {label} --parallel 4", flush=True)
    log = open(os.devnull, "w") if not args.verbose else None
    proc = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT if log else None)
    busy = []
    try:
        if not wait_ready(base, proc, args.timeout):
            print(f"  the server did not start: {' '.join(full)}")
            return None
        busy = [Busy(base, k, args) for k in range(3)]
        for b in busy:
            b.start()
        time.sleep(args.warmup)  # let the busy clients fill their slots
        body = {"messages": [{"role": "user", "content": args.prompt}],
                "max_tokens": args.max_tokens, "temperature": 0.8, "seed": args.seed}
        want_receipt = kinetic and args.receipt
        receipt, receipt_note = None, None
        print(f"{'run':>3}  {'answer (first 40 characters)':<40}  sha256 of the full answer")
        hashes = []
        for run in range(1, args.runs + 1):
            req = dict(body, receipt=True) if want_receipt else body
            st, js = post(base, "/v1/chat/completions", req, args.timeout)
            if st == 400 and want_receipt and js.get("error", {}).get("param") == "receipt":
                receipt_note = js["error"]["message"]
                want_receipt = False
                st, js = post(base, "/v1/chat/completions", body, args.timeout)
            if st != 200:
                print(f"{run:>3}  request failed ({st}): {js.get('error', {}).get('message', js)}")
                continue
            text = js["choices"][0]["message"]["content"] or ""
            h = hashlib.sha256(text.encode()).hexdigest()
            hashes.append(h)
            head = " ".join(text.split())[:40]
            print(f"{run:>3}  {head:<40}  {h[:16]}", flush=True)
            if want_receipt and "receipt" in js:
                receipt = js["receipt"]
        for b in busy:
            b.stop.set()
            if b.failed:
                print(f"  (busy client {b.k + 1} had a failed request: {b.failed})")
                b.failed = None
        n = len(set(hashes))
        print(f"{n} distinct answer{'' if n == 1 else 's'} in {len(hashes)} runs")
        if kinetic and args.receipt:
            if receipt is not None:
                with open(args.receipt, "w") as f:
                    json.dump(receipt, f, indent=2)
                    f.write("\n")
                print(f"receipt of the last run saved to {args.receipt}; check it with: "
                      f"kinetic verify-receipt {args.receipt}")
            else:
                print(f"no receipt saved: {receipt_note or 'the server sent none'}")
        print(flush=True)
        return n
    finally:
        # The busy clients stop first: their requests in flight end with the server, and
        # they return quietly (post() turns a closed connection into status 0).
        for b in busy:
            b.stop.set()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for b in busy:
            b.join(timeout=10)
        if log:
            log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the GGUF model both servers load")
    ap.add_argument("--kinetic", default="kinetic", help="the kinetic executable")
    ap.add_argument("--kinetic-args", default="", help="extra arguments for kinetic serve")
    ap.add_argument("--receipt", help="save the receipt of Kinetic's last run to this file")
    ap.add_argument("--llama-server", help="also run llama.cpp's llama-server (path)")
    ap.add_argument("--llama-args", default="", help="extra arguments for llama-server")
    ap.add_argument("--prompt", default=PROBE, help="the request sent ten times")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per probe answer")
    ap.add_argument("--busy-tokens", type=int, default=400, help="tokens per busy request")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds before the first probe")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per request")
    ap.add_argument("--verbose", action="store_true", help="show the servers' logs")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"same_answer_demo: {args.model}: no such file")

    results = {}
    results["kinetic"] = demo("Kinetic", "kinetic serve", lambda p: [
        args.kinetic, "serve", args.model, "--parallel", "4", "--port", str(p),
        *shlex.split(args.kinetic_args)], args, kinetic=True)
    if args.llama_server:
        results["llama"] = demo("llama.cpp", "llama-server", lambda p: [
            args.llama_server, "-m", args.model, "--parallel", "4", "--port", str(p),
            "--host", "127.0.0.1", *shlex.split(args.llama_args)], args, kinetic=False)
    return 0 if results["kinetic"] == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
