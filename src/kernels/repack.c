/* repack.c: weight layouts rearranged at load time for the SIMD kernels. The values and
 * scales are the file's, bit for bit; only their order changes (the kernels then compute
 * exactly the integers and float steps of docs/numerics.md).
 *
 * Rows are taken 16 at a time (a "group"; a partial last group is padded with zero rows).
 * For each group, the weight blocks follow in ascending order, each a "group-block":
 * the same block of the 16 rows, interleaved so one 64-byte load gives 4 consecutive
 * quant bytes of every row (one dword per row: the layout vpdpbusd and vpmaddubsw want).
 * A "chunk" below is such a 64-byte unit: row r's 4 bytes at offset 4r. AVX2 kernels take
 * rows 0-7 from the first 32 bytes and rows 8-15 from the last 32.
 *
 *   Q8_0 (544 B): d[16] f16 | 8 chunks c: qs[4c..4c+3] XOR 0x80 (i.e. q + 128 as u8)
 *   Q4_0 (288 B): d[16] f16 | 4 chunks t: qs[4t..4t+3] (low nibble = element 4t+i,
 *                 high nibble = element 16+4t+i)
 *   Q4_1 (320 B): d[16] f16 | m[16] f16 | 4 chunks as Q4_0
 *   Q5_0 (352 B): d[16] f16 | 4 chunks as Q4_0 | 1 chunk hb: byte i of row r holds in bit t
 *                 the 5th bit of element 4t+i and in bit 4+t that of element 16+4t+i
 *   Q5_1 (384 B): d[16] f16 | m[16] f16 | 4 chunks | 1 chunk hb (as Q5_0)
 *   Q4_K (2368 B): d[16] f16 | dmin[16] f16 | sc[8][16] u8 (sub-block j, row r) |
 *                 mins[4][16][2] u8 (pair p, row r: m_2p, m_2p+1) | 32 chunks 8c+t:
 *                 qs[32c+4t .. 32c+4t+3] (low nibble: sub-block 2c, high: 2c+1)
 *   Q5_K (2880 B): Q4_K's head (320 B) | 8 chunks t: qh[4t .. 4t+3] | Q4_K's 32 qs chunks
 *   Q6_K (3360 B): d[16] f16 | sc[8][16][2] i8 (pair p, row r: sc_2p, sc_2p+1) | for
 *                 each sub-block j = 0..15, three chunks A, B, C of the 6-bit values
 *                 v(k) = q + 32 (0..63) of elements 16j + 4k + i, k = 0..3. Byte i of row
 *                 r: A = v(0) | (v(3) & 3) << 6, B = v(1) | (v(3) >> 2 & 3) << 6,
 *                 C = v(2) | (v(3) >> 4) << 6. Three values are one mask each, the fourth
 *                 three shifts and three masks (the file's nibbles and 2-bit fields took
 *                 about 17 operations per 4 values), and all four go to one sub-block's
 *                 sum, so a token keeps one partial sum instead of four. The kernels read
 *                 the triples once, in memory order (one stream).
 *   IQ4_NL (288 B): d[16] f16 | 4 chunks t: qs[4t..4t+3] (nibbles as Q4_0: level indices)
 *   MXFP4 (288 B): d[16] bf16 (the E8M0 scale halved, 2^(e-128): a bf16 exactly, as the
 *                 kernels' f32 by a 16-bit shift) | 4 chunks t: qs[4t..4t+3] (as IQ4_NL)
 *   Q2_K (1344 B): d[16] f16 | dmin[16] f16 | sc[8][16][2] u8 (pair p, row r: the file's
 *                 scale bytes 2p, 2p+1: scale in the low nibble, min in the high) |
 *                 16 chunks 8h2 + g: qs[32h2 + 4g .. +3] (byte i, bits 2t: element
 *                 128h2 + 32t + 4g + i). The file's size exactly.
 *   Q3_K (1824 B): d[16] f16 | sc[8][16][2] i8 (pair p, row r: the signed scales 2p,
 *                 2p+1, -32..31) | for h2 = 0..1, q = 0..3, three chunks A, B, C of the
 *                 3-bit values v(g, t) = low 2 bits + 4 * high bit (0..7; the weight is
 *                 v - 4) of elements 128h2 + 32t + 4g + i, for the chunk pair g = 2q
 *                 (even) and 2q + 1 (odd). Byte i of row r: A = v(e,0) | v(e,1) << 3 |
 *                 (v(o,2) & 3) << 6, B = v(e,2) | v(e,3) << 3 | (v(o,3) & 3) << 6,
 *                 C = v(o,0) | v(o,1) << 3 | (v(o,2) >> 2) << 6 | (v(o,3) >> 2) << 7.
 *                 Six of the eight values are one mask each (v(.,1) and v(.,3) as 8
 *                 times the value, in place), the other two are built from the top bits:
 *                 about 12 vector operations per chunk where the file's 2-bit fields and
 *                 separate high bits took 18 (docs/performance.md "Round 6"). The
 *                 kernels read the triples once, in memory order (one stream).
 *   IQ4_XS (2208 B): d[16] f16 | sc[4][16][2] i8 (pair p, row r: the signed scales of
 *                 sub-blocks 2p, 2p+1, -32..31) | 32 chunks 4j + t: qs[16j + 4t .. +3]
 *                 (low nibble: element 32j + 4t + i, high: 32j + 16 + 4t + i)
 */
#include "kern_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Bytes of one group-block of type t, 0 if t has no packed layout. */
static size_t group_block_bytes(enum quant_type t)
{
    switch (t) {
    case QT_Q8_0: return 544;
    case QT_Q4_0: return 288;
    case QT_Q4_1: return 320;
    case QT_Q5_0: return 352;
    case QT_Q5_1: return 384;
    case QT_Q4_K: return 2368;
    case QT_Q5_K: return 2880;
    case QT_Q6_K: return 3360;
    case QT_IQ4_NL: return 288;
    case QT_MXFP4: return 288;
    case QT_Q2_K: return 1344;
    case QT_Q3_K: return 1824;
    case QT_IQ4_XS: return 2208;
    default: return 0;
    }
}

size_t kern_repack_group_block_bytes(enum quant_type t)
{
    return group_block_bytes(t);
}

size_t kern_repack_bytes(enum quant_type type, int64_t N, int64_t K)
{
    size_t gbb = group_block_bytes(type);
    if (!gbb)
        return 0;
    size_t groups = (size_t)((N + 15) / 16), nb = (size_t)(K / quant_type_info(type)->block_size);
    size_t total;
    if (!kn_mul_size(groups, nb, &total) || !kn_mul_size(total, gbb, &total))
        return 0;
    return total;
}

/* Copies 4 bytes of each of the 16 rows' source into one chunk; src[r] NULL = zero row. */
static inline void put_chunk(uint8_t *dst, const uint8_t *const src[16], size_t off,
                             uint8_t xor_mask)
{
    const uint32_t x4 = xor_mask * 0x01010101u;
    for (int r = 0; r < 16; r++) {
        uint32_t v = 0;
        if (src[r]) {
            memcpy(&v, src[r] + off, 4);
            v ^= x4;
        }
        memcpy(dst + 4 * r, &v, 4);
    }
}

static void put_f16s(uint8_t *dst, const uint8_t *const blk[16], size_t off)
{
    for (int r = 0; r < 16; r++) {
        if (blk[r])
            memcpy(dst + 2 * r, blk[r] + off, 2);
        else
            memset(dst + 2 * r, 0, 2);
    }
}

static void pack_q32(enum quant_type t, const uint8_t *const blk[16], uint8_t *o)
{
    size_t moff = 0, qsoff, qhoff = 0;
    if (t == QT_MXFP4) {
        for (int r = 0; r < 16; r++) {
            float d = blk[r] ? quant_e8m0_half(blk[r][0]) : 0.0f;
            uint32_t bits;
            memcpy(&bits, &d, 4);
            uint16_t h = (uint16_t)(bits >> 16);
            memcpy(o + 2 * r, &h, 2);
        }
        for (int c = 0; c < 4; c++)
            put_chunk(o + 32 + 64 * c, blk, offsetof(struct block_mxfp4, qs) + 4 * c, 0);
        return;
    }
    put_f16s(o, blk, 0);
    o += 32;
    switch (t) {
    case QT_Q8_0:
        for (int c = 0; c < 8; c++)
            put_chunk(o + 64 * c, blk, 2 + 4 * c, 0x80);
        return;
    case QT_Q4_0: case QT_IQ4_NL: qsoff = 2; break;
    case QT_Q4_1: moff = 2; qsoff = 4; break;
    case QT_Q5_0: qhoff = 2; qsoff = 6; break;
    case QT_Q5_1: moff = 2; qhoff = 4; qsoff = 8; break;
    default: return;
    }
    if (moff) {
        put_f16s(o, blk, moff);
        o += 32;
    }
    for (int c = 0; c < 4; c++)
        put_chunk(o + 64 * c, blk, qsoff + 4 * c, 0);
    o += 256;
    if (qhoff) {
        for (int r = 0; r < 16; r++) {
            uint32_t qh = 0;
            if (blk[r])
                qh = (uint32_t)blk[r][qhoff] | (uint32_t)blk[r][qhoff + 1] << 8 |
                     (uint32_t)blk[r][qhoff + 2] << 16 | (uint32_t)blk[r][qhoff + 3] << 24;
            for (int i = 0; i < 4; i++) {
                uint8_t b = 0;
                for (int c = 0; c < 4; c++) {
                    b |= (uint8_t)(((qh >> (4 * c + i)) & 1) << c);
                    b |= (uint8_t)(((qh >> (16 + 4 * c + i)) & 1) << (4 + c));
                }
                o[4 * r + i] = b;
            }
        }
    }
}

/* Q2_K, Q3_K and IQ4_XS (see the table at the top). */
static void pack_k_low(enum quant_type t, const uint8_t *const blk[16], uint8_t *o)
{
    if (t == QT_IQ4_XS) {
        put_f16s(o, blk, offsetof(struct block_iq4_xs, d));
        o += 32;
        for (int r = 0; r < 16; r++) {
            uint16_t sh = 0;
            if (blk[r])
                memcpy(&sh, blk[r] + offsetof(struct block_iq4_xs, scales_h), 2);
            for (int j = 0; j < 8; j++) {
                int sc = blk[r] ? quant_iq4xs_scale(sh, blk[r] + offsetof(struct block_iq4_xs, scales_l), j)
                                : 0;
                o[32 * (j / 2) + 2 * r + (j & 1)] = (uint8_t)(int8_t)sc;
            }
        }
        o += 128;
        for (int c = 0; c < 32; c++)
            put_chunk(o + 64 * c, blk, offsetof(struct block_iq4_xs, qs) + 4 * c, 0);
        return;
    }
    const bool two = t == QT_Q2_K;
    put_f16s(o, blk, two ? offsetof(struct block_q2_K, d) : offsetof(struct block_q3_K, d));
    o += 32;
    if (two) {
        put_f16s(o, blk, offsetof(struct block_q2_K, dmin));
        o += 32;
    }
    for (int r = 0; r < 16; r++) {
        int sc[16] = {0};
        if (blk[r] && two)
            for (int i = 0; i < 16; i++)
                sc[i] = blk[r][offsetof(struct block_q2_K, scales) + i];
        else if (blk[r])
            quant_q3k_scales(blk[r] + offsetof(struct block_q3_K, scales), sc);
        for (int i = 0; i < 16; i++)
            o[32 * (i / 2) + 2 * r + (i & 1)] = (uint8_t)sc[i];
    }
    o += 256;
    if (two) {
        for (int c = 0; c < 16; c++)
            put_chunk(o + 64 * c, blk, offsetof(struct block_q2_K, qs) + 4 * c, 0);
        return;
    }
    const size_t hm = offsetof(struct block_q3_K, hmask), qs = offsetof(struct block_q3_K, qs);
    for (int h2 = 0; h2 < 2; h2++) {
        for (int q = 0; q < 4; q++) {
            for (int r = 0; r < 16; r++) {
                for (int i = 0; i < 4; i++) {
                    unsigned v[2][4] = {{0}}; /* [even, odd chunk][t] */
                    for (int e = 0; e < 2 && blk[r]; e++) {
                        const int l = 4 * (2 * q + e) + i; /* qs[32h2 + l], hmask[l] */
                        for (int t = 0; t < 4; t++)
                            v[e][t] = (blk[r][qs + 32 * h2 + l] >> (2 * t) & 3u) |
                                      (blk[r][hm + l] >> (4 * h2 + t) & 1u) << 2;
                    }
                    o[4 * r + i] = (uint8_t)(v[0][0] | v[0][1] << 3 | (v[1][2] & 3) << 6);
                    o[64 + 4 * r + i] = (uint8_t)(v[0][2] | v[0][3] << 3 | (v[1][3] & 3) << 6);
                    o[128 + 4 * r + i] = (uint8_t)(v[1][0] | v[1][1] << 3 | (v[1][2] >> 2) << 6 |
                                                   (v[1][3] >> 2) << 7);
                }
            }
            o += 192;
        }
    }
}

static void pack_k(enum quant_type t, const uint8_t *const blk[16], uint8_t *o)
{
    if (t == QT_Q2_K || t == QT_Q3_K || t == QT_IQ4_XS) {
        pack_k_low(t, blk, o);
        return;
    }
    if (t == QT_Q6_K) {
        put_f16s(o, blk, offsetof(struct block_q6_K, d));
        o += 32;
        for (int i = 0; i < 16; i++)
            for (int r = 0; r < 16; r++)
                o[32 * (i / 2) + 2 * r + (i & 1)] =
                    blk[r] ? blk[r][offsetof(struct block_q6_K, scales) + i] : 0;
        o += 256;
        const size_t ql = offsetof(struct block_q6_K, ql), qh = offsetof(struct block_q6_K, qh);
        for (int j = 0; j < 16; j++) {
            /* Sub-block j's elements 16j + m are 128h + 32t + l with h = j / 8, t = j % 8 / 2
             * and l = 16 (j % 2) + m (kern_hd.h): 16 consecutive bytes of ql and of qh. */
            const int h = j / 8, t = j % 8 / 2, l0 = 16 * (j % 2);
            const size_t qlo = ql + 64 * h + 32 * (t & 1) + l0, qho = qh + 32 * h + l0;
            /* Four bytes at a time: v[k] holds value k of bytes i = 0..3, each masked within
             * its byte (so the bits a shift moves across bytes are dropped, in either byte
             * order). */
            const uint32_t m2 = 0x03030303u;
            for (int r = 0; r < 16; r++) {
                uint32_t v[4] = {0};
                for (int k = 0; k < 4 && blk[r]; k++)
                    v[k] = (kn_hd_ld32(blk[r] + qlo + 4 * k) >> (4 * (t >> 1)) & 0x0F0F0F0Fu) |
                           (kn_hd_ld32(blk[r] + qho + 4 * k) >> (2 * t) & m2) << 4;
                kn_hd_st32(o + 4 * r, v[0] | (v[3] & m2) << 6);
                kn_hd_st32(o + 64 + 4 * r, v[1] | (v[3] >> 2 & m2) << 6);
                kn_hd_st32(o + 128 + 4 * r, v[2] | (v[3] >> 4 & m2) << 6);
            }
            o += 192;
        }
        return;
    }
    /* Q4_K and Q5_K share the head: d, dmin, scales[12] at offsets 0, 2, 4. */
    put_f16s(o, blk, 0);
    put_f16s(o + 32, blk, 2);
    o += 64;
    for (int r = 0; r < 16; r++) {
        for (int j = 0; j < 8; j++) {
            int sc = 0, m = 0;
            if (blk[r])
                quant_k4_scale_min(blk[r] + 4, j, &sc, &m);
            o[16 * j + r] = (uint8_t)sc;
            o[128 + 32 * (j / 2) + 2 * r + (j & 1)] = (uint8_t)m;
        }
    }
    o += 256;
    /* Q5_K's high bits come first: every pass over qs reads them, and memory order
     * then matches the first pass (the hardware prefetcher sees one stream). */
    if (t == QT_Q5_K) {
        for (int tt = 0; tt < 8; tt++)
            put_chunk(o + 64 * tt, blk, offsetof(struct block_q5_K, qh) + 4 * tt, 0);
        o += 512;
    }
    size_t qsoff = t == QT_Q4_K ? offsetof(struct block_q4_K, qs) : offsetof(struct block_q5_K, qs);
    for (int c = 0; c < 4; c++)
        for (int tt = 0; tt < 8; tt++)
            put_chunk(o + 64 * (8 * c + tt), blk, qsoff + 32 * c + 4 * tt, 0);
}

/* Groups [g0, g1) of w into dst (the whole layout's start). */
static void repack_groups(const struct kern_weight *w, uint8_t *dst, int64_t g0, int64_t g1)
{
    const struct quant_type_info *ti = quant_type_info(w->type);
    size_t gbb = group_block_bytes(w->type);
    int64_t nb = w->K / ti->block_size;
    uint8_t *o = dst + (size_t)g0 * (size_t)nb * gbb;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk[16];
            for (int r = 0; r < 16; r++) {
                int64_t n = 16 * g + r;
                blk[r] = n < w->N ? (const uint8_t *)w->data + (size_t)n * w->row_bytes +
                                        (size_t)b * ti->type_size
                                  : NULL;
            }
            if (ti->block_size == 32)
                pack_q32(w->type, blk, o);
            else
                pack_k(w->type, blk, o);
            o += gbb;
        }
    }
}

void kern_repack(const struct kern_weight *w, void *dst)
{
    repack_groups(w, dst, 0, (w->N + 15) / 16);
}

/* ---------------------------------------------------------------- building the copies */

/* Huge pages for the packed copy: decode streams every weight once per token, and with
 * 4 KiB pages the hardware prefetchers stop at each page boundary and every page costs
 * a TLB miss (a two-level walk under a hypervisor). Copies of 2 MiB or more start on a
 * 2 MiB boundary and ask the kernel for transparent huge pages (advice only: where THP
 * is off this is an ordinary allocation). Freed with free(). */
#define KERN_HUGE_BYTES ((size_t)2 << 20)

static void *packed_alloc(size_t bytes, struct kn_err *err)
{
    if (bytes < KERN_HUGE_BYTES)
        return kn_aligned_alloc(bytes, err);
    void *p = NULL;
    if (posix_memalign(&p, KERN_HUGE_BYTES, bytes) != 0) {
        kn_fail(err, KN_E_NOMEM, "out of memory allocating %zu bytes of packed weights", bytes);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes & ~(KERN_HUGE_BYTES - 1), MADV_HUGEPAGE);
#endif
    return p;
}

/* A share of the parallel repack: groups [g0, g1) of one weight, about REPACK_SHARE_BYTES
 * of output (small enough that two threads on a busy machine stay balanced, large
 * enough that the share counter costs nothing). */
#define REPACK_SHARE_BYTES ((size_t)1 << 20)

struct repack_share {
    const struct kern_weight *w;
    int64_t g0, g1;
};

struct repack_job {
    const struct repack_share *sh;
};

static void repack_task(void *ctx, int ith, int nth)
{
    (void)nth;
    const struct repack_job *j = ctx;
    const struct repack_share *s = &j->sh[ith];
    repack_groups(s->w, s->w->packed, s->g0, s->g1);
}

/* Groups of w per share (w needs a copy of pb bytes). */
static int64_t share_groups(const struct kern_weight *w, size_t pb)
{
    const size_t gb = pb / (size_t)((w->N + 15) / 16);
    return gb >= REPACK_SHARE_BYTES ? 1 : (int64_t)(REPACK_SHARE_BYTES / gb);
}

size_t kern_weight_packed_bytes(const struct kern_weight *w)
{
    /* Only the SIMD kernels read the packed copy: a scalar run (KINETIC_ISA=scalar) keeps
     * the file's layout alone and saves the memory. */
    if (w->packed || kn_isa_active() == KN_ISA_SCALAR)
        return 0;
    return kern_repack_bytes(w->type, w->N, w->K);
}

enum kn_status kern_weight_repack(struct kern_pool *pool, struct kern_weight *const *ws, size_t n,
                                  struct kn_err *err)
{
    size_t n_shares = 0;
    for (size_t i = 0; i < n; i++) {
        const struct kern_weight *w = ws[i];
        size_t pb = kern_weight_packed_bytes(w);
        if (pb)
            n_shares += (size_t)(((w->N + 15) / 16 + share_groups(w, pb) - 1) / share_groups(w, pb));
    }
    if (!n_shares)
        return KN_OK;
    if (n_shares > INT_MAX)
        return kn_fail(err, KN_E_LIMIT, "too many weights to repack (%zu parts)", n_shares);
    struct repack_share *sh = kn_malloc(n_shares * sizeof *sh, err);
    if (!sh)
        return KN_E_NOMEM;
    size_t k = 0, i;
    for (i = 0; i < n; i++) {
        struct kern_weight *w = ws[i];
        size_t pb = kern_weight_packed_bytes(w);
        if (!pb)
            continue;
        if (!(w->packed = packed_alloc(pb, err)))
            break;
        w->packed_bytes = pb;
        const int64_t groups = (w->N + 15) / 16, per = share_groups(w, pb);
        for (int64_t g = 0; g < groups; g += per)
            sh[k++] = (struct repack_share){w, g, g + per < groups ? g + per : groups};
    }
    if (i < n) { /* out of memory: no weight keeps an unfilled copy */
        for (size_t s = 0; s < k; s++)
            if (sh[s].g0 == 0)
                kern_weight_free((struct kern_weight *)sh[s].w);
        free(sh);
        return KN_E_NOMEM;
    }
    struct repack_job j = {sh};
    kern_pool_run_shares(pool, repack_task, &j, (int)k);
    free(sh);
    return KN_OK;
}
