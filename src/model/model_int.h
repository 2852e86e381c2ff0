/* model_int.h: what the model module's files share and nothing outside uses. */
#ifndef KN_MODEL_INT_H
#define KN_MODEL_INT_H

#include "model.h"

/* lfm2.c: reads <arch>.attention.head_count_kv (one entry per layer, 0 = a conv layer)
 * into hp->conv_layer and hp->n_head_kv, and <arch>.shortconv.l_cache into hp->n_conv_l
 * (arch: lfm2 or lfm2moe).
 * Needs hp->n_layer and hp->n_head. */
KN_MUST_USE enum kn_status model_lfm2_hparams(const struct gguf_file *g, const char *arch,
                                              struct model_hparams *hp, struct kn_err *err);

/* ---------------------------------------------------------------- forward.c's state
 * (shared with bert.c, whose pass uses the same buffers) */

/* The activations on one backend. */
struct fwd_part {
    struct kern_backend *be;
    struct kern_stream *s;
    struct kern_buf *x;    /* (T, E) residual stream */
    struct kern_buf *h;    /* (T, E) normed input of a block; later the output rows */
    struct kern_buf *o;    /* (T, E) block output */
    struct kern_buf *q;    /* (T, H*D) */
    struct kern_buf *k;    /* (T, Hkv*D) */
    struct kern_buf *v;    /* (T, Hkv*D) */
    struct kern_buf *a;    /* (T, H*D) attention output */
    struct kern_buf *g;    /* (T, F) gate, then the activation; lfm2: (T, 3E) B, C, x first */
    struct kern_buf *u;    /* (T, F) up */
    struct kern_buf *tab_global, *tab_swa; /* (T, n_rot) RoPE tables */
    struct kern_buf *router; /* (T, n_expert) router logits (MoE models) */
    struct kern_buf *moe_ids, *moe_w; /* (T, k) each token's experts (int32) and weights */
};

struct model_fwd {
    const struct model *m;
    int64_t max_tokens;
    /* RoPE of global and sliding-window layers; set 1 only for phi3's LongRoPE (the long
     * factors, used when the batch's caches exceed the original context). */
    struct kern_rope rope_global[2], rope_swa[2];
    int n_rope_sets;
    bool any_swa;
    struct fwd_part part[2];     /* part[0] runs layers 0..split-1, part[1] the rest */
    int n_parts;
    int64_t split;
    float *handover;             /* (T, E) the residual stream between parts, or NULL */
    struct model_kv **kv_tok;    /* (T) each token's cache (model_forward: all the same) */
    struct kern_kv_run *runs;    /* (T) runs of same-cache tokens */
    struct model_kv **run_kv;    /* (T) the cache of each run */
    int32_t *pos_all;            /* (T) bert: every token's attention reach (the last position) */
};

/* forward.c: the model a forward context runs. */
const struct model *model_fwd_model(const struct model_fwd *f);

/* Starts part p's pass (forward.c): the RoPE tables (set rs) of this batch's positions. */
void model_fwd_part_begin(const struct model_fwd *f, const struct fwd_part *p, const int32_t *pos,
                          int64_t T, int rs);
/* At the split layer (forward.c): hands the residual stream x (T, E) of part *P (0) over
 * to part 1 through host memory (part 0's pass ends, part 1's begins); *P becomes part 1. */
enum kn_status model_fwd_handover(struct model_fwd *f, const struct fwd_part **P,
                                  const int32_t *pos, int64_t T, int rs, struct kn_err *err);

/* bert.c: the pass of bert and nomic-bert over one sequence's tokens (kv: its cache, run
 * over slots pos[t]), every token attending to every position of the batch; writes the
 * output rows' hidden states (n_out, n_embd) to hidden. Encoders give no logits
 * (hidden NULL: KN_E_UNSUPPORTED). */
KN_MUST_USE enum kn_status model_bert_pass(struct model_fwd *f, struct model_kv *kv,
                                           const int32_t *tokens, const int32_t *pos, int64_t T,
                                           const int64_t *out_rows, int64_t n_out, float *hidden,
                                           struct kn_err *err);

#endif
