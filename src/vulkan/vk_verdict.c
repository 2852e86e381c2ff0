/* vk_verdict.c: the device verdict cache (docs/numerics.md "Devices"). The self-test's
 * decisive check, kern_backend_check of every op against the CPU, takes seconds on a
 * CPU driver (lavapipe); its outcome depends only on the shaders and check code (the
 * build id), the device and driver, and the modes this start's probes chose. So its
 * verdict is recorded under a key of exactly those, and a later start of the same build
 * on the same device and driver whose probes find the same reuses it:
 *
 *     <dir>/<key, 64 hex>.kvd     dir: $KINETIC_DEVICE_CACHE, else kn_cache_dir()/devices
 *
 * The file is struct vk_verdict_file: a MAC (cachefile_mac, keyed with a key derived from
 * the key), magic, version, the verdict and the check's report text. A file that is
 * truncated, altered, made for another key or not a record fails a check and is ignored:
 * the check runs again and rewrites it (kn_write_parts_atomic: readers see the old file
 * or the whole new one). After a write, the least recently used records beyond
 * VERDICT_MAX_FILES are removed (a hit marks its record used). Every failure of the cache
 * itself costs only the check's time. */
#include "vk_ops.h"

#include "../crypto/buildid.h"
#include "../crypto/cachefile.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VERDICT_MAGIC "KNVERDCT"
#define VERDICT_VERSION 1u
#define VERDICT_SUFFIX ".kvd"
/* Records kept in the folder: the newest by last use; older ones (other builds, drivers,
 * devices) are removed when a record is written. */
#define VERDICT_MAX_FILES 32
/* A temporary file older than this is left from a writer that died: removed. */
#define VERDICT_STALE_TMP_S 3600
/* The key's and the MAC key's derivation contexts (BLAKE3: fixed, application-unique). */
#define VERDICT_KEY_CONTEXT "kinetic 2026-12-02 device verdict key v1"
#define VERDICT_KDF_CONTEXT "kinetic 2026-12-02 device verdict MAC key v1"

struct vk_verdict_file {
    uint8_t mac[BLAKE3_OUT_LEN];  /* keyed BLAKE3 of every later byte */
    char magic[8];                /* VERDICT_MAGIC, no NUL */
    uint32_t version;             /* VERDICT_VERSION */
    uint32_t ops_equal;           /* 0 or 1 */
    uint8_t key[BLAKE3_OUT_LEN];  /* vk_verdict_plan's key in full */
    char ops[VK_VERDICT_OPS_LEN]; /* the check's report, NUL-terminated, zero-padded */
};
static_assert(sizeof(struct vk_verdict_file) == 2 * BLAKE3_OUT_LEN + 16 + VK_VERDICT_OPS_LEN,
              "vk_verdict_file has no padding");

static void put_field(struct blake3_hasher *h, const void *p, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    blake3_hasher_update(h, len, sizeof len);
    blake3_hasher_update(h, p, n);
}

bool vk_verdict_plan(const struct vkr_info *in, const char *build, const char *findings,
                     struct vk_verdict_plan *p, struct kn_err *why)
{
    memset(p, 0, sizeof *p);
    char dir[PATH_MAX - 80];
    enum cachefile_where w = cachefile_dir(NULL, VK_VERDICT_ENV, "devices", dir, sizeof dir, why);
    if (w != CACHEFILE_DIR)
        return false; /* off, or no folder (why says why) */
    if (strlen(build) != KN_BUILD_ID_LEN) {
        kn_fail(why, KN_E_IO, "the build id is unknown");
        return false;
    }
    /* Every field length-prefixed: no two different tuples hash the same bytes. */
    struct blake3_hasher h;
    blake3_hasher_init_derive_key(&h, VERDICT_KEY_CONTEXT);
    uint8_t ver[4];
    for (int i = 0; i < 4; i++)
        ver[i] = (uint8_t)(in->driver_version >> (8 * i));
    put_field(&h, build, KN_BUILD_ID_LEN);
    put_field(&h, in->device_uuid, sizeof in->device_uuid);
    put_field(&h, in->driver_uuid, sizeof in->driver_uuid);
    put_field(&h, ver, sizeof ver);
    put_field(&h, in->name, strlen(in->name));
    put_field(&h, in->driver, strlen(in->driver));
    put_field(&h, in->driver_info, strlen(in->driver_info));
    put_field(&h, findings, strlen(findings));
    blake3_hasher_finalize(&h, p->key, sizeof p->key);
    const struct kn_part k = {p->key, sizeof p->key};
    cachefile_key(VERDICT_KDF_CONTEXT, &k, 1, p->mac_key);
    char hex[2 * BLAKE3_OUT_LEN + 1];
    blake3_hex(p->key, sizeof p->key, hex);
    snprintf(p->path, sizeof p->path, "%s/%s" VERDICT_SUFFIX, dir, hex); /* dir leaves room */
    return true;
}

static void file_mac(const struct vk_verdict_plan *p, const struct vk_verdict_file *f,
                     uint8_t mac[BLAKE3_OUT_LEN])
{
    const struct kn_part rest = {(const uint8_t *)f + BLAKE3_OUT_LEN, sizeof *f - BLAKE3_OUT_LEN};
    cachefile_mac(p->mac_key, &rest, 1, 0, mac);
}

enum vk_verdict_load vk_verdict_load(const struct vk_verdict_plan *p, bool *ops_equal,
                                     char ops[VK_VERDICT_OPS_LEN], struct kn_err *why)
{
    struct vk_verdict_file f;
    int fd;
    enum cachefile_open o = cachefile_open(p->path, sizeof f, &fd, why);
    if (o != CACHEFILE_OPENED)
        return o == CACHEFILE_MISSING ? VK_VERDICT_MISS : VK_VERDICT_BAD;
    ssize_t got = read(fd, &f, sizeof f);
    close(fd);
    if (got != (ssize_t)sizeof f) {
        kn_fail(why, KN_E_IO, "cannot read it");
        return VK_VERDICT_BAD;
    }
    uint8_t mac[BLAKE3_OUT_LEN];
    if (memcmp(f.magic, VERDICT_MAGIC, sizeof f.magic) != 0 || f.version != VERDICT_VERSION) {
        kn_fail(why, KN_E_FORMAT, "not a version %u verdict record", VERDICT_VERSION);
        return VK_VERDICT_BAD;
    }
    if (memcmp(f.key, p->key, sizeof f.key) != 0) {
        kn_fail(why, KN_E_FORMAT, "made for another build, device, driver or probe result");
        return VK_VERDICT_BAD;
    }
    file_mac(p, &f, mac);
    if (!blake3_equal(mac, f.mac)) {
        kn_fail(why, KN_E_FORMAT, "its MAC does not match (damaged)");
        return VK_VERDICT_BAD;
    }
    if (f.ops_equal > 1 || !memchr(f.ops, 0, sizeof f.ops)) {
        kn_fail(why, KN_E_FORMAT, "malformed");
        return VK_VERDICT_BAD;
    }
    *ops_equal = f.ops_equal == 1;
    memcpy(ops, f.ops, sizeof f.ops);
    cachefile_touch(p->path); /* the last use, for the eviction order */
    return VK_VERDICT_HIT;
}

void vk_verdict_store(const struct vk_verdict_plan *p, bool ops_equal, const char *ops)
{
    struct vk_verdict_file f;
    memset(&f, 0, sizeof f);
    memcpy(f.magic, VERDICT_MAGIC, sizeof f.magic);
    f.version = VERDICT_VERSION;
    f.ops_equal = ops_equal;
    memcpy(f.key, p->key, sizeof f.key);
    snprintf(f.ops, sizeof f.ops, "%s", ops);
    file_mac(p, &f, f.mac);
    struct kn_err err = {0};
    const struct kn_part part = {&f, sizeof f};
    if (!kn_make_parent_dirs(p->path))
        kn_log(KN_LOG_DEBUG, "device verdict not recorded: cannot create the folder of %s: %s",
               p->path, strerror(errno));
    else if (kn_write_parts_atomic(p->path, &part, 1, false, &err) != KN_OK)
        kn_log(KN_LOG_DEBUG, "device verdict not recorded: %s", err.msg);
    else {
        kn_log(KN_LOG_DEBUG, "device verdict recorded in %s", p->path);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", p->path);
        *strrchr(dir, '/') = 0; /* vk_verdict_plan made the path <dir>/<key>.kvd */
        cachefile_evict(dir, VERDICT_SUFFIX, p->path, VERDICT_MAX_FILES, VERDICT_STALE_TMP_S,
                        NULL);
    }
}
