"""Gateway-ready operations of `kinetic serve` (issue 21 item 6), against the toy model:
the server answers while its model loads (/health 503, then 200), /metrics carries
llama-server's gauges (queue length, KV-cache utilization) that the Gateway API Inference
Extension's endpoint picker reads, GET /slots in llama-server's shape, and --cors."""
import json
import re
import threading
import time

from srvutil import Server

KEY = "sk-gw"
AUTH = {"Authorization": f"Bearer {KEY}"}


def metrics(s):
    st, _, text = s.get("/metrics", headers=AUTH)
    assert st == 200, text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def long_request(s, results, max_tokens=120, seed=5):
    """A streamed completion kept running long enough to be seen busy (toy delay)."""
    ev = s.stream("/v1/completions", {"prompt": "a long one", "max_tokens": max_tokens,
                                      "seed": seed, "temperature": 0.7, "ignore_eos": True,
                                      "typical_p": 0.9, "stream": True}, headers=AUTH)
    results.append(ev)


def wait_for(pred, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def test_listens_while_loading_then_ready():
    """The first line names the port it answers on while the model loads (/health 503
    then, tests/unit/test_server_loading.c checks the answers); the "listening on" line
    comes once it is ready, and /health is 200."""
    with Server("--toy", "--parallel", 2) as s:
        assert len(s.lines) >= 2, s.lines
        m = re.search(r"loading the toy model; answering on http://127\.0\.0\.1:(\d+) "
                      r"\(/health: 503 until ready\)", s.lines[0])
        assert m and int(m.group(1)) == s.port, s.lines
        assert "listening on" in s.lines[-1]
        st, _, js = s.get("/health")
        assert st == 200 and js["status"] == "ok", js


def test_metrics_gauges_and_slots_while_busy():
    with Server("--toy", "--parallel", 2, "--ctx-size", 256, "--toy-delay-us", 20000,
                "--api-key", KEY) as s:
        m = metrics(s)
        for name in ("llamacpp:requests_processing", "llamacpp:requests_deferred",
                     "llamacpp:kv_cache_usage_ratio", "llamacpp:kv_cache_tokens",
                     "llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total",
                     "llamacpp:n_decode_total"):
            assert name in m, (name, sorted(m))
        assert m["llamacpp:requests_processing"] == 0 and m["llamacpp:kv_cache_usage_ratio"] == 0
        assert m["kinetic_kv_cache_positions"] == 2 * 256
        st, _, slots = s.get("/slots", headers=AUTH)
        assert st == 200 and [x["id"] for x in slots] == [0, 1], slots
        assert all(not x["is_processing"] and x["n_ctx"] == 256 and x["id_task"] == -1
                   for x in slots), slots
        assert s.get("/slots")[0] == 401  # behind the API key, as the other endpoints

        results = []
        t = threading.Thread(target=long_request, args=(s, results))
        t.start()
        busy = wait_for(lambda: [x for x in s.get("/slots", headers=AUTH)[2]
                                 if x["is_processing"] and x["next_token"]["n_decoded"] > 2])
        x = busy[0]
        assert x["params"]["seed"] == 5 and x["params"]["temperature"] == 0.7, x
        assert x["params"]["max_tokens"] == 120 and x["params"]["ignore_eos"] is True
        # the settings table writes them (src/sample/settings.c), as receipts have them:
        # every base row, the secondary rows that are on (typical_p), not those off
        params = x["params"]
        for key in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                    "presence_penalty", "frequency_penalty", "repeat_last_n", "seed"):
            assert key in params, (key, params)
        assert params["typical_p"] == 0.9 and "xtc_probability" not in params, params
        nt = x["next_token"]
        assert nt["has_next_token"] and nt["n_remain"] == 120 - nt["n_decoded"], x
        m = metrics(s)
        assert m["llamacpp:requests_processing"] == 1
        used = m["llamacpp:kv_cache_tokens"]
        assert used >= x["n_prompt_tokens"], (m, x)
        assert m["llamacpp:kv_cache_usage_ratio"] == round(used / 512, 6)
        t.join()
        ev = results[0]
        assert ev[-1] == "[DONE]"
        s.wait_idle()
        st, _, slots = s.get("/slots", headers=AUTH)
        done = [x for x in slots if x["id_task"] == busy[0]["id_task"]][0]
        assert not done["is_processing"] and done["next_token"]["n_decoded"] == 120, done
        assert done["next_token"]["n_remain"] == 0
        m = metrics(s)
        assert m["llamacpp:requests_processing"] == 0 and m["llamacpp:kv_cache_usage_ratio"] == 0
        assert m["llamacpp:tokens_predicted_total"] >= 120


def test_queue_length_and_fail_on_no_slot():
    """One slot, one running request, two waiting: requests_deferred counts them and
    /slots?fail_on_no_slot=1 answers 503 (llama-server's probe for a free slot)."""
    with Server("--toy", "--parallel", 1, "--ctx-size", 256, "--toy-delay-us", 20000,
                "--api-key", KEY) as s:
        assert s.get("/slots?fail_on_no_slot=1", headers=AUTH)[0] == 200
        results = []
        # the first request holds the slot for about 3 s (150 steps of 20 ms) and is running
        # before the two short ones come, so that both wait behind it however slowly
        # their threads start on a loaded machine; both gauges are read from one answer
        # (they are one count: a second read may come after the slot has moved on)
        threads = [threading.Thread(target=long_request, args=(s, results, n, k))
                   for k, n in enumerate((150, 10, 10))]
        threads[0].start()
        wait_for(lambda: metrics(s)["llamacpp:requests_processing"] == 1)
        for t in threads[1:]:
            t.start()
        m = wait_for(lambda: (lambda m: m if m["llamacpp:requests_deferred"] == 2 else None)(metrics(s)))
        assert m["kinetic_queue_length"] == 2, m
        st, _, js = s.get("/slots?fail_on_no_slot=1", headers=AUTH)
        assert st == 503 and js["error"]["code"] == "no_slot_available", js
        for t in threads:
            t.join()
        assert len(results) == 3


def test_cors():
    origin = "https://chat.example"
    with Server("--toy", "--parallel", 1, "--cors", origin) as s:
        st, h, _ = s.get("/health")
        assert h["access-control-allow-origin"] == origin and h["vary"] == "Origin"
        st, h, _ = s.request("OPTIONS", "/v1/chat/completions",
                             headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                      "Access-Control-Request-Headers": "authorization,content-type"})
        assert st == 204, st
        assert h["access-control-allow-origin"] == origin
        assert h["access-control-allow-methods"] == "POST, OPTIONS"
        assert "Authorization" in h["access-control-allow-headers"]
        # streamed answers carry it too
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "x", "max_tokens": 2, "stream": True}).encode(),
            headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200 and r.getheader("Access-Control-Allow-Origin") == origin
        r.read()
        c.close()
    with Server("--toy", "--parallel", 1) as s:
        st, h, _ = s.get("/health")
        assert "access-control-allow-origin" not in h
        st, h, _ = s.request("OPTIONS", "/v1/chat/completions")
        assert st == 405 and h["allow"] == "POST"
