/* test_vk_verdict.c: the device verdict cache (src/vulkan/vk_verdict.c) on the first
 * Vulkan device. The first start runs kern_backend_check and records its verdict; a second
 * start of this build on this device takes the record (the report says so) and decides
 * the same numerics; `kinetic devices`' open (VK_CHECK_FULL) runs the check anyway; a
 * record that is damaged, truncated, or made for another build, device, driver or probe
 * result is ignored and rewritten (the same bytes as the first); off writes nothing; a
 * write keeps the 32 most recently used records.
 * Skips (exit 77) with the reason when the build has no Vulkan or there is no device. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "crypto/buildid.h"
#include "vulkan/vk_backend.h"
#include "vulkan/vk_ops.h"

static char dir[] = "/tmp/kn_vk_verdict_XXXXXX";

/* The one record in dir into path (and its bytes into buf); the number of records. */
static int the_record(char *path, size_t cap, unsigned char *buf, size_t *len)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".kvd") == 0) {
            n++;
            snprintf(path, cap, "%s/%s", dir, e->d_name);
        }
    }
    if (d)
        closedir(d);
    *len = 0;
    FILE *f = n == 1 ? fopen(path, "rb") : NULL;
    if (f) {
        *len = fread(buf, 1, 4096, f);
        fclose(f);
    }
    return n;
}

static void put_file(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(b, 1, n, f) == n);
        fclose(f);
    }
}

struct start {
    bool recorded, ops_equal, canonical;
    char numerics[256], report[2048];
};

static bool start(enum vk_check check, struct start *s)
{
    struct kn_err err = {0};
    struct kern_backend *be = vk_backend_open(0, check, &err);
    if (!be)
        return false;
    const struct vk_selftest *t = vk_backend_selftest(be);
    s->recorded = t->recorded;
    s->ops_equal = t->ops_equal;
    s->canonical = t->canonical;
    snprintf(s->numerics, sizeof s->numerics, "%s", be->ops->numerics(be));
    snprintf(s->report, sizeof s->report, "%s", t->report);
    vk_backend_close(be); /* the last close: the next open starts the device afresh */
    return true;
}

#define RECORDED_TEXT "[the verdict recorded by this build on this device and driver]"

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    setenv(VK_VERDICT_ENV, dir, 1);
    struct start s0, s;
    if (!start(VK_CHECK_RECORDED, &s0)) {
        printf("skipped: no Vulkan device\n");
        rmdir(dir);
        return 77;
    }
    printf("first start: %s\n", s0.report);
    CHECK(!s0.recorded);
    CHECK(strstr(s0.report, RECORDED_TEXT) == NULL);
    char path[4200];
    unsigned char rec[4096], now[4096];
    size_t rec_len, now_len;
    if (!s0.ops_equal) { /* only a pass is recorded: a failing device checks every start */
        CHECK_EQ_INT(the_record(path, sizeof path, rec, &rec_len), 0);
        printf("the device fails the ops check: nothing recorded, nothing more to test\n");
        rmdir(dir);
        CHECK_DONE();
    }
    CHECK_EQ_INT(the_record(path, sizeof path, rec, &rec_len), 1);
    CHECK_EQ_INT(rec_len, 2 * 32 + 16 + VK_VERDICT_OPS_LEN);

    /* the second start takes the record: the same verdict and numerics, said so */
    CHECK(start(VK_CHECK_RECORDED, &s));
    printf("second start: %s\n", s.report);
    CHECK(s.recorded);
    CHECK(strstr(s.report, RECORDED_TEXT) != NULL);
    CHECK(s.ops_equal == s0.ops_equal && s.canonical == s0.canonical);
    CHECK_STR(s.numerics, s0.numerics);

    /* the full check runs whatever the record says, and leaves the same record */
    CHECK(start(VK_CHECK_FULL, &s));
    CHECK(!s.recorded);
    CHECK_EQ_INT(the_record(path, sizeof path, now, &now_len), 1);
    CHECK(now_len == rec_len && memcmp(now, rec, rec_len) == 0);

    /* a start ignores a damaged record, runs the check and rewrites the record whole (one
     * start: every check takes seconds on lavapipe; the load's refusal of every other
     * damage, a cut, a longer file and another key's record, is tested below without one) */
    memcpy(now, rec, rec_len);
    now[rec_len - 1] ^= 1;
    put_file(path, now, rec_len);
    CHECK(start(VK_CHECK_RECORDED, &s));
    CHECK(!s.recorded);
    CHECK_STR(s.numerics, s0.numerics);
    CHECK_EQ_INT(the_record(path, sizeof path, now, &now_len), 1);
    CHECK(now_len == rec_len && memcmp(now, rec, rec_len) == 0);

    /* the same on a record of the test's own plan, every byte: a byte changed anywhere
     * (the MAC, the header, the verdict, the text), a record cut anywhere or made longer
     * is never a hit */
    struct kn_err why = {0};
    struct vkr_info in;
    CHECK(vkr_describe(0, &in, &why) == KN_OK);
    struct vk_verdict_plan a, b, c;
    bool eq;
    char ops[VK_VERDICT_OPS_LEN];
    CHECK(vk_verdict_plan(&in, kn_build_id(), "findings", &a, &why));
    vk_verdict_store(&a, true, "the test's verdict");
    CHECK(vk_verdict_load(&a, &eq, ops, &why) == VK_VERDICT_HIT && eq);
    CHECK_STR(ops, "the test's verdict");
    unsigned char good[4096], bad[4096];
    size_t good_len = 0;
    FILE *f = fopen(a.path, "rb");
    CHECK(f != NULL);
    if (f) {
        good_len = fread(good, 1, sizeof good, f);
        fclose(f);
    }
    CHECK_EQ_INT(good_len, rec_len);
    for (size_t off = 0; off < good_len; off++) {
        memcpy(bad, good, good_len);
        bad[off] ^= (unsigned char)(1u << (off % 8));
        put_file(a.path, bad, good_len);
        CHECKF(vk_verdict_load(&a, &eq, ops, &why) == VK_VERDICT_BAD,
               "a record with byte %zu changed is used", off);
    }
    for (size_t cut = 0; cut < good_len; cut += 7) {
        put_file(a.path, good, cut);
        CHECKF(vk_verdict_load(&a, &eq, ops, &why) == VK_VERDICT_BAD,
               "a record cut to %zu bytes is used", cut);
    }
    memcpy(bad, good, good_len);
    memset(bad + good_len, 0, 8);
    put_file(a.path, bad, good_len + 8);
    CHECK(vk_verdict_load(&a, &eq, ops, &why) == VK_VERDICT_BAD);
    put_file(a.path, good, good_len);
    CHECK(vk_verdict_load(&a, &eq, ops, &why) == VK_VERDICT_HIT); /* the loop can fail */

    /* another build, device, driver or probe result: another key and file; a record made
     * for one, put in another's place, is not used */
    struct vkr_info other = in;
    other.device_uuid[15] ^= 1;
    CHECK(vk_verdict_plan(&other, kn_build_id(), "findings", &b, &why) && strcmp(a.path, b.path) != 0);
    other = in;
    other.driver_uuid[0] ^= 1;
    CHECK(vk_verdict_plan(&other, kn_build_id(), "findings", &b, &why) && strcmp(a.path, b.path) != 0);
    other = in;
    other.driver_version++;
    CHECK(vk_verdict_plan(&other, kn_build_id(), "findings", &b, &why) && strcmp(a.path, b.path) != 0);
    other = in;
    other.name[0] ^= 1;
    CHECK(vk_verdict_plan(&other, kn_build_id(), "findings", &b, &why) && strcmp(a.path, b.path) != 0);
    CHECK(vk_verdict_plan(&in, kn_build_id(), "findings.", &b, &why) && strcmp(a.path, b.path) != 0);
    CHECK(!vk_verdict_plan(&in, "unknown", "findings", &c, &why)); /* no build id: no cache */
    CHECK(vk_verdict_plan(&in, "0123456789abcdef", "findings", &b, &why) && strcmp(a.path, b.path) != 0);
    /* b (another build) records the opposite verdict; moved into a's place, it is not a's */
    vk_verdict_store(&b, false, "a verdict of another build");
    CHECK(vk_verdict_load(&b, &eq, ops, &why) == VK_VERDICT_HIT && !eq);
    CHECK(rename(b.path, a.path) == 0);
    CHECK(vk_verdict_load(&a, &eq, ops, &why) == VK_VERDICT_BAD);
    CHECK(unlink(a.path) == 0);
    CHECK(vk_verdict_load(&a, &eq, ops, &why) == VK_VERDICT_MISS);
    /* off: no plan, so no record is read or written (vk_selftest stores and loads only
     * through a plan) */
    CHECK(unlink(path) == 0);
    setenv(VK_VERDICT_ENV, "off", 1);
    CHECK(!vk_verdict_plan(&in, kn_build_id(), "findings", &b, &why));

    /* eviction: a write keeps the 32 most recently used records (the one written among
     * them), removes temporary files of dead writers, leaves other files alone */
    setenv(VK_VERDICT_ENV, dir, 1);
    char stale[4300], other_file[4300];
    snprintf(stale, sizeof stale, "%s/x.kvd.tmp.12345", dir);
    snprintf(other_file, sizeof other_file, "%s/notes.txt", dir);
    put_file(stale, rec, 10);
    put_file(other_file, rec, 10);
    struct timespec old_times[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    CHECK(utimensat(AT_FDCWD, stale, old_times, 0) == 0);
    for (int i = 0; i < 40; i++) {
        char fnd[32];
        snprintf(fnd, sizeof fnd, "findings %d", i);
        CHECK(vk_verdict_plan(&in, kn_build_id(), fnd, &b, &why));
        vk_verdict_store(&b, true, fnd);
        CHECK(vk_verdict_load(&b, &eq, ops, &why) == VK_VERDICT_HIT);
    }
    int kept = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char f2[4300];
        snprintf(f2, sizeof f2, "%s/%s", dir, e->d_name);
        kept += strstr(e->d_name, ".kvd") != NULL;
        if (strcmp(f2, other_file) != 0)
            CHECK(unlink(f2) == 0);
    }
    if (d)
        closedir(d);
    CHECK_EQ_INT(kept, 32); /* the stale temporary file is gone too */
    CHECK(access(other_file, F_OK) == 0);
    CHECK(unlink(other_file) == 0);
    CHECK(rmdir(dir) == 0);
    CHECK_DONE();
}
