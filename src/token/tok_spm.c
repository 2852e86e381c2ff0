/* tok_spm.c: the SentencePiece-style tokenizer (tokenizer.ggml.model = "llama").
 *
 * The text (spaces already escaped to U+2581) starts as one symbol per UTF-8 character.
 * Every adjacent pair whose concatenation is a token is a candidate; the candidate whose
 * token has the highest score is merged first, ties going to the leftmost pair. Merging
 * makes new candidates with the neighbours. Candidates that went stale (a side was merged
 * away since) are skipped when they come up. A final symbol that is no token (a character
 * outside the vocabulary) is spelled with byte tokens <0xXX>, or the unknown token. */
#include "tok_internal.h"

#include <stdlib.h>

struct sym {
    int32_t prev, next;
    uint32_t off, len; /* len 0: merged into its left neighbour */
};

struct bigram {
    int32_t left, right;
    float score;
    uint32_t len;
};

/* True when a should be merged before b. */
static bool better(const struct bigram *a, const struct bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

struct heap {
    struct bigram *v;
    size_t n, cap;
};

static void heap_push(struct heap *h, struct bigram b)
{
    /* The capacity is sized up front (see tok_spm_encode), so this never grows. */
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!better(&b, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
}

static struct bigram heap_pop(struct heap *h)
{
    struct bigram top = h->v[0];
    struct bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && better(&h->v[c + 1], &h->v[c]))
            c++;
        if (!better(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

static void try_add(const struct tok *t, const char *text, const struct sym *syms, int32_t l,
                    int32_t r, struct heap *h)
{
    if (l < 0 || r < 0)
        return;
    uint32_t len = syms[l].len + syms[r].len;
    int32_t id = tok_find(t, text + syms[l].off, len);
    if (id == TOK_NULL)
        return;
    heap_push(h, (struct bigram){l, r, t->scores[id], len});
}

/* The length of the character at s: a whole UTF-8 sequence, or 1 for a byte that starts
 * none. (llama.cpp goes by the lead byte alone, so a stray byte there swallows the next
 * ones, which then no longer decode to what they were; only invalid UTF-8 differs.) */
static size_t seq_len(const uint8_t *s, size_t n)
{
    size_t l = s[0] < 0xC0 ? 1 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : s[0] < 0xF8 ? 4 : 1;
    if (l > n)
        return 1;
    for (size_t i = 1; i < l; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 1;
    return l;
}

bool tok_spm_encode(const struct tok *t, const char *text, size_t len, struct tok_ids *out)
{
    if (len == 0)
        return true;
    /* At most len symbols; at most len - 1 initial candidates plus 2 per merge (len - 1
     * merges at most). */
    struct sym *syms = malloc(len * sizeof *syms);
    struct heap h = {malloc(3 * len * sizeof *h.v), 0, 3 * len};
    if (!syms || !h.v) {
        free(syms);
        free(h.v);
        return false;
    }
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t l = seq_len((const uint8_t *)text + off, len - off);
        syms[n] = (struct sym){n - 1, -1, (uint32_t)off, (uint32_t)l};
        if (n > 0)
            syms[n - 1].next = n;
        n++;
        off += l;
    }
    for (int32_t i = 1; i < n; i++)
        try_add(t, text, syms, i - 1, i, &h);

    while (h.n > 0) {
        struct bigram b = heap_pop(&h);
        struct sym *L = &syms[b.left], *R = &syms[b.right];
        if (L->len == 0 || R->len == 0 || L->len + R->len != b.len)
            continue; /* stale */
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0)
            syms[R->next].prev = b.left;
        try_add(t, text, syms, L->prev, b.left, &h);
        try_add(t, text, syms, b.left, L->next, &h);
    }

    bool ok = true;
    for (int32_t i = 0; ok && i >= 0; i = syms[i].next) {
        const struct sym *s = &syms[i];
        int32_t id = tok_find(t, text + s->off, s->len);
        if (id != TOK_NULL) {
            ok = tok_ids_push(out, id);
            continue;
        }
        for (uint32_t k = 0; ok && k < s->len; k++) {
            int32_t b = t->byte_token[(uint8_t)text[s->off + k]];
            if (b == TOK_NULL)
                b = t->sp.unk;
            if (b != TOK_NULL)
                ok = tok_ids_push(out, b);
        }
    }
    free(syms);
    free(h.v);
    return ok;
}
