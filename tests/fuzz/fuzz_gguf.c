/* fuzz_gguf.c: libFuzzer target for the GGUF reader. Built with -DKN_FUZZ=ON and clang.
 *
 * For every input the reader must either fail with a message that names the input, or
 * succeed with a description that is self-consistent: every tensor's bytes lie inside
 * the image, look-ups find every key and tensor, and writing the parsed file back with
 * the writer and reading it again gives the same keys, values and tensors. Any breach
 * aborts, which libFuzzer reports as a crash. tests/unit/test_gguf_corpus.c replays
 * the corpus through fuzz_gguf_one() so CI covers it without clang. */
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_REQUIRE(c)                                                                   \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "fuzz_gguf: %s:%d: %s\n", __FILE__, __LINE__, #c);            \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static bool value_equal(const struct gguf_value *a, const struct gguf_value *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case GGUF_T_STRING:
        return a->v.str.len == b->v.str.len && memcmp(a->v.str.data, b->v.str.data, a->v.str.len) == 0;
    case GGUF_T_ARRAY: {
        if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n)
            return false;
        size_t esz = gguf_vtype_size(a->v.arr.type);
        if (esz)
            return memcmp(a->v.arr.data, b->v.arr.data, a->v.arr.n * esz) == 0;
        for (uint64_t i = 0; i < a->v.arr.n; i++) {
            if (a->v.arr.type == GGUF_T_STRING) {
                const struct gguf_str *x = &a->v.arr.strs[i], *y = &b->v.arr.strs[i];
                if (x->len != y->len || memcmp(x->data, y->data, x->len) != 0)
                    return false;
            } else if (!value_equal(&a->v.arr.items[i], &b->v.arr.items[i])) {
                return false;
            }
        }
        return true;
    }
    case GGUF_T_BOOL:
        return a->v.b == b->v.b;
    case GGUF_T_F32:
    case GGUF_T_F64:
        return memcmp(&a->v.f64, &b->v.f64, sizeof a->v.f64) == 0;
    default:
        return a->v.u64 == b->v.u64;
    }
}

/* Runs every typed getter on kv: conversions of hostile numbers (NaN, huge floats,
 * negative counts) must stay defined behaviour, which UBSan checks. */
static void exercise_getters(const struct gguf_file *f, const struct gguf_kv *kv)
{
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    bool b;
    struct gguf_str s;
    if (gguf_get_u32(f, kv->key, &u32))
        FUZZ_REQUIRE(gguf_get_u64(f, kv->key, &u64) && u64 == u32);
    if (gguf_get_i64(f, kv->key, &i64) && i64 >= 0)
        FUZZ_REQUIRE(gguf_get_u64(f, kv->key, &u64) && u64 == (uint64_t)i64);
    (void)gguf_get_f32(f, kv->key, &f32);
    FUZZ_REQUIRE(gguf_get_bool(f, kv->key, &b) == (kv->value.type == GGUF_T_BOOL));
    FUZZ_REQUIRE(gguf_get_str(f, kv->key, &s) == (kv->value.type == GGUF_T_STRING));
    if (kv->value.type == GGUF_T_ARRAY) {
        const struct gguf_value *a = gguf_get_arr(f, kv->key, kv->value.v.arr.type);
        FUZZ_REQUIRE(a == &kv->value);
        if (gguf_vtype_size(a->v.arr.type))
            for (uint64_t i = 0; i < a->v.arr.n && i < 64; i++)
                (void)(gguf_arr_i64(a, i) + gguf_arr_f64(a, i));
    }
}

/* Checks one input; returns 0 (libFuzzer's convention). */
static int fuzz_gguf_one(const uint8_t *data, size_t size)
{
    struct gguf_file *f = NULL;
    struct kn_err err = {0};
    enum kn_status st = gguf_open_memory(&f, data, size, "fuzz.gguf", &err);
    if (st != KN_OK) {
        FUZZ_REQUIRE(f == NULL);
        FUZZ_REQUIRE(err.status == st);
        FUZZ_REQUIRE(strncmp(err.msg, "fuzz.gguf: ", 11) == 0);
        FUZZ_REQUIRE(st == KN_E_FORMAT || st == KN_E_UNSUPPORTED);
        return 0;
    }
    const uint8_t *lo = data, *hi = data + size;
    struct gguf_writer *w = gguf_writer_new();
    FUZZ_REQUIRE(w != NULL);
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        FUZZ_REQUIRE(gguf_find_kv(f, kv->key) == kv);
        exercise_getters(f, kv);
        gguf_writer_copy_kv(w, kv);
    }
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        FUZZ_REQUIRE(gguf_find_tensor(f, t->name) == t);
        const uint8_t *p = t->data;
        FUZZ_REQUIRE(t->size > 0 && p >= lo && p <= hi && t->size <= (uint64_t)(hi - p));
        sink ^= p[0] ^ p[t->size - 1]; /* ASan flags any pointer that left the image */
        gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size);
    }
    (void)sink;
    void *img = NULL;
    size_t img_size = 0;
    st = gguf_writer_write_memory(w, &img, &img_size, &err);
    if (st != KN_OK)
        fprintf(stderr, "fuzz_gguf: rewrite failed: %s\n", err.msg);
    FUZZ_REQUIRE(st == KN_OK);
    struct gguf_file *g = NULL;
    st = gguf_open_memory(&g, img, img_size, "rewritten.gguf", &err);
    if (st != KN_OK)
        fprintf(stderr, "fuzz_gguf: reread failed: %s\n", err.msg);
    FUZZ_REQUIRE(st == KN_OK);
    FUZZ_REQUIRE(gguf_n_kv(g) == gguf_n_kv(f) && gguf_n_tensors(g) == gguf_n_tensors(f));
    FUZZ_REQUIRE(gguf_alignment(g) == gguf_alignment(f));
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const struct gguf_kv *a = gguf_kv_at(f, i), *b = gguf_kv_at(g, i);
        FUZZ_REQUIRE(strcmp(a->key, b->key) == 0 && value_equal(&a->value, &b->value));
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *a = gguf_tensor_at(f, i), *b = gguf_tensor_at(g, i);
        FUZZ_REQUIRE(strcmp(a->name, b->name) == 0 && a->type == b->type &&
                     a->n_dims == b->n_dims && a->size == b->size &&
                     memcmp(a->ne, b->ne, sizeof a->ne) == 0 &&
                     memcmp(a->data, b->data, a->size) == 0);
    }
    gguf_close(g);
    free(img);
    gguf_writer_free(w);
    gguf_close(f);
    return 0;
}

#ifndef FUZZ_GGUF_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_gguf_one(data, size);
}
#endif
