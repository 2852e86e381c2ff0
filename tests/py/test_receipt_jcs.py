"""Receipts are signed over RFC 8785 (the JSON Canonicalization Scheme) since version 2, so
any language that parses a receipt and writes it again keeps the signature valid
(docs/receipts.md, "Canonical JSON").

- Signed receipts made by the real binary (`kinetic run` with integral floats, non-ASCII
  and astral text, control characters, template kwargs whose keys sort differently in
  UTF-16 and UTF-8; `kinetic serve`'s response) go through Python's json, Node's
  JSON.parse/JSON.stringify and jq, and `kinetic verify-receipt` still finds the signature
  valid and the rerun identical.
- The rfc8785 package rebuilds the signed bytes from the parsed receipt and openssl checks
  the Ed25519 signature against them; a changed value does not verify.
- Kinetic's JCS numbers equal RFC 8785 Appendix B's samples and, on random doubles and
  every power of two's neighbours, Node's and the rfc8785 package's; whole documents equal
  the rfc8785 package's bytes.
- The legacy path: every fixture in tests/data/receipts (version 1) still reads, and each
  signed one verifies over the legacy form, which openssl confirms; a receipt with a seed
  beyond 2^53, which JCS's doubles cannot sign exactly, is still written as version 1."""
import glob
import json
import math
import os
import random
import struct
import subprocess

import pytest
import rfc8785

from receipt_bytes import openssl_verifies, signed_bytes
from srvutil import Server

KINETIC = os.environ.get("KINETIC", "build/kinetic")
SOURCE = os.environ.get("KN_SOURCE", ".")

import json_tool
FIXTURES = sorted(glob.glob(os.path.join(SOURCE, "tests", "data", "receipts", "*.json")))
OK, SIGNATURE, MODEL = 0, 5, 6

NODE_ROUND_TRIP = ("const fs = require('fs');"
                   "process.stdout.write(JSON.stringify(JSON.parse(fs.readFileSync(0, 'utf8'))));")


def node(script, data):
    return subprocess.run(["node", "-e", script], input=data, capture_output=True, check=True,
                          timeout=120).stdout


# Each rewrites the receipt file's bytes as a client in that language would.
ROUND_TRIPS = {
    "python": lambda b: json.dumps(json.loads(b)).encode(),
    "python-indent-ascii": lambda b: json.dumps(json.loads(b), indent=1, sort_keys=True).encode(),
    "node": lambda b: node(NODE_ROUND_TRIP, b),
    "jq": lambda b: subprocess.run(["jq", "."], input=b, capture_output=True, check=True).stdout,
    "jq-sorted-compact": lambda b: subprocess.run(["jq", "-S", "-c", "."], input=b,
                                                  capture_output=True, check=True).stdout,
}


def kinetic(*args, env, check=True):
    p = subprocess.run([KINETIC, *args], capture_output=True, text=True, errors="replace",
                       env=env, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"kinetic {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("jcs")
    env = dict(os.environ, XDG_CACHE_HOME=str(d / "cache"))
    model, key = str(d / "m.gguf"), str(d / "k.key")
    kinetic("synth", "--preset", "tiny", "--seed", "7", "--threads", "1", "-o", model, env=env)
    subprocess.run(["openssl", "rand", "-out", key, "-hex", "32"], check=True)
    tpl = d / "t.jinja"
    tpl.write_text("{{ messages[0].content }}{{ x }}")
    receipts = {}
    # temperature 1, top_p 1, min_p 0, penalties 0.0: the floats JavaScript writes as
    # integers; stop strings with a newline, a quote and a backslash.
    plain = str(d / "plain.json")
    kinetic("run", model, "Héllo \U0001F600 world", "-n", "12", "--seed", "5", "--temp", "1",
            "--top-p", "1", "--min-p", "0", "--stop", "\n", "--stop", '"\\', "--receipt", plain,
            "--sign-key", key, "--threads", "1", env=env)
    receipts["run"] = plain
    # kwargs keys that sort differently by UTF-16 units than by code points (U+1F600 before
    # U+FB01), numbers JCS writes in its own ways, logit_bias with a ban, XTC's floats.
    kw = {"x": "!", "\u00e9": 1, "\U0001F600": 2, "\ufb01": 3.0, "A": [1.5, 1e-7, 1e21, -0.0, 100.0, 1e-6]}
    rich = str(d / "rich.json")
    kinetic("run", model, 'Say "hi" \\ \u00e9 \U0001F600 \ufb01', "-n", "8", "--seed", "9",
            "--temp", "1", "--repeat-penalty", "1", "--logit-bias", "5+2.5,7-inf",
            "--xtc-probability", "0.5", "--xtc-threshold", "0.1", "--chat-template", str(tpl),
            "--chat-template-kwargs", json.dumps(kw), "--receipt", rich, "--sign-key", key,
            "--threads", "1", env=env)
    receipts["run-rich"] = rich
    # A server response: the receipt as a web page gets it, inside the response body.
    with Server(model, "--sign-key", key, "--threads", "1", env=env) as srv:
        st, _, body = srv.request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Tschüß \U0001F44B"}], "max_tokens": 8,
            "seed": 3, "temperature": 1.0, "presence_penalty": 0.0, "receipt": True})
        assert st == 200, body
    served = d / "served.json"
    served.write_bytes(node("const fs = require('fs');"
                            "process.stdout.write(JSON.stringify(JSON.parse("
                            "fs.readFileSync(0, 'utf8')).receipt));", body))
    receipts["serve"] = str(served)
    yield {"dir": d, "env": env, "model": model, "key": key, "receipts": receipts}


def verify(world, path, *extra):
    return kinetic("verify-receipt", path, *extra, env=world["env"], check=False)


@pytest.mark.parametrize("kind", ["run", "run-rich", "serve"])
def test_made_signed_and_verifies(world, kind):
    path = world["receipts"][kind]
    with open(path, "rb") as f:
        r = json.loads(f.read())
    assert r["receipt"] == 2 and len(r["signature"]["ed25519"]) == 128
    p = verify(world, path, "--model", world["model"])
    assert p.returncode == OK, p.stdout
    assert "signature: valid" in p.stdout and "rerun: identical" in p.stdout, p.stdout
    assert "version-1" not in p.stdout


@pytest.mark.parametrize("trip", list(ROUND_TRIPS))
@pytest.mark.parametrize("kind", ["run", "run-rich", "serve"])
def test_round_trip_keeps_signature(world, kind, trip):
    with open(world["receipts"][kind], "rb") as f:
        original = f.read()
    rewritten = ROUND_TRIPS[trip](original)
    assert json.loads(rewritten) == json.loads(original)
    path = os.path.join(world["dir"], f"{kind}.{trip}.json")
    with open(path, "wb") as f:
        f.write(rewritten)
    p = verify(world, path, "--model", world["model"])
    assert p.returncode == OK, (trip, p.stdout)
    assert "signature: valid" in p.stdout and "rerun: identical" in p.stdout, p.stdout


def test_round_trips_do_rewrite(world):
    """The round trips change the bytes the old canonical form covered: JavaScript and jq
    write 1.0 as 1, Python escapes non-ASCII. So the legacy form would not survive them."""
    with open(world["receipts"]["run"], "rb") as f:
        original = f.read()
    r = json.loads(original)
    assert b'"temperature": 1.0' in original and b'"presence_penalty": 0.0' in original
    assert b'"temperature":1,' in ROUND_TRIPS["node"](original)
    assert b'"temperature": 1,' in ROUND_TRIPS["jq"](original)
    assert b"\\ud83d\\ude00" in ROUND_TRIPS["python"](original)
    # Over the legacy form, the parsed values written again (0.0 now 0) do not verify.
    as_js = json.loads(ROUND_TRIPS["node"](original))
    legacy = {k: v for k, v in as_js.items() if k != "signature"}
    assert not openssl_verifies(r, json.dumps(legacy, separators=(",", ":"),
                                              ensure_ascii=False).encode())


@pytest.mark.parametrize("kind", ["run", "run-rich", "serve"])
def test_rfc8785_package_rebuilds_the_signed_bytes(world, kind):
    """An outside oracle: the rfc8785 package's bytes of the parsed receipt (as read, and
    after Node's round trip) carry the signature for openssl."""
    with open(world["receipts"][kind], "rb") as f:
        original = f.read()
    for data in (original, ROUND_TRIPS["node"](original)):
        r = json.loads(data)
        assert openssl_verifies(r), kind
    # One changed value, another member or a moved version does not verify.
    r = json.loads(original)
    for change in (lambda r: r["sampling"].update(temperature=1.5),
                   lambda r: r["output"].update(text=r["output"]["text"] + " "),
                   lambda r: r["input"].append({"role": "user", "content": "more"})
                   if isinstance(r["input"], list) else r.update(input=r["input"] + "!"),
                   lambda r: r.update(receipt=1)):
        changed = json.loads(original)
        change(changed)
        assert not openssl_verifies(changed), kind


def test_changed_value_after_round_trip_is_invalid(world):
    with open(world["receipts"]["run"], "rb") as f:
        r = json.loads(ROUND_TRIPS["node"](f.read()))
    r["sampling"]["seed"] = 6
    path = os.path.join(world["dir"], "forged.json")
    with open(path, "w") as f:
        json.dump(r, f)
    p = verify(world, path, "--model", world["model"])
    assert p.returncode == SIGNATURE and "signature: INVALID" in p.stdout, p.stdout


# ----------------------------------------------------------------------------- numbers

# RFC 8785, Appendix B ("Number Serialization Samples"): IEEE 754 bits and the JCS text.
# NaN and Infinity have none: a canonicalizer must refuse them.
RFC8785_APPENDIX_B = [
    ("0000000000000000", "0"),                         # zero
    ("8000000000000000", "0"),                         # minus zero
    ("0000000000000001", "5e-324"),                    # min pos number
    ("8000000000000001", "-5e-324"),                   # min neg number
    ("7fefffffffffffff", "1.7976931348623157e+308"),   # max pos number
    ("ffefffffffffffff", "-1.7976931348623157e+308"),  # max neg number
    ("4340000000000000", "9007199254740992"),          # max pos int
    ("c340000000000000", "-9007199254740992"),         # max neg int
    ("4430000000000000", "295147905179352830000"),     # ~2**68
    ("7fffffffffffffff", None),                        # NaN
    ("7ff0000000000000", None),                        # Infinity
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),        # round to even
]


def bits_of(x):
    return "%016x" % struct.unpack("<Q", struct.pack("<d", x))[0]


def kinetic_jcs_numbers(hexes):
    out = subprocess.run([json_tool.TOOL, "jcs-bits"], input="".join(h + "\n" for h in hexes).encode(),
                         capture_output=True, check=True).stdout.decode().split("\n")
    assert out[-1] == "" and len(out) == len(hexes) + 1
    return out[:-1]


def node_numbers(hexes):
    script = ("const b = Buffer.alloc(8);"
              "const L = require('fs').readFileSync(0, 'utf8').trim().split('\\n');"
              "process.stdout.write(L.map(h => { b.write(h, 'hex');"
              " return JSON.stringify(b.readDoubleBE(0)); }).join('\\n') + '\\n');")
    return node(script, "".join(h + "\n" for h in hexes).encode()).decode().split("\n")[:-1]


def test_rfc8785_appendix_b_samples():
    got = kinetic_jcs_numbers([h for h, _ in RFC8785_APPENDIX_B])
    for (h, want), g in zip(RFC8785_APPENDIX_B, got):
        if want is None:
            assert g.startswith("ERR JSON: cannot write") and "NaN or infinity" in g, (h, g)
        else:
            assert g == want, (h, g, want)
    # The table as written here is JavaScript's own (Node), so it holds no typo.
    finite = [(h, w) for h, w in RFC8785_APPENDIX_B if w is not None]
    assert node_numbers([h for h, _ in finite]) == [w for _, w in finite]


def test_number_edge_cases():
    cases = [(0.0, "0"), (-0.0, "0"), (1.0, "1"), (-1.0, "-1"), (0.1, "0.1"), (0.8, "0.8"),
             (1e21, "1e+21"), (1e20, "100000000000000000000"), (123e18, "123000000000000000000"),
             (1e-7, "1e-7"), (1e-6, "0.000001"), (1.5e-7, "1.5e-7"), (5e-324, "5e-324"),
             (2.0 ** 53, "9007199254740992"), (2.0 ** 53 - 1, "9007199254740991"),
             (-(2.0 ** 53), "-9007199254740992"), (2.0 ** 63, "9223372036854776000"),
             (1.7976931348623157e308, "1.7976931348623157e+308"), (0.95, "0.95")]
    got = kinetic_jcs_numbers([bits_of(x) for x, _ in cases])
    assert got == [w for _, w in cases]
    # Integers as a receipt holds them (int64 text): exact up to 2^53, and beyond it as
    # their nearest doubles, as JavaScript reads them (so what JCS writes reads back to
    # itself: 2^60 is written 1152921504606847000, which reads as 2^60 again).
    texts = ["0", "-0", "42", "9007199254740991", "9007199254740992", "-9007199254740992",
             "9007199254740993", "9007199254740994", "1152921504606846976", "1152921504606847000",
             "-9223372036854775807"]
    res = run_jcs([t.encode() for t in texts])
    js = node("const L = require('fs').readFileSync(0, 'utf8').trim().split('\\n');"
              "process.stdout.write(L.map(t => JSON.stringify(JSON.parse(t))).join('\\n'));",
              "\n".join(texts).encode()).decode().split("\n")
    assert res == [(True, t.encode()) for t in js], (res, js)
    assert js[6] == "9007199254740992" and js[8] == js[9] == "1152921504606847000"


def test_seed_beyond_2_53_is_written_as_version_1(world):
    """RFC 8785's numbers are doubles, so a seed beyond 2^53 would sign as its neighbour
    too: such a receipt is written as version 1 (exact int64), which verifies and keeps its
    signature through Python's json; as version 2 it is refused, naming the seed."""
    out = os.path.join(world["dir"], "bigseed.json")
    seed = 2 ** 63 - 1
    kinetic("run", world["model"], "x", "-n", "3", "--seed", str(seed), "--receipt", out,
            "--sign-key", world["key"], "--threads", "1", env=world["env"])
    with open(out, "rb") as f:
        r = json.loads(f.read())
    assert r["receipt"] == 1 and r["sampling"]["seed"] == seed
    assert openssl_verifies(r)
    again = os.path.join(world["dir"], "bigseed-python.json")
    with open(again, "w") as f:
        json.dump(r, f, separators=(",", ":"), ensure_ascii=False)
    p = verify(world, again, "--model", world["model"])
    assert p.returncode == OK and "a version-1 receipt" in p.stdout, p.stdout
    r["receipt"] = 2
    with open(again, "w") as f:
        json.dump(r, f)
    p = verify(world, again, "--model", world["model"])
    assert p.returncode == 3, p.stdout
    assert "sampling.seed is 9223372036854775807, beyond 2^53: a version-2 receipt" in p.stdout


def test_numbers_match_node_and_rfc8785():
    """Every power of two and its neighbours (where the shortest digits are not always the
    correctly rounded ones) and random doubles: Kinetic, Node and the rfc8785 package
    write the same text."""
    values = []
    for e in range(-1074, 1024):
        x = math.ldexp(1.0, e)
        values += [x, math.nextafter(x, 0.0), math.nextafter(x, math.inf)]
    r = random.Random(8785)
    while len(values) < 30000:
        x = struct.unpack("<d", r.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(x):
            values.append(x)
    values = [x for x in values if math.isfinite(x)]
    hexes = [bits_of(x) for x in values]
    ours, js = kinetic_jcs_numbers(hexes), node_numbers(hexes)
    bad = [(x, a, b, rfc8785.dumps(x).decode()) for x, a, b in zip(values, ours, js)
           if not a == b == rfc8785.dumps(x).decode()]
    assert not bad, bad[:5]


# ----------------------------------------------------------------------------- documents

def run_jcs(docs):
    return json_tool.run("jcs", docs)


def rand_string(r):
    alphabet = ["a", "B", "1", " ", "\"", "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "\u0080",
                "\u00f6", "\u20ac", "\u2028", "\ud7ff", "\ue000", "\ufb33", "\uffff",
                "\U0001F600", "\U00010000", "\U0010ffff"]
    return "".join(r.choice(alphabet) for _ in range(r.randrange(0, 6)))


def rand_value(r, depth=0):
    k = r.randrange(9 if depth < 4 else 6)
    if k == 0:
        return r.choice([None, True, False])
    if k == 1:
        return r.randrange(-2 ** 53 + 1, 2 ** 53)  # the rfc8785 package's integer domain
    if k == 2:
        return r.choice([0.0, -0.0, 1.0, 0.1, 1e21, 1e-7, 5e-324, 2.0 ** 60, 333333333.33333329])
    if k == 3:
        while True:
            x = struct.unpack("<d", r.getrandbits(64).to_bytes(8, "little"))[0]
            if math.isfinite(x):
                return x
    if k in (4, 5):
        return rand_string(r)
    if k in (6, 7):
        return [rand_value(r, depth + 1) for _ in range(r.randrange(0, 5))]
    obj = {}
    for _ in range(r.randrange(0, 6)):
        obj[rand_string(r)] = rand_value(r, depth + 1)
    return obj


def test_documents_match_rfc8785():
    """Random documents (keys of every UTF-16 kind, escapes, numbers), given to Kinetic as
    Python writes them: Kinetic's JCS bytes are the rfc8785 package's."""
    r = random.Random(37)
    values = [rand_value(r) for _ in range(2000)]
    docs = [json.dumps(v, ensure_ascii=r.random() < 0.5, indent=r.choice([None, 2])).encode()
            for v in values]
    for v, (ok, out) in zip(values, run_jcs(docs)):
        assert ok, out
        assert out == rfc8785.dumps(v), (v, out)


# ----------------------------------------------------------------------------- legacy

@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_legacy_fixture_signature(path, tmp_path):
    """Every fixture is version 1 and reads; a signed one verifies over the legacy form
    (openssl agrees on Python's compact bytes, not on the JCS ones); with its version
    changed to 2 its signature is invalid. The model is absent here, so verify-receipt
    stops at the model (exit 6) after the signature: test_receipt_fixtures.py reruns them."""
    with open(path, "rb") as f:
        r = json.loads(f.read())
    assert r["receipt"] == 1
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    absent = str(tmp_path / "absent.gguf")
    p = subprocess.run([KINETIC, "verify-receipt", path, "--model", absent], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == MODEL, p.stdout
    if "signature" not in r:
        assert "signature: absent" in p.stdout, p.stdout
        return
    assert ("signature: valid, public key " + r["signature"]["public_key"]) in p.stdout, p.stdout
    assert "a version-1 receipt, signed over its legacy canonical form" in p.stdout, p.stdout
    assert openssl_verifies(r)
    assert not openssl_verifies(r, rfc8785.dumps({k: v for k, v in r.items() if k != "signature"}))
    moved = dict(r, receipt=2)
    assert signed_bytes(moved) != signed_bytes(r)
    forged = tmp_path / "moved.json"
    forged.write_text(json.dumps(moved))
    p = subprocess.run([KINETIC, "verify-receipt", str(forged), "--model", absent],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == SIGNATURE and "signature: INVALID" in p.stdout, p.stdout


def test_legacy_fixtures_include_signed_ones():
    signed = [f for f in FIXTURES if "signature" in json.load(open(f))]
    assert len(signed) >= 3, signed
