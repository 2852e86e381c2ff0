"""`kinetic serve`'s speed features (docs/speed.md) never change a token: RAD-1 drafting,
Warm Start (slot reuse and the shared prompt cache) and Zero Wait (POST /prefill), each
on and off, alone and with three other clients, at many cache split points, with drafts
all, partly and never accepted; tokens and logprobs are compared with a server that has
every feature off. Also: timings and /stats counters, receipts of a drafted and cached
request verify `identical`, the switches."""
import json
import os
import subprocess

import pytest

from srvutil import GEMMA, KINETIC, DATA, Server, busy_clients, fingerprint, sanitizer_build

AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")
PLAIN = ("--no-draft", "--no-warm-start")
REPEAT = "repeat this text: the sun, the moon and the stars. the sun, the moon and the stars."


def aid_server(*extra):
    # --chat-format raw: the model has no template; the Zero Wait bounds below count a raw
    # prompt's tokens (plain turns close the user turn with "\nAssistant:", 3 tokens more
    # that a partial message's prefill cannot share)
    return Server(AIDREAMS, "--parallel", "4", "--threads", "1", "--chat-format", "raw", *extra)


@pytest.fixture(scope="module")
def plain():
    if not os.path.exists(AIDREAMS):
        pytest.skip("aidreams260K.gguf not found")
    with aid_server(*PLAIN) as s:
        yield s


@pytest.fixture(scope="module")
def full():
    if not os.path.exists(AIDREAMS):
        pytest.skip("aidreams260K.gguf not found")
    with aid_server() as s:
        yield s


PROMPTS = [REPEAT, "Once upon a time", "The moon", "I dream of the sea, the sea, the sea",
           "Classification whispers secrets, as I adjust. Classification whispers secrets,",
           "a b c d a b c d a b c d a b", "Stars", "Petals unfold like petals unfold like"]
SETTINGS = [(0.0, 1), (0.8, 42), (1.0, 7), (1.3, 1234)]


def request(k, prompt, temp, seed):
    """Chat with top logprobs, or a completion with logprobs; some force one token (every
    draft accepted) or lift two (a random two-token text: drafts partly accepted)."""
    body = {"max_tokens": 40 + 7 * (k % 5), "temperature": temp, "seed": seed}
    if k % 2:
        body.update(messages=[{"role": "user", "content": prompt}], logprobs=True,
                    top_logprobs=3)
    else:
        body.update(prompt=prompt, logprobs=3)
    if k % 7 == 3:
        body["logit_bias"] = {"300": 40}
    elif k % 7 == 5:
        body["logit_bias"] = {"300": 12, "301": 12}
    if k % 9 == 8:
        body.update(mirostat=2, mirostat_tau=4.0)
    return body


def path(body):
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


def ask(server, body):
    st, _, js = server.post(path(body), body)
    assert st == 200, js
    return js


def cases():
    k = 0
    for p in PROMPTS:
        for temp, seed in SETTINGS:
            yield request(k, p, temp, seed)
            k += 1


@pytest.fixture(scope="module")
def reference(plain):
    return [fingerprint(ask(plain, b)) for b in cases()]


# Under the sanitizers each feature alone is left to test_server_speed.c (same code).
ASAN_SKIP = pytest.mark.skipif(sanitizer_build(), reason="sanitizer build: covered by the C test")


@pytest.mark.parametrize("flags", [(), pytest.param(("--no-warm-start",), marks=ASAN_SKIP),
                                   pytest.param(("--no-draft",), marks=ASAN_SKIP),
                                   ("--draft-max", "3", "--cache-ram", "0")])
def test_invariance(reference, flags):
    """32 requests (8 prompts x 4 temperatures/seeds), each twice (the second reuses the
    first's prompt): identical to the all-off server, whatever feature is on."""
    with aid_server(*flags) as s:
        all_acc = some = none = reused = 0
        for i, body in enumerate(cases()):
            for rep in range(2):
                js = ask(s, body)
                assert fingerprint(js) == reference[i], (flags, body, rep)
                t = js["timings"]
                all_acc += t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"]
                some += 0 < t["draft_n_accepted"] < t["draft_n"]
                none += t["draft_n"] > 0 and t["draft_n_accepted"] == 0
                reused += rep == 1 and t["cache_n"] >= t["prompt_n"]
                assert t["cache_n"] + t["prompt_n"] == js["usage"]["prompt_tokens"]
        stats = s.get("/stats")[2]
    if "--no-draft" in flags:
        assert stats["draft"]["enabled"] is False and stats["draft"]["proposed"] == 0
    else:
        assert all_acc and some and none, (all_acc, some, none)
        assert 0 < stats["draft"]["accepted"] < stats["draft"]["proposed"]
    if "--no-warm-start" in flags:
        assert stats["warm_start"]["prompt_tokens_reused"] == 0 and reused == 0
    else:
        assert reused >= 30, reused  # the repeat found its prompt (all but the last token)
        assert stats["warm_start"]["prompt_tokens_reused"] > 0


def test_cache_split_points(plain, full):
    """POST /prefill of the first k tokens, then the whole prompt: k positions come from
    the cache (cache_n), the answer is the cold one, for k from 1 to the whole prompt."""
    text = "In my dream the stars were singing softly to the sleeping sea, and I"
    ids = full.post("/tokenize", {"content": "x " + text, "add_special": True})[2]["tokens"]
    n = len(ids)
    assert n > 12
    for k in sorted({1, 2, 3, n // 3, n // 2, n - 2, n - 1, n}):
        st, _, ids_k = full.post("/tokenize", {"content": f"{k} " + text, "add_special": True})
        ids_k = ids_k["tokens"]
        st, _, pre = full.post("/prefill", {"prompt": ids_k[:k]})
        assert st == 200 and pre["tokens"] == k and pre["enabled"], pre
        body = {"prompt": ids_k, "max_tokens": 30, "temperature": 0.9, "seed": k, "logprobs": 2}
        js = ask(full, body)
        assert fingerprint(js) == fingerprint(ask(plain, body)), k
        want = min(k, len(ids_k) - 1)
        assert want <= js["timings"]["cache_n"] <= max(want, 2), (k, js["timings"])


def test_prefill_partial_chat(plain, full):
    """Zero Wait as a UI uses it: the chat so far, the last message still being typed;
    the real request reuses what the prefill evaluated and answers as a cold server."""
    msgs = [{"role": "system", "content": "You write short dreamy lines about the sky."},
            {"role": "user", "content": "Tell me about the moon and the quiet stars tonight"}]
    partial = [msgs[0], {"role": "user", "content": msgs[1]["content"][:-9]}]
    before = full.get("/stats")[2]["zero_wait"]["prefills"]
    st, _, pre = full.post("/prefill", {"messages": partial})
    assert st == 200 and pre["tokens"] == pre["prompt_tokens"] > 10, pre
    body = {"messages": msgs, "max_tokens": 40, "temperature": 0.7, "seed": 3, "logprobs": True,
            "top_logprobs": 2}
    js = ask(full, body)
    assert fingerprint(js) == fingerprint(ask(plain, body))
    assert js["timings"]["cache_n"] >= pre["tokens"] - 4
    z = full.get("/stats")[2]["zero_wait"]
    assert z["prefills"] == before + 1 and z["enabled"]


def test_drafted_cached_under_load(plain, full):
    """A request that hits the cache and drafts while three other clients keep the other
    slots busy gives its alone-and-cold tokens, every time; streaming included."""
    probe = {"prompt": REPEAT, "max_tokens": 60, "temperature": 0.8, "seed": 99, "logprobs": 3}
    cold = fingerprint(ask(plain, probe))
    ask(full, probe)  # now cached
    busy_seen = 0
    with busy_clients(full, max_tokens=60, settle=0.2):
        for _ in range(6):
            js = ask(full, probe)
            assert fingerprint(js) == cold
            assert js["timings"]["cache_n"] > 0 and js["timings"]["draft_n"] > 0
            busy_seen = max(busy_seen, full.get("/health")[2]["slots_processing"])
        ev = full.stream("/v1/completions", {**probe, "stream": True})
        text = "".join(e["choices"][0]["text"] for e in ev if e != "[DONE]" and e["choices"])
        assert text == json.loads(cold)[0]
        final = [e for e in ev if e != "[DONE]" and e["choices"] and e["choices"][0]["finish_reason"]]
        assert final[0]["timings"]["draft_n"] > 0
    assert busy_seen >= 2


def test_openai_client(plain, full):
    openai = pytest.importorskip("openai")
    kw = dict(model="aid", messages=[{"role": "user", "content": REPEAT}], max_tokens=40,
              seed=5, temperature=0.6, logprobs=True, top_logprobs=2)
    answers = []
    for s in (plain, full, full):
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=60)
        r = c.chat.completions.create(**kw)
        answers.append((r.choices[0].message.content,
                        [(t.token, t.logprob) for t in r.choices[0].logprobs.content]))
        parts = [ch.choices[0].delta.content or "" for ch in
                 c.chat.completions.create(**kw, stream=True) if ch.choices]
        assert "".join(parts) == r.choices[0].message.content
    assert answers[0] == answers[1] == answers[2]


def verify(path_):
    r = subprocess.run([KINETIC, "verify-receipt", str(path_)], capture_output=True, text=True,
                       timeout=300)
    return r.returncode, r.stdout + r.stderr


def test_receipt_of_drafted_cached_request(full, tmp_path):
    body = {"prompt": "Once upon a time", "max_tokens": 100, "temperature": 0.0, "seed": 8,
            "receipt": True}
    ask(full, body)
    js = ask(full, body)
    t = js["timings"]
    assert t["cache_n"] > 0 and t["draft_n_accepted"] > 0, t
    p = tmp_path / "r.json"
    p.write_text(json.dumps(js["receipt"], indent=2))
    code, out = verify(p)
    assert code == 0 and "rerun: identical" in out, out


def test_toy_stats_and_switches():
    """Per-request timings add up to /stats; --no-zero-wait and --no-warm-start turn
    /prefill into a no-op; bad values are refused."""
    with Server("--toy", "--parallel", "2") as s:
        tot_n = tot_acc = 0
        for k in range(6):
            body = {"prompt": "ab ab ab ab ab ab " * (k + 1), "max_tokens": 30, "seed": k,
                    "logit_bias": {"97": 30} if k % 2 else {"97": 9, "98": 9, "32": 9}}
            js = ask(s, body)
            tot_n += js["timings"]["draft_n"]
            tot_acc += js["timings"]["draft_n_accepted"]
        st = s.get("/stats")[2]
        assert (st["draft"]["proposed"], st["draft"]["accepted"]) == (tot_n, tot_acc)
        assert 0 < tot_acc < tot_n and st["completions"] == 6
        pre = s.post("/prefill", {"prompt": "hello"})[2]
        assert pre["enabled"] and pre["tokens"] == 6  # BOS + 5 bytes
        st = s.get("/stats")[2]
        assert st["completions"] == 6 and st["warm_start"]["cache"]["stores"] >= 7
        assert s.metric("kinetic_draft_tokens_total") == tot_n + tot_acc
        assert s.metric("kinetic_prefills_total") == 1
        assert s.post("/prefill", {"prompt": []})[0] == 400
    for flag in ("--no-zero-wait", "--no-warm-start"):
        with Server("--toy", flag) as s:
            pre = s.post("/prefill", {"messages": [{"role": "user", "content": "hi"}]})[2]
            assert pre["tokens"] == 0 and pre["enabled"] is False
            assert s.get("/stats")[2]["zero_wait"]["enabled"] is False
    for bad in (("--draft-max", "-1"), ("--draft-max", "300"), ("--cache-ram", "-5")):
        r = subprocess.run([KINETIC, "serve", "--toy", "--port", "0", *bad], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2 and "out of range" in r.stderr, r.stderr


@pytest.mark.skipif(not os.path.exists(GEMMA), reason="no Gemma 3 270M (set KN_GEMMA)")
@pytest.mark.skipif(sanitizer_build(), reason="sanitizer build: too slow")
def test_gemma_drafts_and_cache():
    """Gemma 3 270M: copying code drafts well; tokens and logprobs equal the all-off
    server's, before and after the prompt is cached."""
    code = ("def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n")
    body = {"prompt": "Copy this code exactly:\n" + code + "\nCopy:\n", "max_tokens": 40,
            "temperature": 0.0, "seed": 1, "logprobs": 2}
    hot = dict(body, temperature=0.7)
    with Server(GEMMA, "--parallel", "2", "--ctx-size", "256", *PLAIN) as s:
        ref = [fingerprint(ask(s, b)) for b in (body, hot)]
    with Server(GEMMA, "--parallel", "2", "--ctx-size", "256") as s:
        got = []
        for b in (body, hot, body):
            js = ask(s, b)
            got.append(fingerprint(js))
        assert js["timings"]["cache_n"] > 0 and js["timings"]["draft_n_accepted"] > 0, js["timings"]
    assert got == [ref[0], ref[1], ref[0]]
