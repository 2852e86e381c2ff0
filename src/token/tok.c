/* tok.c: loading a GGUF vocabulary, splitting text at special tokens, dispatching to the
 * SentencePiece-style (tok_spm.c) or byte-level BPE (tok_bpe.c) tokenizer, and turning
 * tokens back into bytes (whole sequences and streams). */
#include "tok_internal.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Token texts longer than this are refused: no real vocabulary comes near it, and it
 * bounds every per-token buffer. */
#define TOK_MAX_TEXT (1u << 16)
#define TOK_MAX_VOCAB (1u << 24)

/* ------------------------------------------------------------------ helpers */

uint32_t tok_hash_bytes(const void *data, size_t len, uint32_t seed)
{
    /* FNV-1a with a final avalanche: cheap on short token texts. */
    const uint8_t *p = data;
    uint32_t h = 2166136261u ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    return h;
}

size_t tok_utf8_len(uint8_t lead)
{
    /* By the high nibble, as SentencePiece and llama.cpp split text into characters:
     * continuation bytes and stray bytes count as one. */
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[lead >> 4];
}

size_t tok_utf8_encode(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

bool tok_ids_push(struct tok_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->v, cap * sizeof *p);
        if (!p)
            return false;
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = id;
    return true;
}

/* ------------------------------------------------------------------ vocabulary table */

int32_t tok_find(const struct tok *t, const char *s, size_t len)
{
    if (len == 0)
        return TOK_NULL;
    uint32_t i = tok_hash_bytes(s, len, 0) & t->vocab_mask;
    for (;;) {
        uint32_t e = t->vocab_table[i];
        if (e == 0)
            return TOK_NULL;
        int32_t id = (int32_t)(e - 1);
        if (t->text_len[id] == len && memcmp(t->text_blob + t->text_off[id], s, len) == 0)
            return id;
        i = (i + 1) & t->vocab_mask;
    }
}

/* Tokens the model itself produces (normal and byte tokens); added tokens are matched in the
 * raw text instead (partition below). */
static bool model_token(const struct tok *t, int32_t id)
{
    return t->types[id] == TOK_T_NORMAL || t->types[id] == TOK_T_BYTE;
}

/* Later duplicates replace earlier ones, as in llama.cpp's text -> id map, except that an
 * added token never takes a text from a model token: DeepSeek adds a user-defined "ÿ"
 * beside byte-level BPE's own "ÿ" (byte 0xFF), and Hugging Face keeps the model's. */
static void vocab_insert(struct tok *t, int32_t id)
{
    const char *s = t->text_blob + t->text_off[id];
    size_t len = t->text_len[id];
    uint32_t i = tok_hash_bytes(s, len, 0) & t->vocab_mask;
    for (;;) {
        uint32_t e = t->vocab_table[i];
        if (e == 0) {
            t->vocab_table[i] = (uint32_t)id + 1;
            return;
        }
        int32_t o = (int32_t)(e - 1);
        if (t->text_len[o] == len && memcmp(t->text_blob + t->text_off[o], s, len) == 0) {
            if (model_token(t, id) || !model_token(t, o))
                t->vocab_table[i] = (uint32_t)id + 1;
            return;
        }
        i = (i + 1) & t->vocab_mask;
    }
}

/* ------------------------------------------------------------------ loading */

static int32_t find_cstr(const struct tok *t, const char *s)
{
    return tok_find(t, s, strlen(s));
}

/* Reads an optional special-token id. 0xFFFFFFFF (and -1) mean "none"; any other id
 * outside the vocabulary is reported and ignored, as llama.cpp does, so a sloppy converter's
 * file still loads. */
static void read_special(struct tok *t, const struct gguf_file *f, const char *key, int32_t *id)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return;
    int64_t v;
    switch (kv->value.type) {
    case GGUF_T_U8: case GGUF_T_U16: case GGUF_T_U32: case GGUF_T_U64:
        v = kv->value.v.u64 > INT64_MAX ? -1 : (int64_t)kv->value.v.u64;
        if (kv->value.v.u64 == 0xFFFFFFFFu)
            v = -1;
        break;
    case GGUF_T_I8: case GGUF_T_I16: case GGUF_T_I32: case GGUF_T_I64:
        v = kv->value.v.i64;
        break;
    default:
        kn_log(KN_LOG_WARN, "%s has type %s, not an integer; ignored", key,
               gguf_vtype_name(kv->value.type));
        return;
    }
    if (v == -1) {
        *id = TOK_NULL;
        return;
    }
    if (v < 0 || v >= t->n_vocab) {
        kn_log(KN_LOG_WARN, "%s = %lld is outside the vocabulary (%d tokens); ignored", key,
               (long long)v, t->n_vocab);
        return;
    }
    *id = (int32_t)v;
}

static void read_flag(const struct gguf_file *f, const char *key, bool *flag)
{
    bool b;
    if (gguf_get_bool(f, key, &b))
        *flag = b;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct tok *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y])
        return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes one UTF-8 code point at s (n bytes left); returns its length, or 0 if invalid. */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cpt)
{
    size_t len = tok_utf8_len(s[0]);
    if (len > n || (s[0] >= 0x80 && s[0] < 0xC0) || s[0] >= 0xF8)
        return 0;
    uint32_t c = len == 1 ? s[0] : len == 2 ? s[0] & 0x1Fu : len == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    *cpt = c;
    return len;
}

/* Builds the piece (the bytes a token stands for when specials are rendered) of every
 * token, as llama.cpp's token_to_piece does. Unused and undefined tokens render nothing. */
static enum kn_status build_pieces(struct tok *t, size_t blob_size, struct kn_err *err)
{
    /* A piece is never longer than its text: U+2581 (3 bytes) becomes 1, a BPE code point
     * (1-2 bytes) becomes 1, <0xXX> becomes 1. */
    t->piece_blob = kn_malloc(blob_size ? blob_size : 1, err);
    t->piece_off = kn_calloc((size_t)t->n_vocab, sizeof *t->piece_off, err);
    t->piece_len = kn_calloc((size_t)t->n_vocab, sizeof *t->piece_len, err);
    if (!t->piece_blob || !t->piece_off || !t->piece_len)
        return KN_E_NOMEM;
    size_t pos = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = t->text_blob + t->text_off[id];
        size_t n = t->text_len[id];
        char *out = t->piece_blob + pos;
        size_t m = 0;
        switch ((enum tok_type)t->types[id]) {
        case TOK_T_CONTROL:
        case TOK_T_UNKNOWN:
        case TOK_T_USER_DEFINED:
            memcpy(out, s, n);
            m = n;
            break;
        case TOK_T_NORMAL:
            if (t->model != TOK_MODEL_BPE) {
                for (size_t i = 0; i < n;) {
                    if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                        out[m++] = ' ';
                        i += 3;
                    } else {
                        out[m++] = s[i++];
                    }
                }
            } else {
                for (size_t i = 0; i < n;) {
                    uint32_t c;
                    size_t l = utf8_decode((const uint8_t *)s + i, n - i, &c);
                    int b = l ? tok_bpe_cpt_to_byte(c) : -1;
                    if (b >= 0) {
                        out[m++] = (char)b;
                        i += l;
                    } else {
                        /* Not a byte-level code point: keep its bytes as they are. */
                        size_t k = l ? l : 1;
                        memcpy(out + m, s + i, k);
                        m += k;
                        i += k;
                    }
                }
            }
            break;
        case TOK_T_BYTE:
            if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hexval(s[3]) >= 0 &&
                hexval(s[4]) >= 0) {
                out[m++] = (char)(hexval(s[3]) * 16 + hexval(s[4]));
            } else {
                memcpy(out, s, n);
                m = n;
            }
            break;
        default:
            break;
        }
        t->piece_off[id] = (uint32_t)pos;
        t->piece_len[id] = (uint32_t)m;
        pos += m;
        if (m > t->max_piece)
            t->max_piece = m;
    }
    return KN_OK;
}

static void add_eog(struct tok *t, int32_t id)
{
    if (id == TOK_NULL)
        return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return;
    if (t->n_eog < TOK_MAX_EOG)
        t->eog[t->n_eog++] = id;
}

/* End-of-turn tokens found by their text, for files whose converter did not record an
 * eot id (Gemma's <end_of_turn>, Qwen's <|im_end|>, Llama 3's <|eot_id|> ...). */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<|return|>", "<|call|>", /* gpt-oss's harmony format: the final answer, a tool call */
};

/* gpt-oss's harmony format (o200k_harmony): the header tokens are printed (the reasoning
 * split and the tool-call parser read them), as llama.cpp does ("always render these
 * tokens"), and <|end|>, which closes each message of a turn, is not the end of
 * generation (<|return|> and <|call|> are). */
static const char *const harmony_shown[] = {"<|channel|>", "<|message|>", "<|start|>",
                                            "<|constrain|>"};

static enum kn_status load(struct tok *t, const struct gguf_file *f, struct kn_err *err)
{
    struct gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
        return kn_fail(err, KN_E_FORMAT,
                       "tokenizer.ggml.model is missing: the file has no tokenizer");
    if (model.len == 5 && memcmp(model.data, "llama", 5) == 0)
        t->model = TOK_MODEL_SPM;
    else if (model.len == 4 && memcmp(model.data, "gpt2", 4) == 0)
        t->model = TOK_MODEL_BPE;
    else if (model.len == 4 && memcmp(model.data, "bert", 4) == 0)
        t->model = TOK_MODEL_WPM;
    else
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "unsupported tokenizer model '%.*s' (tokenizer.ggml.model); Kinetic "
                       "supports 'llama' (SentencePiece-style), 'gpt2' (byte-level BPE) and "
                       "'bert' (WordPiece)",
                       (int)(model.len > 64 ? 64 : model.len), model.data);

    struct gguf_str pre;
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre) && pre.len > 0) {
        if (pre.len >= sizeof t->pre_name || memchr(pre.data, 0, pre.len))
            return kn_fail(err, KN_E_FORMAT, "tokenizer.ggml.pre is not a valid name");
        memcpy(t->pre_name, pre.data, pre.len);
        t->pre_name[pre.len] = 0;
    } else {
        strcpy(t->pre_name, "default");
    }
    if (t->model != TOK_MODEL_BPE)
        strcpy(t->pre_name, "default"); /* only BPE has pre-tokenizers */

    const struct gguf_value *toks = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_T_STRING);
    if (!toks)
        return kn_fail(err, KN_E_FORMAT, "tokenizer.ggml.tokens is missing or not a string array");
    if (toks->v.arr.n == 0 || toks->v.arr.n > TOK_MAX_VOCAB)
        return kn_fail(err, KN_E_FORMAT, "tokenizer.ggml.tokens has %llu tokens (1..%u allowed)",
                       (unsigned long long)toks->v.arr.n, TOK_MAX_VOCAB);
    t->n_vocab = (int32_t)toks->v.arr.n;
    size_t n = (size_t)t->n_vocab;

    size_t blob = 0;
    for (size_t i = 0; i < n; i++) {
        if (toks->v.arr.strs[i].len > TOK_MAX_TEXT)
            return kn_fail(err, KN_E_FORMAT, "token %zu is %llu bytes long (at most %u allowed)",
                           i, (unsigned long long)toks->v.arr.strs[i].len, TOK_MAX_TEXT);
        blob += (size_t)toks->v.arr.strs[i].len;
    }
    if (blob > UINT32_MAX)
        return kn_fail(err, KN_E_FORMAT, "the token texts total %zu bytes (at most 4 GiB)", blob);

    t->text_blob = kn_malloc(blob ? blob : 1, err);
    t->text_off = kn_calloc(n, sizeof *t->text_off, err);
    t->text_len = kn_calloc(n, sizeof *t->text_len, err);
    t->scores = kn_calloc(n, sizeof *t->scores, err);
    t->types = kn_calloc(n, 1, err);
    if (!t->text_blob || !t->text_off || !t->text_len || !t->scores || !t->types)
        return KN_E_NOMEM;
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const struct gguf_str *s = &toks->v.arr.strs[i];
        memcpy(t->text_blob + pos, s->data, (size_t)s->len);
        t->text_off[i] = (uint32_t)pos;
        t->text_len[i] = (uint32_t)s->len;
        pos += (size_t)s->len;
        if (s->len > t->max_text_len)
            t->max_text_len = (size_t)s->len;
    }

    const struct gguf_value *scores = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_T_F32);
    if (scores) {
        if (scores->v.arr.n != n)
            return kn_fail(err, KN_E_FORMAT, "tokenizer.ggml.scores has %llu entries for %zu tokens",
                           (unsigned long long)scores->v.arr.n, n);
        for (size_t i = 0; i < n; i++) {
            float s = (float)gguf_arr_f64(scores, i);
            /* A NaN would make the merge order depend on the heap's layout. */
            t->scores[i] = isnan(s) ? -FLT_MAX : s;
        }
    } else if (gguf_find_kv(f, "tokenizer.ggml.scores")) {
        return kn_fail(err, KN_E_FORMAT, "tokenizer.ggml.scores is not an f32 array");
    }

    const struct gguf_kv *types_kv = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (types_kv) {
        const struct gguf_value *v = &types_kv->value;
        if (v->type != GGUF_T_ARRAY ||
            !(v->v.arr.type == GGUF_T_I32 || v->v.arr.type == GGUF_T_U32 ||
              v->v.arr.type == GGUF_T_I8 || v->v.arr.type == GGUF_T_U8 ||
              v->v.arr.type == GGUF_T_I16 || v->v.arr.type == GGUF_T_U16))
            return kn_fail(err, KN_E_FORMAT, "tokenizer.ggml.token_type is not an integer array");
        if (v->v.arr.n != n)
            return kn_fail(err, KN_E_FORMAT,
                           "tokenizer.ggml.token_type has %llu entries for %zu tokens",
                           (unsigned long long)v->v.arr.n, n);
        for (size_t i = 0; i < n; i++) {
            int64_t ty = gguf_arr_i64(v, i);
            t->types[i] = ty >= TOK_T_NORMAL && ty <= TOK_T_BYTE ? (uint8_t)ty : TOK_T_UNDEFINED;
        }
    } else {
        memset(t->types, TOK_T_NORMAL, n);
    }

    /* The text -> id table, at most half full. */
    uint32_t cap = 1024;
    while (cap < 2 * n)
        cap *= 2;
    t->vocab_table = kn_calloc(cap, sizeof *t->vocab_table, err);
    if (!t->vocab_table)
        return KN_E_NOMEM;
    t->vocab_mask = cap - 1;
    for (size_t i = 0; i < n; i++)
        if (t->text_len[i] > 0)
            vocab_insert(t, (int32_t)i);

    /* Special ids and flags: the family's defaults, then the file's values. */
    struct tok_special *sp = &t->sp;
    sp->bos = sp->eos = sp->eot = sp->eom = sp->unk = sp->pad = sp->sep = TOK_NULL;
    if (t->model == TOK_MODEL_SPM) {
        sp->bos = n > 1 ? 1 : TOK_NULL;
        sp->eos = n > 2 ? 2 : TOK_NULL;
        sp->unk = 0;
        sp->add_bos = true;
        sp->add_space_prefix = true;
    }
    if (t->model == TOK_MODEL_WPM) {
        /* BERT: [CLS] text [SEP] */
        sp->add_bos = true;
        read_special(t, f, "tokenizer.ggml.cls_token_id", &sp->bos);
    }
    read_special(t, f, "tokenizer.ggml.bos_token_id", &sp->bos);
    read_special(t, f, "tokenizer.ggml.eos_token_id", &sp->eos);
    read_special(t, f, "tokenizer.ggml.eot_token_id", &sp->eot);
    read_special(t, f, "tokenizer.ggml.eom_token_id", &sp->eom);
    read_special(t, f, "tokenizer.ggml.unknown_token_id", &sp->unk);
    read_special(t, f, "tokenizer.ggml.padding_token_id", &sp->pad);
    read_special(t, f, "tokenizer.ggml.seperator_token_id", &sp->sep); /* GGUF's spelling */

    if (t->model == TOK_MODEL_BPE) {
        enum kn_status st = tok_bpe_init(t, f, err);
        if (st != KN_OK)
            return st;
    }
    read_flag(f, "tokenizer.ggml.add_bos_token", &sp->add_bos);
    read_flag(f, "tokenizer.ggml.add_eos_token", &sp->add_eos);
    read_flag(f, "tokenizer.ggml.add_space_prefix", &sp->add_space_prefix);
    if (sp->add_bos && sp->bos == TOK_NULL)
        sp->add_bos = false;
    if (sp->add_eos && sp->eos == TOK_NULL)
        sp->add_eos = false;
    /* BERT ends with [SEP] alone, whatever add_eos_token says: gguf's SpecialVocab reads
     * the [SEP] closing tokenizer.json's TemplateProcessing as an eos to add (and eos =
     * sep), and llama.cpp's WordPiece tokenizer ignores the flag; honouring it would
     * write [SEP] twice. */
    if (t->model == TOK_MODEL_WPM)
        sp->add_eos = false;

    /* End of generation. Tokens found by text are made control tokens (their text must
     * not be produced from plain text, nor printed), as llama.cpp does. */
    if (sp->eot == TOK_NULL)
        for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0] && sp->eot == TOK_NULL; i++)
            if (strcmp(eog_texts[i], "<|eom_id|>") != 0)
                sp->eot = find_cstr(t, eog_texts[i]);
    if (sp->eom == TOK_NULL)
        sp->eom = find_cstr(t, "<|eom_id|>");
    add_eog(t, sp->eos);
    add_eog(t, sp->eot);
    add_eog(t, sp->eom);
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = find_cstr(t, eog_texts[i]);
        if (id != TOK_NULL) {
            add_eog(t, id);
            t->types[id] = TOK_T_CONTROL;
        }
    }

    if (find_cstr(t, "<|return|>") != TOK_NULL && find_cstr(t, "<|call|>") != TOK_NULL) {
        int32_t end = find_cstr(t, "<|end|>");
        for (int i = 0; i < t->n_eog; i++)
            if (t->eog[i] == end) {
                t->eog[i] = t->eog[--t->n_eog];
                break;
            }
        if (sp->eot == end)
            sp->eot = TOK_NULL;
        for (size_t i = 0; i < sizeof harmony_shown / sizeof harmony_shown[0]; i++) {
            int32_t id = find_cstr(t, harmony_shown[i]);
            if (id != TOK_NULL)
                t->types[id] = TOK_T_USER_DEFINED;
        }
    }

    /* SPM byte fallback: <0xXX>, else the byte itself as a token. */
    for (int b = 0; b < 256; b++) {
        if (t->model == TOK_MODEL_SPM) {
            char buf[7];
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            int32_t id = tok_find(t, buf, 6);
            if (id == TOK_NULL) {
                char c = (char)b;
                id = tok_find(t, &c, 1);
            }
            t->byte_token[b] = id;
        } else if (t->model == TOK_MODEL_BPE) {
            char buf[4];
            size_t l = tok_utf8_encode(tok_bpe_byte_to_cpt((uint8_t)b), buf);
            t->byte_token[b] = tok_find(t, buf, l);
        } else {
            t->byte_token[b] = TOK_NULL;
        }
    }

    /* Tokens matched whole in text, longest first (ties by id, for a fixed order). */
    int32_t n_special = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t ty = t->types[i];
        if ((ty == TOK_T_CONTROL || ty == TOK_T_USER_DEFINED || ty == TOK_T_UNKNOWN) &&
            t->text_len[i] > 0)
            n_special++;
    }
    t->special_ids = kn_calloc(n_special ? (size_t)n_special : 1, sizeof *t->special_ids, err);
    if (!t->special_ids)
        return KN_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        uint8_t ty = t->types[i];
        if ((ty == TOK_T_CONTROL || ty == TOK_T_USER_DEFINED || ty == TOK_T_UNKNOWN) &&
            t->text_len[i] > 0)
            t->special_ids[t->n_special++] = (int32_t)i;
    }
    qsort_r(t->special_ids, (size_t)t->n_special, sizeof *t->special_ids, cmp_special, t);

    return build_pieces(t, blob, err);
}

enum kn_status tok_load(struct tok **out, const struct gguf_file *f, struct kn_err *err)
{
    *out = NULL;
    struct tok *t = kn_calloc(1, sizeof *t, err);
    if (!t)
        return KN_E_NOMEM;
    enum kn_status st = load(t, f, err);
    if (st != KN_OK) {
        tok_free(t);
        return st;
    }
    *out = t;
    return KN_OK;
}

void tok_free(struct tok *t)
{
    if (!t)
        return;
    tok_bpe_free(t);
    free(t->text_blob);
    free(t->text_off);
    free(t->text_len);
    free(t->scores);
    free(t->types);
    free(t->piece_blob);
    free(t->piece_off);
    free(t->piece_len);
    free(t->vocab_table);
    free(t->special_ids);
    free(t);
}

/* ------------------------------------------------------------------ accessors */

enum tok_model tok_model(const struct tok *t) { return t->model; }
const char *tok_pre_name(const struct tok *t) { return t->pre_name; }
int32_t tok_n_vocab(const struct tok *t) { return t->n_vocab; }
const struct tok_special *tok_specials(const struct tok *t) { return &t->sp; }
size_t tok_max_piece(const struct tok *t) { return t->max_piece; }

const char *tok_text(const struct tok *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->text_len[id];
    return t->text_blob + t->text_off[id];
}

enum tok_type tok_type_of(const struct tok *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return TOK_T_UNDEFINED;
    return (enum tok_type)t->types[id];
}

bool tok_is_eog(const struct tok *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

int tok_eog_ids(const struct tok *t, int32_t *ids)
{
    memcpy(ids, t->eog, (size_t)t->n_eog * sizeof *ids);
    return t->n_eog;
}

/* ------------------------------------------------------------------ encoding */

/* A piece of the input: raw text (id == TOK_NULL) or a token matched whole. */
struct frag {
    int32_t id;
    size_t off, len;
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static bool frags_push(struct frags *f, int32_t id, size_t off, size_t len)
{
    if (id == TOK_NULL && len == 0)
        return true;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct frag *p = realloc(f->v, cap * sizeof *p);
        if (!p)
            return false;
        f->v = p;
        f->cap = cap;
    }
    f->v[f->n++] = (struct frag){id, off, len};
    return true;
}

/* Splits the text at whole-token matches the way llama.cpp does: for each special token,
 * longest first, every raw fragment is cut at each leftmost non-overlapping occurrence. */
static bool all_marked(const uint8_t *marks, size_t off, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!marks[off + i])
            return false;
    return true;
}

/* marks (NULL: none): control and unknown tokens match only where every byte of the
 * occurrence is marked; parse_special is then taken as true. */
static bool partition(const struct tok *t, const char *text, size_t len, bool parse_special,
                      const uint8_t *marks, struct frags *cur)
{
    struct frags next = {0};
    bool ok = frags_push(cur, TOK_NULL, 0, len);
    /* Which bytes and byte pairs occur: most special tokens (Gemma has 6415) can be ruled
     * out by their first and last two bytes without searching the text. */
    uint64_t pairs[65536 / 64] = {0};
    uint64_t bytes[256 / 64] = {0};
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)text[i];
        bytes[c >> 6] |= 1ull << (c & 63);
        if (i + 1 < len) {
            unsigned pr = (unsigned)c << 8 | (uint8_t)text[i + 1];
            pairs[pr >> 6] |= 1ull << (pr & 63);
        }
    }
    for (int32_t k = 0; ok && k < t->n_special; k++) {
        int32_t id = t->special_ids[k];
        uint8_t ty = t->types[id];
        bool guarded = marks && (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN);
        if (!parse_special && !marks && (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN))
            continue;
        const char *s = t->text_blob + t->text_off[id];
        size_t sl = t->text_len[id];
        const uint8_t *u = (const uint8_t *)s;
        if (sl > len || !(bytes[u[0] >> 6] >> (u[0] & 63) & 1))
            continue;
        if (sl >= 2) {
            unsigned a = (unsigned)u[0] << 8 | u[1], b = (unsigned)u[sl - 2] << 8 | u[sl - 1];
            if (!(pairs[a >> 6] >> (a & 63) & 1) || !(pairs[b >> 6] >> (b & 63) & 1))
                continue;
        }
        if (!memmem(text, len, s, sl))
            continue; /* cheap rejection of the many tokens that do not occur at all */
        next.n = 0;
        for (size_t i = 0; ok && i < cur->n; i++) {
            struct frag fr = cur->v[i];
            if (fr.id != TOK_NULL) {
                ok = frags_push(&next, fr.id, fr.off, fr.len);
                continue;
            }
            size_t p = fr.off, end = fr.off + fr.len, q = p;
            while (ok && p < end) {
                /* q: where to search from; an occurrence that is not all template text
                 * (marks) stays raw text and the search goes on after its first byte. */
                const char *hit = memmem(text + q, end - q, s, sl);
                if (!hit) {
                    ok = frags_push(&next, TOK_NULL, p, end - p);
                    break;
                }
                size_t h = (size_t)(hit - text);
                if (guarded && !all_marked(marks, h, sl)) {
                    q = h + 1;
                    continue;
                }
                ok = frags_push(&next, TOK_NULL, p, h - p) && frags_push(&next, id, h, sl);
                p = q = h + sl;
            }
        }
        struct frags tmp = *cur;
        *cur = next;
        next = tmp;
    }
    free(next.v);
    return ok;
}

static bool encode_spm_fragment(const struct tok *t, const char *text, size_t len, bool prefix,
                                struct tok_ids *out)
{
    /* Spaces become U+2581 (3 bytes); the prefix space too. */
    size_t cap = len * 3 + 3;
    char *buf = malloc(cap);
    if (!buf)
        return false;
    size_t m = 0;
    if (prefix) {
        memcpy(buf, "\xE2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + m, "\xE2\x96\x81", 3);
            m += 3;
        } else {
            buf[m++] = text[i];
        }
    }
    bool ok = tok_spm_encode(t, buf, m, out);
    free(buf);
    return ok;
}

/* Tokenizes into out (owned by the caller). */
static enum kn_status encode(const struct tok *t, const char *text, size_t len, bool add_special,
                             bool parse_special, const uint8_t *marks, struct tok_ids *out,
                             struct kn_err *err)
{
    if (len > (size_t)1 << 30)
        return kn_fail(err, KN_E_LIMIT, "text of %zu bytes is too long to tokenize (1 GiB at most)",
                       len);
    struct frags fr = {0};
    bool ok = true;
    if (len > 0)
        ok = partition(t, text, len, parse_special, marks, &fr);
    if (ok && add_special && t->sp.add_bos)
        ok = tok_ids_push(out, t->sp.bos);
    bool prev_special = true; /* the first fragment gets the SPM space prefix */
    for (size_t i = 0; ok && i < fr.n; i++) {
        const struct frag *f = &fr.v[i];
        if (f->id != TOK_NULL) {
            ok = tok_ids_push(out, f->id);
            prev_special = true;
            continue;
        }
        if (t->model == TOK_MODEL_SPM)
            ok = encode_spm_fragment(t, text + f->off, f->len,
                                     t->sp.add_space_prefix && prev_special, out);
        else if (t->model == TOK_MODEL_WPM)
            ok = tok_wpm_encode(t, text + f->off, f->len, out);
        else
            ok = tok_bpe_encode(t, text + f->off, f->len, out);
        prev_special = false;
    }
    if (ok && add_special && t->sp.add_eos)
        ok = tok_ids_push(out, t->sp.eos);
    if (ok && add_special && t->model == TOK_MODEL_WPM && t->sp.sep != TOK_NULL)
        ok = tok_ids_push(out, t->sp.sep);
    free(fr.v);
    if (!ok)
        return kn_fail(err, KN_E_NOMEM, "out of memory tokenizing %zu bytes of text", len);
    return KN_OK;
}

enum kn_status tok_encode(const struct tok *t, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *ids, size_t max, size_t *n,
                          struct kn_err *err)
{
    struct tok_ids out = {0};
    *n = 0;
    enum kn_status st = encode(t, text, len, add_special, parse_special, NULL, &out, err);
    if (st == KN_OK) {
        *n = out.n;
        if (out.n > max)
            st = kn_fail(err, KN_E_LIMIT, "the text is %zu tokens; the buffer holds %zu", out.n,
                         max);
        else if (out.n)
            memcpy(ids, out.v, out.n * sizeof *ids);
    }
    free(out.v);
    return st;
}

enum kn_status tok_encode_marked(const struct tok *t, const char *text, const uint8_t *marks,
                                 size_t len, bool add_special, int32_t **ids, size_t *n,
                                 struct kn_err *err)
{
    struct tok_ids out = {0};
    *ids = NULL;
    *n = 0;
    enum kn_status st = encode(t, text, len, add_special, true, marks, &out, err);
    if (st != KN_OK) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n = out.n;
    return KN_OK;
}

enum kn_status tok_encode_alloc(const struct tok *t, const char *text, size_t len,
                                bool add_special, bool parse_special, int32_t **ids, size_t *n,
                                struct kn_err *err)
{
    struct tok_ids out = {0};
    *ids = NULL;
    *n = 0;
    enum kn_status st = encode(t, text, len, add_special, parse_special, NULL, &out, err);
    if (st != KN_OK) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n = out.n;
    return KN_OK;
}



/* ------------------------------------------------------------------ decoding */

const char *tok_piece(const struct tok *t, int32_t id, bool special, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= t->n_vocab)
        return "";
    uint8_t ty = t->types[id];
    if (!special && (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN))
        return "";
    *len = t->piece_len[id];
    return t->piece_blob + t->piece_off[id];
}

enum kn_status tok_decode(const struct tok *t, const int32_t *ids, size_t n_ids, bool special,
                          char *out, size_t cap, size_t *n, struct kn_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t l;
        const char *p = tok_piece(t, ids[i], special, &l);
        /* The space the encoder put in front of the text goes (first token only). */
        if (i == 0 && t->sp.add_space_prefix && l > 0 && p[0] == ' ') {
            p++;
            l--;
        }
        if (total + l <= cap)
            memcpy(out + total, p, l);
        total += l;
    }
    *n = total;
    if (total > cap)
        return kn_fail(err, KN_E_LIMIT, "the text is %zu bytes; the buffer holds %zu", total, cap);
    return KN_OK;
}

void tok_stream_init(struct tok_stream *s, const struct tok *t, bool special)
{
    memset(s, 0, sizeof *s);
    s->tok = t;
    s->special = special;
}

/* The length of an incomplete but so far valid UTF-8 sequence at the end of buf[0..m). */
static size_t incomplete_tail(const uint8_t *buf, size_t m)
{
    for (size_t back = 1; back <= 3 && back <= m; back++) {
        uint8_t c = buf[m - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back for the lead */
        size_t need = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xC0 && c < 0xE0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

void tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t *n)
{
    size_t l;
    const char *p = tok_piece(s->tok, id, s->special, &l);
    size_t m = (size_t)s->n_held;
    memcpy(out, s->held, m);
    memcpy(out + m, p, l);
    m += l;
    size_t hold = incomplete_tail((const uint8_t *)out, m);
    memcpy(s->held, out + m - hold, hold);
    s->n_held = (int)hold;
    *n = m - hold;
}

void tok_stream_flush(struct tok_stream *s, char *out, size_t *n)
{
    memcpy(out, s->held, (size_t)s->n_held);
    *n = (size_t)s->n_held;
    s->n_held = 0;
}
