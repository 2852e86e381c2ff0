"""llama.cpp's spellings (issue 37, parts 4 and 5). Every alias a command takes has the
effect of Kinetic's own flag: the same tokens, prompt, receipt, vectors or error. An unknown
option gets the nearest spelling of that command; --chat-template NAME picks a built-in
template; verify-receipt checks the receipts inside a saved server response (chat,
completion, a stream's final chunk, a whole stream) and says where a receipt should be when
a response has none.

The models are `kinetic synth` ones (random weights, the built-in vocabulary), made in a
temporary folder: no test data is read."""
import json
import os
import subprocess

import pytest

from srvutil import KINETIC, Server


def kinetic(*args, stdin=None, check=True, timeout=120):
    r = subprocess.run([KINETIC, *map(str, args)], capture_output=True, text=True,
                       input=stdin, timeout=timeout, errors="surrogateescape")
    if check:
        assert r.returncode == 0, (args, r.stderr)
    return r


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("aliases")
    llama, bert = d / "tiny.gguf", d / "bert.gguf"
    kinetic("synth", "--preset", "tiny", "-o", llama)
    kinetic("synth", "--arch", "bert", "--preset", "tiny", "-o", bert)
    return {"dir": d, "llama": str(llama), "bert": str(bert)}


# A fixed seed at temperature 0.8: every sampler runs, so a setting that changed would show.
GEN = ["-n", "6", "--seed", "7"]
PROMPT = "Once upon a time"


def run_json(*args):
    r = kinetic("run", *args, "--json")
    js = json.loads(r.stdout)
    return (js["prompt_tokens"], js["tokens"], js["text"]), r.stderr


def print_prompt(*args):
    return json.loads(kinetic("run", *args, "--print-prompt", "--json").stdout)


# ---------------------------------------------------------------- run


@pytest.mark.parametrize("args", [
    ["-m", "{m}", "-p", PROMPT],
    ["--model", "{m}", "--prompt", PROMPT],
    ["--model={m}", f"--prompt={PROMPT}"],
    ["-p", PROMPT, "{m}"],        # the loose argument fills the slot -p did not
    ["-m", "{m}", PROMPT],
], ids=["-m -p", "--model --prompt", "--model= --prompt=", "-p then MODEL", "-m then PROMPT"])
def test_run_model_and_prompt_flags(models, args):
    m = models["llama"]
    want, _ = run_json(m, PROMPT, *GEN)
    got, _ = run_json(*[a.replace("{m}", m) for a in args], *GEN)
    assert got == want


def test_run_prompt_file_flags(models, tmp_path):
    m = models["llama"]
    f = tmp_path / "p.txt"
    f.write_text(PROMPT)
    want, _ = run_json(m, PROMPT, *GEN)
    assert run_json(m, "-f", f, *GEN)[0] == want
    assert run_json("-m", m, "--file", f, *GEN)[0] == want


def test_run_missing_model_and_extra_argument(models):
    r = kinetic("run", "-p", PROMPT, check=False)
    assert r.returncode == 2
    assert "kinetic run: no MODEL.gguf given: give it as argument 1 or with --model" in r.stderr
    r = kinetic("run", "-m", models["llama"], "-p", PROMPT, "extra", check=False)
    assert r.returncode == 2 and "unexpected argument 'extra'" in r.stderr, r.stderr


@pytest.mark.parametrize("alias", ["-ngl", "--n-gpu-layers"])
def test_gpu_layers_aliases(models, alias):
    m = models["llama"]
    # 0 layers on a GPU: the CPU run, unchanged
    want, _ = run_json(m, PROMPT, *GEN, "--gpu-layers", "0")
    assert run_json(m, PROMPT, *GEN, alias, "0")[0] == want
    # layers on a GPU without a GPU device: the same refusal
    a = kinetic("run", m, PROMPT, "--seed", "1", "--gpu-layers", "3", check=False)
    b = kinetic("run", m, PROMPT, "--seed", "1", alias, "3", check=False)
    assert a.returncode == b.returncode == 2
    assert "--gpu-layers puts layers on a GPU" in b.stderr and a.stderr == b.stderr


@pytest.mark.parametrize("alias", ["-sys", "--system-prompt"])
def test_system_aliases(models, alias):
    m = models["llama"]
    for fmt in ([], ["--chat-format", "chatml"]):
        want = print_prompt(m, PROMPT, "--system", "Be brief.", *fmt)
        got = print_prompt(m, PROMPT, alias, "Be brief.", *fmt)
        assert got == want and "Be brief." in got["prompt"]


@pytest.mark.parametrize("kv", [["-ctk", "q8_0", "-ctv", "q8_0"],
                                ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"],
                                ["-ctk", "q8_0", "--kv-type", "q8_0"]],
                         ids=["-ctk -ctv", "--cache-type-k/v", "-ctk with --kv-type"])
def test_cache_type_aliases(models, tmp_path, kv):
    m = models["llama"]
    ra, rb = tmp_path / "a.json", tmp_path / "b.json"
    want, _ = run_json(m, PROMPT, *GEN, "--kv-type", "q8_0", "--receipt", ra)
    got, _ = run_json(m, PROMPT, *GEN, *kv, "--receipt", rb)
    assert got == want
    a, b = json.loads(ra.read_text()), json.loads(rb.read_text())
    assert b["device"]["settings"]["cache-type"] == "q8_0"
    assert a["device"] == b["device"] and a["output"] == b["output"]


@pytest.mark.parametrize("kv,k,v", [(["-ctk", "q8_0"], "q8_0 (-ctk)", "f16 (--kv-type or its default)"),
                                    (["-ctv", "f32"], "f16 (--kv-type or its default)", "f32 (-ctv)"),
                                    (["-ctk", "f16", "-ctv", "q8_0"], "f16 (-ctk)", "q8_0 (-ctv)")])
def test_cache_types_that_differ_are_refused(models, kv, k, v):
    for cmd, rest in (("run", [PROMPT]), ("chat", []), ("serve", []), ("perplexity", ["-f", "x"])):
        r = kinetic(cmd, models["llama"], *rest, *kv, check=False)
        assert r.returncode == 2, (cmd, r.stderr)
        assert (f"kinetic {cmd}: Kinetic keeps K and V in one KV cache type, but K would be {k} "
                f"and V {v}") in r.stderr, r.stderr


def test_cache_type_bad_name(models):
    r = kinetic("run", models["llama"], PROMPT, "-ctk", "q4_0", "-ctv", "q4_0", check=False)
    assert r.returncode == 2
    assert "--cache-type-k (-ctk) must be f32, f16 or q8_0, not 'q4_0'" in r.stderr
    r = kinetic("run", models["llama"], PROMPT, "-ctv", "q4_0", check=False)
    assert r.returncode == 2
    assert "--cache-type-v (-ctv) must be f32, f16 or q8_0, not 'q4_0'" in r.stderr


def test_chat_template_name_is_the_builtin(models, tmp_path):
    m = models["llama"]
    for name in ("chatml", "llama3", "gemma", "phi3"):
        want = print_prompt(m, PROMPT, "--chat-format", name)
        got = print_prompt(m, PROMPT, "--chat-template", name)
        assert got == want and got["template"] == name
    # the same name twice agrees; two different names are refused
    assert print_prompt(m, PROMPT, "--chat-template", "gemma", "--chat-format", "gemma")["template"] == "gemma"
    r = kinetic("run", m, PROMPT, "--chat-template", "chatml", "--chat-format", "gemma", check=False)
    assert r.returncode == 2 and "name two different built-in templates" in r.stderr


def test_chat_template_file_flags(models, tmp_path, monkeypatch):
    m = models["llama"]
    t = tmp_path / "t.jinja"
    t.write_text("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
    want = print_prompt(m, PROMPT, "--chat-template", t)
    assert want["template"] == "jinja" and want["prompt"] == f"[user] {PROMPT}\n"
    assert print_prompt(m, PROMPT, "--chat-template-file", t) == want
    # a file named like a built-in template: --chat-template-file takes it as a file
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chatml").write_text(t.read_text())
    assert print_prompt(m, PROMPT, "--chat-template-file", "chatml")["prompt"] == want["prompt"]
    assert print_prompt(m, PROMPT, "--chat-template", "chatml")["template"] == "chatml"
    r = kinetic("run", m, PROMPT, "--chat-template", t, "--chat-template-file", t, check=False)
    assert r.returncode == 2 and "not both" in r.stderr


def test_chat_template_neither_name_nor_file(models):
    r = kinetic("run", models["llama"], PROMPT, "--chat-template", "nosuch", check=False)
    assert r.returncode == 2
    assert ("kinetic run: --chat-template 'nosuch' is neither a built-in template (chatml, "
            "llama3, llama2, mistral, gemma, phi3, plain, raw) nor a file") in r.stderr, r.stderr


@pytest.mark.parametrize("flag,note", [
    (["--jinja"], "--jinja changes nothing: Kinetic always renders the chat template with its Jinja engine"),
    (["-fa"], "-fa changes nothing: Kinetic's attention is always tiled"),
    (["-fa", "on"], "-fa changes nothing"),
    (["--flash-attn", "off"], "--flash-attn changes nothing"),
    (["--flash-attn=auto"], "--flash-attn changes nothing"),
    (["-fa", "1"], "-fa changes nothing"),
], ids=["--jinja", "-fa", "-fa on", "--flash-attn off", "--flash-attn=auto", "-fa 1"])
def test_flags_that_change_nothing(models, flag, note):
    m = models["llama"]
    want, _ = run_json(m, PROMPT, *GEN)
    got, err = run_json(m, *flag, PROMPT, *GEN)  # before the prompt: "on" is not taken as it
    assert got == want
    assert f"kinetic run: note: {note}" in err, err


def test_flash_attn_bad_value(models):
    r = kinetic("run", models["llama"], PROMPT, "--flash-attn=maybe", check=False)
    assert r.returncode == 2 and "--flash-attn takes [on|off|auto|1|0], not 'maybe'" in r.stderr


@pytest.mark.parametrize("fmt", ["auto", "deepseek"])
def test_reasoning_format_that_means_kinetics_split(models, fmt):
    m = models["llama"]
    want, _ = run_json(m, PROMPT, *GEN)
    assert run_json(m, PROMPT, *GEN, "--reasoning-format", fmt)[0] == want


def test_reasoning_format_none_is_refused_saying_why(models):
    for cmd, rest in (("run", [PROMPT]), ("chat", [])):
        r = kinetic(cmd, models["llama"], *rest, "--reasoning-format", "none", check=False)
        assert r.returncode == 2
        assert (f"kinetic {cmd}: --reasoning-format none (reasoning left in the answer) has no "
                "equivalent") in r.stderr, r.stderr
    r = kinetic("run", models["llama"], PROMPT, "--reasoning-format", "bogus", check=False)
    assert r.returncode == 2 and "must be auto or deepseek" in r.stderr


def test_stop_aliases(models):
    m = models["llama"]
    base, _ = run_json(m, PROMPT, "-n", "12", "--seed", "7")
    stop = base[2][2:4]  # text from the middle of the answer
    want, _ = run_json(m, PROMPT, "-n", "12", "--seed", "7", "--stop", stop)
    assert run_json(m, PROMPT, "-n", "12", "--seed", "7", "-r", stop)[0] == want
    assert run_json(m, PROMPT, "-n", "12", "--seed", "7", "--reverse-prompt", stop)[0] == want


# ---------------------------------------------------------------- chat


def chat(*args):
    return kinetic("chat", *args, "--seed", "7", "-n", "5", stdin="Hello there\n").stdout


def test_chat_aliases(models):
    m = models["llama"]
    want = chat(m, "--system", "Be brief.", "--chat-format", "chatml", "--kv-type", "q8_0")
    assert want.strip()
    assert chat("-m", m, "-sys", "Be brief.", "--chat-template", "chatml", "-ctk", "q8_0",
                "-ctv", "q8_0", "-ngl", "0", "-fa", "--jinja") == want
    assert chat("--model", m, "--system-prompt", "Be brief.", "--chat-template", "chatml",
                "--cache-type-k", "q8_0", "--cache-type-v", "q8_0") == want


# ---------------------------------------------------------------- serve


def completion(srv, **extra):
    st, _, js = srv.post("/v1/completions", {"prompt": PROMPT, "seed": 7, **extra})
    assert st == 200, js
    return js["choices"][0]["text"], js["usage"]["completion_tokens"]


def test_serve_aliases(models):
    m = models["llama"]
    with Server(m, "--parallel", "2", "--max-tokens", "3", "--kv-type", "q8_0") as srv:
        want = completion(srv)
        assert "2 slots" in srv.start_line and "KV cache q8_0" in srv.start_line
    assert want[1] == 3
    with Server("-m", m, "-np", "2", "--n-predict", "3", "-ctk", "q8_0", "-ctv", "q8_0",
                "-ngl", "0", "-fa", "on", "--jinja", "--reasoning-format", "auto",
                "--chat-template", "chatml") as srv:
        assert completion(srv) == want
        assert "2 slots" in srv.start_line and "KV cache q8_0" in srv.start_line
        assert "chat format chatml" in srv.start_line, srv.start_line
        rc = srv.stop()
        srv.check_clean_exit(rc)
        assert "kinetic serve: note: -fa changes nothing" in srv.stderr
        assert "kinetic serve: note: --jinja changes nothing" in srv.stderr
    # llama-server's -n -1 ("no limit") is the default: the rest of the context
    with Server(m, "-n", "-1") as srv:
        st, _, js = srv.post("/v1/completions", {"prompt": PROMPT, "seed": 7, "max_tokens": 3})
        assert st == 200 and js["usage"]["completion_tokens"] == 3


def test_serve_reasoning_format_other_than_auto(models):
    r = kinetic("serve", models["llama"], "--reasoning-format", "deepseek", check=False)
    assert r.returncode == 2
    assert "each request chooses its own (\"reasoning_format\"" in r.stderr, r.stderr


# ---------------------------------------------------------------- the other commands


def test_tokenize_info_embed_perplexity_bench_model_flag(models, tmp_path):
    m, b = models["llama"], models["bert"]
    assert kinetic("tokenize", "-m", m, "-p", PROMPT).stdout == kinetic("tokenize", m, PROMPT).stdout
    assert kinetic("info", "-m", m, "--json").stdout == kinetic("info", m, "--json").stdout
    want = kinetic("embed", b, "hello", "world").stdout
    assert len(want.splitlines()) == 2
    assert kinetic("embed", "-m", b, "hello", "world", "-ngl", "0", "-fa").stdout == want
    # llama-embedding's -p and -f: one text per line, empty lines skipped
    assert kinetic("embed", "-m", b, "-p", "hello\n\nworld\r\n").stdout == want
    assert kinetic("embed", b, "hello", "--prompt", "world").stdout == want
    lines = tmp_path / "lines.txt"
    lines.write_text("hello\nworld\n")
    assert kinetic("embed", b, "-f", lines).stdout == want
    assert kinetic("embed", b, "--file", "-", stdin="hello\nworld\n").stdout == want
    r = kinetic("embed", b, "-p", "\n", check=False)
    assert r.returncode == 2 and "give at least one text (TEXT, -p TEXT or -f FILE)" in r.stderr
    text = tmp_path / "t.txt"
    text.write_text(PROMPT + " there was a little model that wrote noise. " * 8)
    ppl = ["-f", text, "-c", "16", "-t", "1"]

    def final(out):
        return [ln for ln in out.splitlines() if "estimated PPL" in ln or "PPL" in ln][-1:]

    want = kinetic("perplexity", m, *ppl, "--kv-type", "q8_0").stdout
    got = kinetic("perplexity", "-m", m, *ppl, "-ctk", "q8_0", "-ctv", "q8_0", "-fa").stdout
    assert final(got) == final(want) and final(want)
    bench = ["-p", "8", "-n", "2", "-r", "1", "--stream-mib", "0", "-o", "json"]
    a = json.loads(kinetic("bench", m, *bench, "--gpu-layers", "0").stdout)
    c = json.loads(kinetic("bench", "-m", m, *bench, "-ngl", "0", "-fa", "1").stdout)
    keep = ("model_filename", "model_type", "n_prompt", "n_gen", "n_gpu_layers")
    assert [{k: t[k] for k in keep} for t in a] == [{k: t[k] for k in keep} for t in c]


# ---------------------------------------------------------------- did you mean


@pytest.mark.parametrize("cmd,typed,near", [
    ("run", "--tmep", "--temp"),
    ("run", "--n-gpu-layer", "--n-gpu-layers"),
    ("run", "-ngll", "-ngl"),
    ("run", "--sytem", "--system"),
    ("chat", "--system-promt", "--system-prompt"),
    ("serve", "--parralel", "--parallel"),
    ("serve", "--n-predcit", "--n-predict"),
    ("bench", "--repetitons", "--repetitions"),
    ("verify-receipt", "--publc-key", "--public-key"),
    ("perplexity", "--cache-type-kk", "--cache-type-k"),
])
def test_unknown_option_names_the_nearest(cmd, typed, near):
    r = kinetic(cmd, typed, "x", check=False)
    assert r.returncode == 2
    assert (f"kinetic {cmd}: unknown option '{typed}'; did you mean '{near}'? "
            f"(see 'kinetic {cmd} --help')") in r.stderr, r.stderr


def test_unknown_option_with_nothing_near():
    r = kinetic("run", "--frobnicate-everything", check=False)
    assert r.returncode == 2
    assert r.stderr.strip() == ("kinetic run: unknown option '--frobnicate-everything'; "
                                "see 'kinetic run --help'")
    r = kinetic("run", "--tmep=1", check=False)  # the value is not part of the name
    assert "unknown option '--tmep'; did you mean '--temp'?" in r.stderr


@pytest.mark.parametrize("typed,near", [("rnu", "run"), ("verify-reciept", "verify-receipt"),
                                        ("sevre", "serve"), ("devcies", "devices")])
def test_unknown_command_names_the_nearest(typed, near):
    r = subprocess.run([KINETIC, typed, "x"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"kinetic: unknown command '{typed}'; did you mean '{near}'? "
                                "(see 'kinetic --help')"), r.stderr
    r = subprocess.run([KINETIC, "frobnicate"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == "kinetic: unknown command 'frobnicate'; see 'kinetic --help'"


def test_help_lists_the_aliases():
    out = kinetic("run", "--help").stdout
    for line, alias in (("--gpu-layers N", "(also -ngl, --n-gpu-layers)"),
                        ("--system TEXT", "(also -sys, --system-prompt)"),
                        ("--cache-type-k T", "(also -ctk)"), ("-r, --stop TEXT", "(also --reverse-prompt)"),
                        ("--flash-attn [on|off|auto|1|0]", "(also -fa)")):
        assert any(line in ln and alias in ln for ln in out.splitlines()), (line, alias)
    assert "(also -np)" in kinetic("serve", "--help").stdout


# ---------------------------------------------------------------- verify-receipt on responses


def verify(path, *args):
    r = subprocess.run([KINETIC, "verify-receipt", str(path), *args], capture_output=True,
                       text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="module")
def saved(models):
    """Responses of a real signing server, saved as a client gets them (the body's bytes)."""
    d = models["dir"]
    key = d / "key"
    key.write_bytes(bytes(range(32)))
    chat = {"messages": [{"role": "user", "content": "Say \"hi\" \u00e9"}], "max_tokens": 5,
            "seed": 3, "temperature": 0.7}
    out = {}
    with Server(models["llama"], "--sign-key", key) as srv:
        def save(name, path, body):
            st, _, data = srv.request("POST", path, body)
            assert st == 200, data
            (d / name).write_bytes(data)
            out[name] = d / name
            return data
        save("chat.json", "/v1/chat/completions", {**chat, "receipt": True})
        save("completion.json", "/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "seed": 3,
                                                    "receipt": True})
        save("n2.json", "/v1/chat/completions", {**chat, "receipt": True, "n": 2})
        save("plain.json", "/v1/chat/completions", chat)
        stream = save("stream.txt", "/v1/chat/completions", {**chat, "receipt": True, "stream": True})
        events = [ln[6:] for ln in stream.decode().splitlines() if ln.startswith("data: ")]
        final = [e for e in events if e != "[DONE]" and "receipt" in json.loads(e)]
        assert len(final) == 1
        (d / "final_chunk.json").write_text(final[0])
        out["final_chunk.json"] = d / "final_chunk.json"
        st, _, data = srv.request("POST", "/v1/chat/completions", {"messages": "no"})
        assert st == 400
        (d / "error.json").write_bytes(data)
        out["error.json"] = d / "error.json"
    return out


@pytest.mark.parametrize("name,kind,where", [
    ("chat.json", "a chat.completion", 'under "receipt"'),
    ("completion.json", "a text_completion", 'under "receipt"'),
    ("final_chunk.json", "a chat.completion.chunk", 'under "receipt"'),
    ("stream.txt", "a stream of", 'under "receipt" (line'),
])
def test_verify_receipt_in_a_saved_response(saved, name, kind, where):
    rc, out = verify(saved[name])
    assert rc == 0, out
    assert f"receipt 1 of 1 in {saved[name]} ({kind}" in out and where in out, out
    assert "signature: valid" in out and "rerun: identical" in out, out


def test_verify_each_choice_receipt(saved):
    rc, out = verify(saved["n2.json"])
    assert rc == 0, out
    assert "under choices[0].receipt" in out and "under choices[1].receipt" in out
    assert out.count("rerun: identical") == 2


def test_the_response_receipt_is_the_receipt(saved, tmp_path):
    """The receipt taken out of the response verifies as a receipt file, and a changed
    token in the response fails as it would in the receipt."""
    doc = json.loads(saved["chat.json"].read_text())
    r = tmp_path / "receipt.json"
    r.write_text(json.dumps(doc["receipt"]))
    rc, out = verify(r)
    assert rc == 0 and "rerun: identical" in out, out
    doc["receipt"]["output"]["tokens"]["ids"][0] ^= 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    rc, out = verify(bad)
    assert rc == 4 and "the receipt was changed or damaged" in out, out
    doc = json.loads(saved["chat.json"].read_text())
    doc["receipt"]["sampling"]["seed"] += 1
    bad.write_text(json.dumps(doc))
    rc, out = verify(bad)
    assert rc == 5 and "signature: INVALID" in out, out


def test_verify_response_without_receipt_says_where(saved, tmp_path):
    rc, out = verify(saved["plain.json"])
    assert rc == 3
    assert ('no receipt in this response (a chat.completion): a server response carries it '
            'under "receipt" when the request sets "receipt": true') in out, out
    stream = tmp_path / "s.txt"
    stream.write_text("".join(ln + "\n" for ln in saved["stream.txt"].read_text().splitlines()
                              if '"receipt"' not in ln))
    rc, out = verify(stream)
    assert rc == 3 and "no receipt in this response (a stream of" in out, out
    rc, out = verify(saved["error.json"])
    assert rc == 3 and "is an error response, not a receipt: " in out, out


def test_verify_receipt_file_unchanged(saved, tmp_path):
    """A receipt file itself, and a file that is neither, read as before."""
    r = tmp_path / "r.json"
    r.write_text(json.dumps(json.loads(saved["chat.json"].read_text())["receipt"]))
    rc, out = verify(r)
    assert rc == 0 and not out.startswith("receipt 1 of"), out
    junk = tmp_path / "junk.json"
    junk.write_text('{"id": 1}')
    rc, out = verify(junk)
    assert rc == 3 and "unknown field" in out, out
    junk.write_text("data: {not json\n")
    rc, out = verify(junk)
    assert rc == 3 and "line 1 is a stream event that is not JSON" in out, out
