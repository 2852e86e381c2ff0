"""`kinetic tokenize`: the tokenizer's description (special and end-of-generation ids of each
family), the chat-template case (special tokens parsed only when asked), stdin input, and
decoding."""
import os
import subprocess

import pytest

import tok_common as tc

from srvutil import GEMMA as GEMMA_GGUF


def kinetic(*args, stdin=None):
    r = subprocess.run([tc.KINETIC, "tokenize", *args], input=stdin, capture_output=True,
                       text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def info(model):
    rc, out, err = kinetic(model, "--info")
    assert rc == 0, err
    return {line.split()[0]: line.split(None, 1)[1] if len(line.split()) > 1 else ""
            for line in out.splitlines()}


@pytest.mark.skipif(not os.path.exists(GEMMA_GGUF), reason="the Gemma 3 270M model file is absent")
def test_gemma3_specials_and_chat_text():
    i = info(GEMMA_GGUF)
    assert i["model"].startswith("llama")
    assert i["bos"].startswith("2 ") and i["eos"].startswith("1 ")
    assert i["eot"] == "106 '<end_of_turn>'"
    assert i["eog"].split() == ["1", "106"]
    assert i["add_bos"] == "true" and i["add_space_prefix"] == "false"
    turn = "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"
    parsed, plain = tc.tokenize_many(GEMMA_GGUF, [turn], parse_special=True)[0], \
        tc.tokenize_many(GEMMA_GGUF, [turn], parse_special=False)[0]
    assert parsed[0] == 105 and 106 in parsed and parsed.count(105) == 2
    assert 105 not in plain and 106 not in plain
    with_bos = tc.tokenize_many(GEMMA_GGUF, [turn], add_special=True, parse_special=True)[0]
    assert with_bos == [2] + parsed
    # Decoding renders control tokens only when asked.
    rc, out, _ = kinetic(GEMMA_GGUF, "--decode", " ".join(map(str, parsed)), "--special")
    assert rc == 0 and out == turn
    rc, out, _ = kinetic(GEMMA_GGUF, "--decode", " ".join(map(str, parsed)))
    assert rc == 0 and out == "user\nHello\nmodel\n"


def test_llama3_and_qwen_end_of_generation():
    i = info(tc.hf_vocab("llama3"))
    assert i["pre"] == "llama-bpe" and i["add_bos"] == "true"
    assert i["eot"] == "128009 '<|eot_id|>'"
    assert set(i["eog"].split()) >= {"128001", "128009"}
    i = info(tc.hf_vocab("qwen3"))
    assert i["pre"] == "qwen2" and i["bos"] == "none" and i["add_bos"] == "false"
    assert "151645" in i["eog"].split()  # <|im_end|>
    assert i["eot"].startswith("151645 ")


def test_text_stdin_and_pieces():
    model = os.path.join(tc.DATA, "vocab", "ggml-vocab-llama-spm.gguf")
    rc, out, err = kinetic(model, "Hello world")
    assert rc == 0, err
    assert out.splitlines() == ["     1 -> '<s>'", " 15043 -> ' Hello'", "  3186 -> ' world'"]
    rc, out, err = kinetic(model, "-f", "-", "--ids-only", stdin="Hello world")
    assert rc == 0 and out == "1 15043 3186\n", err
    rc, out, err = kinetic(model, "--ids-only", "--no-bos", "Hello world")
    assert rc == 0 and out == "15043 3186\n"
    rc, out, err = kinetic(model, "--decode", "15043 3186")
    assert rc == 0 and out == " Hello world"
    rc, out, err = kinetic(model, "--decode", "32000")
    assert rc == 2 and "outside the vocabulary" in err
    rc, out, err = kinetic(model)
    assert rc == 2 and "TEXT" in err
