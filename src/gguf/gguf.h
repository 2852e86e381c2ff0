/* gguf.h: a GGUF v2/v3 reader that validates every byte before use, and a v3 writer.
 *
 * The reader maps the file and checks the header, every key/value pair, every tensor
 * info and the data section against the file size before returning; after gguf_open
 * succeeds every pointer it hands out lies inside the file. Strings in GGUF are not
 * NUL-terminated: keys and tensor names are copied (and checked to hold no NUL);
 * string values are (pointer, length) views into the map.
 *
 * What the reader accepts, beyond the layout: keys of 1..65535 bytes and tensor names
 * of 1..64 bytes, both valid UTF-8 without NUL, each unique; bools 0 or 1; arrays
 * nested at most 8 deep (deeper is KN_E_UNSUPPORTED); general.alignment, if present, a
 * u32 power of two; tensors of rank 1..4 with every dimension >= 1 (llama.cpp would
 * divide by a zero one), a known GGML type (else KN_E_UNSUPPORTED), a row length that
 * is a multiple of the type's block, offsets that are multiples of the alignment, and
 * bytes inside the file that no other tensor uses. String values are not checked for
 * UTF-8 (vocabularies may hold raw byte pieces). Failures are KN_E_FORMAT (malformed),
 * KN_E_UNSUPPORTED (v1, big-endian, newer version or type) or KN_E_IO (open/map), with
 * a message that starts with the file name and gives the byte offset. Allocations are
 * bounded by a small multiple of the file size whatever the counts say.
 *
 * Tensor data pointers are aligned to gguf_alignment() when the image is (a map is
 * page-aligned). */
#ifndef KN_GGUF_H
#define KN_GGUF_H

#include "../base/base.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

enum gguf_vtype {
    GGUF_T_U8 = 0,
    GGUF_T_I8 = 1,
    GGUF_T_U16 = 2,
    GGUF_T_I16 = 3,
    GGUF_T_U32 = 4,
    GGUF_T_I32 = 5,
    GGUF_T_F32 = 6,
    GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8,
    GGUF_T_ARRAY = 9,
    GGUF_T_U64 = 10,
    GGUF_T_I64 = 11,
    GGUF_T_F64 = 12,
    GGUF_T_COUNT,
};

const char *gguf_vtype_name(enum gguf_vtype t);
/* Bytes of one scalar of type t; 0 for strings, arrays and unknown types. */
size_t gguf_vtype_size(enum gguf_vtype t);
/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF). */
bool gguf_utf8_valid(const void *s, uint64_t n);

struct gguf_str {
    const char *data; /* not NUL-terminated */
    uint64_t len;
};

struct gguf_value {
    enum gguf_vtype type;
    union {
        uint64_t u64; /* every unsigned integer type, widened */
        int64_t i64;  /* every signed integer type, widened */
        double f64;   /* f32 and f64, widened */
        bool b;
        struct gguf_str str;
        struct {
            enum gguf_vtype type; /* element type */
            uint64_t n;           /* element count */
            const void *data;     /* scalars: the raw little-endian elements in the file */
            struct gguf_str *strs;     /* strings: n views (owned by the reader) */
            struct gguf_value *items;  /* nested arrays: n values (owned by the reader) */
        } arr;
    } v;
};

struct gguf_kv {
    char *key; /* NUL-terminated copy */
    struct gguf_value value;
};

struct gguf_tensor {
    char *name;        /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (K); unused dims are 1 */
    uint32_t type;     /* enum quant_type */
    uint64_t offset;   /* relative to the data section */
    uint64_t size;     /* bytes */
    const void *data;  /* inside the map */
};

struct gguf_file;

/* Opens and validates path. On failure *out is NULL and err names what is wrong. */
KN_MUST_USE enum kn_status gguf_open(struct gguf_file **out, const char *path, struct kn_err *err);
/* Validates a GGUF image in memory (not copied; must outlive the result). name is used
 * in messages. */
KN_MUST_USE enum kn_status gguf_open_memory(struct gguf_file **out, const void *data, size_t size,
                                            const char *name, struct kn_err *err);
void gguf_close(struct gguf_file *f);

/* The name used in messages (the path, or the name given to gguf_open_memory). */
const char *gguf_name(const struct gguf_file *f);
uint32_t gguf_version(const struct gguf_file *f);
uint64_t gguf_file_size(const struct gguf_file *f);
uint32_t gguf_alignment(const struct gguf_file *f);
uint64_t gguf_data_offset(const struct gguf_file *f);

int64_t gguf_n_kv(const struct gguf_file *f);
const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, int64_t i);
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);

/* Typed look-ups. Each returns false (leaving *out alone) when the key is absent or its
 * value cannot be represented exactly in the requested type. */
bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out);
bool gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out);
/* An array value of the given element type, or NULL. */
const struct gguf_value *gguf_get_arr(const struct gguf_file *f, const char *key,
                                      enum gguf_vtype elem_type);
/* Element i of a scalar array, widened like the getters above. */
int64_t gguf_arr_i64(const struct gguf_value *arr, uint64_t i);
double gguf_arr_f64(const struct gguf_value *arr, uint64_t i);

int64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, int64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* ---------------------------------------------------------------- file types */

/* general.file_type: what most tensors are quantized to (llama.cpp's llama_ftype ids,
 * which every GGUF producer writes). Ids that llama.cpp retired are absent. */
enum gguf_file_type {
    GGUF_FTYPE_ALL_F32 = 0,
    GGUF_FTYPE_MOSTLY_F16 = 1,
    GGUF_FTYPE_MOSTLY_Q4_0 = 2,
    GGUF_FTYPE_MOSTLY_Q4_1 = 3,
    GGUF_FTYPE_MOSTLY_Q8_0 = 7,
    GGUF_FTYPE_MOSTLY_Q5_0 = 8,
    GGUF_FTYPE_MOSTLY_Q5_1 = 9,
    GGUF_FTYPE_MOSTLY_Q2_K = 10,
    GGUF_FTYPE_MOSTLY_Q3_K_S = 11,
    GGUF_FTYPE_MOSTLY_Q3_K_M = 12,
    GGUF_FTYPE_MOSTLY_Q3_K_L = 13,
    GGUF_FTYPE_MOSTLY_Q4_K_S = 14,
    GGUF_FTYPE_MOSTLY_Q4_K_M = 15,
    GGUF_FTYPE_MOSTLY_Q5_K_S = 16,
    GGUF_FTYPE_MOSTLY_Q5_K_M = 17,
    GGUF_FTYPE_MOSTLY_Q6_K = 18,
    GGUF_FTYPE_MOSTLY_IQ2_XXS = 19,
    GGUF_FTYPE_MOSTLY_IQ2_XS = 20,
    GGUF_FTYPE_MOSTLY_Q2_K_S = 21,
    GGUF_FTYPE_MOSTLY_IQ3_XS = 22,
    GGUF_FTYPE_MOSTLY_IQ3_XXS = 23,
    GGUF_FTYPE_MOSTLY_IQ1_S = 24,
    GGUF_FTYPE_MOSTLY_IQ4_NL = 25,
    GGUF_FTYPE_MOSTLY_IQ3_S = 26,
    GGUF_FTYPE_MOSTLY_IQ3_M = 27,
    GGUF_FTYPE_MOSTLY_IQ2_S = 28,
    GGUF_FTYPE_MOSTLY_IQ2_M = 29,
    GGUF_FTYPE_MOSTLY_IQ4_XS = 30,
    GGUF_FTYPE_MOSTLY_IQ1_M = 31,
    GGUF_FTYPE_MOSTLY_BF16 = 32,
    GGUF_FTYPE_MOSTLY_TQ1_0 = 36,
    GGUF_FTYPE_MOSTLY_TQ2_0 = 37,
    GGUF_FTYPE_MOSTLY_MXFP4_MOE = 38,
};

/* llama.cpp's name for a file type ("Q4_K - Medium"), or NULL for an unknown id. */
const char *gguf_file_type_name(uint32_t ftype);
/* The file type a model whose weights are mostly of tensor type t would declare (Q4_K
 * gives Q4_K - Medium), for files without general.file_type; -1 if none fits. */
int64_t gguf_file_type_guess(uint32_t tensor_type);

/* ---------------------------------------------------------------- writer */

/* Builds a GGUF v3 file: key/values in insertion order (setting a key again replaces
 * its value in place), then tensor infos, then data, each tensor aligned to
 * general.alignment (default 32) and padded to it, as llama.cpp expects. The set and
 * add functions record the first failure (bad key or tensor, out of memory), which
 * gguf_writer_write then reports; calls after a failure are ignored. */
struct gguf_writer;

/* Produces the size bytes of tensor name into dst while the file is written. */
typedef enum kn_status (*gguf_tensor_fill_fn)(void *ctx, const char *name, void *dst,
                                              uint64_t size, struct kn_err *err);

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);
void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v);
void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
void gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v);
void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* An array of scalars of elem_type (n elements, raw little-endian at data). */
void gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                         const void *data, uint64_t n);
void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *strs,
                             uint64_t n);
/* Any value, deep-copied: the way to write nested arrays (v as the reader describes
 * them: scalar elements raw at arr.data, strings in arr.strs, arrays in arr.items). */
void gguf_writer_set_value(struct gguf_writer *w, const char *key, const struct gguf_value *v);
/* Copies a key/value from a file opened with the reader (for example a vocabulary). */
void gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv);
/* Adds a tensor; data (size bytes, as quant_row_size says) is copied. */
void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                            const int64_t *ne, const void *data, uint64_t size);
/* Adds a tensor without copying: data must stay valid until gguf_writer_write returns. */
void gguf_writer_add_tensor_ref(struct gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const int64_t *ne, const void *data,
                                uint64_t size);
/* Adds a tensor whose bytes fill() produces during gguf_writer_write, into a buffer of
 * the tensor's size reused for every such tensor: a multi-GB model needs only its
 * largest tensor in memory. ctx must stay valid until the write returns. */
void gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type,
                                 uint32_t n_dims, const int64_t *ne, gguf_tensor_fill_fn fill,
                                 void *ctx);
/* Streams the file to a temporary file beside path, syncs it and renames it into
 * place: path is either the old file or the complete new one. Reports any earlier
 * failure (out of memory, bad tensor). */
KN_MUST_USE enum kn_status gguf_writer_write(struct gguf_writer *w, const char *path,
                                             struct kn_err *err);
/* Builds the file image in a heap buffer (*out, freed with free()): for tests and
 * small files. */
KN_MUST_USE enum kn_status gguf_writer_write_memory(struct gguf_writer *w, void **out,
                                                    size_t *size, struct kn_err *err);

#endif
