/* blake3_portable.c: the reference BLAKE3 compression function, one node at a time. The
 * SIMD files must agree with it byte for byte (tests/unit/test_blake3.c). */
#include "blake3_impl.h"

static inline uint32_t rotr32(uint32_t w, unsigned c)
{
    return (w >> c) | (w << (32 - c));
}

/* The quarter-round: mixes two message words into one column or diagonal. */
static inline void g(uint32_t *s, int a, int b, int c, int d, uint32_t x, uint32_t y)
{
    s[a] = s[a] + s[b] + x;
    s[d] = rotr32(s[d] ^ s[a], 16);
    s[c] = s[c] + s[d];
    s[b] = rotr32(s[b] ^ s[c], 12);
    s[a] = s[a] + s[b] + y;
    s[d] = rotr32(s[d] ^ s[a], 8);
    s[c] = s[c] + s[d];
    s[b] = rotr32(s[b] ^ s[c], 7);
}

static void compress_rounds(uint32_t s[16], const uint32_t cv[8], const uint8_t block[64],
                            uint8_t block_len, uint64_t counter, uint8_t flags)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = b3_load32(block + 4 * i);
    for (int i = 0; i < 8; i++)
        s[i] = cv[i];
    s[8] = B3_IV[0];
    s[9] = B3_IV[1];
    s[10] = B3_IV[2];
    s[11] = B3_IV[3];
    s[12] = (uint32_t)counter;
    s[13] = (uint32_t)(counter >> 32);
    s[14] = block_len;
    s[15] = flags;
    B3_ROUNDS(g, s, m);
}

void b3_compress_in_place(uint32_t cv[8], const uint8_t block[64], uint8_t block_len,
                          uint64_t counter, uint8_t flags)
{
    uint32_t s[16];
    compress_rounds(s, cv, block, block_len, counter, flags);
    for (int i = 0; i < 8; i++)
        cv[i] = s[i] ^ s[i + 8];
}

void b3_compress_xof(const uint32_t cv[8], const uint8_t block[64], uint8_t block_len,
                     uint64_t counter, uint8_t flags, uint8_t out[64])
{
    uint32_t s[16];
    compress_rounds(s, cv, block, block_len, counter, flags);
    for (int i = 0; i < 8; i++) {
        b3_store32(out + 4 * i, s[i] ^ s[i + 8]);
        b3_store32(out + 32 + 4 * i, s[i + 8] ^ cv[i]);
    }
}

void b3_hash_many_portable(const uint8_t *in, size_t stride, size_t n, size_t blocks,
                           const uint32_t key[8], uint64_t counter, bool increment,
                           uint8_t flags, uint8_t flags_start, uint8_t flags_end, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t cv[8];
        for (int w = 0; w < 8; w++)
            cv[w] = key[w];
        const uint8_t *p = in + i * stride;
        uint64_t ctr = counter + (increment ? i : 0);
        for (size_t b = 0; b < blocks; b++) {
            uint8_t f = flags;
            if (b == 0)
                f |= flags_start;
            if (b + 1 == blocks)
                f |= flags_end;
            b3_compress_in_place(cv, p + 64 * b, 64, ctr, f);
        }
        for (int w = 0; w < 8; w++)
            b3_store32(out + 32 * i + 4 * w, cv[w]);
    }
}
