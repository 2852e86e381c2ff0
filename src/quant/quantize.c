/* quantize.c: Kinetic's reference weight quantizers.
 *
 * The bytes these produce end up in files (kinetic synth) that must be identical on every
 * machine, so the code uses only +, -, *, / and comparisons on floats (all exactly
 * rounded by IEEE 754 under -ffp-contract=off), its own rounding to integers, and no
 * libm. Loops run in a fixed order; nothing depends on threads or the CPU.
 *
 * Two families:
 * - Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 compute what llama.cpp's reference quantizers compute
 *   (block maximum or range, one scale, round each value), so a tensor quantized here
 *   equals the one llama-quantize writes without an importance matrix; tests check this
 *   against gguf-py's independent numpy port.
 * - MXFP4 computes what llama.cpp's reference computes too (the block maximum's power of
 *   two, the nearest value), taking the exponent from the float's bits where llama.cpp
 *   calls log2f: the two differ only if log2f rounds a maximum just below a power of two
 *   up to it.
 * - Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS use Kinetic's own scale search: for each sub-block,
 *   try a small fixed set of scales around the range-derived one, fit scale (and
 *   minimum) to the resulting integers by least squares, keep the lowest squared error,
 *   then quantize the sub-block scales to the format's integer scales and requantize
 *   every value against the scales actually stored. */
#include "quant.h"

#include <string.h>

/* ---------------------------------------------------------------- rounding */

/* Rounds to nearest, ties to even, for |x| < 2^22: adding 1.5 * 2^23 leaves no
 * fraction bits, so the addition itself rounds (IEEE default mode), and the
 * subtraction is exact. Pure float arithmetic: no libm, no rounding-mode calls. */
static inline float round_even(float x)
{
    const float magic = 12582912.0f;
    return (x + magic) - magic;
}

/* Rounds to the nearest integer in [lo, hi]; NaN maps to lo. Written without branches
 * (the comparisons become min/max instructions): on noise-like data the clamps and signs
 * are unpredictable. */
static inline int round_clamp(float x, int lo, int hi)
{
    float flo = (float)lo, fhi = (float)hi;
    x = x > flo ? x : flo; /* NaN fails the comparison and becomes lo */
    x = x < fhi ? x : fhi;
    return (int)round_even(x);
}

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* |x| by clearing the sign bit: exact, and no libm. */
static inline float absf(float x)
{
    return u2f(f2u(x) & 0x7fffffffu);
}

/* ---------------------------------------------------------------- llama.cpp-compatible */

/* Q8_0: d = max|x| / 127, q = round-half-away(x / d) (as x * (1/d)): quant_hd.h's rule,
 * which the CUDA KV cache store shares. */
static void qz_q8_0(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        kn_hd_quantize_q8_0(x + i * QK8_0, dst + i * (int64_t)sizeof(struct block_q8_0));
}

/* The value of largest magnitude (the first one on ties), with its sign. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        float a = absf(x[j]);
        bool gt = a > amax; /* strict: the first of equal magnitudes wins */
        amax = gt ? a : amax;
        max = gt ? x[j] : max;
    }
    return max;
}

/* Truncation toward zero, with negatives and NaN to 0 and large values to 255 (the
 * callers cap at their top level; this only keeps inf/NaN input away from the cast). */
static inline int trunc_pos(float v)
{
    if (!(v > 0))
        return 0;
    if (v >= 255.0f)
        return 255;
    return (int)v;
}

/* Q4_0 / Q5_0: d = max / -(2^(bits-1)) where max is the signed extreme, so the extreme
 * maps to level 0; q = trunc(x / d + offset + 0.5), capped at the top level. */
static void qz_q4_0(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK4_0) {
        struct block_q4_0 b;
        float d = signed_absmax(x, QK4_0) / -8.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int q0 = trunc_pos(x[j] * id + 8.5f), q1 = trunc_pos(x[j + QK4_0 / 2] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b.qs[j] = (uint8_t)(q0 | q1 << 4);
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

static void qz_q5_0(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK5_0) {
        struct block_q5_0 b;
        float d = signed_absmax(x, QK5_0) / -16.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            int q0 = trunc_pos(x[j] * id + 16.5f), q1 = trunc_pos(x[j + QK5_0 / 2] * id + 16.5f);
            q0 = q0 > 31 ? 31 : q0;
            q1 = q1 > 31 ? 31 : q1;
            b.qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++)
            b.qh[k] = (uint8_t)(qh >> (8 * k));
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

static void block_min_max(const float *x, int n, float *min, float *max)
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *min = lo;
    *max = hi;
}

/* Q4_1 / Q5_1: m = min, d = (max - min) / top level, q = trunc((x - min) / d + 0.5). */
static void qz_q4_1(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK4_1) {
        struct block_q4_1 b;
        float min, max;
        block_min_max(x, QK4_1, &min, &max);
        float d = (max - min) / 15.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        b.m = quant_f32_to_f16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            int q0 = trunc_pos((x[j] - min) * id + 0.5f);
            int q1 = trunc_pos((x[j + QK4_1 / 2] - min) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b.qs[j] = (uint8_t)(q0 | q1 << 4);
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

static void qz_q5_1(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK5_1) {
        struct block_q5_1 b;
        float min, max;
        block_min_max(x, QK5_1, &min, &max);
        float d = (max - min) / 31.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        b.m = quant_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            int q0 = trunc_pos((x[j] - min) * id + 0.5f);
            int q1 = trunc_pos((x[j + QK5_1 / 2] - min) * id + 0.5f);
            q0 = q0 > 31 ? 31 : q0;
            q1 = q1 > 31 ? 31 : q1;
            b.qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++)
            b.qh[k] = (uint8_t)(qh >> (8 * k));
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---------------------------------------------------------------- Kinetic's K-quant search */

/* Candidate offsets (in levels) around the range-derived inverse scale. Eight steps of
 * 1/4 level each way: enough to find most of the gain of a finer search at a quarter
 * of its cost (synth quantizes billions of values). */
#define SEARCH_STEPS 4
#define SEARCH_DELTA 0.25f

/* Rounds to the nearest integer in [lo, hi], as a float (branch-free min/max). */
static inline float round_clampf(float x, float lo, float hi)
{
    x = x > lo ? x : lo; /* NaN fails the comparison and becomes lo */
    x = x < hi ? x : hi;
    return round_even(x);
}

/* The sums a least-squares fit of x ~ a * q + b needs. Sums of integers (q, q^2) are
 * exact in float at these sizes; sum(q x) uses four interleaved partial sums combined
 * as (s0 + s1) + (s2 + s3), a fixed order, so the bits are the same everywhere. */
struct fit_sums {
    float sq, sqq, sqx;
};

/* Sums for the levels q = round(clamp((x - off) * is, 0, nmax)); n is a multiple of 4. */
static struct fit_sums level_sums(const float *x, int n, float off, float is, float nmax)
{
    float sq = 0, sqq = 0, p0 = 0, p1 = 0, p2 = 0, p3 = 0;
    for (int i = 0; i < n; i += 4) {
        float q0 = round_clampf((x[i] - off) * is, 0, nmax);
        float q1 = round_clampf((x[i + 1] - off) * is, 0, nmax);
        float q2 = round_clampf((x[i + 2] - off) * is, 0, nmax);
        float q3 = round_clampf((x[i + 3] - off) * is, 0, nmax);
        sq += (q0 + q1) + (q2 + q3);
        sqq += (q0 * q0 + q1 * q1) + (q2 * q2 + q3 * q3);
        p0 += q0 * x[i];
        p1 += q1 * x[i + 1];
        p2 += q2 * x[i + 2];
        p3 += q3 * x[i + 3];
    }
    return (struct fit_sums){sq, sqq, (p0 + p1) + (p2 + p3)};
}

/* Fits x ~ a * q + b (b <= 0) by least squares given the sums; returns the squared
 * error, expanded from the same sums (sx, sxx: sums of x and x^2). */
static float fit_affine(struct fit_sums f, int n, float sx, float sxx, float *a, float *b)
{
    float fn = (float)n;
    float det = fn * f.sqq - f.sq * f.sq;
    float ra = 0, rb = 0;
    if (det > 0) {
        ra = (fn * f.sqx - f.sq * sx) / det;
        rb = (f.sqq * sx - f.sq * f.sqx) / det;
    }
    if (det <= 0 || rb > 0) { /* minimum must be <= 0: fit the scale alone */
        rb = 0;
        ra = f.sqq > 0 ? f.sqx / f.sqq : 0;
    }
    *a = ra;
    *b = rb;
    float err = sxx + ra * ra * f.sqq + fn * rb * rb + 2.0f * ra * rb * f.sq - 2.0f * ra * f.sqx -
                2.0f * rb * sx;
    return err > 0 ? err : 0;
}

/* Chooses a scale a >= 0 and minimum mn >= 0 for one sub-block of n values (a multiple
 * of 4) so that x ~ a * q - mn with q in 0..nmax, minimising the squared error. */
static void search_affine(const float *x, int n, int nmax, float *scale, float *min)
{
    float lo = 0, hi = x[0], sx = 0, sxx = 0;
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sx += x[i];
        sxx += x[i] * x[i];
    }
    if (!(hi > lo)) { /* all values equal (and <= 0): the minimum alone represents them */
        *scale = 0;
        *min = -lo;
        return;
    }
    float fmax = (float)nmax;
    float best_err = -1, best_a = (hi - lo) / fmax, best_b = lo;
    float range = hi - lo;
    for (int k = -SEARCH_STEPS; k <= SEARCH_STEPS; k++) {
        float is = (fmax + (float)k * SEARCH_DELTA) / range;
        float a, b;
        float err = fit_affine(level_sums(x, n, lo, is, fmax), n, sx, sxx, &a, &b);
        if (a > 0 && (best_err < 0 || err < best_err)) {
            best_err = err;
            best_a = a;
            best_b = b;
        }
    }
    /* One refinement: requantize against the fitted grid and refit. */
    float a, b;
    float err = fit_affine(level_sums(x, n, best_b, 1.0f / best_a, fmax), n, sx, sxx, &a, &b);
    if (a > 0 && err < best_err) {
        best_a = a;
        best_b = b;
    }
    *scale = best_a;
    *min = -best_b;
}

/* Chooses a signed scale for one sub-block so that x ~ a * q with q in -nlo..nlo-1,
 * minimising the squared error. The levels are asymmetric, so both orientations are
 * tried: the value of largest magnitude mapped near -nlo (a negative scale), and
 * mapped near nlo - 1. For each candidate the best scale for its integers is
 * sum(q x) / sum(q q), and the error sum(x x) - sum(q x)^2 / sum(q q) is smallest
 * where sum(q x)^2 / sum(q q) is largest. n is a multiple of 4. */
static float search_symmetric(const float *x, int n, int nlo)
{
    float max = signed_absmax(x, n);
    if (max == 0)
        return 0;
    float lo = -(float)nlo, hi = (float)(nlo - 1);
    float best_a = max / lo, best_gain = -1;
    for (int side = 0; side < 2; side++) {
        float top = side == 0 ? lo : hi;
        for (int k = -SEARCH_STEPS; k <= SEARCH_STEPS; k++) {
            float is = (top + (float)k * SEARCH_DELTA) / max;
            float sqq = 0, p0 = 0, p1 = 0, p2 = 0, p3 = 0;
            for (int i = 0; i < n; i += 4) {
                float q0 = round_clampf(x[i] * is, lo, hi);
                float q1 = round_clampf(x[i + 1] * is, lo, hi);
                float q2 = round_clampf(x[i + 2] * is, lo, hi);
                float q3 = round_clampf(x[i + 3] * is, lo, hi);
                sqq += (q0 * q0 + q1 * q1) + (q2 * q2 + q3 * q3);
                p0 += q0 * x[i];
                p1 += q1 * x[i + 1];
                p2 += q2 * x[i + 2];
                p3 += q3 * x[i + 3];
            }
            float sqx = (p0 + p1) + (p2 + p3);
            if (sqq > 0) {
                float gain = sqx * sqx / sqq;
                if (gain > best_gain) {
                    best_gain = gain;
                    best_a = sqx / sqq;
                }
            }
        }
    }
    return best_a;
}

/* Packs the 6-bit scales and mins of Q4_K/Q5_K (the inverse of quant_k4_scale_min). */
static void pack_k4_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[K_SCALE_SIZE])
{
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        out[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        out[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | (mn[j + 4] & 0x0f) << 4);
    }
}

/* Shared by Q4_K and Q5_K: fits the 8 sub-blocks, stores d, dmin and the packed 6-bit
 * scales, and returns each value's level (0..nmax) in q. */
static void k4_block(const float *x, int nmax, kn_f16 *d_out, kn_f16 *dmin_out,
                     uint8_t scales[K_SCALE_SIZE], uint8_t q[QK_K])
{
    float sub_scale[8], sub_min[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        search_affine(x + 32 * j, 32, nmax, &sub_scale[j], &sub_min[j]);
        if (sub_scale[j] > max_scale)
            max_scale = sub_scale[j];
        if (sub_min[j] > max_min)
            max_min = sub_min[j];
    }
    *d_out = quant_f32_to_f16(max_scale / 63.0f);
    *dmin_out = quant_f32_to_f16(max_min / 63.0f);
    float d = quant_f16_to_f32(*d_out), dmin = quant_f16_to_f32(*dmin_out);
    float id = d > 0 ? 1.0f / d : 0, idmin = dmin > 0 ? 1.0f / dmin : 0;
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)round_clamp(sub_scale[j] * id, 0, 63);
        mn[j] = (uint8_t)round_clamp(sub_min[j] * idmin, 0, 63);
    }
    pack_k4_scales(sc, mn, scales);
    /* Requantize against the scales as the decoder will see them. */
    for (int j = 0; j < 8; j++) {
        float dl = d * (float)sc[j], ml = dmin * (float)mn[j];
        float idl = dl > 0 ? 1.0f / dl : 0;
        for (int l = 0; l < 32; l++)
            q[32 * j + l] = (uint8_t)(dl > 0 ? round_clamp((x[32 * j + l] + ml) * idl, 0, nmax) : 0);
    }
}

static void qz_q4_K(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        struct block_q4_K b;
        uint8_t q[QK_K];
        k4_block(x, 15, &b.d, &b.dmin, b.scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b.qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

static void qz_q5_K(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        struct block_q5_K b;
        uint8_t q[QK_K];
        k4_block(x, 31, &b.d, &b.dmin, b.scales, q);
        memset(b.qh, 0, sizeof b.qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b.qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0x0f) | (q[64 * c + 32 + l] & 0x0f) << 4);
        for (int v = 0; v < QK_K; v++)
            b.qh[v % 32] |= (uint8_t)((q[v] >> 4) << (v / 32));
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

static void qz_q6_K(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        struct block_q6_K b;
        float sub[16];
        float amax = 0;
        for (int s = 0; s < 16; s++) {
            sub[s] = search_symmetric(x + 16 * s, 16, 32);
            if (absf(sub[s]) > amax)
                amax = absf(sub[s]);
        }
        b.d = quant_f32_to_f16(amax / 127.0f);
        float d = quant_f16_to_f32(b.d);
        float id = d > 0 ? 1.0f / d : 0;
        for (int s = 0; s < 16; s++)
            b.scales[s] = (int8_t)round_clamp(sub[s] * id, -128, 127);
        uint8_t q[QK_K];
        for (int v = 0; v < QK_K; v++) {
            float dl = d * (float)b.scales[v / 16];
            q[v] = (uint8_t)(dl != 0 ? round_clamp(x[v] / dl, -32, 31) + 32 : 32);
        }
        memset(b.qh, 0, sizeof b.qh);
        for (int v = 0; v < QK_K; v++) {
            int h = v / 128, r = v % 128;
            int ql_i = h * 64 + r % 64, qh_i = h * 32 + r % 32;
            if (r < 64)
                b.ql[ql_i] = (uint8_t)(q[v] & 0x0f);
            else
                b.ql[ql_i] |= (uint8_t)((q[v] & 0x0f) << 4);
            b.qh[qh_i] |= (uint8_t)((q[v] >> 4) << (2 * (r / 32)));
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* Q2_K: 16 sub-blocks of 16, x ~ (d * sc) * q - (dmin * m) with q in 0..3 and 4-bit
 * sc, m. */
static void qz_q2_K(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        struct block_q2_K b;
        float sub_scale[16], sub_min[16], max_scale = 0, max_min = 0;
        for (int s = 0; s < 16; s++) {
            search_affine(x + 16 * s, 16, 3, &sub_scale[s], &sub_min[s]);
            max_scale = sub_scale[s] > max_scale ? sub_scale[s] : max_scale;
            max_min = sub_min[s] > max_min ? sub_min[s] : max_min;
        }
        b.d = quant_f32_to_f16(max_scale / 15.0f);
        b.dmin = quant_f32_to_f16(max_min / 15.0f);
        float d = quant_f16_to_f32(b.d), dmin = quant_f16_to_f32(b.dmin);
        float id = d > 0 ? 1.0f / d : 0, idmin = dmin > 0 ? 1.0f / dmin : 0;
        memset(b.qs, 0, sizeof b.qs);
        for (int s = 0; s < 16; s++) {
            int sc = round_clamp(sub_scale[s] * id, 0, 15), m = round_clamp(sub_min[s] * idmin, 0, 15);
            b.scales[s] = (uint8_t)(sc | m << 4);
            float dl = d * (float)sc, ml = dmin * (float)m;
            float idl = dl > 0 ? 1.0f / dl : 0;
            for (int l = 0; l < 16; l++) {
                int v = 16 * s + l;
                int q = dl > 0 ? round_clamp((x[v] + ml) * idl, 0, 3) : 0;
                b.qs[(v / 128) * 32 + v % 32] |= (uint8_t)(q << (2 * ((v % 128) / 32)));
            }
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* Q3_K: 16 sub-blocks of 16, x ~ (d * sc) * q with q in -4..3 and 6-bit signed sc;
 * q + 4 is stored as 2 low bits (qs) and a high bit (hmask). */
static void qz_q3_K(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        struct block_q3_K b;
        float sub[16], amax = 0;
        for (int s = 0; s < 16; s++) {
            sub[s] = search_symmetric(x + 16 * s, 16, 4);
            amax = absf(sub[s]) > amax ? absf(sub[s]) : amax;
        }
        b.d = quant_f32_to_f16(amax / 31.0f);
        float d = quant_f16_to_f32(b.d);
        float id = d > 0 ? 1.0f / d : 0;
        memset(b.scales, 0, sizeof b.scales);
        memset(b.qs, 0, sizeof b.qs);
        memset(b.hmask, 0, sizeof b.hmask);
        for (int s = 0; s < 16; s++) {
            int sc = round_clamp(sub[s] * id, -32, 31);
            int u = sc + 32; /* stored with offset 32 */
            if (s < 8)
                b.scales[s] |= (uint8_t)(u & 0x0f);
            else
                b.scales[s - 8] |= (uint8_t)((u & 0x0f) << 4);
            b.scales[8 + s % 4] |= (uint8_t)((u >> 4) << (2 * (s / 4)));
            float dl = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int v = 16 * s + l;
                int q = (dl != 0 ? round_clamp(x[v] / dl, -4, 3) : 0) + 4;
                b.qs[(v / 128) * 32 + v % 32] |= (uint8_t)((q & 3) << (2 * ((v % 128) / 32)));
                b.hmask[v % 32] |= (uint8_t)((q >> 2) << (v / 32));
            }
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---------------------------------------------------------------- IQ4_NL, IQ4_XS */

/* Midpoint i (0..14) between levels i and i + 1: exact (the levels are small integers). */
static inline float iq4_mid(int i)
{
    return 0.5f * (float)(quant_iq4nl_levels[i] + quant_iq4nl_levels[i + 1]);
}

/* The level index (0..15) of quant_iq4nl_levels nearest to v (a value in level units),
 * ties to the lower level; NaN maps to 0. The levels ascend, so the index is the count
 * of midpoints below v, found by a branch-free binary search. */
static inline int iq4_nearest(float v)
{
    int q = 0;
    q += (v > iq4_mid(q + 7)) * 8;
    q += (v > iq4_mid(q + 3)) * 4;
    q += (v > iq4_mid(q + 1)) * 2;
    q += v > iq4_mid(q);
    return q;
}

/* IQ4 steps of the scale search: the inverse scale is tried at (1 + k / 32) times the
 * one that maps the largest value onto an end level, k = -IQ4_STEPS..IQ4_STEPS
 * (as good as twice the steps at half the spacing, measured on N(0, 0.02) data). */
#define IQ4_STEPS 3

/* Chooses a signed scale a for n values (a multiple of 4) so that x ~ a * level, as
 * search_symmetric does for uniform levels: the value of largest magnitude is mapped near
 * either end level (-127 or 113: the levels are asymmetric), and each candidate's best
 * scale for its levels is sum(l x) / sum(l l); the largest sum(l x)^2 / sum(l l) wins. */
static float search_iq4(const float *x, int n)
{
    float max = signed_absmax(x, n);
    if (max == 0)
        return 0;
    float best_a = max / (float)quant_iq4nl_levels[0], best_gain = -1;
    for (int side = 0; side < 2; side++) {
        float top = (float)quant_iq4nl_levels[side == 0 ? 0 : 15];
        for (int k = -IQ4_STEPS; k <= IQ4_STEPS; k++) {
            float is = top * (1.0f + (float)k / 32.0f) / max;
            float sll = 0, p0 = 0, p1 = 0, p2 = 0, p3 = 0;
            for (int i = 0; i < n; i += 4) {
                float l0 = (float)quant_iq4nl_levels[iq4_nearest(x[i] * is)];
                float l1 = (float)quant_iq4nl_levels[iq4_nearest(x[i + 1] * is)];
                float l2 = (float)quant_iq4nl_levels[iq4_nearest(x[i + 2] * is)];
                float l3 = (float)quant_iq4nl_levels[iq4_nearest(x[i + 3] * is)];
                sll += (l0 * l0 + l1 * l1) + (l2 * l2 + l3 * l3);
                p0 += l0 * x[i];
                p1 += l1 * x[i + 1];
                p2 += l2 * x[i + 2];
                p3 += l3 * x[i + 3];
            }
            float slx = (p0 + p1) + (p2 + p3);
            if (sll > 0) {
                float gain = slx * slx / sll;
                if (gain > best_gain) {
                    best_gain = gain;
                    best_a = slx / sll;
                }
            }
        }
    }
    return best_a;
}

/* Packs 32 values against scale dl: element j < 16 in the low nibble of qs[j], element
 * 16 + j in the high one. A zero scale stores level index 0 times 0. */
static void iq4_pack32(const float *x, float dl, uint8_t qs[16])
{
    int q[32];
    for (int j = 0; j < 32; j++)
        q[j] = dl != 0 ? iq4_nearest(x[j] / dl) : 0;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

/* IQ4_NL: 32-blocks, x ~ d * level. */
static void qz_iq4_nl(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        struct block_iq4_nl b;
        b.d = quant_f32_to_f16(search_iq4(x, 32));
        iq4_pack32(x, quant_f16_to_f32(b.d), b.qs);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* IQ4_XS: 8 sub-blocks of 32, x ~ (d * ls) * level with ls in -32..31. d is chosen so the
 * sub-block scale of largest magnitude becomes ls = -32 (the end the range reaches). */
static void qz_iq4_xs(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        struct block_iq4_xs b;
        float sub[8], max = 0;
        for (int s = 0; s < 8; s++) {
            sub[s] = search_iq4(x + 32 * s, 32);
            max = absf(sub[s]) > absf(max) ? sub[s] : max;
        }
        b.d = quant_f32_to_f16(max / -32.0f);
        float d = quant_f16_to_f32(b.d);
        float id = d != 0 ? 1.0f / d : 0;
        uint16_t sh = 0;
        memset(b.scales_l, 0, sizeof b.scales_l);
        for (int s = 0; s < 8; s++) {
            int ls = round_clamp(sub[s] * id, -32, 31);
            int u = ls + 32;
            b.scales_l[s / 2] |= (uint8_t)((u & 0x0f) << (4 * (s % 2)));
            sh |= (uint16_t)((u >> 4) << (2 * s));
            iq4_pack32(x + 32 * s, d * (float)ls, b.qs + 16 * s);
        }
        memcpy(&b.scales_h, &sh, 2);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---------------------------------------------------------------- MXFP4 */

/* The code (0..15) of the MXFP4 value nearest to v (in doubled-value units): the
 * magnitude's nearest of 0, 1, 2, 3, 4, 6, 8, 12 (ties to the smaller), the sign in bit 3
 * (zero keeps code 0). NaN maps to 0. */
static inline int mxfp4_nearest(float v)
{
    float a = absf(v);
    int q = (a > 0.5f) + (a > 1.5f) + (a > 2.5f) + (a > 3.5f) + (a > 5.0f) + (a > 7.0f) +
            (a > 10.0f);
    return q && (f2u(v) >> 31) ? q | 8 : q;
}

/* MXFP4: the scale is the power of two that puts the block maximum in [4, 8) of the
 * doubled values, i.e. e = floor(log2(amax)) - 2 + 127 taken exactly from amax's bits
 * (llama.cpp's reference computes the same with log2f), clamped to 0..254; each value is
 * then the nearest code. */
static void qz_mxfp4(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_MXFP4) {
        struct block_mxfp4 b;
        float amax = 0;
        for (int j = 0; j < QK_MXFP4; j++)
            amax = absf(x[j]) > amax ? absf(x[j]) : amax;
        int e = 0;
        if (amax > 0) {
            uint32_t u = f2u(amax);
            int exp2 = (int)(u >> 23) - 127; /* floor(log2(amax)) for a normal amax */
            if ((u >> 23) == 0) {            /* subnormal: 2^-126 times the fraction */
                exp2 = -127;
                for (uint32_t m = u & 0x7fffffu; m < 0x400000u; m <<= 1)
                    exp2--;
            }
            e = exp2 - 2 + 127;
            e = e < 0 ? 0 : e > 254 ? 254 : e;
        }
        b.e = (uint8_t)e;
        float d = quant_e8m0_half(b.e);
        for (int j = 0; j < 16; j++)
            b.qs[j] = (uint8_t)(mxfp4_nearest(x[j] / d) | mxfp4_nearest(x[j + 16] / d) << 4);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---------------------------------------------------------------- entry point */

bool quant_can_quantize(uint32_t t)
{
    switch (t) {
    case QT_F32: case QT_F16: case QT_BF16: case QT_Q8_0: case QT_Q4_0: case QT_Q4_1:
    case QT_Q5_0: case QT_Q5_1: case QT_Q2_K: case QT_Q3_K: case QT_Q4_K: case QT_Q5_K:
    case QT_Q6_K: case QT_IQ4_NL: case QT_IQ4_XS: case QT_MXFP4:
        return true;
    default:
        return false;
    }
}

bool quant_quantize_row(uint32_t t, const float *x, void *dst, int64_t n)
{
    const struct quant_type_info *info = quant_type_info(t);
    if (!info || !quant_can_quantize(t) || n < 0 || n % info->block_size != 0)
        return false;
    uint8_t *d = dst;
    int64_t nb = n / info->block_size;
    switch (t) {
    case QT_F32:
        memcpy(d, x, (size_t)n * sizeof(float));
        break;
    case QT_F16:
        for (int64_t i = 0; i < n; i++) {
            kn_f16 h = quant_f32_to_f16(x[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case QT_BF16:
        for (int64_t i = 0; i < n; i++) {
            kn_bf16 h = quant_f32_to_bf16(x[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case QT_Q8_0: qz_q8_0(x, d, nb); break;
    case QT_Q4_0: qz_q4_0(x, d, nb); break;
    case QT_Q4_1: qz_q4_1(x, d, nb); break;
    case QT_Q5_0: qz_q5_0(x, d, nb); break;
    case QT_Q5_1: qz_q5_1(x, d, nb); break;
    case QT_Q2_K: qz_q2_K(x, d, nb); break;
    case QT_Q3_K: qz_q3_K(x, d, nb); break;
    case QT_Q4_K: qz_q4_K(x, d, nb); break;
    case QT_Q5_K: qz_q5_K(x, d, nb); break;
    case QT_Q6_K: qz_q6_K(x, d, nb); break;
    case QT_IQ4_NL: qz_iq4_nl(x, d, nb); break;
    case QT_IQ4_XS: qz_iq4_xs(x, d, nb); break;
    case QT_MXFP4: qz_mxfp4(x, d, nb); break;
    default: return false;
    }
    return true;
}
