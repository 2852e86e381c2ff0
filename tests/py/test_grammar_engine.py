"""Grammar conformance through the whole engine: thousands of outputs sampled at
temperature 1 from a tiny synth model (kinetic synth, random weights, 512-token vocabulary
with byte tokens) through engine_generate with RAD-1 drafting on, under the JSON grammar
and JSON Schema grammars. Every complete output must parse as JSON (Python's json) and
validate against its schema (the jsonschema package, an independent validator); no output
may reach a dead end; tokens are the same with drafting off. The tool is
tests/tools/grammar_engine_gen.c (many generations in one process)."""
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest

from srvutil import sanitizer_build

KINETIC = os.environ.get("KINETIC", "build/kinetic")
BUILD = Path(os.environ.get("KN_BUILD", "build"))
TOOL = BUILD / "tests" / "grammar_engine_gen"

SCHEMAS = {
    "required": {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 8},
                       "ok": {"type": "boolean"}, "note": {"type": ["string", "null"]}},
        "required": ["id", "name"],
        "additionalProperties": False,
    },
    "enums": {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green", "blue"]},
                       "size": {"enum": [1, 2, 3, None, "xl"]},
                       "kind": {"const": "shirt"}},
        "required": ["colour", "size", "kind"],
    },
    "arrays": {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
                                "minItems": 2, "maxItems": 4},
                       "nums": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}},
        "required": ["tags", "nums"],
    },
    "nested": {
        "type": "object",
        "properties": {"user": {"type": "object",
                                "properties": {"name": {"type": "string", "maxLength": 6},
                                               "address": {"type": "object",
                                                           "properties": {"city": {"type": "string", "maxLength": 6},
                                                                          "zip": {"type": "integer"}},
                                                           "required": ["city"]}},
                                "required": ["name", "address"]}},
        "required": ["user"],
    },
    "anyof": {
        "type": "object",
        "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "boolean"},
                                           {"type": "string", "maxLength": 3},
                                           {"type": "array", "items": {"type": "null"}, "maxItems": 2}]},
                       "either": {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                                             "required": ["a"], "additionalProperties": False},
                                            {"type": "null"}]}},
        "required": ["value", "either"],
    },
}




# The plain build samples 2,700 outputs; the -O0 sanitizer build a fifth of them (the same
# code paths, several times slower).
SCALE = 5 if sanitizer_build() else 1
N_JSON = 1000 // SCALE    # outputs of the JSON object grammar
N_SCHEMA = 300 // SCALE   # outputs per schema


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("gram_engine")
    path = d / "tiny.gguf"
    subprocess.run([KINETIC, "synth", "--preset", "tiny", "--seed", "7", "-o", str(path)],
                   check=True, capture_output=True, timeout=120)
    return path


def gen(model, mode, arg, n, seed, *extra):
    cmd = [str(TOOL), str(model), mode] + ([str(arg)] if arg else []) + [str(n), str(seed), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.split("\n") if line]


def check_outputs(outs, schema=None):
    done = 0
    for o in outs:
        assert o["finish"] != "dead", o
        if o["finish"] != "done":
            continue
        done += 1
        value = json.loads(o["text"])
        if schema is None:
            assert isinstance(value, dict)
        else:
            jsonschema.validate(value, schema)
    # Outputs cut by the token limit are not grammar failures, but they must be rare.
    assert done >= 0.95 * len(outs), f"only {done} of {len(outs)} outputs completed"
    return done


def test_json_grammar_outputs_always_parse(model):
    with ThreadPoolExecutor(2) as ex:
        parts = list(ex.map(lambda s: gen(model, "--json", None, N_JSON // 2, s, "--boost", "2"),
                            (1000, 2000)))
    check_outputs(parts[0] + parts[1])
    # top_k takes the grammar's fast path (candidates checked one by one in logit order).
    check_outputs(gen(model, "--json", None, 200 // SCALE, 3000, "--boost", "2", "--top-k", "40"))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_outputs_validate(model, tmp_path, name):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(SCHEMAS[name]))
    outs = gen(model, "--schema", path, N_SCHEMA, 17, "--boost", "3")
    check_outputs(outs, SCHEMAS[name])
    # Every enum value, every anyOf branch... shows up: the grammar is not too narrow.
    if name == "enums":
        seen = {json.loads(o["text"])["colour"] for o in outs if o["finish"] == "done"}
        assert seen == {"red", "green", "blue"}
    if name == "anyof":
        kinds = {type(json.loads(o["text"])["value"]).__name__ for o in outs if o["finish"] == "done"}
        assert kinds == {"int", "bool", "str", "list"}


def test_drafting_does_not_change_constrained_tokens(model, tmp_path):
    path = tmp_path / "arrays.json"
    path.write_text(json.dumps(SCHEMAS["arrays"]))
    # top_k 3 without a boost makes the text repeat itself, so RAD-1 drafts get accepted.
    for mode, arg in (("--json", None), ("--schema", path)):
        args = [str(TOOL), str(model), mode] + ([str(arg)] if arg else []) + \
            [str(60 // SCALE), "99", "--boost", "0", "--top-k", "3", "--max-tokens", "120"]
        a = subprocess.run(args, capture_output=True, text=True, timeout=300)
        b = subprocess.run(args + ["--no-draft"], capture_output=True, text=True, timeout=300)
        assert a.returncode == 0 and b.returncode == 0
        assert a.stdout == b.stdout
        accepted = int(a.stderr.split(" tokens in ")[1].split(", ")[1].split(" drafts")[0])
        assert accepted > 0, a.stderr
        assert "0 drafts accepted" in b.stderr


def test_bad_grammar_and_schema_are_named(model, tmp_path):
    g = tmp_path / "bad.gbnf"
    g.write_text('root ::= "a" |\n  ( "b" \n')
    p = subprocess.run([str(TOOL), str(model), "--gbnf", str(g), "1", "1"], capture_output=True, text=True)
    assert p.returncode == 1 and "line" in p.stderr and "column" in p.stderr
    s = tmp_path / "bad.json"
    s.write_text(json.dumps({"type": "object", "properties": {"x": {"type": "integer", "minimum": 3}}}))
    p = subprocess.run([str(TOOL), str(model), "--schema", str(s), "1", "1"], capture_output=True, text=True)
    assert p.returncode == 1 and "minimum" in p.stderr


def test_run_says_when_a_grammar_bound_stops_it(model, tmp_path):
    """kinetic run with a grammar past the matcher's bounds (src/grammar/grammar.h, issue
    44): the enum is refused before generating, the ambiguous grammar stops after a few
    tokens; both quickly, both saying which bound."""
    amb = tmp_path / "amb.gbnf"
    amb.write_text("root ::=" + " x" * 30 + "\nx ::= [a-z ,.]{0,100}\n")
    enum = tmp_path / "enum.gbnf"
    enum.write_text("root ::= " + " | ".join('"w%05d"' % i for i in range(50000)) + "\n")
    for g, bound in ((amb, "GRAMMAR_WORK_PER_PIECE"), (enum, "GRAMMAR_MAX_STACKS")):
        p = subprocess.run([KINETIC, "run", str(model), "hi", "--grammar-file", str(g), "-n", "100",
                            "--seed", "1"], capture_output=True, text=True, timeout=60)
        assert bound in p.stderr, p.stderr
