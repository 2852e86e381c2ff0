"""Cross-ISA receipts (issue 20): canonical-1 fixes every operation's order, so a receipt
made on x86-64 verifies `identical` on aarch64 and back. The x86 binary (KINETIC) makes
receipts for aidreams260K and tiny synth models of each architecture (several samplers, a
grammar, a prompt that drafts, an f16 cache), which the aarch64 build verifies under
qemu-aarch64 at each ARM level; receipts made under qemu (at each level) verify on x86.

The aarch64 binary is KN_KINETIC_AARCH64, by default build-aarch64/kinetic-emu (the
wrapper the cross build writes: scripts/build.sh --arch aarch64). Without it the test
skips, unless KN_CROSS_REQUIRED=1 (scripts/test.sh sets it once it has built it)."""
import json
import os
import subprocess
import tempfile

import pytest

KINETIC = os.environ.get("KINETIC", "build/kinetic")
SOURCE = os.environ.get("KN_SOURCE", ".")
from testdata import DATA
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")
ARM = os.environ.get("KN_KINETIC_AARCH64", os.path.join(SOURCE, "build-aarch64", "kinetic-emu"))
ARM_LEVELS = ("neon", "dotprod", "i8mm")


def have_arm():
    if not os.access(ARM, os.X_OK):
        return False
    p = subprocess.run([ARM, "--version"], capture_output=True, text=True, timeout=120)
    return p.returncode == 0 and "isa: scalar neon" in p.stdout


pytestmark = pytest.mark.skipif(
    os.environ.get("KN_CROSS_REQUIRED") != "1" and not have_arm(),
    reason=f"no aarch64 build under qemu at {ARM} (scripts/build.sh --arch aarch64)")


def kinetic(binary, *args, isa=None, env=None):
    e = dict(env or os.environ)
    e.pop("KINETIC_ISA", None)
    if isa:
        e["KINETIC_ISA"] = isa
    return subprocess.run([binary, *map(str, args)], capture_output=True, text=True, errors="replace", env=e,
                          timeout=600)


@pytest.fixture(scope="module")
def world():
    assert have_arm(), f"KN_CROSS_REQUIRED=1 but {ARM} does not run"
    d = tempfile.mkdtemp(prefix="kn_xisa_")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(d, "cache"))
    models = {"aidreams": AIDREAMS}
    # One tiny model per architecture, each in other weight types, so every matmul kernel
    # family (32-blocks, K-quants, floats) runs on both sides.
    for arch, ty in NEW_ARCH_MODELS + (("llama", "q4_k_m"), ("qwen2", "q8_0"), ("qwen3", "q5_k"),
                                       ("gemma3", "q4_0"), ("llama", "f16")):
        path = os.path.join(d, f"{arch}-{ty}.gguf")
        p = kinetic(KINETIC, "synth", "--arch", arch, "--preset", "tiny", "--type", ty,
                    "--seed", 7, "-o", path, env=env)
        assert p.returncode == 0, p.stderr
        models[f"{arch}-{ty}"] = path
    return {"dir": d, "env": env, "models": models}


def make(world, binary, name, model, args, isa=None):
    path = os.path.join(world["dir"], name + ".json")
    p = kinetic(binary, "run", world["models"][model], *args, "--receipt", path, isa=isa,
                env=world["env"])
    assert p.returncode == 0, (name, p.stderr)
    with open(path) as f:
        return path, json.load(f)


def verify(world, binary, path, isa=None):
    return kinetic(binary, "verify-receipt", path, isa=isa, env=world["env"])


# The other architectures (mixture of experts, short convolutions, soft-capping, fused and
# scaled layers), each in one of the newer weight types (Q2_K, Q3_K, IQ4, MXFP4 products).
NEW_ARCH_MODELS = (("qwen3moe", "q4_k_m"), ("lfm2", "q3_k_m"), ("lfm2moe", "q8_0"), ("gemma2", "q2_k"),
                   ("phi3", "iq4_xs"), ("granite", "iq4_nl"), ("smollm3", "q5_k_m"), ("olmo2", "mxfp4"),
                   ("gpt-oss", "mxfp4_moe"))

REPEAT = " ".join(["the cat sat on the mat and the dog sat on the log"] * 12)
X86_CASES = [
    ("greedy", "aidreams", ["Once upon a time", "-n", "32", "--temp", "0"]),
    ("top-k top-p", "aidreams", ["Once upon a time", "-n", "32", "--temp", "0.8", "--top-k", "40",
                                 "--top-p", "0.9", "--seed", "5"]),
    ("mirostat", "aidreams", ["The little dog", "-n", "24", "--mirostat", "2", "--seed", "6"]),
    ("penalties + min-p", "aidreams", ["The sun", "-n", "24", "--repeat-penalty", "1.3",
                                       "--min-p", "0.1", "--seed", "7"]),
    ("grammar", "aidreams", ["Say yes", "-n", "16", "--grammar", 'root ::= ("yes" | "no") " " [a-z]+',
                             "--seed", "8"]),
    ("drafting", "aidreams", [REPEAT, "-c", "1024", "-n", "48", "--temp", "0"]),
    ("f16 cache", "aidreams", ["Once upon a time", "-n", "24", "--kv-type", "f16", "--seed", "9"]),
    ("llama q4_k_m", "llama-q4_k_m", ["Hello there", "-n", "16", "--temp", "0.9", "--seed", "10"]),
    ("qwen2 q8_0", "qwen2-q8_0", ["Hello there", "-n", "16", "--temp", "0.9", "--seed", "11"]),
    ("qwen3 q5_k", "qwen3-q5_k", ["Hello there", "-n", "16", "--temp", "0.9", "--seed", "12"]),
    ("gemma3 q4_0", "gemma3-q4_0", ["Hello there", "-n", "16", "--temp", "0.9", "--seed", "13"]),
    ("llama f16", "llama-f16", ["Hello there", "-n", "16", "--temp", "0.9", "--seed", "14"]),
] + [(f"{a} {t}", f"{a}-{t}", ["Hello there", "-n", "12", "--temp", "0.9", "--seed", str(20 + i)])
     for i, (a, t) in enumerate(NEW_ARCH_MODELS)]


def check_identical(p, what, made_on, rerun_on):
    assert p.returncode == 0, (what, p.stdout, p.stderr)
    line = next(l for l in p.stdout.splitlines() if l.startswith("rerun:"))
    assert line.startswith("rerun: identical"), (what, p.stdout)
    assert f"on {rerun_on} " in line and f"cross-ISA: the receipt was made on {made_on}" in line, \
        (what, line)
    assert "a cross-ISA rerun" in p.stdout, (what, p.stdout)


def test_x86_receipts_verify_on_aarch64(world):
    for i, (name, model, args) in enumerate(X86_CASES):
        path, r = make(world, KINETIC, f"x86-{i}", model, args)
        assert r["device"]["class"].startswith("cpu-x86_64-"), r["device"]
        level = ARM_LEVELS[i % len(ARM_LEVELS)]
        p = verify(world, ARM, path, isa=level)
        check_identical(p, name, r["device"]["class"], f"cpu-aarch64-{level}")
        if name == "drafting":
            assert r["output"]["tokens"]["count"] > 0


ARM_CASES = [
    ("aidreams sampled", "aidreams", ["Once upon a time", "-n", "24", "--temp", "0.8", "--seed", "21"], "neon"),
    ("aidreams grammar", "aidreams", ["Say no", "-n", "16", "--grammar", 'root ::= ("yes" | "no") " " [a-z]+',
                                      "--seed", "22"], "dotprod"),
    ("aidreams drafting", "aidreams", [REPEAT, "-c", "1024", "-n", "32", "--temp", "0"], "i8mm"),
    ("llama q4_k_m", "llama-q4_k_m", ["Hi", "-n", "12", "--temp", "0.7", "--seed", "23"], "i8mm"),
    ("gemma3 q4_0", "gemma3-q4_0", ["Hi", "-n", "12", "--temp", "0.7", "--seed", "24"], "dotprod"),
    ("qwen3 q5_k", "qwen3-q5_k", ["Hi", "-n", "12", "--mirostat", "1", "--seed", "25"], "neon"),
    ("llama scalar", "llama-f16", ["Hi", "-n", "12", "--temp", "0.7", "--seed", "26"], "scalar"),
    ("qwen3moe q4_k_m", "qwen3moe-q4_k_m", ["Hi", "-n", "12", "--temp", "0.7", "--seed", "27"], "i8mm"),
    ("lfm2 q3_k_m", "lfm2-q3_k_m", ["Hi", "-n", "12", "--temp", "0.7", "--seed", "28"], "dotprod"),
    ("gemma2 q2_k", "gemma2-q2_k", ["Hi", "-n", "12", "--temp", "0.7", "--seed", "29"], "neon"),
    ("gpt-oss mxfp4_moe", "gpt-oss-mxfp4_moe", ["Hi", "-n", "12", "--temp", "0.7", "--seed", "30"], "i8mm"),
]


def test_aarch64_receipts_verify_on_x86(world):
    for i, (name, model, args, level) in enumerate(ARM_CASES):
        path, r = make(world, ARM, f"arm-{i}", model, args, isa=level)
        assert r["device"]["class"] == f"cpu-aarch64-{level}", r["device"]
        p = verify(world, KINETIC, path)
        assert p.returncode == 0, (name, p.stdout, p.stderr)
        line = next(l for l in p.stdout.splitlines() if l.startswith("rerun:"))
        assert line.startswith("rerun: identical"), (name, p.stdout)
        assert f"cross-ISA: the receipt was made on cpu-aarch64-{level}" in line, (name, line)


def test_arm_levels_reported():
    p = kinetic(ARM, "--version")
    assert "isa: scalar neon dotprod i8mm" in p.stdout, p.stdout  # qemu -cpu max has all three
    p = kinetic(ARM, "--version", isa="avx2")
    assert "cannot run the avx2 kernels" in p.stderr, p.stderr
