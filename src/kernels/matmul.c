/* matmul.c: y = x . w^T for every weight type: the portable reference (the
 * specification, docs/numerics.md "Matrix products"), weight set-up, and the call
 * through the active level's kernel (dispatch.c). */
#include "kern_internal.h"
#include "kern_hd.h"

#include <assert.h>
#include <stddef.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

bool kern_type_supported(enum quant_type t)
{
    /* The type table's flag is the one list (quant/types.c); every flagged type has a
     * case in kern_matmul_rows_ref (test_quant checks the flags, test_kern_matmul the
     * products). */
    const struct quant_type_info *ti = quant_type_info(t);
    return ti && ti->computable;
}

enum kern_act_kind kern_act_kind_for(enum quant_type t)
{
    switch (t) {
    case QT_Q8_0: case QT_Q4_0: case QT_Q4_1: case QT_Q5_0: case QT_Q5_1: case QT_IQ4_NL:
    case QT_MXFP4:
        return KERN_ACT_Q8_32;
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_Q2_K: case QT_Q3_K: case QT_IQ4_XS:
        return KERN_ACT_Q8_K;
    default:
        return KERN_ACT_F32;
    }
}

/* ---------------------------------------------------------------- weight set-up */

enum kn_status kern_weight_init(struct kern_weight *w, enum quant_type type, int64_t N,
                                int64_t K, const void *data, size_t data_bytes, bool repack,
                                struct kn_err *err)
{
    memset(w, 0, sizeof *w);
    if (!kern_type_supported(type)) {
        char names[256];
        size_t len = 0;
        for (uint32_t t = 0; t < QT_COUNT && len < sizeof names; t++)
            if (kern_type_supported((enum quant_type)t))
                len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "",
                                        quant_type_name(t));
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "no matrix-product kernel for weight type %s; supported: %s",
                       quant_type_name(type), names);
    }
    const struct quant_type_info *ti = quant_type_info(type);
    if (N < 1 || K < 1 || K % ti->block_size != 0)
        return kn_fail(err, KN_E_FORMAT,
                       "weight shape (N=%lld, K=%lld) is invalid for %s: K must be a positive "
                       "multiple of %u",
                       (long long)N, (long long)K, ti->name, ti->block_size);
    uint64_t rb;
    size_t total;
    if (!quant_row_size(type, (uint64_t)K, &rb) || !kn_mul_size((size_t)N, (size_t)rb, &total))
        return kn_fail(err, KN_E_FORMAT, "weight of %lld x %lld %s overflows", (long long)N,
                       (long long)K, ti->name);
    if (data_bytes != total)
        return kn_fail(err, KN_E_FORMAT,
                       "weight data is %zu bytes but (N=%lld, K=%lld) %s needs %zu",
                       data_bytes, (long long)N, (long long)K, ti->name, total);
    if (type == QT_F32 && ((uintptr_t)data & 3))
        return kn_fail(err, KN_E_FORMAT, "f32 weight data is not 4-byte aligned");
    w->type = type;
    w->N = N;
    w->K = K;
    w->data = data;
    w->row_bytes = (size_t)rb;
    if (repack) {
        struct kern_weight *one = w;
        return kern_weight_repack(NULL, &one, 1, err);
    }
    return KN_OK;
}

void kern_weight_free(struct kern_weight *w)
{
    if (!w->packed_borrowed)
        free(w->packed);
    w->packed = NULL;
    w->packed_bytes = 0;
    w->packed_borrowed = false;
}

/* ---------------------------------------------------------------- reference: float */

static float dot_f16_ref(const float *x, const kn_f16 *w, int64_t K)
{
    float acc[KERN_DOT_LANES] = {0};
    for (int64_t k = 0; k < K; k++)
        acc[k % 16] = fmaf(x[k], kern_f16(&w[k]), acc[k % 16]);
    return kern_dot_tree16(acc);
}

static float dot_bf16_ref(const float *x, const kn_bf16 *w, int64_t K)
{
    float acc[KERN_DOT_LANES] = {0};
    for (int64_t k = 0; k < K; k++) {
        kn_bf16 h;
        memcpy(&h, &w[k], 2);
        acc[k % 16] = fmaf(x[k], quant_bf16_to_f32(h), acc[k % 16]);
    }
    return kern_dot_tree16(acc);
}

/* ---------------------------------------------------------------- reference: blocks */

/* Each weight block's step is kern_hd.h's kn_hd_blk_<type> (the exact integer sums, then
 * the documented fmaf steps), the same function the CUDA kernels call; the row is the
 * blocks in ascending order from acc = +0. */
typedef float (*blk_fn)(const uint8_t *w, const uint8_t *x, float acc);

static float dot_blocks_ref(blk_fn f, const uint8_t *w, size_t wbytes, const uint8_t *x,
                            size_t xbytes, int64_t nb)
{
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++)
        acc = f(w + (size_t)b * wbytes, x + (size_t)b * xbytes, acc);
    return acc;
}

/* The layouts kern_hd.h reads by offset are those of quant.h and kernels.h. */
static_assert(sizeof(struct kern_block_q8f) == KN_Q8F_BYTES && offsetof(struct kern_block_q8f, s) == KN_Q8F_S &&
              offsetof(struct kern_block_q8f, qs) == KN_Q8F_QS, "kern_block_q8f layout");
static_assert(sizeof(struct block_q8_K) == KN_Q8K_BYTES && offsetof(struct block_q8_K, qs) == KN_Q8K_QS &&
              offsetof(struct block_q8_K, bsums) == KN_Q8K_BSUMS, "block_q8_K layout");
static_assert(offsetof(struct block_q4_1, qs) == 4 && offsetof(struct block_q5_0, qs) == 6 &&
              offsetof(struct block_q5_1, qs) == 8 && offsetof(struct block_mxfp4, qs) == 1,
              "32-block layouts");
static_assert(offsetof(struct block_q4_K, qs) == 16 && offsetof(struct block_q5_K, qh) == 16 &&
              offsetof(struct block_q5_K, qs) == 48 && offsetof(struct block_q6_K, scales) == 192 &&
              offsetof(struct block_q6_K, d) == 208 && offsetof(struct block_q2_K, d) == 80 &&
              offsetof(struct block_q3_K, scales) == 96 && offsetof(struct block_q3_K, d) == 108 &&
              offsetof(struct block_iq4_xs, qs) == 8, "256-block layouts");

/* ---------------------------------------------------------------- reference product */

void kern_matmul_rows_ref(const struct kern_weight *w, const struct kern_act *a, float *y,
                          int64_t ldy, int64_t n0, int64_t n1)
{
    assert(a->K == w->K && a->kind == kern_act_kind_for(w->type));
    const int64_t K = w->K;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = (const uint8_t *)w->data + (size_t)n * w->row_bytes;
        for (int64_t m = 0; m < a->M; m++) {
            const float *xf = a->x + m * K;
            const uint8_t *xq = (const uint8_t *)a->q + (size_t)m * a->row_bytes;
            float r;
            switch (w->type) {
            case QT_F32: r = kern_dot_f32_ref(xf, (const float *)wr, K); break;
            case QT_F16: r = dot_f16_ref(xf, (const kn_f16 *)wr, K); break;
            case QT_BF16: r = dot_bf16_ref(xf, (const kn_bf16 *)wr, K); break;
            case QT_Q8_0: r = dot_blocks_ref(kn_hd_blk_q8_0, wr, sizeof(struct block_q8_0), xq, KN_Q8F_BYTES, K / 32); break;
            case QT_Q4_0: r = dot_blocks_ref(kn_hd_blk_q4_0, wr, sizeof(struct block_q4_0), xq, KN_Q8F_BYTES, K / 32); break;
            case QT_Q4_1: r = dot_blocks_ref(kn_hd_blk_q4_1, wr, sizeof(struct block_q4_1), xq, KN_Q8F_BYTES, K / 32); break;
            case QT_Q5_0: r = dot_blocks_ref(kn_hd_blk_q5_0, wr, sizeof(struct block_q5_0), xq, KN_Q8F_BYTES, K / 32); break;
            case QT_Q5_1: r = dot_blocks_ref(kn_hd_blk_q5_1, wr, sizeof(struct block_q5_1), xq, KN_Q8F_BYTES, K / 32); break;
            case QT_Q4_K: r = dot_blocks_ref(kn_hd_blk_q4_k, wr, sizeof(struct block_q4_K), xq, KN_Q8K_BYTES, K / QK_K); break;
            case QT_Q5_K: r = dot_blocks_ref(kn_hd_blk_q5_k, wr, sizeof(struct block_q5_K), xq, KN_Q8K_BYTES, K / QK_K); break;
            case QT_Q6_K: r = dot_blocks_ref(kn_hd_blk_q6_k, wr, sizeof(struct block_q6_K), xq, KN_Q8K_BYTES, K / QK_K); break;
            case QT_IQ4_NL: r = dot_blocks_ref(kn_hd_blk_iq4_nl, wr, sizeof(struct block_iq4_nl), xq, KN_Q8F_BYTES, K / 32); break;
            case QT_MXFP4: r = dot_blocks_ref(kn_hd_blk_mxfp4, wr, sizeof(struct block_mxfp4), xq, KN_Q8F_BYTES, K / 32); break;
            case QT_Q2_K: r = dot_blocks_ref(kn_hd_blk_q2_k, wr, sizeof(struct block_q2_K), xq, KN_Q8K_BYTES, K / QK_K); break;
            case QT_Q3_K: r = dot_blocks_ref(kn_hd_blk_q3_k, wr, sizeof(struct block_q3_K), xq, KN_Q8K_BYTES, K / QK_K); break;
            case QT_IQ4_XS: r = dot_blocks_ref(kn_hd_blk_iq4_xs, wr, sizeof(struct block_iq4_xs), xq, KN_Q8K_BYTES, K / QK_K); break;
            default: assert(!"unsupported weight type"); r = 0.0f;
            }
            y[m * ldy + n] = r;
        }
    }
}

void kern_matmul_rows(const struct kern_weight *w, const struct kern_act *a, float *y,
                      int64_t ldy, int64_t n0, int64_t n1)
{
    if (n0 >= n1 || a->M == 0)
        return;
    const struct kern_impl *impl = kern_impl_active();
    if (impl->matmul_rows && impl->matmul_rows(w, a, y, ldy, n0, n1))
        return;
    kern_matmul_rows_ref(w, a, y, ldy, n0, n1);
}

size_t kern_matmul_scratch_bytes(const struct kern_weight *w, int64_t M)
{
    return kern_act_bytes(kern_act_kind_for(w->type), M, w->K);
}

/* Weight bytes below which a product with few tokens runs on the calling thread alone. */
#define KERN_SMALL_BYTES (64u << 10)

/* Row groups [u0, u1) of the products, numbered one product after another. */
struct mm_many {
    const struct kern_mm *mm;
    int64_t first[KERN_MM_MAX + 1]; /* each product's first group */
    int n;
};

static void mm_range(void *p, int64_t u0, int64_t u1)
{
    const struct mm_many *t = p;
    for (int j = 0; j < t->n && u0 < u1; j++) {
        int64_t a = t->first[j], b = t->first[j + 1];
        if (b <= u0 || a >= u1)
            continue;
        const struct kern_mm *m = &t->mm[j];
        int64_t lo = ((u0 > a ? u0 : a) - a) * KERN_ROW_ALIGN;
        int64_t hi = ((u1 < b ? u1 : b) - a) * KERN_ROW_ALIGN;
        kern_matmul_rows(m->w, m->a, m->y, m->w->N, lo, hi < m->w->N ? hi : m->w->N);
    }
}

void kern_matmul_many(struct kern_pool *pool, const struct kern_mm *mm, int n)
{
    assert(n >= 1 && n <= KERN_MM_MAX);
    struct mm_many t = {.mm = mm, .n = n};
    size_t bytes = 0;
    for (int j = 0; j < n; j++) {
        t.first[j + 1] = t.first[j] + (mm[j].w->N + KERN_ROW_ALIGN - 1) / KERN_ROW_ALIGN;
        bytes += (size_t)mm[j].w->N * mm[j].w->row_bytes;
    }
    /* A small job (e.g. a tiny model's decode step) finishes before the workers would
     * wake: run it on the caller. Which thread computes a row never changes its bits. */
    if (mm[0].a->M < 4 && bytes < KERN_SMALL_BYTES)
        mm_range(&t, 0, t.first[n]);
    else
        kern_pool_run_range(pool, mm_range, &t, t.first[n]);
}

void kern_matmul(struct kern_pool *pool, const struct kern_weight *w, const float *x,
                 int64_t M, float *y, void *scratch)
{
    if (M <= 0)
        return;
    struct kern_act a;
    kern_act_prepare(pool, kern_act_kind_for(w->type), x, M, w->K, scratch, &a);
    kern_matmul_many(pool, &(struct kern_mm){w, &a, y}, 1);
}
