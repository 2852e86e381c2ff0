/* bert.c: the BERT family's pass (llama.cpp's llm_build_bert for LLM_ARCH_BERT and
 * LLM_ARCH_NOMIC_BERT), an encoder that gives hidden states, not logits:
 *
 *   x = tok_embd[token] + token_types[0] (+ position_embd[pos], bert)
 *   x = layernorm(x) * token_embd_norm + bias
 *   per layer:
 *     q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv   (nomic-bert: one qkv matrix, no biases;
 *                                                    q, k rotated, NEOX RoPE)
 *     a = attention of every token over every position of the sequence (not causal)
 *     x = layernorm(a Wo^T (+ bo) + x) * attn_output_norm + bias
 *     f = gelu(x Wup^T + bup) Wdown^T + bdown   (nomic-bert: (silu(x Wgate^T) * x Wup^T) Wdown^T)
 *     x = layernorm(f + x) * layer_output_norm + bias
 *   hidden = x (no final norm)
 *
 * Non-causal attention runs on the causal kernels: every token's keys and values are
 * stored at their own positions first, then each query attends to slots 0..last, the
 * sequence's last position (f->pos_all). A token's row still depends only on the sequence,
 * never on the thread count or ISA; but it depends on the whole sequence, so a sequence
 * is one call (model_embed does so). Every op is a backend op (layernorm and gelu are the
 * BERT ones: model.c's layer_ops asks the layers' backend for them). */
#include "model_int.h"

#include <string.h>

enum kn_status model_bert_pass(struct model_fwd *f, struct model_kv *kv, const int32_t *tokens,
                               const int32_t *pos, int64_t T, const int64_t *out_rows,
                               int64_t n_out, float *hidden, struct kn_err *err)
{
    const struct model *m = f->m;
    const struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff, D = hp->head_dim_k;
    const int64_t H = hp->n_head, Hkv = hp->n_head_kv;
    const bool nomic = hp->arch == MODEL_ARCH_NOMIC_BERT;
    if (!hidden)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "%s is an encoder: it gives embeddings (kinetic embed, POST "
                       "/v1/embeddings), not next-token logits", model_arch_name(hp->arch));
    int32_t last = 0;
    for (int64_t t = 0; t < T; t++) {
        if (m->d_pos_embd && pos[t] >= hp->n_ctx_train)
            return kn_fail(err, KN_E_LIMIT, "position %d is past the %lld positions %s was "
                           "trained with (its position_embd rows)", pos[t],
                           (long long)hp->n_ctx_train, model_arch_name(hp->arch));
        if (pos[t] > last)
            last = pos[t];
    }
    for (int64_t t = 0; t < T; t++)
        f->pos_all[t] = last;
    f->runs[0] = (struct kern_kv_run){.t0 = 0, .n = T, .n_ctx = kv->n_ctx, .n_kv = (int64_t)last + 1};

    const struct fwd_part *P = &f->part[0];
    struct kern_stream *s = P->s;
    const struct kern_backend_ops *op = s->ops;
    model_fwd_part_begin(f, P, pos, T, 0);
    op->embed(s, P->x, m->d_tok_embd, tokens, T, 1.0f);
    if (m->d_type_embd0)
        op->add_rows(s, P->x, m->d_type_embd0, T, E);
    if (m->d_pos_embd) {
        op->embed(s, P->o, m->d_pos_embd, pos, T, 1.0f);
        op->add(s, P->x, P->o, T * E);
    }
    op->layernorm(s, P->x, P->x, m->d_embd_norm, m->d_embd_norm_b, T, E, hp->norm_eps);

    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer_bufs *d = &m->layers[il].d;
        if (il == f->split) { /* --gpu-layers: the rest on the next backend */
            enum kn_status st = model_fwd_handover(f, &P, pos, T, 0, err);
            if (st != KN_OK)
                return st;
            s = P->s;
            op = s->ops;
        }
        {
            const struct kern_buf *w[3] = {d->wq, d->wk, d->wv};
            struct kern_buf *y[3] = {P->q, P->k, P->v};
            op->matmul(s, 3, w, P->x, T, y);
        }
        if (d->bq) op->add_rows(s, P->q, d->bq, T, H * D);
        if (d->bk) op->add_rows(s, P->k, d->bk, T, Hkv * D);
        if (d->bv) op->add_rows(s, P->v, d->bv, T, Hkv * D);
        if (nomic) {
            op->rope(s, P->q, P->tab_global, &f->rope_global[0], T, H, D);
            op->rope(s, P->k, P->tab_global, &f->rope_global[0], T, Hkv, D);
        }
        f->runs[0].k = kv->kb[il];
        f->runs[0].v = kv->vb[il];
        struct kern_attn_batch batch = {
            .q = P->q, .k_new = P->k, .v_new = P->v, .out = P->a, .pos = pos, .n_tok = T,
            .runs = f->runs, .n_runs = 1, .kv_type = model_kv_qtype(kv->type),
            .n_head = (int32_t)H, .n_head_kv = (int32_t)Hkv, .head_dim = (int32_t)D,
            .scale = hp->kq_scale, .window = 0, .softcap = 0.0f,
        };
        op->kv_store(s, &batch);
        batch.pos = f->pos_all; /* every query reaches the last position */
        op->attention(s, &batch);
        const struct kern_buf *wo = d->wo, *wup = d->ffn_up, *wdown = d->ffn_down;
        op->matmul(s, 1, &wo, P->a, T, &P->o);
        if (d->bo) op->add_rows(s, P->o, d->bo, T, E);
        op->add(s, P->o, P->x, T * E);
        op->layernorm(s, P->x, P->o, d->post_attn_norm, d->post_attn_norm_b, T, E, hp->norm_eps);
        if (nomic) {
            const struct kern_buf *w[2] = {d->ffn_gate, d->ffn_up};
            struct kern_buf *y[2] = {P->g, P->u};
            op->matmul(s, 2, w, P->x, T, y);
            op->glu(s, KERN_GLU_SWIGLU, P->g, P->u, T * F);
        } else {
            op->matmul(s, 1, &wup, P->x, T, &P->g);
            if (d->ffn_up_b) op->add_rows(s, P->g, d->ffn_up_b, T, F);
            op->gelu(s, P->g, T * F);
        }
        op->matmul(s, 1, &wdown, P->g, T, &P->o);
        if (d->ffn_down_b) op->add_rows(s, P->o, d->ffn_down_b, T, E);
        op->add(s, P->o, P->x, T * E);
        op->layernorm(s, P->x, P->o, d->post_ffn_norm, d->post_ffn_norm_b, T, E, hp->norm_eps);
    }
    if (n_out > 0) {
        op->gather(s, P->h, P->x, out_rows, n_out, E);
        op->to_host(s, P->h, 0, hidden, (size_t)(n_out * E) * sizeof(float));
    }
    return op->end(s, err);
}
