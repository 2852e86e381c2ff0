/* bench_kernels.c: the matrix-product micro-benchmark. For each weight type, ISA level and
 * thread count: M = 1 (decode; GB/s of weight bytes read, cycling through enough copies of
 * the weight to defeat the caches) and M = 512 (prefill; GOPS, 2 M N K per product).
 * Each figure is the best batch's time: wall time, or with one thread CPU time when smaller
 * (the development machine is shared: wall time counts the neighbours).
 *
 *   bench_kernels [--n N] [--k K] [--types q4_K,q8_0,...] [--isa avx512,...]
 *                 [--threads 1,2] [--m 1,512] [--seconds S] [--hot 1] [--vbmi 0]
 *                 [--prefetch BYTES[,BYTES...]]
 *   bench_kernels --peak 1 [--threads 1,2]
 *   bench_kernels --mix 1
 * --hot 1 reuses one copy of the weight (cache-resident if small: the compute ceiling).
 * --vbmi 0 runs the AVX-512 look-ups (IQ4_NL, IQ4_XS, MXFP4) with vpshufb, as a CPU
 * without VBMI does, instead of vpermb (kern_isa_vbmi: the same bits).
 * --prefetch BYTES sets the products' software prefetch distance (kern_prefetch_set; 0:
 * none) instead of this CPU's default (KINETIC_PREFETCH or kern_prefetch_default). With
 * --vs-stream a list of distances is measured side by side: each read is followed by one
 * pass at each distance, and each gets a row of its own.
 * --vs-stream 1 measures M <= VS_MAX_M against the machine's streaming read instead: it
 * alternates one pass over every copy with one plain read of as many bytes
 * (kern_memread, as `kinetic bench` does) for --seconds, and gives the medians of both
 * rates and of each pass's rate over its neighbouring read, so that a shared machine's
 * memory bandwidth, which changes from one second to the next, cancels out.
 * --mix 1 measures, on one thread, how fast the 512-bit instructions the kernels are made
 * of retire: 16 independent ones of a kind alone, then 8 of the kind beside 8 `vpdpbusd`
 * (the pair's rate next to vpdpbusd's alone says whether they share its pipes). A kernel's
 * instructions per byte against these rates is its compute ceiling.
 * --peak 1 measures the machine's int8 peak instead: every thread of the pool runs a loop
 * of 16 independent `vpdpbusd zmm` (no memory operands), and the figure is the sum of the
 * threads' rates (each the best of several runs), in instructions and in int8 operations
 * (64 multiply-adds, 128 operations, each): the ceiling the prefill figures are a share of.
 */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

/* CPU time of this process: with one thread, the kernel's own time even when the shared
 * machine preempts it (wall time then measures the neighbours too). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random valid blocks: random bytes, then sane f16 scales where the type has them. */
static void fill_weights(enum quant_type t, void *buf, size_t bytes)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)next_rand();
    const struct quant_type_info *ti = quant_type_info(t);
    kn_f16 s = quant_f32_to_f16(0.01f);
    if (t == QT_F32) {
        for (size_t i = 0; i < bytes / 4; i++) {
            float v = (float)(int)(next_rand() % 2001 - 1000) * 1e-3f;
            memcpy(p + 4 * i, &v, 4);
        }
        return;
    }
    if (t == QT_F16 || t == QT_BF16) {
        for (size_t i = 0; i < bytes / 2; i++) {
            float v = (float)(int)(next_rand() % 2001 - 1000) * 1e-3f;
            kn_f16 h = t == QT_F16 ? quant_f32_to_f16(v) : quant_f32_to_bf16(v);
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    }
    for (size_t b = 0; b < bytes / ti->type_size; b++) {
        uint8_t *blk = p + b * ti->type_size;
        if (t == QT_MXFP4) {
            blk[0] = 120; /* E8M0: 2^-8 */
            continue;
        }
        size_t doff = t == QT_Q6_K ? offsetof(struct block_q6_K, d)
                    : t == QT_Q3_K ? offsetof(struct block_q3_K, d)
                    : t == QT_Q2_K ? offsetof(struct block_q2_K, d) : 0;
        memcpy(blk + doff, &s, 2);
        if (t == QT_Q4_1 || t == QT_Q5_1 || t == QT_Q4_K || t == QT_Q5_K)
            memcpy(blk + 2, &s, 2);
        if (t == QT_Q2_K)
            memcpy(blk + offsetof(struct block_q2_K, dmin), &s, 2);
    }
}

#define VS_MAX 256 /* pairs of a --vs-stream measurement */
#define VS_MAX_M 16 /* the most tokens --vs-stream measures (more are compute-bound) */
#define PF_MAX 8    /* distances of one --prefetch list */

/* --vs-stream: the medians of the product's rate over `copies` weights (M tokens; GB/s
 * of weights), the plain read's, and their ratio, pair by pair, at each of the npf
 * prefetch distances pf (one pass at each after every read); written as result columns
 * res[0..npf). */
static int vs_stream(struct kern_pool *pool, const struct kern_weight *w, int copies,
                     size_t wbytes, const float *x, int64_t M, float *y, void *scratch,
                     double seconds, const size_t *pf, int npf, char (*res)[128])
{
    struct kn_err err;
    struct kern_memread *mr;
    int64_t mib = (int64_t)(((size_t)copies * wbytes + ((size_t)1 << 20) - 1) >> 20);
    if (kern_memread_create(mib, &mr, &err) != KN_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        return 1;
    }
    static double kr[PF_MAX][VS_MAX], ratio[PF_MAX][VS_MAX];
    double rr[VS_MAX];
    int n = 0;
    double start = kn_now();
    while (n < VS_MAX && (kn_now() - start < seconds || n < 5)) {
        rr[n] = kern_memread_run(mr, pool);
        for (int s = 0; s < npf; s++) {
            kern_prefetch_set(pf[s]);
            double t0 = kn_now();
            for (int c = 0; c < copies; c++)
                kern_matmul(pool, &w[c], x, M, y, scratch);
            kr[s][n] = (double)copies * (double)wbytes / (kn_now() - t0) * 1e-9;
            ratio[s][n] = kr[s][n] / rr[n];
        }
        n++;
    }
    kern_memread_free(mr);
    for (int s = 0; s < npf; s++)
        snprintf(res[s], 128, "%.1f GB/s, read %.1f GB/s, %.0f%% (median of %d pairs)",
                 kn_median(kr[s], n), kn_median(rr, n), 100.0 * kn_median(ratio[s], n), n);
    return 0;
}

static bool in_list(const char *list, const char *name)
{
    if (!list)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}

#if defined(__x86_64__)
#define PEAK_ITERS 2000000L
/* PEAK_ITERS x 16 independent vpdpbusd zmm; returns its wall time. */
__attribute__((target("avx512f,avx512vnni"))) static double peak_loop(void)
{
    double t0 = kn_now();
    for (long i = 0; i < PEAK_ITERS; i++)
        __asm__ volatile(
#define PEAK_DP(r) "vpdpbusd %%zmm16, %%zmm17, %%zmm" #r "\n"
            PEAK_DP(0) PEAK_DP(1) PEAK_DP(2) PEAK_DP(3) PEAK_DP(4) PEAK_DP(5) PEAK_DP(6) PEAK_DP(7)
            PEAK_DP(8) PEAK_DP(9) PEAK_DP(10) PEAK_DP(11) PEAK_DP(12) PEAK_DP(13) PEAK_DP(14) PEAK_DP(15)
#undef PEAK_DP
            ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
            "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    return kn_now() - t0;
}

struct peak_run {
    double rate[64]; /* instructions per second of each thread, best run */
};

static void peak_task(void *ctx, int ith, int nth)
{
    (void)nth;
    struct peak_run *pr = ctx;
    double best = 1e30;
    for (int r = 0; r < 15; r++) {
        double t = peak_loop();
        best = t < best ? t : best;
    }
    pr->rate[ith] = 16.0 * (double)PEAK_ITERS / best;
}
#endif

/* --mix: one instruction kind per loop, MIX_ITERS x 16 of them. X(r) is the kind on
 * register r (each register its own chain; zmm16 and zmm17 are inputs only); the pair
 * loops run 8 of the kind (zmm8-15) beside 8 vpdpbusd (zmm0-7). */
#define MIX_ITERS 1000000L
#define MIX_CLOBBER                                                                           \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",  \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
#define MIX_DP(r) "vpdpbusd %%zmm16, %%zmm17, %%zmm" #r "\n"
#define MIX_AND(r) "vpandd %%zmm16, %%zmm" #r ", %%zmm" #r "\n"
#define MIX_TERN(r) "vpternlogd $0xf8, %%zmm16, %%zmm17, %%zmm" #r "\n"
#define MIX_ADD(r) "vpaddd %%zmm16, %%zmm" #r ", %%zmm" #r "\n"
#define MIX_SLL(r) "vpsllw $2, %%zmm" #r ", %%zmm" #r "\n"
#define MIX_SRAD(r) "vpsrad $2, %%zmm" #r ", %%zmm" #r "\n"
#define MIX_SHUF(r) "vpshufb %%zmm16, %%zmm" #r ", %%zmm" #r "\n"
#define MIX_PERMB(r) "vpermb %%zmm16, %%zmm" #r ", %%zmm" #r "\n"
#define MIX_MOVZX(r) "vpmovzxbd %%xmm16, %%zmm" #r "\n"
#define MIX_MADD(r) "vpmaddwd %%zmm16, %%zmm" #r ", %%zmm" #r "\n"
#define MIX_MULLO(r) "vpmulld %%zmm16, %%zmm" #r ", %%zmm" #r "\n"
#define MIX_CVT(r) "vcvtdq2ps %%zmm" #r ", %%zmm" #r "\n"
#define MIX_FMA(r) "vfmadd231ps %%zmm16, %%zmm17, %%zmm" #r "\n"
#define MIX_LOOPS_T(X, name, isa)                                                             \
    __attribute__((target(isa))) static double mix_##name(bool dp)                            \
    {                                                                                         \
        double t0 = kn_now();                                                                 \
        if (dp)                                                                               \
            for (long i = 0; i < MIX_ITERS; i++)                                              \
                __asm__ volatile(MIX_DP(0) MIX_DP(1) MIX_DP(2) MIX_DP(3) MIX_DP(4) MIX_DP(5)  \
                                     MIX_DP(6) MIX_DP(7) X(8) X(9) X(10) X(11) X(12) X(13)    \
                                         X(14) X(15) ::: MIX_CLOBBER);                        \
        else                                                                                  \
            for (long i = 0; i < MIX_ITERS; i++)                                              \
                __asm__ volatile(X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10)      \
                                     X(11) X(12) X(13) X(14) X(15) ::: MIX_CLOBBER);          \
        return kn_now() - t0;                                                                 \
    }
#define MIX_LOOPS(X, name) MIX_LOOPS_T(X, name, "avx512f,avx512bw,avx512vnni")
#if defined(__x86_64__)
MIX_LOOPS(MIX_DP, dp)
MIX_LOOPS(MIX_AND, and)
MIX_LOOPS(MIX_TERN, tern)
MIX_LOOPS(MIX_ADD, add)
MIX_LOOPS(MIX_SLL, sll)
MIX_LOOPS(MIX_SRAD, srad)
MIX_LOOPS(MIX_SHUF, shuf)
/* vpermb (AVX-512 VBMI, which the kernels do not require): a 64-byte look-up whose
 * indices need no mask; measured only where the CPU has it */
MIX_LOOPS_T(MIX_PERMB, permb, "avx512f,avx512bw,avx512vnni,avx512vbmi")
MIX_LOOPS(MIX_MOVZX, movzx)
MIX_LOOPS(MIX_MADD, madd)
MIX_LOOPS(MIX_MULLO, mullo)
MIX_LOOPS(MIX_CVT, cvt)
MIX_LOOPS(MIX_FMA, fma)
#endif

static int run_mix(void)
{
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
        fprintf(stderr, "bench_kernels: --mix needs AVX-512 BW and VNNI, which this CPU lacks\n");
        return 1;
    }
    static const struct {
        const char *name;
        double (*fn)(bool);
    } kinds[] = {{"vpdpbusd", mix_dp},     {"vpandd", mix_and},       {"vpternlogd", mix_tern},
                 {"vpaddd", mix_add},      {"vpsllw", mix_sll},       {"vpsrad", mix_srad},
                 {"vpshufb", mix_shuf},    {"vpermb", mix_permb},     {"vpmovzxbd", mix_movzx},
                 {"vpmaddwd", mix_madd},   {"vpmulld", mix_mullo},    {"vcvtdq2ps", mix_cvt},
                 {"vfmadd231ps", mix_fma}};
    printf("| zmm instruction | G/s alone | G/s beside 8 vpdpbusd (both kinds) |\n|---|---|---|\n");
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        if (kinds[k].fn == mix_permb && !__builtin_cpu_supports("avx512vbmi"))
            continue;
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < 9; r++)
            for (int d = 0; d < 2; d++) {
                double t = kinds[k].fn(d);
                best[d] = t < best[d] ? t : best[d];
            }
        const double n = 16.0 * (double)MIX_ITERS * 1e-9;
        printf("| %s | %.2f | %.2f |\n", kinds[k].name, n / best[0], n / best[1]);
    }
    return 0;
#else
    fprintf(stderr, "bench_kernels: --mix is written for x86-64 only\n");
    return 1;
#endif
}

/* --peak: the int8 peak of each thread count in the list. */
static int run_peak(const char *threads)
{
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512vnni")) {
        fprintf(stderr, "bench_kernels: --peak needs AVX-512 VNNI (vpdpbusd), which this CPU lacks\n");
        return 1;
    }
    printf("| int8 peak | threads | G vpdpbusd zmm/s | GOPS |\n|---|---|---|---|\n");
    for (int th = 1; th <= 64; th++) {
        char tn[12];
        snprintf(tn, sizeof tn, "%d", th);
        if (!in_list(threads, tn))
            continue;
        struct kern_pool *pool;
        struct kn_err err;
        if (kern_pool_create(th, &pool, &err) != KN_OK) {
            fprintf(stderr, "bench_kernels: %s\n", err.msg);
            return 1;
        }
        struct peak_run pr = {{0}};
        kern_pool_run(pool, peak_task, &pr);
        kern_pool_free(pool);
        double sum = 0;
        for (int i = 0; i < th; i++)
            sum += pr.rate[i];
        printf("| vpdpbusd x16 | %d | %.2f | %.0f |\n", th, sum * 1e-9, sum * 128.0 * 1e-9);
    }
    return 0;
#else
    (void)threads;
    fprintf(stderr, "bench_kernels: --peak is written for x86-64 (vpdpbusd) only\n");
    return 1;
#endif
}

int main(int argc, char **argv)
{
    int64_t N = 2048, K = 2048;
    const char *types = NULL, *isas = NULL, *threads = "1,2", *ms = "1,512";
    double seconds = 0.5;
    bool hot = false, peak = false, vs = false, mix = false;
    size_t pf[PF_MAX] = {kern_prefetch_bytes()};
    int npf = 1;
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bench_kernels: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--n")) N = atoll(v);
        else if (!strcmp(argv[i], "--k")) K = atoll(v);
        else if (!strcmp(argv[i], "--types")) types = v;
        else if (!strcmp(argv[i], "--isa")) isas = v;
        else if (!strcmp(argv[i], "--threads")) threads = v;
        else if (!strcmp(argv[i], "--m")) ms = v;
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(v);
        else if (!strcmp(argv[i], "--hot")) hot = atoi(v) != 0;
        else if (!strcmp(argv[i], "--peak")) peak = atoi(v) != 0;
        else if (!strcmp(argv[i], "--vs-stream")) vs = atoi(v) != 0;
        else if (!strcmp(argv[i], "--mix")) mix = atoi(v) != 0;
        else if (!strcmp(argv[i], "--vbmi")) kern_isa_vbmi_set(atoi(v) != 0);
        else if (!strcmp(argv[i], "--prefetch")) {
            npf = 0;
            for (const char *q = v; *q && npf < PF_MAX; q += *q == ',') {
                char *end;
                pf[npf++] = (size_t)strtoull(q, &end, 10);
                q = end;
            }
            kern_prefetch_set(pf[0]);
        }
        else {
            fprintf(stderr, "bench_kernels: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (peak)
        return run_peak(threads);
    if (mix)
        return run_mix();
    static const enum quant_type all[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_1,
                                          QT_Q5_0, QT_Q5_1, QT_Q4_K, QT_Q5_K, QT_Q6_K,
                                          QT_Q2_K, QT_Q3_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4};
    struct kn_err err;
    printf("| type | N x K | isa | threads | M | time/op | result |\n|---|---|---|---|---|---|---|\n");
    for (size_t ti = 0; ti < sizeof all / sizeof all[0]; ti++) {
        enum quant_type t = all[ti];
        if (!in_list(types, quant_type_name(t)))
            continue;
        uint64_t rb;
        if (!quant_row_size(t, (uint64_t)K, &rb)) {
            fprintf(stderr, "K=%lld is not a multiple of %s's block\n", (long long)K,
                    quant_type_name(t));
            continue;
        }
        size_t wbytes = (size_t)N * rb;
        /* Copies so that M = 1 streams from memory, not from the 32 MiB L3. */
        int copies = (int)((256u << 20) / wbytes) + 1;
        if (copies > 64)
            copies = 64;
        if (hot)
            copies = 1; /* one weight: from the caches when it fits */
        struct kern_weight *w = calloc((size_t)copies, sizeof *w);
        void **data = calloc((size_t)copies, sizeof *data);
        for (int c = 0; c < copies; c++) {
            data[c] = kn_aligned_alloc(wbytes, &err);
            fill_weights(t, data[c], wbytes);
            if (!data[c] || kern_weight_init(&w[c], t, N, K, data[c], wbytes, true, &err) != KN_OK) {
                fprintf(stderr, "bench_kernels: %s\n", err.msg);
                return 1;
            }
        }
        /* The batch sizes of --m, in its order; the buffers hold the largest. */
        int64_t mlist[16], Mmax = 1;
        int nm = 0;
        for (const char *q = ms; *q && nm < 16;) {
            char *e;
            long long v = strtoll(q, &e, 10);
            if (e == q || v < 1 || v > 4096 || (*e && *e != ',')) {
                fprintf(stderr, "bench_kernels: --m wants a list of batch sizes 1..4096, not '%s'\n", ms);
                return 2;
            }
            mlist[nm++] = v;
            if (v > Mmax)
                Mmax = v;
            q = *e ? e + 1 : e;
        }
        float *x = malloc(sizeof(float) * (size_t)(Mmax * K));
        float *y = malloc(sizeof(float) * (size_t)(Mmax * N));
        for (int64_t i = 0; i < Mmax * K; i++)
            x[i] = (float)(int)(next_rand() % 2001 - 1000) * 1e-3f;
        void *scratch = kn_aligned_alloc(kern_matmul_scratch_bytes(&w[0], Mmax) + 64, &err);
        for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
            if (!kn_isa_supported((enum kn_isa)isa) || !in_list(isas, kn_isa_name((enum kn_isa)isa)))
                continue;
            if (kn_isa_set((enum kn_isa)isa, &err) != KN_OK)
                continue;
            for (int th = 1; th <= 64; th++) {
                char tn[12]; /* any int: -O1 (the sanitizer build) checks the bound */
                snprintf(tn, sizeof tn, "%d", th);
                if (!in_list(threads, tn))
                    continue;
                struct kern_pool *pool;
                if (kern_pool_create(th, &pool, &err) != KN_OK) {
                    fprintf(stderr, "bench_kernels: %s\n", err.msg);
                    return 1;
                }
                for (int mi = 0; mi < nm; mi++) {
                    int64_t M = mlist[mi];
                    /* The scalar reference is slow at M = 512: fewer tokens, same units. */
                    if (isa == KN_ISA_SCALAR && M > 1)
                        M = 16;
                    kern_matmul(pool, &w[0], x, M, y, scratch); /* warm-up */
                    if (vs && M <= VS_MAX_M) {
                        char res[PF_MAX][128];
                        if (vs_stream(pool, w, copies, wbytes, x, M, y, scratch, seconds, pf,
                                      npf, res) != 0)
                            return 1;
                        /* The time/op column names the distance where several are
                         * compared. */
                        for (int s = 0; s < npf; s++) {
                            char col[40] = "-";
                            if (npf > 1)
                                snprintf(col, sizeof col, "prefetch %zu", pf[s]);
                            printf("| %s | %lldx%lld | %s | %d | %lld | %s | %s |\n",
                                   quant_type_name(t), (long long)N, (long long)K,
                                   kn_isa_name((enum kn_isa)isa), th, (long long)M, col,
                                   res[s]);
                        }
                        kern_prefetch_set(pf[0]);
                        fflush(stdout);
                        continue;
                    }
                    /* The best of batches of a few calls: the machine is shared and noisy,
                     * and the best batch is the closest to what the kernel can do. */
                    int reps = 0;
                    double start = kn_now(), per = 1e30;
                    while (kn_now() - start < seconds || reps < 3) {
                        int batch = M == 1 ? 8 : 1;
                        double t0 = kn_now(), c0 = cpu_now();
                        for (int r = 0; r < batch; r++, reps++)
                            kern_matmul(pool, &w[reps % copies], x, M, y, scratch);
                        double dt = (kn_now() - t0) / batch;
                        /* One thread: its CPU time is robust to preemption. */
                        double dc = (cpu_now() - c0) / batch;
                        if (th == 1 && dc < dt)
                            dt = dc;
                        if (dt < per)
                            per = dt;
                    }
                    char res[64];
                    if (M == 1)
                        snprintf(res, sizeof res, "%.1f GB/s", (double)wbytes / per * 1e-9);
                    else
                        snprintf(res, sizeof res, "%.1f GOPS (M=%lld)",
                                 2.0 * (double)M * (double)N * (double)K / per * 1e-9, (long long)M);
                    printf("| %s | %lldx%lld | %s | %d | %lld | %.3f ms | %s |\n", quant_type_name(t),
                           (long long)N, (long long)K, kn_isa_name((enum kn_isa)isa), th,
                           (long long)M, per * 1e3, res);
                    fflush(stdout);
                }
                kern_pool_free(pool);
            }
        }
        for (int c = 0; c < copies; c++) {
            kern_weight_free(&w[c]);
            free(data[c]);
        }
        free(w);
        free(data);
        free(x);
        free(y);
        free(scratch);
    }
    return 0;
}
