/* fuzz_tok.c: libFuzzer target for the tokenizers. The first input byte picks a shared
 * vocabulary (llama-spm, gpt-2, bert-bge, deepseek-llm) and whether special tokens are
 * parsed; the rest is the text. Every id must be in range, the streaming decoder must give
 * the pieces' bytes, and where tokenization is lossless (GPT-2's byte-level BPE; SentencePiece
 * with byte fallback on text without U+2581) decoding must give the text back. (DeepSeek's
 * vocabulary has "ÿ", byte 0xFF's code point, only as an added token, so it is not lossless.)
 * Vocabularies come from the repository's tests/data/vocab (KN_DATA overrides the folder). */
#include "gguf/gguf.h"
#include "token/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                    "ggml-vocab-bert-bge.gguf", "ggml-vocab-deepseek-llm.gguf"};
static struct tok *toks[4];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("KN_DATA");
    for (int i = 0; i < 4; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/vocab/%s", dir ? dir : KN_TEST_DATA_DIR, names[i]);
        struct gguf_file *g = NULL;
        struct kn_err err = {0};
        if (gguf_open(&g, path, &err) != KN_OK || tok_load(&toks[i], g, &err) != KN_OK) {
            fprintf(stderr, "fuzz_tok: %s: %s\n", path, err.msg);
            abort();
        }
        gguf_close(g);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] & 3;
    bool parse_special = data[0] & 4, add_special = data[0] & 8;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const struct tok *t = toks[which];

    int32_t *ids = NULL;
    size_t n = 0;
    struct kn_err err = {0};
    if (tok_encode_alloc(t, text, len, add_special, parse_special, &ids, &n, &err) != KN_OK)
        abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(t))
            abort();

    /* The stream gives exactly the pieces' bytes, in order. */
    size_t cap = n * tok_max_piece(t) + 8, total = 0, m;
    char *joined = malloc(cap), *streamed = malloc(cap);
    struct tok_stream s;
    tok_stream_init(&s, t, false);
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = tok_piece(t, ids[i], false, &pl);
        memcpy(joined + total, p, pl);
        total += pl;
    }
    size_t got = 0;
    for (size_t i = 0; i < n; i++) {
        tok_stream_push(&s, ids[i], streamed + got, &m);
        got += m;
    }
    tok_stream_flush(&s, streamed + got, &m);
    got += m;
    if (got != total || memcmp(joined, streamed, total) != 0)
        abort();

    bool lossless = !parse_special && !add_special &&
                    (which == 1 ||
                     (which == 0 && !memmem(text, len, "\xE2\x96\x81", 3) &&
                      !memmem(text, len, "<unk>", 5)));
    if (lossless) {
        size_t bl = 0;
        char *back = malloc(total + 1);
        if (tok_decode(t, ids, n, false, back, total + 1, &bl, &err) != KN_OK)
            abort();
        if (bl != len || memcmp(back, text, len) != 0)
            abort();
        free(back);
    }
    free(joined);
    free(streamed);
    free(ids);
    return 0;
}
