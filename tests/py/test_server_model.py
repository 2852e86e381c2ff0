"""`kinetic serve` on real models: answers equal `kinetic run`'s for the same prompt,
settings and seed; the same request gives identical tokens and logprobs alone and while
three other clients keep every slot busy (10 runs -> 1 distinct); Gemma 3 270M's chat
template and the openai client's streaming on it."""
import hashlib
import json
import os
import subprocess

import pytest

from srvutil import GEMMA, KINETIC, DATA, Server, busy_clients, fingerprint

AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")


def run_cli(model, prompt, *args):
    r = subprocess.run([KINETIC, "run", model, prompt, "--json", *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def aid():
    if not os.path.exists(AIDREAMS):
        pytest.skip("aidreams260K.gguf not found")
    with Server(AIDREAMS, "--parallel", "4", "--threads", "1") as s:
        yield s


@pytest.mark.parametrize("temp,seed", [(0, 1), (0.8, 42), (1.0, 7)])
def test_same_as_kinetic_run(aid, temp, seed):
    prompt = "Once upon a time"
    # the model has no template: the server writes plain turns (run's --chat-format plain)
    cli = run_cli(AIDREAMS, prompt, "-n", 30, "--temp", temp, "--seed", seed, "--threads", 1,
                  "--chat-format", "plain")
    st, _, js = aid.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": prompt}], "max_tokens": 30,
        "temperature": temp, "seed": seed})
    assert st == 200, js
    assert js["choices"][0]["message"]["content"] == cli["text"]
    assert js["usage"]["prompt_tokens"] == len(cli["prompt_tokens"])
    if js["choices"][0]["finish_reason"] == "length":
        assert js["usage"]["completion_tokens"] == len(cli["tokens"])


def test_prompt_too_long(aid):
    st, _, js = aid.post("/v1/completions", {"prompt": "dream " * 200})
    assert st == 400 and "slot context holds 128" in js["error"]["message"], js
    assert aid.post("/v1/completions", {"prompt": "ok", "max_tokens": 3})[0] == 200


def test_same_answer_under_load(aid):
    """10 runs of one request, with logprobs, while 3 clients keep the other slots busy
    with different long requests, streaming and not: 1 distinct answer, equal to the
    answer alone."""
    probe = {"messages": [{"role": "user", "content": "The moon"}], "max_tokens": 60,
             "temperature": 0.8, "seed": 1234, "logprobs": True, "top_logprobs": 4}
    aid.wait_idle()
    alone = fingerprint(aid.post("/v1/chat/completions", probe)[2])
    answers = []
    busy_seen = 0
    with busy_clients(aid, max_tokens=80):
        for _ in range(10):
            st, _, js = aid.post("/v1/chat/completions", probe)
            assert st == 200, js
            answers.append(fingerprint(js))
            busy_seen = max(busy_seen, aid.get("/health")[2]["slots_processing"])
    distinct = {hashlib.sha256(a.encode()).hexdigest() for a in answers}
    assert len(distinct) == 1, f"{len(distinct)} distinct answers in 10 runs"
    assert answers[0] == alone
    assert busy_seen >= 2  # the probe really shared the server


@pytest.fixture(scope="module")
def gemma():
    if not os.path.exists(GEMMA):
        pytest.skip("Gemma 3 270M not found (set KN_GEMMA)")
    with Server(GEMMA, "--parallel", "2", "--ctx-size", "512") as s:
        yield s


def test_gemma_chat_template(gemma):
    """This Gemma 3 270M file has no chat template (a base model): the server writes the
    messages as plain turns, as kinetic run --chat-format plain does (run's default for
    one prompt stays raw); --chat-format gemma applies the Gemma turns, again as kinetic
    run --chat-format gemma does."""
    msg = "Name three rivers."
    req = {"messages": [{"role": "user", "content": msg}], "max_tokens": 12, "temperature": 0.8,
           "seed": 42}
    cli = run_cli(GEMMA, msg, "-n", 12, "--temp", 0.8, "--seed", 42, "--ctx-size", 512,
                  "--chat-format", "plain")
    st, _, js = gemma.post("/v1/chat/completions", req)
    assert st == 200, js
    assert js["choices"][0]["message"]["content"] == cli["text"]
    assert js["usage"]["prompt_tokens"] == len(cli["prompt_tokens"])
    cli_t = run_cli(GEMMA, msg, "-n", 12, "--temp", 0.8, "--seed", 42, "--ctx-size", 512,
                    "--chat-format", "gemma")
    with Server(GEMMA, "--parallel", "1", "--ctx-size", "512", "--chat-format", "gemma") as s:
        st, _, jt = s.post("/v1/chat/completions", req)
    assert st == 200, jt
    assert jt["choices"][0]["message"]["content"] == cli_t["text"]
    assert jt["usage"]["prompt_tokens"] == len(cli_t["prompt_tokens"])
    # the turn markers are special tokens: <start_of_turn>user\n ... <start_of_turn>model\n
    # (plain's "User: " and "\nAssistant:" are words: 5 tokens around the same text)
    assert jt["usage"]["prompt_tokens"] > js["usage"]["prompt_tokens"]
    assert js["usage"]["prompt_tokens"] == len(run_cli(GEMMA, msg, "-n", 1, "--raw")["prompt_tokens"]) + 5


def test_gemma_openai_streaming(gemma):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=gemma.base + "/v1", api_key="none", max_retries=0, timeout=120)
    kw = dict(model="gemma", messages=[{"role": "user", "content": "Say hello."}], max_tokens=10,
              seed=3, temperature=0.7)
    r = client.chat.completions.create(**kw)
    parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(**kw, stream=True)
             if c.choices]
    assert "".join(parts) == r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")


def verify(path, *extra):
    r = subprocess.run([KINETIC, "verify-receipt", str(path), *extra], capture_output=True,
                       text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def test_receipt_made_under_load_verifies(aid, tmp_path):
    """A receipt made while three other clients keep the server busy verifies
    `identical` with kinetic verify-receipt (a plain rerun on one slot)."""
    with busy_clients(aid, max_tokens=60):
        st, _, chat = aid.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "A dream about the sea"}],
            "max_tokens": 50, "temperature": 0.8, "seed": 42, "receipt": True})
        st2, _, comp = aid.post("/v1/completions", {
            "prompt": "Once upon a time", "temperature": 0.9, "receipt": True})  # fresh seed, no limit
        ev = aid.stream("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "A dream about the sea"}],
            "max_tokens": 50, "temperature": 0.8, "seed": 42, "receipt": True, "stream": True})
    assert st == 200 and st2 == 200, (chat, comp)
    rc = chat["receipt"]
    assert rc["input"] == [{"role": "user", "content": "A dream about the sea"}]
    assert rc["sampling"]["seed"] == 42 and rc["sampling"]["max_tokens"] == 50
    assert rc["output"]["text"] == chat["choices"][0]["message"]["content"]
    assert rc["prompt"]["count"] == chat["usage"]["prompt_tokens"]
    assert rc["device"]["settings"]["ctx-size"] == 128
    assert comp["receipt"]["sampling"]["seed"] == comp["seed"]
    assert comp["receipt"]["input"] == "Once upon a time"
    assert comp["receipt"]["sampling"]["max_tokens"] is None
    final = [e for e in ev if e != "[DONE]" and e["choices"] and e["choices"][0]["finish_reason"]][0]
    assert final["receipt"]["output"] == rc["output"]
    for name, receipt in (("chat", rc), ("completion", comp["receipt"])):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(receipt, indent=2))
        code, out = verify(path)
        assert code == 0 and "rerun: identical" in out, out


def test_signed_receipts(tmp_path):
    if not os.path.exists(AIDREAMS):
        pytest.skip("aidreams260K.gguf not found")
    key = tmp_path / "receipt.key"
    key.write_text("11" * 32 + "\n")
    with Server(AIDREAMS, "--parallel", "2", "--threads", "1", "--sign-key", key) as s:
        st, _, js = s.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Stars"}], "max_tokens": 20, "seed": 5,
            "receipt": True})
    assert st == 200 and len(js["receipt"]["signature"]["ed25519"]) == 128
    path = tmp_path / "signed.json"
    path.write_text(json.dumps(js["receipt"], indent=2))
    code, out = verify(path)
    assert code == 0 and "signature: valid" in out and "rerun: identical" in out, out
    js["receipt"]["sampling"]["seed"] = 6
    path.write_text(json.dumps(js["receipt"], indent=2))
    code, out = verify(path)
    assert code != 0 and "signature" in out, out


def test_verify_endpoint_writes_no_file(tmp_path):
    """POST /verify-receipt verifies the body in memory: it writes no temporary file, so
    it works with TMPDIR an empty folder (left empty) and with TMPDIR a folder that does
    not exist."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with Server(AIDREAMS, "--parallel", "1", "--threads", "1", env={"TMPDIR": str(tmp)}) as s:
        st, _, js = s.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8,
                                               "seed": 3, "receipt": True})
        assert st == 200, js
        receipt = js["receipt"]
        st, _, js = s.post("/verify-receipt", receipt)
        assert st == 200 and js["verified"] is True, js
        assert list(tmp.iterdir()) == []
    gone = tmp_path / "no-such-folder"
    with Server(AIDREAMS, "--parallel", "1", "--threads", "1", env={"TMPDIR": str(gone)}) as s:
        st, _, js = s.post("/verify-receipt", receipt)
        assert st == 200 and js["verified"] is True, js
