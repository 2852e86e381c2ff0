"""A corpus of forged receipts, each with the exit code and message verify-receipt must give.

Real receipts are made here (aidreams260K raw and with --stop, --raw, --prompt-ids, a
--chat-template file, and copies of it carrying Qwen3's, Llama 3.2's (reads the clock) and
QwQ's (answer starts inside the reasoning) templates); then each forgery changes what a
person reads (the question, the system message, add_generation_prompt, template kwargs,
tools, the date, the answer with and without its stop string, reasoning moved into the
answer, Unicode look-alikes, every descriptive field) and is either left unsigned or
re-signed with a fresh key, as an attacker would. Every one must be caught with its own
exit code and a message naming the field; none may print "rerun: identical" unless the
change is one verify-receipt documents as informational.

KN_FORGED_OUT=DIR keeps the corpus (the fuzz target's seeds come from it).
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from receipt_bytes import signed_bytes

KINETIC = os.environ.get("KINETIC", "build/kinetic")
from testdata import DATA
AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")
TEMPLATES = os.path.join(DATA, "templates")
NEW_METADATA = [sys.executable, "-m", "gguf.scripts.gguf_new_metadata"]

OK, ERROR, USAGE, MALFORMED, HASHES, SIGNATURE, MODEL, DIFFERS, TEXT = range(9)


def run(*args, check=True, timeout=300, **kw):
    p = subprocess.run([KINETIC, *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"kinetic {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def b3(data):
    return subprocess.run(["b3sum", "--no-names"], input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def canonical(r):
    """The signed bytes for r's version (RFC 8785 since version 2, legacy for 1)."""
    return signed_bytes(r)


class Signer:
    """Ed25519 with openssl: a fresh key, as an attacker would make one."""

    def __init__(self, d):
        self.pem = os.path.join(d, "attacker.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", self.pem],
                       check=True, capture_output=True)
        der = subprocess.run(["openssl", "pkey", "-in", self.pem, "-pubout", "-outform", "DER"],
                             check=True, capture_output=True).stdout
        self.public = der[-32:].hex()
        self.dir = d

    def sign(self, r):
        msg = os.path.join(self.dir, "msg.bin")
        with open(msg, "wb") as f:
            f.write(canonical(r))
        sig = subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", self.pem, "-rawin", "-in",
                              msg], check=True, capture_output=True).stdout
        r["signature"] = {"public_key": self.public, "ed25519": sig.hex()}
        return r


def rehash(r):
    for o in (r["prompt"], r["output"]["tokens"]):
        o["count"] = len(o["ids"])
        o["blake3"] = b3(b"".join(i.to_bytes(4, "little") for i in o["ids"]))
    return r


@pytest.fixture(scope="module")
def world():
    d = tempfile.mkdtemp(prefix="kn_forged_")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(d, "cache"))
    key = os.path.join(d, "maker.key")
    subprocess.run(["openssl", "rand", "-out", key, "-hex", "32"], check=True)
    models = {"aidreams": os.path.join(d, "aidreams.gguf")}
    shutil.copy(AIDREAMS, models["aidreams"])
    for name, tpl in [("qwen3", "Qwen-Qwen3-0.6B.jinja"), ("llama32", "meta-llama-Llama-3.2-3B-Instruct.jinja"),
                      ("qwq", "Qwen-QwQ-32B.jinja")]:
        models[name] = os.path.join(d, name + ".gguf")
        subprocess.run(NEW_METADATA + [AIDREAMS, models[name], "--chat-template-file",
                                       os.path.join(TEMPLATES, tpl)], check=True, capture_output=True)
    w = {"dir": d, "env": env, "key": key, "models": models, "signer": Signer(d), "receipts": {}}

    def make(name, model, *args, sign=True):
        path = os.path.join(d, name + ".json")
        extra = ["--sign-key", key] if sign else []
        p = run("run", models[model], *args, "--seed", "42", "--receipt", path, "--json", *extra,
                env=env)
        with open(path) as f:
            w["receipts"][name] = (json.load(f), json.loads(p.stdout))
        return w["receipts"][name]

    make("base", "aidreams", "Once upon a time", "-n", "40")
    words = [x for x in w["receipts"]["base"][0]["output"]["text"].split() if len(x) > 3]
    w["stop_word"] = words[len(words) // 2]
    make("stop", "aidreams", "Once upon a time", "-n", "40", "--stop", w["stop_word"])
    make("rawflag", "aidreams", "Once upon a time", "-n", "20", "--raw")
    make("ids", "aidreams", "--prompt-ids", "1, 2, 3, 4", "-n", "20")
    make("file", "aidreams", "Hello there", "-n", "20", "--chat-template",
         os.path.join(TEMPLATES, "Qwen-Qwen2.5-7B-Instruct.jinja"))
    make("qwen3", "qwen3", "Hello there", "--system", "Be brief.", "-n", "20", "-c", "1024",
         "--chat-template-kwargs", '{"enable_thinking": false}')
    conv = os.path.join(d, "conv.json")
    with open(conv, "w") as f:
        json.dump({"messages": [{"role": "user", "content": "Weather in Paris?"}],
                   "tools": [{"type": "function", "function": {
                       "name": "get_weather", "description": "the weather",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}, f)
    make("tools", "qwen3", "--messages", conv, "-n", "20", "-c", "2048")
    make("llama32", "llama32", "Hello there", "-n", "20", "-c", "1024")
    make("qwq", "qwq", "Hello there", "-n", "30", "-c", "1024")
    for name, (r, _) in w["receipts"].items():
        p = verify(w, r, "orig_" + name)
        assert p.returncode == OK and "input: proven" in p.stdout and "output.text: proven" in p.stdout, (name, p.stdout)
    yield w
    shutil.rmtree(d)


def write(w, r, name):
    path = os.path.join(w["dir"], name + ".json")
    with open(path, "w") as f:
        json.dump(r, f, indent=2, ensure_ascii=False)
    out = os.environ.get("KN_FORGED_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        shutil.copy(path, os.path.join(out, name + ".json"))
    return path


def verify(w, r, name, *extra):
    return run("verify-receipt", write(w, r, name), *extra, check=False, env=w["env"])


# ---------------------------------------------------------------- the forgeries

def user_msg(r):
    return next(m for m in reversed(r["input"]) if m["role"] == "user")


def cyr(s):
    """Latin letters swapped for Cyrillic look-alikes."""
    return s.translate(str.maketrans("aeopcxyOT", "аеорсхуОТ"))


def changes(w):
    """(name, base receipt, change(r, w), signing, expected exit, expected message part).
    signing: "unsigned" drops the signature, "fresh" re-signs with a new key, "keep" leaves
    the maker's signature (which must then be invalid)."""
    stop_word = w["stop_word"]
    qwq_reasoning = w["receipts"]["qwq"][1]["reasoning"]
    inp = "input: MISMATCH"
    txt = "output.text: MISMATCH"

    def set_user(text):
        def f(r, w):
            if isinstance(r["input"], str):
                r["input"] = text
            else:
                user_msg(r)["content"] = text
        return f

    def edit(fn):
        return fn

    forgeries = [
        # the question
        ("input swapped", "base", set_user("How do I make a bomb?"), inp + ": input does not give the recorded prompt tokens: token"),
        ("input swapped qwen3", "qwen3", set_user("How do I make a bomb?"), inp),
        ("input swapped llama32", "llama32", set_user("Hello thera"), inp),
        ("input swapped raw flag", "rawflag", set_user("Twice upon a time"), inp),
        ("input swapped tools", "tools", set_user("Weather in Rome?"), inp),
        ("input swapped file template", "file", set_user("Goodbye there"), inp),
        ("input ids swapped", "ids", edit(lambda r, w: r.update(input="1, 2, 3, 5")), inp + ": input (token ids)"),
        ("input ids extended", "ids", edit(lambda r, w: r.update(input="1, 2, 3, 4, 5")), "it gives 5 tokens, the receipt has 4"),
        ("input one letter", "base", set_user("Once upon a tima"), inp),
        ("input trailing space", "qwen3", set_user("Hello there "), inp),
        ("input look-alike", "base", set_user(cyr("Once upon a time")), inp),
        ("input look-alike qwen3", "qwen3", set_user(cyr("Hello there")), inp),
        ("input zero-width space", "qwen3", set_user("Hello\u200b there"), inp),
        ("input role", "qwen3", edit(lambda r, w: user_msg(r).update(role="assistant")), inp),
        # the system message
        ("system added", "base", edit(lambda r, w: r["input"].insert(0, {"role": "system", "content": "Obey."})), inp),
        ("system added llama32", "llama32", edit(lambda r, w: r["input"].insert(0, {"role": "system", "content": "Obey."})), inp),
        ("system removed", "qwen3", edit(lambda r, w: r["input"].pop(0)), inp),
        ("system changed", "qwen3", edit(lambda r, w: r["input"][0].update(content="Be long.")), inp),
        ("system look-alike", "qwen3", edit(lambda r, w: r["input"][0].update(content=cyr("Be brief."))), inp),
        # how it was rendered
        # (the raw template ignores add_generation_prompt, kwargs and tools: no case for it)
        ("add_generation_prompt flipped", "qwen3", edit(lambda r, w: r["template"].update(add_generation_prompt=False)), inp),
        ("add_generation_prompt flipped llama32", "llama32", edit(lambda r, w: r["template"].update(add_generation_prompt=False)), inp),
        ("add_generation_prompt flipped file template", "file", edit(lambda r, w: r["template"].update(add_generation_prompt=False)), inp),
        ("kwargs changed", "qwen3", edit(lambda r, w: r["template"].update(kwargs={"enable_thinking": True})), inp),
        ("kwargs removed", "qwen3", edit(lambda r, w: r["template"].pop("kwargs")), inp),
        ("tools removed", "tools", edit(lambda r, w: r["template"].pop("tools")), inp),
        ("tools changed", "tools", edit(lambda r, w: r["template"]["tools"][0]["function"].update(name="launch")), inp),
        ("tools added", "qwen3", edit(lambda r, w: r["template"].update(tools=[{"type": "function", "function": {"name": "f"}}])), inp),
        ("date moved", "llama32", edit(lambda r, w: r["template"].update(now=r["template"]["now"] - 86400 * 400)), inp),
        ("date removed", "llama32", edit(lambda r, w: r["template"].pop("now")), "the template reads the clock (strftime_now) but the receipt records no template.now"),
        ("template hash", "qwen3", edit(lambda r, w: r["template"].update(blake3="0" * 64)), "template.blake3 is 0000000000000000, but the model's tokenizer.chat_template hashes to"),
        ("template engine", "qwen3", edit(lambda r, w: r["template"].update(engine="chatml", source="forced") or r["template"].pop("blake3")), inp),
        ("template engine raw", "qwen3", edit(lambda r, w: r["template"].update(engine="raw") or r["template"].pop("blake3")), 'the receipt says template.engine "raw", but tokenizer.chat_template renders with "jinja"'),
        ("template text changed", "file", edit(lambda r, w: r["template"].update(text=r["template"]["text"].replace("<|im_start|>", "<|im_begin|>"))), "template.blake3 is"),
        ("template text and hash changed", "file", edit(lambda r, w: r["template"].update(
            text=r["template"]["text"].replace("<|im_start|>", "<|im_begin|>"),
            blake3=b3(r["template"]["text"].replace("<|im_start|>", "<|im_begin|>").encode()))), inp),
        ("template text broken", "file", edit(lambda r, w: r["template"].update(
            text="{% if %}", blake3=b3(b"{% if %}"))), "the receipt's template cannot be loaded"),
        ("template source", "qwen3", edit(lambda r, w: r["template"].update(source="forced")), "does not go with"),
        ("template unknown engine", "base", edit(lambda r, w: r["template"].update(engine="llama9")), "template.engine 'llama9' is not one"),
        ("template unknown field", "base", edit(lambda r, w: r["template"].update(date="today")), "unknown field template.date"),
        ("template ids engine on messages", "base", edit(lambda r, w: r.update(template={"engine": "ids"})), inp + ': template.engine is "ids"'),
        ("template text engine on messages", "base", edit(lambda r, w: r.update(template={"engine": "text"})), "needs the input as a string"),
        # the answer
        ("answer swapped", "base", edit(lambda r, w: r["output"].update(text="You cannot make a cake.")), txt + ": it is not the text of the output tokens: they differ at byte 0"),
        ("answer with its stop string", "stop", edit(lambda r, w: r["output"].update(text=r["output"]["text"] + stop_word)), txt),
        ("answer with the text after its stop string", "stop", edit(lambda r, w: r["output"].update(
            text=w["receipts"]["base"][0]["output"]["text"])), txt),
        ("answer without its last byte", "stop", edit(lambda r, w: r["output"].update(text=r["output"]["text"][:-1])), txt),
        ("stop string removed", "stop", edit(lambda r, w: r["sampling"].update(stop=[])), txt),
        ("stop string changed", "stop", edit(lambda r, w: r["sampling"].update(stop=[stop_word + "zz"])), txt),
        ("stop string added", "base", edit(lambda r, w: r["sampling"].update(stop=[stop_word])), txt),
        ("answer with a stop string it never had", "base", edit(lambda r, w: r["output"].update(text=r["output"]["text"] + "\nUser:")), txt),
        ("answer look-alike", "base", edit(lambda r, w: r["output"].update(text=cyr(r["output"]["text"]))), txt),
        ("answer trailing space", "qwen3", edit(lambda r, w: r["output"].update(text=r["output"]["text"] + " ")), txt),
        ("answer emptied", "qwen3", edit(lambda r, w: r["output"].update(text="")), txt),
        ("reasoning moved into the answer", "qwq", edit(lambda r, w: r["output"].update(text=qwq_reasoning + r["output"]["text"])), txt),
        ("reasoning split removed", "qwq", edit(lambda r, w: r["output"].pop("think")), txt),
        ("reasoning split flipped", "qwq", edit(lambda r, w: r["output"]["think"].update(inside=False)), txt),
        ("reasoning markers empty", "qwq", edit(lambda r, w: r["output"]["think"].update(open="")), "markers must not be empty"),
        # downgrades: the template record (and reasoning split) deleted, then a change
        ("downgraded, input swapped", "base", edit(lambda r, w: r.pop("template") and set_user("How do I make a bomb?")(r, w)), inp + ": the receipt records no template, and the model's default rendering ("),
        ("downgraded, system added", "base", edit(lambda r, w: r.pop("template") and r["input"].insert(0, {"role": "system", "content": "Obey."})), inp + ": the receipt records no template"),
        ("downgraded, raw input swapped", "rawflag", edit(lambda r, w: r.pop("template") and r.update(input="Twice upon a time")), inp + ": the receipt records no template"),
        ("downgraded, ids swapped", "ids", edit(lambda r, w: r.pop("template") and r.update(input="1, 2, 3, 5")), inp + ": the receipt records no template"),
        ("downgraded, kwargs dropped with it", "qwen3", edit(lambda r, w: r.pop("template")), inp + ": the receipt records no template"),
        ("downgraded, template file dropped with it", "file", edit(lambda r, w: r.pop("template")), inp + ": the receipt records no template"),
        ("downgraded, tools dropped with it", "tools", edit(lambda r, w: r.pop("template")), inp + ": the receipt records no template"),
        ("downgraded, clock template, input swapped", "llama32", edit(lambda r, w: r.pop("template") and set_user("Hello thera")(r, w)), inp + ": the receipt records no template, and the model's template reads the clock (strftime_now)"),
        ("downgraded, thinking model, input swapped", "qwq", edit(lambda r, w: r.pop("template") and r["output"].pop("think") and set_user("Goodbye there")(r, w)), inp + ": the receipt records no template"),
        ("downgraded, answer swapped", "base", edit(lambda r, w: r.pop("template") and r["output"].update(text="You cannot make a cake.")), txt + ": it is not the text of the output tokens (the receipt records no reasoning split"),
        ("downgraded, reasoning changed", "qwq", edit(lambda r, w: r.pop("template") and r["output"].pop("think") and r["output"].update(text=qwq_reasoning.replace(" ", " not ", 1) + r["output"]["text"])), txt + ": it is not the text of the output tokens (the receipt records no reasoning split"),
        ("downgraded, answer with its stop string", "stop", edit(lambda r, w: r.pop("template") and r["output"].update(text=r["output"]["text"] + stop_word)), txt + ": it is not the text of the output tokens (the receipt records no reasoning split"),
        ("output token and hash", "base", edit(lambda r, w: rehash(r["output"]["tokens"].update(ids=r["output"]["tokens"]["ids"][:-1] + [(r["output"]["tokens"]["ids"][-1] + 1) % 256]) or r)), txt),
        # descriptive fields
        ("model.size", "base", edit(lambda r, w: r["model"].update(size=r["model"]["size"] + 1)), "model: MISMATCH: model.size is"),
        ("model.file", "base", edit(lambda r, w: r["model"].update(file="llama-70b.gguf")), 'model.file "llama-70b.gguf" is not the base name of model.path'),
        ("model.blake3", "base", edit(lambda r, w: r["model"].update(blake3="ab" * 32)), "is not the receipt's model: its BLAKE3 is"),
        ("device ctx-size too small", "base", edit(lambda r, w: r["device"]["settings"].update(**{"ctx-size": 20})), "more than device.settings.ctx-size"),
        ("device ctx-size beyond run's limit", "base", edit(lambda r, w: r["device"]["settings"].update(**{"ctx-size": 1 << 21})), "device.settings.ctx-size must be an integer from 1 to 1048576"),
        ("device cache-type", "base", edit(lambda r, w: r["device"]["settings"].update(**{"cache-type": "q4"})), "device.settings.cache-type 'q4' is not one this build has"),
        ("numerics", "base", edit(lambda r, w: r["kinetic"].update(numerics="canonical-0")), "rerun: not identical: the same"),
        ("seed", "base", edit(lambda r, w: r["sampling"].update(seed=4242)), "the receipt's tokens are not what this model produces with these settings"),
        ("logit_bias outside the vocabulary", "base", edit(lambda r, w: r["sampling"].update(logit_bias=[[99999, 5.0]])), "sampling.logit_bias names token 99999"),
        # a response_format whose $ref names nothing ("#" and "" were read past their end, issue 44)
        ("response_format $ref '#'", "base", edit(lambda r, w: r["sampling"].update(response_format={"type": "json_schema", "json_schema": {"schema": {"$ref": "#"}}})), "$ref '#' is not supported"),
        ("response_format $ref ''", "base", edit(lambda r, w: r["sampling"].update(response_format={"type": "json_schema", "json_schema": {"schema": {"items": {"$ref": ""}}}})), "at /items: $ref ''"),
        ("output id outside the vocabulary", "base", edit(lambda r, w: rehash(r["output"]["tokens"].update(ids=[999999]) or r)), "output token 0 (id 999999) is outside"),
        ("output ids beyond the context", "base", edit(lambda r, w: rehash(r["output"]["tokens"].update(ids=[5] * 5000) or r)), "output.tokens.ids holds 5000 tokens, more than"),
    ]
    # Reported, not failed: fields the receipt spec calls informational, or that only
    # change what the report says about the runs.
    informational = [
        ("device.class", "base", edit(lambda r, w: r["device"].update(**{"class": "cpu-x86_64-scalar"} if r["device"]["class"] != "cpu-x86_64-scalar" else {"class": "cpu-x86_64-avx2"})), "(device class differs)"),
        ("kinetic.build", "base", edit(lambda r, w: r["kinetic"].update(build="0123456789abcdef")), "(build differs)"),
        ("kinetic.version", "base", edit(lambda r, w: r["kinetic"].update(version="9.9.9")), "rerun: identical"),
        ("device.name", "base", edit(lambda r, w: r["device"].update(name="a supercomputer")), "rerun: identical"),
        # A new receipt downgraded to the legacy shape is proven only by the model's default
        # rendering and reasoning split (docs/receipts.md, "Legacy receipts").
        ("template stripped (reads as a receipt made before templates were recorded)", "base",
         edit(lambda r, w: r.pop("template")), "input: proven (legacy receipt)"),
        ("template and reasoning split stripped from a thinking model's receipt", "qwq",
         edit(lambda r, w: r.pop("template") and r["output"].pop("think")),
         "output.text: proven (legacy receipt): the 30 output tokens decode to it"),
        # aidreams' vocabulary has no <think> token, so serve wrote a chat reply unsplit by
        # default: the whole decoded text (the reasoning read as answer) is what such a
        # legacy receipt holds. Only the model's own words: nothing added, nothing dropped.
        ("downgraded, reasoning read as answer, as serve wrote it", "qwq",
         edit(lambda r, w: r.pop("template") and r["output"].pop("think") and r["output"].update(text=qwq_reasoning + r["output"]["text"])),
         "no reasoning split, as serve writes it by default"),
    ]
    cases = []
    for name, base, f, part in forgeries:
        code = {"model.size": TEXT, "model.file": MALFORMED, "model.blake3": MODEL, "numerics": DIFFERS,
                "seed": DIFFERS}.get(name)
        if code is None:
            code = TEXT if part.startswith(("input: MISMATCH", "output.text: MISMATCH", "the template reads",
                                            "template.blake3 is", "the receipt says", "it gives",
                                            "the receipt's template")) else MALFORMED
        for signing in ("unsigned", "fresh"):
            cases.append((name, base, f, signing, code, part))
    for name, base, f, part in informational:
        cases.append((name, base, f, "unsigned", OK, part))
    # signatures
    same = edit(lambda r, w: None)
    cases += [
        ("signature kept after input swap", "base", set_user("How do I make a bomb?"), "keep", SIGNATURE, "signature: INVALID"),
        ("signature kept after answer swap", "qwen3", edit(lambda r, w: r["output"].update(text="Sure.")), "keep", SIGNATURE, "signature: INVALID"),
        ("signature kept after date move", "llama32", edit(lambda r, w: r["template"].update(now=0)), "keep", SIGNATURE, "signature: INVALID"),
        ("re-signed unchanged with a fresh key", "base", same, "fresh", OK, "(anyone can sign: give --public-key"),
        ("unsigned unchanged", "qwen3", same, "unsigned", OK, "signature: absent"),
    ]
    return cases


def test_forged_corpus(world):
    cases = changes(world)
    assert len(cases) >= 60, len(cases)
    signer = world["signer"]
    seen = set()
    failures = []
    for i, (name, base, change, signing, code, part) in enumerate(cases):
        r = copy.deepcopy(world["receipts"][base][0])
        change(r, world)
        if signing == "unsigned":
            r.pop("signature", None)
        elif signing == "fresh":
            r.pop("signature", None)
            signer.sign(r)
        fname = "forged_%03d" % i
        p = verify(world, r, fname)
        where = (name, signing, code, p.returncode, p.stdout)
        if (p.returncode != code or part not in p.stdout or
                (code != OK and "rerun: identical" in p.stdout) or
                (signing == "fresh" and code not in (MALFORMED,) and
                 "signature: valid, public key " + signer.public not in p.stdout)):
            failures.append(where)
            continue
        if signing == "fresh" and code == OK:
            # the maker's key is not the attacker's
            q = verify(world, r, fname, "--public-key", world["receipts"][base][0]["signature"]["public_key"])
            if q.returncode != SIGNATURE:
                failures.append((name, "--public-key", q.stdout))
        seen.add(code)
    assert not failures, "\n\n".join(map(str, failures))
    assert {OK, MALFORMED, SIGNATURE, MODEL, DIFFERS, TEXT} <= seen


def test_seed_change_signed_by_the_maker_is_a_bug_report(world):
    """The one case the report calls a bug: the maker's own key (named with --public-key)
    vouches for tokens this build, numerics and device class do not reproduce."""
    r = copy.deepcopy(world["receipts"]["base"][0])
    maker = r["signature"]["public_key"]
    r["sampling"]["seed"] = 4242
    r.pop("signature")
    # re-sign with the maker's key: openssl needs it as PKCS#8 DER (seed after a fixed prefix)
    with open(world["key"]) as f:
        seed = bytes.fromhex(f.read().strip())
    der = os.path.join(world["dir"], "maker.der")
    with open(der, "wb") as f:
        f.write(bytes.fromhex("302e020100300506032b657004220420") + seed)
    pem = os.path.join(world["dir"], "maker.pem")
    subprocess.run(["openssl", "pkey", "-inform", "DER", "-in", der, "-out", pem], check=True, capture_output=True)
    s = Signer.__new__(Signer)
    s.pem, s.dir, s.public = pem, world["dir"], maker
    s.sign(r)
    p = verify(world, r, "maker_seed", "--public-key", maker)
    assert p.returncode == DIFFERS, p.stdout
    assert "this difference is a bug; please report it" in p.stdout
    p = verify(world, r, "maker_seed2")
    assert p.returncode == DIFFERS and "bug" not in p.stdout, p.stdout


def test_model_path_is_not_read(world, tmp_path):
    """model.path in an unsigned receipt names what verify opens: only a regular GGUF file is
    hashed, a FIFO never blocks, and nothing is cached for /proc, /sys, /dev or secrets."""
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$abc:19000:0:99999:7:::\n")
    for path, part in [("/etc/passwd", "not a GGUF model file"), (str(secret), "not a GGUF model file"),
                       ("/proc/self/environ", "/proc"), ("/dev/zero", "not a regular file"),
                       (str(fifo), "not a regular file")]:
        r = copy.deepcopy(world["receipts"]["base"][0])
        r.pop("signature")
        r["model"]["path"] = path
        r["model"]["file"] = os.path.basename(path)
        p = run("verify-receipt", write(world, r, "path_" + os.path.basename(path)), check=False,
                env=world["env"], timeout=20)
        assert p.returncode == MODEL and part in p.stdout, (path, p.stdout)
    cache = os.path.join(world["env"]["XDG_CACHE_HOME"], "kinetic", "hashes.json")
    with open(cache) as f:
        files = json.load(f)["files"]
    assert all(not k.startswith(("/proc", "/sys", "/dev", "/etc")) and "shadow" not in k for k in files), files
    assert os.stat(cache).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(cache)).st_mode & 0o777 == 0o700


def test_huge_receipt_is_refused_cheaply(world):
    """Ten million output ids: refused at the reader's value limit, in bounded memory."""
    r = copy.deepcopy(world["receipts"]["base"][0])
    r.pop("signature")
    path = os.path.join(world["dir"], "huge.json")
    with open(path, "w") as f:
        r["output"]["tokens"]["ids"] = []
        body = json.dumps(r)
        cut = body.rindex('"ids": []') + len('"ids": [')
        f.write(body[:cut])
        f.write(",".join(["5"] * 10_000_000))
        f.write(body[cut:])
    assert os.path.getsize(path) > 19_000_000
    p = subprocess.run(["/usr/bin/time", "-f", "%M", KINETIC, "verify-receipt", path],
                       capture_output=True, text=True, env=world["env"], timeout=120)
    assert p.returncode == MALFORMED, p.stdout
    assert "values in the document" in p.stdout or "more than device.settings.ctx-size" in p.stdout, p.stdout
    rss_kb = int(p.stderr.strip().splitlines()[-1])
    assert rss_kb < 400_000, rss_kb
