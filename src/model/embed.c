/* embed.c: one sequence's embedding: the forward pass's final-normed hidden states
 * (model_forward_hidden), pooled as the GGUF's <arch>.pooling_type says, truncated
 * (Matryoshka) and L2-normalised, as llama.cpp's embedding output and OpenAI's
 * /v1/embeddings give them.
 *
 * Arithmetic (docs/numerics.md "Embeddings"): mean pooling sums the rows in f32 in
 * position order and divides by n once; the L2 norm sums squares in double in index
 * order (llama.cpp's common_embd_normalize) and multiplies each value by 1/sqrt(sum) in
 * double, rounded to f32. The hidden states are per-token results of the forward pass,
 * so the embedding depends only on the model and the tokens: not on the chunking, the
 * thread count, the ISA level or anything else the process is doing. */
#include "model_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool model_embed_matryoshka(const struct model_hparams *hp)
{
    return hp->arch == MODEL_ARCH_QWEN3 || hp->arch == MODEL_ARCH_NOMIC_BERT;
}

int64_t model_embed_batch(const struct model_hparams *hp, int64_t n_batch, int64_t n_ctx)
{
    return model_arch_is_bert(hp->arch) ? n_ctx : n_batch;
}

enum kn_status model_embed(struct model_fwd *f, struct model_kv *kv, const int32_t *tokens,
                           int64_t n, int64_t dims, float *out, struct kn_err *err)
{
    const struct model_hparams *hp = &model_fwd_model(f)->hp;
    const int64_t E = hp->n_embd, B = model_fwd_max_tokens(f);
    if (hp->pooling == MODEL_POOLING_NONE)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "the model's %s.pooling_type is none (or absent): it gives no pooled "
                       "embedding; use an embedding model (mean, cls or last pooling)",
                       model_arch_name(hp->arch));
    if (dims < 1 || dims > E)
        return kn_fail(err, KN_E_ARG, "dimensions %lld must be between 1 and the model's %lld",
                       (long long)dims, (long long)E);
    if (n < 1)
        return kn_fail(err, KN_E_ARG, "the input is empty: it has no tokens");
    if (n > kv->n_ctx)
        return kn_fail(err, KN_E_LIMIT, "the input has %lld tokens; the context takes at most %lld",
                       (long long)n, (long long)kv->n_ctx);
    if (model_arch_is_bert(hp->arch) && n > B)
        return kn_fail(err, KN_E_LIMIT, "the input has %lld tokens; %s embeds a sequence in one "
                       "pass of at most %lld", (long long)n, model_arch_name(hp->arch), (long long)B);
    const bool mean = hp->pooling == MODEL_POOLING_MEAN;
    float *h = kn_malloc((size_t)B * (size_t)E * sizeof(float), err);
    int32_t *pos = kn_malloc((size_t)B * sizeof *pos, err);
    int64_t *rows = kn_malloc((size_t)B * sizeof *rows, err);
    float *acc = kn_calloc((size_t)E, sizeof *acc, err);
    enum kn_status st = h && pos && rows && acc ? KN_OK : KN_E_NOMEM;
    for (int64_t t0 = 0; t0 < n && st == KN_OK; t0 += B) {
        const int64_t c = n - t0 < B ? n - t0 : B;
        int64_t n_out = 0;
        for (int64_t i = 0; i < c; i++) {
            pos[i] = (int32_t)(t0 + i);
            const bool want = mean || (hp->pooling == MODEL_POOLING_CLS && t0 + i == 0) ||
                              (hp->pooling == MODEL_POOLING_LAST && t0 + i == n - 1);
            if (want)
                rows[n_out++] = i;
        }
        st = model_forward_hidden(f, kv, tokens + t0, pos, c, rows, n_out, h, err);
        for (int64_t j = 0; j < n_out && st == KN_OK; j++)
            for (int64_t e = 0; e < E; e++)
                acc[e] = mean ? acc[e] + h[j * E + e] : h[j * E + e];
    }
    if (st == KN_OK) {
        if (mean)
            for (int64_t e = 0; e < E; e++)
                acc[e] = acc[e] / (float)n;
        double ss = 0.0;
        for (int64_t e = 0; e < dims; e++)
            ss += (double)acc[e] * (double)acc[e];
        const double scale = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
        for (int64_t e = 0; e < dims; e++)
            out[e] = (float)((double)acc[e] * scale);
    }
    free(h);
    free(pos);
    free(rows);
    free(acc);
    return st;
}
