/* grammar_engine_gen.c: many constrained generations from a real model file through
 * engine_generate (RAD-1 drafting on unless --no-draft), in one process, for the grammar
 * conformance test (tests/py/test_grammar_engine.py).
 *
 *   grammar_engine_gen MODEL.gguf (--json | --gbnf FILE | --schema FILE) N SEED
 *                      [--top-k K] [--max-tokens M] [--boost B] [--no-draft]
 *
 * Samples N outputs at temperature 1 (top_p 1, min_p 0, no penalties; top_k K, default 0
 * = the whole vocabulary) with seeds SEED, SEED+1, ... after the same short prompt, and
 * prints one JSON line per output:
 *   {"finish": "done" | "length" | "dead", "tokens": n, "text": "...", "ids": [...]}
 * "done": the grammar accepted the end-of-generation token; "length": the token limit
 * (default 200); "dead": no token could continue the grammar (a bug). A random-weight
 * model's logits are nearly flat, so tokens that close strings, objects and arrays, and
 * the end-of-generation tokens, get a logit bias of B (default 5) to make outputs end.
 * A summary goes to stderr. Errors (a bad grammar or schema) exit with status 1. */
#include "base/json.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "sample/sample.h"
#include "token/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const struct kn_err *err)
{
    fprintf(stderr, "grammar_engine_gen: %s\n", err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    struct kn_err err = {0};
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL (--json | --gbnf FILE | --schema FILE) N SEED [--top-k K] "
                        "[--max-tokens M] [--boost B] [--no-draft]\n", argv[0]);
        return 2;
    }
    char *gbnf = NULL;
    int a = 3;
    if (strcmp(argv[2], "--json") == 0) {
        gbnf = strdup(grammar_json_object_gbnf());
    } else if (strcmp(argv[2], "--gbnf") == 0 || strcmp(argv[2], "--schema") == 0) {
        char *text;
        size_t len;
        if (kn_read_file(argv[3], 1 << 24, &text, &len, &err) != KN_OK)
            return die(&err);
        if (argv[2][2] == 'g') {
            gbnf = text;
        } else {
            enum kn_status st = grammar_from_json_schema(text, len, &gbnf, &err);
            free(text);
            if (st != KN_OK)
                return die(&err);
        }
        a = 4;
    }
    if (!gbnf || argc < a + 2) {
        fprintf(stderr, "grammar_engine_gen: bad arguments\n");
        return 2;
    }
    int n_out = atoi(argv[a]);
    uint64_t seed = strtoull(argv[a + 1], NULL, 10);
    int32_t top_k = 0;
    int64_t max_tokens = 200;
    float boost = 5.0f;
    bool no_draft = false;
    for (int i = a + 2; i < argc; i++) {
        if (strcmp(argv[i], "--top-k") == 0 && i + 1 < argc)
            top_k = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max-tokens") == 0 && i + 1 < argc)
            max_tokens = atoll(argv[++i]);
        else if (strcmp(argv[i], "--boost") == 0 && i + 1 < argc)
            boost = strtof(argv[++i], NULL);
        else if (strcmp(argv[i], "--no-draft") == 0)
            no_draft = true;
        else {
            fprintf(stderr, "grammar_engine_gen: unknown argument %s\n", argv[i]);
            return 2;
        }
    }

    struct model *m = NULL;
    struct tok *tk = NULL;
    struct kern_pool *pool = NULL;
    struct engine e;
    struct grammar *g = NULL;
    struct grammar_vocab *gv = NULL;
    struct grammar_state *gs = NULL;
    struct sample_ctx s;
    struct model_load_opts lo = {.repack = true};
    if (grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err) != KN_OK)
        return die(&err);
    if (model_open(&m, argv[1], &lo, &err) != KN_OK || tok_load(&tk, m->gguf, &err) != KN_OK ||
        kern_pool_create(1, &pool, &err) != KN_OK)
        return die(&err);
    const int32_t n_vocab = (int32_t)m->hp.n_vocab;
    int64_t n_ctx = max_tokens + 64;
    struct engine_params ep = {.n_ctx = n_ctx, .n_batch = 64, .kv_type = MODEL_KV_F32,
                               .no_draft = no_draft};
    if (engine_init(&e, m, pool, &ep, &err) != KN_OK ||
        grammar_vocab_from_tok(&gv, tk, n_vocab, &err) != KN_OK ||
        grammar_state_init(&gs, g, &err) != KN_OK || sample_ctx_init(&s, n_vocab, &err) != KN_OK)
        return die(&err);
    sample_ctx_set_grammar(&s, gs, gv);

    struct sample_params sp;
    sample_params_default(&sp);
    sp.temperature = 1.0f;
    sp.top_k = top_k;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.repeat_penalty = 1.0f;
    int32_t eog[TOK_MAX_EOG];
    int n_eog = tok_eog_ids(tk, eog);
    for (int i = 0; i < n_eog && sp.n_logit_bias < SAMPLE_MAX_BIAS; i++)
        sp.logit_bias[sp.n_logit_bias++] = (struct sample_bias){eog[i], boost + 1.0f};
    for (int32_t id = 0; id < n_vocab && sp.n_logit_bias < SAMPLE_MAX_BIAS; id++) {
        size_t len = 0;
        const char *p = tok_piece(tk, id, false, &len);
        bool closer = false;
        for (size_t i = 0; p && i < len; i++)
            closer |= p[i] == '"' || p[i] == '}' || p[i] == ']';
        if (closer && !tok_is_eog(tk, id))
            sp.logit_bias[sp.n_logit_bias++] = (struct sample_bias){id, boost};
    }

    /* The prompt: BOS (if any) and a little text; evaluated once, its last token again
     * before each output so the logits are the prompt's. */
    int32_t prompt[64];
    size_t np = 0;
    const struct tok_special *spc = tok_specials(tk);
    if (spc->add_bos && spc->bos != TOK_NULL)
        prompt[np++] = spc->bos;
    size_t nn = 0;
    const char *ptext = "Answer in JSON:";
    if (tok_encode(tk, ptext, strlen(ptext), false, false, prompt + np, 60 - np, &nn, &err) != KN_OK)
        return die(&err);
    np += nn;
    if (engine_eval(&e, prompt, (int64_t)np, &err) != KN_OK)
        return die(&err);
    int32_t *ids = malloc((size_t)n_ctx * sizeof *ids);
    size_t text_cap = (size_t)max_tokens * (tok_max_piece(tk) + 1) + 1;
    char *text = malloc(text_cap);
    if (!ids || !text)
        return 1;
    int64_t total = 0, accepted = 0, done = 0;
    double t0 = kn_now();
    for (int r = 0; r < n_out; r++) {
        if (r > 0) {
            engine_truncate(&e, (int64_t)np - 1);
            if (engine_eval(&e, prompt + np - 1, 1, &err) != KN_OK)
                return die(&err);
        }
        grammar_state_reset(gs);
        sp.seed = seed + (uint64_t)r;
        int64_t n = 0;
        enum engine_finish fin;
        if (engine_generate(&e, tk, &s, &sp, max_tokens, NULL, NULL, ids, &n, &fin, &err) != KN_OK)
            return die(&err);
        const char *finish = grammar_is_done(gs) ? "done"
                             : fin == ENGINE_FINISH_STOP ? "dead" : "length";
        done += finish[0] == 'd' && finish[1] == 'o';
        size_t len = 0;
        for (int64_t i = 0; i < n; i++) {
            size_t pl = 0;
            const char *p = tok_piece(tk, ids[i], false, &pl);
            memcpy(text + len, p, pl);
            len += pl;
        }
        total += n;
        accepted += e.draft_stats.accepted;
        size_t clen;
        char *clean = json_utf8_sanitize(text, len, &clen);
        struct json_value *o = json_new_object(), *arr = json_new_array();
        for (int64_t i = 0; arr && i < n; i++)
            if (json_array_push(arr, json_new_int(ids[i]), &err) != KN_OK)
                arr = NULL;
        char *line = NULL;
        if (!clean || !o || !arr || json_object_set(o, "finish", json_new_string(finish), &err) != KN_OK ||
            json_object_set(o, "tokens", json_new_int(n), &err) != KN_OK ||
            json_object_set(o, "text", json_new_stringn(clean, clen), &err) != KN_OK ||
            json_object_set(o, "ids", arr, &err) != KN_OK ||
            json_write(o, JSON_COMPACT, &line, NULL, &err) != KN_OK) {
            fprintf(stderr, "grammar_engine_gen: out of memory\n");
            return 1;
        }
        puts(line);
        free(line);
        free(clean);
        json_free(o);
    }
    double dt = kn_now() - t0;
    fprintf(stderr, "grammar_engine_gen: %d outputs (%lld complete), %lld tokens in %.2f s (%.0f t/s), %lld drafts accepted\n",
            n_out, (long long)done, (long long)total, dt, dt > 0 ? (double)total / dt : 0.0,
            (long long)accepted);
    free(ids);
    free(text);
    free(gbnf);
    sample_ctx_free(&s);
    grammar_state_free(gs);
    grammar_vocab_free(gv);
    grammar_free(g);
    engine_free(&e);
    kern_pool_free(pool);
    tok_free(tk);
    model_close(m);
    return 0;
}
