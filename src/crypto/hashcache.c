/* hashcache.c: the model-hash cache (see hashcache.h and docs/receipts.md).
 *
 * Concurrency: readers parse whatever file is in place (rename makes every version
 * complete). Writers serialize on an flock of hashes.json.lock, and under it re-read the
 * cache, merge their entry into it, and rename a new file into place, so entries recorded
 * by other processes meanwhile are kept. */
#include "hashcache.h"
#include "../base/json.h"
#include "blake3.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_VERSION 1
/* The cache holds one small entry per model file; this is far beyond any real use and
 * keeps a hostile or runaway file from costing much. */
#define CACHE_MAX_BYTES ((size_t)16 << 20)
/* Oldest entries beyond this are dropped when writing. */
#define CACHE_MAX_ENTRIES 4096

static _Atomic uint64_t stat_hits, stat_misses, stat_corrupt;

struct hashcache_stats hashcache_stats(void)
{
    return (struct hashcache_stats){.hits = atomic_load(&stat_hits),
                                    .misses = atomic_load(&stat_misses),
                                    .corrupt = atomic_load(&stat_corrupt)};
}

enum kn_status hashcache_path(char *out, size_t size, struct kn_err *err)
{
    char dir[PATH_MAX];
    enum kn_status st = kn_cache_dir(dir, sizeof dir, err);
    if (st != KN_OK)
        return st;
    int n = snprintf(out, size, "%s/hashes.json", dir);
    if (n < 0 || (size_t)n >= size)
        return kn_fail(err, KN_E_ARG, "the cache path is longer than %zu bytes", size - 1);
    return KN_OK;
}

static bool is_hex64(const char *s)
{
    if (!s || strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* Reads the cache. A missing file gives an empty cache; an unreadable or malformed one is
 * reported once as a warning and also gives an empty cache (it will be rebuilt). Returns
 * the "files" object's owner (the root), or NULL only when out of memory. */
static struct json_value *load_cache(const char *cache_path)
{
    struct kn_err err;
    struct json_value *root = NULL;
    struct stat st;
    if (stat(cache_path, &st) == 0) {
        struct json_limits lim = {.max_bytes = CACHE_MAX_BYTES, .max_depth = 8};
        const char *why = NULL;
        if (json_parse_file(cache_path, &lim, &root, &err) != KN_OK) {
            why = err.msg;
        } else {
            int64_t version;
            if (!json_int(json_get(root, "version"), &version) || version != CACHE_VERSION ||
                !json_is(json_get(root, "files"), JSON_OBJECT))
                why = "not a version 1 cache (expected {\"version\": 1, \"files\": {...}})";
        }
        if (why) {
            atomic_fetch_add(&stat_corrupt, 1);
            kn_log(KN_LOG_WARN, "%s: ignoring the model-hash cache, it will be rebuilt: %s",
                   cache_path, why);
            json_free(root);
            root = NULL;
        }
    }
    if (root)
        return root;
    root = json_new_object();
    if (root && (json_object_set(root, "version", json_new_int(CACHE_VERSION), NULL) != KN_OK ||
                 json_object_set(root, "files", json_new_object(), NULL) != KN_OK)) {
        json_free(root);
        root = NULL;
    }
    return root;
}

/* The cached hash for (key, size, mtime), or NULL. */
static const char *lookup(const struct json_value *root, const char *key, int64_t size,
                          int64_t mtime_ns)
{
    const struct json_value *e = json_get(json_get(root, "files"), key);
    int64_t s, m;
    const char *h = json_str(json_get(e, "blake3"));
    if (json_int(json_get(e, "size"), &s) && s == size && json_int(json_get(e, "mtime_ns"), &m) &&
        m == mtime_ns && is_hex64(h))
        return h;
    return NULL;
}

/* Keeps the newest `keep` members of the object (a cache file is untrusted: one pass, not
 * one memmove per dropped entry). */
static void drop_oldest(struct json_value *files, size_t keep)
{
    size_t n = files->u.object.len;
    if (n <= keep)
        return;
    size_t drop = n - keep;
    for (size_t i = 0; i < drop; i++) {
        free(files->u.object.items[i].key);
        json_free(files->u.object.items[i].value);
    }
    memmove(files->u.object.items, files->u.object.items + drop,
            keep * sizeof *files->u.object.items);
    files->u.object.len = keep;
}

/* Records the entry: under the lock, re-read the cache, merge, write atomically. Failures
 * are warnings: the hash is still right, only the next run will be slower. */
static void store(const char *cache_path, const char *key, int64_t size, int64_t mtime_ns,
                  const char *hex)
{
    struct kn_err err;
    char lock_path[PATH_MAX + 8];
    snprintf(lock_path, sizeof lock_path, "%s.lock", cache_path);
    if (!kn_make_parent_dirs(cache_path)) {
        kn_log(KN_LOG_WARN, "%s: cannot create the cache folder: %s", cache_path, strerror(errno));
        return;
    }
    int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0) {
        kn_log(KN_LOG_WARN, "%s: cannot open the cache lock: %s", lock_path, strerror(errno));
        return;
    }
    while (flock(lock, LOCK_EX) != 0) {
        if (errno != EINTR) {
            kn_log(KN_LOG_WARN, "%s: cannot lock: %s", lock_path, strerror(errno));
            close(lock);
            return;
        }
    }
    struct json_value *root = load_cache(cache_path);
    struct json_value *files = root ? (struct json_value *)json_get(root, "files") : NULL;
    struct json_value *e = json_new_object();
    bool ok = files && e;
    if (ok) {
        json_free(json_object_take(files, key)); /* the newest entry goes last */
        drop_oldest(files, CACHE_MAX_ENTRIES - 1);
        ok = json_object_set(e, "size", json_new_int(size), &err) == KN_OK &&
             json_object_set(e, "mtime_ns", json_new_int(mtime_ns), &err) == KN_OK &&
             json_object_set(e, "blake3", json_new_string(hex), &err) == KN_OK;
        if (ok) {
            ok = json_object_set(files, key, e, &err) == KN_OK;
            e = NULL;
        }
    }
    json_free(e);
    char *text = NULL;
    size_t len;
    if (ok && json_write(root, JSON_PRETTY, &text, &len, &err) == KN_OK) {
        if (kn_write_file_atomic(cache_path, text, len, &err) != KN_OK)
            kn_log(KN_LOG_WARN, "model-hash cache not updated: %s", err.msg);
        else if (chmod(cache_path, 0600) != 0) /* the entries name the user's files */
            kn_log(KN_LOG_WARN, "%s: cannot make it private: %s", cache_path, strerror(errno));
    } else {
        kn_log(KN_LOG_WARN, "%s: model-hash cache not updated (out of memory)", cache_path);
    }
    free(text);
    json_free(root);
    flock(lock, LOCK_UN);
    close(lock);
}

/* Paths whose files are not model files and whose names say things about the system: they
 * are never hashed into the cache. */
static bool system_path(const char *abs)
{
    return strncmp(abs, "/proc/", 6) == 0 || strncmp(abs, "/sys/", 5) == 0 ||
           strncmp(abs, "/dev/", 5) == 0;
}

/* Opens without blocking (a FIFO must not stall), then requires a regular file that starts
 * with the GGUF magic: a receipt's model.path is untrusted, and nothing else is hashed. */
static enum kn_status check_model_file(const char *path, const char *abs, struct stat *st,
                                       struct kn_err *err)
{
    int fd = open(abs, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return kn_fail(err, KN_E_IO, "%s: cannot open: %s", path, strerror(errno));
    enum kn_status s = KN_OK;
    char magic[4];
    if (fstat(fd, st) != 0)
        s = kn_fail(err, KN_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st->st_mode))
        s = kn_fail(err, KN_E_IO, "%s: not a regular file", path);
    else if (system_path(abs))
        s = kn_fail(err, KN_E_IO, "%s: under /proc, /sys or /dev: not a model file", path);
    else if (pread(fd, magic, 4, 0) != 4 || memcmp(magic, "GGUF", 4) != 0)
        s = kn_fail(err, KN_E_FORMAT, "%s: not a GGUF model file (it does not start with GGUF)",
                    path);
    close(fd);
    return s;
}

enum kn_status hashcache_model_blake3(const char *path, char out_hex[65], struct kn_err *err)
{
    char abs[PATH_MAX];
    if (!realpath(path, abs))
        return kn_fail(err, KN_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    enum kn_status cs = check_model_file(path, abs, &st, err);
    if (cs != KN_OK)
        return cs;
    int64_t size = (int64_t)st.st_size;
    int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;

    char cache_path[PATH_MAX];
    struct kn_err cerr;
    /* Keys are JSON strings, so a path that is not UTF-8 is hashed but not cached. */
    bool use_cache = hashcache_path(cache_path, sizeof cache_path, &cerr) == KN_OK &&
                     json_utf8_valid(abs, strlen(abs));
    if (use_cache) {
        struct json_value *root = load_cache(cache_path);
        const char *h = lookup(root, abs, size, mtime);
        if (h) {
            memcpy(out_hex, h, 65);
            json_free(root);
            atomic_fetch_add(&stat_hits, 1);
            kn_log(KN_LOG_DEBUG, "%s: BLAKE3 from the cache %s", abs, cache_path);
            return KN_OK;
        }
        json_free(root);
    }
    uint8_t hash[BLAKE3_OUT_LEN];
    enum kn_status s = blake3_hash_file(abs, hash, 0, err);
    if (s != KN_OK)
        return s;
    atomic_fetch_add(&stat_misses, 1);
    blake3_hex(hash, sizeof hash, out_hex);
    /* A file that changed while it was hashed may have been hashed half old, half new: use
     * the hash this once but do not remember it. */
    struct stat after;
    bool stable = stat(abs, &after) == 0 && after.st_size == st.st_size &&
                  after.st_mtim.tv_sec == st.st_mtim.tv_sec &&
                  after.st_mtim.tv_nsec == st.st_mtim.tv_nsec;
    if (use_cache && stable)
        store(cache_path, abs, size, mtime, out_hex);
    kn_log(KN_LOG_DEBUG, "%s: hashed (BLAKE3 %.16s)", abs, out_hex);
    return KN_OK;
}
