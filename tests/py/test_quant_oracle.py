"""Kinetic's reference quantization against gguf-py, an independent implementation.

gguf-py (llama.cpp's Python package) decodes every GGML block format with numpy using
the same float operations as llama.cpp, so dequantization must agree bit for bit. Its
quantizers for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, BF16 and F16 reproduce llama.cpp's
reference quantizers, which Kinetic's also reproduce: the bytes must agree. Kinetic's
K-quant quantizers are its own; they are checked by decoding their output with gguf-py
and bounding the error.

The C code is driven through the test_quant unit-test executable in driver mode
(`test_quant dequant|quant TYPE N IN OUT`), found through KN_BUILD.
"""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import GGML_QUANT_SIZES  # noqa: E402

BUILD = os.environ.get("KN_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
TOOL = os.path.join(BUILD, "tests", "test_quant")
from srvutil import GEMMA  # noqa: E402

# GGML names as Kinetic's type table spells them.
NAMES = {
    T.F32: "f32", T.F16: "f16", T.BF16: "bf16", T.Q4_0: "q4_0", T.Q4_1: "q4_1",
    T.Q5_0: "q5_0", T.Q5_1: "q5_1", T.Q8_0: "q8_0", T.Q2_K: "q2_K", T.Q3_K: "q3_K",
    T.Q4_K: "q4_K", T.Q5_K: "q5_K", T.Q6_K: "q6_K", T.IQ4_NL: "iq4_nl", T.IQ4_XS: "iq4_xs",
    T.MXFP4: "mxfp4",
}

# Byte ranges of the f16 scale fields in each block, so random blocks get finite scales.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0], T.MXFP4: [],  # MXFP4: any E8M0 byte decodes
}


def run_tool(tmp_path, mode, qtype, n, data):
    src = tmp_path / "in.bin"
    dst = tmp_path / "out.bin"
    np.ascontiguousarray(data).tofile(src)
    subprocess.run([TOOL, mode, NAMES[qtype], str(n), str(src), str(dst)], check=True)
    return np.fromfile(dst, dtype=np.float32 if mode == "dequant" else np.uint8)


def kn_dequant(tmp_path, qtype, raw, n):
    return run_tool(tmp_path, "dequant", qtype, n, raw.view(np.uint8).reshape(-1))


def kn_quant(tmp_path, qtype, x):
    return run_tool(tmp_path, "quant", qtype, x.size, x.astype(np.float32).reshape(-1))


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.fixture(scope="module", autouse=True)
def tool_exists():
    if not os.path.exists(TOOL):
        pytest.fail(f"{TOOL} not built; set KN_BUILD to the build folder")


@pytest.mark.parametrize("qtype", list(F16_FIELDS) + [T.F16, T.BF16])
def test_dequant_random_blocks(tmp_path, qtype):
    """Random bytes (with finite f16 scales) decode identically."""
    rng = np.random.default_rng(int(qtype) + 7)
    bs, ts = GGML_QUANT_SIZES[qtype]
    nb = 512 if bs > 1 else 4096
    raw = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
    if qtype == T.F16:
        raw = rng.standard_normal(nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    elif qtype == T.BF16:
        f = rng.standard_normal(nb).astype(np.float32)
        raw = (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(nb, 2)
    else:
        for off in F16_FIELDS[qtype]:
            s = (rng.standard_normal(nb) * 0.01).astype(np.float16)
            raw[:, off:off + 2] = s.view(np.uint8).reshape(nb, 2)
    want = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
    assert want.size == nb * bs
    got = kn_dequant(tmp_path, qtype, raw, want.size)
    assert same_bits(got, want), f"{qtype.name}: dequantization differs"


def tensor_rows(path, max_rows):
    """Yields (name, type, ne, raw bytes of the first max_rows rows) of every tensor of a
    GGUF file. A minimal header walk: gguf-py's GGUFReader builds Python objects for all
    262144 vocabulary strings of the Gemma file, which takes longer than the test."""
    import struct
    data = np.memmap(path, dtype=np.uint8, mode="r")
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def skip_value(vt):
        nonlocal pos
        if vt == 8:
            n = take("Q")  # (not "pos += take()": that would add to the old pos)
            pos += n
        elif vt == 9:
            et, n = take("I"), take("Q")
            if et in scalar:
                pos += n * struct.calcsize(scalar[et])
            else:
                for _ in range(n):
                    skip_value(et)
        else:
            pos += struct.calcsize(scalar[vt])

    assert bytes(data[:4]) == b"GGUF"
    pos = 4
    _version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        n = take("Q")
        key = bytes(data[pos:pos + n]).decode()
        pos += n
        vt = take("I")
        if key == "general.alignment":
            alignment = take("I")
        else:
            skip_value(vt)
    infos = []
    for _ in range(n_tensors):
        n = take("Q")
        name = bytes(data[pos:pos + n]).decode()
        pos += n
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        qtype, offset = T(take("I")), take("Q")
        infos.append((name, qtype, ne, offset))
    start = (pos + alignment - 1) // alignment * alignment
    # the walk is right if the last tensor ends at the end of the file (with padding)
    name, qtype, ne, offset = max(infos, key=lambda i: i[3])
    bs, ts = GGML_QUANT_SIZES[qtype]
    end = start + offset + int(np.prod(ne)) // bs * ts
    assert end <= data.size < end + alignment + 1, "GGUF header walk went wrong"
    for name, qtype, ne, offset in infos:
        bs, ts = GGML_QUANT_SIZES[qtype]
        row_bytes = ne[0] // bs * ts
        rows = min(max_rows, int(np.prod(ne[1:])) if len(ne) > 1 else 1)
        raw = np.array(data[start + offset:start + offset + rows * row_bytes]).reshape(rows, row_bytes)
        yield name, qtype, ne, raw


@pytest.mark.skipif(not os.path.exists(GEMMA), reason="real Gemma 3 270M file not present")
def test_dequant_real_gemma(tmp_path):
    """Every tensor of a real llama.cpp-quantized model (the first 64 rows of each, to keep
    the test short) decodes identically."""
    raw, want, names = {}, {}, {}
    for name, qtype, ne, data in tensor_rows(GEMMA, 64):
        if qtype not in NAMES:
            continue
        rows = data
        raw.setdefault(qtype, []).append(np.ascontiguousarray(rows).view(np.uint8).reshape(-1))
        want.setdefault(qtype, []).append(gguf.quants.dequantize(rows, qtype).astype(np.float32).reshape(-1))
        names.setdefault(qtype, []).append(name)
    # one driver call per type, over the rows of all its tensors
    for qtype in raw:
        w = np.concatenate(want[qtype])
        got = kn_dequant(tmp_path, qtype, np.concatenate(raw[qtype]), w.size)
        if not same_bits(got, w):
            bad = np.flatnonzero(got.view(np.uint32) != w.view(np.uint32))[0]
            sizes = np.cumsum([a.size for a in want[qtype]])
            name = names[qtype][int(np.searchsorted(sizes, bad, side="right"))]
            pytest.fail(f"{name} ({qtype.name}) decodes differently at element {bad}")
    seen = {q.name for q in raw}
    # the Q4_K_M file mixes these formats; all of them must have been compared
    assert {"Q4_K", "Q6_K", "Q8_0", "Q5_0", "F32"} <= seen


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.BF16, T.F16, T.MXFP4])
def test_quant_matches_gguf_py(tmp_path, qtype):
    """Where gguf-py has a quantizer it is llama.cpp's reference one: same bytes."""
    rng = np.random.default_rng(100 + int(qtype))
    x = (rng.standard_normal(64 * 1024) * 0.02).astype(np.float32)
    x[:32] = 0.0  # an all-zero block
    x[32:64] = 0.5  # a constant block
    x[64:96] = rng.standard_normal(32).astype(np.float32) * 1e3  # large values
    want = gguf.quants.quantize(x, qtype).view(np.uint8).reshape(-1)
    got = kn_quant(tmp_path, qtype, x)
    assert np.array_equal(got, want), f"{qtype.name}: quantized bytes differ from gguf-py"


@pytest.mark.parametrize("qtype,bound", [
    (T.Q8_0, 0.0056), (T.Q5_1, 0.040), (T.Q5_0, 0.045), (T.Q4_1, 0.083), (T.Q4_0, 0.090),
    (T.Q6_K, 0.0178), (T.Q5_K, 0.0375), (T.Q4_K, 0.075), (T.Q3_K, 0.152), (T.Q2_K, 0.285),
    (T.IQ4_NL, 0.0768), (T.IQ4_XS, 0.0777), (T.MXFP4, 0.120),
])
def test_quant_error_decoded_by_gguf_py(tmp_path, qtype, bound):
    """Kinetic's quantized bytes, decoded by gguf-py, are close to the input: this checks
    both the layout the quantizer writes and its accuracy (relative RMS error on
    N(0, 0.02) data; the bounds are about 5% above the measured values)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(256 * 512) * 0.02).astype(np.float32)
    q = kn_quant(tmp_path, qtype, x)
    bs, ts = GGML_QUANT_SIZES[qtype]
    r = gguf.quants.dequantize(q.reshape(-1, ts), qtype).reshape(-1)
    rel = float(np.sqrt(np.mean((r - x) ** 2) / np.mean(x ** 2)))
    assert rel <= bound, f"{qtype.name}: relative RMS error {rel:.5f} > {bound}"
    # and Kinetic's own decoder agrees with gguf-py's on its own output
    got = kn_dequant(tmp_path, qtype, q, x.size)
    assert same_bits(got, r.astype(np.float32))


def _f16(v):
    return np.float16(v).tobytes()


def hand_block(qtype, e):
    """One block built by hand from the format's description, with element e marked, and
    the values it stands for, written out independently of any decoder."""
    want = np.zeros(256, dtype=np.float32)
    if qtype == T.Q2_K:  # scales[16] | qs[64] | d | dmin; element 128h + 32t + l at qs[32h + l] bits 2t
        sc = bytes((i % 15 + 1) | (i % 3) << 4 for i in range(16))
        qs = bytearray(64)
        h, t, l = e // 128, (e % 128) // 32, e % 32
        qs[32 * h + l] |= 3 << (2 * t)
        for i in range(256):
            want[i] = 0.5 * (sc[i // 16] & 15) * (3 if i == e else 0) - 0.25 * (sc[i // 16] >> 4)
        return sc + bytes(qs) + _f16(0.5) + _f16(0.25), want
    if qtype == T.Q3_K:  # hmask[32] | qs[64] | scales[12] | d; a clear hmask bit subtracts 4
        s = [i - 8 for i in range(16)]  # signed sub-block scales -8..7, stored + 32
        u = [v + 32 for v in s]
        sc = bytearray(12)
        for i in range(16):
            sc[i % 8] |= (u[i] & 15) << (4 * (i // 8))
            sc[8 + i % 4] |= (u[i] >> 4) << (2 * (i // 4))
        hm = bytearray([0xFF] * 32)
        hm[e % 32] &= ~(1 << (e // 32)) & 0xFF
        qs = bytearray(64)
        qs[32 * (e // 128) + e % 32] |= 1 << (2 * ((e % 128) // 32))  # low bits 1: 1 - 4
        for i in range(256):
            want[i] = 2.0 * s[i // 16] * (-3 if i == e else 0)
        return bytes(hm) + bytes(qs) + bytes(sc) + _f16(2.0), want
    if qtype == T.MXFP4:  # e | qs[16]; value codes as IQ4_NL's, E2M1 values doubled, scale 2^(e-128)
        e %= 32
        vals = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]
        q = [(j % 15) + 1 for j in range(32)]
        q[e] = 15
        qs = bytes(q[j] | q[j + 16] << 4 for j in range(16))
        return bytes([126]) + qs, np.array([0.25 * vals[v] for v in q], dtype=np.float32)
    levels = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
    if qtype == T.IQ4_NL:  # d | qs[16]: element j < 16 low nibble of qs[j], else high of qs[j - 16]
        e %= 32
        q = [8] * 32
        q[e] = 15
        qs = bytes(q[j] | q[j + 16] << 4 for j in range(16))
        return _f16(0.5) + qs, np.array([0.5 * levels[v] for v in q], dtype=np.float32)
    # IQ4_XS: d | scales_h (u16) | scales_l[4] | qs[128]; sub-block j scale ls_j, offset 32
    ls = [j - 5 for j in range(8)]
    sh, sl = 0, bytearray(4)
    for j in range(8):
        sl[j // 2] |= ((ls[j] + 32) & 15) << (4 * (j % 2))
        sh |= ((ls[j] + 32) >> 4) << (2 * j)
    q = [8] * 256
    q[e] = 0
    qs = bytes(q[32 * j + l] | q[32 * j + 16 + l] << 4 for j in range(8) for l in range(16))
    want = np.array([0.5 * ls[i // 32] * levels[q[i]] for i in range(256)], dtype=np.float32)
    return _f16(0.5) + struct_u16(sh) + bytes(sl) + qs, want


def struct_u16(v):
    return int(v).to_bytes(2, "little")


@pytest.mark.parametrize("qtype", [T.Q2_K, T.Q3_K, T.IQ4_NL, T.IQ4_XS, T.MXFP4])
def test_dequant_hand_built_blocks(tmp_path, qtype):
    """Blocks written by hand (one marked element at positions covering every bit group,
    sub-block and half) decode to the values the format's description gives, in gguf-py
    and in Kinetic."""
    blocks, wants = [], []
    for e in (0, 1, 15, 16, 31, 32, 63, 64, 95, 127, 128, 130, 161, 200, 223, 255):
        raw, want = hand_block(qtype, e)
        assert len(raw) == GGML_QUANT_SIZES[qtype][1]
        blocks.append(np.frombuffer(raw, dtype=np.uint8))
        wants.append(want)
    raw = np.stack(blocks)
    want = np.concatenate(wants).astype(np.float32)
    ref = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
    assert np.array_equal(ref, want), f"{qtype.name}: gguf-py disagrees with the hand-built values"
    got = kn_dequant(tmp_path, qtype, raw, want.size)
    assert same_bits(got, want), f"{qtype.name}: Kinetic disagrees with the hand-built values"
