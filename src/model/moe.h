/* moe.h: the mixture-of-experts parts of the model module (moe.c), for model.c and
 * forward.c only. */
#ifndef KN_MODEL_MOE_H
#define KN_MODEL_MOE_H

#include "model.h"

/* The tensors of one MoE layer, found by model_moe_plan. */
/* MOE_BIAS and the gpt-oss biases (MOE_ROUTER_B .. MOE_DOWN_B) are vectors: model.c
 * copies them to f32 and hands them to model_moe_init. */
enum { MOE_ROUTER, MOE_GATE, MOE_UP, MOE_DOWN, MOE_BIAS, MOE_ROUTER_B, MOE_GATE_B, MOE_UP_B,
       MOE_DOWN_B, MOE_TENSORS };
#define MOE_FIRST_VEC MOE_BIAS

/* Reads <arch>.expert_* (the routing rule included) into hp when expert_count is present;
 * refuses an architecture without an MoE graph. */
KN_MUST_USE enum kn_status model_moe_read_hparams(const struct gguf_file *g, const char *arch,
                                                  struct model_hparams *hp, struct kn_err *err);
/* Finds and checks layer il's router, expert tensors and (optional) selection bias. */
KN_MUST_USE enum kn_status model_moe_plan(const struct gguf_file *g, const struct model_hparams *hp,
                                          int64_t il, const struct gguf_tensor *t[MOE_TENSORS],
                                          struct kn_err *err);
/* Makes L->moe from the planned tensors: the router and every expert slice as weights
 * (repacked when repack); vec[i] for i >= MOE_FIRST_VEC is tensor i copied to f32 (NULL
 * when absent). Adds the tensors' bytes to *bytes. */
KN_MUST_USE enum kn_status model_moe_init(struct model_layer *L, const struct model_hparams *hp,
                                          const struct gguf_tensor *const t[MOE_TENSORS],
                                          const float *const vec[MOE_TENSORS], bool repack,
                                          size_t *bytes, struct kn_err *err);
/* Uploads L->moe to L->be (model_open's place_layers has made sure L->be has the ops). */
KN_MUST_USE enum kn_status model_moe_upload(struct model_layer *L, const struct model_hparams *hp,
                                            struct kn_err *err);
/* Frees L->moe's buffers (free_bufs) or everything (buffers, weights, L->moe). */
void model_moe_free(struct model_layer *L, const struct model_hparams *hp, bool bufs_only);

#endif
