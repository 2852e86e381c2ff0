"""model_ref.py: an independent float64 reference forward pass for the architectures
Kinetic runs (llama, qwen2, qwen3, gemma3, qwen3moe, lfm2, lfm2moe, gemma2, phi3, granite,
smollm3, olmo2, gpt-oss), used as an oracle by the tests.

It reads the GGUF with the `gguf` package (gguf-py, written by the llama.cpp project but
independent of Kinetic), dequantizes every weight with gguf.quants, and computes the
transformer in numpy float64 with no batching tricks: one causal pass over the whole
token sequence. The formulas follow the published architectures as llama.cpp implements
them (src/models/*.cpp there); nothing is shared with Kinetic's C code.

Usage from a test:
    ref = RefModel(path)
    logits = ref.forward([1, 303, 433])   # (n_tokens, n_vocab) float64

n_ctx: the context size the model runs with; it picks phi3's LongRoPE factors (long when
n_ctx exceeds rope.scaling.original_context_length, as llama.cpp decides).
"""
import math

import numpy as np
import gguf
from gguf import quants


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        return [f.parts[i].tolist()[0] if len(f.parts[i]) == 1 else bytes(f.parts[i]) for i in f.data]
    return f.parts[f.data[0]].tolist()[0]


class RefModel:
    def __init__(self, path, n_ctx=None):
        self.reader = gguf.GGUFReader(path)
        r = self.reader
        self.tensors = {t.name: t for t in r.tensors}
        self.arch = _field(r, "general.architecture")
        a = self.arch
        if a not in ("llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "lfm2", "lfm2moe", "gemma2",
                     "phi3", "granite", "smollm3", "olmo2", "gpt-oss", "bert", "nomic-bert"):
            raise ValueError(f"unsupported architecture {a}")
        self.n_embd = _field(r, f"{a}.embedding_length")
        self.n_layer = _field(r, f"{a}.block_count")
        self.n_head = _field(r, f"{a}.attention.head_count")
        self.n_head_kv = _field(r, f"{a}.attention.head_count_kv", self.n_head)
        # lfm2: one head_count_kv per layer; 0 marks a short-convolution layer.
        self.conv_layers = [False] * _field(r, f"{a}.block_count")
        if isinstance(self.n_head_kv, list):
            self.conv_layers = [n == 0 for n in self.n_head_kv]
            self.n_head_kv = max(self.n_head_kv) or self.n_head
        self.conv_l = _field(r, f"{a}.shortconv.l_cache", 0)
        self.head_k = _field(r, f"{a}.attention.key_length", self.n_embd // self.n_head)
        self.head_v = _field(r, f"{a}.attention.value_length", self.n_embd // self.n_head)
        self.n_rot = _field(r, f"{a}.rope.dimension_count", self.head_k)
        self.bert = a in ("bert", "nomic-bert")
        self.eps = _field(r, f"{a}.attention.layer_norm_epsilon" if self.bert
                          else f"{a}.attention.layer_norm_rms_epsilon")
        self.freq_base = _field(r, f"{a}.rope.freq_base", 10000.0)
        scale_type = _field(r, f"{a}.rope.scaling.type", "linear")
        factor = _field(r, f"{a}.rope.scaling.factor", 0.0) or 0.0
        if scale_type not in ("none", "linear", "yarn"):
            raise ValueError(f"reference: rope scaling {scale_type} not implemented")
        self.freq_scale = 1.0 if (factor == 0.0 or scale_type == "none") else 1.0 / factor
        # YaRN (ggml's rope_yarn): blend interpolated and extrapolated angles per pair by
        # a ramp between two correction dims, and scale sin/cos by mscale.
        self.yarn = scale_type == "yarn"
        self.n_ctx_orig = _field(r, f"{a}.rope.scaling.original_context_length",
                                 _field(r, f"{a}.context_length"))
        self.attn_factor = _field(r, f"{a}.rope.scaling.attn_factor", 1.0)
        self.beta_fast = _field(r, f"{a}.rope.scaling.yarn_beta_fast", 32.0)
        self.beta_slow = _field(r, f"{a}.rope.scaling.yarn_beta_slow", 1.0)
        self.neox = a in ("qwen2", "qwen3", "gemma3", "qwen3moe", "lfm2", "lfm2moe", "gemma2", "phi3",
                          "olmo2", "gpt-oss", "nomic-bert")
        self.n_swa = 0
        self.swa_layers = [False] * self.n_layer
        if a == "gemma3":
            self.n_swa = _field(r, f"{a}.attention.sliding_window")
            # Five local (sliding-window) layers, then one global, repeating.
            self.swa_layers = [(il % 6) < 5 for il in range(self.n_layer)]
        # Mixture of experts (qwen3moe, llama.cpp's build_moe_ffn): softmax over every
        # expert, the k largest (ties to the lower index), their probabilities divided by
        # their sum, the experts' SwiGLU outputs weighted and summed.
        self.n_expert = _field(r, f"{a}.expert_count", 0)
        self.n_expert_used = _field(r, f"{a}.expert_used_count", 0)
        # lfm2moe: sigmoid gating (expert_gating_func 2); the choice adds the selection
        # bias exp_probs_b to the probabilities, the weights do not.
        self.sigmoid_gating = _field(r, f"{a}.expert_gating_func", 1) == 2
        # Gemma 2: even layers slide (default window 4096), odd ones see everything; scores
        # and logits soft-capped, cap * tanh(x / cap) (defaults 50 and 30).
        self.attn_softcap = 0.0
        self.final_softcap = 0.0
        if a == "gemma2":
            self.n_swa = _field(r, f"{a}.attention.sliding_window", 4096)
            self.swa_layers = [il % 2 == 0 for il in range(self.n_layer)]
            self.attn_softcap = _field(r, f"{a}.attn_logit_softcapping", 50.0)
            self.final_softcap = _field(r, f"{a}.final_logit_softcapping", 30.0)
        # Phi-3: a sliding window on every layer where the file has one; LongRoPE factors
        # chosen by the context size.
        self.rope_factor_name = "rope_freqs.weight"
        if a == "phi3":
            self.n_swa = _field(r, f"{a}.attention.sliding_window", 0) or 0
            self.swa_layers = [self.n_swa > 0] * self.n_layer
            if "rope_factors_long.weight" in self.tensors:
                long_ctx = n_ctx is not None and n_ctx > self.n_ctx_orig
                self.rope_factor_name = "rope_factors_long.weight" if long_ctx else "rope_factors_short.weight"
        # Granite: embeddings, block outputs, scores and logits scaled; RoPE switched off by
        # rope.scaling.finetuned = false.
        self.embd_scale = self.residual_scale = self.logit_scale = 1.0
        self.attn_scale = 0.0
        self.use_rope = True
        if a == "granite":
            self.embd_scale = _field(r, f"{a}.embedding_scale")
            self.residual_scale = _field(r, f"{a}.residual_scale")
            self.attn_scale = _field(r, f"{a}.attention.scale")
            self.logit_scale = _field(r, f"{a}.logit_scale")
            self.use_rope = bool(_field(r, f"{a}.rope.scaling.finetuned", True))
        # SmolLM3: every fourth layer (il + 1 = 4, 8, ...) has no RoPE (llama.cpp's fixed
        # interval). OLMo 2: a window on three layers of four where the file has one.
        self.rope_layers = [self.use_rope] * self.n_layer
        if a == "smollm3":
            self.rope_layers = [(il + 1) % 4 != 0 for il in range(self.n_layer)]
        if a == "olmo2":
            self.n_swa = _field(r, f"{a}.attention.sliding_window", 0) or 0
            self.swa_layers = [self.n_swa > 0 and il % 4 < 3 for il in range(self.n_layer)]
        # gpt-oss (llama.cpp's llm_build_openai_moe_iswa): even layers slide, odd ones see
        # everything; a per-head sink logit joins each softmax's denominator; the router's
        # k largest logits (with its bias) weighted by their softmax; experts with biases
        # and the clamped SwiGLU; the file's post_attention_norm is the norm before the
        # experts (there is no ffn_norm).
        self.gptoss = a == "gpt-oss"
        if self.gptoss:
            self.n_swa = _field(r, f"{a}.attention.sliding_window")
            self.swa_layers = [il % 2 == 0 for il in range(self.n_layer)]
        self._cache = {}

    # ------------------------------------------------------------ weights

    def has(self, name):
        return name in self.tensors

    def w(self, name):
        """The tensor as float64 with shape (rows, row_length), as GGUF's ne reversed
        ((experts, rows, row_length) for 3-D tensors)."""
        if name in self._cache:
            return self._cache[name]
        t = self.tensors[name]
        data = quants.dequantize(t.data, t.tensor_type)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        arr = np.asarray(data, dtype=np.float32).reshape(shape)
        if arr.ndim == 1:
            arr = arr.astype(np.float64)
        self._cache[name] = arr
        return arr

    # ------------------------------------------------------------ pieces

    def rms_norm(self, x, w):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.eps) * w

    def rope(self, x, positions, base, scale, factors=None, yarn=False):
        """x: (T, H, D). Rotates the first n_rot dims of each head."""
        n = self.n_rot
        half = n // 2
        i = np.arange(half, dtype=np.float64)
        inv = base ** (-2.0 * i / n)
        if factors is not None:
            inv = inv / factors
        p = np.asarray(positions, dtype=np.float64)
        mscale = 1.0
        if yarn:
            def corr_dim(beta):
                return n * math.log(self.n_ctx_orig / (beta * 2 * math.pi)) / (2 * math.log(base))
            low = max(0.0, math.floor(corr_dim(self.beta_fast)))
            high = min(n - 1.0, math.ceil(corr_dim(self.beta_slow)))
            y = (i - low) / max(0.001, high - low)
            mix = 1.0 - np.minimum(1.0, np.maximum(0.0, y))  # ext_factor 1
            extrap = np.outer(p, inv)
            interp = extrap * scale
            theta = interp * (1 - mix) + extrap * mix
            mscale = self.attn_factor * (1.0 + 0.1 * math.log(1.0 / scale))
        else:
            theta = np.outer(p * scale, inv)  # (T, half)
            mscale = self.attn_factor  # ggml scales sin and cos by attn_factor without YaRN too
        c = (np.cos(theta) * mscale)[:, None, :]
        s = (np.sin(theta) * mscale)[:, None, :]
        out = x.copy()
        if self.neox:
            a = x[:, :, :half]
            b = x[:, :, half:n]
            out[:, :, :half] = a * c - b * s
            out[:, :, half:n] = a * s + b * c
        else:
            a = x[:, :, 0:n:2]
            b = x[:, :, 1:n:2]
            out[:, :, 0:n:2] = a * c - b * s
            out[:, :, 1:n:2] = a * s + b * c
        return out

    def mm(self, name, x):
        w = self.w(name)
        # Chunk over output rows to keep float64 copies small for big vocabularies.
        out = np.empty((x.shape[0], w.shape[0]), dtype=np.float64)
        step = 16384
        for r0 in range(0, w.shape[0], step):
            out[:, r0:r0 + step] = x @ w[r0:r0 + step].astype(np.float64).T
        bias = name.replace(".weight", ".bias")
        if self.has(bias):
            out += self.w(bias)
        return out

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * x * (1.0 + 0.044715 * x * x)))

    @staticmethod
    def silu(x):
        return x / (1.0 + np.exp(-x))

    @staticmethod
    def swiglu_oai(g, u, alpha=1.702, limit=7.0):
        x = np.minimum(g, limit)
        y = np.clip(u, -limit, limit)
        return x / (1.0 + np.exp(-alpha * x)) * (y + 1.0)

    def moe_gptoss(self, p, h):
        logits = self.mm(p + "ffn_gate_inp.weight", h)  # plus ffn_gate_inp.bias
        gate, up, down = (self.w(p + f"ffn_{n}_exps.weight") for n in ("gate", "up", "down"))
        gb, ub, db = (self.w(p + f"ffn_{n}_exps.bias") for n in ("gate", "up", "down"))
        out = np.zeros_like(h)
        k = self.n_expert_used
        for t in range(h.shape[0]):
            chosen = sorted(range(self.n_expert), key=lambda e: (-logits[t][e], e))[:k]
            z = np.exp(logits[t][chosen] - logits[t][chosen].max())
            for e, wt in zip(chosen, z / z.sum()):
                g = gate[e].astype(np.float64) @ h[t] + gb[e]
                u = up[e].astype(np.float64) @ h[t] + ub[e]
                out[t] += wt * (down[e].astype(np.float64) @ self.swiglu_oai(g, u) + db[e])
        return out

    def moe(self, p, h):
        """h: (T, n_embd) normed inputs of MoE layer p -> (T, n_embd), token by token."""
        if self.gptoss:
            return self.moe_gptoss(p, h)
        logits = h @ self.w(p + "ffn_gate_inp.weight").astype(np.float64).T
        gate, up, down = (self.w(p + f"ffn_{n}_exps.weight") for n in ("gate", "up", "down"))
        out = np.zeros_like(h)
        k = self.n_expert_used
        for t in range(h.shape[0]):
            if self.sigmoid_gating:
                prob = 1.0 / (1.0 + np.exp(-logits[t]))
            else:
                z = np.exp(logits[t] - logits[t].max())
                prob = z / z.sum()
            bias = self.w(p + "exp_probs_b.bias") if self.has(p + "exp_probs_b.bias") else 0.0
            score = prob + bias
            chosen = sorted(range(self.n_expert), key=lambda e: (-score[e], e))[:k]
            wts = prob[chosen] / prob[chosen].sum()
            for e, wt in zip(chosen, wts):
                g = gate[e].astype(np.float64) @ h[t]
                u = up[e].astype(np.float64) @ h[t]
                out[t] += wt * (down[e].astype(np.float64) @ (self.silu(g) * u))
        return out

    # ------------------------------------------------------------ forward

    def forward(self, tokens, positions=None, rows=None):
        """tokens: list of ids at positions 0..T-1 (or `positions`); returns the logits
        (len(rows), n_vocab) of the given rows (default: every row)."""
        x = self.hidden(tokens, positions, rows)
        out_name = "output.weight" if self.has("output.weight") else "token_embd.weight"
        logits = self.mm(out_name, x) / self.logit_scale
        if self.final_softcap:
            logits = self.final_softcap * np.tanh(logits / self.final_softcap)
        return logits

    def embedding(self, tokens, pooling, dims=None):
        """The pooled ("mean", "cls", "last"), truncated and L2-normalised embedding of
        one sequence, from the final-normed hidden states (what model_embed computes)."""
        h = self.hidden(tokens)
        v = {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}[pooling]
        v = v[:dims] if dims else v
        return v / np.linalg.norm(v)

    def qkv(self, p, h):
        """Layer p's q (T, H, DK), k (T, HKV, DK), v (T, HKV, DV) of the block input h
        (phi3, nomic-bert: rows of one attn_qkv matrix)."""
        T, H, HKV, DK, DV = h.shape[0], self.n_head, self.n_head_kv, self.head_k, self.head_v
        if self.has(p + "attn_qkv.weight"):
            qkv = self.mm(p + "attn_qkv.weight", h)
            return (qkv[:, :H * DK].reshape(T, H, DK),
                    qkv[:, H * DK:(H + HKV) * DK].reshape(T, HKV, DK),
                    qkv[:, (H + HKV) * DK:].reshape(T, HKV, DV))
        return (self.mm(p + "attn_q.weight", h).reshape(T, H, DK),
                self.mm(p + "attn_k.weight", h).reshape(T, HKV, DK),
                self.mm(p + "attn_v.weight", h).reshape(T, HKV, DV))

    def layer_norm(self, x, w, b):
        d = x - x.mean(axis=-1, keepdims=True)
        return d / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + self.eps) * w + b

    def bert_hidden(self, tokens):
        """bert and nomic-bert (llama.cpp's llm_build_bert): token + type 0 (+ position)
        embeddings, LayerNorm, then post-norm layers whose tokens see the whole sequence."""
        T = len(tokens)
        x = self.w("token_embd.weight")[np.asarray(tokens)].astype(np.float64)
        if self.has("token_types.weight"):
            x = x + self.w("token_types.weight")[0]
        if self.has("position_embd.weight"):
            x = x + self.w("position_embd.weight")[:T]
        x = self.layer_norm(x, self.w("token_embd_norm.weight"), self.w("token_embd_norm.bias"))
        H, D = self.n_head, self.head_k
        HKV = self.n_head_kv
        pos = list(range(T))
        for il in range(self.n_layer):
            p = f"blk.{il}."
            q, k, v = self.qkv(p, x)
            if self.arch == "nomic-bert":
                q = self.rope(q, pos, self.freq_base, 1.0)
                k = self.rope(k, pos, self.freq_base, 1.0)
            group = H // HKV
            att = np.empty((T, H, D))
            for hh in range(H):
                s = q[:, hh] @ k[:, hh // group].T / math.sqrt(D)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, hh] = s @ v[:, hh // group]
            o = self.mm(p + "attn_output.weight", att.reshape(T, H * D))
            x = self.layer_norm(o + x, self.w(p + "attn_output_norm.weight"),
                                self.w(p + "attn_output_norm.bias"))
            if self.has(p + "ffn_gate.weight"):
                f = self.silu(self.mm(p + "ffn_gate.weight", x)) * self.mm(p + "ffn_up.weight", x)
            else:
                f = self.gelu_tanh(self.mm(p + "ffn_up.weight", x))
            f = self.mm(p + "ffn_down.weight", f)
            x = self.layer_norm(f + x, self.w(p + "layer_output_norm.weight"),
                                self.w(p + "layer_output_norm.bias"))
        return x

    def hidden(self, tokens, positions=None, rows=None):
        """The final-normed hidden states (len(rows), n_embd): the rows the output head
        multiplies (bert, nomic-bert: the last layer's output)."""
        if self.bert:
            x = self.bert_hidden(tokens)
            return x if rows is None else x[list(rows)]
        T = len(tokens)
        pos = list(range(T)) if positions is None else list(positions)
        emb = self.w("token_embd.weight")
        x = emb[np.asarray(tokens)].astype(np.float64)
        if self.arch in ("gemma3", "gemma2"):
            x = x * math.sqrt(self.n_embd)
        x = x * self.embd_scale
        factors = self.w(self.rope_factor_name) if self.has(self.rope_factor_name) else None
        H, HKV, DK, DV = self.n_head, self.n_head_kv, self.head_k, self.head_v
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self.rms_norm(x, self.w(p + "attn_norm.weight")) if self.has(p + "attn_norm.weight") else x
            if self.conv_layers[il]:
                x = x + self.short_conv(p, h, pos)
                x = self.ffn(p, x)
                continue
            q, k, v = self.qkv(p, h)
            if self.arch == "olmo2":  # over the whole q and k rows
                q = self.rms_norm(q.reshape(T, H * DK), self.w(p + "attn_q_norm.weight")).reshape(T, H, DK)
                k = self.rms_norm(k.reshape(T, HKV * DK), self.w(p + "attn_k_norm.weight")).reshape(T, HKV, DK)
            elif self.has(p + "attn_q_norm.weight"):
                q = self.rms_norm(q, self.w(p + "attn_q_norm.weight"))
                k = self.rms_norm(k, self.w(p + "attn_k_norm.weight"))
            swa = self.swa_layers[il]
            base = 10000.0 if (self.arch == "gemma3" and swa) else self.freq_base
            plain = swa and self.arch in ("gemma3", "olmo2")  # windowed layers: no scaling
            scale = 1.0 if plain else self.freq_scale
            yarn = self.yarn and not plain
            if self.rope_layers[il]:
                q = self.rope(q, pos, base, scale, factors, yarn)
                k = self.rope(k, pos, base, scale, factors, yarn)
            if self.arch == "gemma2" and self.n_layer == 46:
                # Gemma 2 27B: query_pre_attn_scalar = n_embd / n_head
                kq_scale = 1.0 / math.sqrt(self.n_embd // H)
            elif self.attn_scale:
                kq_scale = self.attn_scale
            else:
                kq_scale = 1.0 / math.sqrt(DK)
            att = np.empty((T, H, DV), dtype=np.float64)
            group = H // HKV
            for t in range(T):
                for hh in range(H):
                    kh = hh // group
                    keys = [j for j in range(T) if pos[j] <= pos[t]
                            and not (swa and pos[t] - pos[j] >= self.n_swa)]
                    s = np.array([q[t, hh] @ k[j, kh] for j in keys]) * kq_scale
                    if self.attn_softcap:
                        s = self.attn_softcap * np.tanh(s / self.attn_softcap)
                    if self.gptoss:  # the head's sink: in the denominator only
                        sink = self.w(p + "attn_sinks.weight")[hh]
                        mx = max(s.max(), sink)
                        s = np.exp(s - mx)
                        s /= s.sum() + math.exp(sink - mx)
                    else:
                        s = np.exp(s - s.max())
                        s /= s.sum()
                    att[t, hh] = s @ v[keys, kh]
            o = self.mm(p + "attn_output.weight", att.reshape(T, H * DV))
            if self.has(p + "post_attention_norm.weight") and not self.gptoss:
                o = self.rms_norm(o, self.w(p + "post_attention_norm.weight"))
            x = x + o * self.residual_scale
            x = self.ffn(p, x)
        if rows is not None:
            x = x[list(rows)]
        # lfm2's final norm is token_embd_norm
        norm = "output_norm.weight" if self.has("output_norm.weight") else "token_embd_norm.weight"
        return self.rms_norm(x, self.w(norm))

    def ffn(self, p, x):
        norm = p + ("post_attention_norm.weight" if self.gptoss else "ffn_norm.weight")
        h = self.rms_norm(x, self.w(norm)) if self.has(norm) else x
        if self.has(p + "ffn_gate_inp.weight"):
            return x + self.moe(p, h)
        if self.has(p + "ffn_gate.weight"):
            g = self.mm(p + "ffn_gate.weight", h)
            u = self.mm(p + "ffn_up.weight", h)
        else:  # phi3: the gate rows, then the up rows, in ffn_up
            gu = self.mm(p + "ffn_up.weight", h)
            g, u = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
        act = self.gelu_tanh(g) if self.arch in ("gemma3", "gemma2") else self.silu(g)
        f = self.mm(p + "ffn_down.weight", act * u)
        if self.has(p + "post_ffw_norm.weight"):
            f = self.rms_norm(f, self.w(p + "post_ffw_norm.weight"))
        return x + f * self.residual_scale

    def short_conv(self, p, h, pos):
        """LFM2's conv block (Liquid AI's Lfm2ShortConv as llama.cpp's lfm2 graph runs
        it): B, C, x = in_proj(h); bx = B * x; a depthwise causal conv of L taps over the
        positions pos-L+1..pos of bx (zero before position 0); out_proj(C * conv).
        The sequence must be positions 0..T-1 (a whole sequence, no cache)."""
        T, E, L = h.shape[0], self.n_embd, self.conv_l
        assert list(pos) == list(range(T)), "the reference convolves a whole sequence"
        bcx = self.mm(p + "shortconv.in_proj.weight", h)
        b, c, xx = bcx[:, :E], bcx[:, E:2 * E], bcx[:, 2 * E:]
        bx = b * xx
        w = self.w(p + "shortconv.conv.weight").astype(np.float64)  # (E, L), oldest tap first
        padded = np.concatenate([np.zeros((L - 1, E)), bx], axis=0)
        conv = np.zeros((T, E))
        for i in range(L):
            conv += padded[i:i + T] * w[:, i]
        return self.mm(p + "shortconv.out_proj.weight", c * conv)

    def greedy(self, prompt_tokens, n):
        toks = list(prompt_tokens)
        out = []
        for _ in range(n):
            logits = self.forward(toks, rows=[len(toks) - 1])[0]
            nxt = int(np.argmax(logits))
            out.append(nxt)
            toks.append(nxt)
        return out
