/* blake3_impl.h: BLAKE3 internals shared by the portable, AVX2 and AVX-512 files. Not part
 * of the public API. */
#ifndef KN_CRYPTO_BLAKE3_IMPL_H
#define KN_CRYPTO_BLAKE3_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* Domain-separation flags, the last word of every compression's state. */
enum {
    B3_CHUNK_START = 1 << 0,
    B3_CHUNK_END = 1 << 1,
    B3_PARENT = 1 << 2,
    B3_ROOT = 1 << 3,
    B3_KEYED_HASH = 1 << 4,
    B3_DERIVE_KEY_CONTEXT = 1 << 5,
    B3_DERIVE_KEY_MATERIAL = 1 << 6,
};

/* The SHA-256 initial values, BLAKE3's IV. */
static const uint32_t B3_IV[8] = {0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
                                  0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};

/* Which message word each round reads, in G order: round r uses the message permuted r
 * times by (2,6,3,10,7,0,4,13,1,11,12,5,9,14,15,8). Precomputed so no round moves data. */
static const uint8_t B3_SCHEDULE[7][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8},
    {3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1},
    {10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6},
    {12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4},
    {9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7},
    {11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13},
};

/* The 7 rounds: G on the four columns, then on the four diagonals, with round r's message
 * words. Written out with constant r so that every message index is resolved at compile
 * time and the SIMD message words can stay in registers. */
#define B3_ROUND(G, s, m, r)                                                                 \
    do {                                                                                   \
        G(s, 0, 4, 8, 12, m[B3_SCHEDULE[r][0]], m[B3_SCHEDULE[r][1]]);                    \
        G(s, 1, 5, 9, 13, m[B3_SCHEDULE[r][2]], m[B3_SCHEDULE[r][3]]);                    \
        G(s, 2, 6, 10, 14, m[B3_SCHEDULE[r][4]], m[B3_SCHEDULE[r][5]]);                   \
        G(s, 3, 7, 11, 15, m[B3_SCHEDULE[r][6]], m[B3_SCHEDULE[r][7]]);                   \
        G(s, 0, 5, 10, 15, m[B3_SCHEDULE[r][8]], m[B3_SCHEDULE[r][9]]);                   \
        G(s, 1, 6, 11, 12, m[B3_SCHEDULE[r][10]], m[B3_SCHEDULE[r][11]]);                 \
        G(s, 2, 7, 8, 13, m[B3_SCHEDULE[r][12]], m[B3_SCHEDULE[r][13]]);                  \
        G(s, 3, 4, 9, 14, m[B3_SCHEDULE[r][14]], m[B3_SCHEDULE[r][15]]);                  \
    } while (0)
#define B3_ROUNDS(G, s, m)                                                                   \
    do {                                                                                   \
        B3_ROUND(G, s, m, 0);                                                              \
        B3_ROUND(G, s, m, 1);                                                              \
        B3_ROUND(G, s, m, 2);                                                              \
        B3_ROUND(G, s, m, 3);                                                              \
        B3_ROUND(G, s, m, 4);                                                              \
        B3_ROUND(G, s, m, 5);                                                              \
        B3_ROUND(G, s, m, 6);                                                              \
    } while (0)

static inline uint32_t b3_load32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void b3_store32(uint8_t *p, uint32_t w)
{
    p[0] = (uint8_t)w;
    p[1] = (uint8_t)(w >> 8);
    p[2] = (uint8_t)(w >> 16);
    p[3] = (uint8_t)(w >> 24);
}

/* The reference compression function (blake3_portable.c). cv is updated in place to the
 * first 8 output words; block_len <= 64 bytes, the rest of block zero. */
void b3_compress_in_place(uint32_t cv[8], const uint8_t block[64], uint8_t block_len,
                          uint64_t counter, uint8_t flags);
/* The full 64-byte output (extendable output of a root node). */
void b3_compress_xof(const uint32_t cv[8], const uint8_t block[64], uint8_t block_len,
                     uint64_t counter, uint8_t flags, uint8_t out[64]);

/* Hashes n inputs at in + i*stride, each `blocks` full 64-byte blocks long, all starting
 * from key: input i uses counter + (increment ? i : 0), flags on every block, flags_start
 * added on the first and flags_end on the last. Writes n 32-byte CVs to out + 32*i. Used
 * for n whole chunks (16 blocks, CHUNK_START/CHUNK_END) and for n parent nodes (1 block,
 * PARENT). out must not overlap in. */
typedef void b3_hash_many_fn(const uint8_t *in, size_t stride, size_t n, size_t blocks,
                             const uint32_t key[8], uint64_t counter, bool increment,
                             uint8_t flags, uint8_t flags_start, uint8_t flags_end,
                             uint8_t *out);

b3_hash_many_fn b3_hash_many_portable;
/* These process exactly 8 (AVX2) or 16 (AVX-512) inputs. */
void b3_hash8_avx2(const uint8_t *in, size_t stride, size_t blocks, const uint32_t key[8],
                   uint64_t counter, bool increment, uint8_t flags, uint8_t flags_start,
                   uint8_t flags_end, uint8_t *out);
void b3_hash16_avx512(const uint8_t *in, size_t stride, size_t blocks, const uint32_t key[8],
                      uint64_t counter, bool increment, uint8_t flags, uint8_t flags_start,
                      uint8_t flags_end, uint8_t *out);

#endif
