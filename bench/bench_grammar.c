/* bench_grammar.c: decode speed with and without a grammar on a real model, through the
 * engine API (engine_generate, the loop run/chat/verify-receipt use).
 *
 *   bench_grammar MODEL.gguf [THREADS] [TOKENS]
 *
 * For each setting it evaluates the same prompt, generates up to TOKENS tokens and
 * prints tokens/s of generation, the time sample_token took per token (grammar work
 * included), and the output. Settings: no grammar; the JSON object grammar; a JSON
 * schema; each with Kinetic's default sampler (top_k 50: the grammar's fast path) and
 * with top_k 0 (the whole vocabulary masked every token). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "sample/sample.h"
#include "token/tok.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},"
    "\"age\":{\"type\":\"integer\"},\"colors\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
    "\"maxItems\":3}},\"required\":[\"name\",\"age\",\"colors\"]}";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [THREADS] [TOKENS]\n", argv[0]);
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int64_t max_tokens = argc > 3 ? atoll(argv[3]) : 64;
    struct kn_err err;
    struct model *m = NULL;
    struct tok *tk = NULL;
    struct kern_pool *pool = NULL;
    struct model_load_opts lo = {.repack = true};
    if (model_open(&m, argv[1], &lo, &err) != KN_OK || tok_load(&tk, m->gguf, &err) != KN_OK ||
        kern_pool_create(threads, &pool, &err) != KN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    struct engine e;
    struct engine_params ep = {.n_ctx = 512, .n_batch = 64, .kv_type = MODEL_KV_F32};
    if (engine_init(&e, m, pool, &ep, &err) != KN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const char *prompt = "<start_of_turn>user\nDescribe a person as a JSON object with a name, an "
                         "age and favourite colors.<end_of_turn>\n<start_of_turn>model\n";
    int32_t ptoks[256];
    size_t n_ptoks;
    if (tok_encode(tk, prompt, strlen(prompt), true, true, ptoks, 256, &n_ptoks, &err) != KN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t n_vocab = (int32_t)m->hp.n_vocab;
    struct sample_ctx sctx;
    struct grammar_vocab *gv = NULL;
    double t0 = now();
    if (sample_ctx_init(&sctx, n_vocab, &err) != KN_OK ||
        grammar_vocab_from_tok(&gv, tk, n_vocab, &err) != KN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("model %s, vocabulary %d tokens, trie built in %.0f ms, %d threads\n", argv[1], n_vocab,
           (now() - t0) * 1e3, threads);
    char *schema_gbnf = NULL;
    if (grammar_from_json_schema(schema, strlen(schema), &schema_gbnf, &err) != KN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const char *grammars[3] = {NULL, grammar_json_object_gbnf(), schema_gbnf};
    const char *gnames[3] = {"none", "json_object", "json_schema"};
    int32_t *ids = malloc((size_t)ep.n_ctx * sizeof *ids);
    char *text = malloc(1 << 16);
    for (int ki = 0; ki < 2; ki++) {
        for (int gi = 0; gi < 3; gi++) {
            struct grammar *g = NULL;
            struct grammar_state *st = NULL;
            if (grammars[gi] &&
                (grammar_parse(grammars[gi], strlen(grammars[gi]), NULL, &g, &err) != KN_OK ||
                 grammar_state_init(&st, g, &err) != KN_OK)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            sample_ctx_set_grammar(&sctx, st, gv);
            struct sample_params sp;
            sample_params_default(&sp);
            sp.seed = 7;
            if (ki == 1)
                sp.top_k = 0;
            engine_reset(&e);
            if (engine_eval(&e, ptoks, (int64_t)n_ptoks, &err) != KN_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            /* The cost of sampling alone, on the prompt's logits, repeated on a copy of
             * the grammar state position (the state is reset after). */
            double ts = now();
            int reps = 0;
            for (; reps < 20; reps++) {
                if (st)
                    grammar_state_reset(st);
                (void)sample_token(&sctx, &sp, e.logits, e.history, e.n_past, 0);
            }
            double t_sample_first = (now() - ts) / reps;
            if (st)
                grammar_state_reset(st);
            int64_t n_ids = 0;
            enum engine_finish fin;
            double tg = now();
            if (engine_generate(&e, tk, &sctx, &sp, max_tokens, NULL, NULL, ids, &n_ids, &fin, &err) !=
                KN_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            double dt = now() - tg;
            size_t tl = 0;
            if (tok_decode(tk, ids, (size_t)n_ids, false, text, (1 << 16) - 1, &tl, &err) != KN_OK)
                tl = 0;
            text[tl] = 0;
            printf("top_k %-2d grammar %-11s: %3lld tokens in %6.3f s = %6.2f tokens/s (first-token "
                   "sample %.2f ms), finish %s%s\n  %s\n",
                   sp.top_k, gnames[gi], (long long)n_ids, dt, (double)n_ids / dt,
                   t_sample_first * 1e3, engine_finish_name(fin),
                   st && grammar_is_complete(st) ? ", grammar complete" : "", text);
            sample_ctx_set_grammar(&sctx, NULL, NULL);
            grammar_state_free(st);
            grammar_free(g);
        }
    }
    free(ids);
    free(text);
    free(schema_gbnf);
    grammar_vocab_free(gv);
    sample_ctx_free(&sctx);
    engine_free(&e);
    kern_pool_free(pool);
    tok_free(tk);
    model_close(m);
    return 0;
}
