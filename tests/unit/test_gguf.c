/* test_gguf.c: the GGUF reader and writer: round trips of every value type, the real
 * files in the shared folder, and a corpus of malformed files built here, each of
 * which must be rejected with the expected status and a message naming the problem. */
#include "check.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

/* Builds the image of w into a heap buffer; the writer is freed. */
static uint8_t *build(struct gguf_writer *w, size_t *size)
{
    void *buf = NULL;
    struct kn_err err = {0};
    enum kn_status st = gguf_writer_write_memory(w, &buf, size, &err);
    CHECKF(st == KN_OK, "write_memory: %s", err.msg);
    gguf_writer_free(w);
    return buf;
}

/* Opens the image; expects success. */
static struct gguf_file *open_ok(const uint8_t *buf, size_t size, const char *what)
{
    struct gguf_file *f = NULL;
    struct kn_err err = {0};
    enum kn_status st = gguf_open_memory(&f, buf, size, "t.gguf", &err);
    CHECKF(st == KN_OK && f, "%s: %s", what, err.msg);
    return f;
}

/* Opens the image; expects status st and a message containing phrase. */
static void expect_fail(const uint8_t *buf, size_t size, enum kn_status want, const char *phrase,
                        const char *what)
{
    struct gguf_file *f = (struct gguf_file *)1;
    struct kn_err err = {0};
    enum kn_status st = gguf_open_memory(&f, buf, size, "bad.gguf", &err);
    CHECKF(st == want, "%s: status %s, expected %s (%s)", what, kn_status_str(st),
           kn_status_str(want), err.msg);
    CHECKF(f == NULL, "%s: *out not NULL on failure", what);
    CHECKF(strstr(err.msg, phrase) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, phrase);
    CHECKF(strncmp(err.msg, "bad.gguf: ", 10) == 0, "%s: message '%s' does not name the file",
           what, err.msg);
}

/* ---------------------------------------------------------------- round trip */

static void test_round_trip(void)
{
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "a.u32", 4000000000u);
    gguf_writer_set_i32(w, "a.i32", -7);
    gguf_writer_set_u64(w, "a.u64", UINT64_MAX);
    gguf_writer_set_i64(w, "a.i64", INT64_MIN);
    gguf_writer_set_f32(w, "a.f32", 0.125f);
    gguf_writer_set_f64(w, "a.f64", 0.1);
    gguf_writer_set_bool(w, "a.bool", true);
    gguf_writer_set_str(w, "a.str", "h\xc3\xa9llo");
    struct gguf_value u8v = {.type = GGUF_T_U8, .v.u64 = 200};
    struct gguf_value i8v = {.type = GGUF_T_I8, .v.i64 = -100};
    struct gguf_value u16v = {.type = GGUF_T_U16, .v.u64 = 65000};
    struct gguf_value i16v = {.type = GGUF_T_I16, .v.i64 = -30000};
    gguf_writer_set_value(w, "a.u8", &u8v);
    gguf_writer_set_value(w, "a.i8", &i8v);
    gguf_writer_set_value(w, "a.u16", &u16v);
    gguf_writer_set_value(w, "a.i16", &i16v);
    int32_t ints[3] = {1, -2, 3};
    gguf_writer_set_arr(w, "arr.i32", GGUF_T_I32, ints, 3);
    float fl[2] = {1.5f, -2.25f};
    gguf_writer_set_arr(w, "arr.f32", GGUF_T_F32, fl, 2);
    uint8_t bools[3] = {1, 0, 1};
    gguf_writer_set_arr(w, "arr.bool", GGUF_T_BOOL, bools, 3);
    double dd[1] = {3.5};
    gguf_writer_set_arr(w, "arr.f64", GGUF_T_F64, dd, 1);
    gguf_writer_set_arr(w, "arr.empty", GGUF_T_U8, NULL, 0);
    struct gguf_str strs[3] = {{"a", 1}, {"", 0}, {"xyz", 3}};
    gguf_writer_set_arr_str(w, "arr.str", strs, 3);
    /* A nested array: [[1, 2], ["p", "q"], [[-5]]]. */
    uint16_t inner_u16[2] = {1, 2};
    int64_t inner_i64[1] = {-5};
    struct gguf_value deepest = {.type = GGUF_T_ARRAY};
    deepest.v.arr.type = GGUF_T_I64;
    deepest.v.arr.n = 1;
    deepest.v.arr.data = inner_i64;
    struct gguf_value items[3] = {{.type = GGUF_T_ARRAY}, {.type = GGUF_T_ARRAY},
                                  {.type = GGUF_T_ARRAY}};
    items[0].v.arr.type = GGUF_T_U16;
    items[0].v.arr.n = 2;
    items[0].v.arr.data = inner_u16;
    struct gguf_str pq[2] = {{"p", 1}, {"q", 1}};
    items[1].v.arr.type = GGUF_T_STRING;
    items[1].v.arr.n = 2;
    items[1].v.arr.strs = pq;
    items[2].v.arr.type = GGUF_T_ARRAY;
    items[2].v.arr.n = 1;
    items[2].v.arr.items = &deepest;
    struct gguf_value nested = {.type = GGUF_T_ARRAY};
    nested.v.arr.type = GGUF_T_ARRAY;
    nested.v.arr.n = 3;
    nested.v.arr.items = items;
    gguf_writer_set_value(w, "arr.nested", &nested);
    gguf_writer_set_u32(w, "a.replaced", 1);
    gguf_writer_set_u32(w, "a.replaced", 2);

    float t0[64];
    for (int i = 0; i < 64; i++)
        t0[i] = (float)i * 0.5f;
    int64_t ne0[2] = {32, 2};
    gguf_writer_add_tensor(w, "t.f32", QT_F32, 2, ne0, t0, sizeof t0);
    uint8_t q[2 * 34];
    for (size_t i = 0; i < sizeof q; i++)
        q[i] = (uint8_t)(i * 7);
    int64_t ne1[1] = {64};
    gguf_writer_add_tensor_ref(w, "t.q8_0", QT_Q8_0, 1, ne1, q, sizeof q);

    size_t size;
    uint8_t *buf = build(w, &size);
    struct gguf_file *f = open_ok(buf, size, "round trip");
    if (!f) {
        free(buf);
        return;
    }
    CHECK_EQ_INT(gguf_version(f), 3);
    CHECK_EQ_INT(gguf_alignment(f), 32);
    CHECK_EQ_INT(gguf_n_kv(f), 21);
    CHECK_STR(gguf_kv_at(f, 0)->key, "general.architecture");
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    bool b;
    struct gguf_str s;
    CHECK(gguf_get_u32(f, "a.u32", &u32) && u32 == 4000000000u);
    CHECK(gguf_get_i64(f, "a.i32", &i64) && i64 == -7);
    CHECK(!gguf_get_u32(f, "a.i32", &u32));
    CHECK(gguf_get_u64(f, "a.u64", &u64) && u64 == UINT64_MAX);
    CHECK(!gguf_get_i64(f, "a.u64", &i64));
    CHECK(gguf_get_i64(f, "a.i64", &i64) && i64 == INT64_MIN);
    CHECK(gguf_get_f32(f, "a.f32", &f32) && f32 == 0.125f);
    CHECK(!gguf_get_f32(f, "a.f64", &f32)); /* 0.1 has no exact f32 */
    CHECK(gguf_find_kv(f, "a.f64")->value.v.f64 == 0.1);
    CHECK(gguf_get_f32(f, "a.i32", &f32) && f32 == -7.0f);
    CHECK(gguf_get_bool(f, "a.bool", &b) && b);
    CHECK(gguf_get_str(f, "a.str", &s) && s.len == 6 && memcmp(s.data, "h\xc3\xa9llo", 6) == 0);
    CHECK(gguf_get_u32(f, "a.u8", &u32) && u32 == 200);
    CHECK(gguf_get_i64(f, "a.i8", &i64) && i64 == -100);
    CHECK(gguf_get_u32(f, "a.u16", &u32) && u32 == 65000);
    CHECK(gguf_get_i64(f, "a.i16", &i64) && i64 == -30000);
    CHECK(gguf_get_u32(f, "a.replaced", &u32) && u32 == 2);
    CHECK(!gguf_get_u32(f, "absent", &u32));
    CHECK(!gguf_get_str(f, "a.u32", &s));
    const struct gguf_value *a = gguf_get_arr(f, "arr.i32", GGUF_T_I32);
    CHECK(a && a->v.arr.n == 3 && gguf_arr_i64(a, 1) == -2 && gguf_arr_i64(a, 2) == 3);
    CHECK(gguf_get_arr(f, "arr.i32", GGUF_T_U32) == NULL);
    a = gguf_get_arr(f, "arr.f32", GGUF_T_F32);
    CHECK(a && a->v.arr.n == 2 && gguf_arr_f64(a, 1) == -2.25);
    a = gguf_get_arr(f, "arr.bool", GGUF_T_BOOL);
    CHECK(a && gguf_arr_i64(a, 0) == 1 && gguf_arr_i64(a, 1) == 0);
    a = gguf_get_arr(f, "arr.f64", GGUF_T_F64);
    CHECK(a && gguf_arr_f64(a, 0) == 3.5);
    a = gguf_get_arr(f, "arr.empty", GGUF_T_U8);
    CHECK(a && a->v.arr.n == 0);
    a = gguf_get_arr(f, "arr.str", GGUF_T_STRING);
    CHECK(a && a->v.arr.n == 3 && a->v.arr.strs[2].len == 3 &&
          memcmp(a->v.arr.strs[2].data, "xyz", 3) == 0 && a->v.arr.strs[1].len == 0);
    a = gguf_get_arr(f, "arr.nested", GGUF_T_ARRAY);
    CHECK(a && a->v.arr.n == 3);
    if (a && a->v.arr.n == 3) {
        const struct gguf_value *it = a->v.arr.items;
        CHECK(it[0].v.arr.type == GGUF_T_U16 && it[0].v.arr.n == 2 && gguf_arr_i64(&it[0], 1) == 2);
        CHECK(it[1].v.arr.type == GGUF_T_STRING && it[1].v.arr.strs[1].data[0] == 'q');
        CHECK(it[2].v.arr.type == GGUF_T_ARRAY && it[2].v.arr.n == 1 &&
              gguf_arr_i64(&it[2].v.arr.items[0], 0) == -5);
    }
    CHECK_EQ_INT(gguf_n_tensors(f), 2);
    const struct gguf_tensor *t = gguf_find_tensor(f, "t.f32");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 32 && t->ne[1] == 2 && t->ne[2] == 1 &&
          t->size == sizeof t0 && memcmp(t->data, t0, sizeof t0) == 0);
    CHECK(t && (uintptr_t)((const uint8_t *)t->data - buf) % 32 == 0);
    t = gguf_find_tensor(f, "t.q8_0");
    CHECK(t && t->type == QT_Q8_0 && t->size == sizeof q && t->offset % 32 == 0 &&
          memcmp(t->data, q, sizeof q) == 0);
    CHECK(gguf_find_tensor(f, "t.none") == NULL);

    /* Write the file back from what was read: the same bytes. */
    struct gguf_writer *w2 = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++)
        gguf_writer_copy_kv(w2, gguf_kv_at(f, i));
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *ti = gguf_tensor_at(f, i);
        gguf_writer_add_tensor_ref(w2, ti->name, ti->type, ti->n_dims, ti->ne, ti->data, ti->size);
    }
    size_t size2;
    uint8_t *buf2 = build(w2, &size2);
    CHECK(size2 == size && buf2 && memcmp(buf, buf2, size) == 0);
    free(buf2);
    gguf_close(f);
    free(buf);
}

/* ---------------------------------------------------------------- shared files */

/* Copies every key/value and tensor of f into a new file: the writer lays it out as
 * gguf-py and llama.cpp do, so the copy must equal the original byte for byte. */
static void check_rewrite_identical(const struct gguf_file *f, const char *path)
{
    struct gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++)
        gguf_writer_copy_kv(w, gguf_kv_at(f, i));
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size);
    }
    size_t size;
    uint8_t *buf = build(w, &size);
    char *orig;
    size_t orig_size;
    struct kn_err err = {0};
    CHECKF(kn_read_file(path, (size_t)1 << 30, &orig, &orig_size, &err) == KN_OK, "%s", err.msg);
    CHECKF(buf && size == orig_size && memcmp(buf, orig, size) == 0,
           "%s: rewritten file differs (%zu vs %zu bytes)", path, size, orig_size);
    free(orig);
    free(buf);
}

static void test_shared_files(void)
{
    char dir[512], path[1024];
    snprintf(dir, sizeof dir, "%s/vocab", check_data_dir());
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "cannot open %s", dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct gguf_file *f;
        struct kn_err err = {0};
        CHECKF(gguf_open(&f, path, &err) == KN_OK, "%s", err.msg);
        if (f) {
            struct gguf_str model;
            CHECKF(gguf_get_str(f, "tokenizer.ggml.model", &model), "%s: no tokenizer", path);
            CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_T_STRING) != NULL);
            check_rewrite_identical(f, path);
            gguf_close(f);
        }
        n++;
    }
    if (d)
        closedir(d);
    CHECKF(n >= 10, "only %d vocab files", n);

    snprintf(path, sizeof path, "%s/models/aidreams260K.gguf", check_data_dir());
    struct gguf_file *f;
    struct kn_err err = {0};
    CHECKF(gguf_open(&f, path, &err) == KN_OK, "%s", err.msg);
    if (f) {
        struct gguf_str arch;
        CHECK(gguf_get_str(f, "general.architecture", &arch) && arch.len == 5 &&
              memcmp(arch.data, "llama", 5) == 0);
        CHECK_EQ_INT(gguf_n_tensors(f), 39);
        const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
        CHECK(t && t->ne[0] == 64 && t->ne[1] == 512);
        check_rewrite_identical(f, path);
        gguf_close(f);
    }
    /* A missing file is an I/O error naming the path. */
    CHECK(gguf_open(&f, "/nonexistent/x.gguf", &err) == KN_E_IO && f == NULL);
    CHECK(strstr(err.msg, "/nonexistent/x.gguf") != NULL);
}

/* ---------------------------------------------------------------- raw builder */

/* Builds malformed files byte by byte: the writer refuses to make them. */
struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np)
            abort();
        b->p = np;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u8(struct bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_sn(struct bb *b, const char *s, uint64_t n)
{
    bb_u64(b, n);
    bb_put(b, s, (size_t)n);
}
static void bb_s(struct bb *b, const char *s) { bb_sn(b, s, strlen(s)); }
static void bb_zeros(struct bb *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bb_u8(b, 0);
}
static void bb_pad(struct bb *b, size_t align) { bb_zeros(b, (align - b->n % align) % align); }
static void bb_header(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_tinfo(struct bb *b, const char *name, uint32_t n_dims, const int64_t *ne,
                     uint32_t type, uint64_t offset)
{
    bb_s(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        bb_u64(b, (uint64_t)ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}

/* One tensor info (a 2-D shape unless n_dims says otherwise), then data_bytes zeros. */
static void tensor_case(uint32_t n_dims, int64_t ne0, int64_t ne1, uint32_t type, uint64_t offset,
                        size_t data_bytes, enum kn_status want, const char *phrase, const char *what)
{
    struct bb b = {0};
    int64_t ne[5] = {ne0, ne1, 1, 1, 1};
    bb_header(&b, 3, 1, 0);
    bb_tinfo(&b, "blk.0.w", n_dims, ne, type, offset);
    bb_pad(&b, 32);
    bb_zeros(&b, data_bytes);
    expect_fail(b.p, b.n, want, phrase, what);
    free(b.p);
}

/* One key/value: key, then a type tag, then raw payload bytes. */
static void kv_case(const char *key, size_t key_len, uint32_t type, const void *payload, size_t n,
                    enum kn_status want, const char *phrase, const char *what)
{
    struct bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_sn(&b, key, key_len);
    bb_u32(&b, type);
    bb_put(&b, payload, n);
    expect_fail(b.p, b.n, want, phrase, what);
    free(b.p);
}

static int kinds; /* malformed kinds exercised, reported at the end */

static void test_header_rejects(void)
{
    struct bb b = {0};
    expect_fail((const uint8_t *)"", 0, KN_E_FORMAT, "expected 'GGUF'", "empty file"), kinds++;
    expect_fail((const uint8_t *)"GG", 2, KN_E_FORMAT, "expected 'GGUF'", "2-byte file"), kinds++;
    bb_header(&b, 3, 0, 0);
    memcpy(b.p, "GGML", 4);
    expect_fail(b.p, b.n, KN_E_FORMAT, "first 4 bytes are 'GGML'", "bad magic"), kinds++;
    bb_header(&b, 1, 0, 0);
    expect_fail(b.p, b.n, KN_E_UNSUPPORTED, "version 1 at byte 4 is not supported", "v1"), kinds++;
    bb_header(&b, 4, 0, 0);
    expect_fail(b.p, b.n, KN_E_UNSUPPORTED, "expected 2 or 3", "v4"), kinds++;
    bb_header(&b, 0, 0, 0);
    expect_fail(b.p, b.n, KN_E_UNSUPPORTED, "expected 2 or 3", "v0"), kinds++;
    bb_header(&b, 0x03000000, 0, 0);
    expect_fail(b.p, b.n, KN_E_UNSUPPORTED, "big-endian", "byte-swapped version"), kinds++;
    bb_header(&b, 3, 0, 0);
    expect_fail(b.p, 12, KN_E_FORMAT, "truncated at byte 8: the tensor count needs 8 bytes",
                "header cut in the tensor count"), kinds++;
    expect_fail(b.p, 20, KN_E_FORMAT, "truncated at byte 16", "header cut in the kv count");
    bb_header(&b, 3, (uint64_t)-1, 0);
    expect_fail(b.p, b.n, KN_E_FORMAT, "tensor count at byte 8 is negative", "negative tensors"),
        kinds++;
    bb_header(&b, 3, 0, (uint64_t)INT64_MIN);
    expect_fail(b.p, b.n, KN_E_FORMAT, "count at byte 16 is negative", "negative kvs"), kinds++;
    /* Huge counts fail before anything is allocated for them. */
    bb_header(&b, 3, 0, (uint64_t)1 << 40);
    bb_zeros(&b, 100);
    expect_fail(b.p, b.n, KN_E_FORMAT, "key/value count at byte 16 is 1099511627776 but only 100",
                "huge kv count"), kinds++;
    bb_header(&b, 3, (uint64_t)INT64_MAX, 0);
    expect_fail(b.p, b.n, KN_E_FORMAT, "tensor count at byte 8 is 9223372036854775807",
                "huge tensor count"), kinds++;
    /* A version 2 file is read (the layout is the same as version 3). */
    bb_header(&b, 2, 0, 0);
    struct gguf_file *f = open_ok(b.p, b.n, "v2");
    CHECK(f && gguf_version(f) == 2 && gguf_n_kv(f) == 0);
    gguf_close(f);
    free(b.p);
}

static void test_kv_rejects(void)
{
    uint8_t u32v[4] = {1, 0, 0, 0};
    kv_case("", 0, GGUF_T_U32, u32v, 4, KN_E_FORMAT, "key #0 at byte 24 is empty", "empty key"),
        kinds++;
    kv_case("a\0b", 3, GGUF_T_U32, u32v, 4, KN_E_FORMAT, "contains a NUL byte", "NUL in key"),
        kinds++;
    kv_case("a\xc0\xaf" "b", 4, GGUF_T_U32, u32v, 4, KN_E_FORMAT, "not valid UTF-8", "overlong key"),
        kinds++;
    kv_case("a\x80", 2, GGUF_T_U32, u32v, 4, KN_E_FORMAT, "not valid UTF-8", "stray continuation");
    kv_case("\xed\xa0\x80", 3, GGUF_T_U32, u32v, 4, KN_E_FORMAT, "not valid UTF-8", "surrogate");
    kv_case("\xe2\x82", 2, GGUF_T_U32, u32v, 4, KN_E_FORMAT, "not valid UTF-8", "cut sequence");
    kv_case("\xf4\x90\x80\x80", 4, GGUF_T_U32, u32v, 4, KN_E_FORMAT, "not valid UTF-8", "> U+10FFFF");
    CHECK(gguf_utf8_valid("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 12));
    kv_case("k", 1, 13, u32v, 4, KN_E_FORMAT, "key 'k': unknown value type 13 at byte 33",
            "unknown value type"), kinds++;
    kv_case("k", 1, 0x80000000u, u32v, 4, KN_E_FORMAT, "unknown value type", "negative value type");
    kv_case("k", 1, GGUF_T_U32, u32v, 3, KN_E_FORMAT, "the u32 value of key 'k' needs 4 bytes",
            "truncated u32"), kinds++;
    uint8_t two = 2;
    kv_case("k", 1, GGUF_T_BOOL, &two, 1, KN_E_FORMAT, "must be 0 or 1", "bool 2"), kinds++;
    {
        struct bb p = {0};
        bb_u64(&p, 1000);
        bb_put(&p, "abc", 3);
        kv_case("k", 1, GGUF_T_STRING, p.p, p.n, KN_E_FORMAT, "claims 1000 bytes but the file has only 3",
                "string past EOF"), kinds++;
        p.n = 0;
        bb_u64(&p, UINT64_MAX);
        kv_case("k", 1, GGUF_T_STRING, p.p, p.n, KN_E_FORMAT, "claims 18446744073709551615 bytes",
                "string length 2^64-1");
        p.n = 0;
        bb_u32(&p, 77);
        bb_u64(&p, 0);
        kv_case("k", 1, GGUF_T_ARRAY, p.p, p.n, KN_E_FORMAT, "unknown array element type 77",
                "unknown element type"), kinds++;
        p.n = 0;
        bb_u32(&p, GGUF_T_U32);
        bb_u64(&p, (uint64_t)1 << 62);
        bb_zeros(&p, 16);
        kv_case("k", 1, GGUF_T_ARRAY, p.p, p.n, KN_E_FORMAT, "claims 4611686018427387904 elements",
                "huge scalar array"), kinds++;
        p.n = 0;
        bb_u32(&p, GGUF_T_STRING);
        bb_u64(&p, 1000);
        bb_zeros(&p, 16);
        kv_case("k", 1, GGUF_T_ARRAY, p.p, p.n, KN_E_FORMAT, "claims 1000 elements of type string",
                "huge string array"), kinds++;
        p.n = 0;
        bb_u32(&p, GGUF_T_STRING);
        bb_u64(&p, 2);
        bb_s(&p, "ok");
        bb_u64(&p, 99);
        kv_case("k", 1, GGUF_T_ARRAY, p.p, p.n, KN_E_FORMAT, "claims 99 bytes",
                "second string past EOF"), kinds++;
        p.n = 0;
        bb_u32(&p, GGUF_T_ARRAY);
        bb_u64(&p, 1u << 20);
        bb_zeros(&p, 24);
        kv_case("k", 1, GGUF_T_ARRAY, p.p, p.n, KN_E_FORMAT, "claims 1048576 elements of type array",
                "huge nested array"), kinds++;
        p.n = 0;
        bb_u32(&p, GGUF_T_BOOL);
        bb_u64(&p, 3);
        bb_u8(&p, 1);
        bb_u8(&p, 0);
        bb_u8(&p, 5);
        kv_case("k", 1, GGUF_T_ARRAY, p.p, p.n, KN_E_FORMAT, "bool element 2 at byte", "bool array 5"),
            kinds++;
        /* Arrays nested 20 deep: valid GGUF, but past the reader's limit. */
        p.n = 0;
        for (int i = 0; i < 20; i++) {
            bb_u32(&p, GGUF_T_ARRAY);
            bb_u64(&p, 1);
        }
        bb_u32(&p, GGUF_T_U8);
        bb_u64(&p, 0);
        kv_case("k", 1, GGUF_T_ARRAY, p.p, p.n, KN_E_UNSUPPORTED, "arrays nested more than 8 deep",
                "deep nesting"), kinds++;
        free(p.p);
    }
    /* A key longer than GGUF allows, and one whose length runs past the file. */
    {
        struct bb b = {0};
        bb_header(&b, 3, 0, 1);
        bb_u64(&b, 70000);
        bb_zeros(&b, 70010);
        expect_fail(b.p, b.n, KN_E_FORMAT, "70000 bytes long; at most 65535", "key too long"), kinds++;
        bb_header(&b, 3, 0, 1);
        bb_u64(&b, 50);
        bb_put(&b, "abcdef", 6);
        expect_fail(b.p, b.n, KN_E_FORMAT, "truncated at byte 32: key #0 needs 50 bytes",
                    "key past EOF"), kinds++;
        /* Duplicate keys. */
        bb_header(&b, 3, 0, 3);
        bb_s(&b, "x.a");
        bb_u32(&b, GGUF_T_U8);
        bb_u8(&b, 1);
        bb_s(&b, "x.b");
        bb_u32(&b, GGUF_T_U8);
        bb_u8(&b, 1);
        bb_s(&b, "x.a");
        bb_u32(&b, GGUF_T_STRING);
        bb_s(&b, "again");
        expect_fail(b.p, b.n, KN_E_FORMAT, "key 'x.a' appears twice (key/values #0 and #2)",
                    "duplicate key"), kinds++;
        /* general.alignment: wrong type, zero, not a power of two. */
        bb_header(&b, 3, 0, 1);
        bb_s(&b, "general.alignment");
        bb_u32(&b, GGUF_T_U64);
        bb_u64(&b, 32);
        expect_fail(b.p, b.n, KN_E_FORMAT, "'general.alignment' has type u64; expected u32",
                    "alignment type"), kinds++;
        uint32_t bad[2] = {0, 48};
        for (int i = 0; i < 2; i++) {
            bb_header(&b, 3, 0, 1);
            bb_s(&b, "general.alignment");
            bb_u32(&b, GGUF_T_U32);
            bb_u32(&b, bad[i]);
            expect_fail(b.p, b.n, KN_E_FORMAT, "expected a nonzero power of two",
                        "alignment value"), kinds++;
        }
        /* A string value that is not UTF-8 is data (token pieces may be raw bytes): read. */
        bb_header(&b, 3, 0, 1);
        bb_s(&b, "k");
        bb_u32(&b, GGUF_T_STRING);
        bb_s(&b, "\xff\xfe");
        struct gguf_file *f = open_ok(b.p, b.n, "non-UTF-8 string value");
        gguf_close(f);
        free(b.p);
    }
}

static void test_tensor_rejects(void)
{
    tensor_case(0, 32, 1, QT_F32, 0, 128, KN_E_FORMAT, "rank 0 at byte", "rank 0"), kinds++;
    tensor_case(5, 32, 1, QT_F32, 0, 128, KN_E_FORMAT, "rank 5 at byte", "rank 5"), kinds++;
    tensor_case(2, 32, 0, QT_F32, 0, 128, KN_E_FORMAT, "dimension 1 at byte 51 is 0",
                "zero-size"), kinds++;
    tensor_case(2, -32, 1, QT_F32, 0, 128, KN_E_FORMAT, "is -32; expected at least 1 (negative",
                "negative dim"), kinds++;
    tensor_case(2, (int64_t)1 << 32, (int64_t)1 << 32, QT_F32, 0, 128, KN_E_FORMAT,
                "more than 2^63 elements", "element count overflow"), kinds++;
    tensor_case(2, (int64_t)1 << 31, (int64_t)1 << 31, QT_F32, 0, 128, KN_E_FORMAT,
                "has a byte size that overflows 64 bits", "byte size overflow"), kinds++;
    tensor_case(2, 1 << 20, 1 << 20, QT_Q4_K, 0, 128, KN_E_FORMAT,
                "needs 618475290624 bytes but the whole file has 224: truncated download",
                "size past the file"), kinds++;
    tensor_case(2, 32, 1, 4, 0, 128, KN_E_UNSUPPORTED, "unknown GGML type id 4", "retired type"),
        kinds++;
    tensor_case(2, 32, 1, 41, 0, 128, KN_E_UNSUPPORTED, "unknown GGML type id 41", "unknown type");
    tensor_case(2, 32, 1, 0xFFFFFFFFu, 0, 128, KN_E_UNSUPPORTED, "unknown GGML type",
                "type -1");
    tensor_case(2, 100, 1, QT_Q4_K, 0, 1000, KN_E_FORMAT,
                "row length 100 is not a multiple of the q4_K block size 256", "ragged row"),
        kinds++;
    tensor_case(2, 32, 1, QT_F32, 8, 200, KN_E_FORMAT,
                "data offset 8 (at byte 63) is not a multiple of the alignment 32", "misaligned"),
        kinds++;
    tensor_case(2, 32, 1, QT_F32, 0, 100, KN_E_FORMAT,
                "tensor blk.0.w ends at byte 224 but the file has 196 bytes: truncated download?",
                "truncated data"), kinds++;
    tensor_case(2, 32, 1, QT_F32, (uint64_t)-32, 200, KN_E_FORMAT, "lies far past the end",
                "offset near 2^64"), kinds++;
    tensor_case(2, 32, 1, QT_F32, 1024, 200, KN_E_FORMAT, "ends at byte 1248", "offset past EOF");

    struct bb b = {0};
    int64_t ne[2] = {32, 1};
    /* The data section must start inside the file. */
    int64_t ne_small[2] = {4, 1};
    bb_header(&b, 3, 1, 0);
    bb_tinfo(&b, "w", 2, ne_small, QT_F32, 0);
    expect_fail(b.p, b.n, KN_E_FORMAT, "the tensor data should start at byte 96 but the file has 65",
                "no data section"), kinds++;
    /* Overlapping tensors: b starts inside a. */
    bb_header(&b, 3, 3, 0);
    bb_tinfo(&b, "a", 2, ne, QT_F32, 0);
    int64_t ne_b[1] = {64};
    bb_tinfo(&b, "b", 1, ne_b, QT_F32, 96);
    bb_tinfo(&b, "c", 1, ne_b, QT_F32, 64);
    bb_pad(&b, 32);
    bb_zeros(&b, 512);
    expect_fail(b.p, b.n, KN_E_FORMAT, "tensor c (data bytes", "overlap"), kinds++;
    /* Duplicate tensor names. */
    bb_header(&b, 3, 2, 0);
    bb_tinfo(&b, "same", 2, ne, QT_F32, 0);
    bb_tinfo(&b, "same", 2, ne, QT_F32, 128);
    bb_pad(&b, 32);
    bb_zeros(&b, 256);
    expect_fail(b.p, b.n, KN_E_FORMAT, "tensor same appears twice (tensor infos #0 and #1)",
                "duplicate tensor"), kinds++;
    /* Names: too long, empty, not UTF-8. */
    char longname[66];
    memset(longname, 'n', 65);
    longname[65] = 0;
    bb_header(&b, 3, 1, 0);
    bb_tinfo(&b, longname, 2, ne, QT_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    expect_fail(b.p, b.n, KN_E_FORMAT, "tensor name #0 at byte 24 is 65 bytes long; at most 64",
                "long tensor name"), kinds++;
    bb_header(&b, 3, 1, 0);
    bb_tinfo(&b, "", 2, ne, QT_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    expect_fail(b.p, b.n, KN_E_FORMAT, "tensor name #0 at byte 24 is empty", "empty tensor name"),
        kinds++;
    bb_header(&b, 3, 1, 0);
    bb_tinfo(&b, "w\xfe", 2, ne, QT_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    expect_fail(b.p, b.n, KN_E_FORMAT, "tensor name #0 at byte 24 is not valid UTF-8",
                "bad UTF-8 tensor name"), kinds++;
    /* Alignment from general.alignment governs offsets: 32 is not a multiple of 64. */
    bb_header(&b, 3, 2, 1);
    bb_s(&b, "general.alignment");
    bb_u32(&b, GGUF_T_U32);
    bb_u32(&b, 64);
    bb_tinfo(&b, "a", 1, ne, QT_F32, 0);
    bb_tinfo(&b, "b", 1, ne, QT_F32, 32);
    bb_pad(&b, 64);
    bb_zeros(&b, 256);
    expect_fail(b.p, b.n, KN_E_FORMAT, "tensor b: data offset 32 (at byte", "offset vs alignment"),
        kinds++;
    /* The same with offset 128 and every dimension: read, with data 64-aligned. */
    int64_t ne4[4] = {2, 2, 2, 2};
    bb_header(&b, 3, 2, 1);
    bb_s(&b, "general.alignment");
    bb_u32(&b, GGUF_T_U32);
    bb_u32(&b, 64);
    bb_tinfo(&b, "a", 1, ne, QT_F32, 0);
    bb_tinfo(&b, "b", 4, ne4, QT_BF16, 128);
    bb_pad(&b, 64);
    bb_zeros(&b, 160);
    struct gguf_file *f = open_ok(b.p, b.n, "alignment 64");
    if (f) {
        CHECK_EQ_INT(gguf_alignment(f), 64);
        CHECK_EQ_INT(gguf_data_offset(f) % 64, 0);
        const struct gguf_tensor *t = gguf_find_tensor(f, "b");
        CHECK(t && t->n_dims == 4 && t->ne[3] == 2 && t->size == 32 && t->offset == 128);
        gguf_close(f);
    }
    free(b.p);
}

/* Every GGML type's size as llama.cpp defines it (ggml.c's type_traits). */
static void test_type_sizes(void)
{
    static const struct { uint32_t t, blck, bytes; } want[] = {
        {QT_F32, 1, 4},      {QT_F16, 1, 2},       {QT_Q4_0, 32, 18},    {QT_Q4_1, 32, 20},
        {QT_Q5_0, 32, 22},   {QT_Q5_1, 32, 24},    {QT_Q8_0, 32, 34},    {QT_Q8_1, 32, 36},
        {QT_Q2_K, 256, 84},  {QT_Q3_K, 256, 110},  {QT_Q4_K, 256, 144},  {QT_Q5_K, 256, 176},
        {QT_Q6_K, 256, 210}, {QT_Q8_K, 256, 292},  {QT_IQ2_XXS, 256, 66}, {QT_IQ2_XS, 256, 74},
        {QT_IQ3_XXS, 256, 98}, {QT_IQ1_S, 256, 50}, {QT_IQ4_NL, 32, 18}, {QT_IQ3_S, 256, 110},
        {QT_IQ2_S, 256, 82}, {QT_IQ4_XS, 256, 136}, {QT_I8, 1, 1},       {QT_I16, 1, 2},
        {QT_I32, 1, 4},      {QT_I64, 1, 8},       {QT_F64, 1, 8},       {QT_IQ1_M, 256, 56},
        {QT_BF16, 1, 2},     {QT_TQ1_0, 256, 54},  {QT_TQ2_0, 256, 66},  {QT_MXFP4, 32, 17},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        /* A 2-row tensor of each type written and read back has the expected size. */
        uint64_t size = (uint64_t)want[i].bytes * 2 * 2;
        uint8_t *data = calloc(1, size);
        int64_t ne[2] = {(int64_t)want[i].blck * 2, 2};
        struct gguf_writer *w = gguf_writer_new();
        gguf_writer_add_tensor_ref(w, "t", want[i].t, 2, ne, data, size);
        size_t n;
        uint8_t *buf = build(w, &n);
        struct gguf_file *f = open_ok(buf, n, quant_type_name(want[i].t));
        const struct gguf_tensor *t = f ? gguf_tensor_at(f, 0) : NULL;
        CHECKF(t && t->size == size && t->type == want[i].t, "type %s", quant_type_name(want[i].t));
        gguf_close(f);
        free(buf);
        free(data);
    }
}

/* A small valid file cut at every byte: each prefix fails cleanly (or, once every
 * tensor's bytes are in, succeeds: trailing padding is optional). */
static void test_truncation(void)
{
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "llama.block_count", 2);
    struct gguf_str toks[3] = {{"<s>", 3}, {"a", 1}, {"bc", 2}};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    float sc[3] = {0, -1, -2};
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_F32, sc, 3);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t ne[1] = {8};
    gguf_writer_add_tensor(w, "x", QT_F32, 1, ne, x, sizeof x);
    uint16_t h[3] = {1, 2, 3};
    int64_t ne3[1] = {3};
    gguf_writer_add_tensor(w, "h", QT_F16, 1, ne3, h, sizeof h);
    size_t size;
    uint8_t *buf = build(w, &size);
    struct gguf_file *f = open_ok(buf, size, "truncation base");
    uint64_t need = 0;
    for (int64_t i = 0; f && i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        if (gguf_data_offset(f) + t->offset + t->size > need)
            need = gguf_data_offset(f) + t->offset + t->size;
    }
    gguf_close(f);
    int failures_before = check_failures;
    for (size_t n = 0; n < size && check_failures - failures_before < 5; n++) {
        uint8_t *cut = malloc(n ? n : 1); /* exactly n bytes: ASan sees any over-read */
        memcpy(cut, buf, n);
        if (n >= need) {
            f = open_ok(cut, n, "cut after the last tensor");
            gguf_close(f);
        } else {
            expect_fail(cut, n, KN_E_FORMAT, n < 4 ? "expected 'GGUF'" : "truncated", "cut");
        }
        free(cut);
    }
    kinds++;
    free(buf);
}

/* Every single-bit flip of a small valid file: no crash, no leak, and on failure a
 * message naming the file with a format or unsupported status. */
static void test_bit_flips(void)
{
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "general.alignment", 32);
    int8_t bytes[4] = {1, -1, 2, -2};
    gguf_writer_set_arr(w, "k.i8", GGUF_T_I8, bytes, 4);
    gguf_writer_set_bool(w, "k.b", false);
    float x[32] = {0};
    int64_t ne[2] = {16, 2};
    gguf_writer_add_tensor(w, "x", QT_F32, 2, ne, x, sizeof x);
    size_t size;
    uint8_t *buf = build(w, &size);
    int ok = 0, rejected = 0;
    for (size_t i = 0; i < size * 8; i++) {
        buf[i / 8] ^= (uint8_t)(1u << (i % 8));
        struct gguf_file *f = NULL;
        struct kn_err err = {0};
        enum kn_status st = gguf_open_memory(&f, buf, size, "flip.gguf", &err);
        if (st == KN_OK) {
            ok++;
            gguf_close(f);
        } else {
            rejected++;
            CHECKF((st == KN_E_FORMAT || st == KN_E_UNSUPPORTED) && f == NULL &&
                       strncmp(err.msg, "flip.gguf: ", 11) == 0,
                   "bit %zu: %s: %s", i, kn_status_str(st), err.msg);
        }
        buf[i / 8] ^= (uint8_t)(1u << (i % 8));
    }
    CHECK(ok > 0 && rejected > 0);
    kinds++;
    free(buf);
}

static void test_writer_rejects(void)
{
    struct kn_err err = {0};
    void *img;
    size_t n;
    struct gguf_writer *w = gguf_writer_new();
    float x[4] = {0};
    int64_t ne[1] = {4};
    gguf_writer_add_tensor(w, "x", QT_F32, 1, ne, x, 8);
    CHECK(gguf_writer_write_memory(w, &img, &n, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "8 bytes given but its shape and type need 16") != NULL);
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "x", QT_F32, 1, ne, x, 16);
    gguf_writer_add_tensor(w, "x", QT_F32, 1, ne, x, 16);
    CHECK(gguf_writer_write_memory(w, &img, &n, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "tensor x added twice") != NULL);
    CHECK(gguf_writer_write(w, "/tmp/kn_never_written.gguf", &err) == KN_E_ARG);
    CHECK(access("/tmp/kn_never_written.gguf", F_OK) != 0);
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 24);
    CHECK(gguf_writer_write_memory(w, &img, &n, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "power of two") != NULL);
    gguf_writer_free(w);
    w = gguf_writer_new();
    int64_t ne_q[1] = {100};
    gguf_writer_add_tensor_ref(w, "q", QT_Q4_0, 1, ne_q, x, 16);
    CHECK(gguf_writer_write_memory(w, &img, &n, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "not a multiple of the q4_0 block size") != NULL);
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_writer_set_u32(w, "bad\xff", 1);
    CHECK(gguf_writer_write_memory(w, &img, &n, &err) == KN_E_ARG);
    gguf_writer_free(w);
}

/* Writes to a real path with alignment 64 and fill callbacks; reads it back. */
static enum kn_status fill_ramp(void *ctx, const char *name, void *dst, uint64_t size,
                                struct kn_err *err)
{
    (void)err;
    int *calls = ctx;
    (*calls)++;
    uint8_t *p = dst;
    for (uint64_t i = 0; i < size; i++)
        p[i] = (uint8_t)(i + (uint8_t)name[0]);
    return KN_OK;
}

static enum kn_status fill_fail(void *ctx, const char *name, void *dst, uint64_t size,
                                struct kn_err *err)
{
    (void)ctx, (void)dst, (void)size;
    return kn_fail(err, KN_E_CANCELLED, "no data for %s", name);
}

static void test_write_file(void)
{
    char path[] = "/tmp/kn_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 64);
    int calls = 0;
    int64_t ne[2] = {32, 3};
    gguf_writer_add_tensor_fill(w, "a", QT_Q8_0, 2, ne, fill_ramp, &calls);
    gguf_writer_add_tensor_fill(w, "b", QT_F16, 2, ne, fill_ramp, &calls);
    struct kn_err err = {0};
    CHECKF(gguf_writer_write(w, path, &err) == KN_OK, "%s", err.msg);
    gguf_writer_free(w);
    CHECK_EQ_INT(calls, 2);
    struct gguf_file *f;
    CHECKF(gguf_open(&f, path, &err) == KN_OK, "%s", err.msg);
    if (f) {
        CHECK_EQ_INT(gguf_alignment(f), 64);
        const struct gguf_tensor *a = gguf_find_tensor(f, "a"), *b = gguf_find_tensor(f, "b");
        CHECK(a && a->size == 3 * 34 && ((const uint8_t *)a->data)[5] == (uint8_t)(5 + 'a'));
        CHECK(b && b->offset == 128 && b->size == 192 &&
              ((const uint8_t *)b->data)[191] == (uint8_t)(191 + 'b'));
        CHECK((gguf_file_size(f) - gguf_data_offset(f)) % 64 == 0);
        gguf_close(f);
    }
    /* A failing fill leaves the old file in place and no temporary behind. */
    w = gguf_writer_new();
    gguf_writer_add_tensor_fill(w, "a", QT_F32, 2, ne, fill_fail, NULL);
    CHECK(gguf_writer_write(w, path, &err) == KN_E_CANCELLED);
    CHECK(strstr(err.msg, "no data for a") != NULL);
    gguf_writer_free(w);
    CHECKF(gguf_open(&f, path, &err) == KN_OK, "old file kept: %s", err.msg);
    gguf_close(f);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
    unlink(path);
}

int main(void)
{
    test_header_rejects();
    test_kv_rejects();
    test_tensor_rejects();
    test_truncation();
    test_bit_flips();
    test_type_sizes();
    test_writer_rejects();
    test_write_file();
    printf("%d kinds of malformed file rejected\n", kinds);
    CHECKF(kinds >= 30, "only %d kinds", kinds);
    test_round_trip();
    test_shared_files();
    CHECK_DONE();
}
