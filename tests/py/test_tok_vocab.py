"""llama.cpp's tokenizer test cases (shared/vocab/ggml-vocab-*.gguf.inp/.out): every case of
every family, tokenized without BOS and without parsing special tokens, as llama.cpp's
test-tokenizer-0 does. Families whose vocabulary file is not shared (llama-bpe, qwen2) use
a vocabulary built from the matching tokenizer.json."""
import glob
import os
import subprocess

import pytest

import tok_common as tc

VOCAB = os.path.join(tc.DATA, "vocab")
# Families whose GGUF is not in the shared folder, and the tokenizer.json that matches.
BUILT = {"llama-bpe": "llama3", "qwen2": "qwen3"}


def families():
    return sorted(os.path.basename(p)[len("ggml-vocab-"):-len(".gguf.inp")]
                  for p in glob.glob(os.path.join(VOCAB, "ggml-vocab-*.gguf.inp")))


@pytest.mark.parametrize("family", families())
def test_vocab_cases(family):
    base = os.path.join(VOCAB, f"ggml-vocab-{family}.gguf")
    cases = tc.read_vocab_tests(base + ".inp", base + ".out")
    if os.path.exists(base):
        model = base
    elif family in BUILT:
        model = tc.hf_vocab(BUILT[family])
    else:
        pytest.skip(f"no vocabulary for {family}: neither {base} nor a tokenizer.json")
    got = tc.tokenize_many(model, [c[0] for c in cases])
    bad = [(s, exp, g) for (s, exp), g in zip(cases, got) if exp != g]
    assert not bad, "\n".join(f"{s!r}: expected {e}, got {g}" for s, e, g in bad[:10])
    assert len(cases) >= 40


def test_add_special_and_parse_special():
    """BOS comes from add_bos_token; control-token text is a token only when parsed."""
    model = os.path.join(VOCAB, "ggml-vocab-llama-spm.gguf")
    plain, bos, parsed = (
        tc.tokenize_many(model, ["Hello</s>"], add_special=False, parse_special=False)[0],
        tc.tokenize_many(model, ["Hello</s>"], add_special=True, parse_special=False)[0],
        tc.tokenize_many(model, ["Hello</s>"], add_special=True, parse_special=True)[0])
    assert bos == [1] + plain
    assert 2 not in plain and 2 not in bos
    assert parsed[-1] == 2 and parsed[0] == 1
    assert parsed[:-1] == tc.tokenize_many(model, ["Hello"], add_special=True)[0]


def test_unsupported_model_is_named(tmp_path):
    import gguf
    path = str(tmp_path / "t5.gguf")
    w = gguf.GGUFWriter(path, arch="t5")
    w.add_tokenizer_model("t5")
    w.add_token_list(["<pad>", "</s>", "a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = subprocess.run([tc.KINETIC, "tokenize", path, "x"], capture_output=True, text=True)
    assert r.returncode == 1
    assert "unsupported tokenizer model 't5'" in r.stderr


def test_bert_special_tokens():
    """WordPiece adds [CLS] ... [SEP]; accents and case go; punctuation stands alone."""
    model = os.path.join(VOCAB, "ggml-vocab-bert-bge.gguf")
    ids = tc.tokenize_many(model, ["Hello, WORLD! Äpfel A\u0308pfel"], add_special=True)[0]
    plain = tc.tokenize_many(model, ["hello , world ! apfel apfel"])[0]
    assert ids == [101] + plain + [102]
