"""Builds a vocabulary-only GGUF from a Hugging Face tokenizer.json, the way llama.cpp's
convert_hf_to_gguf.py lays out the tokenizer.ggml.* keys, so Kinetic's tokenizer can be
checked against Hugging Face's `tokenizers` on the very same vocabulary.

Byte-level BPE models (Llama 3, Qwen) become tokenizer.ggml.model = "gpt2" with merges and
a pre-tokenizer name; SentencePiece-derived BPE models with byte fallback (Llama 2, Gemma)
become "llama" with scores. tokenizer.json has no SentencePiece scores, so a token's score
is minus the rank of the merge that makes it: merging by score then follows the merge order.

usage: python vocab_from_hf.py TOKENIZER_DIR OUT.gguf [--pre NAME]
"""
import json
import os
import sys

import gguf

# GGUF token types (llama.cpp's LLAMA_TOKEN_TYPE_*).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def looks_special(text):
    """Added tokens that converters mark as control even when Hugging Face does not."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<｜") and text.endswith("｜>"))
            or (text.startswith("<unused") and text.endswith(">")))


def token_content(v):
    if v is None:
        return None
    return v["content"] if isinstance(v, dict) else v


def build(tok_dir, out_path, pre=None):
    tj = json.load(open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8"))
    cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
    model = tj["model"]
    assert model["type"] == "BPE", "only BPE tokenizer.json files are handled"
    vocab = model["vocab"]
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    n = max(max(vocab.values()), max(added) if added else 0) + 1
    texts = [None] * n
    for t, i in vocab.items():
        texts[i] = t
    for i, a in added.items():
        texts[i] = a["content"]

    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    spm = bool(model.get("byte_fallback"))

    types = []
    for i, t in enumerate(texts):
        if t is None:
            texts[i] = f"[PAD{i}]"
            types.append(UNUSED)
        elif i in added:
            if added[i]["special"] or looks_special(t):
                types.append(CONTROL)
            else:
                types.append(USER_DEFINED)
                if spm:
                    # convert_hf_to_gguf pre-normalizes user-defined tokens' spaces
                    texts[i] = t.replace("\u2581", " ")
        elif spm and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types.append(BYTE)
        elif t == model.get("unk_token"):
            types.append(UNKNOWN)
        else:
            types.append(NORMAL)

    w = gguf.GGUFWriter(out_path, arch="llama")
    w.add_tokenizer_model("llama" if spm else "gpt2")
    w.add_token_list(texts)
    w.add_token_types(types)
    if spm:
        scores = [0.0] * n
        seen = set()
        for rank, m in enumerate(merges):
            a, b = m.split(" ", 1)
            t = vocab.get(a + b)
            if t is not None and t not in seen:
                seen.add(t)
                scores[t] = -float(rank + 1)
        for i, ty in enumerate(types):
            if ty == NORMAL and i not in seen and len(texts[i]) > 1:
                scores[i] = -1e9  # no merge makes it: only as a whole-piece match
        w.add_token_scores(scores)
        normalizers = json.dumps(tj.get("normalizer"))
        w.add_add_space_prefix("Prepend" in normalizers)
        w.add_tokenizer_pre("default")
    else:
        w.add_token_merges(merges)
        w.add_tokenizer_pre(pre or "default")

    def tid(name):
        c = token_content(cfg.get(name))
        if c is None:
            return None
        for i, t in enumerate(texts):
            if t == c:
                return i
        return None

    for key, fn in (("bos_token", w.add_bos_token_id), ("eos_token", w.add_eos_token_id),
                    ("pad_token", w.add_pad_token_id), ("unk_token", w.add_unk_token_id)):
        i = tid(key)
        if i is not None:
            fn(i)
    if "add_bos_token" in cfg:
        w.add_add_bos_token(bool(cfg["add_bos_token"]))
    if "add_eos_token" in cfg:
        w.add_add_eos_token(bool(cfg["add_eos_token"]))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    pre = None
    if "--pre" in args:
        k = args.index("--pre")
        pre = args[k + 1]
        del args[k:k + 2]
    build(args[0], args[1], pre)
