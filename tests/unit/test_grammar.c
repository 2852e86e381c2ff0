/* test_grammar.c: GBNF parsing (and its errors), matching, the vocabulary mask against
 * token-by-token checks, JSON Schema conversion, and sampling under a grammar. */
#include "check.h"
#include "grammar/grammar.h"
#include "gguf/gguf.h"
#include "sample/sample.h"
#include "token/tok.h"

#include <math.h>
#include <time.h>

static struct grammar *compile(const char *text)
{
    struct grammar *g = NULL;
    struct kn_err err;
    enum kn_status st = grammar_parse(text, strlen(text), NULL, &g, &err);
    CHECKF(st == KN_OK, "%s: %s", text, err.msg);
    return g;
}

/* Does the whole string match (complete after feeding it)? */
static bool matches(const struct grammar *g, const char *s, size_t len)
{
    struct grammar_state *st;
    struct kn_err err;
    if (grammar_state_init(&st, g, &err) != KN_OK)
        return false;
    bool ok = grammar_accept_bytes(st, s, len) && grammar_is_complete(st);
    grammar_state_free(st);
    return ok;
}

/* Feeding byte by byte gives the same answer as all at once. */
static bool matches_bytewise(const struct grammar *g, const char *s)
{
    struct grammar_state *st;
    struct kn_err err;
    if (grammar_state_init(&st, g, &err) != KN_OK)
        return false;
    bool ok = true;
    for (size_t i = 0; s[i] && ok; i++)
        ok = grammar_accept_bytes(st, s + i, 1);
    ok = ok && grammar_is_complete(st);
    grammar_state_free(st);
    return ok;
}

struct mcase {
    const char *s;
    bool ok;
};

static void check_matches(const char *gbnf, const struct mcase *cases, int n)
{
    struct grammar *g = compile(gbnf);
    if (!g)
        return;
    for (int i = 0; i < n; i++) {
        bool m = matches(g, cases[i].s, strlen(cases[i].s));
        CHECKF(m == cases[i].ok, "grammar %s on \"%s\": %d, want %d", gbnf, cases[i].s, m,
               cases[i].ok);
        CHECKF(matches_bytewise(g, cases[i].s) == cases[i].ok, "bytewise \"%s\"", cases[i].s);
    }
    grammar_free(g);
}

static void test_matching(void)
{
    const struct mcase lit[] = {{"abc", true}, {"ab", false}, {"abcd", false}, {"", false}};
    check_matches("root ::= \"abc\"", lit, 4);
    const struct mcase alt[] = {{"cat", true}, {"dog", true}, {"cow", false}, {"catdog", false}};
    check_matches("root ::= \"cat\" | \"dog\"  # pets\n", alt, 4);
    const struct mcase cls[] = {{"a", true}, {"z", true}, {"5", true}, {"_", true},
                                {"A", false}, {"-", false}};
    check_matches("root ::= [a-z0-9_]", cls, 6);
    const struct mcase neg[] = {{"x", true}, {"\xc3\xa9", true}, {"\"", false}, {"\\", false}};
    check_matches("root ::= [^\"\\\\]", neg, 4);
    const struct mcase rep[] = {{"", true}, {"a", true}, {"aaaa", true}, {"b", false}};
    check_matches("root ::= \"a\"*", rep, 4);
    const struct mcase plus[] = {{"", false}, {"ab", true}, {"ababab", true}, {"aba", false}};
    check_matches("root ::= (\"a\" \"b\")+", plus, 4);
    const struct mcase opt[] = {{"x", true}, {"xy", true}, {"xyy", false}};
    check_matches("root ::= \"x\" \"y\"?", opt, 3);
    const struct mcase mn[] = {{"a", false}, {"aa", true}, {"aaa", true}, {"aaaa", true},
                               {"aaaaa", false}};
    check_matches("root ::= \"a\"{2,4}", mn, 5);
    const struct mcase exact[] = {{"12", false}, {"123", true}, {"1234", false}};
    check_matches("root ::= [0-9]{3}", exact, 3);
    const struct mcase atleast[] = {{"a", false}, {"aa", true}, {"aaaaaaa", true}};
    check_matches("root ::= \"a\"{2,}", atleast, 3);
    const struct mcase rules[] = {{"(1+2)", true}, {"((1))", true}, {"(1+)", false}, {"1+2+3", true}};
    check_matches("root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9] | \"(\" expr \")\"\n",
                  rules, 4);
    /* escapes and Unicode: \n, \x41, \u00e9 and a range of code points */
    const struct mcase esc[] = {{"\nA\xc3\xa9", true}, {"\nA\xc3\xa8", false},
                                {"\nA\xce\xb1", false}};
    check_matches("root ::= \"\\n\\x41\" [\\u00e9-\\u00ff]", esc, 3);
    const struct mcase uni[] = {{"\xce\xb1\xce\xb2", true}, {"ab", false}};
    check_matches("root ::= [α-ω]+", uni, 2);
    const struct mcase any[] = {{"q", true},     {"\xe2\x82\xac", true}, {"", false},
                                {"qq", false},   {"\xe0\x80\x80", false}, /* overlong */
                                {"\xed\xa0\x80", false},                /* surrogate */
                                {"\xf4\x90\x80\x80", false},           /* > U+10FFFF */
                                {"\xf0\x90\x80\x80", true}, {"\xc0\xaf", false}};
    check_matches("root ::= .", any, 9);
    /* multi-line rules inside groups and after | */
    const struct mcase ml[] = {{"ab", true}, {"c", true}, {"a", false}};
    check_matches("root ::= (\n  \"a\" \"b\"\n  | \"c\"\n)\n", ml, 3);
    const struct mcase ml2[] = {{"x", true}, {"y", true}};
    check_matches("root ::=\n  \"x\" |\n  \"y\"\n", ml2, 2);
    /* names with - and _ */
    const struct mcase nm[] = {{"ok", true}};
    check_matches("root ::= my-rule_1\nmy-rule_1 ::= \"ok\"", nm, 1);

    /* a rejected byte leaves the state unchanged */
    struct grammar *g = compile("root ::= \"ab\"");
    struct grammar_state *st;
    struct kn_err err;
    CHECK(grammar_state_init(&st, g, &err) == KN_OK);
    CHECK(grammar_accept_bytes(st, "a", 1));
    CHECK(!grammar_accept_bytes(st, "x", 1));
    CHECK(!grammar_is_complete(st));
    CHECK(grammar_accept_bytes(st, "b", 1));
    CHECK(grammar_is_complete(st));
    grammar_state_reset(st);
    CHECK(!grammar_is_complete(st));
    CHECK(grammar_accept_bytes(st, "ab", 2));
    grammar_state_free(st);
    grammar_free(g);

    /* a snapshot taken mid-way continues independently */
    g = compile("root ::= \"x\" [0-9]+ \"y\"");
    struct grammar_state *snap;
    CHECK(grammar_state_init(&st, g, &err) == KN_OK);
    CHECK(grammar_state_init(&snap, g, &err) == KN_OK);
    CHECK(grammar_accept_bytes(st, "x12", 3));
    CHECK(grammar_state_copy(snap, st, &err) == KN_OK);
    CHECK(grammar_accept_bytes(st, "y", 1) && grammar_is_complete(st));
    CHECK(!grammar_is_complete(snap));
    CHECK(grammar_accept_bytes(snap, "3", 1) && !grammar_accept_bytes(snap, "x", 1));
    CHECK(grammar_accept_bytes(snap, "y", 1) && grammar_is_complete(snap));
    grammar_state_free(snap);
    grammar_state_free(st);
    grammar_free(g);

    /* a code point split across feeds */
    g = compile("root ::= \"\xc3\xa9\" \"!\"");
    CHECK(grammar_state_init(&st, g, &err) == KN_OK);
    CHECK(grammar_accept_bytes(st, "\xc3", 1));
    CHECK(!grammar_is_complete(st));
    CHECK(!grammar_accept_bytes(st, "\xa8", 1)); /* è is not é */
    CHECK(grammar_accept_bytes(st, "\xa9", 1));
    CHECK(grammar_accept_bytes(st, "!", 1));
    CHECK(grammar_is_complete(st));
    grammar_state_free(st);
    grammar_free(g);
}

struct ecase {
    const char *gbnf;
    const char *want; /* a substring of the error */
};

static void test_errors(void)
{
    const struct ecase cases[] = {
        {"root ::= \"abc", "line 1, column 10: unterminated literal"},
        {"root ::= [a-z", "unterminated character class"},
        {"root ::= (\"a\"", "unclosed group"},
        {"root := \"a\"", "line 1, column 6: expected '::='"},
        {"root ::= foo", "line 1, column 10: rule 'foo' is used but never defined"},
        {"start ::= \"a\"", "no rule named 'root'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
        {"root ::= root \"a\"", "rule 'root' is left-recursive"},
        {"root ::= x\nx ::= \"\"? y\ny ::= x \"a\"", "left-recursive"},
        {"root ::= (\"a\"?)*", "left-recursive"},
        {"root ::= * \"a\"", "'*' must follow something"},
        {"root ::= \"a\"{3,1}", "maximum below its minimum"},
        {"root ::= \"a\"{2", "expected '}'"},
        {"root ::= \"\\q\"", "unknown escape '\\q'"},
        {"root ::= \"\\x4\"", "needs 2 hexadecimal digits"},
        {"root ::= [z-a]", "range ends below its start"},
        {"root ::= \"a\" )", "line 1, column 14: unexpected ')'"},
        {"root ::= \"a\"\n  \"b\"", "line 2, column 3: expected a rule name"},
        {"root ::= \"\xff\"", "invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct grammar *g = NULL;
        struct kn_err err = {0};
        enum kn_status st = grammar_parse(cases[i].gbnf, strlen(cases[i].gbnf), NULL, &g, &err);
        CHECKF(st == KN_E_FORMAT && strstr(err.msg, cases[i].want), "%s -> %s (want %s)",
               cases[i].gbnf, st == KN_OK ? "ok" : err.msg, cases[i].want);
        CHECK(g == NULL);
        grammar_free(g);
    }
    /* a start rule other than root */
    struct grammar *g = NULL;
    struct kn_err err;
    CHECK(grammar_parse("start ::= \"a\"", 13, "start", &g, &err) == KN_OK);
    grammar_free(g);
}

/* ---- a small synthetic vocabulary */

static const char *const toy[] = {"{", "}", "\"", "a", "ab", "abc", "b", " ", "\"a", "a\"",
                                  "\xc3", "\xa9", "\xc3\xa9", "x", "", "{\"", "END"};
#define TOY_N ((int32_t)(sizeof toy / sizeof toy[0]))

static const char *toy_piece(const void *ctx, int32_t id, size_t *len)
{
    (void)ctx;
    *len = strlen(toy[id]);
    return toy[id];
}

static void test_mask_toy(void)
{
    struct grammar *g = compile("root ::= \"{\" \"\\\"\" [a-c\\u00e9]* \"\\\"\" \"}\"");
    struct grammar_vocab *gv;
    struct kn_err err;
    int32_t eog = 16;
    CHECK(grammar_vocab_init(&gv, TOY_N, toy_piece, NULL, &eog, 1, &err) == KN_OK);
    struct grammar_state *st;
    CHECK(grammar_state_init(&st, g, &err) == KN_OK);
    uint8_t allowed[TOY_N];
    grammar_mask(st, gv, allowed);
    /* only "{" and "{\"" can start */
    for (int32_t i = 0; i < TOY_N; i++)
        CHECKF(allowed[i] == (i == 0 || i == 15), "start: token %d (%s): %d", i, toy[i], allowed[i]);
    CHECK(grammar_accept_token(st, gv, 15));
    grammar_mask(st, gv, allowed);
    /* inside the string: a, ab, abc, b, a", ", é's bytes; not x, space, {, END, empty */
    const int want_in[TOY_N] = {0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0};
    for (int32_t i = 0; i < TOY_N; i++) {
        CHECKF(allowed[i] == want_in[i], "string: token %d: %d", i, allowed[i]);
        CHECK(grammar_allows(st, gv, i) == (allowed[i] != 0));
    }
    CHECK(grammar_accept_token(st, gv, 10)); /* half of é */
    grammar_mask(st, gv, allowed);
    for (int32_t i = 0; i < TOY_N; i++)
        CHECKF(allowed[i] == (i == 11), "mid code point: token %d: %d", i, allowed[i]);
    CHECK(grammar_accept_token(st, gv, 11));
    CHECK(grammar_accept_token(st, gv, 9)); /* a" */
    CHECK(!grammar_accept_token(st, gv, 16)); /* END not yet */
    CHECK(grammar_accept_token(st, gv, 1));
    CHECK(grammar_is_complete(st));
    grammar_mask(st, gv, allowed);
    for (int32_t i = 0; i < TOY_N; i++)
        CHECKF(allowed[i] == (i == 16), "complete: token %d: %d", i, allowed[i]);
    CHECK(grammar_accept_token(st, gv, 16));
    CHECK(grammar_is_done(st));
    grammar_state_free(st);
    grammar_vocab_free(gv);
    grammar_free(g);
}

static struct tok *load_vocab(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/%s", check_data_dir(), name);
    struct gguf_file *f;
    struct kn_err err;
    if (gguf_open(&f, path, &err) != KN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    struct tok *t = NULL;
    if (tok_load(&t, f, &err) != KN_OK)
        fprintf(stderr, "%s\n", err.msg);
    gguf_close(f);
    return t;
}

/* On a real vocabulary, the trie walk gives exactly the token-by-token answers, in
 * several states of the JSON grammar. */
static void test_mask_real(void)
{
    struct tok *t = load_vocab("ggml-vocab-llama-spm.gguf");
    CHECK(t != NULL);
    if (!t)
        return;
    struct grammar_vocab *gv;
    struct kn_err err;
    CHECK(grammar_vocab_from_tok(&gv, t, 0, &err) == KN_OK);
    const char *gb = grammar_json_object_gbnf();
    struct grammar *g = compile(gb);
    struct grammar_state *st;
    CHECK(grammar_state_init(&st, g, &err) == KN_OK);
    int32_t n = grammar_vocab_n(gv);
    uint8_t *allowed = malloc((size_t)n);
    const char *prefixes[] = {"", "{", "{\"k", "{\"key\": ", "{\"key\": [1, -2.5e", "{\"a\": {}}",
                              "{\"a\": \"\xc3"};
    for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++) {
        grammar_state_reset(st);
        CHECK(grammar_accept_bytes(st, prefixes[p], strlen(prefixes[p])));
        grammar_mask(st, gv, allowed);
        int bad = 0, count = 0;
        for (int32_t id = 0; id < n; id++) {
            bad += (allowed[id] != 0) != grammar_allows(st, gv, id);
            count += allowed[id];
        }
        CHECKF(bad == 0, "prefix '%s': %d tokens differ", prefixes[p], bad);
        if (p == 0) /* at the start, only pieces that begin with '{' */
            for (int32_t id = 0; id < n; id++) {
                size_t len;
                const char *pc = tok_piece(t, id, false, &len);
                CHECKF(!allowed[id] || (len > 0 && pc[0] == '{'), "token %d allowed at start", id);
            }
        CHECKF(count > 0, "prefix '%s': nothing allowed", prefixes[p]);
    }
    /* the end-of-generation token only after a complete object */
    int32_t eos = tok_specials(t)->eos;
    grammar_state_reset(st);
    CHECK(grammar_accept_bytes(st, "{\"a\": 1", 7));
    grammar_mask(st, gv, allowed);
    CHECK(eos >= 0 && !allowed[eos]);
    CHECK(grammar_accept_bytes(st, "}", 1));
    grammar_mask(st, gv, allowed);
    CHECK(allowed[eos]);
    free(allowed);
    grammar_state_free(st);
    grammar_free(g);
    grammar_vocab_free(gv);
    tok_free(t);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Grammars so ambiguous that one token's mask took seconds (issue 44: 30 optional
 * repetitions side by side, 4+ s per token; a 50,000-way enum, 29 s for 30 tokens) are
 * stopped by the matcher's bounds (grammar.h) in well under a second, with a reason; a
 * large but ordinary enum still works. */
static void test_bounds(void)
{
    struct tok *t = load_vocab("ggml-vocab-llama-spm.gguf");
    CHECK(t != NULL);
    if (!t)
        return;
    struct grammar_vocab *gv;
    struct kn_err err;
    CHECK(grammar_vocab_from_tok(&gv, t, 0, &err) == KN_OK);
    int32_t n = grammar_vocab_n(gv);
    uint8_t *allowed = malloc((size_t)n);
    /* 30 optional runs side by side: the first mask exceeds the work bound */
    char amb[256] = "root ::=";
    for (int i = 0; i < 30; i++)
        strcat(amb, " x");
    strcat(amb, "\nx ::= [a-z ,.]{0,100}\n");
    struct grammar *g = compile(amb);
    struct grammar_state *st = NULL;
    CHECK(g && grammar_state_init(&st, g, &err) == KN_OK);
    if (st) {
        CHECK(grammar_state_error(st) == NULL);
        double t0 = cpu_seconds();
        grammar_mask(st, gv, allowed);
        double dt = cpu_seconds() - t0;
        int count = 0;
        for (int32_t id = 0; id < n; id++)
            count += allowed[id];
        const char *why = grammar_state_error(st);
        CHECKF(count == 0 && why && strstr(why, "GRAMMAR_WORK_PER_PIECE"), "%d allowed, %s", count,
               why ? why : "no reason");
        CHECKF(dt < 1.0, "the ambiguous grammar's mask took %.2f s of CPU", dt);
        CHECK(!grammar_allows(st, gv, 100) && !grammar_accept_bytes(st, "a", 1));
        /* the same grammar after a reset: accepting text is not bounded by the work per
         * token (only by the stacks), and a mask fails again */
        grammar_state_reset(st);
        CHECK(grammar_state_error(st) == NULL && grammar_accept_bytes(st, "abc de", 6));
        grammar_state_free(st);
    }
    grammar_free(g);
    /* a 50,000-way enum: more stacks than GRAMMAR_MAX_STACKS at the start */
    size_t cap = 50000 * 12 + 64, len = 0;
    char *big = malloc(cap);
    len += (size_t)snprintf(big, cap, "root ::= ");
    for (int i = 0; i < 50000; i++)
        len += (size_t)snprintf(big + len, cap - len, "%s\"w%05d\"", i ? " | " : "", i);
    len += (size_t)snprintf(big + len, cap - len, "\n");
    g = compile(big);
    double t0 = cpu_seconds();
    st = NULL;
    enum kn_status rc = g ? grammar_state_init(&st, g, &err) : KN_E_ARG;
    CHECKF(rc == KN_E_LIMIT && strstr(err.msg, "too ambiguous") &&
               strstr(err.msg, "GRAMMAR_MAX_STACKS"), "50,000-way enum: %s",
           rc ? err.msg : "accepted");
    CHECKF(cpu_seconds() - t0 < 1.0, "the enum took %.2f s of CPU", cpu_seconds() - t0);
    grammar_state_free(st);
    grammar_free(g);
    /* 4,000 ways is fine: masks and accepts as before */
    len = (size_t)snprintf(big, cap, "root ::= ");
    for (int i = 0; i < 4000; i++)
        len += (size_t)snprintf(big + len, cap - len, "%s\"w%05d\"", i ? " | " : "", i);
    g = compile(big);
    st = NULL;
    CHECKF(g && grammar_state_init(&st, g, &err) == KN_OK, "4,000-way enum: %s", err.msg);
    if (st) {
        grammar_mask(st, gv, allowed);
        CHECK(grammar_state_error(st) == NULL && grammar_accept_bytes(st, "w0399", 5) &&
              grammar_accept_bytes(st, "9", 1) && grammar_is_complete(st));
        grammar_state_free(st);
    }
    grammar_free(g);
    free(big);
    free(allowed);
    grammar_vocab_free(gv);
    tok_free(t);
}

/* grammar_mask's cache of recent states: a long-lived state that keeps coming back to the
 * same states (and evicts some) gives exactly the masks a fresh state computes. */
static void test_mask_cache(void)
{
    struct tok *t = load_vocab("ggml-vocab-llama-spm.gguf");
    CHECK(t != NULL);
    if (!t)
        return;
    struct grammar_vocab *gv;
    struct kn_err err;
    CHECK(grammar_vocab_from_tok(&gv, t, 0, &err) == KN_OK);
    struct grammar *g = compile(grammar_json_object_gbnf());
    struct grammar_state *warm, *cold;
    CHECK(grammar_state_init(&warm, g, &err) == KN_OK);
    int32_t n = grammar_vocab_n(gv);
    uint8_t *a = malloc((size_t)n), *b = malloc((size_t)n);
    /* Inside a string the state repeats; six distinct states evict from a cache of four. */
    const char *texts[] = {"{\"ab", "{\"abc", "{\"abcd", "{", "{\"k\": 1", "{\"k\": [", "{\"k\": \"x",
                           "{\"ab", "{\"k\": [", "{\"abcde", "{\"k\": \"xy", "{", "{\"k\": 1"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        grammar_state_reset(warm);
        CHECK(grammar_accept_bytes(warm, texts[i], strlen(texts[i])));
        grammar_mask(warm, gv, a);
        CHECK(grammar_state_init(&cold, g, &err) == KN_OK);
        CHECK(grammar_accept_bytes(cold, texts[i], strlen(texts[i])));
        grammar_mask(cold, gv, b);
        CHECKF(memcmp(a, b, (size_t)n) == 0, "text '%s': cached mask differs", texts[i]);
        grammar_state_free(cold);
    }
    /* A token that changes the state, then back: the eog bit follows completeness. */
    int32_t eos = tok_specials(t)->eos;
    grammar_state_reset(warm);
    CHECK(grammar_accept_bytes(warm, "{\"a\": 1", 7));
    grammar_mask(warm, gv, a);
    CHECK(!a[eos]);
    CHECK(grammar_accept_bytes(warm, "}", 1));
    grammar_mask(warm, gv, a);
    CHECK(a[eos]);
    free(a);
    free(b);
    grammar_state_free(warm);
    grammar_free(g);
    grammar_vocab_free(gv);
    tok_free(t);
}

static void test_json_schema(void)
{
    struct kn_err err;
    char *gb = NULL;
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
        "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"
        "\"minItems\":1,\"maxItems\":2}},\"required\":[\"name\",\"tags\"]}";
    CHECKF(grammar_from_json_schema(schema, strlen(schema), &gb, &err) == KN_OK, "%s", err.msg);
    struct grammar *g = gb ? compile(gb) : NULL;
    if (g) {
        const char *good[] = {"{\"name\": \"bob\", \"tags\": [\"a\"]}",
                              "{\"name\":\"\",\"tags\":[\"a\",\"b\"],\"age\":-3}"};
        const char *bad[] = {"{\"name\": \"bobbie\", \"tags\": [\"a\"]}", /* too long */
                             "{\"tags\": [\"a\"]}",                       /* name missing */
                             "{\"name\": \"b\", \"tags\": []}",           /* minItems */
                             "{\"name\": \"b\", \"tags\": [\"a\",\"a\",\"a\"]}",
                             "{\"name\": \"b\", \"tags\": [\"c\"]}",
                             "{\"name\": \"b\", \"tags\": [\"a\"], \"age\": 1.5}",
                             "{\"name\": \"b\", \"tags\": [\"a\"], \"x\": 1}"};
        for (size_t i = 0; i < 2; i++)
            CHECKF(matches(g, good[i], strlen(good[i])), "should match: %s", good[i]);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            CHECKF(!matches(g, bad[i], strlen(bad[i])), "should not match: %s", bad[i]);
        grammar_free(g);
    }
    free(gb);
    /* prefixItems (2020-12 tuples): item i follows prefixItems[i], items the rest, items:
     * false closes the tuple, minItems/maxItems count every item */
    const struct {
        const char *schema;
        const char *good[6], *bad[6];
    } tuples[] = {
        {"{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}",
         {"[]", "[1]", "[1,\"ab\"]", "[1, \"a\", null, [2]]", NULL},
         {"[\"a\"]", "[1,2]", "[1,\"abc\"]", "[,]", NULL}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"const\":\"x\"},{\"type\":\"boolean\"}],"
         "\"items\":false,\"minItems\":1}",
         {"[\"x\"]", "[\"x\", true]", NULL},
         {"[]", "[\"x\", true, 1]", "[true]", "[\"x\", 1]", NULL}},
        {"{\"prefixItems\":[{\"type\":\"null\"}],\"items\":{\"type\":\"integer\"},"
         "\"minItems\":3,\"maxItems\":4}",
         {"[null, 1, 2]", "[null,1,2,3]", NULL},
         {"[null, 1]", "[null,1,2,3,4]", "[1, 2, 3]", "[null, 1, \"a\"]", NULL}},
        {"{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"integer\"},{\"type\":\"integer\"}],"
         "\"maxItems\":2}",
         {"[]", "[1]", "[1, 2]", NULL},
         {"[1, 2, 3]", "[1, \"a\"]", NULL}},
        {"{\"type\":\"array\",\"items\":false}", {"[]", "[ ]", NULL}, {"[1]", NULL}},
    };
    for (size_t t = 0; t < sizeof tuples / sizeof tuples[0]; t++) {
        gb = NULL;
        CHECKF(grammar_from_json_schema(tuples[t].schema, strlen(tuples[t].schema), &gb, &err) ==
                   KN_OK, "%s: %s", tuples[t].schema, err.msg);
        g = gb ? compile(gb) : NULL;
        for (size_t i = 0; g && tuples[t].good[i]; i++)
            CHECKF(matches(g, tuples[t].good[i], strlen(tuples[t].good[i])), "%s should match %s",
                   tuples[t].schema, tuples[t].good[i]);
        for (size_t i = 0; g && tuples[t].bad[i]; i++)
            CHECKF(!matches(g, tuples[t].bad[i], strlen(tuples[t].bad[i])),
                   "%s should not match %s", tuples[t].schema, tuples[t].bad[i]);
        grammar_free(g);
        free(gb);
    }
    /* no required properties: any subset, in order */
    const char *opt = "{\"properties\":{\"a\":{\"const\":1},\"b\":{\"const\":2},\"c\":{\"type\":\"null\"}}}";
    CHECK(grammar_from_json_schema(opt, strlen(opt), &gb, &err) == KN_OK);
    g = gb ? compile(gb) : NULL;
    if (g) {
        const char *good[] = {"{}", "{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"c\":null}",
                              "{\"a\": 1, \"b\": 2, \"c\": null}"};
        const char *bad[] = {"{\"b\":2,\"a\":1}", "{,}", "{\"a\":1,}", "{\"a\":2}"};
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
            CHECKF(matches(g, good[i], strlen(good[i])), "should match: %s", good[i]);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            CHECKF(!matches(g, bad[i], strlen(bad[i])), "should not match: %s", bad[i]);
        grammar_free(g);
    }
    free(gb);
    /* $ref (recursive), anyOf, formats, type lists */
    const char *rec =
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":[\"integer\",\"null\"]},"
        "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
        "\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"string\",\"format\":\"date\"},"
        "{\"type\":\"string\",\"format\":\"uuid\"}]}";
    CHECKF(grammar_from_json_schema(rec, strlen(rec), &gb, &err) == KN_OK, "%s", err.msg);
    g = gb ? compile(gb) : NULL;
    if (g) {
        const char *good[] = {"{\"v\":1,\"kids\":[{\"v\":null},{\"v\":2,\"kids\":[]}]}",
                              "\"2024-02-28\"", "\"123e4567-e89b-12d3-a456-426614174000\""};
        const char *bad[] = {"{\"kids\":[]}", "\"2024-13-01\"", "\"2023-02-30\"", "\"2023-04-31\"", "\"0999-01-01\"", "\"123e4567\""};
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
            CHECKF(matches(g, good[i], strlen(good[i])), "should match: %s", good[i]);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            CHECKF(!matches(g, bad[i], strlen(bad[i])), "should not match: %s", bad[i]);
        grammar_free(g);
    }
    free(gb);
    /* clear errors for what cannot be enforced */
    const struct ecase errs[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "at /: 'pattern' is not supported"},
        {"{\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":3}}}",
         "at /properties/n: 'minimum' is not supported"},
        {"{\"type\":\"wat\"}", "unknown type 'wat'"},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing' points into #/$defs, which"},
        {"{\"$ref\":\"#/$defs/missing\",\"$defs\":{\"a\":{}}}",
         "$ref '#/$defs/missing': #/$defs has no entry 'missing'"},
        /* refs that are too short to name anything (issue 44: "#" and "" read past the end
         * of the string), name nothing, or are not strings; each error names the ref */
        {"{\"$ref\":\"#\"}", "$ref '#' is not supported"},
        {"{\"$ref\":\"\"}", "$ref '' is not supported"},
        {"{\"$ref\":\"#/\"}", "$ref '#/' is not supported"},
        {"{\"$ref\":\"#/$\"}", "$ref '#/$' is not supported"},
        {"{\"$ref\":\"#/$defs\"}", "$ref '#/$defs' is not supported"},
        {"{\"$ref\":\"#/$defs/\",\"$defs\":{\"a\":{}}}", "$ref '#/$defs/' names no entry"},
        {"{\"$ref\":\"#/definitions/\"}", "$ref '#/definitions/' names no entry"},
        {"{\"$ref\":\"#/definitions/a\"}", "$ref '#/definitions/a' points into #/definitions, which"},
        {"{\"$ref\":\"#/$defs/a\",\"$defs\":[]}", "points into #/$defs, which the schema does not have"},
        {"{\"$ref\":\"#/properties/a\",\"properties\":{\"a\":{}}}", "$ref '#/properties/a' is not supported"},
        {"{\"$ref\":\"other.json#/$defs/a\"}", "$ref 'other.json#/$defs/a' is not supported"},
        {"{\"$ref\":7}", "'$ref' must be a string such as \"#/$defs/name\", not a number"},
        {"{\"$ref\":null}", "not null"},
        {"{\"$ref\":{\"a\":1}}", "not an object"},
        {"{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}", "at /items: $ref '#'"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "maxItems is below minItems"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "not supported"},
        {"{\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "'b' is not in 'properties'"},
        {"{\"type\": ", "not valid JSON"},
        {"false", "matches nothing"},
        {"{\"prefixItems\":[]}", "'prefixItems' must be a non-empty array"},
        {"{\"prefixItems\":{\"type\":\"integer\"}}", "'prefixItems' must be a non-empty array"},
        {"{\"prefixItems\":[{\"type\":\"integer\"}],\"items\":false,\"minItems\":2}",
         "minItems is 2 but items: false allows only the 1 prefixItems"},
        {"{\"prefixItems\":[{\"minimum\":1}]}", "at /prefixItems/0: 'minimum' is not supported"},
        {"{\"anyOf\":[{}],\"prefixItems\":[{}]}", "move them into each alternative"},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        gb = NULL;
        enum kn_status st = grammar_from_json_schema(errs[i].gbnf, strlen(errs[i].gbnf), &gb, &err);
        CHECKF(st != KN_OK && strstr(err.msg, errs[i].want), "%s -> %s", errs[i].gbnf,
               st == KN_OK ? "ok" : err.msg);
        free(gb);
    }
    /* the generic JSON object grammar */
    g = compile(grammar_json_object_gbnf());
    if (g) {
        const char *good[] = {"{}", "{\"a\": [1, 2.5, -3e+10, true, false, null, \"x\\n\\u00e9\"]}",
                              "{\n  \"k\": {\"z\": []}\n}"};
        const char *bad[] = {"[]", "{\"a\" 1}", "{'a': 1}", "{\"a\": 01}", "{\"a\": tru}"};
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
            CHECKF(matches(g, good[i], strlen(good[i])), "should match: %s", good[i]);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            CHECKF(!matches(g, bad[i], strlen(bad[i])), "should not match: %s", bad[i]);
        grammar_free(g);
    }
}

/* Sampling under a grammar on the toy vocabulary: every output at temperature 1 from
 * random logits completes the grammar, end-of-generation only when complete. */
static void test_sample_with_grammar(void)
{
    struct grammar *g = compile("root ::= \"{\" \"\\\"\" [a-c\\u00e9]* \"\\\"\" \"}\"");
    struct grammar_vocab *gv;
    struct kn_err err;
    int32_t eog = 16;
    CHECK(grammar_vocab_init(&gv, TOY_N, toy_piece, NULL, &eog, 1, &err) == KN_OK);
    struct grammar_state *st;
    CHECK(grammar_state_init(&st, g, &err) == KN_OK);
    struct sample_ctx s;
    CHECK(sample_ctx_init(&s, TOY_N, &err) == KN_OK);
    struct sample_params p;
    sample_params_default(&p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.repeat_penalty = 1;
    sample_ctx_set_grammar(&s, st, gv);
    int complete = 0;
    for (int r = 0; r < 300; r++) {
        grammar_state_reset(st);
        p.seed = (uint64_t)r;
        char text[512];
        size_t len = 0;
        int32_t hist[200];
        int n = 0;
        for (; n < 200; n++) {
            float logits[TOY_N];
            for (int32_t i = 0; i < TOY_N; i++)
                logits[i] = (sample_uniform((uint64_t)r * 7919 + 1, (uint64_t)(n * TOY_N + i)) - 0.5f) * 6;
            logits[16] += 2; /* end often */
            int32_t id = sample_token(&s, &p, logits, hist, n, (uint64_t)n);
            CHECK(id >= 0);
            if (id < 0 || id == 16)
                break;
            hist[n] = id;
            size_t pl = strlen(toy[id]);
            if (len + pl < sizeof text) {
                memcpy(text + len, toy[id], pl);
                len += pl;
            }
        }
        if (n < 200) {
            complete++;
            CHECK(grammar_is_done(st));
            CHECKF(matches(g, text, len), "output %.*s", (int)len, text);
        }
    }
    CHECKF(complete > 250, "%d of 300 complete", complete);
    /* a grammar this vocabulary cannot spell: -1, at any temperature */
    struct grammar *gq = compile("root ::= \"q\"");
    struct grammar_state *sq;
    CHECK(grammar_state_init(&sq, gq, &err) == KN_OK);
    sample_ctx_set_grammar(&s, sq, gv);
    float flat[TOY_N] = {0};
    CHECK_EQ_INT(sample_token(&s, &p, flat, NULL, 0, 0), -1);
    p.temperature = 0;
    CHECK_EQ_INT(sample_token(&s, &p, flat, NULL, 0, 0), -1);
    /* an allowed token whose logit is -inf is still chosen over nothing */
    sample_ctx_set_grammar(&s, st, gv);
    grammar_state_reset(st);
    float neg[TOY_N];
    for (int32_t i = 0; i < TOY_N; i++)
        neg[i] = i == 0 || i == 15 ? -INFINITY : 1.0f;
    CHECK_EQ_INT(sample_token(&s, &p, neg, NULL, 0, 0), 0);
    grammar_state_free(sq);
    grammar_free(gq);
    /* greedy too, and the same seed gives the same output */
    sample_ctx_free(&s);
    grammar_state_free(st);
    grammar_vocab_free(gv);
    grammar_free(g);
}

/* The sampler under a grammar equals sampling without one from logits masked by
 * grammar_mask (the definition), whichever internal path it takes (the top-k fast path or
 * the full mask), on a real vocabulary with random logits. */
static void test_sample_equals_mask(void)
{
    struct tok *t = load_vocab("ggml-vocab-llama-spm.gguf");
    if (!t)
        return;
    struct kn_err err;
    struct grammar_vocab *gv;
    CHECK(grammar_vocab_from_tok(&gv, t, 0, &err) == KN_OK);
    struct grammar *g = compile(grammar_json_object_gbnf());
    struct grammar_state *a, *b;
    CHECK(grammar_state_init(&a, g, &err) == KN_OK);
    CHECK(grammar_state_init(&b, g, &err) == KN_OK);
    int32_t n = tok_n_vocab(t);
    struct sample_ctx sa, sb;
    CHECK(sample_ctx_init(&sa, n, &err) == KN_OK);
    CHECK(sample_ctx_init(&sb, n, &err) == KN_OK);
    sample_ctx_set_grammar(&sa, a, gv);
    float *l = malloc((size_t)n * sizeof *l), *lm = malloc((size_t)n * sizeof *lm);
    uint8_t *allowed = malloc((size_t)n);
    int32_t hist[64];
    const struct {
        float temp;
        int32_t top_k;
    } cfg[] = {{0, 50}, {1.0f, 40}, {0.8f, 0}, {1.5f, 5}};
    int differ = 0, steps = 0;
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        struct sample_params p;
        sample_params_default(&p);
        p.temperature = cfg[ci].temp;
        p.top_k = cfg[ci].top_k;
        p.seed = 1000 + ci;
        grammar_state_reset(a);
        grammar_state_reset(b);
        for (int i = 0; i < 40; i++) {
            for (int32_t v = 0; v < n; v++) {
                l[v] = (sample_uniform(ci * 100 + (uint64_t)i, (uint64_t)v) - 0.5f) * 10;
                size_t len;
                const char *pc = tok_piece(t, v, false, &len);
                if (len && (pc[0] == '"' || pc[0] == '}'))
                    l[v] += 4; /* get out of strings now and then */
            }
            int32_t x = sample_token(&sa, &p, l, hist, i, (uint64_t)i);
            grammar_mask(b, gv, allowed);
            for (int32_t v = 0; v < n; v++)
                lm[v] = allowed[v] ? l[v] : -INFINITY;
            int32_t y = sample_token(&sb, &p, lm, hist, i, (uint64_t)i);
            differ += x != y;
            steps++;
            if (x != y || x < 0 || grammar_is_done(a))
                break;
            CHECK(grammar_accept_token(b, gv, y));
            hist[i] = x;
        }
    }
    CHECKF(differ == 0, "%d of %d tokens differ", differ, steps);
    CHECK(steps > 60);
    free(l);
    free(lm);
    free(allowed);
    sample_ctx_free(&sa);
    sample_ctx_free(&sb);
    grammar_state_free(a);
    grammar_state_free(b);
    grammar_free(g);
    grammar_vocab_free(gv);
    tok_free(t);
}

int main(void)
{
    test_matching();
    test_errors();
    test_mask_toy();
    test_mask_real();
    test_mask_cache();
    test_json_schema();
    test_bounds();
    test_sample_with_grammar();
    test_sample_equals_mask();
    CHECK_DONE();
}
