"""test_run_chat.py: `kinetic run` applies the model's chat template exactly as the real
Jinja template renders it (jinja2 set up as Hugging Face does: jinja_ref.py), and user text
never becomes special tokens. (tests/py/test_chat_template.py covers conversations, tools,
kwargs, tokens against Hugging Face tokenizers, the server and errors.)

Each real template is put into a copy of aidreams260K (gguf-new-metadata from gguf-py),
and `kinetic run --print-prompt` shows the rendered prompt and its ids.
"""
import json
import os
import re
import subprocess
import sys

import time

import pytest

jinja2 = pytest.importorskip("jinja2")
import jinja_ref  # noqa: E402

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")
from srvutil import GEMMA  # noqa: E402
# gguf-py's metadata copier, run by the interpreter running the tests.
NEW_METADATA = [sys.executable, "-m", "gguf.scripts.gguf_new_metadata"]

TEMPLATES = [
    "templates/Qwen-Qwen2.5-7B-Instruct.jinja",
    "templates/Qwen-Qwen3-0.6B.jinja",
    "templates/Qwen-QwQ-32B.jinja",
    "templates/meta-llama-Llama-3.1-8B-Instruct.jinja",
    "templates/meta-llama-Llama-3.2-3B-Instruct.jinja",
    "templates/meta-llama-Llama-3.3-70B-Instruct.jinja",
    "templates/microsoft-Phi-3.5-mini-instruct.jinja",
    "templates/mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "templates/google-gemma-2-2b-it.jinja",
    "tokenizers/gemma3/tokenizer_config.json",
    "tokenizers/llama3/tokenizer_config.json",
    "tokenizers/qwen3/tokenizer_config.json",
]


def template_source(rel):
    path = os.path.join(DATA, rel)
    if rel.endswith(".json"):
        return json.load(open(path))["chat_template"]
    return open(path).read()


def jinja_render(src, messages):
    """jinja2's text with aidreams' BOS/EOS texts (the model's, as Kinetic passes them),
    or None when the template raises (e.g. Gemma 2 refuses a system message)."""
    ctx = jinja_ref.chat_context({"messages": messages, "add_generation_prompt": True},
                                 "<s>", "</s>")
    r = jinja_ref.render(src, ctx, now=time.time())
    return r[1] if r[0] == "ok" else None


def print_prompt(model, args):
    p = subprocess.run([KINETIC, "run", model, "--print-prompt", *args], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    m = re.match(r"(?s)(.*)\n\[template (\w+) from ([^;]*); (\d+) tokens:([ 0-9]*)\]\n$", p.stdout)
    assert m, p.stdout
    ids = [int(x) for x in m.group(5).split()]
    return m.group(1), m.group(2), ids


@pytest.mark.parametrize("rel", TEMPLATES)
def test_template_renders_like_jinja(tmp_path, rel):
    src = template_source(rel)
    tpl = tmp_path / "t.jinja"
    tpl.write_text(src)
    model = tmp_path / "m.gguf"
    subprocess.run(NEW_METADATA + [AIDREAMS, str(model), "--chat-template-file", str(tpl)],
                   check=True, capture_output=True)
    convs = [[{"role": "user", "content": "Hello there"}],
             [{"role": "system", "content": "You are terse."}, {"role": "user", "content": " Hi "}]]
    for msgs in convs:
        want = jinja_render(src, msgs)
        if want is None:
            continue  # e.g. Gemma 2 refuses a system message
        args = [msgs[-1]["content"]]
        if msgs[0]["role"] == "system":
            args += ["--system", msgs[0]["content"]]
        text, fmt, _ = print_prompt(str(model), args)
        assert fmt == "jinja", rel
        assert text == want, f"{rel}: {fmt}"


def test_no_template_is_raw():
    text, fmt, ids = print_prompt(AIDREAMS, ["In my dream", "--system", "Be brief."])
    assert fmt == "raw"
    assert text == "Be brief.\n\nIn my dream"
    assert ids[0] == 1  # BOS, as the vocabulary asks


def test_markers_are_special_and_user_text_is_not(tmp_path):
    vocab = os.path.join(DATA, "vocab", "ggml-vocab-phi-3.gguf")
    model = tmp_path / "phi.gguf"
    p = subprocess.run([KINETIC, "synth", "--arch", "llama", "--preset", "tiny", "--vocab", vocab,
                        "-o", str(model)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(model))
    f = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
    user_id, end_id = toks.index("<|user|>"), toks.index("<|end|>")
    text, fmt, ids = print_prompt(str(model), ["say <|end|> now", "--chat-format", "phi3"])
    assert fmt == "phi3"
    assert text == "<|user|>\nsay <|end|> now<|end|>\n<|assistant|>\n"
    assert ids.count(user_id) == 1  # the marker
    assert ids.count(end_id) == 1   # only the template's, not the user's


@pytest.mark.skipif(not os.path.exists(GEMMA), reason="Gemma 3 270M not found; set KN_GEMMA")
def test_gemma_turn_tokens():
    text, fmt, ids = print_prompt(GEMMA, ["Hi <end_of_turn>", "--chat-format", "gemma"])
    assert fmt == "gemma"
    # <bos> <start_of_turn> user \n Hi ... <end_of_turn> \n <start_of_turn> model \n
    assert ids[:2] == [2, 105]
    assert ids.count(106) == 1 and ids.count(105) == 2
    _, fmt, raw_ids = print_prompt(GEMMA, ["Hi"])
    assert fmt == "raw"  # the base model ships no template


# A 1.5 KB-class template whose string scans grow with a string it builds (issue 44): before
# every scan was charged to the template's work budget, `kinetic run` (and `serve`) spun at
# load for tens of minutes rendering it once to check it; now the trial render is refused
# in well under a second and the built-in template stands in, with the reason on stderr.
HOSTILE = ("{%- set s = 'ab' * 500000 -%}"
           "{%- for i in range(100000) -%}{%- if '<|im_end|>' in s -%}x{%- endif -%}{%- endfor -%}"
           "{%- for message in messages -%}<|im_start|>{{ message.role }}\n"
           "{{ message.content }}<|im_end|>\n{% endfor -%}")


def test_hostile_template_is_refused_at_load(tmp_path):
    tpl = tmp_path / "t.jinja"
    tpl.write_text(HOSTILE)
    model = tmp_path / "m.gguf"
    subprocess.run(NEW_METADATA + [AIDREAMS, str(model), "--chat-template-file", str(tpl)],
                   check=True, capture_output=True)
    t0 = time.monotonic()
    p = subprocess.run([KINETIC, "run", str(model), "--print-prompt", "Hello"],
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert "template exceeds its work budget" in p.stderr, p.stderr
    assert "line 1" in p.stderr, p.stderr
    assert took < 10, f"the refusal took {took:.1f} s"
    assert "[template " in p.stdout and "jinja" not in p.stdout.rsplit("[template ", 1)[1]
