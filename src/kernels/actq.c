/* actq.c: per-token activation quantization (docs/numerics.md "Activation
 * quantization"). Every step is a fixed IEEE operation: no libm, no rounding-mode
 * dependence beyond the default round-to-nearest-even. */
#include "kern_internal.h"
#include "kern_hd.h"

/* One block: kern_hd.h's rule, shared with the CUDA kernels. */
static float quantize_block(const float *x, int n, int8_t *q)
{
    return kn_hd_quantize_block(x, n, q);
}

void kern_quantize_row_q8f_ref(const float *x, int64_t K, struct kern_block_q8f *dst)
{
    assert(K % 32 == 0);
    for (int64_t b = 0; b < K / 32; b++) {
        struct kern_block_q8f *o = &dst[b];
        o->d = quantize_block(x + b * 32, 32, o->qs);
        int32_t s = 0;
        for (int i = 0; i < 32; i++)
            s += o->qs[i];
        o->s = s;
    }
}

void kern_quantize_row_q8k_ref(const float *x, int64_t K, struct block_q8_K *dst)
{
    assert(K % QK_K == 0);
    for (int64_t b = 0; b < K / QK_K; b++) {
        struct block_q8_K *o = &dst[b];
        o->d = quantize_block(x + b * QK_K, QK_K, o->qs);
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += o->qs[j * 16 + i];
            o->bsums[j] = (int16_t)s;
        }
    }
}

void kern_quantize_row_q8f(const float *x, int64_t K, struct kern_block_q8f *dst)
{
    assert(K % 32 == 0);
    kern_impl_active()->quantize_row_q8f(x, K, dst);
}

void kern_quantize_row_q8k(const float *x, int64_t K, struct block_q8_K *dst)
{
    assert(K % QK_K == 0);
    kern_impl_active()->quantize_row_q8k(x, K, dst);
}

size_t kern_act_row_bytes(enum kern_act_kind kind, int64_t K)
{
    switch (kind) {
    case KERN_ACT_Q8_32: return (size_t)(K / 32) * sizeof(struct kern_block_q8f);
    case KERN_ACT_Q8_K: return (size_t)(K / QK_K) * sizeof(struct block_q8_K);
    case KERN_ACT_F32: break;
    }
    return 0;
}

size_t kern_act_bytes(enum kern_act_kind kind, int64_t M, int64_t K)
{
    size_t total;
    if (M < 0 || K < 0 || !kn_mul_size((size_t)M, kern_act_row_bytes(kind, K), &total))
        return SIZE_MAX;
    return total;
}

struct prep_ctx {
    enum kern_act_kind kind;
    const float *x;
    int64_t M, K;
    uint8_t *q;
    size_t row_bytes;
};

static void prep_task(void *p, int ith, int nth)
{
    const struct prep_ctx *c = p;
    int64_t m0, m1;
    kern_split(c->M, 1, ith, nth, &m0, &m1);
    for (int64_t m = m0; m < m1; m++) {
        void *dst = c->q + (size_t)m * c->row_bytes;
        if (c->kind == KERN_ACT_Q8_32)
            kern_quantize_row_q8f(c->x + m * c->K, c->K, dst);
        else
            kern_quantize_row_q8k(c->x + m * c->K, c->K, dst);
    }
}

void kern_act_prepare(struct kern_pool *pool, enum kern_act_kind kind, const float *x,
                      int64_t M, int64_t K, void *scratch, struct kern_act *out)
{
    *out = (struct kern_act){.kind = kind, .M = M, .K = K, .x = x};
    if (kind == KERN_ACT_F32)
        return;
    struct prep_ctx c = {kind, x, M, K, scratch, kern_act_row_bytes(kind, K)};
    out->q = scratch;
    out->row_bytes = c.row_bytes;
    /* A single token is too little work to wake the pool for. */
    if (M == 1)
        prep_task(&c, 0, 1);
    else
        kern_pool_run(pool, prep_task, &c);
}
