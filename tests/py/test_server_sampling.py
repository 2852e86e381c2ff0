"""`kinetic serve` with every sampler of issue 10, grammars, JSON output and reasoning:
- each sampler setting gives the same tokens alone, while three other clients keep the
  slots busy, and in `kinetic run` with the same settings (aidreams260K);
- GBNF outputs parse, json_object outputs are JSON objects, response_format json_schema
  outputs validate with the `jsonschema` package (toy model: fast, long context), also
  through the official openai client;
- <think>...</think> goes to reasoning_content, streamed and not (toy model with forced
  markers; a random-weight qwen3 model with Qwen3's vocabulary, whose marker tokens
  "auto" finds);
- stop strings, grammars and schemas give kinetic run's tokens, receipts record them and
  verify identical, drafting and Warm Start change nothing;
- bad grammars, schemas and response_formats get 400s that say what is wrong, and the
  server keeps serving."""
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from srvutil import KINETIC, DATA, Server, sanitizer_build

AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")


# Sanitizer builds: the ASan build is many times slower: its run keeps the checks but
# fewer rounds.

SANITIZE = sanitizer_build()
PROMPT = "Once upon a time there was a little girl. The little girl"


def run_cli(prompt, *args):
    r = subprocess.run([KINETIC, "run", AIDREAMS, prompt, "--json", "--threads", "1",
                        *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# (name, request fields, kinetic run flags)
SAMPLERS = [
    ("typical_p", {"typical_p": 0.6}, ["--typical", 0.6]),
    ("top_n_sigma", {"top_n_sigma": 1.0}, ["--top-nsigma", 1.0]),
    ("xtc", {"xtc_probability": 0.6, "xtc_threshold": 0.05},
     ["--xtc-probability", 0.6, "--xtc-threshold", 0.05]),
    ("dry", {"dry_multiplier": 1.5, "dry_base": 1.5, "dry_allowed_length": 1,
             "dry_penalty_last_n": -1},
     ["--dry-multiplier", 1.5, "--dry-base", 1.5, "--dry-allowed-length", 1,
      "--dry-penalty-last-n", -1]),
    ("mirostat1", {"mirostat": 1, "mirostat_tau": 4.0, "mirostat_eta": 0.2},
     ["--mirostat", 1, "--mirostat-ent", 4.0, "--mirostat-lr", 0.2]),
    ("mirostat2", {"mirostat": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.1},
     ["--mirostat", 2, "--mirostat-ent", 3.0, "--mirostat-lr", 0.1]),
    ("logit_bias", {"logit_bias": {"13": 4, "300": -100, "301": -2.5}},
     ["--logit-bias", "13+4,300-100,301-2.5"]),
    ("min_keep", {"top_p": 0.05, "min_keep": 4}, ["--top-p", 0.05, "--min-keep", 4]),
    ("samplers", {"samplers": ["top_k", "temperature", "top_p"], "top_k": 20},
     ["--samplers", "top_k;temperature;top_p", "--top-k", 20]),
]


@pytest.fixture(scope="module")
def aid():
    if not os.path.exists(AIDREAMS):
        pytest.skip("aidreams260K.gguf not found")
    # the model has no template: --chat-format raw renders a chat as run renders its
    # prompt, so the server's answers compare with run's (serve's default is plain turns)
    with Server(AIDREAMS, "--parallel", "4", "--threads", "1", "--chat-format", "raw") as s:
        yield s


def probe_body(fields, seed=11):
    return {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 48,
            "temperature": 1.0, "seed": seed, "logprobs": True, **fields}


def answer(js):
    """The answer's tokens (as logprob entries' token texts) and text."""
    ch = js["choices"][0]
    return ([t["token"] for t in ch["logprobs"]["content"]], ch["message"]["content"],
            ch["finish_reason"])


def busy_clients(s, stop, errors):
    def busy(k):
        n = 0
        try:
            while not stop.is_set():
                body = {"prompt": f"Tale {k}.{n}: " + "the moon " * (1 + 2 * k),
                        "max_tokens": 40 + 10 * k, "temperature": 1.0, "seed": 100 * k + n,
                        "dry_multiplier": 0.5 * (k % 2), "mirostat": k % 3}
                if n % 2:
                    s.stream("/v1/completions", {**body, "stream": True})
                else:
                    assert s.post("/v1/completions", body)[0] == 200
                n += 1
        except Exception as e:  # reported by the caller
            errors.append(e)
    ts = [threading.Thread(target=busy, args=(k,)) for k in (1, 2, 3)]
    for t in ts:
        t.start()
    return ts


def test_samplers_same_alone_under_load_and_in_run(aid):
    """Every sampler: the server's answer alone equals kinetic run's, and equals the
    server's answers while three clients keep the other slots busy."""
    aid.wait_idle()
    alone = {}
    for name, fields, flags in SAMPLERS:
        st, _, js = aid.post("/v1/chat/completions", probe_body(fields))
        assert st == 200, (name, js)
        alone[name] = answer(js)
        cli = run_cli(PROMPT, "-n", 48, "--temp", 1.0, "--seed", 11, *flags)
        assert alone[name][1] == cli["text"], name
        if alone[name][2] == "length":
            assert js["usage"]["completion_tokens"] == len(cli["tokens"]), name
    stop, errors = threading.Event(), []
    ts = busy_clients(aid, stop, errors)
    try:
        time.sleep(0.2)
        busy_seen = 0
        for rnd in range(1 if SANITIZE else 2):
            for name, fields, _ in SAMPLERS:
                st, _, js = aid.post("/v1/chat/completions", probe_body(fields))
                assert st == 200, (name, js)
                assert answer(js) == alone[name], (name, rnd)
                busy_seen = max(busy_seen, aid.get("/health")[2]["slots_processing"])
    finally:
        stop.set()
        for t in ts:
            t.join(60)
    assert not errors, errors
    assert busy_seen >= 2


def test_dry_changes_a_repetitive_answer(aid):
    """DRY is really applied: where greedy decoding repeats itself, DRY changes the
    answer, exactly as in kinetic run with the same DRY settings."""
    prompt = "the cat"
    base = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 60,
            "temperature": 0, "seed": 1, "repeat_penalty": 1.0}
    dry = {"dry_multiplier": 2.0, "dry_base": 2.0, "dry_allowed_length": 1}
    flags = ["-n", 60, "--temp", 0, "--seed", 1, "--repeat-penalty", 1.0]
    plain = aid.post("/v1/chat/completions", base)[2]["choices"][0]["message"]["content"]
    assert plain == run_cli(prompt, *flags)["text"]
    st, _, js = aid.post("/v1/chat/completions", {**base, **dry})
    assert st == 200, js
    with_dry = js["choices"][0]["message"]["content"]
    assert with_dry != plain
    assert with_dry == run_cli(prompt, *flags, "--dry-multiplier", 2.0, "--dry-base", 2.0,
                               "--dry-allowed-length", 1)["text"]
    # the sequence breakers are settings too: breaking at every space changes the answer
    st, _, js = aid.post("/v1/chat/completions", {**base, **dry, "dry_sequence_breakers": [" "]})
    assert st == 200 and js["choices"][0]["message"]["content"] != with_dry, js


# ---------------------------------------------------------------- grammars (toy model)

@pytest.fixture(scope="module")
def toy():
    with Server("--toy", "--parallel", "4", "--ctx-size", "1024") as s:
        yield s


GBNF = r'''
root  ::= greet " " name ("," " " name){0,3} "!"
greet ::= "hello" | "hi" | "hey"
name  ::= [A-Z] [a-z]{1,8}
'''
GBNF_RE = re.compile(r"(hello|hi|hey) [A-Z][a-z]{1,8}(, [A-Z][a-z]{1,8}){0,3}!")

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "ok": {"type": "boolean"},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                 "minItems": 1, "maxItems": 3},
        "pos": {"type": "object", "properties": {"x": {"type": "number"}},
                "required": ["x"]},
        "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 4}]},
    },
    "required": ["name", "age", "ok", "color", "tags", "pos"],
}


def test_gbnf_outputs_parse(toy):
    for seed in range(40):
        st, _, js = toy.post("/v1/completions", {"prompt": "say hi", "grammar": GBNF,
                                                 "max_tokens": 200, "temperature": 1.0,
                                                 "seed": seed})
        assert st == 200, js
        ch = js["choices"][0]
        assert ch["finish_reason"] == "stop", ch
        assert GBNF_RE.fullmatch(ch["text"]), ch["text"]


def test_json_schema_outputs_validate(toy):
    jsonschema = pytest.importorskip("jsonschema")
    n_stop = 0
    for seed in range(30):
        rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
        st, _, js = toy.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "a person"}], "response_format": rf,
            "max_tokens": 600, "temperature": 1.0, "seed": seed})
        assert st == 200, js
        ch = js["choices"][0]
        if ch["finish_reason"] != "stop":
            continue
        n_stop += 1
        jsonschema.validate(json.loads(ch["message"]["content"]), SCHEMA)
    assert n_stop >= 25
    # llama-server's own field, and json_object
    for seed in range(10):
        st, _, js = toy.post("/v1/completions", {"prompt": "x", "json_schema": SCHEMA,
                                                 "max_tokens": 600, "seed": seed})
        assert st == 200 and js["choices"][0]["finish_reason"] == "stop", js
        jsonschema.validate(json.loads(js["choices"][0]["text"]), SCHEMA)
        st, _, js = toy.post("/v1/completions", {"prompt": "x", "max_tokens": 600, "seed": seed,
                                                 "response_format": {"type": "json_object"}})
        assert st == 200, js
        if js["choices"][0]["finish_reason"] == "stop":
            assert isinstance(json.loads(js["choices"][0]["text"]), dict)


def test_grammar_same_alone_and_under_load(toy):
    body = {"messages": [{"role": "user", "content": "json"}], "json_schema": SCHEMA,
            "max_tokens": 400, "temperature": 1.0, "seed": 77, "logprobs": True,
            "dry_multiplier": 0.8, "typical_p": 0.9}
    toy.wait_idle()
    alone = toy.post("/v1/chat/completions", body)[2]
    stop, errors = threading.Event(), []
    ts = busy_clients(toy, stop, errors)
    try:
        for _ in range(5):
            assert toy.post("/v1/chat/completions", body)[2]["choices"] == alone["choices"]
        streamed = toy.stream("/v1/chat/completions", {**body, "stream": True})
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in streamed[:-1])
        assert text == alone["choices"][0]["message"]["content"]
    finally:
        stop.set()
        for t in ts:
            t.join(60)
    assert not errors, errors


def test_openai_client_structured_output(toy):
    openai = pytest.importorskip("openai")
    jsonschema = pytest.importorskip("jsonschema")
    client = openai.OpenAI(base_url=toy.base + "/v1", api_key="none", max_retries=0, timeout=60)
    r = client.chat.completions.create(
        model="toy", messages=[{"role": "user", "content": "a person"}], max_tokens=600,
        seed=5, temperature=1.0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
    r = client.completions.create(model="toy", prompt="hi", max_tokens=200, seed=3,
                                  extra_body={"grammar": GBNF, "dry_multiplier": 0.5})
    assert GBNF_RE.fullmatch(r.choices[0].text), r.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="toy", messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "p", "schema": {"type": "string",
                                                                     "pattern": "^a$"}}})
    assert "pattern" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="toy", prompt="x", extra_body={"grammar": "root ::= ("})
    assert "line 1, column" in str(e.value)


def test_bad_grammars_are_400s_and_the_server_lives(toy):
    cases = [
        ({"grammar": 'root ::= "a" | '}, None),  # an empty alternative is valid GBNF
        ({"grammar": 'root ::= "a"\nroot ::= "b"'}, ["line 2", "root"]),
        ({"grammar": 'root ::= [a-'}, ["line 1, column"]),
        ({"grammar": 'root ::= "\\q"'}, ["line 1, column"]),
        ({"grammar": 'x ::= "a"'}, ["root"]),
        ({"grammar": 'root ::= root "a"'}, ["left-recursive"]),
        ({"json_schema": {"type": "object", "properties": {"a": {"minimum": 3, "type": "integer"}}}},
         ["minimum"]),
        ({"json_schema": "string"}, ["json_schema"]),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, ["schema"]),
        ({"response_format": "json"}, ["response_format"]),
        ({"response_format": {"type": "json_object", "schema": {"$ref": "#/nowhere"}}},
         ["response_format"]),
        # refs too short to name anything read past the string before (issue 44)
        ({"json_schema": {"$ref": "#"}}, ["$ref '#'"]),
        ({"json_schema": {"$ref": ""}}, ["$ref ''"]),
        ({"json_schema": {"$ref": 3}}, ["'$ref' must be a string"]),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {
            "$ref": "#/$defs/", "$defs": {"a": {}}}}}}, ["$ref '#/$defs/' names no entry"]),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {
            "type": "array", "items": {"$ref": "#/$defs/b"}, "$defs": {"a": {}}}}}},
         ["$ref '#/$defs/b'", "no entry 'b'"]),
    ]
    for fields, words in cases:
        st, _, js = toy.post("/v1/completions", {"prompt": "x", "max_tokens": 8, **fields})
        if words is None:
            assert st == 200, js
            continue
        assert st == 400, (fields, js)
        msg = js["error"]["message"].lower()
        for w in words:
            assert w.lower() in msg, (w, msg)
    assert toy.post("/v1/completions", {"prompt": "x", "max_tokens": 3})[0] == 200
    # ignore_eos (benchmarks) past a grammar's end: the answer ends there, no error
    st, _, js = toy.post("/v1/completions", {"prompt": "x", "max_tokens": 20, "ignore_eos": True,
                                             "grammar": 'root ::= "ab"'})
    assert st == 200 and js["choices"][0]["text"] == "ab", js


def test_too_ambiguous_grammars_end_with_a_reason(toy):
    """Grammars whose every token cost seconds of the batch step (issue 44) stop at the
    matcher's bounds (src/grammar/grammar.h): a 50,000-way enum is refused up front, 30
    optional runs side by side end the request when one token's filtering passes its
    bound; either way a 400 that says why, quickly, and the server carries on."""
    amb = "root ::=" + " x" * 30 + "\nx ::= [a-z ,.]{0,100}\n"
    enum = "root ::= " + " | ".join('"w%05d"' % i for i in range(50000)) + "\n"
    for g, code, words in ((amb, "grammar_dead_end", ["GRAMMAR_WORK_PER_PIECE", "ambiguous"]),
                           (enum, "grammar_too_complex", ["GRAMMAR_MAX_STACKS", "4096"])):
        t0 = time.monotonic()
        st, _, js = toy.post("/v1/completions", {"prompt": "x", "max_tokens": 200, "grammar": g})
        took = time.monotonic() - t0
        assert st == 400 and js["error"]["code"] == code, js
        for w in words:
            assert w in js["error"]["message"], js
        assert took < 20, f"{took:.1f} s"
    assert toy.post("/v1/completions", {"prompt": "x", "max_tokens": 3})[0] == 200


# ---------------------------------------------------------------- reasoning

THINK = r'root ::= "<think>" [a-z ]{4,12} "</think>" [a-z ]{3,10}'


def test_reasoning_split(toy):
    body = {"messages": [{"role": "user", "content": "think"}], "grammar": THINK,
            "max_tokens": 100, "seed": 9, "reasoning_format": "deepseek"}
    whole = toy.post("/v1/chat/completions", {**body, "reasoning_format": "none"})[2]
    text = whole["choices"][0]["message"]["content"]
    m = re.fullmatch(r"<think>([a-z ]+)</think>([a-z ]+)", text)
    assert m, text
    assert "reasoning_content" not in whole["choices"][0]["message"]
    # auto: the toy vocabulary has no <think> token, so nothing is split
    auto = toy.post("/v1/chat/completions", {**body, "reasoning_format": "auto"})[2]
    assert auto["choices"][0]["message"]["content"] == text
    split = toy.post("/v1/chat/completions", body)[2]["choices"][0]["message"]
    assert split["reasoning_content"] == m.group(1) and split["content"] == m.group(2)
    events = toy.stream("/v1/chat/completions", {**body, "stream": True})
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == m.group(1)
    assert "".join(d.get("content") or "" for d in deltas) == m.group(2)
    assert not any("<think>" in (d.get("content") or "") for d in deltas)
    # completions never split
    st, _, js = toy.post("/v1/completions", {"prompt": "x", "grammar": THINK, "seed": 9,
                                             "reasoning_format": "deepseek", "max_tokens": 100})
    assert st == 200 and js["choices"][0]["text"].startswith("<think>")


# ---------------------------------------------------------------- receipts

def verify(path):
    r = subprocess.run([KINETIC, "verify-receipt", str(path)], capture_output=True, text=True,
                       timeout=300)
    return r.returncode, r.stdout + r.stderr


SMALL_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                                  "n": {"enum": [1, 2, 3]}},
                "required": ["ok", "n"]}


def test_receipts_with_grammars_and_samplers_verify(aid, tmp_path):
    """Receipts of grammar, json_schema, response_format and issue-10 sampler requests,
    made while the server is busy, record the grammar and response_format and verify
    `identical`."""
    msgs = [{"role": "user", "content": "Once upon a time"}]
    rf = {"type": "json_schema", "json_schema": {"name": "r", "schema": SMALL_SCHEMA}}
    gbnf = 'root ::= [a-z]+ (" " [a-z]+){2,6} "."'
    cases = {
        "gbnf": {"messages": msgs, "grammar": gbnf, "max_tokens": 60, "seed": 3},
        "response_format": {"messages": msgs, "response_format": rf, "max_tokens": 60,
                            "seed": 4},
        "json_schema": {"prompt": "Once", "json_schema": SMALL_SCHEMA, "max_tokens": 60,
                        "seed": 5},
        "json_object": {"prompt": "Once", "response_format": {"type": "json_object"},
                        "max_tokens": 40, "seed": 6},
        "samplers": {"messages": msgs, "max_tokens": 40, "seed": 7, "dry_multiplier": 1.2,
                     "mirostat": 2, "logit_bias": {"13": 3}, "xtc_probability": 0.3,
                     "typical_p": 0.8},
    }
    stop, errors = threading.Event(), []
    ts = busy_clients(aid, stop, errors)
    try:
        got = {}
        for name, body in cases.items():
            path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            st, _, js = aid.post(path, {**body, "temperature": 1.0, "receipt": True})
            assert st == 200, (name, js)
            got[name] = js
    finally:
        stop.set()
        for t in ts:
            t.join(60)
    assert not errors, errors
    samp = {k: v["receipt"]["sampling"] for k, v in got.items()}
    assert samp["gbnf"]["grammar"] == gbnf and "response_format" not in samp["gbnf"]
    assert samp["response_format"]["response_format"] == rf
    assert samp["json_schema"]["response_format"] == {"type": "json_schema",
                                                      "json_schema": {"schema": SMALL_SCHEMA}}
    assert samp["json_object"]["response_format"] == {"type": "json_object"}
    assert samp["samplers"]["dry_multiplier"] == 1.2 and samp["samplers"]["mirostat"] == 2
    assert "grammar" not in samp["samplers"]
    text = got["gbnf"]["choices"][0]["message"]["content"]
    if got["gbnf"]["choices"][0]["finish_reason"] == "stop":
        assert re.fullmatch(r"[a-z]+( [a-z]+){2,6}\.", text), text
    for name, js in got.items():
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(js["receipt"], indent=2))
        code, out = verify(p)
        assert code == 0 and "rerun: identical" in out, (name, out)


def test_stop_strings_match_run_and_receipts_verify(aid, tmp_path):
    """Stop strings: the server ends on the token that completes one, cuts the text
    before it (plain and streamed), exactly as kinetic run --stop does; the receipt records
    the stop strings and verifies identical."""
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 60,
            "temperature": 1.0, "seed": 21}
    full = aid.post("/v1/chat/completions", body)[2]["choices"][0]["message"]["content"]
    assert len(full) > 40, full
    for cut in (full[25:29], full[33:34]):
        stops = [cut, "zzzq"]
        st, _, js = aid.post("/v1/chat/completions", {**body, "stop": stops, "receipt": True})
        assert st == 200, js
        ch = js["choices"][0]
        assert ch["finish_reason"] == "stop"
        assert ch["message"]["content"] == full[:full.index(cut)]
        cli = run_cli(PROMPT, "-n", 60, "--temp", 1.0, "--seed", 21, "--stop", cut,
                      "--stop", "zzzq")
        assert cli["text"] == ch["message"]["content"]
        assert js["usage"]["completion_tokens"] == len(cli["tokens"])
        rc = js["receipt"]
        assert rc["sampling"]["stop"] == stops and rc["output"]["finish"] == "stop"
        assert rc["output"]["tokens"]["ids"] == cli["tokens"]
        ev = aid.stream("/v1/chat/completions", {**body, "stop": stops, "stream": True,
                                                 "receipt": True})
        streamed = "".join(e["choices"][0]["delta"].get("content") or ""
                           for e in ev[:-1] if e["choices"])
        assert streamed == ch["message"]["content"]
        final = [e for e in ev[:-1] if e["choices"] and e["choices"][0]["finish_reason"]][0]
        assert final["receipt"]["output"] == rc["output"]
        p = tmp_path / "stop.json"
        p.write_text(json.dumps(rc, indent=2))
        code, out = verify(p)
        assert code == 0 and "rerun: identical" in out, out


def test_grammars_match_kinetic_run(aid):
    """A GBNF grammar and a JSON Schema give the same tokens in the server as in
    kinetic run --grammar / --json-schema with the same settings."""
    gbnf = 'root ::= [a-z]+ (" " [a-z]+){2,8} "."'
    for seed in (1, 2):
        body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 50,
                "temperature": 1.0, "seed": seed}
        js = aid.post("/v1/chat/completions", {**body, "grammar": gbnf})[2]
        cli = run_cli(PROMPT, "-n", 50, "--temp", 1.0, "--seed", seed, "--grammar", gbnf)
        assert js["choices"][0]["message"]["content"] == cli["text"]
        js = aid.post("/v1/chat/completions", {**body, "json_schema": SMALL_SCHEMA})[2]
        cli = run_cli(PROMPT, "-n", 50, "--temp", 1.0, "--seed", seed, "--json-schema",
                      json.dumps(SMALL_SCHEMA))
        assert js["choices"][0]["message"]["content"] == cli["text"]


def test_drafting_and_cache_off_give_the_same_tokens(aid):
    """RAD-1 drafting and Warm Start (on in `aid`) change no token of any sampler, grammar
    or stop string: a server with both off answers identically."""
    bodies = [probe_body(fields) for _, fields, _ in SAMPLERS]
    bodies += [
        probe_body({"grammar": 'root ::= [a-z]+ (" " [a-z]+){2,8} "."'}),
        probe_body({"json_schema": SMALL_SCHEMA}),
        probe_body({"stop": ["ing"], "dry_multiplier": 0.9}),
        # greedy, no penalty: the text repeats itself, so drafts are accepted, under a grammar
        # and a stop string too
        {"messages": [{"role": "user", "content": "the cat"}], "max_tokens": 60,
         "temperature": 0, "repeat_penalty": 1.0, "grammar": "root ::= [a-zA-Z ,.]+"},
        {"messages": [{"role": "user", "content": "the cat"}], "max_tokens": 60,
         "temperature": 0, "repeat_penalty": 1.0, "stop": ["a gentle"]},
    ]
    got = [aid.post("/v1/chat/completions", b)[2] for b in bodies]
    assert got[-2]["timings"]["draft_n_accepted"] > 0 and got[-1]["timings"]["draft_n_accepted"] > 0
    assert got[-1]["choices"][0]["finish_reason"] == "stop"
    on = [g["choices"] for g in got]
    with Server(AIDREAMS, "--parallel", "2", "--threads", "1", "--no-draft",
                "--no-warm-start", "--chat-format", "raw") as off:
        for b, want in zip(bodies, on):
            assert off.post("/v1/chat/completions", b)[2]["choices"] == want, b


# ---------------------------------------------------------------- reasoning, real markers

@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """A tiny random-weight qwen3 model with Qwen3's real vocabulary, whose <think> and
    </think> are tokens: reasoning_format "auto" must find them."""
    if SANITIZE:
        pytest.skip("sanitizer build: building a 151k-token model takes too long; the toy "
                    "model's reasoning test covers the server code under the sanitizers")
    pytest.importorskip("gguf")
    tok_dir = os.path.join(DATA, "tokenizers", "qwen3")
    if not os.path.isdir(tok_dir):
        pytest.skip("Qwen3 tokenizer files not found")
    d = tmp_path_factory.mktemp("qwen3")
    here = os.path.dirname(__file__)
    subprocess.run([sys.executable, os.path.join(here, "vocab_from_hf.py"), tok_dir, str(d / "vocab.gguf")],
                   check=True, capture_output=True, timeout=120)
    subprocess.run([KINETIC, "synth", "--arch", "qwen3", "--dims",
                    "dim=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=151936,ctx=256",
                    "--vocab", str(d / "vocab.gguf"), "-o", str(d / "q.gguf")],
                   check=True, capture_output=True, timeout=120)
    with Server(d / "q.gguf", "--threads", "1", "--parallel", "2") as s:
        yield s


def test_reasoning_auto_on_real_think_tokens(qwen3, tmp_path):
    think, end = 151667, 151668  # Qwen3's <think> and </think>
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "seed": 1,
            "logprobs": True, "logit_bias": {str(think): 30, str(end): 15},
            "grammar": 'root ::= "<think>" [a-z]{2,6} "</think>" [a-z]{2,6}'}
    st, _, js = qwen3.post("/v1/chat/completions", {**body, "receipt": True})
    assert st == 200, js
    ch = js["choices"][0]
    toks = [t["token"] for t in ch["logprobs"]["content"]]
    assert toks[0] == "<think>" and "</think>" in toks, toks  # the marker tokens themselves
    msg = ch["message"]
    whole = "".join(toks)
    assert whole == "<think>" + msg["reasoning_content"] + "</think>" + msg["content"]
    assert js["receipt"]["output"]["text"] == msg["content"]
    p = tmp_path / "think.json"
    p.write_text(json.dumps(js["receipt"]))
    code, out = verify(p)
    assert code == 0 and "rerun: identical" in out, out
    ev = qwen3.stream("/v1/chat/completions", {**body, "stream": True})
    deltas = [e["choices"][0]["delta"] for e in ev[:-1] if e["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == msg["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == msg["content"]
    none = qwen3.post("/v1/chat/completions", {**body, "reasoning_format": "none"})[2]
    assert none["choices"][0]["message"]["content"] == whole
