#!/usr/bin/env python3
"""Writes tests/data/kern/layouts.bin: random blocks of every quantized weight type the
kernels handle, with their values as dequantized by gguf-py (llama.cpp's own Python
package, an implementation independent of Kinetic's). test_kern_layouts.c checks that the
kernels read every element where llama.cpp puts it.

Format: "KNLAYOUT" then per type: u32 type id, u32 n_blocks, u32 block_bytes,
n_blocks * block_bytes bytes of blocks, n_blocks * block_size f32 values (little endian).
Run from the repository root: .venv/bin/python scripts/gen_kern_layouts.py
"""
import struct
import numpy as np
from gguf import quants, GGMLQuantizationType as T

TYPES = [  # (type, block elements, block bytes, offsets of f16 scales)
    (T.Q8_0, 32, 34, [0]),
    (T.Q4_0, 32, 18, [0]),
    (T.Q4_1, 32, 20, [0, 2]),
    (T.Q5_0, 32, 22, [0]),
    (T.Q5_1, 32, 24, [0, 2]),
    (T.Q4_K, 256, 144, [0, 2]),
    (T.Q5_K, 256, 176, [0, 2]),
    (T.Q6_K, 256, 210, [208]),
    (T.IQ4_NL, 32, 18, [0]),
    (T.Q2_K, 256, 84, [80, 82]),
    (T.Q3_K, 256, 110, [108]),
    (T.IQ4_XS, 256, 136, [0]),
    (T.MXFP4, 32, 17, []),  # its E8M0 scale byte is set below
]
N_BLOCKS = 4

rng = np.random.default_rng(20261129)
out = bytearray(b"KNLAYOUT")
for t, bs, bb, scale_offs in TYPES:
    blocks = bytearray(rng.integers(0, 256, size=N_BLOCKS * bb, dtype=np.uint8).tobytes())
    for b in range(N_BLOCKS):
        for off in scale_offs:
            v = np.float16(rng.uniform(0.5, 2.0) * (-1 if rng.integers(0, 2) else 1))
            blocks[b * bb + off:b * bb + off + 2] = v.tobytes()
        if t == T.MXFP4:
            blocks[b * bb] = int(rng.integers(124, 132))  # scales 2^-4 .. 2^3
    raw = np.frombuffer(bytes(blocks), dtype=np.uint8).reshape(1, N_BLOCKS * bb)
    vals = quants.dequantize(raw, t).astype(np.float32).reshape(-1)
    assert vals.size == N_BLOCKS * bs
    out += struct.pack("<III", int(t), N_BLOCKS, bb)
    out += bytes(blocks)
    out += vals.astype("<f4").tobytes()
with open("tests/data/kern/layouts.bin", "wb") as f:
    f.write(out)
print("wrote", len(out), "bytes")
