"""Receipts written before template recording (no "template", no "output.think": the
committed tests/data/receipts/{aidreams,gemma,settings}_*.json) are proven by the default
renderings an older Kinetic used (docs/receipts.md, "Legacy receipts"). Each honest one
verifies with its input and text proven; each forgery of one (its signature dropped or
replaced by a fresh key, the question swapped, a system message added or changed, the
answer swapped or its text moved around, a stop string shown, a NUL byte hiding text)
exits 8 with a message naming the field. Breaking the legacy path (accepting an input or
text without comparing it) makes these fail."""
import copy
import json
import os
import subprocess

import pytest

from test_receipt_fixtures import AIDREAMS, GEMMA, KINETIC, SOURCE
from test_receipt_forged import Signer
from srvutil import sanitizer_build

OK, ERROR, USAGE, MALFORMED, HASHES, SIGNATURE, MODEL, DIFFERS, TEXT = range(9)
DATA = os.path.join(SOURCE, "tests", "data", "receipts")
LEGACY_IN = "input: MISMATCH: the receipt records no template, and the model's default rendering ("
LEGACY_TXT = "output.text: MISMATCH: it is not the text of the output tokens (the receipt records no reasoning split"


def load(name):
    with open(os.path.join(DATA, name + ".json")) as f:
        return json.load(f)


def model_of(r):
    return GEMMA if r["model"]["file"].startswith("gemma") else AIDREAMS


def verify(tmp, r, name, *extra):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(r, f, ensure_ascii=False)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
    return subprocess.run([KINETIC, "verify-receipt", path, "--model", model_of(r), *extra],
                          capture_output=True, text=True, env=env, timeout=600)


def last_user(r):
    return next(m for m in reversed(r["input"]) if m["role"] == "user")


def set_user(text):
    def f(r):
        if isinstance(r["input"], str):
            r["input"] = text
        else:
            last_user(r)["content"] = text
    return f


def swap_q_and_a(r):
    q = r["input"] if isinstance(r["input"], str) else last_user(r)["content"]
    set_user(r["output"]["text"])(r)
    r["output"]["text"] = q


def halves_swapped(r):
    t = r["output"]["text"]
    r["output"]["text"] = t[len(t) // 2:] + t[:len(t) // 2]


def text_set(fn):
    return lambda r: r["output"].update(text=fn(r["output"]["text"]))


LEGACY = ["aidreams_default", "aidreams_grammar", "aidreams_greedy_signed",
          "aidreams_samplers_stop", "gemma_chat", "gemma_json_schema", "gemma_raw",
          "gemma_serve_chat", "gemma_serve_completion", "settings_chat1", "settings_run1",
          "settings_serve1"]

FORGERIES = [
    # (name, fixture, change, expected message part)
    ("input swapped", "aidreams_default", set_user("How do I make a bomb?"), LEGACY_IN),
    ("input one letter", "settings_run1", set_user("Once upon a tima"), LEGACY_IN),
    ("input trailing space", "aidreams_greedy_signed", set_user("Tom and Sue "), LEGACY_IN),
    ("system added", "aidreams_default", lambda r: r["input"].insert(0, {"role": "system", "content": "Obey."}), LEGACY_IN),
    ("question and answer swapped", "aidreams_default", swap_q_and_a, LEGACY_IN),
    ("earlier turn changed", "settings_chat1", lambda r: r["input"][1].update(content=" of deceit."), LEGACY_IN),
    ("turn dropped", "settings_chat1", lambda r: r["input"].pop(1), LEGACY_IN),
    ("input hidden after a NUL", "aidreams_default", set_user("Once upon a time\u0000, and then the bomb"), "input: MISMATCH: the input holds a NUL byte"),
    ("raw input swapped", "gemma_raw", set_user("Here is a short story about a robot who learns to steal:"), LEGACY_IN),
    ("raw input hidden after a NUL", "gemma_raw", lambda r: r.update(input=r["input"] + "\u0000 and steal"), "input: MISMATCH: the input holds a NUL byte"),
    ("completion input swapped", "gemma_serve_completion", set_user("Once upon a time, a wolf"), LEGACY_IN),
    ("completion input swapped settings", "settings_serve1", set_user("Twice upon a time"), LEGACY_IN),
    ("raw input as ids", "settings_serve1", lambda r: r.update(input="1, 2, 3"), LEGACY_IN),
    ("serve system changed", "gemma_serve_chat", lambda r: r["input"][0].update(content="Answer at length."), LEGACY_IN),
    ("serve system removed", "gemma_serve_chat", lambda r: r["input"].pop(0), LEGACY_IN),
    ("chat question swapped", "gemma_chat", set_user("Name three weapons."), LEGACY_IN),
    ("answer swapped", "aidreams_default", lambda r: r["output"].update(text="You cannot make a cake."), LEGACY_TXT + "; with none and with the model's default <think>...</think> split alike): they differ at byte 0"),
    ("answer halves swapped", "aidreams_greedy_signed", halves_swapped, LEGACY_TXT),
    ("answer with its stop string", "aidreams_samplers_stop", text_set(lambda t: t + "."), LEGACY_TXT),
    ("answer with text after its stop string", "gemma_serve_chat", text_set(lambda t: t + "mat. And then he cried."), LEGACY_TXT),
    ("answer without its last byte", "gemma_raw", text_set(lambda t: t[:-1]), LEGACY_TXT),
    ("answer as reasoning", "gemma_chat", text_set(lambda t: "<think>plan</think>" + t), LEGACY_TXT),
    ("answer emptied", "settings_run1", text_set(lambda t: ""), LEGACY_TXT),
    ("answer look-alike", "aidreams_default", text_set(lambda t: t.translate(str.maketrans("aeop", "аеор"))), LEGACY_TXT),
    ("grammar answer swapped", "aidreams_grammar", text_set(lambda t: "no."), LEGACY_TXT),
    ("json answer swapped", "gemma_json_schema", text_set(lambda t: t.replace("cat", "dog")), LEGACY_TXT),
    ("stop string removed", "aidreams_samplers_stop", lambda r: r["sampling"].update(stop=[]), LEGACY_TXT),
]


def have(name):
    return os.path.exists(model_of(load(name)))


@pytest.mark.parametrize("name", LEGACY)
def test_honest_legacy_receipt_is_proven(name, tmp_path):
    if not have(name):
        pytest.skip("model not found (set KN_GEMMA)")
    r = load(name)
    assert "template" not in r and "think" not in r["output"]
    p = verify(str(tmp_path), r, name)
    assert p.returncode == OK, p.stdout + p.stderr
    assert "input: proven (legacy receipt): it renders with the model's default template settings (" in p.stdout, p.stdout
    assert "output.text: proven (legacy receipt): the " in p.stdout, p.stdout


@pytest.mark.parametrize("signing", ["unsigned", "fresh"])
@pytest.mark.parametrize("name,fixture,change,part", FORGERIES, ids=[f[0] for f in FORGERIES])
def test_forged_legacy_receipt(name, fixture, change, part, signing, tmp_path):
    if not have(fixture):
        pytest.skip("model not found (set KN_GEMMA)")
    if signing == "fresh" and sanitizer_build():
        pytest.skip("sanitizer build: the freshly signed twin runs the same C path as the "
                    "unsigned one (the signature checks run under ASan in test_receipt_forged); "
                    "the plain suite runs it")
    r = copy.deepcopy(load(fixture))
    change(r)
    r.pop("signature", None)
    if signing == "fresh":
        Signer(str(tmp_path)).sign(r)
    p = verify(str(tmp_path), r, "forged")
    assert p.returncode == TEXT, (name, p.returncode, p.stdout, p.stderr)
    assert part in p.stdout, p.stdout
    assert "rerun:" not in p.stdout, p.stdout


def test_signed_legacy_receipt_changed_is_invalid(tmp_path):
    r = load("aidreams_greedy_signed")
    set_user("How do I make a bomb?")(r)
    p = verify(str(tmp_path), r, "kept")
    assert p.returncode == SIGNATURE and "signature: INVALID" in p.stdout, p.stdout
