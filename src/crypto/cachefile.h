/* cachefile.h: what Kinetic's MAC'd cache files share (the repack cache, engine/rcache.c;
 * the device verdict cache, vulkan/vk_verdict.c): where a cache's folder is, and the
 * keyed BLAKE3 that says a file is whole and was made for the keys it is read with. The
 * files are written with kn_write_parts_atomic (base.h) and never changed in place. */
#ifndef KN_CRYPTO_CACHEFILE_H
#define KN_CRYPTO_CACHEFILE_H

#include "../base/base.h"
#include "blake3.h"

/* Where a cache lives: setting (a flag's value; NULL or "": the environment variable env;
 * unset or "": kn_cache_dir()/sub), "off" for none, else a folder. */
enum cachefile_where {
    CACHEFILE_OFF, /* the setting says off: no cache */
    CACHEFILE_DIR, /* out holds the folder */
    CACHEFILE_BAD, /* no folder can be named (why says why): no cache, with a note */
};
enum cachefile_where cachefile_dir(const char *setting, const char *env, const char *sub,
                                   char *out, size_t cap, struct kn_err *why);

/* The MAC key of a file: BLAKE3 derive_key with context (a fixed, application-unique
 * string per cache and version) over the n parts, which are the file's keys in full, so a
 * file made for other keys fails its MAC even if its name and header were changed. */
void cachefile_key(const char *context, const struct kn_part *keys, size_t n,
                   uint8_t key[BLAKE3_KEY_LEN]);
/* The MAC: BLAKE3 keyed with key over the n parts one after another (every byte of the
 * file after the MAC). mapped_threads 0: plain memory, hashed on this thread; else the
 * parts are file mappings, hashed on that many threads (blake3_hasher_update_mapped). */
void cachefile_mac(const uint8_t key[BLAKE3_KEY_LEN], const struct kn_part *parts, size_t n,
                   int mapped_threads, uint8_t mac[BLAKE3_OUT_LEN]);

/* Removes, from dir, the temporary files of dead writers (<name><suffix>.tmp.<pid> older
 * than stale_tmp_s seconds), the files <...><suffix> that replaced (may be NULL) says the
 * file just written replaces (it gets their names and keep's, without the folder), and
 * the least recently used (by mtime) beyond max_files, keep counted; never keep, the file
 * just written. Best effort: another process may be removing the same files. */
void cachefile_evict(const char *dir, const char *suffix, const char *keep, size_t max_files,
                     long stale_tmp_s, bool (*replaced)(const char *name, const char *keep_name));
/* Opens a cache file for reading: a regular file of exactly want bytes. */
enum cachefile_open {
    CACHEFILE_OPENED,     /* *fd is open: the caller closes it */
    CACHEFILE_MISSING,    /* no file (or no folder) */
    CACHEFILE_UNREADABLE, /* it cannot be opened (why says why) */
    CACHEFILE_WRONG,      /* not a regular file, or of another size (why says which) */
};
enum cachefile_open cachefile_open(const char *path, uint64_t want, int *fd, struct kn_err *why);
/* Marks the file at path as used now (its mtime, the eviction order; best effort). */
void cachefile_touch(const char *path);

#endif
