"""Stop strings in `kinetic chat` (--stop / -r, /set stop): an answer ends where a stop
string appears, the stop string is neither printed nor kept in the conversation, the
tokens are those `kinetic run` generates for the same prompt tokens and stop string, and
the receipt records the stop strings (sampling.stop), verifies as identical and, signed,
fails the signature when a stop string is changed.

Model: aidreams260K (tiny, fast; raw chat format), driven through a pipe."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")
EXIT_SIGNATURE = 5
ARGS = [AIDREAMS, "--seed", "42", "-n", "40"]
MSG = "Once upon a time"


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="kn_chatstop_")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, "cache")
    key = os.path.join(d, "receipt.key")
    subprocess.run(["openssl", "rand", "-out", key, "-hex", "32"], check=True)
    yield {"dir": d, "key": key}
    shutil.rmtree(d)


def piped(args, script):
    # --chat-format raw: the model has no template, and its answers compare with run's raw
    # prompt (chat's default would be plain turns, whose turn ends join the stop strings)
    p = subprocess.run([KINETIC, "chat", *map(str, args), "--chat-format", "raw"], input=script,
                       capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p


def load(path):
    with open(path) as f:
        return json.load(f)


def verify(path):
    p = subprocess.run([KINETIC, "verify-receipt", path], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture(scope="module")
def base(work):
    """The first answer without stop strings, and a stop string from its middle (no
    spaces or backslashes, which /set trims or --stop would read as escapes)."""
    path = os.path.join(work["dir"], "base.json")
    piped(ARGS, f"{MSG}\n/receipt {path}\n")
    rec = load(path)
    text = rec["output"]["text"]
    for i in range(8, len(text) - 4):
        s = text[i:i + 4]
        if not any(c in s for c in " \t\n\\") and s.isascii():
            return rec, s
    pytest.fail(f"no usable stop string in {text!r}")


def cut(text, stop):
    return text[:text.index(stop)]


def test_stop_ends_answer_like_run(work, base):
    rec0, stop = base
    text0 = rec0["output"]["text"]
    r1, save = (os.path.join(work["dir"], n) for n in ("stop1.json", "stop_conv.json"))
    p = piped([*ARGS, "--stop", stop], f"{MSG}\n/receipt {r1}\nand then\n/save {save}\n")
    want = cut(text0, stop)
    assert p.stdout.startswith(want + "\n")
    rec = load(r1)
    assert rec["sampling"]["stop"] == [stop]
    assert rec["output"]["finish"] == "stop" and rec["output"]["text"] == want
    ids0, ids = rec0["output"]["tokens"]["ids"], rec["output"]["tokens"]["ids"]
    assert ids == ids0[:len(ids)] and len(ids) < len(ids0)
    # `kinetic run` with the same prompt tokens and stop string gives the same tokens and text.
    run = subprocess.run([KINETIC, "run", AIDREAMS, "--prompt-ids",
                          ",".join(map(str, rec["prompt"]["ids"])), "--seed", "42", "-n", "40",
                          "--stop", stop, "--json"], capture_output=True, text=True, timeout=60)
    out = json.loads(run.stdout)
    assert out["tokens"] == ids and out["text"] == want and out["stop"] == "stop_string"
    rc, msg = verify(r1)
    assert rc == 0 and "rerun: identical" in msg, msg
    # The stop string is not kept in the conversation: later turns are sent without it.
    conv = load(save)["messages"]
    assert conv[1] == {"role": "assistant", "content": want}
    assert all(stop not in m["content"] for m in conv if m["role"] == "assistant")


def test_set_stop_changes_it(work, base):
    rec0, stop = base
    text0 = rec0["output"]["text"]
    ra, rb, rc_ = (os.path.join(work["dir"], n) for n in ("set_a.json", "set_b.json", "set_c.json"))
    # /set stop with an escape (\xHH for the first character), then the same message again
    # after /reset; /set stop alone clears it.
    esc = "\\x%02x" % ord(stop[0]) + stop[1:]
    p = piped(ARGS, f"/set stop {esc}\n{MSG}\n/receipt {ra}\n/set\n/set stop\n/reset\n{MSG}\n"
                    f"/receipt {rb}\n/set stop \\x\n/set stop \\x00\n/help\n")
    assert f'stop "{stop}"' in p.stdout
    assert "stop none" in p.stdout
    assert "/set stop: \\x needs one or two hex digits" in p.stdout
    assert "/set stop TEXT" in p.stdout  # in /help
    A, B = load(ra), load(rb)
    assert A["sampling"]["stop"] == [stop] and A["output"]["text"] == cut(text0, stop)
    assert B["sampling"].get("stop", []) == [] and B["output"]["text"] == text0
    assert B["output"]["tokens"]["ids"] == rec0["output"]["tokens"]["ids"]
    for path in (ra, rb):
        rc, msg = verify(path)
        assert rc == 0 and "rerun: identical" in msg, msg
    # -r is --stop's alias, and a stop string the answer does not contain changes nothing.
    piped([*ARGS, "-r", "zzzq", "--stop", stop], f"{MSG}\n/receipt {rc_}\n")
    C = load(rc_)
    assert C["sampling"]["stop"] == ["zzzq", stop] and C["output"]["text"] == cut(text0, stop)


def test_signed_receipt_with_stop(work, base):
    _, stop = base
    path = os.path.join(work["dir"], "signed.json")
    piped([*ARGS, "--stop", stop, "--sign-key", work["key"]], f"{MSG}\n/receipt {path}\n")
    rec = load(path)
    assert rec["sampling"]["stop"] == [stop]
    rc, msg = verify(path)
    assert rc == 0 and "rerun: identical" in msg and "signature: valid" in msg, msg
    rec["sampling"]["stop"] = [stop + "x"]
    with open(path, "w") as f:
        json.dump(rec, f, indent=2, ensure_ascii=False)
    rc, msg = verify(path)
    assert rc == EXIT_SIGNATURE and "INVALID" in msg, msg


def test_bad_stop_flag(work):
    for bad in ("", "\\x", "\\x00"):
        p = subprocess.run([KINETIC, "chat", AIDREAMS, "--stop", bad], input="", capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and "--stop:" in p.stderr, p.stderr


def test_save_load_keeps_stops(work, base):
    _, stop = base
    save, bad, r = (os.path.join(work["dir"], n) for n in ("sl.json", "sl_bad.json", "sl_r.json"))
    piped([*ARGS, "--stop", stop, "-r", "\\n\\n"], f"{MSG}\n/save {save}\n")
    doc = load(save)
    assert doc["settings"]["stop"] == [stop, "\n\n"]
    # Loaded into a session without stop strings, the next answer runs with them.
    p = piped(ARGS, f"/load {save}\nand then\n/receipt {r}\n/set\n")
    assert load(r)["sampling"]["stop"] == [stop, "\n\n"]
    assert f'stop "{stop}" "\\n\\n"' in p.stdout
    for value in ([""], "x", ["a"] * 17, [1]):
        doc["settings"]["stop"] = value
        with open(bad, "w") as f:
            json.dump(doc, f)
        p = piped(ARGS, f"/load {bad}\n/set\n")
        assert "cannot load" in p.stdout and "settings.stop" in p.stdout and "stop none" in p.stdout


def test_set_lists_stops_as_set_takes_them(work):
    # Spaces at either end, quotes, backslashes and newlines come back in a form /set stop
    # and --stop read back as the same string.
    p = piped(ARGS, '/set stop \\x20a"b\\\\c\\n\\x20\n/set\n')
    assert 'stop "\\x20a\\"b\\\\c\\n\\x20"' in p.stdout, p.stdout
