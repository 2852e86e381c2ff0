"""kinetic run with stop strings, grammars, JSON Schema and reasoning markers, and their
receipts: the tokens are the same with drafting on and off, stop strings cut the text
across token boundaries, receipts record stop strings and grammars, verify-receipt reruns
with them (identical), and tampering with them is caught (signature, MISMATCH, DIFFERS)."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
MODEL = os.path.join(DATA, "models", "aidreams260K.gguf")  # 512-token SPM vocab with byte tokens

EXIT_MALFORMED, EXIT_SIGNATURE, EXIT_DIFFERS, EXIT_TEXT = 3, 5, 7, 8

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 10}, "n": {"type": "integer"},
                         "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "n"]}


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="kn_stopgram_")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, "cache")
    key = os.path.join(d, "receipt.key")
    with open(key, "w") as f:
        f.write("11" * 32)
    yield {"dir": d, "key": key}
    shutil.rmtree(d)


def kn(*args, check=True):
    p = subprocess.run([KINETIC, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"kinetic {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def run_json(*args):
    return json.loads(kn("run", MODEL, *args, "--json").stdout)


def test_stop_string_cuts_text_across_tokens():
    base = run_json("Once upon a time", "--seed", 1, "-n", 60)
    text, toks = base["text"], base["tokens"]
    assert len(toks) > 10
    # A stop string that starts inside one token's piece and ends inside a later one.
    mid = len(text) // 2
    stop = text[mid:mid + 5]
    assert len(stop) == 5 and "\\" not in stop
    for draft in ([], ["--no-draft"]):
        r = run_json("Once upon a time", "--seed", 1, "-n", 60, "--stop", stop, *draft)
        assert r["stop"] == "stop_string"
        assert r["text"] == text[:text.index(stop)]
        # The tokens are the plain run's up to the one that completed the stop string.
        n = len(r["tokens"])
        assert r["tokens"] == toks[:n] and n < len(toks)
    # Two stop strings: the earliest match wins; -r is llama.cpp's alias; escapes work.
    r = run_json("Once upon a time", "--seed", 1, "-n", 60, "-r", "zzzq", "--stop", stop)
    assert r["text"] == text[:text.index(stop)]
    assert "," in text
    comma = run_json("Once upon a time", "--seed", 1, "-n", 60, "--stop", "\\x2C")
    assert comma["text"] == text[:text.index(",")]


def test_stop_string_streamed_stdout_holds_back():
    base = run_json("Once upon a time", "--seed", 1, "-n", 60)
    stop = base["text"][10:14]
    p = kn("run", MODEL, "Once upon a time", "--seed", 1, "-n", 60, "--stop", stop)
    assert p.stdout == base["text"][:base["text"].index(stop)] + "\n"
    bad = kn("run", MODEL, "x", "--stop", "", check=False)
    assert bad.returncode != 0 and "at least one byte" in bad.stderr


def test_grammar_tokens_identical_with_and_without_drafting():
    accepted = 0
    for seed in range(6):
        a = run_json("Once upon a time", "--seed", seed, "-n", 80, "--temp", 1,
                     "--json-schema", json.dumps(SCHEMA))
        b = run_json("Once upon a time", "--seed", seed, "-n", 80, "--temp", 1,
                     "--json-schema", json.dumps(SCHEMA), "--no-draft")
        assert a["tokens"] == b["tokens"] and a["text"] == b["text"]
        accepted += a["draft_accepted"]
        if a["stop"] == "eog":
            json.loads(a["text"])
        g = run_json("The cat sat on the mat. The cat sat on the mat.", "--seed", seed, "-n", 40,
                     "--grammar", 'root ::= ("the cat " | [a-z]{1,4} " ")+')
        h = run_json("The cat sat on the mat. The cat sat on the mat.", "--seed", seed, "-n", 40,
                     "--grammar", 'root ::= ("the cat " | [a-z]{1,4} " ")+', "--no-draft")
        assert g["tokens"] == h["tokens"]
        accepted += g["draft_accepted"]
    assert accepted > 0  # drafting really ran under the grammar


def test_grammar_files_and_errors(work):
    gf = os.path.join(work["dir"], "g.gbnf")
    with open(gf, "w") as f:
        f.write('root ::= "yes" | "no"\n')
    r = run_json("Is it?", "--seed", 2, "--grammar-file", gf)
    assert r["text"] in ("yes", "no") and r["stop"] == "eog"
    sf = os.path.join(work["dir"], "s.json")
    with open(sf, "w") as f:
        json.dump({"enum": ["red", "green"]}, f)
    r = run_json("Colour?", "--seed", 2, "--json-schema-file", sf)
    assert json.loads(r["text"]) in ("red", "green")
    bad = kn("run", MODEL, "x", "--grammar", 'root ::= "a"\nb ::= ( "c"', check=False)
    assert bad.returncode == 2 and "line 2, column" in bad.stderr and "--grammar" in bad.stderr
    bad = kn("run", MODEL, "x", "--grammar", "root ::= undefined", check=False)
    assert bad.returncode == 2 and "undefined" in bad.stderr
    bad = kn("run", MODEL, "x", "--json-schema", '{"type": "string", "pattern": "a"}', check=False)
    assert bad.returncode == 2 and "pattern" in bad.stderr
    bad = kn("run", MODEL, "x", "--json-schema", '{"type": ', check=False)
    assert bad.returncode == 2 and "line 1, column" in bad.stderr
    bad = kn("run", MODEL, "x", "--grammar", 'root ::= "a"', "--json-schema", "{}", check=False)
    assert bad.returncode == 2 and "one of" in bad.stderr


def test_reasoning_split_from_text_and_receipt(work):
    g = 'root ::= "<think>" [a-z ]{3,20} "</think>" [a-z]{1,10}'
    rp = os.path.join(work["dir"], "think.json")
    r = run_json("Think.", "--seed", 4, "--grammar", g, "--receipt", rp)
    assert r["reasoning"] and r["text"] and "<think>" not in r["text"] and "think" not in r["text"]
    with open(rp) as f:
        rec = json.load(f)
    assert rec["output"]["text"] == r["text"]
    shown = kn("run", MODEL, "Think.", "--seed", 4, "--grammar", g).stdout
    hidden = kn("run", MODEL, "Think.", "--seed", 4, "--grammar", g, "--reasoning", "hide").stdout
    assert shown == r["reasoning"] + r["text"] + "\n"
    assert hidden == r["text"] + "\n"
    assert kn("verify-receipt", rp).returncode == 0


def make_receipt(work, name, *extra, sign=True):
    path = os.path.join(work["dir"], name)
    args = ["run", MODEL, "Once upon a time", "--seed", 42, "-n", 60, "--receipt", path, *extra]
    if sign:
        args += ["--sign-key", work["key"]]
    kn(*args)
    with open(path) as f:
        return path, json.load(f)


def rewrite(path, rec):
    with open(path, "w") as f:
        json.dump(rec, f, indent=2, ensure_ascii=False)


def test_receipts_with_stop_and_grammar_verify_and_tampering_is_caught(work):
    path, rec = make_receipt(work, "sg.json", "--json-schema", json.dumps(SCHEMA), "--stop", '"n"')
    smp = rec["sampling"]
    assert smp["stop"] == ['"n"']
    assert smp["response_format"] == {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    assert smp["grammar"].startswith("root ::=")
    assert '"n"' not in rec["output"]["text"]
    v = kn("verify-receipt", path)
    assert "rerun: identical" in v.stdout and "signature: valid" in v.stdout

    # Signed: changing the grammar, the response_format or a stop string breaks the signature.
    for field, value in (("grammar", smp["grammar"] + "\n"), ("stop", ['"name"']),
                         ("response_format", {"type": "json_object"})):
        t = json.loads(json.dumps(rec))
        t["sampling"][field] = value
        rewrite(path, t)
        v = kn("verify-receipt", path, check=False)
        assert v.returncode == EXIT_SIGNATURE and "INVALID" in v.stdout, (field, v.stdout)

    # Unsigned: a grammar that no longer matches its response_format is a clear MISMATCH.
    t = json.loads(json.dumps(rec))
    del t["signature"]
    t["sampling"]["grammar"] = 'root ::= "{}"'
    rewrite(path, t)
    v = kn("verify-receipt", path, check=False)
    assert v.returncode == EXIT_MALFORMED and "MISMATCH" in v.stdout and "response_format" in v.stdout
    # A grammar that does not compile is named with its line and column.
    del t["sampling"]["response_format"]
    t["sampling"]["grammar"] = 'root ::= ("a"'
    rewrite(path, t)
    v = kn("verify-receipt", path, check=False)
    assert v.returncode == EXIT_MALFORMED and "sampling.grammar" in v.stdout and "column" in v.stdout


def test_unsigned_tampered_grammar_or_stop_differs(work):
    path, rec = make_receipt(work, "g.json", "--grammar", "root ::= [a-z ]+", "--temp", 0, sign=False)
    assert kn("verify-receipt", path).returncode == 0
    t = json.loads(json.dumps(rec))
    t["sampling"]["grammar"] = "root ::= [0-9]+"
    rewrite(path, t)
    v = kn("verify-receipt", path, check=False)
    assert v.returncode == EXIT_DIFFERS and "DIFFERS at output token 0" in v.stdout

    base = run_json("Once upon a time", "--seed", 42, "-n", 60)
    stop = base["text"][20:24]
    path, rec = make_receipt(work, "s.json", "--stop", stop, sign=False)
    assert rec["sampling"]["stop"] == [stop] and rec["output"]["finish"] == "stop"
    assert rec["output"]["text"] == base["text"][:base["text"].index(stop)]
    assert kn("verify-receipt", path).returncode == 0
    t = json.loads(json.dumps(rec))
    t["sampling"]["stop"] = []
    rewrite(path, t)
    v = kn("verify-receipt", path, check=False)
    # without its stop string the tokens' text goes on past output.text: caught before the
    # rerun (which would also differ: it would not stop there)
    assert v.returncode == EXIT_TEXT and "output.text: MISMATCH" in v.stdout, v.stdout


def test_chat_reasoning_shown_or_hidden_and_grammar_receipt(work):
    g = 'root ::= "<think>" [a-z ]{3,20} "</think>" [a-z]{1,10}'
    rp = os.path.join(work["dir"], "chat.json")
    p = subprocess.run([KINETIC, "chat", MODEL, "--seed", "3", "--grammar", g],
                       input=f"Think please\n/set reasoning hide\nAgain\n/receipt {rp}\n",
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")
    first, second = lines[0], lines[2]
    assert lines[1] == "reasoning hide" and "think" not in p.stdout
    with open(rp) as f:
        rec = json.load(f)
    # The answer that joined the conversation and the receipt's text exclude the reasoning.
    content1 = rec["input"][1]["content"]
    assert rec["input"][1]["role"] == "assistant" and first.endswith(content1)
    assert len(content1) < len(first)  # the reasoning was shown before it
    assert rec["output"]["text"] == second and second.isalpha()
    assert rec["sampling"]["grammar"] == g
    assert "rerun: identical" in kn("verify-receipt", rp).stdout
    bad = subprocess.run([KINETIC, "chat", MODEL, "--grammar", "root ::= (", "--seed", "1"],
                         input="", capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "column" in bad.stderr
