"""Models in the quant mixes of llama.cpp (kinetic synth --type): each runs with the same
tokens on every ISA level, thread count and prompt chunking, and a receipt made on the
best level verifies `identical` with KINETIC_ISA=scalar (the portable reference kernels
re-derive every product). `kinetic info` names the tensor types the mix holds."""
import json
import os
import subprocess

import pytest

KINETIC = os.environ.get("KINETIC", "build/kinetic")

# mix -> GGML type names kinetic info must list for the tiny llama (gqa 2, 2 layers)
MIXES = {
    "q2_k": ["q2_K", "q3_K", "q6_K"],
    "q3_k": ["q3_K"],
    "q3_k_s": ["q3_K", "q6_K"],
    "q3_k_m": ["q3_K", "q4_K", "q5_K", "q6_K"],
    "q3_k_l": ["q3_K", "q5_K", "q6_K"],
    "q5_k_m": ["q5_K", "q6_K"],
    "iq4_nl": ["iq4_nl", "q6_K"],
    "iq4_xs": ["iq4_xs", "q6_K"],
    "mxfp4": ["mxfp4"],
}
SAMPLED = ["Hello there my friend", "--temp", "0.8", "--seed", "77", "-n", "24", "--raw"]


def kn(*args, env=None, check=True):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([KINETIC, *map(str, args)], capture_output=True, text=True, env=e, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"kinetic {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def isas():
    return [i for i in ("scalar", "avx2", "avx512")
            if kn("--version", env={"KINETIC_ISA": i}, check=False).returncode == 0]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("quant_models")
    os.environ["XDG_CACHE_HOME"] = str(d / "cache")
    return d


@pytest.mark.parametrize("mix", list(MIXES))
def test_mix_invariant_and_receipt_identical(work, mix):
    model = work / f"{mix}.gguf"
    kn("synth", "--arch", "llama", "--preset", "tiny", "--type", mix, "--seed", "5", "-o", model)
    info = kn("info", model).stdout
    types = info.split("tensor types:")[1].split("tokenizer:")[0]
    listed = {line.split()[0] for line in types.strip().splitlines()}
    assert listed == set(MIXES[mix]) | {"f32"}, info

    receipt = work / f"{mix}.json"
    ref = json.loads(kn("run", model, *SAMPLED, "--threads", "2", "--json", "--receipt", receipt).stdout)
    assert len(ref["tokens"]) >= 4  # (the random model may sample its end token)
    for isa in isas():
        for t in ("1", "3"):
            r = json.loads(kn("run", model, *SAMPLED, "--threads", t, "--json",
                              env={"KINETIC_ISA": isa}).stdout)
            assert r["tokens"] == ref["tokens"], f"{mix}: KINETIC_ISA={isa} --threads {t}"
    r = json.loads(kn("run", model, *SAMPLED, "--batch-size", "3", "--json").stdout)
    assert r["tokens"] == ref["tokens"], f"{mix}: --batch-size 3"

    p = kn("verify-receipt", receipt, "--threads", "1", env={"KINETIC_ISA": "scalar"}, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rerun: identical" in p.stdout, p.stdout
