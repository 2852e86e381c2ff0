"""Cross-checks Kinetic's JSON reader and canonical writer against Python's json module.

- Random valid documents: Kinetic's canonical compact form equals
  json.dumps(doc, separators=(",", ":"), ensure_ascii=False) (same escaping, key order, and
  float text, which is Python's repr).
- Random mutations of valid documents: whatever Kinetic accepts, Python accepts too, with
  the same value (Kinetic is the stricter reader: no NaN, no lone surrogates, no duplicate
  keys)."""
import json
import math
import os
import random
import subprocess

import json_tool


def run_batch(docs):
    return json_tool.run("batch", docs)


def rand_string(r):
    alphabet = ["a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\x00", "\x01", "\x1f", "\x7f",
                "é", "€", "😀", "\u2028", "\ufeff", "\U0010ffff"]
    return "".join(r.choice(alphabet) for _ in range(r.randrange(0, 8)))


def rand_float(r):
    k = r.randrange(6)
    if k == 0:
        return r.uniform(-1, 1)
    if k == 1:
        return r.choice([0.0, -0.0, 0.1, 0.8, 0.95, 1.1, 100.0, 1e16, 1e-5, 5e-324])
    if k == 2:
        return float(r.randrange(-10**6, 10**6)) / 8
    while True:
        x = r.getrandbits(64)
        f = __import__("struct").unpack("<d", x.to_bytes(8, "little"))[0]
        if math.isfinite(f):
            return f


def rand_value(r, depth=0):
    k = r.randrange(9 if depth < 4 else 6)
    if k == 0:
        return None
    if k == 1:
        return r.random() < 0.5
    if k == 2:
        return r.randrange(-2**63, 2**63)
    if k == 3:
        return rand_float(r)
    if k in (4, 5):
        return rand_string(r)
    if k in (6, 7):
        return [rand_value(r, depth + 1) for _ in range(r.randrange(0, 5))]
    obj = {}
    for _ in range(r.randrange(0, 5)):
        obj[rand_string(r) + str(len(obj))] = rand_value(r, depth + 1)
    return obj


def canonical_py(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def test_canonical_matches_python():
    r = random.Random(1234)
    values = [rand_value(r) for _ in range(1500)]
    # Feed each both as Python's compact and as its pretty, ASCII-escaped form.
    docs = []
    for v in values:
        docs.append(canonical_py(v))
        docs.append(json.dumps(v, indent=r.choice([None, 1, 4]), ensure_ascii=True).encode())
    res = run_batch(docs)
    mismatches = []
    for i, (ok, out) in enumerate(res):
        assert ok, f"rejected valid {docs[i][:200]!r}: {out}"
        want = canonical_py(values[i // 2])
        if out != want:
            # The one allowed difference: a float at a power-of-two boundary where Python's
            # shortest digits are not the correctly rounded ones; the value must agree.
            assert json.loads(out) == json.loads(want), (out, want)
            mismatches.append((out, want))
    assert len(mismatches) <= 2, mismatches[:5]


def norm(v):
    """Python's value as Kinetic keeps it: integers beyond int64 become doubles."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v if -2**63 <= v < 2**63 else float(v)
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v


def test_mutations_never_accept_what_python_rejects():
    r = random.Random(99)
    base = [canonical_py(rand_value(r)) for _ in range(300)]
    docs = []
    for d in base:
        for _ in range(6):
            b = bytearray(d)
            for _ in range(r.randrange(1, 3)):
                op = r.randrange(3)
                pos = r.randrange(len(b) + 1)
                if op == 0 and b:
                    del b[min(pos, len(b) - 1)]
                elif op == 1:
                    b[pos:pos] = bytes([r.choice(b'{}[]",:\\-+.eE0123456789 \x00\xff\xc3tfnu')])
                elif b:
                    b[min(pos, len(b) - 1)] = r.randrange(256)
            docs.append(bytes(b))
    res = run_batch(docs)
    accepted = 0
    for d, (ok, out) in zip(docs, res):
        if not ok:
            assert out.startswith("JSON: line "), out
            continue
        accepted += 1
        py = json.loads(d.decode("utf-8"))  # must not raise
        assert norm(json.loads(out.decode("utf-8"))) == norm(py)
    assert accepted > 50  # the mutations also produce valid documents


def test_strict_where_python_is_lenient():
    docs = [b'{"a":1,"a":2}', b'NaN', b'[Infinity]', b'"\\ud800"', b'"\\udc00x"', b'[1e400]']
    for d, (ok, msg) in zip(docs, run_batch(docs)):
        json.loads(d)  # Python takes them all
        assert not ok, d


def test_big_integers_become_doubles():
    res = run_batch([b"18446744073709551616", b"-9223372036854775809", b"9223372036854775807"])
    assert res[0] == (True, b"1.8446744073709552e+19")
    assert res[1] == (True, b"-9.223372036854776e+18")
    assert res[2] == (True, b"9223372036854775807")
