#!/usr/bin/env python3
"""Writes the GGUF fuzzing seed corpus (tests/fuzz/corpus/gguf/; names without .gguf, which
.gitignore excludes) with gguf-py's writer,
an implementation independent of Kinetic's. Run from the repository root with the
project venv: .venv/bin/python tests/fuzz/make_gguf_seeds.py. The seeds are tiny
(a few hundred bytes each) so the fuzzer mutates structure, not bulk data."""
import os
import struct
import sys

import numpy as np
import gguf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf")


def write(name, build, arch="llama"):
    path = os.path.join(OUT, name)
    w = gguf.GGUFWriter(path, arch)
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def model(w):
    w.add_name("seed")
    w.add_uint32("llama.block_count", 1)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_int32("t.i32", -3)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 0.5)
    w.add_bool("t.bool", True)
    w.add_key_value("t.u8", 7, gguf.GGUFValueType.UINT8)
    w.add_key_value("t.i16", -7, gguf.GGUFValueType.INT16)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.0, -2.0])
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_tensor("a.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.add_tensor("b.weight", np.ones((1, 32), dtype=np.float16))
    w.add_tensor("q.weight", np.zeros((1, 34), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def vocab_only(w):
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", ["h", "i", "hi"])
    w.add_array("tokenizer.ggml.merges", ["h i"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)


def aligned64(w):
    w.add_custom_alignment(64)
    w.add_tensor("x", np.ones(3, dtype=np.float32))
    w.add_tensor("y", np.ones((2, 2, 2), dtype=np.int8))


def main():
    os.makedirs(OUT, exist_ok=True)
    write("seed-model", model)
    write("seed-vocab", vocab_only)
    write("seed-align64", aligned64)
    # A version 2 file (same layout as v3) with no key/values or tensors, by hand.
    with open(os.path.join(OUT, "seed-v2-empty"), "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 2, 0, 0))
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"{len(os.listdir(OUT))} seeds, {total} bytes", file=sys.stderr)


main()
