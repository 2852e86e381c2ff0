/* matmul.c: y = x . w^T for every weight type: the portable reference (the
 * specification, docs/numerics.md "Matrix products"), weight set-up, and dispatch. */
#include "kern_internal.h"

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
    free(w->packed);
    w->packed = NULL;
    w->packed_bytes = 0;
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

/* ---------------------------------------------------------------- reference: 32-blocks */

/* Each returns sum over blocks b ascending of the documented fmaf steps; the int
 * sums are exact. */

static float dot_q8_0_ref(const void *wr, const struct kern_block_q8f *x, int64_t nb)
{
    const struct block_q8_0 *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int i = 0; i < 32; i++)
            isum += (int32_t)w[b].qs[i] * x[b].qs[i];
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
    }
    return acc;
}

static float dot_q4_0_ref(const void *wr, const struct kern_block_q8f *x, int64_t nb)
{
    const struct block_q4_0 *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((w[b].qs[j] & 0xF) - 8) * x[b].qs[j];
            isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
        }
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
    }
    return acc;
}

static float dot_q4_1_ref(const void *wr, const struct kern_block_q8f *x, int64_t nb)
{
    const struct block_q4_1 *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (w[b].qs[j] & 0xF) * x[b].qs[j];
            isum += (w[b].qs[j] >> 4) * x[b].qs[j + 16];
        }
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
        acc = fmaf(kern_f16(&w[b].m) * x[b].d, (float)x[b].s, acc);
    }
    return acc;
}

static inline uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float dot_q5_0_ref(const void *wr, const struct kern_block_q8f *x, int64_t nb)
{
    const struct block_q5_0 *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        uint32_t qh = load_u32(w[b].qh);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (w[b].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            int hi = (w[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            isum += (lo - 16) * x[b].qs[j] + (hi - 16) * x[b].qs[j + 16];
        }
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
    }
    return acc;
}

static float dot_q5_1_ref(const void *wr, const struct kern_block_q8f *x, int64_t nb)
{
    const struct block_q5_1 *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        uint32_t qh = load_u32(w[b].qh);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (w[b].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            int hi = (w[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            isum += lo * x[b].qs[j] + hi * x[b].qs[j + 16];
        }
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
        acc = fmaf(kern_f16(&w[b].m) * x[b].d, (float)x[b].s, acc);
    }
    return acc;
}

static float dot_iq4_nl_ref(const void *wr, const struct kern_block_q8f *x, int64_t nb)
{
    const struct block_iq4_nl *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += quant_iq4nl_levels[w[b].qs[j] & 0xF] * x[b].qs[j];
            isum += quant_iq4nl_levels[w[b].qs[j] >> 4] * x[b].qs[j + 16];
        }
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
    }
    return acc;
}

static float dot_mxfp4_ref(const void *wr, const struct kern_block_q8f *x, int64_t nb)
{
    const struct block_mxfp4 *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += quant_mxfp4_values[w[b].qs[j] & 0xF] * x[b].qs[j];
            isum += quant_mxfp4_values[w[b].qs[j] >> 4] * x[b].qs[j + 16];
        }
        acc = fmaf(quant_e8m0_half(w[b].e) * x[b].d, (float)isum, acc);
    }
    return acc;
}

/* ---------------------------------------------------------------- reference: K-quants */

static float dot_q2_K_ref(const void *wr, const struct block_q8_K *x, int64_t nb)
{
    const struct block_q2_K *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0, imin = 0;
        for (int i = 0; i < 16; i++) {
            int32_t s = 0;
            for (int e = 16 * i; e < 16 * i + 16; e++) {
                int h = e / 128, t = (e % 128) / 32, l = e % 32;
                s += ((w[b].qs[32 * h + l] >> (2 * t)) & 3) * x[b].qs[e];
            }
            isum += (w[b].scales[i] & 0xF) * s;
            imin += (w[b].scales[i] >> 4) * x[b].bsums[i];
        }
        float dx = x[b].d;
        acc = fmaf(kern_f16(&w[b].d) * dx, (float)isum, acc);
        acc = fmaf(-(kern_f16(&w[b].dmin) * dx), (float)imin, acc);
    }
    return acc;
}

static float dot_q3_K_ref(const void *wr, const struct block_q8_K *x, int64_t nb)
{
    const struct block_q3_K *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sc[16];
        quant_q3k_scales(w[b].scales, sc);
        int32_t isum = 0;
        for (int i = 0; i < 16; i++) {
            int32_t s = 0;
            for (int e = 16 * i; e < 16 * i + 16; e++) {
                int h = e / 128, t = (e % 128) / 32, l = e % 32;
                int q = ((w[b].qs[32 * h + l] >> (2 * t)) & 3) |
                        ((w[b].hmask[l] >> (4 * h + t)) & 1) << 2;
                s += (q - 4) * x[b].qs[e];
            }
            isum += sc[i] * s;
        }
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
    }
    return acc;
}

static float dot_iq4_xs_ref(const void *wr, const struct block_q8_K *x, int64_t nb)
{
    const struct block_iq4_xs *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        uint16_t sh;
        memcpy(&sh, &w[b].scales_h, 2);
        int32_t isum = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = w[b].qs + 16 * j;
            int32_t s = 0;
            for (int l = 0; l < 16; l++) {
                s += quant_iq4nl_levels[q[l] & 0xF] * x[b].qs[32 * j + l];
                s += quant_iq4nl_levels[q[l] >> 4] * x[b].qs[32 * j + 16 + l];
            }
            isum += quant_iq4xs_scale(sh, w[b].scales_l, j) * s;
        }
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
    }
    return acc;
}

static float dot_q4_K_ref(const void *wr, const struct block_q8_K *x, int64_t nb)
{
    const struct block_q4_K *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0, imin = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            quant_k4_scale_min(w[b].scales, j, &sc, &m);
            const uint8_t *q = w[b].qs + 32 * (j / 2);
            int shift = (j & 1) * 4;
            int32_t s = 0;
            for (int l = 0; l < 32; l++)
                s += ((q[l] >> shift) & 0xF) * x[b].qs[32 * j + l];
            isum += sc * s;
            imin += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
        }
        float dx = x[b].d;
        acc = fmaf(kern_f16(&w[b].d) * dx, (float)isum, acc);
        acc = fmaf(-(kern_f16(&w[b].dmin) * dx), (float)imin, acc);
    }
    return acc;
}

static float dot_q5_K_ref(const void *wr, const struct block_q8_K *x, int64_t nb)
{
    const struct block_q5_K *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0, imin = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            quant_k4_scale_min(w[b].scales, j, &sc, &m);
            const uint8_t *q = w[b].qs + 32 * (j / 2);
            int shift = (j & 1) * 4;
            int32_t s = 0;
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0xF) | ((w[b].qh[l] >> j) & 1) << 4;
                s += v * x[b].qs[32 * j + l];
            }
            isum += sc * s;
            imin += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
        }
        float dx = x[b].d;
        acc = fmaf(kern_f16(&w[b].d) * dx, (float)isum, acc);
        acc = fmaf(-(kern_f16(&w[b].dmin) * dx), (float)imin, acc);
    }
    return acc;
}

static float dot_q6_K_ref(const void *wr, const struct block_q8_K *x, int64_t nb)
{
    const struct block_q6_K *w = wr;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int i = 0; i < 16; i++) {
            int32_t s = 0;
            for (int e = 16 * i; e < 16 * i + 16; e++) {
                int h = e / 128, t = (e % 128) / 32, l = e % 32;
                int lo = (w[b].ql[64 * h + 32 * (t & 1) + l] >> (4 * (t >> 1))) & 0xF;
                int hi = (w[b].qh[32 * h + l] >> (2 * t)) & 3;
                s += ((lo | hi << 4) - 32) * x[b].qs[e];
            }
            isum += w[b].scales[i] * s;
        }
        acc = fmaf(kern_f16(&w[b].d) * x[b].d, (float)isum, acc);
    }
    return acc;
}

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
            const void *xq = (const uint8_t *)a->q + (size_t)m * a->row_bytes;
            float r;
            switch (w->type) {
            case QT_F32: r = kern_dot_f32_ref(xf, (const float *)wr, K); break;
            case QT_F16: r = dot_f16_ref(xf, (const kn_f16 *)wr, K); break;
            case QT_BF16: r = dot_bf16_ref(xf, (const kn_bf16 *)wr, K); break;
            case QT_Q8_0: r = dot_q8_0_ref(wr, xq, K / 32); break;
            case QT_Q4_0: r = dot_q4_0_ref(wr, xq, K / 32); break;
            case QT_Q4_1: r = dot_q4_1_ref(wr, xq, K / 32); break;
            case QT_Q5_0: r = dot_q5_0_ref(wr, xq, K / 32); break;
            case QT_Q5_1: r = dot_q5_1_ref(wr, xq, K / 32); break;
            case QT_Q4_K: r = dot_q4_K_ref(wr, xq, K / QK_K); break;
            case QT_Q5_K: r = dot_q5_K_ref(wr, xq, K / QK_K); break;
            case QT_Q6_K: r = dot_q6_K_ref(wr, xq, K / QK_K); break;
            case QT_IQ4_NL: r = dot_iq4_nl_ref(wr, xq, K / 32); break;
            case QT_MXFP4: r = dot_mxfp4_ref(wr, xq, K / 32); break;
            case QT_Q2_K: r = dot_q2_K_ref(wr, xq, K / QK_K); break;
            case QT_Q3_K: r = dot_q3_K_ref(wr, xq, K / QK_K); break;
            case QT_IQ4_XS: r = dot_iq4_xs_ref(wr, xq, K / QK_K); break;
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
    switch (kern_isa_active()) {
#if defined(KERN_ARCH_X86)
    case KERN_ISA_AVX512:
        if (kern_matmul_rows_avx512(w, a, y, ldy, n0, n1))
            return;
        break;
    case KERN_ISA_AVX2:
        if (kern_matmul_rows_avx2(w, a, y, ldy, n0, n1))
            return;
        break;
#elif defined(KERN_ARCH_ARM)
    case KERN_ISA_I8MM:
        if (kern_matmul_rows_i8mm(w, a, y, ldy, n0, n1))
            return;
        break;
    case KERN_ISA_DOTPROD:
        if (kern_matmul_rows_dotprod(w, a, y, ldy, n0, n1))
            return;
        break;
    case KERN_ISA_NEON:
        if (kern_matmul_rows_neon(w, a, y, ldy, n0, n1))
            return;
        break;
#endif
    default: break;
    }
    kern_matmul_rows_ref(w, a, y, ldy, n0, n1);
}

size_t kern_matmul_scratch_bytes(const struct kern_weight *w, int64_t M)
{
    return kern_act_bytes(kern_act_kind_for(w->type), M, w->K);
}

/* Weight bytes below which a product with few tokens runs on the calling thread alone. */
#define KERN_SMALL_BYTES (64u << 10)

struct mm_ctx {
    const struct kern_weight *w;
    const struct kern_act *a;
    float *y;
};

static void mm_task(void *p, int ith, int nth)
{
    const struct mm_ctx *c = p;
    int64_t n0, n1;
    kern_split(c->w->N, KERN_ROW_ALIGN, ith, nth, &n0, &n1);
    kern_matmul_rows(c->w, c->a, c->y, c->w->N, n0, n1);
}

void kern_matmul(struct kern_pool *pool, const struct kern_weight *w, const float *x,
                 int64_t M, float *y, void *scratch)
{
    if (M <= 0)
        return;
    struct kern_act a;
    kern_act_prepare(pool, kern_act_kind_for(w->type), x, M, w->K, scratch, &a);
    struct mm_ctx c = {w, &a, y};
    /* A small product (e.g. a tiny model's decode step) finishes before the workers would
     * wake: run it on the caller. Which thread computes a row never changes its bits. */
    if (M < 4 && (size_t)w->N * w->row_bytes < KERN_SMALL_BYTES)
        mm_task(&c, 0, 1);
    else
        kern_pool_run_shares(pool, mm_task, &c, 4 * kern_pool_threads(pool));
}
