"""Tool calling (issue 21 item 1) with the official openai client: tools and tool_choice
("auto", "none", "required", a named function), parallel_tool_calls (one call unless it is
true, as llama-server), message.tool_calls
with finish_reason "tool_calls", streamed delta.tool_calls accumulated as the SDK does,
role "tool" results rendered by the template in the next request, arguments validated
with jsonschema, receipts that verify, and the same calls alone, under load and with
RAD-1 drafting off. Models: a synth Qwen3 (151k-token vocabulary) with Qwen3's template,
and Gemma 3 270M with its own template."""
import json
import os
import subprocess
import sys

import pytest

from srvutil import GEMMA, KINETIC, DATA, Server, busy_clients, sanitizer_build

jsonschema = pytest.importorskip("jsonschema")
openai = pytest.importorskip("openai")

QWEN3_TEMPLATE = os.path.join(DATA, "templates", "Qwen-Qwen3-0.6B.jinja")


SANITIZE = sanitizer_build()

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 16},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MSGS = [{"role": "user", "content": "What is the weather in Paris, and what is 2 + 3?"}]


@pytest.fixture(scope="module")
def qwen3_model(tmp_path_factory):
    if SANITIZE:
        pytest.skip("sanitizer build: the 151k-token model is slow; test_chat_tools covers the parser")
    pytest.importorskip("gguf")
    tok_dir = os.path.join(DATA, "tokenizers", "qwen3")
    if not os.path.isdir(tok_dir) or not os.path.exists(QWEN3_TEMPLATE):
        pytest.skip("Qwen3 tokenizer files or template not found")
    d = tmp_path_factory.mktemp("tools")
    here = os.path.dirname(__file__)
    subprocess.run([sys.executable, os.path.join(here, "vocab_from_hf.py"), tok_dir,
                    str(d / "vocab.gguf")], check=True, capture_output=True, timeout=120)
    subprocess.run([KINETIC, "synth", "--arch", "qwen3", "--dims",
                    "dim=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=151936,ctx=1024",
                    "--vocab", str(d / "vocab.gguf"), "-o", str(d / "q.gguf")],
                   check=True, capture_output=True, timeout=120)
    return d / "q.gguf"


@pytest.fixture(scope="module")
def qwen3(qwen3_model):
    with Server(qwen3_model, "--threads", "1", "--parallel", "3", "--chat-template",
                QWEN3_TEMPLATE) as s:
        yield s


def client(s):
    return openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0)


def check_calls(calls, only=None):
    assert calls, "no tool calls"
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_")
        assert c.function.name in SCHEMAS and (only is None or c.function.name == only)
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def create(s, **kw):
    kw = {"max_tokens": 160, "temperature": 1.0, **kw}
    return client(s).chat.completions.create(model="m", messages=MSGS, tools=TOOLS, **kw)


def test_required_calls_validate(qwen3):
    for seed in (1, 2, 3, 4):
        r = create(qwen3, tool_choice="required", parallel_tool_calls=False, seed=seed)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        assert ch.message.content is None
        check_calls(ch.message.tool_calls)
        assert len(ch.message.tool_calls) == 1
    # parallel calls allowed: the noise model makes several (3 with this seed); every
    # call is whole and valid, each with its own id, and no markup is left in content
    r = create(qwen3, tool_choice="required", seed=10, max_tokens=400, parallel_tool_calls=True)
    calls = r.choices[0].message.tool_calls
    check_calls(calls)
    ids = [c.id for c in calls]
    assert len(set(ids)) == len(ids)
    assert len(calls) > 1 and r.choices[0].message.content is None


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_one_call_unless_parallel_tool_calls(qwen3, choice):
    """llama-server's rule: one call unless parallel_tool_calls is true (the default is
    false), so the forced answer ends after its call (finish_reason "tool_calls") instead
    of repeating it until max_tokens; never partial call markup in content, streamed or
    not."""
    for seed in (9, 10):
        for extra in ({}, {"parallel_tool_calls": False}):
            r = create(qwen3, tool_choice=choice, seed=seed, max_tokens=400, **extra)
            ch = r.choices[0]
            assert ch.finish_reason == "tool_calls" and ch.message.content is None, ch
            assert len(ch.message.tool_calls) == 1
            check_calls(ch.message.tool_calls, only=None if choice == "required" else "add")
            assert r.usage.completion_tokens < 400
        r = create(qwen3, tool_choice=choice, seed=seed, max_tokens=400, parallel_tool_calls=True)
        assert len(r.choices[0].message.tool_calls) >= 1
    # cut short inside its only call: no call, and no markup in content
    for stream in (False, True):
        r = create(qwen3, tool_choice=choice, seed=9, max_tokens=6, stream=stream)
        if stream:
            text, calls, finish = "", 0, None
            for chunk in r:
                for c in chunk.choices:
                    text += c.delta.content or ""
                    calls += len(c.delta.tool_calls or [])
                    finish = c.finish_reason or finish
        else:
            text, calls = r.choices[0].message.content or "", len(r.choices[0].message.tool_calls or [])
            finish = r.choices[0].finish_reason
        assert finish == "length" and calls == 0 and "<tool_call>" not in text and "{" not in text, text


def test_named_function_and_no_parallel(qwen3):
    for seed in (5, 6):
        r = create(qwen3, tool_choice={"type": "function", "function": {"name": "add"}},
                   parallel_tool_calls=False, seed=seed)
        calls = r.choices[0].message.tool_calls
        check_calls(calls, only="add")
        assert len(calls) == 1


def test_streamed_tool_calls_accumulate_to_the_plain_answer(qwen3):
    plain = create(qwen3, tool_choice="required", parallel_tool_calls=False, seed=8).choices[0]
    acc, finish, first = {}, None, {}
    for chunk in create(qwen3, tool_choice="required", parallel_tool_calls=False, seed=8, stream=True):
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                a = acc.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    assert a["id"] is None and tc.type == "function"  # id, type, name first
                    a["id"] = tc.id
                    first[tc.index] = tc.function.arguments
                if tc.function and tc.function.name:
                    a["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    a["arguments"] += tc.function.arguments
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert all(v == "" for v in first.values())
    got = [(acc[k]["name"], acc[k]["arguments"]) for k in sorted(acc)]
    assert got == [(c.function.name, c.function.arguments) for c in plain.message.tool_calls]


def test_auto_parses_calls_and_none_does_not(qwen3):
    """With tool_choice auto the answer is searched for calls in the template's syntax
    (here forced by a grammar, since the synth model writes noise); with none it stays
    text."""
    text = ('I will look.\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Paris", "unit": "celsius"}}\n</tool_call>')
    grammar = "root ::= " + json.dumps(text)
    body = {"model": "m", "messages": MSGS, "tools": TOOLS, "max_tokens": 80, "seed": 1,
            "grammar": grammar}
    st, _, js = qwen3.post("/v1/chat/completions", body)
    assert st == 200, js
    ch = js["choices"][0]
    assert ch["finish_reason"] == "tool_calls"
    assert ch["message"]["content"] == "I will look.\n"
    assert ch["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": '{"city":"Paris","unit":"celsius"}'}
    # streamed: the content before the marker streams, then the call
    ev = qwen3.stream("/v1/chat/completions", {**body, "stream": True})
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev[:-1] if e["choices"])
    assert content == "I will look.\n"
    assert not any("<tool_call>" in (e["choices"][0]["delta"].get("content") or "")
                   for e in ev[:-1] if e["choices"])
    st, _, js = qwen3.post("/v1/chat/completions", {**body, "tool_choice": "none"})
    ch = js["choices"][0]
    assert "tool_calls" not in ch["message"] and ch["finish_reason"] == "stop"
    assert ch["message"]["content"] == text


def test_tool_results_rendered_by_the_template(qwen3):
    r = create(qwen3, tool_choice={"type": "function", "function": {"name": "get_weather"}}, seed=3)
    msg = r.choices[0].message
    call = msg.tool_calls[0]
    follow = MSGS + [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    st, _, js = qwen3.post("/apply-template", {"messages": follow, "tools": TOOLS})
    assert st == 200, js
    p = js["prompt"]
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in p, p
    assert '"name": "get_weather"' in p
    r2 = client(qwen3).chat.completions.create(model="m", messages=follow, tools=TOOLS,
                                               max_tokens=8, seed=1)
    assert r2.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_same_calls_under_load_and_without_drafting(qwen3, qwen3_model):
    body = {"messages": MSGS, "tools": TOOLS, "tool_choice": "required", "max_tokens": 160,
            "temperature": 1.0, "seed": 12, "parallel_tool_calls": False}
    st, _, calm = qwen3.post("/v1/chat/completions", body)
    with busy_clients(qwen3, n=2):
        st, _, busy = qwen3.post("/v1/chat/completions", body)
    with Server(qwen3_model, "--threads", "1", "--parallel", "1", "--no-draft",
                "--chat-template", QWEN3_TEMPLATE) as plain:
        st, _, nodraft = plain.post("/v1/chat/completions", body)
    calls = [[(c["function"]["name"], c["function"]["arguments"]) for c in js["choices"][0]["message"]["tool_calls"]]
             for js in (calm, busy, nodraft)]
    assert calls[0] == calls[1] == calls[2]


def test_receipt_records_tools_and_verifies(qwen3, tmp_path):
    st, _, js = qwen3.post("/v1/chat/completions", {
        "messages": MSGS, "tools": TOOLS, "tool_choice": "required", "max_tokens": 160,
        "seed": 4, "receipt": True, "parallel_tool_calls": False})
    assert st == 200, js
    rc = js["receipt"]
    # the tools the template rendered, and the grammar tool_choice "required" made
    assert rc["template"]["tools"] == TOOLS
    assert "kn-tool-call" in rc["sampling"]["grammar"]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(rc))
    r = subprocess.run([KINETIC, "verify-receipt", str(path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "rerun: identical" in r.stdout + r.stderr, r.stdout + r.stderr


def test_tool_request_errors(qwen3):
    def err(body):
        st, _, js = qwen3.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 4, **body})
        assert st == 400, js
        return js["error"]
    assert err({"tool_choice": "required"})["param"] == "tool_choice"  # no tools
    e = err({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert "'nope'" in e["message"]
    e = err({"tools": TOOLS, "tool_choice": "always"})
    assert e["param"] == "tool_choice"
    # a tool's parameters with a ref that names nothing (issue 44: "#" read past the string)
    for ref in ("#", "", "#/$defs/"):
        bad = [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"$ref": ref}}}}}]
        e = err({"tools": bad, "tool_choice": "required"})
        assert f"$ref '{ref}'" in e["message"], e
    e = err({"tools": [{"type": "function"}]})
    assert e["param"] == "tools" and "tools[0]" in e["message"]
    e = err({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}})
    assert "cannot be combined" in e["message"]


def test_gemma_required_call(tmp_path):
    if not os.path.exists(GEMMA):
        pytest.skip("Gemma 3 270M not found (set KN_GEMMA)")
    with Server(GEMMA, "--parallel", 1, "--ctx-size", 1024) as s:
        for seed in (1, 2):
            r = create(s, tool_choice="required", parallel_tool_calls=False, seed=seed)
            assert r.choices[0].finish_reason == "tool_calls"
            check_calls(r.choices[0].message.tool_calls)
        r = create(s, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                   seed=3, temperature=0.0)
        check_calls(r.choices[0].message.tool_calls, only="get_weather")


# ---- the name outside the JSON: gpt-oss's harmony and functionary v3.2 / v3.1 ----------
# A synth model with Llama 2's 32k vocabulary plus the control tokens the templates write
# (harmony's message headers, Llama 3's turn headers), so every template renders and the
# grammar reaches the header tokens by their text, as with the real models' vocabularies.

HARMONY_TOKENS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                  "<|return|>", "<|call|>", "<|endoftext|>"]
LLAMA3_TOKENS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                 "<|eom_id|>", "<|python_tag|>"]
NAMED_SYNTAXES = {
    # syntax: (template, what a forced call's raw text starts with)
    "harmony": ("openai-gpt-oss-120b.jinja", "<|channel|>commentary to=functions."),
    "functionary": ("meetkai-functionary-medium-v3.2.jinja", ""),
    "functionary-v3.1": ("meetkai-functionary-medium-v3.1.jinja", "<function="),
}


@pytest.fixture(scope="module")
def named_model(tmp_path_factory):
    pytest.importorskip("gguf")
    tok_dir = os.path.join(DATA, "tokenizers", "llama2")
    if not os.path.isdir(tok_dir):
        pytest.skip("Llama 2 tokenizer files not found")
    d = tmp_path_factory.mktemp("named")
    tj = json.load(open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8"))
    n = len(tj["model"]["vocab"])
    for i, t in enumerate(HARMONY_TOKENS + LLAMA3_TOKENS):
        tj["added_tokens"].append({"id": n + i, "content": t, "single_word": False,
                                   "lstrip": False, "rstrip": False, "normalized": False,
                                   "special": True})
    (d / "tok").mkdir()
    with open(d / "tok" / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tj, f)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        (d / "tok" / "tokenizer_config.json").write_text(f.read())
    here = os.path.dirname(__file__)
    subprocess.run([sys.executable, os.path.join(here, "vocab_from_hf.py"), str(d / "tok"),
                    str(d / "vocab.gguf")], check=True, capture_output=True, timeout=120)
    n_vocab = n + len(HARMONY_TOKENS) + len(LLAMA3_TOKENS)
    subprocess.run([KINETIC, "synth", "--arch", "llama", "--dims",
                    f"dim=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab={n_vocab},ctx=2048",
                    "--vocab", str(d / "vocab.gguf"), "-o", str(d / "m.gguf")],
                   check=True, capture_output=True, timeout=120)
    return d / "m.gguf"


# the -O0 ASan build runs the two bare-name parsers (harmony's, functionary v3.2's with its
# recipient line); v3.1 differs only in the frame's texts, which the plain build checks
NAMED_RUN = ["harmony", "functionary"] if SANITIZE else list(NAMED_SYNTAXES)


@pytest.fixture(scope="module", params=NAMED_RUN)
def named(request, named_model):
    tmpl = os.path.join(DATA, "templates", NAMED_SYNTAXES[request.param][0])
    if not os.path.exists(tmpl):
        pytest.skip(f"template {tmpl} not found")
    with Server(named_model, "--threads", "1", "--parallel", "2", "--chat-template", tmpl) as s:
        s.syntax = request.param
        yield s


def test_named_syntax_required_and_named(named):
    """tool_choice "required" and a named function in the syntaxes that write the name
    outside the JSON: the grammar chooses among the tools' names, then that tool's
    arguments schema; the calls parse back and validate."""
    for seed in (1, 2, 3):
        r = create(named, tool_choice="required", parallel_tool_calls=False, seed=seed)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", (named.syntax, ch)
        assert ch.message.content is None, (named.syntax, ch.message.content)
        check_calls(ch.message.tool_calls)
        assert len(ch.message.tool_calls) == 1
    names = set()
    for seed in (4, 5):
        for only in ("add", "get_weather"):
            r = create(named, tool_choice={"type": "function", "function": {"name": only}},
                       parallel_tool_calls=False, seed=seed)
            check_calls(r.choices[0].message.tool_calls, only=only)
            names.add(r.choices[0].message.tool_calls[0].function.name)
    assert names == {"add", "get_weather"}
    # the raw text is the syntax's own: a completion with the same grammar shows it
    st, _, js = named.post("/v1/chat/completions", {
        "messages": MSGS, "tools": TOOLS, "tool_choice": "required", "max_tokens": 160,
        "seed": 1, "parallel_tool_calls": False, "receipt": True})
    assert st == 200, js
    g = js["receipt"]["sampling"]["grammar"]
    start = NAMED_SYNTAXES[named.syntax][1]
    assert json.dumps(start) in g or start == "", g[:300]


def test_named_syntax_parallel_calls(named):
    """Several calls where the syntax has a separator (functionary's); harmony's turn ends
    at the first call's <|call|>, so it gives one."""
    r = create(named, tool_choice="required", seed=9, max_tokens=400, parallel_tool_calls=True)
    calls = r.choices[0].message.tool_calls
    check_calls(calls)
    if named.syntax == "harmony":
        assert len(calls) == 1


def test_named_syntax_stream_equals_plain(named):
    kw = {"tool_choice": "required", "parallel_tool_calls": False, "seed": 8}
    plain = create(named, **kw).choices[0]
    acc, finish, content = {}, None, ""
    for chunk in create(named, stream=True, **kw):
        for c in chunk.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                a = acc.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function and tc.function.name:
                    a["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    a["arguments"] += tc.function.arguments
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and content == "", (named.syntax, content)
    got = [(acc[k]["name"], acc[k]["arguments"]) for k in sorted(acc)]
    assert got == [(c.function.name, c.function.arguments) for c in plain.message.tool_calls]


def test_named_syntax_receipt_verifies(named, tmp_path):
    st, _, js = named.post("/v1/chat/completions", {
        "messages": MSGS, "tools": TOOLS, "tool_choice": {"type": "function",
                                                         "function": {"name": "get_weather"}},
        "max_tokens": 160, "seed": 4, "receipt": True})
    assert st == 200, js
    assert js["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    path = tmp_path / "named.json"
    path.write_text(json.dumps(js["receipt"]))
    r = subprocess.run([KINETIC, "verify-receipt", str(path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "rerun: identical" in r.stdout + r.stderr, r.stdout + r.stderr


def test_named_syntax_refuses_a_name_it_cannot_write(named):
    bad = [{"type": "function", "function": {"name": "get weather", "parameters": {
        "type": "object"}}}]
    st, _, js = named.post("/v1/chat/completions", {"messages": MSGS, "tools": bad,
                                                    "tool_choice": "required", "max_tokens": 4})
    assert st == 400 and js["error"]["param"] == "tools", js
    assert "'get weather'" in js["error"]["message"] and named.syntax in js["error"]["message"]


@pytest.mark.parametrize("text,content,calls", [
    ("all\nHello there.", "Hello there.", []),
    ("all\nLet me look.\n>>>get_weather\n{\"city\": \"Oslo\"}", "Let me look.\n",
     [("get_weather", '{"city":"Oslo"}')]),
])
def test_functionary_recipient_line_is_not_content(named_model, text, content, calls):
    """Functionary v3.2's generation prompt ends with ">>>", so an answer in text opens with
    the recipient line "all\\n": with tool_choice auto it is not content, streamed or not
    (the answer is forced by a grammar, since the synth model writes noise)."""
    tmpl = os.path.join(DATA, "templates", NAMED_SYNTAXES["functionary"][0])
    if not os.path.exists(tmpl):
        pytest.skip(f"template {tmpl} not found")
    body = {"model": "m", "messages": MSGS, "tools": TOOLS, "max_tokens": 60, "seed": 1,
            "grammar": "root ::= " + json.dumps(text)}
    with Server(named_model, "--threads", "1", "--chat-template", tmpl) as s:
        st, _, js = s.post("/v1/chat/completions", body)
        assert st == 200, js
        ch = js["choices"][0]
        assert ch["message"]["content"] == content, ch
        got = [(c["function"]["name"], c["function"]["arguments"])
               for c in ch["message"].get("tool_calls") or []]
        assert got == calls
        assert ch["finish_reason"] == ("tool_calls" if calls else "stop")
        ev = [e for e in s.stream("/v1/chat/completions", {**body, "stream": True})
              if isinstance(e, dict)]  # (and "[DONE]")
        streamed = "".join(e["choices"][0]["delta"].get("content") or ""
                           for e in ev if e.get("choices"))
        assert streamed == content, ev
        finish = [e["choices"][0]["finish_reason"] for e in ev
                  if e.get("choices") and e["choices"][0].get("finish_reason")]
        assert finish == [ch["finish_reason"]], ev
