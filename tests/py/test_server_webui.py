"""The web page at / (issue 21 item 5), in a real headless browser: Debian's chromium and
chromedriver driven by Selenium. Type a message, see the answer stream in, download its
receipt (a real download), check that the same receipt verifies with the CLI, and that
the page's Verify button (POST /verify-receipt) says identical. Also: the page is served
from the binary (no other origin is contacted), /verify-receipt is rate-limited and
--no-verify turns it off."""
import json
import os
import shutil
import subprocess
import time

import pytest

from srvutil import GEMMA, KINETIC, Server



def browser(download_dir):
    webdriver = pytest.importorskip("selenium.webdriver")
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        pytest.skip("chromium and chromedriver are not installed (scripts/deps.sh --test)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    o = Options()
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
            text = answer.find_element(By.CLASS_NAME, "text").text
            assert text and "error" not in text, text
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
            assert res == "verified: identical", res
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
