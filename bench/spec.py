#!/usr/bin/env python3
"""Benchmarks of the speed features with `kinetic run` (docs/speed.md quotes them).

  bench/spec.py draft MODEL [--runs 5] [--threads 2] [-n 128]
      generation speed, RAD-1 on vs --no-draft, on a repetitive task (copying and
      editing code) and on ordinary text; on and off runs alternate, medians reported,
      and every pair is checked to give the same tokens.
  bench/spec.py warm MODEL [--runs 5] [--prefix-tokens 2000]
      time to first token (prompt evaluation) with a ~2,000-token shared prefix held in
      the prompt cache file vs cold (--no-warm-start).
  bench/spec.py serve-warm MODEL [--runs 5] [--repeat 60]
      the same through `kinetic serve`: time to first token of requests sharing a ~2,000-
      token system prompt on a server whose prompt cache holds it vs a --no-warm-start
      server; requests alternate between the two; answers are checked to be equal.
  bench/spec.py serve-draft MODEL [--runs 5] [-n 128]
      generation speed through `kinetic serve`, RAD-1 on vs --no-draft (two servers,
      requests alternating, server-side `timings`), same tasks as `draft`.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

KINETIC = os.environ.get("KINETIC", os.path.join(os.path.dirname(__file__), "..", "build", "kinetic"))

CODE = '''def compute_total(items, tax_rate):
    """Return the total price of items, with tax, rounded to cents."""
    total = 0
    for item in items:
        price = item.price * item.quantity
        if item.discount:
            price = price - item.discount
        if price < 0:
            price = 0
        total = total + price
    total = total * (1 + tax_rate)
    return round(total, 2)


def describe(items):
    lines = []
    for item in items:
        lines.append(f"{item.name}: {item.quantity} x {item.price}")
    return "\\n".join(lines)
'''

TASKS = {
    "copy code": ("Here is a Python module:\n\n" + CODE +
                  "\nHere is the same module again, copied exactly:\n\n",
                  ["--temp", "0", "--repeat-penalty", "1"]),
    "edit code": ("Here is a Python module:\n\n" + CODE +
                  "\nHere is the same module with the variable `total` renamed to `amount`:\n\n",
                  ["--temp", "0", "--repeat-penalty", "1"]),
    "edit code, sampled": ("Here is a Python module:\n\n" + CODE +
                           "\nHere is the same module with the variable `total` renamed to `amount`:\n\n",
                           ["--temp", "0.8", "--seed", "7", "--repeat-penalty", "1"]),
    "story (defaults)": ("Once upon a time, in a small village by the sea, there lived an old "
                         "fisherman who", ["--temp", "0.8", "--seed", "7"]),
    "story, greedy": ("The history of the printing press begins", ["--temp", "0"]),
}


def run(model, prompt, extra, threads):
    p = subprocess.run([KINETIC, "run", model, prompt, "--raw", "--json", "-t", str(threads), *extra],
                       capture_output=True, encoding="utf-8", errors="surrogateescape", check=True)
    return json.loads(p.stdout)


def bench_draft(a):
    print(f"| task | tokens | --no-draft t/s | RAD-1 t/s | speed-up | drafts accepted |")
    print(f"|---|---|---|---|---|---|")
    for name, (prompt, extra) in TASKS.items():
        off, on, acc = [], [], None
        for _ in range(a.runs):
            x = run(a.model, prompt, ["-n", str(a.n), "--no-draft", *extra], a.threads)
            y = run(a.model, prompt, ["-n", str(a.n), *extra], a.threads)
            assert x["tokens"] == y["tokens"], name
            n = len(x["tokens"])
            off.append(n / (x["gen_ms"] / 1e3))
            on.append(n / (y["gen_ms"] / 1e3))
            acc = (y["draft_accepted"], y["draft_proposed"], y["forward_passes"], x["forward_passes"])
        mo, mn = statistics.median(off), statistics.median(on)
        print(f"| {name} | {n} | {mo:.1f} | {mn:.1f} | {mn / mo:.2f}x | {acc[0]}/{acc[1]}, "
              f"{acc[2]} vs {acc[3]} passes |", flush=True)


def bench_warm(a):
    para = ("Kinetic is an inference engine whose output is reproducible bit for bit. "
            "Every request records a receipt that anyone can check by running it again. ")
    # About 2,000 tokens of shared system prompt, then different questions.
    system = "You are a helpful assistant. Read the notes below.\n\n" + para * a.repeat
    qs = ["What is Kinetic?", "What does a receipt record?", "Who can check a receipt?",
          "Why is bit-for-bit output useful?", "Summarise the notes."]
    with tempfile.TemporaryDirectory() as d:
        cache = os.path.join(d, "bench.pcache")
        # Warm the file with the shared prefix (another question).
        r = run(a.model, system + "Hello.", ["-n", "1", "--temp", "0", "--prompt-cache", cache],
                a.threads)
        print(f"shared prompt: {len(r['prompt_tokens'])} tokens; cache file "
              f"{os.path.getsize(cache) / 2**20:.1f} MiB")
        cold, warm, load = [], [], []
        for i in range(a.runs):
            q = system + qs[i % len(qs)]
            x = run(a.model, q, ["-n", "1", "--temp", "0", "--no-warm-start"], a.threads)
            y = run(a.model, q, ["-n", "1", "--temp", "0", "--prompt-cache", cache], a.threads)
            assert x["tokens"] == y["tokens"]
            cold.append(x["prompt_ms"])
            warm.append(y["prompt_ms"])
            load.append(y["cache_load_ms"])
            reused = y["prompt_reused"]
        print(f"time to first token: cold {statistics.median(cold):.0f} ms, warm "
              f"{statistics.median(warm):.0f} ms ({reused} of {len(x['prompt_tokens'])} tokens "
              f"from the cache; medians of {a.runs}); reading the cache file took "
              f"{statistics.median(load):.0f} ms more (a server keeps it in memory)")


class Server:
    """`kinetic serve MODEL` on a free loopback port (one slot, a context that holds the
    benchmark prompts)."""

    def __init__(self, model, threads, *flags):
        self.p = subprocess.Popen([KINETIC, "serve", model, "--port", "0", "--parallel", "1",
                                   "--ctx-size", "3072", "-t", str(threads), *flags],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        m = None
        for line in self.p.stdout:  # "loading ..." first, "listening on" once ready
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                break
        if not m:
            self.p.kill()
            raise RuntimeError(f"server did not start: {line!r}")
        self.base = f"http://127.0.0.1:{m.group(1)}"

    def post(self, body, path="/v1/completions"):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t = time.perf_counter()
        with urllib.request.urlopen(req, timeout=1800) as r:
            js = json.loads(r.read())
        return js, (time.perf_counter() - t) * 1e3

    def ttft(self, body, path="/v1/chat/completions"):
        """Streams body; returns (the text, ms until the first token's chunk, the final
        chunk's timings)."""
        req = urllib.request.Request(self.base + path,
                                     data=json.dumps({**body, "stream": True}).encode(),
                                     headers={"Content-Type": "application/json"})
        t = time.perf_counter()
        first, text, timings = None, "", None
        with urllib.request.urlopen(req, timeout=1800) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if not ev.get("choices"):
                    continue
                ch = ev["choices"][0]
                piece = ch.get("delta", {}).get("content") or ch.get("text") or ""
                if piece and first is None:
                    first = (time.perf_counter() - t) * 1e3
                text += piece
                timings = ev.get("timings", timings)
        return text, first, timings

    def close(self):
        self.p.terminate()
        self.p.wait()


def cli_to_json(extra):
    """kinetic run's sampling flags of TASKS as request fields."""
    names = {"--temp": "temperature", "--seed": "seed", "--repeat-penalty": "repeat_penalty"}
    body = {}
    for k, v in zip(extra[::2], extra[1::2]):
        body[names[k]] = int(v) if k == "--seed" else float(v)
    return body


def bench_serve_warm(a):
    para = ("Kinetic is an inference engine whose output is reproducible bit for bit. "
            "Every request records a receipt that anyone can check by running it again. ")
    system = "You are a helpful assistant. Read the notes below.\n\n" + para * a.repeat
    qs = ["What is Kinetic?", "What does a receipt record?", "Who can check a receipt?",
          "Why is bit-for-bit output useful?", "Summarise the notes."]
    cold_s = Server(a.model, a.threads, "--no-warm-start")
    warm_s = Server(a.model, a.threads)
    try:
        msgs = lambda q: [{"role": "system", "content": system}, {"role": "user", "content": q}]
        first, _ = warm_s.post({"messages": msgs("Hello."), "max_tokens": 1, "temperature": 0},
                               "/v1/chat/completions")
        n_prompt = first["usage"]["prompt_tokens"]
        cold, warm, cold_srv, warm_srv, reused = [], [], [], [], 0
        for i in range(a.runs):
            # 8 tokens, streamed: the first one's arrival is the time to first token
            body = {"messages": msgs(qs[i % len(qs)]), "max_tokens": 8, "temperature": 0,
                    "ignore_eos": True}
            x, tx, mx = cold_s.ttft(body)
            y, ty, my = warm_s.ttft(body)
            assert x == y
            cold.append(tx)
            warm.append(ty)
            cold_srv.append(mx["prompt_ms"])
            warm_srv.append(my["prompt_ms"])
            reused = my["cache_n"]
        mc, mw = statistics.median(cold), statistics.median(warm)
        print(f"shared system prompt: {n_prompt} tokens (with the first question)")
        print(f"| server | time to first token (client) | prompt_ms (server) | cache_n |")
        print(f"|---|---|---|---|")
        print(f"| --no-warm-start | {mc:.0f} ms | {statistics.median(cold_srv):.0f} ms | 0 |")
        print(f"| Warm Start | {mw:.0f} ms | {statistics.median(warm_srv):.0f} ms | {reused} |")
        print(f"speed-up {mc / mw:.1f}x (medians of {a.runs} alternated runs)")
    finally:
        cold_s.close()
        warm_s.close()


def bench_serve_draft(a):
    off_s = Server(a.model, a.threads, "--no-draft")
    on_s = Server(a.model, a.threads)
    try:
        print(f"| task | tokens | --no-draft t/s | RAD-1 t/s | speed-up | drafts accepted |")
        print(f"|---|---|---|---|---|---|")
        for name, (prompt, extra) in TASKS.items():
            if a.only and a.only not in name:
                continue
            body = {"prompt": prompt, "max_tokens": a.n, **cli_to_json(extra)}
            off, on = [], []
            for _ in range(a.runs):
                x, _ = off_s.post(body)
                y, _ = on_s.post(body)
                assert x["choices"][0]["text"] == y["choices"][0]["text"], name
                tx, ty = x["timings"], y["timings"]
                n = tx["predicted_n"]
                off.append(tx["predicted_per_second"])
                on.append(ty["predicted_per_second"])
            mo, mn = statistics.median(off), statistics.median(on)
            print(f"| {name} | {n} | {mo:.1f} | {mn:.1f} | {mn / mo:.2f}x | "
                  f"{ty['draft_n_accepted']}/{ty['draft_n']} |", flush=True)
    finally:
        off_s.close()
        on_s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["draft", "warm", "serve-draft", "serve-warm"])
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=60, help="paragraph repeats in the shared prefix")
    ap.add_argument("--only", default="", help="serve-draft: only the tasks whose name has this")
    a = ap.parse_args()
    if a.what == "draft":
        bench_draft(a)
    elif a.what == "warm":
        bench_warm(a)
    elif a.what == "serve-draft":
        bench_serve_draft(a)
    else:
        bench_serve_warm(a)


if __name__ == "__main__":
    sys.exit(main())
