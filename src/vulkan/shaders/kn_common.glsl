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

/* The canonical tree over 16 lanes (kn_hd_tree16): for w = 8, 4, 2, 1: a[i] += a[i + w]. */
float kn_tree16(float v[16])
{
    precise float a[16];
    [[unroll]] for (int i = 0; i < 16; i++)
        a[i] = v[i];
    [[unroll]] for (int wd = 8; wd >= 1; wd /= 2)
        [[unroll]] for (int i = 0; i < wd; i++)
            a[i] = a[i] + a[i + wd];
    return a[0];
}

/* 1 / sqrt(tree / n + eps), tree the canonical tree over the 16 lanes of a row's sum of
 * squares (rmsnorm_scalar, kern_layernorm). */
float kn_rnorm(float lanes[16], uint n, float eps)
{
    precise float mean = kn_div(kn_tree16(lanes), float(n));
    precise float me = mean + eps;
    return kn_div(1.0, kn_sqrt(me));
}

/* gpt-oss's sink merged into a head's attention state (m, l) as a tile (sink, 1, 0)
 * (kn_attn_sink): m' = max(m, sink), a = exp(m - m'), l = l * a + exp(sink - m'), m = m';
 * returns a, by which the caller scales o. */
float kn_attn_sink(float sink, inout float m, inout float l)
{
    float mn = sink > m ? sink : m;
    precise float da = m - mn, db = sink - mn;
    float a = kn_expf(da);
    precise float la = l * a;
    l = la + kn_expf(db);
    m = mn;
    return a;
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

/* gpt-oss's clamped SwiGLU (kern_swiglu_oaif): x = min(g, L) and y = clamp(u, -L, L) by
 * the reference's comparisons (a NaN g stays), then (x / (1 + exp(-(alpha x)))) (y + 1). */
#define KN_OAI_ALPHA uintBitsToFloat(0x3fd9db23u) /* 1.702f */
const float KN_OAI_LIMIT = 7.0;

float kn_swiglu_oai(float g, float u)
{
    float x = KN_OAI_LIMIT < g ? KN_OAI_LIMIT : g;
    float y = KN_OAI_LIMIT < u ? KN_OAI_LIMIT : u;
    y = -KN_OAI_LIMIT > y ? -KN_OAI_LIMIT : y;
    precise float ax = KN_OAI_ALPHA * x;
    precise float den = 1.0 + kn_expf(-ax);
    precise float y1 = y + 1.0;
    precise float r = kn_div(x, den) * y1;
    return r;
}

#ifdef KN_F64MATH
/* ---------------------------------------------------------------- double math
 * kern_tanhf and kern_softcapf (kern_hd.h kn_hd_tanhf, kn_hd_exp_f64), step for step, for
 * the shaders built with KN_F64MATH (they need shaderFloat64). The reference's double
 * fma is kn_dfma: the driver's fma(double) where the runtime's probe (vkk_dfma_probe)
 * finds it fused, else (KN_SOFT_DFMA) the integer build below. Double add, multiply and
 * division are the driver's (IEEE; the probe checks the division too). */
layout(constant_id = 2) const bool KN_SOFT_DFMA = false;

/* 32 bits of the little-endian multiword x from bit k (any k; bits outside x are 0). */
uint kn_w4_bits(uint x[4], int k)
{
    int w = k >> 5;
    uint b = uint(k & 31);
    uint lo = w >= 0 && w < 4 ? x[w] : 0u, hi = w + 1 >= 0 && w + 1 < 4 ? x[w + 1] : 0u;
    return b == 0u ? lo : (lo >> b) | (hi << (32u - b));
}

uint kn_w6_bits(uint x[6], int k)
{
    int w = k >> 5;
    uint b = uint(k & 31);
    uint lo = w >= 0 && w < 6 ? x[w] : 0u, hi = w + 1 >= 0 && w + 1 < 6 ? x[w + 1] : 0u;
    return b == 0u ? lo : (lo >> b) | (hi << (32u - b));
}

/* Whether any bit of x below bit k is set. */
bool kn_w4_below(uint x[4], int k)
{
    uint any = 0u;
    [[unroll]] for (int j = 0; j < 4; j++)
        any |= k >= 32 * j + 32 ? x[j] : k > 32 * j ? x[j] & ((1u << uint(k - 32 * j)) - 1u) : 0u;
    return any != 0u;
}

bool kn_w6_below(uint x[6], int k)
{
    uint any = 0u;
    [[unroll]] for (int j = 0; j < 6; j++)
        any |= k >= 32 * j + 32 ? x[j] : k > 32 * j ? x[j] & ((1u << uint(k - 32 * j)) - 1u) : 0u;
    return any != 0u;
}

/* The index of the leading one of x (-1 for zero). */
int kn_w4_msb(uint x[4])
{
    for (int j = 3; j >= 0; j--)
        if (x[j] != 0u)
            return 32 * j + findMSB(x[j]);
    return -1;
}

int kn_w6_msb(uint x[6])
{
    for (int j = 5; j >= 0; j--)
        if (x[j] != 0u)
            return 32 * j + findMSB(x[j]);
    return -1;
}

/* x with its bit 0 at bit s of a 192-bit frame; bits that fall below the frame are
 * jammed into bit 0 (a sticky bit far below the rounding place). */
void kn_w_place(uint x[4], int s, out uint f[6])
{
    [[unroll]] for (int i = 0; i < 6; i++)
        f[i] = kn_w4_bits(x, 32 * i - s);
    if (s < 0 && kn_w4_below(x, -s))
        f[0] |= 1u;
}

/* The mantissa (53 bits with the leading one, 52 for subnormals) of finite u and the
 * exponent of its last bit: |u| = m 2^e. */
void kn_d_unpack(uvec2 u, out uint m[4], out int e)
{
    uint be = (u.y >> 20) & 0x7ffu;
    m[0] = u.x;
    m[1] = (u.y & 0xfffffu) | (be != 0u ? 0x100000u : 0u);
    m[2] = 0u;
    m[3] = 0u;
    e = (be != 0u ? int(be) : 1) - 1075;
}

/* fma(a, b, c) with one rounding, from 32-bit integer steps only: the exact 106-bit
 * product of the mantissas, the addend aligned with it in a 192-bit frame (the larger's
 * leading one at bit 189, the smaller's bits below the frame jammed into a sticky bit 0,
 * which lies at least 84 bits below the rounding place whenever anything is shifted
 * out), the exact sum or difference, then one round to nearest even at the result's last
 * bit (subnormal results keep the last bit at 2^-1074; overflow gives infinity).
 * Infinite or NaN inputs and zero factors take a * b + c, which is then exact (the
 * product is exact or not finite). tests/unit/test_vk_kern.c compares it with C's fma on
 * ties, cancellations, carries, subnormals and random triples. */
double kn_dfma_soft(double a, double b, double c)
{
    uvec2 ua = unpackDouble2x32(a), ub = unpackDouble2x32(b), uc = unpackDouble2x32(c);
    bool fin = (ua.y & 0x7ff00000u) != 0x7ff00000u && (ub.y & 0x7ff00000u) != 0x7ff00000u &&
               (uc.y & 0x7ff00000u) != 0x7ff00000u;
    bool az = ((ua.y & 0x7fffffffu) | ua.x) == 0u, bz = ((ub.y & 0x7fffffffu) | ub.x) == 0u;
    if (!fin || az || bz) {
        precise double r = a * b + c;
        return r;
    }
    bool cz = ((uc.y & 0x7fffffffu) | uc.x) == 0u;
    uint ma[4], mb[4], mc[4];
    int ea, eb, ec;
    kn_d_unpack(ua, ma, ea);
    kn_d_unpack(ub, mb, eb);
    kn_d_unpack(uc, mc, ec);
    /* the product: (a1 2^32 + a0)(b1 2^32 + b0), a1 and b1 of 21 bits */
    uint p[4], h00, l00, h10, l10, h01, l01, h11, l11, c1, c2, c3, c4, c5;
    umulExtended(ma[0], mb[0], h00, l00);
    umulExtended(ma[1], mb[0], h10, l10);
    umulExtended(ma[0], mb[1], h01, l01);
    umulExtended(ma[1], mb[1], h11, l11);
    p[0] = l00;
    p[1] = uaddCarry(h00, l10, c1);
    p[1] = uaddCarry(p[1], l01, c2);
    p[2] = uaddCarry(h10, h01, c3);
    p[2] = uaddCarry(p[2], l11, c4);
    p[2] = uaddCarry(p[2], c1 + c2, c5);
    p[3] = h11 + c3 + c4 + c5;
    int ep = ea + eb;
    uint sp = (ua.y ^ ub.y) & 0x80000000u, sc = uc.y & 0x80000000u;
    int top_p = ep + kn_w4_msb(p), top_c = cz ? top_p : ec + kn_w4_msb(mc);
    int fr = max(top_p, top_c) - 189; /* the exponent of the frame's bit 0 */
    uint fp[6], fc[6], x[6];
    kn_w_place(p, ep - fr, fp);
    if (cz) {
        [[unroll]] for (int i = 0; i < 6; i++)
            fc[i] = 0u;
    } else {
        kn_w_place(mc, ec - fr, fc);
    }
    uint sign = sp;
    if (sp == sc) {
        uint cy = 0u;
        [[unroll]] for (int i = 0; i < 6; i++) {
            uint t1, t2;
            x[i] = uaddCarry(fp[i], fc[i], t1);
            x[i] = uaddCarry(x[i], cy, t2);
            cy = t1 + t2;
        }
    } else {
        bool pbig = true, decided = false;
        for (int i = 5; i >= 0; i--)
            if (!decided && fp[i] != fc[i]) {
                pbig = fp[i] > fc[i];
                decided = true;
            }
        uint br = 0u;
        [[unroll]] for (int i = 0; i < 6; i++) {
            uint t1, t2;
            x[i] = usubBorrow(pbig ? fp[i] : fc[i], pbig ? fc[i] : fp[i], t1);
            x[i] = usubBorrow(x[i], br, t2);
            br = t1 + t2;
        }
        sign = pbig ? sp : sc;
    }
    int mx = kn_w6_msb(x);
    if (mx < 0)
        return 0.0lf; /* an exact cancellation: +0 */
    int er = max(fr + mx - 52, -1074); /* the exponent of the result's last bit */
    int q = er - fr;
    uint k0 = kn_w6_bits(x, q), k1 = kn_w6_bits(x, q + 32) & 0x3fffffu;
    if (q >= 1 && (kn_w6_bits(x, q - 1) & 1u) != 0u && (kn_w6_below(x, q - 1) || (k0 & 1u) != 0u)) {
        uint cy;
        k0 = uaddCarry(k0, 1u, cy);
        k1 += cy;
    }
    /* a carry out of the mantissa bumps the exponent; subnormals have er + 1074 = 0 */
    uint hi = (uint(er + 1074) << 20) + k1;
    if (hi >= 0x7ff00000u)
        return packDouble2x32(uvec2(0u, sign | 0x7ff00000u));
    return packDouble2x32(uvec2(k0, sign | hi));
}

double kn_dfma(double a, double b, double c)
{
    if (KN_SOFT_DFMA)
        return kn_dfma_soft(a, b, c);
    precise double r = fma(a, b, c);
    return r;
}

double kn_dbits(uint lo, uint hi)
{
    return packDouble2x32(uvec2(lo, hi));
}

bool kn_disnan(double x)
{
    uvec2 u = unpackDouble2x32(x);
    return (u.y & 0x7fffffffu) > 0x7ff00000u || ((u.y & 0x7fffffffu) == 0x7ff00000u && u.x != 0u);
}

/* kern_exp_f64 (kn_hd_exp_f64): k = round(x / ln2) by the magic constant, r = x - k ln2
 * in two fma steps, Taylor to degree 13 by Horner (1/n! as the C compiler folds them,
 * correctly rounded), scaled by 2^(k/2) then 2^(k - k/2) (k/2 rounded toward zero). */
double kn_exp_f64(double x)
{
    if (kn_disnan(x))
        return x;
    if (x > 710.0lf)
        return kn_dbits(0u, 0x7ff00000u);
    if (x < -746.0lf)
        return 0.0lf;
    const double magic = 6755399441055744.0lf;
    precise double kd = x * kn_dbits(0x652b82feu, 0x3ff71547u); /* 1 / ln2_hi */
    kd = kd + magic;
    kd = kd - magic;
    precise double r = kn_dfma(-kd, kn_dbits(0xfefa39efu, 0x3fe62e42u), x); /* ln2_hi */
    r = kn_dfma(-kd, kn_dbits(0x3b39803fu, 0x3c7abc9eu), r);               /* ln2_lo */
    const uvec2 c[12] = uvec2[12](
        uvec2(0x13a86d09u, 0x3de61246u), uvec2(0xeff8d898u, 0x3e21eed8u),  /* 1/13!, 1/12! */
        uvec2(0x67f544e4u, 0x3e5ae645u), uvec2(0xb7789f5cu, 0x3e927e4fu),  /* 1/11!, 1/10! */
        uvec2(0xa556c734u, 0x3ec71de3u), uvec2(0x1a01a01au, 0x3efa01a0u),  /* 1/9!, 1/8! */
        uvec2(0x1a01a01au, 0x3f2a01a0u), uvec2(0x16c16c17u, 0x3f56c16cu),  /* 1/7!, 1/6! */
        uvec2(0x11111111u, 0x3f811111u), uvec2(0x55555555u, 0x3fa55555u),  /* 1/5!, 1/4! */
        uvec2(0x55555555u, 0x3fc55555u), uvec2(0x00000000u, 0x3fe00000u)); /* 1/3!, 1/2! */
    precise double p = packDouble2x32(c[0]);
    for (int i = 1; i < 12; i++)
        p = kn_dfma(p, r, packDouble2x32(c[i]));
    p = kn_dfma(p, r, 1.0lf);
    p = kn_dfma(p, r, 1.0lf);
    int k = int(kd);
    int k1 = k >= 0 ? k >> 1 : -((-k) >> 1), k2 = k - k1;
    precise double y = p * kn_dbits(0u, uint(k1 + 1023) << 20);
    y = y * kn_dbits(0u, uint(k2 + 1023) << 20);
    return y;
}

/* kern_tanhf: x itself below 2^-12, +-1 above 20, else (e^2|x| - 1) / (e^2|x| + 1) in
 * double, the sign restored, rounded to float once. */
float kn_tanhf(float x)
{
    if (kn_isnan(x))
        return x;
    precise double ax = x < 0.0 ? -double(x) : double(x);
    if (ax < 0.000244140625lf) /* 2^-12 */
        return x;
    precise double t = 1.0lf;
    if (!(ax > 20.0lf)) {
        precise double e = kn_exp_f64(2.0lf * ax);
        precise double num = e - 1.0lf;
        precise double den = e + 1.0lf;
        t = num / den;
    }
    return float(x < 0.0 ? -t : t);
}

/* kern_softcapf: c * tanh(x * (1 / c)), as tanh(x * (1 / c)) * c. */
float kn_softcapf(float x, float c)
{
    precise float xi = x * kn_div(1.0, c);
    precise float r = kn_tanhf(xi) * c;
    return r;
}
#endif

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
 * exact integer whatever the order (each product within 2^14, the sum within 2^16), so
 * the int8 dot product instruction gives the same bits. The KN_DOT4 builds (the mm_*_dot
 * shaders, run where the device enables shaderIntegerDotProduct) emit it through
 * GL_EXT_spirv_intrinsics, as this glslc has no GL_EXT_integer_dot_product
 * (docs/numerics.md "Devices"): OpSUDotKHR (4452) and OpSDotKHR (4450) on packed 4x8-bit
 * operands (format 0), capabilities DotProduct (6019) and DotProductInput4x8BitPacked
 * (6018). */
#ifdef KN_DOT4
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int kn_sudot4(uint s, uint u, spirv_literal int fmt);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int kn_sdot4(uint a, uint b, spirv_literal int fmt);

int kn_dot4_us(uint a, uint b)
{
    return kn_sudot4(b, a, 0);
}

int kn_dot4_ss(uint a, uint b)
{
    return kn_sdot4(a, b, 0);
}
#else
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
#endif
