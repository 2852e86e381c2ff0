"""POST /v1/embeddings (issue 21 item 2) with the official openai client against the real
server: float and base64 encodings (the SDK's default asks for base64 and decodes it; it
must give the float answer's exact bits), every input shape (a string, strings, token
ids, arrays of them), usage.prompt_tokens, "dimensions" (Matryoshka truncation on qwen3,
refused above the width), OpenAI's error shapes, and the pooling types of the GGUF's
pooling_type (mean, cls, last; none refused) against the float64 reference
(model_ref.py). An embedding is bit-identical alone, under load with completions in
flight, and in `kinetic embed` at every ISA level, thread count and batch size."""
import base64
import os
import subprocess
import sys

import numpy as np
import pytest

from srvutil import KINETIC, DATA, Server, busy_clients, sanitizer_build

sys.path.insert(0, os.path.dirname(__file__))
from model_ref import RefModel  # noqa: E402

openai = pytest.importorskip("openai")

POOLING = {"mean": 1, "cls": 2, "last": 3}


# The -O0 ASan build checks the code paths once; the ISA x threads x batch grid is a
# property of the plain build's bits (and would cost CI minutes there).
SANITIZE = sanitizer_build()
TEXTS = ["the stars at night", "a quiet river", "the stars at noon"]


BGE_VOCAB = os.path.join(DATA, "vocab", "ggml-vocab-bert-bge.gguf")


def synth(d, name, pooling, arch="qwen3", vocab=None):
    path = d / f"{name}.gguf"
    dims = ["--dims", f"pooling={pooling}"] if pooling else []
    more = ["--vocab", vocab] if vocab else []
    subprocess.run([KINETIC, "synth", "--arch", arch, "--preset", "tiny", *dims, *more, "-o",
                    str(path)], check=True, capture_output=True, timeout=120)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("embed")
    out = {p: synth(d, p, n) for p, n in POOLING.items()}
    out["none"] = synth(d, "none", 0)
    out["llama-mean"] = synth(d, "llama_mean", 1, arch="llama")
    # the BERT family: bge's shape with its WordPiece vocabulary (cls pooling, the synth
    # default for bert), nomic-bert (mean) with the built-in one
    out["bert"] = synth(d, "bert", 0, arch="bert",
                        vocab=BGE_VOCAB if os.path.exists(BGE_VOCAB) else None)
    out["nomic-bert"] = synth(d, "nomic", 0, arch="nomic-bert")
    return out


@pytest.fixture(scope="module")
def mean_srv(models):
    with Server(models["mean"], "--threads", "2", "--parallel", "3") as s:
        yield s


def client(s):
    return openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0)


def tokens(s, text):
    st, _, js = s.post("/tokenize", {"content": text, "add_special": True})
    assert st == 200, js
    return js["tokens"]


def f32(v):
    return np.asarray(v, dtype=np.float32)


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_openai_float_and_base64(mean_srv):
    c = client(mean_srv)
    r = c.embeddings.create(model="m", input=TEXTS, encoding_format="float")
    assert r.object == "list" and len(r.data) == 3
    assert [d.index for d in r.data] == [0, 1, 2] and r.data[0].object == "embedding"
    n_tok = [len(tokens(mean_srv, t)) for t in TEXTS]
    assert r.usage.prompt_tokens == sum(n_tok) == r.usage.total_tokens
    for d in r.data:
        v = np.asarray(d.embedding, np.float64)
        assert v.shape == (256,)
        assert abs(np.linalg.norm(v) - 1.0) < 1e-6
    # the SDK's default: it asks for base64 and decodes it itself
    dflt = c.embeddings.create(model="m", input=TEXTS)
    raw = c.embeddings.create(model="m", input=TEXTS, encoding_format="base64")
    for a, b, e in zip(r.data, dflt.data, raw.data):
        assert f32(a.embedding).tobytes() == f32(b.embedding).tobytes()
        got = np.frombuffer(base64.b64decode(e.embedding), dtype="<f4")
        assert got.tobytes() == f32(a.embedding).tobytes()
    # related texts are closer than unrelated ones is not asserted: random weights


def test_input_shapes(mean_srv):
    c = client(mean_srv)
    ids = [tokens(mean_srv, t) for t in TEXTS]
    by_text = c.embeddings.create(model="m", input=TEXTS[0], encoding_format="float")
    by_ids = c.embeddings.create(model="m", input=ids[0], encoding_format="float")
    by_ids2 = c.embeddings.create(model="m", input=ids, encoding_format="float")
    assert f32(by_text.data[0].embedding).tobytes() == f32(by_ids.data[0].embedding).tobytes()
    assert f32(by_ids2.data[0].embedding).tobytes() == f32(by_ids.data[0].embedding).tobytes()
    assert by_ids2.usage.prompt_tokens == sum(map(len, ids))
    # the same text alone and among others: the same bits
    many = c.embeddings.create(model="m", input=TEXTS, encoding_format="float")
    assert f32(many.data[0].embedding).tobytes() == f32(by_text.data[0].embedding).tobytes()


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_pooling_against_float64_reference(models, pooling):
    if SANITIZE and pooling != "last":
        pytest.skip("sanitizer build: one pooling runs the code path; the plain build checks all")
    ref = RefModel(str(models[pooling]))
    with Server(models[pooling], "--threads", "1") as s:
        c = client(s)
        ids = [tokens(s, t) for t in TEXTS]
        r = c.embeddings.create(model="m", input=ids, encoding_format="float")
        for d, tk in zip(r.data, ids):
            want = ref.embedding(tk, pooling)
            assert cos(d.embedding, want) > 0.9999, (pooling, cos(d.embedding, want))
        # pairwise similarities as the reference has them
        got = [np.asarray(d.embedding) for d in r.data]
        want = [ref.embedding(tk, pooling) for tk in ids]
        for i in range(3):
            for j in range(i + 1, 3):
                assert abs(cos(got[i], got[j]) - cos(want[i], want[j])) < 1e-3
        # pooling differs: cls and last are single positions, mean is not
        if pooling != "mean":
            h = ref.hidden(ids[0])
            one = h[0] if pooling == "cls" else h[-1]
            assert cos(r.data[0].embedding, one) > 0.9999


@pytest.mark.parametrize("arch,pooling", [("bert", "cls"), ("nomic-bert", "mean")])
def test_bert_family_against_float64_reference(models, arch, pooling):
    """bert (bge: absolute positions, GELU, biases) and nomic-bert (rotary, SwiGLU): every
    token attends to the whole sequence, post-norm LayerNorms; the reference is
    model_ref.py's llm_build_bert."""
    ref = RefModel(str(models[arch]))
    with Server(models[arch], "--threads", "2") as s:
        c = client(s)
        texts = TEXTS + ["Hello, World! " * 20]
        ids = [tokens(s, t) for t in texts]
        if arch == "bert" and os.path.exists(BGE_VOCAB):
            assert ids[0][0] == 101 and ids[0][-1] == 102  # [CLS] ... [SEP]
        r = c.embeddings.create(model="m", input=texts, encoding_format="float")
        for d, tk in zip(r.data, ids):
            want = ref.embedding(tk, pooling)
            assert cos(d.embedding, want) > 0.9999, (arch, cos(d.embedding, want))
        if pooling == "cls":  # not causal: token 0's state depends on the tokens after it
            two = c.embeddings.create(model="m", input=[ids[0], ids[0][:2]],
                                      encoding_format="float")
            assert cos(two.data[0].embedding, two.data[1].embedding) < 0.999
        if arch == "nomic-bert":  # Matryoshka (nomic-embed v1.5)
            short = c.embeddings.create(model="m", input=texts[0], dimensions=64,
                                        encoding_format="float")
            assert cos(short.data[0].embedding, ref.embedding(ids[0], pooling, dims=64)) > 0.9999
        else:
            with pytest.raises(openai.BadRequestError):
                c.embeddings.create(model="m", input="x", dimensions=64)
        # an encoder generates nothing: a clear error, and the server goes on
        for path, body in (("/v1/completions", {"prompt": "a", "max_tokens": 2}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}]})):
            st, _, js = s.post(path, body)
            assert st == 400 and js["error"]["code"] == "model_not_generative", js
        st, _, js = s.post("/v1/embeddings", {"input": [5] * 513})
        assert st == 400 and js["error"]["code"] == "context_length_exceeded", js


def test_dimensions(models, mean_srv):
    c = client(mean_srv)
    full = c.embeddings.create(model="m", input=TEXTS[1], encoding_format="float")
    short = c.embeddings.create(model="m", input=TEXTS[1], dimensions=32, encoding_format="float")
    v, w = np.asarray(full.data[0].embedding), np.asarray(short.data[0].embedding)
    assert w.shape == (32,) and abs(np.linalg.norm(w) - 1.0) < 1e-6
    assert np.allclose(w, v[:32] / np.linalg.norm(v[:32]), atol=1e-6)
    ref = RefModel(str(models["mean"]))
    assert cos(w, ref.embedding(tokens(mean_srv, TEXTS[1]), "mean", dims=32)) > 0.9999
    full2 = c.embeddings.create(model="m", input=TEXTS[1], dimensions=256, encoding_format="float")
    assert f32(full2.data[0].embedding).tobytes() == f32(v).tobytes()
    for bad in (0, 257):
        with pytest.raises(openai.BadRequestError) as e:
            c.embeddings.create(model="m", input="x", dimensions=bad)
        assert e.value.body["param"] == "dimensions"
        assert "between 1 and the model's 256" in e.value.body["message"]


def test_dimensions_refused_without_matryoshka(models):
    if SANITIZE:
        pytest.skip("sanitizer build: request validation only, checked by the plain build")
    with Server(models["llama-mean"], "--threads", "1") as s:
        c = client(s)
        r = c.embeddings.create(model="m", input="x", encoding_format="float")
        assert len(r.data[0].embedding) == 256
        with pytest.raises(openai.BadRequestError) as e:
            c.embeddings.create(model="m", input="x", dimensions=64)
        assert "not Matryoshka-trained" in e.value.body["message"]


def test_pooling_none_refused(models):
    with Server(models["none"], "--threads", "1") as s:
        st, _, js = s.post("/v1/embeddings", {"input": "hello"})
        assert st == 400, js
        assert js["error"]["code"] == "model_not_embedding"
        assert "pooling_type is none" in js["error"]["message"]
        # the rest of the server still works
        st, _, js = s.post("/v1/completions", {"prompt": "a", "max_tokens": 2})
        assert st == 200, js


def test_errors(mean_srv):
    s = mean_srv
    cases = [
        ({}, "input", "'input' is required"),
        ({"input": ""}, "input", "empty string"),
        ({"input": []}, "input", "empty array"),
        ({"input": [[]]}, "input", "input[0] is an empty array"),
        ({"input": 5}, "input", "must be a string"),
        ({"input": ["a", 5]}, "input", "input[1] must be a string"),
        ({"input": [1, 99999]}, "input", "input[1] must be a token id between 0 and 511"),
        ({"input": "a", "encoding_format": "hex"}, "encoding_format", "\"float\" or \"base64\""),
        ({"input": "a", "dimensions": "8"}, "dimensions", "must be an integer"),
        ({"input": ["a"] * 2049}, "input", "at most 2048"),
        ({"input": [1] * 5000}, "input", "context holds"),
    ]
    for body, param, msg in cases:
        st, _, js = s.post("/v1/embeddings", body)
        assert st == 400, (body, js)
        assert js["error"]["type"] == "invalid_request_error"
        assert js["error"]["param"] == param, js
        assert msg in js["error"]["message"], js
    st, _, js = s.post("/embeddings", {"input": "a"})  # llama-server's path too
    assert st == 200 and js["data"][0]["index"] == 0
    st, _, text = s.get("/metrics")
    assert st == 200 and 'endpoint="embeddings",status="400"' in text, text[:2000]


def test_bit_identical_under_load(mean_srv):
    c = client(mean_srv)
    alone = [f32(d.embedding).tobytes()
             for d in c.embeddings.create(model="m", input=TEXTS, encoding_format="float").data]
    with busy_clients(mean_srv, max_tokens=40) as counts:
        for _ in range(4):
            got = c.embeddings.create(model="m", input=TEXTS, encoding_format="float")
            assert [f32(d.embedding).tobytes() for d in got.data] == alone
    assert sum(counts) > 0


def cli_embed(model, *args, env=None):
    r = subprocess.run([KINETIC, "embed", str(model), *args], capture_output=True, text=True,
                       timeout=120, env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return r.stdout


def isa_levels():
    r = subprocess.run([KINETIC, "--version"], capture_output=True, text=True, timeout=30)
    line = [x for x in r.stdout.splitlines() if x.startswith("isa:")][0]
    return line.split(":", 1)[1].split("(")[0].split()


def test_cli_matches_server_across_isa_threads_batches(models, mean_srv):
    import json
    want = cli_embed(models["mean"], *TEXTS)
    lines = want.splitlines()
    assert len(lines) == 3
    srv = client(mean_srv).embeddings.create(model="m", input=TEXTS, encoding_format="float")
    for line, d in zip(lines, srv.data):
        assert f32(json.loads(line)).tobytes() == f32(d.embedding).tobytes()
    grid = (("2", "5"),) if SANITIZE else (("1", "1"), ("2", "5"), ("2", "512"))
    bert_want = {a: cli_embed(models[a], *TEXTS) for a in ("bert", "nomic-bert")}
    for isa in isa_levels()[-1:] if SANITIZE else isa_levels():
        for t, b in grid:
            got = cli_embed(models["mean"], *TEXTS, "-t", t, "-b", b, env={"KINETIC_ISA": isa})
            assert got == want, (isa, t, b)
            for a, w in bert_want.items():  # one pass per sequence: -b does not apply
                assert cli_embed(models[a], *TEXTS, "-t", t, env={"KINETIC_ISA": isa}) == w, a
    r = subprocess.run([KINETIC, "embed", str(models["none"]), "x"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "pooling_type is none" in r.stderr


def free_port():
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


@pytest.mark.parametrize("pooling", ["mean", "last", "bert", "nomic-bert"])
def test_llama_server_agrees(models, pooling):
    """llama.cpp's llama-server --embeddings on the same file (LLAMA_BIN: the folder of its
    binaries; skipped without): the same vectors to within its f16 KV cache and kernels."""
    import json
    import time
    import urllib.request
    exe = os.path.join(os.environ.get("LLAMA_BIN", ""), "llama-server")
    if not os.environ.get("LLAMA_BIN") or not os.access(exe, os.X_OK):
        pytest.skip("LLAMA_BIN (llama.cpp's build/bin with llama-server) not given")
    port = free_port()
    p = subprocess.Popen([exe, "-m", str(models[pooling]), "--embeddings", "--port", str(port),
                          "-t", "1", "-c", "512"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        body = json.dumps({"input": TEXTS}).encode()
        for _ in range(300):
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", body,
                                             {"Content-Type": "application/json"})
                theirs = json.loads(urllib.request.urlopen(req, timeout=30).read())
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("llama-server did not answer")
    finally:
        p.terminate()
        p.wait(timeout=30)
    with Server(models[pooling], "--threads", "1") as s:
        ours = client(s).embeddings.create(model="m", input=TEXTS, encoding_format="float")
    for a, b in zip(ours.data, theirs["data"]):
        assert cos(a.embedding, b["embedding"]) > 0.999, cos(a.embedding, b["embedding"])


def test_synth_presets(tmp_path):
    """The embedding presets' real shapes and pooling keys (one layer, small vocabulary)."""
    if SANITIZE:
        pytest.skip("sanitizer build: the tiny models above cover the code paths")
    gguf = pytest.importorskip("gguf")
    want = {"qwen3-embedding-0.6b": ("qwen3", 1024, 3), "bge-small": ("bert", 384, 2),
            "nomic-embed-v1.5": ("nomic-bert", 768, 1)}
    for preset, (arch, dim, pooling) in want.items():
        out = tmp_path / f"{preset}.gguf"
        subprocess.run([KINETIC, "synth", "--preset", preset, "--dims", "layers=1,vocab=512",
                        "-o", str(out)], check=True, capture_output=True, timeout=120)
        r = gguf.GGUFReader(str(out))
        kv = {f.name: f.contents() for f in r.fields.values()}
        assert kv["general.architecture"] == arch
        assert kv[f"{arch}.embedding_length"] == dim and kv[f"{arch}.pooling_type"] == pooling
        names = {t.name for t in r.tensors}
        if arch == "bert":
            assert {"position_embd.weight", "token_types.weight", "blk.0.ffn_up.bias",
                    "blk.0.layer_output_norm.bias"} <= names and "output.weight" not in names
        if arch == "nomic-bert":
            assert "blk.0.attn_qkv.weight" in names and "position_embd.weight" not in names
        r = subprocess.run([KINETIC, "embed", str(out), "hello"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and len(r.stdout.split(",")) == dim, r.stderr
