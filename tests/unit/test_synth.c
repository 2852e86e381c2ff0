/* test_synth.c: the synth module's parts: noise generator, presets, --dims parsing, the
 * Q4_K_M tensor-type mix. Whole files are tested in tests/py/test_synth.py. */
#include "check.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "synth/synth.h"

#include <math.h>

static void test_noise(void)
{
    /* Moments of a million draws: mean 0, variance 1, bounded by 2 * sqrt(3). */
    uint64_t key = synth_tensor_key(42, "blk.0.attn_q.weight");
    double s = 0, s2 = 0, s4 = 0, amax = 0;
    const int n = 1 << 20;
    for (int i = 0; i < n; i++) {
        double v = synth_noise(key, (uint64_t)i);
        s += v;
        s2 += v * v;
        s4 += v * v * v * v;
        amax = fmax(amax, fabs(v));
    }
    double mean = s / n, var = s2 / n - mean * mean, kurt = s4 / n;
    CHECKF(fabs(mean) < 0.005, "mean %g", mean);
    CHECKF(fabs(var - 1.0) < 0.01, "variance %g", var);
    /* a sum of four uniforms has kurtosis 3 - 1.2 / 4 = 2.7 (a normal has 3) */
    CHECKF(fabs(kurt - 2.7) < 0.03, "kurtosis %g", kurt);
    CHECK(amax <= 3.4641017);
    /* A pure function of (key, index), and keys differ by seed and by name. */
    CHECK(synth_noise(key, 12345) == synth_noise(key, 12345));
    CHECK(synth_tensor_key(42, "a") != synth_tensor_key(43, "a"));
    CHECK(synth_tensor_key(42, "a") != synth_tensor_key(42, "b"));
    /* Golden values: the generator is part of what makes synth files identical
     * everywhere; changing it changes every file. */
    CHECK_EQ_INT(synth_tensor_key(0, "token_embd.weight"), (int64_t)0x7a957d2eec087399ull);
    CHECKF(synth_noise(0, 0) == 1.4286195039749146f, "%.17g", (double)synth_noise(0, 0));
}

static void test_presets_and_dims(void)
{
    struct kn_err err = {0};
    struct synth_dims d;
    enum synth_arch arch = SYNTH_ARCH_COUNT;
    CHECK(synth_preset("tinyllama-1.1b", &arch, &d, &err) == KN_OK);
    CHECK(arch == SYNTH_LLAMA);
    CHECK(d.n_embd == 2048 && d.n_layer == 22 && d.n_head == 32 && d.n_head_kv == 4 &&
          d.n_ff == 5632 && d.n_vocab == 32000 && !d.tied);
    arch = SYNTH_QWEN2;
    CHECK(synth_preset("tinyllama-1.1b", &arch, &d, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "llama model") != NULL);
    arch = SYNTH_ARCH_COUNT;
    CHECK(synth_preset("qwen2.5-0.5b", &arch, &d, &err) == KN_OK && arch == SYNTH_QWEN2);
    CHECK(d.n_embd == 896 && d.n_head == 14 && d.n_head_kv == 2 && d.tied && d.n_vocab == 151936);
    arch = SYNTH_ARCH_COUNT;
    CHECK(synth_preset("llama-3.2-1b", &arch, &d, &err) == KN_OK);
    CHECK(d.n_ff == 8192 && d.n_vocab == 128256 && d.rope_base == 500000.0f && d.tied);
    arch = SYNTH_GEMMA3;
    CHECK(synth_preset("tiny", &arch, &d, &err) == KN_OK && d.n_layer == 6);
    CHECK(synth_check_dims(arch, &d, &err) == KN_OK);
    /* LFM2's published widths (feed-forward as convert_hf_to_gguf.py derives it). */
    static const struct {
        const char *name;
        uint32_t dim, layers, heads, ffn, n_attn;
    } lfm2[] = {{"lfm2-350m", 1024, 16, 16, 4608, 6}, {"lfm2-700m", 1536, 16, 24, 6912, 6},
                {"lfm2-1.2b", 2048, 16, 32, 8192, 6}, {"lfm2-2.6b", 2048, 30, 32, 10752, 8}};
    for (size_t i = 0; i < sizeof lfm2 / sizeof lfm2[0]; i++) {
        arch = SYNTH_ARCH_COUNT;
        CHECK(synth_preset(lfm2[i].name, &arch, &d, &err) == KN_OK && arch == SYNTH_LFM2);
        CHECK(synth_check_dims(arch, &d, &err) == KN_OK);
        CHECK(d.n_embd == lfm2[i].dim && d.n_layer == lfm2[i].layers && d.n_head == lfm2[i].heads &&
              d.n_head_kv == 8 && d.n_ff == lfm2[i].ffn && d.n_vocab == 65536 && d.tied &&
              d.conv_l == 3 && d.n_attn_layers == lfm2[i].n_attn && synth_attn_layer(&d, 2) &&
              !synth_attn_layer(&d, 0));
    }
    arch = SYNTH_ARCH_COUNT;
    CHECK(synth_preset("lfm2-8b-a1b", &arch, &d, &err) == KN_OK && arch == SYNTH_LFM2MOE);
    CHECK(synth_check_dims(arch, &d, &err) == KN_OK);
    CHECK(d.n_embd == 2048 && d.n_layer == 24 && d.n_expert == 32 && d.n_expert_used == 4 &&
          d.n_ff_exp == 1792 && d.n_dense_lead == 2 && d.n_attn_layers == 6 && d.tied);
    arch = SYNTH_LFM2;
    CHECK(synth_preset("tiny", &arch, &d, &err) == KN_OK && d.n_layer == 4);
    CHECK(synth_check_dims(arch, &d, &err) == KN_OK && d.conv_l == 3);
    CHECK(!synth_attn_layer(&d, 0) && !synth_attn_layer(&d, 1) && synth_attn_layer(&d, 2) &&
          !synth_attn_layer(&d, 3));
    CHECK(synth_parse_dims("attn=1:3,conv_l=4", &d, &err) == KN_OK && d.n_attn_layers == 2 &&
          d.conv_l == 4 && synth_attn_layer(&d, 3) && !synth_attn_layer(&d, 2));
    arch = SYNTH_ARCH_COUNT;
    CHECK(synth_preset("nope", &arch, &d, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "unknown preset 'nope'") != NULL);

    memset(&d, 0, sizeof d);
    CHECK(synth_parse_dims("dim=512,layers=4,heads=8,kv_heads=2,ffn=1408,vocab=4096,rope_base=1e6,"
                           "eps=1e-6,tied=1,ctx=4096",
                           &d, &err) == KN_OK);
    CHECK(synth_check_dims(SYNTH_LLAMA, &d, &err) == KN_OK);
    CHECK(d.n_embd == 512 && d.n_layer == 4 && d.n_head == 8 && d.n_head_kv == 2 && d.n_ff == 1408);
    CHECK(d.head_dim == 64 && d.tied && d.n_ctx == 4096 && d.rope_base == 1e6f && d.norm_eps == 1e-6f);
    static const char *bad[] = {"", "dim", "dim=", "dim=-3", "dim=0", "dim=12x", "size=3",
                                "tied=2", "eps=abc", "dim=99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct synth_dims e = {0};
        CHECKF(synth_parse_dims(bad[i], &e, &err) == KN_E_ARG, "accepted '%s'", bad[i]);
    }
    struct synth_dims e = {0};
    CHECK(synth_parse_dims("dim=512,layers=2", &e, &err) == KN_OK);
    CHECK(synth_check_dims(SYNTH_LLAMA, &e, &err) == KN_E_ARG); /* heads, ffn, vocab missing */
    struct synth_dims g = {.n_embd = 256, .n_layer = 2, .n_head = 4, .n_ff = 512, .n_vocab = 512};
    CHECK(synth_check_dims(SYNTH_GEMMA3, &g, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "at least 6 layers") != NULL);
    struct synth_dims q = {.n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 3, .n_ff = 512,
                           .n_vocab = 512};
    CHECK(synth_check_dims(SYNTH_LLAMA, &q, &err) == KN_E_ARG); /* 4 % 3 */
}

/* llama.cpp's Q4_K_M on TinyLlama (22 layers): attn_v and ffn_down get Q6_K in layers
 * 0, 1, 4, 7, 10, 13, 16, 19, 20, 21; the output Q6_K; 135 Q4_K and 21 Q6_K in all. */
static void test_q4_k_m_mix(void)
{
    int n_q4 = 0, n_q6 = 0;
    const char *per_layer[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight",
                               "attn_output.weight", "ffn_gate.weight", "ffn_up.weight",
                               "ffn_down.weight"};
    for (int il = 0; il < 22; il++) {
        bool more = il < 2 || il >= 19 || (il - 2) % 3 == 2;
        for (int k = 0; k < 7; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", il, per_layer[k]);
            int64_t ne0 = k == 6 ? 5632 : 2048;
            uint32_t t = synth_tensor_type(SYNTH_Q4_K_M, name, il, 22, ne0, 2, false, 1);
            bool want6 = more && (k == 2 || k == 6);
            CHECKF(t == (want6 ? QT_Q6_K : QT_Q4_K), "%s: %s", name, quant_type_name(t));
            n_q4 += t == QT_Q4_K;
            n_q6 += t == QT_Q6_K;
        }
    }
    uint32_t emb = synth_tensor_type(SYNTH_Q4_K_M, "token_embd.weight", -1, 22, 2048, 2, false, 1);
    uint32_t out = synth_tensor_type(SYNTH_Q4_K_M, "output.weight", -1, 22, 2048, 2, false, 1);
    n_q4 += emb == QT_Q4_K;
    n_q6 += out == QT_Q6_K;
    CHECK_EQ_INT(n_q4, 135);
    CHECK_EQ_INT(n_q6, 21);
    /* Tied embeddings are the output: Q6_K, or Q8_0 when rows are not whole K blocks
     * (Gemma 3 270M's 640-wide embedding is Q8_0 in the real Q4_K_M file). */
    CHECK(synth_tensor_type(SYNTH_Q4_K_M, "token_embd.weight", -1, 16, 2048, 2, true, 1) == QT_Q6_K);
    CHECK(synth_tensor_type(SYNTH_Q4_K_M, "token_embd.weight", -1, 18, 640, 2, true, 1) == QT_Q8_0);
    /* Fallbacks as in the real Gemma file: 640-wide attn_q Q4_K -> Q5_0, attn_v of a
     * more-bits layer Q6_K -> Q8_0; 2048-wide ffn_down stays Q6_K. */
    CHECK(synth_tensor_type(SYNTH_Q4_K_M, "blk.0.attn_q.weight", 0, 18, 640, 2, true, 1) == QT_Q5_0);
    CHECK(synth_tensor_type(SYNTH_Q4_K_M, "blk.0.attn_v.weight", 0, 18, 640, 2, true, 1) == QT_Q8_0);
    CHECK(synth_tensor_type(SYNTH_Q4_K_M, "blk.0.ffn_down.weight", 0, 18, 2048, 2, true, 1) == QT_Q6_K);
    CHECK(synth_tensor_type(SYNTH_Q5_K, "blk.0.attn_q.weight", 0, 18, 640, 2, true, 1) == QT_Q5_1);
    CHECK(synth_tensor_type(SYNTH_Q4_0, "x.weight", 0, 2, 48, 2, false, 1) == QT_F16);
    /* Single types are pure; 1-D tensors stay F32. */
    CHECK(synth_tensor_type(SYNTH_Q4_0, "output.weight", -1, 2, 2048, 2, false, 1) == QT_Q4_0);
    CHECK(synth_tensor_type(SYNTH_BF16, "blk.0.ffn_up.weight", 0, 2, 2048, 2, false, 1) == QT_BF16);
    CHECK(synth_tensor_type(SYNTH_Q4_K_M, "blk.0.attn_norm.weight", 0, 2, 2048, 1, false, 1) == QT_F32);
    CHECK_EQ_INT(synth_file_type(SYNTH_Q4_K_M), 15);
    CHECK_EQ_INT(synth_file_type(SYNTH_BF16), 32);
    CHECK_EQ_INT(synth_file_type(SYNTH_Q8_0), 7);
}

/* The other llama.cpp mixes: the rules that look at the GQA ratio and the layer index
 * (tests/py/test_synth.py checks every tensor of tiny files with gqa 2). */
static void test_other_mixes(void)
{
    CHECK(synth_tensor_type(SYNTH_Q2_K_MIX, "blk.3.attn_v.weight", 3, 8, 2048, 2, false, 4) == QT_Q4_K);
    CHECK(synth_tensor_type(SYNTH_Q2_K_MIX, "blk.3.attn_v.weight", 3, 8, 2048, 2, false, 2) == QT_Q3_K);
    CHECK(synth_tensor_type(SYNTH_Q2_K_MIX, "blk.3.attn_q.weight", 3, 8, 2048, 2, false, 2) == QT_Q2_K);
    CHECK(synth_tensor_type(SYNTH_Q2_K_MIX, "blk.3.attn_output.weight", 3, 8, 2048, 2, false, 2) == QT_Q3_K);
    CHECK(synth_tensor_type(SYNTH_Q2_K_MIX, "token_embd.weight", -1, 8, 2048, 2, false, 2) == QT_Q2_K);
    CHECK(synth_tensor_type(SYNTH_Q2_K_MIX, "output.weight", -1, 8, 2048, 2, false, 2) == QT_Q6_K);
    CHECK(synth_tensor_type(SYNTH_IQ4_XS, "blk.0.attn_v.weight", 0, 8, 2048, 2, false, 4) == QT_Q5_K);
    CHECK(synth_tensor_type(SYNTH_IQ4_XS, "blk.0.attn_v.weight", 0, 8, 2048, 2, false, 2) == QT_IQ4_XS);
    CHECK(synth_tensor_type(SYNTH_IQ4_NL, "blk.0.ffn_down.weight", 0, 16, 2048, 2, false, 2) == QT_Q5_K);
    CHECK(synth_tensor_type(SYNTH_IQ4_NL, "blk.2.ffn_down.weight", 2, 16, 2048, 2, false, 2) == QT_IQ4_NL);
    /* MoE experts follow the ffn_down rule too (llama.cpp matches "ffn_down" anywhere) */
    CHECK(synth_tensor_type(SYNTH_Q3_K_M, "blk.0.ffn_down_exps.weight", 0, 16, 2048, 2, false, 2) == QT_Q5_K);
    CHECK(synth_tensor_type(SYNTH_Q3_K_M, "blk.1.ffn_down.weight", 1, 16, 2048, 2, false, 2) == QT_Q4_K);
    CHECK(synth_tensor_type(SYNTH_Q3_K_M, "blk.1.attn_v.weight", 1, 16, 2048, 2, false, 2) == QT_Q5_K);
    CHECK(synth_tensor_type(SYNTH_Q3_K_M, "blk.2.attn_v.weight", 2, 16, 2048, 2, false, 2) == QT_Q4_K);
    CHECK(synth_tensor_type(SYNTH_Q3_K_M, "blk.2.attn_qkv.weight", 2, 16, 2048, 2, false, 2) == QT_Q4_K);
    CHECK(synth_tensor_type(SYNTH_Q5_K_M, "blk.2.attn_qkv.weight", 2, 16, 2048, 2, false, 2) == QT_Q6_K);
    CHECK(synth_tensor_type(SYNTH_Q3_K_L, "blk.9.attn_output.weight", 9, 16, 2048, 2, false, 2) == QT_Q5_K);
    CHECK(synth_tensor_type(SYNTH_Q3_K_S, "blk.9.ffn_down.weight", 9, 16, 2048, 2, false, 2) == QT_Q3_K);
    /* llama.cpp's fallbacks for rows that are not whole 256-blocks */
    CHECK(synth_tensor_type(SYNTH_Q2_K_MIX, "blk.0.attn_q.weight", 0, 16, 640, 2, false, 2) == QT_IQ4_NL);
    CHECK(synth_tensor_type(SYNTH_IQ4_XS, "blk.0.attn_q.weight", 0, 16, 640, 2, false, 2) == QT_IQ4_NL);
    CHECK(synth_tensor_type(SYNTH_IQ4_NL, "token_embd.weight", -1, 16, 640, 2, true, 2) == QT_Q8_0);
    CHECK_EQ_INT(synth_file_type(SYNTH_Q2_K_MIX), 10);
    CHECK_EQ_INT(synth_file_type(SYNTH_Q3_K_M), 12);
    CHECK_EQ_INT(synth_file_type(SYNTH_IQ4_XS), 30);
    CHECK(synth_tensor_type(SYNTH_MXFP4_MOE, "blk.0.ffn_up_exps.weight", 0, 4, 2048, 3, false, 2) == QT_MXFP4);
    CHECK(synth_tensor_type(SYNTH_MXFP4_MOE, "blk.0.attn_q.weight", 0, 4, 2048, 2, false, 2) == QT_Q8_0);
    CHECK(synth_tensor_type(SYNTH_MXFP4_MOE, "output.weight", -1, 4, 2048, 2, false, 2) == QT_Q8_0);
    CHECK_EQ_INT(synth_file_type(SYNTH_MXFP4_MOE), 38);
}

static void test_names(void)
{
    struct kn_err err = {0};
    enum synth_ftype t;
    enum synth_arch a;
    CHECK(synth_parse_ftype("Q4_K_M", &t, &err) == KN_OK && t == SYNTH_Q4_K_M);
    CHECK(synth_parse_ftype("q4_km", &t, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "unknown type 'q4_km'") != NULL);
    CHECK(synth_parse_arch("gemma3", &a, &err) == KN_OK && a == SYNTH_GEMMA3);
    CHECK(synth_parse_arch("gemma2", &a, &err) == KN_OK && a == SYNTH_GEMMA2);
    CHECK(synth_parse_arch("gpt2", &a, &err) == KN_E_ARG);
    for (int i = 0; i < SYNTH_FTYPE_COUNT; i++) {
        CHECK(synth_parse_ftype(synth_ftype_name((enum synth_ftype)i), &t, &err) == KN_OK);
        CHECK(t == (enum synth_ftype)i);
    }
}

int main(void)
{
    test_noise();
    test_presets_and_dims();
    test_q4_k_m_mix();
    test_other_mixes();
    test_names();
    CHECK_DONE();
}
