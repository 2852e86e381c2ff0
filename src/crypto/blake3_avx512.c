/* blake3_avx512.c: BLAKE3 on 16 inputs at once, one input per 32-bit lane of each AVX-512
 * register (state kept transposed, as in blake3_avx2.c). Compiled with AVX-512 flags only;
 * called only when the CPU has them. */
#include "blake3_impl.h"

#include <immintrin.h>

#define V __m512i

static inline V add(V a, V b) { return _mm512_add_epi32(a, b); }
static inline V xor(V a, V b) { return _mm512_xor_si512(a, b); }
static inline V set1(uint32_t x) { return _mm512_set1_epi32((int)x); }

static inline void g(V *s, int a, int b, int c, int d, V x, V y)
{
    s[a] = add(add(s[a], s[b]), x);
    s[d] = _mm512_ror_epi32(xor(s[d], s[a]), 16);
    s[c] = add(s[c], s[d]);
    s[b] = _mm512_ror_epi32(xor(s[b], s[c]), 12);
    s[a] = add(add(s[a], s[b]), y);
    s[d] = _mm512_ror_epi32(xor(s[d], s[a]), 8);
    s[c] = add(s[c], s[d]);
    s[b] = _mm512_ror_epi32(xor(s[b], s[c]), 7);
}

/* Transposes a 16x16 matrix of 32-bit words held as 16 rows: 32-bit and 64-bit unpacks
 * transpose each 4x4 block inside the 128-bit lanes, then two 128-bit lane shuffles
 * transpose the 4x4 matrix of blocks. */
static inline void transpose16(V r[16])
{
    V t[16], u[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    /* u[4k+j], 128-bit lane l: column 4l+j of rows 4k..4k+3. */
    for (int k = 0; k < 4; k++) {
        u[4 * k + 0] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    /* Row 4l+j of the result, lane m = u[4m+j] lane l. */
    for (int j = 0; j < 4; j++) {
        V a = u[j], b = u[4 + j], c = u[8 + j], d = u[12 + j];
        V v0 = _mm512_shuffle_i32x4(a, b, 0x44), v1 = _mm512_shuffle_i32x4(a, b, 0xEE);
        V v2 = _mm512_shuffle_i32x4(c, d, 0x44), v3 = _mm512_shuffle_i32x4(c, d, 0xEE);
        r[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        r[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

void b3_hash16_avx512(const uint8_t *in, size_t stride, size_t blocks, const uint32_t key[8],
                      uint64_t counter, bool increment, uint8_t flags, uint8_t flags_start,
                      uint8_t flags_end, uint8_t *out)
{
    V h[16];
    for (int i = 0; i < 8; i++)
        h[i] = set1(key[i]);
    uint32_t lo[16], hi[16];
    for (int i = 0; i < 16; i++) {
        uint64_t c = counter + (increment ? (uint64_t)i : 0);
        lo[i] = (uint32_t)c;
        hi[i] = (uint32_t)(c >> 32);
    }
    const V ctr_lo = _mm512_loadu_si512(lo), ctr_hi = _mm512_loadu_si512(hi);
    for (size_t b = 0; b < blocks; b++) {
        V m[16];
        for (int i = 0; i < 16; i++)
            m[i] = _mm512_loadu_si512(in + (size_t)i * stride + 64 * b);
        transpose16(m);
        uint8_t f = flags;
        if (b == 0)
            f |= flags_start;
        if (b + 1 == blocks)
            f |= flags_end;
        V s[16] = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7],
                   set1(B3_IV[0]), set1(B3_IV[1]), set1(B3_IV[2]), set1(B3_IV[3]),
                   ctr_lo, ctr_hi, set1(64), set1(f)};
        for (int r = 0; r < 7; r++) {
            const uint8_t *k = B3_SCHEDULE[r];
            g(s, 0, 4, 8, 12, m[k[0]], m[k[1]]);
            g(s, 1, 5, 9, 13, m[k[2]], m[k[3]]);
            g(s, 2, 6, 10, 14, m[k[4]], m[k[5]]);
            g(s, 3, 7, 11, 15, m[k[6]], m[k[7]]);
            g(s, 0, 5, 10, 15, m[k[8]], m[k[9]]);
            g(s, 1, 6, 11, 12, m[k[10]], m[k[11]]);
            g(s, 2, 7, 8, 13, m[k[12]], m[k[13]]);
            g(s, 3, 4, 9, 14, m[k[14]], m[k[15]]);
        }
        for (int i = 0; i < 8; i++)
            h[i] = xor(s[i], s[i + 8]);
    }
    /* Rows 8..15 are zero padding; row i of the transpose holds input i's 8 CV words in
     * its low 256 bits. */
    for (int i = 8; i < 16; i++)
        h[i] = _mm512_setzero_si512();
    transpose16(h);
    for (int i = 0; i < 16; i++)
        _mm256_storeu_si256((__m256i *)(out + 32 * i), _mm512_castsi512_si256(h[i]));
}
