/* kern_internal.h: what the kernels module's files share (not part of the public API).
 * The per-ISA files implement the same functions as the references in dot.c, actq.c and
 * matmul.c, bit for bit (docs/numerics.md). */
#ifndef KN_KERN_INTERNAL_H
#define KN_KERN_INTERNAL_H

#include "kernels.h"

#include <string.h>

float kern_dot_f32_avx2(const float *a, const float *b, int64_t n);
float kern_dot_f32_avx512(const float *a, const float *b, int64_t n);
float kern_dot_f32_neon(const float *a, const float *b, int64_t n);

/* Activation quantization (actq.c is the reference). */
void kern_quantize_row_q8f_ref(const float *x, int64_t K, struct kern_block_q8f *dst);
void kern_quantize_row_q8k_ref(const float *x, int64_t K, struct block_q8_K *dst);
void kern_quantize_row_q8f_avx2(const float *x, int64_t K, struct kern_block_q8f *dst);
void kern_quantize_row_q8k_avx2(const float *x, int64_t K, struct block_q8_K *dst);
void kern_quantize_row_q8f_avx512(const float *x, int64_t K, struct kern_block_q8f *dst);
void kern_quantize_row_q8k_avx512(const float *x, int64_t K, struct block_q8_K *dst);
void kern_quantize_row_q8f_neon(const float *x, int64_t K, struct kern_block_q8f *dst);
void kern_quantize_row_q8k_neon(const float *x, int64_t K, struct block_q8_K *dst);

/* Computes y[m][n] for n in [n0, n1) with this ISA's kernels and returns true, or
 * returns false (nothing written) when the ISA has no kernel for w's type/layout. */
bool kern_matmul_rows_avx2(const struct kern_weight *w, const struct kern_act *a, float *y,
                           int64_t ldy, int64_t n0, int64_t n1);
bool kern_matmul_rows_avx512(const struct kern_weight *w, const struct kern_act *a, float *y,
                             int64_t ldy, int64_t n0, int64_t n1);
/* aarch64: one template (matmul_neon.h) compiled three times; the dotprod and i8mm files
 * only change how the exact integer block sums are formed. */
bool kern_matmul_rows_neon(const struct kern_weight *w, const struct kern_act *a, float *y,
                           int64_t ldy, int64_t n0, int64_t n1);
bool kern_matmul_rows_dotprod(const struct kern_weight *w, const struct kern_act *a, float *y,
                              int64_t ldy, int64_t n0, int64_t n1);
bool kern_matmul_rows_i8mm(const struct kern_weight *w, const struct kern_act *a, float *y,
                           int64_t ldy, int64_t n0, int64_t n1);

/* ---- dispatch (dispatch.c): the only place a level is mapped to its kernels. One row
 * per ISA level, every member set (a level this build lacks has the scalar row); the
 * family files call through kern_impl_active(). The level is decided once (base's
 * kn_isa_active: KINETIC_ISA or the best; kn_isa_set for tests and verify-receipt), so
 * a call costs one load and one indirect call. */
struct kern_ops;
struct kern_impl {
    const struct kern_ops *ops; /* elementwise, norms, RoPE, attention (ops.h) */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    void (*quantize_row_q8f)(const float *x, int64_t K, struct kern_block_q8f *dst);
    void (*quantize_row_q8k)(const float *x, int64_t K, struct block_q8_K *dst);
    /* Null at the scalar level (the reference runs); else the level's matrix product,
     * which returns false where it has no kernel for the weight's type and layout. */
    bool (*matmul_rows)(const struct kern_weight *w, const struct kern_act *a, float *y,
                        int64_t ldy, int64_t n0, int64_t n1);
};
extern const struct kern_impl kern_impls[KN_ISA_COUNT];
static inline const struct kern_impl *kern_impl_active(void)
{
    return &kern_impls[kn_isa_active()];
}

/* Repacked layouts (repack.c). Rows are grouped by KERN_ROW_ALIGN = 16; a partial last
 * group is padded with zero rows. Returns the bytes of the packed copy for (type, N, K),
 * or 0 if type has no packed layout. */
size_t kern_repack_bytes(enum quant_type type, int64_t N, int64_t K);
/* Bytes of one group-block (16 rows x one weight block) of the packed layout of t. */
size_t kern_repack_group_block_bytes(enum quant_type t);
/* Fills dst (kern_repack_bytes bytes, 64-aligned) from w's GGML rows. */
void kern_repack(const struct kern_weight *w, void *dst);

/* A row's float from little-endian bytes (blocks are byte-packed). */
static inline float kern_f16(const kn_f16 *p)
{
    kn_f16 h;
    memcpy(&h, p, sizeof h);
    return quant_f16_to_f32(h);
}

/* d elements of a q8_0 KV cache row from block-aligned blocks b, as f32: q * scale, one
 * exact product each (docs/numerics.md "Attention over the KV cache"); every ISA's attention reads a
 * q8_0 row through this. */
static inline void kern_kv_q8_0_row(const struct block_q8_0 *b, int64_t d, float *out)
{
    for (int64_t i = 0; i < d; i++)
        out[i] = kn_hd_q8_0_elem((const uint8_t *)b, i); /* quant_hd.h, shared with CUDA */
}

#endif
