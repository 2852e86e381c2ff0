/* backend_check.c: kern_backend_check, the op-by-op conformance of a backend to
 * canonical-1. The same crafted inputs go through every op of the backend under test and
 * of the CPU backend (whose bits are the reference's, docs/numerics.md); every output
 * byte must agree. */
#include "backend.h"
#include "../base/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shapes: every op at widths the model uses, small enough to run in milliseconds. */
enum {
    CK_T = 48,      /* tokens of the attention batch (the most of any op) */
    CK_TS = 5,      /* tokens of the row-wise ops */
    CK_E = 256,     /* width: a multiple of the K-quant block */
    CK_N = 40,      /* outputs of a product: not a multiple of 16 (a partial row group) */
    CK_H = 4, CK_HKV = 2, CK_D = 64,
    CK_CTX = 80,    /* cache positions: more than two attention tiles */
    CK_VOCAB = 8,   /* rows of an embedding table */
    CK_MAX_RECS = 128,
    CK_X = 8, CK_K = 3, /* experts, and experts per token */
};

/* What one backend produced: the bytes of every checked output, op by op. */
struct ck_rec {
    char op[64];
    size_t off, bytes;
};
struct ck_out {
    uint8_t *bytes;
    size_t n, cap;
    struct ck_rec rec[CK_MAX_RECS];
    int n_rec;
};

/* The inputs both backends get. */
struct ck_in {
    float x[CK_T * CK_E], x2[CK_T * CK_E];  /* activations */
    float qkv[3 * CK_T * CK_E];              /* attention inputs: no large values, so that
                                              * no score dominates and every key counts */
    float gain[CK_E], bias[CK_E];
    int32_t pos[CK_TS], tokens[CK_TS];
    struct kern_rope rope[2];
    struct kern_weight w[QT_COUNT];          /* every product type, (CK_N, CK_E) */
    void *w_data[QT_COUNT];
    struct kern_weight table[QT_COUNT];      /* embedding tables, (CK_VOCAB, CK_E) */
    float router[CK_T * CK_X];               /* router logits, with ties */
    float moe_bias[CK_X];
    struct kern_weight exps[3 * CK_X];       /* gate (q4_k), up (q8_0), down (q6_k): (CK_E, CK_E) */
    void *exps_data[3 * CK_X];
};

/* The experts' types: gate and up of different activation kinds. */
static const enum quant_type moe_types[3] = {QT_Q4_K, QT_Q8_0, QT_Q6_K};

static const enum quant_type mm_types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_1,
                                           QT_Q5_0, QT_Q5_1, QT_Q4_K, QT_Q5_K, QT_Q6_K};
static const enum quant_type table_types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q6_K};

/* ================================================================ inputs */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Values in [-2, 2) with the cases a device gets wrong mixed in: negative zeros,
 * denormals (kept, not flushed), exact zeros and (big) larger magnitudes. */
static void fill_big(float *x, size_t n, uint64_t seed, bool big)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        float v = (float)(splitmix(&s) >> 40) * 0x1p-22f - 2.0f;
        size_t j = i + (size_t)seed * 5; /* each input has its specials elsewhere */
        if (j % 31 == 7)
            v = -0.0f;
        else if (j % 37 == 11)
            v = v * 0x1p-130f; /* denormal */
        else if (j % 41 == 13)
            v = 0.0f;
        else if (big && j % 43 == 17)
            v = v * 300.0f;
        x[i] = v;
    }
}

static void fill(float *x, size_t n, uint64_t seed)
{
    fill_big(x, n, seed, true);
}

static void in_free(struct ck_in *in)
{
    if (!in)
        return;
    for (int t = 0; t < QT_COUNT; t++) {
        kern_weight_free(&in->w[t]);
        free(in->w_data[t]);
    }
    for (int i = 0; i < 3 * CK_X; i++) {
        kern_weight_free(&in->exps[i]);
        free(in->exps_data[i]);
    }
    free(in);
}

/* Rows of random floats quantized to type t: *data (owned by the caller). */
static enum kn_status make_rows(enum quant_type t, int64_t rows, uint64_t seed, void **data,
                                size_t *row_bytes, struct kn_err *err)
{
    uint64_t rb;
    if (!quant_row_size(t, CK_E, &rb))
        return kn_fail(err, KN_E_INTERNAL, "check: no row size for %s", quant_type_name(t));
    *row_bytes = (size_t)rb;
    uint8_t *p = kn_aligned_alloc((size_t)rows * rb, err);
    if (!p)
        return KN_E_NOMEM;
    float row[CK_E];
    for (int64_t r = 0; r < rows; r++) {
        fill(row, CK_E, seed + (uint64_t)r);
        if (!quant_quantize_row(t, row, p + r * rb, CK_E)) {
            free(p);
            return kn_fail(err, KN_E_INTERNAL, "check: cannot quantize %s", quant_type_name(t));
        }
    }
    *data = p;
    return KN_OK;
}

static enum kn_status in_make(struct ck_in **out, struct kn_err *err)
{
    struct ck_in *in = kn_calloc(1, sizeof *in, err);
    if (!in)
        return KN_E_NOMEM;
    fill(in->x, CK_T * CK_E, 1);
    fill(in->x2, CK_T * CK_E, 2);
    fill_big(in->qkv, 3 * CK_T * CK_E, 5, false);
    fill(in->gain, CK_E, 3);
    fill(in->bias, CK_E, 4);
    const int32_t pos[CK_TS] = {0, 1, 100, 4095, 70000}, tok[CK_TS] = {3, 0, 7, 7, 5};
    memcpy(in->pos, pos, sizeof pos);
    memcpy(in->tokens, tok, sizeof tok);
    const struct kern_rope_params rp[2] = {
        {.mode = KERN_ROPE_NORM, .n_rot = CK_D, .freq_base = 10000, .freq_scale = 1,
         .attn_factor = 1},
        /* NEOX, partial rotation, YaRN */
        {.mode = KERN_ROPE_NEOX, .n_rot = CK_D / 2, .freq_base = 1e6, .freq_scale = 0.25,
         .ext_factor = 1, .attn_factor = 1, .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096},
    };
    enum kn_status st = KN_OK;
    for (int i = 0; i < 2 && st == KN_OK; i++)
        st = kern_rope_init(&in->rope[i], &rp[i], err);
    for (size_t i = 0; i < sizeof mm_types / sizeof mm_types[0] && st == KN_OK; i++) {
        enum quant_type t = mm_types[i];
        size_t rb = 0;
        st = make_rows(t, CK_N, 100 + (uint64_t)t, &in->w_data[t], &rb, err);
        if (st == KN_OK)
            st = kern_weight_init(&in->w[t], t, CK_N, CK_E, in->w_data[t], (size_t)CK_N * rb, true, err);
    }
    /* Router logits: row 0 all equal (the choice is by index), row 1 a tie for the top,
     * row 2 zeros of both signs; the rest seeded with the usual specials. */
    fill(in->router, CK_T * CK_X, 6);
    for (int i = 0; i < CK_X; i++) {
        in->router[i] = 0.5f;
        in->router[CK_X + i] = i == 2 || i == 5 ? 3.0f : (float)i * 0.25f;
        in->router[2 * CK_X + i] = i % 2 ? -0.0f : 0.0f;
    }
    fill_big(in->moe_bias, CK_X, 7, false);
    for (int i = 0; i < 3 * CK_X && st == KN_OK; i++) {
        enum quant_type t = moe_types[i / CK_X];
        size_t rb = 0;
        st = make_rows(t, CK_E, 200 + (uint64_t)i * 7, &in->exps_data[i], &rb, err);
        if (st == KN_OK)
            st = kern_weight_init(&in->exps[i], t, CK_E, CK_E, in->exps_data[i], (size_t)CK_E * rb,
                                  true, err);
    }
    /* Embedding tables share the weights' storage when the type has one, else their own. */
    for (size_t i = 0; i < sizeof table_types / sizeof table_types[0] && st == KN_OK; i++) {
        enum quant_type t = table_types[i];
        size_t rb = (size_t)in->w[t].row_bytes;
        in->table[t] = (struct kern_weight){.type = t, .N = CK_VOCAB, .K = CK_E,
                                            .data = in->w_data[t], .row_bytes = rb};
    }
    if (st != KN_OK) {
        in_free(in);
        return st;
    }
    *out = in;
    return KN_OK;
}

/* ================================================================ one backend's run */

struct ck_ctx {
    struct kern_backend *be;
    struct kern_stream *s;
    const struct kern_backend_ops *op;
    struct ck_out *out;
    struct kern_buf *bufs[192]; /* every buffer of the run, freed at its end */
    int n_bufs;
    struct kn_err *err;
    bool failed;
};

static struct kern_buf *ck_keep(struct ck_ctx *c, struct kern_buf *b)
{
    if (!b || c->n_bufs == (int)(sizeof c->bufs / sizeof c->bufs[0])) {
        kern_buf_free(b);
        c->failed = true;
        return NULL;
    }
    return c->bufs[c->n_bufs++] = b;
}

static struct kern_buf *ck_alloc(struct ck_ctx *c, size_t bytes)
{
    return c->failed ? NULL : ck_keep(c, c->op->alloc(c->be, bytes, true, c->err));
}

static struct kern_buf *ck_upload(struct ck_ctx *c, const float *v, int64_t n)
{
    return c->failed ? NULL : ck_keep(c, c->op->upload(c->be, v, n, c->err));
}

/* Copies bytes of b (from off) into the record of op (read after the pass ends). */
static void ck_record(struct ck_ctx *c, const char *op, const struct kern_buf *b, size_t off,
                      size_t bytes)
{
    struct ck_out *o = c->out;
    if (c->failed || o->n_rec == CK_MAX_RECS || o->n + bytes > o->cap) {
        c->failed = true;
        return;
    }
    struct ck_rec *r = &o->rec[o->n_rec++];
    snprintf(r->op, sizeof r->op, "%s", op);
    r->off = o->n;
    r->bytes = bytes;
    c->op->to_host(c->s, b, off, o->bytes + o->n, bytes);
    o->n += bytes;
}

static void ck_set(struct ck_ctx *c, struct kern_buf *b, const float *x, size_t n)
{
    c->op->from_host(c->s, b, 0, x, n * sizeof(float));
}

/* Every row-wise op, each product type, embeddings, logits (pass 1). */
static void ck_rowwise(struct ck_ctx *c, const struct ck_in *in, float *logits,
                       const struct kern_backend *subject)
{
    const size_t TE = (size_t)CK_TS * CK_E, B = TE * sizeof(float);
    struct kern_buf *x = ck_alloc(c, B), *x2 = ck_alloc(c, B), *y = ck_alloc(c, B);
    struct kern_buf *tab = ck_alloc(c, (size_t)CK_TS * CK_D * sizeof(float));
    struct kern_buf *gain = ck_upload(c, in->gain, CK_E), *bias = ck_upload(c, in->bias, CK_E);
    struct kern_buf *hgain = ck_upload(c, in->gain, CK_D);
    struct kern_buf *ys[3] = {ck_alloc(c, B), ck_alloc(c, B), ck_alloc(c, B)};
    struct kern_buf *wb[QT_COUNT] = {0}, *tb[QT_COUNT] = {0};
    for (size_t i = 0; i < sizeof mm_types / sizeof mm_types[0] && !c->failed; i++)
        wb[mm_types[i]] = ck_keep(c, c->op->upload_weight(c->be, &in->w[mm_types[i]], c->err));
    for (size_t i = 0; i < sizeof table_types / sizeof table_types[0] && !c->failed; i++)
        tb[table_types[i]] = ck_keep(c, c->op->upload_rows(c->be, &in->table[table_types[i]], c->err));
    if (c->failed)
        return;
    const struct kern_backend_ops *op = c->op;
    struct kern_stream *s = c->s;
    char name[64];

    ck_set(c, x, in->x, TE);
    ck_set(c, x2, in->x2, TE);
    ck_record(c, "from_host/to_host", x, 0, B);
    op->rmsnorm(s, y, x, gain, CK_TS, CK_E, 1e-6f);
    ck_record(c, "rmsnorm", y, 0, B);
    op->rmsnorm(s, y, x, hgain, CK_TS * CK_E / CK_D, CK_D, 1e-5f);
    ck_record(c, "rmsnorm per head", y, 0, B);
    op->rmsnorm(s, y, x, NULL, CK_TS, CK_E, 1e-5f);
    ck_record(c, "rmsnorm without gain", y, 0, B);
    ck_set(c, y, in->x, TE);
    op->rmsnorm(s, y, y, gain, CK_TS, CK_E, 1e-6f);
    ck_record(c, "rmsnorm in place", y, 0, B);
    ck_set(c, y, in->x, TE);
    op->add(s, y, x2, (int64_t)TE);
    ck_record(c, "add", y, 0, B);
    ck_set(c, y, in->x, TE);
    op->add_rows(s, y, bias, CK_TS, CK_E);
    ck_record(c, "add_rows", y, 0, B);
    ck_set(c, y, in->x, TE);
    op->scale(s, y, 0.3711f, (int64_t)TE);
    ck_record(c, "scale", y, 0, B);
    for (int k = 0; k < 2; k++) {
        ck_set(c, y, in->x, TE);
        op->glu(s, k ? KERN_GLU_GEGLU : KERN_GLU_SWIGLU, y, x2, (int64_t)TE);
        ck_record(c, k ? "glu geglu" : "glu swiglu", y, 0, B);
    }
    /* the BERT family's blocks, when the device under test has them */
    if (kern_backend_has_ops(subject, KERN_OP_BIT(layernorm))) {
        op->layernorm(s, y, x, gain, bias, CK_TS, CK_E, 1e-12f);
        ck_record(c, "layernorm", y, 0, B);
        op->layernorm(s, y, x, NULL, NULL, CK_TS, CK_E, 1e-5f);
        ck_record(c, "layernorm without gain and bias", y, 0, B);
        ck_set(c, y, in->x, TE);
        op->layernorm(s, y, y, gain, bias, CK_TS, CK_E, 1e-12f);
        ck_record(c, "layernorm in place", y, 0, B);
    }
    if (kern_backend_has_ops(subject, KERN_OP_BIT(gelu))) {
        ck_set(c, y, in->x, TE);
        op->gelu(s, y, (int64_t)TE);
        ck_record(c, "gelu", y, 0, B);
    }
    for (int r = 0; r < 2; r++) {
        op->rope_table(s, tab, &in->rope[r], in->pos, CK_TS);
        snprintf(name, sizeof name, "rope_table (%s)", r ? "neox, yarn" : "norm");
        ck_record(c, name, tab, 0, (size_t)CK_TS * (size_t)in->rope[r].n_rot * sizeof(float));
        ck_set(c, y, in->x, TE);
        op->rope(s, y, tab, &in->rope[r], CK_TS, CK_E / CK_D, CK_D);
        snprintf(name, sizeof name, "rope (%s)", r ? "neox, yarn" : "norm");
        ck_record(c, name, y, 0, B);
    }
    const int64_t rows[3] = {3, 0, 4};
    op->gather(s, y, x, rows, 3, CK_E);
    ck_record(c, "gather", y, 0, 3 * CK_E * sizeof(float));
    for (size_t i = 0; i < sizeof table_types / sizeof table_types[0]; i++) {
        enum quant_type t = table_types[i];
        op->embed(s, y, tb[t], in->tokens, CK_TS, i % 2 ? 1.0f : 16.0f);
        snprintf(name, sizeof name, "embed (%s)", quant_type_name(t));
        ck_record(c, name, y, 0, B);
    }
    /* One product of each type, then three of mixed activation kinds sharing x. */
    const size_t YB = (size_t)CK_TS * CK_N * sizeof(float);
    for (size_t i = 0; i < sizeof mm_types / sizeof mm_types[0]; i++) {
        enum quant_type t = mm_types[i];
        const struct kern_buf *w1 = wb[t];
        op->matmul(s, 1, &w1, x, CK_TS, &ys[0]);
        snprintf(name, sizeof name, "matmul (%s)", quant_type_name(t));
        ck_record(c, name, ys[0], 0, YB);
    }
    const struct kern_buf *w3[3] = {wb[QT_Q4_K], wb[QT_Q8_0], wb[QT_F16]};
    op->matmul(s, 3, w3, x, CK_TS, ys);
    for (int i = 0; i < 3; i++)
        ck_record(c, "matmul (three products sharing x)", ys[i], 0, YB);
    op->logits(s, wb[QT_Q6_K], NULL, x, CK_TS, logits);
    op->logits(s, wb[QT_Q5_1], bias, x, CK_TS, logits + CK_TS * CK_N);
}

/* kv_store and attention: two sequences in one batch (caches of f32, f16 and q8_0, causal
 * and windowed), then one more token each in a second pass that reads the first's cache. */
static void ck_attention(struct ck_ctx *c, const struct ck_in *in, uint32_t kv_type, int32_t window,
                         float softcap, bool sinks)
{
    const size_t QD = CK_H * CK_D, KD = CK_HKV * CK_D;
    uint64_t rb = 0; /* bytes of one head's row in the cache */
    if (!quant_row_size(kv_type, CK_D, &rb)) {
        c->failed = true;
        return;
    }
    const size_t cache = (size_t)CK_CTX * CK_HKV * (size_t)rb;
    struct kern_buf *q = ck_alloc(c, CK_T * QD * sizeof(float));
    struct kern_buf *k = ck_alloc(c, CK_T * KD * sizeof(float));
    struct kern_buf *v = ck_alloc(c, CK_T * KD * sizeof(float));
    struct kern_buf *o = ck_alloc(c, CK_T * QD * sizeof(float));
    struct kern_buf *ka = ck_alloc(c, cache), *va = ck_alloc(c, cache);
    struct kern_buf *kb = ck_alloc(c, cache), *vb = ck_alloc(c, cache);
    /* gpt-oss's sinks: one logit per head, some above every score, some below */
    struct kern_buf *sk = sinks ? ck_upload(c, in->bias, CK_H) : NULL;
    if (c->failed)
        return;
    const struct kern_backend_ops *op = c->op;
    struct kern_stream *s = c->s;
    /* Sequence A: tokens 0..39 at positions 0..39; B: tokens 40..47 at 0..7. */
    int32_t pos[CK_T];
    for (int t = 0; t < CK_T; t++)
        pos[t] = t < 40 ? t : t - 40;
    struct kern_kv_run runs[2] = {
        {.t0 = 0, .n = 40, .k = ka, .v = va, .n_ctx = CK_CTX, .n_kv = 40},
        {.t0 = 40, .n = 8, .k = kb, .v = vb, .n_ctx = CK_CTX, .n_kv = 8},
    };
    struct kern_attn_batch b = {
        .q = q, .k_new = k, .v_new = v, .out = o, .pos = pos, .n_tok = CK_T, .runs = runs,
        .n_runs = 2, .kv_type = kv_type, .n_head = CK_H, .n_head_kv = CK_HKV, .head_dim = CK_D,
        .scale = 0.125f, .window = window, .softcap = softcap, .sinks = sk,
    };
    char name[80];
    const char *kind = softcap > 0 ? ", soft-capped" : sinks ? ", sinks" : "";
    snprintf(name, sizeof name, "attention (%s cache, window %d%s)", quant_type_name(kv_type),
             (int)window, kind);
    op->begin(s);
    ck_set(c, q, in->qkv, CK_T * QD);
    ck_set(c, k, in->qkv + CK_T * QD, CK_T * KD);
    ck_set(c, v, in->qkv + CK_T * (QD + KD), CK_T * KD);
    void (*attend)(struct kern_stream *, const struct kern_attn_batch *) =
        softcap > 0 ? op->attention_softcap : sinks ? op->attention_sinks : op->attention;
    op->kv_store(s, &b);
    attend(s, &b);
    ck_record(c, name, o, 0, CK_T * QD * sizeof(float));
    for (int g = 0; g < CK_HKV; g++) {
        size_t head = (size_t)g * CK_CTX * (size_t)rb;
        ck_record(c, "kv_store (keys)", ka, head, 40 * (size_t)rb);
        ck_record(c, "kv_store (values)", vb, head, 8 * (size_t)rb);
    }
    if (op->end(s, c->err) != KN_OK) {
        c->failed = true;
        return;
    }
    /* Pass 2: the next token of each sequence, attending to what pass 1 stored. */
    int32_t pos2[2] = {40, 8};
    runs[0] = (struct kern_kv_run){.t0 = 0, .n = 1, .k = ka, .v = va, .n_ctx = CK_CTX, .n_kv = 41};
    runs[1] = (struct kern_kv_run){.t0 = 1, .n = 1, .k = kb, .v = vb, .n_ctx = CK_CTX, .n_kv = 9};
    b.pos = pos2;
    b.n_tok = 2;
    op->begin(s);
    const float *next = in->qkv + CK_T * (QD + 2 * KD);
    ck_set(c, q, next, 2 * QD);
    ck_set(c, k, next + 2 * QD, 2 * KD);
    ck_set(c, v, next + 2 * (QD + KD), 2 * KD);
    op->kv_store(s, &b);
    attend(s, &b);
    snprintf(name, sizeof name, "attention, next pass (%s cache, window %d%s)",
             quant_type_name(kv_type), (int)window, kind);
    ck_record(c, name, o, 0, 2 * QD * sizeof(float));
    if (op->end(s, c->err) != KN_OK)
        c->failed = true;
}

/* shortconv (lfm2): two sequences in one batch, then one more token each in a second pass
 * that reads the rows the first stored. */
static void ck_shortconv(struct ck_ctx *c, const struct ck_in *in)
{
    enum { L = 3, NA = 6, NB = 3, CTX = 8 };
    const size_t E = CK_E, row = E * sizeof(float);
    struct kern_buf *bcx = ck_alloc(c, (NA + NB) * 3 * row), *out = ck_alloc(c, (NA + NB) * row);
    struct kern_buf *ra = ck_alloc(c, CTX * row), *rb = ck_alloc(c, CTX * row);
    struct kern_buf *w = ck_upload(c, in->x2, (int64_t)E * L);
    if (c->failed)
        return;
    const struct kern_backend_ops *op = c->op;
    struct kern_stream *s = c->s;
    int32_t pos[NA + NB] = {0, 1, 2, 3, 4, 5, 0, 1, 2};
    struct kern_kv_run runs[2] = {
        {.t0 = 0, .n = NA, .k = ra, .n_ctx = CTX, .n_kv = NA},
        {.t0 = NA, .n = NB, .k = rb, .n_ctx = CTX, .n_kv = NB},
    };
    struct kern_conv_batch b = {.bcx = bcx, .out = out, .w = w, .pos = pos, .n_tok = NA + NB,
                                .runs = runs, .n_runs = 2, .n_embd = CK_E, .n_taps = L};
    op->begin(s);
    ck_set(c, bcx, in->x, (NA + NB) * 3 * E);
    op->shortconv(s, &b);
    ck_record(c, "shortconv", out, 0, (NA + NB) * row);
    ck_record(c, "shortconv (stored rows)", ra, 0, NA * row);
    if (op->end(s, c->err) != KN_OK) {
        c->failed = true;
        return;
    }
    int32_t pos2[2] = {NA, NB};
    runs[0] = (struct kern_kv_run){.t0 = 0, .n = 1, .k = ra, .n_ctx = CTX, .n_kv = NA + 1};
    runs[1] = (struct kern_kv_run){.t0 = 1, .n = 1, .k = rb, .n_ctx = CTX, .n_kv = NB + 1};
    b.pos = pos2;
    b.n_tok = 2;
    op->begin(s);
    ck_set(c, bcx, in->x2 + 3 * E, 2 * 3 * E);
    op->shortconv(s, &b);
    ck_record(c, "shortconv, next pass", out, 0, 2 * row);
    ck_record(c, "shortconv, next pass (stored rows)", rb, 0, (NB + 1) * row);
    if (op->end(s, c->err) != KN_OK)
        c->failed = true;
}

/* Routing (softmax with normalised weights; sigmoid with a bias and a scale) and the
 * expert products of a batch whose tokens share some experts and not others (pass 4). */
static void ck_moe(struct ck_ctx *c, const struct ck_in *in, bool ffn, bool oai)
{
    const struct kern_backend_ops *op = c->op;
    struct kern_buf *logits = ck_alloc(c, sizeof in->router), *bias = ck_upload(c, in->moe_bias, CK_X);
    struct kern_buf *ids = ck_alloc(c, CK_T * CK_K * sizeof(int32_t));
    struct kern_buf *w = ck_alloc(c, CK_T * CK_K * sizeof(float));
    struct kern_buf *x = ck_alloc(c, CK_T * CK_E * sizeof(float));
    struct kern_buf *y = ck_alloc(c, CK_T * CK_E * sizeof(float));
    struct kern_buf *ex[3 * CK_X];
    for (int i = 0; i < 3 * CK_X; i++)
        ex[i] = c->failed ? NULL : ck_keep(c, op->upload_weight(c->be, &in->exps[i], c->err));
    if (c->failed)
        return;
    struct kern_stream *s = c->s;
    op->begin(s);
    ck_set(c, logits, in->router, CK_T * CK_X);
    ck_set(c, x, in->x, CK_T * CK_E);
    const struct kern_moe_gate sig = {.gating = KERN_MOE_SIGMOID, .n_expert = CK_X, .n_used = CK_K,
                                      .norm = false, .scale = 2.5f};
    op->moe_route(s, &sig, logits, bias, CK_T, ids, w);
    ck_record(c, "moe_route (sigmoid, bias, scale): experts", ids, 0, CK_T * CK_K * sizeof(int32_t));
    ck_record(c, "moe_route (sigmoid, bias, scale): weights", w, 0, CK_T * CK_K * sizeof(float));
    const struct kern_moe_gate soft = {.gating = KERN_MOE_SOFTMAX, .n_expert = CK_X, .n_used = CK_K,
                                       .norm = true, .scale = 1.0f};
    op->moe_route(s, &soft, logits, NULL, CK_T, ids, w);
    ck_record(c, "moe_route (softmax, normalised): experts", ids, 0, CK_T * CK_K * sizeof(int32_t));
    ck_record(c, "moe_route (softmax, normalised): weights", w, 0, CK_T * CK_K * sizeof(float));
    const struct kern_moe_ffn f = {.n_expert = CK_X, .n_used = CK_K, .act = KERN_GLU_SWIGLU,
                                   .gate = (const struct kern_buf *const *)ex,
                                   .up = (const struct kern_buf *const *)ex + CK_X,
                                   .down = (const struct kern_buf *const *)ex + 2 * CK_X};
    if (ffn) {
        op->moe_ffn(s, &f, x, ids, w, CK_T, y);
        ck_record(c, "moe_ffn (48 tokens)", y, 0, CK_T * CK_E * sizeof(float));
        op->moe_ffn(s, &f, x, ids, w, 1, y);
        ck_record(c, "moe_ffn (one token)", y, 0, CK_E * sizeof(float));
    }
    if (oai && !c->failed) {
        /* gpt-oss: softmax over the chosen logits, the clamped SwiGLU and expert biases
         * (x2's rows times 16, so that gate and up outputs cross the clamps at +-7) */
        const struct kern_moe_gate sw = {.gating = KERN_MOE_SOFTMAX_WEIGHT, .n_expert = CK_X,
                                         .n_used = CK_K, .norm = false, .scale = 1.0f};
        op->moe_route(s, &sw, logits, NULL, CK_T, ids, w);
        ck_record(c, "moe_route (softmax of the chosen): experts", ids, 0, CK_T * CK_K * sizeof(int32_t));
        ck_record(c, "moe_route (softmax of the chosen): weights", w, 0, CK_T * CK_K * sizeof(float));
        static float big[CK_T * CK_E]; /* read during the pass (the CPU refers to it) */
        for (int i = 0; i < CK_T * CK_E; i++)
            big[i] = in->x2[i] * 16.0f;
        struct kern_buf *bb[3 * CK_X];
        for (int i = 0; i < 3 * CK_X; i++)
            bb[i] = ck_upload(c, big + (i % CK_T) * CK_E, CK_E);
        if (c->failed)
            return;
        struct kern_moe_ffn fo = f;
        fo.act = KERN_GLU_SWIGLU_OAI;
        fo.gate_b = (const struct kern_buf *const *)bb;
        fo.up_b = (const struct kern_buf *const *)bb + CK_X;
        fo.down_b = (const struct kern_buf *const *)bb + 2 * CK_X;
        op->moe_ffn_oai(s, &fo, x, ids, w, CK_T, y);
        ck_record(c, "moe_ffn_oai (48 tokens)", y, 0, CK_T * CK_E * sizeof(float));
        op->moe_ffn_oai(s, &fo, x, ids, w, 1, y);
        ck_record(c, "moe_ffn_oai (one token)", y, 0, CK_E * sizeof(float));
    }
    if (op->end(s, c->err) != KN_OK)
        c->failed = true;
}

/* A check that calls optional ops (backend.h KERN_BACKEND_OPS) runs only when the backend
 * under test, subject, has every op it calls, so that the CPU's reference run records the
 * same outputs. */
static enum kn_status ck_run(struct kern_backend *be, const struct kern_backend *subject,
                             struct kern_pool *pool, const struct ck_in *in, struct ck_out *out,
                             struct kn_err *err)
{
    const bool with_softcap = kern_backend_has_ops(subject, KERN_OP_BIT(attention_softcap));
    const bool with_sinks = kern_backend_has_ops(subject, KERN_OP_BIT(attention_sinks));
    const bool with_conv = kern_backend_has_ops(subject, KERN_OP_BIT(shortconv));
    const bool with_moe = kern_backend_has_ops(subject, KERN_OP_BIT(moe_route) | KERN_OP_BIT(moe_ffn));
    const bool with_oai = kern_backend_has_ops(subject, KERN_OP_BIT(moe_route) | KERN_OP_BIT(moe_ffn_oai));
    memset(out, 0, sizeof *out);
    out->cap = (size_t)1 << 22;
    out->bytes = kn_malloc(out->cap, err);
    if (!out->bytes)
        return KN_E_NOMEM;
    const struct kern_stream_shape shape = {.max_tokens = CK_T, .n_embd = CK_E, .n_ff = CK_E,
                                            .n_head = CK_H, .n_head_kv = CK_HKV, .head_dim = CK_D,
                                            .n_expert = CK_X, .n_expert_used = CK_K, .n_ff_exp = CK_E};
    struct ck_ctx c = {.be = be, .op = be->ops, .out = out, .err = err};
    c.s = be->ops->stream_create(be, &shape, pool, err);
    if (!c.s)
        return err ? err->status : KN_E_NOMEM;
    float logits[2 * CK_TS * CK_N];
    be->ops->begin(c.s);
    /* the steps a self-test's progress names (kn_progress_stage): the device's, or the
     * CPU's run that records the reference */
    const char *who = be == subject ? be->name : "CPU reference";
    kn_progress_stage("%s: row-wise ops and products", who);
    ck_rowwise(&c, in, logits, subject);
    enum kn_status st = be->ops->end(c.s, err);
    if (st == KN_OK && !c.failed) {
        /* logits land in host memory when the pass ends */
        if (out->n + sizeof logits <= out->cap && out->n_rec + 2 <= CK_MAX_RECS) {
            for (int i = 0; i < 2; i++) {
                struct ck_rec *r = &out->rec[out->n_rec++];
                snprintf(r->op, sizeof r->op, "%s", i ? "logits (q5_1, bias)" : "logits (q6_k)");
                r->off = out->n;
                r->bytes = sizeof logits / 2;
                memcpy(out->bytes + out->n, logits + i * CK_TS * CK_N, r->bytes);
                out->n += r->bytes;
            }
        }
        const uint32_t kv_types[3] = {QT_F32, QT_F16, QT_Q8_0};
        const int32_t windows[2] = {0, 37};
        for (int i = 0; i < 6 && !c.failed; i++) {
            kn_progress_stage("%s: attention (%s cache, window %d)", who,
                              quant_type_name(kv_types[i % 3]), windows[i / 3]);
            ck_attention(&c, in, kv_types[i % 3], windows[i / 3], 0.0f, false);
        }
        kn_progress_stage("%s: attention with soft-cap and sinks", who);
        /* Gemma 2's soft-capped scores (a cap the scores of these inputs reach), when the
         * device under test has the op */
        for (int i = 0; i < 2 && !c.failed && with_softcap; i++)
            ck_attention(&c, in, kv_types[i], windows[i], 0.5f, false);
        /* gpt-oss's sinks, when the device under test has them */
        for (int i = 0; i < 2 && !c.failed && with_sinks; i++)
            ck_attention(&c, in, kv_types[i], windows[1 - i], 0.0f, true);
        kn_progress_stage("%s: short convolution", who);
        if (with_conv && !c.failed)
            ck_shortconv(&c, in);
        kn_progress_stage("%s: experts", who);
        if (!c.failed && (with_moe || with_oai))
            ck_moe(&c, in, with_moe, with_oai);
    }
    for (int i = 0; i < c.n_bufs; i++)
        kern_buf_free(c.bufs[i]);
    be->ops->stream_free(c.s);
    if (st == KN_OK && c.failed)
        st = kn_fail(err, KN_E_INTERNAL, "check: a buffer could not be made or recorded (%s)",
                     err && err->msg[0] ? err->msg : "out of record space");
    return st;
}

/* ================================================================ compare */

enum kn_status kern_backend_check(struct kern_backend *be, struct kern_pool *pool, struct kn_err *err)
{
    struct ck_in *in = NULL;
    struct ck_out ref = {0}, got = {0};
    /* An optional op the backend lacks is not checked (model_open keeps its layers off,
     * naming the op). */
    enum kn_status st = in_make(&in, err);
    if (st == KN_OK)
        st = ck_run(kern_backend_cpu(), be, pool, in, &ref, err);
    if (st == KN_OK) {
        st = ck_run(be, be, pool, in, &got, err);
        if (st != KN_OK)
            kn_err_prefix(err, be->name);
    }
    if (st == KN_OK && (got.n_rec != ref.n_rec || got.n != ref.n))
        st = kn_fail(err, KN_E_INTERNAL, "%s: the check recorded %d outputs, the CPU %d", be->name,
                     got.n_rec, ref.n_rec);
    for (int i = 0; i < ref.n_rec && st == KN_OK; i++) {
        const struct ck_rec *r = &ref.rec[i];
        for (size_t j = 0; j < r->bytes; j++)
            if (got.bytes[r->off + j] != ref.bytes[r->off + j]) {
                st = kn_fail(err, KN_E_MISMATCH,
                             "%s: %s differs from the CPU reference at byte %zu of %zu; the device does not compute %s",
                             be->name, r->op, j, r->bytes, KN_NUMERICS);
                break;
            }
    }
    free(ref.bytes);
    free(got.bytes);
    in_free(in);
    return st;
}
