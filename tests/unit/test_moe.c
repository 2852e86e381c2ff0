/* test_moe.c: mixture-of-experts models (qwen3moe, gpt-oss) on tiny synth files.
 *   - loading: the experts' hyperparameters and routing rule, one weight per expert;
 *   - routing invariance, directly: a token's experts, weights and expert output bits are
 *     the same alone and inside a batch whose other tokens pick some of the same experts
 *     and others (the CPU groups the batch's rows by expert);
 *   - the forward pass: logits bit-identical whatever the batch size (chunking), the
 *     output rows asked for, the thread count and the ISA level, with f32 and f16 caches. */
#include "check.h"

#include "kernels/backend.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "synth/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_TOK = 40, BATCH_T = 24 };

static int32_t toks[N_TOK];

static void make_model(char *path, enum synth_arch arch, enum synth_ftype ftype)
{
    struct kn_err err = {0};
    struct synth_params p = {.arch = arch, .ftype = ftype, .seed = 11, .threads = 1,
                             .name = "moe-test"};
    CHECK(synth_preset("tiny", &arch, &p.dims, &err) == KN_OK);
    if (arch == SYNTH_GPTOSS)
        p.dims.n_swa = 8; /* the window slides within the test's 40 positions */
    CHECKF(synth_write(&p, path, &err) == KN_OK, "%s", err.msg);
}

static void test_hparams(struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    CHECK(hp->arch == MODEL_ARCH_QWEN3MOE);
    CHECK_STR(model_arch_name(hp->arch), "qwen3moe");
    CHECK(hp->n_expert == 16 && hp->n_expert_used == 4 && hp->n_ff_exp == 256);
    CHECK(hp->moe_gate.gating == KERN_MOE_SOFTMAX && hp->moe_gate.norm && hp->moe_gate.scale == 1.0f);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_moe *mo = m->layers[il].moe;
        CHECK(mo != NULL && mo->bias == NULL);
        if (!mo)
            continue;
        CHECK(mo->router.N == 16 && mo->router.K == 256 && mo->router.type == QT_F32);
        CHECK(mo->exps[0].N == 256 && mo->exps[0].K == 256);      /* gate (F, E) */
        CHECK(mo->exps[2 * 16].N == 256 && mo->exps[2 * 16].K == 256); /* down (E, F) */
        /* expert e's slice starts e matrices into the 3-D tensor */
        CHECK((const uint8_t *)mo->exps[1].data ==
              (const uint8_t *)mo->exps[0].data + 256 * mo->exps[0].row_bytes);
        CHECK(m->layers[il].ffn_gate.data == NULL); /* no dense FFN */
    }
}

/* gpt-oss: routing, biases and sinks as loaded. */
static void test_hparams_gptoss(struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    CHECK(hp->arch == MODEL_ARCH_GPTOSS);
    CHECK_STR(model_arch_name(hp->arch), "gpt-oss");
    CHECK(hp->n_expert == 16 && hp->n_expert_used == 4 && hp->n_ff_exp == 256);
    CHECK(hp->moe_gate.gating == KERN_MOE_SOFTMAX_WEIGHT && !hp->moe_gate.norm &&
          hp->moe_gate.scale == 1.0f);
    CHECK(hp->n_swa == 8 && hp->swa_layer[0] && !hp->swa_layer[1]);
    CHECK(hp->rope_scaling == MODEL_ROPE_SCALING_YARN && hp->rope_freq_scale == 1.0f / 32.0f &&
          hp->n_ctx_orig_yarn == 256 && hp->rope_mode == MODEL_ROPE_NEOX);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        CHECK(L->attn_sinks && L->bq && L->bk && L->bv && L->bo && L->ffn_norm && !L->post_attn_norm);
        CHECK(L->moe && L->moe->router_b && L->moe->gate_b && L->moe->up_b && L->moe->down_b &&
              L->moe->d_exp_b && L->moe->d_router_b);
    }
}

/* ---------------------------------------------------------------- the routing rule */

/* kern_moe_route against docs/numerics.md "Mixture of experts", case by case. */
static void test_route_rule(void)
{
    int32_t id[4];
    float w[4];
    /* Equal logits: the lowest indices, in order, each 1/4 after normalisation. */
    const float flat[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    struct kern_moe_gate g = {.gating = KERN_MOE_SOFTMAX, .n_expert = 6, .n_used = 4, .norm = true,
                              .scale = 1.0f};
    kern_moe_route(&g, flat, NULL, 1, id, w);
    CHECK(id[0] == 0 && id[1] == 1 && id[2] == 2 && id[3] == 3);
    CHECK(w[0] == 0.25f && w[3] == 0.25f);
    /* A tie for the top between experts 4 and 1, then +0 and -0 tied (experts 0 and 5). */
    const float tie[6] = {0.0f, 3.0f, -1.0f, -2.0f, 3.0f, -0.0f};
    kern_moe_route(&g, tie, NULL, 1, id, w);
    CHECK(id[0] == 1 && id[1] == 4 && id[2] == 0 && id[3] == 5);
    CHECK(w[0] == w[1] && w[2] == w[3] && w[0] > w[2]);
    /* Without normalisation the weights are the softmax probabilities themselves. */
    float p[6];
    kern_softmax(p, tie, 6);
    g.norm = false;
    kern_moe_route(&g, tie, NULL, 1, id, w);
    CHECK(w[0] == p[1] && w[1] == p[4] && w[2] == p[0] && w[3] == p[5]);
    /* The normalisation: sum in rank order, then one division each. */
    g.norm = true;
    g.n_used = 3;
    kern_moe_route(&g, tie, NULL, 1, id, w);
    float sum = (p[1] + p[4]) + p[0];
    CHECK(w[0] == p[1] / sum && w[1] == p[4] / sum && w[2] == p[0] / sum);
    /* Sigmoid gating with a selection bias: the bias picks, the weights stay sigmoid(l),
     * then the scale multiplies them. */
    const float l[4] = {2.0f, 0.0f, -1.0f, 1.0f}, bias[4] = {0.0f, 0.0f, 5.0f, 0.0f};
    struct kern_moe_gate sg = {.gating = KERN_MOE_SIGMOID, .n_expert = 4, .n_used = 2, .norm = false,
                               .scale = 2.5f};
    kern_moe_route(&sg, l, bias, 1, id, w);
    CHECK(id[0] == 2 && id[1] == 0);
    CHECK(w[0] == (1.0f / (1.0f + kern_expf(1.0f))) * 2.5f);
    CHECK(w[1] == (1.0f / (1.0f + kern_expf(-2.0f))) * 2.5f);
    /* Weights that sum to less than the clamp are divided by the clamp. */
    const float tiny[2] = {-200.0f, -200.0f};
    struct kern_moe_gate tg = {.gating = KERN_MOE_SIGMOID, .n_expert = 2, .n_used = 2, .norm = true,
                               .scale = 1.0f};
    kern_moe_route(&tg, tiny, NULL, 1, id, w);
    float s0 = 1.0f / (1.0f + kern_expf(200.0f));
    CHECK(w[0] == s0 / KERN_MOE_NORM_MIN && w[1] == w[0]);
    /* A NaN logit is never chosen over a number (sigmoid keeps it NaN). */
    const float nan_l[3] = {__builtin_nanf(""), -1.0f, 1.0f};
    sg = (struct kern_moe_gate){.gating = KERN_MOE_SIGMOID, .n_expert = 3, .n_used = 2, .scale = 1.0f};
    kern_moe_route(&sg, nan_l, NULL, 1, id, w);
    CHECK(id[0] == 2 && id[1] == 1);
    /* gpt-oss: the k largest logits (ties to the lower index), then the softmax of those
     * k logits in rank order. */
    const float ol[6] = {1.0f, 4.0f, -2.0f, 4.0f, 0.5f, 3.0f};
    struct kern_moe_gate og = {.gating = KERN_MOE_SOFTMAX_WEIGHT, .n_expert = 6, .n_used = 3,
                               .norm = false, .scale = 1.0f};
    kern_moe_route(&og, ol, NULL, 1, id, w);
    CHECK(id[0] == 1 && id[1] == 3 && id[2] == 5);
    const float chosen[3] = {4.0f, 4.0f, 3.0f};
    float sw[3];
    kern_softmax(sw, chosen, 3);
    CHECK(w[0] == sw[0] && w[1] == sw[1] && w[2] == sw[2] && w[0] == w[1] && w[0] > w[2]);
}

/* ---------------------------------------------------------------- routing invariance */

struct moe_run {
    struct kern_stream *s;
    struct kern_buf *x, *logits, *ids, *w, *y;
};

/* Routes and runs T rows x (T, E) through layer il's experts on the CPU backend. */
static void moe_rows(struct moe_run *r, const struct model *m, int64_t il, const float *x, int64_t T,
                     int32_t *ids, float *w, float *y)
{
    const struct model_hparams *hp = &m->hp;
    const struct model_moe *mo = m->layers[il].moe;
    const struct kern_backend_ops *op = r->s->ops;
    const int64_t E = hp->n_embd, X = hp->n_expert, k = hp->n_expert_used;
    const struct kern_buf *router = mo->d_router;
    const struct kern_moe_ffn f = {.n_expert = (int32_t)X, .n_used = (int32_t)k, .act = KERN_GLU_SWIGLU,
                                   .gate = (const struct kern_buf *const *)mo->d_exps,
                                   .up = (const struct kern_buf *const *)mo->d_exps + X,
                                   .down = (const struct kern_buf *const *)mo->d_exps + 2 * X};
    struct kn_err err = {0};
    op->begin(r->s);
    op->from_host(r->s, r->x, 0, x, (size_t)(T * E) * sizeof(float));
    op->matmul(r->s, 1, &router, r->x, T, &r->logits);
    op->moe_route(r->s, &hp->moe_gate, r->logits, NULL, T, r->ids, r->w);
    op->moe_ffn(r->s, &f, r->x, r->ids, r->w, T, r->y);
    op->to_host(r->s, r->ids, 0, ids, (size_t)(T * k) * sizeof(int32_t));
    op->to_host(r->s, r->w, 0, w, (size_t)(T * k) * sizeof(float));
    op->to_host(r->s, r->y, 0, y, (size_t)(T * E) * sizeof(float));
    CHECK(op->end(r->s, &err) == KN_OK);
}

static bool shares_expert(const int32_t *a, const int32_t *b, int64_t k)
{
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
            if (a[i] == b[j])
                return true;
    return false;
}

static void test_routing_alone_vs_batch(const struct model *m, struct kern_pool *pool)
{
    const struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, k = hp->n_expert_used;
    struct kn_err err = {0};
    struct kern_backend *be = kern_backend_cpu();
    const struct kern_stream_shape shape = {
        .max_tokens = BATCH_T, .n_embd = E, .n_ff = hp->n_ff, .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim_k, .n_expert = hp->n_expert,
        .n_expert_used = k, .n_ff_exp = hp->n_ff_exp};
    struct moe_run r = {.s = be->ops->stream_create(be, &shape, pool, &err)};
    CHECKF(r.s != NULL, "%s", err.msg);
    if (!r.s)
        return;
    r.x = be->ops->alloc(be, (size_t)(BATCH_T * E) * sizeof(float), true, &err);
    r.y = be->ops->alloc(be, (size_t)(BATCH_T * E) * sizeof(float), true, &err);
    r.logits = be->ops->alloc(be, (size_t)(BATCH_T * hp->n_expert) * sizeof(float), true, &err);
    r.ids = be->ops->alloc(be, (size_t)(BATCH_T * k) * sizeof(int32_t), true, &err);
    r.w = be->ops->alloc(be, (size_t)(BATCH_T * k) * sizeof(float), true, &err);
    CHECK(r.x && r.y && r.logits && r.ids && r.w);

    /* Rows like normed hidden states: seeded values of unit spread. */
    float *x = malloc((size_t)(BATCH_T * E) * sizeof(float)), *y = malloc((size_t)(BATCH_T * E) * sizeof(float));
    float y1[1024], w1[64], wb[BATCH_T * 64];
    int32_t id1[64], idb[BATCH_T * 64];
    uint64_t s = 12345;
    for (int64_t i = 0; i < BATCH_T * E; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int64_t)(s >> 40) - (1 << 23)) * 0x1p-22f;
    }
    const int64_t probe = 7, twin = 19; /* the probe row and a copy of it */
    memcpy(x + twin * E, x + probe * E, (size_t)E * sizeof(float));
    for (int64_t il = 0; il < hp->n_layer; il++) {
        moe_rows(&r, m, il, x + probe * E, 1, id1, w1, y1);
        {
            /* the probe in the middle of a batch, and a copy of it further on */
            moe_rows(&r, m, il, x, BATCH_T, idb, wb, y);
            int n_share = 0, n_disjoint = 0;
            for (int64_t t = 0; t < BATCH_T; t++) {
                if (t == probe || t == twin)
                    continue;
                if (shares_expert(idb + t * k, id1, k))
                    n_share++;
                else
                    n_disjoint++;
            }
            /* the batch really mixes tokens that share the probe's experts and not */
            CHECKF(n_share > 0 && n_disjoint > 0, "layer %lld: %d rows share an expert, %d none",
                   (long long)il, n_share, n_disjoint);
            const int64_t rows[2] = {probe, twin};
            for (int j = 0; j < 2; j++) {
                CHECK(memcmp(idb + rows[j] * k, id1, (size_t)k * sizeof(int32_t)) == 0);
                CHECK(memcmp(wb + rows[j] * k, w1, (size_t)k * sizeof(float)) == 0);
                CHECKF(memcmp(y + rows[j] * E, y1, (size_t)E * sizeof(float)) == 0,
                       "layer %lld: row %lld's expert output differs from the token alone",
                       (long long)il, (long long)rows[j]);
            }
            /* rank order: weights descending, ties to the lower index; normalised */
            float sum = 0.0f;
            for (int64_t j = 0; j < k; j++) {
                sum += w1[j];
                if (j > 0)
                    CHECK(w1[j] < w1[j - 1] || (w1[j] == w1[j - 1] && id1[j] > id1[j - 1]));
            }
            CHECK(sum > 0.999f && sum < 1.001f);
        }
        for (int64_t T = 2; T <= BATCH_T; T += 11) {
            /* the probe first in batches of 2, 13 and 24 rows */
            float tmp[1024];
            memcpy(tmp, x, (size_t)E * sizeof(float));
            memcpy(x, x + probe * E, (size_t)E * sizeof(float));
            memcpy(x + probe * E, tmp, (size_t)E * sizeof(float));
            moe_rows(&r, m, il, x, T, idb, wb, y);
            CHECK(memcmp(idb, id1, (size_t)k * sizeof(int32_t)) == 0);
            CHECK(memcmp(y, y1, (size_t)E * sizeof(float)) == 0);
            memcpy(x + probe * E, x, (size_t)E * sizeof(float));
            memcpy(x, tmp, (size_t)E * sizeof(float));
        }
    }
    free(x);
    free(y);
    struct kern_buf *bufs[] = {r.x, r.y, r.logits, r.ids, r.w};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        kern_buf_free(bufs[i]);
    r.s->ops->stream_free(r.s);
}

/* ---------------------------------------------------------------- forward invariance */

/* Logits of every position, evaluated in chunks of `batch`, output rows reversed. */
static void all_logits(struct model *m, struct kern_pool *pool, int64_t batch, enum model_kv_type kt,
                       float *out)
{
    struct kn_err err = {0};
    struct model_kv kv;
    struct model_fwd *f = NULL;
    const int64_t V = m->hp.n_vocab;
    CHECKF(model_kv_init(&kv, m, 64, kt, &err) == KN_OK, "%s", err.msg);
    CHECKF(model_fwd_create(&f, m, batch, pool, &err) == KN_OK, "%s", err.msg);
    float *tmp = malloc((size_t)(batch * V) * sizeof(float));
    int32_t pos[N_TOK];
    int64_t rows[N_TOK];
    for (int64_t done = 0; done < N_TOK;) {
        int64_t c = N_TOK - done < batch ? N_TOK - done : batch;
        for (int64_t i = 0; i < c; i++) {
            pos[i] = (int32_t)(done + i);
            rows[i] = c - 1 - i;
        }
        CHECKF(model_forward(f, &kv, toks + done, pos, c, rows, c, tmp, &err) == KN_OK, "%s", err.msg);
        for (int64_t i = 0; i < c; i++)
            memcpy(out + (done + c - 1 - i) * V, tmp + i * V, (size_t)V * sizeof(float));
        done += c;
    }
    free(tmp);
    model_fwd_free(f);
    model_kv_free(&kv);
}

static void test_invariance(struct model *m, const char *what)
{
    const int64_t V = m->hp.n_vocab;
    const size_t bytes = (size_t)(N_TOK * V) * sizeof(float);
    float *ref = malloc(bytes), *got = malloc(bytes);
    struct kn_err err = {0};
    struct kern_pool *p1 = NULL, *p3 = NULL;
    CHECK(kern_pool_create(1, &p1, &err) == KN_OK);
    CHECK(kern_pool_create(3, &p3, &err) == KN_OK);
    all_logits(m, p1, 1, MODEL_KV_F32, ref);
    const int64_t batches[] = {40, 7, 3, 16};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        all_logits(m, i % 2 ? p3 : p1, batches[i], MODEL_KV_F32, got);
        CHECKF(memcmp(ref, got, bytes) == 0, "%s: logits differ with batch %lld", what,
               (long long)batches[i]);
    }
    /* A few rows only (the last layer, its experts included, runs on them alone). */
    {
        struct model_kv kv;
        struct model_fwd *f = NULL;
        CHECK(model_kv_init(&kv, m, 64, MODEL_KV_F32, &err) == KN_OK);
        CHECK(model_fwd_create(&f, m, N_TOK, p3, &err) == KN_OK);
        int32_t pos[N_TOK];
        for (int i = 0; i < N_TOK; i++)
            pos[i] = i;
        int64_t rows[3] = {39, 5, 17};
        float *few = malloc((size_t)(3 * V) * sizeof(float));
        CHECK(model_forward(f, &kv, toks, pos, N_TOK, rows, 3, few, &err) == KN_OK);
        for (int j = 0; j < 3; j++)
            CHECKF(memcmp(few + j * V, ref + rows[j] * V, (size_t)V * sizeof(float)) == 0,
                   "%s: row %lld differs when only 3 rows are requested", what, (long long)rows[j]);
        free(few);
        model_fwd_free(f);
        model_kv_free(&kv);
    }
    for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
        if (!kn_isa_supported((enum kn_isa)isa))
            continue;
        CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
        all_logits(m, p3, 5, MODEL_KV_F32, got);
        CHECKF(memcmp(ref, got, bytes) == 0, "%s: logits differ with ISA %s", what,
               kn_isa_name((enum kn_isa)isa));
    }
    CHECK(kn_isa_set(kn_isa_best(), &err) == KN_OK);
    all_logits(m, p1, 1, MODEL_KV_F16, ref);
    all_logits(m, p3, 9, MODEL_KV_F16, got);
    CHECKF(memcmp(ref, got, bytes) == 0, "%s: f16 cache logits differ with batch 9", what);
    kern_pool_free(p1);
    kern_pool_free(p3);
    free(ref);
    free(got);
}

int main(void)
{
    uint64_t s = 99;
    for (int i = 0; i < N_TOK; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = i == 0 ? 1 : (int32_t)(3 + (s >> 33) % 509);
    }
    test_route_rule();
    /* gpt-oss last, as its files come: MXFP4 experts, Q8_0 elsewhere (its f32 formulas are
     * test_model_ref.py's; one file keeps this test's time under qemu in CI) */
    static const enum synth_ftype types[] = {SYNTH_Q4_K_M, SYNTH_F32, SYNTH_MXFP4_MOE};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const bool gptoss = i == 2;
        char path[] = "/tmp/kn_moe_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        if (fd < 0)
            break;
        close(fd);
        make_model(path, gptoss ? SYNTH_GPTOSS : SYNTH_QWEN3MOE, types[i]);
        struct kn_err err = {0};
        struct model *m = NULL;
        CHECKF(model_open(&m, path, NULL, &err) == KN_OK, "%s", err.msg);
        if (m) {
            struct kern_pool *pool = NULL;
            CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
            char what[64];
            snprintf(what, sizeof what, "%s %s", gptoss ? "gpt-oss" : "qwen3moe", synth_ftype_name(types[i]));
            if (gptoss) {
                test_hparams_gptoss(m);
            } else {
                test_hparams(m);
                test_routing_alone_vs_batch(m, pool);
            }
            test_invariance(m, what);
            kern_pool_free(pool);
            model_close(m);
        }
        unlink(path);
    }
    CHECK_DONE();
}
