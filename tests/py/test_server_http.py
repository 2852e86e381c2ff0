"""The HTTP layer of `kinetic serve`, against the built-in toy model (fast, deterministic):
OpenAI shapes (plain and streaming), the official openai client, hostile and malformed
requests, limits, the queue bound, disconnects, and identical answers under load."""
import hashlib
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from srvutil import KINETIC, Server, busy_clients, fingerprint

BUILD = os.environ.get("KN_BUILD", "build")

KEY = "sk-test-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 24,
        "temperature": 0.8, "seed": 42, "logprobs": True, "top_logprobs": 3}


@pytest.fixture(scope="module")
def srv():
    with Server("--toy", "--parallel", "4", "--ctx-size", "256", "--toy-delay-us", "300",
                "--api-key", KEY, "--timeout", "2", "--max-body", "65536") as s:
        yield s


def check_error(resp, status, words):
    st, h, js = resp
    assert st == status, (st, js)
    assert isinstance(js, dict) and set(js) == {"error"}, js
    err = js["error"]
    assert {"message", "type", "code"} <= set(err), err
    for w in words:
        assert w in err["message"], (w, err["message"])
    return h


def test_health_models_metrics(srv):
    st, _, js = srv.get("/health")  # open without a key
    assert st == 200 and js["status"] == "ok" and js["slots_idle"] == 4
    st, _, js = srv.get("/v1/models", headers=AUTH)
    assert st == 200 and js["object"] == "list" and js["data"][0]["id"] == "toy"
    st, h, text = srv.get("/metrics", headers=AUTH)
    assert st == 200 and h["content-type"].startswith("text/plain")
    assert "kinetic_slots_total 4" in text and "# TYPE kinetic_generated_tokens_total counter" in text


def test_chat_shape(srv):
    st, _, js = srv.post("/v1/chat/completions", CHAT, headers=AUTH)
    assert st == 200, js
    assert js["id"].startswith("chatcmpl-") and js["object"] == "chat.completion"
    assert js["model"] == "toy" and isinstance(js["created"], int) and js["seed"] == 42
    ch = js["choices"][0]
    assert ch["index"] == 0 and ch["message"]["role"] == "assistant"
    assert ch["finish_reason"] in ("stop", "length")
    u = js["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert 1 <= u["completion_tokens"] <= 24
    content = ch["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == ch["message"]["content"]
    for e in content:
        assert e["logprob"] <= 0 and len(e["top_logprobs"]) == 3
        assert bytes(e["bytes"]).decode() == e["token"]
        tops = [t["logprob"] for t in e["top_logprobs"]]
        assert tops == sorted(tops, reverse=True) and e["logprob"] <= tops[0]


def test_no_seed_gets_fresh_seed(srv):
    body = {**CHAT}
    del body["seed"]
    seeds = set()
    for _ in range(2):
        st, _, js = srv.post("/v1/chat/completions", body, headers=AUTH)
        assert st == 200 and isinstance(js["seed"], int) and js["seed"] >= 0
        seeds.add(js["seed"])
    assert len(seeds) == 2
    # the reported seed reproduces the answer
    st, _, again = srv.post("/v1/chat/completions", {**body, "seed": js["seed"]}, headers=AUTH)
    assert fingerprint(again) == fingerprint(js)


def test_completions_and_logprobs(srv):
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 2}
    st, _, js = srv.post("/v1/completions", body, headers=AUTH)
    assert st == 200, js
    assert js["id"].startswith("cmpl-") and js["object"] == "text_completion"
    ch = js["choices"][0]
    lp = ch["logprobs"]
    assert "".join(lp["tokens"]) == ch["text"]
    assert len(lp["token_logprobs"]) == len(lp["tokens"]) == len(lp["text_offset"])
    assert all(len(t) <= 2 for t in lp["top_logprobs"])
    # token ids as the prompt give the same answer as the text
    st, _, tk = srv.post("/tokenize", {"content": "Once upon a time", "add_special": True}, headers=AUTH)
    assert st == 200
    st, _, js2 = srv.post("/v1/completions", {**body, "prompt": tk["tokens"]}, headers=AUTH)
    assert st == 200 and js2["choices"][0]["text"] == ch["text"]
    st, _, dt = srv.post("/detokenize", {"tokens": tk["tokens"][1:]}, headers=AUTH)
    assert st == 200 and dt["content"] == "Once upon a time"


def test_streaming_chat(srv):
    plain = srv.post("/v1/chat/completions", CHAT, headers=AUTH)[2]
    ev = srv.stream("/v1/chat/completions", {**CHAT, "stream": True,
                                              "stream_options": {"include_usage": True}}, headers=AUTH)
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"] == plain["usage"]
    final = chunks[-2]
    assert final["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert final["seed"] == 42
    body = chunks[1:-2]
    assert all(c["choices"][0]["finish_reason"] is None for c in body)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in body)
    assert text == plain["choices"][0]["message"]["content"]
    lps = [e for c in body if c["choices"][0]["logprobs"] for e in c["choices"][0]["logprobs"]["content"]]
    assert lps == plain["choices"][0]["logprobs"]["content"]


def test_streaming_stop_string_held_back(srv):
    base = {"prompt": "abc", "max_tokens": 40, "temperature": 0}
    full = srv.post("/v1/completions", base, headers=AUTH)[2]["choices"][0]["text"]
    assert len(full) > 12
    stop = full[8:11]
    cut = full[:full.index(stop)]
    plain = srv.post("/v1/completions", {**base, "stop": [stop, "zzzzzz"]}, headers=AUTH)[2]
    assert plain["choices"][0]["text"] == cut and plain["choices"][0]["finish_reason"] == "stop"
    ev = srv.stream("/v1/completions", {**base, "stop": stop, "stream": True}, headers=AUTH)
    assert ev[-1] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in ev[:-1]) == cut
    assert ev[-2]["choices"][0]["finish_reason"] == "stop"


def test_openai_client(srv):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=60)
    models = client.models.list()
    assert [m.id for m in models.data] == ["toy"]
    r = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=10, seed=7, temperature=0.8)
    assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens >= 1
    parts = []
    for chunk in client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=10, seed=7, temperature=0.8, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    assert "".join(parts) == r.choices[0].message.content
    c = client.completions.create(model="toy", prompt="Hello", max_tokens=8, temperature=0)
    assert c.object == "text_completion" and c.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "Hi"}], n=17)
    assert "'n'" in str(e.value)
    bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def deep(n):
    return "[" * n + "]" * n


HOSTILE = [
    # (name, method, path, body, headers, status, words)
    ("bad json", "POST", "/v1/chat/completions", '{"messages": [', None, 400, ["not valid JSON"]),
    ("empty body", "POST", "/v1/chat/completions", "", None, 400, ["empty"]),
    ("not an object", "POST", "/v1/chat/completions", "[1, 2]", None, 400, ["JSON object"]),
    ("duplicate key", "POST", "/v1/completions", '{"prompt":"a","prompt":"b"}', None, 400, ["duplicate"]),
    ("messages wrong type", "POST", "/v1/chat/completions", {"messages": "hi"}, None, 400, ["'messages' must be an array"]),
    ("missing messages", "POST", "/v1/chat/completions", {"max_tokens": 5}, None, 400, ["'messages' is required"]),
    ("empty messages", "POST", "/v1/chat/completions", {"messages": []}, None, 400, ["empty"]),
    ("bad role", "POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, None, 400, ["role"]),
    ("image part", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, None, 400, ["only text"]),
    ("content wrong type", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, None, 400, ["content"]),
    ("negative max_tokens", "POST", "/v1/completions", {"prompt": "a", "max_tokens": -5}, None, 400, ["n_predict (max_tokens) must be -1 or between 1 and 1048576", "not -5"]),
    ("negative n_predict", "POST", "/v1/completions", {"prompt": "a", "n_predict": -5}, None, 400, ["n_predict (max_tokens) must be", "not -5"]),
    ("huge n_predict", "POST", "/v1/completions", {"prompt": "a", "n_predict": 2 ** 40}, None, 400, ["1048576", "not 1099511627776"]),
    ("huge max_tokens", "POST", "/v1/completions", {"prompt": "a", "max_tokens": 10 ** 12}, None, 400, ["max_tokens", "1048576"]),
    ("max_tokens string", "POST", "/v1/completions", {"prompt": "a", "max_tokens": "10"}, None, 400, ["integer"]),
    ("max_tokens float", "POST", "/v1/completions", {"prompt": "a", "max_tokens": 2.5}, None, 400, ["integer"]),
    ("temperature too high", "POST", "/v1/completions", {"prompt": "a", "temperature": 500}, None, 400, ["temperature must be between 0 and 100 (0: greedy), not 500"]),
    ("temperature string", "POST", "/v1/completions", {"prompt": "a", "temperature": "hot"}, None, 400, ["number"]),
    ("top_p above 1", "POST", "/v1/completions", {"prompt": "a", "top_p": 1.5}, None, 400, ["top_p must be between 0 and 1"]),
    ("n=17", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 17}, None, 400, ["'n'"]),
    ("negative seed", "POST", "/v1/completions", {"prompt": "a", "seed": -1}, None, 400, ["seed must be between 0 and 9223372036854775807, not -1"]),
    ("seed 2^63", "POST", "/v1/completions", {"prompt": "a", "seed": 2 ** 63}, None, 400, ["seed must be between 0 and 9223372036854775807, not 9223372036854775808"]),
    ("too many top_logprobs", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 50}, None, 400, ["top_logprobs"]),
    ("top_logprobs without logprobs", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, None, 400, ["logprobs"]),
    ("too many stops", "POST", "/v1/completions", {"prompt": "a", "stop": ["x"] * 20}, None, 400, ["stop"]),
    ("stop wrong type", "POST", "/v1/completions", {"prompt": "a", "stop": 3}, None, 400, ["stop"]),
    ("stream not bool", "POST", "/v1/completions", {"prompt": "a", "stream": "yes"}, None, 400, ["stream"]),
    ("missing prompt", "POST", "/v1/completions", {"max_tokens": 3}, None, 400, ["'prompt' is required"]),
    ("several prompts", "POST", "/v1/completions", {"prompt": ["a", "b"]}, None, 400, ["only one prompt"]),
    ("bad token id", "POST", "/v1/completions", {"prompt": [1, 99999]}, None, 400, ["token id"]),
    ("NUL in prompt", "POST", "/v1/completions", {"prompt": "Hi\u0000 and a bomb"}, None, 400, ["'prompt' contains a NUL character"]),
    ("NUL in message", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi\u0000 x"}]}, None, 400, ["messages[0].content contains a NUL character"]),
    ("prompt too long", "POST", "/v1/completions", {"prompt": "x" * 400}, None, 400, ["401 tokens", "holds 256"]),
    ("receipt unavailable", "POST", "/v1/completions", {"prompt": "a", "receipt": True}, None, 400, ["receipt"]),
    ("logit_bias range", "POST", "/v1/completions", {"prompt": "a", "logit_bias": {"99999": 10}}, None, 400, ["logit_bias"]),
    ("logit_bias type", "POST", "/v1/completions", {"prompt": "a", "logit_bias": {"5": "x"}}, None, 400, ["logit_bias"]),
    ("dry base range", "POST", "/v1/completions", {"prompt": "a", "dry_multiplier": 0.8, "dry_base": -3}, None, 400, ["dry_base"]),
    ("dry breakers type", "POST", "/v1/completions", {"prompt": "a", "dry_multiplier": 0.8, "dry_sequence_breakers": 5}, None, 400, ["dry_sequence_breakers"]),
    ("bad gbnf", "POST", "/v1/completions", {"prompt": "a", "grammar": 'root ::= "a" (b'}, None, 400, ["grammar", "line 1, column"]),
    ("gbnf undefined rule", "POST", "/v1/completions", {"prompt": "a", "grammar": 'root ::= x\n'}, None, 400, ["line 1", "'x'"]),
    ("grammar type", "POST", "/v1/completions", {"prompt": "a", "grammar": 7}, None, 400, ["'grammar' must be a string"]),
    ("two grammars", "POST", "/v1/completions", {"prompt": "a", "grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, None, 400, ["only one"]),
    ("bad schema", "POST", "/v1/completions", {"prompt": "a", "json_schema": {"type": "string", "pattern": "a+"}}, None, 400, ["pattern", "json_schema"]),
    ("response_format type", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
     "response_format": {"type": "yaml"}}, None, 400, ["yaml"]),
    ("response_format schema", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
     "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}}, None, 400, ["response_format", "nope"]),
    ("reasoning_format", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
     "reasoning_format": "hidden"}, None, 400, ["reasoning_format"]),
    ("typical_p range", "POST", "/v1/completions", {"prompt": "a", "typical_p": 7}, None, 400, ["typical_p"]),
    ("json schema", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
     "response_format": {"type": "json_schema"}}, None, 400, ["response_format"]),
    ("tools", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
     "tools": [{"type": "function"}]}, None, 400, ["tools"]),
    ("deep nesting", "POST", "/v1/completions", '{"prompt":"a","x":' + deep(200) + "}", None, 400, ["nest"]),
    ("bad utf-8", "POST", "/v1/completions", b'{"prompt":"\xff\xfe"}', {"Content-Type": "application/json"}, 400, ["UTF-8"]),
    ("text/plain", "POST", "/v1/completions", b'{"prompt":"a"}', {"Content-Type": "text/plain"}, 415, ["Content-Type"]),
    ("form", "POST", "/v1/chat/completions", b"a=b", {"Content-Type": "application/x-www-form-urlencoded"}, 415, ["JSON"]),
    ("huge body", "POST", "/v1/completions", '{"prompt":"' + "a" * 100000 + '"}', None, 413, ["larger than 65536"]),
    ("unknown endpoint", "GET", "/v1/engines", None, None, 404, ["unknown endpoint"]),
    ("wrong method", "GET", "/v1/chat/completions", None, None, 405, ["use POST"]),
    ("delete models", "DELETE", "/v1/models", None, None, 405, ["use GET"]),
    ("tokenize wrong type", "POST", "/tokenize", {"content": 5}, None, 400, ["content"]),
    ("detokenize bad id", "POST", "/detokenize", {"tokens": [-1]}, None, 400, ["token id"]),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile(srv, case):
    name, method, path, body, headers, status, words = case
    h = {**AUTH, **(headers or {})}
    st, hd, data = srv.request(method, path, body, headers=h)
    js = json.loads(data)
    check_error((st, hd, js), status, words)
    if status == 405:
        assert hd["allow"] in ("GET", "POST")
    # the server keeps serving
    st, _, js = srv.post("/v1/completions", {"prompt": "ok", "max_tokens": 2}, headers=AUTH)
    assert st == 200, js


def test_auth(srv):
    body = {"prompt": "a", "max_tokens": 2}
    h = check_error(srv.post("/v1/completions", body), 401, ["API key"])
    assert h["www-authenticate"] == "Bearer"
    check_error(srv.post("/v1/completions", body, headers={"Authorization": "Bearer nope"}), 401, ["API key"])
    check_error(srv.post("/v1/completions", body, headers={"Authorization": f"Basic {KEY}"}), 401, ["API key"])
    check_error(srv.get("/v1/models", headers={"Authorization": f"Bearer {KEY}x"}), 401, ["API key"])
    assert srv.get("/health")[0] == 200


def test_chunked_huge_body(srv):
    c = srv.conn()
    c.putrequest("POST", "/v1/completions")
    c.putheader("Content-Type", "application/json")
    c.putheader("Authorization", AUTH["Authorization"])
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    piece = b"a" * 8192
    try:
        c.send(b'%x\r\n{"prompt":"\r\n' % len(b'{"prompt":"'))
        for _ in range(12):
            c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        c.send(b'2\r\n"}\r\n0\r\n\r\n')
        r = c.getresponse()
        assert r.status == 413 and b"larger than" in r.read()
    finally:
        c.close()


def test_huge_header(srv):
    st, _, _ = srv.request("GET", "/health", headers={"X-Big": "a" * 100000})
    assert st in (413, 431)
    assert srv.get("/health")[0] == 200


def test_slow_client_is_dropped(srv):
    s = socket.create_connection(("127.0.0.1", srv.port))
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # never finishes
        s.settimeout(10)
        t0 = time.time()
        data = s.recv(100)
        assert time.time() - t0 < 9  # closed by the 2 s idle timeout, not by us
        assert data == b""
    finally:
        s.close()
    assert srv.post("/v1/completions", {"prompt": "ok", "max_tokens": 2}, headers=AUTH)[0] == 200


def test_disconnect_cancels():
    with Server("--toy", "--parallel", "2", "--toy-delay-us", "20000") as srv:
        for stream in (False, True):
            body = json.dumps({"prompt": "long", "max_tokens": 250, "stream": stream}).encode()
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            time.sleep(0.5)
            assert srv.get("/health")[2]["slots_processing"] >= 1
            s.close()
        deadline = time.time() + 5  # 250 tokens take 5 s: a cancelled job ends sooner
        while srv.metric("kinetic_completions_cancelled_total") < 2:
            assert time.time() < deadline, "a disconnected client's job was not cancelled"
            time.sleep(0.05)
        srv.wait_idle(timeout=2)
        assert srv.metric("kinetic_completions_total") == 0


def run_concurrently(fns):
    out = [None] * len(fns)
    errs = []

    def run(i):
        try:
            out[i] = fns[i]()
        except Exception as e:  # reported below
            errs.append(e)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    return out


def test_same_answer_alone_and_under_load(srv):
    """The acceptance test: 10 runs of one request while 3 other clients keep every slot
    busy with different long requests give 1 distinct answer (text, tokens, logprobs),
    equal to the answer alone."""
    srv.wait_idle()
    alone = fingerprint(srv.post("/v1/chat/completions", CHAT, headers=AUTH)[2])
    answers = []
    with busy_clients(srv, max_tokens=70, headers=AUTH, settle=0.2) as counts:
        for _ in range(10):
            st, _, js = srv.post("/v1/chat/completions", CHAT, headers=AUTH)
            assert st == 200, js
            answers.append(fingerprint(js))
    assert all(c >= 1 for c in counts)
    distinct = {hashlib.sha256(a.encode()).hexdigest() for a in answers}
    assert len(answers) == 10 and len(distinct) == 1, f"{len(distinct)} distinct answers in 10 runs"
    assert answers[0] == alone
    assert srv.metric("kinetic_scheduler_steps_total", headers=AUTH) > 0


def test_np_is_parallel():
    # llama-server's -np N names the slot count too.
    with Server("--toy", "-np", "3") as s:
        assert s.metric("kinetic_slots_total") == 3


def test_queue_full_gets_503():
    with Server("--toy", "--parallel", "1", "--queue", "1", "--toy-delay-us", "20000") as s:
        body = {"prompt": "x", "max_tokens": 100}
        results = run_concurrently([lambda: s.post("/v1/completions", body) for _ in range(4)])
        statuses = sorted(r[0] for r in results)
        assert statuses.count(200) >= 2 and 503 in statuses, statuses
        busy = [r for r in results if r[0] == 503][0]
        assert busy[1]["retry-after"] == "1"
        assert busy[2]["error"]["code"] == "server_busy" and "busy" in busy[2]["error"]["message"]
        s.wait_idle()
        assert s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 200


def sigterm_during_requests(*args, signals=1):
    """Three 200-token requests on 2 slots at 20 ms a step (about 8 s of work), then
    SIGTERM (twice: signals=2); returns (statuses, seconds the stop took, stderr)."""
    s = Server("--toy", "--parallel", "2", "--toy-delay-us", "20000", *args)
    results = []

    def req():
        results.append(s.post("/v1/completions", {"prompt": "x", "max_tokens": 200})[0])

    ts = [threading.Thread(target=req) for _ in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    t0 = time.time()
    s.proc.terminate()
    if signals == 2:
        time.sleep(0.3)
        s.proc.terminate()
    try:  # wait for the exit itself: Server.stop would send a second SIGTERM
        s.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    rc = s.stop(timeout=60)
    for t in ts:
        t.join(60)
    assert rc == 0, s.stderr
    assert "stopped" in s.stderr, s.stderr
    return sorted(results), time.time() - t0, s.stderr


def test_sigterm_drains_running_requests():
    # the default: admitted requests (running or queued) finish, then the server exits
    statuses, took, err = sigterm_during_requests()
    assert statuses == [200, 200, 200], (statuses, err)
    assert "draining" in err and "drained, shutting down" in err, err
    assert took < 30, took


def test_sigterm_without_drain_stops_at_once():
    # --drain-timeout 0, or a second signal: running requests end with 503 at once
    for args, signals in ((["--drain-timeout", "0"], 1), ([], 2)):
        statuses, took, err = sigterm_during_requests(*args, signals=signals)
        assert statuses == [503, 503, 503], (args, statuses, err)
        assert took < 10 and ("shutting down" in err or "stopping now" in err), (took, err)


def test_max_tokens_beyond_context_ends_with_length(srv):
    st, _, js = srv.post("/v1/completions", {"prompt": "x" * 200, "max_tokens": 5000,
                                             "temperature": 0}, headers=AUTH)
    assert st == 200, js
    u = js["usage"]
    # as kinetic run: the last token is sampled but never fed, so it may be the 257th
    assert u["prompt_tokens"] + u["completion_tokens"] <= 257


def test_ignore_eos_for_benchmarks(srv):
    body = {"prompt": "abc", "max_tokens": 200, "temperature": 1.0, "seed": 3}
    plain = srv.post("/v1/completions", body, headers=AUTH)[2]
    full = srv.post("/v1/completions", {**body, "ignore_eos": True}, headers=AUTH)[2]
    assert full["usage"]["completion_tokens"] == 200 and full["choices"][0]["finish_reason"] == "length"
    assert full["choices"][0]["text"].startswith(plain["choices"][0]["text"])
    check_error(srv.post("/v1/completions", {**body, "ignore_eos": True, "receipt": True},
                         headers=AUTH), 400, ["ignore_eos"])


def test_long_generation_outlives_idle_timeout():
    """The idle timeout (--timeout 1) cuts silent clients, not answers that take longer."""
    with Server("--toy", "--parallel", "1", "--timeout", "1", "--toy-delay-us", "15000") as s:
        t0 = time.time()
        st, _, js = s.post("/v1/completions", {"prompt": "x", "max_tokens": 120, "ignore_eos": True})
        assert st == 200 and js["usage"]["completion_tokens"] == 120, js
        ev = s.stream("/v1/completions", {"prompt": "x", "max_tokens": 120, "ignore_eos": True,
                                          "stream": True})
        assert ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"] == "length"
        assert time.time() - t0 > 2


def test_unknown_parameters_ignored(srv):
    body = {"prompt": "abc", "max_tokens": 5, "temperature": 0, "user": "u1", "foo": {"bar": [1]},
            "logit_bias": {}, "response_format": {"type": "text"}, "tools": [], "model": "whatever",
            "metadata": None}
    st, _, js = srv.post("/v1/completions", body, headers=AUTH)
    assert st == 200, js
    plain = srv.post("/v1/completions", {"prompt": "abc", "max_tokens": 5, "temperature": 0},
                     headers=AUTH)[2]
    assert js["choices"][0]["text"] == plain["choices"][0]["text"]


def test_samplers_of_issue_10(srv):
    """logit_bias (OpenAI's form) bans a token; requests with typical_p, top_n_sigma, xtc,
    Mirostat or a sampler order are accepted and give the same answer twice."""
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
    st, _, js = srv.post("/v1/completions", body, headers=AUTH)
    assert st == 200, js
    text = js["choices"][0]["text"]
    first = text.encode("latin-1", "replace")[0]  # the toy model's tokens are bytes
    st, _, js2 = srv.post("/v1/completions", {**body, "logit_bias": {str(first): -100}}, headers=AUTH)
    assert st == 200, js2
    assert js2["choices"][0]["text"].encode("latin-1", "replace")[0] != first
    for extra in ({"typical_p": 0.5}, {"top_n_sigma": 1.0}, {"xtc_probability": 0.9, "xtc_threshold": 0.01},
                  {"mirostat": 2, "mirostat_tau": 3.0}, {"samplers": ["top_k", "temperature"]}):
        req = {**body, "temperature": 1.0, "seed": 5, **extra}
        answers = set()
        for _ in range(2):
            st, _, js3 = srv.post("/v1/completions", req, headers=AUTH)
            assert st == 200, (extra, js3)
            answers.add(js3["choices"][0]["text"])
        assert len(answers) == 1, extra


def test_props_is_the_settings_table(srv, tmp_path):
    """GET /props (llama-server's shape): its params are every row of the sampling settings
    table with the table's default, the server's seed and limit rules on top, and the same
    defaults `kinetic run` records; the web page fills its fields from here."""
    table = json.loads(subprocess.run([os.path.join(BUILD, "tests", "sample_table")],
                                      capture_output=True, text=True, check=True,
                                      timeout=60).stdout)
    assert srv.get("/props")[0] == 401  # behind the API key, as /v1/models
    st, _, props = srv.get("/props", headers=AUTH)
    assert st == 200, props
    g = props["default_generation_settings"]
    params = g["params"]
    assert set(params) == {r["key"] for r in table} | {"n_predict"}, params
    for r in table:
        # a fresh seed per request (-1); no limit but the context (--max-tokens not given)
        want = {"seed": -1, "n_predict": None}.get(r["name"], r["default"])
        assert params[r["key"]] == want, (r["name"], params[r["key"]], want)
    assert params["n_predict"] == -1 and params["top_k"] == 50
    assert g["n_ctx"] == 256 and g["is_processing"] is False and props["total_slots"] == 4
    assert props["model_alias"] == "toy" and props["receipts"] is False and props["build_info"]
    assert props["modalities"] == {"vision": False, "audio": False}
    # a model file: the same defaults as `kinetic run` with no sampling flags (the rows
    # every receipt records), and --max-tokens as the server's limit
    model = tmp_path / "m.gguf"
    subprocess.run([KINETIC, "synth", "--arch", "llama", "--dims",
                    "dim=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=512,ctx=256",
                    "-o", str(model)], check=True, capture_output=True, timeout=120)
    path = tmp_path / "run.json"
    subprocess.run([KINETIC, "run", str(model), "hello", "-n", "2", "--seed", "1", "--receipt",
                    str(path)], check=True, capture_output=True, timeout=120)
    ran = json.loads(path.read_text())["sampling"]
    with Server(model, "--threads", 1, "--parallel", 1, "--max-tokens", 7) as s:
        st, _, props = s.get("/props")
        assert st == 200, props
        p = props["default_generation_settings"]["params"]
        for r in table:
            if r["always"] and r["name"] not in ("seed", "n_predict"):
                assert p[r["key"]] == ran[r["key"]], (r["key"], p[r["key"]], ran[r["key"]])
        assert p["n_predict"] == 7 and p["max_tokens"] == 7, p
        assert props["model_path"] == str(model) and props["receipts"] is True
        assert props["total_slots"] == 1 and props["default_generation_settings"]["n_ctx"] == 256
