/* tok_bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * The text is cut into words by the pre-tokenizer's regexes (PCRE2, UTF + Unicode
 * properties, JIT). Each regex of a list applies to the pieces the previous one left:
 * the matches and the text between them both become pieces, as Hugging Face's "Isolated"
 * split does. Each word's bytes map to printable code points (GPT-2's byte encoder), one
 * symbol per byte; adjacent symbols merge by merge rank, lowest first, ties leftmost. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------------ byte encoder */

/* GPT-2 keeps the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF as their own code
 * points and moves the other 68 bytes, in order, to 256, 257, ... */
static bool byte_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t tok_bpe_byte_to_cpt(uint8_t b)
{
    if (byte_printable(b))
        return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++)
        k += !byte_printable(c);
    return 256 + k;
}

int tok_bpe_cpt_to_byte(uint32_t cpt)
{
    if (cpt < 256)
        return byte_printable(cpt) ? (int)cpt : -1;
    if (cpt >= 256 + 68)
        return -1;
    uint32_t k = 0;
    for (unsigned c = 0; c < 256; c++)
        if (!byte_printable(c) && k++ == cpt - 256)
            return (int)c;
    return -1;
}

/* ------------------------------------------------------------------ pre-tokenizers */

/* The regexes of each pre-tokenizer, in PCRE2 syntax, from the tokenizer.json files of
 * those models as llama.cpp adapts them (a sequence of regexes where Hugging Face chains
 * several pre-tokenizers). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                               \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"      \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                               \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"    \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Cased letters as DeepSeek LLM's tokenizer lists them. */
#define RE_DEEPSEEK_LETTERS                                                                     \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-"      \
    "\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}"      \
    "\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}"    \
    "\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}"   \
    "\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-"          \
    "\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}"  \
    "\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-" \
    "\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-" \
    "\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}"   \
    "\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"  \
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-"  \
    "\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-"  \
    "\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-" \
    "\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"    \
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"
#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

struct pre_def {
    const char *names; /* space-separated aliases */
    const char *re[TOK_MAX_REGEX];
    bool ignore_merges;
    bool add_bos;
    bool nfc;
};

static const struct pre_def pre_defs[] = {
    {"default",
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false, false},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2", {RE_LLAMA3}, true, true,
     false},
    {"dbrx smaug-bpe chatglm-bpe glm4", {RE_LLAMA3}, false, false, false},
    {"qwen2 deepseek-r1-qwen megrez", {RE_QWEN2}, false, false, true},
    {"stablelm2 hunyuan", {RE_QWEN2}, false, false, false},
    {"gpt-2 phi-2 mpt olmo jais jina-es jina-de jina-v2-es jina-v2-de gigachat exaone4 trillion "
     "granite-docling a.x-4.0 mellum",
     {RE_GPT2}, false, false, false},
    {"starcoder refact command-r smollm codeshell exaone minerva-7b", {"\\p{N}", RE_GPT2}, false,
     false, false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false, false},
    {"deepseek-llm",
     {"[\\r\\n]", RE_DEEPSEEK_LETTERS,
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      "\\s+$", RE_CJK, "\\p{N}+"},
     false, false, false},
    {"deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}, false, false,
     false},
    {"gpt-4o llama4 minimax-m2", {RE_GPT4O}, false, false, false},
};

static bool name_in(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = names; *p;) {
        const char *e = strchr(p, ' ');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && memcmp(p, name, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

/* ------------------------------------------------------------------ merges */

static uint32_t merge_hash(const char *l, size_t ll, const char *r, size_t rl)
{
    return tok_hash_bytes(r, rl, tok_hash_bytes(l, ll, 0x5bd1e995u));
}

/* The rank of merging (l, r), or -1. */
static int32_t merge_rank(const struct tok *t, const char *l, size_t ll, const char *r, size_t rl)
{
    uint32_t i = merge_hash(l, ll, r, rl) & t->merge_mask;
    for (;;) {
        uint32_t e = t->merge_table[i];
        if (e == 0)
            return -1;
        const struct tok_merge *m = &t->merges[e - 1];
        const char *s = t->merge_blob + m->off;
        if (m->left_len == ll && m->right_len == rl && memcmp(s, l, ll) == 0 &&
            memcmp(s + ll, r, rl) == 0)
            return (int32_t)(e - 1);
        i = (i + 1) & t->merge_mask;
    }
}

enum kn_status tok_bpe_init(struct tok *t, const struct gguf_file *f, struct kn_err *err)
{
    const struct pre_def *def = NULL;
    for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0] && !def; i++)
        if (name_in(pre_defs[i].names, t->pre_name))
            def = &pre_defs[i];
    if (!def)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "unsupported pre-tokenizer '%s' (tokenizer.ggml.pre); this build knows "
                       "default, llama3, qwen2, gpt-2, mpt, starcoder, refact, command-r, falcon, "
                       "deepseek-llm, deepseek-coder, gpt-4o and their aliases",
                       t->pre_name);
    t->ignore_merges = def->ignore_merges;
    t->nfc = def->nfc;
    t->sp.add_bos = def->add_bos;
    t->sp.add_space_prefix = false;

    for (int i = 0; i < TOK_MAX_REGEX && def->re[i]; i++) {
        int code;
        PCRE2_SIZE at;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
                                           PCRE2_DOLLAR_ENDONLY,
                                       &code, &at, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            return kn_fail(err, KN_E_INTERNAL, "pre-tokenizer '%s' regex %d does not compile at %zu: %s",
                           t->pre_name, i, (size_t)at, (const char *)msg);
        }
        /* Without JIT the interpreter gives the same matches, only slower. */
        if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0)
            kn_log(KN_LOG_DEBUG, "PCRE2 JIT unavailable for pre-tokenizer '%s'", t->pre_name);
        t->regex[t->n_regex++] = re;
    }

    const struct gguf_value *merges = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_T_STRING);
    if (!merges)
        return kn_fail(err, KN_E_FORMAT,
                       "tokenizer.ggml.merges is missing or not a string array; a gpt2 "
                       "tokenizer needs it");
    if (merges->v.arr.n > (1u << 24))
        return kn_fail(err, KN_E_FORMAT, "tokenizer.ggml.merges has %llu entries (too many)",
                       (unsigned long long)merges->v.arr.n);
    size_t n = (size_t)merges->v.arr.n;
    size_t blob = 0;
    for (size_t i = 0; i < n; i++) {
        if (merges->v.arr.strs[i].len > (1u << 16))
            return kn_fail(err, KN_E_FORMAT, "merge %zu is too long", i);
        blob += (size_t)merges->v.arr.strs[i].len;
    }
    t->merge_blob = kn_malloc(blob ? blob : 1, err);
    t->merges = kn_calloc(n ? n : 1, sizeof *t->merges, err);
    uint32_t cap = 1024;
    while (cap < 2 * n)
        cap *= 2;
    t->merge_table = kn_calloc(cap, sizeof *t->merge_table, err);
    if (!t->merge_blob || !t->merges || !t->merge_table)
        return KN_E_NOMEM;
    t->merge_mask = cap - 1;
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const struct gguf_str *s = &merges->v.arr.strs[i];
        /* "left right": split at the first space after the first byte. */
        const char *sp = s->len > 1 ? memchr(s->data + 1, ' ', (size_t)s->len - 1) : NULL;
        if (!sp)
            return kn_fail(err, KN_E_FORMAT, "merge %zu ('%.*s') is not 'left right'", i,
                           (int)(s->len > 40 ? 40 : s->len), s->data);
        size_t ll = (size_t)(sp - s->data), rl = (size_t)s->len - ll - 1;
        struct tok_merge *m = &t->merges[t->n_merges];
        m->off = (uint32_t)pos;
        m->left_len = (uint32_t)ll;
        m->right_len = (uint32_t)rl;
        memcpy(t->merge_blob + pos, s->data, ll);
        memcpy(t->merge_blob + pos + ll, sp + 1, rl);
        /* The first of duplicate merges keeps its rank. */
        if (merge_rank(t, s->data, ll, sp + 1, rl) >= 0)
            continue;
        pos += ll + rl;
        uint32_t h = merge_hash(s->data, ll, sp + 1, rl) & t->merge_mask;
        while (t->merge_table[h])
            h = (h + 1) & t->merge_mask;
        t->merge_table[h] = ++t->n_merges;
    }
    return KN_OK;
}

void tok_bpe_free(struct tok *t)
{
    for (int i = 0; i < t->n_regex; i++)
        pcre2_code_free(t->regex[i]);
    t->n_regex = 0;
    free(t->merges);
    free(t->merge_blob);
    free(t->merge_table);
}

/* ------------------------------------------------------------------ splitting */

struct span {
    size_t off, len;
};

struct spans {
    struct span *v;
    size_t n, cap;
};

static bool spans_push(struct spans *s, size_t off, size_t len)
{
    if (len == 0)
        return true;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        struct span *p = realloc(s->v, cap * sizeof *p);
        if (!p)
            return false;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = (struct span){off, len};
    return true;
}

/* Cuts each piece of cur at the matches of re; matches and the gaps between them both
 * become pieces of out. Each piece is matched on its own: lookarounds end at its edges. */
static bool split_regex(const pcre2_code *re, pcre2_match_data *md, const char *text,
                        const struct spans *cur, struct spans *out)
{
    for (size_t i = 0; i < cur->n; i++) {
        PCRE2_SPTR s = (PCRE2_SPTR)(text + cur->v[i].off);
        size_t len = cur->v[i].len, base = cur->v[i].off;
        size_t pos = 0, last = 0;
        while (pos < len) {
            int rc = pcre2_match(re, s, len, pos, 0, md, NULL);
            if (rc < 0)
                break; /* no more matches (resource errors also end the piece's matches) */
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t a = ov[0], b = ov[1];
            if (!spans_push(out, base + last, a - last) || !spans_push(out, base + a, b - a))
                return false;
            last = b;
            /* An empty match moves on by one character. */
            if (b > a)
                pos = b;
            else if (b < len)
                pos = b + tok_utf8_len(s[b]);
            else
                break;
        }
        if (last < len && !spans_push(out, base + last, len - last))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------ BPE merging */

struct sym {
    int32_t prev, next;
    uint32_t off, len;
};

struct bigram {
    int32_t left, right;
    int32_t rank;
    uint32_t len;
};

static bool better(const struct bigram *a, const struct bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

struct heap {
    struct bigram *v;
    size_t n;
};

static void heap_push(struct heap *h, struct bigram b)
{
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

static void try_add(const struct tok *t, const char *w, const struct sym *syms, int32_t l,
                    int32_t r, struct heap *h)
{
    if (l < 0 || r < 0)
        return;
    int32_t rank = merge_rank(t, w + syms[l].off, syms[l].len, w + syms[r].off, syms[r].len);
    if (rank < 0)
        return;
    heap_push(h, (struct bigram){l, r, rank, syms[l].len + syms[r].len});
}

/* Workspace reused across the words of one call. */
struct work {
    char *word;        /* the byte-encoded word */
    struct sym *syms;
    struct heap heap;
    size_t cap;        /* bytes of the raw word the buffers can hold */
};

static bool work_reserve(struct work *w, size_t n)
{
    if (n <= w->cap)
        return true;
    size_t cap = n < 64 ? 64 : n;
    char *word = realloc(w->word, 2 * cap);
    if (word)
        w->word = word;
    struct sym *syms = realloc(w->syms, cap * sizeof *syms);
    if (syms)
        w->syms = syms;
    struct bigram *hv = realloc(w->heap.v, 3 * cap * sizeof *hv);
    if (hv)
        w->heap.v = hv;
    if (!word || !syms || !hv)
        return false;
    w->cap = cap;
    return true;
}

static bool bpe_word(const struct tok *t, const uint8_t *raw, size_t n, struct work *w,
                     struct tok_ids *out)
{
    if (!work_reserve(w, n))
        return false;
    /* One symbol per raw byte, holding the byte's code point in UTF-8 (1 or 2 bytes). */
    char *enc = w->word;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = tok_utf8_encode(tok_bpe_byte_to_cpt(raw[i]), enc + m);
        w->syms[i] = (struct sym){(int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, (uint32_t)m,
                                  (uint32_t)l};
        m += l;
    }
    if (t->ignore_merges) {
        int32_t id = tok_find(t, enc, m);
        if (id != TOK_NULL)
            return tok_ids_push(out, id);
    }
    struct sym *syms = w->syms;
    struct heap *h = &w->heap;
    h->n = 0;
    for (size_t i = 1; i < n; i++)
        try_add(t, enc, syms, (int32_t)i - 1, (int32_t)i, h);
    while (h->n > 0) {
        struct bigram b = heap_pop(h);
        struct sym *L = &syms[b.left], *R = &syms[b.right];
        if (L->len == 0 || R->len == 0 || L->len + R->len != b.len)
            continue; /* stale */
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0)
            syms[R->next].prev = b.left;
        try_add(t, enc, syms, L->prev, b.left, h);
        try_add(t, enc, syms, b.left, L->next, h);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        int32_t id = tok_find(t, enc + syms[i].off, syms[i].len);
        if (id != TOK_NULL) {
            if (!tok_ids_push(out, id))
                return false;
            continue;
        }
        /* A symbol outside the vocabulary (a broken vocabulary): its bytes one by one,
         * as llama.cpp does; bytes with no token are dropped. */
        for (uint32_t k = 0; k < syms[i].len; k++) {
            id = tok_find(t, enc + syms[i].off + k, 1);
            if (id != TOK_NULL && !tok_ids_push(out, id))
                return false;
        }
    }
    return true;
}

bool tok_bpe_encode(const struct tok *t, const char *text, size_t len, struct tok_ids *out)
{
    if (len == 0)
        return true;
    /* Hugging Face's Qwen2 tokenizer normalizes to NFC first. Invalid UTF-8 cannot be
     * normalized and is tokenized as it is. */
    uint8_t *nfc = NULL;
    if (t->nfc) {
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len,
                                          &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r >= 0) {
            text = (const char *)nfc;
            len = (size_t)r;
        } else {
            free(nfc);
            nfc = NULL;
        }
    }
    struct spans a = {0}, b = {0};
    struct work w = {0};
    pcre2_match_data *md = NULL;
    bool ok = spans_push(&a, 0, len);
    for (int i = 0; ok && i < t->n_regex; i++) {
        md = md ? md : pcre2_match_data_create(4, NULL);
        ok = md != NULL;
        b.n = 0;
        ok = ok && split_regex(t->regex[i], md, text, &a, &b);
        struct spans tmp = a;
        a = b;
        b = tmp;
    }
    for (size_t i = 0; ok && i < a.n; i++)
        ok = bpe_word(t, (const uint8_t *)text + a.v[i].off, a.v[i].len, &w, out);
    pcre2_match_data_free(md);
    free(a.v);
    free(b.v);
    free(w.word);
    free(w.syms);
    free(w.heap.v);
    free(nfc);
    return ok;
}
