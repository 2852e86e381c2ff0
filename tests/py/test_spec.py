"""The speed features through the real binary: `kinetic run` with RAD-1 drafting and Warm
Start (--prompt-cache) on and off gives the same tokens and the same logits (--logits-out,
compared byte for byte) over prompts, seeds, temperatures and penalty settings; a receipt
made with both on verifies `identical`; a damaged or foreign cache file is ignored with a
warning and rewritten. With the real Gemma 3 270M (KN_GEMMA or its usual path): a
repetitive task drafts and accepts, and a shared prefix is restored from the cache."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from srvutil import GEMMA, sanitizer_build

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
MODEL = os.path.join(DATA, "models", "aidreams260K.gguf")


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="kn_spec_")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, "cache")
    yield d
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old
    shutil.rmtree(d)


def run(*args, check=True):
    p = subprocess.run([KINETIC, *args], capture_output=True, encoding="utf-8",
                       errors="surrogateescape", timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"kinetic {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


def gen(work, model, prompt, *extra, tag="x"):
    """Runs once; returns (json result, logits bytes, stderr)."""
    lf = os.path.join(work, f"logits_{tag}.bin")
    p = run("run", model, prompt, "--raw", "--json", "-t", "2", "--logits-out", lf, *extra)
    with open(lf, "rb") as f:
        logits = f.read()
    return json.loads(p.stdout), logits, p.stderr


PROMPTS = [
    "In my dream",
    "Once upon a time there was a little robot",
    "la la la la la la la la la la la",
    "the sky the sky the sky the sky is blue, the sky is blue, the sky is",
]

SETTINGS = [
    ["--temp", "0", "--repeat-penalty", "1"],
    ["--temp", "0"],
    ["--temp", "0.8", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--repeat-penalty", "1"],
    ["--temp", "0.8", "--presence-penalty", "0.4", "--frequency-penalty", "0.3"],
    ["--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--repeat-penalty", "1"],
    ["--temp", "1.5"],
    # Stateful and history-reading samplers: each token is sampled once, in order.
    ["--temp", "0.8", "--mirostat", "2"],
    ["--temp", "1.0", "--dry-multiplier", "0.8", "--repeat-penalty", "1"],
]


def test_features_on_off_same_tokens_and_logits(work):
    cache = os.path.join(work, "eq.pcache")
    drafted = accepted = 0
    for pi, prompt in enumerate(PROMPTS):
        for si, s in enumerate(SETTINGS):
            seed = str(100 + 7 * pi + si)
            base = ["-n", "60", "--seed", seed, *s]
            plain, lp, _ = gen(work, MODEL, prompt, *base, "--no-draft", tag="plain")
            assert plain["draft_proposed"] == 0
            fast, lf, _ = gen(work, MODEL, prompt, *base, tag="draft")
            # Warm Start: the second run restores the prompt from the file.
            cold, lc, _ = gen(work, MODEL, prompt, *base, "--no-draft", "--prompt-cache", cache,
                              tag="cold")
            warm, lw, err = gen(work, MODEL, prompt, *base, "--prompt-cache", cache, tag="warm")
            assert warm["prompt_reused"] == len(warm["prompt_tokens"]) - 1, err
            for other, lo in ((fast, lf), (cold, lc), (warm, lw)):
                assert other["tokens"] == plain["tokens"], (prompt, s)
                assert other["stop"] == plain["stop"]
                assert other["text"] == plain["text"]
                assert lo == lp, (prompt, s)
            drafted += fast["draft_proposed"]
            accepted += fast["draft_accepted"]
    assert drafted > 0 and accepted > 0


def test_receipt_with_features_on_verifies(work):
    cache = os.path.join(work, "receipt.pcache")
    prompt = "la la la la la la la la the sky the sky the sky"
    for i in range(2):
        rp = os.path.join(work, f"r{i}.json")
        p = run("run", MODEL, prompt, "--raw", "--seed", "5", "-n", "50", "--temp", "0.8",
                "--prompt-cache", cache, "--receipt", rp)
        if i == 1:
            assert "prompt cache: " in p.stderr and " 0 of" not in p.stderr, p.stderr
        assert "draft " in p.stderr
        v = run("verify-receipt", rp, check=False)
        assert v.returncode == 0, v.stdout + v.stderr
        assert "rerun: identical" in v.stdout


def test_cache_file_damaged_or_foreign_is_rewritten(work):
    cache = os.path.join(work, "bad.pcache")
    prompt = "Once upon a time there was a little robot who"
    a, _, _ = gen(work, MODEL, prompt, "--seed", "1", "-n", "20", "--prompt-cache", cache)
    assert a["prompt_reused"] == 0
    size = os.path.getsize(cache)
    assert size > 128
    # Damage a byte in the middle: ignored with a warning, then rewritten.
    with open(cache, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 1]))
    b, _, err = gen(work, MODEL, prompt, "--seed", "1", "-n", "20", "--prompt-cache", cache)
    assert "warning: ignoring the prompt cache" in err and "damaged" in err
    assert b["prompt_reused"] == 0 and b["tokens"] == a["tokens"]
    c, _, err = gen(work, MODEL, prompt, "--seed", "1", "-n", "20", "--prompt-cache", cache)
    assert "warning" not in err
    assert c["prompt_reused"] == len(c["prompt_tokens"]) - 1 and c["tokens"] == a["tokens"]
    # Not a cache at all, and a cache of another model (a copy with other bytes).
    with open(cache, "wb") as f:
        f.write(b"hello")
    _, _, err = gen(work, MODEL, prompt, "--seed", "1", "-n", "5", "--prompt-cache", cache)
    assert "not a Kinetic prompt cache" in err
    other = os.path.join(work, "other.gguf")
    with open(MODEL, "rb") as f:
        data = bytearray(f.read())
    data[-1] ^= 1  # the last byte of the last tensor: still a valid model, another hash
    with open(other, "wb") as f:
        f.write(data)
    _, _, err = gen(work, other, prompt, "--seed", "1", "-n", "5", "--prompt-cache", cache)
    assert "another model" in err  # the 'hello' file was rewritten for MODEL
    d, _, err = gen(work, MODEL, prompt, "--seed", "1", "-n", "5", "--prompt-cache", cache)
    assert "another model" in err and d["prompt_reused"] == 0


def test_switches(work):
    cache = os.path.join(work, "off.pcache")
    p = run("run", MODEL, "In my dream", "--raw", "--seed", "3", "-n", "30", "--no-warm-start",
            "--prompt-cache", cache, "--no-draft")
    assert not os.path.exists(cache)
    assert "(off)" in p.stderr and "prompt cache" not in p.stderr
    p = run("run", MODEL, "x", "--draft-max", "-1", check=False)
    assert p.returncode != 0 and "--draft-max" in p.stderr


# Gemma under ASan + UBSan (-O1) is many times slower; the aidreams cases above run the
# same code under the sanitizers.
def gemma(f):
    f = pytest.mark.skipif(not os.path.exists(GEMMA), reason="no Gemma 3 270M (set KN_GEMMA)")(f)
    return pytest.mark.skipif(sanitizer_build(), reason="sanitizer build: too slow")(f)

CODE = """def compute_total(items, tax_rate):
    total = 0
    for item in items:
        price = item.price * item.quantity
        if item.discount:
            price = price - item.discount
        total = total + price
    total = total * (1 + tax_rate)
    return round(total, 2)
"""


@gemma
def test_gemma_repetitive_task_drafts_same_tokens(work):
    prompt = ("Here is a Python function:\n" + CODE +
              "\nHere is the same function again, with `total` renamed to `result`:\n")
    for s in (["--temp", "0"], ["--temp", "0.8", "--seed", "3"]):
        plain, lp, _ = gen(work, GEMMA, prompt, "-n", "48", *s, "--no-draft", tag="gp")
        fast, lf, err = gen(work, GEMMA, prompt, "-n", "48", *s, tag="gf")
        assert fast["tokens"] == plain["tokens"] and lf == lp
        assert fast["draft_accepted"] > 10, err
        assert fast["forward_passes"] < plain["forward_passes"]


@gemma
def test_gemma_warm_prefix(work):
    cache = os.path.join(work, "gemma.pcache")
    system = "You are a careful assistant. " * 20
    a, la, _ = gen(work, GEMMA, system + "Name a color.", "-n", "8", "--temp", "0",
                   "--prompt-cache", cache, tag="ga")
    b, lb, _ = gen(work, GEMMA, system + "Name a fruit.", "-n", "8", "--temp", "0",
                   "--prompt-cache", cache, tag="gb")
    cold, lc, _ = gen(work, GEMMA, system + "Name a fruit.", "-n", "8", "--temp", "0",
                      "--no-warm-start", "--no-draft", tag="gc")
    assert b["prompt_reused"] >= 100
    assert b["tokens"] == cold["tokens"] and lb == lc
