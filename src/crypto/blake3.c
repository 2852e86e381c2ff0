/* blake3.c: the BLAKE3 hasher: chunk state, the lazily merged stack of subtree chaining
 * values, extendable output, run-time ISA dispatch, and multi-threaded hashing.
 *
 * Tree rules (the BLAKE3 paper, section 2.1): the input is cut into 1024-byte chunks; a
 * chunk's 64-byte blocks are compressed in turn with the chunk's index as counter; a parent
 * node compresses its two children's 32-byte CVs as one block, counter 0; the left subtree
 * of every node covers the largest power of two of chunks that is smaller than the node's.
 * The root node (and only it) carries the ROOT flag, so a CV is final only once the hasher
 * knows no more input follows: hence every merge here happens only when more input is
 * already in hand. */
#include "blake3.h"
#include "blake3_impl.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


/* ---------------------------------------------------------------- ISA dispatch --- */

/* The level comes from base (src/base/cpu.h: KINETIC_ISA or the best the CPU and OS
 * support), the one the kernels read too, so BLAKE3 and the kernels always agree; tests
 * and benchmarks may force a level for BLAKE3 alone. */
static _Atomic int isa_forced = -1;

bool blake3_isa_supported(enum kn_isa isa)
{
    return kn_isa_supported(isa);
}

enum kn_isa blake3_isa(void)
{
    int f = atomic_load_explicit(&isa_forced, memory_order_relaxed);
    return f >= 0 ? (enum kn_isa)f : kn_isa_active();
}

enum kn_status blake3_isa_force(enum kn_isa isa, struct kn_err *err)
{
    if (!blake3_isa_supported(isa))
        return kn_fail(err, KN_E_UNSUPPORTED, "BLAKE3: this CPU (or OS) cannot run the %s code",
                       kn_isa_name(isa));
    atomic_store(&isa_forced, (int)isa);
    return KN_OK;
}

void blake3_isa_unforce(void)
{
    atomic_store(&isa_forced, -1);
}

/* Hashes n inputs with the widest code the active level allows, the remainder narrower. */
static void hash_many(const uint8_t *in, size_t stride, size_t n, size_t blocks,
                      const uint32_t key[8], uint64_t counter, bool increment, uint8_t flags,
                      uint8_t flags_start, uint8_t flags_end, uint8_t *out)
{
    enum kn_isa isa = blake3_isa();
#if defined(KN_ARCH_X86)
    if (isa == KN_ISA_AVX512) {
        while (n >= 16) {
            b3_hash16_avx512(in, stride, blocks, key, counter, increment, flags, flags_start,
                             flags_end, out);
            in += 16 * stride;
            out += 16 * 32;
            counter += increment ? 16 : 0;
            n -= 16;
        }
    }
    if (isa == KN_ISA_AVX512 || isa == KN_ISA_AVX2) {
        while (n >= 8) {
            b3_hash8_avx2(in, stride, blocks, key, counter, increment, flags, flags_start,
                          flags_end, out);
            in += 8 * stride;
            out += 8 * 32;
            counter += increment ? 8 : 0;
            n -= 8;
        }
    }
#else
    (void)isa; /* other architectures: the portable code (aarch64 has no NEON BLAKE3 yet) */
#endif
    b3_hash_many_portable(in, stride, n, blocks, key, counter, increment, flags, flags_start,
                          flags_end, out);
}

/* ------------------------------------------------------------------ nodes ---------- */

/* A node not yet compressed: compressing it gives a CV, or with ROOT the output. */
struct output {
    uint32_t cv[8];
    uint8_t block[64];
    uint8_t block_len;
    uint64_t counter;
    uint8_t flags;
};

static void output_cv(const struct output *o, uint8_t out[32])
{
    uint32_t cv[8];
    memcpy(cv, o->cv, sizeof cv);
    b3_compress_in_place(cv, o->block, o->block_len, o->counter, o->flags);
    for (int i = 0; i < 8; i++)
        b3_store32(out + 4 * i, cv[i]);
}

/* Writes len bytes of the root's output stream starting at byte seek: output block k is the
 * root node compressed with counter k. */
static void output_root(const struct output *o, uint64_t seek, uint8_t *out, size_t len)
{
    uint64_t k = seek / 64;
    size_t off = (size_t)(seek % 64);
    uint8_t buf[64];
    while (len) {
        b3_compress_xof(o->cv, o->block, o->block_len, k, o->flags | B3_ROOT, buf);
        size_t take = 64 - off < len ? 64 - off : len;
        memcpy(out, buf + off, take);
        out += take;
        len -= take;
        off = 0;
        k++;
    }
}

static struct output parent_output(const uint8_t left[32], const uint8_t right[32],
                                   const uint32_t key[8], uint8_t flags)
{
    struct output o;
    memcpy(o.cv, key, sizeof o.cv);
    memcpy(o.block, left, 32);
    memcpy(o.block + 32, right, 32);
    o.block_len = 64;
    o.counter = 0;
    o.flags = flags | B3_PARENT;
    return o;
}

static void parent_cv(const uint8_t left[32], const uint8_t right[32], const uint32_t key[8],
                      uint8_t flags, uint8_t out[32])
{
    struct output o = parent_output(left, right, key, flags);
    output_cv(&o, out);
}

/* ---------------------------------------------------------------- chunk state ----- */

static void chunk_init(struct blake3_chunk_state *c, const uint32_t key[8], uint64_t counter,
                       uint8_t flags)
{
    memcpy(c->cv, key, sizeof c->cv);
    c->counter = counter;
    memset(c->buf, 0, sizeof c->buf);
    c->buf_len = 0;
    c->blocks_done = 0;
    c->flags = flags;
}

static size_t chunk_len(const struct blake3_chunk_state *c)
{
    return (size_t)c->blocks_done * 64 + c->buf_len;
}

static uint8_t chunk_start_flag(const struct blake3_chunk_state *c)
{
    return c->blocks_done == 0 ? B3_CHUNK_START : 0;
}

/* Adds at most the bytes left in this chunk. A full block is compressed only once more
 * input arrives, since the chunk's last block needs CHUNK_END. */
static void chunk_update(struct blake3_chunk_state *c, const uint8_t *in, size_t len)
{
    while (len) {
        if (c->buf_len == 64) {
            b3_compress_in_place(c->cv, c->buf, 64, c->counter, c->flags | chunk_start_flag(c));
            c->blocks_done++;
            c->buf_len = 0;
            memset(c->buf, 0, sizeof c->buf);
        }
        /* Whole blocks straight from the input, keeping the last one back. */
        while (c->buf_len == 0 && len > 64) {
            b3_compress_in_place(c->cv, in, 64, c->counter, c->flags | chunk_start_flag(c));
            c->blocks_done++;
            in += 64;
            len -= 64;
        }
        size_t room = (size_t)(64 - c->buf_len);
        size_t take = room < len ? room : len;
        memcpy(c->buf + c->buf_len, in, take);
        c->buf_len = (uint8_t)(c->buf_len + take);
        in += take;
        len -= take;
    }
}

static struct output chunk_output(const struct blake3_chunk_state *c)
{
    struct output o;
    memcpy(o.cv, c->cv, sizeof o.cv);
    memcpy(o.block, c->buf, sizeof o.block);
    o.block_len = c->buf_len;
    o.counter = c->counter;
    o.flags = c->flags | chunk_start_flag(c) | B3_CHUNK_END;
    return o;
}

/* --------------------------------------------------------------- subtrees -------- */

/* The widest subtree hashed in one go: its chunk CVs fit an 8 KiB stack buffer, and all
 * its parent levels down to 16 nodes run at full SIMD width. */
#define SUBTREE_MAX_CHUNKS 256

/* CV of a complete subtree of n = 2^k <= SUBTREE_MAX_CHUNKS whole chunks whose first chunk
 * has index counter; never the root (the caller holds more input). */
static void subtree_cv_small(const uint32_t key[8], uint8_t flags, const uint8_t *in, size_t n,
                             uint64_t counter, uint8_t out[32])
{
    uint8_t a[SUBTREE_MAX_CHUNKS * 32], b[SUBTREE_MAX_CHUNKS / 2 * 32];
    assert(n >= 1 && n <= SUBTREE_MAX_CHUNKS && (n & (n - 1)) == 0);
    hash_many(in, BLAKE3_CHUNK_LEN, n, BLAKE3_CHUNK_LEN / 64, key, counter, true, flags,
              B3_CHUNK_START, B3_CHUNK_END, a);
    /* Each level hashes pairs of adjacent CVs (one 64-byte block each) as parents. */
    uint8_t *cur = a, *next = b;
    while (n > 1) {
        hash_many(cur, 64, n / 2, 1, key, 0, false, flags | B3_PARENT, 0, 0, next);
        n /= 2;
        uint8_t *t = cur;
        cur = next;
        next = t;
    }
    memcpy(out, cur, 32);
}

/* CV of a complete subtree of n = 2^k whole chunks (any size), never the root. */
static void subtree_cv(const uint32_t key[8], uint8_t flags, const uint8_t *in, uint64_t n,
                       uint64_t counter, uint8_t out[32])
{
    if (n <= SUBTREE_MAX_CHUNKS) {
        subtree_cv_small(key, flags, in, (size_t)n, counter, out);
        return;
    }
    uint8_t lr[64];
    uint64_t half = n / 2;
    subtree_cv(key, flags, in, half, counter, lr);
    subtree_cv(key, flags, in + half * BLAKE3_CHUNK_LEN, half, counter + half, lr + 32);
    parent_cv(lr, lr + 32, key, flags, out);
}

/* ---------------------------------------------------------------- hasher ---------- */

static void hasher_init_words(struct blake3_hasher *h, const uint32_t key[8], uint8_t flags)
{
    memcpy(h->key, key, sizeof h->key);
    h->flags = flags;
    chunk_init(&h->chunk, key, 0, flags);
    h->stack_len = 0;
}

void blake3_hasher_init(struct blake3_hasher *h)
{
    hasher_init_words(h, B3_IV, 0);
}

void blake3_hasher_init_keyed(struct blake3_hasher *h, const uint8_t key[BLAKE3_KEY_LEN])
{
    uint32_t w[8];
    for (int i = 0; i < 8; i++)
        w[i] = b3_load32(key + 4 * i);
    hasher_init_words(h, w, B3_KEYED_HASH);
}

void blake3_hasher_init_derive_key_raw(struct blake3_hasher *h, const void *context,
                                       size_t context_len)
{
    /* The context string is hashed in its own mode; its hash keys the material. */
    struct blake3_hasher ctx;
    hasher_init_words(&ctx, B3_IV, B3_DERIVE_KEY_CONTEXT);
    blake3_hasher_update(&ctx, context, context_len);
    uint8_t ck[32];
    blake3_hasher_finalize(&ctx, ck, sizeof ck);
    uint32_t w[8];
    for (int i = 0; i < 8; i++)
        w[i] = b3_load32(ck + 4 * i);
    hasher_init_words(h, w, B3_DERIVE_KEY_MATERIAL);
}

void blake3_hasher_init_derive_key(struct blake3_hasher *h, const char *context)
{
    blake3_hasher_init_derive_key_raw(h, context, strlen(context));
}

void blake3_hasher_reset(struct blake3_hasher *h)
{
    chunk_init(&h->chunk, h->key, 0, h->flags);
    h->stack_len = 0;
}

/* Merges stack entries until it holds one CV per set bit of `chunks` (the complete
 * subtrees of the first `chunks` chunks). Called only when input beyond them is known, so
 * no merged node can be the root. */
static void stack_merge(struct blake3_hasher *h, uint64_t chunks)
{
    size_t want = (size_t)__builtin_popcountll(chunks);
    while (h->stack_len > want) {
        uint8_t *l = h->cv_stack + (h->stack_len - 2) * 32;
        parent_cv(l, l + 32, h->key, h->flags, l);
        h->stack_len--;
    }
}

/* Pushes the CV of a subtree that starts at chunk index `at`. */
static void stack_push(struct blake3_hasher *h, const uint8_t cv[32], uint64_t at)
{
    stack_merge(h, at);
    assert(h->stack_len <= BLAKE3_MAX_DEPTH);
    memcpy(h->cv_stack + h->stack_len * 32, cv, 32);
    h->stack_len++;
}

void blake3_hasher_update(struct blake3_hasher *h, const void *input, size_t len)
{
    const uint8_t *in = input;
    /* Finish a partly filled chunk first. */
    if (chunk_len(&h->chunk) > 0) {
        size_t room = BLAKE3_CHUNK_LEN - chunk_len(&h->chunk);
        size_t take = room < len ? room : len;
        chunk_update(&h->chunk, in, take);
        in += take;
        len -= take;
        if (len == 0)
            return;
        uint8_t cv[32];
        struct output o = chunk_output(&h->chunk);
        output_cv(&o, cv);
        uint64_t next = h->chunk.counter + 1;
        stack_push(h, cv, h->chunk.counter);
        chunk_init(&h->chunk, h->key, next, h->flags);
    }
    /* Whole subtrees while more than a chunk remains: each is aligned to its size in the
     * chunk index (so it is a node of the final tree) and is followed by more input (so it
     * is not the root). */
    while (len > BLAKE3_CHUNK_LEN) {
        uint64_t at = h->chunk.counter;
        uint64_t n = (uint64_t)(len - 1) / BLAKE3_CHUNK_LEN; /* n*1024 < len */
        n = n >= SUBTREE_MAX_CHUNKS ? SUBTREE_MAX_CHUNKS : 1ull << (63 - __builtin_clzll(n));
        while (at & (n - 1))
            n /= 2;
        uint8_t cv[32];
        subtree_cv_small(h->key, h->flags, in, (size_t)n, at, cv);
        stack_push(h, cv, at);
        h->chunk.counter = at + n;
        in += n * BLAKE3_CHUNK_LEN;
        len -= n * BLAKE3_CHUNK_LEN;
    }
    if (len > 0) {
        chunk_update(&h->chunk, in, len);
        /* More input is in hand, so everything on the stack can be merged now; finalize
         * then only folds the chunk into a stack of strictly decreasing subtrees. */
        stack_merge(h, h->chunk.counter);
    }
}

static struct output root_output(const struct blake3_hasher *h)
{
    if (h->stack_len == 0)
        return chunk_output(&h->chunk);
    /* Fold from the right: the chunk (or, when it is empty, the newest stack entry) is the
     * rightmost leaf, each entry to its left the left child of the next parent. */
    struct output o;
    size_t i = h->stack_len;
    if (chunk_len(&h->chunk) > 0) {
        o = chunk_output(&h->chunk);
    } else {
        assert(h->stack_len >= 2);
        i -= 2;
        o = parent_output(h->cv_stack + i * 32, h->cv_stack + (i + 1) * 32, h->key, h->flags);
    }
    while (i > 0) {
        i--;
        uint8_t right[32];
        output_cv(&o, right);
        o = parent_output(h->cv_stack + i * 32, right, h->key, h->flags);
    }
    return o;
}

void blake3_hasher_finalize_seek(const struct blake3_hasher *h, uint64_t seek, uint8_t *out,
                                 size_t out_len)
{
    if (out_len == 0)
        return;
    struct output o = root_output(h);
    output_root(&o, seek, out, out_len);
}

void blake3_hasher_finalize(const struct blake3_hasher *h, uint8_t *out, size_t out_len)
{
    blake3_hasher_finalize_seek(h, 0, out, out_len);
}

void blake3_hash(const void *input, size_t len, uint8_t out[BLAKE3_OUT_LEN])
{
    struct blake3_hasher h;
    blake3_hasher_init(&h);
    blake3_hasher_update(&h, input, len);
    blake3_hasher_finalize(&h, out, BLAKE3_OUT_LEN);
}

void blake3_hash_tokens(const int32_t *ids, size_t n, uint8_t out[BLAKE3_OUT_LEN])
{
    struct blake3_hasher h;
    blake3_hasher_init(&h);
    uint8_t buf[1024]; /* encode in pieces: the byte order is fixed whatever the host's */
    while (n) {
        size_t k = n < sizeof buf / 4 ? n : sizeof buf / 4;
        for (size_t i = 0; i < k; i++)
            b3_store32(buf + 4 * i, (uint32_t)ids[i]);
        blake3_hasher_update(&h, buf, 4 * k);
        ids += k;
        n -= k;
    }
    blake3_hasher_finalize(&h, out, BLAKE3_OUT_LEN);
}

void blake3_hex(const uint8_t *bytes, size_t n, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[bytes[i] >> 4];
        hex[2 * i + 1] = digits[bytes[i] & 15];
    }
    hex[2 * n] = 0;
}

/* ---------------------------------------------------------------- threads --------- */

/* Large inputs are cut into pieces of piece_chunks (a power of two) chunks, aligned in the
 * chunk index, so each piece is a complete subtree of the final tree; threads take pieces
 * in turn, and the CVs are pushed in order as if one thread had hashed them. */
struct mt_job {
    const uint32_t *key;
    uint8_t flags;
    const uint8_t *in;
    uint64_t first_chunk;
    uint64_t piece_chunks;
    size_t pieces;
    uint8_t *cvs;
    bool prefault;
    _Atomic size_t next;
};

/* Maps a piece of a memory-mapped file in one system call before hashing it: taking one
 * page fault per 4 KiB page costs about as much as hashing the page with AVX-512. Only a
 * hint: kernels before 5.14 refuse it, and the page faults then happen as usual. */
static void prefault(const uint8_t *p, size_t len)
{
#ifdef MADV_POPULATE_READ
    uintptr_t page = 4096, a = (uintptr_t)p & ~(page - 1);
    (void)madvise((void *)a, len + ((uintptr_t)p - a), MADV_POPULATE_READ);
#else
    (void)p;
    (void)len;
#endif
}

static void *mt_worker(void *arg)
{
    struct mt_job *j = arg;
    for (;;) {
        size_t p = atomic_fetch_add(&j->next, 1);
        if (p >= j->pieces)
            break;
        const uint8_t *in = j->in + p * j->piece_chunks * BLAKE3_CHUNK_LEN;
        if (j->prefault)
            prefault(in, j->piece_chunks * BLAKE3_CHUNK_LEN);
        subtree_cv(j->key, j->flags, in, j->piece_chunks, j->first_chunk + p * j->piece_chunks,
                   j->cvs + p * 32);
    }
    return NULL;
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* Inputs below this are hashed on one thread: starting threads costs more than it saves. */
#define MT_MIN_BYTES (4u << 20)

static void update_threads(struct blake3_hasher *h, const void *input, size_t len, int threads,
                           bool mapped)
{
    if (threads <= 0)
        threads = online_cpus();
    if (threads > 64)
        threads = 64;
    /* Threads need the hasher at a chunk boundary; a fresh hasher always is. */
    if ((threads == 1 && !mapped) || len < MT_MIN_BYTES || chunk_len(&h->chunk) != 0 || h->chunk.counter != 0) {
        blake3_hasher_update(h, input, len);
        return;
    }
    uint64_t total_chunks = ((uint64_t)len + BLAKE3_CHUNK_LEN - 1) / BLAKE3_CHUNK_LEN;
    /* About 8 pieces per thread balances uneven progress; at least SUBTREE_MAX_CHUNKS
     * chunks a piece keeps the SIMD code at full width. */
    uint64_t want = total_chunks / ((uint64_t)threads * 8);
    uint64_t piece = SUBTREE_MAX_CHUNKS;
    while (piece * 2 <= want)
        piece *= 2;
    /* Pieces strictly before the last byte: the input after them is never empty, so none
     * is the root. */
    size_t pieces = (size_t)(((uint64_t)len - 1) / (piece * BLAKE3_CHUNK_LEN));
    if (pieces < 2) {
        blake3_hasher_update(h, input, len);
        return;
    }
    uint8_t *cvs = malloc(pieces * 32);
    if (!cvs) { /* hashing alone needs no memory: fall back rather than fail */
        blake3_hasher_update(h, input, len);
        return;
    }
    struct mt_job job = {.key = h->key, .flags = h->flags, .in = input, .first_chunk = 0,
                         .piece_chunks = piece, .pieces = pieces, .cvs = cvs, .prefault = mapped};
    atomic_init(&job.next, 0);
    pthread_t tid[64];
    int started = 0;
    for (int t = 1; t < threads && (size_t)t < pieces; t++) {
        if (pthread_create(&tid[started], NULL, mt_worker, &job) != 0)
            break; /* fewer threads: the pieces still all get hashed below */
        started++;
    }
    mt_worker(&job);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    for (size_t p = 0; p < pieces; p++) {
        stack_push(h, cvs + p * 32, p * piece);
        h->chunk.counter = (p + 1) * piece;
    }
    free(cvs);
    size_t done = pieces * piece * BLAKE3_CHUNK_LEN;
    if (mapped)
        prefault((const uint8_t *)input + done, len - done);
    blake3_hasher_update(h, (const uint8_t *)input + done, len - done);
}

void blake3_hasher_update_threads(struct blake3_hasher *h, const void *input, size_t len,
                                  int threads)
{
    update_threads(h, input, len, threads, false);
}

void blake3_hasher_update_mapped(struct blake3_hasher *h, const void *input, size_t len,
                                  int threads)
{
    update_threads(h, input, len, threads, true);
}

bool blake3_equal(const uint8_t a[BLAKE3_OUT_LEN], const uint8_t b[BLAKE3_OUT_LEN])
{
    unsigned diff = 0;
    for (int i = 0; i < BLAKE3_OUT_LEN; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    return diff == 0;
}

enum kn_status blake3_hash_file(const char *path, uint8_t out[BLAKE3_OUT_LEN], int threads,
                                struct kn_err *err)
{
    struct kn_map map;
    enum kn_status st = kn_map_open(&map, path, err);
    if (st != KN_OK)
        return st;
    struct blake3_hasher h;
    blake3_hasher_init(&h);
    update_threads(&h, map.data, map.size, threads, true);
    blake3_hasher_finalize(&h, out, BLAKE3_OUT_LEN);
    kn_map_close(&map);
    return KN_OK;
}
