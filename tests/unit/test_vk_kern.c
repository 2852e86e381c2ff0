/* test_vk_kern.c: every Vulkan compute shader (src/vulkan/vk_kern.h) against the CPU
 * reference, bit for bit, on the first Vulkan device (Mesa's lavapipe in CI): activation
 * quantization and the products of every weight type (the shapes and batch sizes of
 * test_kern_matmul.c), RMSNorm, RoPE (both modes), embedding rows of every type, the
 * elementwise ops, KV stores and attention (f32 and f16 caches, GQA, head dims 1 to 512,
 * windows across tiles, prefill = decode = chunked prefill), the integer double fma of
 * the soft-capped attention against C's fma; the products again with the int8 dot
 * product builds off where the device runs them (and every mm_*_dot build does hold the
 * dot product instructions, its scalar twin none). Inputs hold no denormals:
 * lavapipe flushes them (shaderDenormPreserveFloat32 is false), which test_denormals
 * shows and docs/numerics.md states. Skips (exit 77) with the reason when the build has
 * no Vulkan or there is no device. Sizes stay small: lavapipe runs shaders on the CPU. */
#include "check.h"
#include "kern_testutil.h"
#include "vulkan/vk_kern.h"

#include <math.h>

static struct vkr *rt;
static struct vkr_cmd *cmd;

/* ---------------------------------------------------------------- helpers */

static struct vkr_buf *dev_buf(const void *src, size_t bytes)
{
    struct kn_err err = {0};
    struct vkr_buf *b = vkr_buf_alloc(rt, bytes ? bytes : 4, VKR_MEM_DEVICE, true, &err);
    CHECKF(b != NULL, "%s", err.msg);
    if (b && src && bytes)
        CHECKF(vkr_buf_upload(rt, b, 0, src, bytes, &err) == KN_OK, "%s", err.msg);
    return b;
}

static void fetch(const struct vkr_buf *b, void *dst, size_t bytes)
{
    struct kn_err err = {0};
    CHECKF(vkr_buf_download(rt, b, 0, dst, bytes, &err) == KN_OK, "%s", err.msg);
}

static bool submit(const char *what)
{
    struct kn_err err = {0};
    enum kn_status st = vkr_cmd_submit(cmd, &err);
    CHECKF(st == KN_OK, "%s: %s", what, err.msg);
    return st == KN_OK;
}

/* Counts the floats (or words) that differ in bits; prints the first. */
static int diff_words(const char *what, const void *got, const void *want, size_t n)
{
    const uint32_t *g = got, *w = want;
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (g[i] != w[i]) {
            if (!bad) {
                float gf, wf;
                memcpy(&gf, &g[i], 4);
                memcpy(&wf, &w[i], 4);
                fprintf(stderr, "%s: word %zu is %08x (%.9g), the CPU's %08x (%.9g)\n", what, i,
                        (unsigned)g[i], (double)gf, (unsigned)w[i], (double)wf);
            }
            bad++;
        }
    return bad;
}

static void rand_f(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = tu_uniform() * scale;
}

/* ---------------------------------------------------------------- products */

/* tu_random_weights, with sane f16 scales also for the types it leaves random. */
static void random_weights(enum quant_type t, int64_t N, int64_t K, void *buf)
{
    tu_random_weights(t, N, K, buf);
    size_t d = 0, dmin = 0;
    switch (t) {
    case QT_Q2_K: d = 80, dmin = 82; break;
    case QT_Q3_K: d = 108; break;
    case QT_IQ4_NL: case QT_IQ4_XS: break;
    default: return;
    }
    const struct quant_type_info *ti = quant_type_info(t);
    size_t nb = (size_t)N * (size_t)(K / ti->block_size);
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = (uint8_t *)buf + b * ti->type_size;
        tu_put_f16(blk + d, tu_scale(0.01f, 1));
        if (dmin)
            tu_put_f16(blk + dmin, tu_scale(0.01f, 1));
    }
}

/* Every type with a shader; the products test those the CPU computes too
 * (kern_type_supported), the rows those it dequantizes. */
static const enum quant_type all_types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q8_0,  QT_Q4_0,
                                            QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q4_K,  QT_Q5_K,
                                            QT_Q6_K, QT_Q2_K, QT_Q3_K, QT_IQ4_NL, QT_IQ4_XS,
                                            QT_MXFP4};
#define MAX_M 17

/* x: (MAX_M, K) rows of different magnitudes, one all zero, one with a spike, a NaN-free
 * mix (test_kern_matmul's random_x). */
static void random_x(float *x, int64_t K)
{
    for (int m = 0; m < MAX_M; m++) {
        float scale = (m == 3) ? 0.0f : (float)(1 << (m % 7)) * 0.125f;
        for (int64_t k = 0; k < K; k++)
            x[m * K + k] = tu_uniform() * scale;
        if (m == 5)
            x[m * K + K / 2] = 40.0f;
    }
}

static void check_matmul(enum quant_type t, int64_t N, int64_t K)
{
    struct kn_err err = {0};
    uint64_t rb;
    quant_row_size(t, (uint64_t)K, &rb);
    size_t wbytes = (size_t)N * rb;
    uint8_t *wdata = malloc(wbytes);
    float *x = malloc((size_t)MAX_M * K * sizeof *x);
    float *y = malloc((size_t)MAX_M * N * sizeof *y),
                      *ref = malloc((size_t)MAX_M * N * sizeof *ref);
    random_weights(t, N, K, wdata);
    random_x(x, K);
    struct kern_weight w;
    CHECK(kern_weight_init(&w, t, N, K, wdata, wbytes, false, &err) == KN_OK);
    enum kern_act_kind kind = kern_act_kind_for(t);
    size_t qbytes = kern_act_bytes(kind, MAX_M, K);
    void *qcpu = qbytes ? malloc(qbytes) : NULL, *qgpu = qbytes ? malloc(qbytes) : NULL;
    struct vkr_buf *bw = dev_buf(wdata, wbytes), *bx = dev_buf(x, (size_t)MAX_M * K * 4);
    struct vkr_buf *bq = dev_buf(NULL, qbytes), *by = dev_buf(NULL, (size_t)MAX_M * N * 4);
    static const int ms[] = {1, 2, 3, 8, 17};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        int64_t M = ms[mi];
        struct kern_act a;
        kern_act_prepare(NULL, kind, x, M, K, qcpu, &a);
        kern_matmul_rows_ref(&w, &a, ref, N, 0, N);
        vkr_cmd_begin(cmd);
        if (kind != KERN_ACT_F32)
            vkk_act_quant(cmd, kind, vkk_at(bx, 0), M, K, vkk_at(bq, 0));
        vkk_matmul(cmd, &w, bw, vkk_at(bx, 0), vkk_at(bq, 0), M, vkk_at(by, 0), N);
        if (!submit(quant_type_name(t)))
            continue;
        if (kind != KERN_ACT_F32) {
            size_t qb = kern_act_bytes(kind, M, K);
            fetch(bq, qgpu, qb);
            int bad = diff_words("activations", qgpu, qcpu, qb / 4);
            CHECKF(bad == 0, "%s K %lld M %lld: %d activation words differ", quant_type_name(t),
                   (long long)K, (long long)M, bad);
        }
        fetch(by, y, (size_t)M * N * 4);
        int bad = diff_words(quant_type_name(t), y, ref, (size_t)M * N);
        CHECKF(bad == 0, "%s N %lld K %lld M %lld: %d of %lld outputs differ from the CPU",
               quant_type_name(t), (long long)N, (long long)K, (long long)M, bad,
               (long long)(M * N));
    }
    vkr_buf_free(rt, bw);
    vkr_buf_free(rt, bx);
    vkr_buf_free(rt, bq);
    vkr_buf_free(rt, by);
    kern_weight_free(&w);
    free(wdata);
    free(x);
    free(y);
    free(ref);
    free(qcpu);
    free(qgpu);
}

static void test_matmul(void)
{
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        enum quant_type t = all_types[ti];
        CHECK(vkk_matmul_type(t));
        if (!kern_type_supported(t)) {
            printf("products: %s has no CPU kernel in this build, not compared\n",
                   quant_type_name(t));
            continue;
        }
        uint32_t bs = quant_type_info(t)->block_size;
        if (bs == 1) {
            static const int64_t ks[] = {1, 7, 16, 37, 130, 520};
            for (size_t i = 0; i < 6; i++)
                check_matmul(t, i % 2 ? 37 : 16, ks[i]);
        } else if (bs == 32) {
            static const int64_t ks[] = {32, 96, 352, 2080}; /* 65 blocks: two chunks */
            for (size_t i = 0; i < 4; i++)
                check_matmul(t, i % 2 ? 16 : 37, ks[i]);
        } else {
            static const int64_t ks[] = {256, 768, 2560}; /* 10 blocks: two chunks */
            for (size_t i = 0; i < 3; i++)
                check_matmul(t, i % 2 ? 16 : 37, ks[i]);
        }
    }
}

/* How many OpSDotKHR (4450) and OpSUDotKHR (4452) instructions the SPIR-V of shader holds
 * (-1: no such shader). */
static int dot_ops(const char *shader)
{
    const struct vkr_shader *sh = vkr_shader_find(shader);
    if (!sh)
        return -1;
    int n = 0;
    size_t words = sh->bytes / 4;
    for (size_t i = 5; i < words;) { /* after the header: (word count << 16) | opcode */
        uint32_t len = sh->code[i] >> 16, op = sh->code[i] & 0xffffu;
        n += op == 4450u || op == 4452u;
        i += len ? len : words;
    }
    return n;
}

/* The int8 dot product builds: one per quantized product shader (and its _f64 build),
 * each with the instructions, the scalar one without; then, where the device has them,
 * the products in the other mode than test_matmul's (on by default, off under
 * KINETIC_VK_DOT=0). */
static void test_dot(void)
{
    int builds = 0;
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        char name[64];
        snprintf(name, sizeof name, "%s", vkk_matmul_shader(all_types[ti]));
        if (strcmp(name, "mm_f") == 0)
            continue;
        for (int f64 = 0; f64 < 2; f64++) {
            char plain[80], dot[96];
            snprintf(plain, sizeof plain, "%s%s", name, f64 ? "_f64" : "");
            snprintf(dot, sizeof dot, "%s_dot", plain);
            CHECKF(dot_ops(plain) == 0, "%s holds %d dot product instructions", plain, dot_ops(plain));
            CHECKF(dot_ops(dot) > 0, "%s: %d dot product instructions", dot, dot_ops(dot));
            builds++;
        }
    }
    CHECK(vkr_shader_find("mm_f_dot") == NULL);
    bool on = vkk_dot(rt);
    printf("int8 dot products: %d builds; %s in test_matmul: the products again with them %s\n",
           builds, on ? "on" : "off", on ? "off" : "on");
    if (vkr_device_info(rt)->int_dot) {
        CHECK(vkk_dot_set(rt, !on) == !on);
        test_matmul();
        vkk_dot_set(rt, on);
    } else {
        CHECK(!on && !vkk_dot_set(rt, true)); /* never on where the device has none */
        printf("int8 dot products: the device has none\n");
    }
}

/* Activation quantization on crafted rows: NaNs, infinities, ties of the rounding, an
 * all-zero block, values at +-127 * d. */
static void test_actq_edges(void)
{
    enum { K = 512 };
    float x[2 * K];
    for (int i = 0; i < 2 * K; i++)
        x[i] = tu_uniform();
    uint32_t nan = 0x7fc00001u;
    memcpy(&x[3], &nan, 4);
    x[40] = INFINITY;                   /* a block whose id is 0: all zeros */
    for (int i = 64; i < 96; i++)
        x[i] = 0.0f;                    /* zero block */
    x[100] = -0.0f;
    for (int i = 128; i < 160; i++)     /* ties: 127 * (i - 128) / 254 */
        x[i] = (float)(i - 128) * 0.5f;
    x[600] = -1e30f;
    for (int kind = KERN_ACT_Q8_32; kind <= KERN_ACT_Q8_K; kind++) {
        size_t qb = kern_act_bytes((enum kern_act_kind)kind, 2, K);
        uint8_t *cpu = malloc(qb), *gpu = malloc(qb);
        struct kern_act a;
        kern_act_prepare(NULL, (enum kern_act_kind)kind, x, 2, K, cpu, &a);
        struct vkr_buf *bx = dev_buf(x, sizeof x), *bq = dev_buf(NULL, qb);
        vkr_cmd_begin(cmd);
        vkk_act_quant(cmd, (enum kern_act_kind)kind, vkk_at(bx, 0), 2, K, vkk_at(bq, 0));
        if (submit("actq")) {
            fetch(bq, gpu, qb);
            CHECKF(diff_words("actq edges", gpu, cpu, qb / 4) == 0, "kind %d", kind);
        }
        vkr_buf_free(rt, bx);
        vkr_buf_free(rt, bq);
        free(cpu);
        free(gpu);
    }
}

/* ---------------------------------------------------------------- RMSNorm, RoPE */

static void test_rmsnorm(void)
{
    static const int64_t ns[] = {1, 7, 16, 37, 640, 1000};
    enum { ROWS = 3 };
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        int64_t n = ns[ni];
        float *x = malloc(ROWS * n * 4), *w = malloc(n * 4), *ref = malloc(ROWS * n * 4),
              *got = malloc(ROWS * n * 4);
        rand_f(x, ROWS * n, 3.0f);
        rand_f(w, n, 2.0f);
        struct vkr_buf *bx = dev_buf(x, ROWS * n * 4), *bw = dev_buf(w, n * 4);
        struct vkr_buf *by = dev_buf(NULL, ROWS * n * 4);
        for (int with_w = 0; with_w < 2; with_w++)
            for (int in_place = 0; in_place < 2; in_place++) {
                kern_rmsnorm(ref, n, x, n, with_w ? w : NULL, ROWS, n, 1e-6f);
                vkr_cmd_begin(cmd);
                const struct vkr_buf *out = in_place ? bx : by;
                vkr_cmd_write(cmd, bx, 0, x, ROWS * n * 4); /* an in-place pass changed it */
                vkk_rmsnorm(cmd, vkk_at(out, 0), vkk_at(bx, 0), vkk_at(with_w ? bw : NULL, 0),
                            ROWS, n, 1e-6f);
                if (!submit("rmsnorm"))
                    continue;
                fetch(out, got, ROWS * n * 4);
                CHECKF(diff_words("rmsnorm", got, ref, ROWS * n) == 0,
                       "n %lld gain %d in place %d", (long long)n, with_w, in_place);
            }
        vkr_buf_free(rt, bx);
        vkr_buf_free(rt, bw);
        vkr_buf_free(rt, by);
        free(x);
        free(w);
        free(ref);
        free(got);
    }
}

static void test_rope(void)
{
    struct kn_err err = {0};
    enum { T = 5, H = 3 };
    static const int32_t pos[T] = {0, 1, 17, 300, 4097};
    static const struct { int mode, n_rot, D; double ext; } cases[] = {
        {KERN_ROPE_NORM, 64, 64, 0.0}, {KERN_ROPE_NEOX, 32, 48, 0.0},
        {KERN_ROPE_NEOX, 256, 256, 1.0}, {KERN_ROPE_NORM, 2, 6, 0.0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct kern_rope_params p = {.mode = cases[ci].mode, .n_rot = cases[ci].n_rot,
                                     .freq_base = 10000.0, .freq_scale = cases[ci].ext ? 0.25 : 1.0,
                                     .attn_factor = 1.0, .ext_factor = cases[ci].ext,
                                     .n_ctx_orig = 4096, .beta_fast = 32.0, .beta_slow = 1.0};
        struct kern_rope rope;
        CHECK(kern_rope_init(&rope, &p, &err) == KN_OK);
        int64_t D = cases[ci].D, n = T * H * D;
        float *x = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
        float *tab = malloc(T * rope.n_rot * 4);
        rand_f(x, n, 4.0f);
        memcpy(ref, x, n * 4);
        kern_rope_table(&rope, pos, T, tab);
        kern_rope(&rope, ref, H * D, T, H, D, tab);
        struct vkr_buf *bx = dev_buf(x, n * 4), *bt = dev_buf(tab, T * rope.n_rot * 4);
        vkr_cmd_begin(cmd);
        vkk_rope(cmd, vkk_at(bx, 0), vkk_at(bt, 0), &rope, T, H, D);
        if (submit("rope")) {
            fetch(bx, got, n * 4);
            CHECKF(diff_words("rope", got, ref, n) == 0, "case %zu", ci);
        }
        vkr_buf_free(rt, bx);
        vkr_buf_free(rt, bt);
        free(x);
        free(ref);
        free(got);
        free(tab);
    }
}

/* ---------------------------------------------------------------- rows, elementwise */

static void test_embed(void)
{
    enum { ROWS = 9, T = 6 };
    static const int32_t tokens[T] = {3, 0, 8, 3, 5, 1};
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        enum quant_type t = all_types[ti];
        CHECK(vkk_rows_type(t) && quant_can_dequantize(t));
        int64_t E = quant_type_info(t)->block_size == 256 ? 512 : 96;
        uint64_t rb;
        quant_row_size(t, (uint64_t)E, &rb);
        uint8_t *tab = malloc(ROWS * rb);
        random_weights(t, ROWS, E, tab);
        float *ref = malloc(T * E * 4), *got = malloc(T * E * 4);
        struct vkr_buf *bt = dev_buf(tab, ROWS * rb), *bx = dev_buf(NULL, T * E * 4);
        static const float scales[] = {1.0f, 25.29822f};
        for (int si = 0; si < 2; si++) {
            for (int i = 0; i < T; i++) {
                const uint8_t *row = tab + (size_t)tokens[i] * rb;
                if (!kern_row_to_f32(t, row, ref + i * E, E))
                    CHECK(quant_dequantize_row(t, row, ref + i * E, E));
            }
            if (scales[si] != 1.0f)
                kern_scale(ref, ref, scales[si], T * E);
            vkr_cmd_begin(cmd);
            vkk_embed(cmd, vkk_at(bx, 0), bt, t, E, rb, tokens, T, scales[si]);
            if (!submit("embed"))
                continue;
            fetch(bx, got, T * E * 4);
            CHECKF(diff_words("embed", got, ref, T * E) == 0, "%s scale %g", quant_type_name(t),
                   (double)scales[si]);
        }
        vkr_buf_free(rt, bt);
        vkr_buf_free(rt, bx);
        free(tab);
        free(ref);
        free(got);
    }
}

static void test_eltwise(void)
{
    enum { ROWS = 3, N = 1000 };
    static float y[ROWS * N], a[ROWS * N], ref[ROWS * N], got[ROWS * N];
    rand_f(y, ROWS * N, 12.0f);
    rand_f(a, ROWS * N, 3.0f);
    y[7] = 100.0f; /* exp overflow and underflow in the activations */
    y[8] = -120.0f;
    y[9] = -0.0f;
    struct vkr_buf *by = dev_buf(NULL, sizeof y), *ba = dev_buf(a, sizeof a);
    static const int64_t rows_idx[ROWS] = {2, 0, 2}; /* a row twice, one never */
    for (int op = VKK_ADD; op <= VKK_GATHER; op++) {
        int64_t n = op == VKK_ADD_ROWS || op == VKK_GATHER ? N : ROWS * N;
        int64_t rows = op == VKK_ADD_ROWS || op == VKK_GATHER ? ROWS : 1;
        memcpy(ref, y, sizeof y);
        switch (op) {
        case VKK_ADD: kern_add(ref, ref, a, n); break;
        case VKK_ADD_ROWS:
            for (int r = 0; r < ROWS; r++)
                kern_add(ref + r * N, ref + r * N, a, N);
            break;
        case VKK_SCALE: kern_scale(ref, ref, 0.0625f * 3.0f, n); break;
        case VKK_SWIGLU: kern_swiglu(ref, ref, a, n); break;
        case VKK_GEGLU: kern_geglu(ref, ref, a, n); break;
        default:
            for (int j = 0; j < ROWS; j++)
                memcpy(ref + j * N, a + rows_idx[j] * N, N * 4);
        }
        vkr_cmd_begin(cmd);
        vkr_cmd_write(cmd, by, 0, y, sizeof y);
        vkk_eltwise(cmd, (enum vkk_elt)op, vkk_at(by, 0), vkk_at(ba, 0), rows_idx, rows, n,
                    0.0625f * 3.0f);
        if (!submit("eltwise"))
            continue;
        fetch(by, got, sizeof got);
        CHECKF(diff_words("eltwise", got, ref, ROWS * N) == 0, "op %d", op);
    }
    /* a row past the source, a position past the cache: the pass fails, naming it */
    static const int64_t bad_rows[2] = {0, ROWS};
    vkr_cmd_begin(cmd);
    vkk_eltwise(cmd, VKK_GATHER, vkk_at(by, 0), vkk_at(ba, 0), bad_rows, 2, N, 0.0f);
    struct kn_err err = {0};
    CHECK(vkr_cmd_submit(cmd, &err) == KN_E_ARG);
    CHECKF(strstr(err.msg, "past the end") != NULL, "%s", err.msg);
    static const int32_t bad_pos[1] = {ROWS};
    vkr_cmd_begin(cmd);
    vkk_kv_store(cmd, vkk_at(ba, 0), vkk_at(ba, 0), by, by, QT_F32, 4, 1, ROWS, bad_pos, 0, 1);
    CHECK(vkr_cmd_submit(cmd, &err) == KN_E_ARG);
    CHECKF(strstr(err.msg, "outside the cache") != NULL, "%s", err.msg);
    vkr_buf_free(rt, by);
    vkr_buf_free(rt, ba);
}

/* ---------------------------------------------------------------- KV cache, attention */

/* Stores T tokens at positions pos into head-major caches of n_ctx slots, on the CPU and
 * the device, and compares the caches. */
static void check_kv_store(uint32_t kv_type, int64_t D, int64_t Hkv)
{
    enum { T = 5, NCTX = 40 };
    static const int32_t pos[T] = {4, 5, 6, 39, 0};
    size_t elt = kv_type == QT_F16 ? 2 : 4, cbytes = (size_t)Hkv * NCTX * D * elt;
    float *k = malloc(T * Hkv * D * 4), *v = malloc(T * Hkv * D * 4);
    rand_f(k, T * Hkv * D, 70000.0f); /* some overflow f16 */
    rand_f(v, T * Hkv * D, 1.0f);
    k[1] = 1e-6f;                     /* an f16 subnormal */
    uint8_t *kc = calloc(1, cbytes), *vc = calloc(1, cbytes);
    uint8_t *gk = malloc(cbytes + 4), *gv = malloc(cbytes + 4);
    for (int t = 1; t < T; t++) /* token 0 is stored by a second call (run of 1) */
        for (int64_t g = 0; g < Hkv; g++) {
            size_t off = ((size_t)g * NCTX + (size_t)pos[t]) * D * elt;
            CHECK(kern_kv_store(kv_type, kc + off, k + (t * Hkv + g) * D, D));
            CHECK(kern_kv_store(kv_type, vc + off, v + (t * Hkv + g) * D, D));
        }
    for (int64_t g = 0; g < Hkv; g++) {
        size_t off = ((size_t)g * NCTX + (size_t)pos[0]) * D * elt;
        CHECK(kern_kv_store(kv_type, kc + off, k + g * D, D));
        CHECK(kern_kv_store(kv_type, vc + off, v + g * D, D));
    }
    struct vkr_buf *bk = dev_buf(k, T * Hkv * D * 4), *bv = dev_buf(v, T * Hkv * D * 4);
    struct vkr_buf *ck = dev_buf(NULL, cbytes), *cv = dev_buf(NULL, cbytes);
    vkr_cmd_begin(cmd);
    vkk_kv_store(cmd, vkk_at(bk, 0), vkk_at(bv, 0), ck, cv, kv_type, D, Hkv, NCTX, pos, 1, T - 1);
    vkk_kv_store(cmd, vkk_at(bk, 0), vkk_at(bv, 0), ck, cv, kv_type, D, Hkv, NCTX, pos, 0, 1);
    if (submit("kv_store")) {
        fetch(ck, gk, cbytes);
        fetch(cv, gv, cbytes);
        CHECKF(memcmp(gk, kc, cbytes) == 0 && memcmp(gv, vc, cbytes) == 0,
               "kv_store type %u D %lld Hkv %lld", (unsigned)kv_type, (long long)D, (long long)Hkv);
    }
    vkr_buf_free(rt, bk);
    vkr_buf_free(rt, bv);
    vkr_buf_free(rt, ck);
    vkr_buf_free(rt, cv);
    free(k);
    free(v);
    free(kc);
    free(vc);
    free(gk);
    free(gv);
}

/* Attention of n_q queries at positions p0.. over a cache filled with n_kv random rows,
 * on the device in one call or in chunks (one call per chunk, as chunked prefill and
 * decode do), against kern_attn. */
static void check_attn(uint32_t kv_type, int H, int Hkv, int D, int window, int n_kv, int n_q,
                       int chunk, float score_scale)
{
    const int64_t NCTX = n_kv + 3, QD = (int64_t)H * D;
    size_t elt = kv_type == QT_F16 ? 2 : 4, cbytes = (size_t)Hkv * NCTX * D * elt;
    uint8_t *kc = calloc(1, cbytes), *vc = calloc(1, cbytes);
    float *row = malloc(D * 4);
    for (int64_t g = 0; g < Hkv; g++)
        for (int64_t p = 0; p < n_kv; p++) {
            size_t off = ((size_t)g * NCTX + (size_t)p) * D * elt;
            rand_f(row, D, 1.0f);
            CHECK(kern_kv_store(kv_type, kc + off, row, D));
            rand_f(row, D, 1.0f);
            CHECK(kern_kv_store(kv_type, vc + off, row, D));
        }
    float *q = malloc(n_q * QD * 4), *ref = malloc(n_q * QD * 4), *got = malloc(n_q * QD * 4);
    int32_t *pos = malloc(n_q * sizeof *pos);
    rand_f(q, n_q * QD, 1.0f);
    for (int t = 0; t < n_q; t++)
        pos[t] = n_kv - n_q + t;
    struct kern_attn_args a = {
        .q = q, .q_stride = QD, .q_pos = pos, .n_q = n_q, .k = kc, .v = vc,
        .k_stride = D, .v_stride = D, .k_head_stride = NCTX * D, .v_head_stride = NCTX * D,
        .kv_type = kv_type, .n_kv = n_kv, .n_head = H, .n_head_kv = Hkv, .head_dim = D,
        .scale = score_scale / sqrtf((float)D), .window = window, .out = ref, .out_stride = QD};
    struct kn_err err = {0};
    CHECKF(kern_attn_check(&a, &err) == KN_OK, "%s", err.msg);
    kern_attn(&a, 0, n_q * H);
    struct vkr_buf *bq = dev_buf(q, n_q * QD * 4), *bo = dev_buf(NULL, n_q * QD * 4);
    struct vkr_buf *bk = dev_buf(kc, cbytes), *bv = dev_buf(vc, cbytes);
    struct vkr_buf *bp = NULL;
    for (int split = 0; split < 2; split++) { /* one pass, then tiles and merge apart */
        vkr_cmd_begin(cmd);
        for (int t0 = 0; t0 < n_q; t0 += chunk) {
            int n = n_q - t0 < chunk ? n_q - t0 : chunk;
            struct vkk_attn va = {
                .q = vkk_at(bq, (uint32_t)(t0 * QD)), .out = vkk_at(bo, (uint32_t)(t0 * QD)),
                .k = bk, .v = bv, .kv_type = kv_type, .pos = pos + t0, .n_q = n, .n_ctx = NCTX,
                .n_head = H, .n_head_kv = Hkv, .head_dim = D, .window = window,
                .scale = a.scale};
            if (split) {
                if (!bp) /* sized for all the queries: enough for any chunk */
                    bp = dev_buf(NULL, vkk_attention_part_bytes(&(struct vkk_attn){
                        .pos = pos, .n_q = n_q, .n_head = H, .head_dim = D, .window = window}));
                va.part = bp;
            }
            vkk_attention(cmd, &va);
        }
        if (submit("attention")) {
            fetch(bo, got, n_q * QD * 4);
            CHECKF(diff_words("attention", got, ref, n_q * QD) == 0,
                   "type %u H %d/%d D %d window %d n_kv %d n_q %d chunk %d split %d",
                   (unsigned)kv_type, H, Hkv, D, window, n_kv, n_q, chunk, split);
        }
        /* clear the output so the second way cannot pass on the first's results */
        float *zero = calloc(n_q * QD, 4);
        CHECK(vkr_buf_upload(rt, bo, 0, zero, n_q * QD * 4, &(struct kn_err){0}) == KN_OK);
        free(zero);
    }
    vkr_buf_free(rt, bp);
    vkr_buf_free(rt, bq);
    vkr_buf_free(rt, bo);
    vkr_buf_free(rt, bk);
    vkr_buf_free(rt, bv);
    free(kc);
    free(vc);
    free(row);
    free(q);
    free(ref);
    free(got);
    free(pos);
}

static void test_attention(void)
{
    check_kv_store(QT_F32, 64, 2);
    check_kv_store(QT_F16, 64, 2);
    check_kv_store(QT_F16, 7, 3); /* odd D: halves share words across rows */
    check_kv_store(QT_F32, 5, 1);
    for (int f16 = 0; f16 < 2; f16++) {
        uint32_t kt = f16 ? QT_F16 : QT_F32;
        check_attn(kt, 4, 1, 64, 0, 70, 7, 7, 1.0f);    /* GQA 4:1, three tiles */
        check_attn(kt, 4, 1, 64, 0, 70, 7, 1, 1.0f);    /* the same, decoded one by one */
        check_attn(kt, 4, 2, 256, 20, 90, 9, 4, 1.0f);  /* Gemma's head dim, a window */
        check_attn(kt, 2, 2, 1, 0, 33, 3, 3, 1.0f);     /* head dim 1 */
        check_attn(kt, 2, 1, 100, 33, 64, 64, 16, 30.0f); /* prefill, sharp scores */
    }
    check_attn(QT_F32, 2, 1, 512, 0, 40, 2, 2, 1.0f);   /* the largest head dim */
    check_attn(QT_F16, 4, 1, 128, 0, 300, 1, 1, 1.0f);  /* decode over ten tiles */
    check_attn(QT_F32, 4, 2, 64, 100, 300, 2, 1, 1.0f); /* a window over four tiles */
}

/* ---------------------------------------------------------------- denormals */

/* What the device does with f32 denormals: the contract keeps them; a device that does
 * not (lavapipe flushes) is told apart by this probe, and the bits above hold on inputs
 * without them. Prints the behaviour; fails only if the two probes disagree with the
 * device's own report of denormPreserve. */
static void test_denormals(void)
{
    float x[16] = {0}, ref[16];
    for (int i = 0; i < 16; i++)
        x[i] = (i % 2 ? -1.0f : 1.0f) * 0x1p-140f * (float)(i + 1); /* denormal inputs */
    kern_scale(ref, x, 0.5f, 16);
    struct vkr_buf *b = dev_buf(x, sizeof x);
    vkr_cmd_begin(cmd);
    vkk_eltwise(cmd, VKK_SCALE, vkk_at(b, 0), vkk_at(NULL, 0), NULL, 1, 16, 0.5f);
    float got[16];
    if (!submit("denormals"))
        return;
    fetch(b, got, sizeof got);
    bool kept = memcmp(got, ref, sizeof got) == 0;
    bool flushed = true;
    for (int i = 0; i < 16; i++)
        flushed &= got[i] == 0.0f;
    const struct vkr_info *in = vkr_device_info(rt);
    printf("denormals: %s (device reports denormPreserve32 = %d)\n",
           kept ? "kept" : flushed ? "flushed to zero" : "mixed", in->denorm_preserve[1]);
    CHECK(kept || flushed);
    if (in->denorm_preserve[1])
        CHECK(kept);
    vkr_buf_free(rt, b);
}

/* ---------------------------------------------------------------- division and sqrt */

/* The integer builds of kn_div and kn_sqrt (kn_common.glsl, used where the driver's are not
 * correctly rounded) give the CPU's a / b and sqrtf on the probe's hard cases (quotients
 * and roots within 2^-44 of a rounding tie, subnormal and overflowing results, the special
 * values) and on random bit patterns over the whole range; the probe's verdict on the
 * driver's own agrees with a count of its mismatches. */
static int ds_bad(const float *got, const float *want, int n, const char *what,
                  const float *a, const float *b)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        uint32_t g, w;
        memcpy(&g, &got[i], 4);
        memcpy(&w, &want[i], 4);
        if (g == w || (isnan(got[i]) && isnan(want[i])))
            continue;
        if (bad++ < 4)
            fprintf(stderr, "%s(%a, %a): %a, the CPU %a\n", what, (double)a[i],
                    b ? (double)b[i] : 0.0, (double)got[i], (double)want[i]);
    }
    return bad;
}

/* Whether x (a double of a quotient or root of floats, within 2^-53 of it) is within
 * 2^-44 x of a tie between two floats: a hard case of the rounding. */
static bool near_tie(double x)
{
    if (!(fabs(x) >= 0x1p-126 && fabs(x) <= 0x1p127))
        return false;
    float c = (float)x;
    double up = (double)nextafterf(c, INFINITY), dn = (double)nextafterf(c, -INFINITY);
    double d = fmin(fabs(x - ((double)c + up) / 2), fabs(x - ((double)c + dn) / 2));
    return d < ldexp(fabs(x), -44);
}

static void test_divsqrt(void)
{
    enum { N = 2048, R = 1 << 15 };
    struct kn_err err = {0};
    float *a = malloc(R * sizeof(float)), *b = malloc(R * sizeof(float));
    float *q = malloc(R * sizeof(float)), *r = malloc(R * sizeof(float));
    float *wq = malloc(R * sizeof(float)), *wr = malloc(R * sizeof(float));
    int n = vkk_divsqrt_cases(a, b, N);
    CHECK_EQ_INT(n, N);
    int hard_q = 0, hard_r = 0;
    for (int i = 0; i < n; i++) {
        hard_q += near_tie((double)a[i] / (double)b[i]);
        hard_r += a[i] > 0 && near_tie(sqrt((double)a[i]));
    }
    printf("division and sqrt: %d quotients and %d roots of %d cases within 2^-44 of a tie\n",
           hard_q, hard_r, n);
    CHECK(hard_q >= N / 8 && hard_r >= N / 8);
    const struct vkk_divsqrt soft = {true, true}, drv = {false, false};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* random bit patterns: every exponent, subnormals, signs */
            n = R;
            for (int i = 0; i < n; i++) {
                uint32_t u = (uint32_t)tu_next() & 0xff7fffffu, v = (uint32_t)tu_next() & 0xff7fffffu;
                memcpy(&a[i], &u, 4);
                memcpy(&b[i], &v, 4);
            }
        }
        for (int i = 0; i < n; i++)
            wq[i] = a[i] / b[i], wr[i] = sqrtf(a[i]);
        CHECKF(vkk_divsqrt_run(rt, soft, a, b, n, q, r, &err) == KN_OK, "%s", err.msg);
        CHECK_EQ_INT(ds_bad(q, wq, n, "integer division", a, b), 0);
        CHECK_EQ_INT(ds_bad(r, wr, n, "integer sqrt", a, NULL), 0);
        if (pass == 0) { /* the driver's, and the probe's verdict on them */
            CHECKF(vkk_divsqrt_run(rt, drv, a, b, n, q, r, &err) == KN_OK, "%s", err.msg);
            int bd = ds_bad(q, wq, n, "driver division", a, b);
            int bs = ds_bad(r, wr, n, "driver sqrt", a, NULL);
            struct vkk_divsqrt mode;
            int pd = -1, ps = -1;
            CHECKF(vkk_divsqrt_probe(rt, &mode, &pd, &ps, &err) == KN_OK, "%s", err.msg);
            CHECK_EQ_INT(pd, bd);
            CHECK_EQ_INT(ps, bs);
            CHECK(mode.soft_div == (bd > 0) && mode.soft_sqrt == (bs > 0));
            printf("division and sqrt: the driver's differ on %d and %d of %d hard cases: %s\n",
                   bd, bs, n, mode.soft_div || mode.soft_sqrt ? "the integer builds are used"
                                                               : "the driver's are used");
        }
    }
    free(a);
    free(b);
    free(q);
    free(r);
    free(wq);
    free(wr);
}

/* kern_tanhf's double fma (kn_common.glsl kn_dfma): the integer build equals C's fma bit
 * for bit on the crafted cases (ties, cancellations to zero, carries into the exponent,
 * subnormals, overflow, tanh's own steps) and on random triples of every kind; the probe's
 * verdict on the driver's is the count of its differences; the driver's division and
 * conversion to float agree with C's. */
static void test_dfma(void)
{
    enum { N = 2048, R = 1 << 15 };
    struct kn_err err = {0};
    if (!vkr_device_info(rt)->float64) {
        printf("double fma: not run (no shaderFloat64; soft-capped attention stays on the CPU)\n");
        return;
    }
    double *t = malloc(3 * R * sizeof(double)), *f = malloc(R * sizeof(double));
    double *q = malloc(R * sizeof(double));
    float *cv = malloc(R * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        int n = pass == 0 ? vkk_dfma_cases(t, N, 0) : vkk_dfma_cases(t, R, 0x5bd1e995u);
        CHECK_EQ_INT(n, pass == 0 ? N : R);
        CHECKF(vkk_dfma_run(rt, true, t, n, f, q, cv, &err) == KN_OK, "%s", err.msg);
        int bad = 0, bad_q = 0, bad_c = 0;
        for (int i = 0; i < n; i++) {
            double want = fma(t[3 * i], t[3 * i + 1], t[3 * i + 2]), wq = t[3 * i] / t[3 * i + 1];
            float wc = (float)t[3 * i];
            if (memcmp(&want, &f[i], 8) != 0 && !(isnan(want) && isnan(f[i])) && bad++ < 5)
                printf("integer fma(%a, %a, %a) = %a, C's fma %a\n", t[3 * i], t[3 * i + 1],
                       t[3 * i + 2], f[i], want);
            bad_q += memcmp(&wq, &q[i], 8) != 0 && !(isnan(wq) && isnan(q[i]));
            bad_c += memcmp(&wc, &cv[i], 4) != 0 && !(isnan(wc) && isnan(cv[i]));
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(bad_q, 0);
        CHECK_EQ_INT(bad_c, 0);
        if (pass == 0) { /* the driver's, and the probe's verdict */
            CHECKF(vkk_dfma_run(rt, false, t, n, f, NULL, NULL, &err) == KN_OK, "%s", err.msg);
            int bd = 0;
            for (int i = 0; i < n; i++) {
                double want = fma(t[3 * i], t[3 * i + 1], t[3 * i + 2]);
                bd += memcmp(&want, &f[i], 8) != 0 && !(isnan(want) && isnan(f[i]));
            }
            bool soft = !bd;
            int pb = -1;
            CHECKF(vkk_dfma_probe(rt, &soft, &pb, &err) == KN_OK, "%s", err.msg);
            CHECK_EQ_INT(pb, bd);
            CHECK(soft == (bd > 0));
            printf("double fma: the driver's differs on %d of %d hard cases: %s\n", bd, n,
                   soft ? "the integer build is used" : "the driver's is used");
        }
    }
    free(t);
    free(f);
    free(q);
    free(cv);
}

int main(void)
{
    struct kn_err err = {0};
    if (vkr_open(0, &rt, &err) != KN_OK) {
        printf("skipped: no Vulkan device: %s\n", err.msg);
        return 77;
    }
    cmd = vkr_cmd_create(rt, &err);
    CHECKF(cmd != NULL, "%s", err.msg);
    if (!cmd) {
        vkr_close(rt);
        CHECK_DONE();
    }
    printf("device: %s (%s)\n", vkr_device_info(rt)->name, vkr_device_info(rt)->driver_info);
    enum vkk_fma mode;
    CHECKF(vkk_fma_probe(rt, &mode, &err) == KN_OK, "%s", err.msg);
    printf("fma: %s\n", mode == VKK_FMA_NATIVE ? "the driver's (fused)"
                                                : "exact in double (the driver's is not fused)");
    test_denormals();
    test_divsqrt();
    test_dfma();
    test_eltwise();
    test_rmsnorm();
    test_rope();
    test_embed();
    test_actq_edges();
    test_attention();
    test_matmul();
    test_dot();
    /* weights and tables bound in parts (as a tensor over maxStorageBufferRange is) */
    vkk_limit_bindings(3000);
    check_matmul(QT_Q5_0, 37, 352); /* 242-byte rows: 12 to a part */
    check_matmul(QT_Q6_K, 16, 768);
    check_matmul(QT_F16, 16, 520);  /* 2 to a part */
    test_embed();
    vkk_limit_bindings(0);
    vkr_cmd_free(cmd);
    vkk_fma_forget(rt);
    vkr_close(rt);
    CHECK_DONE();
}
