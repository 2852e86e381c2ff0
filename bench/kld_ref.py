#!/usr/bin/env python3
"""kld_ref.py: a base file of log-probabilities from the float64 reference forward pass
(tests/py/model_ref.py), in llama-perplexity's layout, so that each engine's KL divergence
against the float64 truth is measured by that engine's own --kl-divergence:

  kinetic perplexity MODEL -f TEXT -c 512 --kl-divergence-base kinetic.kld
  python3 bench/kld_ref.py --model MODEL --tokens-from kinetic.kld --chunks 2 -o ref.kld
  kinetic perplexity MODEL --kl-divergence --kl-divergence-base ref.kld
  $LLAMA_BIN/llama-perplexity -m MODEL --kl-divergence --kl-divergence-base ref.kld -c 512

The chunks' tokens are taken from a file either engine saved (the tokens are in its
header), so both engines score the same tokens; each chunk's first token is replaced by
BOS where the vocabulary adds one, as both tools do. The reference is slow (pure numpy
float64, attention in Python loops): a chunk of 512 tokens of Gemma 3 270M takes minutes.
"""
import argparse
import os
import struct
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))
from model_ref import RefModel, _field  # noqa: E402

KEEP_NATS = 16.0  # log-probabilities kept below the largest (the layout's rule)


def read_header(path):
    with open(path, "rb") as f:
        head = f.read(20)
        if head[:8] != b"_logits_":
            sys.exit(f"kld_ref: {path} is not a saved log-probability file")
        n_ctx, n_vocab, n_chunk = struct.unpack("<Iii", head[8:])
        toks = np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype="<i4").reshape(n_chunk, n_ctx)
    return n_ctx, n_vocab, toks


def quantize_row(lp, nv):
    """One row of log-probabilities (float64) in the layout: scale and minimum as f32,
    then u16 steps above the minimum (0 for those more than KEEP_NATS below the top)."""
    top = lp.max()
    lo = max(lp.min(), top - KEEP_NATS)
    scale = np.float32((top - lo) / 65535.0)
    q = np.zeros(nv - 4, dtype="<u2")
    if scale > 0:
        q[:len(lp)] = np.where(lp > lo, np.rint((lp - lo) / np.float64(scale)), 0)
    return struct.pack("<ff", scale, lo) + q.tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens-from", required=True, help="a file saved with --kl-divergence-base")
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    n_ctx, n_vocab, toks = read_header(args.tokens_from)
    n_chunk = min(args.chunks, toks.shape[0])
    ref = RefModel(args.model, n_ctx=n_ctx)
    add_bos = _field(ref.reader, "tokenizer.ggml.add_bos_token", True)
    bos = _field(ref.reader, "tokenizer.ggml.bos_token_id")
    first = n_ctx // 2
    nv = 2 * ((n_vocab + 1) // 2) + 4
    with open(args.output, "wb") as f:
        f.write(b"_logits_" + struct.pack("<Iii", n_ctx, n_vocab, n_chunk))
        f.write(toks[:n_chunk].astype("<i4").tobytes())
        for c in range(n_chunk):
            t0 = time.time()
            t = [int(x) for x in toks[c]]
            if add_bos and bos is not None:
                t[0] = int(bos)
            logits = ref.forward(t, rows=list(range(first, n_ctx - 1)))
            m = logits.max(axis=1, keepdims=True)
            lp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
            for row in lp:
                f.write(quantize_row(row, nv))
            f.flush()
            print(f"kld_ref: chunk {c + 1}/{n_chunk}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
