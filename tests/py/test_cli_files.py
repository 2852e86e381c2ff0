"""Files the CLI opens that are not what they seem (issue 16, item 10): a FIFO, a directory
or a device given as the model or as the prompt file. Every command refuses them at once,
naming the file and what it is, instead of blocking in open() or reading without end; a
prompt file is read up to the stated limit (CLI_PROMPT_MAX_BYTES, 16 MiB) and no further."""
import os
import resource
import subprocess

import pytest

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
MODEL = os.path.join(DATA, "models", "aidreams260K.gguf")
PROMPT_MAX = 16 << 20  # CLI_PROMPT_MAX_BYTES in src/cli/cli_prompt.c (MODEL_MAX_CTX x 16)


def kinetic(*args, stdin=subprocess.DEVNULL, timeout=30):
    return subprocess.run([KINETIC, *args], capture_output=True, text=True, stdin=stdin,
                          timeout=timeout)


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "model.gguf"
    os.mkfifo(p)
    return str(p)


def need_model():
    if not os.path.exists(MODEL):
        pytest.skip("aidreams260K.gguf not found")


MODEL_COMMANDS = [
    ("run", ["hello"]), ("tokenize", ["hello"]), ("info", []), ("bench", []),
    ("serve", []), ("chat", []),
]


@pytest.mark.parametrize("cmd,rest", MODEL_COMMANDS, ids=[c[0] for c in MODEL_COMMANDS])
def test_fifo_as_model_is_refused_without_blocking(fifo, cmd, rest):
    # No writer ever opens the FIFO: a blocking open() would never return (timeout).
    r = kinetic(cmd, fifo, *rest, timeout=20)
    assert r.returncode != 0, r
    assert fifo in r.stderr and "not a regular file (a FIFO)" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd,rest", MODEL_COMMANDS[:3], ids=[c[0] for c in MODEL_COMMANDS[:3]])
def test_directory_as_model_is_refused(tmp_path, cmd, rest):
    r = kinetic(cmd, str(tmp_path), *rest)
    assert r.returncode != 0 and "not a regular file (a directory)" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["run", "tokenize"])
@pytest.mark.parametrize("what", ["fifo", "/dev/zero", "directory"])
def test_prompt_file_must_be_regular(cmd, what, fifo, tmp_path):
    need_model()
    path = {"fifo": fifo, "directory": str(tmp_path)}.get(what, what)
    kind = {"fifo": "a FIFO", "directory": "a directory", "/dev/zero": "a character device"}[what]
    r = kinetic(cmd, MODEL, "-f", path, timeout=20)
    assert r.returncode == 1, r
    assert f"-f: {path}: not a regular file ({kind})" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["run", "tokenize"])
def test_prompt_file_over_the_limit(cmd, tmp_path):
    need_model()
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:  # sparse: one byte past the limit
        f.truncate(PROMPT_MAX + 1)
    r = kinetic(cmd, MODEL, "-f", str(big))
    assert r.returncode == 1, r
    assert "larger than 16 MiB" in r.stderr and "largest context" in r.stderr, r.stderr
    ok = tmp_path / "ok.txt"
    ok.write_text("Once upon a time")
    r = kinetic(cmd, MODEL, "-f", str(ok), *(["-n", "4", "--temp", "0"] if cmd == "run" else []))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("args", [["-f", "-"], ["-"]], ids=["-f -", "PROMPT -"])
def test_endless_standard_input_is_cut_at_the_limit(args):
    """`run MODEL -f - < /dev/zero` grew to gigabytes; now it stops at the limit."""
    need_model()
    with open("/dev/zero", "rb") as zero:
        r = kinetic("run", MODEL, *args, stdin=zero, timeout=60)
    assert r.returncode == 1, r
    assert "the prompt in standard input is larger than 16 MiB" in r.stderr, r.stderr
    # ru_maxrss (KiB) of the largest child so far: bounded near twice the limit, not
    # growing with the input (ASan builds take more, still far below this).
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < (1 << 20), "unbounded read"


def test_prompt_with_nul_byte_is_refused(tmp_path):
    """The prompt goes into the receipt, whose verifier refuses a NUL byte (the renderer
    would stop there and hide what follows): run refuses it up front, naming the offset."""
    need_model()
    p = tmp_path / "nul.txt"
    p.write_bytes(b"Once\x00 upon a time")
    r = kinetic("run", MODEL, "-f", str(p), "-n", "4")
    assert r.returncode == 1, r
    assert f"the prompt in {p} holds a NUL byte at offset 4" in r.stderr, r.stderr
    r = subprocess.run([KINETIC, "run", MODEL, "-", "-n", "4"], input=b"Once\x00 upon",
                       capture_output=True, timeout=30)
    assert r.returncode == 1 and b"standard input holds a NUL byte" in r.stderr, r.stderr
