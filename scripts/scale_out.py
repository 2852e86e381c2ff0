#!/usr/bin/env python3
"""scale_out.py: nginx in front of N `kinetic serve` replicas on loopback, with conversation
clients and a load, one replica killed in the middle and started again.

It prints one summary line: requests, errors, distinct answers per repeated request, the
Warm Start hit rate with the consistent hash and without it (round robin), and receipts made
on one replica verified against another's model file. scripts/scale_out_demo.sh runs it;
tests/py/test_scale_out.py runs a short version and asserts on the same numbers.

The configuration is deploy/nginx/kinetic.conf itself, with only its ports rewritten, so
what is tested is what is shipped. Standard library only (plus the nginx binary).

  scripts/scale_out.py --kinetic build/kinetic --model MODEL.gguf [--replicas 3]
"""
import argparse
import collections
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NGINX_CONF = os.path.join(ROOT, "deploy", "nginx", "kinetic.conf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One `kinetic serve` on a fixed loopback port (so nginx's upstream list stays valid
    when it is killed and started again)."""

    def __init__(self, kinetic, model, name, port, args):
        self.kinetic, self.model, self.name, self.port, self.args = kinetic, model, name, port, args
        self.proc = None
        self.log = tempfile.TemporaryFile(mode="w+")

    def start(self, timeout=120):
        model = [self.model] if self.model else []  # None: the args name one (--toy)
        cmd = [self.kinetic, "serve", *model, "--host", "127.0.0.1", "--port", str(self.port),
               *self.args]
        env = {**os.environ, "KINETIC_REPLICA": self.name}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, env=env, text=True)
        listening = threading.Event()

        def read_stdout(out):  # a thread: select() cannot see lines already in the buffer
            for line in out:
                if "listening on" in line:
                    listening.set()
        threading.Thread(target=read_stdout, args=(self.proc.stdout,), daemon=True).start()
        deadline = time.time() + timeout
        while not listening.wait(0.2):
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited with {self.proc.returncode}: {self.stderr()[-2000:]}")
            if time.time() > deadline:
                raise RuntimeError(f"replica {self.name} did not start")
        # ready means /health says 200 (the model is loaded), as a router's probe sees it
        while time.time() < deadline:
            if get(self.port, "/health")[0] == 200:
                return
            time.sleep(0.1)
        raise RuntimeError(f"replica {self.name} never became healthy")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else 0

    def stderr(self):
        self.log.seek(0)
        return self.log.read()


def get(port, path, timeout=10):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    except OSError:
        return 0, ""


class Nginx:
    """nginx running deploy/nginx/kinetic.conf with its listen port and upstream servers
    rewritten; hashing=False swaps the consistent hash for round robin (the comparison)."""

    def __init__(self, listen, ports, hashing=True):
        self.dir = tempfile.mkdtemp(prefix="kinetic-nginx-")
        conf = open(NGINX_CONF).read()
        servers = "".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=10s;\n" for p in ports)
        conf, n = re.subn(r"(?m)^    server 127\.0\.0\.1:\d+ [^\n]*\n", "", conf)
        assert n >= 1, "deploy/nginx/kinetic.conf: no upstream server lines to rewrite"
        conf = conf.replace("    hash $kinetic_conversation_key consistent;\n",
                            ("    hash $kinetic_conversation_key consistent;\n" if hashing else "") + servers)
        conf, n = re.subn(r"listen 8080;", f"listen 127.0.0.1:{listen};", conf)
        assert n == 1, "deploy/nginx/kinetic.conf: no 'listen 8080;' to rewrite"
        open(os.path.join(self.dir, "kinetic.conf"), "w").write(conf)
        d = self.dir
        open(os.path.join(d, "nginx.conf"), "w").write(f"""
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
    include {d}/kinetic.conf;
}}
""")
        self.port = listen
        self.proc = subprocess.Popen([nginx_bin(), "-p", d, "-c", f"{d}/nginx.conf", "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", listen), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"nginx did not start: {self.proc.stderr.read()}")
                time.sleep(0.05)
        raise RuntimeError("nginx did not start listening")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def nginx_bin():
    for p in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if p and os.access(p, os.X_OK):
            return p
    raise RuntimeError("nginx is not installed (scripts/deps.sh --test installs it)")


def post(port, body, session=None, timeout=300):
    """POST /v1/completions through nginx: (status, json or None, replica header)."""
    h = {"Content-Type": "application/json"}
    if session:
        h["X-Session-Id"] = session
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/completions", json.dumps(body), h)
        r = c.getresponse()
        data = r.read()
        try:
            j = json.loads(data)
        except ValueError:
            j = None
        return r.status, j, r.getheader("X-Kinetic-Replica") or ""
    except OSError as e:
        return 0, {"error": str(e)}, ""


class Run:
    """Conversations and a load through nginx; every answer is recorded under its request."""

    def __init__(self, port, n_conv, turns, max_tokens, receipts):
        self.port, self.n_conv, self.turns, self.max_tokens, self.receipts = port, n_conv, turns, max_tokens, receipts
        self.lock = threading.Lock()
        self.answers = collections.defaultdict(set)   # request key -> distinct texts
        self.requests = 0
        self.errors = []
        self.by_replica = collections.Counter()
        self.kept = []                                 # (replica, receipt) pairs

    def record(self, key, status, j, replica):
        with self.lock:
            self.requests += 1
            self.by_replica[replica] += 1
            if status != 200 or not j or "choices" not in j:
                self.errors.append((key, status, j))
                return
            self.answers[key].add(j["choices"][0]["text"])
            if self.receipts and "receipt" in j and len(self.kept) < 8:
                self.kept.append((replica, j["receipt"]))

    def body(self, prompt, seed):
        b = {"prompt": prompt, "max_tokens": self.max_tokens, "temperature": 0.8, "seed": seed}
        if self.receipts:
            b["receipt"] = True
        return b

    def conversation(self, i):
        """Each turn's prompt is the last turn's prompt, its answer and a new line: the
        prefix a replica already holds in its Warm Start cache when the hash keeps the
        conversation there."""
        prompt = f"Once upon a time there was a child called {['Ann', 'Ben', 'Cat', 'Dan', 'Eve'][i % 5]}."
        for t in range(self.turns):
            key = ("conv", i, t, prompt)
            st, j, rep = post(self.port, self.body(prompt, 1000 + i), session=f"conv-{i}")
            self.record(key, st, j, rep)
            if st != 200 or not j:
                return
            prompt = prompt + j["choices"][0]["text"] + " Then"

    def load(self, i, n):
        """The same few requests again and again, without a conversation key (spread)."""
        for k in range(n):
            r = (i + k) % 4
            prompt = f"The little dog number {r} liked to"
            self.record(("load", r), *post(self.port, self.body(prompt, 7 + r)))


def hit_rate(ports):
    """Warm Start hit rate over the replicas: prompt positions reused / prompt positions."""
    reused = total = 0
    for p in ports:
        _, text = get(p, "/metrics")
        m1 = re.search(r"^kinetic_prompt_tokens_reused_total (\d+)", text, re.M)
        m2 = re.search(r"^kinetic_prompt_tokens_total (\d+)", text, re.M)
        if m1 and m2:
            reused += int(m1.group(1))
            total += int(m2.group(1)) + int(m1.group(1))
    return reused / total if total else 0.0


def verify_elsewhere(kinetic, model, kept, names):
    """Each kept receipt verified by `kinetic verify-receipt` (another process, the model
    file of another replica: the same file). Returns (verified identical, total)."""
    ok = 0
    with tempfile.TemporaryDirectory() as d:
        for n, (replica, receipt) in enumerate(kept):
            path = os.path.join(d, f"r{n}.json")
            with open(path, "w") as f:
                json.dump(receipt, f)
            r = subprocess.run([kinetic, "verify-receipt", path, "--model", model],
                               capture_output=True, text=True, timeout=600)
            if r.returncode == 0 and "identical" in r.stdout:
                ok += 1
    return ok, len(kept)


def scenario(kinetic, model, replicas=3, n_conv=3, turns=4, load_clients=2, load_n=12,
             max_tokens=16, kill=True, hashing=True, receipts=True, serve_args=()):
    """One run; returns a dict of the summary's numbers."""
    ports = [free_port() for _ in range(replicas)]
    reps = [Replica(kinetic, model, f"r{i}", p, list(serve_args)) for i, p in enumerate(ports)]
    ngx = None
    try:
        for r in reps:
            r.start()
        ngx = Nginx(free_port(), ports, hashing=hashing)
        run = Run(ngx.port, n_conv, turns, max_tokens, receipts)
        threads = [threading.Thread(target=run.conversation, args=(i,)) for i in range(n_conv)]
        threads += [threading.Thread(target=run.load, args=(i, load_n)) for i in range(load_clients)]
        for t in threads:
            t.start()
        restarted = False
        if kill:
            # kill one replica once the run is under way, start it again a moment later
            while run.requests < max(2, (n_conv * turns + load_clients * load_n) // 3):
                time.sleep(0.05)
            reps[1].kill()
            time.sleep(1.0)
            reps[1].start()
            restarted = True
        for t in threads:
            t.join()
        rate = hit_rate(ports)
        ok, kept = verify_elsewhere(kinetic, model, run.kept, [r.name for r in reps]) if receipts else (0, 0)
        return {
            "requests": run.requests,
            "errors": len(run.errors),
            "error_samples": run.errors[:3],
            "max_distinct": max((len(v) for v in run.answers.values()), default=0),
            "repeated": sum(1 for k, v in run.answers.items() if k[0] == "load"),
            "hit_rate": rate,
            "receipts_ok": ok,
            "receipts": kept,
            "restarted": restarted,
            "by_replica": dict(run.by_replica),
        }
    finally:
        if ngx:
            ngx.stop()
        for r in reps:
            r.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinetic", default=os.path.join(ROOT, "build", "kinetic"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--conversations", type=int, default=3)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--load-clients", type=int, default=2)
    ap.add_argument("--load-requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--serve-args", default="--parallel 2", help="extra arguments of each kinetic serve")
    a = ap.parse_args()
    common = dict(replicas=a.replicas, n_conv=a.conversations, turns=a.turns, load_clients=a.load_clients,
                  load_n=a.load_requests, max_tokens=a.max_tokens, serve_args=a.serve_args.split())
    main_run = scenario(a.kinetic, a.model, kill=True, hashing=True, receipts=True, **common)
    rr = scenario(a.kinetic, a.model, kill=False, hashing=False, receipts=False, **common)
    print(f"requests {main_run['requests']}, errors {main_run['errors']}, "
          f"distinct answers per repeated request {main_run['max_distinct']}, "
          f"Warm Start hit rate {main_run['hit_rate']:.0%} with the consistent hash vs {rr['hit_rate']:.0%} round robin, "
          f"receipts verified across replicas {main_run['receipts_ok']}/{main_run['receipts']}, "
          f"replica r1 killed and restarted: {'yes' if main_run['restarted'] else 'no'}")
    if main_run["errors"]:
        print("errors:", main_run["error_samples"], file=sys.stderr)
    good = (main_run["errors"] == 0 and main_run["max_distinct"] == 1
            and main_run["receipts_ok"] == main_run["receipts"])
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
