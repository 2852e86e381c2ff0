/* cmd_info.c: `kinetic info MODEL.gguf [--json]`: what a GGUF file holds, read with
 * the validating reader: architecture, shapes, parameter count, tensor types, file
 * type, tokenizer and special tokens. A bad file prints the reader's message (what is
 * wrong, where, and what was expected) and exits 1. */
#include "cli.h"
#include "base/base.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- text output */

/* Writes s as a JSON string literal (quotes included). Invalid UTF-8 bytes become
 * U+FFFD so the output stays valid JSON; control characters are escaped. */
static void put_json_str(FILE *out, const char *s, uint64_t n)
{
    fputc('"', out);
    for (uint64_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fprintf(out, "\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", out);
            i++;
        } else if (c == '\t') {
            fputs("\\t", out);
            i++;
        } else if (c == '\r') {
            fputs("\\r", out);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(out, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            fputc(c, out);
            i++;
        } else {
            /* The longest well-formed sequence starting here, else one replacement. */
            unsigned len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            if (n - i >= len && gguf_utf8_valid(s + i, len)) {
                fwrite(s + i, 1, len, out);
                i += len;
            } else {
                fputs("\\ufffd", out);
                i++;
            }
        }
    }
    fputc('"', out);
}

/* Writes a short string value as plain text: at most 200 bytes (a hostile file may
 * hold gigabyte strings), control characters shown as '?'. */
static void put_text(FILE *out, struct gguf_str s)
{
    uint64_t n = s.len > 200 ? 200 : s.len;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.data[i];
        fputc(c < 0x20 || c == 0x7F ? '?' : c, out);
    }
    if (n < s.len)
        fputs("...", out);
}

static void put_opt_str(FILE *out, bool have, struct gguf_str s)
{
    if (have)
        put_json_str(out, s.data, s.len);
    else
        fputs("null", out);
}

/* Formats a count with an SI suffix: 268098176 -> "268.10M". */
static void human_count(char *buf, size_t cap, uint64_t n)
{
    static const char *const sfx[] = {"", "K", "M", "B", "T"};
    double v = (double)n;
    int k = 0;
    while (v >= 1000.0 && k < 4) {
        v /= 1000.0;
        k++;
    }
    if (k == 0)
        snprintf(buf, cap, "%" PRIu64, n);
    else
        snprintf(buf, cap, "%.2f%s", v, sfx[k]);
}

/* ---------------------------------------------------------------- gathering */

/* A hyperparameter from "<arch>.<suffix>": a scalar, or an array of per-layer values
 * (some models vary heads or FFN width by layer), reported as their maximum. */
struct hparam {
    bool have;
    bool per_layer;
    uint64_t value;
};

static struct hparam get_hparam(const struct gguf_file *f, const char *arch, const char *suffix)
{
    struct hparam h = {0};
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint64_t v;
    if (gguf_get_u64(f, key, &v)) {
        h.have = true;
        h.value = v;
        return h;
    }
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (kv && kv->value.type == GGUF_T_ARRAY && kv->value.v.arr.n > 0 &&
        gguf_vtype_size(kv->value.v.arr.type) != 0 && kv->value.v.arr.type != GGUF_T_F32 &&
        kv->value.v.arr.type != GGUF_T_F64) {
        h.have = h.per_layer = true;
        for (uint64_t i = 0; i < kv->value.v.arr.n; i++) {
            int64_t x = gguf_arr_i64(&kv->value, i);
            if (x > 0 && (uint64_t)x > h.value)
                h.value = (uint64_t)x;
        }
    }
    return h;
}

struct special {
    const char *name; /* bos, eos, ... */
    const char *key;  /* tokenizer.ggml.*_token_id */
};

static const struct special specials[] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"eot", "tokenizer.ggml.eot_token_id"},     {"eom", "tokenizer.ggml.eom_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"}, {"pad", "tokenizer.ggml.padding_token_id"},
    {"sep", "tokenizer.ggml.seperator_token_id"}, /* llama.cpp's spelling */
    {"cls", "tokenizer.ggml.cls_token_id"},     {"mask", "tokenizer.ggml.mask_token_id"},
};
#define N_SPECIALS (sizeof specials / sizeof specials[0])

struct info {
    const struct gguf_file *f;
    const char *path;
    bool have_arch, have_name, have_tok_model, have_tok_pre, have_template;
    struct gguf_str arch, name, tok_model, tok_pre, chat_template;
    char arch_z[128]; /* arch as a C string, for key names */
    uint64_t n_params;
    uint64_t type_count[QT_COUNT];
    uint64_t type_bytes[QT_COUNT];
    bool have_ftype;
    uint32_t ftype;
    int64_t ftype_guess; /* from the commonest weight type when general.file_type is absent */
    struct hparam layers, embd, heads, kv_heads, head_dim, ffn, ctx, vocab_hp;
    struct hparam experts, experts_used, expert_ffn; /* mixture of experts */
    bool have_rope_base;
    float rope_base;
    uint64_t n_conv_layers; /* lfm2: layers whose head_count_kv entry is 0 */
    struct hparam conv_l;   /* lfm2.shortconv.l_cache */
    const struct gguf_value *tokens;
    bool have_special[N_SPECIALS];
    uint64_t special_id[N_SPECIALS];
};

static void gather(struct info *in)
{
    const struct gguf_file *f = in->f;
    in->have_arch = gguf_get_str(f, "general.architecture", &in->arch);
    in->have_name = gguf_get_str(f, "general.name", &in->name);
    in->have_tok_model = gguf_get_str(f, "tokenizer.ggml.model", &in->tok_model);
    in->have_tok_pre = gguf_get_str(f, "tokenizer.ggml.pre", &in->tok_pre);
    in->have_template = gguf_get_str(f, "tokenizer.chat_template", &in->chat_template);
    in->have_ftype = gguf_get_u32(f, "general.file_type", &in->ftype);
    in->ftype_guess = -1;
    snprintf(in->arch_z, sizeof in->arch_z, "%.*s", in->have_arch ? (int)(in->arch.len < 127 ? in->arch.len : 127) : 0,
             in->have_arch ? in->arch.data : "");
    uint64_t weight_count[QT_COUNT] = {0};
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        uint64_t n = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            n *= (uint64_t)t->ne[d]; /* the reader checked this product fits in int64 */
        in->n_params += n;
        in->type_count[t->type]++;
        in->type_bytes[t->type] += t->size;
        if (t->n_dims >= 2)
            weight_count[t->type]++;
    }
    if (!in->have_ftype) {
        uint32_t best = 0;
        for (uint32_t t = 1; t < QT_COUNT; t++)
            if (weight_count[t] > weight_count[best])
                best = t;
        if (weight_count[best] > 0)
            in->ftype_guess = gguf_file_type_guess(best);
    }
    if (in->have_arch) {
        const char *a = in->arch_z;
        in->layers = get_hparam(f, a, "block_count");
        in->embd = get_hparam(f, a, "embedding_length");
        in->heads = get_hparam(f, a, "attention.head_count");
        in->kv_heads = get_hparam(f, a, "attention.head_count_kv");
        in->head_dim = get_hparam(f, a, "attention.key_length");
        in->ffn = get_hparam(f, a, "feed_forward_length");
        in->ctx = get_hparam(f, a, "context_length");
        in->vocab_hp = get_hparam(f, a, "vocab_size");
        in->experts = get_hparam(f, a, "expert_count");
        in->experts_used = get_hparam(f, a, "expert_used_count");
        in->expert_ffn = get_hparam(f, a, "expert_feed_forward_length");
        in->conv_l = get_hparam(f, a, "shortconv.l_cache");
        char key[256];
        snprintf(key, sizeof key, "%s.attention.head_count_kv", a);
        const struct gguf_kv *hkv = gguf_find_kv(f, key);
        if (in->kv_heads.per_layer && hkv)
            for (uint64_t i = 0; i < hkv->value.v.arr.n; i++)
                in->n_conv_layers += gguf_arr_i64(&hkv->value, i) == 0;
        snprintf(key, sizeof key, "%s.rope.freq_base", a);
        in->have_rope_base = gguf_get_f32(f, key, &in->rope_base);
        /* Without an explicit key length, a head is the embedding split over the heads;
         * without KV heads, attention is plain multi-head (as llama.cpp assumes). */
        if (!in->head_dim.have && in->embd.have && in->heads.have && in->heads.value > 0 &&
            !in->heads.per_layer) {
            in->head_dim.have = true;
            in->head_dim.value = in->embd.value / in->heads.value;
        }
        if (!in->kv_heads.have && in->heads.have)
            in->kv_heads = in->heads;
    }
    in->tokens = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_T_STRING);
    for (size_t i = 0; i < N_SPECIALS; i++)
        in->have_special[i] = gguf_get_u64(f, specials[i].key, &in->special_id[i]);
}

/* The text of token id, or NULL when the id is not in the vocabulary (files use
 * 0xFFFFFFFF for "none"). */
static const struct gguf_str *token_text(const struct info *in, uint64_t id)
{
    if (!in->tokens || id >= in->tokens->v.arr.n)
        return NULL;
    return &in->tokens->v.arr.strs[id];
}

static uint64_t vocab_size(const struct info *in)
{
    if (in->tokens)
        return in->tokens->v.arr.n;
    return in->vocab_hp.have ? in->vocab_hp.value : 0;
}

static const char *ftype_text(const struct info *in, char *buf, size_t cap)
{
    if (in->have_ftype) {
        const char *n = gguf_file_type_name(in->ftype);
        snprintf(buf, cap, "%s", n ? n : "unknown, may not work");
    } else if (in->ftype_guess >= 0) {
        snprintf(buf, cap, "%s (guessed)", gguf_file_type_name((uint32_t)in->ftype_guess));
    } else {
        snprintf(buf, cap, "unknown");
    }
    return buf;
}

/* ---------------------------------------------------------------- printing */

static void print_hparam_text(const char *label, struct hparam h)
{
    if (!h.have)
        return;
    printf("  %-16s %" PRIu64 "%s\n", label, h.value, h.per_layer ? " (largest of a per-layer list)" : "");
}

static void print_text(const struct info *in)
{
    const struct gguf_file *f = in->f;
    char buf[128];
    printf("file:             %s\n", in->path);
    printf("size:             %" PRIu64 " bytes\n", gguf_file_size(f));
    printf("gguf:             version %" PRIu32 ", %" PRId64 " key/values, %" PRId64
           " tensors, alignment %" PRIu32 "\n",
           gguf_version(f), gguf_n_kv(f), gguf_n_tensors(f), gguf_alignment(f));
    printf("architecture:     ");
    if (in->have_arch)
        put_text(stdout, in->arch);
    else
        printf("(none)");
    printf("\n");
    if (in->have_name) {
        printf("name:             ");
        put_text(stdout, in->name);
        printf("\n");
    }
    human_count(buf, sizeof buf, in->n_params);
    printf("parameters:       %" PRIu64 " (%s)\n", in->n_params, buf);
    printf("file type:        %s", ftype_text(in, buf, sizeof buf));
    if (in->have_ftype)
        printf(" (general.file_type %" PRIu32 ")", in->ftype);
    printf("\n");
    if (in->layers.have || in->embd.have || in->heads.have || in->ctx.have) {
        printf("shapes:\n");
        print_hparam_text("layers", in->layers);
        print_hparam_text("embedding", in->embd);
        print_hparam_text("heads", in->heads);
        print_hparam_text("kv heads", in->kv_heads);
        if (in->n_conv_layers)
            printf("  %-16s %" PRIu64 " (0 kv heads), conv length %" PRIu64 "\n", "conv layers",
                   in->n_conv_layers, in->conv_l.value);
        print_hparam_text("head dim", in->head_dim);
        print_hparam_text("ffn", in->ffn);
        print_hparam_text("experts", in->experts);
        print_hparam_text("experts used", in->experts_used);
        print_hparam_text("expert ffn", in->expert_ffn);
        print_hparam_text("context", in->ctx);
        if (in->have_rope_base)
            printf("  %-16s %g\n", "rope base", (double)in->rope_base);
        if (vocab_size(in))
            printf("  %-16s %" PRIu64 "\n", "vocab size", vocab_size(in));
    }
    if (gguf_n_tensors(f) > 0) {
        printf("tensor types:\n");
        for (uint32_t t = 0; t < QT_COUNT; t++)
            if (in->type_count[t])
                printf("  %-16s %" PRIu64 " tensors, %" PRIu64 " bytes\n", quant_type_name(t),
                       in->type_count[t], in->type_bytes[t]);
    }
    printf("tokenizer:        ");
    if (in->have_tok_model)
        put_text(stdout, in->tok_model);
    else
        printf("(none)");
    if (in->have_tok_pre) {
        printf(" (pre: ");
        put_text(stdout, in->tok_pre);
        printf(")");
    }
    printf("\n");
    if (in->tokens)
        printf("vocabulary:       %" PRIu64 " tokens\n", in->tokens->v.arr.n);
    bool any = false;
    for (size_t i = 0; i < N_SPECIALS; i++) {
        if (!in->have_special[i])
            continue;
        if (!any)
            printf("special tokens:\n");
        any = true;
        const struct gguf_str *s = token_text(in, in->special_id[i]);
        printf("  %-16s %" PRIu64 " ", specials[i].name, in->special_id[i]);
        if (s)
            put_json_str(stdout, s->data, s->len);
        else
            printf("(not in the vocabulary)");
        printf("\n");
    }
    if (in->have_template)
        printf("chat template:    present (%" PRIu64 " bytes)\n", in->chat_template.len);
    else
        printf("chat template:    none\n");
}

static void json_hparam(const char *key, struct hparam h, bool last)
{
    printf("    \"%s\": ", key);
    if (h.have)
        printf("%" PRIu64, h.value);
    else
        printf("null");
    printf(last ? "\n" : ",\n");
}

static void print_json(const struct info *in)
{
    const struct gguf_file *f = in->f;
    char buf[128];
    printf("{\n  \"file\": ");
    put_json_str(stdout, in->path, strlen(in->path));
    printf(",\n  \"size\": %" PRIu64 ",\n", gguf_file_size(f));
    printf("  \"version\": %" PRIu32 ",\n  \"n_kv\": %" PRId64 ",\n  \"n_tensors\": %" PRId64
           ",\n  \"alignment\": %" PRIu32 ",\n",
           gguf_version(f), gguf_n_kv(f), gguf_n_tensors(f), gguf_alignment(f));
    printf("  \"architecture\": ");
    put_opt_str(stdout, in->have_arch, in->arch);
    printf(",\n  \"name\": ");
    put_opt_str(stdout, in->have_name, in->name);
    printf(",\n  \"parameters\": %" PRIu64 ",\n", in->n_params);
    printf("  \"file_type\": {\"id\": ");
    if (in->have_ftype)
        printf("%" PRIu32, in->ftype);
    else
        printf("null");
    printf(", \"name\": ");
    ftype_text(in, buf, sizeof buf);
    put_json_str(stdout, buf, strlen(buf));
    printf("},\n  \"shapes\": {\n");
    json_hparam("layers", in->layers, false);
    json_hparam("embedding", in->embd, false);
    json_hparam("heads", in->heads, false);
    json_hparam("kv_heads", in->kv_heads, false);
    json_hparam("head_dim", in->head_dim, false);
    json_hparam("ffn", in->ffn, false);
    json_hparam("experts", in->experts, false);
    json_hparam("experts_used", in->experts_used, false);
    json_hparam("expert_ffn", in->expert_ffn, false);
    json_hparam("context", in->ctx, false);
    printf("    \"rope_base\": ");
    if (in->have_rope_base)
        printf("%.9g", (double)in->rope_base);
    else
        printf("null");
    printf(",\n    \"vocab_size\": ");
    if (vocab_size(in))
        printf("%" PRIu64, vocab_size(in));
    else
        printf("null");
    printf("\n  },\n  \"tensor_types\": {");
    bool first = true;
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        if (!in->type_count[t])
            continue;
        printf("%s\n    \"%s\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", first ? "" : ",",
               quant_type_name(t), in->type_count[t], in->type_bytes[t]);
        first = false;
    }
    printf("%s},\n  \"tokenizer\": {\"model\": ", first ? "" : "\n  ");
    put_opt_str(stdout, in->have_tok_model, in->tok_model);
    printf(", \"pre\": ");
    put_opt_str(stdout, in->have_tok_pre, in->tok_pre);
    printf(", \"vocab_size\": ");
    if (in->tokens)
        printf("%" PRIu64, in->tokens->v.arr.n);
    else
        printf("null");
    printf("},\n  \"special_tokens\": {");
    first = true;
    for (size_t i = 0; i < N_SPECIALS; i++) {
        if (!in->have_special[i])
            continue;
        const struct gguf_str *s = token_text(in, in->special_id[i]);
        printf("%s\n    \"%s\": {\"id\": %" PRIu64 ", \"text\": ", first ? "" : ",",
               specials[i].name, in->special_id[i]);
        if (s)
            put_json_str(stdout, s->data, s->len);
        else
            printf("null");
        printf("}");
        first = false;
    }
    printf("%s},\n  \"chat_template\": {\"present\": %s, \"length\": %" PRIu64 "}\n}\n",
           first ? "" : "\n  ", in->have_template ? "true" : "false",
           in->have_template ? in->chat_template.len : 0);
}

int cmd_info(int argc, char **argv)
{
    bool json = false;
    const char *pos[1] = {NULL};
    const struct cli_opt opts[] = {
        {"model", 'm', CLI_POS, &pos[0], "MODEL.gguf", "the file (instead of the argument)", NULL, NULL},
        {"json", 0, CLI_FLAG, &json, NULL, "print a JSON object instead of text", NULL, NULL},
        CLI_OPT_END,
    };
    const char *usage = "MODEL.gguf [--json]\n\n"
                        "Describes a GGUF model or vocabulary file: architecture, shapes, parameter\n"
                        "count, tensor types, file type, tokenizer, special tokens, chat template.\n"
                        "Exits 1 with the reader's message when the file is not valid GGUF.";
    int n_pos;
    int rc = cli_parse("info", usage, argc, argv, opts, pos, 1, &n_pos);
    if (rc == 1)
        return 0;
    if (rc)
        return rc;
    if (n_pos != 1) {
        fprintf(stderr, "kinetic info: which file? give MODEL.gguf; see 'kinetic info --help'\n");
        return 2;
    }
    struct gguf_file *f;
    struct kn_err err = {0};
    if (gguf_open(&f, pos[0], &err) != KN_OK) {
        fprintf(stderr, "kinetic info: %s\n", err.msg);
        return 1;
    }
    struct info in;
    memset(&in, 0, sizeof in);
    in.f = f;
    in.path = pos[0];
    gather(&in);
    if (json)
        print_json(&in);
    else
        print_text(&in);
    gguf_close(f);
    return 0;
}
