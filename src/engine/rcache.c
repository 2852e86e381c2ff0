/* rcache.c: the repack cache. The CPU's repacked weights (kernels/repack.c) of a model,
 * kept in one file and mapped at the next start instead of being rebuilt: no zeroing of
 * fresh memory, no repack. docs/performance.md ("Cold start") gives the figures.
 *
 * A file is named by what its bytes depend on: the model file's BLAKE3 (the stat-keyed
 * model-hash cache, crypto/hashcache.h), the build id (the repack code is in the binary)
 * and the layout (type and shape of each weight copied, in model_open's order: a
 * different --gpu-layers repacks other weights):
 *
 *     <dir>/<model blake3, 64 hex>-<build id, 16 hex>-<layout, 16 hex>.krp
 *
 * and is, in little-endian order:
 *
 *     struct rcache_header (4096 bytes): the MAC, then magic, version, counts and the three
 *         keys in full
 *     each weight's repacked bytes in the order given, each padded with zeros to 64 bytes
 *
 * The MAC is BLAKE3 keyed with a key derived from the three keys, over every byte of the
 * file after the MAC itself; it is checked before any weight is used, hashed on the pool's
 * thread count through the mapping (which also maps the pages the first forward reads).
 * A truncated, altered or foreign file fails it and is rebuilt. The bytes are opaque here:
 * what a copy holds is repack.c's business, its size is kern_weight_packed_bytes.
 *
 * Writers repack in memory as without the cache, then write a temporary file and rename
 * it into place (kn_write_parts_atomic), so a concurrent reader sees the old file or the
 * whole new one, and two first runs both write a complete file (the second rename wins);
 * a file is never changed in place, so a mapping stays valid while others replace it.
 * No fsync: a file the crash left half written fails the MAC.
 *
 * Any failure of the cache itself (no cache folder, read-only, permission, disk full)
 * costs one line on stderr and falls back to the in-memory repack, never an error. */
#include "engine.h"

#include "../base/progress.h"
#include "../crypto/blake3.h"
#include "../crypto/buildid.h"
#include "../crypto/cachefile.h"
#include "../crypto/hashcache.h"
#include "../kernels/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define RCACHE_MAGIC "KNREPACK"
#define RCACHE_VERSION 1u
#define RCACHE_HEADER_BYTES 4096
#define RCACHE_ALIGN 64
#define RCACHE_SUFFIX ".krp"
/* Files kept in the folder: the newest (by last use) are kept, older ones removed when a
 * new one is written. A rebuild (new build id) replaces the model's older builds' files. */
#define RCACHE_MAX_FILES 16
/* A temporary file older than this is left from a writer that died: removed. */
#define RCACHE_STALE_TMP_S 3600
/* The key derivation's context string (BLAKE3 derive_key: fixed, application-unique). */
#define RCACHE_KDF_CONTEXT "kinetic 2026-12-01 repack cache MAC key v1"

struct rcache_header {
    uint8_t mac[BLAKE3_OUT_LEN];   /* keyed BLAKE3 of every later byte of the file */
    char magic[8];                 /* RCACHE_MAGIC, no NUL */
    uint32_t version;              /* RCACHE_VERSION */
    uint32_t n_weights;
    uint64_t data_bytes;           /* bytes after the header */
    uint8_t model[BLAKE3_OUT_LEN]; /* the model file's BLAKE3 */
    char build[KN_BUILD_ID_LEN];   /* the build id's hex digits, no NUL */
    uint8_t layout[BLAKE3_OUT_LEN];
    uint8_t zero[RCACHE_HEADER_BYTES - 3 * BLAKE3_OUT_LEN - 8 - 8 - 8 - KN_BUILD_ID_LEN];
};
static_assert(sizeof(struct rcache_header) == RCACHE_HEADER_BYTES, "rcache_header is 4096 bytes");

struct rcache {
    char *dir;          /* the folder, or NULL: off */
    char *model_path;
    const char *who;    /* prefix of the notes ("kinetic run"), or NULL */
    void *map;          /* the mapped file the weights borrow from, or NULL */
    size_t map_bytes;
};

/* ---------------------------------------------------------------- set-up */

/* One line on stderr: the cache is not used or not written, and why. */
KN_PRINTF(2, 3) static void note(const struct rcache *rc, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    kn_progress_interrupt(); /* not onto a progress bar's line (verify-receipt's loading) */
    fprintf(stderr, "%s: note: repack cache %s\n", rc->who ? rc->who : "kinetic", buf);
}

enum kn_status rcache_open(struct rcache **out, const char *setting, const char *model_path,
                           const char *who, struct kn_err *err)
{
    *out = NULL;
    char dir[PATH_MAX];
    struct kn_err derr = {0};
    enum cachefile_where where = cachefile_dir(setting, RCACHE_ENV, "repack", dir, sizeof dir,
                                               &derr);
    if (where == CACHEFILE_OFF)
        return KN_OK;
    struct rcache *rc = calloc(1, sizeof *rc);
    if (!rc)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    rc->who = who;
    if (where == CACHEFILE_BAD) {
        note(rc, "off (%s); the weights are repacked in memory", derr.msg);
        *out = rc;
        return KN_OK;
    }
    rc->dir = strdup(dir);
    rc->model_path = strdup(model_path);
    if (!rc->dir || !rc->model_path) {
        rcache_close(rc);
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    }
    *out = rc;
    return KN_OK;
}

void rcache_close(struct rcache *rc)
{
    if (!rc)
        return;
    if (rc->map)
        munmap(rc->map, rc->map_bytes);
    free(rc->dir);
    free(rc->model_path);
    free(rc);
}

/* ---------------------------------------------------------------- keys */

static size_t align_up(size_t n)
{
    return (n + RCACHE_ALIGN - 1) & ~(size_t)(RCACHE_ALIGN - 1);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* What a cache file for ws is: its header (MAC zero), the sizes of the copies, the MAC
 * key and the file's path. False when there is nothing to repack (why empty), or the
 * model cannot be hashed or the build id is unknown (why says which). */
struct rcache_plan {
    struct rcache_header h;
    size_t *bytes;      /* (n) each weight's packed bytes (0: none) */
    size_t data_bytes;
    uint8_t key[BLAKE3_KEY_LEN];
    char path[PATH_MAX];
};

static bool plan_file(const struct rcache *rc, struct kern_weight *const *ws, size_t n,
                      struct rcache_plan *p, struct kn_err *why)
{
    memset(&p->h, 0, sizeof p->h);
    if (n > UINT32_MAX) {
        kn_fail(why, KN_E_LIMIT, "%zu weights are too many", n);
        return false;
    }
    p->data_bytes = 0;
    struct blake3_hasher lh;
    blake3_hasher_init(&lh);
    for (size_t i = 0; i < n; i++) {
        p->bytes[i] = kern_weight_packed_bytes(ws[i]);
        uint8_t d[32];
        put_u64(d, (uint64_t)ws[i]->type);
        put_u64(d + 8, (uint64_t)ws[i]->N);
        put_u64(d + 16, (uint64_t)ws[i]->K);
        put_u64(d + 24, (uint64_t)p->bytes[i]);
        blake3_hasher_update(&lh, d, sizeof d);
        if (!kn_add_size(p->data_bytes, align_up(p->bytes[i]), &p->data_bytes)) {
            kn_fail(why, KN_E_LIMIT, "the repacked weights overflow a size");
            return false;
        }
    }
    if (p->data_bytes == 0)
        return false; /* nothing to repack (a scalar run): no file, no note */
    if (p->data_bytes > SIZE_MAX - RCACHE_HEADER_BYTES) {
        kn_fail(why, KN_E_LIMIT, "the repacked weights overflow a size");
        return false;
    }
    blake3_hasher_finalize(&lh, p->h.layout, sizeof p->h.layout);
    const char *build = kn_build_id();
    if (strlen(build) != KN_BUILD_ID_LEN) {
        kn_fail(why, KN_E_IO, "the build id is unknown");
        return false;
    }
    char model_hex[65];
    if (hashcache_model_blake3(rc->model_path, model_hex, why) != KN_OK)
        return false;
    for (int i = 0; i < BLAKE3_OUT_LEN; i++) {
        unsigned v;
        sscanf(model_hex + 2 * i, "%2x", &v);
        p->h.model[i] = (uint8_t)v;
    }
    memcpy(p->h.magic, RCACHE_MAGIC, sizeof p->h.magic);
    p->h.version = RCACHE_VERSION;
    p->h.n_weights = (uint32_t)n;
    p->h.data_bytes = p->data_bytes;
    memcpy(p->h.build, build, KN_BUILD_ID_LEN);
    /* The MAC key: every key of the file, so a file of another model, build or layout
     * fails the MAC even if its name and header were changed to match. */
    const struct kn_part keys[] = {{p->h.model, sizeof p->h.model},
                                   {p->h.build, sizeof p->h.build},
                                   {p->h.layout, sizeof p->h.layout}};
    cachefile_key(RCACHE_KDF_CONTEXT, keys, sizeof keys / sizeof *keys, p->key);
    char layout_hex[17];
    blake3_hex(p->h.layout, 8, layout_hex);
    if (snprintf(p->path, sizeof p->path, "%s/%s-%s-%s" RCACHE_SUFFIX, rc->dir, model_hex, build,
                 layout_hex) >= (int)sizeof p->path) {
        kn_fail(why, KN_E_LIMIT, "the folder name %s is too long", rc->dir);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- reading */

enum load_result {
    LOAD_HIT,        /* the weights borrow from the mapping */
    LOAD_MISS,       /* no file (or no folder): write one */
    LOAD_BAD,        /* a file that fails a check (why says which): write a new one */
    LOAD_UNREADABLE, /* a file that cannot be read (why): leave it */
};

/* Maps the file and checks it against the plan; on a hit the weights borrow their copies
 * from the mapping, which rc keeps. */
static enum load_result load(struct rcache *rc, struct kern_pool *pool,
                             struct kern_weight *const *ws, size_t n,
                             const struct rcache_plan *p, struct kn_err *why)
{
    const size_t want = RCACHE_HEADER_BYTES + p->data_bytes; /* plan_file checked the sum */
    int fd;
    switch (cachefile_open(p->path, want, &fd, why)) {
    case CACHEFILE_MISSING:
        return LOAD_MISS;
    case CACHEFILE_UNREADABLE:
        return LOAD_UNREADABLE;
    case CACHEFILE_WRONG:
        return LOAD_BAD;
    case CACHEFILE_OPENED:
        break;
    }
    void *map = mmap(NULL, want, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        kn_fail(why, KN_E_IO, "cannot map it: %s", strerror(map_errno));
        return LOAD_UNREADABLE;
    }
#ifdef MADV_HUGEPAGE
    /* Pages read from the disk for this mapping come in 2 MiB folios, mapped as huge pages
     * (decode streams the whole file once per token; see packed_alloc in repack.c). Advice
     * only: pages already in the page cache keep their size. */
    (void)madvise(map, want, MADV_HUGEPAGE);
#endif
    bool ok = true;
    const struct rcache_header *h = map;
    /* The header's fields first (cheap, and they say what is wrong); the MAC decides. */
    if (memcmp(h->magic, p->h.magic, sizeof h->magic) != 0 || h->version != p->h.version) {
        kn_fail(why, KN_E_FORMAT, "not a version %u repack cache file", RCACHE_VERSION);
        ok = false;
    } else if (h->n_weights != p->h.n_weights || h->data_bytes != p->h.data_bytes ||
               memcmp(h->model, p->h.model, sizeof h->model) != 0 ||
               memcmp(h->build, p->h.build, sizeof h->build) != 0 ||
               memcmp(h->layout, p->h.layout, sizeof h->layout) != 0) {
        kn_fail(why, KN_E_FORMAT, "made for another model, build or layout");
        ok = false;
    } else {
        const struct kn_part all = {(const uint8_t *)map + BLAKE3_OUT_LEN,
                                    want - BLAKE3_OUT_LEN};
        uint8_t mac[BLAKE3_OUT_LEN];
        cachefile_mac(p->key, &all, 1, pool ? kern_pool_threads(pool) : 1, mac);
        if (!(ok = blake3_equal(mac, h->mac)))
            kn_fail(why, KN_E_FORMAT, "its MAC does not match (damaged)");
    }
    if (!ok) {
        munmap(map, want);
        return LOAD_BAD;
    }
    size_t off = RCACHE_HEADER_BYTES;
    for (size_t i = 0; i < n; i++) {
        if (p->bytes[i]) {
            ws[i]->packed = (uint8_t *)map + off;
            ws[i]->packed_bytes = p->bytes[i];
            ws[i]->packed_borrowed = true;
        }
        off += align_up(p->bytes[i]);
    }
    rc->map = map;
    rc->map_bytes = want;
    cachefile_touch(p->path); /* the last use, for the eviction order */
    return LOAD_HIT;
}

/* ---------------------------------------------------------------- writing */

/* The model's files of other builds: the file just written (keep_base) replaces them. */
static bool other_build(const char *name, const char *keep_base)
{
    const size_t model_len = 2 * BLAKE3_OUT_LEN + 1; /* "<model hex>-" */
    return strncmp(name, keep_base, model_len) == 0 &&
           strncmp(name, keep_base, model_len + KN_BUILD_ID_LEN) != 0;
}

/* Writes the weights' copies (just built in memory) to the plan's file. */
static void store(const struct rcache *rc, struct kern_weight *const *ws, size_t n,
                  struct rcache_plan *p)
{
    static const uint8_t zeros[RCACHE_ALIGN];
    struct kn_err err = {0};
    if (!kn_make_parent_dirs(p->path)) {
        note(rc, "not written: cannot create %s: %s", rc->dir, strerror(errno));
        return;
    }
    struct kn_part *parts = kn_malloc((2 * n + 1) * sizeof *parts, &err);
    if (!parts)
        return;
    size_t k = 0;
    parts[k++] = (struct kn_part){&p->h, sizeof p->h};
    for (size_t i = 0; i < n; i++) {
        if (!p->bytes[i])
            continue;
        parts[k++] = (struct kn_part){ws[i]->packed, p->bytes[i]};
        if (align_up(p->bytes[i]) != p->bytes[i])
            parts[k++] = (struct kn_part){zeros, align_up(p->bytes[i]) - p->bytes[i]};
    }
    /* the MAC covers the header after the MAC itself, then every other part */
    parts[0] = (struct kn_part){(const uint8_t *)&p->h + BLAKE3_OUT_LEN,
                                sizeof p->h - BLAKE3_OUT_LEN};
    cachefile_mac(p->key, parts, k, 0, p->h.mac);
    parts[0] = (struct kn_part){&p->h, sizeof p->h};
    if (kn_write_parts_atomic(p->path, parts, k, false, &err) != KN_OK) {
        note(rc, "not written: %s", err.msg);
    } else {
        /* a user should know that a model-sized file appeared, and how to have none */
        note(rc, "wrote %s (%.0f MiB; later starts map it instead of repacking; "
             "--repack-cache off keeps none)", p->path,
             (double)(RCACHE_HEADER_BYTES + p->data_bytes) / (1024.0 * 1024.0));
        cachefile_evict(rc->dir, RCACHE_SUFFIX, p->path, RCACHE_MAX_FILES, RCACHE_STALE_TMP_S,
                        other_build);
    }
    free(parts);
}

/* ---------------------------------------------------------------- the model's hook */

enum kn_status rcache_repack(void *ctx, struct kern_pool *pool, struct kern_weight *const *ws,
                             size_t n, struct kn_err *err)
{
    struct rcache *rc = ctx;
    if (!rc || !rc->dir || rc->map)
        return kern_weight_repack(pool, ws, n, err);
    struct rcache_plan p;
    if (!(p.bytes = kn_malloc((n ? n : 1) * sizeof *p.bytes, err)))
        return KN_E_NOMEM;
    struct kn_err why = {0};
    enum load_result lr = LOAD_UNREADABLE;
    if (!plan_file(rc, ws, n, &p, &why)) {
        if (why.msg[0])
            note(rc, "not used: %s; the weights are repacked in memory", why.msg);
    } else if ((lr = load(rc, pool, ws, n, &p, &why)) == LOAD_HIT) {
        kn_log(KN_LOG_DEBUG, "repack cache: mapped %s", p.path);
    } else if (lr == LOAD_BAD) {
        note(rc, "%s: %s; rebuilding it", p.path, why.msg);
    } else if (lr == LOAD_UNREADABLE) {
        note(rc, "%s: %s; the weights are repacked in memory", p.path, why.msg);
    }
    enum kn_status st = KN_OK;
    if (lr != LOAD_HIT && (st = kern_weight_repack(pool, ws, n, err)) == KN_OK &&
        (lr == LOAD_MISS || lr == LOAD_BAD))
        store(rc, ws, n, &p);
    free(p.bytes);
    return st;
}
