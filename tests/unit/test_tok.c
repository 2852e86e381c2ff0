/* test_tok.c: the tokenizers on real vocabularies (llama.cpp's llama-spm and gpt-2 files) and
 * on tiny vocabularies built here to pin down merge order, byte fallback, special tokens,
 * end-of-generation detection, streaming decoding and the errors of malformed files. */
#include "check.h"
#include "gguf/gguf.h"
#include "token/tok.h"

#include <stdint.h>

/* ---------------------------------------------------------------- helpers */

static struct tok *load_path(const char *path)
{
    struct gguf_file *g = NULL;
    struct kn_err err = {0};
    if (gguf_open(&g, path, &err) != KN_OK) {
        fprintf(stderr, "cannot open %s: %s\n", path, err.msg);
        return NULL;
    }
    struct tok *t = NULL;
    enum kn_status st = tok_load(&t, g, &err);
    CHECKF(st == KN_OK, "%s: %s", path, err.msg);
    gguf_close(g);
    return t;
}

/* A vocabulary of tests/data/vocab: the repository has them, so one that does not load
 * ends the test (it must never pass by skipping its cases). */
static struct tok *load_data_vocab(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/%s", check_data_dir(), name);
    struct tok *t = load_path(path);
    REQUIRE(t != NULL, "%s", path);
    return t;
}

/* Encodes s (no special tokens added or parsed) into ids; returns the count. */
static size_t enc(const struct tok *t, const char *s, size_t len, bool add_special,
                  bool parse_special, int32_t *ids, size_t max)
{
    size_t n = 0;
    struct kn_err err = {0};
    enum kn_status st = tok_encode(t, s, len, add_special, parse_special, ids, max, &n, &err);
    CHECKF(st == KN_OK, "encode: %s", err.msg);
    return n;
}

static bool ids_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && memcmp(a, b, na * sizeof *a) == 0;
}

/* A writer holding a vocabulary: texts, optional scores and types. */
static struct gguf_writer *vocab_writer(const char *model, const char *const *texts, int n,
                                        const float *scores, const int32_t *types)
{
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    struct gguf_str strs[64];
    for (int i = 0; i < n; i++)
        strs[i] = (struct gguf_str){texts[i], strlen(texts[i])};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)n);
    if (scores)
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_F32, scores, (uint64_t)n);
    if (types)
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_I32, types, (uint64_t)n);
    return w;
}

static void set_merges(struct gguf_writer *w, const char *const *merges, int n)
{
    struct gguf_str strs[16];
    for (int i = 0; i < n; i++)
        strs[i] = (struct gguf_str){merges[i], strlen(merges[i])};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", strs, (uint64_t)n);
}

/* Loads the writer's vocabulary (the writer is freed); *st gets tok_load's status. */
static struct tok *load_writer(struct gguf_writer *w, enum kn_status *st, struct kn_err *err)
{
    void *buf = NULL;
    size_t size = 0;
    enum kn_status ws = gguf_writer_write_memory(w, &buf, &size, err);
    CHECKF(ws == KN_OK, "write_memory: %s", err->msg);
    gguf_writer_free(w);
    struct gguf_file *g = NULL;
    struct tok *t = NULL;
    if (gguf_open_memory(&g, buf, size, "test.gguf", err) != KN_OK) {
        CHECKF(0, "open_memory: %s", err->msg);
        free(buf);
        *st = KN_E_FORMAT;
        return NULL;
    }
    *st = tok_load(&t, g, err);
    gguf_close(g);
    free(buf);
    return t;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Random bytes biased toward text: ASCII, spaces, newlines, UTF-8 sequences (some cut
 * short or stray), NUL. (No U+2581: SentencePiece reads it as a space by design.) */
static size_t random_text(char *out, size_t max)
{
    static const char *const frags[] = {"a", "Z", " ", "  ", "\n", "\t", "7", "'s", ".", "é",
                                        "🦙", "你", "\xC3", "\x80", "\xFF",
                                        "\xF0\x9F", "\0", "<s>", "</s>", "ab", "the", "\r\n"};
    size_t n = 0, parts = rnd() % 12;
    for (size_t i = 0; i < parts; i++) {
        const char *f = frags[rnd() % (sizeof frags / sizeof frags[0])];
        size_t l = f[0] ? strlen(f) : 1;
        if (n + l > max)
            break;
        memcpy(out + n, f, l);
        n += l;
    }
    return n;
}

/* ---------------------------------------------------------------- real vocabularies */

static void test_llama_spm(void)
{
    struct tok *t = load_data_vocab("ggml-vocab-llama-spm.gguf");
    if (!t)
        return;
    const struct tok_special *sp = tok_specials(t);
    CHECK(tok_model(t) == TOK_MODEL_SPM);
    CHECK_EQ_INT(tok_n_vocab(t), 32000);
    CHECK_EQ_INT(sp->bos, 1);
    CHECK_EQ_INT(sp->eos, 2);
    CHECK_EQ_INT(sp->unk, 0);
    CHECK(sp->add_bos && !sp->add_eos && sp->add_space_prefix);
    CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 1));

    int32_t ids[256];
    static const int32_t hello[] = {15043, 3186};
    size_t n = enc(t, "Hello world", 11, false, false, ids, 256);
    CHECK(ids_eq(ids, n, hello, 2));
    n = enc(t, "Hello world", 11, true, false, ids, 256);
    CHECK(n == 3 && ids[0] == 1 && ids[1] == 15043);
    CHECK_EQ_INT(enc(t, "", 0, false, false, ids, 256), 0);
    n = enc(t, "", 0, true, false, ids, 256);
    CHECK(n == 1 && ids[0] == 1);

    /* The allocating form gives the same ids. */
    int32_t *dyn = NULL;
    size_t nd = 0;
    struct kn_err derr = {0};
    CHECK(tok_encode_alloc(t, "Hello world", 11, true, false, &dyn, &nd, &derr) == KN_OK);
    n = enc(t, "Hello world", 11, true, false, ids, 256);
    CHECK(ids_eq(dyn, nd, ids, n));
    free(dyn);
    CHECK(tok_encode_alloc(t, "", 0, false, false, &dyn, &nd, &derr) == KN_OK);
    CHECK(nd == 0 && dyn == NULL);

    /* A too-small buffer: KN_E_LIMIT and the needed count. */
    struct kn_err err = {0};
    n = 0;
    CHECK(tok_encode(t, "Hello world", 11, true, false, ids, 2, &n, &err) == KN_E_LIMIT);
    CHECK_EQ_INT(n, 3);

    /* Control-token text is plain text unless parsed. */
    n = enc(t, "a</s>b", 6, false, false, ids, 256);
    bool has_eos = false;
    for (size_t i = 0; i < n; i++)
        has_eos |= ids[i] == 2;
    CHECK(!has_eos);
    n = enc(t, "a</s>b", 6, false, true, ids, 256);
    CHECK(n == 3 && ids[1] == 2);
    /* Text after a special token gets the space prefix again (llama.cpp and HF agree). */
    int32_t b_alone[8];
    size_t nb = enc(t, "b", 1, false, false, b_alone, 8);
    CHECK(nb == 1 && ids[2] == b_alone[0]);

    /* Byte fallback: the llama is not in the vocabulary; its four bytes are. */
    n = enc(t, "\xF0\x9F\xA6\x99", 4, false, false, ids, 256);
    CHECK(n == 5 && ids[0] == 29871 && ids[1] == 3 + 0xF0 && ids[4] == 3 + 0x99);

    /* Pieces: control tokens only when asked; byte tokens are bytes; U+2581 is a space. */
    size_t pl;
    const char *p = tok_piece(t, 1, false, &pl);
    CHECK(pl == 0);
    p = tok_piece(t, 1, true, &pl);
    CHECK(pl == 3 && memcmp(p, "<s>", 3) == 0);
    p = tok_piece(t, 3 + 0xF0, false, &pl);
    CHECK(pl == 1 && (uint8_t)p[0] == 0xF0);
    p = tok_piece(t, 15043, false, &pl);
    CHECK(pl == 6 && memcmp(p, " Hello", 6) == 0);
    p = tok_piece(t, -5, true, &pl);
    CHECK(pl == 0);
    p = tok_piece(t, 32000, true, &pl);
    CHECK(pl == 0);

    /* Streaming holds an incomplete UTF-8 sequence back until it completes. */
    n = enc(t, "\xF0\x9F\xA6\x99!", 5, false, false, ids, 256);
    struct tok_stream s;
    tok_stream_init(&s, t, false);
    char out[1024], all[1024];
    size_t m, total = 0;
    size_t emitted[8];
    for (size_t i = 0; i < n && i < 8; i++) {
        tok_stream_push(&s, ids[i], out, &m);
        emitted[i] = m;
        memcpy(all + total, out, m);
        total += m;
    }
    tok_stream_flush(&s, out, &m);
    CHECK_EQ_INT(m, 0);
    CHECK(n == 6 && emitted[0] == 1 && emitted[1] == 0 && emitted[2] == 0 && emitted[3] == 0 &&
          emitted[4] == 4 && emitted[5] == 1);
    CHECK(total == 6 && memcmp(all, " \xF0\x9F\xA6\x99!", 6) == 0);
    /* An unfinished sequence comes out at flush; a broken one is not held. */
    tok_stream_init(&s, t, false);
    tok_stream_push(&s, 3 + 0xF0, out, &m);
    CHECK_EQ_INT(m, 0);
    tok_stream_push(&s, 3 + 0x9F, out, &m);
    CHECK_EQ_INT(m, 0);
    tok_stream_flush(&s, out, &m);
    CHECK(m == 2 && (uint8_t)out[0] == 0xF0 && (uint8_t)out[1] == 0x9F);
    tok_stream_push(&s, 3 + 0xC3, out, &m);
    CHECK_EQ_INT(m, 0);
    tok_stream_push(&s, 3 + 'A', out, &m);
    CHECK(m == 2 && (uint8_t)out[0] == 0xC3 && out[1] == 'A');

    /* Any bytes, invalid UTF-8 and NUL included, decode back to themselves. */
    char text[256], back[4096];
    int32_t many[1024];
    int bad = 0;
    for (int k = 0; k < 2000; k++) {
        size_t len = random_text(text, sizeof text);
        n = enc(t, text, len, false, false, many, 1024);
        size_t bl = 0;
        CHECK(tok_decode(t, many, n, false, back, sizeof back, &bl, &err) == KN_OK);
        if (bl != len || memcmp(back, text, len) != 0) {
            if (bad++ < 3) {
                fprintf(stderr, "round trip: ");
                for (size_t i = 0; i < len; i++)
                    fprintf(stderr, "%02x", (uint8_t)text[i]);
                fprintf(stderr, " -> ");
                for (size_t i = 0; i < bl; i++)
                    fprintf(stderr, "%02x", (uint8_t)back[i]);
                fprintf(stderr, "\n");
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* tok_decode reports a short buffer. */
    n = enc(t, "Hello world", 11, false, false, ids, 256);
    size_t bl = 0;
    CHECK(tok_decode(t, ids, n, false, back, 4, &bl, &err) == KN_E_LIMIT);
    CHECK_EQ_INT(bl, 11);
    tok_free(t);
}

static void test_gpt2(void)
{
    struct tok *t = load_data_vocab("ggml-vocab-gpt-2.gguf");
    if (!t)
        return;
    CHECK(tok_model(t) == TOK_MODEL_BPE);
    CHECK_STR(tok_pre_name(t), "gpt-2");
    CHECK(!tok_specials(t)->add_space_prefix);
    int32_t ids[1024];
    static const int32_t hello[] = {15496, 995};
    size_t n = enc(t, "Hello world", 11, false, false, ids, 1024);
    CHECK(ids_eq(ids, n, hello, 2));
    /* <|endoftext|> is end of generation and, parsed, one token. */
    CHECK(tok_is_eog(t, 50256));
    n = enc(t, "<|endoftext|>", 13, false, true, ids, 1024);
    CHECK(n == 1 && ids[0] == 50256);
    n = enc(t, "<|endoftext|>", 13, false, false, ids, 1024);
    CHECK(n > 1);

    /* Byte-level BPE loses nothing: any bytes decode back to themselves. */
    char text[256], back[4096];
    struct kn_err err = {0};
    int bad = 0;
    for (int k = 0; k < 2000; k++) {
        size_t len = random_text(text, sizeof text);
        n = enc(t, text, len, false, false, ids, 1024);
        size_t bl = 0;
        CHECK(tok_decode(t, ids, n, false, back, sizeof back, &bl, &err) == KN_OK);
        if (bl != len || memcmp(back, text, len) != 0) {
            if (bad++ < 3) {
                fprintf(stderr, "round trip: ");
                for (size_t i = 0; i < len; i++)
                    fprintf(stderr, "%02x", (uint8_t)text[i]);
                fprintf(stderr, " -> ");
                for (size_t i = 0; i < bl; i++)
                    fprintf(stderr, "%02x", (uint8_t)back[i]);
                fprintf(stderr, "\n");
            }
        }
    }
    CHECK_EQ_INT(bad, 0);

    /* Long whitespace runs and long words stay linear and exact. */
    size_t big = 200000;
    char *s = malloc(big);
    int32_t *many = malloc(big * sizeof *many);
    char *b2 = malloc(big);
    if (s && many && b2) {
        for (size_t i = 0; i < big; i++)
            s[i] = i < big / 2 ? ' ' : (char)('a' + i % 3);
        n = enc(t, s, big, false, false, many, big);
        size_t bl = 0;
        CHECK(tok_decode(t, many, n, false, b2, big, &bl, &err) == KN_OK);
        CHECK(bl == big && memcmp(b2, s, big) == 0);
    }
    free(s);
    free(many);
    free(b2);
    tok_free(t);
}

/* ---------------------------------------------------------------- tiny vocabularies */

static void test_spm_merge_order(void)
{
    static const char *const texts[] = {"<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc",
                                        "<|im_end|>", "\xE2\x96\x81", "<0x78>"};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6};
    int32_t ids[16];
    struct kn_err err = {0};
    enum kn_status st;

    /* Equal scores: the leftmost pair merges first. */
    float eq[11] = {0, 0, 0, 0, 0, 0, -1, -1, 0, 0, 0};
    struct gguf_writer *w = vocab_writer("llama", texts, 11, eq, types);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false);
    struct tok *t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        size_t n = enc(t, "abc", 3, false, false, ids, 16);
        CHECK(n == 2 && ids[0] == 6 && ids[1] == 5);
        /* <|im_end|> was stored as a normal token: it becomes a control token that ends
         * generation, as llama.cpp does. */
        CHECK(tok_type_of(t, 8) == TOK_T_CONTROL);
        CHECK(tok_is_eog(t, 8) && tok_is_eog(t, 2));
        CHECK_EQ_INT(tok_specials(t)->eot, 8);
        /* Unknown characters: <0xXX> where it exists, else the unknown token. */
        n = enc(t, "xy", 2, false, false, ids, 16);
        CHECK(n == 2 && ids[0] == 10 && ids[1] == 0);
        /* The prefix space is off: a space is U+2581. */
        n = enc(t, " a", 2, false, false, ids, 16);
        CHECK(n == 2 && ids[0] == 9 && ids[1] == 3);
        tok_free(t);
    }

    /* A better score on the right pair wins over position. */
    float right[11] = {0, 0, 0, 0, 0, 0, -2, -1, 0, 0, 0};
    w = vocab_writer("llama", texts, 11, right, types);
    t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        CHECK(tok_specials(t)->add_space_prefix); /* the SPM default */
        size_t n = enc(t, "abc", 3, false, false, ids, 16);
        CHECK(n == 3 && ids[0] == 9 && ids[1] == 3 && ids[2] == 7);
        tok_free(t);
    }
}

static void test_bpe_merge_order(void)
{
    static const char *const texts[] = {"a", "b", "c", "ab", "bc", "abc", "\xC4\xA0", "<|im_end|>"};
    static const int32_t types[] = {1, 1, 1, 1, 1, 1, 1, 3};
    int32_t ids[16];
    struct kn_err err = {0};
    enum kn_status st;

    static const char *const m1[] = {"b c", "a b", "a bc"};
    struct gguf_writer *w = vocab_writer("gpt2", texts, 8, NULL, types);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    set_merges(w, m1, 3);
    struct tok *t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        size_t n = enc(t, "abc", 3, false, false, ids, 16);
        CHECK(n == 1 && ids[0] == 5);
        n = enc(t, "ab", 2, false, false, ids, 16);
        CHECK(n == 1 && ids[0] == 3);
        /* The gpt-2 pre-tokenizer keeps " a" together; the space is U+0120. */
        n = enc(t, "a a", 3, false, false, ids, 16);
        CHECK(n == 3 && ids[0] == 0 && ids[1] == 6 && ids[2] == 0);
        CHECK(tok_is_eog(t, 7));
        size_t pl;
        const char *p = tok_piece(t, 6, false, &pl);
        CHECK(pl == 1 && p[0] == ' ');
        tok_free(t);
    }

    /* The lowest rank merges first: (a b) before (b c), and "ab c" is not a merge. */
    static const char *const m2[] = {"a b", "b c", "a bc"};
    w = vocab_writer("gpt2", texts, 8, NULL, types);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    set_merges(w, m2, 3);
    t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        size_t n = enc(t, "abc", 3, false, false, ids, 16);
        CHECK(n == 2 && ids[0] == 3 && ids[1] == 2);
        tok_free(t);
    }

    /* llama3 takes a word that is a token whole, ignoring the merges. */
    w = vocab_writer("gpt2", texts, 8, NULL, types);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama-bpe");
    set_merges(w, m2, 3);
    t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        size_t n = enc(t, "abc", 3, false, false, ids, 16);
        CHECK(n == 1 && ids[0] == 5);
        tok_free(t);
    }
}

/* gpt-oss's o200k_harmony vocabulary (pre-tokenizer gpt-4o): the header tokens are
 * printed, <|return|> and <|call|> end generation and <|end|> does not (llama.cpp). */
static void test_harmony(void)
{
    static const char *const texts[] = {"a", "b", "<|start|>", "<|channel|>", "<|message|>",
                                        "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"};
    static const int32_t types[] = {1, 1, 3, 3, 3, 3, 3, 3, 3};
    struct kn_err err = {0};
    enum kn_status st;
    struct gguf_writer *w = vocab_writer("gpt2", texts, 9, NULL, types);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-4o");
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 6);
    set_merges(w, NULL, 0);
    struct tok *t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (!t)
        return;
    CHECK_STR(tok_pre_name(t), "gpt-4o");
    CHECK(tok_is_eog(t, 6) && tok_is_eog(t, 7) && !tok_is_eog(t, 5));
    for (int32_t id = 2; id <= 8; id++) {
        size_t pl;
        const char *p = tok_piece(t, id, false, &pl);
        bool shown = id == 2 || id == 3 || id == 4 || id == 8;
        CHECKF(shown ? pl == strlen(texts[id]) && memcmp(p, texts[id], pl) == 0 : pl == 0,
               "token %s printed as %zu bytes", texts[id], pl);
    }
    tok_free(t);
    /* without <|return|> and <|call|> (not harmony) <|end|> ends generation as before */
    w = vocab_writer("gpt2", texts, 6, NULL, types);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-4o");
    set_merges(w, NULL, 0);
    t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        size_t pl;
        CHECK(tok_is_eog(t, 5));
        tok_piece(t, 3, false, &pl);
        CHECK(pl == 0);
        tok_free(t);
    }
}

static void expect_error(struct gguf_writer *w, enum kn_status want, const char *needle)
{
    struct kn_err err = {0};
    enum kn_status st;
    struct tok *t = load_writer(w, &st, &err);
    CHECKF(st == want, "status %d, want %d (%s)", st, want, err.msg);
    CHECKF(t == NULL, "a tokenizer came back with an error");
    CHECKF(strstr(err.msg, needle) != NULL, "'%s' does not mention '%s'", err.msg, needle);
    tok_free(t);
}

static void test_bad_files(void)
{
    static const char *const texts[] = {"<unk>", "<s>", "</s>", "a"};
    static const float scores[] = {0, 0, 0, 0};
    static const int32_t types[] = {2, 3, 3, 1};

    expect_error(vocab_writer("t5", texts, 4, scores, types), KN_E_UNSUPPORTED,
                 "unsupported tokenizer model 't5'");

    struct gguf_writer *w = vocab_writer("gpt2", texts, 4, NULL, types);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
    static const char *const m[] = {"a a"};
    set_merges(w, m, 1);
    expect_error(w, KN_E_UNSUPPORTED, "no-such-pre");

    w = vocab_writer("gpt2", texts, 4, NULL, types);
    expect_error(w, KN_E_FORMAT, "tokenizer.ggml.merges");

    w = vocab_writer("gpt2", texts, 4, NULL, types);
    static const char *const nospace[] = {"aa"};
    set_merges(w, nospace, 1);
    expect_error(w, KN_E_FORMAT, "merge 0");

    w = vocab_writer("llama", texts, 4, NULL, types);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_F32, scores, 3);
    expect_error(w, KN_E_FORMAT, "tokenizer.ggml.scores");

    w = vocab_writer("llama", texts, 4, scores, NULL);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_I32, types, 2);
    expect_error(w, KN_E_FORMAT, "tokenizer.ggml.token_type");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    expect_error(w, KN_E_FORMAT, "tokenizer.ggml.tokens");

    w = gguf_writer_new();
    expect_error(w, KN_E_FORMAT, "tokenizer.ggml.model");

    /* An out-of-range special id is ignored (the default stays), as llama.cpp does;
     * 0xFFFFFFFF means none. Token types outside the known range are undefined. */
    static const int32_t odd_types[] = {2, 3, 3, 99};
    w = vocab_writer("llama", texts, 4, scores, odd_types);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1000);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 3);
    struct kn_err err = {0};
    enum kn_status st;
    struct tok *t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        CHECK_EQ_INT(tok_specials(t)->bos, 1);
        CHECK_EQ_INT(tok_specials(t)->eos, TOK_NULL);
        CHECK_EQ_INT(tok_specials(t)->pad, 3);
        CHECK(!tok_is_eog(t, 2));
        CHECK(tok_type_of(t, 3) == TOK_T_UNDEFINED);
        size_t pl;
        tok_piece(t, 3, true, &pl);
        CHECK_EQ_INT(pl, 0);
        tok_free(t);
    }
}

/* Odd but well-formed vocabularies load and tokenize without crashing: empty and NUL-bearing
 * token texts, NaN scores, merges of texts that are no tokens, negative special ids. */
static void test_odd_vocabularies(void)
{
    static const char *const texts[] = {"", "a", "b", "ab", "\xE2\x96\x81", "<0x61>", "zz"};
    float scores[7] = {0, 0, 0, 0, 0, 0, 0};
    scores[3] = __builtin_nanf("");
    static const int32_t types[] = {3, 1, 1, 1, 1, 6, 4};
    struct kn_err err = {0};
    enum kn_status st;
    int32_t ids[64];

    struct gguf_writer *w = vocab_writer("llama", texts, 7, scores, types);
    gguf_writer_set_i32(w, "tokenizer.ggml.bos_token_id", -5);
    gguf_writer_set_i32(w, "tokenizer.ggml.unknown_token_id", -1);
    struct tok *t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        CHECK_EQ_INT(tok_specials(t)->unk, TOK_NULL);
        size_t n = enc(t, "abzzq\0ab", 9, true, true, ids, 64);
        CHECK(n > 0 && n < 64);
        for (size_t i = 0; i < n; i++)
            CHECK(ids[i] >= 0 && ids[i] < 7);
        CHECK_EQ_INT(tok_find(t, "", 0), TOK_NULL);
        tok_free(t);
    }

    static const char *const btexts[] = {"a", "b", "x", "ab"};
    static const char *const merges[] = {"q r", "a b", "a b", "\xC4\xA0 a"};
    w = vocab_writer("gpt2", btexts, 4, NULL, NULL);
    set_merges(w, merges, 4);
    t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        CHECK_STR(tok_pre_name(t), "default");
        size_t n = enc(t, "ab a\xFF" "b", 7, true, true, ids, 64);
        CHECK(n >= 2 && ids[0] == 3);
        tok_free(t);
    }
}

/* A text both a model token and an added token: words use the model's token, the raw text
 * the added one (DeepSeek LLM adds a user-defined "ÿ", byte-level BPE's code point for 0xFF). */
static void test_duplicate_texts(void)
{
    static const char *const texts[] = {"\xC3\xBF", "\xC3\xBF", "b"};
    static const int32_t types[] = {1, 4, 1};
    static const char *const merges[] = {"b b"};
    struct kn_err err = {0};
    enum kn_status st;
    struct gguf_writer *w = vocab_writer("gpt2", texts, 3, NULL, types);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    set_merges(w, merges, 1);
    struct tok *t = load_writer(w, &st, &err);
    CHECKF(st == KN_OK, "%s", err.msg);
    if (t) {
        int32_t ids[8];
        size_t n = enc(t, "\xFF", 1, false, false, ids, 8);
        CHECK(n == 1 && ids[0] == 0);
        n = enc(t, "\xC3\xBF", 2, false, false, ids, 8);
        CHECK(n == 1 && ids[0] == 1);
        CHECK_EQ_INT(tok_find(t, "\xC3\xBF", 2), 0);
        tok_free(t);
    }
}

/* tok_encode_marked: control tokens only where every byte is marked (template text). */
static void test_marked(void)
{
    struct tok *t = load_data_vocab("ggml-vocab-phi-3.gguf");
    if (!t)
        return;
    const int32_t user = tok_find(t, "<|user|>", 8), end = tok_find(t, "<|end|>", 7);
    CHECK(user != TOK_NULL && end != TOK_NULL);
    const char *text = "<|user|>\nA <|end|> B<|end|>\n";
    size_t len = strlen(text);
    uint8_t marks[64];
    struct kn_err err = {0};
    int32_t *ids = NULL, ref[64];
    size_t n = 0;
    /* all marked = parse_special; none marked = no control tokens (parse_special off) */
    memset(marks, 1, len);
    CHECK(tok_encode_marked(t, text, marks, len, false, &ids, &n, &err) == KN_OK);
    CHECK(ids_eq(ids, n, ref, enc(t, text, len, false, true, ref, 64)));
    free(ids);
    memset(marks, 0, len);
    CHECK(tok_encode_marked(t, text, marks, len, false, &ids, &n, &err) == KN_OK);
    CHECK(ids_eq(ids, n, ref, enc(t, text, len, false, false, ref, 64)));
    free(ids);
    /* the template's <|user|> and final <|end|>, the message's <|end|> in between */
    memset(marks, 0, len);
    memset(marks, 1, 8);
    memset(marks + len - 8, 1, 8);
    CHECK(tok_encode_marked(t, text, marks, len, false, &ids, &n, &err) == KN_OK);
    int cu = 0, ce = 0;
    for (size_t i = 0; i < n; i++) {
        cu += ids[i] == user;
        ce += ids[i] == end;
    }
    CHECK_EQ_INT(cu, 1);
    CHECK_EQ_INT(ce, 1);
    CHECK(n >= 2 && ids[0] == user);
    free(ids);
    /* an occurrence only partly template text stays text */
    memset(marks, 1, len);
    marks[len - 3] = 0; /* the '|' of the final <|end|> */
    CHECK(tok_encode_marked(t, text, marks, len, false, &ids, &n, &err) == KN_OK);
    ce = 0;
    for (size_t i = 0; i < n; i++)
        ce += ids[i] == end;
    CHECK_EQ_INT(ce, 1); /* the middle one only */
    free(ids);
    /* add_special prepends BOS as tok_encode does */
    memset(marks, 1, len);
    CHECK(tok_encode_marked(t, text, marks, len, true, &ids, &n, &err) == KN_OK);
    CHECK(ids_eq(ids, n, ref, enc(t, text, len, true, true, ref, 64)));
    free(ids);
    tok_free(t);
}

int main(void)
{
    test_marked();
    test_llama_spm();
    test_gpt2();
    test_spm_merge_order();
    test_bpe_merge_order();
    test_harmony();
    test_bad_files();
    test_odd_vocabularies();
    test_duplicate_texts();
    CHECK_DONE();
}
