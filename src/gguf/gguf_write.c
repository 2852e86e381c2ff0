/* gguf_write.c: the GGUF v3 writer. Key/values are deep-copied when set; tensors are
 * copied (gguf_writer_add_tensor), borrowed (gguf_writer_add_tensor_ref) or produced
 * on demand while writing (gguf_writer_add_tensor_fill), so a model of several GB can
 * be written with only its largest tensor in memory. The file is streamed to a
 * temporary file next to the target and renamed into place, so readers never see a
 * half-written model. */
#include "gguf.h"
#include "../quant/quant.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer stores host-order scalars: it needs a little-endian target"
#endif

struct wkv {
    char *key;
    struct gguf_value value; /* every pointer inside is owned */
};

struct wtensor {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t size, offset;
    const void *data; /* borrowed, or owned (== owned) */
    void *owned;
    gguf_tensor_fill_fn fill;
    void *fill_ctx;
};

struct gguf_writer {
    struct wkv *kvs;
    size_t n_kv, cap_kv;
    struct wtensor *ts;
    size_t n_t, cap_t;
    struct kn_err err; /* the first failure, reported by gguf_writer_write */
};

/* Records the first failure; later ones are usually consequences of it. */
static void w_fail(struct gguf_writer *w, enum kn_status st, const char *fmt, ...) KN_PRINTF(3, 4);
static void w_fail(struct gguf_writer *w, enum kn_status st, const char *fmt, ...)
{
    if (w->err.status != KN_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    kn_vfail(&w->err, st, fmt, ap);
    va_end(ap);
}

struct gguf_writer *gguf_writer_new(void)
{
    return calloc(1, sizeof(struct gguf_writer));
}

/* Frees what a value owns (the writer's deep copies). */
static void owned_value_free(struct gguf_value *v)
{
    if (v->type == GGUF_T_STRING) {
        free((void *)v->v.str.data);
    } else if (v->type == GGUF_T_ARRAY) {
        free((void *)v->v.arr.data);
        if (v->v.arr.strs)
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                free((void *)v->v.arr.strs[i].data);
        free(v->v.arr.strs);
        if (v->v.arr.items)
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                owned_value_free(&v->v.arr.items[i]);
        free(v->v.arr.items);
    }
    memset(v, 0, sizeof *v);
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        owned_value_free(&w->kvs[i].value);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->ts[i].name);
        free(w->ts[i].owned);
    }
    free(w->kvs);
    free(w->ts);
    free(w);
}

static char *dup_bytes(const void *p, uint64_t n)
{
    if (n >= SIZE_MAX)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (s) {
        if (n)
            memcpy(s, p, (size_t)n);
        s[n] = 0;
    }
    return s;
}

/* Deep-copies src into dst; false on out of memory or a malformed value (dst is then
 * left freeable). */
static bool value_dup(struct gguf_value *dst, const struct gguf_value *src, int depth)
{
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    if ((unsigned)src->type >= GGUF_T_COUNT || depth > 8)
        return false;
    if (src->type == GGUF_T_STRING) {
        dst->v.str.data = dup_bytes(src->v.str.data, src->v.str.len);
        dst->v.str.len = src->v.str.len;
        return dst->v.str.data != NULL;
    }
    if (src->type != GGUF_T_ARRAY) {
        dst->v = src->v;
        return true;
    }
    enum gguf_vtype et = src->v.arr.type;
    uint64_t n = src->v.arr.n;
    if ((unsigned)et >= GGUF_T_COUNT)
        return false;
    dst->v.arr.type = et;
    size_t esz = gguf_vtype_size(et);
    if (esz) {
        size_t bytes;
        if (n > SIZE_MAX || !kn_mul_size((size_t)n, esz, &bytes))
            return false;
        dst->v.arr.data = dup_bytes(src->v.arr.data, bytes);
        dst->v.arr.n = n;
        return dst->v.arr.data != NULL;
    }
    if (n > SIZE_MAX / sizeof(struct gguf_value))
        return false;
    if (et == GGUF_T_STRING) {
        dst->v.arr.strs = calloc(n ? (size_t)n : 1, sizeof *dst->v.arr.strs);
        if (!dst->v.arr.strs)
            return false;
        dst->v.arr.n = n;
        for (uint64_t i = 0; i < n; i++) {
            dst->v.arr.strs[i].data = dup_bytes(src->v.arr.strs[i].data, src->v.arr.strs[i].len);
            dst->v.arr.strs[i].len = src->v.arr.strs[i].len;
            if (!dst->v.arr.strs[i].data)
                return false;
        }
        return true;
    }
    dst->v.arr.items = calloc(n ? (size_t)n : 1, sizeof *dst->v.arr.items);
    if (!dst->v.arr.items)
        return false;
    dst->v.arr.n = n;
    for (uint64_t i = 0; i < n; i++) {
        if (src->v.arr.items[i].type != GGUF_T_ARRAY)
            return false;
        if (!value_dup(&dst->v.arr.items[i], &src->v.arr.items[i], depth + 1))
            return false;
    }
    return true;
}

/* Takes ownership of *v (already a deep copy) under key, replacing an earlier value. */
static void set_owned(struct gguf_writer *w, const char *key, struct gguf_value *v)
{
    size_t klen = strlen(key);
    if (klen == 0 || klen > 65535 || !gguf_utf8_valid(key, klen)) {
        w_fail(w, KN_E_ARG, "gguf writer: key '%.100s' is not 1 to 65535 bytes of UTF-8", key);
        owned_value_free(v);
        return;
    }
    if (strcmp(key, "general.alignment") == 0) {
        uint64_t a = v->v.u64;
        if (v->type != GGUF_T_U32 || a == 0 || (a & (a - 1)) != 0) {
            w_fail(w, KN_E_ARG, "gguf writer: general.alignment must be a u32 power of two");
            owned_value_free(v);
            return;
        }
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            owned_value_free(&w->kvs[i].value);
            w->kvs[i].value = *v;
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        struct wkv *nk = realloc(w->kvs, cap * sizeof *nk);
        if (!nk) {
            w_fail(w, KN_E_NOMEM, "gguf writer: out of memory adding key %.100s", key);
            owned_value_free(v);
            return;
        }
        w->kvs = nk;
        w->cap_kv = cap;
    }
    char *k = dup_bytes(key, klen);
    if (!k) {
        w_fail(w, KN_E_NOMEM, "gguf writer: out of memory adding key %.100s", key);
        owned_value_free(v);
        return;
    }
    w->kvs[w->n_kv].key = k;
    w->kvs[w->n_kv].value = *v;
    w->n_kv++;
}

void gguf_writer_set_value(struct gguf_writer *w, const char *key, const struct gguf_value *v)
{
    struct gguf_value copy;
    if (!value_dup(&copy, v, 0)) {
        owned_value_free(&copy);
        w_fail(w, KN_E_ARG, "gguf writer: key %.100s: value is malformed, nested more than 8 "
               "deep, or memory ran out", key);
        return;
    }
    set_owned(w, key, &copy);
}

static void set_scalar(struct gguf_writer *w, const char *key, struct gguf_value v)
{
    set_owned(w, key, &v);
}

void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    set_scalar(w, key, (struct gguf_value){.type = GGUF_T_U32, .v.u64 = v});
}
void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    set_scalar(w, key, (struct gguf_value){.type = GGUF_T_I32, .v.i64 = v});
}
void gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
    set_scalar(w, key, (struct gguf_value){.type = GGUF_T_U64, .v.u64 = v});
}
void gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v)
{
    set_scalar(w, key, (struct gguf_value){.type = GGUF_T_I64, .v.i64 = v});
}
void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    set_scalar(w, key, (struct gguf_value){.type = GGUF_T_F32, .v.f64 = v});
}
void gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v)
{
    set_scalar(w, key, (struct gguf_value){.type = GGUF_T_F64, .v.f64 = v});
}
void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
    set_scalar(w, key, (struct gguf_value){.type = GGUF_T_BOOL, .v.b = v});
}

void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    struct gguf_value val = {.type = GGUF_T_STRING};
    val.v.str.data = v;
    val.v.str.len = strlen(v);
    gguf_writer_set_value(w, key, &val);
}

void gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                         const void *data, uint64_t n)
{
    if (gguf_vtype_size(elem_type) == 0) {
        w_fail(w, KN_E_ARG, "gguf writer: key %.100s: gguf_writer_set_arr takes scalar "
               "elements, not %s", key, gguf_vtype_name(elem_type));
        return;
    }
    struct gguf_value val = {.type = GGUF_T_ARRAY};
    val.v.arr.type = elem_type;
    val.v.arr.n = n;
    val.v.arr.data = data;
    gguf_writer_set_value(w, key, &val);
}

void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *strs,
                             uint64_t n)
{
    struct gguf_value val = {.type = GGUF_T_ARRAY};
    val.v.arr.type = GGUF_T_STRING;
    val.v.arr.n = n;
    val.v.arr.strs = (struct gguf_str *)strs;
    gguf_writer_set_value(w, key, &val);
}

void gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv)
{
    gguf_writer_set_value(w, kv->key, &kv->value);
}

/* ---------------------------------------------------------------- tensors */

static struct wtensor *add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const int64_t *ne)
{
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen > 64 || !gguf_utf8_valid(name, nlen)) {
        w_fail(w, KN_E_ARG, "gguf writer: tensor name '%.100s' is not 1 to 64 bytes of UTF-8",
               name);
        return NULL;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->ts[i].name, name) == 0) {
            w_fail(w, KN_E_ARG, "gguf writer: tensor %s added twice", name);
            return NULL;
        }
    }
    const struct quant_type_info *qi = quant_type_info(type);
    if (!qi) {
        w_fail(w, KN_E_ARG, "gguf writer: tensor %s: unknown type id %" PRIu32, name, type);
        return NULL;
    }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        w_fail(w, KN_E_ARG, "gguf writer: tensor %s: rank %" PRIu32 " is not 1 to 4", name,
               n_dims);
        return NULL;
    }
    struct wtensor t = {0};
    uint64_t size = 0;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0) {
            w_fail(w, KN_E_ARG, "gguf writer: tensor %s: dimension %d is %" PRId64, name, d,
                   t.ne[d]);
            return NULL;
        }
    }
    bool ok = quant_row_size(type, (uint64_t)t.ne[0], &size);
    for (int d = 1; ok && d < GGUF_MAX_DIMS; d++)
        ok = !__builtin_mul_overflow(size, (uint64_t)t.ne[d], &size);
    if (!ok) {
        w_fail(w, KN_E_ARG, "gguf writer: tensor %s: row length %" PRId64 " is not a multiple "
               "of the %s block size, or the size overflows", name, t.ne[0], qi->name);
        return NULL;
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        struct wtensor *nt = realloc(w->ts, cap * sizeof *nt);
        if (!nt) {
            w_fail(w, KN_E_NOMEM, "gguf writer: out of memory adding tensor %s", name);
            return NULL;
        }
        w->ts = nt;
        w->cap_t = cap;
    }
    t.name = dup_bytes(name, nlen);
    if (!t.name) {
        w_fail(w, KN_E_NOMEM, "gguf writer: out of memory adding tensor %s", name);
        return NULL;
    }
    t.type = type;
    t.n_dims = n_dims;
    t.size = size;
    w->ts[w->n_t] = t;
    return &w->ts[w->n_t++];
}

static bool size_matches(struct gguf_writer *w, const struct wtensor *t, uint64_t size)
{
    if (size == t->size)
        return true;
    w_fail(w, KN_E_ARG, "gguf writer: tensor %s: %" PRIu64 " bytes given but its shape and "
           "type need %" PRIu64, t->name, size, t->size);
    return false;
}

void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                            const int64_t *ne, const void *data, uint64_t size)
{
    struct wtensor *t = add_tensor(w, name, type, n_dims, ne);
    if (!t || !size_matches(w, t, size))
        return;
    if (size > SIZE_MAX || !(t->owned = malloc(size ? (size_t)size : 1))) {
        w_fail(w, KN_E_NOMEM, "gguf writer: out of memory copying tensor %s (%" PRIu64
               " bytes)", name, size);
        return;
    }
    memcpy(t->owned, data, (size_t)size);
    t->data = t->owned;
}

void gguf_writer_add_tensor_ref(struct gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const int64_t *ne, const void *data, uint64_t size)
{
    struct wtensor *t = add_tensor(w, name, type, n_dims, ne);
    if (t && size_matches(w, t, size))
        t->data = data;
}

void gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type,
                                 uint32_t n_dims, const int64_t *ne, gguf_tensor_fill_fn fill,
                                 void *ctx)
{
    struct wtensor *t = add_tensor(w, name, type, n_dims, ne);
    if (t) {
        t->fill = fill;
        t->fill_ctx = ctx;
    }
}

/* ---------------------------------------------------------------- output */

struct wout {
    FILE *fp;
    uint64_t pos;
    bool bad;
};

static void out_bytes(struct wout *o, const void *p, uint64_t n)
{
    if (o->bad || n == 0)
        return;
    if (fwrite(p, 1, (size_t)n, o->fp) != (size_t)n)
        o->bad = true;
    o->pos += n;
}

static void out_u32(struct wout *o, uint32_t v) { out_bytes(o, &v, 4); }
static void out_u64(struct wout *o, uint64_t v) { out_bytes(o, &v, 8); }

static void out_str(struct wout *o, const char *s, uint64_t n)
{
    out_u64(o, n);
    out_bytes(o, s, n);
}

static void out_pad(struct wout *o, uint32_t alignment)
{
    static const uint8_t zeros[256];
    uint64_t pad = (alignment - o->pos % alignment) % alignment;
    while (pad) {
        uint64_t k = pad < sizeof zeros ? pad : sizeof zeros;
        out_bytes(o, zeros, k);
        pad -= k;
    }
}

/* Writes a value's payload (no type tag for scalars and strings; arrays write their
 * element type and count, as the format nests them). */
static void out_value(struct wout *o, const struct gguf_value *v)
{
    switch (v->type) {
    case GGUF_T_U8: case GGUF_T_BOOL: {
        uint8_t x = v->type == GGUF_T_BOOL ? (uint8_t)v->v.b : (uint8_t)v->v.u64;
        out_bytes(o, &x, 1);
        break;
    }
    case GGUF_T_I8: { int8_t x = (int8_t)v->v.i64; out_bytes(o, &x, 1); break; }
    case GGUF_T_U16: { uint16_t x = (uint16_t)v->v.u64; out_bytes(o, &x, 2); break; }
    case GGUF_T_I16: { int16_t x = (int16_t)v->v.i64; out_bytes(o, &x, 2); break; }
    case GGUF_T_U32: out_u32(o, (uint32_t)v->v.u64); break;
    case GGUF_T_I32: { int32_t x = (int32_t)v->v.i64; out_bytes(o, &x, 4); break; }
    case GGUF_T_U64: out_u64(o, v->v.u64); break;
    case GGUF_T_I64: out_bytes(o, &v->v.i64, 8); break;
    case GGUF_T_F32: { float x = (float)v->v.f64; out_bytes(o, &x, 4); break; }
    case GGUF_T_F64: out_bytes(o, &v->v.f64, 8); break;
    case GGUF_T_STRING: out_str(o, v->v.str.data, v->v.str.len); break;
    case GGUF_T_ARRAY: {
        out_u32(o, (uint32_t)v->v.arr.type);
        out_u64(o, v->v.arr.n);
        size_t esz = gguf_vtype_size(v->v.arr.type);
        if (esz)
            out_bytes(o, v->v.arr.data, v->v.arr.n * esz);
        else if (v->v.arr.type == GGUF_T_STRING)
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                out_str(o, v->v.arr.strs[i].data, v->v.arr.strs[i].len);
        else
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                out_value(o, &v->v.arr.items[i]);
        break;
    }
    default: break;
    }
}

static uint32_t writer_alignment(const struct gguf_writer *w)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, "general.alignment") == 0)
            return (uint32_t)w->kvs[i].value.v.u64; /* checked when set */
    return GGUF_DEFAULT_ALIGNMENT;
}

/* Streams the whole file to fp. name is used in messages. */
static enum kn_status write_stream(struct gguf_writer *w, FILE *fp, const char *name,
                                   struct kn_err *err)
{
    if (w->err.status != KN_OK) {
        if (err)
            *err = w->err;
        return w->err.status;
    }
    uint32_t align = writer_alignment(w);
    uint64_t off = 0, fill_max = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        struct wtensor *t = &w->ts[i];
        t->offset = off;
        if (__builtin_add_overflow(off, t->size + align - 1, &off))
            return kn_fail(err, KN_E_LIMIT, "%s: the tensors' total size overflows", name);
        off -= off % align;
        if (t->fill && t->size > fill_max)
            fill_max = t->size;
    }
    void *buf = NULL;
    if (fill_max) {
        if (fill_max > SIZE_MAX || !(buf = malloc((size_t)fill_max)))
            return kn_fail(err, KN_E_NOMEM, "%s: out of memory for a %" PRIu64 "-byte tensor",
                           name, fill_max);
    }
    struct wout o = {fp, 0, false};
    out_bytes(&o, GGUF_MAGIC, 4);
    out_u32(&o, 3);
    out_u64(&o, w->n_t);
    out_u64(&o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        out_str(&o, w->kvs[i].key, strlen(w->kvs[i].key));
        out_u32(&o, (uint32_t)w->kvs[i].value.type);
        out_value(&o, &w->kvs[i].value);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->ts[i];
        out_str(&o, t->name, strlen(t->name));
        out_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            out_u64(&o, (uint64_t)t->ne[d]);
        out_u32(&o, t->type);
        out_u64(&o, t->offset);
    }
    enum kn_status st = KN_OK;
    if (w->n_t)
        out_pad(&o, align);
    for (size_t i = 0; i < w->n_t && !o.bad; i++) {
        const struct wtensor *t = &w->ts[i];
        const void *data = t->data;
        if (t->fill) {
            st = t->fill(t->fill_ctx, t->name, buf, t->size, err);
            if (st)
                break;
            data = buf;
        }
        out_bytes(&o, data, t->size);
        out_pad(&o, align);
    }
    free(buf);
    if (st)
        return st;
    if (o.bad || fflush(fp) != 0)
        return kn_fail(err, KN_E_IO, "%s: write failed: %s", name, strerror(errno));
    return KN_OK;
}

enum kn_status gguf_writer_write(struct gguf_writer *w, const char *path, struct kn_err *err)
{
    if (w->err.status != KN_OK) {
        if (err)
            *err = w->err;
        return w->err.status;
    }
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp)
        return kn_fail(err, KN_E_NOMEM, "%s: out of memory", path);
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        enum kn_status st = kn_fail(err, KN_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    enum kn_status st = write_stream(w, fp, path, err);
    if (st == KN_OK && fsync(fileno(fp)) != 0)
        st = kn_fail(err, KN_E_IO, "%s: write failed: %s", path, strerror(errno));
    if (fclose(fp) != 0 && st == KN_OK)
        st = kn_fail(err, KN_E_IO, "%s: write failed: %s", path, strerror(errno));
    if (st == KN_OK && rename(tmp, path) != 0)
        st = kn_fail(err, KN_E_IO, "%s: cannot rename into place: %s", path, strerror(errno));
    if (st != KN_OK)
        unlink(tmp);
    free(tmp);
    return st;
}

enum kn_status gguf_writer_write_memory(struct gguf_writer *w, void **out, size_t *size,
                                        struct kn_err *err)
{
    *out = NULL;
    *size = 0;
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    if (!fp)
        return kn_fail(err, KN_E_NOMEM, "gguf writer: cannot open a memory stream");
    enum kn_status st = write_stream(w, fp, "(memory)", err);
    if (fclose(fp) != 0 && st == KN_OK)
        st = kn_fail(err, KN_E_NOMEM, "gguf writer: memory stream failed");
    if (st != KN_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *size = len;
    return KN_OK;
}
