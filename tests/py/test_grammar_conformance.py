"""Grammar conformance: outputs sampled at temperature 1 from random logits over a real
vocabulary's pieces (tests/unit/test_grammar_gen.c drives Kinetic's sampler and grammar;
no model needed) must parse, and JSON outputs must validate against their schema with
the jsonschema package. Bad grammars and schemas must give clear errors."""
import ast
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest

from srvutil import sanitizer_build

BUILD = Path(os.environ.get("KN_BUILD", "build"))
from testdata import DATA as DATA_DIR

DATA = Path(DATA_DIR)
TOOL = BUILD / "tests" / "test_grammar_gen"
SPM = DATA / "vocab" / "ggml-vocab-llama-spm.gguf"  # 32k SentencePiece, byte tokens
BPE = DATA / "vocab" / "ggml-vocab-gpt-2.gguf"      # 50k byte-level BPE

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer"},
            "score": {"type": ["number", "null"]},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                     "minItems": 1, "maxItems": 3},
            "address": {"type": "object",
                        "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                        "required": ["city"], "additionalProperties": False},
        },
        "required": ["name", "tags"],
        "additionalProperties": False,
    },
    "rows": {
        "type": "array",
        "items": {"type": "object",
                  "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"},
                                 "when": {"type": "string", "format": "date"},
                                 "key": {"type": "string", "format": "uuid"}},
                  "required": ["id", "ok"]},
        "maxItems": 4,
    },
    "choices": {
        "type": "object",
        "properties": {
            "kind": {"const": "pick"},
            "level": {"enum": [1, 2, "three", None, True]},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3},
                                 {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}]},
            "opt1": {"type": "null"},
            "opt2": {"type": "boolean"},
        },
        "required": ["kind", "level", "either"],
    },
    "tree": {
        "$defs": {"node": {"type": "object",
                           "properties": {"v": {"type": "integer"},
                                          "kids": {"type": "array", "maxItems": 2,
                                                   "items": {"$ref": "#/$defs/node"}}},
                           "required": ["v"]}},
        "$ref": "#/$defs/node",
    },
    "free": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 4}},
    # prefixItems (2020-12 tuples): positional schemas, items for the rest, items: false
    # closes the tuple; minItems/maxItems count every item
    "tuple": {"type": "array",
              "prefixItems": [{"type": "integer"}, {"type": "string", "maxLength": 3},
                              {"enum": ["x", None]}], "minItems": 2},
    "tuple_rest": {"type": "array", "prefixItems": [{"const": "head"}, {"type": "boolean"}],
                   "items": {"type": "integer"}, "minItems": 3, "maxItems": 5},
    "tuple_closed": {"type": "object", "properties": {
        "point": {"prefixItems": [{"type": "number"}, {"type": "number"}], "items": False,
                  "minItems": 2},
        "pair": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 2}],
                 "items": False}},
        "required": ["point", "pair"], "additionalProperties": False},
    "optional_only": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 2},
                       "c": {"type": "boolean"}},
        "additionalProperties": False,
    },
}

ARITH = r"""
# integer arithmetic with + - * and parentheses
root   ::= expr
expr   ::= term ( ws [-+*] ws term ){0,6}
term   ::= [1-9] [0-9]{0,3} | "(" ws expr ws ")"
ws     ::= " "?
"""


# Under ASan + UBSan the sampler and grammar run about 10x slower: a quarter of the outputs
# (at least one per job) still walk every grammar and schema path the full counts do.
SCALE = 4 if sanitizer_build() else 1


def scaled(n):
    return max(1, n // SCALE)


def run_tool(vocab, mode, n, seed, top_k, tmp_path=None, text=None):
    n = scaled(n)
    args = [str(TOOL), str(vocab)]
    if mode == "--json":
        args.append("--json")
    else:
        f = tmp_path / f"g{seed}_{top_k}.txt"
        f.write_text(text)
        args += [mode, str(f)]
    args += [str(n), str(seed), str(top_k)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return r


def outputs(r):
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def check_all(results, validate):
    total = complete = 0
    for r in results:
        for o in outputs(r):
            total += 1
            if not o["complete"]:
                continue
            complete += 1
            validate(o["text"])
    return total, complete


@pytest.fixture(scope="module", autouse=True)
def need_tool():
    if not TOOL.exists():
        pytest.fail(f"{TOOL} is missing: build the project first")
    for v in (SPM, BPE):
        if not v.exists():
            pytest.fail(f"{v} is missing")


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_outputs_validate(name, tmp_path):
    schema = SCHEMAS[name]
    text = json.dumps(schema)
    checker = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    # top_k 0 samples from the whole (masked) vocabulary; 200 goes through the fast path.
    jobs = [(SPM, 0, 15, 1), (SPM, 200, 100, 100), (BPE, 200, 100, 200)]
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda j: run_tool(j[0], "--schema", j[2], j[3], j[1], tmp_path, text),
                              jobs))

    def validate(t):
        v = json.loads(t)
        errors = list(checker.iter_errors(v))
        assert not errors, f"{t!r}: {errors[0].message}"

    total, complete = check_all(results, validate)
    assert total == sum(scaled(j[2]) for j in jobs)
    assert complete >= 0.9 * total, f"only {complete} of {total} outputs finished"


def test_json_object_outputs_parse():
    jobs = [(SPM, 0, 20, 7), (SPM, 150, 120, 300), (BPE, 150, 120, 500)]
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda j: run_tool(j[0], "--json", j[2], j[3], j[1]), jobs))

    def validate(t):
        assert isinstance(json.loads(t), dict), t

    total, complete = check_all(results, validate)
    assert complete >= 0.9 * total, f"only {complete} of {total} outputs finished"


ALLOWED = (ast.Expression, ast.BinOp, ast.Constant, ast.Add, ast.Sub, ast.Mult)


def test_gbnf_outputs_parse(tmp_path):
    jobs = [(SPM, 0, 20, 11), (SPM, 100, 120, 900), (BPE, 100, 120, 1300)]
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda j: run_tool(j[0], "--gbnf", j[2], j[3], j[1], tmp_path, ARITH),
                              jobs))

    def validate(t):
        tree = ast.parse(t, mode="eval")
        for node in ast.walk(tree):
            assert isinstance(node, ALLOWED), f"{t!r}: {type(node).__name__}"
            if isinstance(node, ast.Constant):
                assert isinstance(node.value, int) and 1 <= node.value <= 9999, t
        assert "  " not in t and not t.startswith(" ") and not t.endswith(" "), repr(t)

    total, complete = check_all(results, validate)
    assert complete >= 0.9 * total, f"only {complete} of {total} outputs finished"


def test_same_seed_same_outputs(tmp_path):
    a = run_tool(SPM, "--json", 10, 42, 100)
    b = run_tool(SPM, "--json", 10, 42, 100)
    assert outputs(a) == outputs(b)
    c = run_tool(SPM, "--json", 10, 43, 100)
    assert outputs(a) != outputs(c)


@pytest.mark.parametrize("schema,message", [
    ({"type": "string", "pattern": "^a+$"}, "JSON schema: at /: 'pattern' is not supported"),
    ({"properties": {"x": {"type": "integer", "minimum": 0}}},
     "at /properties/x: 'minimum' is not supported"),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"]},
     "required property 'b' is not in 'properties'"),
    ({"$ref": "#/$defs/nope"}, "$ref '#/$defs/nope' points into #/$defs, which the schema"),
    ({"$ref": "#/$defs/nope", "$defs": {}}, "$ref '#/$defs/nope': #/$defs has no entry 'nope'"),
    ({"$ref": "#"}, "$ref '#' is not supported"),
    ({"$ref": ""}, "$ref '' is not supported"),
    ({"$ref": "#/$defs/", "$defs": {}}, "$ref '#/$defs/' names no entry"),
    ({"items": {"$ref": True}}, "at /items: '$ref' must be a string"),
    ({"prefixItems": [{}], "items": False, "minItems": 2}, "items: false allows only the 1"),
    ({"type": "integr"}, "unknown type 'integr'"),
])
def test_bad_schema_errors(schema, message, tmp_path):
    r = run_tool(SPM, "--schema", 1, 1, 0, tmp_path, json.dumps(schema))
    assert r.returncode == 1
    assert message in r.stderr, r.stderr


def test_schema_not_json(tmp_path):
    r = run_tool(SPM, "--schema", 1, 1, 0, tmp_path, '{"type": "object",}')
    assert r.returncode == 1 and "not valid JSON" in r.stderr and "line 1" in r.stderr, r.stderr


@pytest.mark.parametrize("gbnf,message", [
    ('root ::= "a" | \n', None),  # an empty alternative is fine
    ('root ::= "a\n', "line 1, column 10: unterminated literal"),
    ('root ::= item\n', "line 1, column 10: rule 'item' is used but never defined"),
    ('root ::= [b-a]\n', "line 1, column 13: character range ends below its start"),
    ('x ::= "a"\n', "no rule named 'root'"),
    ('root ::= "a"\nroot ::= "b"\n', "line 2, column 1: rule 'root' is defined twice"),
    ('root ::= list\nlist ::= list "," "a" | "a"\n', "rule 'list' is left-recursive"),
])
def test_bad_gbnf_errors(gbnf, message, tmp_path):
    r = run_tool(SPM, "--gbnf", 1, 1, 0, tmp_path, gbnf)
    if message is None:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode == 1
        assert message in r.stderr, r.stderr
