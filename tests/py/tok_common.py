"""Shared pieces of the tokenizer tests: running `kinetic tokenize --hex-lines` on many
texts at once, reading llama.cpp's vocabulary test files, and building vocabularies from
tokenizer.json files (cached in the build folder)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import vocab_from_hf  # noqa: E402

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
BUILD = os.environ.get("KN_BUILD", "build")


def tokenize_many(model, texts, add_special=False, parse_special=False):
    """Token ids of each text (str or bytes), through one kinetic process."""
    lines = []
    for t in texts:
        b = t.encode("utf-8") if isinstance(t, str) else t
        lines.append(b.hex())
    args = [KINETIC, "tokenize", model, "--hex-lines"]
    if not add_special:
        args.append("--no-bos")
    if not parse_special:
        args.append("--no-parse-special")
    r = subprocess.run(args, input="\n".join(lines) + "\n", capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split("\n")[:-1]
    assert len(out) == len(texts), (len(out), len(texts), r.stderr)
    return [[int(x) for x in line.split()] for line in out]


def read_vocab_tests(inp_path, out_path):
    """llama.cpp's format: inputs separated by "\\n__ggml_vocab_test__\\n", one line of ids
    per input."""
    raw = open(inp_path, "rb").read().decode("utf-8")
    sep = "\n__ggml_vocab_test__\n"
    inputs = []
    pos = 0
    while pos < len(raw):
        nxt = raw.find(sep, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(sep)
    outs = open(out_path, encoding="utf-8").read().split("\n")
    if outs and outs[-1] == "":
        outs.pop()
    assert len(inputs) == len(outs), (inp_path, len(inputs), len(outs))
    return [(s, [int(x) for x in o.split()]) for s, o in zip(inputs, outs)]


HF_SOURCES = {
    # name: (tokenizer dir, pre-tokenizer name)
    "llama3": ("llama3", "llama-bpe"),
    "qwen3": ("qwen3", "qwen2"),
    "llama2": ("llama2", None),
    "gemma3": ("gemma3", None),
}


def hf_vocab(name):
    """A vocabulary GGUF built from tokenizers/NAME/tokenizer.json (cached)."""
    d, pre = HF_SOURCES[name]
    src = os.path.join(DATA, "tokenizers", d)
    out_dir = os.path.join(BUILD, "tokvocab")
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, name + ".gguf")
    helper = os.path.join(os.path.dirname(__file__), "vocab_from_hf.py")
    newest_input = max(os.path.getmtime(os.path.join(src, "tokenizer.json")),
                       os.path.getmtime(helper))
    if not os.path.exists(out) or os.path.getmtime(out) < newest_input:
        tmp = f"{out}.{os.getpid()}.tmp"
        vocab_from_hf.build(src, tmp, pre)
        os.replace(tmp, out)
    return out
