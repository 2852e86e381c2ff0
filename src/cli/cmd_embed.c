/* cmd_embed.c: `kinetic embed MODEL TEXT...`: the embedding of each text (one JSON array
 * of floats per line, or --base64), as POST /v1/embeddings gives it: the same
 * tokenization (special tokens parsed, the model's BOS/EOS rules), pooling, truncation
 * and normalisation (model_embed), so the numbers match the server's bit for bit
 * (llama.cpp's llama-embedding). */
#include "cli.h"
#include "base/base.h"
#include "base/json.h"
#include "engine/session.h"
#include "model/model.h"
#include "token/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
    "MODEL.gguf TEXT [TEXT...] [-p TEXT] [-f FILE]\n"
    "\n"
    "Prints one line per TEXT: its embedding as a JSON array of floats, L2-normalised,\n"
    "pooled as the model's <arch>.pooling_type says (mean, cls or last). -p TEXT and\n"
    "-f FILE add texts as llama-embedding takes them: one per line (empty lines skipped),\n"
    "after the TEXT arguments.";

/* Prints x (n) as the server writes it (json_new_float: the shortest text that reads back
 * as the same float). */
static int print_vector(const float *x, int64_t n)
{
    struct json_value *a = json_new_array();
    for (int64_t i = 0; a && i < n; i++)
        if (json_array_push(a, json_new_float(x[i]), NULL) != KN_OK) {
            json_free(a);
            a = NULL;
        }
    char *text = NULL;
    if (!a || json_write(a, JSON_COMPACT, &text, NULL, NULL) != KN_OK) {
        json_free(a);
        fprintf(stderr, "kinetic embed: out of memory\n");
        return 1;
    }
    json_free(a);
    puts(text);
    free(text);
    return 0;
}

/* The texts to embed: the TEXT arguments, then each line of every -p TEXT and of -f FILE. */
struct embed_texts {
    const char **v;
    size_t n, cap;
    char *blocks[CLI_MAX_STRS + 1]; /* the copies the lines point into */
    int n_blocks;
};

static void embed_texts_free(struct embed_texts *t)
{
    free(t->v);
    for (int i = 0; i < t->n_blocks; i++)
        free(t->blocks[i]);
}

static bool embed_texts_add(struct embed_texts *t, const char *s)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        const char **v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return false;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = s;
    return true;
}

/* Adds each non-empty line of block (owned by t from here on; cut at the newlines). */
static bool embed_texts_add_lines(struct embed_texts *t, char *block)
{
    t->blocks[t->n_blocks++] = block;
    for (char *line = block; line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        size_t n = strlen(line);
        if (n && line[n - 1] == '\r')
            line[--n] = 0;
        if (n && !embed_texts_add(t, line))
            return false;
        line = nl ? nl + 1 : NULL;
    }
    return true;
}

int cmd_embed(int argc, char **argv)
{
    int64_t ctx_size = 0, threads = 0, batch = 0, dims = 0;
    struct cli_device dv = CLI_DEVICE_INIT;
    const char *pos[64];
    struct cli_strs prompts = {0};
    const char *file = NULL;
    const struct cli_opt opts[] = {
        {"model", 'm', CLI_POS, &pos[0], "MODEL.gguf", "the model file (instead of the first argument)", NULL, NULL},
        {"prompt", 'p', CLI_STRS, &prompts, "TEXT", "texts to embed, one per line (repeatable)", NULL, NULL},
        {"file", 'f', CLI_STR, &file, "FILE", "texts to embed, one per line of FILE ('-' = standard input)", NULL, NULL},
        {"ctx-size", 'c', CLI_INT, &ctx_size, "N", CLI_HELP_CTX, NULL, NULL},
        {"threads", 't', CLI_INT, &threads, "N", CLI_HELP_THREADS, NULL, NULL},
        {"batch-size", 'b', CLI_INT, &batch, "N", CLI_HELP_BATCH, NULL, NULL},
        {"dimensions", 0, CLI_INT, &dims, "D", "keep the first D values (Matryoshka models), then renormalise", NULL, NULL},
        {"device", 0, CLI_STR, &dv.spec, "DEV", CLI_HELP_DEVICE, NULL, NULL},
        {"gpu-layers", 0, CLI_INT, &dv.gpu_layers, "N", CLI_HELP_GPU_LAYERS, NULL, CLI_ALIAS_GPU_LAYERS},
        CLI_OPT_FLASH_ATTN,
        CLI_OPT_END,
    };
    int n_pos = 0;
    int rc = cli_parse("embed", usage, argc, argv, opts, pos, 64, &n_pos);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (n_pos < 1) {
        fprintf(stderr, "kinetic embed: give a model and at least one text; see --help\n");
        return 2;
    }
    if (cli_check_session("embed", ctx_size, threads, batch, "f32", true) != 0)
        return 2;
    struct embed_texts texts = {0};
    struct kn_err err = {0};
    bool ok = true;
    for (int i = 1; i < n_pos && ok; i++)
        ok = embed_texts_add(&texts, pos[i]);
    for (int i = 0; i < prompts.n && ok; i++) {
        char *copy = strdup(prompts.v[i]);
        ok = copy && embed_texts_add_lines(&texts, copy);
    }
    if (ok && file) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_prompt(file, &text, &len, &err) != KN_OK) {
            fprintf(stderr, "kinetic embed: %s\n", err.msg);
            embed_texts_free(&texts);
            return 1;
        }
        ok = embed_texts_add_lines(&texts, text);
    }
    if (!ok) {
        fprintf(stderr, "kinetic embed: out of memory\n");
        embed_texts_free(&texts);
        return 1;
    }
    if (texts.n == 0) {
        fprintf(stderr, "kinetic embed: give at least one text (TEXT, -p TEXT or -f FILE); see "
                "--help\n");
        embed_texts_free(&texts);
        return 2;
    }
    struct session_opts so;
    session_opts_default(&so);
    so.model_path = pos[0];
    so.level = SESSION_MODEL;
    so.name = "kinetic embed";
    so.no_template = true;
    so.ctx_size = ctx_size;
    so.batch = batch;
    so.threads = (int)threads;
    if ((rc = cli_device_open("embed", &dv, &so)) != 0) {
        embed_texts_free(&texts);
        return rc;
    }
    struct session s;
    if (session_open(&s, &so, &err) != KN_OK) {
        fprintf(stderr, "kinetic embed: %s\n", err.msg);
        cli_device_close(&dv);
        embed_texts_free(&texts);
        return 1;
    }
    const int64_t E = s.m->hp.n_embd;
    if (dims == 0)
        dims = E;
    rc = 0;
    if (dims < E && !model_embed_matryoshka(&s.m->hp)) {
        fprintf(stderr, "kinetic embed: --dimensions %lld: this model's embeddings are not "
                "Matryoshka-trained; they have %lld values\n", (long long)dims, (long long)E);
        rc = 2;
    }
    struct model_fwd *f = NULL;
    struct model_kv kv;
    bool kv_ok = false;
    float *vec = rc ? NULL : kn_malloc((size_t)E * sizeof *vec, &err);
    if (!rc && (!vec || model_fwd_create(&f, s.m, model_embed_batch(&s.m->hp, s.n_batch, s.n_ctx),
                                                   s.pool, &err) != KN_OK ||
                model_kv_init(&kv, s.m, s.n_ctx, MODEL_KV_F32, &err) != KN_OK)) {
        fprintf(stderr, "kinetic embed: %s\n", err.msg);
        rc = 1;
    } else if (!rc) {
        kv_ok = true;
    }
    for (size_t i = 0; i < texts.n && rc == 0; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        const char *t = texts.v[i];
        if (tok_encode_alloc(s.tk, t, strlen(t), true, true, &ids, &n, &err) != KN_OK ||
            model_embed(f, &kv, ids, (int64_t)n, dims, vec, &err) != KN_OK) {
            fprintf(stderr, "kinetic embed: text %zu: %s\n", i + 1, err.msg);
            rc = 1;
        } else {
            rc = print_vector(vec, dims);
        }
        free(ids);
    }
    free(vec);
    if (kv_ok)
        model_kv_free(&kv);
    model_fwd_free(f);
    session_close(&s);
    cli_device_close(&dv); /* after the model, whose buffers live on it */
    embed_texts_free(&texts);
    return rc;
}
