/* gguf_read.c: the GGUF v2/v3 reader. Every length, count and offset read from the
 * file is checked against the bytes that remain before it is used, and every size
 * product is checked for overflow, so a hostile file can make the reader fail but
 * never read outside the image or allocate more than a small multiple of its size.
 *
 * Layout (little-endian): magic "GGUF", u32 version, i64 tensor count, i64 kv count,
 * the key/values, the tensor infos, padding up to general.alignment, the data. */
#include "gguf.h"
#include "../quant/quant.h"

#include <assert.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys and tensor names longer than these are malformed (the GGUF spec's limits). */
#define GGUF_MAX_KEY_LEN 65535u
#define GGUF_MAX_NAME_LEN 64u
/* Arrays may nest, but a deeper nest than this is almost surely an attack on the
 * stack rather than a model; the limit keeps recursion bounded. */
#define GGUF_MAX_NEST 8
/* The fewest bytes one key/value (8-byte length, 1-byte key, type, 1-byte value) and
 * one tensor info (length, 1-byte name, rank, one dim, type, offset) can take: a
 * count larger than the remaining bytes allow is rejected before any allocation. */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_BYTES 33u

struct sort_ent;

struct gguf_file {
    struct kn_map map;
    bool mapped;
    const uint8_t *base;
    uint64_t size;
    char *name; /* used in every message */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    int64_t n_tensors;
    struct gguf_kv *kvs;
    struct gguf_tensor *tensors;
    struct sort_ent *kv_sorted;     /* keys in strcmp order, for look-ups */
    struct sort_ent *tensor_sorted; /* tensor names in strcmp order */
};

static const char *const vtype_names[GGUF_T_COUNT] = {
    [GGUF_T_U8] = "u8",     [GGUF_T_I8] = "i8",     [GGUF_T_U16] = "u16",
    [GGUF_T_I16] = "i16",   [GGUF_T_U32] = "u32",   [GGUF_T_I32] = "i32",
    [GGUF_T_F32] = "f32",   [GGUF_T_BOOL] = "bool", [GGUF_T_STRING] = "string",
    [GGUF_T_ARRAY] = "array", [GGUF_T_U64] = "u64", [GGUF_T_I64] = "i64",
    [GGUF_T_F64] = "f64",
};

const char *gguf_vtype_name(enum gguf_vtype t)
{
    return (unsigned)t < GGUF_T_COUNT ? vtype_names[t] : "unknown";
}

size_t gguf_vtype_size(enum gguf_vtype t)
{
    switch (t) {
    case GGUF_T_U8: case GGUF_T_I8: case GGUF_T_BOOL: return 1;
    case GGUF_T_U16: case GGUF_T_I16: return 2;
    case GGUF_T_U32: case GGUF_T_I32: case GGUF_T_F32: return 4;
    case GGUF_T_U64: case GGUF_T_I64: case GGUF_T_F64: return 8;
    default: return 0;
    }
}

bool gguf_utf8_valid(const void *s, uint64_t n)
{
    const uint8_t *p = s;
    uint64_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        unsigned len;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false; /* a continuation byte, an overlong lead (C0, C1) or F5..FF */
        }
        if (n - i < len)
            return false;
        for (unsigned k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        /* Reject overlong forms, UTF-16 surrogates and code points past U+10FFFF. */
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

/* ---------------------------------------------------------------- cursor */

struct rd {
    const uint8_t *base;
    uint64_t pos, size;
    const char *name; /* the file, for messages */
    struct kn_err *err;
};

static uint64_t rd_left(const struct rd *r)
{
    return r->size - r->pos;
}

static uint64_t le_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t le_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Fails with a "truncated" message unless n bytes remain; what names the item. */
static enum kn_status rd_need(struct rd *r, uint64_t n, const char *what_fmt, ...)
    KN_PRINTF(3, 4);
static enum kn_status rd_need(struct rd *r, uint64_t n, const char *what_fmt, ...)
{
    if (rd_left(r) >= n)
        return KN_OK;
    char what[400];
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(what, sizeof what, what_fmt, ap);
    va_end(ap);
    return kn_fail(r->err, KN_E_FORMAT,
                   "%s: truncated at byte %" PRIu64 ": %s needs %" PRIu64
                   " bytes but the file has only %" PRIu64 " left (file size %" PRIu64
                   "): incomplete download?",
                   r->name, r->pos, what, n, rd_left(r), r->size);
}

static enum kn_status rd_u32(struct rd *r, uint32_t *v, const char *what)
{
    enum kn_status st = rd_need(r, 4, "%s", what);
    if (st)
        return st;
    *v = le_u32(r->base + r->pos);
    r->pos += 4;
    return KN_OK;
}

static enum kn_status rd_u64(struct rd *r, uint64_t *v, const char *what)
{
    enum kn_status st = rd_need(r, 8, "%s", what);
    if (st)
        return st;
    *v = le_u64(r->base + r->pos);
    r->pos += 8;
    return KN_OK;
}

/* Shortens a name for a message: keys may be 64 KiB long. */
#define SHOWN(len) ((int)((len) > 120 ? 120 : (len)))

/* Reads a key or tensor name: a length, then that many bytes of UTF-8 without NUL.
 * what is "key" or "tensor name"; index numbers it in messages. */
static enum kn_status rd_name(struct rd *r, const char *what, int64_t index, uint64_t max_len,
                              char **out)
{
    uint64_t at = r->pos, len;
    char item[64];
    snprintf(item, sizeof item, "the length of %s #%" PRId64, what, index);
    enum kn_status st = rd_u64(r, &len, item);
    if (st)
        return st;
    if (len == 0)
        return kn_fail(r->err, KN_E_FORMAT, "%s: %s #%" PRId64 " at byte %" PRIu64
                       " is empty; expected 1 to %" PRIu64 " bytes",
                       r->name, what, index, at, max_len);
    if (len > max_len)
        return kn_fail(r->err, KN_E_FORMAT, "%s: %s #%" PRId64 " at byte %" PRIu64
                       " is %" PRIu64 " bytes long; at most %" PRIu64 " are allowed",
                       r->name, what, index, at, len, max_len);
    snprintf(item, sizeof item, "%s #%" PRId64, what, index);
    st = rd_need(r, len, "%s", item);
    if (st)
        return st;
    const uint8_t *p = r->base + r->pos;
    if (memchr(p, 0, len))
        return kn_fail(r->err, KN_E_FORMAT, "%s: %s #%" PRId64 " at byte %" PRIu64
                       " contains a NUL byte; names must be NUL-free UTF-8",
                       r->name, what, index, at);
    if (!gguf_utf8_valid(p, len))
        return kn_fail(r->err, KN_E_FORMAT, "%s: %s #%" PRId64 " at byte %" PRIu64
                       " is not valid UTF-8; names must be UTF-8 text",
                       r->name, what, index, at);
    char *s = kn_malloc(len + 1, r->err);
    if (!s)
        return KN_E_NOMEM;
    memcpy(s, p, len);
    s[len] = 0;
    r->pos += len;
    *out = s;
    return KN_OK;
}

/* ---------------------------------------------------------------- values */

static void value_free(struct gguf_value *v)
{
    if (v->type != GGUF_T_ARRAY)
        return;
    free(v->v.arr.strs);
    if (v->v.arr.items) {
        for (uint64_t i = 0; i < v->v.arr.n; i++)
            value_free(&v->v.arr.items[i]);
        free(v->v.arr.items);
    }
    v->v.arr.strs = NULL;
    v->v.arr.items = NULL;
}

/* Reads the scalar at p (of a type whose size has been checked) into v. */
static void scalar_decode(enum gguf_vtype t, const uint8_t *p, struct gguf_value *v)
{
    v->type = t;
    switch (t) {
    case GGUF_T_U8: v->v.u64 = p[0]; break;
    case GGUF_T_I8: v->v.i64 = (int8_t)p[0]; break;
    case GGUF_T_U16: v->v.u64 = (uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_T_I16: v->v.i64 = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_T_U32: v->v.u64 = le_u32(p); break;
    case GGUF_T_I32: v->v.i64 = (int32_t)le_u32(p); break;
    case GGUF_T_U64: v->v.u64 = le_u64(p); break;
    case GGUF_T_I64: v->v.i64 = (int64_t)le_u64(p); break;
    case GGUF_T_F32: {
        uint32_t u = le_u32(p);
        float f;
        memcpy(&f, &u, 4);
        v->v.f64 = f;
        break;
    }
    case GGUF_T_F64: {
        uint64_t u = le_u64(p);
        memcpy(&v->v.f64, &u, 8);
        break;
    }
    case GGUF_T_BOOL: v->v.b = p[0] != 0; break;
    default: break;
    }
}

static enum kn_status check_vtype(struct rd *r, uint64_t at, uint32_t t, const char *key,
                                  const char *role)
{
    if (t < GGUF_T_COUNT)
        return KN_OK;
    return kn_fail(r->err, KN_E_FORMAT, "%s: key '%.*s': unknown %s type %" PRIu32 " at byte %" PRIu64
                   "; GGUF value types are 0 to %d",
                   r->name, SHOWN(strlen(key)), key, role, t, at, GGUF_T_COUNT - 1);
}

static enum kn_status rd_string(struct rd *r, const char *key, struct gguf_str *out)
{
    uint64_t at = r->pos, len;
    char what[200];
    snprintf(what, sizeof what, "the string length of key '%.*s'", SHOWN(strlen(key)), key);
    enum kn_status st = rd_u64(r, &len, what);
    if (st)
        return st;
    if (len > rd_left(r))
        return kn_fail(r->err, KN_E_FORMAT, "%s: key '%.*s': string at byte %" PRIu64 " claims %" PRIu64
                       " bytes but the file has only %" PRIu64 " left: truncated or corrupt",
                       r->name, SHOWN(strlen(key)), key, at, len, rd_left(r));
    out->data = (const char *)r->base + r->pos;
    out->len = len;
    r->pos += len;
    return KN_OK;
}

static enum kn_status rd_value(struct rd *r, const char *key, enum gguf_vtype t, int depth,
                               struct gguf_value *v);

/* Reads an array's element type, count and elements into v. */
static enum kn_status rd_array(struct rd *r, const char *key, int depth, struct gguf_value *v)
{
    char what[200];
    int kl = SHOWN(strlen(key));
    uint64_t at = r->pos;
    v->type = GGUF_T_ARRAY;
    memset(&v->v.arr, 0, sizeof v->v.arr);
    if (depth >= GGUF_MAX_NEST)
        return kn_fail(r->err, KN_E_UNSUPPORTED, "%s: key '%.*s': arrays nested more than %d deep at byte %" PRIu64
                       " are not supported", r->name, kl, key, GGUF_MAX_NEST, at);
    uint32_t et;
    snprintf(what, sizeof what, "the array element type of key '%.*s'", kl, key);
    enum kn_status st = rd_u32(r, &et, what);
    if (st)
        return st;
    if ((st = check_vtype(r, at, et, key, "array element")))
        return st;
    uint64_t n;
    uint64_t at_n = r->pos;
    snprintf(what, sizeof what, "the array length of key '%.*s'", kl, key);
    if ((st = rd_u64(r, &n, what)))
        return st;
    v->v.arr.type = (enum gguf_vtype)et;
    size_t esz = gguf_vtype_size((enum gguf_vtype)et);
    /* Each element takes at least min bytes in the file: this bounds n, and with it
     * every allocation below, by the bytes that remain. */
    uint64_t min = esz ? esz : et == GGUF_T_STRING ? 8 : 12;
    if (n > rd_left(r) / min)
        return kn_fail(r->err, KN_E_FORMAT, "%s: key '%.*s': array at byte %" PRIu64 " claims %" PRIu64
                       " elements of type %s (at least %" PRIu64 " bytes each) but the file has only %" PRIu64
                       " bytes left: truncated or corrupt",
                       r->name, kl, key, at_n, n, gguf_vtype_name((enum gguf_vtype)et), min, rd_left(r));
    v->v.arr.n = n;
    if (esz) {
        const uint8_t *p = r->base + r->pos;
        if (et == GGUF_T_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (p[i] > 1)
                    return kn_fail(r->err, KN_E_FORMAT, "%s: key '%.*s': bool element %" PRIu64 " at byte %" PRIu64
                                   " is %u; a GGUF bool must be 0 or 1",
                                   r->name, kl, key, i, r->pos + i, p[i]);
        v->v.arr.data = p;
        r->pos += n * esz;
        return KN_OK;
    }
    if (et == GGUF_T_STRING) {
        v->v.arr.strs = kn_calloc(n, sizeof *v->v.arr.strs, r->err);
        if (!v->v.arr.strs)
            return KN_E_NOMEM;
        for (uint64_t i = 0; i < n; i++)
            if ((st = rd_string(r, key, &v->v.arr.strs[i])))
                return st;
        return KN_OK;
    }
    /* Nested arrays: each element is itself (element type, count, elements). The
     * items are allocated zeroed so a failure part-way frees cleanly. */
    v->v.arr.items = kn_calloc(n, sizeof *v->v.arr.items, r->err);
    if (!v->v.arr.items)
        return KN_E_NOMEM;
    for (uint64_t i = 0; i < n; i++)
        v->v.arr.items[i].type = GGUF_T_ARRAY;
    for (uint64_t i = 0; i < n; i++)
        if ((st = rd_value(r, key, GGUF_T_ARRAY, depth + 1, &v->v.arr.items[i])))
            return st;
    return KN_OK;
}

static enum kn_status rd_value(struct rd *r, const char *key, enum gguf_vtype t, int depth,
                               struct gguf_value *v)
{
    if (t == GGUF_T_ARRAY)
        return rd_array(r, key, depth, v);
    if (t == GGUF_T_STRING) {
        v->type = t;
        return rd_string(r, key, &v->v.str);
    }
    size_t sz = gguf_vtype_size(t);
    char what[200];
    snprintf(what, sizeof what, "the %s value of key '%.*s'", gguf_vtype_name(t),
             SHOWN(strlen(key)), key);
    enum kn_status st = rd_need(r, sz, "%s", what);
    if (st)
        return st;
    const uint8_t *p = r->base + r->pos;
    if (t == GGUF_T_BOOL && p[0] > 1)
        return kn_fail(r->err, KN_E_FORMAT, "%s: key '%.*s': bool at byte %" PRIu64
                       " is %u; a GGUF bool must be 0 or 1",
                       r->name, SHOWN(strlen(key)), key, r->pos, p[0]);
    scalar_decode(t, p, v);
    r->pos += sz;
    return KN_OK;
}

/* ---------------------------------------------------------------- sorting */

/* A sort entry: qsort in C17 has no context argument, so each entry carries its key. */
struct sort_ent {
    const char *s;
    uint64_t off;
    int64_t i;
};

static int cmp_name(const void *a, const void *b)
{
    const struct sort_ent *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : (x->i < y->i ? -1 : x->i > y->i);
}

static int cmp_offset(const void *a, const void *b)
{
    const struct sort_ent *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* ---------------------------------------------------------------- parsing */

static enum kn_status parse_header(struct gguf_file *f, struct rd *r)
{
    if (r->size < 4 || memcmp(r->base, GGUF_MAGIC, 4) != 0) {
        char shown[5] = {0};
        for (uint64_t i = 0; i < 4 && i < r->size; i++)
            shown[i] = r->base[i] >= 0x20 && r->base[i] < 0x7F ? (char)r->base[i] : '?';
        return kn_fail(r->err, KN_E_FORMAT,
                       "%s: not a GGUF file: the first 4 bytes are '%s' (%" PRIu64
                       " bytes in the file), expected 'GGUF'",
                       r->name, shown, r->size);
    }
    r->pos = 4;
    enum kn_status st = rd_u32(r, &f->version, "the version");
    if (st)
        return st;
    if (f->version == 1)
        return kn_fail(r->err, KN_E_UNSUPPORTED,
                       "%s: GGUF version 1 at byte 4 is not supported (only versions 2 and 3): "
                       "convert the model again with a current llama.cpp", r->name);
    if (f->version != 0 && (f->version & 0xFFFF) == 0)
        return kn_fail(r->err, KN_E_UNSUPPORTED,
                       "%s: GGUF version 0x%08" PRIx32 " at byte 4 looks byte-swapped: "
                       "big-endian GGUF files are not supported", r->name, f->version);
    if (f->version != 2 && f->version != 3)
        return kn_fail(r->err, KN_E_UNSUPPORTED,
                       "%s: GGUF version %" PRIu32 " at byte 4 is not supported; expected 2 or 3",
                       r->name, f->version);
    uint64_t nt, nk;
    if ((st = rd_u64(r, &nt, "the tensor count")) || (st = rd_u64(r, &nk, "the key/value count")))
        return st;
    if ((int64_t)nt < 0)
        return kn_fail(r->err, KN_E_FORMAT, "%s: tensor count at byte 8 is negative (%" PRId64 ")",
                       r->name, (int64_t)nt);
    if ((int64_t)nk < 0)
        return kn_fail(r->err, KN_E_FORMAT,
                       "%s: key/value count at byte 16 is negative (%" PRId64 ")", r->name,
                       (int64_t)nk);
    if (nk > rd_left(r) / GGUF_MIN_KV_BYTES)
        return kn_fail(r->err, KN_E_FORMAT,
                       "%s: key/value count at byte 16 is %" PRIu64 " but only %" PRIu64
                       " bytes follow (each key/value takes at least %u): corrupt header or "
                       "truncated file",
                       r->name, nk, rd_left(r), GGUF_MIN_KV_BYTES);
    if (nt > rd_left(r) / GGUF_MIN_TENSOR_BYTES)
        return kn_fail(r->err, KN_E_FORMAT,
                       "%s: tensor count at byte 8 is %" PRIu64 " but only %" PRIu64
                       " bytes follow (each tensor info takes at least %u): corrupt header or "
                       "truncated file",
                       r->name, nt, rd_left(r), GGUF_MIN_TENSOR_BYTES);
    f->n_tensors = (int64_t)nt;
    f->n_kv = (int64_t)nk;
    return KN_OK;
}

static enum kn_status parse_kvs(struct gguf_file *f, struct rd *r)
{
    f->kvs = kn_calloc((size_t)f->n_kv, sizeof *f->kvs, r->err);
    if (!f->kvs)
        return KN_E_NOMEM;
    enum kn_status st;
    for (int64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kvs[i];
        if ((st = rd_name(r, "key", i, GGUF_MAX_KEY_LEN, &kv->key)))
            return st;
        uint64_t at = r->pos;
        uint32_t t;
        char what[200];
        snprintf(what, sizeof what, "the value type of key '%.*s'", SHOWN(strlen(kv->key)), kv->key);
        if ((st = rd_u32(r, &t, what)))
            return st;
        if ((st = check_vtype(r, at, t, kv->key, "value")))
            return st;
        if ((st = rd_value(r, kv->key, (enum gguf_vtype)t, 0, &kv->value)))
            return st;
    }
    f->kv_sorted = kn_calloc((size_t)f->n_kv, sizeof *f->kv_sorted, r->err);
    if (!f->kv_sorted)
        return KN_E_NOMEM;
    for (int64_t i = 0; i < f->n_kv; i++)
        f->kv_sorted[i] = (struct sort_ent){f->kvs[i].key, 0, i};
    qsort(f->kv_sorted, (size_t)f->n_kv, sizeof *f->kv_sorted, cmp_name);
    for (int64_t i = 1; i < f->n_kv; i++) {
        const struct sort_ent *a = &f->kv_sorted[i - 1], *b = &f->kv_sorted[i];
        if (strcmp(a->s, b->s) == 0)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: key '%.*s' appears twice (key/values #%" PRId64 " and #%" PRId64
                           "); each key must be unique",
                           r->name, SHOWN(strlen(a->s)), a->s, a->i, b->i);
    }
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->value.type != GGUF_T_U32)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: key 'general.alignment' has type %s; expected u32", r->name,
                           gguf_vtype_name(al->value.type));
        uint64_t a = al->value.v.u64;
        if (a == 0 || (a & (a - 1)) != 0)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: key 'general.alignment' is %" PRIu64
                           "; expected a nonzero power of two such as 32",
                           r->name, a);
        f->alignment = (uint32_t)a;
    }
    return KN_OK;
}

static enum kn_status parse_tensor_infos(struct gguf_file *f, struct rd *r)
{
    f->tensors = kn_calloc((size_t)f->n_tensors, sizeof *f->tensors, r->err);
    if (!f->tensors)
        return KN_E_NOMEM;
    enum kn_status st;
    char what[200];
    for (int64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if ((st = rd_name(r, "tensor name", i, GGUF_MAX_NAME_LEN, &t->name)))
            return st;
        uint64_t at = r->pos;
        snprintf(what, sizeof what, "the rank of tensor %s", t->name);
        if ((st = rd_u32(r, &t->n_dims, what)))
            return st;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: tensor %s: rank %" PRIu32 " at byte %" PRIu64
                           "; expected 1 to %d dimensions",
                           r->name, t->name, t->n_dims, at, GGUF_MAX_DIMS);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t u;
            at = r->pos;
            snprintf(what, sizeof what, "dimension %" PRIu32 " of tensor %s", d, t->name);
            if ((st = rd_u64(r, &u, what)))
                return st;
            int64_t v = (int64_t)u;
            /* llama.cpp accepts 0 in its header check but then divides by it; a tensor
             * with no elements has no use in a model, so reject it here. */
            if (v <= 0)
                return kn_fail(r->err, KN_E_FORMAT,
                               "%s: tensor %s: dimension %" PRIu32 " at byte %" PRIu64
                               " is %" PRId64 "; expected at least 1 (%s)",
                               r->name, t->name, d, at, v,
                               v == 0 ? "zero-size tensors are not allowed" : "negative size");
            t->ne[d] = v;
        }
        int64_t n_el = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            if (__builtin_mul_overflow(n_el, t->ne[d], &n_el))
                return kn_fail(r->err, KN_E_FORMAT,
                               "%s: tensor %s: shape %" PRId64 " x %" PRId64 " x %" PRId64
                               " x %" PRId64 " has more than 2^63 elements (overflow)",
                               r->name, t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        at = r->pos;
        snprintf(what, sizeof what, "the type of tensor %s", t->name);
        if ((st = rd_u32(r, &t->type, what)))
            return st;
        const struct quant_type_info *qi = quant_type_info(t->type);
        if (!qi)
            return kn_fail(r->err, KN_E_UNSUPPORTED,
                           "%s: tensor %s: unknown GGML type id %" PRIu32 " at byte %" PRIu64
                           " (a newer or corrupt file; known ids are 0 to %d with gaps)",
                           r->name, t->name, t->type, at, QT_COUNT - 1);
        uint64_t row, size = 0;
        if ((uint64_t)t->ne[0] % qi->block_size != 0)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: tensor %s: row length %" PRId64 " is not a multiple of the %s "
                           "block size %" PRIu32,
                           r->name, t->name, t->ne[0], qi->name, qi->block_size);
        bool ok = quant_row_size(t->type, (uint64_t)t->ne[0], &row);
        size = row;
        for (int d = 1; ok && d < GGUF_MAX_DIMS; d++)
            ok = !__builtin_mul_overflow(size, (uint64_t)t->ne[d], &size);
        if (!ok)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: tensor %s: shape %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                           " of type %s has a byte size that overflows 64 bits",
                           r->name, t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], qi->name);
        /* Checked here, before the data offset, so later sums cannot overflow. */
        if (size > f->size)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: tensor %s: shape %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                           " of type %s needs %" PRIu64 " bytes but the whole file has %" PRIu64
                           ": truncated download or corrupt shape?",
                           r->name, t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], qi->name,
                           size, f->size);
        t->size = size;
        at = r->pos;
        snprintf(what, sizeof what, "the data offset of tensor %s", t->name);
        if ((st = rd_u64(r, &t->offset, what)))
            return st;
        if (t->offset % f->alignment != 0)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: tensor %s: data offset %" PRIu64 " (at byte %" PRIu64
                           ") is not a multiple of the alignment %" PRIu32,
                           r->name, t->name, t->offset, at, f->alignment);
    }
    f->tensor_sorted = kn_calloc((size_t)f->n_tensors, sizeof *f->tensor_sorted, r->err);
    if (!f->tensor_sorted)
        return KN_E_NOMEM;
    for (int64_t i = 0; i < f->n_tensors; i++)
        f->tensor_sorted[i] = (struct sort_ent){f->tensors[i].name, 0, i};
    qsort(f->tensor_sorted, (size_t)f->n_tensors, sizeof *f->tensor_sorted, cmp_name);
    for (int64_t i = 1; i < f->n_tensors; i++) {
        const struct sort_ent *a = &f->tensor_sorted[i - 1], *b = &f->tensor_sorted[i];
        if (strcmp(a->s, b->s) == 0)
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: tensor %s appears twice (tensor infos #%" PRId64 " and #%" PRId64
                           "); each tensor name must be unique",
                           r->name, a->s, a->i, b->i);
    }
    return KN_OK;
}

static enum kn_status check_data(struct gguf_file *f, struct rd *r)
{
    uint64_t end_infos = r->pos;
    /* Padding to the alignment cannot overflow: pos <= size < 2^63 and alignment < 2^32. */
    f->data_offset = (end_infos + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors == 0)
        return KN_OK; /* vocabulary-only files may end right after the header */
    if (f->data_offset > f->size)
        return kn_fail(r->err, KN_E_FORMAT,
                       "%s: the tensor data should start at byte %" PRIu64
                       " but the file has %" PRIu64 " bytes: truncated download?",
                       r->name, f->data_offset, f->size);
    uint64_t room = f->size - f->data_offset;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset > room || t->size > room - t->offset) {
            uint64_t end;
            if (__builtin_add_overflow(f->data_offset, t->offset, &end) ||
                __builtin_add_overflow(end, t->size, &end))
                return kn_fail(r->err, KN_E_FORMAT,
                               "%s: tensor %s: data offset %" PRIu64 " lies far past the end "
                               "of the file (%" PRIu64 " bytes): corrupt tensor info",
                               r->name, t->name, t->offset, f->size);
            return kn_fail(r->err, KN_E_FORMAT,
                           "%s: tensor %s ends at byte %" PRIu64 " but the file has %" PRIu64
                           " bytes: truncated download?",
                           r->name, t->name, end, f->size);
        }
        t->data = f->base + f->data_offset + t->offset;
    }
    struct sort_ent *by_off = kn_calloc((size_t)f->n_tensors, sizeof *by_off, r->err);
    if (!by_off)
        return KN_E_NOMEM;
    for (int64_t i = 0; i < f->n_tensors; i++)
        by_off[i] = (struct sort_ent){NULL, f->tensors[i].offset, i};
    qsort(by_off, (size_t)f->n_tensors, sizeof *by_off, cmp_offset);
    enum kn_status st = KN_OK;
    for (int64_t i = 1; i < f->n_tensors; i++) {
        const struct gguf_tensor *a = &f->tensors[by_off[i - 1].i], *b = &f->tensors[by_off[i].i];
        if (a->offset + a->size > b->offset) {
            st = kn_fail(r->err, KN_E_FORMAT,
                         "%s: tensor %s (data bytes %" PRIu64 "..%" PRIu64
                         ") overlaps tensor %s (from byte %" PRIu64
                         "); tensors must not share bytes",
                         r->name, b->name, f->data_offset + b->offset,
                         f->data_offset + b->offset + b->size, a->name, f->data_offset + a->offset);
            break;
        }
    }
    free(by_off);
    return st;
}

static enum kn_status parse(struct gguf_file *f, struct kn_err *err)
{
    struct rd r = {f->base, 0, f->size, f->name, err};
    enum kn_status st;
    if ((st = parse_header(f, &r)) || (st = parse_kvs(f, &r)) ||
        (st = parse_tensor_infos(f, &r)) || (st = check_data(f, &r)))
        return st;
    return KN_OK;
}

static enum kn_status open_common(struct gguf_file **out, struct gguf_file *f, const char *name,
                                  struct kn_err *err)
{
    enum kn_status st;
    f->name = kn_strdup(name ? name : "(memory)", err);
    if (!f->name)
        st = KN_E_NOMEM;
    else if ((uint64_t)f->size > (uint64_t)INT64_MAX)
        st = kn_fail(err, KN_E_UNSUPPORTED, "%s: larger than 2^63 bytes", f->name);
    else
        st = parse(f, err);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return KN_OK;
}

enum kn_status gguf_open_memory(struct gguf_file **out, const void *data, size_t size,
                                const char *name, struct kn_err *err)
{
    *out = NULL;
    struct gguf_file *f = kn_calloc(1, sizeof *f, err);
    if (!f)
        return KN_E_NOMEM;
    f->map.fd = -1;
    f->base = size ? data : (const uint8_t *)"";
    f->size = size;
    return open_common(out, f, name, err);
}

enum kn_status gguf_open(struct gguf_file **out, const char *path, struct kn_err *err)
{
    *out = NULL;
    struct gguf_file *f = kn_calloc(1, sizeof *f, err);
    if (!f)
        return KN_E_NOMEM;
    enum kn_status st = kn_map_open(&f->map, path, err);
    if (st) {
        free(f);
        return st;
    }
    f->mapped = true;
    f->base = f->map.data;
    f->size = f->map.size;
    return open_common(out, f, path, err);
}

void gguf_close(struct gguf_file *f)
{
    if (!f)
        return;
    for (int64_t i = 0; f->kvs && i < f->n_kv; i++) {
        free(f->kvs[i].key);
        value_free(&f->kvs[i].value);
    }
    for (int64_t i = 0; f->tensors && i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->kvs);
    free(f->tensors);
    free(f->kv_sorted);
    free(f->tensor_sorted);
    free(f->name);
    if (f->mapped)
        kn_map_close(&f->map);
    free(f);
}

/* ---------------------------------------------------------------- accessors */

uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
uint64_t gguf_file_size(const struct gguf_file *f) { return f->size; }
uint32_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const struct gguf_file *f) { return f->data_offset; }
const char *gguf_name(const struct gguf_file *f) { return f->name; }
int64_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }
int64_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, int64_t i)
{
    return i >= 0 && i < f->n_kv ? &f->kvs[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, int64_t i)
{
    return i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key)
{
    int64_t lo = 0, hi = f->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const struct gguf_kv *kv = &f->kvs[f->kv_sorted[mid].i];
        int c = strcmp(kv->key, key);
        if (c == 0)
            return kv;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
    int64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const struct gguf_tensor *t = &f->tensors[f->tensor_sorted[mid].i];
        int c = strcmp(t->name, name);
        if (c == 0)
            return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool is_unsigned(enum gguf_vtype t)
{
    return t == GGUF_T_U8 || t == GGUF_T_U16 || t == GGUF_T_U32 || t == GGUF_T_U64;
}

static bool is_signed(enum gguf_vtype t)
{
    return t == GGUF_T_I8 || t == GGUF_T_I16 || t == GGUF_T_I32 || t == GGUF_T_I64;
}

bool gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return false;
    if (is_unsigned(kv->value.type)) {
        *out = kv->value.v.u64;
        return true;
    }
    if (is_signed(kv->value.type) && kv->value.v.i64 >= 0) {
        *out = (uint64_t)kv->value.v.i64;
        return true;
    }
    return false;
}

bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out)
{
    uint64_t v;
    if (!gguf_get_u64(f, key, &v) || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

bool gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return false;
    if (is_signed(kv->value.type)) {
        *out = kv->value.v.i64;
        return true;
    }
    if (is_unsigned(kv->value.type) && kv->value.v.u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)kv->value.v.u64;
        return true;
    }
    return false;
}

/* True when the double d lies in int64 range, so (int64_t)d is defined. */
static bool in_i64(double d)
{
    return d >= -9223372036854775808.0 && d < 9223372036854775808.0;
}

bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return false;
    enum gguf_vtype t = kv->value.type;
    float x;
    if (t == GGUF_T_F32 || t == GGUF_T_F64) {
        double d = kv->value.v.f64;
        if (d != d) {
            x = (float)d;
        } else {
            /* Only exact conversions: an f64 like 0.1 has no exact f32. */
            if (d > FLT_MAX || d < -FLT_MAX) {
                if (d == (double)INFINITY || d == -(double)INFINITY)
                    x = (float)d;
                else
                    return false;
            } else {
                x = (float)d;
                if ((double)x != d)
                    return false;
            }
        }
    } else if (is_signed(t)) {
        x = (float)kv->value.v.i64;
        if (!in_i64((double)x) || (int64_t)(double)x != kv->value.v.i64)
            return false;
    } else if (is_unsigned(t)) {
        x = (float)kv->value.v.u64;
        if ((double)x >= 18446744073709551616.0 || (uint64_t)(double)x != kv->value.v.u64)
            return false;
    } else {
        return false;
    }
    *out = x;
    return true;
}

bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_T_BOOL)
        return false;
    *out = kv->value.v.b;
    return true;
}

bool gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_T_STRING)
        return false;
    *out = kv->value.v.str;
    return true;
}

const struct gguf_value *gguf_get_arr(const struct gguf_file *f, const char *key,
                                      enum gguf_vtype elem_type)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_T_ARRAY || kv->value.v.arr.type != elem_type)
        return NULL;
    return &kv->value;
}

/* Decodes element i of a scalar array; asserts the array holds scalars. */
static struct gguf_value arr_elem(const struct gguf_value *arr, uint64_t i)
{
    assert(arr->type == GGUF_T_ARRAY && i < arr->v.arr.n);
    size_t sz = gguf_vtype_size(arr->v.arr.type);
    assert(sz != 0);
    struct gguf_value v;
    scalar_decode(arr->v.arr.type, (const uint8_t *)arr->v.arr.data + i * sz, &v);
    return v;
}

int64_t gguf_arr_i64(const struct gguf_value *arr, uint64_t i)
{
    struct gguf_value v = arr_elem(arr, i);
    if (is_unsigned(v.type))
        return (int64_t)v.v.u64;
    if (is_signed(v.type))
        return v.v.i64;
    if (v.type == GGUF_T_BOOL)
        return v.v.b;
    /* Floats: truncated toward zero, saturated, NaN as 0 (never undefined). */
    if (v.v.f64 != v.v.f64)
        return 0;
    if (!in_i64(v.v.f64))
        return v.v.f64 < 0 ? INT64_MIN : INT64_MAX;
    return (int64_t)v.v.f64;
}

double gguf_arr_f64(const struct gguf_value *arr, uint64_t i)
{
    struct gguf_value v = arr_elem(arr, i);
    if (is_unsigned(v.type))
        return (double)v.v.u64;
    if (is_signed(v.type))
        return (double)v.v.i64;
    if (v.type == GGUF_T_BOOL)
        return v.v.b;
    return v.v.f64;
}
