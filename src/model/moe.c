/* moe.c: mixture-of-experts layers (qwen3moe; the routing options lfm2moe needs; gpt-oss's
 * router and expert biases):
 * hyperparameters, the 3-D expert tensors as one weight per expert, their upload.
 * The graph (router product, routing, expert products) is in forward.c; the rule is in
 * docs/numerics.md "Mixture of experts". */
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ hyperparameters */

/* llama.cpp's llama_expert_gating_func_type values for <arch>.expert_gating_func. */
enum { GATING_NONE = 0, GATING_SOFTMAX = 1, GATING_SIGMOID = 2 };

static bool key_int(const struct gguf_file *g, const char *arch, const char *suffix, int64_t *out,
                    bool *bad)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_find_kv(g, key))
        return false;
    if (!gguf_get_i64(g, key, out) || *out < 0 || *out > ((int64_t)1 << 40))
        *bad = true;
    return true;
}

enum kn_status model_moe_read_hparams(const struct gguf_file *g, const char *arch,
                                      struct model_hparams *hp, struct kn_err *err)
{
    bool bad = false;
    int64_t n = 0;
    if (!key_int(g, arch, "expert_count", &n, &bad) || (n == 0 && !bad)) {
        if (hp->arch == MODEL_ARCH_QWEN3MOE || hp->arch == MODEL_ARCH_LFM2MOE ||
            hp->arch == MODEL_ARCH_GPTOSS)
            return kn_fail(err, KN_E_FORMAT, "%s.expert_count is missing or 0; a %s model needs experts",
                           arch, arch);
        return KN_OK;
    }
    if (bad)
        return kn_fail(err, KN_E_FORMAT, "%s.expert_count is not a non-negative integer", arch);
    if (hp->arch != MODEL_ARCH_QWEN3MOE && hp->arch != MODEL_ARCH_LFM2MOE &&
        hp->arch != MODEL_ARCH_GPTOSS)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "mixture-of-experts %s models (%s.expert_count = %lld) are not supported (supported: qwen3moe, lfm2moe, gpt-oss)",
                       arch, arch, (long long)n);
    hp->n_expert = n;
    if (!key_int(g, arch, "expert_used_count", &hp->n_expert_used, &bad) || bad)
        return kn_fail(err, KN_E_FORMAT, "%s.expert_used_count is missing or not an integer", arch);
    if (n > KERN_MOE_MAX_EXPERTS || hp->n_expert_used < 1 || hp->n_expert_used > n ||
        hp->n_expert_used > KERN_MOE_MAX_USED)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "%s: %lld experts, %lld used per token; supported: up to %d experts, 1 to min(experts, %d) used",
                       arch, (long long)n, (long long)hp->n_expert_used, KERN_MOE_MAX_EXPERTS,
                       KERN_MOE_MAX_USED);
    /* llama.cpp: the expert width defaults to feed_forward_length / expert_used_count. */
    hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    key_int(g, arch, "expert_feed_forward_length", &hp->n_ff_exp, &bad);
    key_int(g, arch, "leading_dense_block_count", &hp->n_layer_dense_lead, &bad);
    if (bad || hp->n_ff_exp <= 0)
        return kn_fail(err, KN_E_FORMAT, "%s.expert_feed_forward_length or leading_dense_block_count is bad",
                       arch);
    if (hp->n_layer_dense_lead > hp->n_layer)
        return kn_fail(err, KN_E_FORMAT, "%s.leading_dense_block_count %lld exceeds block_count %lld", arch,
                       (long long)hp->n_layer_dense_lead, (long long)hp->n_layer);
    /* qwen3moe (llama.cpp's graph): softmax over every expert, the chosen weights
     * normalised, not scaled. The keys lfm2moe-style files carry override it. */
    hp->moe_gate = (struct kern_moe_gate){.gating = KERN_MOE_SOFTMAX, .n_expert = (int32_t)n,
                                          .n_used = (int32_t)hp->n_expert_used, .norm = true,
                                          .scale = 1.0f};
    if (hp->arch == MODEL_ARCH_GPTOSS) {
        /* llama.cpp's llm_build_openai_moe_iswa: the k largest router logits (plus the
         * router's bias), their weights the softmax of those k logits; no normalisation,
         * no scale, no gating key read. */
        hp->moe_gate.gating = KERN_MOE_SOFTMAX_WEIGHT;
        hp->moe_gate.norm = false;
        return KN_OK;
    }
    int64_t gating = GATING_SOFTMAX;
    if (key_int(g, arch, "expert_gating_func", &gating, &bad)) {
        if (bad || (gating != GATING_SOFTMAX && gating != GATING_SIGMOID && gating != GATING_NONE))
            return kn_fail(err, KN_E_UNSUPPORTED, "%s.expert_gating_func %lld is not supported (1 softmax, 2 sigmoid)",
                           arch, (long long)gating);
        hp->moe_gate.gating = gating == GATING_SIGMOID ? KERN_MOE_SIGMOID : KERN_MOE_SOFTMAX;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    if (gguf_find_kv(g, key) && !gguf_get_bool(g, key, &hp->moe_gate.norm))
        return kn_fail(err, KN_E_FORMAT, "%s is not a boolean", key);
    snprintf(key, sizeof key, "%s.expert_weights_scale", arch);
    if (gguf_find_kv(g, key) &&
        (!gguf_get_f32(g, key, &hp->moe_gate.scale) || !isfinite(hp->moe_gate.scale) ||
         hp->moe_gate.scale == 0.0f))
        return kn_fail(err, KN_E_FORMAT, "%s is not a finite non-zero float", key);
    return KN_OK;
}

/* ================================================================ tensors */

/* Finds blk.<il>.<suffix> with shape [ne0, ne1, ne2] (ne2 = 1: 2-D; ne1 = ne2 = 1: a
 * vector), of a type the kernels compute with (matrices) or f32/f16/bf16 (vectors). */
static enum kn_status find(const struct gguf_file *g, int64_t il, const char *suffix, int64_t ne0,
                           int64_t ne1, int64_t ne2, bool required, const struct gguf_tensor **out,
                           struct kn_err *err)
{
    char name[128];
    snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, suffix);
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    *out = NULL;
    if (!t) {
        if (!required)
            return KN_OK;
        return kn_fail(err, KN_E_FORMAT, "tensor %s is missing; the file is incomplete or not this architecture",
                       name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return kn_fail(err, KN_E_FORMAT,
                       "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld] from the hyperparameters",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)ne1, (long long)ne2);
    if (ne1 > 1) {
        if (!kern_type_supported((enum quant_type)t->type))
            return kn_fail(err, KN_E_UNSUPPORTED, "tensor %s has type %s, which this build cannot compute with",
                           name, quant_type_name(t->type));
    } else if (t->type != QT_F32 && t->type != QT_F16 && t->type != QT_BF16) {
        return kn_fail(err, KN_E_UNSUPPORTED, "vector tensor %s has type %s; expected f32, f16 or bf16",
                       name, quant_type_name(t->type));
    }
    *out = t;
    return KN_OK;
}

enum kn_status model_moe_plan(const struct gguf_file *g, const struct model_hparams *hp, int64_t il,
                              const struct gguf_tensor *t[MOE_TENSORS], struct kn_err *err)
{
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert;
    enum kn_status st;
    if ((st = find(g, il, "ffn_gate_inp.weight", E, X, 1, true, &t[MOE_ROUTER], err)) != KN_OK ||
        (st = find(g, il, "ffn_gate_exps.weight", E, F, X, true, &t[MOE_GATE], err)) != KN_OK ||
        (st = find(g, il, "ffn_up_exps.weight", E, F, X, true, &t[MOE_UP], err)) != KN_OK ||
        (st = find(g, il, "ffn_down_exps.weight", F, E, X, true, &t[MOE_DOWN], err)) != KN_OK ||
        (st = find(g, il, "exp_probs_b.bias", X, 1, 1, false, &t[MOE_BIAS], err)) != KN_OK)
        return st;
    if (hp->arch == MODEL_ARCH_GPTOSS) {
        /* the router's and the experts' biases, all required (llama.cpp's loader); f32
         * tables of one row per expert */
        if ((st = find(g, il, "ffn_gate_inp.bias", X, 1, 1, true, &t[MOE_ROUTER_B], err)) != KN_OK ||
            (st = find(g, il, "ffn_gate_exps.bias", F, X, 1, true, &t[MOE_GATE_B], err)) != KN_OK ||
            (st = find(g, il, "ffn_up_exps.bias", F, X, 1, true, &t[MOE_UP_B], err)) != KN_OK ||
            (st = find(g, il, "ffn_down_exps.bias", E, X, 1, true, &t[MOE_DOWN_B], err)) != KN_OK)
            return st;
        for (int i = MOE_GATE_B; i <= MOE_DOWN_B; i++)
            if (t[i]->type != QT_F32 && t[i]->type != QT_F16 && t[i]->type != QT_BF16)
                return kn_fail(err, KN_E_UNSUPPORTED, "tensor %s has type %s; expected f32, f16 or bf16",
                               t[i]->name, quant_type_name(t[i]->type));
        return KN_OK;
    }
    /* Tensors this graph does not have: refuse rather than ignore. */
    static const char *const extra[] = {"ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                                        "ffn_down_shexp.weight", "ffn_gate_inp.bias",
                                        "ffn_gate_exps.bias", "ffn_up_exps.bias",
                                        "ffn_down_exps.bias"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, extra[i]);
        if (gguf_find_tensor(g, name))
            return kn_fail(err, KN_E_UNSUPPORTED, "tensor %s (shared experts or expert biases) is not supported",
                           name);
    }
    return KN_OK;
}

enum kn_status model_moe_init(struct model_layer *L, const struct model_hparams *hp,
                              const struct gguf_tensor *const t[MOE_TENSORS],
                              const float *const vec[MOE_TENSORS], bool repack, size_t *bytes,
                              struct kn_err *err)
{
    const int64_t X = hp->n_expert;
    struct model_moe *m = kn_calloc(1, sizeof *m, err);
    if (!m)
        return KN_E_NOMEM;
    L->moe = m;
    m->bias = vec[MOE_BIAS];
    m->router_b = vec[MOE_ROUTER_B];
    m->gate_b = vec[MOE_GATE_B];
    m->up_b = vec[MOE_UP_B];
    m->down_b = vec[MOE_DOWN_B];
    m->exps = kn_calloc((size_t)(3 * X), sizeof *m->exps, err);
    m->d_exps = kn_calloc((size_t)(3 * X), sizeof *m->d_exps, err);
    m->d_exp_b = m->gate_b ? kn_calloc((size_t)(3 * X), sizeof *m->d_exp_b, err) : NULL;
    if (!m->exps || !m->d_exps || (m->gate_b && !m->d_exp_b))
        return KN_E_NOMEM;
    const struct gguf_tensor *r = t[MOE_ROUTER];
    enum kn_status st = kern_weight_init(&m->router, (enum quant_type)r->type, r->ne[1], r->ne[0],
                                         r->data, (size_t)r->size, repack, err);
    if (st != KN_OK) {
        kn_err_prefix(err, r->name);
        return st;
    }
    *bytes += (size_t)r->size;
    for (int p = 0; p < 3; p++) {
        const struct gguf_tensor *x = t[MOE_GATE + p];
        /* Expert e's rows are the e-th of ne[2] equal slices of the tensor. */
        const size_t slice = (size_t)(x->size / (uint64_t)X);
        for (int64_t e = 0; e < X; e++) {
            st = kern_weight_init(&m->exps[p * X + e], (enum quant_type)x->type, x->ne[1], x->ne[0],
                                  (const uint8_t *)x->data + (size_t)e * slice, slice, repack, err);
            if (st != KN_OK) {
                char what[160];
                snprintf(what, sizeof what, "%s (expert %lld)", x->name, (long long)e);
                kn_err_prefix(err, what);
                return st;
            }
        }
        *bytes += (size_t)x->size;
    }
    return KN_OK;
}

enum kn_status model_moe_upload(struct model_layer *L, const struct model_hparams *hp,
                                struct kn_err *err)
{
    struct model_moe *m = L->moe;
    struct kern_backend *be = L->be;
    if (!(m->d_router = be->ops->upload_weight(be, &m->router, err)) ||
        (m->bias && !(m->d_bias = be->ops->upload(be, m->bias, hp->n_expert, err))) ||
        (m->router_b && !(m->d_router_b = be->ops->upload(be, m->router_b, hp->n_expert, err))))
        return err ? err->status : KN_E_NOMEM;
    for (int64_t i = 0; i < 3 * hp->n_expert; i++)
        if (!(m->d_exps[i] = be->ops->upload_weight(be, &m->exps[i], err)))
            return err ? err->status : KN_E_NOMEM;
    const int64_t X = hp->n_expert, F = hp->n_ff_exp, E = hp->n_embd;
    for (int64_t e = 0; m->d_exp_b && e < X; e++)
        if (!(m->d_exp_b[e] = be->ops->upload(be, m->gate_b + e * F, F, err)) ||
            !(m->d_exp_b[X + e] = be->ops->upload(be, m->up_b + e * F, F, err)) ||
            !(m->d_exp_b[2 * X + e] = be->ops->upload(be, m->down_b + e * E, E, err)))
            return err ? err->status : KN_E_NOMEM;
    return KN_OK;
}

void model_moe_free(struct model_layer *L, const struct model_hparams *hp, bool bufs_only)
{
    struct model_moe *m = L->moe;
    if (!m)
        return;
    kern_buf_free(m->d_router);
    kern_buf_free(m->d_bias);
    kern_buf_free(m->d_router_b);
    m->d_router = m->d_bias = m->d_router_b = NULL;
    for (int64_t i = 0; m->d_exps && i < 3 * hp->n_expert; i++) {
        kern_buf_free(m->d_exps[i]);
        m->d_exps[i] = NULL;
    }
    for (int64_t i = 0; m->d_exp_b && i < 3 * hp->n_expert; i++) {
        kern_buf_free(m->d_exp_b[i]);
        m->d_exp_b[i] = NULL;
    }
    if (bufs_only)
        return;
    kern_weight_free(&m->router);
    for (int64_t i = 0; m->exps && i < 3 * hp->n_expert; i++)
        kern_weight_free(&m->exps[i]);
    free(m->exps);
    free(m->d_exps);
    free(m->d_exp_b);
    free(m);
    L->moe = NULL;
}
