/* test_hashcache.c: the model-hash cache in a temporary XDG_CACHE_HOME: a miss hashes and
 * records, a hit answers from the cache (counted, and proven by planting a different hash
 * that the lookup then returns), a changed size or mtime re-hashes, corrupt or wrongly
 * shaped caches are ignored and rebuilt, bad entries are not trusted.
 *
 * `test_hashcache hash FILE` prints "<hex> hits=N misses=N corrupt=N" for the pytest. */
#include "check.h"
#include "base/json.h"
#include "crypto/blake3.h"
#include "crypto/hashcache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[64], cache[256], model[256];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void expect_hash(const char *path, char hex[65])
{
    uint8_t h[32];
    struct kn_err err;
    CHECK(blake3_hash_file(path, h, 1, &err) == KN_OK);
    blake3_hex(h, 32, hex);
}

static struct hashcache_stats delta(struct hashcache_stats before)
{
    struct hashcache_stats now = hashcache_stats();
    return (struct hashcache_stats){.hits = now.hits - before.hits,
                                    .misses = now.misses - before.misses,
                                    .corrupt = now.corrupt - before.corrupt};
}

/* Looks path up and checks the hash and whether it was a hit. */
static void lookup(const char *path, const char *want, int hit, int corrupt)
{
    struct hashcache_stats b = hashcache_stats();
    char hex[65];
    struct kn_err err;
    CHECKF(hashcache_model_blake3(path, hex, &err) == KN_OK, "%s", err.msg);
    CHECK_STR(hex, want);
    struct hashcache_stats d = delta(b);
    CHECKF(d.hits == (uint64_t)hit && d.misses == (uint64_t)!hit, "hit %d: hits %llu misses %llu",
           hit, (unsigned long long)d.hits, (unsigned long long)d.misses);
    CHECK_EQ_INT(d.corrupt, (uint64_t)corrupt);
}

static struct json_value *read_cache(void)
{
    struct json_value *v = NULL;
    struct kn_err err;
    CHECKF(json_parse_file(cache, NULL, &v, &err) == KN_OK, "%s", err.msg);
    return v;
}

static void test_cache(void)
{
    char want[65], want2[65];
    write_file(model, "GGUFmodel wts v1");
    expect_hash(model, want);

    lookup(model, want, 0, 0); /* first time: hashed */
    lookup(model, want, 1, 0); /* then: from the cache */

    /* The entry has the documented shape, keyed by the absolute path. */
    struct json_value *c = read_cache();
    char abs[4096];
    CHECK(realpath(model, abs) != NULL);
    const struct json_value *e = json_get(json_get(c, "files"), abs);
    int64_t v, size, mt;
    CHECK(json_int(json_get(c, "version"), &v) && v == 1);
    CHECK(json_int(json_get(e, "size"), &size) && size == 16);
    struct stat st;
    CHECK(stat(model, &st) == 0);
    CHECK(json_int(json_get(e, "mtime_ns"), &mt) &&
          mt == (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
    CHECK_STR(json_str(json_get(e, "blake3")), want);
    json_free(c);

    /* A relative path finds the same entry. */
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(dir) == 0);
    lookup("model.gguf", want, 1, 0);
    CHECK(chdir(cwd) == 0);

    /* Hits really come from the cache: a planted hash is returned as is. */
    const char *fake = "1111111111111111111111111111111111111111111111111111111111111111";
    char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"version\": 1, \"files\": {\"%s\": {\"size\": 16, \"mtime_ns\": %lld, "
             "\"blake3\": \"%s\"}}}",
             abs, (long long)((int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec), fake);
    write_file(cache, buf);
    lookup(model, fake, 1, 0);

    /* Same size, different mtime: re-hashed (and the planted hash replaced). */
    struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 5}, {.tv_sec = 1000000000, .tv_nsec = 5}};
    CHECK(utimensat(AT_FDCWD, model, ts, 0) == 0);
    lookup(model, want, 0, 0);
    lookup(model, want, 1, 0);
    /* Different content and size: re-hashed with the new hash. */
    write_file(model, "GGUF model weights v2, longer");
    expect_hash(model, want2);
    lookup(model, want2, 0, 0);
    lookup(model, want2, 1, 0);
    /* Each file has one entry: a re-hash replaces it. */
    c = read_cache();
    CHECK(json_len(json_get(c, "files")) == 1);
    json_free(c);

    /* Corrupt caches: ignored (counted, warned) and rebuilt valid. */
    static const char *const corrupt[] = {
        "{\"version\": 1, \"files\": {", /* truncated */
        "\x00\x01garbage",
        "[]",
        "{\"version\": 2, \"files\": {}}",
        "{\"version\": 1, \"files\": []}",
        "{\"version\": 1, \"files\": {}, \"files\": {}}", /* duplicate key */
    };
    for (size_t i = 0; i < sizeof corrupt / sizeof corrupt[0]; i++) {
        write_file(cache, corrupt[i]);
        lookup(model, want2, 0, 2); /* the lookup and the re-read under the lock */
        lookup(model, want2, 1, 0);
        c = read_cache();
        CHECK(c && json_len(json_get(c, "files")) == 1);
        json_free(c);
    }
    /* Entries with bad fields are not trusted (but the cache as a whole is kept). */
    static const char *const bad_entry[] = {
        "\"size\": \"16\", \"mtime_ns\": %lld, \"blake3\": \"%s\"",
        "\"size\": 24, \"mtime_ns\": %lld.5, \"blake3\": \"%s\"",
        "\"size\": 24, \"mtime_ns\": %lld, \"blake3\": \"%.63s\"",
        "\"size\": 24, \"mtime_ns\": %lld, \"blake3\": 7, \"x\": \"%s\"",
    };
    CHECK(stat(model, &st) == 0);
    long long mtime = (long long)((int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
    for (size_t i = 0; i < sizeof bad_entry / sizeof bad_entry[0]; i++) {
        char entry[512];
        snprintf(entry, sizeof entry, bad_entry[i], mtime, fake);
        snprintf(buf, sizeof buf, "{\"version\": 1, \"files\": {\"%s\": {%s}}}", abs, entry);
        write_file(cache, buf);
        lookup(model, want2, 0, 0);
        lookup(model, want2, 1, 0);
    }

    /* Several files share the cache. */
    char other[300], want3[65];
    snprintf(other, sizeof other, "%s/other.bin", dir);
    write_file(other, "GGUF");
    expect_hash(other, want3);
    lookup(other, want3, 0, 0);
    lookup(model, want2, 1, 0);
    lookup(other, want3, 1, 0);
    c = read_cache();
    CHECK_EQ_INT(json_len(json_get(c, "files")), 2);
    json_free(c);
    unlink(other);

    /* A cache over the entry limit keeps the newest 4096 entries, ours last; odd keys
     * (a NUL inside) are just other entries. */
    {
        size_t cap = 6000 * 160, len = 0;
        char *big = malloc(cap);
        len += (size_t)snprintf(big + len, cap - len, "{\"version\": 1, \"files\": {\"a\\u0000b\": {}");
        for (int i = 0; i < 5000; i++)
            len += (size_t)snprintf(big + len, cap - len,
                                    ", \"/gone/%d\": {\"size\": 1, \"mtime_ns\": 2, \"blake3\": \"%s\"}",
                                    i, fake);
        snprintf(big + len, cap - len, "}}");
        write_file(cache, big);
        free(big);
        lookup(model, want2, 0, 0);
        c = read_cache();
        const struct json_value *f = json_get(c, "files");
        CHECK_EQ_INT(json_len(f), 4096);
        CHECK(strcmp(f->u.object.items[4095].key, abs) == 0);
        CHECK(json_get(f, "/gone/4999") != NULL && json_get(f, "/gone/904") == NULL &&
              json_get(f, "/gone/905") != NULL);
        json_free(c);
        lookup(model, want2, 1, 0);
    }

    /* Errors are about the file, naming it. */
    char hex[65];
    struct kn_err err;
    CHECK(hashcache_model_blake3("/nonexistent/m.gguf", hex, &err) == KN_E_IO);
    CHECK(strstr(err.msg, "/nonexistent/m.gguf") != NULL);
    CHECK(hashcache_model_blake3(dir, hex, &err) == KN_E_IO);
    CHECK(strstr(err.msg, "not a regular file") != NULL);

    /* Only GGUF files are hashed (a receipt's model.path is untrusted): a secret-looking
     * file, a FIFO (opened without blocking) and /proc files are refused, never cached. */
    char notgguf[300], fifo[300];
    snprintf(notgguf, sizeof notgguf, "%s/shadow", dir);
    write_file(notgguf, "root:$6$secret:19000:0:99999:7:::\n");
    struct hashcache_stats b0 = hashcache_stats();
    CHECK(hashcache_model_blake3(notgguf, hex, &err) == KN_E_FORMAT);
    CHECKF(strstr(err.msg, "not a GGUF model file") != NULL, "%s", err.msg);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(hashcache_model_blake3(fifo, hex, &err) == KN_E_IO);
    CHECKF(strstr(err.msg, "not a regular file") != NULL, "%s", err.msg);
    CHECK(hashcache_model_blake3("/proc/self/status", hex, &err) != KN_OK);
    CHECK_EQ_INT(delta(b0).misses, 0);
    c = read_cache();
    const struct json_value *files = json_get(c, "files");
    for (size_t i = 0; i < json_len(files); i++) {
        const char *k = files->u.object.items[i].key;
        CHECKF(strncmp(k, "/proc/", 6) != 0 && strstr(k, "shadow") == NULL, "cached %s", k);
    }
    json_free(c);
    unlink(notgguf);
    unlink(fifo);

    /* The cache and its folder are private: they name the user's files. */
    struct stat cst;
    CHECK(stat(cache, &cst) == 0);
    CHECKF((cst.st_mode & 0777) == 0600, "hashes.json mode %o", (unsigned)(cst.st_mode & 0777));
    char kdir[300];
    snprintf(kdir, sizeof kdir, "%s/kinetic", dir);
    CHECK(stat(kdir, &cst) == 0);
    CHECKF((cst.st_mode & 0777) == 0700, "cache folder mode %o", (unsigned)(cst.st_mode & 0777));

    /* An unwritable cache folder costs only time. */
    char ro[300];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    CHECK(mkdir(ro, 0555) == 0);
    setenv("XDG_CACHE_HOME", ro, 1);
    if (geteuid() != 0) { /* root writes anywhere */
        lookup(model, want2, 0, 0);
        lookup(model, want2, 0, 0);
    }
    rmdir(ro);

    /* The default location and relative XDG_CACHE_HOME (ignored, per the XDG spec). */
    char p[512];
    setenv("HOME", "/home/someone", 1);
    unsetenv("XDG_CACHE_HOME");
    CHECK(hashcache_path(p, sizeof p, &err) == KN_OK);
    CHECK_STR(p, "/home/someone/.cache/kinetic/hashes.json");
    setenv("XDG_CACHE_HOME", "relative/dir", 1);
    CHECK(hashcache_path(p, sizeof p, &err) == KN_OK);
    CHECK_STR(p, "/home/someone/.cache/kinetic/hashes.json");
    setenv("XDG_CACHE_HOME", "/x", 1);
    CHECK(hashcache_path(p, sizeof p, &err) == KN_OK);
    CHECK_STR(p, "/x/kinetic/hashes.json");
}

static int hash_command(const char *path)
{
    char hex[65];
    struct kn_err err;
    if (hashcache_model_blake3(path, hex, &err) != KN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    struct hashcache_stats s = hashcache_stats();
    printf("%s hits=%llu misses=%llu corrupt=%llu\n", hex, (unsigned long long)s.hits,
           (unsigned long long)s.misses, (unsigned long long)s.corrupt);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "hash") == 0)
        return hash_command(argv[2]);
    snprintf(dir, sizeof dir, "/tmp/kn_hashcache_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    setenv("XDG_CACHE_HOME", dir, 1);
    snprintf(cache, sizeof cache, "%s/kinetic/hashes.json", dir);
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    kn_log_set_level(KN_LOG_ERROR); /* the corrupt-cache warnings are expected here */
    test_cache();
    unlink(model);
    unlink(cache);
    char lock[300];
    snprintf(lock, sizeof lock, "%s.lock", cache);
    unlink(lock);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/kinetic", dir);
    rmdir(sub);
    CHECK(rmdir(dir) == 0);
    CHECK_DONE();
}
