/* test_blake3.c: BLAKE3 against the official test vectors (hash, keyed_hash, derive_key,
 * every length, the full extended output, at every seek) under every ISA level this CPU
 * has; the SIMD code against the portable reference on random inputs and counters that
 * carry into the high word; incremental updates split anywhere; multi-threaded hashing of
 * memory and files equal to single-threaded. */
#include "check.h"
#include "crypto/blake3.h"
#include "crypto/blake3_impl.h"

#include <stdint.h>
#include <unistd.h>

static uint8_t *pattern(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i % 251);
    return p;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Reads the quoted string after `"name": "` at or after *pos; advances *pos. */
static char *json_field(const char *doc, const char **pos, const char *name)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", name);
    const char *p = strstr(*pos, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    const char *e = strchr(p, '"');
    char *s = malloc((size_t)(e - p) + 1);
    memcpy(s, p, (size_t)(e - p));
    s[e - p] = 0;
    *pos = e;
    (void)doc;
    return s;
}

static void hexify(const uint8_t *b, size_t n, char *out) { blake3_hex(b, n, out); }

/* Checks one mode's expected extended output: one-shot, byte-by-byte and random splits,
 * and every seek position. */
static void check_mode(struct blake3_hasher *fresh, const uint8_t *in, size_t len,
                       const char *expect_hex, const char *what)
{
    size_t out_len = strlen(expect_hex) / 2;
    uint8_t *out = malloc(out_len);
    char *hex = malloc(2 * out_len + 1);
    struct blake3_hasher h = *fresh;
    blake3_hasher_update(&h, in, len);
    blake3_hasher_finalize(&h, out, out_len);
    hexify(out, out_len, hex);
    CHECKF(strcmp(hex, expect_hex) == 0, "%s len %zu isa %d", what, len, (int)blake3_isa());
    /* The default-length output is the prefix. */
    uint8_t short_out[32];
    blake3_hasher_finalize(&h, short_out, 32);
    CHECKF(memcmp(short_out, out, 32) == 0, "%s len %zu: 32-byte output", what, len);
    /* Every seek gives the matching slice. */
    int seek_ok = 1;
    for (size_t s = 0; s < out_len; s++) {
        uint8_t tail[256];
        size_t n = out_len - s;
        blake3_hasher_finalize_seek(&h, s, tail, n);
        if (memcmp(tail, out + s, n) != 0)
            seek_ok = 0;
    }
    CHECKF(seek_ok, "%s len %zu: finalize_seek", what, len);
    /* Byte at a time (short inputs) and random splits. */
    if (len <= 2100) {
        struct blake3_hasher b = *fresh;
        for (size_t i = 0; i < len; i++)
            blake3_hasher_update(&b, in + i, 1);
        uint8_t o[32];
        blake3_hasher_finalize(&b, o, 32);
        CHECKF(memcmp(o, out, 32) == 0, "%s len %zu: byte-at-a-time", what, len);
    }
    for (int trial = 0; trial < 3; trial++) {
        struct blake3_hasher b = *fresh;
        size_t i = 0;
        while (i < len) {
            size_t step = (size_t)(rnd() % (trial == 0 ? 70 : trial == 1 ? 1100 : 40000)) + 1;
            if (step > len - i)
                step = len - i;
            blake3_hasher_update(&b, in + i, step);
            blake3_hasher_update(&b, in, 0);
            i += step;
        }
        uint8_t o[32];
        blake3_hasher_finalize(&b, o, 32);
        CHECKF(memcmp(o, out, 32) == 0, "%s len %zu: random splits", what, len);
    }
    free(out);
    free(hex);
}

static void test_vectors(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/vectors/blake3_test_vectors.json", check_data_dir());
    char *doc;
    size_t doc_len;
    struct kn_err err;
    if (kn_read_file(path, 1 << 22, &doc, &doc_len, &err) != KN_OK) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    const char *pos = doc;
    char *key = json_field(doc, &pos, "key");
    char *ctx = json_field(doc, &pos, "context_string");
    CHECK(key && strlen(key) == 32 && ctx);
    int cases = 0;
    for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
        if (!blake3_isa_supported((enum kn_isa)isa)) {
            printf("ISA level %d not supported here: skipped\n", isa);
            continue;
        }
        CHECK(blake3_isa_force((enum kn_isa)isa, &err) == KN_OK);
        const char *p = pos;
        for (;;) {
            const char *c = strstr(p, "\"input_len\": ");
            if (!c)
                break;
            size_t len = strtoul(c + 13, NULL, 10);
            p = c + 13;
            char *hash = json_field(doc, &p, "hash");
            char *keyed = json_field(doc, &p, "keyed_hash");
            char *derive = json_field(doc, &p, "derive_key");
            uint8_t *in = pattern(len);
            struct blake3_hasher h;
            blake3_hasher_init(&h);
            check_mode(&h, in, len, hash, "hash");
            blake3_hasher_init_keyed(&h, (const uint8_t *)key);
            check_mode(&h, in, len, keyed, "keyed_hash");
            blake3_hasher_init_derive_key(&h, ctx);
            check_mode(&h, in, len, derive, "derive_key");
            /* The one-shot helper and the threaded update agree. */
            uint8_t o[32], o2[32];
            char hx[65];
            blake3_hash(in, len, o);
            hexify(o, 32, hx);
            CHECKF(strncmp(hx, hash, 64) == 0, "blake3_hash len %zu", len);
            blake3_hasher_init(&h);
            blake3_hasher_update_threads(&h, in, len, 4);
            blake3_hasher_finalize(&h, o2, 32);
            CHECK(memcmp(o, o2, 32) == 0);
            free(in);
            free(hash);
            free(keyed);
            free(derive);
            cases++;
        }
    }
    blake3_isa_unforce();
    CHECKF(cases >= 35, "only %d vector cases ran", cases);
    free(key);
    free(ctx);
    free(doc);
}

/* Every SIMD width equals the portable reference, for chunks and parents, with counters
 * that carry from the low into the high 32-bit word. */
static void test_hash_many(void)
{
    enum { N = 16, BLOCKS = 16 };
    uint8_t *in = malloc(N * 1024);
    for (size_t i = 0; i < N * 1024; i++)
        in[i] = (uint8_t)rnd();
    uint32_t key[8];
    for (int i = 0; i < 8; i++)
        key[i] = (uint32_t)rnd();
    const uint64_t counters[] = {0, 5, 0xFFFFFFFAull, 0x123456789ull};
    for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++) {
        for (int inc = 0; inc < 2; inc++) {
            for (size_t blocks = 1; blocks <= BLOCKS; blocks += 15) {
                size_t stride = blocks == 1 ? 64 : 1024;
                uint8_t ref[N * 32], got[N * 32];
                (void)got; /* used by the x86 SIMD checks below */
                b3_hash_many_portable(in, stride, N, blocks, key, counters[c], inc, 0x10, 1, 2,
                                      ref);
#if defined(KN_ARCH_X86)
                if (blake3_isa_supported(KN_ISA_AVX2)) {
                    b3_hash8_avx2(in, stride, blocks, key, counters[c], inc, 0x10, 1, 2, got);
                    b3_hash8_avx2(in + 8 * stride, stride, blocks, key,
                                  counters[c] + (inc ? 8 : 0), inc, 0x10, 1, 2, got + 8 * 32);
                    CHECKF(memcmp(ref, got, sizeof ref) == 0, "avx2 counter %llx inc %d blocks %zu",
                           (unsigned long long)counters[c], inc, blocks);
                }
                if (blake3_isa_supported(KN_ISA_AVX512)) {
                    b3_hash16_avx512(in, stride, blocks, key, counters[c], inc, 0x10, 1, 2, got);
                    CHECKF(memcmp(ref, got, sizeof ref) == 0,
                           "avx512 counter %llx inc %d blocks %zu",
                           (unsigned long long)counters[c], inc, blocks);
                }
#endif
            }
        }
    }
    free(in);
}

static void hash_with(enum kn_isa isa, const uint8_t *in, size_t len, int threads,
                      uint8_t out[32])
{
    struct kn_err err;
    CHECK(blake3_isa_force(isa, &err) == KN_OK);
    struct blake3_hasher h;
    blake3_hasher_init(&h);
    if (threads)
        blake3_hasher_update_threads(&h, in, len, threads);
    else
        blake3_hasher_update(&h, in, len);
    blake3_hasher_finalize(&h, out, 32);
    blake3_isa_unforce();
}

/* Random lengths around chunk and subtree boundaries, and large inputs split across
 * threads: all ISAs and thread counts agree with the scalar single-threaded hash. */
static void test_cross(void)
{
    size_t max = (9u << 20) + 4097;
    uint8_t *in = malloc(max);
    for (size_t i = 0; i < max; i++)
        in[i] = (uint8_t)(rnd() >> 17);
    size_t lens[40];
    size_t nl = 0;
    const size_t fixed[] = {0, 1, 64, 1024, 1025, 16 * 1024, 16 * 1024 + 1, 256 * 1024,
                            256 * 1024 + 1, 257 * 1024 + 5, (4u << 20) + 1, (9u << 20) + 4097};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        lens[nl++] = fixed[i];
    while (nl < 24)
        lens[nl++] = (size_t)(rnd() % (600 * 1024));
    for (size_t i = 0; i < nl; i++) {
        uint8_t ref[32], got[32];
        hash_with(KN_ISA_SCALAR, in, lens[i], 0, ref);
        for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
            if (!blake3_isa_supported((enum kn_isa)isa))
                continue;
            hash_with((enum kn_isa)isa, in, lens[i], 0, got);
            CHECKF(memcmp(ref, got, 32) == 0, "len %zu isa %d", lens[i], isa);
            if (lens[i] >= (4u << 20)) {
                for (int t = 2; t <= 5; t += 3) {
                    hash_with((enum kn_isa)isa, in, lens[i], t, got);
                    CHECKF(memcmp(ref, got, 32) == 0, "len %zu isa %d threads %d", lens[i], isa, t);
                }
            }
        }
    }
    /* A file: blake3_hash_file equals the in-memory hash, on 1 and 3 threads. */
    char path[] = "/tmp/kn_b3_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    size_t flen = (5u << 20) + 333;
    CHECK(write(fd, in, flen) == (ssize_t)flen);
    close(fd);
    uint8_t ref[32], got[32];
    struct kn_err err;
    blake3_hash(in, flen, ref);
    for (int t = 1; t <= 3; t += 2) {
        CHECK(blake3_hash_file(path, got, t, &err) == KN_OK);
        CHECKF(memcmp(ref, got, 32) == 0, "file threads %d", t);
    }
    unlink(path);
    CHECK(blake3_hash_file("/nonexistent/kn", got, 1, &err) == KN_E_IO);
    CHECK(strstr(err.msg, "/nonexistent/kn") != NULL);
    free(in);
}

/* Token hashes: the receipt spec's own example (prompt and output ids with their BLAKE3),
 * and a long list equal to hashing its little-endian bytes. */
static void test_tokens(void)
{
    static const int32_t prompt[] = {124894, 124899, 5922,  207,    2617,   1703,   15311, 22,
                                     124900, 207,    124899, 63514, 207, 124901, 124902};
    static const int32_t output[] = {25, 22,   440,  35844, 5094, 3103, 26,   22,    440,
                                     12225, 5094, 3103, 27, 22, 440, 17939, 5094, 124900};
    uint8_t h[32];
    char hex[65];
    blake3_hash_tokens(prompt, 15, h);
    blake3_hex(h, 32, hex);
    CHECK_STR(hex, "591484bfe2293f5c7603c970515f9d044a607c9e5ef92bbdc51c05e474672f73");
    blake3_hash_tokens(output, 18, h);
    blake3_hex(h, 32, hex);
    CHECK_STR(hex, "7bd0632303b6fcbdb7f440d8c19415fa73e0afacd6e941137104bf438ebd8662");
    size_t n = 1000;
    int32_t *ids = malloc(n * sizeof *ids);
    uint8_t *bytes = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int32_t)(rnd() >> 1) - (int32_t)(i * 7);
        uint32_t u = (uint32_t)ids[i];
        bytes[4 * i] = (uint8_t)u;
        bytes[4 * i + 1] = (uint8_t)(u >> 8);
        bytes[4 * i + 2] = (uint8_t)(u >> 16);
        bytes[4 * i + 3] = (uint8_t)(u >> 24);
    }
    uint8_t want[32];
    blake3_hash(bytes, n * 4, want);
    blake3_hash_tokens(ids, n, h);
    CHECK(memcmp(h, want, 32) == 0);
    blake3_hash_tokens(NULL, 0, h);
    blake3_hash("", 0, want);
    CHECK(memcmp(h, want, 32) == 0);
    free(ids);
    free(bytes);
}

/* `test_blake3 hash FILE THREADS [ISA]` prints the file's hash, the seconds it took and the
 * ISA level used: the pytest compares it with b3sum and checks KINETIC_ISA is honoured. */
static int hash_command(int argc, char **argv)
{
    struct kn_err err;
    if (argc >= 5) {
        int isa = -1;
        for (int i = 0; i < KN_ISA_COUNT; i++)
            if (strcmp(argv[4], kn_isa_name((enum kn_isa)i)) == 0)
                isa = i;
        if (isa < 0 || blake3_isa_force((enum kn_isa)isa, &err) != KN_OK) {
            fprintf(stderr, "ISA %s not available\n", argv[4]);
            return 3;
        }
    }
    uint8_t out[32];
    char hex[65];
    double t0 = kn_now();
    if (blake3_hash_file(argv[2], out, atoi(argv[3]), &err) != KN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double dt = kn_now() - t0;
    blake3_hex(out, 32, hex);
    printf("%s %.6f %s\n", hex, dt, kn_isa_name(blake3_isa()));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "hash") == 0)
        return hash_command(argc, argv);
    test_hash_many();
    test_tokens();
    test_vectors();
    test_cross();
    CHECK_DONE();
}
