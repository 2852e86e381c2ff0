/* base.h: status codes, error messages, checked size arithmetic, file mapping,
 * logging. Every other module builds on these; nothing here depends on them. */
#ifndef KN_BASE_H
#define KN_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define KN_VERSION "0.1.0"
#define KN_NUMERICS "canonical-1"

#define KN_MUST_USE __attribute__((warn_unused_result))
#define KN_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Runtime failures return a status; programming bugs hit assert(). Append only. */
enum kn_status {
    KN_OK = 0,
    KN_E_IO,          /* a file could not be opened, read, written or mapped */
    KN_E_FORMAT,      /* the input is malformed (file, JSON, request) */
    KN_E_UNSUPPORTED, /* the input is valid but this build cannot handle it */
    KN_E_NOMEM,       /* an allocation failed */
    KN_E_ARG,         /* a bad argument or setting from the user */
    KN_E_LIMIT,       /* the input exceeds a configured limit */
    KN_E_MISMATCH,    /* two things that must agree do not (hash, model, signature) */
    KN_E_INTERNAL,    /* an invariant was broken: a bug */
    KN_E_CANCELLED,   /* the caller asked to stop */
};

const char *kn_status_str(enum kn_status s);

/* An error: the status and a message that says what was wrong and what to do. */
struct kn_err {
    enum kn_status status;
    char msg[1024];
};

/* Records status and a formatted message in err (which may be NULL); returns status. */
enum kn_status kn_fail(struct kn_err *err, enum kn_status status, const char *fmt, ...)
    KN_PRINTF(3, 4);
enum kn_status kn_vfail(struct kn_err *err, enum kn_status status, const char *fmt, va_list ap);
/* Prefixes err->msg with "prefix: " (e.g. the file name). */
void kn_err_prefix(struct kn_err *err, const char *prefix);

/* Checked size arithmetic: return false on overflow, *out untouched. */
static inline KN_MUST_USE bool kn_mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline KN_MUST_USE bool kn_add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Allocation that reports failure as KN_E_NOMEM through err. */
void *kn_malloc(size_t size, struct kn_err *err);
void *kn_calloc(size_t n, size_t size, struct kn_err *err);
/* Aligned to 64 bytes, freed with free(). */
void *kn_aligned_alloc(size_t size, struct kn_err *err);
char *kn_strdup(const char *s, struct kn_err *err);

/* A growable byte buffer, NUL-terminated once it holds anything; free p when done. */
struct kn_buf {
    char *p;
    size_t n, cap;
};
/* Appends n bytes of s; false when out of memory (the buffer is then unchanged). */
KN_MUST_USE bool kn_buf_add(struct kn_buf *b, const char *s, size_t n);

/* Opens path for reading, refusing anything but a regular file: the open does not block
 * (a FIFO without a writer would block it forever), fstat checks the type, then the
 * descriptor is made blocking again. Returns the descriptor, or -1 with err set ("X: not
 * a regular file (a FIFO)"). */
int kn_open_regular(const char *path, struct kn_err *err);

/* A read-only memory map of a whole regular file (opened by kn_open_regular). */
struct kn_map {
    const uint8_t *data;
    size_t size;
    int fd;
};
KN_MUST_USE enum kn_status kn_map_open(struct kn_map *map, const char *path, struct kn_err *err);
void kn_map_close(struct kn_map *map);

/* Reads a whole regular file (kn_open_regular), or standard input for "-", into a
 * NUL-terminated heap buffer; more than max_size bytes is refused with KN_E_LIMIT before
 * more is read. */
KN_MUST_USE enum kn_status kn_read_file(const char *path, size_t max_size, char **out,
                                        size_t *out_size, struct kn_err *err);
/* Creates a new, empty file <folder>/<prefix>XXXXXX (mkstemp) in the temporary folder:
 * $TMPDIR when set and not empty, else /tmp. Writes its name to path (cap bytes) and
 * returns its descriptor (read-write), or -1 with err naming the folder and the reason;
 * the caller unlinks it. Every temporary file Kinetic makes goes through here. */
int kn_temp_file(const char *prefix, char *path, size_t cap, struct kn_err *err);
/* Writes data to path atomically: a temporary file in the same folder, then rename. */
KN_MUST_USE enum kn_status kn_write_file_atomic(const char *path, const void *data, size_t size,
                                                struct kn_err *err);
/* One piece of a file written by kn_write_parts_atomic. */
struct kn_part {
    const void *data;
    size_t size;
};
/* Writes the n parts one after another to path atomically (a temporary file
 * <path>.tmp.<pid> in the same folder, then rename: readers see the old file or the whole
 * new one). sync: fsync before the rename (a file whose contents are checked on reading,
 * such as a MAC'd cache, can skip it). On failure the temporary file is removed. */
KN_MUST_USE enum kn_status kn_write_parts_atomic(const char *path, const struct kn_part *parts,
                                                 size_t n, bool sync, struct kn_err *err);
/* Kinetic's cache folder into out: $XDG_CACHE_HOME/kinetic, else $HOME/.cache/kinetic (a
 * relative XDG_CACHE_HOME is ignored, as the XDG spec says). KN_E_ARG when neither gives
 * an absolute folder. The model-hash cache and the repack cache live under it. */
KN_MUST_USE enum kn_status kn_cache_dir(char *out, size_t size, struct kn_err *err);
/* Creates every missing folder on the way to the file at path (mode 0700); false with
 * errno set when one cannot be made. */
KN_MUST_USE bool kn_make_parent_dirs(const char *path);

enum kn_log_level { KN_LOG_DEBUG, KN_LOG_INFO, KN_LOG_WARN, KN_LOG_ERROR };
void kn_log_set_level(enum kn_log_level level);
void kn_log(enum kn_log_level level, const char *fmt, ...) KN_PRINTF(2, 3);
/* How log lines are written (serve --log-format): text "kinetic: LEVEL: message", or one
 * JSON object a line: {"time": ISO 8601 UTC, "level", "msg", then an event's fields}. */
enum kn_log_format { KN_LOG_TEXT, KN_LOG_JSON };
void kn_log_set_format(enum kn_log_format format);
struct json_value;
/* One log line: msg (text format: the whole line after the level), and in the JSON format
 * also the members of fields (an object, or NULL), borrowed. */
void kn_log_event(enum kn_log_level level, const char *msg, const struct json_value *fields);

/* Monotonic time in seconds. */
double kn_now(void);

/* The median of n >= 1 values (the mean of the middle two when n is even); v is
 * sorted in place. For benchmark samples. */
double kn_median(double *v, int n);

#endif
