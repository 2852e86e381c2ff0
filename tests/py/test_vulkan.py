"""The Vulkan backend end to end through the kinetic binary (issue 18's acceptance list), on
the first Vulkan device (Mesa's lavapipe in CI):
- `kinetic devices` shows the device and its self-test; `--version` lists the backends;
- `run --device vulkan` gives the CPU's tokens and logits bit for bit on aidreams260K
  (wholly and with --gpu-layers splitting the layers) and on a tiny synth model of every
  architecture (f32, f16 and q8_0 caches; Q4_K_M, Q8_0 and MXFP4 weights), whose receipts
  made on Vulkan verify identical on the CPU (and, for the architectures of the newer
  shaders, CPU receipts on Vulkan), gemma2's soft-capped attention and gpt-oss's sinks
  and expert biases included;
- `embed --device vulkan` gives the CPU's embeddings bit for bit on bert and nomic-bert
  (layernorm and gelu on the device), wholly and with --gpu-layers;
- receipts made on Vulkan verify identical on the CPU and the other way round, and record
  the device class, name and --gpu-layers;
- a second start of this build on the device takes the self-test's recorded verdict
  (KINETIC_DEVICE_CACHE, docs/numerics.md "Devices") instead of running the check, its
  receipts and those made with the check run verify identical either way, and
  `kinetic devices` runs the check and rewrites the record;
- Warm Start (--prompt-cache) on Vulkan restores the device's cache and changes no token;
- `serve --device vulkan --parallel 4` under load gives one distinct answer in ten
  (scripts/same_answer_demo.py with the spec's exact arguments), and the demo ends cleanly.
Skips with the reason only when this build has no Vulkan or the machine no Vulkan device
(or, before the shaders land, when the backend still lacks an op)."""
import json
import os
import re
import subprocess
import sys

import pytest

from srvutil import KINETIC, DATA, sanitizer_build

SOURCE = os.environ.get("KN_SOURCE", os.path.join(os.path.dirname(__file__), "../.."))
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")


def kn(*args, check=True, timeout=300):
    r = subprocess.run([KINETIC, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert r.returncode == 0, (args, r.stdout[-3000:], r.stderr[-3000:])
    return r


def devices():
    return kn("devices").stdout


def vulkan_reason():
    """Why the Vulkan tests cannot run here, or None."""
    out = devices()
    m = re.search(r"^vulkan\s+(not in this build.*|no device.*)$", out, re.M)
    if m:
        return "Vulkan: " + m.group(1)
    m = re.search(r"self-test: .*the backend has no op '(\w+)' yet", out)
    if m:
        return f"the Vulkan backend has no op '{m.group(1)}' yet (the shaders are not in this build)"
    return None


@pytest.fixture(scope="module")
def vk():
    reason = vulkan_reason()
    if reason:
        pytest.skip(reason)
    if not os.path.exists(AIDREAMS):
        pytest.skip("aidreams260K.gguf not found")
    return "vulkan"


def test_version_and_devices_list_the_backends():
    v = kn("--version").stdout
    assert re.search(r"^backends: cpu( vulkan)?( cuda)?$", v, re.M), v
    out = devices()
    assert out.startswith("cpu "), out
    assert "numerics canonical-1 (the reference)" in out
    if "vulkan" in v.split("backends:")[1]:
        # with Vulkan built in: each device, or why there is none
        assert re.search(r"^vulkan(:0 |\s+no device)", out, re.M), out
    else:
        assert "not in this build (install libvulkan-dev and glslc" in out


def test_devices_reports_the_self_test(vk):
    out = devices()
    dev = re.search(r"^vulkan:0\s+(.+)$", out, re.M)
    assert dev, out
    assert re.search(r"^\s+driver .+; Vulkan 1\.\d+; [\d.]+ [MG]iB; "
                     r"int8 dot: (yes|yes \(accelerated\)|no)$", out, re.M), out
    st = re.search(r"^\s+self-test: (.+)$", out, re.M).group(1)
    # every probe named, and the ops check that decides
    for probe in ("fma ", "division ", "sqrt ", "add and multiply ", "denormals "):
        assert probe in st, st
    cls = re.search(r"^\s+class (vulkan-[a-z0-9.-]+), numerics (\S+)", out, re.M)
    assert cls, out
    if cls.group(2) == "canonical-1":
        assert "every op equals the CPU (kern_backend_check)" in st, st
    else:  # a device that fails names the failed check
        assert "NOT" in st or "ops differ" in st, st
        pytest.fail(f"{dev.group(1)} does not compute canonical-1: {st}")


def run_ids(model, prompt_args, tmp_path, tag, *extra):
    logits = tmp_path / f"{tag}.logits"
    r = kn("run", model, *prompt_args, "-n", 12, "--seed", 5, "--json",
           "--logits-out", logits, *extra)
    out = json.loads(r.stdout)
    return out["tokens"], logits.read_bytes()


def test_run_matches_the_cpu_bit_for_bit(vk, tmp_path):
    prompt = ["Once upon a time, in a dream,"]
    cpu = run_ids(AIDREAMS, prompt, tmp_path, "cpu", "--device", "cpu")
    for name, extra in [("all", []), ("split1", ["--gpu-layers", "1"]),
                        ("split3", ["--gpu-layers", "3"]), ("none", ["--gpu-layers", "0"]),
                        ("f16", ["--kv-type", "f16"]), ("batch3", ["--batch-size", "3"]),
                        ("nodraft", ["--no-draft"])]:  # RAD-1 on (the default) and off
        base = cpu
        if name == "f16":
            base = run_ids(AIDREAMS, prompt, tmp_path, "cpu16", "--kv-type", "f16")
        got = run_ids(AIDREAMS, prompt, tmp_path, name, "--device", vk, *extra)
        assert got[0] == base[0], name
        assert got[1] == base[1], f"{name}: the logits differ from the CPU's"


# Every generating architecture synth makes, each with a KV cache type of its own (f32,
# f16, q8_0 in turn) and a weight mix (gpt-oss: its MXFP4 experts); bert and nomic-bert
# (embeddings) are test_embeddings_match_the_cpu's.
ARCHS = ["llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "lfm2", "lfm2moe", "gemma2", "phi3",
         "granite", "smollm3", "olmo2", "gpt-oss"]
FTYPE = {"gpt-oss": "mxfp4_moe"}
# CPU receipts rerun on Vulkan for the architectures of the newer shaders (the rest, and
# aidreams260K below, prove that direction for the common ops)
VERIFY_ON_VULKAN = {"qwen3", "lfm2", "lfm2moe", "qwen3moe", "gemma2", "gpt-oss"}
# Under ASan + UBSan (lavapipe is slow there) only gpt-oss runs here: the host paths of
# the other architectures' shaders (the MoE grouping, the short convolution, soft-caps) run
# under the sanitizers in test_vk_model, which has no gpt-oss; the CLI and server paths
# around them are the same for every architecture. The plain suite runs them all.
SANITIZER_ARCHS = {"gpt-oss"}


@pytest.mark.parametrize("arch", ARCHS)
def test_synth_models_match_the_cpu(vk, tmp_path, arch):
    if sanitizer_build() and arch not in SANITIZER_ARCHS:
        pytest.skip(f"{arch}: the plain suite runs it; under ASan only {sorted(SANITIZER_ARCHS)} (CI time)")
    i = ARCHS.index(arch)
    kv = ("f32", "f16", "q8_0")[i % 3]
    ftype = FTYPE.get(arch, ("q4_k_m", "q8_0", "mxfp4")[i % 3])
    model = tmp_path / f"{arch}.gguf"
    kn("synth", "--arch", arch, "--preset", "tiny", "--type", ftype, "--vocab", AIDREAMS,
       "--seed", 2, "-o", model)
    prompt = ["--prompt-ids", "1,400,300,290,450,260,270"]
    r_vk, r_cpu = tmp_path / "vk.json", tmp_path / "cpu.json"
    args = [*prompt, "--kv-type", kv, "--temp", 0.9]
    cpu = run_ids(model, args, tmp_path, "cpu", "--receipt", r_cpu)
    gpu = run_ids(model, args, tmp_path, "vk", "--device", vk, "--receipt", r_vk)
    assert gpu[0] == cpu[0], f"{arch} {ftype} {kv}: the tokens differ from the CPU's"
    assert gpu[1] == cpu[1], f"{arch} {ftype} {kv}: the logits differ from the CPU's"
    # receipts cross-verify: made on Vulkan, identical on the CPU, and the other way round
    v = kn("verify-receipt", r_vk, "--device", "cpu")
    assert re.search(r"^rerun: identical, \d+ of \d+ output tokens on cpu-", v.stdout, re.M), \
        v.stdout
    if arch in VERIFY_ON_VULKAN:  # (each Vulkan start runs the self-test: CI time)
        v = kn("verify-receipt", r_cpu, "--device", "vulkan:0")
        assert re.search(r"^rerun: identical, \d+ of \d+ output tokens on vulkan-", v.stdout,
                         re.M), v.stdout


# bert wholly on the device (layernorm and gelu); nomic-bert (layernorm, RoPE and its
# gated FFN) split after its first layer, the hand-over of an encoder's pass. One Vulkan
# start each: each runs the device's self-test (CI time).
@pytest.mark.parametrize("arch,extra", [("bert", []), ("nomic-bert", ["--gpu-layers", "1"])])
def test_embeddings_match_the_cpu(vk, tmp_path, arch, extra):
    """The BERT family's layers on the device give the CPU's embeddings bit for bit."""
    if sanitizer_build():
        pytest.skip(f"{arch}: the plain suite runs it; under ASan only {sorted(SANITIZER_ARCHS)} (CI time)")
    model = tmp_path / f"{arch}.gguf"
    kn("synth", "--arch", arch, "--preset", "tiny", "--seed", 3, "-o", model)
    texts = ["hello world", "the quick brown fox jumps over the lazy dog"]
    cpu = kn("embed", model, *texts, "--device", "cpu").stdout
    assert len(cpu.splitlines()) == 2, cpu
    got = kn("embed", model, *texts, "--device", vk, *extra)
    assert "warning" not in got.stderr, got.stderr
    assert got.stdout == cpu, f"{arch} {extra}: the embeddings differ from the CPU's"


def test_receipts_cross_verify(vk, tmp_path):
    r_vk, r_cpu = tmp_path / "vk.json", tmp_path / "cpu.json"
    kn("run", AIDREAMS, "In my dream", "-n", 10, "--seed", 9, "--device", vk,
       "--gpu-layers", 3, "--receipt", r_vk)
    kn("run", AIDREAMS, "In my dream", "-n", 10, "--seed", 9, "--receipt", r_cpu)
    rec = json.loads(r_vk.read_text())
    assert rec["device"]["class"].startswith("vulkan-")
    assert rec["device"]["name"] and "CPU" not in rec["device"]["name"]
    assert rec["device"]["settings"]["gpu-layers"] == 3
    assert rec["kinetic"]["numerics"] == "canonical-1"
    assert rec["output"] == json.loads(r_cpu.read_text())["output"]
    assert "gpu-layers" not in json.loads(r_cpu.read_text())["device"]["settings"]
    # made on Vulkan: identical on the GPU (the default: the receipt's class) and on the CPU
    v = kn("verify-receipt", r_vk)
    assert re.search(r"^rerun: identical, \d+ of \d+ output tokens on vulkan-", v.stdout, re.M), v.stdout
    v = kn("verify-receipt", r_vk, "--device", "cpu")
    assert "(device class differs)" in v.stdout
    assert re.search(r"^rerun: identical, \d+ of \d+ output tokens on cpu-", v.stdout, re.M), v.stdout
    # made on the CPU: identical on Vulkan
    v = kn("verify-receipt", r_cpu, "--device", "vulkan:0")
    assert re.search(r"^rerun: identical, \d+ of \d+ output tokens on vulkan-", v.stdout, re.M), v.stdout
    v = kn("verify-receipt", r_cpu, "--device", "vulkan:0", "--gpu-layers", 1)
    assert "rerun: identical" in v.stdout, v.stdout


def test_the_recorded_verdict(vk, tmp_path):
    cache = tmp_path / "devices"

    def kn_env(setting, *args):
        env = dict(os.environ, KINETIC_DEVICE_CACHE=str(setting))
        r = subprocess.run([KINETIC, *map(str, args)], capture_output=True, text=True,
                           timeout=300, env=env)
        assert r.returncode == 0, (args, r.stdout[-3000:], r.stderr[-3000:])
        return r

    def record():
        files = list(cache.glob("*.kvd"))
        assert len(files) == 1, files
        return files[0], files[0].stat().st_ino, files[0].read_bytes()

    run = ("run", AIDREAMS, "In my dream", "-n", 10, "--seed", 9, "--device", vk)
    r_check, r_rec = tmp_path / "check.json", tmp_path / "rec.json"
    # the first start runs the check and records it; the second finds the record and
    # leaves it as it is (a start that ran the check would have replaced the file)
    first = kn_env(cache, *run, "--receipt", r_check)
    path, ino, data = record()
    assert len(data) == 2 * 32 + 16 + 1024
    second = kn_env(cache, *run, "--receipt", r_rec)
    assert record() == (path, ino, data), "the second start did not take the record"
    assert second.stdout == first.stdout
    assert json.loads(r_rec.read_text())["output"] == json.loads(r_check.read_text())["output"]
    # the receipt made with the record verifies identical with the check run, and the
    # other way round
    v = kn_env("off", "verify-receipt", r_rec)
    assert re.search(r"^rerun: identical, \d+ of \d+ output tokens on vulkan-", v.stdout, re.M), v.stdout
    v = kn_env(cache, "verify-receipt", r_check)
    assert re.search(r"^rerun: identical, \d+ of \d+ output tokens on vulkan-", v.stdout, re.M), v.stdout
    assert record() == (path, ino, data)
    # `kinetic devices` runs the check whatever is recorded, and rewrites the same record
    out = kn_env(cache, "devices").stdout
    st = re.search(r"^\s+self-test: (.+)$", out, re.M).group(1)
    assert "every op equals the CPU (kern_backend_check)" in st and "recorded" not in st, st
    again = record()
    assert again[0] == path and again[2] == data and again[1] != ino, "devices kept the record"


def test_warm_start_on_the_device(vk, tmp_path):
    cache = tmp_path / "p.cache"
    prompt = "In my dream I saw a garden of light and shadow, and"
    cold = kn("run", AIDREAMS, prompt, "-n", 10, "--seed", 4, "--json")
    first = kn("run", AIDREAMS, prompt, "-n", 10, "--seed", 4, "--json", "--device", vk,
               "--prompt-cache", cache)
    warm = kn("run", AIDREAMS, prompt + " then", "-n", 10, "--seed", 4, "--json",
              "--device", vk, "--prompt-cache", cache)
    again = kn("run", AIDREAMS, prompt + " then", "-n", 10, "--seed", 4, "--json")
    assert json.loads(first.stdout)["tokens"] == json.loads(cold.stdout)["tokens"]
    assert json.loads(warm.stdout)["tokens"] == json.loads(again.stdout)["tokens"]
    m = re.search(r"prompt cache: (\d+) of \d+ prompt tokens reused", warm.stderr)
    assert m and int(m.group(1)) > 0, warm.stderr
    # the device's cache record serves the CPU too (the same bits)
    cpu = kn("run", AIDREAMS, prompt + " then", "-n", 10, "--seed", 4, "--json",
             "--prompt-cache", cache)
    assert json.loads(cpu.stdout)["tokens"] == json.loads(again.stdout)["tokens"]


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_same_answer_demo_with_the_spec_arguments(tmp_path, device):
    if sanitizer_build():
        pytest.skip("sanitizer build: the demo's server and clients are test_server_demo's "
                    "(under ASan there), the device's ops test_vk_model's; the plain suite runs it")
    if device == "vulkan":
        reason = vulkan_reason()
        if reason:
            pytest.skip(reason)
    if not os.path.exists(AIDREAMS):
        pytest.skip("aidreams260K.gguf not found")
    receipt = tmp_path / "last.json"
    r = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "same_answer_demo.py"),
                        "--model", AIDREAMS, "--kinetic", KINETIC,
                        "--kinetic-args", f"--device {device}", "--receipt", str(receipt),
                        "--max-tokens", "40", "--busy-tokens", "60"],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "1 distinct answer in 10 runs" in out, out
    # it ends cleanly: no traceback from a busy client whose server was stopped under it
    assert "Traceback" not in r.stderr and "busy client" not in out, out + r.stderr
    rec = json.loads(receipt.read_text())
    assert rec["device"]["class"].startswith("cpu-" if device == "cpu" else "vulkan-")
    v = kn("verify-receipt", receipt, "--device", "cpu")
    assert "rerun: identical" in v.stdout, v.stdout
