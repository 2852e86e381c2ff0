"""`kinetic chat` end to end, through a pseudo-terminal (Python's pty module: the real
libedit line editor, real Ctrl-C and Ctrl-D, bracketed paste) and through a pipe.

What is checked: a scripted three-turn conversation whose third receipt verifies as
identical with `kinetic verify-receipt` (a from-scratch rerun, so the KV cache reused
across turns and Zero Wait's pre-evaluation changed nothing); Ctrl-C in the middle of an
answer, then another question; /save and /load round trip; Zero Wait on and off give the
same prompts and answers (with an edited line); multi-line input; slash commands.

Models: aidreams260K (tiny, fast, no chat template: the raw format), a random-weight model
with the Phi-3 vocabulary made by `kinetic synth` (the phi3 template; slow enough to stop
mid-answer) and, where a real template matters, Gemma 3 270M with --chat-format gemma (its
GGUF has no template; KN_GEMMA, or the default download path; skipped when absent)."""
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import time

import pytest

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")
PHI3_VOCAB = os.path.join(DATA, "vocab", "ggml-vocab-phi-3.gguf")
from srvutil import GEMMA

PROMPT = re.compile(rb"(^|\n)> ")


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="kn_chat_")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, "cache")
    key = os.path.join(d, "receipt.key")
    subprocess.run(["openssl", "rand", "-out", key, "-hex", "32"], check=True)
    yield {"dir": d, "key": key}
    shutil.rmtree(d)


@pytest.fixture(scope="module")
def synth_phi3(work):
    """A random-weight model with the Phi-3 vocabulary: a real chat template and about
    a hundred tokens a second, so an answer can be stopped in the middle."""
    path = os.path.join(work["dir"], "tiny_phi3.gguf")
    subprocess.run([KINETIC, "synth", "--preset", "tiny", "--vocab", PHI3_VOCAB, "--threads", "2",
                    "-o", path], check=True, capture_output=True, timeout=120)
    return path


def path_in(work, name):
    return os.path.join(work["dir"], name)


def receipt(path):
    with open(path) as f:
        return json.load(f)


def verify(path):
    p = subprocess.run([KINETIC, "verify-receipt", path], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


class Chat:
    """kinetic chat on a pseudo-terminal: send keys, wait for output."""

    def __init__(self, *args):
        env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8", TERM="xterm")
        pid, fd = pty.fork()
        if pid == 0:
            os.execve(KINETIC, [KINETIC, "chat", *args], env)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.buf = b""
        self.mark = 0

    def _read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            data = b""
        if not data:
            raise EOFError(self.text())
        self.buf += data
        return True

    def text(self):
        return self.buf.decode("utf-8", "replace")

    def expect(self, pattern, timeout=60):
        """Waits for pattern (bytes regex) after the mark; moves the mark past it."""
        rx = re.compile(pattern) if isinstance(pattern, bytes) else pattern
        end = time.time() + timeout
        while True:
            m = rx.search(self.buf, self.mark)
            if m:
                self.mark = m.end()
                return m
            left = end - time.time()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {rx.pattern!r}; output:\n{self.text()[-3000:]}")
            self._read(min(left, 0.5))

    def drain(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            self._read(end - time.time())

    def send(self, data):
        os.write(self.fd, data.encode() if isinstance(data, str) else data)

    def type(self, text, delay=0.0):
        if not delay:
            self.send(text)
            return
        for ch in text:
            self.send(ch)
            time.sleep(delay)
            self.drain(0)

    def prompt(self, timeout=60):
        self.expect(PROMPT, timeout)

    def line(self, text, delay=0.0, timeout=60):
        """Types a line, presses Enter and waits for the next prompt."""
        self.type(text, delay)
        self.send("\r")
        self.expect(re.escape(text.encode()) if not delay else b"\n", timeout)
        self.prompt(timeout)

    def close(self, timeout=30):
        """Ctrl-D on an empty line; returns the exit status."""
        self.send("\x04")
        end = time.time() + timeout
        while time.time() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                try:
                    self.drain(0.1)
                except EOFError:
                    pass
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            try:
                self._read(0.1)
            except EOFError:
                pass
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        raise AssertionError("kinetic chat did not exit on Ctrl-D:\n" + self.text()[-2000:])


def piped(args, script, timeout=120):
    return subprocess.run([KINETIC, "chat", *args], input=script, capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------- through a pipe

def test_piped_three_turns_receipt(work):
    r3 = path_in(work, "piped3.json")
    save = path_in(work, "piped.json")
    p = piped([AIDREAMS, "--seed", "42", "-n", "10"],
              f"Once upon a time\nthe cat\n/stats\nand then\n/receipt {r3}\n/save {save}\n")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")
    assert lines[2].startswith("last answer: prompt ") and "reused from the cache" in lines[2]
    # turn 2 reused the first turn's tokens (prompt and answer) from the cache
    reused = int(re.search(r"prompt \d+ tokens, (\d+) reused", lines[2]).group(1))
    assert reused > 10
    rc, out = verify(r3)
    assert rc == 0 and "rerun: identical" in out, out
    rec = receipt(r3)
    conv = json.load(open(save))["messages"]
    # the receipt's input is the whole conversation as sent, up to the last question
    assert rec["input"] == conv[:5]
    assert [m["role"] for m in rec["input"]] == ["user", "assistant", "user", "assistant", "user"]
    assert rec["output"]["text"] == conv[5]["content"]
    assert rec["sampling"]["seed"] == 42 and rec["sampling"]["max_tokens"] == 10
    # the same prompt tokens through `kinetic run` give the same answer
    run = subprocess.run([KINETIC, "run", AIDREAMS, "--prompt-ids",
                          ",".join(map(str, rec["prompt"]["ids"])), "--seed", "42", "-n", "10",
                          "--json"], capture_output=True, text=True, timeout=60)
    assert json.loads(run.stdout)["tokens"] == rec["output"]["tokens"]["ids"]


def test_piped_commands(work):
    r1 = path_in(work, "cmd1.json")
    p = piped([AIDREAMS, "--seed", "7", "-n", "6"],
              f"/receipt {r1}\n/help\n/bogus\n/set temp\n/set warmth 2\n/set top_k 1.5\n/set temp 0\n"
              f"/seed 9\n/system Be brief.\nHello\n/receipt {r1}\n//slash\n/reset\nBye\n/set\n")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "no answer yet" in out
    assert "/receipt FILE" in out and "/quit" in out
    assert "unknown command '/bogus'" in out
    assert "/set temperature needs a value" in out
    assert "unknown setting 'warmth'" in out
    assert "top_k must be an integer, not '1.5'" in out
    assert "temperature 0, " in out and "seed 9" in out
    rec = receipt(r1)
    assert rec["input"] == [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hello"}]
    assert rec["sampling"]["temperature"] == 0.0 and rec["sampling"]["seed"] == 9
    assert verify(r1)[0] == 0


def test_piped_continuation_and_quit(work):
    save = path_in(work, "cont.json")
    p = piped([AIDREAMS, "--seed", "1", "-n", "4"],
              f"one\\\ntwo\n/save {save}\n/quit\nnever sent\n")
    assert p.returncode == 0, p.stderr
    msgs = json.load(open(save))["messages"]
    assert msgs[0] == {"role": "user", "content": "one\ntwo"}
    assert len(msgs) == 2  # /quit stopped before "never sent"


def test_save_load_round_trip(work):
    s1, s2 = path_in(work, "conv1.json"), path_in(work, "conv2.json")
    ra, rb = path_in(work, "ra.json"), path_in(work, "rb.json")
    a = piped([AIDREAMS, "--seed", "3", "-n", "8", "--system", "Dream."],
              f"Once upon a time\n/set top_k 20\n/seed 11\nthe moon\n/save {s1}\nand the sea\n/receipt {ra}\n")
    assert a.returncode == 0, a.stderr
    # another session, other settings: /load brings back the conversation and settings
    b = piped([AIDREAMS, "--seed", "99", "-n", "3", "--temp", "0.1"],
              f"something else\n/load {s1}\n/save {s2}\nand the sea\n/receipt {rb}\n")
    assert b.returncode == 0, b.stderr
    with open(s1, "rb") as f1, open(s2, "rb") as f2:
        assert f1.read() == f2.read()
    saved = json.load(open(s1))
    assert saved["settings"]["top_k"] == 20 and saved["settings"]["seed"] == 11
    assert saved["messages"][0] == {"role": "system", "content": "Dream."}
    A, B = receipt(ra), receipt(rb)
    assert A["input"] == B["input"]
    assert A["prompt"]["ids"] == B["prompt"]["ids"]
    assert A["output"]["tokens"]["ids"] == B["output"]["tokens"]["ids"]
    assert A["sampling"] == B["sampling"]
    # a broken file changes nothing
    bad = path_in(work, "bad.json")
    with open(bad, "w") as f:
        json.dump({"format": "kinetic-chat-1", "messages": [{"role": "robot", "content": "x"}],
                   "settings": {}}, f)
    c = piped([AIDREAMS, "--seed", "1", "-n", "2"], f"/load {bad}\n/load /nonexistent.json\n")
    assert "cannot load" in c.stdout and "role 'robot'" in c.stdout


# ---------------------------------------------------------------- through a pseudo-terminal

def test_pty_three_turns_signed_receipt(work):
    r3 = path_in(work, "pty3.json")
    c = Chat(AIDREAMS, "--seed", "5", "-n", "10", "--sign-key", work["key"])
    c.prompt()
    assert b"\x1b[?2004h" in c.buf  # bracketed paste requested
    c.line("Once upon a time")
    c.line("a small fox")
    c.line("in the forest")
    c.line(f"/receipt {r3}")
    assert c.close() == 0
    rc, out = verify(r3)
    assert rc == 0 and "rerun: identical" in out and "signature: valid" in out, out
    rec = receipt(r3)
    assert [m["content"] for m in rec["input"] if m["role"] == "user"] == \
        ["Once upon a time", "a small fox", "in the forest"]


def test_pty_ctrl_c_stops_answer(work, synth_phi3):
    ri, r2 = path_in(work, "interrupted.json"), path_in(work, "after.json")
    c = Chat(synth_phi3, "--seed", "2", "-n", "3000", "-c", "4096")
    c.prompt()
    # Ctrl-C at the prompt abandons the line
    c.type("never sent")
    c.expect(b"never sent")
    c.send("\x03")
    c.prompt()
    c.type("Tell me a long story")
    c.send("\r")
    c.expect(b"Tell me a long story")
    c.drain(0.8)  # part of the answer
    c.send("\x03")
    m = c.expect(rb"\[answer stopped after (\d+) tokens\]", timeout=30)
    stopped = int(m.group(1))
    assert 0 < stopped < 3000
    c.prompt()
    c.line(f"/receipt {ri}")
    c.line("/set n_predict 12")
    c.line("And now?")
    c.line(f"/receipt {r2}")
    assert c.close() == 0
    I, A = receipt(ri), receipt(r2)
    assert I["input"] == [{"role": "user", "content": "Tell me a long story"}]
    # the first turn's prompt is what `kinetic run` gives the model for the same message
    pp = subprocess.run([KINETIC, "run", synth_phi3, "Tell me a long story", "--print-prompt"],
                        capture_output=True, text=True, timeout=60).stdout
    assert "[template jinja" in pp
    assert I["prompt"]["ids"] == [int(x) for x in pp.rsplit("tokens:", 1)[1].strip(" ]\n").split()]
    # an interrupted answer is recorded as its first n tokens
    assert I["output"]["tokens"]["count"] == stopped
    assert I["sampling"]["max_tokens"] == stopped and I["output"]["finish"] == "length"
    assert [m["content"] for m in A["input"] if m["role"] == "user"] == ["Tell me a long story", "And now?"]
    assert A["output"]["tokens"]["count"] == 12
    for path in (ri, r2):
        rc, out = verify(path)
        assert rc == 0 and "rerun: identical" in out, out


def test_pty_multiline_and_paste(work):
    save = path_in(work, "multi.json")
    c = Chat(AIDREAMS, "--seed", "1", "-n", "3")
    c.prompt()
    c.type("first line\\")
    c.send("\r")
    c.expect(rb"\.\.\. ")
    c.line("second line")
    # a bracketed paste with newlines is one message
    c.send("\x1b[200~pasted one\rpasted two\x1b[201~")  # terminals send CR
    c.expect(b"pasted two")
    c.send("\r")
    c.prompt()
    # non-ASCII typed text arrives whole (UTF-8 decoded for libedit and back)
    c.line("café ☕ naïve")
    # the Up arrow (an escape sequence that is not a paste) recalls the last message
    c.send("\x1b[A")
    c.expect("naïve".encode())
    c.send("\r")
    c.prompt()
    c.line(f"/save {save}")
    assert c.close() == 0
    users = [m["content"] for m in json.load(open(save))["messages"] if m["role"] == "user"]
    assert users == ["first line\nsecond line", "pasted one\npasted two", "café ☕ naïve",
                     "café ☕ naïve"]


def zero_wait_session(work, model, tag, extra, turns, n):
    """Types the turns slowly (with an edit in the second) and saves a receipt per turn."""
    c = Chat(model, "--seed", "13", "-n", str(n), *extra)
    c.prompt()
    recs, stats = [], []
    for i, t in enumerate(turns):
        if i == 1:
            c.type("the dog", delay=0.03)   # typed, then erased: pre-evaluated tokens that
            c.type("\x7f" * 3, delay=0.03)  # the final prompt does not use
        c.type(t, delay=0.03)
        time.sleep(0.3)
        c.send("\r")
        c.prompt(timeout=90)
        path = path_in(work, f"zw_{tag}_{i}.json")
        c.line(f"/receipt {path}")
        recs.append(receipt(path))
        c.type("/stats\r")
        m = c.expect(rb"Zero Wait evaluated (\d+) while")
        stats.append(int(m.group(1)))
        c.prompt()
    assert c.close() == 0
    return recs, stats


@pytest.mark.parametrize("model", ["aidreams", "gemma"])
def test_zero_wait_on_off_same_answers(work, model):
    if model == "gemma":
        if not os.path.exists(GEMMA):
            pytest.skip("Gemma 3 270M not found (set KN_GEMMA)")
        path, n, turns = GEMMA, 6, ["What is the capital of France?", "cat and mouse", "Why?"]
        extra = ["--chat-format", "gemma"]
    else:
        path, n, turns = AIDREAMS, 8, ["Once upon a time there was", "cat", "and then the"]
        extra = []
    on, zw = zero_wait_session(work, path, model + "_on", extra, turns, n)
    off, zw_off = zero_wait_session(work, path, model + "_off", extra + ["--no-zero-wait"], turns, n)
    assert sum(zw) > 0, zw        # Zero Wait did evaluate while typing
    assert zw_off == [0] * len(turns)
    for a, b in zip(on, off):
        assert a["input"] == b["input"]
        assert a["prompt"]["ids"] == b["prompt"]["ids"]
        assert a["output"]["tokens"]["ids"] == b["output"]["tokens"]["ids"]
    assert on[1]["input"][2]["content"] == "the " + turns[1]
    rc, out = verify(path_in(work, f"zw_{model}_on_2.json"))
    assert rc == 0 and "rerun: identical" in out, out


def test_gemma_template_turns(work):
    if not os.path.exists(GEMMA):
        pytest.skip("Gemma 3 270M not found (set KN_GEMMA)")
    r3 = path_in(work, "gemma3.json")
    # the GGUF has no tokenizer.chat_template (a base model gets raw text, as in
    # `kinetic run`): ask for Gemma's turns explicitly
    p = piped([GEMMA, "--seed", "4", "-n", "6", "--system", "Answer briefly.", "--chat-format", "gemma"],
              f"Name a river.\nAnother one.\nAnd a third?\n/stats\n/receipt {r3}\n")
    assert p.returncode == 0, p.stderr
    rec = receipt(r3)
    ids = rec["prompt"]["ids"]
    # <start_of_turn> opens 3 user turns, 2 model turns and the generation prompt
    sot = ids[1]
    assert ids.count(sot) == 6
    reused = int(re.search(r"prompt \d+ tokens, (\d+) reused", p.stdout).group(1))
    assert reused > len(ids) // 2
    rc, out = verify(r3)
    assert rc == 0 and "rerun: identical" in out, out


def test_piped_context_full(work):
    # aidreams has a 128-token context: the conversation soon stops fitting
    long = "the river runs through the quiet valley " * 6
    p = piped([AIDREAMS, "--seed", "1", "-n", "40"], f"{long}\n{long}\n{long}\nnever\n")
    assert p.returncode == 1
    assert "/reset to start over, or use a larger --ctx-size" in p.stderr


def test_usage_errors(work):
    for args in (["--temp", "-1"], ["--threads", "0"], ["--bogus"], []):
        p = subprocess.run([KINETIC, "chat", *([AIDREAMS] if args != [] else []), *args],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (args, p.stderr)
    p = subprocess.run([KINETIC, "chat", AIDREAMS, "--sign-key", "/nonexistent.key"],
                       input="", capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "nonexistent.key" in p.stderr


def test_drafting_on_off_same_answers_and_stats(work):
    """RAD-1 drafting is on in chat by default and changes no token: a repetitive
    conversation gives the same answers with --no-draft, and /stats reports the drafts."""
    script = ("Repeat: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat\n"
              "And again: the cat sat on the mat, the cat sat on the mat\n/stats\n")
    on = piped([AIDREAMS, "--seed", "3", "-n", "40", "--temp", "0", "--repeat-penalty", "1"], script)
    off = piped([AIDREAMS, "--seed", "3", "-n", "40", "--temp", "0", "--repeat-penalty", "1",
                 "--no-draft"], script)
    assert on.returncode == 0 and off.returncode == 0, (on.stderr, off.stderr)
    answers_on = on.stdout.split("last answer:")[0]
    answers_off = off.stdout.split("last answer:")[0]
    assert answers_on == answers_off
    line_on = [l for l in on.stdout.splitlines() if l.startswith("drafts (RAD-1):")]
    line_off = [l for l in off.stdout.splitlines() if l.startswith("drafts (RAD-1):")]
    assert len(line_on) == 1 and len(line_off) == 1
    assert "session 0 proposed" in line_off[0]
    assert "session 0 proposed" not in line_on[0], line_on[0]
