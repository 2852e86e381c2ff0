/* blake3_avx2.c: BLAKE3 on 8 inputs at once, one input per 32-bit lane of each AVX2
 * register (the state is kept transposed: register i holds state word i of all 8 inputs).
 * Compiled with AVX2 flags only; called only when the CPU has them. */
#include "blake3_impl.h"

#include <immintrin.h>

#define V __m256i

static inline V add(V a, V b) { return _mm256_add_epi32(a, b); }
static inline V xor(V a, V b) { return _mm256_xor_si256(a, b); }
static inline V set1(uint32_t x) { return _mm256_set1_epi32((int)x); }

/* Byte-shuffle rotations (16 and 8 are whole bytes), shift-or for 12 and 7. */
static inline V rot16(V x)
{
    const V m = _mm256_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, 2, 3, 0,
                                 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    return _mm256_shuffle_epi8(x, m);
}
static inline V rot8(V x)
{
    const V m = _mm256_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12, 1, 2, 3,
                                 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12);
    return _mm256_shuffle_epi8(x, m);
}
static inline V rot12(V x) { return _mm256_or_si256(_mm256_srli_epi32(x, 12), _mm256_slli_epi32(x, 20)); }
static inline V rot7(V x) { return _mm256_or_si256(_mm256_srli_epi32(x, 7), _mm256_slli_epi32(x, 25)); }

static inline void g(V *s, int a, int b, int c, int d, V x, V y)
{
    s[a] = add(add(s[a], s[b]), x);
    s[d] = rot16(xor(s[d], s[a]));
    s[c] = add(s[c], s[d]);
    s[b] = rot12(xor(s[b], s[c]));
    s[a] = add(add(s[a], s[b]), y);
    s[d] = rot8(xor(s[d], s[a]));
    s[c] = add(s[c], s[d]);
    s[b] = rot7(xor(s[b], s[c]));
}

/* Transposes an 8x8 matrix of 32-bit words held as 8 rows. */
static inline void transpose8(V r[8])
{
    V t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    V t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    V t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    V t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    V u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    V u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    V u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    V u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

void b3_hash8_avx2(const uint8_t *in, size_t stride, size_t blocks, const uint32_t key[8],
                   uint64_t counter, bool increment, uint8_t flags, uint8_t flags_start,
                   uint8_t flags_end, uint8_t *out)
{
    V h[8];
    for (int i = 0; i < 8; i++)
        h[i] = set1(key[i]);
    uint32_t lo[8], hi[8];
    for (int i = 0; i < 8; i++) {
        uint64_t c = counter + (increment ? (uint64_t)i : 0);
        lo[i] = (uint32_t)c;
        hi[i] = (uint32_t)(c >> 32);
    }
    const V ctr_lo = _mm256_loadu_si256((const V *)lo), ctr_hi = _mm256_loadu_si256((const V *)hi);
    for (size_t b = 0; b < blocks; b++) {
        V m[16];
        for (int i = 0; i < 8; i++) {
            const uint8_t *p = in + (size_t)i * stride + 64 * b;
            m[i] = _mm256_loadu_si256((const V *)p);
            m[8 + i] = _mm256_loadu_si256((const V *)(p + 32));
        }
        transpose8(m);
        transpose8(m + 8);
        uint8_t f = flags;
        if (b == 0)
            f |= flags_start;
        if (b + 1 == blocks)
            f |= flags_end;
        V s[16] = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7],
                   set1(B3_IV[0]), set1(B3_IV[1]), set1(B3_IV[2]), set1(B3_IV[3]),
                   ctr_lo, ctr_hi, set1(64), set1(f)};
        B3_ROUNDS(g, s, m);
        for (int i = 0; i < 8; i++)
            h[i] = xor(s[i], s[i + 8]);
    }
    transpose8(h);
    for (int i = 0; i < 8; i++)
        _mm256_storeu_si256((V *)(out + 32 * i), h[i]);
}
