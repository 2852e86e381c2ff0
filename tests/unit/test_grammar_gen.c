/* test_grammar_gen.c: drives the sampler and a grammar with random logits over a real
 * vocabulary's pieces (no model needed) and prints what comes out.
 *
 *   test_grammar_gen VOCAB.gguf (--json | --gbnf FILE | --schema FILE) N SEED [TOP_K [MAX]]
 *
 * prints one JSON line per output: {"complete": true|false, "tokens": n, "text": "..."},
 * and with MAX (tokens per output; default 400) also "seconds", the output's sampling time
 * with the grammar's masks, to measure a grammar's cost per token. Errors (a bad grammar
 * or schema) go to stderr with exit status 1. tests/py/
 * test_grammar_conformance.py checks the outputs with Python's json and jsonschema.
 * Without arguments (as a CTest test) it runs a short self-check: 60 outputs of the JSON
 * grammar on the llama SPM vocabulary, each parsed by Kinetic's strict JSON reader. */
#include "check.h"
#include "base/json.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "sample/sample.h"
#include "token/tok.h"

#include <math.h>

#define MAX_TOKENS 400

struct gen {
    struct tok *tok;
    struct grammar *g;
    struct grammar_vocab *gv;
    struct grammar_state *st;
    struct sample_ctx s;
    float *logits, *boost;
    int32_t eog[TOK_MAX_EOG];
    int n_eog;
};

static uint64_t xs(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int gen_open(struct gen *G, const char *vocab, const char *gbnf, struct kn_err *err)
{
    memset(G, 0, sizeof *G);
    struct gguf_file *f;
    if (gguf_open(&f, vocab, err) != KN_OK)
        return 1;
    enum kn_status st = tok_load(&G->tok, f, err);
    gguf_close(f);
    if (st != KN_OK)
        return 1;
    if (grammar_parse(gbnf, strlen(gbnf), NULL, &G->g, err) != KN_OK ||
        grammar_vocab_from_tok(&G->gv, G->tok, 0, err) != KN_OK ||
        grammar_state_init(&G->st, G->g, err) != KN_OK ||
        sample_ctx_init(&G->s, tok_n_vocab(G->tok), err) != KN_OK)
        return 1;
    int32_t n = tok_n_vocab(G->tok);
    G->logits = malloc((size_t)n * sizeof *G->logits);
    G->boost = calloc((size_t)n, sizeof *G->boost);
    if (!G->logits || !G->boost)
        return 1;
    /* Tokens that close strings, objects and arrays get a boost so outputs end. */
    for (int32_t id = 0; id < n; id++) {
        size_t len;
        const char *p = tok_piece(G->tok, id, false, &len);
        for (size_t i = 0; i < len; i++)
            if (p[i] == '"' || p[i] == '}' || p[i] == ']' || p[i] == ')')
                G->boost[id] = 5.0f;
    }
    G->n_eog = tok_eog_ids(G->tok, G->eog);
    for (int i = 0; i < G->n_eog; i++)
        G->boost[G->eog[i]] = 6.0f;
    sample_ctx_set_grammar(&G->s, G->st, G->gv);
    return 0;
}

static void gen_close(struct gen *G)
{
    sample_ctx_free(&G->s);
    grammar_state_free(G->st);
    grammar_vocab_free(G->gv);
    grammar_free(G->g);
    tok_free(G->tok);
    free(G->logits);
    free(G->boost);
}

/* One output at temperature 1 (top_k as given, nothing else); returns its token count,
 * *complete when it ended with an end-of-generation token. */
static int gen_one(struct gen *G, uint64_t seed, int32_t top_k, int max_tokens, char *text,
                   size_t cap, size_t *len, bool *complete)
{
    struct sample_params p;
    sample_params_default(&p);
    p.temperature = 1.0f;
    p.top_k = top_k;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = seed;
    grammar_state_reset(G->st);
    int32_t n = tok_n_vocab(G->tok);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    *len = 0;
    *complete = false;
    int i = 0;
    for (; i < max_tokens; i++) {
        for (int32_t t = 0; t < n; t++)
            G->logits[t] = (float)(xs(&x) >> 40) * 0x1p-24f * 8.0f - 4.0f + G->boost[t];
        int32_t id = sample_token(&G->s, &p, G->logits, NULL, 0, (uint64_t)i);
        if (id < 0)
            break;
        if (grammar_is_done(G->st)) {
            *complete = true;
            break;
        }
        size_t pl;
        const char *piece = tok_piece(G->tok, id, false, &pl);
        if (*len + pl < cap) {
            memcpy(text + *len, piece, pl);
            *len += pl;
        }
    }
    text[*len] = 0;
    return i;
}

static char *read_all(const char *path, struct kn_err *err)
{
    char *s = NULL;
    size_t size;
    if (kn_read_file(path, 1 << 24, &s, &size, err) != KN_OK)
        return NULL;
    return s;
}

static int tool(int argc, char **argv)
{
    struct kn_err err;
    if (argc < 5) {
        fprintf(stderr, "usage: %s VOCAB (--json | --gbnf FILE | --schema FILE) N SEED [TOP_K]\n",
                argv[0]);
        return 2;
    }
    char *gbnf = NULL;
    int a = 2;
    if (strcmp(argv[2], "--json") == 0) {
        gbnf = strdup(grammar_json_object_gbnf());
        a = 3;
    } else if (strcmp(argv[2], "--gbnf") == 0 || strcmp(argv[2], "--schema") == 0) {
        char *text = read_all(argv[3], &err);
        if (!text) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        if (argv[2][2] == 'g') {
            gbnf = text;
        } else {
            if (grammar_from_json_schema(text, strlen(text), &gbnf, &err) != KN_OK) {
                fprintf(stderr, "%s\n", err.msg);
                free(text);
                return 1;
            }
            free(text);
        }
        a = 4;
    }
    if (!gbnf || argc < a + 2) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    int n = atoi(argv[a]);
    uint64_t seed = strtoull(argv[a + 1], NULL, 10);
    int32_t top_k = argc > a + 2 ? atoi(argv[a + 2]) : 0;
    bool timed = argc > a + 3; /* a bench: the outputs say how long they took */
    int max_tokens = timed ? atoi(argv[a + 3]) : MAX_TOKENS;
    struct gen G;
    if (gen_open(&G, argv[1], gbnf, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        free(gbnf);
        return 1;
    }
    static char text[1 << 16];
    for (int r = 0; r < n; r++) {
        size_t len;
        bool complete;
        double t0 = kn_now();
        int nt = gen_one(&G, seed + (uint64_t)r, top_k, max_tokens, text, sizeof text, &len,
                         &complete);
        double dt = kn_now() - t0;
        size_t clen;
        char *clean = json_utf8_sanitize(text, len, &clen);
        struct json_value *o = json_new_object(), *t = clean ? json_new_stringn(clean, clen) : NULL;
        char *line = NULL;
        if (!o || !t || json_object_set(o, "complete", json_new_bool(complete), &err) != KN_OK ||
            json_object_set(o, "tokens", json_new_int(nt), &err) != KN_OK ||
            json_object_set(o, "text", t, &err) != KN_OK ||
            (timed && json_object_set(o, "seconds", json_new_double(dt), &err) != KN_OK) ||
            json_write(o, JSON_COMPACT, &line, NULL, &err) != KN_OK) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        printf("%s\n", line);
        free(line);
        free(clean);
        json_free(o);
    }
    gen_close(&G);
    free(gbnf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return tool(argc, argv);
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", check_data_dir());
    struct gen G;
    struct kn_err err;
    REQUIRE(gen_open(&G, path, grammar_json_object_gbnf(), &err) == 0, "%s", err.msg);
    static char text[1 << 16];
    int complete = 0;
    for (int r = 0; r < 60; r++) {
        size_t len;
        bool done;
        gen_one(&G, (uint64_t)r, r % 3 ? 100 : 0, MAX_TOKENS, text, sizeof text, &len, &done);
        if (!done)
            continue;
        complete++;
        struct json_value *v = NULL;
        enum kn_status st = json_parse(text, len, NULL, &v, &err);
        CHECKF(st == KN_OK && json_is(v, JSON_OBJECT), "output %d: %s: %s", r, text,
               st == KN_OK ? "not an object" : err.msg);
        json_free(v);
    }
    CHECKF(complete >= 54, "%d of 60 complete", complete);
    /* the same seed gives the same output */
    size_t l1, l2;
    bool d1, d2;
    static char text2[1 << 16];
    gen_one(&G, 12345, 0, MAX_TOKENS, text, sizeof text, &l1, &d1);
    gen_one(&G, 12345, 0, MAX_TOKENS, text2, sizeof text2, &l2, &d2);
    CHECK(l1 == l2 && memcmp(text, text2, l1) == 0 && d1 == d2);
    gen_close(&G);
    CHECK_DONE();
}
