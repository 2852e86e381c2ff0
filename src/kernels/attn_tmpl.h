/* attn_tmpl.h: the SIMD attention's driver, written once for attn_avx2.c and
 * attn_avx512.c, which define before including this file:
 *   GMAX              query heads of one kv head processed together (KERN_ATTN_GMAX)
 *   attn_tile(a, type, q, nh, g, t0, j0, j1, st)
 *                     tile [t0, t0 + KERN_ATTN_TILE) clipped to keys [j0, j1] for one
 *                     query's nh heads q (kv head g), merged into st: the reference's steps
 *                     for each (query, head) pair (attn.c)
 *   attn_out(out, o, l, D)  out[d] = o[d] / l for d < D
 *
 * The pairs of [begin, end) go in the blocks of kern_attn_next: up to GMAX heads that share
 * a kv head, for up to QMAX consecutive queries. Each K and V row is loaded once per head
 * block, not once per head, and a tile of them once for the block's queries: in prefill
 * the cache of a long context no longer streams from memory once per query. Every query
 * still visits its own tiles in ascending order through exactly the reference's
 * operations. */

#define QMAX 8 /* queries of a block that share each K and V tile */

static inline __attribute__((always_inline)) void attn_body(const struct kern_attn_args *a,
                                                            int64_t begin, int64_t end,
                                                            const uint32_t type)
{
    const int64_t D = a->head_dim, T = KERN_ATTN_TILE, group = a->n_head / a->n_head_kv;
    struct kern_attn_qstate st[QMAX];
    struct kern_attn_iter it = {.idx = begin, .end = end};
    int64_t t, nq, h0, nh;
    while (kern_attn_next(a, &it, GMAX, QMAX, &t, &nq, &h0, &nh)) {
        const int64_t g = h0 / group;
        const float *q[QMAX][GMAX];
        int64_t p[QMAX], lo[QMAX], first = INT64_MAX, last = -1;
        for (int64_t k = 0; k < nq; k++) {
            for (int64_t i = 0; i < nh; i++) {
                q[k][i] = a->q + (t + k) * a->q_stride + (h0 + i) * D;
                st[k].m[i] = -INFINITY;
                st[k].l[i] = 0.0f;
                for (int64_t d = 0; d < D; d++)
                    st[k].o[i][d] = 0.0f;
            }
            p[k] = a->q_pos[t + k];
            lo[k] = kn_hd_attn_first_key(p[k], a->window);
            first = lo[k] / T * T < first ? lo[k] / T * T : first;
            last = p[k] > last ? p[k] : last;
        }
        /* query k's tiles are [lo_k / T * T, p_k] in steps of T, ascending, as alone */
        for (int64_t t0 = first; t0 <= last; t0 += T)
            for (int64_t k = 0; k < nq; k++) {
                if (t0 > p[k] || t0 + T <= lo[k])
                    continue;
                int64_t j0 = t0 > lo[k] ? t0 : lo[k], j1 = t0 + T - 1 < p[k] ? t0 + T - 1 : p[k];
                attn_tile(a, type, q[k], nh, g, t0, j0, j1, &st[k]);
            }
        for (int64_t k = 0; k < nq; k++) {
            for (int64_t i = 0; a->sinks && i < nh; i++) { /* gpt-oss: as the reference */
                float sa = kn_attn_sink(a->sinks[h0 + i], &st[k].m[i], &st[k].l[i]);
                for (int64_t d = 0; d < D; d++)
                    st[k].o[i][d] = st[k].o[i][d] * sa;
            }
            for (int64_t i = 0; i < nh; i++)
                attn_out(a->out + (t + k) * a->out_stride + (h0 + i) * D, st[k].o[i], st[k].l[i], D);
        }
    }
}
