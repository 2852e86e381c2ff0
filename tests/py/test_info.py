"""`kinetic info` on real files, cross-checked against gguf-py's GGUFReader (an
independent GGUF implementation), plus its behaviour on bad files and bad usage."""
import glob
import json
import os
import subprocess

import numpy as np
import pytest
import gguf

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
from srvutil import GEMMA

FILES = sorted(glob.glob(os.path.join(DATA, "vocab", "*.gguf")))
FILES.append(os.path.join(DATA, "models", "aidreams260K.gguf"))
if os.path.exists(GEMMA):
    FILES.append(GEMMA)

# llama.cpp's names for general.file_type ids (llama_model_ftype_name).
FTYPE_NAMES = {0: "all F32", 1: "F16", 2: "Q4_0", 7: "Q8_0", 15: "Q4_K - Medium",
               17: "Q5_K - Medium", 18: "Q6_K", 32: "BF16"}
SPECIALS = {"bos": "bos_token_id", "eos": "eos_token_id", "eot": "eot_token_id",
            "eom": "eom_token_id", "unk": "unknown_token_id", "pad": "padding_token_id",
            "sep": "seperator_token_id", "cls": "cls_token_id", "mask": "mask_token_id"}


def read_gguf(path):
    """gguf-py's reader over a plain in-memory array: its field parser slices the
    buffer once per string, and numpy's memmap subclass makes each slice several
    times dearer, which made this test take minutes on the vocabulary files."""
    saved = np.memmap
    np.memmap = lambda p, mode="r", **kw: np.fromfile(p, dtype=np.uint8)
    try:
        return gguf.GGUFReader(path)
    finally:
        np.memmap = saved


def run(*args):
    return subprocess.run([KINETIC, *args], capture_output=True, timeout=120)


def field(r, key):
    """A scalar or string value, or None."""
    f = r.fields.get(key)
    if f is None:
        return None
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return None
    return f.contents()


def token_bytes(r, i):
    f = r.fields["tokenizer.ggml.tokens"]
    return bytes(f.parts[f.data[i]])


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_info_json_matches_gguf_py(path):
    p = run("info", "--json", path)
    assert p.returncode == 0, p.stderr.decode()
    got = json.loads(p.stdout)
    r = read_gguf(path)
    assert got["file"] == path
    assert got["size"] == os.path.getsize(path)
    assert got["version"] == field(r, "GGUF.version")
    assert got["n_kv"] == field(r, "GGUF.kv_count")
    assert got["n_tensors"] == len(r.tensors)
    assert got["architecture"] == field(r, "general.architecture")
    assert got["name"] == field(r, "general.name")
    assert got["parameters"] == sum(int(t.n_elements) for t in r.tensors)
    if len(r.tensors):
        assert got["parameters"] > 0
    ftype = field(r, "general.file_type")
    assert got["file_type"]["id"] == ftype
    if ftype in FTYPE_NAMES:
        assert got["file_type"]["name"] == FTYPE_NAMES[ftype]
    hist = {}
    for t in r.tensors:
        name = t.tensor_type.name.lower()
        c, b = hist.get(name, (0, 0))
        hist[name] = (c + 1, b + int(t.n_bytes))
    assert {k.lower(): (v["count"], v["bytes"]) for k, v in got["tensor_types"].items()} == hist

    arch = field(r, "general.architecture")
    s = got["shapes"]
    for key, suffix in [("layers", "block_count"), ("embedding", "embedding_length"),
                        ("heads", "attention.head_count"), ("ffn", "feed_forward_length"),
                        ("context", "context_length")]:
        assert s[key] == field(r, f"{arch}.{suffix}"), key
    kv = field(r, f"{arch}.attention.head_count_kv")
    assert s["kv_heads"] == (kv if kv is not None else s["heads"])
    kl = field(r, f"{arch}.attention.key_length")
    if kl is not None:
        assert s["head_dim"] == kl
    elif s["heads"]:
        assert s["head_dim"] == s["embedding"] // s["heads"]
    rope = field(r, f"{arch}.rope.freq_base")
    assert s["rope_base"] == (None if rope is None else pytest.approx(rope, rel=1e-7))

    tokens = r.fields.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens.data) if tokens is not None else None
    assert got["tokenizer"]["vocab_size"] == n_vocab
    assert s["vocab_size"] == n_vocab
    assert got["tokenizer"]["model"] == field(r, "tokenizer.ggml.model")
    assert got["tokenizer"]["pre"] == field(r, "tokenizer.ggml.pre")
    want_specials = {}
    for name, suffix in SPECIALS.items():
        tid = field(r, "tokenizer.ggml." + suffix)
        if tid is None:
            continue
        text = None
        if n_vocab is not None and tid < n_vocab:
            text = token_bytes(r, tid).decode("utf-8", errors="replace")
        want_specials[name] = {"id": tid, "text": text}
    assert got["special_tokens"] == want_specials
    tmpl = field(r, "tokenizer.chat_template")
    assert got["chat_template"] == {"present": tmpl is not None,
                                    "length": len(tmpl.encode()) if tmpl is not None else 0}


def test_info_text_aidreams():
    path = os.path.join(DATA, "models", "aidreams260K.gguf")
    p = run("info", path)
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode()
    for line in ["architecture:     llama", "parameters:       263744", "layers           4",
                 "embedding        64", "f32              39 tensors", "vocabulary:       512 tokens",
                 'bos              1 "<s>"', "chat template:    none"]:
        assert line in out, line


@pytest.mark.skipif(not os.path.exists(GEMMA), reason="the Gemma 3 270M file is not cached")
def test_info_text_gemma():
    out = run("info", GEMMA).stdout.decode()
    assert "file type:        Q4_K - Medium (general.file_type 15)" in out
    assert "head dim         256" in out and "kv heads         1" in out


def test_info_truncated(tmp_path):
    src = os.path.join(DATA, "models", "aidreams260K.gguf")
    data = open(src, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    p = run("info", str(cut))
    assert p.returncode == 1
    err = p.stderr.decode()
    assert str(cut) in err and "truncated download?" in err and "tensor " in err
    assert p.stdout == b""
    # Cut inside the vocabulary: the message names the key and the byte offset.
    cut.write_bytes(data[:3000])
    p = run("info", str(cut))
    assert p.returncode == 1
    assert "tokenizer.ggml.tokens" in p.stderr.decode() and "byte" in p.stderr.decode()


def test_info_bad_files(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04 this is a zip file")
    p = run("info", str(bad))
    assert p.returncode == 1 and b"not a GGUF file" in p.stderr
    p = run("info", str(tmp_path / "missing.gguf"))
    assert p.returncode == 1 and b"cannot open" in p.stderr
    p = run("info", str(tmp_path))
    assert p.returncode == 1 and b"not a regular file" in p.stderr


def test_info_usage():
    p = run("info")
    assert p.returncode == 2 and b"kinetic info --help" in p.stderr
    p = run("info", "--jsn", "x.gguf")
    assert p.returncode == 2 and b"--jsn" in p.stderr
    p = run("info", "--help")
    assert p.returncode == 0 and b"usage: kinetic info" in p.stdout


def test_info_per_layer_and_guessed_type(tmp_path):
    """Per-layer head counts report their largest value; without general.file_type the
    type of most weight matrices is reported as a guess; a vocabulary-free file works."""
    path = tmp_path / "synthetic.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(3)
    w.add_embedding_length(64)
    w.add_array("llama.attention.head_count", [4, 8, 8])
    w.add_head_count_kv(2)
    w.add_rope_freq_base(500000.0)
    w.add_tensor("a.weight", np.zeros((2, 34), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("b.weight", np.zeros((4, 34), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("norm.weight", np.ones(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p = run("info", "--json", str(path))
    assert p.returncode == 0, p.stderr.decode()
    got = json.loads(p.stdout)
    assert got["shapes"]["heads"] == 8 and got["shapes"]["kv_heads"] == 2
    assert got["shapes"]["head_dim"] is None  # heads vary by layer: no single head size
    assert got["shapes"]["rope_base"] == 500000.0
    assert got["file_type"] == {"id": None, "name": "Q8_0 (guessed)"}
    assert got["parameters"] == 2 * 32 + 4 * 32 + 64
    assert got["tensor_types"] == {"q8_0": {"count": 2, "bytes": 6 * 34},
                                   "f32": {"count": 1, "bytes": 256}}
    assert got["tokenizer"] == {"model": None, "pre": None, "vocab_size": None}
    assert got["special_tokens"] == {}
    out = run("info", str(path)).stdout.decode()
    assert "heads            8 (largest of a per-layer list)" in out


def test_info_hostile_strings(tmp_path):
    """Long or control-character strings are shortened and neutralised in text output
    and escaped in JSON."""
    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(path), "a\n" + "x" * 300)
    w.add_string("general.name", 'q"\x01')
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = run("info", str(path)).stdout.decode()
    assert "architecture:     a?" + "x" * 198 + "...\n" in out
    got = json.loads(run("info", "--json", str(path)).stdout)
    assert got["architecture"] == "a\n" + "x" * 300 and got["name"] == 'q"\x01'
