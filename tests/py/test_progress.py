"""The progress of long work (src/base/progress.h) with the real binary: kinetic synth's
bytes of tensors, verify-receipt's rerun (tokens of the prompt and the output), the
notice before `kinetic devices` runs a self-test. Progress goes to stderr only: a few
plain lines when stderr is a pipe, one bar redrawn in place on a terminal (a tmux pane
here, whose raw bytes and screen the test reads), and stdout, the files written and the
verify-receipt report are what they are without it."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest

KINETIC = os.path.abspath(os.environ.get("KINETIC", "build/kinetic"))

# A model whose synth takes seconds on one thread (q4_k's quantizer is the work), so that
# the bar, which appears after half a second, has time to be redrawn.
MID = ["synth", "--arch", "llama", "--type", "q4_k", "--threads", "1", "--dims",
       "dim=1024,layers=6,heads=16,kv_heads=4,ffn=2816,vocab=8000"]
# A prompt longer than the rerun's batch of 512 tokens: the prefill is counted chunk by chunk.
LONG_PROMPT = "Once upon a time there was a little robot who liked to count. " * 30

LINE = re.compile(r"^(\w[\w:. -]*): (\d+)% (\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) (\w+), ")


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="kn_progress_")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, "cache")
    yield d
    shutil.rmtree(d)


def run(*args, check=True):
    p = subprocess.run([KINETIC, *args], capture_output=True, text=True, errors="replace", timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"kinetic {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def progress_lines(stderr, what):
    """(percent, done, total, unit) of each progress line of `what` on stderr."""
    out = []
    for line in stderr.splitlines():
        m = LINE.match(line)
        if m and m.group(1) == what:
            out.append((int(m.group(2)), float(m.group(3)), float(m.group(4)), m.group(5)))
    return out


def test_synth_lines_on_a_pipe(work):
    """On a pipe: a line at each quarter, counting up to the whole, no redraws; stdout
    stays empty, the last stderr line is the summary it always was."""
    path = os.path.join(work, "mid.gguf")
    t0 = time.monotonic()
    p = run(*MID, "-o", path)
    seconds = time.monotonic() - t0
    assert p.stdout == ""
    assert "\r" not in p.stderr and "\033" not in p.stderr
    lines = progress_lines(p.stderr, "synth")
    assert len(lines) >= 4, p.stderr
    # the quarters, plus one every 10 s at most between them
    assert len(lines) <= 4 + int(seconds / 10) + 1, p.stderr
    pcts = [l[0] for l in lines]
    assert pcts == sorted(pcts) and pcts[-1] == 100, p.stderr
    assert all(l[3] == "MiB" for l in lines)
    assert lines[-1][1] == lines[-1][2]
    # the total is the file's tensor bytes (the file adds its header and metadata)
    size_mib = os.path.getsize(path) / (1 << 20)
    assert lines[-1][2] <= size_mib < lines[-1][2] + 1
    for q in (25, 50, 75):
        assert any(q <= pc < q + 25 for pc in pcts), (q, p.stderr)
    last = p.stderr.splitlines()[-1]
    assert last.startswith(f"kinetic synth: wrote {path} (llama q4_k, "), p.stderr
    # a tensor names each quarter's step
    assert re.search(r"^synth: 2\d% .*: tensor \d+/\d+ \S+\.weight$", p.stderr, re.M), p.stderr


def tmux(sock, *args):
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=30)


def in_pane(work, argv, cols, watch=None, env=""):
    """Runs kinetic argv in a tmux pane cols wide, on a server of its own; returns its exit
    status, the raw bytes it wrote (the terminal's \\r\\n made \\n again), the final
    screen and the set of watch's matches on the screens seen while it ran."""
    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed (scripts/deps.sh --test installs it)")
    tag = uuid.uuid4().hex[:8]
    raw = os.path.join(work, f"pane-{tag}.raw")
    done = os.path.join(work, f"pane-{tag}.done")
    sock = f"kn-progress-{tag}"
    go = os.path.join(work, f"pane-{tag}.go")
    # the command starts once pipe-pane records the pane: on a busy machine it could
    # otherwise write its first lines before anything records them
    cmd = (f"while [ ! -e {go} ]; do sleep 0.02; done; {env} " + " ".join([KINETIC, *argv]) +
           f"; echo $? > {done}; sleep 60")
    r = tmux(sock, "new-session", "-d", "-x", str(cols), "-y", "40", "sh", "-c", cmd)
    assert r.returncode == 0, r.stderr
    shots = set()
    try:
        r = tmux(sock, "pipe-pane", "-o", "-t", "0", f"cat >> {raw}")
        assert r.returncode == 0, r.stderr
        open(go, "w").close()
        deadline = time.monotonic() + 240
        while not os.path.exists(done) and time.monotonic() < deadline:
            screen = tmux(sock, "capture-pane", "-p", "-t", "0").stdout
            if watch:
                shots.update(re.findall(watch, screen, re.M))
            time.sleep(0.1)
        time.sleep(0.3)
        screen = tmux(sock, "capture-pane", "-p", "-t", "0").stdout
    finally:
        tmux(sock, "kill-server")
    with open(done) as f:
        rc = int(f.read().strip())
    with open(raw, "rb") as f:
        out = f.read().decode(errors="replace").replace("\r\n", "\n")
    return rc, out, screen, shots


def test_synth_bar_on_a_terminal(work):
    """On a terminal (a tmux pane): one line redrawn in place with \\r, never more than
    10 times a second, each redraw narrower than the pane, finished by one newline; the
    screen shows the final bar and then the summary, and the file is byte for byte the
    one written with stderr on a pipe."""
    path = os.path.join(work, "mid_tty.gguf")
    cols = 100
    rc, out, screen, shots = in_pane(work, [*MID, "-o", path], cols,
                                     watch=r"^synth \[[#-]{20}\] +(\d+)%")
    assert rc == 0, out
    # the bar, seen at several states on the same screen line while it ran
    assert len(shots) >= 2, (shots, screen)
    rows = [l for l in screen.splitlines() if l.strip()]
    bar = [i for i, l in enumerate(rows) if l.startswith("synth [")]
    assert len(bar) == 1, screen  # one line, redrawn in place
    assert re.match(r"synth \[#{20}\] 100% (\d+\.\d)/\1 MiB, [\d.]+ s$", rows[bar[0]]), screen
    assert rows[bar[0] + 1].startswith(f"kinetic synth: wrote {path} "), screen
    # the raw stream: redraws with \r and an erase to the line's end, rate-limited
    redraws = out.count("\r")
    m = re.search(r"\(llama q4_k, ([\d.]+) s\)", out)
    assert m, out
    assert 2 <= redraws <= 10 * float(m.group(1)) + 2, (redraws, m.group(1))
    pieces = out.split("\r")[1:]
    for piece in pieces:
        text, sep, rest = piece.partition("\033[K")
        assert sep and len(text) < cols and "\n" not in text, piece
        assert rest == "" or piece is pieces[-1], piece
    assert pieces[-1].partition("\033[K")[2].startswith("\nkinetic synth: wrote "), pieces[-1]
    # the same bytes as without a terminal
    pipe_path = os.path.join(work, "mid.gguf")
    if not os.path.exists(pipe_path):
        run(*MID, "-o", pipe_path)
    assert digest(path) == digest(pipe_path)


def receipt(work, name, prompt, *extra):
    model = os.path.join(work, "tiny.gguf")
    if not os.path.exists(model):
        run("synth", "--preset", "tiny", "-o", model)
    path = os.path.join(work, name)
    run("run", model, prompt, "-n", "24", "--seed", "7", "--temp", "0.9", "--receipt", path, *extra)
    with open(path) as f:
        return path, json.load(f)


REPORT = ("receipt: ", "signature: ", "model: ", "input: ", "output.text: ", "rerun: identical, ")


def test_verify_rerun_counts_tokens(work):
    """The rerun counts the prompt's tokens (chunk by chunk: the prompt is longer than the
    batch) and then the output's, to the sum of both; the report on stdout is the six
    lines it always was, identical, with no progress in it."""
    path, r = receipt(work, "long.json", LONG_PROMPT)
    n_prompt = r["prompt"]["count"]
    n_out = r["output"]["tokens"]["count"]
    assert n_prompt > 2 * 512  # three chunks of the rerun's batch
    p = run("verify-receipt", path)
    rows = p.stdout.splitlines()
    assert len(rows) == len(REPORT) and all(row.startswith(w) for row, w in zip(rows, REPORT)), p.stdout
    assert "%" not in p.stdout
    assert rows[-1].startswith(f"rerun: identical, {n_out} of {n_out} output tokens on ")
    lines = progress_lines(p.stderr, "rerun")
    assert lines, p.stderr
    total = n_prompt + n_out
    assert all(l[2] == total and l[3] == "tokens" for l in lines), p.stderr
    assert lines[-1][:2] == (100, total), p.stderr
    # the prefill's chunks are counted on their boundaries
    assert any(l[1] in (512, 1024) for l in lines), p.stderr
    assert re.search(r"^rerun: \d+% \d+/\d+ tokens, .*: prefill$", p.stderr, re.M), p.stderr
    assert "\r" not in p.stderr


def test_verify_rerun_that_differs_ends_where_it_stopped(work):
    """A rerun that stops at a differing token ends its progress there, short of the
    whole; the report's DIFFERS line is unchanged."""
    path, r = receipt(work, "short.json", "Once upon a time")
    r["sampling"]["seed"] = 8  # unsigned: the rerun samples other tokens
    bad = os.path.join(work, "short_seed.json")
    with open(bad, "w") as f:
        json.dump(r, f)
    p = run("verify-receipt", bad, check=False)
    assert p.returncode == 7, p.stdout + p.stderr
    m = re.search(r"^rerun: DIFFERS at output token (\d+) of (\d+): ", p.stdout, re.M)
    assert m, p.stdout
    i = int(m.group(1))
    total = r["prompt"]["count"] + r["output"]["tokens"]["count"]
    lines = progress_lines(p.stderr, "rerun")
    assert lines and lines[-1][2] == total, p.stderr
    # the last line: the prompt and the tokens compared, the differing one included
    assert lines[-1][1] == r["prompt"]["count"] + i + 1 < total, p.stderr


def test_devices_notice(work):
    """kinetic devices says on stderr which self-test it starts and how to skip it, once
    per device, before the device's result; --no-selftest runs none and says nothing."""
    quick = run("devices", "--no-selftest")
    if not re.search(r"^vulkan:\d+ ", quick.stdout, re.M) and not re.search(r"^cuda:\d+ ", quick.stdout, re.M):
        pytest.skip("no Vulkan or CUDA device here: " + quick.stdout)
    assert quick.stderr == ""
    p = run("devices")
    devs = re.findall(r"^((?:vulkan|cuda):\d+) ", p.stdout, re.M)
    notices = re.findall(r"^kinetic devices: running ((?:vulkan|cuda):\d+)'s self-test, every op "
                         r"against the CPU \(.*--no-selftest skips it\)$", p.stderr, re.M)
    assert notices == devs, (p.stdout, p.stderr)
    assert "kinetic devices:" not in p.stdout and "self-test: " in p.stdout


def test_verify_on_a_terminal(work):
    """On a terminal the report and the progress share the screen: each step before the
    rerun (hashing, the device, loading: the first load writes the repack cache's note)
    is drawn and cleared before the next report line or note, so the screen holds the
    report's lines whole, as on a pipe, and no progress text."""
    path, r = receipt(work, "tty.json", LONG_PROMPT)
    piped = run("verify-receipt", path)
    # no repack cache yet (CTest points every test at one: the variable): its note is printed
    cache = os.path.join(work, "fresh-cache")
    rc, out, screen, _ = in_pane(work, ["verify-receipt", path], 600,
                                 env=f"KINETIC_REPACK_CACHE={cache}")
    assert rc == 0, out
    assert "\rverify-receipt  hashing the model file\033[K\r\033[Kmodel: " in out, out
    assert "\rverify-receipt  loading the model\033[K\r\033[Kkinetic: note: repack cache " in out, out
    rows = [l.rstrip() for l in screen.splitlines() if l.strip()]
    report = [l for l in rows if not l.startswith(("kinetic: note: repack cache ", "rerun ["))]
    # the build differs from the receipt's only when another build made it: the same here
    assert report == piped.stdout.splitlines(), (screen, piped.stdout)
    assert any(l.startswith("kinetic: note: repack cache wrote ") for l in rows), screen
