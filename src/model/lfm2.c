/* lfm2.c: what is particular to LFM2 (Liquid AI's hybrid of short-convolution and
 * grouped-query attention layers) when a file is read.
 *
 * The GGUF layout is llama.cpp's (convert_hf_to_gguf.py, LFM2Model and LFM2MoeModel):
 * <arch>.attention.head_count_kv is an array with one entry per layer, 0 for a conv layer;
 * <arch>.shortconv.l_cache is the conv length L (arch lfm2 or lfm2moe, whose expert keys
 * moe.c reads). The forward pass of a conv layer is in forward.c (conv_block) and its
 * state lives in the KV cache (model.h, struct model_kv). */
#include "model_int.h"

#include <stdio.h>

/* The conv length is bounded by the kernel (ops.h KERN_CONV_MAX_L). */

enum kn_status model_lfm2_hparams(const struct gguf_file *g, const char *arch,
                                  struct model_hparams *hp, struct kn_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return kn_fail(err, KN_E_FORMAT, "required key %s is missing; the file is not a complete %s model",
                       key, arch);
    int64_t n_kv = 0;
    bool any_conv = false;
    if (kv->value.type == GGUF_T_ARRAY) {
        const struct gguf_value *a = &kv->value;
        enum gguf_vtype et = a->v.arr.type;
        bool integer = et == GGUF_T_U8 || et == GGUF_T_I8 || et == GGUF_T_U16 || et == GGUF_T_I16 ||
                       et == GGUF_T_U32 || et == GGUF_T_I32 || et == GGUF_T_U64 || et == GGUF_T_I64;
        if (!integer || a->v.arr.n != (uint64_t)hp->n_layer)
            return kn_fail(err, KN_E_FORMAT,
                           "%s must be an integer array with one entry per layer (%lld); it has %llu of type %s",
                           key, (long long)hp->n_layer, (unsigned long long)a->v.arr.n,
                           gguf_vtype_name(et));
        for (int64_t il = 0; il < hp->n_layer; il++) {
            int64_t v = gguf_arr_i64(a, (uint64_t)il);
            if (v < 0 || v > hp->n_head)
                return kn_fail(err, KN_E_FORMAT, "%s[%lld] = %lld is outside 0..head_count (%lld)", key,
                               (long long)il, (long long)v, (long long)hp->n_head);
            hp->conv_layer[il] = v == 0;
            any_conv |= v == 0;
            if (v == 0)
                continue;
            if (n_kv && v != n_kv)
                return kn_fail(err, KN_E_UNSUPPORTED,
                               "%s differs between attention layers (%lld and %lld); one value is supported",
                               key, (long long)n_kv, (long long)v);
            n_kv = v;
        }
    } else {
        /* A scalar: every layer is an attention layer (0 would mean no attention at all). */
        if (!gguf_get_i64(g, key, &n_kv) || n_kv <= 0 || n_kv > hp->n_head)
            return kn_fail(err, KN_E_FORMAT, "%s must be a per-layer array or a positive integer", key);
    }
    hp->n_head_kv = n_kv ? n_kv : hp->n_head; /* all conv: no cache rows of keys at all */
    hp->n_conv_l = 0;
    if (any_conv) {
        int64_t L;
        snprintf(key, sizeof key, "%s.shortconv.l_cache", arch);
        if (!gguf_get_i64(g, key, &L))
            return kn_fail(err, KN_E_FORMAT, "required key %s (the conv length) is missing or not an integer",
                           key);
        if (L < 1 || L > KERN_CONV_MAX_L)
            return kn_fail(err, KN_E_UNSUPPORTED, "%s = %lld is outside the supported 1..%d", key,
                           (long long)L, KERN_CONV_MAX_L);
        hp->n_conv_l = L;
    }
    return KN_OK;
}
