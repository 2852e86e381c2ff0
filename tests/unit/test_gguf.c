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

static void test_shared_files(void)
{
    char dir[512], path[1024];
    snprintf(dir, sizeof dir, "%s/vocab", check_shared_dir());
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
            gguf_close(f);
        }
        n++;
    }
    if (d)
        closedir(d);
    CHECKF(n >= 10, "only %d vocab files", n);

    snprintf(path, sizeof path, "%s/models/aidreams260K.gguf", check_shared_dir());
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
        gguf_close(f);
    }
    /* A missing file is an I/O error naming the path. */
    CHECK(gguf_open(&f, "/nonexistent/x.gguf", &err) == KN_E_IO && f == NULL);
    CHECK(strstr(err.msg, "/nonexistent/x.gguf") != NULL);
}

static void test_basic_rejects(void)
{
    expect_fail((const uint8_t *)"GGUX\3\0\0\0", 8, KN_E_FORMAT, "expected 'GGUF'", "bad magic");
    expect_fail((const uint8_t *)"GGUF\1\0\0\0", 8, KN_E_UNSUPPORTED, "version 1", "v1");
    expect_fail((const uint8_t *)"GGUF\3\0", 6, KN_E_FORMAT, "truncated at byte 4", "short");
}

int main(void)
{
    test_basic_rejects();
    test_round_trip();
    test_shared_files();
    CHECK_DONE();
}
