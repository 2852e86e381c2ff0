/* cachefile.c: the folder rule and the MAC of Kinetic's cache files (cachefile.h). */
#include "cachefile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum cachefile_where cachefile_dir(const char *setting, const char *env, const char *sub,
                                   char *out, size_t cap, struct kn_err *why)
{
    if (!setting || !*setting)
        setting = getenv(env);
    if (setting && !*setting)
        setting = NULL;
    if (setting && strcmp(setting, "off") == 0)
        return CACHEFILE_OFF;
    if (setting) {
        if (snprintf(out, cap, "%s", setting) >= (int)cap) {
            kn_fail(why, KN_E_ARG, "the folder name is longer than %zu bytes", cap - 1);
            return CACHEFILE_BAD;
        }
        return CACHEFILE_DIR;
    }
    if (kn_cache_dir(out, cap, why) != KN_OK)
        return CACHEFILE_BAD;
    size_t len = strlen(out);
    if (snprintf(out + len, cap - len, "/%s", sub) >= (int)(cap - len)) {
        kn_fail(why, KN_E_ARG, "the cache path is longer than %zu bytes", cap - 1);
        return CACHEFILE_BAD;
    }
    return CACHEFILE_DIR;
}

void cachefile_key(const char *context, const struct kn_part *keys, size_t n,
                   uint8_t key[BLAKE3_KEY_LEN])
{
    struct blake3_hasher kh;
    blake3_hasher_init_derive_key(&kh, context);
    for (size_t i = 0; i < n; i++)
        blake3_hasher_update(&kh, keys[i].data, keys[i].size);
    blake3_hasher_finalize(&kh, key, BLAKE3_KEY_LEN);
}

void cachefile_mac(const uint8_t key[BLAKE3_KEY_LEN], const struct kn_part *parts, size_t n,
                   int mapped_threads, uint8_t mac[BLAKE3_OUT_LEN])
{
    struct blake3_hasher mh;
    blake3_hasher_init_keyed(&mh, key);
    for (size_t i = 0; i < n; i++) {
        if (mapped_threads == 0)
            blake3_hasher_update(&mh, parts[i].data, parts[i].size);
        else
            blake3_hasher_update_mapped(&mh, parts[i].data, parts[i].size, mapped_threads);
    }
    blake3_hasher_finalize(&mh, mac, BLAKE3_OUT_LEN);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

struct cachefile_entry {
    char *path;
    time_t used;
};

static int by_use_newest_first(const void *a, const void *b)
{
    const struct cachefile_entry *x = a, *y = b;
    return (x->used < y->used) - (x->used > y->used);
}

void cachefile_evict(const char *dir, const char *suffix, const char *keep, size_t max_files,
                     long stale_tmp_s, bool (*replaced)(const char *name, const char *keep_name))
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    const char *slash = strrchr(keep, '/');
    const char *base = slash ? slash + 1 : keep;
    char tmp_mark[64];
    snprintf(tmp_mark, sizeof tmp_mark, "%s.tmp.", suffix);
    struct cachefile_entry *list = NULL;
    size_t n = 0, cap = 0;
    const time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[PATH_MAX];
        struct stat st;
        if (e->d_name[0] == '.' || strcmp(e->d_name, base) == 0 ||
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path ||
            lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (strstr(e->d_name, tmp_mark)) {
            if (now - st.st_mtime > stale_tmp_s)
                (void)unlink(path);
        } else if (!ends_with(e->d_name, suffix)) {
            continue;
        } else if (replaced && replaced(e->d_name, base)) {
            (void)unlink(path);
        } else {
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 32;
                struct cachefile_entry *nl = realloc(list, nc * sizeof *nl);
                if (!nl)
                    break;
                list = nl;
                cap = nc;
            }
            if (!(list[n].path = strdup(path)))
                break;
            list[n++].used = st.st_mtime;
        }
    }
    closedir(d);
    if (n) /* qsort's array must not be NULL, even when empty */
        qsort(list, n, sizeof *list, by_use_newest_first);
    for (size_t i = 0; i < n; i++) {
        if (i + 1 >= max_files)
            (void)unlink(list[i].path);
        free(list[i].path);
    }
    free(list);
}

enum cachefile_open cachefile_open(const char *path, uint64_t want, int *fd, struct kn_err *why)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (*fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return CACHEFILE_MISSING;
        kn_fail(why, KN_E_IO, "cannot open it: %s", strerror(errno));
        return CACHEFILE_UNREADABLE;
    }
    struct stat st;
    if (fstat(*fd, &st) != 0)
        kn_fail(why, KN_E_IO, "cannot stat it: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        kn_fail(why, KN_E_IO, "not a regular file");
    else if ((uint64_t)st.st_size != want)
        kn_fail(why, KN_E_FORMAT, "%lld bytes, expected %llu (truncated or foreign)",
                (long long)st.st_size, (unsigned long long)want);
    else
        return CACHEFILE_OPENED;
    close(*fd);
    *fd = -1;
    return CACHEFILE_WRONG;
}

void cachefile_touch(const char *path)
{
    (void)utimensat(AT_FDCWD, path, NULL, 0);
}
