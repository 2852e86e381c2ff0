/* test_kern_matmul.c: y = x . w^T for every weight type: each ISA level, thread count and
 * batch size gives the reference's bits; a row's result does not depend on the batch; and
 * the result is within the bound of docs/numerics.md of a float64 product. */
#include "check.h"
#include "kern_testutil.h"

#define MAX_M 64
#define MAX_THREADS 4

static struct kern_pool *pools[MAX_THREADS + 1];

static const enum quant_type all_types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q8_0,  QT_Q4_0,
                                            QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_IQ4_NL, QT_MXFP4, QT_Q2_K,
                                            QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K,  QT_IQ4_XS};

static const int test_ms[] = {1, 2, 3, 8, 17, 64};

/* x: (MAX_M, K) with rows of different magnitudes, one all-zero row, one with a spike. */
static void random_x(float *x, int64_t K)
{
    for (int m = 0; m < MAX_M; m++) {
        float scale = (m == 3) ? 0.0f : (float)(1 << (m % 7)) * 0.125f;
        for (int64_t k = 0; k < K; k++)
            x[m * K + k] = tu_uniform() * scale;
        if (m == 5)
            x[m * K + K / 2] = 40.0f;
    }
}

/* Checks y (M rows of N) against the float64 product, with the bound from docs/numerics.md. */
static void check_accuracy(enum quant_type t, const struct kern_weight *w,
                           const struct kern_act *a, const float *y, int64_t M)
{
    const int64_t K = w->K, N = w->N;
    double *wa = malloc(sizeof(double) * (size_t)K), *wb = malloc(sizeof(double) * (size_t)K);
    double *xh = malloc(sizeof(double) * (size_t)K), *dx = malloc(sizeof(double) * (size_t)K);
    int bad = 0;
    const double u = 0x1p-24;
    for (int64_t m = 0; m < M; m++) {
        const float *x = a->x + m * K;
        /* The dequantized activations x^ and their scale per element. */
        for (int64_t k = 0; k < K; k++) {
            if (a->kind == KERN_ACT_F32) {
                xh[k] = x[k];
                dx[k] = 0.0;
            } else if (a->kind == KERN_ACT_Q8_32) {
                const struct kern_block_q8f *q =
                    (const void *)((const uint8_t *)a->q + (size_t)m * a->row_bytes);
                xh[k] = (double)q[k / 32].d * q[k / 32].qs[k % 32];
                dx[k] = q[k / 32].d;
            } else {
                const struct block_q8_K *q =
                    (const void *)((const uint8_t *)a->q + (size_t)m * a->row_bytes);
                xh[k] = (double)q[k / 256].d * q[k / 256].qs[k % 256];
                dx[k] = q[k / 256].d;
            }
        }
        for (int64_t n = 0; n < N; n++) {
            tu_dequant_row(t, (const uint8_t *)w->data + (size_t)n * w->row_bytes, K, wa, wb);
            double exact = 0, exact_q = 0, mag = 0, qerr = 0, wx = 0;
            for (int64_t k = 0; k < K; k++) {
                double wk = wa[k] + wb[k];
                exact += wk * x[k];
                exact_q += wk * xh[k];
                mag += (fabs(wa[k]) + fabs(wb[k])) * fabs(xh[k]);
                wx += fabs(wk * x[k]);
                qerr += fabs(wk) * (0.5 * dx[k] * (1 + 1e-6) + 4 * u * fabs(x[k]));
            }
            double bound;
            if (a->kind == KERN_ACT_F32) {
                bound = (double)(K / 16 + 5) * u * 1.01 * wx;
            } else {
                int64_t nb = K / (a->kind == KERN_ACT_Q8_32 ? 32 : 256);
                bound = (double)(nb + 3) * 2 * u * 1.01 * mag + qerr;
            }
            bound += 1e-30;
            double err = fabs((double)y[m * N + n] - exact);
            if (!(err <= bound) && bad++ < 5)
                fprintf(stderr, "%s K=%lld m=%lld n=%lld: y=%.9g exact=%.9g (q %.9g) err %.3g > %.3g\n",
                        quant_type_name(t), (long long)K, (long long)m, (long long)n,
                        (double)y[m * N + n], exact, exact_q, err, bound);
        }
    }
    CHECKF(bad == 0, "%s K=%lld: %d outputs outside the error bound", quant_type_name(t),
           (long long)K, bad);
    free(wa);
    free(wb);
    free(xh);
    free(dx);
}

/* The software prefetch distance of the packed runs that use one: the AMD Zen 5 default
 * plus a line and a half, so that the prefetched addresses are not line-aligned. */
static const size_t test_prefetch = KERN_PREFETCH_ZEN5 + 96;

/* Checks every ISA level, thread count and batch size ms[0..n_ms) (each <= MAX_M) of
 * an N x K weight of type t against the reference. */
static void check_shape_ms(enum quant_type t, int64_t N, int64_t K, const int *ms, size_t n_ms)
{
    struct kn_err err;
    uint64_t rb;
    CHECK(quant_row_size(t, (uint64_t)K, &rb));
    size_t wbytes = (size_t)N * rb;
    void *wdata = kn_aligned_alloc(wbytes, &err);
    tu_random_weights(t, N, K, wdata);
    /* Every 5th block gets f16 scales that are subnormal (F16C and the reference must
     * convert them alike), the 7th a zero scale. */
    const struct quant_type_info *ti = quant_type_info(t);
    if (ti->block_size > 1) {
        size_t nblk = wbytes / ti->type_size;
        size_t doff = t == QT_Q6_K   ? offsetof(struct block_q6_K, d)
                    : t == QT_Q2_K ? offsetof(struct block_q2_K, d)
                    : t == QT_Q3_K ? offsetof(struct block_q3_K, d)
                                   : 0;
        /* the second f16 (min) field, 0 if none */
        size_t moff = t == QT_Q4_1 || t == QT_Q5_1 || t == QT_Q4_K || t == QT_Q5_K ? 2
                    : t == QT_Q2_K ? offsetof(struct block_q2_K, dmin)
                                   : 0;
        for (size_t b = 0; b < nblk; b += 5) {
            uint8_t *blk = (uint8_t *)wdata + b * ti->type_size;
            if (t == QT_MXFP4) { /* the two subnormal scales (e = 0, 1) */
                blk[0] = (uint8_t)(b % 7 == 0 ? 0 : 1);
                continue;
            }
            tu_put_f16(blk + doff, (kn_f16)(b % 7 == 0 ? 0x0000 : 0x0123 + (b & 0xff)));
            if (moff)
                tu_put_f16(blk + moff, (kn_f16)(0x8005 + (b & 0x3f)));
        }
    }
    struct kern_weight w, wplain;
    CHECK(kern_weight_init(&w, t, N, K, wdata, wbytes, true, &err) == KN_OK);
    CHECK(kern_weight_init(&wplain, t, N, K, wdata, wbytes, false, &err) == KN_OK);
    CHECK(wplain.packed == NULL);

    float *x = malloc(sizeof(float) * MAX_M * (size_t)K);
    random_x(x, K);
    size_t sbytes = kern_matmul_scratch_bytes(&w, MAX_M);
    void *scratch = kn_aligned_alloc(sbytes, &err);
    float *yref = malloc(sizeof(float) * MAX_M * (size_t)N);
    float *y = malloc(sizeof(float) * MAX_M * (size_t)N);

    struct kern_act a;
    kern_act_prepare(NULL, kern_act_kind_for(t), x, MAX_M, K, scratch, &a);
    kern_matmul_rows_ref(&w, &a, yref, N, 0, N);
    check_accuracy(t, &w, &a, yref, MAX_M);

    /* The look-up types run twice on an AVX-512 CPU with VBMI: with vpermb (the default)
     * and with vpshufb (kern_isa_vbmi_set), the instruction CPUs without VBMI use. */
    const bool lookup = t == QT_IQ4_NL || t == QT_IQ4_XS || t == QT_MXFP4;
    for (int run = 0; run < KN_ISA_COUNT + 1; run++) {
        const int isa = run < KN_ISA_COUNT ? run : KN_ISA_AVX512;
        if (!kn_isa_supported((enum kn_isa)isa))
            continue;
        if (run == KN_ISA_COUNT) { /* the vpshufb run, after every level's default one */
            if (!lookup || !kern_isa_vbmi())
                continue;
            CHECK(!kern_isa_vbmi_set(false));
        }
        CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
        const char *lut = isa == KN_ISA_AVX512 && lookup ? (kern_isa_vbmi() ? " (vpermb)" : " (vpshufb)") : "";
        for (int th = 1; th <= MAX_THREADS; th++) {
            for (size_t mi = 0; mi < n_ms; mi++) {
                int64_t M = ms[mi];
                /* Unpacked, then packed without and with software prefetch
                 * (kern_prefetch_bytes: it changes when bytes arrive, never a value). */
                for (int packed = 0; packed < 3; packed++) {
                    /* Rows [off, off + M) of x: a row's position in the batch varies. */
                    int64_t off = (M == MAX_M) ? 0 : (mi * 7 + (size_t)th) % (MAX_M - M + 1);
                    const size_t pf = kern_prefetch_set(packed == 2 ? test_prefetch : 0);
                    memset(y, 0xff, sizeof(float) * (size_t)M * (size_t)N);
                    kern_matmul(pools[th], packed ? &w : &wplain, x + off * K, M, y, scratch);
                    bool same = memcmp(y, yref + off * N, sizeof(float) * (size_t)M * (size_t)N) == 0;
                    CHECKF(same, "%s N=%lld K=%lld M=%lld off=%lld isa=%s%s threads=%d packed=%d "
                           "prefetch=%zu: bits differ from the reference",
                           quant_type_name(t), (long long)N, (long long)K, (long long)M,
                           (long long)off, kn_isa_name((enum kn_isa)isa), lut, th,
                           packed > 0, pf);
                }
            }
        }
        /* Partial row ranges, as fused callers use them: only [n0, n1) is written. */
        kern_act_prepare(NULL, kern_act_kind_for(t), x, 9, K, scratch, &a);
        int64_t n0 = N > 3 ? 3 : 0, n1 = N > 21 ? 21 : N;
        for (size_t i = 0; i < (size_t)9 * (size_t)N; i++)
            y[i] = -1.0f;
        kern_matmul_rows(&w, &a, y, N, n0, n1);
        bool ok = true;
        for (int64_t m = 0; m < 9; m++)
            for (int64_t n = 0; n < N; n++) {
                float want = (n >= n0 && n < n1) ? yref[m * N + n] : -1.0f;
                if (memcmp(&y[m * N + n], &want, 4) != 0)
                    ok = false;
            }
        CHECKF(ok, "%s K=%lld isa=%s%s: kern_matmul_rows [%lld, %lld) wrong", quant_type_name(t),
               (long long)K, kn_isa_name((enum kn_isa)isa), lut, (long long)n0, (long long)n1);
    }
    kern_isa_vbmi_set(true);
    kern_prefetch_set(test_prefetch);
    CHECK(kn_isa_set(kn_isa_best(), &err) == KN_OK);

    free(y);
    free(yref);
    free(scratch);
    free(x);
    kern_weight_free(&w);
    kern_weight_free(&wplain);
    free(wdata);
}

static void check_shape(enum quant_type t, int64_t N, int64_t K)
{
    check_shape_ms(t, N, K, test_ms, sizeof test_ms / sizeof test_ms[0]);
}

static void test_init_errors(void)
{
    struct kn_err err;
    struct kern_weight w;
    static uint8_t buf[4096];
    CHECK(kern_weight_init(&w, QT_IQ2_XS, 1, 256, buf, 74, false, &err) == KN_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "iq2_xs") != NULL);
    CHECK(kern_weight_init(&w, QT_Q4_0, 2, 48, buf, 36, false, &err) == KN_E_FORMAT);
    CHECK(strstr(err.msg, "multiple of 32") != NULL);
    CHECK(kern_weight_init(&w, QT_Q4_0, 2, 64, buf, 71, false, &err) == KN_E_FORMAT);
    CHECK(kern_weight_init(&w, QT_Q4_0, 2, 64, buf, 72, false, &err) == KN_OK);
    kern_weight_free(&w);
    /* The packed copy exists only for SIMD levels, padded to 16 rows. */
    CHECK(kn_isa_set(KN_ISA_SCALAR, &err) == KN_OK);
    CHECK(kern_weight_init(&w, QT_Q4_0, 2, 64, buf, 72, true, &err) == KN_OK);
    CHECK(w.packed == NULL);
    kern_weight_free(&w);
    CHECK(kn_isa_set(kn_isa_best(), &err) == KN_OK);
    CHECK(kern_weight_init(&w, QT_Q4_0, 2, 64, buf, 72, true, &err) == KN_OK);
    if (kn_isa_best() != KN_ISA_SCALAR)
        CHECK(w.packed != NULL && w.packed_bytes == 2 * 288); /* 1 group, 2 blocks */
    kern_weight_free(&w);
    CHECK(kern_weight_init(&w, QT_F16, 2, 64, buf, 256, true, &err) == KN_OK);
    CHECK(w.packed == NULL); /* float types read the file's rows directly */
    kern_weight_free(&w);
    CHECK(!kern_type_supported(QT_IQ2_XXS));
    CHECK(!kern_type_supported(QT_TQ2_0));
    CHECK(kern_act_kind_for(QT_MXFP4) == KERN_ACT_Q8_32);
    CHECK(kern_act_kind_for(QT_IQ4_XS) == KERN_ACT_Q8_K);
    CHECK(kern_act_kind_for(QT_IQ4_NL) == KERN_ACT_Q8_32);
    CHECK(kern_act_kind_for(QT_Q6_K) == KERN_ACT_Q8_K);
    CHECK(kern_act_kind_for(QT_Q5_1) == KERN_ACT_Q8_32);
    CHECK(kern_act_kind_for(QT_BF16) == KERN_ACT_F32);
}

/* kern_weight_repack (model_open's parallel repack) builds the copies kern_weight_init
 * builds one at a time, bit for bit, at every thread count; shapes with partial row
 * groups, and one weight large enough to span several shares. */
static void test_parallel_repack(void)
{
    struct kn_err err;
    enum { NW = 8 };
    static const struct {
        enum quant_type t;
        int64_t N, K;
    } shapes[NW] = {{QT_Q8_0, 2000, 1024}, {QT_Q4_K, 37, 768},  {QT_Q6_K, 70, 512},
                    {QT_F16, 16, 64},      {QT_Q4_0, 3, 96},    {QT_IQ4_XS, 20, 256},
                    {QT_Q5_K, 33, 256},    {QT_MXFP4, 17, 64}};
    void *data[NW];
    struct kern_weight ref[NW];
    for (int i = 0; i < NW; i++) {
        uint64_t rb = 0;
        CHECK(quant_row_size(shapes[i].t, (uint64_t)shapes[i].K, &rb));
        size_t bytes = (size_t)shapes[i].N * (size_t)rb;
        data[i] = malloc(bytes);
        tu_random_weights(shapes[i].t, shapes[i].N, shapes[i].K, data[i]);
        CHECK(kern_weight_init(&ref[i], shapes[i].t, shapes[i].N, shapes[i].K, data[i], bytes,
                               true, &err) == KN_OK);
    }
    for (int th = 1; th <= MAX_THREADS; th++) {
        struct kern_weight w[NW], *ws[NW];
        for (int i = 0; i < NW; i++) {
            CHECK(kern_weight_init(&w[i], shapes[i].t, shapes[i].N, shapes[i].K, data[i],
                                   (size_t)shapes[i].N * ref[i].row_bytes, false, &err) == KN_OK);
            CHECK(w[i].packed == NULL);
            ws[i] = &w[i];
        }
        /* One weight already packed keeps its copy (the call packs the others only). */
        CHECK(kern_weight_repack(pools[th], ws + 2, 1, &err) == KN_OK);
        void *before = w[2].packed;
        CHECK(kern_weight_repack(pools[th], ws, NW, &err) == KN_OK);
        CHECK(w[2].packed == before);
        for (int i = 0; i < NW; i++) {
            CHECKF(w[i].packed_bytes == ref[i].packed_bytes && (w[i].packed == NULL) == (ref[i].packed == NULL),
                   "%s (%lld x %lld): packed %zu bytes, one at a time %zu", quant_type_name(shapes[i].t),
                   (long long)shapes[i].N, (long long)shapes[i].K, w[i].packed_bytes, ref[i].packed_bytes);
            if (w[i].packed && ref[i].packed && w[i].packed_bytes == ref[i].packed_bytes)
                CHECKF(memcmp(w[i].packed, ref[i].packed, ref[i].packed_bytes) == 0,
                       "%s (%lld x %lld) on %d threads: the parallel repack differs",
                       quant_type_name(shapes[i].t), (long long)shapes[i].N,
                       (long long)shapes[i].K, th);
            kern_weight_free(&w[i]);
        }
    }
    if (kn_isa_best() != KN_ISA_SCALAR)
        CHECK(ref[0].packed != NULL && ref[3].packed == NULL); /* q8_0 packs, f16 does not */
    for (int i = 0; i < NW; i++) {
        kern_weight_free(&ref[i]);
        free(data[i]);
    }
}

int main(void)
{
    struct kn_err err;
    for (int th = 1; th <= MAX_THREADS; th++)
        CHECK(kern_pool_create(th, &pools[th], &err) == KN_OK);
    test_init_errors();
    test_parallel_repack();
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        enum quant_type t = all_types[ti];
        uint32_t bs = quant_type_info(t)->block_size;
        if (bs == 1) {
            static const int64_t ks[] = {1, 7, 16, 37, 130, 520};
            for (size_t i = 0; i < 6; i++)
                check_shape(t, i % 2 ? 37 : 16, ks[i]);
        } else if (bs == 32) {
            static const int64_t ks[] = {32, 96, 352};
            for (size_t i = 0; i < 3; i++)
                check_shape(t, i % 2 ? 16 : 37, ks[i]);
        } else {
            static const int64_t ks[] = {256, 768};
            for (size_t i = 0; i < 2; i++)
                check_shape(t, i % 2 ? 16 : 37, ks[i]);
        }
    }
    /* Weights above the size that runs on the caller alone: decode (M = 1) split over
     * the pool's threads. */
    check_shape(QT_Q8_0, 100, 1024);
    check_shape(QT_Q4_K, 70, 1024);
    check_shape(QT_Q2_K, 70, 1024);
    check_shape(QT_Q3_K, 70, 1024);
    /* Q3_K's packed triples (repack.c) at every batch size up to two full token tiles and
     * one more on each ISA (KMAXT6 <= 4), on row counts that end in a partial group; Q6_K's
     * at every tile size (KMAXTQ6 <= 8) and two full tiles and one more of up to 6. */
    static const int ms_1_9[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const int ms_q6[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13};
    check_shape_ms(QT_Q3_K, 37, 512, ms_1_9, sizeof ms_1_9 / sizeof ms_1_9[0]);
    check_shape_ms(QT_Q3_K, 70, 1024, ms_1_9, sizeof ms_1_9 / sizeof ms_1_9[0]);
    check_shape_ms(QT_Q6_K, 37, 512, ms_q6, sizeof ms_q6 / sizeof ms_q6[0]);
    check_shape_ms(QT_Q6_K, 70, 1024, ms_q6, sizeof ms_q6 / sizeof ms_q6[0]);
    check_shape(QT_IQ4_XS, 70, 1024);
    check_shape(QT_IQ4_NL, 100, 1024);
    check_shape(QT_MXFP4, 100, 1024);
    check_shape(QT_F16, 40, 1000);
    for (int th = 1; th <= MAX_THREADS; th++)
        kern_pool_free(pools[th]);
    CHECK_DONE();
}
