"""The web page at / (issue 21 item 5, issue 37), in a real headless browser: Debian's
chromium and chromedriver driven by Selenium, against the real server on loopback.

With Gemma 3 270M: type a message, see the answer stream in, download its receipt (a real
download), check that the same receipt verifies with the CLI, and that the page's Verify
button (POST /verify-receipt) says identical. Also: the page is served from the binary (no
other origin is contacted), /verify-receipt is rate-limited and --no-verify turns it off.

With a tiny `kinetic synth` model (issue 37): answers render as Markdown and a <script> in
the output never runs; Stop cancels the stream (the server counts the cancel) and marks the
partial answer; finish_reason "length" shows "stopped: token limit"; an error stays in view
and its question is not sent again; the page's sampling fields are GET /props, and /props
is the settings table (and `kinetic run`'s defaults: test_server_http.py); a receipt signed by
`serve --sign-key` downloads and verifies, signature valid, on the CLI and on the page.
Every browser test saves a screenshot under $KN_BUILD/webui-screenshots/. Requests the page
sends are seen by wrapping the page's fetch (HOOK): what it sent, and fields a test adds
(a grammar, so the random synth model writes the text a test needs)."""
import json
import os
import shutil
import subprocess
import time

import pytest

from srvutil import GEMMA, KINETIC, Server

SOURCE = os.environ.get("KN_SOURCE", os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("KN_BUILD", os.path.join(SOURCE, "build"))
SHOTS = os.path.join(BUILD, "webui-screenshots")



def browser(download_dir):
    webdriver = pytest.importorskip("selenium.webdriver")
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        pytest.skip("chromium and chromedriver are not installed (scripts/deps.sh --test)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    o = Options()
    o.add_argument("--window-size=1100,800")
    o.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        o.add_argument(a)
    o.add_experimental_option("prefs", {"download.default_directory": str(download_dir),
                                        "download.prompt_for_download": False})
    o.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=o)


def wait(pred, timeout=120, step=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out")


@pytest.fixture(scope="module")
def gemma():
    if not os.path.exists(GEMMA):
        pytest.skip("Gemma 3 270M not found (set KN_GEMMA)")
    return GEMMA


def test_chat_stream_receipt_download_and_verify(gemma, tmp_path):
    from selenium.webdriver.common.by import By
    dl = tmp_path / "downloads"
    dl.mkdir()
    with Server(gemma, "--parallel", 1, "--ctx-size", 1024) as s:
        d = browser(dl)
        try:
            d.get(s.base + "/")
            assert d.title == "Kinetic"
            wait(lambda: "model" in d.find_element(By.ID, "info").text)
            assert "gemma" in d.find_element(By.ID, "info").text.lower()
            d.find_element(By.ID, "seed").send_keys("5")
            d.find_element(By.ID, "max_tokens").clear()
            d.find_element(By.ID, "max_tokens").send_keys("40")
            d.find_element(By.ID, "input").send_keys("Write one sentence about rivers.")
            d.find_element(By.ID, "send").click()
            # the answer streams in: its text grows before the answer is done
            seen = []
            def streamed():
                msgs = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
                if not msgs:
                    return False
                seen.append(msgs[-1].find_element(By.CLASS_NAME, "text").text)
                return "done" in msgs[-1].get_attribute("class")
            wait(streamed, step=0.02)
            answer = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]
            text = answer.get_attribute("data-raw")  # the Markdown, before rendering
            assert text and not d.find_elements(By.CLASS_NAME, "error"), text
            assert len({t for t in seen if t}) >= 2, seen  # more than one partial text
            link = answer.find_element(By.CLASS_NAME, "receipt-link")
            link.click()
            path = wait(lambda: [p for p in dl.iterdir() if p.suffix == ".json"], timeout=30)[0]
            wait(lambda: path.stat().st_size > 0 and json.loads(path.read_text()), timeout=10)
            rc = json.loads(path.read_text())
            assert rc["output"]["text"].strip() == text.strip()
            r = subprocess.run([KINETIC, "verify-receipt", str(path)], capture_output=True,
                               text=True, timeout=300)
            assert r.returncode == 0 and "rerun: identical" in r.stdout + r.stderr, r.stdout + r.stderr
            answer.find_element(By.CLASS_NAME, "verify").click()
            res = wait(lambda: (lambda t: t if t and t != "verifying..." else None)(
                answer.find_element(By.CLASS_NAME, "verify-result").text), timeout=300)
            assert res == "verified: identical; signature: absent", res
            shot(d, "gemma-chat")
            # nothing was fetched from another origin
            urls = [json.loads(e["message"])["message"].get("params", {}).get("request", {}).get("url", "")
                    for e in d.get_log("performance")]
            others = [u for u in urls if u.startswith("http") and not u.startswith(s.base)]
            assert others == [], others
        finally:
            d.quit()
        # the endpoint is rate-limited: right after a verification, another is refused
        st, h, js = s.post("/verify-receipt", rc)
        assert st in (200, 429), js
        if st == 429:
            assert js["error"]["code"] in ("verify_rate", "verify_busy") and h["retry-after"]
        time.sleep(2.1)
        rc["output"]["tokens"]["ids"][0] ^= 1  # a changed receipt does not verify
        st, _, js = s.post("/verify-receipt", rc)
        assert st == 200 and js["verified"] is False and js["exit_code"] != 0, js


def test_no_verify_flag(gemma):
    with Server(gemma, "--parallel", 1, "--ctx-size", 256, "--no-verify") as s:
        st, _, js = s.post("/verify-receipt", {"version": 1})
        assert st == 403 and js["error"]["code"] == "verify_disabled", js
        st, h, body = s.request("GET", "/")
        assert st == 200 and h["content-type"].startswith("text/html") and b"<title>Kinetic" in body


# ---------------------------------------------------------------- issue 37, a synth model

# Wraps the page's fetch: every chat request body is kept in window.__sent, after the
# members of window.__extra are added to it.
HOOK = """
window.__sent = []; window.__extra = {};
const real = window.fetch.bind(window);
window.fetch = (url, opts) => {
  if (String(url).endsWith("/chat/completions") && opts && opts.body) {
    const b = Object.assign(JSON.parse(opts.body), window.__extra);
    window.__sent.push(b);
    opts = Object.assign({}, opts, {body: JSON.stringify(b)});
  }
  return real(url, opts);
};
"""

KEY_HEX = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"  # RFC 8032 test 1


def shot(d, name):
    os.makedirs(SHOTS, exist_ok=True)
    d.save_screenshot(os.path.join(SHOTS, name + ".png"))


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("webui")
    subprocess.run([KINETIC, "synth", "--arch", "llama", "--dims",
                    "dim=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=512,ctx=1024",
                    "-o", str(d / "m.gguf")], check=True, capture_output=True, timeout=120)
    (d / "key.hex").write_text(KEY_HEX + "\n")
    (d / "downloads").mkdir()
    return d


@pytest.fixture(scope="module")
def signed(synth_dir):
    with Server(synth_dir / "m.gguf", "--parallel", 1, "--threads", 1, "--ctx-size", 1024,
                "--sign-key", synth_dir / "key.hex") as s:
        yield s


@pytest.fixture(scope="module")
def driver(synth_dir):
    d = browser(synth_dir / "downloads")
    yield d
    d.quit()


def open_page(d, s):
    from selenium.webdriver.common.by import By
    d.get(s.base + "/")
    wait(lambda: "model" in d.find_element(By.ID, "info").text, timeout=30)
    d.execute_script(HOOK)


def ask(d, text, extra=None):
    """Types text, sends it, waits for the answer to end; returns its bubble."""
    from selenium.webdriver.common.by import By
    d.execute_script("window.__extra = arguments[0];", extra or {})
    n = len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
    d.find_element(By.ID, "input").send_keys(text)
    d.find_element(By.ID, "send").click()
    wait(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant.done")) > n, timeout=120)
    return d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]


def gbnf_literal(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def get_json(s, path):
    st, _, body = s.request("GET", path)
    assert st == 200, (st, body)
    return json.loads(body)


def test_page_fields_are_props(signed, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, signed)
    params = get_json(signed, "/props")["default_generation_settings"]["params"]
    fields = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
              "min_p": "min_p", "repeat_penalty": "repeat_penalty", "max_tokens": "n_predict"}
    for fid, key in fields.items():
        v = d.find_element(By.ID, fid).get_attribute("value")
        assert v != "" and float(v) == params[key], (fid, v, params[key])
    assert d.find_element(By.ID, "seed").get_attribute("value") == ""  # -1: fresh seeds
    ask(d, "hi", {"max_tokens": 3})
    sent = d.execute_script("return window.__sent;")[-1]
    for fid, key in fields.items():
        if fid != "max_tokens":
            assert sent[fid] == params[key], (fid, sent[fid], params[key])
    assert "seed" not in sent and sent["receipt"] is True
    shot(d, "defaults")


def test_markdown_renders_and_scripts_do_not_run(signed, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, signed)
    md = ("Some **bold** words and `code`.\n\n- first item\n- second item\n\n"
          "<script>window.__pwned = 1</script>"
          "<img src=x onerror=\"window.__pwned = 2\"><a href=\"javascript:window.__pwned=3\">link</a>"
          "<p class=\"error\" style=\"color: red\">not an error</p>")
    a = ask(d, "format", {"grammar": "root ::= " + gbnf_literal(md), "max_tokens": 400})
    assert a.get_attribute("data-raw") == md
    assert a.get_attribute("data-finish") == "stop"
    text = a.find_element(By.CLASS_NAME, "text")
    assert [e.text for e in text.find_elements(By.TAG_NAME, "strong")] == ["bold"]
    assert [e.text for e in text.find_elements(By.TAG_NAME, "li")] == ["first item", "second item"]
    assert "**" not in text.text
    assert text.find_elements(By.TAG_NAME, "script") == []
    assert text.find_elements(By.TAG_NAME, "img") == []  # no images: nothing is fetched
    assert text.find_elements(By.CSS_SELECTOR, "[class], [style]") == []  # no look-alikes
    links = text.find_elements(By.TAG_NAME, "a")
    assert [link.get_attribute("href") for link in links] == [None]
    for link in links:
        link.click()
    time.sleep(0.5)  # an onerror would have fired by now
    assert d.execute_script("return window.__pwned;") is None
    assert d.execute_script("return document.querySelectorAll('#log script').length;") == 0
    shot(d, "markdown")


def test_token_limit_shows(signed, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, signed)
    m = d.find_element(By.ID, "max_tokens")
    m.clear()
    m.send_keys("3")
    a = ask(d, "count", {"grammar": "root ::= [a-z]{20}"})  # no end before 20 tokens
    assert d.execute_script("return window.__sent;")[-1]["max_tokens"] == 3
    assert a.get_attribute("data-finish") == "length"
    assert a.find_element(By.CLASS_NAME, "status").text == "stopped: token limit"
    shot(d, "token-limit")


def test_error_stays_visible_and_is_not_resent(signed, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, signed)
    for i in range(6):  # a conversation long enough to scroll
        ask(d, f"question {i}", {"max_tokens": 30, "grammar": "root ::= [a-z ]{30}"})
    temp = d.find_element(By.ID, "temperature")
    good = temp.get_attribute("value")
    temp.clear()
    temp.send_keys("-1")
    ask(d, "this one fails")
    err = d.find_elements(By.CLASS_NAME, "error")[-1]
    assert "temperature must be between 0 and 100" in err.text, err.text
    assert "this question is not sent again" in err.text
    assert err.is_displayed()
    box = d.execute_script(
        "const r = (e) => e.getBoundingClientRect();"
        "return [r(arguments[0]), r(document.getElementById('log')), r(document.getElementById('form'))];",
        err)
    e, log, form = box
    assert e["top"] >= log["top"] and e["bottom"] <= log["bottom"] and e["bottom"] <= form["top"], box
    shot(d, "error")
    temp.clear()
    temp.send_keys(good)
    ask(d, "after the error", {"max_tokens": 3})
    sent = d.execute_script("return window.__sent;")
    msgs = sent[-1]["messages"]
    contents = [m["content"] for m in msgs if m["role"] == "user"]
    assert contents == [f"question {i}" for i in range(6)] + ["after the error"], contents
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 6 + ["user"]
    assert sent[-2]["messages"][-1]["content"] == "this one fails"  # it was sent, once
    shot(d, "after-error")


def test_stop_cancels_and_marks_the_answer(tmp_path):
    from selenium.webdriver.common.by import By
    # the toy model at 20 ms a token: an answer long enough to stop by hand
    with Server("--toy", "--toy-delay-us", 20000, "--parallel", 1, "--ctx-size", 4096) as s:
        d = browser(tmp_path)
        try:
            open_page(d, s)
            d.execute_script("window.__extra = {max_tokens: 3000, ignore_eos: true};")
            d.find_element(By.ID, "input").send_keys("tell me everything")
            d.find_element(By.ID, "send").click()
            a = wait(lambda: [m for m in d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
                              if len(m.get_attribute("data-raw") or "") > 10], timeout=60)[0]
            assert not d.find_element(By.ID, "stop").get_property("disabled")
            d.find_element(By.ID, "stop").click()
            wait(lambda: "done" in a.get_attribute("class"), timeout=30)
            assert "stopped" in a.get_attribute("class")
            assert a.find_element(By.CLASS_NAME, "status").text == "stopped"
            partial = a.get_attribute("data-raw")
            assert partial and not d.find_elements(By.CLASS_NAME, "error")
            # the server saw the client go: the job was cancelled, the slot is free again
            wait(lambda: get_json(s, "/stats")["cancelled"] == 1, timeout=30)
            assert get_json(s, "/stats")["slots_busy"] == 0
            assert d.find_element(By.ID, "stop").get_property("disabled")
            shot(d, "stopped")
            # the partial answer is the model's turn in the next request
            d.execute_script("window.__extra = {max_tokens: 2};")
            d.find_element(By.ID, "input").send_keys("and then?")
            d.find_element(By.ID, "send").click()
            wait(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant.done")) == 2)
            msgs = d.execute_script("return window.__sent;")[-1]["messages"]
            assert msgs == [{"role": "user", "content": "tell me everything"},
                            {"role": "assistant", "content": partial},
                            {"role": "user", "content": "and then?"}], msgs
        finally:
            d.quit()


def test_signed_receipt_downloads_and_verifies(synth_dir, signed, driver):
    from selenium.webdriver.common.by import By
    d = driver
    dl = synth_dir / "downloads"
    for p in dl.iterdir():
        p.unlink()
    open_page(d, signed)
    a = ask(d, "sign this", {"max_tokens": 8, "seed": 3})
    a.find_element(By.CLASS_NAME, "receipt-link").click()
    path = wait(lambda: [p for p in dl.iterdir() if p.suffix == ".json"], timeout=30)[0]
    wait(lambda: path.stat().st_size > 0 and json.loads(path.read_text()), timeout=10)
    rc = json.loads(path.read_text())
    assert rc["signature"]["public_key"] and rc["output"]["text"] == a.get_attribute("data-raw")
    r = subprocess.run([KINETIC, "verify-receipt", str(path)], capture_output=True, text=True,
                       timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "signature: valid" in out and "rerun: identical" in out, out
    time.sleep(2.1)  # /verify-receipt: one per 2 s
    a.find_element(By.CLASS_NAME, "verify").click()
    res = wait(lambda: (lambda t: t if t and t != "verifying..." else None)(
        a.find_element(By.CLASS_NAME, "verify-result").text), timeout=300)
    assert res == "verified: identical; signature: valid", res
    shot(d, "receipt-verified")


def test_page_and_vendored_scripts_are_served_from_the_binary():
    # the files of src/server/vendor, byte for byte, as the page loads them (no model needed)
    with Server("--toy", "--parallel", 1) as s:
        for name in ("marked.min.js", "purify.min.js"):
            st, h, body = s.request("GET", "/vendor/" + name)
            with open(os.path.join(SOURCE, "src", "server", "vendor", name), "rb") as f:
                assert st == 200 and body == f.read(), name
            assert h["content-type"].startswith("text/javascript"), h
        st, _, page = s.request("GET", "/")
        with open(os.path.join(SOURCE, "src", "server", "webui.html"), "rb") as f:
            assert st == 200 and page == f.read()
        assert b'src="/vendor/marked.min.js"' in page and b'src="/vendor/purify.min.js"' in page
        assert s.request("GET", "/vendor/other.js")[0] == 404
