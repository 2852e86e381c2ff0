"""test_one_loop.py: `kinetic run`, `kinetic chat` (piped), `kinetic serve --parallel 4`
under load and `kinetic verify-receipt` produce the same tokens and log-probabilities for
the same request: several samplers, a grammar, stop strings, drafting on and off, a warm
prompt cache. The four share one generation loop (the engine's step, src/engine/slots.c:
engine_generate is its one-slot client, the server's Convoy drives it with many slots),
so this proves that path rather than copies kept in step.

For each request: run's tokens, text and finish (--json, --receipt) and the logits of
every generated position (--logits-out); run again with drafting off and with a warm
prompt cache (same tokens, same logits bytes); chat's answer and its /receipt; the busy
server's answer (chat completions with logprobs and a receipt) equal to a plain server's
alone (text, tokens' logprobs, finish) and to run (tokens; each logprob the log-softmax
of run's logits); verify-receipt says identical for run's, chat's and the server's
receipts.
"""
import json
import os
import subprocess

import pytest

from srvutil import GEMMA, KINETIC, DATA, Server, busy_clients, fingerprint, sanitizer_build

np = pytest.importorskip("numpy")

AIDREAMS = os.path.join(DATA, "models", "aidreams260K.gguf")

# (name, settings) with every setting given, so no tool's default matters.
BASE = dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0,
            repeat_last_n=64, presence_penalty=0.0, frequency_penalty=0.0, seed=1)
SAMPLERS = [
    ("greedy", {}),
    ("warm", dict(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, seed=42)),
    ("penalties", dict(temperature=1.0, repeat_penalty=1.15, presence_penalty=0.3,
                       frequency_penalty=0.2, repeat_last_n=32, seed=7)),
    ("hot", dict(temperature=1.3, top_k=0, top_p=0.97, seed=1234)),
]
FLAGS = dict(temperature="--temp", top_k="--top-k", top_p="--top-p", min_p="--min-p",
             repeat_penalty="--repeat-penalty", repeat_last_n="--repeat-last-n",
             presence_penalty="--presence-penalty", frequency_penalty="--frequency-penalty",
             seed="--seed")
GRAMMAR = 'root ::= [a-z ]+'


def cli_flags(c):
    f = []
    for k, v in c["sampling"].items():
        f += [FLAGS[k], str(v)]
    f += ["-n", str(c["max_tokens"])]
    for s in c["stop"]:
        f += ["--stop", s]
    if c["grammar"]:
        f += ["--grammar", c["grammar"]]
    return f


def run(model, c, tmp, tag, extra=()):
    """kinetic run: (json result, logits rows, receipt path)."""
    rec, lg = str(tmp / f"run-{tag}.json"), str(tmp / f"logits-{tag}.bin")
    p = subprocess.run([KINETIC, "run", model, c["prompt"], "--json", "--threads", "1",
                        "--receipt", rec, "--logits-out", lg, *cli_flags(c), *extra],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    js = json.loads(p.stdout)
    raw = open(lg, "rb").read()
    return js, raw, rec


def chat(model, c, tmp, tag):
    """kinetic chat with the prompt piped in; its /receipt."""
    rec = str(tmp / f"chat-{tag}.json")
    assert "\n" not in c["prompt"]
    p = subprocess.run([KINETIC, "chat", model, "--threads", "1", "--chat-format", "raw", *cli_flags(c)],
                       input=f"{c['prompt']}\n/receipt {rec}\n", capture_output=True, text=True,
                       errors="replace", timeout=600)  # a random model's text may not be UTF-8
    assert p.returncode == 0, p.stderr
    return json.load(open(rec)), rec


def body(c):
    b = {"messages": [{"role": "user", "content": c["prompt"]}], "max_tokens": c["max_tokens"],
         "logprobs": True, "top_logprobs": 2, **c["sampling"]}
    if c["stop"]:
        b["stop"] = c["stop"]
    if c["grammar"]:
        b["grammar"] = c["grammar"]
    return b


def log_softmax(row):
    x = row.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def verify(rec, scalar=False):
    """verify-receipt says identical (with scalar: on the portable kernels, KINETIC_ISA=scalar,
    as a verifier on another machine would)."""
    env = {**os.environ, "KINETIC_ISA": "scalar"} if scalar else None
    p = subprocess.run([KINETIC, "verify-receipt", rec], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0 and "rerun: identical" in p.stdout, (rec, p.stdout, p.stderr)


def cases(model, n_tokens):
    """The requests: every sampler, a grammar, and a stop string taken from the middle of
    a first run's text (so it really stops there)."""
    prompts = ["Once upon a time", "In my dream",
               "Classification whispers secrets, as I adjust. Classification whispers secrets,"]
    cs = [dict(name=n, prompt=prompts[i % len(prompts)], sampling={**BASE, **s},
               max_tokens=n_tokens, stop=[], grammar=None) for i, (n, s) in enumerate(SAMPLERS)]
    cs.append(dict(name="grammar", prompt="Once upon a time", sampling={**BASE, **SAMPLERS[1][1]},
                   max_tokens=n_tokens, stop=[], grammar=GRAMMAR))
    cs.append(dict(name="stop", prompt="In my dream", sampling={**BASE}, max_tokens=n_tokens,
                   stop=None, grammar=None))
    return cs


# Under ASan + UBSan (each case there costs ~20 s of processes) aidreams runs every case and
# the other models two greedy ones, the second with a stop string: greedy text repeats, so
# drafts are accepted (checked below) as well as rolled back; the samplers and the grammar
# are the same C code on every model. The plain suite runs every case on every model.
SANITIZER_CASES = ("greedy", "stop")


def check_model(model, tmp, n_tokens, names=None, scalar=False, need_accepted=True):
    if sanitizer_build() and model != AIDREAMS:
        names = tuple(n for n in (names or SANITIZER_CASES) if n in SANITIZER_CASES)
    cs = [c for c in cases(model, n_tokens) if names is None or c["name"] in names]
    # --chat-format raw in chat and serve: these models have no template, and raw is how
    # run renders the prompt (chat and serve would write plain turns)
    with Server(model, "--parallel", "1", "--threads", "1", "--no-draft", "--no-warm-start",
                "--cache-ram", "0", "--chat-format", "raw") as plain, \
         Server(model, "--parallel", "4", "--threads", "1", "--chat-format", "raw") as full:
        for k, c in enumerate(cs):
            if c["stop"] is None:  # a stop string from the middle of the greedy text
                first, _, _ = run(model, {**c, "stop": []}, tmp, f"{k}-probe")
                text = first["text"]
                assert len(text) >= 12, text
                # (four characters with no U+FFFD: a synth model's noise has broken UTF-8)
                at = [i for i in range(len(text) - 3) if "\ufffd" not in text[i:i + 4]]
                assert at, text
                mid = min(at, key=lambda i: abs(i - len(text) // 2))
                c["stop"] = [text[mid:mid + 4]]
            tag = f"{k}-{c['name']}"
            js, raw, rec_run = run(model, c, tmp, tag)
            ids = js["tokens"]
            if c["stop"]:
                assert js["stop"] == "stop_string", js
            # drafting off, and a warm prompt cache (stored by the first, used by the second)
            js2, raw2, _ = run(model, c, tmp, tag + "-nodraft", ("--no-draft",))
            pc = str(tmp / f"pc-{k}.bin")
            run(model, c, tmp, tag + "-cold", ("--prompt-cache", pc))
            js3, raw3, _ = run(model, c, tmp, tag + "-warm", ("--prompt-cache", pc))
            assert js3["prompt_reused"] > 0, js3
            for other, oraw in ((js2, raw2), (js3, raw3)):
                assert (other["tokens"], other["text"], other["stop"]) == (ids, js["text"], js["stop"]), c
                assert oraw == raw, c  # the same logits bytes at every position
            # chat, piped
            rc, rec_chat = chat(model, c, tmp, tag)
            assert rc["prompt"]["ids"] == js["prompt_tokens"], c
            assert rc["output"]["tokens"]["ids"] == ids and rc["output"]["text"] == js["text"], c
            # the server: alone, then under load with every speed feature on
            alone = plain.post("/v1/chat/completions", body(c))
            assert alone[0] == 200, alone[2]
            want = fingerprint(alone[2])
            with busy_clients(full, max_tokens=40, settle=0.2):
                for rep in range(2):  # the second one finds the prompt cached
                    st, _, resp = full.post("/v1/chat/completions", {**body(c), "receipt": True})
                    assert st == 200, resp
                    assert fingerprint(resp) == want, (c, rep)
            rec_srv = str(tmp / f"srv-{tag}.json")
            with open(rec_srv, "w") as f:
                json.dump(resp["receipt"], f)
            assert resp["receipt"]["prompt"]["ids"] == js["prompt_tokens"], c
            assert resp["receipt"]["output"]["tokens"]["ids"] == ids, c
            # the server's log-probabilities are those of run's logits
            lp = resp["choices"][0]["logprobs"]["content"]
            # (the tokens that make up a matched stop string get no entry: they are not shown)
            assert len(lp) == len(ids) or (c["stop"] and len(lp) < len(ids)), (c, len(lp))
            # run writes a row per generated token, and the end-of-generation token's
            n_rows = len(ids) + (js["stop"] == "eog")
            V = len(raw) // 4 // n_rows
            assert V * 4 * n_rows == len(raw)
            rows = np.frombuffer(raw, dtype="<f4").reshape(-1, V)
            for i, tid in enumerate(ids[:len(lp)]):
                want_lp = log_softmax(rows[i])[tid]
                assert abs(lp[i]["logprob"] - want_lp) < 1e-4, (c, i, lp[i]["logprob"], want_lp)
            for rec in (rec_run, rec_chat, rec_srv):
                verify(rec, scalar)
        stats = full.get("/stats")[2]
        if need_accepted:
            assert stats["draft"]["accepted"] > 0, stats
        assert stats["draft"]["proposed"] > 0, stats
        print(f"{model}: drafts {stats['draft']['accepted']}/{stats['draft']['proposed']} accepted")
        ws = stats["warm_start"]
        assert ws["cache_restored_tokens"] + ws["slot_reuse_tokens"] > 0, stats


def test_one_loop_aidreams(tmp_path):
    check_model(AIDREAMS, tmp_path, 40)


def test_one_loop_lfm2(tmp_path):
    """A tiny lfm2 (short-convolution layers around an attention layer): its conv state
    through drafting, the prompt cache, Convoy and the receipts; the server's receipts
    verify identical with KINETIC_ISA=scalar too. Random weights sample near-uniform text
    that drafts rarely predict, so here drafts are proposed (and rejected: the rollback)
    but need not be accepted; test_engine_spec's lfm2 run checks accepted ones."""
    model = str(tmp_path / "lfm2.gguf")
    # seed 20: with the f16 KV cache (the default since issue 21) seed 19's noise gave
    # RAD-1 nothing to propose; this one's does (the seed is arbitrary, drafting is not)
    p = subprocess.run([KINETIC, "synth", "--arch", "lfm2", "--preset", "tiny", "--type", "q4_k_m",
                        "--seed", "20", "-o", model], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    check_model(model, tmp_path, 24, scalar=True, need_accepted=False)


def test_one_loop_lfm2moe(tmp_path):
    """lfm2moe: the conv state and sigmoid-routed experts together, under a busy server
    with drafting (this file's text repeats enough for drafts to be accepted: conv rows
    rolled back and kept); receipts verify on the scalar kernels."""
    model = str(tmp_path / "lfm2moe.gguf")
    p = subprocess.run([KINETIC, "synth", "--arch", "lfm2moe", "--preset", "tiny", "--type", "q4_k_m",
                        "--seed", "19", "-o", model], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    check_model(model, tmp_path, 24, scalar=True, need_accepted=True)


@pytest.mark.skipif(not os.path.exists(GEMMA), reason="Gemma 3 270M not found (set KN_GEMMA)")
def test_one_loop_gemma(tmp_path):
    check_model(GEMMA, tmp_path, 12, names=("warm", "grammar", "stop"))


@pytest.fixture(scope="module")
def qwen3moe(tmp_path_factory):
    """A tiny random-weight qwen3moe (16 experts, 4 per token) in llama.cpp's Q4_K_M mix."""
    path = str(tmp_path_factory.mktemp("moe") / "qwen3moe-tiny-q4_k_m.gguf")
    p = subprocess.run([KINETIC, "synth", "--arch", "qwen3moe", "--preset", "tiny", "--type",
                        "q4_k_m", "--seed", "3", "-o", path], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return path


def test_one_loop_qwen3moe(tmp_path, qwen3moe):
    """Mixture of experts: the server under load groups other requests' tokens with these by
    expert; drafting verifies several tokens in one pass; receipts verify on the scalar
    kernels."""
    check_model(qwen3moe, tmp_path, 24, scalar=True)


# Architectures with their own hooks, as tiny synth models (random weights: the text is
# noise, but every path above runs): dims as in test_model_ref.py, which makes the hooks
# matter (gemma2: a window the prompts slide, soft-caps these weights' scores reach). The
# busy server's receipt (--parallel 4, drafting) must also verify with KINETIC_ISA=scalar.
# (dims, seed): seeds whose greedy noise holds a few whole characters for the stop case.
SYNTH_ARCHS = {"gemma2": ("window=6,attn_softcap=0.05,final_softcap=0.2", 1),
               "phi3": ("window=6,rot=32,rope_orig_ctx=64", 3),
               "granite": ("kv_heads=2", 13),
               "smollm3": ("kv_heads=2", 3),
               "olmo2": ("window=6,layers=4", 3),
               "gpt-oss": ("window=6", 3)}
# Under ASan + UBSan only the architectures with the newest C paths (soft-caps, sinks and
# the clamped experts) run: each case costs ~50 s there, and the plain suite runs them all
# (the memory checks of the shared paths are the same for every architecture).
SANITIZER_ARCHS = {"gemma2", "gpt-oss"}


@pytest.mark.parametrize("arch", sorted(SYNTH_ARCHS))
def test_one_loop_synth(tmp_path, arch):
    if sanitizer_build() and arch not in SANITIZER_ARCHS:
        pytest.skip(f"{arch}: the plain suite runs it; under ASan only {sorted(SANITIZER_ARCHS)} (CI time)")
    path = str(tmp_path / f"{arch}.gguf")
    dims, seed = SYNTH_ARCHS[arch]
    p = subprocess.run([KINETIC, "synth", "--arch", arch, "--preset", "tiny", "--type", "q4_k_m",
                        "--dims", dims, "--seed", str(seed), "-o", path],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    check_model(path, tmp_path, 24, names=("greedy", "warm", "grammar", "stop"), scalar=True)
