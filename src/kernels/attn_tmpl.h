/* attn_tmpl.h: the SIMD attention's driver, written once for attn_avx2.c and
 * attn_avx512.c, which define before including this file:
 *   GMAX              query heads of one kv head processed together (KERN_ATTN_GMAX)
 *   dot4(q, k, type, off, D, out)  four canonical dots: q[c] with the cache row at element
 *                     offset off[c]
 *   attn_softmax(nh, s, e, st, sa, sb)  a tile's exps and merge factors (attn.c's steps)
 *   vsum(NH, NC, v, type, v_stride, vbase, D, j0, j1, t0, e, o, sa, sb)  the tile's value
 *                     sums for NH heads, NC chunks of dims a pass, merged into o
 *   attn_out(out, o, l, D)  out[d] = o[d] / l for d < D
 *
 * The pairs of [begin, end) go in the blocks of kern_attn_next: up to GMAX heads that share
 * a kv head, for up to QMAX consecutive queries. Each K and V row is loaded once per head
 * block, not once per head, and a tile of them once for the block's queries: in prefill
 * the cache of a long context no longer streams from memory once per query. Every query
 * still visits its own tiles in ascending order through exactly the reference's
 * operations. */

#define QMAX 8 /* queries of a block that share each K and V tile */

/* Tile [t0, t0 + T) clipped to keys [j0, j1] for one query's nh heads q (kv head g),
 * merged into st: the reference's steps for each (query, head) pair (attn.c). */
static inline __attribute__((always_inline)) void attn_tile(const struct kern_attn_args *a,
                                                            const uint32_t type, const float *const *q,
                                                            int64_t nh, int64_t g, int64_t t0,
                                                            int64_t j0, int64_t j1,
                                                            struct kern_attn_qstate *st)
{
    const int64_t D = a->head_dim, T = KERN_ATTN_TILE;
    float s[GMAX][KERN_ATTN_TILE] __attribute__((aligned(64)));
    float e[GMAX][KERN_ATTN_TILE] __attribute__((aligned(64)));
    float sa[GMAX], sb[GMAX];
    const int64_t kbase = g * (a->k_head_stride ? a->k_head_stride : D);
    for (int64_t i = 0; i < nh; i++)
        for (int64_t x = 0; x < T; x++)
            s[i][x] = -INFINITY;
    /* scores: heads in fours against each key (sharing its K row), then the other heads'
     * (key, head) pairs, key-major, four at a time */
    const int64_t nh4 = nh / 4 * 4, nr = nh - nh4;
    for (int64_t j = j0; nh4 > 0 && j <= j1; j++) {
        int64_t off = j * a->k_stride + kbase;
        const int64_t offs[4] = {off, off, off, off};
        for (int64_t i0 = 0; i0 < nh4; i0 += 4) {
            float sc[4];
            dot4(q + i0, a->k, type, offs, D, sc);
            for (int c = 0; c < 4; c++)
                s[i0 + c][j - t0] = sc[c] * a->scale;
        }
    }
    int64_t n_pairs = (j1 - j0 + 1) * nr, jn = j0, in = 0; /* the next pair */
    for (int64_t pp = 0; pp < n_pairs; pp += 4) {
        const float *qc[4];
        int64_t off[4], jc[4], ic[4];
        for (int c = 0; c < 4; c++) {
            if (pp + c < n_pairs) {
                jc[c] = jn;
                ic[c] = nh4 + in;
                if (++in == nr) {
                    in = 0;
                    jn++;
                }
            } else { /* spare slots redo the block's first pair */
                jc[c] = jc[0];
                ic[c] = ic[0];
            }
            qc[c] = q[ic[c]];
            off[c] = jc[c] * a->k_stride + kbase;
        }
        float sc[4];
        dot4(qc, a->k, type, off, D, sc);
        for (int c = 0; c < 4 && pp + c < n_pairs; c++)
            s[ic[c]][jc[c] - t0] = sc[c] * a->scale;
    }
    if (a->softcap > 0.0f) /* Gemma 2: scalar, as the reference */
        for (int64_t i = 0; i < nh; i++)
            for (int64_t j = j0; j <= j1; j++)
                s[i][j - t0] = kern_softcapf(s[i][j - t0], a->softcap);
    attn_softmax(nh, s, e, st, sa, sb);
    const void *v = a->v;
    const int64_t vs = a->v_stride, vb = g * (a->v_head_stride ? a->v_head_stride : D);
    switch (nh) {
    case 1: vsum(1, 8, v, type, vs, vb, D, j0, j1, t0, e, st->o, sa, sb); break;
    case 2: vsum(2, 4, v, type, vs, vb, D, j0, j1, t0, e, st->o, sa, sb); break;
    case 3: vsum(3, 2, v, type, vs, vb, D, j0, j1, t0, e, st->o, sa, sb); break;
    case 4: vsum(4, 2, v, type, vs, vb, D, j0, j1, t0, e, st->o, sa, sb); break;
    case 5: vsum(5, 1, v, type, vs, vb, D, j0, j1, t0, e, st->o, sa, sb); break;
    case 6: vsum(6, 1, v, type, vs, vb, D, j0, j1, t0, e, st->o, sa, sb); break;
    case 7: vsum(7, 1, v, type, vs, vb, D, j0, j1, t0, e, st->o, sa, sb); break;
    default: vsum(8, 1, v, type, vs, vb, D, j0, j1, t0, e, st->o, sa, sb); break;
    }
}

static inline __attribute__((always_inline)) void attn_body(const struct kern_attn_args *a,
                                                            int64_t begin, int64_t end,
                                                            const uint32_t type)
{
    const int64_t D = a->head_dim, T = KERN_ATTN_TILE, group = a->n_head / a->n_head_kv;
    struct kern_attn_qstate st[QMAX];
    struct kern_attn_iter it = {.idx = begin, .end = end};
    int64_t t, nq, h0, nh;
    while (kern_attn_next(a, &it, QMAX, &t, &nq, &h0, &nh)) {
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
