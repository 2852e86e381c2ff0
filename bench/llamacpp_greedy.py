#!/usr/bin/env python3
"""llamacpp_greedy.py: the first greedy tokens of Kinetic and of a llama.cpp build on the
same GGUF file and prompt ids, and where they part, how near a tie Kinetic's logits were.

    bench/llamacpp_greedy.py MODEL.gguf --server /path/to/llama-server [--n 32]
        [--prompt-ids 1,303,433] [--kinetic build/kinetic]

Both decode greedily with the end-of-generation token banned (llama.cpp: ignore_eos;
Kinetic: --logit-bias EOS-inf), so random-weight synth models run the whole length. At the
first differing position the script prints Kinetic's top-2 margin there (logit units and
relative to the row's spread): a difference at a near-tie is rounding (llama.cpp computes
with other kernels), one at a wide margin is a bug. A by-hand check, not a test.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def llamacpp_tokens(server, model, ids, n, eos, threads):
    port = free_port()
    proc = subprocess.Popen([server, "-m", model, "--port", str(port), "-c", "1024",
                             "--threads", str(threads), "-np", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        body = {"prompt": ids, "n_predict": n, "temperature": 0.0, "top_k": 1,
                "ignore_eos": True, "cache_prompt": False, "return_tokens": True,
                "samplers": ["top_k"]}
        req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.load(r)
        return out["tokens"]
    finally:
        proc.terminate()
        proc.wait()


def kinetic_tokens(kinetic, model, ids, n, eos, threads):
    with tempfile.TemporaryDirectory() as d:
        lg = os.path.join(d, "logits.bin")
        p = subprocess.run([kinetic, "run", model, "--prompt-ids", ",".join(map(str, ids)),
                            "--temp", "0", "--repeat-penalty", "1", "-n", str(n), "--json",
                            "--logit-bias", f"{eos}-inf", "--logits-out", lg,
                            "--threads", str(threads)],
                           capture_output=True, text=True, timeout=3600)
        if p.returncode != 0:
            sys.exit(p.stderr)
        toks = json.loads(p.stdout)["tokens"]
        logits = np.fromfile(lg, dtype="<f4").reshape(len(toks), -1)
    return toks, logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--server", required=True)
    ap.add_argument("--kinetic", default="build/kinetic")
    ap.add_argument("--prompt-ids", default="1,303,433,360,281,269,435,447")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--eos", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    ids = [int(x) for x in a.prompt_ids.split(",")]
    kt, logits = kinetic_tokens(a.kinetic, a.model, ids, a.n, a.eos, a.threads)
    lt = llamacpp_tokens(a.server, a.model, ids, a.n, a.eos, a.threads)
    same = 0
    while same < min(len(kt), len(lt)) and kt[same] == lt[same]:
        same += 1
    print(f"{os.path.basename(a.model)}: {same} of {min(len(kt), len(lt))} greedy tokens agree")
    print("  kinetic  ", kt)
    print("  llama.cpp", lt)
    if same < min(len(kt), len(lt)):
        row = logits[same].astype(np.float64)
        row[a.eos] = -np.inf
        top = np.sort(row[np.isfinite(row)])[-2:]
        gap = row[kt[same]] - row[lt[same]]
        spread = row[np.isfinite(row)].std()
        print(f"  first difference at {same}: Kinetic's top-2 margin {top[1] - top[0]:.3g} "
              f"({(top[1] - top[0]) / spread:.2e} of the logits' spread); kinetic's logit of its "
              f"choice minus llama.cpp's choice {gap:.3g}")


if __name__ == "__main__":
    main()
