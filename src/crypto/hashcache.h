/* hashcache.h: the model-hash cache. A receipt names its model by BLAKE3; hashing a large
 * model takes seconds, so the hash is kept in $XDG_CACHE_HOME/kinetic/hashes.json
 * (default ~/.cache/kinetic/hashes.json), keyed by absolute path, size and modification
 * time in nanoseconds. Format and locking: docs/receipts.md ("Model-hash cache"). */
#ifndef KN_CRYPTO_HASHCACHE_H
#define KN_CRYPTO_HASHCACHE_H

#include "../base/base.h"

/* Writes the file's BLAKE3 as 64 lowercase hex digits and a NUL to out_hex: from the cache
 * when an entry matches the file's absolute path, size and mtime, else by hashing the file
 * (on all CPUs) and recording it. A missing, corrupt or unwritable cache only costs time
 * (with a warning); errors are about the file itself (cannot open, not a regular file). */
KN_MUST_USE enum kn_status hashcache_model_blake3(const char *path, char out_hex[65],
                                                  struct kn_err *err);

/* The cache file's path (from the environment, as above) into out; KN_E_ARG when neither
 * XDG_CACHE_HOME nor HOME gives an absolute folder. */
KN_MUST_USE enum kn_status hashcache_path(char *out, size_t size, struct kn_err *err);

/* How this process used the cache: lookups answered from it, files hashed, cache files
 * found corrupt. For tests and debug output. */
struct hashcache_stats {
    uint64_t hits;
    uint64_t misses;
    uint64_t corrupt;
};
struct hashcache_stats hashcache_stats(void);

#endif
