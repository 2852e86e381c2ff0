"""Receipts written by an earlier build stay valid: the files in tests/data/receipts were
made by `kinetic run` and `kinetic serve --parallel 4` (under load, drafting and Warm Start
on) at commit 63b66f1, before the engine, settings and session refactor. Each must still
read strictly and rerun `identical`; a change that moves a bit, renames a receipt key or
refuses an old receipt's shape fails here. The model paths inside are that machine's, so
the model is given with --model (a moved model is the documented case for it)."""
import glob
import json
import os
import subprocess

import pytest

from srvutil import GEMMA

KINETIC = os.environ.get("KINETIC", "build/kinetic")
SOURCE = os.environ.get("KN_SOURCE", ".")
from testdata import DATA
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")
FIXTURES = sorted(glob.glob(os.path.join(SOURCE, "tests", "data", "receipts", "*.json")))


def model_for(receipt):
    name = receipt["model"]["file"]
    if name == "aidreams260K.gguf":
        return AIDREAMS
    if name == "gemma-3-270m-q4_k_m.gguf":
        return GEMMA
    raise AssertionError(f"no model known for fixture model {name}")


def test_fixtures_present():
    names = {os.path.basename(f) for f in FIXTURES}
    assert {"aidreams_default.json", "aidreams_greedy_signed.json", "gemma_serve_chat.json"} <= names
    assert {"v2_aidreams_chat_system.json", "v2_aidreams_raw_stop.json", "v2_aidreams_ids.json",
            "v2_aidreams_template_file_schema.json"} <= names


@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_old_receipt_verifies_identical(path, tmp_path):
    with open(path) as f:
        receipt = json.load(f)
    model = model_for(receipt)
    if not os.path.exists(model):
        pytest.skip(f"{os.path.basename(model)} not found (set KN_GEMMA)")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    p = subprocess.run([KINETIC, "verify-receipt", path, "--model", model],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    n = receipt["output"]["tokens"]["count"]
    assert f"identical, {n} of {n} output tokens" in p.stdout, p.stdout
    if "signature" in receipt:
        assert "signature" in p.stdout and "valid" in p.stdout, p.stdout
    # v2_*: made after receipts recorded their template; their input and output text are
    # proven from that record. The older ones are proven by the model's default rendering
    # and reasoning split (test_receipt_legacy.py forges them).
    if "template" in receipt:
        assert "input: proven: it renders (" in p.stdout and "output.text: proven: " in p.stdout, p.stdout
    else:
        assert "input: proven (legacy receipt): it renders with the model's default template settings" in p.stdout, p.stdout
        assert "output.text: proven (legacy receipt): " in p.stdout, p.stdout
