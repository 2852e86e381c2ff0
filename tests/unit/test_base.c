/* test_base.c: status strings, checked arithmetic, file helpers, f16/bf16 conversion. */
#include "check.h"
#include "base/base.h"
#include "quant/quant.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_sizes(void)
{
    size_t r;
    CHECK(kn_mul_size(3, 5, &r) && r == 15);
    CHECK(!kn_mul_size(SIZE_MAX / 2 + 1, 2, &r));
    CHECK(!kn_add_size(SIZE_MAX, 1, &r));
    CHECK_STR(kn_status_str(KN_E_FORMAT), "malformed input");
    struct kn_err err;
    kn_fail(&err, KN_E_IO, "cannot open: %s", "gone");
    kn_err_prefix(&err, "model.gguf");
    CHECK_STR(err.msg, "model.gguf: cannot open: gone");
    memset(err.msg, 'x', sizeof err.msg - 1);
    err.msg[sizeof err.msg - 1] = 0;
    kn_err_prefix(&err, "p");
    CHECK(strlen(err.msg) == sizeof err.msg - 1 && strncmp(err.msg, "p: xx", 5) == 0);
}

static void test_files(void)
{
    struct kn_err err = {0};
    char path[] = "/tmp/kn_test_base_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(kn_write_file_atomic(path, "hello", 5, &err) == KN_OK);
    char *buf;
    size_t n;
    CHECK(kn_read_file(path, 100, &buf, &n, &err) == KN_OK);
    CHECK(n == 5 && strcmp(buf, "hello") == 0);
    free(buf);
    CHECK(kn_read_file(path, 3, &buf, &n, &err) == KN_E_LIMIT);
    struct kn_map map;
    CHECK(kn_map_open(&map, path, &err) == KN_OK);
    CHECK(map.size == 5 && memcmp(map.data, "hello", 5) == 0);
    kn_map_close(&map);
    unlink(path);
    CHECK(kn_map_open(&map, path, &err) == KN_E_IO);
    CHECK(strstr(err.msg, path) != NULL);
}

/* kn_write_parts_atomic: more parts than one gather write takes (1,024), empty ones among
 * them, and one larger than 2 MiB, come back byte for byte in order; a folder that does
 * not exist is an error naming the file. */
static void test_parts(void)
{
    enum { NP = 2600 };
    static struct kn_part parts[NP];
    const size_t big = ((size_t)5 << 20) + 3;
    uint8_t *data = malloc(big + NP * 61);
    size_t total = 0;
    for (size_t i = 0; i < big + NP * 61; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    for (int i = 0; i < NP; i++) {
        size_t sz = i == 1500 ? big : (size_t)(i * 7 % 61); /* every 61st is empty */
        parts[i] = (struct kn_part){data + total, sz};
        total += sz;
    }
    struct kn_err err = {0};
    char path[] = "/tmp/kn_test_parts_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(kn_write_parts_atomic(path, parts, NP, false, &err) == KN_OK);
    char *buf;
    size_t n;
    CHECK(kn_read_file(path, total + 1, &buf, &n, &err) == KN_OK);
    CHECK(n == total && memcmp(buf, data, total) == 0);
    free(buf);
    CHECK(kn_write_parts_atomic(path, parts, 0, true, &err) == KN_OK);
    CHECK(kn_read_file(path, 10, &buf, &n, &err) == KN_OK && n == 0);
    free(buf);
    /* A write that stops part way (the file size limit: the first gather write is cut
     * short inside a part, the next one fails) is an error, and the old file stays. */
    CHECK(kn_write_file_atomic(path, "old", 3, &err) == KN_OK);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {(rlim_t)1 << 20, (rlim_t)1 << 20};
        setrlimit(RLIMIT_FSIZE, &lim);
        enum kn_status st = kn_write_parts_atomic(path, parts, NP, false, &err);
        _exit(st == KN_E_IO && strstr(err.msg, "too large") ? 0 : 1);
    }
    int wst = 0;
    CHECK(pid > 0 && waitpid(pid, &wst, 0) == pid && WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    CHECK(kn_read_file(path, 10, &buf, &n, &err) == KN_OK && n == 3 && memcmp(buf, "old", 3) == 0);
    free(buf);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)pid);
    CHECK(access(tmp, F_OK) != 0); /* the partial temporary file was removed */
    unlink(path);
    CHECK(kn_write_parts_atomic("/tmp/kn-no-such-folder/f", parts, NP, false, &err) == KN_E_IO);
    CHECK(strstr(err.msg, "/tmp/kn-no-such-folder/f") != NULL);
    free(data);
}

/* Only regular files open, and the open never blocks: a FIFO without a writer would block
 * open(2) forever (the test would hang, not fail). Standard input is "-". */
static void test_regular_only(void)
{
    struct kn_err err = {0};
    char dir[] = "/tmp/kn_test_fifo_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char fifo[64];
    snprintf(fifo, sizeof fifo, "%s/f", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    struct kn_map map;
    CHECK(kn_map_open(&map, fifo, &err) == KN_E_IO);
    CHECK(strstr(err.msg, "not a regular file (a FIFO)") != NULL);
    char *buf = NULL;
    size_t n;
    CHECK(kn_read_file(fifo, 100, &buf, &n, &err) == KN_E_IO && !buf);
    CHECK(strstr(err.msg, "(a FIFO)") != NULL);
    CHECK(kn_open_regular(dir, &err) == -1 && strstr(err.msg, "(a directory)") != NULL);
    CHECK(kn_read_file("/dev/zero", 100, &buf, &n, &err) == KN_E_IO);
    CHECK(strstr(err.msg, "(a character device)") != NULL);
    /* A regular file's descriptor comes back blocking. */
    char reg[64];
    snprintf(reg, sizeof reg, "%s/r", dir);
    CHECK(kn_write_file_atomic(reg, "x", 1, &err) == KN_OK);
    int fd = kn_open_regular(reg, &err);
    CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
    close(fd);
    unlink(reg);
    unlink(fifo);
    rmdir(dir);
}

/* Every f16 converts to f32 and back unchanged; f32 -> f16 rounds to nearest even. */
/* Temporary files go to $TMPDIR when it is set and not empty, else /tmp; a folder that
 * cannot take one is named in the error. */
static void test_temp_file(void)
{
    struct kn_err err = {0};
    char dir[] = "/tmp/kn_test_tmpdir_XXXXXX", path[512];
    CHECK(mkdtemp(dir) != NULL);
    const char *old = getenv("TMPDIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("TMPDIR", dir, 1);
    int fd = kn_temp_file("kn-x-", path, sizeof path, &err);
    CHECKF(fd >= 0, "%s", err.msg);
    CHECK(strncmp(path, dir, strlen(dir)) == 0 && strstr(path, "/kn-x-") != NULL);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0);
    close(fd);
    unlink(path);
    char gone[600];
    snprintf(gone, sizeof gone, "%s/missing", dir);
    setenv("TMPDIR", gone, 1);
    CHECK(kn_temp_file("kn-x-", path, sizeof path, &err) == -1);
    CHECK(err.status == KN_E_IO && strstr(err.msg, gone) != NULL && strstr(err.msg, "TMPDIR"));
    char small[8];
    CHECK(kn_temp_file("kn-x-", small, sizeof small, &err) == -1 && err.status == KN_E_LIMIT);
    setenv("TMPDIR", "", 1);
    fd = kn_temp_file("kn-x-", path, sizeof path, &err);
    CHECK(fd >= 0 && strncmp(path, "/tmp/kn-x-", 10) == 0);
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    if (saved)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
    rmdir(dir);
}

static void test_half(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_f16_to_f32((kn_f16)h);
        kn_f16 back = quant_f32_to_f16(f);
        if (isnan(f))
            bad += !(back & 0x200) || (back & 0x7c00) != 0x7c00;
        else
            bad += back != h;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(quant_f16_to_f32(0x3c00) == 1.0f);
    CHECK(quant_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(quant_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(quant_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(quant_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00); /* tie to even */
    CHECK(quant_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3c02);
    CHECK(quant_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);          /* tie to even zero */
    CHECK(quant_f32_to_f16(ldexpf(1.5f, -25)) == 0x0001);
    CHECK(quant_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(quant_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(quant_f32_to_bf16(1.0f + ldexpf(1.0f, -8)) == 0x3f80);
    CHECK(quant_f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)) == 0x3f82);
}

/* kn_median: odd and even counts, any order, ties. */
static void test_median(void)
{
    double one[] = {7};
    CHECK(kn_median(one, 1) == 7);
    double odd[] = {5, 1, 4, 2, 3};
    CHECK(kn_median(odd, 5) == 3);
    CHECK(odd[0] == 1 && odd[4] == 5); /* sorted in place */
    double even[] = {40, 10, 30, 20};
    CHECK(kn_median(even, 4) == 25);
    double ties[] = {2, 9, 2, 2, 9, 9};
    CHECK(kn_median(ties, 6) == 5.5);
}

int main(void)
{
    test_median();
    test_sizes();
    test_files();
    test_parts();
    test_regular_only();
    test_temp_file();
    test_half();
    CHECK_DONE();
}
