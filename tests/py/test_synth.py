"""kinetic synth: random-weight models with real shapes, checked with gguf-py (an independent
GGUF reader) and with `kinetic info`.

The expected tensor types restate llama.cpp's mix rules (llama_tensor_get_type in
src/llama-quant.cpp: Q2_K, Q3_K_S/M/L, Q4_K_M, Q5_K_M, IQ4_NL, IQ4_XS for dense models
without an importance matrix) here in Python, independently of the C code.
"""
import hashlib
import os
import struct
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

KINETIC = os.environ.get("KINETIC", os.path.join(os.path.dirname(__file__), "..", "..", "build", "kinetic"))
from testdata import DATA
SPM_VOCAB = os.path.join(DATA, "vocab", "ggml-vocab-llama-spm.gguf")
GPT2_VOCAB = os.path.join(DATA, "vocab", "ggml-vocab-gpt-2.gguf")

ARCHS = ["llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "gemma2", "phi3", "granite", "smollm3", "olmo2"]
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q4_k_m",
         "q3_k", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q5_k_m", "iq4_nl", "iq4_xs", "mxfp4_moe",
         "mxfp4"]
T = gguf.GGMLQuantizationType
# the default type (a mix: the type of the tensors no rule moves)
SINGLE = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0,
          "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q5_1": T.Q5_1, "q4_k": T.Q4_K, "q5_k": T.Q5_K,
          "q6_k": T.Q6_K, "q4_k_m": T.Q4_K, "q3_k": T.Q3_K, "q2_k": T.Q2_K, "q3_k_s": T.Q3_K,
          "q3_k_m": T.Q3_K, "q3_k_l": T.Q3_K, "q5_k_m": T.Q5_K, "iq4_nl": T.IQ4_NL,
          "iq4_xs": T.IQ4_XS, "mxfp4_moe": T.Q8_0, "mxfp4": T.MXFP4}
MIXES = {"q4_k_m", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q5_k_m", "iq4_nl", "iq4_xs"}
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8,
             "q5_1": 9, "q4_k": 14, "q5_k": 16, "q6_k": 18, "q4_k_m": 15, "q3_k": 11, "q2_k": 10,
             "q3_k_s": 11, "q3_k_m": 12, "q3_k_l": 13, "q5_k_m": 17, "iq4_nl": 25, "iq4_xs": 30,
             "mxfp4_moe": 38, "mxfp4": 38}


def synth(*args, check=True):
    r = subprocess.run([KINETIC, "synth", *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def fields(reader):
    out = {}
    for f in reader.fields.values():
        if f.name.startswith("GGUF."):
            continue
        out[f.name] = f.contents()
    return out


def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def mix_type(ftype, name, t, n_layer, gqa):
    """llama_tensor_get_type for a matrix other than the output and the embedding."""
    il = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if "attn_v.weight" in name:
        if ftype == "q2_k":
            return T.Q4_K if gqa >= 4 else T.Q3_K
        if ftype == "q3_k_m":
            return T.Q5_K if il < 2 else T.Q4_K
        if ftype == "q3_k_l":
            return T.Q5_K
        if ftype in ("iq4_nl", "iq4_xs") and gqa >= 4:
            return T.Q5_K
        if ftype in ("q4_k_m", "q5_k_m") and more_bits(il, n_layer):
            return T.Q6_K
    elif "ffn_down" in name:
        if ftype == "q2_k":
            return T.Q3_K
        if ftype == "q3_k_m":
            return T.Q5_K if il < n_layer // 16 else T.Q4_K
        if ftype == "q3_k_l":
            return T.Q5_K
        if ftype in ("q4_k_m", "q5_k_m") and more_bits(il, n_layer):
            return T.Q6_K
        if ftype in ("iq4_nl", "iq4_xs") and il < n_layer // 8:
            return T.Q5_K
    elif "attn_output.weight" in name:
        return {"q2_k": T.Q3_K, "q3_k_m": T.Q4_K, "q3_k_l": T.Q5_K}.get(ftype, t)
    return t


def expected_type(ftype, name, n_dims, ne0, n_layer, tied, gqa=2):
    """llama.cpp's choice (a mix) or the single type, with llama.cpp's fallbacks."""
    if n_dims < 2 or name.endswith("ffn_gate_inp.weight"):  # llama.cpp keeps routers F32
        return T.F32
    t = SINGLE[ftype]
    if ftype == "mxfp4_moe":
        t = T.MXFP4 if n_dims == 3 else T.Q8_0
    elif ftype in MIXES:
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            t = T.Q8_0 if ne0 % gguf.GGML_QUANT_SIZES[t][0] else T.Q6_K
        elif name.endswith("attn_qkv.weight") and ftype in ("q3_k_m", "q3_k_l", "q4_k_m", "q5_k_m"):
            t = {"q3_k_m": T.Q4_K, "q3_k_l": T.Q4_K, "q4_k_m": T.Q5_K, "q5_k_m": T.Q6_K}[ftype]  # llama.cpp
        elif name != "token_embd.weight":
            t = mix_type(ftype, name, t, n_layer, gqa)
    bs = gguf.GGML_QUANT_SIZES[t][0]
    if ne0 % bs:
        t = {T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0, T.Q2_K: T.IQ4_NL, T.Q3_K: T.IQ4_NL,
             T.IQ4_XS: T.IQ4_NL}.get(t, T.F16)
        if ne0 % gguf.GGML_QUANT_SIZES[t][0]:
            t = T.F16
    return t


def expected_tensors(arch, dim, n_layer, n_head, n_kv, head_dim, ffn, vocab, tied):
    """name -> shape (ne0 first), as llama.cpp's loader wants them."""
    q, kv = n_head * head_dim, n_kv * head_dim
    t = {"token_embd.weight": [dim, vocab], "output_norm.weight": [dim]}
    if not tied:
        t["output.weight"] = [dim, vocab]
    for i in range(n_layer):
        b = f"blk.{i}."
        if arch == "phi3":  # fused q/k/v and gate/up, as llama.cpp's phi3 loader wants
            t.update({b + "attn_norm.weight": [dim], b + "attn_qkv.weight": [dim, q + 2 * kv],
                      b + "attn_output.weight": [q, dim], b + "ffn_norm.weight": [dim],
                      b + "ffn_up.weight": [dim, 2 * ffn], b + "ffn_down.weight": [ffn, dim]})
            continue
        t.update({b + "attn_norm.weight": [dim], b + "attn_q.weight": [dim, q],
                  b + "attn_k.weight": [dim, kv], b + "attn_v.weight": [dim, kv],
                  b + "attn_output.weight": [q, dim], b + "ffn_norm.weight": [dim]})
        if arch == "qwen3moe":  # tiny: 16 experts of width 256
            t.update({b + "ffn_gate_inp.weight": [dim, 16], b + "ffn_gate_exps.weight": [dim, 256, 16],
                      b + "ffn_up_exps.weight": [dim, 256, 16], b + "ffn_down_exps.weight": [256, dim, 16]})
        else:
            t.update({b + "ffn_gate.weight": [dim, ffn], b + "ffn_up.weight": [dim, ffn],
                      b + "ffn_down.weight": [ffn, dim]})
        if arch == "qwen2":
            t.update({b + "attn_q.bias": [q], b + "attn_k.bias": [kv], b + "attn_v.bias": [kv]})
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            t.update({b + "attn_q_norm.weight": [head_dim], b + "attn_k_norm.weight": [head_dim]})
        if arch == "olmo2":  # no pre-norms, whole-row q/k norms, post norms
            del t[b + "attn_norm.weight"], t[b + "ffn_norm.weight"]
            t.update({b + "attn_q_norm.weight": [q], b + "attn_k_norm.weight": [kv],
                      b + "post_attention_norm.weight": [dim], b + "post_ffw_norm.weight": [dim]})
        if arch in ("gemma3", "gemma2"):
            t.update({b + "post_attention_norm.weight": [dim], b + "post_ffw_norm.weight": [dim]})
    return t


def walk(path):
    """A minimal GGUF walk: {key: (value type, raw value bytes)} and {tensor: (type, ne)}.
    gguf-py's GGUFReader builds Python objects for every vocabulary string, which takes
    seconds on a 50k-token vocabulary; comparing raw bytes is also the stricter check of
    a verbatim copy."""
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def skip(vt):
        nonlocal pos
        if vt == 8:
            n = take("Q")
            pos += n
        elif vt == 9:
            et = take("I")
            n = take("Q")
            if et in scalar:
                pos += n * struct.calcsize(scalar[et])
            else:
                for _ in range(n):
                    skip(et)
        else:
            pos += struct.calcsize(scalar[vt])

    assert data[:4] == b"GGUF"
    pos = 8
    n_tensors, n_kv = take("Q"), take("Q")
    kv, tensors = {}, {}
    for _ in range(n_kv):
        n = take("Q")
        key = data[pos:pos + n].decode()
        pos += n
        vt = take("I")
        start = pos
        skip(vt)
        kv[key] = (vt, data[start:pos])
    for _ in range(n_tensors):
        n = take("Q")
        name = data[pos:pos + n].decode()
        pos += n
        ne = [take("Q") for _ in range(take("I"))]
        tensors[name] = (take("I"), ne)
        take("Q")
    return kv, tensors


def array_len(raw):
    """Element count of a raw GGUF array value."""
    return struct.unpack_from("<Q", raw[1], 4)[0]


TINY_LAYERS = {"llama": 2, "qwen2": 2, "qwen3": 2, "gemma3": 6, "qwen3moe": 2, "gemma2": 2, "phi3": 2,
               "granite": 2, "smollm3": 4, "olmo2": 2}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    for arch in ARCHS:
        for ty in TYPES:
            synth("--arch", arch, "--preset", "tiny", "--type", ty, "--seed", 1, "-o", d / f"{arch}-{ty}.gguf")
    return d


def kinetic_info(path):
    r = subprocess.run([KINETIC, "info", str(path)], capture_output=True, text=True, timeout=60)
    if "not available yet" in r.stderr:
        pytest.skip("kinetic info is not built in this tree yet")
    return r


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("ty", TYPES)
def test_tiny_loads(tiny_dir, arch, ty):
    path = tiny_dir / f"{arch}-{ty}.gguf"
    r = gguf.GGUFReader(path)
    kv = fields(r)
    n_layer = TINY_LAYERS[arch]
    assert kv["general.architecture"] == arch
    assert kv["general.file_type"] == FILE_TYPE[ty]
    assert kv[f"{arch}.block_count"] == n_layer
    assert kv[f"{arch}.embedding_length"] == 256
    assert kv[f"{arch}.attention.head_count"] == 4
    assert kv[f"{arch}.attention.head_count_kv"] == 2
    assert kv[f"{arch}.attention.key_length"] == 64
    assert kv[f"{arch}.feed_forward_length"] == 512
    assert kv[f"{arch}.vocab_size"] == 512
    assert kv["tokenizer.ggml.model"] == "llama"
    assert len(kv["tokenizer.ggml.tokens"]) == 512
    if arch in ("gemma3", "gemma2"):
        assert kv[f"{arch}.attention.sliding_window"] == 128
    if arch == "granite":  # Granite 3.3 2B's scales by default
        assert (kv["granite.embedding_scale"], kv["granite.residual_scale"]) == (12.0, np.float32(0.22))
        assert (kv["granite.attention.scale"], kv["granite.logit_scale"]) == (0.015625, 8.0)
    if arch == "phi3":
        assert "phi3.attention.sliding_window" not in kv  # only where asked for
        assert kv["tokenizer.ggml.tokens"][-1] == "<|endoftext|>"  # llama.cpp looks it up
    if arch == "gemma2":
        assert kv["gemma2.attn_logit_softcapping"] == 50.0
        assert kv["gemma2.final_logit_softcapping"] == 30.0
    if arch == "qwen3moe":
        assert (kv["qwen3moe.expert_count"], kv["qwen3moe.expert_used_count"],
                kv["qwen3moe.expert_feed_forward_length"]) == (16, 4, 256)
    tied = arch == "gemma2"  # llama.cpp's gemma2 has no output.weight
    want = expected_tensors(arch, 256, n_layer, 4, 2, 64, 512, 512, tied=tied)
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(want)
    for name, t in got.items():
        assert list(map(int, t.shape)) == want[name], name
        assert T(t.tensor_type) == expected_type(ty, name, len(want[name]), want[name][0], n_layer, tied), name
        if len(want[name]) == 1 and "norm" in name:
            assert np.all(np.asarray(t.data) == 1.0), f"{name}: norms must be 1.0"
    # the weights are N(0, 0.02)-like after quantization
    emb = got["token_embd.weight"]
    w = gguf.quants.dequantize(np.asarray(emb.data), T(emb.tensor_type)).astype(np.float64)
    assert abs(w.mean()) < 0.001 and 0.019 < w.std() < 0.0215, (w.mean(), w.std())


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("ty", TYPES)
def test_tiny_info(tiny_dir, arch, ty):
    info = kinetic_info(tiny_dir / f"{arch}-{ty}.gguf")
    assert info.returncode == 0, info.stderr
    assert arch in info.stdout


def test_q4_k_m_mix_gemma_like(tmp_path):
    """Gemma 3 270M's shapes: 640-wide rows take llama.cpp's fallbacks (Q5_0, Q8_0), as in
    the real Q4_K_M file."""
    out = tmp_path / "g.gguf"
    synth("--preset", "gemma3-270m", "--dims", "layers=6,vocab=1024", "--type", "q4_k_m", "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    assert kv["gemma3.embedding_length"] == 640 and kv["gemma3.attention.key_length"] == 256
    assert kv["gemma3.attention.head_count_kv"] == 1 and kv["gemma3.attention.sliding_window"] == 512
    types = {t.name: T(t.tensor_type) for t in r.tensors}
    assert "output.weight" not in types  # tied
    assert types["token_embd.weight"] == T.Q8_0
    assert types["blk.0.attn_q.weight"] == T.Q5_0
    # with 6 layers llama.cpp gives layers 2 and 5 more bits
    assert types["blk.5.attn_v.weight"] == T.Q8_0  # Q6_K -> Q8_0 (640 is not whole K blocks)
    assert types["blk.2.attn_v.weight"] == T.Q8_0
    assert types["blk.1.attn_v.weight"] == T.Q5_0  # Q4_K -> Q5_0
    assert types["blk.0.attn_output.weight"] == T.Q4_K  # 1024 wide
    assert types["blk.2.ffn_down.weight"] == T.Q6_K  # 2048 wide
    assert types["blk.0.ffn_down.weight"] == T.Q4_K


def test_gemma2_presets(tmp_path):
    """Gemma 2 2B's and 27B's shapes (fewer layers, a small vocabulary to stay quick); the
    soft-caps given by --dims are written."""
    out = tmp_path / "g2.gguf"
    synth("--preset", "gemma2-2b", "--dims", "layers=2,vocab=1024,attn_softcap=20,final_softcap=10",
          "--type", "q4_k_m", "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    assert kv["general.architecture"] == "gemma2"
    assert kv["gemma2.embedding_length"] == 2304 and kv["gemma2.attention.key_length"] == 256
    assert kv["gemma2.attention.head_count"] == 8 and kv["gemma2.attention.head_count_kv"] == 4
    assert kv["gemma2.attention.sliding_window"] == 4096 and kv["gemma2.feed_forward_length"] == 9216
    assert kv["gemma2.attn_logit_softcapping"] == 20.0 and kv["gemma2.final_logit_softcapping"] == 10.0
    shapes = {t.name: list(map(int, t.shape)) for t in r.tensors}
    assert shapes["blk.0.attn_q.weight"] == [2304, 2048] and "output.weight" not in shapes
    assert shapes["blk.1.post_ffw_norm.weight"] == [2304] and "blk.0.attn_q_norm.weight" not in shapes
    out = tmp_path / "g27.gguf"
    synth("--preset", "gemma2-27b", "--dims", "layers=1,vocab=1024", "--type", "q8_0", "-o", out)
    kv = fields(gguf.GGUFReader(out))
    assert kv["gemma2.embedding_length"] == 4608 and kv["gemma2.attention.key_length"] == 128


def test_phi3_presets(tmp_path):
    """Phi-3-mini-4k (window 2047), Phi-3.5-mini (LongRoPE) and Phi-4-mini (LongRoPE, 96 of
    128 dims rotated, GQA, tied) shapes, one layer and a small vocabulary."""
    out = tmp_path / "p3.gguf"
    synth("--preset", "phi3-mini-4k", "--dims", "layers=1,vocab=1024", "--type", "q4_k_m", "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    assert kv["phi3.attention.sliding_window"] == 2047 and kv["phi3.rope.dimension_count"] == 96
    types = {t.name: T(t.tensor_type) for t in r.tensors}
    shapes = {t.name: list(map(int, t.shape)) for t in r.tensors}
    assert shapes["blk.0.attn_qkv.weight"] == [3072, 9216] and types["blk.0.attn_qkv.weight"] == T.Q5_K
    assert shapes["blk.0.ffn_up.weight"] == [3072, 16384] and "blk.0.ffn_gate.weight" not in shapes
    assert "rope_factors_long.weight" not in shapes and "output.weight" in shapes
    out = tmp_path / "p4.gguf"
    synth("--preset", "phi4-mini", "--dims", "layers=1,vocab=1024", "--type", "q8_0", "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    assert kv["phi3.rope.dimension_count"] == 96 and kv["phi3.attention.key_length"] == 128
    assert kv["phi3.rope.scaling.original_context_length"] == 4096
    assert abs(kv["phi3.rope.scaling.attn_factor"] - 1.1902380714238083) < 1e-6
    t = {t.name: t for t in r.tensors}
    assert list(map(int, t["blk.0.attn_qkv.weight"].shape)) == [3072, 3072 + 2 * 1024]
    long_f, short_f = np.asarray(t["rope_factors_long.weight"].data), np.asarray(t["rope_factors_short.weight"].data)
    assert long_f.shape == short_f.shape == (48,) and long_f[-1] == 40.0 and short_f[-1] == 2.0
    assert "output.weight" not in t


def test_granite_presets(tmp_path):
    """Granite 3.x 8B's shape and scales, one layer and a small vocabulary."""
    out = tmp_path / "gr.gguf"
    synth("--preset", "granite-3-8b", "--dims", "layers=1,vocab=1024,logit_scale=4", "--type", "q4_k_m",
          "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    assert kv["general.architecture"] == "granite" and kv["granite.embedding_length"] == 4096
    assert kv["granite.attention.head_count_kv"] == 8 and kv["granite.feed_forward_length"] == 12800
    assert kv["granite.attention.scale"] == 0.0078125 and kv["granite.logit_scale"] == 4.0
    assert kv["granite.rope.freq_base"] == 10000000.0
    shapes = {t.name: list(map(int, t.shape)) for t in r.tensors}
    assert shapes["blk.0.attn_k.weight"] == [4096, 1024] and "output.weight" not in shapes


def test_smollm3_olmo2_presets(tmp_path):
    """SmolLM3 3B's and OLMo 2 7B's shapes, one layer and a small vocabulary."""
    out = tmp_path / "s.gguf"
    synth("--preset", "smollm3-3b", "--dims", "layers=1,vocab=1024", "--type", "q8_0", "-o", out)
    kv = fields(gguf.GGUFReader(out))
    assert kv["general.architecture"] == "smollm3" and kv["smollm3.attention.head_count_kv"] == 4
    assert kv["smollm3.rope.freq_base"] == 5000000.0 and kv["smollm3.feed_forward_length"] == 11008
    out = tmp_path / "o.gguf"
    synth("--preset", "olmo2-7b", "--dims", "layers=1,vocab=1024", "--type", "q4_k_m", "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    assert kv["general.architecture"] == "olmo2" and kv["olmo2.embedding_length"] == 4096
    assert "olmo2.attention.sliding_window" not in kv
    shapes = {t.name: list(map(int, t.shape)) for t in r.tensors}
    assert shapes["blk.0.attn_q_norm.weight"] == [4096] and "blk.0.attn_norm.weight" not in shapes
    assert shapes["output.weight"] == [4096, 1024]


def test_gptoss_presets(tmp_path):
    """gpt-oss 20B's shape (two layers, 4 experts, a small vocabulary) in the mxfp4_moe mix, as the
    released files are: MXFP4 experts, Q8_0 matrices, f32 biases, sinks and router; the
    keys llama.cpp's LLM_ARCH_OPENAI_MOE reads (window, YaRN, experts)."""
    out = tmp_path / "g.gguf"
    synth("--preset", "gpt-oss-20b", "--dims", "layers=2,vocab=1024,experts=4", "--type", "mxfp4_moe", "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    a = "gpt-oss"
    assert kv["general.architecture"] == a and kv[f"{a}.embedding_length"] == 2880
    assert kv[f"{a}.attention.head_count"] == 64 and kv[f"{a}.attention.head_count_kv"] == 8
    assert kv[f"{a}.attention.sliding_window"] == 128 and kv[f"{a}.expert_count"] == 4
    assert kv[f"{a}.expert_used_count"] == 4 and kv[f"{a}.expert_feed_forward_length"] == 2880
    assert kv[f"{a}.rope.scaling.type"] == "yarn" and kv[f"{a}.rope.scaling.factor"] == 32.0
    assert kv[f"{a}.rope.scaling.original_context_length"] == 4096
    t = {x.name: (x.tensor_type, list(map(int, x.shape))) for x in r.tensors}
    b = "blk.1."
    assert t[b + "attn_q.weight"] == (T.Q8_0, [2880, 4096]) and t[b + "attn_q.bias"] == (T.F32, [4096])
    assert t[b + "attn_output.weight"] == (T.Q8_0, [4096, 2880]) and t[b + "attn_output.bias"][1] == [2880]
    assert t[b + "attn_sinks.weight"] == (T.F32, [64])
    assert t[b + "post_attention_norm.weight"] == (T.F32, [2880]) and b + "ffn_norm.weight" not in t
    assert t[b + "ffn_gate_inp.weight"] == (T.F32, [2880, 4]) and t[b + "ffn_gate_inp.bias"] == (T.F32, [4])
    assert t[b + "ffn_gate_exps.weight"] == (T.MXFP4, [2880, 2880, 4])
    assert t[b + "ffn_down_exps.bias"] == (T.F32, [2880, 4]) and t[b + "ffn_up_exps.bias"] == (T.F32, [2880, 4])
    p = subprocess.run([KINETIC, "info", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "gpt-oss" in p.stdout, p.stderr
    out = tmp_path / "g120.gguf"
    synth("--preset", "gpt-oss-120b", "--dims", "layers=1,vocab=1024,experts=4,expert_ffn=64", "--type", "q8_0",
          "-o", out)
    kv = fields(gguf.GGUFReader(out))
    assert kv["gpt-oss.block_count"] == 1 and kv["gpt-oss.attention.head_count"] == 64
    assert kv["gpt-oss.expert_used_count"] == 4 and kv["gpt-oss.expert_feed_forward_length"] == 64


def test_deterministic(tmp_path):
    """Same arguments, same bytes, whatever the thread count; another seed, other weights."""
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    args = ["--arch", "qwen2", "--dims", "dim=512,layers=2,heads=8,kv_heads=2,ffn=1024,vocab=2048",
            "--type", "q4_k_m", "--seed", "9"]
    synth(*args, "--threads", "1", "-o", a)
    synth(*args, "--threads", "3", "-o", b)
    assert a.read_bytes() == b.read_bytes()
    synth(*args[:-1], "10", "--threads", "2", "-o", c)
    ra, rc = gguf.GGUFReader(a), gguf.GGUFReader(c)
    ta = {t.name: np.asarray(t.data).tobytes() for t in ra.tensors}
    tc = {t.name: np.asarray(t.data).tobytes() for t in rc.tensors}
    assert ta["blk.0.ffn_up.weight"] != tc["blk.0.ffn_up.weight"]
    assert ta["blk.0.attn_norm.weight"] == tc["blk.0.attn_norm.weight"]


# The bytes of every tensor of one tiny model, pinned: the noise generator and the
# reference quantizers are part of the promise that synth files are identical on every
# machine. A deliberate change to either must update this hash.
GOLDEN = {"q4_k_m": "a98689e23138c89c0903fb0f376786c4b5403e752ab4bdaffaeb4eeb3d8728b7"}


def tensor_digest(path):
    h = hashlib.sha256()
    for t in gguf.GGUFReader(path).tensors:
        h.update(t.name.encode())
        h.update(np.asarray(t.data).tobytes())
    return h.hexdigest()


def test_golden_weights(tiny_dir):
    assert tensor_digest(tiny_dir / "llama-q4_k_m.gguf") == GOLDEN["q4_k_m"]


def test_vocab_copied(tmp_path):
    if not os.path.exists(SPM_VOCAB):
        pytest.skip("no vocabulary files")
    out = tmp_path / "v.gguf"
    synth("--preset", "tiny", "--vocab", SPM_VOCAB, "--type", "q8_0", "-o", out)
    src, _ = walk(SPM_VOCAB)
    dst, tensors = walk(out)
    tok_keys = {k for k in src if k.startswith("tokenizer.")}
    assert len(tok_keys) >= 8
    assert tok_keys == {k for k in dst if k.startswith("tokenizer.")}
    for k in tok_keys:
        assert dst[k] == src[k], f"{k} not copied verbatim"
    assert struct.unpack("<I", dst["llama.vocab_size"][1])[0] == 32000
    assert tensors["token_embd.weight"][1] == [256, 32000] and tensors["output.weight"][1] == [256, 32000]


def test_vocab_bpe_with_dims(tmp_path):
    """A BPE vocabulary (with merges) and --dims without vocab=: the file sets the size."""
    if not os.path.exists(GPT2_VOCAB):
        pytest.skip("no vocabulary files")
    out = tmp_path / "b.gguf"
    synth("--arch", "qwen3", "--dims", "dim=256,layers=1,heads=2,kv_heads=1,head_dim=128,ffn=256",
          "--vocab", GPT2_VOCAB, "-o", out)
    src, _ = walk(GPT2_VOCAB)
    kv, tensors = walk(out)
    n = array_len(kv["tokenizer.ggml.tokens"])
    assert kv["tokenizer.ggml.model"] == src["tokenizer.ggml.model"]
    assert kv["tokenizer.ggml.merges"] == src["tokenizer.ggml.merges"] and array_len(kv["tokenizer.ggml.merges"]) > 0
    assert struct.unpack("<I", kv["qwen3.vocab_size"][1])[0] == n > 50000
    assert struct.unpack("<I", kv["qwen3.attention.key_length"][1])[0] == 128
    assert tensors["blk.0.attn_q.weight"][1] == [256, 256] and tensors["blk.0.attn_k_norm.weight"][1] == [128]
    assert tensors["token_embd.weight"][1] == [256, n]


def test_builtin_vocab(tiny_dir):
    kv = fields(gguf.GGUFReader(tiny_dir / "llama-q8_0.gguf"))
    toks = kv["tokenizer.ggml.tokens"]
    types = kv["tokenizer.ggml.token_type"]
    assert len(set(toks)) == len(toks) == 512
    assert toks[:3] == ["<unk>", "<s>", "</s>"] and types[:3] == [2, 3, 3]
    assert toks[3] == "<0x00>" and toks[3 + 0x0A] == "<0x0A>" and toks[258] == "<0xFF>"
    assert all(t == 6 for t in types[3:259])
    assert toks[259] == "\u2581" and toks[260] == "!" and all(t == 1 for t in types[259:])
    assert kv["tokenizer.ggml.bos_token_id"] == 1 and kv["tokenizer.ggml.eos_token_id"] == 2
    # every piece's prefixes (in characters) are pieces too, so merges can build it
    vocab = set(toks)
    for t in toks[259:]:
        for k in range(1, len(t)):
            assert t[:k] in vocab, t


def test_big_preset_shapes(tmp_path):
    """The 1B-class presets, with fewer layers and a small vocabulary to stay quick."""
    out = tmp_path / "l.gguf"
    synth("--preset", "llama-3.2-1b", "--dims", "layers=1,vocab=1024", "--type", "q4_0", "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    assert kv["llama.rope.freq_base"] == 500000.0 and kv["llama.feed_forward_length"] == 8192
    shapes = {t.name: list(map(int, t.shape)) for t in r.tensors}
    assert shapes["blk.0.attn_k.weight"] == [2048, 512] and "output.weight" not in shapes
    out = tmp_path / "q.gguf"
    synth("--preset", "qwen2.5-0.5b", "--dims", "layers=1,vocab=1024", "--type", "q4_k_m", "-o", out)
    r = gguf.GGUFReader(out)
    shapes = {t.name: list(map(int, t.shape)) for t in r.tensors}
    assert shapes["blk.0.attn_q.bias"] == [896] and shapes["blk.0.attn_k.weight"] == [896, 128]
    types = {t.name: T(t.tensor_type) for t in r.tensors}
    assert types["blk.0.attn_q.weight"] == T.Q5_0 and types["token_embd.weight"] == T.Q8_0


@pytest.mark.parametrize("args,message", [
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--preset", "tiny", "--type", "q3_k_xl"], "unknown type 'q3_k_xl'"),
    (["--preset", "tiny", "--arch", "gpt2"], "unknown architecture 'gpt2'"),
    (["--preset", "tinyllama-1.1b", "--arch", "qwen2"], "is a llama model"),
    (["--dims", "dim=256,layers=2"], "need dim, layers, heads, ffn and vocab"),
    (["--dims", "dim=256,depth=2"], "unknown key 'depth'"),
    (["--dims", "dim=abc"], "bad value 'abc' for dim"),
    (["--dims", "dim=256,layers=2,heads=4,kv_heads=3,ffn=512,vocab=512"], "multiple of kv_heads"),
    (["--arch", "gemma3", "--preset", "tiny", "--dims", "layers=2"], "at least 6 layers"),
    (["--arch", "gemma2", "--preset", "tiny", "--dims", "tied=0"], "gemma2 ties its output"),
    (["--arch", "llama", "--preset", "tiny", "--dims", "rot=32"], "only phi3 rotates part"),
    (["--arch", "olmo2", "--preset", "tiny", "--dims", "tied=1"], "olmo2 needs heads * head_dim"),
    (["--arch", "phi3", "--preset", "tiny", "--dims", "rope_orig_ctx=4096"], "must be below ctx"),
    (["--preset", "tiny", "--dims", "vocab=100"], "at least 448 tokens"),
    (["--preset", "tiny", "--vocab", "/nonexistent/vocab.gguf"], "/nonexistent/vocab.gguf"),
    (["--type", "q8_0"], "give --preset NAME or --dims SPEC"),
    (["--preset", "tiny", "--threads", "x"], "wants an integer"),
])
def test_bad_arguments(tmp_path, args, message):
    out = tmp_path / "x.gguf"
    r = synth(*args, "-o", out, check=False)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert not out.exists()


def test_bad_vocab_file(tmp_path):
    """A file that is not GGUF, and a GGUF without tokens, are refused with the reason."""
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    r = synth("--preset", "tiny", "--vocab", junk, "-o", tmp_path / "x.gguf", check=False)
    assert r.returncode != 0 and "--vocab" in r.stderr and "junk.gguf" in r.stderr
    model = tmp_path / "m.gguf"
    synth("--preset", "tiny", "-o", model)
    # a model file has a vocabulary; strip it by writing a vocab-less GGUF with gguf-py
    w = gguf.GGUFWriter(tmp_path / "empty.gguf", "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    r = synth("--preset", "tiny", "--vocab", tmp_path / "empty.gguf", "-o", tmp_path / "y.gguf", check=False)
    assert r.returncode != 0 and "no tokenizer.ggml.tokens" in r.stderr


def test_missing_output_and_help():
    r = synth("--preset", "tiny", check=False)
    assert r.returncode == 2 and "-o OUT.gguf is required" in r.stderr
    r = synth("--help")
    assert "presets:" in r.stdout and "tinyllama-1.1b" in r.stdout and "dim=N" in r.stdout


# ---------------------------------------------------------------- lfm2

def lfm2_expected(dim, n_layer, n_head, n_kv, head_dim, ffn, vocab, attn, conv_l, tied):
    """name -> shape for llama.cpp's lfm2 loader (llama-model.cpp, LLM_ARCH_LFM2)."""
    t = {"token_embd.weight": [dim, vocab], "token_embd_norm.weight": [dim]}
    if not tied:
        t["output.weight"] = [dim, vocab]
    for i in range(n_layer):
        b = f"blk.{i}."
        t.update({b + "attn_norm.weight": [dim], b + "ffn_norm.weight": [dim],
                  b + "ffn_gate.weight": [dim, ffn], b + "ffn_up.weight": [dim, ffn],
                  b + "ffn_down.weight": [ffn, dim]})
        if i in attn:
            t.update({b + "attn_q.weight": [dim, n_head * head_dim],
                      b + "attn_k.weight": [dim, n_kv * head_dim],
                      b + "attn_v.weight": [dim, n_kv * head_dim],
                      b + "attn_output.weight": [n_head * head_dim, dim],
                      b + "attn_q_norm.weight": [head_dim], b + "attn_k_norm.weight": [head_dim]})
        else:
            t.update({b + "shortconv.in_proj.weight": [dim, 3 * dim],
                      b + "shortconv.conv.weight": [conv_l, dim],
                      b + "shortconv.out_proj.weight": [dim, dim]})
    return t


@pytest.mark.parametrize("ty", ["f32", "q8_0", "q4_k_m"])
def test_lfm2_tiny_layout(tmp_path, ty):
    out = tmp_path / "lfm2.gguf"
    synth("--arch", "lfm2", "--preset", "tiny", "--type", ty, "-o", out)
    r = gguf.GGUFReader(out)
    kv = fields(r)
    assert kv["general.architecture"] == "lfm2"
    assert kv["lfm2.block_count"] == 4
    assert kv["lfm2.attention.head_count_kv"] == [0, 0, 2, 0]  # 0: a conv layer
    assert kv["lfm2.shortconv.l_cache"] == 3
    want = lfm2_expected(256, 4, 4, 2, 64, 512, 512, {2}, 3, tied=False)
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(want)
    for name, t in got.items():
        assert list(map(int, t.shape)) == want[name], name
        if name.endswith("shortconv.conv.weight"):
            assert T(t.tensor_type) == T.F32, name  # llama.cpp's quantizer skips the taps
        elif name.endswith("attn_v.weight") and ty == "q4_k_m":
            # llama.cpp counts attn_v tensors (one here: index 0 of 1 gets more bits)
            assert T(t.tensor_type) == T.Q6_K, name
        else:
            assert T(t.tensor_type) == expected_type(ty, name, len(want[name]), want[name][0], 4, False), name
    info = kinetic_info(out)
    assert info.returncode == 0 and "lfm2" in info.stdout, info.stderr


def test_lfm2_presets(tmp_path):
    """The real models' layer layouts (narrow widths to stay fast; the widths themselves are
    checked in tests/unit/test_synth.c): LFM2-350M and 2.6B's attention layers, tied output
    and llama.cpp's Q4_K_M more-bits rule over the attn_v tensors, by their count."""
    for preset, n_layer, attn in (("lfm2-350m", 16, [2, 5, 8, 10, 12, 14]),
                                  ("lfm2-2.6b", 30, [2, 6, 10, 14, 18, 21, 24, 27])):
        out = tmp_path / f"{preset}.gguf"
        synth("--preset", preset, "--dims", "dim=256,heads=4,kv_heads=2,ffn=256,vocab=1024",
              "--type", "q4_k_m", "-o", out)
        kv, tensors = walk(out)
        assert "output.weight" not in tensors  # tied
        r = gguf.GGUFReader(out)
        f = fields(r)
        hkv = f["lfm2.attention.head_count_kv"]
        assert [i for i, n in enumerate(hkv) if n] == attn and len(hkv) == n_layer
        assert set(hkv) == {0, 2}
        assert f["lfm2.rope.freq_base"] == 1000000.0 and f["lfm2.context_length"] == 128000
        n = len(attn)
        for k, il in enumerate(attn):
            want = T.Q6_K if more_bits(k, n) else T.Q4_K
            assert tensors[f"blk.{il}.attn_v.weight"][0] == want, (preset, il)


@pytest.mark.parametrize("args,message", [
    (["--arch", "lfm2", "--preset", "tiny", "--dims", "attn=4"], "not below layers=4"),
    (["--arch", "lfm2", "--preset", "tiny", "--dims", "attn=2:1"], "not ascending"),
    (["--arch", "lfm2", "--preset", "tiny", "--dims", "head_dim=32"], "square attention"),
    (["--arch", "llama", "--preset", "tiny", "--dims", "attn=1"], "lfm2's"),
    (["--arch", "lfm2", "--preset", "tiny", "--dims", "attn=x"], "layer numbers separated by ':'"),
])
def test_lfm2_bad_dims(tmp_path, args, message):
    r = synth(*args, "-o", tmp_path / "x.gguf", check=False)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_lfm2moe_tiny_layout(tmp_path):
    """lfm2moe as llama.cpp's loader wants it: lfm2's layers, the first dense, then
    mixture-of-experts FFNs with the selection bias exp_probs_b; sigmoid gating; tied
    output (llama.cpp's lfm2moe has no output.weight)."""
    out = tmp_path / "lfm2moe.gguf"
    synth("--arch", "lfm2moe", "--preset", "tiny", "--type", "q8_0", "-o", out)
    kv, tensors = walk(out)
    r = gguf.GGUFReader(out)
    f = fields(r)
    assert f["general.architecture"] == "lfm2moe"
    assert f["lfm2moe.attention.head_count_kv"] == [0, 0, 2, 0]
    assert f["lfm2moe.shortconv.l_cache"] == 3 and f["lfm2moe.leading_dense_block_count"] == 1
    assert f["lfm2moe.expert_gating_func"] == 2 and f["lfm2moe.expert_count"] == 16
    assert f["lfm2moe.expert_used_count"] == 4 and f["lfm2moe.expert_feed_forward_length"] == 256
    assert "output.weight" not in tensors and "token_embd_norm.weight" in tensors
    assert "blk.0.ffn_gate.weight" in tensors and "blk.0.ffn_gate_inp.weight" not in tensors
    for il in (1, 2, 3):
        assert tensors[f"blk.{il}.ffn_gate_exps.weight"][1] == [256, 256, 16]
        assert tensors[f"blk.{il}.exp_probs_b.bias"][1] == [16]
        assert f"blk.{il}.ffn_gate.weight" not in tensors
    assert "blk.1.shortconv.in_proj.weight" in tensors and "blk.2.attn_q.weight" in tensors
    info = kinetic_info(out)
    assert info.returncode == 0 and "lfm2moe" in info.stdout, info.stderr
