/* blake3.h: Kinetic's own BLAKE3 (hash, keyed hash, key derivation, extendable output),
 * with a portable reference compression and AVX2 (8-way) / AVX-512 (16-way) chunk-parallel
 * versions picked at run time, and multi-threaded hashing of large inputs and files.
 *
 * Every ISA level and every thread count gives the same bytes: BLAKE3's tree is fixed by
 * the input length alone (the left subtree of a node holds the largest power of two of
 * 1024-byte chunks that leaves at least one byte for the right), and the implementations
 * differ only in how many nodes they compress at once. */
#ifndef KN_CRYPTO_BLAKE3_H
#define KN_CRYPTO_BLAKE3_H

#include "../base/base.h"
#include "../base/cpu.h"

#define BLAKE3_OUT_LEN 32
#define BLAKE3_KEY_LEN 32
#define BLAKE3_BLOCK_LEN 64
#define BLAKE3_CHUNK_LEN 1024
/* 2^64 bytes are 2^54 chunks; the lazily merged stack holds at most one CV per level
 * plus the newest. */
#define BLAKE3_MAX_DEPTH 54

/* The chunk being filled: its chaining value and the last (possibly partial) block, kept
 * back until more input proves it is not the chunk's final block. */
struct blake3_chunk_state {
    uint32_t cv[8];
    uint64_t counter; /* this chunk's index in the input */
    uint8_t buf[BLAKE3_BLOCK_LEN];
    uint8_t buf_len;
    uint8_t blocks_done;
    uint8_t flags;
};

/* An incremental hasher. Plain old data: copy it to fork a hash; no free needed. */
struct blake3_hasher {
    uint32_t key[8];
    struct blake3_chunk_state chunk;
    uint8_t flags;
    uint8_t stack_len;
    uint8_t cv_stack[(BLAKE3_MAX_DEPTH + 1) * BLAKE3_OUT_LEN];
};

void blake3_hasher_init(struct blake3_hasher *h);
void blake3_hasher_init_keyed(struct blake3_hasher *h, const uint8_t key[BLAKE3_KEY_LEN]);
/* Key derivation: context is a hard-coded, globally unique, application-specific string. */
void blake3_hasher_init_derive_key(struct blake3_hasher *h, const char *context);
void blake3_hasher_init_derive_key_raw(struct blake3_hasher *h, const void *context,
                                       size_t context_len);
void blake3_hasher_update(struct blake3_hasher *h, const void *input, size_t len);
/* Like blake3_hasher_update, hashing large aligned parts on up to `threads` threads
 * (<= 0: one per online CPU). Same result as the single-threaded update. */
void blake3_hasher_update_threads(struct blake3_hasher *h, const void *input, size_t len,
                                  int threads);
/* blake3_hasher_update_threads for input that is a file mapping: each thread also faults
 * in its pieces' pages first (MADV_POPULATE_READ), so the page-table work is split too and
 * the pages stay mapped for whoever reads them next. */
void blake3_hasher_update_mapped(struct blake3_hasher *h, const void *input, size_t len,
                                 int threads);
/* Compares two hashes in constant time (MACs). */
bool blake3_equal(const uint8_t a[BLAKE3_OUT_LEN], const uint8_t b[BLAKE3_OUT_LEN]);
/* Writes out_len bytes of output (any length: the first 32 are the hash). The hasher is
 * unchanged, so more input may follow. */
void blake3_hasher_finalize(const struct blake3_hasher *h, uint8_t *out, size_t out_len);
/* Writes out_len bytes of the extended output starting at byte `seek`. */
void blake3_hasher_finalize_seek(const struct blake3_hasher *h, uint64_t seek, uint8_t *out,
                                 size_t out_len);
/* Forgets the input, keeping the key and mode. */
void blake3_hasher_reset(struct blake3_hasher *h);

/* One-shot 32-byte hash of a buffer. */
void blake3_hash(const void *input, size_t len, uint8_t out[BLAKE3_OUT_LEN]);
/* The receipt's token hash: BLAKE3 over the ids as little-endian 32-bit integers. */
void blake3_hash_tokens(const int32_t *ids, size_t n, uint8_t out[BLAKE3_OUT_LEN]);
/* Writes 2*n lowercase hex digits and a NUL to hex (2*n+1 bytes). */
void blake3_hex(const uint8_t *bytes, size_t n, char *hex);

/* Hashes a whole file (memory-mapped) on up to `threads` threads (<= 0: one per online
 * CPU). The result equals `b3sum path`. */
KN_MUST_USE enum kn_status blake3_hash_file(const char *path, uint8_t out[BLAKE3_OUT_LEN],
                                            int threads, struct kn_err *err);

/* The ISA level BLAKE3 compresses with: a level forced by blake3_isa_force, else
 * kn_isa_active() (KINETIC_ISA, else the best the CPU and OS support). */
enum kn_isa blake3_isa(void);
bool blake3_isa_supported(enum kn_isa isa);
/* Forces a level for BLAKE3 only (tests, benchmarks); fails if this CPU lacks it. */
KN_MUST_USE enum kn_status blake3_isa_force(enum kn_isa isa, struct kn_err *err);
/* Returns to the default choice. */
void blake3_isa_unforce(void);

#endif
