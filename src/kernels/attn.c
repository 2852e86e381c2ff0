/* attn.c: attention over the KV cache, the reference (docs/numerics.md "attention").
 *
 * For query t (position p) and head h (kv head g = h / (H / Hkv)), the visible keys are
 * j in [lo, p] with lo = 0, or lo = max(0, p - window + 1) with a window. They are cut
 * into tiles [32i, 32i + 31] (aligned to position 0), clipped to [lo, p]; per tile, in
 * ascending i:
 *   s_j   = canonical_dot(q, k_j) * scale                    (16-lane fma tree over D)
 *   s_j   = kern_softcapf(s_j, softcap)                       (only when softcap > 0)
 *   m_t   = max_j s_j
 *   e_j   = kern_expf(s_j - m_t)
 *   l_t   = canonical sum over the tile's slots: slot (j mod 16), then the tree
 *   o_t[d] = sum over j ascending: o_t[d] = fmaf(e_j, v_j[d], o_t[d])   (from 0)
 * merged into the running state (m, l, o), which starts as (-inf, 0, 0):
 *   m' = max(m, m_t), a = kern_expf(m - m'), b = kern_expf(m_t - m')
 *   l  = fmaf(l_t, b, l * a),  o[d] = fmaf(o_t[d], b, o[d] * a),  m = m'
 * then, with attention sinks (gpt-oss), the head's sink merged as a tile whose (m_t, l_t,
 * o_t) is (sink, 1, 0) (kn_attn_sink: m' = max(m, sink), a = kern_expf(m - m'),
 * l = l * a + kern_expf(sink - m'), o[d] = o[d] * a), and finally out[d] = o[d] / l. F16 keys and values are widened exactly first; a Q8_0
 * element is (float)q * d with d its block's f16 scale widened (one rounding, the same at
 * every ISA level). */
#include "kernels.h"
#include "kern_internal.h"
#include "ops_internal.h"

enum kn_status kern_attn_check(const struct kern_attn_args *a, struct kn_err *err)
{
    if (a->kv_type != QT_F32 && a->kv_type != QT_F16 && a->kv_type != QT_Q8_0)
        return kn_fail(err, KN_E_UNSUPPORTED, "attention: KV cache type %s is not supported "
                       "(use f32, f16 or q8_0)", quant_type_name(a->kv_type));
    if (a->head_dim < 1 || a->head_dim > KERN_ATTN_MAX_HEAD_DIM)
        return kn_fail(err, KN_E_UNSUPPORTED, "attention: head dim %d is outside 1..%d",
                       (int)a->head_dim, KERN_ATTN_MAX_HEAD_DIM);
    /* q8_0 rows are whole blocks of 32: every row and head starts a block */
    if (a->kv_type == QT_Q8_0 &&
        (a->head_dim % QK8_0 || a->k_stride % QK8_0 || a->v_stride % QK8_0 ||
         a->k_head_stride % QK8_0 || a->v_head_stride % QK8_0))
        return kn_fail(err, KN_E_UNSUPPORTED, "attention: a q8_0 KV cache needs a head dim "
                       "and strides that are multiples of %d (head dim %d)", QK8_0,
                       (int)a->head_dim);
    if (a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv != 0)
        return kn_fail(err, KN_E_FORMAT, "attention: %d query heads are not a multiple of %d "
                       "key/value heads", (int)a->n_head, (int)a->n_head_kv);
    if (!(a->softcap >= 0.0f) || a->softcap == INFINITY)
        return kn_fail(err, KN_E_ARG, "attention: soft-cap %g must be 0 (none) or positive",
                       (double)a->softcap);
    for (int32_t h = 0; a->sinks && h < a->n_head; h++)
        if (!isfinite(a->sinks[h]))
            return kn_fail(err, KN_E_ARG, "attention: the sink of head %d is not finite", (int)h);
    if (a->window < 0)
        return kn_fail(err, KN_E_ARG, "attention: sliding window %d is negative", (int)a->window);
    if (a->n_q < 0 || a->n_kv < 0)
        return kn_fail(err, KN_E_ARG, "attention: negative count (queries %lld, cache rows %lld)",
                       (long long)a->n_q, (long long)a->n_kv);
    int64_t row = (int64_t)a->n_head * a->head_dim, kv_row = (int64_t)a->n_head_kv * a->head_dim;
    if (a->q_stride < row || a->out_stride < row)
        return kn_fail(err, KN_E_ARG, "attention: a query or output stride is smaller than a row");
    /* heads side by side (head stride 0): a position's row holds them all; otherwise each
     * head's rows are apart by at least head_dim */
    if ((a->k_head_stride == 0 && a->k_stride < kv_row) || (a->v_head_stride == 0 && a->v_stride < kv_row) ||
        a->k_stride < a->head_dim || a->v_stride < a->head_dim ||
        (a->k_head_stride != 0 && a->k_head_stride < a->head_dim) ||
        (a->v_head_stride != 0 && a->v_head_stride < a->head_dim))
        return kn_fail(err, KN_E_ARG, "attention: a KV cache stride is smaller than a row");
    for (int64_t t = 0; t < a->n_q; t++)
        if (a->q_pos[t] < 0 || a->q_pos[t] >= a->n_kv)
            return kn_fail(err, KN_E_ARG, "attention: query %lld has position %d but the cache "
                           "holds positions 0..%lld; store the batch's keys before attention",
                           (long long)t, (int)a->q_pos[t], (long long)a->n_kv - 1);
    return KN_OK;
}

/* Row p of kv head g as f32 (a pointer into the cache, or widened into buf). */
static const float *kv_row(const void *base, int64_t stride, int64_t head_stride, uint32_t type,
                           int64_t p, int64_t g, int64_t d, float *buf)
{
    int64_t off = p * stride + g * (head_stride ? head_stride : d);
    if (type == QT_F32)
        return (const float *)base + off;
    if (type == QT_Q8_0) {
        /* off is a multiple of 32 (kern_attn_check): blocks off/32 .. */
        kern_kv_q8_0_row((const struct block_q8_0 *)base + off / QK8_0, d, buf);
        return buf;
    }
    const kn_f16 *h = (const kn_f16 *)base + off;
    for (int64_t i = 0; i < d; i++)
        buf[i] = quant_f16_to_f32(h[i]);
    return buf;
}

void kern_attn_scalar(const struct kern_attn_args *a, int64_t begin, int64_t end)
{
    const int64_t D = a->head_dim, T = KERN_ATTN_TILE;
    const int64_t group = a->n_head / a->n_head_kv;
    float s[KERN_ATTN_TILE], e[KERN_ATTN_TILE];
    float o[KERN_ATTN_MAX_HEAD_DIM], ot[KERN_ATTN_MAX_HEAD_DIM], buf[KERN_ATTN_MAX_HEAD_DIM];
    for (int64_t idx = begin; idx < end; idx++) {
        int64_t t = idx / a->n_head, h = idx % a->n_head, g = h / group;
        const float *q = a->q + t * a->q_stride + h * D;
        int64_t p = a->q_pos[t];
        int64_t lo = kn_hd_attn_first_key(p, a->window);
        float m = -INFINITY, l = 0.0f;
        for (int64_t d = 0; d < D; d++)
            o[d] = 0.0f;
        for (int64_t t0 = lo / T * T; t0 <= p; t0 += T) {
            int64_t j0 = t0 > lo ? t0 : lo, j1 = t0 + T - 1 < p ? t0 + T - 1 : p;
            float mt = -INFINITY;
            for (int64_t j = j0; j <= j1; j++) {
                const float *k = kv_row(a->k, a->k_stride, a->k_head_stride, a->kv_type, j, g, D, buf);
                s[j - t0] = kn_dot_ref(q, k, D) * a->scale;
                if (a->softcap > 0.0f)
                    s[j - t0] = kern_softcapf(s[j - t0], a->softcap);
                mt = s[j - t0] > mt ? s[j - t0] : mt;
            }
            float acc[KN_LANES] = {0};
            for (int64_t j = j0; j <= j1; j++) {
                e[j - t0] = kern_expf(s[j - t0] - mt);
                acc[(j - t0) % KN_LANES] += e[j - t0];
            }
            float lt = kn_tree16(acc);
            for (int64_t d = 0; d < D; d++)
                ot[d] = 0.0f;
            for (int64_t j = j0; j <= j1; j++) {
                const float *v = kv_row(a->v, a->v_stride, a->v_head_stride, a->kv_type, j, g, D, buf);
                for (int64_t d = 0; d < D; d++)
                    ot[d] = fmaf(e[j - t0], v[d], ot[d]);
            }
            float mn = mt > m ? mt : m;
            float sa = kern_expf(m - mn), sb = kern_expf(mt - mn);
            l = fmaf(lt, sb, l * sa);
            for (int64_t d = 0; d < D; d++)
                o[d] = fmaf(ot[d], sb, o[d] * sa);
            m = mn;
        }
        if (a->sinks) { /* gpt-oss: the head's sink joins the denominator */
            float sa = kn_attn_sink(a->sinks[h], &m, &l);
            for (int64_t d = 0; d < D; d++)
                o[d] = o[d] * sa;
        }
        float *out = a->out + t * a->out_stride + h * D;
        for (int64_t d = 0; d < D; d++)
            out[d] = o[d] / l;
    }
}

/* The keys a query at position p reads, plus a fixed part (the query's load, the merges
 * and the output: about a tile's worth): the work of one (query, head) pair. */
static int64_t pair_work(const struct kern_attn_args *a, int64_t p)
{
    int64_t lo = kn_hd_attn_first_key(p, a->window);
    return p - lo + 1 + KERN_ATTN_TILE;
}

/* The first pair of the first unit u (units of `align` pairs, in order) whose work before
 * it, times nth, reaches k * total: thread k's start. */
static int64_t share_start(const struct kern_attn_args *runs, int64_t n_runs, int64_t align,
                           int64_t total, int k, int nth)
{
    int64_t target = (int64_t)k * total, before = 0, base = 0;
    for (int64_t r = 0; r < n_runs; r++) {
        const struct kern_attn_args *a = &runs[r];
        const int64_t H = a->n_head, units = H / align;
        for (int64_t t = 0; t < a->n_q; t++) {
            int64_t w = align * pair_work(a, a->q_pos[t]);
            if ((before + (units - 1) * w) * nth >= target) {
                int64_t need = target - before * nth, j = 0;
                if (need > 0)
                    j = (need + w * nth - 1) / (w * nth);
                return base + t * H + j * align;
            }
            before += units * w;
        }
        base += a->n_q * H;
    }
    return base;
}

void kern_attn_share(const struct kern_attn_args *runs, int64_t n_runs, int ith, int nth,
                     int64_t *lo, int64_t *hi)
{
    int64_t pairs = 0, total = 0;
    for (int64_t r = 0; r < n_runs; r++) {
        pairs += runs[r].n_q * runs[r].n_head;
        for (int64_t t = 0; t < runs[r].n_q; t++)
            total += runs[r].n_head * pair_work(&runs[r], runs[r].q_pos[t]);
    }
    /* whole groups of query heads that share a kv head, so SIMD blocks stay whole, unless
     * there are fewer groups than threads (decode with few kv heads): then single pairs */
    int64_t group = n_runs > 0 ? runs[0].n_head / runs[0].n_head_kv : 1;
    int64_t align = pairs / group >= nth ? group : 1;
    *lo = ith == 0 ? 0 : share_start(runs, n_runs, align, total, ith, nth);
    *hi = ith + 1 >= nth ? pairs : share_start(runs, n_runs, align, total, ith + 1, nth);
}

static void attn_task(void *ctx, int ith, int nth)
{
    const struct kern_attn_args *a = ctx;
    int64_t lo, hi;
    kern_attn_share(a, 1, ith, nth, &lo, &hi);
    if (lo < hi)
        kern_attn(a, lo, hi);
}

void kern_attn_run(struct kern_pool *pool, const struct kern_attn_args *a)
{
    kern_pool_run(pool, attn_task, (void *)a);
}
