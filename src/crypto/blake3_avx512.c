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
 * transpose the 4x4 matrix of blocks. Written out (no loops over arrays) so that all 16
 * rows stay in registers. */
#define UNPACK32(k)                                                                          \
    V t##k##a = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);                              \
    V t##k##b = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1])
/* u[4k+j], 128-bit lane l: column 4l+j of rows 4k..4k+3. */
#define UNPACK64(k, t0, t1, t2, t3)                                                          \
    V u##k##0 = _mm512_unpacklo_epi64(t0, t2);                                               \
    V u##k##1 = _mm512_unpackhi_epi64(t0, t2);                                               \
    V u##k##2 = _mm512_unpacklo_epi64(t1, t3);                                               \
    V u##k##3 = _mm512_unpackhi_epi64(t1, t3)
/* Row 4l+j of the result, lane m = u[4m+j] lane l. */
#define LANES(j)                                                                             \
    do {                                                                                     \
        V v0 = _mm512_shuffle_i32x4(u0##j, u1##j, 0x44), v1 = _mm512_shuffle_i32x4(u0##j, u1##j, 0xEE); \
        V v2 = _mm512_shuffle_i32x4(u2##j, u3##j, 0x44), v3 = _mm512_shuffle_i32x4(u2##j, u3##j, 0xEE); \
        r[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);                                           \
        r[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);                                       \
        r[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);                                       \
        r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);                                      \
    } while (0)

static inline __attribute__((always_inline)) void transpose16(V r[16])
{
    UNPACK32(0);
    UNPACK32(1);
    UNPACK32(2);
    UNPACK32(3);
    UNPACK32(4);
    UNPACK32(5);
    UNPACK32(6);
    UNPACK32(7);
    UNPACK64(0, t0a, t0b, t1a, t1b);
    UNPACK64(1, t2a, t2b, t3a, t3b);
    UNPACK64(2, t4a, t4b, t5a, t5b);
    UNPACK64(3, t6a, t6b, t7a, t7b);
    LANES(0);
    LANES(1);
    LANES(2);
    LANES(3);
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
        const uint8_t *p = in + 64 * b;
#define LOAD(i) m[i] = _mm512_loadu_si512(p + (size_t)(i) * stride)
        LOAD(0); LOAD(1); LOAD(2); LOAD(3); LOAD(4); LOAD(5); LOAD(6); LOAD(7);
        LOAD(8); LOAD(9); LOAD(10); LOAD(11); LOAD(12); LOAD(13); LOAD(14); LOAD(15);
#undef LOAD
        transpose16(m);
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
    /* Rows 8..15 are zero padding; row i of the transpose holds input i's 8 CV words in
     * its low 256 bits. */
    for (int i = 8; i < 16; i++)
        h[i] = _mm512_setzero_si512();
    transpose16(h);
    for (int i = 0; i < 16; i++)
        _mm256_storeu_si256((__m256i *)(out + 32 * i), _mm512_castsi512_si256(h[i]));
}
