/* test_backend_seam.c: the device seam (kernels/backend.h) is real. A second backend,
 * "ref", lives only here: it keeps every buffer in its own memory with no host address
 * (as a GPU would: the forward pass crashes if it touches activations, caches or weights
 * other than through the seam), copies the weights at upload, and routes every op to the
 * portable scalar references (kern_ops_get(KN_ISA_SCALAR), kern_matmul_rows_ref, the
 * _ref activation quantizers). Models opened on it, wholly or for their first layers
 * only (the --gpu-layers split), give the CPU backend's logits bit for bit on
 * aidreams260K and on a tiny synth model of every architecture, one pass per forward. */
#include "check.h"

#include "kernels/backend.h"
#include "kernels/kern_internal.h"
#include "model/model.h"
#include "synth/synth.h"

#include "model_script.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================================================ the ref backend */

struct ref_buf {
    struct kern_buf base;
    struct kern_weight w; /* weights: the description over the copied bytes */
};

struct ref_backend {
    struct kern_backend base;
    int passes, ends, outside, live_bufs;
    bool in_pass;
};

struct ref_stream {
    struct kern_stream base;
};

static struct ref_backend *RB(const struct kern_stream *s)
{
    return (struct ref_backend *)s->be;
}

/* Every op checks it runs inside a pass. */
static void op_enter(struct kern_stream *s)
{
    if (!RB(s)->in_pass)
        RB(s)->outside++;
}

static float *D(const struct kern_buf *b)
{
    return (float *)b->dev;
}

static const char *ref_numerics(const struct kern_backend *be)
{
    (void)be;
    return KN_NUMERICS;
}

static struct kern_buf *ref_new(struct kern_backend *be, size_t bytes, const void *src,
                                struct kn_err *err)
{
    struct ref_buf *b = kn_calloc(1, sizeof *b, err);
    void *p = b ? kn_aligned_alloc(bytes ? bytes : 64, err) : NULL;
    if (!p) {
        free(b);
        return NULL;
    }
    if (src)
        memcpy(p, src, bytes);
    else
        memset(p, 0x7f, bytes); /* "undefined" contents that are not zeros */
    b->base = (struct kern_buf){.be = be, .host = NULL, .dev = p, .bytes = bytes};
    ((struct ref_backend *)be)->live_bufs++;
    return &b->base;
}

static struct kern_buf *ref_alloc(struct kern_backend *be, size_t bytes, bool zero,
                                  struct kn_err *err)
{
    struct kern_buf *b = ref_new(be, bytes, NULL, err);
    if (b && zero)
        memset(b->dev, 0, bytes);
    return b;
}

static struct kern_buf *ref_upload(struct kern_backend *be, const float *host, int64_t n,
                                   struct kn_err *err)
{
    return ref_new(be, (size_t)n * sizeof(float), host, err);
}

/* Weights and tables: a copy of the file's rows, described by a kern_weight with no
 * repacked copy (the reference reads the GGML layout). */
static struct kern_buf *ref_upload_weight(struct kern_backend *be, const struct kern_weight *w,
                                          struct kn_err *err)
{
    struct kern_buf *b = ref_new(be, (size_t)w->N * w->row_bytes, w->data, err);
    if (b) {
        struct ref_buf *r = (struct ref_buf *)b;
        r->w = *w;
        r->w.data = b->dev;
        r->w.packed = NULL;
        r->w.packed_bytes = 0;
        b->w = &r->w;
    }
    return b;
}

static void ref_free(struct kern_backend *be, struct kern_buf *b)
{
    ((struct ref_backend *)be)->live_bufs--;
    free(b->dev);
    free(b);
}

static struct kern_stream *ref_stream_create(struct kern_backend *be,
                                             const struct kern_stream_shape *shape,
                                             struct kern_pool *pool, struct kn_err *err)
{
    (void)shape;
    (void)pool;
    struct ref_stream *s = kn_calloc(1, sizeof *s, err);
    if (s)
        s->base = (struct kern_stream){be, be->ops};
    return s ? &s->base : NULL;
}

static void ref_stream_free(struct kern_stream *s)
{
    free(s);
}

static void ref_begin(struct kern_stream *s)
{
    if (RB(s)->in_pass)
        RB(s)->outside++; /* nested pass */
    RB(s)->in_pass = true;
    RB(s)->passes++;
}

static enum kn_status ref_end(struct kern_stream *s, struct kn_err *err)
{
    (void)err;
    op_enter(s);
    RB(s)->in_pass = false;
    RB(s)->ends++;
    return KN_OK;
}

static const struct kern_ops *SC(void)
{
    return kern_ops_get(KN_ISA_SCALAR);
}

static void ref_embed(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *table,
                      const int32_t *tokens, int64_t T, float scale)
{
    op_enter(s);
    const struct kern_weight *w = table->w;
    for (int64_t t = 0; t < T; t++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)tokens[t] * w->row_bytes;
        if (!kern_row_to_f32(w->type, row, D(x) + t * w->K, w->K))
            CHECK(quant_dequantize_row(w->type, row, D(x) + t * w->K, w->K));
    }
    if (scale != 1.0f)
        SC()->scale(D(x), D(x), scale, T * w->K);
}

static void ref_rope_table(struct kern_stream *s, struct kern_buf *tab, const struct kern_rope *rope,
                           const int32_t *pos, int64_t T)
{
    op_enter(s);
    SC()->rope_table(rope, pos, T, D(tab));
}

static void ref_rope(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *tab,
                     const struct kern_rope *rope, int64_t T, int64_t H, int64_t Dh)
{
    op_enter(s);
    SC()->rope(rope, D(x), H * Dh, T, H, Dh, D(tab));
}

static void ref_rmsnorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                        const struct kern_buf *w, int64_t rows, int64_t n, float eps)
{
    op_enter(s);
    SC()->rmsnorm(D(y), n, D(x), n, w ? D(w) : NULL, rows, n, eps);
}

static void ref_layernorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                          const struct kern_buf *w, const struct kern_buf *b, int64_t rows,
                          int64_t n, float eps)
{
    op_enter(s);
    kern_layernorm(D(y), n, D(x), n, w ? D(w) : NULL, b ? D(b) : NULL, rows, n, eps);
}

static void ref_gelu(struct kern_stream *s, struct kern_buf *x, int64_t n)
{
    op_enter(s);
    SC()->gelu(D(x), D(x), n);
}

/* y = x . w^T with the reference quantizer and the reference product. */
static void ref_product(const struct kern_weight *w, const float *x, int64_t M, float *y)
{
    enum kern_act_kind kind = kern_act_kind_for(w->type);
    struct kern_act a = {.kind = kind, .M = M, .K = w->K, .x = x};
    uint8_t *q = NULL;
    if (kind != KERN_ACT_F32) {
        a.row_bytes = kern_act_row_bytes(kind, w->K);
        q = malloc((size_t)M * a.row_bytes);
        CHECK(q != NULL);
        for (int64_t m = 0; m < M; m++) {
            if (kind == KERN_ACT_Q8_32)
                kern_quantize_row_q8f_ref(x + m * w->K, w->K,
                                          (struct kern_block_q8f *)(q + m * a.row_bytes));
            else
                kern_quantize_row_q8k_ref(x + m * w->K, w->K,
                                          (struct block_q8_K *)(q + m * a.row_bytes));
        }
        a.q = q;
    }
    kern_matmul_rows_ref(w, &a, y, w->N, 0, w->N);
    free(q);
}

static void ref_matmul(struct kern_stream *s, int n, const struct kern_buf *const *w,
                       const struct kern_buf *x, int64_t M, struct kern_buf *const *y)
{
    op_enter(s);
    for (int i = 0; i < n; i++)
        ref_product(w[i]->w, D(x), M, D(y[i]));
}

static void ref_add_rows(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *b,
                         int64_t M, int64_t n)
{
    op_enter(s);
    for (int64_t t = 0; t < M; t++)
        SC()->add(D(y) + t * n, D(y) + t * n, D(b), n);
}

static void ref_add(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *a, int64_t n)
{
    op_enter(s);
    SC()->add(D(y), D(y), D(a), n);
}

static void ref_scale(struct kern_stream *s, struct kern_buf *y, float v, int64_t n)
{
    op_enter(s);
    SC()->scale(D(y), D(y), v, n);
}

static void ref_glu(struct kern_stream *s, enum kern_glu kind, struct kern_buf *g,
                    const struct kern_buf *u, int64_t n)
{
    op_enter(s);
    if (kind == KERN_GLU_GEGLU)
        SC()->geglu(D(g), D(g), D(u), n);
    else
        SC()->swiglu(D(g), D(g), D(u), n);
}

static void ref_gather(struct kern_stream *s, struct kern_buf *dst, const struct kern_buf *src,
                       const int64_t *rows, int64_t n_rows, int64_t n)
{
    op_enter(s);
    CHECK(dst != src);
    for (int64_t j = 0; j < n_rows; j++)
        memcpy(D(dst) + j * n, D(src) + rows[j] * n, (size_t)n * sizeof(float));
}

static void ref_kv_store(struct kern_stream *s, const struct kern_attn_batch *b)
{
    op_enter(s);
    const int64_t Dh = b->head_dim, KD = b->n_head_kv * Dh;
    const size_t row = kern_kv_row_bytes(b->kv_type, Dh);
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        CHECK(run->k->be == s->be && run->v->be == s->be);
        for (int64_t t = run->t0; t < run->t0 + run->n; t++)
            for (int64_t g = 0; g < b->n_head_kv; g++) {
                size_t off = ((size_t)g * (size_t)run->n_ctx + (size_t)b->pos[t]) * row;
                CHECK(kern_kv_store(b->kv_type, (uint8_t *)run->k->dev + off, D(b->k_new) + t * KD + g * Dh, Dh));
                CHECK(kern_kv_store(b->kv_type, (uint8_t *)run->v->dev + off, D(b->v_new) + t * KD + g * Dh, Dh));
            }
    }
}

static void ref_attention(struct kern_stream *s, const struct kern_attn_batch *b)
{
    op_enter(s);
    const int64_t Dh = b->head_dim, QD = b->n_head * Dh;
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        struct kern_attn_args a = {
            .q = D(b->q) + run->t0 * QD, .q_stride = QD, .q_pos = b->pos + run->t0, .n_q = run->n,
            .k = run->k->dev, .v = run->v->dev, .k_stride = Dh, .v_stride = Dh,
            .k_head_stride = run->n_ctx * Dh, .v_head_stride = run->n_ctx * Dh,
            .kv_type = b->kv_type, .n_kv = run->n_kv, .n_head = b->n_head,
            .n_head_kv = b->n_head_kv, .head_dim = b->head_dim, .scale = b->scale,
            .softcap = b->softcap, .window = b->window, .out = D(b->out) + run->t0 * QD, .out_stride = QD,
            .sinks = b->sinks ? D(b->sinks) : NULL,
        };
        struct kn_err err = {0};
        CHECKF(kern_attn_check(&a, &err) == KN_OK, "%s", err.msg);
        SC()->attn(&a, 0, run->n * b->n_head);
    }
}

static void ref_logits(struct kern_stream *s, const struct kern_buf *w, const struct kern_buf *b,
                       const struct kern_buf *x, int64_t M, float *logits)
{
    op_enter(s);
    ref_product(w->w, D(x), M, logits);
    if (b)
        for (int64_t t = 0; t < M; t++)
            SC()->add(logits + t * w->w->N, logits + t * w->w->N, D(b), w->w->N);
}

static void ref_shortconv(struct kern_stream *s, const struct kern_conv_batch *b)
{
    op_enter(s);
    const int64_t E = b->n_embd, L = b->n_taps;
    const float *bcx = D(b->bcx);
    CHECK(L >= 1 && L <= KERN_CONV_MAX_L);
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        CHECK(run->k->be == s->be);
        for (int64_t t = run->t0; t < run->t0 + run->n; t++)
            SC()->mul(D(run->k) + (int64_t)b->pos[t] * E, bcx + t * 3 * E, bcx + t * 3 * E + 2 * E, E);
    }
    const float *rows[KERN_CONV_MAX_L];
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        for (int64_t t = run->t0; t < run->t0 + run->n; t++) {
            for (int64_t i = 0; i < L; i++) {
                int64_t p = (int64_t)b->pos[t] - (L - 1) + i;
                rows[i] = p >= 0 ? D(run->k) + p * E : NULL;
            }
            kern_shortconv(D(b->out) + t * E, bcx + t * 3 * E + E, rows, D(b->w), L, E);
        }
    }
}

static void ref_to_host(struct kern_stream *s, const struct kern_buf *b, size_t off, void *dst,
                        size_t bytes)
{
    op_enter(s);
    CHECK(off + bytes <= b->bytes);
    memcpy(dst, (const uint8_t *)b->dev + off, bytes);
}

static void ref_from_host(struct kern_stream *s, struct kern_buf *b, size_t off, const void *src,
                          size_t bytes)
{
    op_enter(s);
    CHECK(off + bytes <= b->bytes);
    memcpy((uint8_t *)b->dev + off, src, bytes);
}

static void ref_moe_route(struct kern_stream *s, const struct kern_moe_gate *g,
                          const struct kern_buf *logits, const struct kern_buf *bias, int64_t T,
                          struct kern_buf *ids, struct kern_buf *w)
{
    op_enter(s);
    kern_moe_route(g, D(logits), bias ? D(bias) : NULL, T, ids->dev, D(w));
}

/* Every token alone, its experts one after the other: no grouping at all. */
static void ref_moe_ffn(struct kern_stream *s, const struct kern_moe_ffn *f, const struct kern_buf *x,
                        const struct kern_buf *ids, const struct kern_buf *w, int64_t T,
                        struct kern_buf *y)
{
    op_enter(s);
    const int32_t *id = ids->dev;
    const int64_t k = f->n_used, E = f->down[0]->w->N, F = f->gate[0]->w->N;
    float *g = malloc((size_t)F * sizeof(float)), *u = malloc((size_t)F * sizeof(float));
    float *e = malloc((size_t)E * sizeof(float));
    CHECK(g && u && e);
    for (int64_t t = 0; t < T; t++) {
        float *yt = D(y) + t * E;
        for (int64_t r = 0; r < k; r++) {
            int32_t ex = id[t * k + r];
            ref_product(f->gate[ex]->w, D(x) + t * E, 1, g);
            ref_product(f->up[ex]->w, D(x) + t * E, 1, u);
            if (f->gate_b) /* gpt-oss's expert biases */
                SC()->add(g, g, D(f->gate_b[ex]), F);
            if (f->up_b)
                SC()->add(u, u, D(f->up_b[ex]), F);
            if (f->act == KERN_GLU_GEGLU)
                SC()->geglu(g, g, u, F);
            else if (f->act == KERN_GLU_SWIGLU_OAI)
                SC()->swiglu_oai(g, g, u, F);
            else
                SC()->swiglu(g, g, u, F);
            ref_product(f->down[ex]->w, g, 1, e);
            if (f->down_b)
                SC()->add(e, e, D(f->down_b[ex]), E);
            SC()->scale(r == 0 ? yt : e, e, D(w)[t * k + r], E);
            if (r > 0)
                SC()->add(yt, yt, e, E);
        }
    }
    free(g);
    free(u);
    free(e);
}

static const struct kern_backend_ops ref_ops = {
    .numerics = ref_numerics,
    .alloc = ref_alloc,
    .upload = ref_upload,
    .upload_weight = ref_upload_weight,
    .upload_rows = ref_upload_weight,
    .free = ref_free,
    .stream_create = ref_stream_create,
    .stream_free = ref_stream_free,
    .begin = ref_begin,
    .end = ref_end,
    .embed = ref_embed,
    .rope_table = ref_rope_table,
    .rope = ref_rope,
    .rmsnorm = ref_rmsnorm,
    .matmul = ref_matmul,
    .add_rows = ref_add_rows,
    .add = ref_add,
    .scale = ref_scale,
    .glu = ref_glu,
    .gather = ref_gather,
    .kv_store = ref_kv_store,
    .attention = ref_attention,
    .attention_softcap = ref_attention,
    .logits = ref_logits,
    .shortconv = ref_shortconv,
    .to_host = ref_to_host,
    .from_host = ref_from_host,
    .moe_route = ref_moe_route,
    .moe_ffn = ref_moe_ffn,
    .attention_sinks = ref_attention,
    .moe_ffn_oai = ref_moe_ffn,
    .layernorm = ref_layernorm,
    .gelu = ref_gelu,
};

static struct ref_backend g_ref = {.base = {.ops = &ref_ops, .name = "ref"}};

/* ================================================================ the checks */

/* Runs the script on the CPU, wholly on ref, and split (ref runs the first `split`
 * layers), and compares every logit's bits. */
static void compare(const char *what, const char *path, int64_t split, enum model_kv_type kt,
                    struct kern_pool *pool)
{
    static const int32_t prompt[] = {1, 303, 433, 360, 281, 269, 435, 447, 300, 12};
    struct runner cpu, all, part;
    if (!runner_open(&cpu, path, &g_ref.base, 0, kt, pool))
        return;
    const int64_t V = cpu.m->hp.n_vocab, L = cpu.m->hp.n_layer;
    CHECK(cpu.m->layers[0].be == kern_backend_cpu() && cpu.m->dev == NULL);
    size_t n = (size_t)STEPS * ROWS * (size_t)V;
    float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float)), *c = calloc(n, sizeof(float));
    int32_t pr[10];
    for (int i = 0; i < 10; i++)
        pr[i] = prompt[i] % (int32_t)V;
    run_script(&cpu, pr, 10, a);
    int live0 = g_ref.live_bufs;
    if (runner_open(&all, path, &g_ref.base, L + 3, kt, pool)) {
        CHECK(all.m->n_dev_layers == L && all.m->layers[L - 1].be == &g_ref.base);
        CHECK(all.kv[0].k[0] == NULL && all.kv[0].kb[0]->host == NULL); /* device-only cache */
        int passes = g_ref.passes;
        run_script(&all, pr, 10, b);
        /* one pass per forward call: 4 + 9 decode steps */
        CHECK_EQ_INT(g_ref.passes - passes, 4 + STEPS - 3);
        CHECK_EQ_INT(g_ref.ends, g_ref.passes);
        CHECKF(memcmp(a, b, n * sizeof(float)) == 0, "%s: ref backend logits differ from the CPU's", what);
        runner_close(&all);
    }
    if (runner_open(&part, path, &g_ref.base, split, kt, pool)) {
        CHECK(part.m->layers[split - 1].be == &g_ref.base && part.m->layers[split].be == kern_backend_cpu());
        CHECK(part.kv[0].k[split - 1] == NULL && part.kv[0].k[split] != NULL);
        run_script(&part, pr, 10, c);
        CHECKF(memcmp(a, c, n * sizeof(float)) == 0, "%s: split at layer %lld differs from the CPU",
               what, (long long)split);
        runner_close(&part);
    }
    CHECK_EQ_INT(g_ref.live_bufs, live0); /* every buffer freed through its backend */
    CHECK_EQ_INT(g_ref.outside, 0);
    CHECK(!g_ref.in_pass);
    runner_close(&cpu);
    free(a);
    free(b);
    free(c);
}

/* The BERT family's layers ask for layernorm, and bert's for gelu too (nomic-bert's
 * feed-forward is a SwiGLU): a device without them is refused, naming the op and layer 0;
 * one without gelu takes nomic-bert whole. */
static void test_bert_refusals(const char *path)
{
    static const struct {
        enum synth_arch arch;
        size_t off; /* the op taken out */
        const char *want; /* NULL: the model opens */
    } cases[] = {
        {SYNTH_BERT, offsetof(struct kern_backend_ops, gelu),
         "layer 0 needs the gelu op, which holey lacks (used by bert's feed-forward layers)"},
        {SYNTH_BERT, offsetof(struct kern_backend_ops, layernorm), "layer 0 needs the layernorm op"},
        {SYNTH_NOMIC_BERT, offsetof(struct kern_backend_ops, layernorm), "layer 0 needs the layernorm op"},
        {SYNTH_NOMIC_BERT, offsetof(struct kern_backend_ops, gelu), NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct kn_err err = {0};
        struct synth_params p = {.arch = cases[i].arch, .ftype = SYNTH_Q8_0, .seed = 3, .threads = 1,
                                 .name = "seam"};
        enum synth_arch arch = cases[i].arch;
        CHECK(synth_preset("tiny", &arch, &p.dims, &err) == KN_OK);
        CHECKF(synth_check_dims(arch, &p.dims, &err) == KN_OK, "%s", err.msg);
        CHECKF(synth_write(&p, path, &err) == KN_OK, "%s", err.msg);
        struct kern_backend_ops ops = ref_ops;
        void (*none)(void) = NULL;
        memcpy((char *)&ops + cases[i].off, &none, sizeof none);
        struct ref_backend dev = {.base = {.ops = &ops, .name = "holey"}};
        struct model_load_opts lo = {.repack = true, .device = &dev.base, .device_layers = 99};
        struct model *m = NULL;
        enum kn_status st = model_open(&m, path, &lo, &err);
        if (cases[i].want) {
            CHECKF(st == KN_E_UNSUPPORTED && m == NULL, "%s: %s", synth_arch_name(arch), err.msg);
            CHECKF(strstr(err.msg, cases[i].want) != NULL, "%s", err.msg);
        } else {
            CHECKF(st == KN_OK && m != NULL, "%s: %s", synth_arch_name(arch), err.msg);
            model_close(m);
        }
        CHECK_EQ_INT(dev.live_bufs, 0);
    }
}

static void test_synth(struct kern_pool *pool)
{
    static const struct {
        enum synth_arch arch;
        enum synth_ftype ftype;
        enum model_kv_type kt;
    } cases[] = {
        {SYNTH_LLAMA, SYNTH_Q4_K_M, MODEL_KV_F32},
        {SYNTH_QWEN2, SYNTH_Q8_0, MODEL_KV_F16},
        {SYNTH_QWEN3, SYNTH_Q5_1, MODEL_KV_F32},
        {SYNTH_GEMMA3, SYNTH_Q4_K_M, MODEL_KV_F16},
        {SYNTH_QWEN3, SYNTH_Q4_K_M, MODEL_KV_Q8_0},
        {SYNTH_LFM2, SYNTH_Q4_K_M, MODEL_KV_F16}, /* split after its first (conv) layer */
        {SYNTH_LFM2MOE, SYNTH_Q8_0, MODEL_KV_F32},
        {SYNTH_QWEN3MOE, SYNTH_Q4_K_M, MODEL_KV_F32},
        {SYNTH_QWEN3MOE, SYNTH_Q8_0, MODEL_KV_F16},
        {SYNTH_GEMMA2, SYNTH_Q8_0, MODEL_KV_F32},
        {SYNTH_PHI3, SYNTH_Q4_K_M, MODEL_KV_F16},
        {SYNTH_GRANITE, SYNTH_Q6_K, MODEL_KV_F32},
        {SYNTH_SMOLLM3, SYNTH_Q4_0, MODEL_KV_F16},
        {SYNTH_OLMO2, SYNTH_Q8_0, MODEL_KV_F32},
        {SYNTH_GPTOSS, SYNTH_MXFP4_MOE, MODEL_KV_F16},
        {SYNTH_GPTOSS, SYNTH_Q4_K_M, MODEL_KV_F32},
    };
    char path[] = "/tmp/kn_seam_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct kn_err err = {0};
        struct synth_params p = {.arch = cases[i].arch, .ftype = cases[i].ftype, .seed = 7,
                                 .threads = 1, .name = "seam"};
        enum synth_arch arch = cases[i].arch;
        CHECK(synth_preset("tiny", &arch, &p.dims, &err) == KN_OK);
        p.dims.n_swa = 6; /* gemma2/3's local layers: a window the script's positions pass */
        p.dims.attn_softcap = 0.05f; /* gemma2: caps these random weights' scores reach */
        p.dims.final_softcap = 0.2f;
        if (arch == SYNTH_PHI3) { /* LongRoPE's long factors (the caches hold 64), 32 of 64 dims rotated */
            p.dims.rope_orig_ctx = 32;
            p.dims.n_rot = 32;
        }
        CHECKF(synth_check_dims(arch, &p.dims, &err) == KN_OK, "%s", err.msg);
        CHECKF(synth_write(&p, path, &err) == KN_OK, "%s", err.msg);
        char what[64];
        snprintf(what, sizeof what, "synth %s %s", synth_arch_name(arch), synth_ftype_name(p.ftype));
        compare(what, path, 1, cases[i].kt, pool);
        if (arch == SYNTH_LFM2) {
            /* A device without the shortconv op: its conv layers are refused, by name. */
            struct kern_backend_ops ops = ref_ops;
            ops.shortconv = NULL;
            struct ref_backend noconv = {.base = {.ops = &ops, .name = "noconv"}};
            struct model_load_opts lo = {.repack = true, .device = &noconv.base, .device_layers = 1};
            struct model *m = NULL;
            CHECK(model_open(&m, path, &lo, &err) == KN_E_UNSUPPORTED && m == NULL);
            CHECKF(strstr(err.msg, "layer 0 needs the shortconv op, which noconv lacks (used by lfm2's "
                                   "short-convolution layers); give the device only the layers "
                                   "before it (--gpu-layers 0)"),
                   "%s", err.msg);
            CHECK_EQ_INT(noconv.live_bufs, 0);
            CHECKF(kern_backend_check(&noconv.base, pool, &err) == KN_OK, "%s", err.msg);
        }
        if (arch == SYNTH_QWEN3MOE && cases[i].ftype == SYNTH_Q8_0) { /* its last case */
            /* A device without the MoE ops: the model refuses to place an MoE layer on
             * it, naming the op, and frees what it uploaded. */
            struct kern_backend_ops ops = ref_ops;
            ops.moe_ffn = NULL;
            struct ref_backend nomoe = {.base = {.ops = &ops, .name = "nomoe"}};
            struct model_load_opts lo = {.repack = true, .device = &nomoe.base, .device_layers = 1};
            struct model *m = NULL;
            CHECK(model_open(&m, path, &lo, &err) == KN_E_UNSUPPORTED && m == NULL);
            CHECKF(strstr(err.msg, "layer 0 needs the moe_ffn op, which nomoe lacks (used by "
                                   "mixture-of-experts layers)") != NULL,
                   "%s", err.msg);
            CHECK_EQ_INT(nomoe.live_bufs, 0);
        }
        if (arch == SYNTH_GEMMA2) {
            /* A device without soft-capped attention: refused the same way, naming it. */
            struct kern_backend_ops ops = ref_ops;
            ops.attention_softcap = NULL;
            struct ref_backend nocap = {.base = {.ops = &ops, .name = "nocap"}};
            struct model_load_opts lo = {.repack = true, .device = &nocap.base, .device_layers = 1};
            struct model *m = NULL;
            CHECK(model_open(&m, path, &lo, &err) == KN_E_UNSUPPORTED && m == NULL);
            CHECKF(strstr(err.msg, "layer 0 needs the attention_softcap op, which nocap lacks") != NULL,
                   "%s", err.msg);
            CHECK_EQ_INT(nocap.live_bufs, 0);
        }
        if (arch == SYNTH_GPTOSS) {
            /* A device without gpt-oss's sinks, or without its expert FFN: refused, named. */
            for (int which = 0; which < 2; which++) {
                struct kern_backend_ops ops = ref_ops;
                if (which == 0)
                    ops.attention_sinks = NULL;
                else
                    ops.moe_ffn_oai = NULL;
                struct ref_backend dev = {.base = {.ops = &ops, .name = "nooai"}};
                struct model_load_opts lo = {.repack = true, .device = &dev.base, .device_layers = 1};
                struct model *m = NULL;
                CHECK(model_open(&m, path, &lo, &err) == KN_E_UNSUPPORTED && m == NULL);
                CHECKF(strstr(err.msg, which == 0 ? "layer 0 needs the attention_sinks op, which nooai lacks"
                                                  : "layer 0 needs the moe_ffn_oai op, which nooai lacks") != NULL,
                       "%s", err.msg);
                CHECK_EQ_INT(dev.live_bufs, 0);
                CHECKF(kern_backend_check(&dev.base, pool, &err) == KN_OK, "%s", err.msg);
            }
        }
    }
    test_bert_refusals(path); /* in the same scratch file */
    unlink(path);
}

/* A device that runs out of memory after a few uploads. */
static int g_uploads_left;
static struct kern_buf *failing_upload_weight(struct kern_backend *be, const struct kern_weight *w,
                                              struct kn_err *err)
{
    if (g_uploads_left-- <= 0) {
        kn_fail(err, KN_E_NOMEM, "device memory is full");
        return NULL;
    }
    return ref_upload_weight(be, w, err);
}

static void test_errors(const char *path)
{
    struct kn_err err = {0};
    struct model *m = NULL;
    struct model_load_opts lo = {.repack = true, .device = &g_ref.base, .device_layers = -1};
    CHECK(model_open(&m, path, &lo, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "device layers -1") != NULL);
    /* device 0 layers: the CPU runs everything and ref holds nothing */
    lo.device_layers = 0;
    int live = g_ref.live_bufs;
    CHECKF(model_open(&m, path, &lo, &err) == KN_OK, "%s", err.msg);
    if (m) {
        CHECK(m->dev == NULL && m->layers[0].be == kern_backend_cpu());
        CHECK_EQ_INT(g_ref.live_bufs, live);
        model_close(m);
    }
    CHECK_STR(kern_backend_cpu()->ops->numerics(kern_backend_cpu()), KN_NUMERICS);

    /* An upload that fails: the model does not open, says which layer and device, and
     * every buffer made before is freed. */
    struct kern_backend_ops ops = ref_ops;
    ops.upload_weight = failing_upload_weight;
    struct ref_backend full = {.base = {.ops = &ops, .name = "full"}};
    lo = (struct model_load_opts){.repack = true, .device = &full.base, .device_layers = 3};
    g_uploads_left = 9; /* layer 0's seven matrices, two of layer 1's */
    m = NULL;
    CHECK(model_open(&m, path, &lo, &err) == KN_E_NOMEM && m == NULL);
    CHECKF(strstr(err.msg, "layer 1 on full: device memory is full") != NULL, "%s", err.msg);
    CHECK_EQ_INT(full.live_bufs, 0);
}

/* kern_backend_check passes the ref backend and the CPU itself, and names the op of a
 * backend that computes one op differently. */
static void bad_rmsnorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                        const struct kern_buf *w, int64_t rows, int64_t n, float eps)
{
    ref_rmsnorm(s, y, x, w, rows, n, eps * 2.0f);
}

/* Flushes denormal outputs of the gated activation to zero, as a GPU with FTZ would. */
static void ftz_glu(struct kern_stream *s, enum kern_glu kind, struct kern_buf *g,
                    const struct kern_buf *u, int64_t n)
{
    ref_glu(s, kind, g, u, n);
    for (int64_t i = 0; i < n; i++)
        if (D(g)[i] != 0.0f && D(g)[i] > -0x1p-126f && D(g)[i] < 0x1p-126f)
            D(g)[i] = 0.0f;
}

/* Widens the sliding window by one position. */
static void wide_attention(struct kern_stream *s, const struct kern_attn_batch *b)
{
    struct kern_attn_batch w = *b;
    if (w.window)
        w.window++;
    ref_attention(s, &w);
}

/* A conv one tap short (as if the state kept one row too few). */
static void short_shortconv(struct kern_stream *s, const struct kern_conv_batch *b)
{
    struct kern_conv_batch w = *b;
    w.n_taps--;
    ref_shortconv(s, &w);
}

/* Breaks ties between router scores towards the higher expert index. */
static void tie_high_route(struct kern_stream *s, const struct kern_moe_gate *g,
                           const struct kern_buf *logits, const struct kern_buf *bias, int64_t T,
                           struct kern_buf *ids, struct kern_buf *w)
{
    /* reversing the experts turns "lower index first" into "higher index first" */
    const int64_t n = g->n_expert;
    float *rl = malloc((size_t)(T * n) * sizeof(float)), rb[KERN_MOE_MAX_EXPERTS];
    CHECK(rl != NULL);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i++)
            rl[t * n + i] = D(logits)[t * n + n - 1 - i];
    for (int64_t i = 0; bias && i < n; i++)
        rb[i] = D(bias)[n - 1 - i];
    op_enter(s);
    kern_moe_route(g, rl, bias ? rb : NULL, T, ids->dev, D(w));
    for (int64_t i = 0; i < T * g->n_used; i++)
        ((int32_t *)ids->dev)[i] = (int32_t)(n - 1) - ((int32_t *)ids->dev)[i];
    free(rl);
}

/* Sums a token's expert outputs in the opposite order (last rank first). */
static void reversed_moe_ffn(struct kern_stream *s, const struct kern_moe_ffn *f, const struct kern_buf *x,
                             const struct kern_buf *ids, const struct kern_buf *w, int64_t T,
                             struct kern_buf *y)
{
    const int64_t k = f->n_used;
    int32_t *id = ids->dev;
    float *wt = D(w);
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < k / 2; r++) {
            int32_t ti = id[t * k + r];
            float tw = wt[t * k + r];
            id[t * k + r] = id[t * k + k - 1 - r], wt[t * k + r] = wt[t * k + k - 1 - r];
            id[t * k + k - 1 - r] = ti, wt[t * k + k - 1 - r] = tw;
        }
    ref_moe_ffn(s, f, x, ids, w, T, y);
}

static void test_check(struct kern_pool *pool)
{
    struct kn_err err = {0};
    CHECKF(kern_backend_check(&g_ref.base, pool, &err) == KN_OK, "%s", err.msg);
    CHECKF(kern_backend_check(kern_backend_cpu(), pool, &err) == KN_OK, "%s", err.msg);
    CHECKF(kern_backend_check(&g_ref.base, NULL, &err) == KN_OK, "%s", err.msg);

    static const struct {
        const char *name, *op;
    } bad[] = {{"bad-norm", "rmsnorm"}, {"ftz", "glu swiglu"}, {"wide", "attention (f32 cache, window 37)"},
               {"tie-high", "moe_route (softmax, normalised): experts"},
               {"reversed", "moe_ffn (48 tokens)"}, {"short", "shortconv"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kern_backend_ops ops = ref_ops;
        if (i == 0)
            ops.rmsnorm = bad_rmsnorm;
        else if (i == 1)
            ops.glu = ftz_glu;
        else if (i == 2)
            ops.attention = wide_attention;
        else if (i == 3)
            ops.moe_route = tie_high_route;
        else if (i == 4)
            ops.moe_ffn = reversed_moe_ffn;
        else
            ops.shortconv = short_shortconv;
        struct ref_backend be = {.base = {.ops = &ops, .name = bad[i].name}};
        err = (struct kn_err){0};
        enum kn_status st = kern_backend_check(&be.base, pool, &err);
        CHECKF(st == KN_E_MISMATCH, "%s: %s", kn_status_str(st), err.msg);
        char want[128];
        snprintf(want, sizeof want, "%s: %s", bad[i].name, bad[i].op);
        CHECKF(strstr(err.msg, want) == err.msg && strstr(err.msg, "differs from the CPU reference"),
               "%s", err.msg);
        CHECK_EQ_INT(be.live_bufs, 0);
    }
}

/* The op table (backend.h KERN_BACKEND_OPS) drives the predicates: with any one op taken
 * out of a full table, a required one is named by kern_backend_missing_op, an optional one
 * only by kern_backend_missing_optional (with what needs it); kern_backend_first_missing
 * finds either in any set that holds it, and nothing in a set that does not. */
static void test_op_table(void)
{
    struct kern_backend *cpu = kern_backend_cpu();
    CHECK(kern_backend_missing_op(cpu) == NULL);
    char lack[256];
    CHECK_EQ_INT(kern_backend_missing_optional(cpu, lack, sizeof lack), 0);
    CHECK_STR(lack, "");
    CHECK(kern_backend_has_ops(cpu, ~(kern_op_set)0));
    CHECK(kern_backend_required_ops != 0 && kern_backend_has_ops(cpu, kern_backend_required_ops));
    int n_opt = 0;
    for (int i = 0; i < KERN_OP_COUNT; i++) {
        const struct kern_op_desc *d = &kern_backend_op_table[i];
        struct kern_backend_ops ops = *cpu->ops;
        void (*none)(void) = NULL;
        memcpy((char *)&ops + d->offset, &none, sizeof none);
        struct kern_backend be = {.ops = &ops, .name = "holey"};
        CHECKF(!kern_backend_has_op(&be, (enum kern_op)i), "%s", d->name);
        const kern_op_set bit = (kern_op_set)1 << i;
        CHECK(kern_backend_first_missing(&be, ~(kern_op_set)0) == (enum kern_op)i);
        CHECK(kern_backend_first_missing(&be, ~bit) == KERN_OP_COUNT);
        CHECK(!kern_backend_has_ops(&be, bit) && kern_backend_has_ops(&be, 0));
        CHECK(((kern_backend_required_ops & bit) != 0) == !d->optional);
        for (int j = 0; j < KERN_OP_COUNT; j++)
            CHECK(j == i || kern_backend_has_op(&be, (enum kern_op)j));
        int n = kern_backend_missing_optional(&be, lack, sizeof lack);
        if (d->optional) {
            n_opt++;
            CHECK(kern_backend_missing_op(&be) == NULL);
            CHECK_EQ_INT(n, 1);
            char want[256];
            snprintf(want, sizeof want, "%s (%s)", d->name, d->needs);
            CHECK_STR(lack, want);
        } else {
            CHECK(d->needs == NULL);
            CHECK_STR(kern_backend_missing_op(&be), d->name);
            CHECK_EQ_INT(n, 0);
        }
    }
    CHECK(n_opt >= 4);
    /* ops that the same layers need are listed together */
    struct kern_backend_ops ops = *cpu->ops;
    ops.moe_route = NULL;
    ops.moe_ffn = NULL;
    ops.attention_softcap = NULL;
    struct kern_backend be = {.ops = &ops, .name = "holey"};
    CHECK(kern_backend_has_ops(&be, KERN_OP_BIT(shortconv) | KERN_OP_BIT(moe_ffn_oai)));
    /* the first of a set in table order, whatever order the set was written in */
    CHECK(kern_backend_first_missing(&be, KERN_OP_BIT(attention_softcap) | KERN_OP_BIT(moe_ffn)) ==
          KERN_OP_moe_ffn);
    CHECK(kern_backend_first_missing(&be, KERN_OP_BIT(attention_softcap) | KERN_OP_BIT(gelu)) ==
          KERN_OP_attention_softcap);
    CHECK_EQ_INT(kern_backend_missing_optional(&be, lack, sizeof lack), 3);
    CHECK_STR(lack, "moe_route, moe_ffn (mixture-of-experts layers); attention_softcap "
                    "(gemma2's soft-capped attention layers)");
}

int main(void)
{
    char aidreams[1024];
    snprintf(aidreams, sizeof aidreams, "%s/models/aidreams260K.gguf", check_data_dir());
    struct kn_err err = {0};
    struct kern_pool *pool = NULL;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    test_op_table();
    test_errors(aidreams);
    test_check(pool);
    compare("aidreams260K", aidreams, 2, MODEL_KV_F32, pool);
    test_synth(pool);
    kern_pool_free(pool);
    CHECK_DONE();
}
