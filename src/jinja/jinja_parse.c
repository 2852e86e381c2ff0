/* jinja_parse.c: the Jinja lexer and parser, following jinja2 3.1's rules for whitespace
 * control (trim_blocks and lstrip_blocks on, as transformers sets them), string escapes,
 * number literals and operator precedence. Produces a syntax tree in the template arena. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, gmtime_r */
#endif
#include "jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ arena ============ */

struct jarena_chunk {
    struct jarena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void *jarena_alloc(struct jarena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    struct jarena_chunk *c = a->head;
    if (!c || c->size - c->used < size) {
        size_t want = size > 65536 ? size : 65536;
        size_t total;
        if (a->failed || !kn_add_size(a->used, want, &total) || total > a->cap) {
            a->over_cap = !a->failed;
            a->failed = true;
            return NULL;
        }
        c = malloc(sizeof(*c) + want);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->size = want;
        c->used = 0;
        a->used += want; /* counts whole chunks: what the process really holds */
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    return p;
}

void jarena_free(struct jarena *a)
{
    struct jarena_chunk *c = a->head;
    while (c) {
        struct jarena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->used = 0;
}

void jinja_limits_fill(struct jinja_limits *out, const struct jinja_limits *in)
{
    struct jinja_limits d = {1u << 20, 256, 1000000, 16u << 20, 256u << 20, JINJA_MAX_WORK};
    if (in) {
        if (in->max_source) d.max_source = in->max_source;
        if (in->max_depth) d.max_depth = in->max_depth;
        if (in->max_iterations) d.max_iterations = in->max_iterations;
        if (in->max_output) d.max_output = in->max_output;
        if (in->max_memory) d.max_memory = in->max_memory;
        if (in->max_work) d.max_work = in->max_work;
    }
    *out = d;
}

/* ================================================================ lexer ============ */

enum tk { TK_EOF, TK_DATA, TK_VBEGIN, TK_VEND, TK_BBEGIN, TK_BEND, TK_NAME, TK_STRING,
          TK_INT, TK_FLOAT, TK_OP };
/* Operators: single characters are their own code; doubled ones get codes above 255. */
enum { OP_FLOORDIV = 256, OP_POW, OP_EQ, OP_NE, OP_LE, OP_GE };

struct tok {
    uint8_t t;
    int op;
    uint32_t line, col;
    const char *p; /* TK_NAME: the name in the source; TK_DATA: unused */
    size_t n;
    struct jstr *s; /* TK_STRING, TK_DATA: decoded text */
    int64_t i;
    double f;
};

struct lexer {
    const char *src;
    size_t len, pos;
    struct tok *toks;
    size_t ntoks, cap;
    struct jarena *arena;
    struct kn_err *err;
    struct jinja_diag *diag;
    /* line/column cache: monotone scanning */
    size_t lc_pos;
    uint32_t lc_line, lc_col;
};

static void linecol(struct lexer *lx, size_t pos, uint32_t *line, uint32_t *col)
{
    if (pos < lx->lc_pos) {
        lx->lc_pos = 0;
        lx->lc_line = 1;
        lx->lc_col = 1;
    }
    while (lx->lc_pos < pos) {
        if (lx->src[lx->lc_pos] == '\n') {
            lx->lc_line++;
            lx->lc_col = 1;
        } else if (((unsigned char)lx->src[lx->lc_pos] & 0xC0) != 0x80) {
            lx->lc_col++;
        }
        lx->lc_pos++;
    }
    *line = lx->lc_line;
    *col = lx->lc_col;
}

static enum kn_status syntax_at(struct kn_err *err, struct jinja_diag *diag, uint32_t line,
                                uint32_t col, const char *fmt, ...) KN_PRINTF(5, 6);
static enum kn_status syntax_at(struct kn_err *err, struct jinja_diag *diag, uint32_t line,
                                uint32_t col, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (diag) {
        diag->kind = JINJA_ERR_SYNTAX;
        diag->line = (int)line;
        diag->column = (int)col;
        snprintf(diag->message, sizeof diag->message, "%.500s", msg);
    }
    return kn_fail(err, KN_E_FORMAT, "template syntax error at line %u, column %u: %s",
                   (unsigned)line, (unsigned)col, msg);
}

static enum kn_status lex_fail(struct lexer *lx, size_t pos, const char *msg)
{
    uint32_t l, c;
    linecol(lx, pos, &l, &c);
    return syntax_at(lx->err, lx->diag, l, c, "%s", msg);
}

struct jstr *jstr_make(struct jarena *a, const char *p, size_t n)
{
    size_t sz;
    if (!kn_add_size(sizeof(struct jstr) + 1, n, &sz))
        return NULL;
    struct jstr *s = jarena_alloc(a, sz);
    if (!s)
        return NULL;
    s->n = n;
    if (n)
        memcpy(s->p, p, n);
    s->p[n] = 0;
    return s;
}

static struct tok *push_tok(struct lexer *lx, int t, size_t pos)
{
    if (lx->ntoks == lx->cap) {
        size_t nc = lx->cap ? lx->cap * 2 : 256;
        struct tok *nt = realloc(lx->toks, nc * sizeof(*nt));
        if (!nt) {
            kn_fail(lx->err, KN_E_NOMEM, "out of memory lexing a template");
            return NULL;
        }
        lx->toks = nt;
        lx->cap = nc;
    }
    struct tok *tk = &lx->toks[lx->ntoks++];
    memset(tk, 0, sizeof(*tk));
    tk->t = (uint8_t)t;
    linecol(lx, pos, &tk->line, &tk->col);
    return tk;
}

static bool is_ws(char c)
{
    /* Python's \s and str.isspace() on ASCII: also the separators \x1c-\x1f */
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}
static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static enum kn_status emit_data(struct lexer *lx, size_t start, size_t end)
{
    if (end <= start)
        return KN_OK;
    struct tok *tk = push_tok(lx, TK_DATA, start);
    if (!tk)
        return KN_E_NOMEM;
    tk->s = jstr_make(lx->arena, lx->src + start, end - start);
    if (!tk->s)
        return kn_fail(lx->err, KN_E_NOMEM, "out of memory lexing a template");
    return KN_OK;
}

/* Appends a code point as UTF-8 to buf (room for 4 bytes). */
static size_t put_utf8(char *buf, uint32_t cp)
{
    if (cp < 0x80) {
        buf[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        buf[0] = (char)(0xC0 | (cp >> 6));
        buf[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        buf[0] = (char)(0xE0 | (cp >> 12));
        buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    buf[0] = (char)(0xF0 | (cp >> 18));
    buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    buf[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Lexes a string literal at lx->pos (quote char there), decoding escapes the way jinja2
 * does (Python's unicode-escape codec: unknown escapes stay as written). */
static enum kn_status lex_string(struct lexer *lx)
{
    size_t start = lx->pos;
    char q = lx->src[start];
    size_t i = start + 1;
    /* find the end: a quote not escaped */
    while (i < lx->len && lx->src[i] != q) {
        if (lx->src[i] == '\\')
            i++;
        i++;
    }
    if (i >= lx->len)
        return lex_fail(lx, start, "unexpected end of string literal");
    size_t body = start + 1, end = i;
    char *buf = malloc(end - body + 1);
    if (!buf)
        return kn_fail(lx->err, KN_E_NOMEM, "out of memory lexing a template");
    size_t o = 0;
    for (size_t k = body; k < end;) {
        char c = lx->src[k];
        if (c != '\\' || k + 1 >= end) {
            buf[o++] = c;
            k++;
            continue;
        }
        char e = lx->src[k + 1];
        size_t used = 2;
        switch (e) {
        case '\n': break; /* line continuation */
        case '\\': buf[o++] = '\\'; break;
        case '\'': buf[o++] = '\''; break;
        case '"': buf[o++] = '"'; break;
        case 'a': buf[o++] = '\a'; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'n': buf[o++] = '\n'; break;
        case 'r': buf[o++] = '\r'; break;
        case 't': buf[o++] = '\t'; break;
        case 'v': buf[o++] = '\v'; break;
        case 'N':
            free(buf);
            return lex_fail(lx, k, "\\N{...} escapes in strings are not supported");
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < nd; d++) {
                int h = k + 2 + (size_t)d < end ? hexval(lx->src[k + 2 + d]) : -1;
                if (h < 0) {
                    free(buf);
                    return lex_fail(lx, k, "truncated \\x, \\u or \\U escape in a string");
                }
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                free(buf);
                return lex_fail(lx, k, "escape in a string is not a valid Unicode scalar value");
            }
            used = 2 + (size_t)nd;
            o += put_utf8(buf + o, cp); /* an escape is at least 4 source bytes for 4 out */
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = 0;
                size_t d = 0;
                while (d < 3 && k + 1 + d < end && lx->src[k + 1 + d] >= '0' &&
                       lx->src[k + 1 + d] <= '7') {
                    cp = cp * 8 + (uint32_t)(lx->src[k + 1 + d] - '0');
                    d++;
                }
                used = 1 + d;
                if (cp < 0x80 || used >= 3) {
                    o += put_utf8(buf + o, cp);
                } else { /* "\40" (3 bytes) may become 2 bytes: fine; keep room rule */
                    o += put_utf8(buf + o, cp);
                }
            } else {
                buf[o++] = '\\';
                buf[o++] = e;
            }
        }
        k += used;
    }
    struct tok *tk = push_tok(lx, TK_STRING, start);
    if (!tk) {
        free(buf);
        return KN_E_NOMEM;
    }
    tk->s = jstr_make(lx->arena, buf, o);
    free(buf);
    if (!tk->s)
        return kn_fail(lx->err, KN_E_NOMEM, "out of memory lexing a template");
    lx->pos = end + 1;
    return KN_OK;
}

/* digits with '_' separators: (\d+_)*\d+ ; returns the end or start when none */
static size_t scan_digits(const char *s, size_t i, size_t len)
{
    size_t j = i;
    if (j >= len || s[j] < '0' || s[j] > '9')
        return i;
    while (j < len) {
        if (s[j] >= '0' && s[j] <= '9') {
            j++;
        } else if (s[j] == '_' && j + 1 < len && s[j + 1] >= '0' && s[j + 1] <= '9') {
            j++;
        } else {
            break;
        }
    }
    return j;
}

static enum kn_status lex_number(struct lexer *lx)
{
    const char *s = lx->src;
    size_t start = lx->pos, len = lx->len;
    size_t j = scan_digits(s, start, len);
    bool is_float = false;
    size_t end = j;
    /* 0b/0o/0x integers */
    if (s[start] == '0' && start + 2 < len + 1 && start + 1 < len &&
        (s[start + 1] == 'b' || s[start + 1] == 'B' || s[start + 1] == 'o' || s[start + 1] == 'O' ||
         s[start + 1] == 'x' || s[start + 1] == 'X')) {
        int base = (s[start + 1] | 32) == 'b' ? 2 : (s[start + 1] | 32) == 'o' ? 8 : 16;
        size_t k = start + 2;
        uint64_t v = 0;
        bool any = false;
        while (k < len) {
            if (s[k] == '_' && any && k + 1 < len) { k++; continue; }
            int d = hexval(s[k]);
            if (d < 0 || d >= base)
                break;
            if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base || v * (uint64_t)base + (uint64_t)d > INT64_MAX)
                return lex_fail(lx, start, "integer literal does not fit in 64 bits");
            v = v * (uint64_t)base + (uint64_t)d;
            any = true;
            k++;
        }
        if (any) {
            struct tok *tk = push_tok(lx, TK_INT, start);
            if (!tk)
                return KN_E_NOMEM;
            tk->i = (int64_t)v;
            lx->pos = k;
            return KN_OK;
        }
    }
    /* fraction */
    if (end < len && s[end] == '.') {
        size_t f = scan_digits(s, end + 1, len);
        if (f > end + 1) {
            end = f;
            is_float = true;
        }
    }
    /* exponent */
    if (end < len && (s[end] == 'e' || s[end] == 'E')) {
        size_t k = end + 1;
        if (k < len && (s[k] == '+' || s[k] == '-'))
            k++;
        size_t f = scan_digits(s, k, len);
        if (f > k) {
            end = f;
            is_float = true;
        }
    }
    if (!is_float && s[start] == '0') {
        /* jinja2's integers: "0" (or 0_0...) alone; a leading zero ends the literal */
        end = start + 1;
        while (end + 1 < len && s[end] == '_' && s[end + 1] == '0')
            end += 2;
        while (end < len && s[end] == '0')
            end++;
    }
    char buf[128];
    size_t o = 0;
    for (size_t k = start; k < end; k++) {
        if (s[k] == '_')
            continue;
        if (o + 1 >= sizeof buf)
            return lex_fail(lx, start, "number literal too long");
        buf[o++] = s[k];
    }
    buf[o] = 0;
    struct tok *tk = push_tok(lx, is_float ? TK_FLOAT : TK_INT, start);
    if (!tk)
        return KN_E_NOMEM;
    if (is_float) {
        tk->f = strtod(buf, NULL);
    } else {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno == ERANGE)
            return lex_fail(lx, start, "integer literal does not fit in 64 bits");
        tk->i = v;
    }
    lx->pos = end;
    return KN_OK;
}

/* Lexes the inside of {{ }} or {% %} up to its end tag. Returns the end tag's kind via
 * *strip_after ('-' strips following whitespace, 't' = trim one newline). */
static enum kn_status lex_tag(struct lexer *lx, bool block)
{
    int balance[256];
    size_t nbal = 0;
    const char *s = lx->src;
    for (;;) {
        size_t p = lx->pos;
        if (p >= lx->len)
            return lex_fail(lx, p, block ? "unexpected end of template, expected '%}'"
                                         : "unexpected end of template, expected '}}'");
        /* end tag (only when brackets are balanced) */
        if (nbal == 0) {
            char e = block ? '%' : '}';
            size_t q = p;
            char sign = 0;
            if ((s[q] == '-' || (block && s[q] == '+')) && q + 2 < lx->len + 0 &&
                s[q + 1] == e && s[q + 2] == '}') {
                sign = s[q];
                q++;
            }
            if (q + 1 < lx->len && s[q] == e && s[q + 1] == '}') {
                struct tok *tk = push_tok(lx, block ? TK_BEND : TK_VEND, p);
                if (!tk)
                    return KN_E_NOMEM;
                q += 2;
                if (sign == '-') {
                    while (q < lx->len && is_ws(s[q]))
                        q++;
                } else if (sign == 0 && block && q < lx->len && s[q] == '\n') {
                    q++; /* trim_blocks */
                }
                lx->pos = q;
                return KN_OK;
            }
        }
        char c = s[p];
        if (is_ws(c)) {
            lx->pos++;
            continue;
        }
        if (c == '\'' || c == '"') {
            enum kn_status st = lex_string(lx);
            if (st)
                return st;
            continue;
        }
        if (c >= '0' && c <= '9') {
            enum kn_status st = lex_number(lx);
            if (st)
                return st;
            continue;
        }
        if (is_name_start(c)) {
            size_t e = p;
            while (e < lx->len && is_name_char(s[e]))
                e++;
            struct tok *tk = push_tok(lx, TK_NAME, p);
            if (!tk)
                return KN_E_NOMEM;
            tk->p = s + p;
            tk->n = e - p;
            lx->pos = e;
            continue;
        }
        int op = 0;
        size_t w = 1;
        char c2 = p + 1 < lx->len ? s[p + 1] : 0;
        if (c == '/' && c2 == '/') { op = OP_FLOORDIV; w = 2; }
        else if (c == '*' && c2 == '*') { op = OP_POW; w = 2; }
        else if (c == '=' && c2 == '=') { op = OP_EQ; w = 2; }
        else if (c == '!' && c2 == '=') { op = OP_NE; w = 2; }
        else if (c == '<' && c2 == '=') { op = OP_LE; w = 2; }
        else if (c == '>' && c2 == '=') { op = OP_GE; w = 2; }
        else if (strchr("+-/*%~[](){}<>=.:|,;", c)) op = c;
        if (!op) {
            char m[64];
            if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
                snprintf(m, sizeof m, "unexpected char '%c'", c);
            else
                snprintf(m, sizeof m, "unexpected byte 0x%02x", (unsigned char)c);
            return lex_fail(lx, p, m);
        }
        if (op == '(' || op == '[' || op == '{') {
            if (nbal == sizeof balance / sizeof balance[0])
                return lex_fail(lx, p, "brackets nested too deeply");
            balance[nbal++] = op == '(' ? ')' : op == '[' ? ']' : '}';
        } else if (op == ')' || op == ']' || op == '}') {
            if (nbal == 0) {
                char m[32];
                snprintf(m, sizeof m, "unexpected '%c'", c);
                return lex_fail(lx, p, m);
            }
            if (balance[nbal - 1] != op) {
                char m[48];
                snprintf(m, sizeof m, "unexpected '%c', expected '%c'", c, balance[nbal - 1]);
                return lex_fail(lx, p, m);
            }
            nbal--;
        }
        struct tok *tk = push_tok(lx, TK_OP, p);
        if (!tk)
            return KN_E_NOMEM;
        tk->op = op;
        lx->pos = p + w;
    }
}

/* Is the text at p "{%[-+]? raw [-]?%}"? Returns the end of the tag (after trimming) and the
 * sign, or 0. */
static size_t match_raw(struct lexer *lx, size_t p, char *sign)
{
    const char *s = lx->src;
    size_t q = p + 2;
    *sign = 0;
    if (q < lx->len && (s[q] == '-' || s[q] == '+'))
        *sign = s[q++];
    while (q < lx->len && is_ws(s[q]))
        q++;
    if (q + 3 > lx->len || memcmp(s + q, "raw", 3) != 0)
        return 0;
    q += 3;
    while (q < lx->len && is_ws(s[q]))
        q++;
    if (q + 3 <= lx->len && s[q] == '-' && s[q + 1] == '%' && s[q + 2] == '}') {
        q += 3;
        while (q < lx->len && is_ws(s[q]))
            q++;
        return q;
    }
    if (q + 2 <= lx->len && s[q] == '%' && s[q + 1] == '}')
        return q + 2; /* jinja2 applies no trim_blocks after {% raw %} */
    return 0;
}

/* Strips data before a tag according to its sign and lstrip_blocks. */
static size_t strip_before(struct lexer *lx, size_t start, size_t end, char sign, bool is_var,
                           bool line_starting)
{
    const char *s = lx->src;
    if (sign == '-') {
        while (end > start && is_ws(s[end - 1]))
            end--;
        return end;
    }
    if (sign != '+' && !is_var) {
        size_t l = end;
        while (l > start && s[l - 1] != '\n')
            l--;
        bool at_line = l > start || line_starting;
        if (at_line && l < end) {
            bool all_ws = true;
            for (size_t k = l; k < end; k++)
                if (!is_ws(s[k])) {
                    all_ws = false;
                    break;
                }
            if (all_ws)
                return l;
        }
    }
    return end;
}

static enum kn_status lex_all(struct lexer *lx)
{
    const char *s = lx->src;
    bool line_starting = true;
    while (lx->pos < lx->len) {
        size_t start = lx->pos;
        /* next tag start */
        size_t p = start;
        int kind = 0; /* '{' var, '%' block, '#' comment */
        while (p + 1 < lx->len) {
            if (s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')) {
                kind = s[p + 1];
                break;
            }
            p++;
        }
        if (!kind) {
            enum kn_status st = emit_data(lx, start, lx->len);
            if (st)
                return st;
            lx->pos = lx->len;
            break;
        }
        char sign = 0;
        if (p + 2 < lx->len && (s[p + 2] == '-' || s[p + 2] == '+'))
            sign = s[p + 2];
        size_t dend = strip_before(lx, start, p, sign, kind == '{', line_starting);
        enum kn_status st = emit_data(lx, start, dend);
        if (st)
            return st;
        size_t after = p + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t q = after;
            for (;;) {
                if (q + 1 >= lx->len)
                    return lex_fail(lx, p, "missing end of comment tag");
                if (s[q] == '#' && s[q + 1] == '}')
                    break;
                q++;
            }
            char esign = (q > after && (s[q - 1] == '-' || s[q - 1] == '+')) ? s[q - 1] : 0;
            q += 2;
            if (esign == '-') {
                while (q < lx->len && is_ws(s[q]))
                    q++;
            } else if (esign == 0 && q < lx->len && s[q] == '\n') {
                q++;
            }
            line_starting = s[q - 1] == '\n';
            lx->pos = q;
            continue;
        }
        if (kind == '%') {
            char rsign;
            size_t rend = match_raw(lx, p, &rsign);
            if (rend) {
                /* raw: data up to {% endraw %} */
                size_t q = rend;
                for (;;) {
                    if (q + 1 >= lx->len)
                        return lex_fail(lx, p, "missing end of raw directive");
                    if (s[q] == '{' && s[q + 1] == '%') {
                        size_t k = q + 2;
                        char esign = 0;
                        if (k < lx->len && (s[k] == '-' || s[k] == '+'))
                            esign = s[k++];
                        while (k < lx->len && is_ws(s[k]))
                            k++;
                        if (k + 6 <= lx->len && memcmp(s + k, "endraw", 6) == 0) {
                            k += 6;
                            while (k < lx->len && is_ws(s[k]))
                                k++;
                            char tsign = 0;
                            if (k < lx->len && (s[k] == '-' || s[k] == '+'))
                                tsign = s[k++];
                            if (k + 1 < lx->len && s[k] == '%' && s[k + 1] == '}') {
                                k += 2;
                                size_t de = strip_before(lx, rend, q, esign, false, false);
                                st = emit_data(lx, rend, de);
                                if (st)
                                    return st;
                                if (tsign == '-') {
                                    while (k < lx->len && is_ws(s[k]))
                                        k++;
                                } else if (tsign == 0 && k < lx->len && s[k] == '\n') {
                                    k++;
                                }
                                line_starting = s[k - 1] == '\n';
                                lx->pos = k;
                                break;
                            }
                        }
                    }
                    q++;
                }
                continue;
            }
        }
        struct tok *tk = push_tok(lx, kind == '%' ? TK_BBEGIN : TK_VBEGIN, p);
        if (!tk)
            return KN_E_NOMEM;
        lx->pos = after;
        st = lex_tag(lx, kind == '%');
        if (st)
            return st;
        line_starting = lx->pos > 0 && s[lx->pos - 1] == '\n';
    }
    struct tok *tk = push_tok(lx, TK_EOF, lx->len);
    return tk ? KN_OK : KN_E_NOMEM;
}

/* ================================================================ parser =========== */

struct parser {
    struct tok *t;
    size_t i, n;
    struct jarena *arena;
    struct kn_err *err;
    struct jinja_diag *diag;
    size_t depth, max_depth;
    size_t loops; /* for-loop bodies around the current statement (break/continue) */
};

static struct tok *cur(struct parser *ps) { return &ps->t[ps->i]; }
static struct tok *peek(struct parser *ps, size_t k)
{
    return ps->i + k < ps->n ? &ps->t[ps->i + k] : &ps->t[ps->n - 1];
}

static enum kn_status perr(struct parser *ps, struct tok *tk, const char *fmt, ...)
    KN_PRINTF(3, 4);
static enum kn_status perr(struct parser *ps, struct tok *tk, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return syntax_at(ps->err, ps->diag, tk->line, tk->col, "%s", msg);
}

static bool is_name(struct tok *tk, const char *name)
{
    return tk->t == TK_NAME && tk->n == strlen(name) && memcmp(tk->p, name, tk->n) == 0;
}
static bool is_op(struct tok *tk, int op) { return tk->t == TK_OP && tk->op == op; }

static const char *tok_desc(struct tok *tk, char *buf, size_t cap)
{
    switch (tk->t) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VBEGIN: return "'{{'";
    case TK_VEND: return "'}}'";
    case TK_BBEGIN: return "'{%'";
    case TK_BEND: return "'%}'";
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_NAME:
        snprintf(buf, cap, "'%.*s'", (int)(tk->n > 60 ? 60 : tk->n), tk->p);
        return buf;
    default:
        if (tk->op < 256)
            snprintf(buf, cap, "'%c'", tk->op);
        else
            snprintf(buf, cap, "'%s'", tk->op == OP_FLOORDIV ? "//" : tk->op == OP_POW ? "**"
                                       : tk->op == OP_EQ ? "==" : tk->op == OP_NE ? "!="
                                       : tk->op == OP_LE ? "<=" : ">=");
        return buf;
    }
}

static enum kn_status expect_op(struct parser *ps, int op)
{
    if (is_op(cur(ps), op)) {
        ps->i++;
        return KN_OK;
    }
    char b[80];
    if (op < 256)
        return perr(ps, cur(ps), "expected '%c', got %s", op, tok_desc(cur(ps), b, sizeof b));
    return perr(ps, cur(ps), "unexpected %s", tok_desc(cur(ps), b, sizeof b));
}

static struct jnode *new_node(struct parser *ps, int kind, struct tok *at)
{
    struct jnode *n = jarena_alloc(ps->arena, sizeof(*n));
    if (!n) {
        kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
        return NULL;
    }
    memset(n, 0, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* Growable node list built in malloc memory, then copied into the arena. */
struct nlist {
    struct jnode **v;
    size_t n, cap;
};
static bool nl_push(struct parser *ps, struct nlist *l, struct jnode *x)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        struct jnode **nv = realloc(l->v, nc * sizeof(*nv));
        if (!nv) {
            kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
            return false;
        }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = x;
    return true;
}
static struct jnode **nl_finish(struct parser *ps, struct nlist *l)
{
    struct jnode **out = NULL;
    if (l->n) {
        out = jarena_alloc(ps->arena, l->n * sizeof(*out));
        if (out)
            memcpy(out, l->v, l->n * sizeof(*out));
        else
            kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
    }
    free(l->v);
    l->v = NULL;
    l->cap = 0;
    return out;
}

static struct jstr *tok_name(struct parser *ps, struct tok *tk)
{
    struct jstr *s = jstr_make(ps->arena, tk->p, tk->n);
    if (!s)
        kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
    return s;
}

static enum kn_status enter(struct parser *ps)
{
    if (++ps->depth > ps->max_depth)
        return perr(ps, cur(ps), "template nested too deeply (more than %zu levels)",
                    ps->max_depth);
    return KN_OK;
}

#define TRY(x)                  \
    do {                        \
        enum kn_status st_ = (x); \
        if (st_)                \
            return st_;         \
    } while (0)
#define NEW(var, kind, at)                         \
    struct jnode *var = new_node(ps, (kind), (at)); \
    if (!var)                                      \
        return KN_E_NOMEM

static enum kn_status parse_expr(struct parser *ps, struct jnode **out, bool condexpr);
static enum kn_status parse_tuple(struct parser *ps, struct jnode **out, bool simplified,
                                  bool condexpr, bool allow_empty);
static enum kn_status parse_unary(struct parser *ps, struct jnode **out, bool with_filter);
static enum kn_status parse_primary(struct parser *ps, struct jnode **out);
static enum kn_status parse_postfix(struct parser *ps, struct jnode **node);

/* Call arguments after '(' : positional and keyword; fills node args and kwargs. */
static enum kn_status parse_call_args(struct parser *ps, struct jnode *call)
{
    TRY(expect_op(ps, '('));
    struct nlist args = {0}, kwv = {0};
    struct jstr **kwn = NULL;
    size_t nkw = 0, kwcap = 0;
    enum kn_status st = KN_OK;
    bool first = true;
    while (!is_op(cur(ps), ')')) {
        if (!first) {
            if ((st = expect_op(ps, ',')))
                goto fail;
            if (is_op(cur(ps), ')'))
                break;
        }
        first = false;
        if (is_op(cur(ps), '*') || is_op(cur(ps), OP_POW)) {
            st = perr(ps, cur(ps), "*args and **kwargs in calls are not supported");
            goto fail;
        }
        if (cur(ps)->t == TK_NAME && is_op(peek(ps, 1), '=')) {
            struct tok *nt = cur(ps);
            ps->i += 2;
            struct jnode *v;
            if ((st = parse_expr(ps, &v, true)))
                goto fail;
            if (nkw == kwcap) {
                size_t nc = kwcap ? kwcap * 2 : 4;
                struct jstr **nn = realloc(kwn, nc * sizeof(*nn));
                if (!nn) {
                    st = kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
                    goto fail;
                }
                kwn = nn;
                kwcap = nc;
            }
            if (!(kwn[nkw++] = tok_name(ps, nt)) || !nl_push(ps, &kwv, v)) {
                st = KN_E_NOMEM;
                goto fail;
            }
        } else {
            if (kwv.n) {
                st = perr(ps, cur(ps), "positional argument after keyword argument");
                goto fail;
            }
            struct jnode *v;
            if ((st = parse_expr(ps, &v, true)))
                goto fail;
            if (!nl_push(ps, &args, v)) {
                st = KN_E_NOMEM;
                goto fail;
            }
        }
    }
    ps->i++; /* ')' */
    call->nargs = args.n;
    call->args = nl_finish(ps, &args);
    call->nkw = nkw;
    call->kwv = nl_finish(ps, &kwv);
    if (nkw) {
        call->kwn = jarena_alloc(ps->arena, nkw * sizeof(*kwn));
        if (!call->kwn) {
            free(kwn);
            return kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
        }
        memcpy(call->kwn, kwn, nkw * sizeof(*kwn));
    }
    free(kwn);
    if ((call->nargs && !call->args) || (nkw && !call->kwv))
        return KN_E_NOMEM;
    return KN_OK;
fail:
    free(args.v);
    free(kwv.v);
    free(kwn);
    return st;
}

static enum kn_status parse_dotted_name(struct parser *ps, struct jstr **out)
{
    struct tok *tk = cur(ps);
    char b[80];
    if (tk->t != TK_NAME)
        return perr(ps, tk, "expected a filter or test name, got %s", tok_desc(tk, b, sizeof b));
    ps->i++;
    /* dotted names (a.b) are not used by known filters; keep the first part only */
    if (is_op(cur(ps), '.') && peek(ps, 1)->t == TK_NAME)
        return perr(ps, tk, "dotted filter or test names are not supported");
    *out = tok_name(ps, tk);
    return *out ? KN_OK : KN_E_NOMEM;
}

static enum kn_status parse_filter(struct parser *ps, struct jnode **node)
{
    struct tok *at = cur(ps);
    ps->i++; /* '|' */
    NEW(f, JN_FILTER, at);
    struct tok *nt = cur(ps);
    TRY(parse_dotted_name(ps, &f->name));
    if (!jinja_filter_known(f->name->p))
        return perr(ps, nt, "no filter named '%s'", f->name->p);
    f->a = *node;
    if (is_op(cur(ps), '('))
        TRY(parse_call_args(ps, f));
    *node = f;
    return KN_OK;
}

static enum kn_status parse_test(struct parser *ps, struct jnode **node)
{
    struct tok *at = cur(ps);
    ps->i++; /* 'is' */
    NEW(t, JN_TEST, at);
    if (is_name(cur(ps), "not")) {
        ps->i++;
        t->op = 1;
    }
    struct tok *nt = cur(ps);
    /* "is none" / "is true" / "is false": keyword names are test names too */
    TRY(parse_dotted_name(ps, &t->name));
    if (!jinja_test_known(t->name->p))
        return perr(ps, nt, "no test named '%s'", t->name->p);
    t->a = *node;
    struct tok *c = cur(ps);
    if (is_op(c, '(')) {
        TRY(parse_call_args(ps, t));
    } else if ((c->t == TK_NAME || c->t == TK_STRING || c->t == TK_INT || c->t == TK_FLOAT ||
                is_op(c, '[') || is_op(c, '{')) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return perr(ps, c, "you cannot chain multiple tests with is");
        struct jnode *arg;
        TRY(parse_primary(ps, &arg));
        TRY(parse_postfix(ps, &arg));
        t->args = jarena_alloc(ps->arena, sizeof(*t->args));
        if (!t->args)
            return kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
        t->args[0] = arg;
        t->nargs = 1;
    }
    *node = t;
    return KN_OK;
}

static enum kn_status parse_subscript(struct parser *ps, struct jnode *obj, struct jnode **out)
{
    struct tok *at = cur(ps);
    ps->i++; /* '[' */
    struct jnode *parts[3] = {NULL, NULL, NULL};
    bool slice = false;
    int k = 0;
    for (;;) {
        if (is_op(cur(ps), ':')) {
            slice = true;
            if (k == 2)
                return perr(ps, cur(ps), "too many ':' in a slice");
            ps->i++;
            k++;
            continue;
        }
        if (is_op(cur(ps), ']'))
            break;
        if (parts[k])
            return expect_op(ps, ']');
        TRY(parse_expr(ps, &parts[k], true));
        if (!slice && is_op(cur(ps), ',')) {
            /* d[a, b]: a tuple key */
            NEW(tup, JN_TUPLE, at);
            struct nlist l = {0};
            if (!nl_push(ps, &l, parts[0]))
                return KN_E_NOMEM;
            while (is_op(cur(ps), ',')) {
                ps->i++;
                if (is_op(cur(ps), ']'))
                    break;
                struct jnode *x;
                enum kn_status st = parse_expr(ps, &x, true);
                if (st || !nl_push(ps, &l, x)) {
                    free(l.v);
                    return st ? st : KN_E_NOMEM;
                }
            }
            tup->nargs = l.n;
            tup->args = nl_finish(ps, &l);
            if (!tup->args)
                return KN_E_NOMEM;
            parts[0] = tup;
        }
    }
    ps->i++; /* ']' */
    if (slice) {
        NEW(n, JN_SLICE, at);
        n->a = obj;
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
        *out = n;
    } else {
        if (!parts[0])
            return perr(ps, at, "expected an expression inside '[]'");
        NEW(n, JN_ITEM, at);
        n->a = obj;
        n->b = parts[0];
        *out = n;
    }
    return KN_OK;
}

static enum kn_status parse_postfix(struct parser *ps, struct jnode **node)
{
    for (;;) {
        struct tok *tk = cur(ps);
        if (is_op(tk, '.')) {
            struct tok *nt = peek(ps, 1);
            if (nt->t == TK_NAME) {
                NEW(n, JN_ATTR, tk);
                n->a = *node;
                if (!(n->name = tok_name(ps, nt)))
                    return KN_E_NOMEM;
                ps->i += 2;
                *node = n;
            } else if (nt->t == TK_INT) {
                NEW(n, JN_ITEM, tk);
                NEW(k, JN_LIT, nt);
                k->lit.t = JV_INT;
                k->lit.u.i = nt->i;
                n->a = *node;
                n->b = k;
                ps->i += 2;
                *node = n;
            } else {
                char b[80];
                return perr(ps, nt, "expected a name after '.', got %s",
                            tok_desc(nt, b, sizeof b));
            }
        } else if (is_op(tk, '[')) {
            TRY(parse_subscript(ps, *node, node));
        } else if (is_op(tk, '(')) {
            NEW(n, JN_CALL, tk);
            n->a = *node;
            n->line = (*node)->line; /* errors of a call point at its callee */
            n->col = (*node)->col;
            TRY(parse_call_args(ps, n));
            *node = n;
        } else {
            return KN_OK;
        }
    }
}

static enum kn_status parse_filter_expr(struct parser *ps, struct jnode **node)
{
    for (;;) {
        struct tok *tk = cur(ps);
        if (is_op(tk, '|')) {
            TRY(parse_filter(ps, node));
        } else if (is_name(tk, "is")) {
            TRY(parse_test(ps, node));
        } else if (is_op(tk, '(')) {
            NEW(n, JN_CALL, tk);
            n->a = *node;
            TRY(parse_call_args(ps, n));
            *node = n;
        } else {
            return KN_OK;
        }
    }
}

static enum kn_status parse_primary(struct parser *ps, struct jnode **out)
{
    TRY(enter(ps));
    struct tok *tk = cur(ps);
    char b[80];
    if (tk->t == TK_NAME) {
        ps->i++;
        NEW(n, JN_LIT, tk);
        if (is_name(tk, "true") || is_name(tk, "True")) {
            n->lit.t = JV_BOOL;
            n->lit.u.b = true;
        } else if (is_name(tk, "false") || is_name(tk, "False")) {
            n->lit.t = JV_BOOL;
            n->lit.u.b = false;
        } else if (is_name(tk, "none") || is_name(tk, "None")) {
            n->lit.t = JV_NONE;
        } else {
            n->kind = JN_NAME;
            if (!(n->name = tok_name(ps, tk)))
                return KN_E_NOMEM;
        }
        *out = n;
    } else if (tk->t == TK_STRING) {
        /* adjacent string literals concatenate */
        size_t total = 0, j = ps->i;
        while (j < ps->n && ps->t[j].t == TK_STRING) {
            if (!kn_add_size(total, ps->t[j].s->n, &total))
                return perr(ps, tk, "string literal too long");
            j++;
        }
        NEW(n, JN_LIT, tk);
        struct jstr *s = jstr_make(ps->arena, "", 0);
        if (j - ps->i == 1) {
            s = tk->s;
        } else {
            size_t sz;
            if (!kn_add_size(sizeof(struct jstr) + 1, total, &sz) ||
                !(s = jarena_alloc(ps->arena, sz)))
                return kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
            s->n = 0;
            for (size_t k = ps->i; k < j; k++) {
                memcpy(s->p + s->n, ps->t[k].s->p, ps->t[k].s->n);
                s->n += ps->t[k].s->n;
            }
            s->p[s->n] = 0;
        }
        if (!s)
            return KN_E_NOMEM;
        n->lit.t = JV_STR;
        n->lit.u.s = s;
        ps->i = j;
        *out = n;
    } else if (tk->t == TK_INT || tk->t == TK_FLOAT) {
        ps->i++;
        NEW(n, JN_LIT, tk);
        if (tk->t == TK_INT) {
            n->lit.t = JV_INT;
            n->lit.u.i = tk->i;
        } else {
            n->lit.t = JV_FLOAT;
            n->lit.u.f = tk->f;
        }
        *out = n;
    } else if (is_op(tk, '(')) {
        ps->i++;
        TRY(parse_tuple(ps, out, false, true, true));
        TRY(expect_op(ps, ')'));
    } else if (is_op(tk, '[')) {
        ps->i++;
        NEW(n, JN_LIST, tk);
        struct nlist l = {0};
        while (!is_op(cur(ps), ']')) {
            if (l.n) {
                enum kn_status st = expect_op(ps, ',');
                if (st) {
                    free(l.v);
                    return st;
                }
                if (is_op(cur(ps), ']'))
                    break;
            }
            struct jnode *x;
            enum kn_status st = parse_expr(ps, &x, true);
            if (st || !nl_push(ps, &l, x)) {
                free(l.v);
                return st ? st : KN_E_NOMEM;
            }
        }
        ps->i++;
        n->nargs = l.n;
        n->args = nl_finish(ps, &l);
        if (n->nargs && !n->args)
            return KN_E_NOMEM;
        *out = n;
    } else if (is_op(tk, '{')) {
        ps->i++;
        NEW(n, JN_DICT, tk);
        struct nlist keys = {0}, vals = {0};
        while (!is_op(cur(ps), '}')) {
            enum kn_status st = KN_OK;
            if (keys.n) {
                st = expect_op(ps, ',');
                if (!st && is_op(cur(ps), '}'))
                    break;
            }
            struct jnode *k = NULL, *v = NULL;
            if (!st)
                st = parse_expr(ps, &k, true);
            if (!st)
                st = expect_op(ps, ':');
            if (!st)
                st = parse_expr(ps, &v, true);
            if (!st && (!nl_push(ps, &keys, k) || !nl_push(ps, &vals, v)))
                st = KN_E_NOMEM;
            if (st) {
                free(keys.v);
                free(vals.v);
                return st;
            }
        }
        ps->i++;
        n->nargs = keys.n;
        n->args = nl_finish(ps, &keys);
        n->nels = vals.n;
        n->els = nl_finish(ps, &vals);
        if (n->nargs && (!n->args || !n->els))
            return KN_E_NOMEM;
        *out = n;
    } else {
        ps->depth--;
        return perr(ps, tk, "unexpected %s", tok_desc(tk, b, sizeof b));
    }
    ps->depth--;
    return KN_OK;
}

static enum kn_status parse_unary(struct parser *ps, struct jnode **out, bool with_filter)
{
    TRY(enter(ps));
    struct tok *tk = cur(ps);
    struct jnode *node;
    if (is_op(tk, '-') || is_op(tk, '+')) {
        ps->i++;
        NEW(n, is_op(tk, '-') ? JN_NEG : JN_POS, tk);
        TRY(parse_unary(ps, &n->a, false));
        node = n;
    } else {
        TRY(parse_primary(ps, &node));
    }
    TRY(parse_postfix(ps, &node));
    if (with_filter)
        TRY(parse_filter_expr(ps, &node));
    ps->depth--;
    *out = node;
    return KN_OK;
}

static enum kn_status bin(struct parser *ps, struct jnode **left, int op, struct tok *at,
                          struct jnode *right)
{
    NEW(n, JN_BIN, at);
    n->op = (uint8_t)op;
    n->a = *left;
    n->b = right;
    *left = n;
    return KN_OK;
}

static enum kn_status parse_pow(struct parser *ps, struct jnode **out)
{
    TRY(parse_unary(ps, out, true));
    while (is_op(cur(ps), OP_POW)) {
        struct tok *at = cur(ps);
        ps->i++;
        struct jnode *r;
        TRY(parse_unary(ps, &r, true));
        TRY(bin(ps, out, JOP_POW, at, r));
    }
    return KN_OK;
}

static enum kn_status parse_math2(struct parser *ps, struct jnode **out)
{
    TRY(parse_pow(ps, out));
    for (;;) {
        struct tok *at = cur(ps);
        int op = is_op(at, '*') ? JOP_MUL : is_op(at, '/') ? JOP_DIV
               : is_op(at, OP_FLOORDIV) ? JOP_FLOORDIV : is_op(at, '%') ? JOP_MOD : 0;
        if (!op)
            return KN_OK;
        ps->i++;
        struct jnode *r;
        TRY(parse_pow(ps, &r));
        TRY(bin(ps, out, op, at, r));
    }
}

static enum kn_status parse_concat(struct parser *ps, struct jnode **out)
{
    TRY(parse_math2(ps, out));
    while (is_op(cur(ps), '~')) {
        struct tok *at = cur(ps);
        ps->i++;
        struct jnode *r;
        TRY(parse_math2(ps, &r));
        TRY(bin(ps, out, JOP_CONCAT, at, r));
    }
    return KN_OK;
}

static enum kn_status parse_math1(struct parser *ps, struct jnode **out)
{
    TRY(parse_concat(ps, out));
    for (;;) {
        struct tok *at = cur(ps);
        int op = is_op(at, '+') ? JOP_ADD : is_op(at, '-') ? JOP_SUB : 0;
        if (!op)
            return KN_OK;
        ps->i++;
        struct jnode *r;
        TRY(parse_concat(ps, &r));
        TRY(bin(ps, out, op, at, r));
    }
}

static enum kn_status parse_compare(struct parser *ps, struct jnode **out)
{
    struct jnode *first;
    TRY(parse_math1(ps, &first));
    struct nlist operands = {0};
    uint8_t ops[64];
    size_t nops = 0;
    struct tok *at = cur(ps);
    for (;;) {
        struct tok *tk = cur(ps);
        int op = 0;
        if (is_op(tk, OP_EQ)) op = JOP_EQ;
        else if (is_op(tk, OP_NE)) op = JOP_NE;
        else if (is_op(tk, '<')) op = JOP_LT;
        else if (is_op(tk, OP_LE)) op = JOP_LE;
        else if (is_op(tk, '>')) op = JOP_GT;
        else if (is_op(tk, OP_GE)) op = JOP_GE;
        else if (is_name(tk, "in")) op = JOP_IN;
        else if (is_name(tk, "not") && is_name(peek(ps, 1), "in")) op = JOP_NOTIN;
        if (!op)
            break;
        ps->i += op == JOP_NOTIN ? 2 : 1;
        if (nops == sizeof ops) {
            free(operands.v);
            return perr(ps, tk, "too many chained comparisons");
        }
        ops[nops++] = (uint8_t)op;
        struct jnode *r;
        enum kn_status st = parse_math1(ps, &r);
        if (st || !nl_push(ps, &operands, r)) {
            free(operands.v);
            return st ? st : KN_E_NOMEM;
        }
    }
    if (!nops) {
        *out = first;
        return KN_OK;
    }
    struct jnode *n = new_node(ps, JN_CMP, at);
    if (!n) {
        free(operands.v);
        return KN_E_NOMEM;
    }
    n->a = first;
    n->nargs = nops;
    n->args = nl_finish(ps, &operands);
    n->ops = jarena_alloc(ps->arena, nops);
    if (!n->args || !n->ops)
        return kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
    memcpy(n->ops, ops, nops);
    *out = n;
    return KN_OK;
}

static enum kn_status parse_not(struct parser *ps, struct jnode **out)
{
    struct tok *tk = cur(ps);
    if (is_name(tk, "not")) {
        ps->i++;
        TRY(enter(ps));
        NEW(n, JN_NOT, tk);
        TRY(parse_not(ps, &n->a));
        ps->depth--;
        *out = n;
        return KN_OK;
    }
    return parse_compare(ps, out);
}

static enum kn_status parse_and(struct parser *ps, struct jnode **out)
{
    TRY(parse_not(ps, out));
    while (is_name(cur(ps), "and")) {
        struct tok *at = cur(ps);
        ps->i++;
        NEW(n, JN_AND, at);
        n->a = *out;
        TRY(parse_not(ps, &n->b));
        *out = n;
    }
    return KN_OK;
}

static enum kn_status parse_or(struct parser *ps, struct jnode **out)
{
    TRY(parse_and(ps, out));
    while (is_name(cur(ps), "or")) {
        struct tok *at = cur(ps);
        ps->i++;
        NEW(n, JN_OR, at);
        n->a = *out;
        TRY(parse_and(ps, &n->b));
        *out = n;
    }
    return KN_OK;
}

static enum kn_status parse_expr(struct parser *ps, struct jnode **out, bool condexpr)
{
    TRY(enter(ps));
    TRY(parse_or(ps, out));
    if (condexpr) {
        while (is_name(cur(ps), "if")) {
            struct tok *at = cur(ps);
            ps->i++;
            NEW(n, JN_COND, at);
            n->a = *out; /* value when true */
            TRY(parse_or(ps, &n->b)); /* condition */
            if (is_name(cur(ps), "else")) {
                ps->i++;
                TRY(parse_expr(ps, &n->c, true));
            }
            *out = n;
        }
    }
    ps->depth--;
    return KN_OK;
}

/* A comma-separated tuple or a single expression. simplified: only names/primaries (for
 * assignment targets). */
static enum kn_status parse_tuple(struct parser *ps, struct jnode **out, bool simplified,
                                  bool condexpr, bool allow_empty)
{
    struct tok *at = cur(ps);
    struct nlist l = {0};
    bool is_tuple = false;
    for (;;) {
        if (l.n) {
            if (!is_op(cur(ps), ','))
                break;
            ps->i++;
            is_tuple = true;
        }
        struct tok *c = cur(ps);
        if (c->t == TK_VEND || c->t == TK_BEND || is_op(c, ')') ||
            (simplified && !condexpr && is_name(c, "in")))
            break;
        struct jnode *x;
        enum kn_status st;
        if (simplified) {
            st = parse_primary(ps, &x);
            if (!st)
                st = parse_postfix(ps, &x);
        } else {
            st = parse_expr(ps, &x, condexpr);
        }
        if (st || !nl_push(ps, &l, x)) {
            free(l.v);
            return st ? st : KN_E_NOMEM;
        }
    }
    if (!is_tuple && l.n == 1) {
        *out = l.v[0];
        free(l.v);
        return KN_OK;
    }
    if (l.n == 0 && !allow_empty) {
        char b[80];
        return perr(ps, cur(ps), "expected an expression, got %s", tok_desc(cur(ps), b, sizeof b));
    }
    struct jnode *n = new_node(ps, JN_TUPLE, at);
    if (!n) {
        free(l.v);
        return KN_E_NOMEM;
    }
    n->nargs = l.n;
    n->args = nl_finish(ps, &l);
    if (n->nargs && !n->args)
        return KN_E_NOMEM;
    *out = n;
    return KN_OK;
}

/* ---- statements ---- */

static enum kn_status parse_body(struct parser *ps, struct nlist *body, const char *const *ends,
                                 const char **which);

static enum kn_status expect_bend(struct parser *ps)
{
    if (cur(ps)->t == TK_BEND) {
        ps->i++;
        return KN_OK;
    }
    char b[80];
    return perr(ps, cur(ps), "expected end of statement block, got %s",
                tok_desc(cur(ps), b, sizeof b));
}

static enum kn_status body_into(struct parser *ps, struct jnode *n, bool els,
                                const char *const *ends, const char **which)
{
    struct nlist l = {0};
    enum kn_status st = parse_body(ps, &l, ends, which);
    if (st) {
        free(l.v);
        return st;
    }
    size_t cnt = l.n;
    struct jnode **v = nl_finish(ps, &l);
    if (cnt && !v)
        return KN_E_NOMEM;
    if (els) {
        n->els = v;
        n->nels = cnt;
    } else {
        n->args = v;
        n->nargs = cnt;
    }
    return KN_OK;
}

static enum kn_status check_target(struct parser *ps, struct jnode *t, bool allow_attr)
{
    if (t->kind == JN_NAME)
        return KN_OK;
    if (allow_attr && t->kind == JN_ATTR && t->a->kind == JN_NAME)
        return KN_OK;
    if (t->kind == JN_TUPLE) {
        for (size_t i = 0; i < t->nargs; i++)
            if (t->args[i]->kind != JN_NAME)
                return syntax_at(ps->err, ps->diag, t->args[i]->line, t->args[i]->col,
                                 "can't assign to this expression");
        return KN_OK;
    }
    return syntax_at(ps->err, ps->diag, t->line, t->col, "can't assign to this expression");
}

static enum kn_status parse_if(struct parser *ps, struct tok *at, struct jnode **out)
{
    NEW(n, JN_IF, at);
    TRY(parse_tuple(ps, &n->a, false, true, false));
    TRY(expect_bend(ps));
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *which;
    TRY(body_into(ps, n, false, ends, &which));
    *out = n;
    if (strcmp(which, "elif") == 0) {
        struct tok *et = &ps->t[ps->i - 1];
        struct jnode *sub;
        TRY(parse_if(ps, et, &sub));
        n->els = jarena_alloc(ps->arena, sizeof(*n->els));
        if (!n->els)
            return kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
        n->els[0] = sub;
        n->nels = 1;
        return KN_OK;
    }
    if (strcmp(which, "else") == 0) {
        TRY(expect_bend(ps));
        static const char *const ends2[] = {"endif", NULL};
        TRY(body_into(ps, n, true, ends2, &which));
    }
    return expect_bend(ps);
}

static enum kn_status parse_macro_params(struct parser *ps, struct jnode *n)
{
    /* params in n->kwn (names), defaults in n->kwv (NULL when none) */
    TRY(expect_op(ps, '('));
    struct nlist defs = {0};
    struct jstr *names[64];
    size_t cnt = 0;
    while (!is_op(cur(ps), ')')) {
        enum kn_status st = KN_OK;
        if (cnt && (st = expect_op(ps, ','))) {
            free(defs.v);
            return st;
        }
        struct tok *nt = cur(ps);
        if (nt->t != TK_NAME) {
            free(defs.v);
            char b[80];
            return perr(ps, nt, "expected a parameter name, got %s", tok_desc(nt, b, sizeof b));
        }
        if (cnt == 64) {
            free(defs.v);
            return perr(ps, nt, "too many macro parameters");
        }
        names[cnt] = tok_name(ps, nt);
        ps->i++;
        struct jnode *def = NULL;
        if (is_op(cur(ps), '=')) {
            ps->i++;
            st = parse_expr(ps, &def, true);
        } else if (defs.n && defs.v[defs.n - 1]) {
            st = perr(ps, nt, "non-default argument follows default argument");
        }
        if (st || !names[cnt] || !nl_push(ps, &defs, def)) {
            free(defs.v);
            return st ? st : KN_E_NOMEM;
        }
        cnt++;
    }
    ps->i++;
    n->nkw = cnt;
    n->kwv = nl_finish(ps, &defs);
    if (cnt) {
        n->kwn = jarena_alloc(ps->arena, cnt * sizeof(*n->kwn));
        if (!n->kwn || !n->kwv)
            return kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
        memcpy(n->kwn, names, cnt * sizeof(*names));
    }
    return KN_OK;
}

static bool body_uses_caller(struct jnode *n);
static bool any_uses_caller(struct jnode **v, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++)
        if (v[i] && body_uses_caller(v[i]))
            return true;
    return false;
}
static bool body_uses_caller(struct jnode *n)
{
    if (!n)
        return false;
    if (n->kind == JN_NAME && strcmp(n->name->p, "caller") == 0)
        return true;
    if (n->kind == JN_MACRO)
        return false; /* a nested macro has its own caller */
    return body_uses_caller(n->a) || body_uses_caller(n->b) || body_uses_caller(n->c) ||
           body_uses_caller(n->d) || any_uses_caller(n->args, n->nargs) ||
           any_uses_caller(n->els, n->nels) || any_uses_caller(n->kwv, n->nkw);
}

static enum kn_status parse_statement(struct parser *ps, struct jnode **out)
{
    struct tok *bt = cur(ps); /* '{%' */
    ps->i++;
    struct tok *tk = cur(ps);
    char b[80];
    if (tk->t != TK_NAME)
        return perr(ps, tk, "tag name expected, got %s", tok_desc(tk, b, sizeof b));
    TRY(enter(ps));
    ps->i++;
    *out = NULL;
    if (is_name(tk, "if")) {
        TRY(parse_if(ps, tk, out));
    } else if (is_name(tk, "for")) {
        NEW(n, JN_FOR, tk);
        TRY(parse_tuple(ps, &n->a, true, false, false));
        TRY(check_target(ps, n->a, false));
        if (!is_name(cur(ps), "in"))
            return perr(ps, cur(ps), "expected 'in' in a for loop, got %s",
                        tok_desc(cur(ps), b, sizeof b));
        ps->i++;
        TRY(parse_tuple(ps, &n->b, false, false, false));
        if (is_name(cur(ps), "if")) {
            ps->i++;
            TRY(parse_expr(ps, &n->c, true));
        }
        if (is_name(cur(ps), "recursive"))
            return perr(ps, cur(ps), "recursive for loops are not supported");
        TRY(expect_bend(ps));
        static const char *const ends[] = {"endfor", "else", NULL};
        const char *which;
        ps->loops++;
        enum kn_status bst = body_into(ps, n, false, ends, &which);
        ps->loops--;
        if (bst)
            return bst;
        if (strcmp(which, "else") == 0) {
            TRY(expect_bend(ps));
            static const char *const ends2[] = {"endfor", NULL};
            TRY(body_into(ps, n, true, ends2, &which));
        }
        TRY(expect_bend(ps));
        *out = n;
    } else if (is_name(tk, "set")) {
        struct jnode *target;
        TRY(parse_tuple(ps, &target, true, true, false));
        TRY(check_target(ps, target, true));
        if (is_op(cur(ps), '=')) {
            ps->i++;
            NEW(n, JN_SET, tk);
            n->a = target;
            TRY(parse_tuple(ps, &n->b, false, true, false));
            TRY(expect_bend(ps));
            *out = n;
        } else {
            NEW(n, JN_SETBLOCK, tk);
            n->a = target;
            if (target->kind != JN_NAME)
                return perr(ps, tk, "a block set needs a single name");
            /* optional filters: {% set x | trim %} */
            struct jnode *f = NULL;
            while (is_op(cur(ps), '|')) {
                NEW(ph, JN_LIT, cur(ps));
                ph->lit.t = JV_UNDEF;
                if (!f)
                    f = ph;
                TRY(parse_filter(ps, &f));
            }
            n->b = f;
            TRY(expect_bend(ps));
            static const char *const ends[] = {"endset", NULL};
            const char *which;
            TRY(body_into(ps, n, false, ends, &which));
            TRY(expect_bend(ps));
            *out = n;
        }
    } else if (is_name(tk, "macro")) {
        NEW(n, JN_MACRO, tk);
        if (cur(ps)->t != TK_NAME)
            return perr(ps, cur(ps), "expected a macro name");
        if (!(n->name = tok_name(ps, cur(ps))))
            return KN_E_NOMEM;
        ps->i++;
        TRY(parse_macro_params(ps, n));
        TRY(expect_bend(ps));
        static const char *const ends[] = {"endmacro", NULL};
        const char *which;
        /* body goes into els (args/kw hold params); a loop around the definition does
         * not make break legal inside it */
        size_t saved_loops = ps->loops;
        ps->loops = 0;
        enum kn_status bst = body_into(ps, n, true, ends, &which);
        ps->loops = saved_loops;
        if (bst)
            return bst;
        if (cur(ps)->t == TK_NAME)
            ps->i++; /* {% endmacro name %} */
        TRY(expect_bend(ps));
        n->flag = any_uses_caller(n->els, n->nels);
        *out = n;
    } else if (is_name(tk, "call")) {
        NEW(n, JN_CALLBLOCK, tk);
        /* n->d: a JN_MACRO node holding the caller's params and body */
        NEW(m, JN_MACRO, tk);
        if (!(m->name = jstr_make(ps->arena, "caller", 6)))
            return kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
        if (is_op(cur(ps), '('))
            TRY(parse_macro_params(ps, m));
        TRY(parse_expr(ps, &n->a, true));
        if (n->a->kind != JN_CALL)
            return perr(ps, tk, "expected a call after {%% call %%}");
        TRY(expect_bend(ps));
        static const char *const ends[] = {"endcall", NULL};
        const char *which;
        size_t saved_loops = ps->loops;
        ps->loops = 0;
        enum kn_status bst = body_into(ps, m, true, ends, &which);
        ps->loops = saved_loops;
        if (bst)
            return bst;
        TRY(expect_bend(ps));
        n->d = m;
        *out = n;
    } else if (is_name(tk, "filter")) {
        NEW(n, JN_FILTERBLOCK, tk);
        NEW(ph, JN_LIT, tk);
        ph->lit.t = JV_UNDEF;
        struct jnode *f = ph;
        /* first filter without '|' */
        ps->i--;
        ps->t[ps->i].t = TK_OP; /* reuse the 'filter' token as a pipe */
        ps->t[ps->i].op = '|';
        do {
            TRY(parse_filter(ps, &f));
        } while (is_op(cur(ps), '|'));
        n->a = f;
        TRY(expect_bend(ps));
        static const char *const ends[] = {"endfilter", NULL};
        const char *which;
        TRY(body_into(ps, n, false, ends, &which));
        TRY(expect_bend(ps));
        *out = n;
    } else if (is_name(tk, "break") || is_name(tk, "continue")) {
        if (ps->loops == 0)
            return perr(ps, tk, "'%s' outside a loop", is_name(tk, "break") ? "break" : "continue");
        NEW(n, is_name(tk, "break") ? JN_BREAK : JN_CONTINUE, tk);
        TRY(expect_bend(ps));
        *out = n;
    } else if (is_name(tk, "generation")) {
        /* transformers' AssistantTracker tag: renders its body unchanged */
        NEW(n, JN_BODY, tk);
        TRY(expect_bend(ps));
        static const char *const ends[] = {"endgeneration", NULL};
        const char *which;
        TRY(body_into(ps, n, false, ends, &which));
        TRY(expect_bend(ps));
        *out = n;
    } else if (is_name(tk, "with")) {
        NEW(n, JN_WITH, tk);
        struct nlist targets = {0}, vals = {0};
        while (cur(ps)->t != TK_BEND) {
            enum kn_status st = KN_OK;
            if (targets.n)
                st = expect_op(ps, ',');
            struct jnode *t = NULL, *v = NULL;
            if (!st)
                st = parse_primary(ps, &t);
            if (!st && t->kind != JN_NAME)
                st = perr(ps, tk, "with targets must be names");
            if (!st)
                st = expect_op(ps, '=');
            if (!st)
                st = parse_expr(ps, &v, true);
            if (!st && (!nl_push(ps, &targets, t) || !nl_push(ps, &vals, v)))
                st = KN_E_NOMEM;
            if (st) {
                free(targets.v);
                free(vals.v);
                return st;
            }
        }
        n->nkw = targets.n;
        n->kwv = nl_finish(ps, &vals);
        struct jnode **tv = nl_finish(ps, &targets);
        if (n->nkw) {
            n->kwn = jarena_alloc(ps->arena, n->nkw * sizeof(*n->kwn));
            if (!n->kwn || !tv || !n->kwv)
                return kn_fail(ps->err, KN_E_NOMEM, "out of memory parsing a template");
            for (size_t i = 0; i < n->nkw; i++)
                n->kwn[i] = tv[i]->name;
        }
        TRY(expect_bend(ps));
        static const char *const ends[] = {"endwith", NULL};
        const char *which;
        TRY(body_into(ps, n, false, ends, &which));
        TRY(expect_bend(ps));
        *out = n;
    } else if (is_name(tk, "extends") || is_name(tk, "include") || is_name(tk, "import") ||
               is_name(tk, "from")) {
        /* jinja2 parses these and fails when they run: chat templates have no loader */
        NEW(n, JN_NOLOADER, tk);
        while (cur(ps)->t != TK_BEND && cur(ps)->t != TK_EOF)
            ps->i++;
        TRY(expect_bend(ps));
        *out = n;
    } else if (is_name(tk, "block")) {
        /* without inheritance a block renders its body in place */
        NEW(n, JN_BODY, tk);
        if (cur(ps)->t != TK_NAME)
            return perr(ps, cur(ps), "expected a block name");
        ps->i++;
        if (is_name(cur(ps), "scoped") || is_name(cur(ps), "required"))
            ps->i++;
        TRY(expect_bend(ps));
        static const char *const ends[] = {"endblock", NULL};
        const char *which;
        TRY(body_into(ps, n, false, ends, &which));
        if (cur(ps)->t == TK_NAME)
            ps->i++;
        TRY(expect_bend(ps));
        *out = n;
    } else {
        return perr(ps, tk, "encountered unknown tag '%.*s'", (int)(tk->n > 60 ? 60 : tk->n),
                    tk->p);
    }
    (void)bt;
    ps->depth--;
    return KN_OK;
}

/* Parses statements until a {% name %} whose name is in ends (then *which is set and the
 * parser stands after the name) or, with ends == NULL, until the end of the template. */
static enum kn_status parse_body(struct parser *ps, struct nlist *body, const char *const *ends,
                                 const char **which)
{
    for (;;) {
        struct tok *tk = cur(ps);
        if (tk->t == TK_EOF) {
            if (!ends)
                return KN_OK;
        {
            char want[160] = "";
            for (size_t k = 0; ends[k]; k++) {
                size_t l = strlen(want);
                snprintf(want + l, sizeof want - l, "%s'%s'", k ? " or " : "", ends[k]);
            }
            return perr(ps, tk, "unexpected end of template: looking for %s", want);
        }
        }
        if (tk->t == TK_DATA) {
            NEW(n, JN_DATA, tk);
            n->lit.t = JV_STR;
            n->lit.u.s = tk->s;
            if (!nl_push(ps, body, n))
                return KN_E_NOMEM;
            ps->i++;
        } else if (tk->t == TK_VBEGIN) {
            ps->i++;
            NEW(n, JN_OUT, tk);
            TRY(parse_tuple(ps, &n->a, false, true, false));
            if (cur(ps)->t != TK_VEND) {
                char b[80];
                return perr(ps, cur(ps), "expected end of print statement, got %s",
                            tok_desc(cur(ps), b, sizeof b));
            }
            ps->i++;
            if (!nl_push(ps, body, n))
                return KN_E_NOMEM;
        } else if (tk->t == TK_BBEGIN) {
            struct tok *nt = peek(ps, 1);
            if (ends && nt->t == TK_NAME) {
                for (size_t k = 0; ends[k]; k++) {
                    if (is_name(nt, ends[k])) {
                        *which = ends[k];
                        ps->i += 2;
                        return KN_OK;
                    }
                }
            }
            if (nt->t == TK_NAME) {
                static const char *const closers[] = {"endif", "endfor", "endmacro", "endset",
                                                      "endcall", "endfilter", "else", "elif",
                                                      "endraw", "endwith", "endgeneration", "endblock",
                                                      NULL};
                for (size_t k = 0; closers[k]; k++)
                    if (is_name(nt, closers[k]))
                        return perr(ps, nt, "encountered unknown tag '%s'%s%s%s", closers[k],
                                    ends ? ", expected '" : "", ends ? ends[0] : "",
                                    ends ? "'" : "");
            }
            struct jnode *st;
            TRY(parse_statement(ps, &st));
            if (st && !nl_push(ps, body, st))
                return KN_E_NOMEM;
        } else {
            char b[80];
            return perr(ps, tk, "unexpected %s", tok_desc(tk, b, sizeof b));
        }
    }
}

enum kn_status jinja_parse(struct jinja_template **out, const char *src, size_t len,
                           const struct jinja_limits *limits, struct jinja_diag *diag,
                           struct kn_err *err)
{
    *out = NULL;
    if (diag)
        memset(diag, 0, sizeof(*diag));
    struct jinja_limits lim;
    jinja_limits_fill(&lim, limits);
    if (len > lim.max_source) {
        if (diag) {
            diag->kind = JINJA_ERR_LIMIT;
            snprintf(diag->message, sizeof diag->message, "template too large");
        }
        return kn_fail(err, KN_E_LIMIT, "template is %zu bytes, over the limit of %zu bytes",
                       len, lim.max_source);
    }
    if (!json_utf8_valid(src, len)) {
        /* templates are text (jinja2 works on str): find the first bad byte for the message */
        size_t bad = 0;
        while (bad < len) {
            unsigned char c = (unsigned char)src[bad];
            size_t w = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3
                     : c >= 0xF0 && c < 0xF5 ? 4 : 0;
            if (!w || bad + w > len || !json_utf8_valid(src + bad, w))
                break;
            bad += w;
        }
        uint32_t line = 1, col = 1;
        for (size_t i = 0; i < bad && i < len; i++) {
            if (src[i] == '\n') {
                line++;
                col = 1;
            } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
                col++;
            }
        }
        return syntax_at(err, diag, line, col, "the template is not valid UTF-8 (byte 0x%02x at offset %zu)",
                         bad < len ? (unsigned char)src[bad] : 0, bad);
    }
    struct jinja_template *t = calloc(1, sizeof(*t));
    if (!t)
        return kn_fail(err, KN_E_NOMEM, "out of memory parsing a template");
    t->limits = lim;
    t->arena.cap = lim.max_memory;
    /* jinja2 normalises newlines (\r\n and \r become \n) and drops one trailing newline */
    char *norm = malloc(len + 1);
    if (!norm) {
        free(t);
        return kn_fail(err, KN_E_NOMEM, "out of memory parsing a template");
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n && norm[n - 1] == '\n')
        n--;
    norm[n] = 0;
    struct lexer lx = {.src = norm, .len = n, .arena = &t->arena, .err = err, .diag = diag,
                       .lc_line = 1, .lc_col = 1};
    enum kn_status st = lex_all(&lx);
    if (!st) {
        struct parser ps = {.t = lx.toks, .n = lx.ntoks, .arena = &t->arena, .err = err,
                            .diag = diag, .max_depth = lim.max_depth};
        struct jnode *root = new_node(&ps, JN_BODY, &lx.toks[0]);
        if (!root) {
            st = KN_E_NOMEM;
        } else {
            struct nlist body = {0};
            st = parse_body(&ps, &body, NULL, NULL);
            if (!st) {
                root->nargs = body.n;
                root->args = nl_finish(&ps, &body);
                if (root->nargs && !root->args)
                    st = KN_E_NOMEM;
            } else {
                free(body.v);
            }
            t->root = root;
        }
    }
    free(lx.toks);
    free(norm);
    if (!st && t->arena.failed)
        st = kn_fail(err, KN_E_NOMEM, "out of memory parsing a template");
    if (st) {
        jarena_free(&t->arena);
        free(t);
        return st;
    }
    *out = t;
    return KN_OK;
}

void jinja_free(struct jinja_template *t)
{
    if (!t)
        return;
    jarena_free(&t->arena);
    free(t);
}
