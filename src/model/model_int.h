/* model_int.h: what the model module's files share and nothing outside uses. */
#ifndef KN_MODEL_INT_H
#define KN_MODEL_INT_H

#include "model.h"

/* lfm2.c: reads lfm2.attention.head_count_kv (one entry per layer, 0 = a conv layer)
 * into hp->conv_layer and hp->n_head_kv, and lfm2.shortconv.l_cache into hp->n_conv_l.
 * Needs hp->n_layer and hp->n_head. */
KN_MUST_USE enum kn_status model_lfm2_hparams(const struct gguf_file *g, struct model_hparams *hp,
                                              struct kn_err *err);

#endif
