/* model_script.h: the forward script the device tests share (test_backend_seam.c with its
 * "ref" backend, test_vk_model.c with Vulkan): a model opened with its first dev_layers
 * layers on a device, two KV caches, and a fixed script of forward calls whose logits a
 * test compares bit for bit against the CPU's. Include after check.h. */
#ifndef KN_TESTS_MODEL_SCRIPT_H
#define KN_TESTS_MODEL_SCRIPT_H

#include "kernels/backend.h"
#include "model/model.h"

#include <string.h>

struct runner {
    struct model *m;
    struct model_kv kv[2];
    struct model_fwd *f;
};

/* Opens path with its first dev_layers layers on dev (0: all on the CPU), two caches of 64
 * positions of kt and a forward context of 16 tokens. */
static bool runner_open(struct runner *r, const char *path, struct kern_backend *dev,
                        int64_t dev_layers, enum model_kv_type kt, struct kern_pool *pool)
{
    struct kn_err err = {0};
    memset(r, 0, sizeof *r);
    struct model_load_opts lo = {.repack = true, .device = dev_layers ? dev : NULL,
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

/* The logits of a fixed script of calls, all written to out (STEPS * ROWS * n_vocab):
 * a prompt in two chunks with every row out, rows out of order, a chunk with no output,
 * greedy decode, and two sequences in one model_forward_multi batch. Four passes, then
 * one per step from 3 to STEPS - 1. */
enum { STEPS = 12, ROWS = 16 };

static int32_t script_argmax(const float *x, int64_t n)
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
    int32_t tok = script_argmax(out + 1 * ROWS * V, V), p = n_prompt, p1 = n_prompt;
    for (int step = 3; step < STEPS; step++) {
        if (step % 3 == 0) {
            struct model_kv *kvs[3] = {&r->kv[0], &r->kv[1], &r->kv[1]};
            int32_t toks[3] = {tok, (tok + 7) % (int32_t)V, (tok + 11) % (int32_t)V};
            int32_t ps[3] = {p, p1, p1 + 1};
            int64_t rs[2] = {2, 0};
            CHECKF(model_forward_multi(r->f, kvs, toks, ps, 3, rs, 2, out + step * ROWS * V,
                                       &err) == KN_OK, "%s", err.msg);
            tok = script_argmax(out + step * ROWS * V + V, V);
            p++;
            p1 += 2;
        } else {
            CHECKF(model_forward(r->f, &r->kv[0], &tok, &p, 1, &last, 1, out + step * ROWS * V,
                                 &err) == KN_OK, "%s", err.msg);
            tok = script_argmax(out + step * ROWS * V, V);
            p++;
        }
    }
}

#endif
