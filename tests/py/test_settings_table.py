"""The sampling settings table (src/sample/settings.c) walked through every surface.

For every row of the table (as tests/tools/sample_table prints it, with an out-of-range
value and the one message the table gives for it), that value is refused with that same
message by `kinetic run` (exit 2), `kinetic chat` (flags: exit 2; piped `/set`), the server
(400, under the key and each of its aliases) and a hand-edited receipt (verify-receipt,
exit 3). An in-range value other than the default, for every row at once, round-trips
through run's receipt, chat's /set, /save, /load and receipt, and the server's receipt,
each verifying `identical`. Receipts written before the table (tests/data/receipts/
settings_*.json: every sampler, run, chat and serve) are checked by
test_receipt_fixtures.py. Model: aidreams260K (tiny, fast)."""
import copy
import json
import os
import subprocess
import tempfile

import pytest

from srvutil import Server

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
SOURCE = os.environ.get("KN_SOURCE", os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("KN_BUILD", os.path.join(SOURCE, "build"))
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")

EXIT_USAGE, EXIT_MALFORMED = 2, 3


def load_table():
    out = subprocess.run([os.path.join(BUILD, "tests", "sample_table")], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return json.loads(out)


TABLE = load_table()
ROWS = {r["name"]: r for r in TABLE}

# An in-range value other than the default for every row: its text form (flags, /set) and
# what a receipt or /save records. A new row must be added here (test_every_row_has_a_value).
GOOD = {
    "temperature": ("0.7", 0.7),
    "top_k": ("20", 20),
    "top_p": ("0.9", 0.9),
    "min_p": ("0.02", 0.02),
    "repeat_penalty": ("1.2", 1.2),
    "presence_penalty": ("0.3", 0.3),
    "frequency_penalty": ("0.1", 0.1),
    "repeat_last_n": ("32", 32),
    "seed": ("9223372036854775807", 2 ** 63 - 1),  # the largest seed: written and accepted
    "n_predict": ("4", 4),
    "typical_p": ("0.95", 0.95),
    "top_n_sigma": ("2", 2),
    "xtc_probability": ("0.25", 0.25),
    "xtc_threshold": ("0.2", 0.2),
    "dry_multiplier": ("0.5", 0.5),
    "dry_base": ("1.5", 1.5),
    "dry_allowed_length": ("3", 3),
    "dry_penalty_last_n": ("64", 64),
    "dry_sequence_breakers": ('["\\n", "x"]', ["\n", "x"]),
    "mirostat": ("2", 2),
    "mirostat_tau": ("4.5", 4.5),
    "mirostat_eta": ("0.2", 0.2),
    "min_keep": ("2", 2),
    "logit_bias": ("5+1.5,7-100", [[5, 1.5], [7, -100]]),
    "samplers": ("top_k;temperature", ["top_k", "temperature"]),
}


def flag_args(values):
    args = []
    for name, (text, _) in values.items():
        args += [f"--{ROWS[name]['flag']}", text]
    return args


def run(*args, stdin=None, timeout=120):
    return subprocess.run([KINETIC, *args], capture_output=True, text=True, input=stdin,
                          timeout=timeout)


def verify(path):
    p = run("verify-receipt", path, "--model", AIDREAMS, timeout=300)
    return p.returncode, p.stdout + p.stderr


def check_recorded(sampling, where):
    for name, (_, want) in GOOD.items():
        key = ROWS[name]["key"]
        assert key in sampling, (where, key)
        got = sampling[key]
        assert got == want or (isinstance(want, float) and abs(got - want) < 1e-6), \
            (where, key, got, want)


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="kn_settings_")
    yield d
    subprocess.run(["rm", "-rf", d])


@pytest.fixture(scope="module")
def server():
    with Server(AIDREAMS, "--threads", "1") as s:
        yield s


def test_every_row_has_a_value():
    assert set(GOOD) == set(ROWS), set(GOOD) ^ set(ROWS)
    assert len(TABLE) >= 25


# ---------------------------------------------------------------- out of range: one message

@pytest.mark.parametrize("name", list(ROWS))
def test_run_and_chat_flags_refuse(name):
    row = ROWS[name]
    for cmd in ("run", "chat"):
        args = [cmd, AIDREAMS] + (["x"] if cmd == "run" else []) + [f"--{row['flag']}", row["bad_text"]]
        p = run(*args, stdin="")
        assert p.returncode == EXIT_USAGE, (cmd, name, p.returncode, p.stderr)
        assert f"kinetic {cmd}: {row['message']}" in p.stderr, (cmd, name, p.stderr)
    if row["short"]:
        p = run("run", AIDREAMS, "x", f"-{row['short']}", row["bad_text"])
        assert p.returncode == EXIT_USAGE and row["message"] in p.stderr


def test_chat_set_refuses_every_row():
    lines = []
    for row in TABLE:
        lines.append(f"/set {row['name']} {row['bad_text']}")
        lines.append(f"/set {row['flag']} {row['bad_text']}")
    lines.append("/set")
    p = run("chat", AIDREAMS, "--seed", "1", stdin="\n".join(lines) + "\n")
    assert p.returncode == 0, p.stderr
    for row in TABLE:
        assert p.stdout.count(row["message"]) == 2, (row["name"], p.stdout)
    # nothing changed: the list shows the defaults (seed as given)
    assert "temperature 0.8, top_k 50, top_p 0.95, min_p 0.05, repeat_penalty 1.1" in p.stdout
    assert "seed 1, n_predict -1" in p.stdout


def test_server_refuses_every_row_under_every_key(server):
    for row in TABLE:
        for key in [row["key"], *row["aliases"]]:
            st, _, js = server.post("/v1/completions",
                                    {"prompt": "a", "max_tokens": 2, key: json.loads(row["bad_json"])})
            assert st == 400, (key, st, js)
            assert js["error"]["message"] == row["message"], (key, js)
            assert js["error"]["param"] == key


def test_hand_edited_receipt_refuses_every_row(work):
    path = os.path.join(work, "base.json")
    p = run("run", AIDREAMS, "Once upon a time", *flag_args(GOOD), "--receipt", path)
    assert p.returncode == 0, p.stderr
    doc = json.load(open(path))
    for row in TABLE:
        bad = copy.deepcopy(doc)
        bad["sampling"][row["key"]] = json.loads(row["bad_json"])
        bp = os.path.join(work, "bad.json")
        json.dump(bad, open(bp, "w"))
        rc, out = verify(bp)
        assert rc == EXIT_MALFORMED, (row["name"], rc, out)
        assert f"receipt: sampling: {row['message']}" in out, (row["name"], out)


# ---------------------------------------------------------------- in range: round trips

def test_run_records_every_row_and_verifies(work):
    path = os.path.join(work, "run.json")
    p = run("run", AIDREAMS, "Once upon a time", *flag_args(GOOD), "--receipt", path, "--json")
    assert p.returncode == 0, p.stderr
    rec = json.load(open(path))
    check_recorded(rec["sampling"], "run")
    assert len(json.loads(p.stdout)["tokens"]) <= 4
    rc, out = verify(path)
    assert rc == 0 and "identical" in out, out


def test_chat_set_save_load_receipt(work):
    s1, s2, r1, r2 = (os.path.join(work, n) for n in ("c1.json", "c2.json", "cr1.json", "cr2.json"))
    sets = "".join(f"/set {name} {text}\n" for name, (text, _) in GOOD.items())
    a = run("chat", AIDREAMS, stdin=f"{sets}Once upon a time\n/receipt {r1}\n/save {s1}\n/set\n")
    assert a.returncode == 0, a.stderr
    check_recorded(json.load(open(r1))["sampling"], "chat receipt")
    check_recorded(json.load(open(s1))["settings"], "/save")
    for name in ("temperature", "top_k", "seed", "n_predict", "logit_bias", "samplers"):
        assert f"{name} {GOOD[name][0]}" in a.stdout, (name, a.stdout)
    assert verify(r1)[0] == 0
    # another session with other flags: /load brings every setting back
    b = run("chat", AIDREAMS, "--seed", "5", "--temp", "0.1", "--mirostat", "1",
            stdin=f"/load {s1}\n/save {s2}\nOnce upon a time\n/receipt {r2}\n")
    assert b.returncode == 0, b.stderr
    assert open(s1, "rb").read() == open(s2, "rb").read()
    check_recorded(json.load(open(r2))["sampling"], "chat after /load")
    assert verify(r2)[0] == 0
    # the same settings as flags give the same receipt settings
    r3 = os.path.join(work, "cr3.json")
    c = run("chat", AIDREAMS, *flag_args(GOOD), stdin=f"Once upon a time\n/receipt {r3}\n")
    assert c.returncode == 0, c.stderr
    assert json.load(open(r3))["sampling"] == json.load(open(r1))["sampling"]


def test_chat_loads_a_file_saved_before_the_table(work):
    # /save files from before wrote the nine first settings under their /set names
    # (n_predict, not max_tokens) and nothing of the newer samplers
    old = os.path.join(work, "old_save.json")
    json.dump({"format": "kinetic-chat-1", "model": "aidreams260K.gguf",
               "messages": [{"role": "user", "content": "Once"}, {"role": "assistant", "content": " upon"}],
               "settings": {"temperature": 0.5, "top_k": 7, "top_p": 0.9, "min_p": 0.0,
                            "repeat_penalty": 1.0, "repeat_last_n": 16, "presence_penalty": 0.0,
                            "frequency_penalty": 0.0, "n_predict": 3, "seed": 5, "stop": []}},
              open(old, "w"))
    p = run("chat", AIDREAMS, "--mirostat", "2", stdin=f"/load {old}\n/set\n")
    assert p.returncode == 0 and "cannot load" not in p.stdout, p.stdout
    assert "temperature 0.5, top_k 7, top_p 0.9, min_p 0, repeat_penalty 1" in p.stdout, p.stdout
    assert "seed 5, n_predict 3" in p.stdout and "mirostat 2," in p.stdout  # not in the file: kept


def test_server_records_every_row(server, work):
    body = {"prompt": "Once upon a time", "receipt": True}
    for name, (_, want) in GOOD.items():
        body[ROWS[name]["key"]] = want
    st, _, js = server.post("/v1/completions", body)
    assert st == 200, js
    check_recorded(js["receipt"]["sampling"], "server")
    path = os.path.join(work, "srv.json")
    json.dump(js["receipt"], open(path, "w"))
    rc, out = verify(path)
    assert rc == 0 and "identical" in out, out


def test_chat_flags_get_the_defaults(work):
    # chat's flags used to skip sample_params_default: dry_base, mirostat_tau... were 0
    path = os.path.join(work, "dflt.json")
    p = run("chat", AIDREAMS, "--seed", "2", "--dry-multiplier", "0.8", "--mirostat", "2",
            "--xtc-probability", "0.3", stdin=f"Once upon a time\n/receipt {path}\n")
    assert p.returncode == 0, p.stderr
    s = json.load(open(path))["sampling"]
    assert s["dry_base"] == 1.75 and s["dry_allowed_length"] == 2 and s["dry_penalty_last_n"] == -1
    assert s["dry_sequence_breakers"] == ["\n", ":", "\"", "*"]
    assert s["mirostat_tau"] == 5 and s["mirostat_eta"] == 0.1 and s["xtc_threshold"] == 0.1


# ---------------------------------------------------------------- seeds and issue 16's checks

def test_one_seed_rule(work):
    for seed in ("-1", "9223372036854775808", "18446744073709551616"):
        p = run("run", AIDREAMS, "x", "--seed", seed)
        assert p.returncode == EXIT_USAGE and "seed must be between 0 and 9223372036854775807" in p.stderr
    p = run("chat", AIDREAMS, stdin="/seed 9223372036854775808\n/seed 18446744073709551615\n/seed -1\n/set\n")
    assert p.stdout.count("seed must be between 0 and 9223372036854775807") == 3, p.stdout
    path = os.path.join(work, "maxseed.json")
    p = run("run", AIDREAMS, "x", "-n", "3", "--seed", "9223372036854775807", "--receipt", path)
    assert p.returncode == 0, p.stderr
    assert verify(path)[0] == 0


def test_run_usage_errors():
    for args, want in ((["--temp", "inf"], "temperature must be between 0 and 100"),
                       (["--temp", "nan"], "temperature must be a number, not 'nan'"),
                       (["--logit-bias", "99999+5"], "outside the vocabulary"),
                       (["--stop", ""], "--stop: a stop string needs at least one byte"),
                       (["-n", "0"], "n_predict (max_tokens) must be -1 or between 1 and 1048576")):
        p = run("run", AIDREAMS, "x", *args)
        assert p.returncode == EXIT_USAGE, (args, p.returncode, p.stderr)
        assert want in p.stderr, (args, p.stderr)


def test_help_lists_every_row():
    for cmd in ("run", "chat"):
        out = run(cmd, "--help").stdout
        for row in TABLE:
            assert f"--{row['flag']} " in out, (cmd, row["flag"])
