/* kn_common.glsl: what every Kinetic compute shader shares: exact bit conversions, the
 * canonical tree, Kinetic's own exp (src/kernels/kmath.c, step for step), and byte reads
 * from word buffers. Included by the .comp files (glslc resolves #include).
 *
 * Numerics (docs/numerics.md, canonical-1). Every float result is declared `precise`, so
 * no compiler may contract a * b + c into a fused operation the C reference does not
 * have (the CPU builds with -ffp-contract=off); kn_fma() is written only where the
 * reference calls fmaf. Division and sqrt go through kn_div / kn_sqrt: the driver's
 * operations where the runtime's probe finds them correctly rounded, else exact integer
 * builds (below). exp is kern_expf's polynomial, never exp().
 * NaN tests are bit tests, which no optimiser can assume away. */

#extension GL_EXT_control_flow_attributes : enable

/* ---------------------------------------------------------------- bits */

bool kn_isnan(float x)
{
    return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u;
}

/* f16 bits (low 16 bits of h) to f32, exactly (quant_f16_to_f32): subnormal halves
 * become normal floats, so no float operation touches them. */
float kn_f16(uint h)
{
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint man = h & 0x3ffu;
    if (e == 0x1fu)
        return uintBitsToFloat(sign | 0x7f800000u | (man << 13));
    if (e == 0u) {
        if (man == 0u)
            return uintBitsToFloat(sign);
        /* subnormal: the leading one is bit findMSB(man) (0..9) */
        int msb = findMSB(man);
        uint m = (man << uint(10 - msb)) & 0x3ffu;
        return uintBitsToFloat(sign | (uint(103 + msb) << 23) | (m << 13));
    }
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (man << 13));
}

float kn_bf16(uint h)
{
    return uintBitsToFloat((h & 0xffffu) << 16);
}

/* f32 to f16 bits, round to nearest even, overflow to infinity, NaN kept quiet with its
 * top payload bits (quant_f32_to_f16, integer steps only). */
uint kn_f32_to_f16(float f)
{
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u)
        return sign | 0x7e00u | ((absx >> 13) & 0x3ffu);
    if (absx >= 0x477ff000u)
        return sign | 0x7c00u;
    if (absx < 0x38800000u) {
        if (absx < 0x33000000u)
            return sign;
        uint e = absx >> 23;
        uint man = (absx & 0x7fffffu) | 0x800000u;
        uint shift = 126u - e;
        uint half_ = 1u << (shift - 1u);
        uint rest = man & ((1u << shift) - 1u);
        uint q = man >> shift;
        if (rest > half_ || (rest == half_ && (q & 1u) != 0u))
            q++;
        return sign | q;
    }
    uint r = absx + 0xfffu + ((absx >> 13) & 1u) - (112u << 23);
    return sign | (r >> 13);
}

/* ---------------------------------------------------------------- IEEE steps */

/* The fused multiply-add fmaf(a, b, c), one rounding. The driver's fma() where it is
 * fused; built with KN_FMA64 (the <op>_f64 shaders) it is computed exactly in double
 * for drivers whose fma() is a multiply and an add (lavapipe lowers it so): the product
 * of two floats is exact in double, TwoSum gives the sum's exact error, the sum is
 * rounded to odd at 53 bits, and rounding that to float is the correctly rounded result
 * (53 >= 24 + 2). Needs only IEEE double add and multiply (shaderFloat64). */
#ifdef KN_FMA64
float kn_fma(float a, float b, float c)
{
    precise double p = double(a) * double(b);
    precise double dc = double(c);
    precise double s = p + dc;
    uvec2 u = unpackDouble2x32(s);
    if ((u.y & 0x7ff00000u) != 0x7ff00000u) { /* s finite: the error is exact */
        precise double bv = s - p;
        precise double e1 = s - bv;
        precise double e2 = p - e1;
        precise double e3 = dc - bv;
        precise double e = e2 + e3;
        if (e != 0.0 && (u.x & 1u) == 0u) {
            /* one ulp toward the exact value: up in magnitude when e has s's sign */
            if ((e > 0.0) == (s > 0.0)) {
                u.x += 1u;
                u.y += u.x == 0u ? 1u : 0u;
            } else {
                u.y -= u.x == 0u ? 1u : 0u;
                u.x -= 1u;
            }
            s = packDouble2x32(u);
        }
    }
    return float(s);
}
#else
float kn_fma(float a, float b, float c)
{
    precise float r = fma(a, b, c);
    return r;
}
#endif

/* Division and square root. The driver's / and sqrt where the runtime's probe
 * (vkk_divsqrt_probe: hard cases within 2^-44 of a rounding tie, subnormals, overflow,
 * the special values) finds them correctly rounded; else, with the specialization
 * constants set, the integer builds below: the quotient's or root's mantissa by exact
 * integer long division / digit-by-digit square root, 2 bits beyond the 24 and a sticky
 * bit, rounded to nearest even once at the right place (subnormal results included).
 * Integer steps are exact on every device, so these need neither a fused fma nor
 * doubles. NaN results are the x86 ones (an input NaN quieted, a's first; else the
 * default NaN 0xffc00000). */
layout(constant_id = 0) const bool KN_SOFT_DIV = false;
layout(constant_id = 1) const bool KN_SOFT_SQRT = false;

const uint KN_NAN = 0xffc00000u;

/* The mantissa of a finite non-zero |x| (bits ux) with its leading one at bit 23, and
 * the biased exponent that goes with it (below 1 for subnormals). */
void kn_unpack(uint ux, out uint m, out int e)
{
    uint f = ux & 0x7fffffu, be = (ux >> 23) & 0xffu;
    if (be == 0u) {
        int sh = 23 - findMSB(f);
        m = f << uint(sh);
        e = 1 - sh;
    } else {
        m = f | 0x800000u;
        e = int(be);
    }
}

/* sign | the float of mantissa bits q (q >> drop is the kept part with the leading one
 * at bit 23 for normal results) times 2^(e - 127), drop bits dropped, sticky: whether
 * anything below them is non-zero. Rounds to nearest even; handles subnormal results
 * (drop grown by 1 - e) and overflow to infinity. */
uint kn_round_pack(uint sign, uint q, int drop, bool sticky, int e)
{
    if (e < 1) {
        drop += 1 - e;
        e = 0;
    }
    if (drop > 31)
        return sign; /* under half the smallest subnormal */
    uint keep = q >> uint(drop), rest = q & ((1u << uint(drop)) - 1u), half_ = 1u << uint(drop - 1);
    if (rest > half_ || (rest == half_ && (sticky || (keep & 1u) != 0u)))
        keep += 1u;
    if (e == 0)
        return sign | keep; /* a subnormal, or the smallest normal after the carry */
    if (e >= 255)
        return sign | 0x7f800000u;
    uint r = (uint(e - 1) << 23) + keep; /* a carry out of the mantissa bumps e */
    return sign | min(r, 0x7f800000u);
}

float kn_div_soft(float a, float b)
{
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    uint sign = (ua ^ ub) & 0x80000000u, aa = ua & 0x7fffffffu, ab = ub & 0x7fffffffu;
    if (aa > 0x7f800000u)
        return uintBitsToFloat(ua | 0x400000u);
    if (ab > 0x7f800000u)
        return uintBitsToFloat(ub | 0x400000u);
    if (aa == 0x7f800000u)
        return uintBitsToFloat(ab == 0x7f800000u ? KN_NAN : sign | 0x7f800000u);
    if (ab == 0x7f800000u)
        return uintBitsToFloat(sign);
    if (ab == 0u)
        return uintBitsToFloat(aa == 0u ? KN_NAN : sign | 0x7f800000u);
    if (aa == 0u)
        return uintBitsToFloat(sign);
    uint ma, mb;
    int ea, eb;
    kn_unpack(aa, ma, ea);
    kn_unpack(ab, mb, eb);
    int e = ea - eb + 127;
    if (ma < mb) { /* the quotient's leading one one place lower */
        ma <<= 1;
        e -= 1;
    }
    /* 26 quotient bits of ma / mb in [1, 2): 1 . 23 bits, 2 more */
    uint rem = ma, q = 0u;
    for (int i = 0; i < 26; i++) {
        q <<= 1;
        if (rem >= mb) {
            rem -= mb;
            q |= 1u;
        }
        rem <<= 1;
    }
    return uintBitsToFloat(kn_round_pack(sign, q, 2, rem != 0u, e));
}

float kn_sqrt_soft(float a)
{
    uint ua = floatBitsToUint(a);
    if ((ua & 0x7fffffffu) > 0x7f800000u)
        return uintBitsToFloat(ua | 0x400000u);
    if ((ua & 0x7fffffffu) == 0u || ua == 0x7f800000u)
        return a; /* +-0, +inf */
    if ((ua & 0x80000000u) != 0u)
        return uintBitsToFloat(KN_NAN);
    uint m;
    int e;
    kn_unpack(ua, m, e);
    int E = e - 127; /* a = m 2^(E - 23) */
    if ((E & 1) != 0) {
        m <<= 1;
        E -= 1;
    }
    /* the root of m 2^25 (bits 25 .. 49 of the radicand are m): 25 bits, 2 at a time */
    uint res = 0u, rem = 0u;
    for (int i = 24; i >= 0; i--) {
        int j = 2 * i + 1 - 25; /* radicand bits 2i+1, 2i are m's bits j, j - 1 */
        uint two = (j >= 1 ? (m >> uint(j - 1)) & 3u : j == 0 ? (m & 1u) << 1 : 0u);
        rem = (rem << 2) | two;
        uint trial = (res << 2) | 1u;
        res <<= 1;
        if (rem >= trial) {
            rem -= trial;
            res |= 1u;
        }
    }
    /* sqrt(a) = res 2^(E/2 - 24): the leading one of res is bit 24 */
    return uintBitsToFloat(kn_round_pack(0u, res, 1, rem != 0u, E / 2 + 127));
}

float kn_div(float a, float b)
{
    if (KN_SOFT_DIV)
        return kn_div_soft(a, b);
    precise float q = a / b;
    return q;
}

float kn_sqrt(float a)
{
    if (KN_SOFT_SQRT)
        return kn_sqrt_soft(a);
    precise float r = sqrt(a);
    return r;
}

/* ---------------------------------------------------------------- kern_expf */

const float KN_EXP_LO = -104.0;
const float KN_EXP_HI = 89.0;
#define KN_EXP_LOG2E uintBitsToFloat(0x3fb8aa3bu)  /* 0x1.715476p+0 */
const float KN_EXP_MAGIC = 12582912.0;
#define KN_EXP_LN2_HI uintBitsToFloat(0x3f317218u) /* 0x1.62e430p-1 */
#define KN_EXP_LN2_LO uintBitsToFloat(0xb102e308u) /* -0x1.05c610p-29 */
#define KN_EXP_C7 uintBitsToFloat(0x39500d01u)     /* 0x1.a01a02p-13 */
#define KN_EXP_C6 uintBitsToFloat(0x3ab60b61u)     /* 0x1.6c16c2p-10 */
#define KN_EXP_C5 uintBitsToFloat(0x3c088889u)     /* 0x1.111112p-7 */
#define KN_EXP_C4 uintBitsToFloat(0x3d2aaaabu)     /* 0x1.555556p-5 */
#define KN_EXP_C3 uintBitsToFloat(0x3e2aaaabu)     /* 0x1.555556p-3 */
const float KN_EXP_C2 = 0.5;

float kn_expf(float x)
{
    if (kn_isnan(x))
        return x;
    precise float xc = x < KN_EXP_LO ? KN_EXP_LO : x;
    xc = xc > KN_EXP_HI ? KN_EXP_HI : xc;
    precise float t = xc * KN_EXP_LOG2E;
    t = t + KN_EXP_MAGIC;
    precise float kf = t - KN_EXP_MAGIC;
    precise float r = kn_fma(-kf, KN_EXP_LN2_HI, xc);
    r = kn_fma(-kf, KN_EXP_LN2_LO, r);
    precise float p = KN_EXP_C7;
    p = kn_fma(p, r, KN_EXP_C6);
    p = kn_fma(p, r, KN_EXP_C5);
    p = kn_fma(p, r, KN_EXP_C4);
    p = kn_fma(p, r, KN_EXP_C3);
    p = kn_fma(p, r, KN_EXP_C2);
    p = kn_fma(p, r, 1.0);
    p = kn_fma(p, r, 1.0);
    int k = int(kf);
    int k1 = k >> 1, k2 = k - k1;
    float s1 = uintBitsToFloat(uint(k1 + 127) << 23);
    float s2 = uintBitsToFloat(uint(k2 + 127) << 23);
    precise float y = p * s1;
    y = y * s2;
    return y;
}

/* silu(x) = x / (1 + exp(-x)) */
float kn_silu(float x)
{
    precise float den = 1.0 + kn_expf(-x);
    return kn_div(x, den);
}

/* gelu(x) = x / (1 + exp(-z2)), z2 = x * fma(x * x, C1, C0) */
#define KN_GELU_C0 uintBitsToFloat(0x3fcc422au) /* 0x1.988454p+0 */
#define KN_GELU_C1 uintBitsToFloat(0x3d922279u) /* 0x1.2444f2p-4 */

float kn_gelu(float x)
{
    precise float xx = x * x;
    precise float z2 = x * kn_fma(xx, KN_GELU_C1, KN_GELU_C0);
    precise float den = 1.0 + kn_expf(-z2);
    return kn_div(x, den);
}

/* ---------------------------------------------------------------- byte reads */

/* Declared by each shader that reads packed bytes: KN_WORDS(i) is word i of the buffer. */
#ifdef KN_WORDS
/* The little-endian 32 bits at byte address a (any alignment; the word after a's is read
 * only when a is unaligned, and then it holds bytes of the same data). */
uint kn_ld32(uint a)
{
    uint w = KN_WORDS(a >> 2);
    uint sh = (a & 3u) * 8u;
    if (sh == 0u)
        return w;
    return (w >> sh) | (KN_WORDS((a >> 2) + 1u) << (32u - sh));
}

uint kn_ld8(uint a)
{
    return (KN_WORDS(a >> 2) >> ((a & 3u) * 8u)) & 0xffu;
}

uint kn_ld16(uint a)
{
    if ((a & 3u) == 3u)
        return kn_ld8(a) | (kn_ld8(a + 1u) << 8);
    return (KN_WORDS(a >> 2) >> ((a & 3u) * 8u)) & 0xffffu;
}
#endif

/* Byte i (0..3) of w as a signed or unsigned int. */
int kn_s8(uint w, uint i)
{
    return bitfieldExtract(int(w), int(i * 8u), 8);
}

int kn_u8(uint w, uint i)
{
    return int((w >> (i * 8u)) & 0xffu);
}

/* Sum of the four products of the bytes of a (unsigned, each < 128) and b (signed). An
 * exact integer whatever the order, so an int8 dot product instruction would give the
 * same bits; this glslc has no GL_EXT_integer_dot_product (docs/numerics.md "Devices"). */
int kn_dot4_us(uint a, uint b)
{
    return kn_u8(a, 0u) * kn_s8(b, 0u) + kn_u8(a, 1u) * kn_s8(b, 1u) +
           kn_u8(a, 2u) * kn_s8(b, 2u) + kn_u8(a, 3u) * kn_s8(b, 3u);
}

int kn_dot4_ss(uint a, uint b)
{
    return kn_s8(a, 0u) * kn_s8(b, 0u) + kn_s8(a, 1u) * kn_s8(b, 1u) +
           kn_s8(a, 2u) * kn_s8(b, 2u) + kn_s8(a, 3u) * kn_s8(b, 3u);
}
