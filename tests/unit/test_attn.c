/* test_attn.c: attention over the KV cache. A query's output must be the same bits
 * whether it is computed in a prefill batch, alone in decode, in a chunked prefill (every
 * split point), in a draft-verification batch with later rows in the cache, in any thread
 * split, and on every ISA level; and it must be close to float64 softmax attention. */
#include <math.h>

#include "check.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "test_ops_common.h"

/* A test problem: a cache of P rows (plus spare rows after them), queries for every
 * position, all with row strides wider than a row. */
struct problem {
    int P, H, Hkv, D, window;
    uint32_t kv_type;
    bool head_major;  /* cache (Hkv, P + 16, D) instead of (P + 16, Hkv, D) */
    float scale;      /* 1/sqrt(D) unless a test sharpens it */
    float softcap;    /* 0: none (Gemma 2 caps scores) */
    const float *sinks; /* NULL, or H sink logits (gpt-oss) */
    int64_t q_stride, kv_stride;
    float *q;         /* (P, H, D) at q_stride */
    void *k, *v;      /* (P + 16, Hkv, D) at kv_stride */
    float *kf, *vf;   /* the same as f32 (what F16 widens to, what Q8_0 dequantizes to) */
};

/* Element i of kv head g at position p. */
static int64_t kv_index(const struct problem *pr, int64_t p, int64_t g, int64_t i)
{
    if (pr->head_major)
        return g * (pr->P + 16) * pr->D + p * pr->D + i;
    return p * pr->kv_stride + g * pr->D + i;
}

static void problem_init(struct problem *pr, int P, int H, int Hkv, int D, int window,
                         uint32_t kv_type)
{
    *pr = (struct problem){.P = P, .H = H, .Hkv = Hkv, .D = D, .window = window, .kv_type = kv_type};
    /* every other problem uses the head-major layout */
    static int count;
    pr->head_major = count++ % 2 == 1;
    pr->scale = 1.0f / sqrtf((float)D);
    pr->q_stride = (int64_t)H * D + 3;
    /* q8_0 rows are whole blocks: a row stride of whole blocks too */
    pr->kv_stride = (int64_t)Hkv * D + (kv_type == QT_Q8_0 ? 32 : 5);
    int64_t rows = P + 16;
    pr->q = calloc((size_t)(P * pr->q_stride), sizeof(float));
    size_t bytes = kern_kv_row_bytes(kv_type, rows * pr->kv_stride);
    CHECK(bytes > 0);
    pr->k = calloc(1, bytes);
    pr->v = calloc(1, bytes);
    pr->kf = calloc((size_t)(rows * pr->kv_stride), sizeof(float));
    pr->vf = calloc((size_t)(rows * pr->kv_stride), sizeof(float));
    for (int64_t i = 0; i < P * pr->q_stride; i++)
        pr->q[i] = rng_f(-1.5f, 1.5f);
    for (int64_t i = 0; i < rows * pr->kv_stride; i++) {
        float kx = rng_f(-1.5f, 1.5f), vx = rng_f(-1, 1);
        if (kv_type == QT_F16) {
            ((kn_f16 *)pr->k)[i] = quant_f32_to_f16(kx);
            ((kn_f16 *)pr->v)[i] = quant_f32_to_f16(vx);
            pr->kf[i] = quant_f16_to_f32(((kn_f16 *)pr->k)[i]);
            pr->vf[i] = quant_f16_to_f32(((kn_f16 *)pr->v)[i]);
        } else if (kv_type == QT_Q8_0) {
            pr->kf[i] = kx; /* quantized below, row by row */
            pr->vf[i] = vx;
        } else {
            ((float *)pr->k)[i] = pr->kf[i] = kx;
            ((float *)pr->v)[i] = pr->vf[i] = vx;
        }
    }
    /* q8_0: each head's row stored as the KV cache stores it, kf/vf its dequantized values */
    for (int64_t p = 0; kv_type == QT_Q8_0 && p < rows; p++)
        for (int64_t g = 0; g < Hkv; g++) {
            int64_t i = kv_index(pr, p, g, 0);
            struct block_q8_0 *kb = (struct block_q8_0 *)pr->k + i / QK8_0;
            struct block_q8_0 *vb = (struct block_q8_0 *)pr->v + i / QK8_0;
            CHECK(kern_kv_store(QT_Q8_0, kb, pr->kf + i, D) && kern_kv_store(QT_Q8_0, vb, pr->vf + i, D));
            CHECK(quant_dequantize_row(QT_Q8_0, kb, pr->kf + i, D) &&
                  quant_dequantize_row(QT_Q8_0, vb, pr->vf + i, D));
        }
}

static void problem_free(struct problem *pr)
{
    free(pr->q);
    free(pr->k);
    free(pr->v);
    free(pr->kf);
    free(pr->vf);
}

/* Runs queries for positions pos[0..n) (query rows taken from pr->q at those positions)
 * with n_kv cache rows; out is (n, H, D) with stride H*D + 1. */
static void run(const struct kern_ops *ops, const struct problem *pr, const int32_t *pos, int n,
                int64_t n_kv, float *out, int64_t split)
{
    static float qbuf[200 * (4 * 256 + 3)];
    for (int i = 0; i < n; i++)
        memcpy(qbuf + i * pr->q_stride, pr->q + pos[i] * pr->q_stride,
               sizeof(float) * (size_t)pr->q_stride);
    struct kern_attn_args a = {
        .q = qbuf, .q_stride = pr->q_stride, .q_pos = pos, .n_q = n,
        .k = pr->k, .v = pr->v,
        .k_stride = pr->head_major ? pr->D : pr->kv_stride,
        .v_stride = pr->head_major ? pr->D : pr->kv_stride,
        .k_head_stride = pr->head_major ? (int64_t)(pr->P + 16) * pr->D : 0,
        .v_head_stride = pr->head_major ? (int64_t)(pr->P + 16) * pr->D : 0,
        .kv_type = pr->kv_type, .n_kv = n_kv, .n_head = pr->H, .n_head_kv = pr->Hkv,
        .head_dim = pr->D, .scale = pr->scale, .softcap = pr->softcap, .window = pr->window,
        .sinks = pr->sinks, .out = out, .out_stride = (int64_t)pr->H * pr->D + 1,
    };
    struct kn_err err = {0};
    CHECKF(kern_attn_check(&a, &err) == KN_OK, "%s", err.msg);
    int64_t total = (int64_t)n * pr->H;
    if (split < 0 || split > total)
        split = total;
    ops->attn(&a, 0, split);
    ops->attn(&a, split, total);
}

static bool rows_equal(const float *a, const float *b, int64_t row, int64_t stride, int64_t n_rows)
{
    for (int64_t r = 0; r < n_rows; r++)
        if (memcmp(a + r * stride, b + r * stride, sizeof(float) * (size_t)row) != 0)
            return false;
    return true;
}

/* Invariance: prefill vs decode vs chunked (every split) vs verification, on one ISA. */
static void check_invariance_capped(const struct kern_ops *ops, int P, int H, int Hkv, int D,
                                    int window, uint32_t kv_type, bool every_split, float softcap,
                                    const float *sinks)
{
    struct problem pr;
    problem_init(&pr, P, H, Hkv, D, window, kv_type);
    pr.softcap = softcap;
    pr.sinks = sinks;
    int64_t orow = (int64_t)H * D, ostride = orow + 1;
    float *full = calloc((size_t)(P * ostride), sizeof(float));
    float *part = calloc((size_t)(P * ostride), sizeof(float));
    int32_t pos[200];
    for (int i = 0; i < P; i++)
        pos[i] = i;
    /* prefill: the whole prompt in one batch */
    run(ops, &pr, pos, P, P, full, -1);
    /* decode: one query at a time, the cache holding exactly the rows so far */
    bool ok = true;
    for (int p = 0; p < P; p++) {
        run(ops, &pr, &pos[p], 1, p + 1, part, -1);
        ok = ok && rows_equal(part, full + p * ostride, orow, ostride, 1);
    }
    CHECKF(ok, "isa %d decode != prefill (P=%d D=%d H=%d/%d window=%d type=%u)", (int)ops->isa,
           P, D, H, Hkv, window, kv_type);
    /* chunked prefill: split into [0, s) and [s, P) */
    ok = true;
    /* (every split: P - 1 whole prefills, most of this test's time; under ASan + UBSan,
     * whose point is the memory paths, every 7th split, still on both sides of each
     * attention tile's edge) */
    int step = every_split && !CHECK_SANITIZED ? 1 : 7;
    for (int s = 1; s < P; s += step) {
        run(ops, &pr, pos, s, s, part, -1);
        run(ops, &pr, pos + s, P - s, P, part + s * ostride, -1);
        ok = ok && rows_equal(part, full, orow, ostride, P);
    }
    CHECKF(ok, "isa %d chunked != prefill (P=%d D=%d)", (int)ops->isa, P, D);
    /* verification: the last 5 positions, the cache already holding 16 more rows (later
     * drafts) and the queries in reverse order */
    int32_t vpos[5];
    for (int i = 0; i < 5; i++)
        vpos[i] = P - 1 - i;
    run(ops, &pr, vpos, 5, P + 16, part, -1);
    ok = true;
    for (int i = 0; i < 5; i++)
        ok = ok && rows_equal(part + i * ostride, full + vpos[i] * ostride, orow, ostride, 1);
    CHECKF(ok, "isa %d verification != prefill (P=%d D=%d)", (int)ops->isa, P, D);
    /* thread splits of the (query, head) range */
    ok = true;
    for (int rep = 0; rep < 4; rep++) {
        int64_t split = (int64_t)(rng_next() % (uint64_t)(P * H + 1));
        run(ops, &pr, pos, P, P, part, split);
        ok = ok && rows_equal(part, full, orow, ostride, P);
    }
    CHECKF(ok, "isa %d thread split != prefill (P=%d D=%d)", (int)ops->isa, P, D);
    free(full);
    free(part);
    problem_free(&pr);
}

static void check_invariance(const struct kern_ops *ops, int P, int H, int Hkv, int D, int window,
                             uint32_t kv_type, bool every_split)
{
    check_invariance_capped(ops, P, H, Hkv, D, window, kv_type, every_split, 0.0f, NULL);
}

/* Float64 softmax attention of every query against the reference output; softcap > 0
 * caps the scores as cap * tanh(s / cap) (Gemma 2). */
static double accuracy_capped(int P, int H, int Hkv, int D, int window, uint32_t kv_type,
                              float sharpen, float softcap, const float *sinks)
{
    struct problem pr;
    problem_init(&pr, P, H, Hkv, D, window, kv_type);
    pr.scale *= sharpen;
    pr.softcap = softcap;
    pr.sinks = sinks;
    int64_t ostride = (int64_t)H * D + 1;
    float *out = calloc((size_t)(P * ostride), sizeof(float));
    int32_t pos[200];
    for (int i = 0; i < P; i++)
        pos[i] = i;
    run(kern_ops_get(KN_ISA_SCALAR), &pr, pos, P, P, out, -1);
    double worst = 0, scale = (double)pr.scale;
    double *w = calloc(P > 0 ? (size_t)P : 1, sizeof(double)); /* P > 0: for -O1's range check */
    for (int p = 0; p < P; p++) {
        for (int h = 0; h < H; h++) {
            int g = h / (H / Hkv);
            const float *q = pr.q + p * pr.q_stride + h * D;
            int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            double m = -INFINITY, s = 0;
            for (int j = lo; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < D; i++)
                    d += (double)q[i] * pr.kf[kv_index(&pr, j, g, i)];
                w[j] = d * scale;
                if (softcap > 0)
                    w[j] = softcap * tanh(w[j] / softcap);
                m = fmax(m, w[j]);
            }
            if (sinks) /* gpt-oss: the sink joins the denominator only */
                m = fmax(m, sinks[h]);
            for (int j = lo; j <= p; j++) {
                w[j] = exp(w[j] - m);
                s += w[j];
            }
            if (sinks)
                s += exp(sinks[h] - m);
            for (int i = 0; i < D; i++) {
                double o = 0;
                for (int j = lo; j <= p; j++)
                    o += w[j] * pr.vf[kv_index(&pr, j, g, i)];
                worst = fmax(worst, fabs(out[p * ostride + h * D + i] - o / s));
            }
        }
    }
    free(w);
    free(out);
    problem_free(&pr);
    return worst;
}

static double accuracy(int P, int H, int Hkv, int D, int window, uint32_t kv_type, float sharpen)
{
    return accuracy_capped(P, H, Hkv, D, window, kv_type, sharpen, 0.0f, NULL);
}

/* Sink logits for up to 16 heads: from far below the scores (no effect) to far above
 * (the sink takes nearly all the weight), as gpt-oss's trained sinks range. */
static const float g_sinks[16] = {-3.0f, 0.5f, 2.5f, -0.25f, 8.0f, 1.0f, -20.0f, 0.0f,
                                  3.5f, -1.5f, 0.75f, 5.0f, -0.5f, 1.75f, 12.0f, -8.0f};

static void test_isa_equality(void)
{
    const struct kern_ops *lv[KN_ISA_COUNT];
    int nl = simd_levels(lv);
    const struct kern_ops *ref = kern_ops_get(KN_ISA_SCALAR);
    const int shapes[][5] = {
        /* P, H, Hkv, D, window */
        {70, 4, 2, 64, 0},   {70, 4, 1, 128, 0},  {40, 2, 2, 256, 0}, {75, 4, 2, 64, 20},
        {66, 3, 3, 40, 33},  {33, 2, 1, 17, 0},   {20, 2, 2, 1, 0},   {9, 8, 2, 96, 4},
        {130, 2, 1, 32, 64}, {65, 2, 2, 512, 0},  {30, 12, 2, 64, 0}, {40, 16, 2, 32, 10},
        {35, 14, 2, 48, 0},
    };
    for (int l = 0; l < nl; l++) {
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            for (int ti = 0; ti < 9; ti++) {
                const int *s = shapes[si];
                const uint32_t types[3] = {QT_F32, QT_F16, QT_Q8_0};
                uint32_t type = types[ti % 3];
                if (type == QT_Q8_0 && s[3] % QK8_0 != 0)
                    continue; /* q8_0 caches take whole blocks (test_check) */
                struct problem pr;
                problem_init(&pr, s[0], s[1], s[2], s[3], s[4], type);
                /* ti >= 3: soft-capped scores (Gemma 2), a cap the scores reach */
                pr.softcap = ti >= 3 && ti < 6 ? 1.5f : 0.0f;
                /* ti >= 6: gpt-oss's sinks, some above the scores, some below */
                pr.sinks = ti >= 6 ? g_sinks : NULL;
                int64_t ostride = (int64_t)s[1] * s[3] + 1;
                float *a = calloc((size_t)(s[0] * ostride), sizeof(float));
                float *b = calloc((size_t)(s[0] * ostride), sizeof(float));
                int32_t pos[200];
                for (int i = 0; i < s[0]; i++)
                    pos[i] = i;
                run(ref, &pr, pos, s[0], s[0], a, -1);
                run(lv[l], &pr, pos, s[0], s[0], b, -1);
                CHECKF(rows_equal(a, b, (int64_t)s[1] * s[3], ostride, s[0]),
                       "isa %d attention != reference: P=%d H=%d/%d D=%d window=%d type=%u softcap=%g sinks=%d",
                       (int)lv[l]->isa, s[0], s[1], s[2], s[3], s[4], type, (double)pr.softcap,
                       pr.sinks != NULL);
                free(a);
                free(b);
                problem_free(&pr);
            }
        }
    }
    printf("attention: %d SIMD level(s) compared with the reference\n", nl);
}

static void test_check(void)
{
    float q[4] = {0}, kv[4] = {0}, out[4];
    int32_t pos[1] = {3};
    struct kern_attn_args a = {
        .q = q, .q_stride = 4, .q_pos = pos, .n_q = 1, .k = kv, .v = kv, .k_stride = 4,
        .v_stride = 4, .kv_type = QT_F32, .n_kv = 3, .n_head = 1, .n_head_kv = 1,
        .head_dim = 4, .scale = 1, .out = out, .out_stride = 4,
    };
    struct kn_err err = {0};
    CHECK(kern_attn_check(&a, &err) == KN_E_ARG && strstr(err.msg, "position 3"));
    a.n_kv = 4;
    CHECK(kern_attn_check(&a, &err) == KN_OK);
    a.k_stride = 3; /* heads side by side: a position's row must hold them all */
    CHECK(kern_attn_check(&a, &err) == KN_E_ARG && strstr(err.msg, "KV cache stride"));
    a.k_stride = 4;
    a.k_head_stride = 2; /* head-major: heads at least a row apart */
    CHECK(kern_attn_check(&a, &err) == KN_E_ARG);
    a.k_head_stride = 16;
    CHECK(kern_attn_check(&a, &err) == KN_OK);
    a.kv_type = QT_Q8_0; /* head dim 4 is not whole q8_0 blocks */
    CHECK(kern_attn_check(&a, &err) == KN_E_UNSUPPORTED && strstr(err.msg, "multiples of 32"));
    a.kv_type = QT_Q4_0;
    CHECK(kern_attn_check(&a, &err) == KN_E_UNSUPPORTED && strstr(err.msg, "q4_0"));
    a.kv_type = QT_F16;
    a.n_head = 3;
    a.n_head_kv = 2;
    CHECK(kern_attn_check(&a, &err) == KN_E_FORMAT);
    a.n_head = a.n_head_kv = 1;
    a.head_dim = KERN_ATTN_MAX_HEAD_DIM + 1;
    CHECK(kern_attn_check(&a, &err) == KN_E_UNSUPPORTED);
}

/* Hand-checked values: one key gives V exactly; two equal scores average. */
static void test_known(void)
{
    float q[2] = {1, 0}, k[4] = {2, 0, 2, 0}, v[4] = {3, -1, 5, 7}, out[2];
    int32_t pos[2] = {0, 1};
    struct kern_attn_args a = {
        .q = q, .q_stride = 2, .q_pos = pos, .n_q = 1, .k = k, .v = v, .k_stride = 2,
        .v_stride = 2, .kv_type = QT_F32, .n_kv = 2, .n_head = 1, .n_head_kv = 1,
        .head_dim = 2, .scale = 0.5f, .out = out, .out_stride = 2,
    };
    kern_ops_get(KN_ISA_SCALAR)->attn(&a, 0, 1);
    CHECK(out[0] == 3 && out[1] == -1);
    a.q_pos = &pos[1];
    kern_ops_get(KN_ISA_SCALAR)->attn(&a, 0, 1);
    CHECK(out[0] == 4 && out[1] == 3);
    a.window = 1; /* only the key at the query's own position */
    kern_ops_get(KN_ISA_SCALAR)->attn(&a, 0, 1);
    CHECK(out[0] == 5 && out[1] == 7);
    /* a sink equal to the one score takes half the weight: V / 2 exactly, on every level */
    float sink = 1.0f; /* q.k * scale = 2 * 0.5 */
    a.sinks = &sink;
    const struct kern_ops *lv[KN_ISA_COUNT + 1];
    int nl = simd_levels(lv);
    lv[nl++] = kern_ops_get(KN_ISA_SCALAR);
    for (int l = 0; l < nl; l++) {
        lv[l]->attn(&a, 0, 1);
        CHECK(out[0] == 2.5f && out[1] == 3.5f);
    }
    struct kn_err err = {0};
    CHECK(kern_attn_check(&a, &err) == KN_OK);
    sink = NAN;
    CHECK(kern_attn_check(&a, &err) == KN_E_ARG && strstr(err.msg, "sink of head 0"));
}

/* kern_attn_run on pools of 1 to 4 threads gives the single-call bits. */
static void test_pool(void)
{
    struct problem pr;
    problem_init(&pr, 50, 8, 2, 64, 0, QT_F16);
    int32_t pos[50];
    for (int i = 0; i < 50; i++)
        pos[i] = i;
    int64_t ostride = 8 * 64 + 1;
    float *ref = calloc((size_t)(50 * ostride), sizeof(float));
    float *got = calloc((size_t)(50 * ostride), sizeof(float));
    run(kern_ops_active(), &pr, pos, 50, 50, ref, -1);
    struct kern_attn_args a = {
        .q = pr.q, .q_stride = pr.q_stride, .q_pos = pos, .n_q = 50, .k = pr.k, .v = pr.v,
        .k_stride = pr.head_major ? pr.D : pr.kv_stride, .v_stride = pr.head_major ? pr.D : pr.kv_stride,
        .k_head_stride = pr.head_major ? (int64_t)(pr.P + 16) * pr.D : 0,
        .v_head_stride = pr.head_major ? (int64_t)(pr.P + 16) * pr.D : 0,
        .kv_type = pr.kv_type, .n_kv = 50, .n_head = 8, .n_head_kv = 2, .head_dim = 64,
        .scale = 1.0f / sqrtf(64.0f), .out = got, .out_stride = ostride,
    };
    for (int nth = 1; nth <= 4; nth++) {
        struct kern_pool *pool = NULL;
        struct kn_err err = {0};
        CHECK(kern_pool_create(nth, &pool, &err) == KN_OK);
        memset(got, 0, sizeof(float) * (size_t)(50 * ostride));
        kern_attn_run(pool, &a);
        CHECKF(rows_equal(ref, got, 8 * 64, ostride, 50), "pool of %d threads", nth);
        kern_pool_free(pool);
    }
    kern_attn_run(NULL, &a);
    CHECK(rows_equal(ref, got, 8 * 64, ostride, 50));
    /* decode: one query, 2 kv-head groups, 3 threads: split into single pairs */
    struct kern_pool *pool = NULL;
    struct kn_err err = {0};
    CHECK(kern_pool_create(3, &pool, &err) == KN_OK);
    a.q_pos = &pos[49];
    a.q = pr.q + 49 * pr.q_stride;
    a.n_q = 1;
    memset(got, 0, sizeof(float) * (size_t)ostride);
    kern_attn_run(pool, &a);
    CHECK(rows_equal(ref + 49 * ostride, got, 8 * 64, ostride, 1));
    kern_pool_free(pool);
    free(ref);
    free(got);
    problem_free(&pr);
}

/* The work (keys read + a tile) of thread ith's pairs, for runs of one query per position. */
static int64_t share_work(const struct kern_attn_args *runs, int64_t n_runs, int64_t lo, int64_t hi)
{
    int64_t w = 0, base = 0;
    for (int64_t r = 0; r < n_runs; r++) {
        const struct kern_attn_args *a = &runs[r];
        for (int64_t i = 0; i < a->n_q * a->n_head; i++) {
            if (base + i < lo || base + i >= hi)
                continue;
            int64_t p = a->q_pos[i / a->n_head];
            int64_t first = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
            w += p - first + 1 + KERN_ATTN_TILE;
        }
        base += a->n_q * a->n_head;
    }
    return w;
}

/* kern_attn_share: the ranges tile [0, pairs) in order, cut between whole kv-head groups
 * when there are enough of them, and each thread's work is within one unit of an equal
 * share, so two threads' within two units (a causal prompt split by counts would give
 * the last of two threads 3x the first's work). */
static void test_share(void)
{
    static int32_t pos[600];
    for (int i = 0; i < 600; i++)
        pos[i] = i;
    struct kern_attn_args runs[3] = {
        {.q_pos = pos, .n_q = 512, .n_head = 32, .n_head_kv = 4},       /* a prompt */
        {.q_pos = pos + 599, .n_q = 1, .n_head = 32, .n_head_kv = 4},   /* a decode step */
        {.q_pos = pos + 100, .n_q = 300, .n_head = 32, .n_head_kv = 4, .window = 64},
    };
    for (int nr = 1; nr <= 3; nr++) {
        for (int nth = 1; nth <= 8; nth++) {
            int64_t pairs = 0;
            for (int r = 0; r < nr; r++)
                pairs += runs[r].n_q * runs[r].n_head;
            int64_t total = share_work(runs, nr, 0, pairs), prev = 0, wmax = 0, wmin = INT64_MAX;
            for (int ith = 0; ith < nth; ith++) {
                int64_t lo, hi;
                kern_attn_share(runs, nr, ith, nth, &lo, &hi);
                CHECKF(lo == prev && hi >= lo, "runs %d threads %d: thread %d [%lld, %lld)", nr, nth,
                       ith, (long long)lo, (long long)hi);
                CHECKF(lo % 8 == 0, "runs %d threads %d: cut at %lld inside a group", nr, nth, (long long)lo);
                prev = hi;
                int64_t w = share_work(runs, nr, lo, hi);
                wmax = w > wmax ? w : wmax;
                wmin = w < wmin ? w : wmin;
            }
            CHECKF(prev == pairs, "runs %d threads %d: ends at %lld of %lld", nr, nth, (long long)prev,
                   (long long)pairs);
            /* one unit: 8 pairs of the longest query (611 keys + a tile) */
            int64_t unit = 8 * (600 + KERN_ATTN_TILE);
            CHECKF(wmax - wmin <= 2 * unit && wmax <= total / nth + unit && wmin >= total / nth - unit,
                   "runs %d threads %d: work %lld..%lld of %lld", nr, nth, (long long)wmin,
                   (long long)wmax, (long long)total);
        }
    }
    /* one query, 4 groups, 6 threads: single pairs, every pair once */
    int64_t prev = 0;
    for (int ith = 0; ith < 6; ith++) {
        int64_t lo, hi;
        kern_attn_share(&runs[1], 1, ith, 6, &lo, &hi);
        CHECK(lo == prev && hi >= lo);
        prev = hi;
    }
    CHECK(prev == 32);
}

int main(void)
{
    test_share();
    test_pool();
    test_check();
    test_known();
    const struct kern_ops *lv[KN_ISA_COUNT + 1];
    int nl = simd_levels(lv);
    lv[nl++] = kern_ops_get(KN_ISA_SCALAR);
    for (int l = 0; l < nl; l++) {
        check_invariance(lv[l], 70, 4, 2, 64, 0, QT_F32, true);
        check_invariance(lv[l], 70, 2, 1, 64, 24, QT_F16, true);
        check_invariance(lv[l], 100, 2, 2, 128, 0, QT_F16, false);
        check_invariance(lv[l], 80, 2, 1, 256, 40, QT_F32, false);
        check_invariance_capped(lv[l], 70, 4, 2, 64, 24, QT_F32, true, 1.5f, NULL);
        check_invariance_capped(lv[l], 70, 4, 2, 64, 24, QT_F16, true, 0.0f, g_sinks);
        check_invariance_capped(lv[l], 100, 8, 1, 64, 0, QT_Q8_0, false, 0.0f, g_sinks);
        check_invariance(lv[l], 70, 4, 2, 64, 24, QT_Q8_0, true);
        check_invariance(lv[l], 100, 2, 1, 128, 0, QT_Q8_0, false);
    }
    test_isa_equality();
    double e1 = accuracy(100, 4, 2, 64, 0, QT_F32, 1.0f);
    double e2 = accuracy(100, 2, 1, 128, 30, QT_F16, 1.0f);
    double e3 = accuracy(70, 2, 2, 256, 0, QT_F32, 1.0f);
    /* scores 30 times sharper than usual: tile maxima far apart, most weights underflow
     * toward 0; the error grows with |score| (the rounding of s * scale) */
    double e4 = accuracy(100, 2, 1, 64, 0, QT_F32, 30.0f);
    /* q8_0: against float64 attention over the dequantized cache (the kernel's own error;
     * the quantization's is the model's choice of --kv-type) */
    double e5 = accuracy(100, 4, 2, 128, 0, QT_Q8_0, 1.0f);
    printf("attention over a q8_0 cache: max abs error %.3g against float64 over its values\n", e5);
    CHECKF(e5 < 2e-6, "q8_0 attention error %.3g", e5);
    printf("attention with sharpened scores (scale x30): max abs error %.3g\n", e4);
    CHECKF(e4 < 2e-5, "sharp attention error %.3g", e4);
    /* soft-capped (Gemma 2's attn_logit_softcapping, scaled to these scores): sharpened
     * scores squashed into (-2, 2) by 2 tanh(s / 2) */
    double e6 = accuracy_capped(100, 2, 1, 64, 20, QT_F32, 30.0f, 2.0f, NULL);
    printf("attention with soft-capped scores (cap 2, scale x30): max abs error %.3g\n", e6);
    CHECKF(e6 < 2e-6, "soft-capped attention error %.3g", e6);
    /* gpt-oss: sinks in the denominator, on windowed (the real window) and full layers */
    double e7 = accuracy_capped(150, 8, 2, 64, 128, QT_F32, 1.0f, 0.0f, g_sinks);
    double e8 = accuracy_capped(100, 8, 1, 64, 0, QT_F32, 1.0f, 0.0f, g_sinks + 8);
    printf("attention with sinks: max abs error %.3g (window 128), %.3g (full)\n", e7, e8);
    CHECKF(e7 < 2e-6 && e8 < 2e-6, "attention with sinks error %.3g %.3g", e7, e8);
    printf("attention: max abs error against float64 %.3g (D=64), %.3g (D=128, window 30, "
           "f16 cache), %.3g (D=256); values in [-1, 1]\n", e1, e2, e3);
    CHECKF(e1 < 2e-6 && e2 < 2e-6 && e3 < 2e-6, "attention error %.3g %.3g %.3g", e1, e2, e3);
    CHECK_DONE();
}
