/* tok_wpm.c: WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp runs BERT-style
 * embedding models' vocabularies: the text is NFD-normalized, stripped of accents and
 * lower-cased (uncased BERT, as Hugging Face's BertNormalizer does); whitespace
 * separates words, and each punctuation mark, ASCII symbol and CJK ideograph is a word of
 * its own; control characters are dropped. Each word, with U+2581 in front (the converter
 * writes word-initial pieces that way and continuation pieces bare), is cut greedily into
 * the longest tokens from the left; a word that cannot be cut completely, or longer than
 * 100 characters, is the unknown token. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static bool is_whitespace(int32_t c)
{
    /* Unicode's White_Space property. */
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_cjk(int32_t c)
{
    /* The ranges of Hugging Face's BERT normalizer (its 0x2B920 start included). */
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

struct buf {
    char *v;
    size_t n, cap;
};

static bool buf_add(struct buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        char *q = realloc(b->v, cap);
        if (!q)
            return false;
        b->v = q;
        b->cap = cap;
    }
    memcpy(b->v + b->n, p, n);
    b->n += n;
    return true;
}

/* Hugging Face's WordPiece max_input_chars_per_word (BERT's value; the GGUF does not carry
 * it): a longer word is the unknown token whole. llama.cpp cuts such words into pieces;
 * Kinetic follows the tokenizer the model was trained with. */
#define WPM_MAX_WORD_CHARS 100

/* Cuts one word (U+2581 + word, in w[0..n)) into tokens, or the unknown token. */
static bool wpm_word(const struct tok *t, const char *w, size_t n, struct tok_ids *out)
{
    size_t start = out->n, chars = 0;
    for (size_t i = 3; i < n; i++)
        chars += ((unsigned char)w[i] & 0xC0) != 0x80; /* code points: lead bytes */
    if (chars > WPM_MAX_WORD_CHARS)
        n = 0; /* the loop below makes nothing: the unknown token */
    for (size_t i = 0; i < n;) {
        size_t j = n - i > t->max_text_len ? i + t->max_text_len : n;
        int32_t id = TOK_NULL;
        for (; j > i; j--)
            if ((id = tok_find(t, w + i, j - i)) != TOK_NULL)
                break;
        if (id == TOK_NULL) {
            out->n = start;
            break;
        }
        if (!tok_ids_push(out, id))
            return false;
        i = j;
    }
    if (out->n == start && t->sp.unk != TOK_NULL)
        return tok_ids_push(out, t->sp.unk);
    return true;
}

bool tok_wpm_encode(const struct tok *t, const char *text, size_t len, struct tok_ids *out)
{
    /* Invalid UTF-8 becomes U+FFFD (dropped below), so utf8proc sees valid text. */
    struct buf clean = {0}, word = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                              (utf8proc_ssize_t)(len - i), &c);
        if (l <= 0) {
            ok = buf_add(&clean, "\xEF\xBF\xBD", 3);
            i++;
        } else {
            ok = buf_add(&clean, text + i, (size_t)l);
            i += (size_t)l;
        }
    }
    uint8_t *nfd = NULL;
    utf8proc_ssize_t nl = 0;
    if (ok && clean.n > 0) {
        nl = utf8proc_map((const utf8proc_uint8_t *)clean.v, (utf8proc_ssize_t)clean.n, &nfd,
                          UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
        ok = nl >= 0;
    }
    ok = ok && buf_add(&word, "\xE2\x96\x81", 3);
    for (utf8proc_ssize_t i = 0; ok && i < nl;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t l = utf8proc_iterate(nfd + i, nl - i, &c);
        if (l <= 0)
            break; /* cannot happen: utf8proc wrote it */
        i += l;
        utf8proc_category_t cat = utf8proc_category(c);
        bool boundary = is_whitespace(c);
        /* Accents go (uncased BERT's strip_accents: the nonspacing marks NFD split off). */
        if (!boundary && (c == 0 || c == 0xFFFD || cat == UTF8PROC_CATEGORY_MN ||
                          cat == UTF8PROC_CATEGORY_CC ||
                          cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO ||
                          cat == UTF8PROC_CATEGORY_CS))
            continue;
        bool alone = !boundary && ((cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) ||
                                   (c < 0x7F && cat >= UTF8PROC_CATEGORY_SM &&
                                    cat <= UTF8PROC_CATEGORY_SO) ||
                                   is_cjk(c));
        if ((boundary || alone) && word.n > 3) {
            ok = wpm_word(t, word.v, word.n, out);
            word.n = 3;
        }
        if (boundary || !ok)
            continue;
        char u[4];
        size_t ul = tok_utf8_encode((uint32_t)utf8proc_tolower(c), u);
        ok = buf_add(&word, u, ul);
        if (ok && alone) {
            ok = wpm_word(t, word.v, word.n, out);
            word.n = 3;
        }
    }
    if (ok && word.n > 3)
        ok = wpm_word(t, word.v, word.n, out);
    free(nfd);
    free(clean.v);
    free(word.v);
    return ok;
}
