"""Kinetic's tokenizers against Hugging Face's `tokenizers` on a few thousand generated
strings (whitespace runs, digits, emoji, code, CJK, combining marks, contractions, other
scripts, special-token texts), each vocabulary built from the same tokenizer.json by
vocab_from_hf.py; and the real Gemma 3 model's own vocabulary against HF's gemma3.
Special-token texts are parsed (HF's default), BOS is not added. Decoding is checked too:
Kinetic's streaming decoder must give back HF's decoded text."""
import functools
import json
import os
import struct
import subprocess

import pytest

import tok_common as tc
import tok_strings

tokenizers = pytest.importorskip("tokenizers")

N_STRINGS = 2500
from srvutil import GEMMA as GEMMA_GGUF


@functools.lru_cache(maxsize=None)
def hf_tokenizer(name):
    """HF's tokenizer and its added tokens' texts (loaded once: Gemma's takes seconds)."""
    path = os.path.join(tc.DATA, "tokenizers", tc.HF_SOURCES[name][0], "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(path)
    added = [a.content for _, a in sorted(hf.get_added_tokens_decoder().items())]
    return hf, added


def decode_many(model, id_lists, special=True):
    args = [tc.KINETIC, "tokenize", model, "--hex-lines", "--decode", "-"]
    if special:
        args.append("--special")
    r = subprocess.run(args, input="\n".join(" ".join(map(str, ids)) for ids in id_lists) + "\n",
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [bytes.fromhex(h) for h in r.stdout.split("\n")[:-1]]


def check(name, model):
    hf, added = hf_tokenizer(name)
    # Special-token texts (not image placeholders beyond the GGUF vocabulary).
    specials = [a for a in added if hf.token_to_id(a) is not None and hf.token_to_id(a) < 262144]
    texts = tok_strings.generate(N_STRINGS, specials=specials[:64])
    expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    got = tc.tokenize_many(model, texts, parse_special=True)
    bad = [(t, e, g) for t, e, g in zip(texts, expected, got) if e != g]
    assert not bad, f"{len(bad)} of {len(texts)} differ; first:\n" + "\n".join(
        f"{t!r}\n  hf: {e}\n  kn: {g}" for t, e, g in bad[:5])

    # Decoding HF's ids gives HF's text (llama2's decoder strips a leading space; not here).
    if name != "llama2":
        texts_back = decode_many(model, expected)
        hf_back = hf.decode_batch(expected, skip_special_tokens=False)
        bad = [(t, h, k) for t, h, k in zip(texts, hf_back, texts_back) if h.encode() != k]
        assert not bad, f"{len(bad)} decodes differ; first:\n" + "\n".join(
            f"{t!r}\n  hf: {h!r}\n  kn: {k!r}" for t, h, k in bad[:5])


@pytest.mark.parametrize("name", ["llama3", "qwen3", "llama2", "gemma3"])
def test_against_hf(name):
    check(name, tc.hf_vocab(name))


@pytest.mark.skipif(not os.path.exists(GEMMA_GGUF), reason="the Gemma 3 270M model file is absent")
def test_gemma3_model_vocab_against_hf():
    check("gemma3", GEMMA_GGUF)



# The pre-tokenizers that no shared vocabulary uses, checked on Llama 3's vocabulary:
# Hugging Face's tokenizer gets the same regex (as written in those models' tokenizer.json)
# and merge rule as the GGUF's tokenizer.ggml.pre selects.
GPT4O_REGEX = (
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
LLAMA3_REGEX = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2_REGEX = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


@functools.lru_cache(maxsize=None)
def llama3_without_ignore_merges():
    src = os.path.join(tc.DATA, "tokenizers", "llama3", "tokenizer.json")
    with open(src, encoding="utf-8") as f:
        tj = json.load(f)
    tj["model"]["ignore_merges"] = False
    return tokenizers.Tokenizer.from_str(json.dumps(tj))


@pytest.mark.parametrize("pre,regex", [
    ("gpt-4o", GPT4O_REGEX),
    ("stablelm2", QWEN2_REGEX),
    ("dbrx", LLAMA3_REGEX),
])
def test_other_pre_tokenizers(pre, regex, tmp_path):
    from tokenizers import Regex, pre_tokenizers
    hf = llama3_without_ignore_merges()
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    model = str(tmp_path / "vocab.gguf")
    with open(tc.hf_vocab("llama3"), "rb") as f:
        data = f.read()
    # The cached Llama 3 vocabulary with another tokenizer.ggml.pre (a length-prefixed
    # string value, type 8).
    key = b"tokenizer.ggml.pre"
    old = key + struct.pack("<IQ", 8, 9) + b"llama-bpe"
    assert data.count(old) == 1
    new = key + struct.pack("<IQ", 8, len(pre)) + pre.encode()
    with open(model, "wb") as f:
        f.write(data.replace(old, new))
    texts = tok_strings.generate(800, seed=7)
    expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    got = tc.tokenize_many(model, texts, parse_special=True)
    bad = [(t, e, g) for t, e, g in zip(texts, expected, got) if e != g]
    assert not bad, f"{len(bad)} of {len(texts)} differ; first:\n" + "\n".join(
        f"{t!r}\n  hf: {e}\n  kn: {g}" for t, e, g in bad[:5])


@pytest.mark.parametrize("name", ["llama3", "qwen3"])
def test_special_text_unparsed_against_hf(name):
    """parse_special off is HF's encode_special_tokens: special-token texts are plain text,
    while the other added tokens (Qwen's <think>) are still matched whole. Added tokens that
    HF calls non-special but that look special (Qwen's <|fim_prefix|>) are control tokens in
    GGUF files (convert_hf_to_gguf.py), so Kinetic, like llama.cpp, does not match them:
    strings holding those are left out."""
    hf, added = hf_tokenizer(name)
    control_looking = [a.content for a in hf.get_added_tokens_decoder().values()
                       if not a.special and tc.vocab_from_hf.looks_special(a.content)]
    texts = [t for t in tok_strings.generate(1500, seed=11, specials=added[:64])
             if not any(a in t for a in control_looking)]
    assert len(texts) > 1000
    hf.encode_special_tokens = True
    try:
        expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    finally:
        hf.encode_special_tokens = False
    got = tc.tokenize_many(tc.hf_vocab(name), texts, parse_special=False)
    bad = [(t, e, g) for t, e, g in zip(texts, expected, got) if e != g]
    assert not bad, f"{len(bad)} of {len(texts)} differ; first:\n" + "\n".join(
        f"{t!r}\n  hf: {e}\n  kn: {g}" for t, e, g in bad[:5])
