/* base.c: status strings, error formatting, allocation, file helpers, logging. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "base.h"
#include "json.h"
#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

const char *kn_status_str(enum kn_status s)
{
    switch (s) {
    case KN_OK: return "ok";
    case KN_E_IO: return "I/O error";
    case KN_E_FORMAT: return "malformed input";
    case KN_E_UNSUPPORTED: return "unsupported";
    case KN_E_NOMEM: return "out of memory";
    case KN_E_ARG: return "bad argument";
    case KN_E_LIMIT: return "limit exceeded";
    case KN_E_MISMATCH: return "mismatch";
    case KN_E_INTERNAL: return "internal error";
    case KN_E_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

enum kn_status kn_vfail(struct kn_err *err, enum kn_status status, const char *fmt, va_list ap)
{
    if (err) {
        err->status = status;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return status;
}

enum kn_status kn_fail(struct kn_err *err, enum kn_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kn_vfail(err, status, fmt, ap);
    va_end(ap);
    return status;
}

void kn_err_prefix(struct kn_err *err, const char *prefix)
{
    if (!err || !prefix)
        return;
    size_t cap = sizeof err->msg, plen = strlen(prefix), mlen = strlen(err->msg);
    if (plen + 2 >= cap)
        plen = cap - 3;
    if (plen + 2 + mlen >= cap)
        mlen = cap - 1 - plen - 2;
    memmove(err->msg + plen + 2, err->msg, mlen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen] = ':';
    err->msg[plen + 1] = ' ';
    err->msg[plen + 2 + mlen] = 0;
}

void *kn_malloc(size_t size, struct kn_err *err)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        kn_fail(err, KN_E_NOMEM, "out of memory allocating %zu bytes", size);
    return p;
}

void *kn_calloc(size_t n, size_t size, struct kn_err *err)
{
    size_t total;
    if (!kn_mul_size(n, size, &total)) {
        kn_fail(err, KN_E_NOMEM, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        kn_fail(err, KN_E_NOMEM, "out of memory allocating %zu bytes", total);
    return p;
}

void *kn_aligned_alloc(size_t size, struct kn_err *err)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 64) != 0) {
        kn_fail(err, KN_E_NOMEM, "out of memory allocating %zu bytes", size);
        return NULL;
    }
    return p;
}

char *kn_strdup(const char *s, struct kn_err *err)
{
    size_t n = strlen(s) + 1;
    char *p = kn_malloc(n, err);
    if (p)
        memcpy(p, s, n);
    return p;
}

bool kn_buf_add(struct kn_buf *b, const char *s, size_t n)
{
    size_t need;
    if (!kn_add_size(b->n, n, &need) || !kn_add_size(need, 1, &need))
        return false;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            if (!kn_mul_size(cap, 2, &cap))
                return false;
        char *t = realloc(b->p, cap);
        if (!t)
            return false;
        b->p = t;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

int kn_open_regular(const char *path, struct kn_err *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        kn_fail(err, KN_E_IO, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        kn_fail(err, KN_E_IO, "%s: cannot stat: %s", path, strerror(e));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        kn_fail(err, KN_E_IO, "%s: not a regular file (%s)", path, file_kind(st.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        kn_fail(err, KN_E_IO, "%s: cannot make it blocking: %s", path, strerror(e));
        return -1;
    }
    return fd;
}

enum kn_status kn_map_open(struct kn_map *map, const char *path, struct kn_err *err)
{
    memset(map, 0, sizeof *map);
    map->fd = -1;
    int fd = kn_open_regular(path, err);
    if (fd < 0)
        return KN_E_IO;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kn_fail(err, KN_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    map->fd = fd;
    map->size = (size_t)st.st_size;
    if (map->size == 0) {
        map->data = (const uint8_t *)"";
        return KN_OK;
    }
    void *p = mmap(NULL, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        map->fd = -1;
        return kn_fail(err, KN_E_IO, "%s: cannot map %zu bytes: %s", path, map->size, strerror(e));
    }
    map->data = p;
    return KN_OK;
}

void kn_map_close(struct kn_map *map)
{
    if (map->data && map->size)
        munmap((void *)map->data, map->size);
    if (map->fd >= 0)
        close(map->fd);
    map->data = NULL;
    map->size = 0;
    map->fd = -1;
}

enum kn_status kn_read_file(const char *path, size_t max_size, char **out, size_t *out_size,
                            struct kn_err *err)
{
    *out = NULL;
    FILE *f = stdin;
    if (strcmp(path, "-") != 0) {
        int fd = kn_open_regular(path, err);
        if (fd < 0)
            return KN_E_IO;
        if (!(f = fdopen(fd, "rb"))) {
            int e = errno;
            close(fd);
            return kn_fail(err, KN_E_IO, "%s: cannot open: %s", path, strerror(e));
        }
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    enum kn_status st = KN_OK;
    if (!buf) {
        st = kn_fail(err, KN_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > max_size + 1) {
                st = kn_fail(err, KN_E_LIMIT, "%s: larger than the limit of %zu bytes", path,
                             max_size);
                goto done;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                st = kn_fail(err, KN_E_NOMEM, "%s: out of memory", path);
                goto done;
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - 1 - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f))
                st = kn_fail(err, KN_E_IO, "%s: read error: %s", path, strerror(errno));
            break;
        }
        if (len > max_size) {
            st = kn_fail(err, KN_E_LIMIT, "%s: larger than the limit of %zu bytes", path, max_size);
            break;
        }
    }
done:
    if (f != stdin)
        fclose(f);
    if (st != KN_OK) {
        free(buf);
        return st;
    }
    buf[len] = 0;
    *out = buf;
    if (out_size)
        *out_size = len;
    return KN_OK;
}

enum kn_status kn_write_file_atomic(const char *path, const void *data, size_t size,
                                    struct kn_err *err)
{
    struct kn_part part = {data, size};
    return kn_write_parts_atomic(path, &part, 1, true, err);
}

enum kn_status kn_write_parts_atomic(const char *path, const struct kn_part *parts, size_t n,
                                     bool sync, struct kn_err *err)
{
    size_t len = strlen(path) + 32;
    char *tmp = kn_malloc(len, err);
    if (!tmp)
        return KN_E_NOMEM;
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        enum kn_status st = kn_fail(err, KN_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    /* All the parts in one gather write (up to 1,024 at a time), not one write per part: the
     * page cache then sees one sequential stream from offset 0 and fills it with the
     * largest folios it can (2 MiB ones on ext4 and XFS), which a later mapping of the
     * file gets as huge pages. A write per part starts small folios at every part's end,
     * and with ~150 weights (and their padding) 40-60% of a repack cache file's
     * bytes were in them (docs/performance.md "Round 6"). */
    struct iovec iov[IOV_MAX < 1024 ? IOV_MAX : 1024];
    size_t next = 0, off = 0; /* the first part not yet written, and how much of it is */
    while (next < n) {
        int k = 0;
        for (size_t i = next; i < n && k < (int)(sizeof iov / sizeof *iov); i++) {
            const size_t skip = i == next ? off : 0;
            if (parts[i].size == skip)
                continue;
            iov[k].iov_base = (void *)((const uint8_t *)parts[i].data + skip);
            iov[k++].iov_len = parts[i].size - skip;
        }
        if (k == 0)
            break;
        ssize_t w = writev(fd, iov, k);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            int e = w < 0 ? errno : ENOSPC; /* nothing written: no room */
            close(fd);
            unlink(tmp);
            free(tmp);
            return kn_fail(err, KN_E_IO, "%s: write failed: %s", path, strerror(e));
        }
        /* advance over what was written, part by part */
        size_t done = (size_t)w;
        while (next < n && done >= parts[next].size - off) {
            done -= parts[next].size - off;
            next++;
            off = 0;
        }
        off += done;
    }
    if ((sync && fsync(fd) != 0) || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return kn_fail(err, KN_E_IO, "%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return kn_fail(err, KN_E_IO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    free(tmp);
    return KN_OK;
}

enum kn_status kn_cache_dir(char *out, size_t size, struct kn_err *err)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    int n;
    /* The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored. */
    if (xdg && xdg[0] == '/') {
        n = snprintf(out, size, "%s/kinetic", xdg);
    } else {
        const char *home = getenv("HOME");
        if (!home || home[0] != '/')
            return kn_fail(err, KN_E_ARG, "no cache folder: set XDG_CACHE_HOME or HOME to an "
                           "absolute path");
        n = snprintf(out, size, "%s/.cache/kinetic", home);
    }
    if (n < 0 || (size_t)n >= size)
        return kn_fail(err, KN_E_ARG, "the cache path is longer than %zu bytes", size - 1);
    return KN_OK;
}

bool kn_make_parent_dirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return false;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return false;
        *p = '/';
    }
    return true;
}

int kn_temp_file(const char *prefix, char *path, size_t cap, struct kn_err *err)
{
    const char *dir = getenv("TMPDIR");
    const char *what = "TMPDIR ";
    if (!dir || !*dir) {
        dir = "/tmp";
        what = "";
    }
    int k = snprintf(path, cap, "%s%s%sXXXXXX", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
                     prefix);
    if (k < 0 || (size_t)k >= cap) {
        kn_fail(err, KN_E_LIMIT, "the temporary folder %s%s has too long a name", what, dir);
        return -1;
    }
    int fd = mkstemp(path);
    if (fd < 0)
        kn_fail(err, KN_E_IO, "cannot create a temporary file in %s%s: %s", what, dir,
                strerror(errno));
    return fd;
}

static enum kn_log_level log_level = KN_LOG_INFO;
static enum kn_log_format log_format = KN_LOG_TEXT;

void kn_log_set_level(enum kn_log_level level)
{
    log_level = level;
}

void kn_log(enum kn_log_level level, const char *fmt, ...)
{
    if (level < log_level)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    kn_log_event(level, buf, NULL);
}

void kn_log_set_format(enum kn_log_format format)
{
    log_format = format;
}

void kn_log_event(enum kn_log_level level, const char *msg, const struct json_value *fields)
{
    if (level < log_level)
        return;
    static const char *const names[] = {"debug", "info", "warning", "error"};
    kn_progress_interrupt(); /* not onto a progress bar's line */
    if (log_format == KN_LOG_TEXT) {
        fprintf(stderr, "kinetic: %s: %s\n", names[level], msg);
        return;
    }
    struct timespec ts;
    struct tm tm;
    char when[40];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + k, sizeof when - k, ".%03ldZ", ts.tv_nsec / 1000000);
    /* msg may hold bytes that are not UTF-8 (a request's path): then those become '?' */
    char clean[2048];
    size_t n = 0;
    bool utf8 = json_utf8_valid(msg, strlen(msg));
    for (const char *c = msg; *c && n + 1 < sizeof clean; c++)
        clean[n++] = !utf8 && (unsigned char)*c >= 0x80 ? '?' : *c;
    clean[n] = 0;
    struct json_value *o = json_new_object();
    bool ok = o && json_object_set(o, "time", json_new_string(when), NULL) == KN_OK &&
              json_object_set(o, "level", json_new_string(names[level]), NULL) == KN_OK &&
              json_object_set(o, "msg", json_new_string(clean), NULL) == KN_OK;
    for (size_t i = 0; ok && fields && i < fields->u.object.len; i++)
        ok = json_object_set(o, fields->u.object.items[i].key,
                             json_clone(fields->u.object.items[i].value), NULL) == KN_OK;
    char *line = NULL;
    if (ok && json_write(o, JSON_COMPACT, &line, NULL, NULL) == KN_OK)
        fprintf(stderr, "%s\n", line);
    else
        fprintf(stderr, "{\"level\":\"error\",\"msg\":\"out of memory writing a log line\"}\n");
    free(line);
    json_free(o);
}

double kn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kn_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
