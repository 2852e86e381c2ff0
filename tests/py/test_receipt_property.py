"""Every receipt Kinetic writes is one it accepts: receipts from `kinetic run`, `kinetic
chat` (/receipt) and `kinetic serve` over every feature (each sampler, grammars, JSON
schemas as deep as the input limit allows, stop strings, tools, template kwargs, the
clock, reasoning, long prompts, --raw, --prompt-ids, --chat-template files, completions
given text or ids) all pass the strict reader and verify `identical`, with their input and
output text proven."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from srvutil import Server  # noqa: E402

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")
TEMPLATES = os.path.join(DATA, "templates")
NEW_METADATA = [sys.executable, "-m", "gguf.scripts.gguf_new_metadata"]
INPUT_DEPTH = 60  # JSON_MAX_INPUT_DEPTH: the deepest input a receipt records


def deep_schema(levels):
    """An object schema nested `levels` objects deep (2 JSON levels each, plus the root)."""
    s = {"type": "integer"}
    for _ in range(levels):
        s = {"type": "object", "properties": {"a": s}}
    return s


def depth(v):
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    return 0


@pytest.fixture(scope="module")
def world():
    d = tempfile.mkdtemp(prefix="kn_rprop_")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(d, "cache"))
    key = os.path.join(d, "k.key")
    subprocess.run(["openssl", "rand", "-out", key, "-hex", "32"], check=True)
    models = {"aidreams": AIDREAMS}
    for name, tpl in [("qwen3", "Qwen-Qwen3-0.6B.jinja"), ("llama32", "meta-llama-Llama-3.2-3B-Instruct.jinja"),
                      ("qwq", "Qwen-QwQ-32B.jinja")]:
        models[name] = os.path.join(d, name + ".gguf")
        subprocess.run(NEW_METADATA + [AIDREAMS, models[name], "--chat-template-file",
                                       os.path.join(TEMPLATES, tpl)], check=True, capture_output=True)
    yield {"dir": d, "env": env, "key": key, "models": models}
    shutil.rmtree(d)


def check(world, receipt_path, what):
    p = subprocess.run([KINETIC, "verify-receipt", receipt_path], capture_output=True, text=True,
                       env=world["env"], timeout=300)
    assert p.returncode == 0, (what, p.stdout)
    assert "input: proven" in p.stdout and "output.text: proven" in p.stdout, (what, p.stdout)
    assert "rerun: identical" in p.stdout, (what, p.stdout)
    with open(receipt_path) as f:
        return json.load(f)


def test_run_every_feature(world):
    d = world["dir"]
    conv = os.path.join(d, "conv.json")
    with open(conv, "w") as f:
        json.dump({"messages": [{"role": "system", "content": "Use tools."},
                                {"role": "user", "content": "Weather in Paris?"},
                                {"role": "assistant", "content": "",
                                 "tool_calls": [{"type": "function", "function": {
                                     "name": "get_weather", "arguments": {"city": "Paris"}}}]},
                                {"role": "tool", "content": "sunny"},
                                {"role": "user", "content": "And Rome?"}],
                   "tools": [{"type": "function", "function": {
                       "name": "get_weather", "description": "the weather",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}, f)
    schema_file = os.path.join(d, "deep.json")
    levels = (INPUT_DEPTH - 1) // 2  # the deepest schema run accepts
    with open(schema_file, "w") as f:
        json.dump(deep_schema(levels), f)
    assert depth(deep_schema(levels)) <= INPUT_DEPTH
    tfile = os.path.join(TEMPLATES, "Qwen-Qwen2.5-7B-Instruct.jinja")
    long_prompt = " ".join(["the river runs to the sea"] * 120)
    samplers = [
        ["--typical", "0.9"], ["--top-nsigma", "1.5"],
        ["--xtc-probability", "0.5", "--xtc-threshold", "0.05"],
        ["--dry-multiplier", "0.8", "--dry-allowed-length", "3"],
        ["--mirostat", "2", "--mirostat-ent", "4"], ["--mirostat", "1"],
        ["--logit-bias", "5+2.5,7-inf", "--min-keep", "3"],
        ["--samplers", "top_k;temperature"], ["--temp", "0"],
        ["--top-k", "5", "--top-p", "0.5", "--min-p", "0.2", "--repeat-penalty", "1.3",
         "--presence-penalty", "0.5", "--frequency-penalty", "0.4", "--repeat-last-n", "16"],
    ]
    cases = [(name, "aidreams", ["Once upon a time", "-n", "24"] + s) for name, s in
             (("sampler %d" % i, s) for i, s in enumerate(samplers))]
    cases += [
        ("stop strings", "aidreams", ["Once upon a time", "-n", "48", "--stop", "e", "--stop", "\\n\\n"]),
        ("grammar", "aidreams", ["Say yes", "-n", "16", "--grammar", 'root ::= ("yes" | "no") " " [a-z]+']),
        ("deep json schema", "aidreams", ["Give JSON", "-n", "40", "-c", "512", "--json-schema-file", schema_file]),
        ("system", "aidreams", ["Hello", "--system", "Be brief.", "-n", "16"]),
        ("raw", "aidreams", ["Once upon a time", "--raw", "-n", "16"]),
        ("prompt ids", "aidreams", ["--prompt-ids", "1,2,3", "-n", "16"]),
        ("long prompt", "aidreams", [long_prompt, "-c", "4096", "-n", "16"]),
        ("template file + kwargs", "aidreams", ["Hi", "--chat-template", tfile, "-c", "512",
                                                "--chat-template-kwargs", '{"x": [1, {"y": 2}]}', "-n", "16"]),
        ("jinja kwargs", "qwen3", ["Hi", "--system", "Be brief.", "-c", "1024", "-n", "16",
                                   "--chat-template-kwargs", '{"enable_thinking": false}']),
        ("tools", "qwen3", ["--messages", conv, "-c", "2048", "-n", "16"]),
        ("clock", "llama32", ["Hi", "-c", "1024", "-n", "16"]),
        ("reasoning", "qwq", ["Hi", "-c", "1024", "-n", "24", "--reasoning", "hide"]),
        ("reasoning + stop", "qwq", ["Hi", "-c", "1024", "-n", "24", "--stop", "a"]),
        ("f16 cache", "aidreams", ["Once upon a time", "-n", "16", "--kv-type", "f16"]),
    ]
    for i, (name, model, args) in enumerate(cases):
        path = os.path.join(d, "run%d.json" % i)
        p = subprocess.run([KINETIC, "run", world["models"][model], *args, "--seed", str(100 + i),
                            "--receipt", path, "--sign-key", world["key"]],
                           capture_output=True, text=True, env=world["env"], timeout=300)
        assert p.returncode == 0, (name, p.stderr)
        r = check(world, path, name)
        if name == "deep json schema":
            assert depth(r) <= 64 and depth(r) >= INPUT_DEPTH, depth(r)
        if name == "clock":
            assert "now" in r["template"]
        if name.startswith("reasoning"):
            assert r["output"]["think"]["inside"] is True


def test_chat_receipts(world):
    d = world["dir"]
    for i, (model, lines, flags) in enumerate([
        ("aidreams", ["Hello", "What now?"], ["--system", "Be kind."]),
        ("qwen3", ["Hello", "Tell me more", "And then?"], ["-c", "2048"]),
        ("llama32", ["Hi"], ["-c", "1024", "--stop", "e"]),
        ("qwq", ["Hi"], ["-c", "1024"]),
    ]):
        path = os.path.join(d, "chat%d.json" % i)
        script = "\n".join(lines + ["/receipt " + path]) + "\n"
        p = subprocess.run([KINETIC, "chat", world["models"][model], "--seed", str(7 + i), "-n", "16",
                            "--sign-key", world["key"], *flags], input=script, capture_output=True,
                           text=True, env=world["env"], timeout=300)
        assert p.returncode == 0 and os.path.exists(path), (model, p.stdout, p.stderr)
        r = check(world, path, "chat %s" % model)
        assert len([m for m in r["input"] if m["role"] == "user"]) == len(lines)


@pytest.mark.parametrize("model", ["qwen3", "qwq"])
def test_serve_receipts(world, model):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    # the deepest body the server takes: the schema's root is 4 levels down
    levels = (INPUT_DEPTH - 4) // 2
    rf = {"type": "json_schema", "json_schema": {"schema": deep_schema(levels)}}
    assert depth({"response_format": rf}) <= INPUT_DEPTH
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    requests = [
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 16}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "tools": tools,
                                  "chat_template_kwargs": {"enable_thinking": True}}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 24, "response_format": rf}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "stop": ["a", "e"],
                                  "top_k": 7, "min_p": 0.1, "presence_penalty": 0.3,
                                  "frequency_penalty": 0.2, "repeat_penalty": 1.2}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "reasoning_format": "deepseek"}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "reasoning_format": "none"}),
        ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 16, "stop": ["e"]}),
        ("/v1/completions", {"prompt": [1, 2, 3, 4], "max_tokens": 16, "temperature": 0}),
        ("/v1/completions", {"prompt": " ".join(["a river"] * 200), "max_tokens": 8}),
    ]
    with Server(world["models"][model], "--ctx-size", "2048", "--parallel", "2", "--max-depth",
                str(INPUT_DEPTH), "--sign-key", world["key"], env=world["env"]) as srv:
        for i, (path, body) in enumerate(requests):
            body = dict(body, seed=50 + i, receipt=True)
            st, _, js = srv.post(path, body)
            assert st == 200, (path, body, js)
            rpath = os.path.join(world["dir"], "serve_%s_%d.json" % (model, i))
            with open(rpath, "w") as f:
                json.dump(js["receipt"], f)
            check(world, rpath, (model, path, list(body)))
