/* json.h: a strict JSON reader for untrusted input and a writer with two canonical forms
 * (RFC 8785's JCS, which receipts are signed over, and the compact form version-1 receipts
 * were signed over) and a pretty form for files people read.
 *
 * Reader (RFC 8259, strictly): limits on document size, nesting depth and string length;
 * UTF-8 validated (no overlongs, no encoded surrogates, nothing above U+10FFFF), \u escapes
 * with surrogates properly paired; duplicate object keys rejected; no comments, trailing
 * commas, BOM, NaN or leading zeros. Errors name the byte offset, line and column.
 *
 * Values form a malloc'd tree owned by the root: json_free(root) frees everything.
 * Objects keep their members in insertion (document) order, which is also the order the
 * writer uses (JSON_JCS sorts them). The canonical forms are specified in docs/receipts.md
 * ("Canonical JSON"). */
#ifndef KN_BASE_JSON_H
#define KN_BASE_JSON_H

#include "base.h"

enum json_type {
    JSON_NULL = 0,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
};

struct json_value;

struct json_member {
    char *key; /* NUL-terminated; may also contain NUL bytes (\u0000), see key_len */
    size_t key_len;
    struct json_value *value;
};

struct json_value {
    enum json_type type;
    union {
        bool boolean;
        /* A number keeps the text it was read from (or the canonical text when built) and
         * its value: is_int when the text has no fraction or exponent and fits int64 (then
         * i is exact); d is always the nearest double. */
        struct {
            char *text;
            bool is_int;
            int64_t i;
            double d;
        } number;
        struct {
            char *s; /* NUL-terminated valid UTF-8; may contain NUL bytes, see len */
            size_t len;
        } string;
        struct {
            struct json_value **items;
            size_t len, cap;
        } array;
        struct {
            struct json_member *items;
            size_t len, cap;
        } object;
    } u;
};

/* Reader limits; a zero field takes the default. */
struct json_limits {
    size_t max_bytes;  /* the whole document; default 64 MiB */
    size_t max_depth;  /* arrays and objects nested; default 64 */
    size_t max_string; /* bytes of one decoded string or key; default 16 MiB */
    size_t max_values; /* values in the whole document (each array item, member value and
                        * the root count one); 0: no limit. Bounds the tree's memory,
                        * which is several times the text's. */
};

/* The deepest JSON Kinetic takes as input a receipt records: request bodies (serve's
 * --max-depth at most this), --messages, --json-schema, template kwargs. A receipt nests
 * such input up to RECEIPT_WRAP_DEPTH levels deeper and is read up to
 * JSON_MAX_INPUT_DEPTH + RECEIPT_WRAP_DEPTH (src/receipt/receipt.h), so every receipt
 * Kinetic writes, it reads back. */
#define JSON_MAX_INPUT_DEPTH 60
#define JSON_INPUT_LIMITS ((struct json_limits){.max_depth = JSON_MAX_INPUT_DEPTH})

/* Parses len bytes of text (no NUL needed) into a tree; limits may be NULL. On failure
 * *out is NULL and err says what and where ("line 3, column 7 (byte 41)"). */
KN_MUST_USE enum kn_status json_parse(const char *text, size_t len,
                                      const struct json_limits *limits,
                                      struct json_value **out, struct kn_err *err);
/* Reads and parses a file, with the same limits (max_bytes also bounds the read). */
KN_MUST_USE enum kn_status json_parse_file(const char *path, const struct json_limits *limits,
                                           struct json_value **out, struct kn_err *err);
void json_free(struct json_value *v);

/* ---- access: all accept NULL and wrong types, returning NULL / 0 / false ---- */
/* The member named key (NUL-terminated) of an object. */
const struct json_value *json_get(const struct json_value *obj, const char *key);
/* Items of an array or members of an object. */
size_t json_len(const struct json_value *v);
const struct json_value *json_at(const struct json_value *arr, size_t i);
/* The string, or NULL if v is not a string. */
const char *json_str(const struct json_value *v);
/* True (and *out set) if v is a number that is an exact int64. */
bool json_int(const struct json_value *v, int64_t *out);
/* True (and *out set) if v is a number. */
bool json_double(const struct json_value *v, double *out);
bool json_is(const struct json_value *v, enum json_type t);

/* ---- building: constructors return NULL when out of memory ---- */
struct json_value *json_new_null(void);
struct json_value *json_new_bool(bool b);
struct json_value *json_new_int(int64_t i);
/* A double; the writer refuses NaN and infinities. */
struct json_value *json_new_double(double d);
/* A 32-bit float setting, as the double with the fewest decimal digits that reads back as
 * the same float: 0.8f is written 0.8, not 0.800000011920929. */
struct json_value *json_new_float(float f);
/* A copy of s; the writer refuses invalid UTF-8 (see json_utf8_valid). */
struct json_value *json_new_string(const char *s);
struct json_value *json_new_stringn(const char *s, size_t len);
struct json_value *json_new_array(void);
struct json_value *json_new_object(void);
/* Appends v (taking ownership; v == NULL reports out of memory). On failure v is freed. */
KN_MUST_USE enum kn_status json_array_push(struct json_value *arr, struct json_value *v,
                                           struct kn_err *err);
/* Appends member key = v (taking ownership). A key already present is an error (KN_E_ARG):
 * canonical objects have unique keys. On failure v is freed. */
KN_MUST_USE enum kn_status json_object_set(struct json_value *obj, const char *key,
                                           struct json_value *v, struct kn_err *err);
/* Removes member key and returns its value (the caller owns it), or NULL if absent. The
 * other members keep their order. */
struct json_value *json_object_take(struct json_value *obj, const char *key);
/* A deep copy, or NULL when out of memory. */
struct json_value *json_clone(const struct json_value *v);

/* The largest magnitude up to which every integer is a double exactly (2^53): JCS, whose
 * numbers are doubles, signs an integer beyond it as its nearest double. */
#define JSON_EXACT_INT_MAX 9007199254740992LL

/* ---- writing ---- */
enum json_style {
    JSON_COMPACT, /* no whitespace at all, members in insertion order, doubles as Python's
                   * repr: version-1 receipts are signed over it (docs/receipts.md) */
    JSON_PRETTY,  /* 2-space indent, scalar-only arrays on one line, trailing newline */
    JSON_JCS,     /* RFC 8785, the JSON Canonicalization Scheme: no whitespace, members
                   * sorted by their keys' UTF-16 code units, every number as ECMAScript
                   * writes its double (0.0 and -0 as 0, 1e+21, 1e-7; an integer beyond
                   * 2^53 as its nearest double). What receipts are signed over since
                   * version 2, so any JCS library rebuilds the bytes */
};
/* Writes v into a new NUL-terminated heap buffer (*out, length *out_len, may be NULL). */
KN_MUST_USE enum kn_status json_write(const struct json_value *v, enum json_style style,
                                      char **out, size_t *out_len, struct kn_err *err);

/* ---- UTF-8 helpers ---- */
bool json_utf8_valid(const char *s, size_t len);
/* A copy of s with every invalid UTF-8 sequence replaced by U+FFFD (for text that may end
 * inside a character, such as decoded tokens); NULL when out of memory. */
char *json_utf8_sanitize(const char *s, size_t len, size_t *out_len);

#endif
