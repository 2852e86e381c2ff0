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

/* forward.c: the model a forward context runs. */
const struct model *model_fwd_model(const struct model_fwd *f);

#endif
