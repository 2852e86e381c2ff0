"""scripts/same_answer_demo.py end to end on the tiny real model: it starts the server
itself, keeps it busy with three clients, reports one distinct answer in ten runs, and
saves a receipt that `kinetic verify-receipt` finds identical."""
import os
import re
import subprocess
import sys

import pytest

from srvutil import KINETIC, DATA

SOURCE = os.environ.get("KN_SOURCE", os.path.join(os.path.dirname(__file__), "../.."))
MODEL = os.path.join(DATA, "models", "aidreams260K.gguf")


def test_demo_one_distinct_answer(tmp_path):
    if not os.path.exists(MODEL):
        pytest.skip("aidreams260K.gguf not found")
    receipt = tmp_path / "last.json"
    r = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "same_answer_demo.py"),
                        "--model", MODEL, "--kinetic", KINETIC, "--kinetic-args", "--threads 1",
                        "--receipt", str(receipt), "--max-tokens", "60", "--busy-tokens", "100"],
                       capture_output=True, text=True, timeout=300)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert out.startswith("Kinetic, kinetic serve --parallel 4\n")
    rows = re.findall(r"^\s*(\d+)  (.{40})  ([0-9a-f]{16})$", out, re.M)
    assert [int(n) for n, _, _ in rows] == list(range(1, 11)), out
    assert len({h for _, _, h in rows}) == 1
    assert "1 distinct answer in 10 runs" in out
    assert "busy client" not in out, out
    # the receipt of the last run, made on the busy server, verifies alone
    assert f"receipt of the last run saved to {receipt}" in out
    v = subprocess.run([KINETIC, "verify-receipt", str(receipt)], capture_output=True, text=True,
                       timeout=300)
    assert v.returncode == 0 and "rerun: identical" in v.stdout, v.stdout + v.stderr
