"""kinetic perplexity: llama-perplexity's method and output, checked against the float64
reference forward pass (model_ref.py) on the real tiny model, and its saved log-probability
file (llama-perplexity's layout) read back by Python and by --kl-divergence."""
import math
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from model_ref import RefModel  # noqa: E402
from testdata import DATA

KINETIC = os.environ.get("KINETIC", "build/kinetic")
SOURCE = os.environ.get("KN_SOURCE", ".")
MODEL = os.path.join(DATA, "models", "aidreams260K.gguf")
TEXT = os.path.join(SOURCE, "README.md")
CTX, CHUNKS = 128, 2


def kn(*args):
    return subprocess.run([KINETIC, "perplexity", *args], capture_output=True, text=True, timeout=300)


def read_saved(path):
    """The saved file: (n_ctx, n_vocab, tokens (n_chunk, n_ctx), rows: list per chunk of
    (n_ctx - 1 - n_ctx/2, n_vocab) float64 log-probabilities)."""
    data = open(path, "rb").read()
    assert data[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<Iii", data, 8)
    off = 20
    toks = np.frombuffer(data, dtype="<i4", count=n_chunk * n_ctx, offset=off).reshape(n_chunk, n_ctx)
    off += 4 * n_chunk * n_ctx
    nv = 2 * ((n_vocab + 1) // 2) + 4
    n_score = n_ctx - 1 - n_ctx // 2
    chunks = []
    for _ in range(n_chunk):
        rows = []
        for _ in range(n_score):
            scale, lo = struct.unpack_from("<ff", data, off)
            q = np.frombuffer(data, dtype="<u2", count=n_vocab, offset=off + 8).astype(np.float64)
            rows.append(np.float64(np.float32(scale)) * q + np.float64(np.float32(lo)))
            off += 2 * nv
        chunks.append(np.array(rows))
    assert off == len(data), "trailing bytes"
    return n_ctx, n_vocab, toks, chunks


def log_softmax(l):
    m = l.max(axis=-1, keepdims=True)
    return l - m - np.log(np.exp(l - m).sum(axis=-1, keepdims=True))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Kinetic's run with the log-probabilities saved, and the float64 reference's
    log-probabilities of the same scored tokens."""
    path = str(tmp_path_factory.mktemp("ppl") / "kinetic.kld")
    p = kn(MODEL, "-f", TEXT, "-c", str(CTX), "--chunks", str(CHUNKS), "-t", "2", "--kv-type", "f32",
           "--kl-divergence-base", path)
    assert p.returncode == 0, p.stderr
    n_ctx, n_vocab, toks, saved = read_saved(path)
    ref = RefModel(MODEL)
    bos = int(ref.reader.fields["tokenizer.ggml.bos_token_id"].parts[-1][0])
    first = n_ctx // 2
    ref_lp = []
    for c in range(toks.shape[0]):
        t = [int(x) for x in toks[c]]
        t[0] = bos  # the model adds a BOS (aidreams260K's vocabulary does)
        ref_lp.append(log_softmax(ref.forward(t)[first:n_ctx - 1]))
    return {"path": path, "out": p.stdout, "toks": toks, "saved": saved, "ref": ref_lp,
            "n_ctx": n_ctx, "n_vocab": n_vocab, "bos": bos}


def ppl_of(lps, toks, n_ctx):
    """llama-perplexity's running estimates and final value with its error, from
    log-probabilities (one (n_score, n_vocab) array per chunk)."""
    first = n_ctx // 2
    nll, running = [], []
    for c, lp in enumerate(lps):
        nxt = toks[c][first + 1:n_ctx]
        nll.extend(-lp[np.arange(len(nxt)), nxt])
        running.append(math.exp(np.mean(nll)))
    nll = np.array(nll)
    mean = nll.mean()
    err = math.sqrt(((nll ** 2).mean() - mean ** 2) / (len(nll) - 1)) * math.exp(mean)
    return running, math.exp(mean), err


def test_perplexity_matches_float64_reference(base):
    out = base["out"]
    running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out)]
    assert len(running) == CHUNKS, out
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    assert m, out
    ref_run, ref_ppl, ref_err = ppl_of(base["ref"], base["toks"], base["n_ctx"])
    # float32 engine against float64 truth: the printed 4 decimals and 0.5% (the bound)
    for k, r in zip(running, ref_run):
        assert abs(k - r) / r < 0.005, (running, ref_run)
    assert abs(float(m.group(1)) - ref_ppl) / ref_ppl < 0.005, (m.group(0), ref_ppl)
    assert abs(float(m.group(2)) - ref_err) / ref_err < 0.02, (m.group(0), ref_err)
    assert ref_ppl > 1.5  # the text is not trivially predictable: the check can fail


def test_saved_log_probabilities_are_the_models(base):
    # The file holds the chunks' tokens as tokenized (first token not replaced) and one
    # row per scored token; each row is a log-probability distribution within the
    # quantization step (16 nats / 65535) of the float64 reference.
    toks, saved, ref = base["toks"], base["saved"], base["ref"]
    tk = subprocess.run([KINETIC, "tokenize", MODEL, "-f", TEXT, "--ids-only",
                         "--no-parse-special"], capture_output=True,
                        text=True, timeout=60)
    assert tk.returncode == 0, tk.stderr
    ids = [int(x) for x in tk.stdout.split()]
    assert ids[0] == base["bos"]
    assert toks.reshape(-1).tolist() == ids[:toks.size]
    for c in range(len(saved)):
        kept = saved[c] > saved[c].max(axis=1, keepdims=True) - 15.9
        assert np.abs(saved[c] - ref[c])[kept].max() < 2e-3


def test_kl_divergence_against_itself_and_the_reference(base, tmp_path):
    p = kn(MODEL, "--kl-divergence", "--kl-divergence-base", base["path"], "-t", "1",
           "--kv-type", "f32")
    assert p.returncode == 0, p.stderr
    kld = float(re.search(r"Mean    KLD: +([-0-9.]+)", p.stdout).group(1))
    top = float(re.search(r"Same top p: +([0-9.]+)", p.stdout).group(1))
    assert abs(kld) < 1e-4 and top == 100.0, p.stdout
    assert len(re.findall(r"^ +\d+ +[0-9.]+ ±", p.stdout, re.M)) == CHUNKS, p.stdout

    # A base file from the float64 reference (bench/kld_ref.py, the tool docs/performance.md
    # uses for each engine's KLD against the truth), same layout: the perplexity
    # --kl-divergence reports for it is the reference's, computed here.
    n_ctx, toks = base["n_ctx"], base["toks"]
    path = tmp_path / "ref.kld"
    r = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "kld_ref.py"), "--model", MODEL,
                        "--tokens-from", base["path"], "--chunks", str(CHUNKS), "-o", str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    p = kn(MODEL, "--kl-divergence", "--kl-divergence-base", str(path), "-c", str(n_ctx))
    assert p.returncode == 0, p.stderr
    _, ref_ppl, _ = ppl_of(base["ref"], toks, n_ctx)
    got = float(re.search(r"Mean PPL\(base\) +: +([0-9.]+)", p.stdout).group(1))
    assert abs(got - ref_ppl) / ref_ppl < 1e-3, (got, ref_ppl)
    kld = float(re.search(r"Mean    KLD: +([-0-9.]+)", p.stdout).group(1))
    assert 0 <= kld < 1e-3, p.stdout


def test_bad_input(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Once upon a time")
    junk = tmp_path / "junk.kld"
    junk.write_bytes(b"not a logits file")
    wrong_vocab = tmp_path / "vocab.kld"
    wrong_vocab.write_bytes(b"_logits_" + struct.pack("<Iii", 64, 7, 1) + b"\0" * 256)
    truncated = tmp_path / "trunc.kld"
    truncated.write_bytes(b"_logits_" + struct.pack("<Iii", 64, 512, 2) + b"\0" * 100)
    for args, part in [
        ((MODEL,), "give the text to score with -f"),
        ((), "give a model file"),
        ((MODEL, "-f", str(short)), "needs at least 1024"),
        ((MODEL, "--kl-divergence"), "give --kl-divergence-base"),
        ((MODEL, "-f", TEXT, "-c", "2"), "-c must be at least 4"),
        ((MODEL, "-f", TEXT, "--chunks", "0"), "--chunks must be positive"),
        ((MODEL, "--kl-divergence", "--kl-divergence-base", str(junk)), "is not a file of saved log-probabilities"),
        ((MODEL, "--kl-divergence", "--kl-divergence-base", str(wrong_vocab)), "vocabulary of 7 tokens"),
        ((MODEL, "--kl-divergence", "--kl-divergence-base", str(truncated)), "truncated"),
        ((MODEL, "--kl-divergence", "--kl-divergence-base", str(tmp_path / "none")), "cannot open"),
        (("/nonexistent.gguf", "-f", TEXT), "cannot open"),
    ]:
        p = kn(*args)
        assert p.returncode != 0 and part in p.stderr, (args, p.stderr)
