"""`n` > 1 (issue 21 item 3): a request for n choices runs n jobs, choice i with seed
seed + i (api_choice_seed), so each choice is exactly the answer to the same request with
n = 1 and that seed, alone or on a busy server, plain or streamed; usage counts the prompt
once and every choice's tokens; with a receipt each choice carries its own, which
verify-receipt reruns to the same tokens."""
import json
import os
import subprocess
import threading

import pytest

from srvutil import GEMMA, KINETIC, DATA, Server, busy_clients

CHAT = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 20,
        "temperature": 1.0, "seed": 7, "logprobs": True, "top_logprobs": 2}


@pytest.fixture(scope="module")
def toy():
    with Server("--toy", "--parallel", 3, "--ctx-size", 256, "--toy-delay-us", 200) as s:
        yield s


def one(s, body, seed):
    st, _, js = s.post("/v1/chat/completions", {**body, "n": 1, "seed": seed})
    assert st == 200, js
    return js["choices"][0]


def test_each_choice_is_its_seed_alone(toy):
    st, _, js = toy.post("/v1/chat/completions", {**CHAT, "n": 3})
    assert st == 200, js
    ch = js["choices"]
    assert [c["index"] for c in ch] == [0, 1, 2]
    assert [c["seed"] for c in ch] == [7, 8, 9] and js["seed"] == 7
    for i, c in enumerate(ch):
        alone = one(toy, CHAT, 7 + i)
        assert c["message"] == alone["message"] and c["logprobs"] == alone["logprobs"], i
        assert c["finish_reason"] == alone["finish_reason"]
    texts = {c["message"]["content"] for c in ch}
    assert len(texts) == 3, texts  # different seeds, different stories
    n_out = [len(c["logprobs"]["content"]) for c in ch]
    assert js["usage"]["completion_tokens"] == sum(n_out)
    assert js["usage"]["total_tokens"] == js["usage"]["prompt_tokens"] + sum(n_out)


def test_completions_and_unseeded(toy):
    body = {"prompt": "Once upon", "max_tokens": 12, "temperature": 0.9, "n": 2}
    st, _, js = toy.post("/v1/completions", body)
    assert st == 200, js
    base = js["seed"]
    assert [c["seed"] for c in js["choices"]] == [base, base + 1]
    for i, c in enumerate(js["choices"]):
        st, _, alone = toy.post("/v1/completions", {**body, "n": 1, "seed": base + i})
        assert alone["choices"][0]["text"] == c["text"], i


def test_streamed_choices_interleave_and_match(toy):
    """Each choice streams its own role chunk, its deltas and its finish_reason under its
    index, as OpenAI streams n > 1; the accumulated text equals the plain answer."""
    st, _, plain = toy.post("/v1/chat/completions", {**CHAT, "n": 3})
    ev = toy.stream("/v1/chat/completions", {**CHAT, "n": 3, "stream": True,
                                             "stream_options": {"include_usage": True}})
    assert ev[-1] == "[DONE]"
    text, roles, finish = {}, {}, {}
    for e in ev[:-1]:
        for c in e["choices"]:
            i = c["index"]
            d = c["delta"]
            if "role" in d:
                roles[i] = roles.get(i, 0) + 1
            text[i] = text.get(i, "") + (d.get("content") or "")
            if c["finish_reason"]:
                finish[i] = c["finish_reason"]
                assert c["seed"] == 7 + i
    assert roles == {0: 1, 1: 1, 2: 1}
    for i in range(3):
        assert text[i] == plain["choices"][i]["message"]["content"], i
        assert finish[i] == plain["choices"][i]["finish_reason"]
    usage = ev[-2]["usage"]
    assert ev[-2]["choices"] == [] and usage == plain["usage"]


def test_choices_under_load(toy):
    st, _, calm = toy.post("/v1/chat/completions", {**CHAT, "n": 2})
    with busy_clients(toy, n=2):
        st, _, busy = toy.post("/v1/chat/completions", {**CHAT, "n": 2})
    assert st == 200
    assert [c["message"] for c in busy["choices"]] == [c["message"] for c in calm["choices"]]


def test_openai_client_n(toy):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=toy.base + "/v1", api_key="none")
    r = client.chat.completions.create(model="toy", messages=CHAT["messages"], max_tokens=8,
                                       seed=11, n=2, temperature=1.0)
    assert [c.index for c in r.choices] == [0, 1]
    got = {}
    for chunk in client.chat.completions.create(model="toy", messages=CHAT["messages"],
                                                max_tokens=8, seed=11, n=2, temperature=1.0,
                                                stream=True):
        for c in chunk.choices:
            got[c.index] = got.get(c.index, "") + (c.delta.content or "")
    assert got == {c.index: c.message.content for c in r.choices}


def test_n_out_of_range(toy):
    st, _, js = toy.post("/v1/chat/completions", {**CHAT, "n": 17})
    assert st == 400 and js["error"]["param"] == "n", js
    st, _, js = toy.post("/v1/chat/completions", {**CHAT, "n": 0})
    assert st == 400 and js["error"]["param"] == "n", js


def test_each_choice_has_a_receipt_that_verifies(tmp_path):
    if not os.path.exists(GEMMA):
        pytest.skip("Gemma 3 270M not found (set KN_GEMMA)")
    with Server(GEMMA, "--parallel", 2, "--ctx-size", 512) as s:
        st, _, js = s.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 12,
            "temperature": 1.0, "seed": 21, "n": 2, "receipt": True})
    assert st == 200, js
    assert "receipt" not in js
    for i, c in enumerate(js["choices"]):
        rc = c["receipt"]
        assert rc["sampling"]["seed"] == 21 + i
        assert rc["output"]["text"] == c["message"]["content"]
        path = tmp_path / f"choice{i}.json"
        path.write_text(json.dumps(rc))
        r = subprocess.run([KINETIC, "verify-receipt", str(path)], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0 and "rerun: identical" in r.stdout + r.stderr, r.stdout + r.stderr
