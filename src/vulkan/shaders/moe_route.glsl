/* moe_route.comp: the routing of a mixture-of-experts layer (kern_moe_route, src/kernels/
 * moe.c; docs/numerics.md "Mixture of experts"), one invocation per token:
 *   p = softmax(logits) (kern_softmax: the max with NaN skipped and a zero made +0,
 *       e_i = exp(x_i - max), their 16-slot sum and tree, e_i / sum)
 *     or sigmoid: p_i = 1 / (1 + exp(-x_i)), or (gpt-oss) the logits themselves;
 *   s = p + bias (bias given); rank r takes the largest s not taken, ties to the lower
 *   index, a NaN never over a number; w_r = p[id_r];
 *   with gpt-oss's gating the chosen w then softmax(w) in rank order; norm: sum =
 *   ((w_0 + w_1) + ...), NaN or below KN_MOE_NORM_MIN clamped to it, w_r = w_r / sum;
 *   then w_r *= scale.
 * Grid: ceil(T / 64). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer L { float logits[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float bias[]; };
layout(std430, set = 0, binding = 2) writeonly buffer I { int ids[]; };
layout(std430, set = 0, binding = 3) writeonly buffer W { float wout[]; };

layout(push_constant) uniform P {
    uint T, n, k;
    uint gating;    /* kern_moe_gating: 0 softmax, 1 sigmoid, 2 softmax of the chosen */
    uint has_bias, norm;
    float scale;
} pc;

#include "kn_common.glsl"

#define KN_MOE_MAX_EXPERTS 512
#define KN_MOE_MAX_USED 64
const float KN_MOE_NORM_MIN = 6.103515625e-5; /* 2^-14, KERN_MOE_NORM_MIN */

/* v[0..n-1] = kern_softmax of itself (a macro: a private array passed to a function is
 * copied, which lavapipe's compiler takes minutes over). */
#define KN_SOFTMAX(v, n)                                                                    \
    {                                                                                       \
        float m = uintBitsToFloat(0xff800000u);                                             \
        for (uint i = 0u; i < (n); i++)                                                     \
            m = v[i] > m ? v[i] : m;                                                        \
        m = floatBitsToUint(m) == 0x80000000u ? 0.0 : m; /* m + 0.0f */                     \
        precise float acc[16];                                                              \
        [[unroll]] for (int i = 0; i < 16; i++)                                             \
            acc[i] = 0.0;                                                                   \
        for (uint i = 0u; i < (n); i++) {                                                   \
            precise float d = v[i] - m;                                                     \
            v[i] = kn_expf(d);                                                              \
            acc[i % 16u] = acc[i % 16u] + v[i];                                             \
        }                                                                                   \
        [[unroll]] for (int wd = 8; wd >= 1; wd /= 2)                                       \
            [[unroll]] for (int i = 0; i < wd; i++)                                         \
                acc[i] = acc[i] + acc[i + wd];                                              \
        for (uint i = 0u; i < (n); i++)                                                     \
            v[i] = kn_div(v[i], acc[0]);                                                    \
    }

void main()
{
    uint t = gl_GlobalInvocationID.x;
    if (t >= pc.T)
        return;
    uint n = pc.n, k = pc.k, lb = t * n;
    float p[KN_MOE_MAX_EXPERTS];
    uint taken[KN_MOE_MAX_EXPERTS / 32];
    for (uint i = 0u; i < KN_MOE_MAX_EXPERTS / 32; i++)
        taken[i] = 0u;
    if (pc.gating != 1u) {
        for (uint i = 0u; i < n; i++)
            p[i] = logits[lb + i];
        if (pc.gating == 0u)
            KN_SOFTMAX(p, n)
    } else {
        for (uint i = 0u; i < n; i++) {
            precise float den = 1.0 + kn_expf(-logits[lb + i]);
            p[i] = kn_div(1.0, den);
        }
    }
    float wt[KN_MOE_MAX_USED];
    for (uint r = 0u; r < k; r++) {
        int best = -1;
        float sb = 0.0;
        for (uint i = 0u; i < n; i++) {
            if ((taken[i / 32u] & (1u << (i % 32u))) != 0u)
                continue;
            precise float si = pc.has_bias != 0u ? p[i] + bias[i] : p[i];
            if (best < 0 || si > sb || (kn_isnan(sb) && !kn_isnan(si))) {
                best = int(i);
                sb = si;
            }
        }
        taken[uint(best) / 32u] |= 1u << (uint(best) % 32u);
        ids[t * k + r] = best;
        wt[r] = p[best];
    }
    if (pc.gating == 2u) /* gpt-oss: the softmax of the chosen logits */
        KN_SOFTMAX(wt, k)
    if (pc.norm != 0u) {
        precise float sum = wt[0];
        for (uint r = 1u; r < k; r++)
            sum = sum + wt[r];
        if (kn_isnan(sum) || sum < KN_MOE_NORM_MIN)
            sum = KN_MOE_NORM_MIN;
        for (uint r = 0u; r < k; r++)
            wt[r] = kn_div(wt[r], sum);
    }
    for (uint r = 0u; r < k; r++) {
        precise float v = pc.scale != 1.0 ? wt[r] * pc.scale : wt[r];
        wout[t * k + r] = v;
    }
}
