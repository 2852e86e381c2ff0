"""Receipts end to end: `kinetic run --receipt` then `kinetic verify-receipt`, with the
real binary. Independent oracles: b3sum for the model hash and the token hashes' inputs,
openssl for the Ed25519 signature over the canonical bytes (rebuilt here with the rfc8785
package as docs/receipts.md specifies). Tampered and malformed receipts are each
rejected with the documented exit code and message."""
import copy
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from receipt_bytes import signed_bytes

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
MODEL = os.path.join(DATA, "models", "aidreams260K.gguf")

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_MALFORMED, EXIT_HASHES, EXIT_SIGNATURE, EXIT_MODEL, EXIT_DIFFERS, EXIT_TEXT = range(9)


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="kn_receipt_")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, "cache")
    key = os.path.join(d, "receipt.key")
    subprocess.run(["openssl", "rand", "-out", key, "-hex", "32"], check=True)
    model = os.path.join(d, "model.gguf")
    shutil.copy(MODEL, model)
    yield {"dir": d, "key": key, "model": model}
    shutil.rmtree(d)


def run(*args, env=None, check=True):
    p = subprocess.run([KINETIC, *args], capture_output=True, text=True, env=env, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"kinetic {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


def make(work, name, *extra, sign=True):
    path = os.path.join(work["dir"], name)
    args = ["run", work["model"], "Once upon a time", "--seed", "42", "-n", "40", "--temp", "0.8",
            "--receipt", path]
    if sign:
        args += ["--sign-key", work["key"]]
    run(*args, *extra)
    with open(path) as f:
        return path, json.load(f)


def verify(path, *extra, env=None):
    return run("verify-receipt", path, *extra, env=env, check=False)


def canonical(receipt):
    """The signed bytes as docs/receipts.md specifies them (RFC 8785 since version 2)."""
    return signed_bytes(receipt)


def b3(data):
    return subprocess.run(["b3sum", "--no-names"], input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def test_fields_and_order(work):
    path, r = make(work, "a.json")
    assert list(r) == ["receipt", "kinetic", "model", "device", "input", "template", "prompt",
                       "sampling", "output", "signature"]
    assert r["template"] == {"engine": "raw", "source": "model", "add_generation_prompt": True}
    assert r["output"]["think"] == {"open": "<think>", "close": "</think>", "inside": False}
    assert list(r["kinetic"]) == ["version", "build", "numerics"]
    assert r["kinetic"]["numerics"] == "canonical-1"
    assert list(r["sampling"]) == ["temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                                   "presence_penalty", "frequency_penalty", "repeat_last_n",
                                   "seed", "max_tokens", "stop"]
    assert r["sampling"]["seed"] == 42 and r["sampling"]["temperature"] == 0.8
    assert r["sampling"]["max_tokens"] == 40
    assert r["output"]["finish"] in ("stop", "length")
    assert r["output"]["tokens"]["count"] == len(r["output"]["tokens"]["ids"])
    assert r["input"] == [{"role": "user", "content": "Once upon a time"}]
    # the build id is the BLAKE3 of the executable
    with open(KINETIC, "rb") as f:
        assert r["kinetic"]["build"] == b3(f.read())[:16]


def test_hashes_match_b3sum(work):
    path, r = make(work, "h.json")
    with open(work["model"], "rb") as f:
        assert r["model"]["blake3"] == b3(f.read())
    assert r["model"]["size"] == os.path.getsize(work["model"])
    for ids, h in ((r["prompt"]["ids"], r["prompt"]["blake3"]),
                   (r["output"]["tokens"]["ids"], r["output"]["tokens"]["blake3"])):
        raw = b"".join(i.to_bytes(4, "little") for i in ids)
        assert h == b3(raw)


def test_signature_verifies_with_openssl(work):
    path, r = make(work, "s.json")
    d = work["dir"]
    msg = os.path.join(d, "msg.bin")
    sig = os.path.join(d, "sig.bin")
    pem = os.path.join(d, "pub.pem")
    with open(msg, "wb") as f:
        f.write(canonical(r))
    with open(sig, "wb") as f:
        f.write(bytes.fromhex(r["signature"]["ed25519"]))
    der = bytes.fromhex("302a300506032b6570032100" + r["signature"]["public_key"])
    subprocess.run(["openssl", "pkey", "-pubin", "-inform", "DER", "-out", pem], input=der,
                   check=True)
    ok = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pem, "-rawin",
                         "-in", msg, "-sigfile", sig], capture_output=True)
    assert ok.returncode == 0, ok.stderr
    # and the public key is the one openssl derives from the secret
    with open(work["key"]) as f:
        seed = bytes.fromhex(f.read().strip())
    der_priv = bytes.fromhex("302e020100300506032b657004220420") + seed
    pub = subprocess.run(["openssl", "pkey", "-inform", "DER", "-pubout", "-outform", "DER"],
                         input=der_priv, capture_output=True, check=True).stdout
    assert pub[-32:].hex() == r["signature"]["public_key"]


def test_verify_identical_any_isa_and_threads(work):
    path, r = make(work, "v.json")
    p = verify(path)
    assert p.returncode == EXIT_OK, p.stdout
    lines = p.stdout.splitlines()
    assert lines[0].startswith("receipt: model.gguf, %d prompt and %d output tokens, seed 42, made on cpu-x86_64-"
                               % (r["prompt"]["count"], r["output"]["tokens"]["count"]))
    assert lines[1].startswith("signature: valid, public key " + r["signature"]["public_key"] +
                               " (anyone can sign")
    assert lines[2] == "model: model.gguf matches (BLAKE3 %s, %d bytes)" % (
        r["model"]["blake3"][:16], os.path.getsize(work["model"]))
    assert lines[3] == "input: proven: it renders (raw) to the %d recorded prompt tokens" % (
        r["prompt"]["count"])
    assert lines[4] == "output.text: proven: the %d output tokens decode to it (%d bytes)" % (
        r["output"]["tokens"]["count"], len(r["output"]["text"].encode()))
    n = r["output"]["tokens"]["count"]
    assert lines[5].startswith("rerun: identical, %d of %d output tokens on cpu-x86_64-" % (n, n))
    for isa in ("scalar", "avx2", "avx512"):
        env = dict(os.environ, KINETIC_ISA=isa)
        if run("--version", env=env, check=False).returncode != 0:
            continue
        for t in ("1", "3"):
            p = verify(path, "--threads", t, env=env)
            assert p.returncode == EXIT_OK, (isa, t, p.stdout)
    p = verify(path, "--device", "cpu-x86_64-scalar")
    assert p.returncode == EXIT_OK and "on cpu-x86_64-scalar" in p.stdout


def test_made_on_scalar_verifies_on_best(work):
    env = dict(os.environ, KINETIC_ISA="scalar")
    path = os.path.join(work["dir"], "scalar.json")
    run("run", work["model"], "The sky", "--seed", "7", "-n", "30", "--threads", "1",
        "--receipt", path, env=env)
    p = verify(path, "--threads", "2")
    assert p.returncode == EXIT_OK, p.stdout


def test_unsigned_and_public_key(work):
    path, r = make(work, "u.json", sign=False)
    assert "signature" not in r
    p = verify(path)
    assert p.returncode == EXIT_OK and "signature: absent" in p.stdout
    p = verify(path, "--public-key", "00" * 32)
    assert p.returncode == EXIT_SIGNATURE
    spath, sr = make(work, "k.json")
    assert verify(spath, "--public-key", sr["signature"]["public_key"]).returncode == EXIT_OK
    # hex either case; anything else is a usage error
    assert verify(spath, "--public-key", sr["signature"]["public_key"].upper()).returncode == EXIT_OK
    assert verify(spath, "--public-key", "11" * 32).returncode == EXIT_SIGNATURE
    for bad in ("11" * 31, "zz" * 32, "", "11" * 33):
        p = verify(spath, "--public-key", bad)
        assert p.returncode == EXIT_USAGE and "64 hex digits" in p.stderr, (bad, p.stderr)


def test_model_moved_and_wrong_model(work):
    path, r = make(work, "m.json")
    moved = os.path.join(work["dir"], "moved.gguf")
    shutil.copy(work["model"], moved)
    with open(path) as f:
        doc = json.load(f)
    # --model points at the moved file
    assert verify(path, "--model", moved).returncode == EXIT_OK
    # a different file is refused, naming both hashes
    other = os.path.join(work["dir"], "other.gguf")
    with open(work["model"], "rb") as f:
        data = bytearray(f.read())
    data[-1] ^= 1
    with open(other, "wb") as f:
        f.write(data)
    p = verify(path, "--model", other)
    assert p.returncode == EXIT_MODEL
    assert "is not the receipt's model" in p.stdout and doc["model"]["blake3"][:16] in p.stdout
    p = verify(path, "--model", os.path.join(work["dir"], "missing.gguf"))
    assert p.returncode == EXIT_MODEL and "No such file" in p.stdout


def write(work, name, doc, raw=None):
    path = os.path.join(work["dir"], name)
    with open(path, "w") as f:
        f.write(raw if raw is not None else json.dumps(doc, indent=2, ensure_ascii=False))
    return path


def tamper_cases(r):
    """(name, change, expected exit, expected message part)."""
    def setp(*keys, value):
        def f(d):
            o = d
            for k in keys[:-1]:
                o = o[k]
            o[keys[-1]] = value
        return f

    def delete(*keys):
        def f(d):
            o = d
            for k in keys[:-1]:
                o = o[k]
            del o[keys[-1]]
        return f

    out_ids = r["output"]["tokens"]["ids"]
    return [
        ("seed", setp("sampling", "seed", value=43), EXIT_SIGNATURE, "INVALID"),
        ("temperature", setp("sampling", "temperature", value=0.9), EXIT_SIGNATURE, "INVALID"),
        ("top_k", setp("sampling", "top_k", value=40), EXIT_SIGNATURE, "INVALID"),
        ("top_p", setp("sampling", "top_p", value=0.9), EXIT_SIGNATURE, "INVALID"),
        ("min_p", setp("sampling", "min_p", value=0.1), EXIT_SIGNATURE, "INVALID"),
        ("repeat_penalty", setp("sampling", "repeat_penalty", value=1.2), EXIT_SIGNATURE, "INVALID"),
        ("max_tokens", setp("sampling", "max_tokens", value=41), EXIT_SIGNATURE, "INVALID"),
        ("stop", setp("sampling", "stop", value=["x"]), EXIT_SIGNATURE, "INVALID"),
        ("text", setp("output", "text", value=r["output"]["text"] + "!"), EXIT_SIGNATURE, "INVALID"),
        ("finish", setp("output", "finish", value="stop" if r["output"]["finish"] == "length" else "length"),
         EXIT_SIGNATURE, "INVALID"),
        ("model hash", setp("model", "blake3", value="0" * 64), EXIT_SIGNATURE, "INVALID"),
        ("model path", setp("model", "path", value="/elsewhere.gguf"), EXIT_SIGNATURE, "INVALID"),
        ("build", setp("kinetic", "build", value="0" * 16), EXIT_SIGNATURE, "INVALID"),
        ("device class", setp("device", "class", value="cpu-x86_64-scalar"), EXIT_SIGNATURE, "INVALID"),
        ("ctx-size", setp("device", "settings", "ctx-size", value=64), EXIT_SIGNATURE, "INVALID"),
        ("input", setp("input", value="something else"), EXIT_SIGNATURE, "INVALID"),
        ("public key", setp("signature", "public_key", value="ab" * 32), EXIT_SIGNATURE, "INVALID"),
        ("signature bytes", setp("signature", "ed25519", value="00" * 64), EXIT_SIGNATURE, "INVALID"),
        # token edits are caught by the hashes before the signature
        ("output token", setp("output", "tokens", "ids", value=[out_ids[0] + 1] + out_ids[1:]),
         EXIT_HASHES, "output.tokens.blake3"),
        ("prompt token", setp("prompt", "ids", value=[5] + r["prompt"]["ids"][1:]), EXIT_HASHES, "prompt.blake3"),
        ("output count", setp("output", "tokens", "count", value=len(out_ids) + 1), EXIT_HASHES, "output.tokens.count"),
        ("token hash", setp("output", "tokens", "blake3", value="1" * 64), EXIT_HASHES, "output.tokens.blake3"),
        # malformed
        ("missing model", delete("model"), EXIT_MALFORMED, "field model is missing"),
        ("missing seed", delete("sampling", "seed"), EXIT_MALFORMED, "sampling: seed is missing"),
        ("seed type", setp("sampling", "seed", value="42"), EXIT_MALFORMED, "sampling: seed must be an integer"),
        ("negative seed", setp("sampling", "seed", value=-1), EXIT_MALFORMED, "seed must be between 0 and 9223372036854775807, not -1"),
        ("unknown field", setp("extra", value=1), EXIT_MALFORMED, "unknown field extra"),
        ("unknown nested", setp("sampling", "mirostat_x", value=1), EXIT_MALFORMED, "sampling: unknown setting 'mirostat_x'"),
        ("version", setp("receipt", value=3), EXIT_MALFORMED, "version 3 is not supported"),
        ("bad hash hex", setp("model", "blake3", value="xyz"), EXIT_MALFORMED, "model.blake3 must be 64"),
        ("bad key hex", setp("signature", "public_key", value="zz"), EXIT_MALFORMED, "public_key must be 64"),
        ("token id type", setp("output", "tokens", "ids", value=["a"] + out_ids[1:]), EXIT_MALFORMED, "not a token id"),
        ("finish value", setp("output", "finish", value="maybe"), EXIT_MALFORMED, "output.finish"),
        ("top_p range", setp("sampling", "top_p", value=3), EXIT_MALFORMED, "top_p"),
        ("not an object", lambda d: d.clear() or d.update({"receipt": [1]}), EXIT_MALFORMED, "receipt"),
    ]


def test_tampered_and_malformed(work):
    path, r = make(work, "t.json")
    cases = tamper_cases(r)
    assert len(cases) >= 25
    for name, change, code, part in cases:
        doc = copy.deepcopy(r)
        change(doc)
        p = verify(write(work, "bad.json", doc))
        assert p.returncode == code, (name, p.returncode, p.stdout)
        assert part in p.stdout, (name, p.stdout)
        assert "rerun: identical" not in p.stdout, name


def test_not_json(work):
    for name, raw, part in [
        ("empty", "", "line 1"),
        ("truncated", '{"receipt": 1, "kinetic": {', "line 1"),
        ("duplicate key", '{"receipt": 1, "receipt": 1}', "duplicate"),
        ("bad utf-8", '{"receipt": "\udcff"}', ""),
        ("array", "[1, 2]", "not a JSON object"),
    ]:
        path = os.path.join(work["dir"], "raw.json")
        with open(path, "w", errors="surrogateescape") as f:
            f.write(raw)
        p = verify(path)
        assert p.returncode == EXIT_MALFORMED, (name, p.returncode, p.stdout)
        assert part in p.stdout, (name, p.stdout)
    p = verify(os.path.join(work["dir"], "nope.json"))
    assert p.returncode == EXIT_ERROR


def test_rerun_differs_is_reported(work):
    """A receipt whose tokens do not come from its settings (an unsigned one with another
    seed written in) has consistent hashes and text but fails the rerun, and the verdict
    blames the receipt, not Kinetic."""
    path, r = make(work, "d.json", sign=False)
    forged = copy.deepcopy(r)
    forged["sampling"]["seed"] = 4242
    p = verify(write(work, "forged.json", forged))
    assert p.returncode == EXIT_DIFFERS, p.stdout
    assert "DIFFERS at output token" in p.stdout
    assert "the receipt's tokens are not what this model produces with these settings" in p.stdout
    assert "bug" not in p.stdout
    # a token id outside the vocabulary in logit_bias is a malformed receipt
    forged = copy.deepcopy(r)
    forged["sampling"]["logit_bias"] = [[999999, 1.0]]
    p = verify(write(work, "bias.json", forged))
    assert p.returncode == EXIT_MALFORMED and "logit_bias names token 999999" in p.stdout, p.stdout


def test_bad_keys_and_flags(work):
    d = work["dir"]
    bad = os.path.join(d, "bad.key")
    for content in (b"short", b"zz" * 32, b"00" * 31, b"\x00" * 33):
        with open(bad, "wb") as f:
            f.write(content)
        p = run("run", work["model"], "x", "-n", "2", "--receipt", os.path.join(d, "k.json"),
                "--sign-key", bad, check=False)
        assert p.returncode == 1 and "not an Ed25519 key" in p.stderr, (content, p.stderr)
    raw32 = os.path.join(d, "raw.key")
    with open(raw32, "wb") as f:
        f.write(os.urandom(32))
    run("run", work["model"], "x", "-n", "2", "--receipt", os.path.join(d, "k.json"), "--sign-key", raw32)
    p = run("run", work["model"], "x", "--sign-key", raw32, check=False)
    assert p.returncode == 2 and "--receipt" in p.stderr
    p = verify(os.path.join(d, "k.json"), "--device", "cpu-quantum")
    assert p.returncode == EXIT_USAGE and "unknown device 'cpu-quantum'" in p.stdout
    p = run("verify-receipt", check=False)
    assert p.returncode == EXIT_USAGE
    for t in ("0", "257", "-1"):
        p = verify(os.path.join(d, "k.json"), "--threads", t)
        assert p.returncode == EXIT_USAGE and "1..256" in p.stderr, (t, p.stderr)
    # a file that is not a key: the advice never names it as the place to write a key
    p = run("run", work["model"], "x", "-n", "2", "--receipt", os.path.join(d, "k.json"),
            "--sign-key", "/etc/passwd", check=False)
    assert p.returncode == 1 and "not an Ed25519 key" in p.stderr, p.stderr
    assert "> /etc/passwd" not in p.stderr and "openssl rand -hex 32 > receipt.key" in p.stderr


def test_every_sampler_recorded_and_verified(work):
    """The samplers of issue 10 go into the receipt (only those that are on), the rerun
    reproduces them, and changing one breaks the signature."""
    cases = [
        (["--typical", "0.9"], {"typical_p": 0.9}),
        (["--top-nsigma", "1.5"], {"top_n_sigma": 1.5}),
        (["--xtc-probability", "0.5", "--xtc-threshold", "0.05"], {"xtc_probability": 0.5, "xtc_threshold": 0.05}),
        (["--dry-multiplier", "0.8", "--dry-allowed-length", "3"], {"dry_multiplier": 0.8, "dry_allowed_length": 3}),
        (["--mirostat", "2", "--mirostat-ent", "4"], {"mirostat": 2, "mirostat_tau": 4.0}),
        (["--mirostat", "1"], {"mirostat": 1}),
        (["--logit-bias", "5+2.5,7-inf", "--min-keep", "3"], {"min_keep": 3}),
        (["--samplers", "top_k;temperature"], {"samplers": ["top_k", "temperature"]}),
    ]
    for i, (flags, want) in enumerate(cases):
        path, r = make(work, "smp%d.json" % i, *flags)
        s = r["sampling"]
        for k, v in want.items():
            assert s[k] == v, (flags, k, s)
        p = verify(path)
        assert p.returncode == EXIT_OK, (flags, p.stdout)
        # any change to a sampler setting breaks the signature
        k = next(iter(want))
        doc = copy.deepcopy(r)
        v = doc["sampling"][k]
        doc["sampling"][k] = (["temperature"] if isinstance(v, list) else
                              v % 2 + 1 if isinstance(v, int) else v * 0.5)
        p = verify(write(work, "smp_bad.json", doc))
        assert p.returncode == EXIT_SIGNATURE, (flags, p.stdout)
    path, r = make(work, "bias.json", "--logit-bias", "5+2.5,7-inf")
    assert r["sampling"]["logit_bias"][0] == [5, 2.5] and r["sampling"]["logit_bias"][1][0] == 7
    assert r["sampling"]["logit_bias"][1][1] <= -100
    assert 7 not in r["output"]["tokens"]["ids"]
    # defaults write none of the new keys: receipts made before keep their bytes
    path, r = make(work, "plain.json")
    assert list(r["sampling"])[-1] == "stop"
    # a bad flag is a clear usage error (exit 2), a token outside the vocabulary too
    p = run("run", work["model"], "x", "--logit-bias", "5*2", check=False)
    assert p.returncode == 2 and "logit_bias wants ID+BIAS" in p.stderr
    p = run("run", work["model"], "x", "--logit-bias", "999999+1", check=False)
    assert p.returncode == 2 and "outside the vocabulary" in p.stderr
