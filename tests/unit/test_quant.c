/* test_quant.c: the reference quantize/dequantize code.
 *
 * Without arguments: unit checks. Hand-built blocks whose values were worked out by hand
 * from llama.cpp's documented layouts pin every format's bit positions; round trips
 * bound each quantizer's error; edge cases (zeros, constants, inf/NaN) stay defined.
 *
 * With arguments it is the driver that tests/py/test_quant_oracle.py uses to compare
 * this code with gguf-py (an independent implementation) on real tensors:
 *   test_quant dequant TYPE N IN.bin OUT.f32   raw blocks -> N floats
 *   test_quant quant TYPE N IN.f32 OUT.bin     N floats -> raw blocks
 * TYPE is a GGML type name (q4_K, ...); N a multiple of its block size. */
#include "check.h"
#include "quant/quant.h"

#include <math.h>
#include <stdint.h>

/* ---------------------------------------------------------------- driver mode */

static void *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)len;
    return buf;
}

static int driver(int argc, char **argv)
{
    enum quant_type t;
    if (argc != 6 || !quant_type_from_name(argv[2], &t)) {
        fprintf(stderr, "usage: test_quant dequant|quant TYPE N IN OUT\n");
        return 2;
    }
    int64_t n = strtoll(argv[3], NULL, 10);
    uint64_t row_bytes;
    if (n <= 0 || !quant_row_size(t, (uint64_t)n, &row_bytes)) {
        fprintf(stderr, "bad N %s for %s\n", argv[3], argv[2]);
        return 2;
    }
    size_t in_size;
    void *in = read_all(argv[4], &in_size);
    bool deq = strcmp(argv[1], "dequant") == 0;
    size_t want = deq ? (size_t)row_bytes : (size_t)n * sizeof(float);
    if (!in || in_size != want) {
        fprintf(stderr, "%s: expected %zu bytes\n", argv[4], want);
        return 2;
    }
    size_t out_size = deq ? (size_t)n * sizeof(float) : (size_t)row_bytes;
    void *out = malloc(out_size);
    bool ok = deq ? quant_dequantize_row(t, in, out, n) : quant_quantize_row(t, in, out, n);
    if (!ok) {
        fprintf(stderr, "%s not supported for %s\n", argv[1], argv[2]);
        return 3;
    }
    FILE *f = fopen(argv[5], "wb");
    if (!f || fwrite(out, 1, out_size, f) != out_size || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", argv[5]);
        return 2;
    }
    free(in);
    free(out);
    return 0;
}

/* ---------------------------------------------------------------- hand-built blocks */

static float y[512];

/* Dequantizes one block of type t from raw bytes into y. */
static void deq(uint32_t t, const void *blk)
{
    const struct quant_type_info *info = quant_type_info(t);
    memset(y, 0xff, sizeof y); /* NaN: an element the code forgot stays visible */
    CHECK(quant_dequantize_row(t, blk, y, info->block_size));
}

#define CHECK_Y(i, want) CHECKF(y[i] == (float)(want), "%s y[%d] = %.9g, want %.9g", what, (i), \
                                (double)y[i], (double)(want))

static void test_half_floats(void)
{
    const char *what = "f16";
    uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    CHECK(quant_dequantize_row(QT_F16, h, y, 4));
    CHECK_Y(0, 1.0);
    CHECK_Y(1, -2.0);
    CHECK_Y(2, 5.9604644775390625e-08);
    CHECK_Y(3, 65504.0);
    what = "bf16";
    uint16_t b[2] = {0x3f80, 0xc0a0};
    CHECK(quant_dequantize_row(QT_BF16, b, y, 2));
    CHECK_Y(0, 1.0);
    CHECK_Y(1, -5.0);
    what = "f32";
    float f[2] = {1.5f, -0.25f};
    CHECK(quant_dequantize_row(QT_F32, f, y, 2));
    CHECK_Y(0, 1.5);
    CHECK_Y(1, -0.25);
}

static void test_legacy_blocks(void)
{
    const char *what = "q4_0";
    struct block_q4_0 a = {0};
    a.d = 0x3800; /* 0.5 */
    a.qs[0] = 0x1f;
    a.qs[15] = 0x80;
    deq(QT_Q4_0, &a);
    CHECK_Y(0, 3.5);   /* (15 - 8) * 0.5 */
    CHECK_Y(16, -3.5); /* (1 - 8) * 0.5 */
    CHECK_Y(15, -4.0);
    CHECK_Y(31, 0.0);
    CHECK_Y(1, -4.0);

    what = "q4_1";
    struct block_q4_1 b = {0};
    b.d = 0x3c00;
    b.m = 0xbc00; /* -1 */
    b.qs[3] = 0xa5;
    deq(QT_Q4_1, &b);
    CHECK_Y(3, 4.0);  /* 5 * 1 - 1 */
    CHECK_Y(19, 9.0); /* 10 * 1 - 1 */
    CHECK_Y(4, -1.0);

    what = "q5_0";
    struct block_q5_0 c = {0};
    c.d = 0x3c00;
    c.qh[0] = 0x04; /* bit 2: value 2 */
    c.qh[2] = 0x10; /* bit 20: value 20 */
    c.qs[2] = 0x03;
    c.qs[4] = 0x70;
    deq(QT_Q5_0, &c);
    CHECK_Y(2, 3.0);    /* (3 | 16) - 16 */
    CHECK_Y(18, -16.0); /* 0 - 16 */
    CHECK_Y(4, -16.0);
    CHECK_Y(20, 7.0); /* (7 | 16) - 16 */

    what = "q5_1";
    struct block_q5_1 e = {0};
    e.d = 0x3800; /* 0.5 */
    e.m = 0x4000; /* 2 */
    e.qh[3] = 0x80; /* bit 31: value 31 */
    e.qs[15] = 0xf0;
    deq(QT_Q5_1, &e);
    CHECK_Y(31, 17.5); /* 31 * 0.5 + 2 */
    CHECK_Y(15, 2.0);

    what = "q8_0";
    struct block_q8_0 g = {0};
    g.d = 0x3400; /* 0.25 */
    g.qs[7] = -128;
    g.qs[8] = 127;
    deq(QT_Q8_0, &g);
    CHECK_Y(7, -32.0);
    CHECK_Y(8, 31.75);
    CHECK_Y(9, 0.0);

    what = "iq4_nl";
    struct block_iq4_nl h = {0};
    h.d = 0x3c00;
    h.qs[5] = 0xf0;
    deq(QT_IQ4_NL, &h);
    CHECK_Y(5, -127.0);
    CHECK_Y(21, 113.0);
    CHECK_Y(0, -127.0);
}

static void test_k_blocks(void)
{
    const char *what = "q2_K";
    struct block_q2_K a = {0};
    a.d = 0x3c00;
    a.dmin = 0x3800; /* 0.5 */
    a.scales[5] = 0x32; /* sub-block 5: scale 2, min 3 */
    a.qs[17] = 0x30;    /* value 81 = bits 4..5 of qs[17] */
    a.scales[12] = 0x1f;
    a.qs[40] = 0x20; /* value 200: qs[32 + 8], bits 4..5 */
    deq(QT_Q2_K, &a);
    CHECK_Y(81, 4.5);   /* 2 * 3 - 0.5 * 3 */
    CHECK_Y(80, -1.5);  /* 0 - 1.5 */
    CHECK_Y(200, 29.5); /* 15 * 2 - 0.5 */
    CHECK_Y(0, 0.0);

    what = "q3_K";
    struct block_q3_K b = {0};
    b.d = 0x3800; /* 0.5 */
    b.scales[1] = 0x50; /* sub-block 9: low nibble 5 */
    b.scales[9] = 0x20; /* sub-block 9: high bits 2 (bits 4..5 of byte 8 + 9 % 4) */
    b.qs[54] = 0x03;    /* value 150: qs[32 + 22], bits 0..1 */
    b.hmask[22] = 0x10; /* value 150: bit 4 of hmask[22] */
    deq(QT_Q3_K, &b);
    CHECK_Y(150, 7.5);  /* 0.5 * (37 - 32) * 3 */
    CHECK_Y(151, -10.0); /* 0.5 * 5 * (0 - 4) */
    CHECK_Y(0, 64.0);   /* 0.5 * (0 - 32) * (0 - 4) */

    what = "q4_K";
    struct block_q4_K c = {0};
    c.d = 0x3c00;
    c.dmin = 0x3400;    /* 0.25 */
    c.scales[9] = 0x73; /* sub-block 5: scale low 3, min low 7 */
    c.scales[1] = 0xc0; /* sub-block 5: scale high bits 3 */
    c.scales[5] = 0x40; /* sub-block 5: min high bits 1 */
    c.qs[71] = 0x90;    /* value 167 = sub-block 5, l 7: high nibble of qs[64 + 7] */
    deq(QT_Q4_K, &c);
    CHECK_Y(167, 453.25); /* 51 * 9 - 0.25 * 23 */
    CHECK_Y(166, -5.75);
    CHECK_Y(135, 0.0); /* low nibble of qs[71], sub-block 4 (scale 0, min 0) */
    int sc, m;
    quant_k4_scale_min(c.scales, 5, &sc, &m);
    CHECK_EQ_INT(sc, 51);
    CHECK_EQ_INT(m, 23);

    what = "q5_K";
    struct block_q5_K e = {0};
    e.d = c.d;
    e.dmin = c.dmin;
    memcpy(e.scales, c.scales, sizeof e.scales);
    memcpy(e.qs, c.qs, sizeof e.qs);
    e.qh[7] = 0x20; /* value 167: bit 5 of qh[7] */
    deq(QT_Q5_K, &e);
    CHECK_Y(167, 1269.25); /* 51 * 25 - 5.75 */
    CHECK_Y(135, 0.0);

    what = "q6_K";
    struct block_q6_K g = {0};
    g.d = 0x3800;     /* 0.5 */
    g.ql[72] = 0xa0;  /* value 200: high nibble of ql[64 + 8] */
    g.qh[40] = 0x30;  /* value 200: bits 4..5 of qh[32 + 8] */
    g.scales[12] = -3;
    g.scales[8] = 2;
    deq(QT_Q6_K, &g);
    CHECK_Y(200, -39.0); /* 0.5 * -3 * ((10 | 48) - 32) */
    CHECK_Y(136, -32.0); /* 0.5 * 2 * (0 - 32): low nibble of ql[72] */
    CHECK_Y(201, 48.0);  /* 0.5 * -3 * -32 */

    what = "q8_K";
    static struct block_q8_K k;
    memset(&k, 0, sizeof k);
    k.d = 0.125f;
    k.qs[100] = -7;
    deq(QT_Q8_K, &k);
    CHECK_Y(100, -0.875);
    CHECK_Y(255, 0.0);

    what = "iq4_xs";
    struct block_iq4_xs x = {0};
    x.d = 0x3800;        /* 0.5 */
    x.scales_l[1] = 0x90; /* sub-block 3: low 9 */
    x.scales_h = 0x00c0; /* sub-block 3: high 3 */
    x.qs[50] = 0x78;     /* sub-block 3, j 2 */
    deq(QT_IQ4_XS, &x);
    CHECK_Y(98, 12.5);   /* 0.5 * 25 * 1 */
    CHECK_Y(114, -125.0); /* 0.5 * 25 * -10 */
    CHECK_Y(0, 2032.0);  /* 0.5 * -32 * -127 */
}

/* ---------------------------------------------------------------- round trips */

/* A fixed pseudo-random normal-ish sequence (sum of four uniforms), no libm. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd_normal(void)
{
    int64_t s = 0;
    for (int k = 0; k < 4; k++) {
        rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
        s += (int64_t)(rng_state >> 48);
    }
    return (float)(s - 131070) * (1.7320508f / 65536.0f);
}

#define NV 8192
static float xs[NV], xr[NV];
static uint8_t qbuf[NV * 4];

/* Relative RMS error of a round trip through type t. */
static double round_trip(uint32_t t, const float *x)
{
    CHECK(quant_quantize_row(t, x, qbuf, NV));
    CHECK(quant_dequantize_row(t, qbuf, xr, NV));
    double e = 0, s = 0;
    for (int i = 0; i < NV; i++) {
        e += ((double)xr[i] - x[i]) * ((double)xr[i] - x[i]);
        s += (double)x[i] * x[i];
    }
    return sqrt(e / s);
}

static void test_round_trips(void)
{
    for (int i = 0; i < NV; i++)
        xs[i] = 0.02f * rnd_normal();
    /* Bounds: 5-10% above the error measured on this data (f16 2.1e-4, bf16 1.7e-3,
     * q8_0 5.1e-3, q5_1 .0367, q5_0 .0409, q4_1 .0758, q4_0 .0822, q6_K .0161,
     * q5_K .0346, q4_K .0684, q3_K .1398, q2_K .2602). On N(0, 0.02) data llama.cpp's
     * reference K-quantizers reach .0178 (q6_K), .0362 (q5_K), .0717 (q4_K), .1512 (q3_K),
     * .2975 (q2_K); Kinetic's .0170, .0359, .0715, .1438, .2699. */
    static const struct {
        uint32_t t;
        double max_rel;
    } cases[] = {
        {QT_F32, 0.0},     {QT_F16, 2.3e-4},  {QT_BF16, 1.9e-3}, {QT_Q8_0, 5.5e-3},
        {QT_Q5_1, 0.039},  {QT_Q5_0, 0.043},  {QT_Q4_1, 0.080},  {QT_Q4_0, 0.087},
        {QT_Q6_K, 0.0170}, {QT_Q5_K, 0.0365}, {QT_Q4_K, 0.0720}, {QT_Q3_K, 0.147},
        {QT_Q2_K, 0.273},
    };
    double rel[QT_COUNT] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double r = round_trip(cases[c].t, xs);
        rel[cases[c].t] = r;
        printf("round trip %-5s rel rmse %.5f\n", quant_type_name(cases[c].t), r);
        CHECKF(r <= cases[c].max_rel, "%s rel rmse %.5f > %.5f", quant_type_name(cases[c].t), r,
               cases[c].max_rel);
    }
    /* The K-quant scale search must beat the plain range-based formats of the same bits. */
    CHECK(rel[QT_Q4_K] < rel[QT_Q4_1]);
    CHECK(rel[QT_Q5_K] < rel[QT_Q5_1]);

    /* Determinism: the same input gives the same bytes. */
    static uint8_t again[NV * 4];
    const uint32_t all[] = {QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1,
                            QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K};
    for (size_t c = 0; c < sizeof all / sizeof all[0]; c++) {
        uint64_t bytes;
        CHECK(quant_row_size(all[c], NV, &bytes));
        CHECK(quant_quantize_row(all[c], xs, qbuf, NV));
        CHECK(quant_quantize_row(all[c], xs, again, NV));
        CHECK(memcmp(qbuf, again, bytes) == 0);
    }
}

/* Values on a format's grid come back exactly. */
static void test_exact_grids(void)
{
    float x[256], r[256];
    uint8_t buf[512];
    /* Q4_0: the extreme -4 gives d = 0.5 and the grid (q - 8) * 0.5; -4..3.5 in 0.5 steps. */
    for (int i = 0; i < 32; i++)
        x[i] = (float)((i % 16) - 8) * 0.5f;
    CHECK(quant_quantize_row(QT_Q4_0, x, buf, 32));
    CHECK(quant_dequantize_row(QT_Q4_0, buf, r, 32));
    CHECK(memcmp(x, r, sizeof(float) * 32) == 0);
    /* Q8_0: integers -127..127 times 1/8 (amax 127/8 gives d = 1/8 exactly). */
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i * 8 - 127) / 8.0f;
    x[31] = 127.0f / 8.0f;
    CHECK(quant_quantize_row(QT_Q8_0, x, buf, 32));
    CHECK(quant_dequantize_row(QT_Q8_0, buf, r, 32));
    CHECK(memcmp(x, r, sizeof(float) * 32) == 0);
    /* K-quants: values on an integer grid the format can hold get the right integers;
     * only the f16 rounding of the super-block scale remains (relative 2^-11 of the
     * sub-block step, times the level: under 0.02 here). */
    static const struct {
        uint32_t t;
        int lo, hi;
    } grids[] = {{QT_Q6_K, -32, 31}, {QT_Q4_K, 0, 15}, {QT_Q5_K, 0, 31}, {QT_Q3_K, -4, 3},
                 {QT_Q2_K, 0, 3}};
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        int span = grids[g].hi - grids[g].lo + 1;
        for (int i = 0; i < 256; i++)
            x[i] = (float)(grids[g].lo + (i * 7) % span);
        CHECK(quant_quantize_row(grids[g].t, x, buf, 256));
        CHECK(quant_dequantize_row(grids[g].t, buf, r, 256));
        double emax = 0;
        for (int i = 0; i < 256; i++) {
            /* not fmax(): gcc 12's aarch64 vectorizer crashes on that reduction here */
            double e = fabs((double)r[i] - x[i]);
            emax = e > emax ? e : emax;
        }
        CHECKF(emax < 0.02, "%s integer grid max error %g", quant_type_name(grids[g].t), emax);
    }
}

static void test_edges(void)
{
    float x[256], r[256];
    uint8_t buf[512];
    const uint32_t all[] = {QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1,
                            QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K};
    for (size_t c = 0; c < sizeof all / sizeof all[0]; c++) {
        const char *name = quant_type_name(all[c]);
        memset(x, 0, sizeof x);
        CHECK(quant_quantize_row(all[c], x, buf, 256));
        CHECK(quant_dequantize_row(all[c], buf, r, 256));
        for (int i = 0; i < 256; i++)
            CHECKF(r[i] == 0, "%s zeros: r[%d] = %g", name, i, (double)r[i]);
        for (int i = 0; i < 256; i++)
            x[i] = -0.75f; /* a constant block: only the f16 rounding of a scale is lost */
        CHECK(quant_quantize_row(all[c], x, buf, 256));
        CHECK(quant_dequantize_row(all[c], buf, r, 256));
        for (int i = 0; i < 256; i++)
            CHECKF(fabsf(r[i] + 0.75f) <= 1e-3f, "%s constant: r[%d] = %g", name, i, (double)r[i]);
        /* inf and NaN: must not crash or hit undefined behaviour (UBSan build) */
        for (int i = 0; i < 256; i++)
            x[i] = (float)i;
        x[3] = INFINITY;
        x[40] = NAN;
        x[100] = -INFINITY;
        CHECK(quant_quantize_row(all[c], x, buf, 256));
    }
    /* Bad arguments. */
    CHECK(!quant_quantize_row(QT_Q4_0, x, buf, 31));
    CHECK(!quant_dequantize_row(QT_Q4_K, buf, r, 128));
    CHECK(!quant_quantize_row(QT_IQ2_XXS, x, buf, 256));
    CHECK(!quant_dequantize_row(QT_IQ2_XXS, buf, r, 256));
    CHECK(!quant_dequantize_row(999, buf, r, 256));
    CHECK(quant_can_dequantize(QT_IQ4_XS));
    CHECK(!quant_can_quantize(QT_Q8_K)); /* activations: the kernels quantize those */
}

/* The type table's computable flags are the formats the kernels implement. */
static void test_type_table(void)
{
    const uint32_t computable[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q4_1, QT_Q5_0,
                                   QT_Q5_1, QT_Q8_0, QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K,
                                   QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4};
    int count = 0;
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        const struct quant_type_info *info = quant_type_info(t);
        if (info && info->computable) {
            count++;
            CHECKF(quant_can_dequantize(t) && quant_can_quantize(t),
                   "%s computable but not handled by the reference code", info->name);
        }
    }
    CHECK_EQ_INT(count, (int)(sizeof computable / sizeof computable[0]));
    for (size_t i = 0; i < sizeof computable / sizeof computable[0]; i++)
        CHECK(quant_type_info(computable[i])->computable);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return driver(argc, argv);
    test_half_floats();
    test_legacy_blocks();
    test_k_blocks();
    test_round_trips();
    test_exact_grids();
    test_edges();
    test_type_table();
    CHECK_DONE();
}
