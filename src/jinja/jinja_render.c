/* jinja_render.c: the Jinja interpreter: values with Python semantics, the statements,
 * jinja2's filters and tests, Python's str/dict/list methods that templates call, and
 * transformers' globals (raise_exception, strftime_now) and tojson filter. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, gmtime_r */
#endif
#include "jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ================================================================ state ============ */

struct obuf {
    char *p;
    uint8_t *m; /* when tracking provenance (rs.track): 1 = the byte is template text */
    size_t n, cap;
};

struct scope {
    struct scope *parent;
    size_t n, cap;
    struct jstr **names;
    struct jv *vals;
};

struct jloop {
    struct jseq *items;
    size_t idx;
    struct jv last_changed;
    bool has_changed;
};

struct jmacro {
    struct jnode *node;     /* JN_MACRO: params in kwn/kwv, body in els */
    struct scope *closure;
    struct jv caller;       /* for a macro called from {% call %}: none */
};

struct jfunc {
    struct jv self;
};

struct rs {
    struct jarena a;
    struct jinja_limits lim;
    const struct jinja_options *opts;
    struct kn_err *err;
    struct jinja_diag *diag;
    struct obuf *out;
    bool track; /* jinja_render_marked: keep obuf.m */
    size_t total_out, depth, iters, work;
    int ctl; /* 1 break, 2 continue */
    struct scope *root;
};

enum {
    F_NONE = 0,
    /* globals */
    F_RANGE, F_DICT, F_NAMESPACE, F_RAISE, F_STRFTIME, F_CYCLER_UNSUP,
    /* loop */
    F_LOOP_CYCLE, F_LOOP_CHANGED,
    /* str methods */
    S_STRIP, S_LSTRIP, S_RSTRIP, S_SPLIT, S_RSPLIT, S_STARTSWITH, S_ENDSWITH, S_LOWER,
    S_UPPER, S_TITLE, S_CAPITALIZE, S_REPLACE, S_FIND, S_RFIND, S_COUNT, S_JOIN,
    S_SPLITLINES, S_ISDIGIT, S_ISALPHA, S_ISSPACE, S_ISUPPER, S_ISLOWER, S_ISALNUM,
    S_INDEX, S_RINDEX, S_CENTER, S_LJUST, S_RJUST, S_ZFILL, S_SWAPCASE, S_PARTITION,
    S_RPARTITION, S_REMOVEPREFIX, S_REMOVESUFFIX, S_FORMAT, S_ISNUMERIC, S_ISDECIMAL,
    S_CASEFOLD, S_EXPANDTABS, S_ISIDENTIFIER, S_ISTITLE, S_ENCODE,
    /* dict methods */
    D_GET, D_ITEMS, D_KEYS, D_VALUES, D_COPY,
    /* list methods */
    L_INDEX, L_COUNT, L_COPY,
};

/* ================================================================ errors =========== */

static enum kn_status rerr(struct rs *r, const struct jnode *at, enum jinja_error_kind kind,
                           const char *fmt, ...) KN_PRINTF(4, 5);
static enum kn_status rerr(struct rs *r, const struct jnode *at, enum jinja_error_kind kind,
                           const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned line = at ? at->line : 0, col = at ? at->col : 0;
    if (r->diag) {
        r->diag->kind = kind;
        r->diag->line = (int)line;
        r->diag->column = (int)col;
        snprintf(r->diag->message, sizeof r->diag->message, "%.500s", msg);
    }
    enum kn_status st = kind == JINJA_ERR_LIMIT ? KN_E_LIMIT
                        : kind == JINJA_ERR_UNSUPPORTED ? KN_E_UNSUPPORTED : KN_E_ARG;
    const char *what = kind == JINJA_ERR_RAISED ? "template raised an exception"
                       : kind == JINJA_ERR_UNDEFINED ? "undefined value"
                       : kind == JINJA_ERR_SECURITY ? "sandbox refused an operation"
                       : kind == JINJA_ERR_LIMIT ? "template limit reached"
                       : kind == JINJA_ERR_UNSUPPORTED ? "unsupported template feature"
                       : "template error";
    return kn_fail(r->err, st, "%s at line %u, column %u: %s", what, line, col, msg);
}

static enum kn_status nomem(struct rs *r)
{
    if (r->a.over_cap) {
        if (r->diag) {
            r->diag->kind = JINJA_ERR_LIMIT;
            snprintf(r->diag->message, sizeof r->diag->message, "working memory limit reached");
        }
        return kn_fail(r->err, KN_E_LIMIT,
                       "template render used more than %zu bytes of working memory",
                       r->lim.max_memory);
    }
    return kn_fail(r->err, KN_E_NOMEM, "out of memory rendering a template");
}

#define TRY(x)                    \
    do {                          \
        enum kn_status st_ = (x); \
        if (st_)                  \
            return st_;           \
    } while (0)

static void *ralloc(struct rs *r, size_t size) { return jarena_alloc(&r->a, size); }

/* ================================================================ values =========== */

static struct jv v_undef(struct jstr *hint)
{
    struct jv v = {.t = JV_UNDEF};
    v.u.s = hint;
    return v;
}
static struct jv v_none(void) { return (struct jv){.t = JV_NONE}; }
static struct jv v_bool(bool b) { struct jv v = {.t = JV_BOOL}; v.u.b = b; return v; }
static struct jv v_int(int64_t i) { struct jv v = {.t = JV_INT}; v.u.i = i; return v; }
static struct jv v_float(double f) { struct jv v = {.t = JV_FLOAT}; v.u.f = f; return v; }

static struct jstr *mkstr(struct rs *r, const char *p, size_t n) { return jstr_make(&r->a, p, n); }
static bool v_str(struct rs *r, struct jv *out, const char *p, size_t n)
{
    struct jstr *s = mkstr(r, p, n);
    if (!s)
        return false;
    *out = (struct jv){.t = JV_STR};
    out->u.s = s;
    return true;
}
static struct jv v_strs(struct jstr *s)
{
    struct jv v = {.t = JV_STR};
    v.u.s = s;
    return v;
}

/* ---- provenance of strings (jinja_render_marked) ---- */

/* The per-byte mask of a JTRUST_MIXED string; NULL otherwise. */
static const uint8_t *str_mask(const struct jv *v)
{
    return v->trust == JTRUST_MIXED ? (const uint8_t *)v->u.s->p + v->u.s->n + 1 : NULL;
}
static bool trusted_at(const struct jv *v, size_t i)
{
    return v->trust == JTRUST_ALL || (v->trust == JTRUST_MIXED && str_mask(v)[i]);
}

/* A string value with a provenance: trust JTRUST_NONE/ALL, or JTRUST_MIXED with mask (n
 * bytes), which is normalised to NONE or ALL when it is uniform. */
static bool v_str_m(struct rs *r, struct jv *out, const char *p, size_t n, int trust,
                    const uint8_t *mask)
{
    if (trust == JTRUST_MIXED) {
        size_t ones = 0;
        for (size_t i = 0; i < n; i++)
            ones += mask[i] != 0;
        trust = ones == 0 ? JTRUST_NONE : ones == n ? JTRUST_ALL : JTRUST_MIXED;
    }
    if (trust != JTRUST_MIXED) {
        if (!v_str(r, out, p, n))
            return false;
        out->trust = (uint8_t)trust;
        return true;
    }
    size_t sz;
    if (!kn_add_size(sizeof(struct jstr) + 1, n, &sz) || !kn_add_size(sz, n, &sz))
        return false;
    struct jstr *s = ralloc(r, sz);
    if (!s)
        return false;
    s->n = n;
    memcpy(s->p, p, n);
    s->p[n] = 0;
    uint8_t *m = (uint8_t *)s->p + n + 1;
    for (size_t i = 0; i < n; i++)
        m[i] = mask[i] != 0;
    *out = v_strs(s);
    out->trust = JTRUST_MIXED;
    return true;
}

/* s[b:e] keeping each byte's provenance (strip and trim: whitespace around a template's
 * markup must not turn the markup into context text). */
static bool v_substr(struct rs *r, struct jv *out, const struct jv *s, size_t b, size_t e)
{
    const uint8_t *m = str_mask(s);
    return v_str_m(r, out, s->u.s->p + b, e - b, s->trust, m ? m + b : NULL);
}

/* a + b for two strings, keeping each byte's provenance. */
static bool str_join2(struct rs *r, const struct jv *a, const struct jv *b, struct jv *out)
{
    size_t na = a->u.s->n, nb = b->u.s->n, n;
    if (!kn_add_size(na, nb, &n))
        return false;
    char *p = ralloc(r, n + 1);
    if (!p)
        return false;
    memcpy(p, a->u.s->p, na);
    memcpy(p + na, b->u.s->p, nb);
    if (a->trust == b->trust && a->trust != JTRUST_MIXED)
        return v_str_m(r, out, p, n, a->trust, NULL);
    uint8_t *m = ralloc(r, n ? n : 1);
    if (!m)
        return false;
    for (size_t i = 0; i < na; i++)
        m[i] = trusted_at(a, i);
    for (size_t i = 0; i < nb; i++)
        m[na + i] = trusted_at(b, i);
    return v_str_m(r, out, p, n, JTRUST_MIXED, m);
}

static struct jseq *seq_new(struct rs *r, size_t cap)
{
    struct jseq *l = ralloc(r, sizeof(*l));
    if (!l)
        return NULL;
    l->n = 0;
    l->cap = cap;
    l->v = NULL;
    if (cap && !(l->v = ralloc(r, cap * sizeof(struct jv))))
        return NULL;
    return l;
}
static bool seq_push(struct rs *r, struct jseq *l, struct jv x)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        struct jv *nv = ralloc(r, nc * sizeof(*nv));
        if (!nv)
            return false;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(*nv));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = x;
    return true;
}
static struct jv v_list(struct jseq *l, int t)
{
    struct jv v = {.t = (uint8_t)t};
    v.u.l = l;
    return v;
}
static struct jmap *map_new(struct rs *r)
{
    struct jmap *m = ralloc(r, sizeof(*m));
    if (m)
        memset(m, 0, sizeof(*m));
    return m;
}

static bool py_eq(const struct jv *a, const struct jv *b);

static bool is_num(const struct jv *v) { return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL; }
static double num_d(const struct jv *v)
{
    return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : (double)v->u.b;
}
static int64_t num_i(const struct jv *v) { return v->t == JV_INT ? v->u.i : (int64_t)v->u.b; }

static struct jv *map_find(struct jmap *m, const struct jv *k)
{
    for (size_t i = 0; i < m->n; i++)
        if (py_eq(&m->k[i], k))
            return &m->v[i];
    return NULL;
}
static struct jv *map_finds(struct jmap *m, const char *key, size_t n)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->k[i].t == JV_STR && m->k[i].u.s->n == n && memcmp(m->k[i].u.s->p, key, n) == 0)
            return &m->v[i];
    return NULL;
}
static bool map_set(struct rs *r, struct jmap *m, struct jv k, struct jv v)
{
    struct jv *slot = map_find(m, &k);
    if (slot) {
        *slot = v;
        return true;
    }
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 4;
        struct jv *nk = ralloc(r, nc * sizeof(*nk)), *nv = ralloc(r, nc * sizeof(*nv));
        if (!nk || !nv)
            return false;
        if (m->n) {
            memcpy(nk, m->k, m->n * sizeof(*nk));
            memcpy(nv, m->v, m->n * sizeof(*nv));
        }
        m->k = nk;
        m->v = nv;
        m->cap = nc;
    }
    m->k[m->n] = k;
    m->v[m->n] = v;
    m->n++;
    return true;
}

static const char *type_name(const struct jv *v)
{
    switch (v->t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->gen ? "generator" : "list";
    case JV_TUPLE: return "tuple";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_MACRO: return "Macro";
    default: return "builtin_function_or_method";
    }
}

static bool truthy(const struct jv *v)
{
    switch (v->t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0.0;
    case JV_STR: return v->u.s->n != 0;
    case JV_LIST: return v->gen ? true : v->u.l->n != 0;
    case JV_TUPLE: return v->u.l->n != 0;
    case JV_DICT: return v->u.d->n != 0;
    default: return true;
    }
}

static bool py_eq(const struct jv *a, const struct jv *b)
{
    if (is_num(a) && is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT)
            return num_i(a) == num_i(b);
        return num_d(a) == num_d(b);
    }
    if (a->t != b->t)
        return false;
    switch (a->t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a->u.s->n == b->u.s->n && memcmp(a->u.s->p, b->u.s->p, a->u.s->n) == 0;
    case JV_LIST: case JV_TUPLE:
        if (a->gen || b->gen)
            return a->u.l == b->u.l;
        if (a->u.l->n != b->u.l->n)
            return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!py_eq(&a->u.l->v[i], &b->u.l->v[i]))
                return false;
        return true;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n)
            return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            struct jv *o = map_find(b->u.d, &a->u.d->k[i]);
            if (!o || !py_eq(&a->u.d->v[i], o))
                return false;
        }
        return true;
    case JV_FUNC: return a->fn == b->fn && a->u.f2 == b->u.f2;
    default: return a->u.l == b->u.l; /* identity */
    }
}

/* ---- UTF-8 helpers ---- */

static uint32_t utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c = u[*i];
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (*i + len > n) {
        (*i)++;
        return 0xFFFD;
    }
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < len; k++)
        cp = (cp << 6) | (u[*i + k] & 0x3F);
    *i += len;
    return cp;
}
static size_t utf8_put(char *buf, uint32_t cp)
{
    if (cp < 0x80) { buf[0] = (char)cp; return 1; }
    if (cp < 0x800) { buf[0] = (char)(0xC0 | (cp >> 6)); buf[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        buf[0] = (char)(0xE0 | (cp >> 12)); buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    buf[0] = (char)(0xF0 | (cp >> 18)); buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); buf[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
static size_t utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            c++;
    return c;
}
/* Python's str.isspace() for a code point. */
static bool u_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}
/* Python's str.isprintable() approximation: controls, separators and format characters. */
static bool u_printable(uint32_t c)
{
    if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD)
        return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
        (c >= 0xD800 && c <= 0xF8FF) || (c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD ||
        c == 0x70F || c == 0x180E || c >= 0xF0000 || (c >= 0x323B0 && c < 0xE0100) ||
        (c >= 0xE01F0 && c < 0xF0000) || (c >= 0x2FA20 && c < 0x30000) || c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F))
        return false;
    return true;
}
static uint32_t u_lower(uint32_t c)
{
    if (c >= 'A' && c <= 'Z') return c + 32;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
    if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if (((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) && !(c & 1))
        return c + 1;
    if (c >= 0x4C1 && c <= 0x4CE && (c & 1)) return c + 1;
    if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
        bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
        if (odd_upper ? (c & 1) : !(c & 1)) return c + 1;
    }
    return c;
}
static uint32_t u_upper(uint32_t c)
{
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if (((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) && (c & 1))
        return c - 1;
    if (c >= 0x4C1 && c <= 0x4CE && !(c & 1)) return c - 1;
    if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
        bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
        if (odd_upper ? !(c & 1) : (c & 1)) return c - 1;
    }
    return c;
}
static bool u_isupper(uint32_t c) { return u_lower(c) != c; }
static bool u_islower(uint32_t c) { return u_upper(c) != c || c == 0xDF; }
static bool u_cased(uint32_t c) { return u_isupper(c) || u_islower(c); }
static bool u_alpha(uint32_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= 0xAA && !u_space(c) && u_printable(c) && c != 0xD7 && c != 0xF7 &&
            !(c >= 0x2000 && c <= 0x2BFF) && !(c >= 0x3000 && c <= 0x303F) &&
            !(c >= 0xFF00 && c <= 0xFF0F) && !(c >= 0xB0 && c <= 0xBF && c != 0xB5 && c != 0xBA));
}
static bool u_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* ---- string builder in the arena ---- */
struct sb {
    struct rs *r;
    char *p;
    size_t n, cap;
    bool fail;
};
static void sb_add(struct sb *b, const char *s, size_t n)
{
    size_t need;
    if (b->fail)
        return;
    if (!kn_add_size(b->n, n, &need) || !kn_add_size(need, 1, &need)) {
        b->fail = true;
        return;
    }
    if (need > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < need) {
            if (nc > ((size_t)1 << 40)) {
                b->fail = true;
                return;
            }
            nc *= 2;
        }
        char *np = ralloc(b->r, nc);
        if (!np) {
            b->fail = true;
            return;
        }
        if (b->n)
            memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_adds(struct sb *b, const char *s) { sb_add(b, s, strlen(s)); }
static void sb_cp(struct sb *b, uint32_t cp)
{
    char t[4];
    sb_add(b, t, utf8_put(t, cp));
}
/* Finishes into a string value (the buffer becomes the jstr's storage when possible). */
static bool sb_done(struct sb *b, struct jv *out)
{
    if (b->fail)
        return false;
    return v_str(b->r, out, b->p ? b->p : "", b->n);
}

/* Appends string v to b and its marks to m (a byte per byte, as chars). */
static void sb_add_marked(struct sb *b, struct sb *m, const struct jv *v)
{
    size_t n = v->u.s->n;
    sb_add(b, v->u.s->p, n);
    if (v->trust == JTRUST_MIXED) {
        sb_add(m, (const char *)str_mask(v), n);
        return;
    }
    char fill[64];
    memset(fill, v->trust == JTRUST_ALL, sizeof fill);
    for (size_t k = 0; k < n; k += sizeof fill)
        sb_add(m, fill, n - k < sizeof fill ? n - k : sizeof fill);
}

/* Finishes a marked string built with sb_add_marked. */
static bool sb_done_marked(struct sb *b, struct sb *m, struct jv *out)
{
    if (b->fail || m->fail)
        return false;
    if (!b->p)
        return v_str(b->r, out, "", 0);
    return v_str_m(b->r, out, b->p, b->n, JTRUST_MIXED, (const uint8_t *)m->p);
}

/* ---- Python float repr ---- */
static void fmt_float(double x, char *buf, size_t cap)
{
    if (isnan(x)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(x)) { snprintf(buf, cap, x < 0 ? "-inf" : "inf"); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    bool neg = tmp[0] == '-';
    const char *p = tmp + (neg ? 1 : 0);
    char digits[32];
    size_t nd = 0;
    while (*p && *p != 'e') {
        if (*p != '.')
            digits[nd++] = *p;
        p++;
    }
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int e = atoi(p + 1);
    char *o = buf;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ > 0 && (size_t)w_ < left) { o += w_; left -= (size_t)w_; } } while (0)
    if (neg)
        PUT("-");
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int k = 0; k <= e; k++)
                PUT("%c", (size_t)k < nd ? digits[k] : '0');
            PUT(".");
            if ((size_t)(e + 1) < nd)
                PUT("%s", digits + e + 1);
            else
                PUT("0");
        } else {
            PUT("0.");
            for (int k = 0; k < -e - 1; k++)
                PUT("0");
            PUT("%s", digits);
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1)
            PUT(".%s", digits + 1);
        PUT("e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
#undef PUT
}

/* ---- str() and repr() ---- */
static void repr_str(struct sb *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sb_add(b, &q, 1);
    for (size_t i = 0; i < n;) {
        size_t st = i;
        uint32_t c = utf8_next(s, n, &i);
        char t[16];
        if (c == (uint32_t)q || c == '\\') {
            t[0] = '\\';
            t[1] = (char)c;
            sb_add(b, t, 2);
        } else if (c == '\n') sb_adds(b, "\\n");
        else if (c == '\r') sb_adds(b, "\\r");
        else if (c == '\t') sb_adds(b, "\\t");
        else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !u_printable(c))) {
            if (c < 0x100) snprintf(t, sizeof t, "\\x%02x", c);
            else if (c < 0x10000) snprintf(t, sizeof t, "\\u%04x", c);
            else snprintf(t, sizeof t, "\\U%08x", c);
            sb_adds(b, t);
        } else {
            sb_add(b, s + st, i - st);
        }
    }
    sb_add(b, &q, 1);
}

static void to_str(struct sb *b, const struct jv *v, bool repr);

static void to_str(struct sb *b, const struct jv *v, bool repr)
{
    char t[64];
    switch (v->t) {
    case JV_UNDEF: if (repr) sb_adds(b, "Undefined"); break;
    case JV_NONE: sb_adds(b, "None"); break;
    case JV_BOOL: sb_adds(b, v->u.b ? "True" : "False"); break;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)v->u.i); sb_adds(b, t); break;
    case JV_FLOAT: fmt_float(v->u.f, t, sizeof t); sb_adds(b, t); break;
    case JV_STR:
        if (repr) repr_str(b, v->u.s->p, v->u.s->n);
        else sb_add(b, v->u.s->p, v->u.s->n);
        break;
    case JV_LIST: case JV_TUPLE: {
        if (v->gen) {
            sb_adds(b, "<generator object>");
            break;
        }
        sb_adds(b, v->t == JV_LIST ? "[" : "(");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) sb_adds(b, ", ");
            to_str(b, &v->u.l->v[i], true);
        }
        if (v->t == JV_TUPLE && v->u.l->n == 1) sb_adds(b, ",");
        sb_adds(b, v->t == JV_LIST ? "]" : ")");
        break;
    }
    case JV_DICT: case JV_NS: {
        if (v->t == JV_NS) sb_adds(b, "<Namespace ");
        sb_adds(b, "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) sb_adds(b, ", ");
            to_str(b, &v->u.d->k[i], true);
            sb_adds(b, ": ");
            to_str(b, &v->u.d->v[i], true);
        }
        sb_adds(b, "}");
        if (v->t == JV_NS) sb_adds(b, ">");
        break;
    }
    case JV_LOOP:
        snprintf(t, sizeof t, "<LoopContext %zu/%zu>", v->u.loop->idx + 1, v->u.loop->items->n);
        sb_adds(b, t);
        break;
    case JV_MACRO:
        sb_adds(b, "<Macro '");
        sb_adds(b, v->u.m->node->name->p);
        sb_adds(b, "'>");
        break;
    default:
        sb_adds(b, v->fn == F_DICT ? "<class 'dict'>" : v->fn == F_NAMESPACE ? "<class 'jinja2.utils.Namespace'>"
                   : "<built-in method>");
        break;
    }
}

/* str(v) as a string value. Fails (false) only when out of memory. */
static bool str_of(struct rs *r, const struct jv *v, struct jv *out)
{
    if (v->t == JV_STR) {
        *out = *v;
        return true;
    }
    struct sb b = {.r = r};
    to_str(&b, v, false);
    return sb_done(&b, out);
}

/* Generators and loop objects print with an address in Python: refuse them. */
static enum kn_status check_printable(struct rs *r, const struct jnode *at, const struct jv *v)
{
    if ((v->t == JV_LIST && v->gen) || v->t == JV_LOOP ||
        (v->t == JV_FUNC && v->fn != F_DICT && v->fn != F_NAMESPACE))
        return rerr(r, at, JINJA_ERR_TYPE,
                    "printing a %s gives a memory address in Python; convert it first "
                    "(for example with |list)", type_name(v));
    if (v->t == JV_LIST || v->t == JV_TUPLE || v->t == JV_DICT || v->t == JV_NS) {
        size_t n = v->t == JV_DICT || v->t == JV_NS ? v->u.d->n : v->u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (v->t == JV_DICT || v->t == JV_NS) {
                TRY(check_printable(r, at, &v->u.d->k[i]));
                TRY(check_printable(r, at, &v->u.d->v[i]));
            } else {
                TRY(check_printable(r, at, &v->u.l->v[i]));
            }
        }
    }
    return KN_OK;
}

/* ---- json.dumps ---- */
struct jsonopt {
    bool ensure_ascii, sort_keys, has_indent;
    const char *indent;
    size_t indent_n;
    const char *item_sep, *key_sep;
    size_t item_n, key_n;
};

static void json_esc(struct sb *b, const char *s, size_t n, bool ascii)
{
    sb_adds(b, "\"");
    for (size_t i = 0; i < n;) {
        size_t st = i;
        uint32_t c = utf8_next(s, n, &i);
        char t[16];
        switch (c) {
        case '"': sb_adds(b, "\\\""); break;
        case '\\': sb_adds(b, "\\\\"); break;
        case '\n': sb_adds(b, "\\n"); break;
        case '\r': sb_adds(b, "\\r"); break;
        case '\t': sb_adds(b, "\\t"); break;
        case '\b': sb_adds(b, "\\b"); break;
        case '\f': sb_adds(b, "\\f"); break;
        default:
            if (c < 0x20 || (ascii && c >= 0x7F)) {
                if (c < 0x7F || c < 0x10000) {
                    snprintf(t, sizeof t, "\\u%04x", c);
                } else {
                    uint32_t v = c - 0x10000;
                    snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                }
                sb_adds(b, t);
            } else {
                sb_add(b, s + st, i - st);
            }
        }
    }
    sb_adds(b, "\"");
}

static int cmp_vals(const struct jv *a, const struct jv *b, bool *ok);

static enum kn_status json_dump(struct rs *r, const struct jnode *at, struct sb *b,
                                const struct jv *v, const struct jsonopt *o, size_t level)
{
    if (level > r->lim.max_depth)
        return rerr(r, at, JINJA_ERR_LIMIT, "tojson: value nested too deeply");
    char t[64];
    switch (v->t) {
    case JV_NONE: sb_adds(b, "null"); return KN_OK;
    case JV_BOOL: sb_adds(b, v->u.b ? "true" : "false"); return KN_OK;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)v->u.i); sb_adds(b, t); return KN_OK;
    case JV_FLOAT:
        if (isnan(v->u.f)) sb_adds(b, "NaN");
        else if (isinf(v->u.f)) sb_adds(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else { fmt_float(v->u.f, t, sizeof t); sb_adds(b, t); }
        return KN_OK;
    case JV_STR: json_esc(b, v->u.s->p, v->u.s->n, o->ensure_ascii); return KN_OK;
    case JV_LIST: case JV_TUPLE: case JV_DICT: {
        if (v->gen)
            break;
        bool dict = v->t == JV_DICT;
        size_t n = dict ? v->u.d->n : v->u.l->n;
        if (n == 0) {
            sb_adds(b, dict ? "{}" : "[]");
            return KN_OK;
        }
        size_t *order = NULL;
        if (dict && o->sort_keys) {
            order = ralloc(r, n * sizeof(*order));
            if (!order)
                return nomem(r);
            for (size_t i = 0; i < n; i++)
                order[i] = i;
            for (size_t i = 1; i < n; i++) { /* insertion sort: stable */
                size_t x = order[i], j = i;
                while (j > 0) {
                    bool ok = true;
                    int c = cmp_vals(&v->u.d->k[x], &v->u.d->k[order[j - 1]], &ok);
                    if (!ok)
                        return rerr(r, at, JINJA_ERR_TYPE,
                                    "tojson(sort_keys=true): keys of different types cannot be sorted");
                    if (c >= 0)
                        break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        sb_adds(b, dict ? "{" : "[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                sb_add(b, o->item_sep, o->item_n);
            if (o->has_indent) {
                sb_adds(b, "\n");
                for (size_t k = 0; k <= level; k++)
                    sb_add(b, o->indent, o->indent_n);
            }
            if (dict) {
                size_t x = order ? order[i] : i;
                const struct jv *k = &v->u.d->k[x];
                if (k->t == JV_STR) {
                    json_esc(b, k->u.s->p, k->u.s->n, o->ensure_ascii);
                } else if (k->t == JV_INT || k->t == JV_BOOL || k->t == JV_NONE || k->t == JV_FLOAT) {
                    sb_adds(b, "\"");
                    TRY(json_dump(r, at, b, k, o, level + 1));
                    sb_adds(b, "\"");
                } else {
                    return rerr(r, at, JINJA_ERR_TYPE,
                                "keys must be str, int, float, bool or None, not %s", type_name(k));
                }
                sb_add(b, o->key_sep, o->key_n);
                TRY(json_dump(r, at, b, &v->u.d->v[x], o, level + 1));
            } else {
                TRY(json_dump(r, at, b, &v->u.l->v[i], o, level + 1));
            }
        }
        if (o->has_indent) {
            sb_adds(b, "\n");
            for (size_t k = 0; k < level; k++)
                sb_add(b, o->indent, o->indent_n);
        }
        sb_adds(b, dict ? "}" : "]");
        return KN_OK;
    }
    default: break;
    }
    return rerr(r, at, JINJA_ERR_TYPE, "Object of type %s is not JSON serializable", type_name(v));
}

/* markupsafe.escape of a plain string. */
static bool html_escape(struct rs *r, const struct jstr *s, struct jv *out)
{
    struct sb b = {.r = r};
    sb_add(&b, "", 0);
    for (size_t i = 0; i < s->n; i++) {
        char c = s->p[i];
        if (c == '&') sb_adds(&b, "&amp;");
        else if (c == '<') sb_adds(&b, "&lt;");
        else if (c == '>') sb_adds(&b, "&gt;");
        else if (c == '"') sb_adds(&b, "&#34;");
        else if (c == '\'') sb_adds(&b, "&#39;");
        else sb_add(&b, &c, 1);
    }
    if (!sb_done(&b, out))
        return false;
    out->markup = 1;
    return true;
}

/* ---- ordering ---- */
static int cmp_vals(const struct jv *a, const struct jv *b, bool *ok)
{
    if (is_num(a) && is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
            int64_t x = num_i(a), y = num_i(b);
            return x < y ? -1 : x > y;
        }
        double x = num_d(a), y = num_d(b);
        if (isnan(x) || isnan(y)) return 2; /* unordered */
        return x < y ? -1 : x > y;
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t n = a->u.s->n < b->u.s->n ? a->u.s->n : b->u.s->n;
        int c = memcmp(a->u.s->p, b->u.s->p, n);
        if (c) return c < 0 ? -1 : 1;
        return a->u.s->n < b->u.s->n ? -1 : a->u.s->n > b->u.s->n;
    }
    if ((a->t == JV_LIST || a->t == JV_TUPLE) && a->t == b->t && !a->gen && !b->gen) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (py_eq(&a->u.l->v[i], &b->u.l->v[i]))
                continue;
            return cmp_vals(&a->u.l->v[i], &b->u.l->v[i], ok);
        }
        return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
    }
    *ok = false;
    return 0;
}

/* ================================================================ scopes =========== */

static struct scope *scope_new(struct rs *r, struct scope *parent)
{
    struct scope *s = ralloc(r, sizeof(*s));
    if (s) {
        memset(s, 0, sizeof(*s));
        s->parent = parent;
    }
    return s;
}
static bool scope_set(struct rs *r, struct scope *s, struct jstr *name, struct jv v)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->names[i]->n == name->n && memcmp(s->names[i]->p, name->p, name->n) == 0) {
            s->vals[i] = v;
            return true;
        }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        struct jstr **nn = ralloc(r, nc * sizeof(*nn));
        struct jv *nv = ralloc(r, nc * sizeof(*nv));
        if (!nn || !nv)
            return false;
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof(*nn));
            memcpy(nv, s->vals, s->n * sizeof(*nv));
        }
        s->names = nn;
        s->vals = nv;
        s->cap = nc;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
    return true;
}
static bool scope_get(struct scope *s, const char *name, size_t n, struct jv *out)
{
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->names[i]->n == n && memcmp(s->names[i]->p, name, n) == 0) {
                *out = s->vals[i];
                return true;
            }
    return false;
}

/* ================================================================ conversion ======= */

static enum kn_status from_json(struct rs *r, const struct json_value *j, struct jv *out, size_t depth)
{
    if (depth > 512)
        return kn_fail(r->err, KN_E_LIMIT, "template context nested too deeply");
    switch (j->type) {
    case JSON_NULL: *out = v_none(); return KN_OK;
    case JSON_BOOL: *out = v_bool(j->u.boolean); return KN_OK;
    case JSON_NUMBER:
        if (j->u.number.is_int) {
            *out = v_int(j->u.number.i);
            return KN_OK;
        }
        {
            const char *t = j->u.number.text;
            bool intlike = t && !strpbrk(t, ".eE");
            if (intlike)
                return kn_fail(r->err, KN_E_UNSUPPORTED,
                               "template context: integer %s does not fit in 64 bits", t);
        }
        *out = v_float(j->u.number.d);
        return KN_OK;
    case JSON_STRING:
        if (!v_str(r, out, j->u.string.s, j->u.string.len))
            return nomem(r);
        return KN_OK;
    case JSON_ARRAY: {
        struct jseq *l = seq_new(r, j->u.array.len);
        if (!l)
            return nomem(r);
        for (size_t i = 0; i < j->u.array.len; i++) {
            TRY(from_json(r, j->u.array.items[i], &l->v[i], depth + 1));
            l->n++;
        }
        *out = v_list(l, JV_LIST);
        return KN_OK;
    }
    case JSON_OBJECT: {
        struct jmap *m = map_new(r);
        if (!m)
            return nomem(r);
        for (size_t i = 0; i < j->u.object.len; i++) {
            struct jv k, v;
            if (!v_str(r, &k, j->u.object.items[i].key, j->u.object.items[i].key_len))
                return nomem(r);
            TRY(from_json(r, j->u.object.items[i].value, &v, depth + 1));
            if (!map_set(r, m, k, v))
                return nomem(r);
        }
        struct jv d = {.t = JV_DICT};
        d.u.d = m;
        *out = d;
        return KN_OK;
    }
    }
    return kn_fail(r->err, KN_E_INTERNAL, "bad JSON value type");
}

/* ================================================================ output =========== */

static enum kn_status emit_m(struct rs *r, const struct jnode *at, const char *p, size_t n,
                             int trust, const uint8_t *mask)
{
    if (!n)
        return KN_OK;
    size_t tot;
    if (!kn_add_size(r->total_out, n, &tot) || tot > r->lim.max_output)
        return rerr(r, at, JINJA_ERR_LIMIT, "output larger than the limit of %zu bytes",
                    r->lim.max_output);
    r->total_out = tot;
    struct obuf *o = r->out;
    if (o->n + n + 1 > o->cap) {
        size_t nc = o->cap ? o->cap : 1024;
        while (nc < o->n + n + 1)
            nc *= 2;
        char *np = realloc(o->p, nc);
        if (!np)
            return kn_fail(r->err, KN_E_NOMEM, "out of memory rendering a template");
        o->p = np;
        if (r->track) {
            uint8_t *nm = realloc(o->m, nc);
            if (!nm)
                return kn_fail(r->err, KN_E_NOMEM, "out of memory rendering a template");
            o->m = nm;
        }
        o->cap = nc;
    }
    memcpy(o->p + o->n, p, n);
    if (r->track) {
        if (trust == JTRUST_MIXED)
            memcpy(o->m + o->n, mask, n);
        else
            memset(o->m + o->n, trust == JTRUST_ALL, n);
    }
    o->n += n;
    o->p[o->n] = 0;
    return KN_OK;
}

/* Emits a string value with its provenance. */
static enum kn_status emit_v(struct rs *r, const struct jnode *at, const struct jv *s)
{
    return emit_m(r, at, s->u.s->p, s->u.s->n, s->trust, str_mask(s));
}

/* ================================================================ evaluation ======= */

static enum kn_status eval(struct rs *r, struct scope *sc, const struct jnode *n, struct jv *out);
static enum kn_status exec_body(struct rs *r, struct scope *sc, struct jnode *const *body, size_t cnt);
static enum kn_status call_value(struct rs *r, struct scope *sc, const struct jnode *at,
                                 struct jv fn, struct jv *args, size_t nargs,
                                 struct jstr **kwn, struct jv *kwv, size_t nkw, struct jv *out);
static enum kn_status apply_filter(struct rs *r, struct scope *sc, const struct jnode *at,
                                   const char *name, struct jv val, struct jv *args, size_t nargs,
                                   struct jstr **kwn, struct jv *kwv, size_t nkw, struct jv *out);
static enum kn_status apply_test(struct rs *r, struct scope *sc, const struct jnode *at,
                                 const char *name, struct jv val, struct jv *args, size_t nargs,
                                 bool *out);

static enum kn_status charge(struct rs *r, const struct jnode *at, size_t n);

static enum kn_status undef_error(struct rs *r, const struct jnode *at, const struct jv *u)
{
    if (u->unsafe)
        return rerr(r, at, JINJA_ERR_SECURITY, "%s", u->u.s ? u->u.s->p : "unsafe access");
    return rerr(r, at, JINJA_ERR_UNDEFINED, "%s", u->u.s ? u->u.s->p : "value is undefined");
}

static struct jv undef_fmt(struct rs *r, const char *fmt, const char *a, const char *b2)
{
    char buf[400];
    snprintf(buf, sizeof buf, fmt, a, b2);
    return v_undef(mkstr(r, buf, strlen(buf)));
}

static struct jv mkfunc(struct rs *r, int fn, struct jv self)
{
    struct jv v = {.t = JV_FUNC, .fn = (uint16_t)fn};
    struct jfunc *f = ralloc(r, sizeof(*f));
    if (f)
        f->self = self;
    v.u.f2 = f;
    return v;
}

struct mname {
    const char *name;
    int id; /* 0: unsafe (mutating) method */
};
static const struct mname str_methods[] = {
    {"strip", S_STRIP}, {"lstrip", S_LSTRIP}, {"rstrip", S_RSTRIP}, {"split", S_SPLIT},
    {"rsplit", S_RSPLIT}, {"startswith", S_STARTSWITH}, {"endswith", S_ENDSWITH},
    {"lower", S_LOWER}, {"upper", S_UPPER}, {"title", S_TITLE}, {"capitalize", S_CAPITALIZE},
    {"replace", S_REPLACE}, {"find", S_FIND}, {"rfind", S_RFIND}, {"count", S_COUNT},
    {"join", S_JOIN}, {"splitlines", S_SPLITLINES}, {"isdigit", S_ISDIGIT},
    {"isalpha", S_ISALPHA}, {"isspace", S_ISSPACE}, {"isupper", S_ISUPPER},
    {"islower", S_ISLOWER}, {"isalnum", S_ISALNUM}, {"index", S_INDEX}, {"rindex", S_RINDEX},
    {"center", S_CENTER}, {"ljust", S_LJUST}, {"rjust", S_RJUST}, {"zfill", S_ZFILL},
    {"swapcase", S_SWAPCASE}, {"partition", S_PARTITION}, {"rpartition", S_RPARTITION},
    {"removeprefix", S_REMOVEPREFIX}, {"removesuffix", S_REMOVESUFFIX}, {"format", S_FORMAT},
    {"isnumeric", S_ISNUMERIC}, {"isdecimal", S_ISDECIMAL}, {"casefold", S_CASEFOLD},
    {"expandtabs", S_EXPANDTABS}, {"isidentifier", S_ISIDENTIFIER}, {"istitle", S_ISTITLE},
    {"encode", S_ENCODE}, {NULL, 0}};
static const struct mname dict_methods[] = {
    {"get", D_GET}, {"items", D_ITEMS}, {"keys", D_KEYS}, {"values", D_VALUES},
    {"copy", D_COPY}, {"clear", 0}, {"pop", 0}, {"popitem", 0}, {"setdefault", 0},
    {"update", 0}, {"fromkeys", -1}, {NULL, 0}};
static const struct mname list_methods[] = {
    {"index", L_INDEX}, {"count", L_COUNT}, {"copy", L_COPY}, {"append", 0}, {"clear", 0},
    {"extend", 0}, {"insert", 0}, {"pop", 0}, {"remove", 0}, {"reverse", 0}, {"sort", 0},
    {NULL, 0}};

static const struct mname *find_method(const struct mname *tab, const char *name, size_t n)
{
    for (size_t i = 0; tab[i].name; i++)
        if (strlen(tab[i].name) == n && memcmp(tab[i].name, name, n) == 0)
            return &tab[i];
    return NULL;
}

/* Python attribute access on obj through jinja's sandboxed getattr: methods first, then
 * (dicts, namespaces) items. Never fails except for undefined objects. */
static enum kn_status get_attr(struct rs *r, const struct jnode *at, struct jv obj,
                               const char *name, size_t n, struct jv *out)
{
    const struct mname *m = NULL;
    switch (obj.t) {
    case JV_UNDEF:
        return undef_error(r, at, &obj);
    case JV_STR: m = find_method(str_methods, name, n); break;
    case JV_DICT: m = find_method(dict_methods, name, n); break;
    case JV_LIST: case JV_TUPLE:
        if (!obj.gen) {
            m = find_method(list_methods, name, n);
            if (m && obj.t == JV_TUPLE && m->id != L_INDEX && m->id != L_COUNT)
                m = NULL;
        }
        break;
    case JV_NS: {
        struct jv *v = map_finds(obj.u.d, name, n);
        if (v) {
            *out = *v;
            return KN_OK;
        }
        break;
    }
    case JV_LOOP: {
        struct jloop *l = obj.u.loop;
        size_t len = l->items->n, i = l->idx;
#define IS(s) (n == strlen(s) && memcmp(name, s, n) == 0)
        if (IS("index")) { *out = v_int((int64_t)i + 1); return KN_OK; }
        if (IS("index0")) { *out = v_int((int64_t)i); return KN_OK; }
        if (IS("revindex")) { *out = v_int((int64_t)(len - i)); return KN_OK; }
        if (IS("revindex0")) { *out = v_int((int64_t)(len - i - 1)); return KN_OK; }
        if (IS("first")) { *out = v_bool(i == 0); return KN_OK; }
        if (IS("last")) { *out = v_bool(i + 1 == len); return KN_OK; }
        if (IS("length")) { *out = v_int((int64_t)len); return KN_OK; }
        if (IS("depth")) { *out = v_int(1); return KN_OK; }
        if (IS("depth0")) { *out = v_int(0); return KN_OK; }
        if (IS("previtem")) {
            *out = i > 0 ? l->items->v[i - 1] : undef_fmt(r, "there is no previous item%s%s", "", "");
            return KN_OK;
        }
        if (IS("nextitem")) {
            *out = i + 1 < len ? l->items->v[i + 1] : undef_fmt(r, "there is no next item%s%s", "", "");
            return KN_OK;
        }
        if (IS("cycle")) { *out = mkfunc(r, F_LOOP_CYCLE, obj); return KN_OK; }
        if (IS("changed")) { *out = mkfunc(r, F_LOOP_CHANGED, obj); return KN_OK; }
#undef IS
        break;
    }
    default: break;
    }
    if (m) {
        if (m->id <= 0) {
            char buf[300];
            snprintf(buf, sizeof buf, "access to attribute '%.*s' of '%s' object is unsafe.",
                     (int)(n > 100 ? 100 : n), name, type_name(&obj));
            *out = v_undef(mkstr(r, buf, strlen(buf)));
            out->unsafe = 1;
            return KN_OK;
        }
        *out = mkfunc(r, m->id, obj);
        return out->u.f2 ? KN_OK : nomem(r);
    }
    if (obj.t == JV_DICT) {
        struct jv *v = map_finds(obj.u.d, name, n);
        if (v) {
            *out = *v;
            return KN_OK;
        }
    }
    char nm[128];
    snprintf(nm, sizeof nm, "%.*s", (int)(n > 100 ? 100 : n), name);
    char tn[64];
    if (obj.t == JV_NONE)
        snprintf(tn, sizeof tn, "None");
    else
        snprintf(tn, sizeof tn, "%s object", type_name(&obj));
    *out = undef_fmt(r, "'%s' has no attribute '%s'", tn, nm);
    return KN_OK;
}

/* Subscription obj[key] through jinja's sandboxed getitem: items first, then attributes. */
static enum kn_status get_item(struct rs *r, const struct jnode *at, struct jv obj,
                               struct jv key, struct jv *out)
{
    if (obj.t == JV_UNDEF)
        return undef_error(r, at, &obj);
    if (obj.t == JV_DICT) {
        if (key.t == JV_LIST || key.t == JV_DICT)
            return rerr(r, at, JINJA_ERR_TYPE, "unhashable type: '%s'", type_name(&key));
        struct jv *v = map_find(obj.u.d, &key);
        if (v) {
            *out = *v;
            return KN_OK;
        }
    } else if ((obj.t == JV_LIST || obj.t == JV_TUPLE || obj.t == JV_STR) && !obj.gen &&
               (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i = num_i(&key);
        if (obj.t == JV_STR) {
            const struct jstr *s = obj.u.s;
            int64_t len = (int64_t)utf8_count(s->p, s->n);
            if (i < 0) i += len;
            if (i >= 0 && i < len) {
                size_t p = 0;
                for (int64_t k = 0; k < i; k++)
                    utf8_next(s->p, s->n, &p);
                size_t q = p;
                utf8_next(s->p, s->n, &q);
                if (!v_str(r, out, s->p + p, q - p))
                    return nomem(r);
                return KN_OK;
            }
        } else {
            int64_t len = (int64_t)obj.u.l->n;
            if (i < 0) i += len;
            if (i >= 0 && i < len) {
                *out = obj.u.l->v[i];
                return KN_OK;
            }
        }
    }
    if (key.t == JV_STR)
        return get_attr(r, at, obj, key.u.s->p, key.u.s->n, out);
    struct sb b = {.r = r};
    to_str(&b, &key, true);
    *out = undef_fmt(r, "'%s object' has no attribute '%s'", type_name(&obj), b.p ? b.p : "");
    return KN_OK;
}

/* Iterable contents as a sequence (lists/tuples shared, dict keys, string characters). */
static enum kn_status iterate(struct rs *r, const struct jnode *at, struct jv v, struct jseq **out)
{
    size_t cost = v.t == JV_STR ? v.u.s->n : (v.t == JV_LIST || v.t == JV_TUPLE) ? v.u.l->n
                  : v.t == JV_DICT ? v.u.d->n : 0;
    TRY(charge(r, at, cost));
    switch (v.t) {
    case JV_UNDEF:
        if (v.unsafe)
            return undef_error(r, at, &v);
        *out = seq_new(r, 0);
        return *out ? KN_OK : nomem(r);
    case JV_LIST: case JV_TUPLE: *out = v.u.l; return KN_OK;
    case JV_DICT: case JV_NS: {
        if (v.t == JV_NS)
            break;
        struct jseq *l = seq_new(r, v.u.d->n);
        if (!l)
            return nomem(r);
        for (size_t i = 0; i < v.u.d->n; i++)
            l->v[l->n++] = v.u.d->k[i];
        *out = l;
        return KN_OK;
    }
    case JV_STR: {
        struct jseq *l = seq_new(r, 0);
        if (!l)
            return nomem(r);
        for (size_t i = 0; i < v.u.s->n;) {
            size_t st = i;
            utf8_next(v.u.s->p, v.u.s->n, &i);
            struct jv c;
            if (!v_str(r, &c, v.u.s->p + st, i - st) || !seq_push(r, l, c))
                return nomem(r);
        }
        *out = l;
        return KN_OK;
    }
    default: break;
    }
    return rerr(r, at, JINJA_ERR_TYPE, "'%s' object is not iterable", type_name(&v));
}

static enum kn_status length_of(struct rs *r, const struct jnode *at, struct jv v, int64_t *out)
{
    switch (v.t) {
    case JV_UNDEF: *out = 0; return KN_OK;
    case JV_STR: *out = (int64_t)utf8_count(v.u.s->p, v.u.s->n); return KN_OK;
    case JV_LIST: case JV_TUPLE:
        if (v.gen) break;
        *out = (int64_t)v.u.l->n;
        return KN_OK;
    case JV_DICT: *out = (int64_t)v.u.d->n; return KN_OK;
    default: break;
    }
    return rerr(r, at, JINJA_ERR_TYPE, "object of type '%s' has no len()", type_name(&v));
}

static enum kn_status contains(struct rs *r, const struct jnode *at, struct jv item,
                               struct jv cont, bool *out)
{
    switch (cont.t) {
    case JV_UNDEF: *out = false; return KN_OK;
    case JV_STR:
        if (item.t != JV_STR)
            return rerr(r, at, JINJA_ERR_TYPE, "'in <string>' requires string as left operand, not %s",
                        type_name(&item));
        if (item.u.s->n == 0) { *out = true; return KN_OK; }
        *out = item.u.s->n <= cont.u.s->n &&
               memmem(cont.u.s->p, cont.u.s->n, item.u.s->p, item.u.s->n) != NULL;
        return KN_OK;
    case JV_LIST: case JV_TUPLE:
        *out = false;
        TRY(charge(r, at, cont.u.l->n));
        for (size_t i = 0; i < cont.u.l->n; i++)
            if (py_eq(&item, &cont.u.l->v[i])) { *out = true; break; }
        return KN_OK;
    case JV_DICT:
        if (item.t == JV_LIST || item.t == JV_DICT)
            return rerr(r, at, JINJA_ERR_TYPE, "unhashable type: '%s'", type_name(&item));
        *out = map_find(cont.u.d, &item) != NULL;
        return KN_OK;
    default: break;
    }
    return rerr(r, at, JINJA_ERR_TYPE, "argument of type '%s' is not iterable", type_name(&cont));
}

/* Python's printf-style "fmt % args" (used by the format filter and the % operator):
 * %s %r %d %i %u %x %X %o %e %E %f %F %g %G %c %%, flags "#0- +", width, precision, '*'
 * not supported; args is a tuple (positional), a dict (%(name)s) or one value. */
static enum kn_status py_percent(struct rs *r, const struct jnode *at, const struct jstr *fmt,
                                 struct jv args, struct jv *out)
{
    struct sb b = {.r = r};
    sb_add(&b, "", 0);
    size_t argi = 0;
    bool tuple = args.t == JV_TUPLE, mapping = args.t == JV_DICT;
    size_t nargs = tuple ? args.u.l->n : 1;
    bool used_single = false;
    for (size_t i = 0; i < fmt->n;) {
        char c = fmt->p[i];
        if (c != '%') {
            sb_add(&b, &c, 1);
            i++;
            continue;
        }
        i++;
        if (i >= fmt->n)
            return rerr(r, at, JINJA_ERR_TYPE, "incomplete format");
        struct jv v = {0};
        bool have_v = false;
        if (fmt->p[i] == '(') {
            size_t e = i + 1;
            while (e < fmt->n && fmt->p[e] != ')')
                e++;
            if (e >= fmt->n)
                return rerr(r, at, JINJA_ERR_TYPE, "incomplete format key");
            if (!mapping)
                return rerr(r, at, JINJA_ERR_TYPE, "format requires a mapping");
            struct jv *x = map_finds(args.u.d, fmt->p + i + 1, e - i - 1);
            if (!x)
                return rerr(r, at, JINJA_ERR_TYPE, "KeyError: '%.*s'", (int)(e - i - 1), fmt->p + i + 1);
            v = *x;
            have_v = true;
            i = e + 1;
        }
        char flags[8];
        size_t nf = 0;
        while (i < fmt->n && strchr("#0- +", fmt->p[i]) && nf < sizeof flags - 1)
            flags[nf++] = fmt->p[i++];
        flags[nf] = 0;
        int width = -1, prec = -1;
        if (i < fmt->n && fmt->p[i] == '*')
            return rerr(r, at, JINJA_ERR_UNSUPPORTED, "'*' width in %% formatting is not supported");
        while (i < fmt->n && fmt->p[i] >= '0' && fmt->p[i] <= '9' && width < 100000)
            width = (width < 0 ? 0 : width * 10) + (fmt->p[i++] - '0');
        if (i < fmt->n && fmt->p[i] == '.') {
            i++;
            prec = 0;
            while (i < fmt->n && fmt->p[i] >= '0' && fmt->p[i] <= '9' && prec < 100000)
                prec = prec * 10 + (fmt->p[i++] - '0');
        }
        while (i < fmt->n && (fmt->p[i] == 'l' || fmt->p[i] == 'h' || fmt->p[i] == 'L'))
            i++;
        if (i >= fmt->n)
            return rerr(r, at, JINJA_ERR_TYPE, "incomplete format");
        char conv = fmt->p[i++];
        if (width > 4096 || prec > 4096)
            return rerr(r, at, JINJA_ERR_LIMIT, "format width or precision too large");
        if (conv == '%') {
            sb_adds(&b, "%");
            continue;
        }
        if (!have_v) {
            if (mapping) {
                v = args;
            } else if (tuple) {
                if (argi >= nargs)
                    return rerr(r, at, JINJA_ERR_TYPE, "not enough arguments for format string");
                v = args.u.l->v[argi++];
            } else {
                if (used_single)
                    return rerr(r, at, JINJA_ERR_TYPE, "not enough arguments for format string");
                v = args;
                used_single = true;
            }
        }
        char piece[4600];
        const char *text = NULL;
        size_t tlen = 0;
        struct jv sv;
        if (conv == 's' || conv == 'r') {
            if (conv == 's') {
                if (!str_of(r, &v, &sv)) return nomem(r);
            } else {
                struct sb t = {.r = r};
                to_str(&t, &v, true);
                sb_add(&t, "", 0);
                if (!sb_done(&t, &sv)) return nomem(r);
            }
            text = sv.u.s->p;
            tlen = sv.u.s->n;
            if (prec >= 0) { /* truncate to prec code points */
                size_t k = 0;
                for (int cp = 0; cp < prec && k < tlen; cp++)
                    utf8_next(text, tlen, &k);
                tlen = k;
            }
        } else if (conv == 'c') {
            if (v.t == JV_INT && v.u.i >= 0 && v.u.i <= 0x10FFFF && !(v.u.i >= 0xD800 && v.u.i < 0xE000)) {
                tlen = utf8_put(piece, (uint32_t)v.u.i);
                text = piece;
            } else if (v.t == JV_STR && utf8_count(v.u.s->p, v.u.s->n) == 1) {
                text = v.u.s->p;
                tlen = v.u.s->n;
            } else {
                return rerr(r, at, JINJA_ERR_TYPE, "%%c requires an int or a unicode character");
            }
        } else if (strchr("diuxXo", conv)) {
            int64_t iv;
            if (v.t == JV_INT || v.t == JV_BOOL) iv = num_i(&v);
            else if (v.t == JV_FLOAT && strchr("diu", conv) && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) iv = (int64_t)v.u.f;
            else
                return rerr(r, at, JINJA_ERR_TYPE, "%%%c format: %s is not a number or not an integer",
                            conv, type_name(&v));
            char spec[32];
            snprintf(spec, sizeof spec, "%%%s%s%s%s", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "",
                     conv == 'x' ? "llx" : conv == 'X' ? "llX" : conv == 'o' ? "llo" : "lld");
            /* Python formats the magnitude and puts the sign in front: do the same for
             * hex/octal of negatives */
            bool neg = iv < 0 && strchr("xXo", conv);
            unsigned long long mag = neg ? (unsigned long long)0 - (unsigned long long)iv : (unsigned long long)iv;
            int w = width, p2 = prec;
            if (strchr("xXo", conv)) {
                char digits[80];
                snprintf(digits, sizeof digits, conv == 'x' ? "%llx" : conv == 'X' ? "%llX" : "%llo", mag);
                char pre[8] = "";
                if (strchr(flags, '#')) snprintf(pre, sizeof pre, "%s", conv == 'x' ? "0x" : conv == 'X' ? "0X" : "0o");
                const char *sign = neg ? "-" : strchr(flags, '+') ? "+" : strchr(flags, ' ') ? " " : "";
                size_t dl = strlen(digits);
                char body[4300];
                size_t zeros = p2 > 0 && (size_t)p2 > dl ? (size_t)p2 - dl : 0;
                size_t core = strlen(sign) + strlen(pre) + zeros + dl;
                size_t pad = w > 0 && (size_t)w > core ? (size_t)w - core : 0;
                bool left = strchr(flags, '-') != NULL, zero = strchr(flags, '0') != NULL && !left;
                size_t o = 0;
                if (!left && !zero) for (size_t k = 0; k < pad; k++) body[o++] = ' ';
                o += (size_t)snprintf(body + o, sizeof body - o, "%s%s", sign, pre);
                if (zero) for (size_t k = 0; k < pad; k++) body[o++] = '0';
                for (size_t k = 0; k < zeros; k++) body[o++] = '0';
                memcpy(body + o, digits, dl);
                o += dl;
                if (left) for (size_t k = 0; k < pad; k++) body[o++] = ' ';
                sb_add(&b, body, o);
                continue;
            }
            int n;
            if (width >= 0 && prec >= 0) n = snprintf(piece, sizeof piece, spec, w, p2, (long long)iv);
            else if (width >= 0) n = snprintf(piece, sizeof piece, spec, w, (long long)iv);
            else if (prec >= 0) n = snprintf(piece, sizeof piece, spec, p2, (long long)iv);
            else n = snprintf(piece, sizeof piece, spec, (long long)iv);
            text = piece;
            tlen = n > 0 ? (size_t)n : 0;
            sb_add(&b, text, tlen);
            continue;
        } else if (strchr("eEfFgG", conv)) {
            if (!is_num(&v))
                return rerr(r, at, JINJA_ERR_TYPE, "must be real number, not %s", type_name(&v));
            double d = num_d(&v);
            char spec[32];
            snprintf(spec, sizeof spec, "%%%s*.*%c", flags, conv);
            int n = snprintf(piece, sizeof piece, spec, width < 0 ? 0 : width, prec < 0 ? 6 : prec, d);
            if (!isfinite(d)) { /* Python: inf/nan (INF/NAN for upper-case conversions) */
                const char *word = isnan(d) ? (strchr("EFG", conv) ? "NAN" : "nan")
                                             : (strchr("EFG", conv) ? "INF" : "inf");
                char tmp[16];
                snprintf(tmp, sizeof tmp, "%s%s", (!isnan(d) && d < 0) ? "-" : (strchr(flags, '+') ? "+" : ""), word);
                n = snprintf(piece, sizeof piece, strchr(flags, '-') ? "%-*s" : "%*s", width < 0 ? 0 : width, tmp);
            }
            sb_add(&b, piece, n > 0 ? (size_t)n : 0);
            continue;
        } else {
            return rerr(r, at, JINJA_ERR_TYPE, "unsupported format character '%c'", conv);
        }
        /* strings: pad with spaces to width (code points) */
        size_t cps = utf8_count(text, tlen);
        size_t pad = width > 0 && (size_t)width > cps ? (size_t)width - cps : 0;
        bool left = strchr(flags, '-') != NULL;
        if (!left) for (size_t k = 0; k < pad; k++) sb_adds(&b, " ");
        sb_add(&b, text, tlen);
        if (left) for (size_t k = 0; k < pad; k++) sb_adds(&b, " ");
    }
    if (mapping) {
        /* fine: a mapping needs no count check */
    } else if ((tuple && argi < nargs) || (!tuple && !used_single && args.t != JV_DICT)) {
        return rerr(r, at, JINJA_ERR_TYPE, "not all arguments converted during string formatting");
    }
    return sb_done(&b, out) ? KN_OK : nomem(r);
}

/* ---- arithmetic ---- */

static enum kn_status arith(struct rs *r, const struct jnode *at, int op, struct jv a,
                            struct jv b, struct jv *out)
{
    static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (a.t == JV_UNDEF)
        return undef_error(r, at, &a);
    if (b.t == JV_UNDEF)
        return undef_error(r, at, &b);
    if (is_num(&a) && is_num(&b)) {
        bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
        if (op == JOP_DIV) {
            double y = num_d(&b);
            if (y == 0)
                return rerr(r, at, JINJA_ERR_TYPE, "division by zero");
            if (!fl) {
                /* Python divides ints exactly rounded; doubles match for |x| < 2^53 */
                *out = v_float((double)num_i(&a) / (double)num_i(&b));
            } else {
                *out = v_float(num_d(&a) / y);
            }
            return KN_OK;
        }
        if (!fl) {
            int64_t x = num_i(&a), y = num_i(&b), z;
            switch (op) {
            case JOP_ADD: if (__builtin_add_overflow(x, y, &z)) goto ovf; break;
            case JOP_SUB: if (__builtin_sub_overflow(x, y, &z)) goto ovf; break;
            case JOP_MUL: if (__builtin_mul_overflow(x, y, &z)) goto ovf; break;
            case JOP_FLOORDIV: case JOP_MOD:
                if (y == 0)
                    return rerr(r, at, JINJA_ERR_TYPE, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) goto ovf;
                {
                    int64_t q = x / y, m = x % y;
                    if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
                    z = op == JOP_FLOORDIV ? q : m;
                }
                break;
            case JOP_POW:
                if (y < 0) {
                    *out = v_float(pow((double)x, (double)y));
                    return KN_OK;
                }
                z = 1;
                for (int64_t k = 0; k < y; k++) {
                    if (__builtin_mul_overflow(z, x, &z)) goto ovf;
                    if (z == 0 || z == 1) break;
                    if (z == -1) { z = (y % 2) ? -1 : 1; break; }
                }
                break;
            default: return KN_E_INTERNAL;
            }
            *out = v_int(z);
            return KN_OK;
        ovf:
            return rerr(r, at, JINJA_ERR_UNSUPPORTED,
                        "integer result of '%s' does not fit in 64 bits", sym[op]);
        }
        double x = num_d(&a), y = num_d(&b), z;
        switch (op) {
        case JOP_ADD: z = x + y; break;
        case JOP_SUB: z = x - y; break;
        case JOP_MUL: z = x * y; break;
        case JOP_FLOORDIV: case JOP_MOD:
            if (y == 0)
                return rerr(r, at, JINJA_ERR_TYPE, "float division by zero");
            {
                double m = fmod(x, y);
                if (m != 0 && ((m < 0) != (y < 0)))
                    m += y;
                if (op == JOP_MOD) {
                    z = m == 0 ? copysign(0.0, y) : m;
                } else {
                    double d = (x - m) / y;
                    z = floor(d);
                    if (d - z > 0.5) z += 1;
                }
            }
            break;
        case JOP_POW: z = pow(x, y); break;
        default: return KN_E_INTERNAL;
        }
        *out = v_float(z);
        return KN_OK;
    }
    if (op == JOP_ADD && a.t == JV_STR && b.t == JV_STR) {
        /* Markup + str escapes the str (and str + Markup too): the result is Markup */
        bool mk = a.markup || b.markup;
        if (mk && !a.markup && !html_escape(r, a.u.s, &a))
            return nomem(r);
        if (mk && !b.markup && !html_escape(r, b.u.s, &b))
            return nomem(r);
        if (!str_join2(r, &a, &b, out))
            return nomem(r);
        out->markup = mk;
        return KN_OK;
    }
    if (op == JOP_ADD && (a.t == JV_LIST || a.t == JV_TUPLE) && a.t == b.t && !a.gen && !b.gen) {
        struct jseq *l = seq_new(r, a.u.l->n + b.u.l->n);
        if (!l)
            return nomem(r);
        for (size_t i = 0; i < a.u.l->n; i++) l->v[l->n++] = a.u.l->v[i];
        for (size_t i = 0; i < b.u.l->n; i++) l->v[l->n++] = b.u.l->v[i];
        *out = v_list(l, a.t);
        return KN_OK;
    }
    if (op == JOP_MUL && ((a.t == JV_STR && (b.t == JV_INT || b.t == JV_BOOL)) ||
                          (b.t == JV_STR && (a.t == JV_INT || a.t == JV_BOOL)))) {
        struct jv s = a.t == JV_STR ? a : b;
        int64_t k = num_i(a.t == JV_STR ? &b : &a);
        size_t tot;
        if (k > 0 && (!kn_mul_size(s.u.s->n, (size_t)k, &tot) || tot > r->lim.max_output))
            return rerr(r, at, JINJA_ERR_LIMIT, "string repetition larger than the output limit");
        struct sb sb2 = {.r = r};
        for (int64_t i = 0; i < k; i++)
            sb_add(&sb2, s.u.s->p, s.u.s->n);
        return sb_done(&sb2, out) ? KN_OK : nomem(r);
    }
    if (op == JOP_MUL && (a.t == JV_LIST || a.t == JV_TUPLE) && !a.gen &&
        (b.t == JV_INT || b.t == JV_BOOL)) {
        int64_t k = num_i(&b);
        struct jseq *l = seq_new(r, 0);
        if (!l)
            return nomem(r);
        size_t tot;
        if (k > 0 && (!kn_mul_size(a.u.l->n, (size_t)k, &tot) || tot > r->lim.max_iterations))
            return rerr(r, at, JINJA_ERR_LIMIT, "list repetition too large");
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < a.u.l->n; j++)
                if (!seq_push(r, l, a.u.l->v[j]))
                    return nomem(r);
        *out = v_list(l, a.t);
        return KN_OK;
    }
    if (op == JOP_ADD && a.t == JV_STR)
        return rerr(r, at, JINJA_ERR_TYPE, "can only concatenate str (not \"%s\") to str",
                    type_name(&b));
    if (op == JOP_ADD && a.t == JV_LIST)
        return rerr(r, at, JINJA_ERR_TYPE, "can only concatenate list (not \"%s\") to list",
                    type_name(&b));
    if (op == JOP_MOD && a.t == JV_STR)
        return py_percent(r, at, a.u.s, b, out);
    return rerr(r, at, JINJA_ERR_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'",
                sym[op], type_name(&a), type_name(&b));
}

static enum kn_status compare(struct rs *r, const struct jnode *at, int op, struct jv a,
                              struct jv b, bool *out)
{
    switch (op) {
    case JOP_EQ: *out = py_eq(&a, &b); return KN_OK;
    case JOP_NE: *out = !py_eq(&a, &b); return KN_OK;
    case JOP_IN: return contains(r, at, a, b, out);
    case JOP_NOTIN: TRY(contains(r, at, a, b, out)); *out = !*out; return KN_OK;
    default: break;
    }
    if (a.t == JV_UNDEF)
        return undef_error(r, at, &a);
    if (b.t == JV_UNDEF)
        return undef_error(r, at, &b);
    bool ok = true;
    int c = cmp_vals(&a, &b, &ok);
    static const char *const sym[] = {"<", "<=", ">", ">="};
    if (!ok)
        return rerr(r, at, JINJA_ERR_TYPE, "'%s' not supported between instances of '%s' and '%s'",
                    sym[op - JOP_LT], type_name(&a), type_name(&b));
    if (c == 2) { *out = false; return KN_OK; }
    switch (op) {
    case JOP_LT: *out = c < 0; break;
    case JOP_LE: *out = c <= 0; break;
    case JOP_GT: *out = c > 0; break;
    default: *out = c >= 0; break;
    }
    return KN_OK;
}

/* ---- slicing (Python semantics, on code points for strings) ---- */
static enum kn_status slice_of(struct rs *r, const struct jnode *at, struct jv obj,
                               struct jv *sv, bool *has, struct jv *out)
{
    if (obj.t == JV_UNDEF)
        return undef_error(r, at, &obj);
    int64_t idx[3] = {0, 0, 1};
    for (int k = 0; k < 3; k++) {
        if (!has[k] || sv[k].t == JV_NONE) {
            has[k] = false;
            continue;
        }
        if (sv[k].t != JV_INT && sv[k].t != JV_BOOL)
            return rerr(r, at, JINJA_ERR_TYPE,
                        "slice indices must be integers or None or have an __index__ method");
        idx[k] = num_i(&sv[k]);
    }
    int64_t step = has[2] ? idx[2] : 1;
    if (step == 0)
        return rerr(r, at, JINJA_ERR_TYPE, "slice step cannot be zero");
    struct jseq *items;
    size_t *offs = NULL;
    int64_t len;
    if (obj.t == JV_STR) {
        len = (int64_t)utf8_count(obj.u.s->p, obj.u.s->n);
        offs = ralloc(r, ((size_t)len + 1) * sizeof(*offs));
        if (!offs)
            return nomem(r);
        size_t p = 0;
        for (int64_t i = 0; i < len; i++) {
            offs[i] = p;
            utf8_next(obj.u.s->p, obj.u.s->n, &p);
        }
        offs[len] = obj.u.s->n;
        items = NULL;
    } else if ((obj.t == JV_LIST || obj.t == JV_TUPLE) && !obj.gen) {
        items = obj.u.l;
        len = (int64_t)items->n;
    } else {
        *out = undef_fmt(r, "'%s object' is not subscriptable%s", type_name(&obj), "");
        return KN_OK;
    }
    int64_t start, stop;
    if (step > 0) {
        start = has[0] ? idx[0] : 0;
        stop = has[1] ? idx[1] : len;
        if (start < 0) { start += len; if (start < 0) start = 0; } else if (start > len) start = len;
        if (stop < 0) { stop += len; if (stop < 0) stop = 0; } else if (stop > len) stop = len;
    } else {
        start = has[0] ? idx[0] : len - 1;
        stop = has[1] ? idx[1] : -1 - len;
        if (start < 0) { start += len; if (start < 0) start = -1; } else if (start >= len) start = len - 1;
        if (stop < 0) { stop += len; if (stop < 0) stop = -1; } else if (stop >= len) stop = len - 1;
    }
    if (obj.t == JV_STR) {
        struct sb b = {.r = r};
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            sb_add(&b, obj.u.s->p + offs[i], offs[i + 1] - offs[i]);
        if (!b.p)
            return v_str(r, out, "", 0) ? KN_OK : nomem(r);
        return sb_done(&b, out) ? KN_OK : nomem(r);
    }
    struct jseq *l = seq_new(r, 0);
    if (!l)
        return nomem(r);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (!seq_push(r, l, items->v[i]))
            return nomem(r);
    *out = v_list(l, obj.t);
    return KN_OK;
}

/* ---- evaluation of argument lists ---- */
struct argv {
    struct jv *pos;
    size_t npos;
    struct jstr **kwn;
    struct jv *kwv;
    size_t nkw;
};
static enum kn_status eval_args(struct rs *r, struct scope *sc, const struct jnode *n, struct argv *a)
{
    a->npos = n->nargs;
    a->nkw = n->nkw;
    a->kwn = n->kwn;
    a->pos = a->npos ? ralloc(r, a->npos * sizeof(struct jv)) : NULL;
    a->kwv = a->nkw ? ralloc(r, a->nkw * sizeof(struct jv)) : NULL;
    if ((a->npos && !a->pos) || (a->nkw && !a->kwv))
        return nomem(r);
    for (size_t i = 0; i < a->npos; i++)
        TRY(eval(r, sc, n->args[i], &a->pos[i]));
    for (size_t i = 0; i < a->nkw; i++)
        TRY(eval(r, sc, n->kwv[i], &a->kwv[i]));
    return KN_OK;
}

/* Binds call arguments to named parameters in order; unknown keywords are an error. */
static enum kn_status bind_args(struct rs *r, const struct jnode *at, const char *fname,
                                const char *const *params, size_t np, struct jv *args,
                                size_t nargs, struct jstr **kwn, struct jv *kwv, size_t nkw,
                                struct jv *out, bool *given)
{
    if (nargs > np)
        return rerr(r, at, JINJA_ERR_TYPE, "%s() takes at most %zu arguments (%zu given)", fname,
                    np, nargs);
    for (size_t i = 0; i < np; i++)
        given[i] = false;
    for (size_t i = 0; i < nargs; i++) {
        out[i] = args[i];
        given[i] = true;
    }
    for (size_t k = 0; k < nkw; k++) {
        size_t i;
        for (i = 0; i < np; i++)
            if (strcmp(params[i], kwn[k]->p) == 0)
                break;
        if (i == np)
            return rerr(r, at, JINJA_ERR_TYPE, "%s() got an unexpected keyword argument '%s'",
                        fname, kwn[k]->p);
        if (given[i])
            return rerr(r, at, JINJA_ERR_TYPE, "%s() got multiple values for argument '%s'",
                        fname, kwn[k]->p);
        out[i] = kwv[k];
        given[i] = true;
    }
    return KN_OK;
}

static enum kn_status eval_test_node(struct rs *r, struct scope *sc, const struct jnode *n,
                                     bool *out)
{
    struct jv v;
    /* "x is defined" must not fail on undefined x.y chains? jinja2 fails there too; but the
     * direct operand is evaluated normally */
    TRY(eval(r, sc, n->a, &v));
    struct argv a;
    TRY(eval_args(r, sc, n, &a));
    if (a.nkw)
        return rerr(r, n, JINJA_ERR_TYPE, "tests take no keyword arguments");
    TRY(apply_test(r, sc, n, n->name->p, v, a.pos, a.npos, out));
    if (n->op)
        *out = !*out;
    return KN_OK;
}

static enum kn_status eval_filter_chain(struct rs *r, struct scope *sc, const struct jnode *n,
                                        const struct jv *subject, struct jv *out)
{
    if (n->kind != JN_FILTER) {
        if (n->kind == JN_LIT && n->lit.t == JV_UNDEF && subject) {
            *out = *subject;
            return KN_OK;
        }
        return eval(r, sc, n, out);
    }
    struct jv v;
    TRY(eval_filter_chain(r, sc, n->a, subject, &v));
    struct argv a;
    TRY(eval_args(r, sc, n, &a));
    return apply_filter(r, sc, n, n->name->p, v, a.pos, a.npos, a.kwn, a.kwv, a.nkw, out);
}

static enum kn_status eval(struct rs *r, struct scope *sc, const struct jnode *n, struct jv *out)
{
    if (++r->depth > r->lim.max_depth * 4)
        return rerr(r, n, JINJA_ERR_LIMIT, "evaluation nested too deeply");
    enum kn_status st = KN_OK;
    switch (n->kind) {
    case JN_LIT:
        *out = n->lit;
        if (out->t == JV_STR)
            out->trust = JTRUST_ALL; /* the template's own text */
        break;
    case JN_NAME:
        if (!scope_get(sc, n->name->p, n->name->n, out)) {
            struct jv g = {.t = JV_FUNC};
            const char *nm = n->name->p;
            int fn = strcmp(nm, "range") == 0 ? F_RANGE : strcmp(nm, "dict") == 0 ? F_DICT
                   : strcmp(nm, "namespace") == 0 ? F_NAMESPACE
                   : strcmp(nm, "raise_exception") == 0 ? F_RAISE
                   : strcmp(nm, "strftime_now") == 0 ? F_STRFTIME
                   : (strcmp(nm, "cycler") == 0 || strcmp(nm, "joiner") == 0 ||
                      strcmp(nm, "lipsum") == 0) ? F_CYCLER_UNSUP : 0;
            if (fn) {
                g.fn = (uint16_t)fn;
                g.u.f2 = NULL;
                *out = g;
            } else {
                *out = undef_fmt(r, "'%s' is undefined%s", nm, "");
            }
        }
        break;
    case JN_LIST: case JN_TUPLE: {
        struct jseq *l = seq_new(r, n->nargs);
        if (!l) { st = nomem(r); break; }
        for (size_t i = 0; i < n->nargs && !st; i++) {
            st = eval(r, sc, n->args[i], &l->v[i]);
            l->n++;
        }
        *out = v_list(l, n->kind == JN_LIST ? JV_LIST : JV_TUPLE);
        break;
    }
    case JN_DICT: {
        struct jmap *m = map_new(r);
        if (!m) { st = nomem(r); break; }
        for (size_t i = 0; i < n->nargs && !st; i++) {
            struct jv k, v;
            st = eval(r, sc, n->args[i], &k);
            if (!st && (k.t == JV_LIST || k.t == JV_DICT || k.t == JV_UNDEF))
                st = rerr(r, n->args[i], JINJA_ERR_TYPE, "unhashable type: '%s'", type_name(&k));
            if (!st)
                st = eval(r, sc, n->els[i], &v);
            if (!st && !map_set(r, m, k, v))
                st = nomem(r);
        }
        struct jv d = {.t = JV_DICT};
        d.u.d = m;
        *out = d;
        break;
    }
    case JN_ATTR: {
        struct jv obj;
        st = eval(r, sc, n->a, &obj);
        if (!st)
            st = get_attr(r, n, obj, n->name->p, n->name->n, out);
        break;
    }
    case JN_ITEM: {
        struct jv obj, key;
        st = eval(r, sc, n->a, &obj);
        if (!st)
            st = eval(r, sc, n->b, &key);
        if (!st)
            st = get_item(r, n, obj, key, out);
        break;
    }
    case JN_SLICE: {
        struct jv obj, sv[3];
        bool has[3] = {n->b != NULL, n->c != NULL, n->d != NULL};
        st = eval(r, sc, n->a, &obj);
        for (int k = 0; k < 3 && !st; k++)
            if (has[k])
                st = eval(r, sc, k == 0 ? n->b : k == 1 ? n->c : n->d, &sv[k]);
        if (!st)
            st = slice_of(r, n, obj, sv, has, out);
        break;
    }
    case JN_CALL: {
        struct jv fn;
        struct argv a;
        st = eval(r, sc, n->a, &fn);
        if (!st)
            st = eval_args(r, sc, n, &a);
        if (!st)
            st = call_value(r, sc, n, fn, a.pos, a.npos, a.kwn, a.kwv, a.nkw, out);
        break;
    }
    case JN_FILTER:
        st = eval_filter_chain(r, sc, n, NULL, out);
        break;
    case JN_TEST: {
        bool b = false;
        st = eval_test_node(r, sc, n, &b);
        *out = v_bool(b);
        break;
    }
    case JN_NOT: {
        struct jv v;
        st = eval(r, sc, n->a, &v);
        *out = v_bool(!truthy(&v));
        break;
    }
    case JN_NEG: case JN_POS: {
        struct jv v;
        st = eval(r, sc, n->a, &v);
        if (st)
            break;
        if (v.t == JV_UNDEF) { st = undef_error(r, n, &v); break; }
        if (!is_num(&v)) {
            st = rerr(r, n, JINJA_ERR_TYPE, "bad operand type for unary %c: '%s'",
                      n->kind == JN_NEG ? '-' : '+', type_name(&v));
            break;
        }
        if (n->kind == JN_POS)
            *out = v.t == JV_BOOL ? v_int(v.u.b) : v;
        else if (v.t == JV_FLOAT)
            *out = v_float(-v.u.f);
        else if (num_i(&v) == INT64_MIN)
            st = rerr(r, n, JINJA_ERR_UNSUPPORTED, "integer does not fit in 64 bits");
        else
            *out = v_int(-num_i(&v));
        break;
    }
    case JN_BIN: {
        struct jv a, b;
        st = eval(r, sc, n->a, &a);
        if (!st)
            st = eval(r, sc, n->b, &b);
        if (st)
            break;
        if (n->op == JOP_CONCAT) {
            struct jv sa, sbv;
            TRY(check_printable(r, n, &a));
            TRY(check_printable(r, n, &b));
            if (!str_of(r, &a, &sa) || !str_of(r, &b, &sbv)) { st = nomem(r); break; }
            if (!str_join2(r, &sa, &sbv, out)) st = nomem(r);
        } else {
            st = arith(r, n, n->op, a, b, out);
        }
        break;
    }
    case JN_CMP: {
        struct jv left, right;
        st = eval(r, sc, n->a, &left);
        bool res = true;
        for (size_t i = 0; i < n->nargs && !st && res; i++) {
            st = eval(r, sc, n->args[i], &right);
            if (!st)
                st = compare(r, n, n->ops[i], left, right, &res);
            left = right;
        }
        *out = v_bool(res);
        break;
    }
    case JN_AND: case JN_OR: {
        struct jv a;
        st = eval(r, sc, n->a, &a);
        if (st)
            break;
        bool t = truthy(&a);
        if ((n->kind == JN_AND && !t) || (n->kind == JN_OR && t))
            *out = a;
        else
            st = eval(r, sc, n->b, out);
        break;
    }
    case JN_COND: {
        struct jv c;
        st = eval(r, sc, n->b, &c);
        if (st)
            break;
        if (truthy(&c))
            st = eval(r, sc, n->a, out);
        else if (n->c)
            st = eval(r, sc, n->c, out);
        else
            *out = undef_fmt(r, "the inline if-expression evaluated to false and no else "
                                "section was defined.%s%s", "", "");
        break;
    }
    default:
        st = rerr(r, n, JINJA_ERR_UNSUPPORTED, "statement used as an expression");
    }
    r->depth--;
    if (!st && r->a.failed)
        st = nomem(r);
    return st;
}

/* ================================================================ strings ========== */

/* Python str.strip family. chars NULL: Unicode whitespace. */
static bool in_chars(uint32_t c, const struct jstr *chars)
{
    if (!chars)
        return u_space(c);
    for (size_t i = 0; i < chars->n;) {
        if (utf8_next(chars->p, chars->n, &i) == c)
            return true;
    }
    return false;
}
static void strip_span(const struct jstr *s, const struct jstr *chars, bool left, bool right,
                       size_t *b, size_t *e)
{
    size_t i = 0, end = s->n;
    if (left) {
        while (i < end) {
            size_t j = i;
            uint32_t c = utf8_next(s->p, s->n, &j);
            if (!in_chars(c, chars))
                break;
            i = j;
        }
    }
    if (right) {
        while (end > i) {
            size_t k = end - 1;
            while (k > i && ((unsigned char)s->p[k] & 0xC0) == 0x80)
                k--;
            size_t j = k;
            uint32_t c = utf8_next(s->p, s->n, &j);
            if (!in_chars(c, chars))
                break;
            end = k;
        }
    }
    *b = i;
    *e = end;
}

static enum kn_status want_str(struct rs *r, const struct jnode *at, const char *fn,
                               const struct jv *v, bool allow_none)
{
    if (v->t == JV_STR || (allow_none && v->t == JV_NONE))
        return KN_OK;
    return rerr(r, at, JINJA_ERR_TYPE, "%s() argument must be str%s, not %s", fn,
                allow_none ? " or None" : "", type_name(v));
}

static enum kn_status str_split(struct rs *r, const struct jnode *at, const struct jstr *s,
                                const struct jv *sepv, int64_t maxsplit, bool rev, struct jv *out)
{
    struct jseq *l = seq_new(r, 0);
    if (!l)
        return nomem(r);
    struct jv item;
    if (sepv->t == JV_NONE) {
        /* whitespace runs; no empty strings */
        size_t i = 0, n = s->n;
        if (!rev) {
            int64_t splits = 0;
            for (;;) {
                while (i < n) {
                    size_t j = i;
                    if (!u_space(utf8_next(s->p, n, &j))) break;
                    i = j;
                }
                if (i >= n) break;
                if (maxsplit >= 0 && splits == maxsplit) {
                    size_t e = n;
                    /* remainder keeps trailing whitespace stripped? Python: rest unstripped
                     * at the right */
                    if (!v_str(r, &item, s->p + i, e - i) || !seq_push(r, l, item))
                        return nomem(r);
                    break;
                }
                size_t st = i;
                while (i < n) {
                    size_t j = i;
                    if (u_space(utf8_next(s->p, n, &j))) break;
                    i = j;
                }
                if (!v_str(r, &item, s->p + st, i - st) || !seq_push(r, l, item))
                    return nomem(r);
                splits++;
            }
        } else {
            /* collect from the right */
            size_t e = n;
            int64_t splits = 0;
            struct jseq *tmp = seq_new(r, 0);
            if (!tmp) return nomem(r);
            for (;;) {
                while (e > 0) {
                    size_t k = e - 1;
                    while (k > 0 && ((unsigned char)s->p[k] & 0xC0) == 0x80) k--;
                    size_t j = k;
                    if (!u_space(utf8_next(s->p, n, &j))) break;
                    e = k;
                }
                if (e == 0) break;
                if (maxsplit >= 0 && splits == maxsplit) {
                    if (!v_str(r, &item, s->p, e) || !seq_push(r, tmp, item)) return nomem(r);
                    break;
                }
                size_t b = e;
                while (b > 0) {
                    size_t k = b - 1;
                    while (k > 0 && ((unsigned char)s->p[k] & 0xC0) == 0x80) k--;
                    size_t j = k;
                    if (u_space(utf8_next(s->p, n, &j))) break;
                    b = k;
                }
                if (!v_str(r, &item, s->p + b, e - b) || !seq_push(r, tmp, item)) return nomem(r);
                e = b;
                splits++;
            }
            for (size_t k = tmp->n; k-- > 0;)
                if (!seq_push(r, l, tmp->v[k])) return nomem(r);
        }
        *out = v_list(l, JV_LIST);
        return KN_OK;
    }
    TRY(want_str(r, at, "split", sepv, true));
    const struct jstr *sep = sepv->u.s;
    if (sep->n == 0)
        return rerr(r, at, JINJA_ERR_TYPE, "empty separator");
    if (!rev) {
        size_t i = 0;
        int64_t splits = 0;
        for (;;) {
            const char *f = (maxsplit < 0 || splits < maxsplit)
                                ? memmem(s->p + i, s->n - i, sep->p, sep->n) : NULL;
            if (!f) {
                if (!v_str(r, &item, s->p + i, s->n - i) || !seq_push(r, l, item)) return nomem(r);
                break;
            }
            size_t k = (size_t)(f - s->p);
            if (!v_str(r, &item, s->p + i, k - i) || !seq_push(r, l, item)) return nomem(r);
            i = k + sep->n;
            splits++;
        }
    } else {
        struct jseq *tmp = seq_new(r, 0);
        if (!tmp) return nomem(r);
        size_t e = s->n;
        int64_t splits = 0;
        for (;;) {
            size_t found = SIZE_MAX;
            if ((maxsplit < 0 || splits < maxsplit) && e >= sep->n)
                for (size_t k = e - sep->n + 1; k-- > 0;)
                    if (memcmp(s->p + k, sep->p, sep->n) == 0) { found = k; break; }
            if (found == SIZE_MAX) {
                if (!v_str(r, &item, s->p, e) || !seq_push(r, tmp, item)) return nomem(r);
                break;
            }
            if (!v_str(r, &item, s->p + found + sep->n, e - found - sep->n) || !seq_push(r, tmp, item))
                return nomem(r);
            e = found;
            splits++;
        }
        for (size_t k = tmp->n; k-- > 0;)
            if (!seq_push(r, l, tmp->v[k])) return nomem(r);
    }
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

static bool str_replace(struct rs *r, const struct jstr *s, const struct jstr *old,
                        const struct jstr *new, int64_t count, struct jv *out)
{
    struct sb b = {.r = r};
    size_t i = 0;
    int64_t done = 0;
    if (old->n == 0) {
        /* Python inserts new between every character (and at both ends) */
        if (count != 0) { sb_add(&b, new->p, new->n); done++; }
        while (i < s->n) {
            size_t j = i;
            utf8_next(s->p, s->n, &j);
            sb_add(&b, s->p + i, j - i);
            i = j;
            if (count < 0 || done < count) { sb_add(&b, new->p, new->n); done++; }
        }
    } else {
        while (i <= s->n) {
            const char *f = (count < 0 || done < count) ? memmem(s->p + i, s->n - i, old->p, old->n) : NULL;
            if (!f) {
                sb_add(&b, s->p + i, s->n - i);
                break;
            }
            size_t k = (size_t)(f - s->p);
            sb_add(&b, s->p + i, k - i);
            sb_add(&b, new->p, new->n);
            i = k + old->n;
            done++;
        }
    }
    if (!b.p)
        return v_str(r, out, "", 0);
    return sb_done(&b, out);
}

enum casemode { CM_LOWER, CM_UPPER, CM_TITLE, CM_CAPITALIZE, CM_SWAP, CM_JTITLE };
static bool str_case(struct rs *r, const struct jstr *s, enum casemode m, struct jv *out)
{
    struct sb b = {.r = r};
    bool prev_cased = false, first = true, word_start = true;
    for (size_t i = 0; i < s->n;) {
        uint32_t c = utf8_next(s->p, s->n, &i), o = c;
        switch (m) {
        case CM_LOWER: o = u_lower(c); break;
        case CM_UPPER: o = u_upper(c); break;
        case CM_SWAP: o = u_isupper(c) ? u_lower(c) : u_upper(c); break;
        case CM_CAPITALIZE: o = first ? u_upper(c) : u_lower(c); break;
        case CM_TITLE:
            o = prev_cased ? u_lower(c) : u_upper(c);
            prev_cased = u_cased(c);
            break;
        case CM_JTITLE: /* jinja's title: words start after - whitespace ( { [ < */
            o = word_start ? u_upper(c) : u_lower(c);
            word_start = c == '-' || u_space(c) || c == '(' || c == '{' || c == '[' || c == '<';
            break;
        }
        first = false;
        if (c == 0xDF && (m == CM_UPPER || (m == CM_TITLE && o == 0xDF && !prev_cased))) {
            sb_adds(&b, m == CM_UPPER ? "SS" : "Ss");
            continue;
        }
        sb_cp(&b, o);
    }
    if (!b.p)
        return v_str(r, out, "", 0);
    return sb_done(&b, out);
}

/* Python str.splitlines() boundaries. */
static bool line_break_at(const char *p, size_t n, size_t i, size_t *len)
{
    unsigned char c = (unsigned char)p[i];
    if (c == '\r') { *len = (i + 1 < n && p[i + 1] == '\n') ? 2 : 1; return true; }
    if (c == '\n' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E) { *len = 1; return true; }
    if (c == 0xC2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85) { *len = 2; return true; }
    if (c == 0xE2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
        ((unsigned char)p[i + 2] == 0xA8 || (unsigned char)p[i + 2] == 0xA9)) { *len = 3; return true; }
    return false;
}
static enum kn_status splitlines(struct rs *r, const char *p, size_t n, bool keepends, struct jseq **out)
{
    struct jseq *l = seq_new(r, 0);
    if (!l)
        return nomem(r);
    size_t st = 0, i = 0;
    while (i < n) {
        size_t bl;
        if (line_break_at(p, n, i, &bl)) {
            struct jv item;
            if (!v_str(r, &item, p + st, (keepends ? i + bl : i) - st) || !seq_push(r, l, item))
                return nomem(r);
            i += bl;
            st = i;
        } else {
            i++;
        }
    }
    if (st < n) {
        struct jv item;
        if (!v_str(r, &item, p + st, n - st) || !seq_push(r, l, item))
            return nomem(r);
    }
    *out = l;
    return KN_OK;
}

static bool str_find(const struct jstr *s, const struct jstr *sub, bool rev, int64_t *out)
{
    /* result in code points */
    size_t pos = SIZE_MAX;
    if (!rev) {
        const char *f = sub->n == 0 ? s->p : memmem(s->p, s->n, sub->p, sub->n);
        if (f) pos = (size_t)(f - s->p);
    } else if (s->n >= sub->n) {
        for (size_t k = s->n - sub->n + 1; k-- > 0;)
            if (memcmp(s->p + k, sub->p, sub->n) == 0) { pos = k; break; }
    }
    *out = pos == SIZE_MAX ? -1 : (int64_t)utf8_count(s->p, pos);
    return pos != SIZE_MAX;
}

/* ---- strftime_now ---- */
static enum kn_status do_strftime(struct rs *r, const struct jnode *at, struct jv fmt, struct jv *out)
{
    TRY(want_str(r, at, "strftime_now", &fmt, false));
    struct tm tm;
    time_t t;
    if (r->opts && r->opts->fixed_time) {
        t = (time_t)r->opts->now_unix;
        if (!gmtime_r(&t, &tm))
            return rerr(r, at, JINJA_ERR_TYPE, "strftime_now: bad fixed time");
    } else {
        t = time(NULL);
        if (!localtime_r(&t, &tm))
            return rerr(r, at, JINJA_ERR_TYPE, "strftime_now: no local time");
    }
    if (fmt.u.s->n > 256 || memchr(fmt.u.s->p, 0, fmt.u.s->n))
        return rerr(r, at, JINJA_ERR_TYPE, "strftime_now: format too long or has NUL");
    char buf[2048];
    size_t n = fmt.u.s->n ? strftime(buf, sizeof buf, fmt.u.s->p, &tm) : 0;
    if (fmt.u.s->n && n == 0)
        buf[0] = 0;
    return v_str(r, out, buf, n) ? KN_OK : nomem(r);
}

/* ================================================================ calls ============ */

static enum kn_status call_macro(struct rs *r, const struct jnode *at, struct jmacro *m,
                                 struct jv *args, size_t nargs, struct jstr **kwn,
                                 struct jv *kwv, size_t nkw, struct jv caller, struct jv *out);

static enum kn_status range_fn(struct rs *r, const struct jnode *at, struct jv *args,
                               size_t nargs, struct jv *out)
{
    int64_t a[3] = {0, 0, 1};
    if (nargs < 1 || nargs > 3)
        return rerr(r, at, JINJA_ERR_TYPE, "range expected 1 to 3 arguments, got %zu", nargs);
    for (size_t i = 0; i < nargs; i++) {
        if (args[i].t != JV_INT && args[i].t != JV_BOOL)
            return rerr(r, at, JINJA_ERR_TYPE, "'%s' object cannot be interpreted as an integer",
                        type_name(&args[i]));
    }
    if (nargs == 1) a[1] = num_i(&args[0]);
    else { a[0] = num_i(&args[0]); a[1] = num_i(&args[1]); if (nargs == 3) a[2] = num_i(&args[2]); }
    if (a[2] == 0)
        return rerr(r, at, JINJA_ERR_TYPE, "range() arg 3 must not be zero");
    struct jseq *l = seq_new(r, 0);
    if (!l)
        return nomem(r);
    size_t cnt = 0;
    for (int64_t i = a[0]; a[2] > 0 ? i < a[1] : i > a[1]; i += a[2]) {
        /* the sandbox caps range at 100000 items (MAX_RANGE) */
        if (++cnt > 100000)
            return rerr(r, at, JINJA_ERR_LIMIT,
                        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        if (!seq_push(r, l, v_int(i)))
            return nomem(r);
        if ((a[2] > 0 && i > INT64_MAX - a[2]) || (a[2] < 0 && i < INT64_MIN - a[2]))
            break;
    }
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

static enum kn_status call_method(struct rs *r, const struct jnode *at, int fn, struct jv self,
                                  struct jv *args, size_t nargs, struct jstr **kwn,
                                  struct jv *kwv, size_t nkw, struct jv *out);

static enum kn_status call_value(struct rs *r, struct scope *sc, const struct jnode *at,
                                 struct jv fn, struct jv *args, size_t nargs,
                                 struct jstr **kwn, struct jv *kwv, size_t nkw, struct jv *out)
{
    (void)sc;
    if (fn.t == JV_UNDEF)
        return undef_error(r, at, &fn);
    if (fn.t == JV_MACRO)
        return call_macro(r, at, fn.u.m, args, nargs, kwn, kwv, nkw, v_none(), out);
    if (fn.t != JV_FUNC)
        return rerr(r, at, JINJA_ERR_TYPE, "'%s' object is not callable", type_name(&fn));
    switch (fn.fn) {
    case F_RANGE:
        if (nkw)
            return rerr(r, at, JINJA_ERR_TYPE, "range() takes no keyword arguments");
        return range_fn(r, at, args, nargs, out);
    case F_DICT: case F_NAMESPACE: {
        struct jmap *m = map_new(r);
        if (!m)
            return nomem(r);
        if (nargs > 1)
            return rerr(r, at, JINJA_ERR_TYPE, "%s expected at most 1 argument, got %zu",
                        fn.fn == F_DICT ? "dict" : "namespace", nargs);
        if (nargs == 1) {
            if (args[0].t == JV_UNDEF)
                return undef_error(r, at, &args[0]);
            if (args[0].t == JV_DICT || args[0].t == JV_NS) {
                for (size_t i = 0; i < args[0].u.d->n; i++)
                    if (!map_set(r, m, args[0].u.d->k[i], args[0].u.d->v[i]))
                        return nomem(r);
            } else {
                struct jseq *l;
                TRY(iterate(r, at, args[0], &l));
                for (size_t i = 0; i < l->n; i++) {
                    struct jv p = l->v[i];
                    if ((p.t != JV_LIST && p.t != JV_TUPLE) || p.gen || p.u.l->n != 2)
                        return rerr(r, at, JINJA_ERR_TYPE,
                                    "dictionary update sequence element #%zu has the wrong length", i);
                    if (!map_set(r, m, p.u.l->v[0], p.u.l->v[1]))
                        return nomem(r);
                }
            }
        }
        for (size_t k = 0; k < nkw; k++) {
            struct jv key = v_strs(kwn[k]);
            if (!map_set(r, m, key, kwv[k]))
                return nomem(r);
        }
        struct jv d = {.t = (uint8_t)(fn.fn == F_DICT ? JV_DICT : JV_NS)};
        d.u.d = m;
        *out = d;
        return KN_OK;
    }
    case F_RAISE: {
        struct jv msg = nargs ? args[0] : (nkw ? kwv[0] : v_none());
        struct jv s;
        if (!str_of(r, &msg, &s))
            return nomem(r);
        return rerr(r, at, JINJA_ERR_RAISED, "%s", s.u.s->p);
    }
    case F_STRFTIME:
        if (nargs != 1 || nkw)
            return rerr(r, at, JINJA_ERR_TYPE, "strftime_now() takes exactly one argument");
        return do_strftime(r, at, args[0], out);
    case F_CYCLER_UNSUP:
        return rerr(r, at, JINJA_ERR_UNSUPPORTED, "cycler, joiner and lipsum are not supported");
    case F_LOOP_CYCLE: {
        if (nargs == 0)
            return rerr(r, at, JINJA_ERR_TYPE, "no items for cycling given");
        struct jloop *l = fn.u.f2->self.u.loop;
        *out = args[l->idx % nargs];
        return KN_OK;
    }
    case F_LOOP_CHANGED: {
        struct jloop *l = fn.u.f2->self.u.loop;
        struct jseq *vals = seq_new(r, nargs);
        if (!vals)
            return nomem(r);
        for (size_t i = 0; i < nargs; i++)
            vals->v[vals->n++] = args[i];
        struct jv cur = v_list(vals, JV_LIST);
        bool changed = !l->has_changed || !py_eq(&cur, &l->last_changed);
        l->has_changed = true;
        l->last_changed = cur;
        *out = v_bool(changed);
        return KN_OK;
    }
    default:
        return call_method(r, at, fn.fn, fn.u.f2->self, args, nargs, kwn, kwv, nkw, out);
    }
}

static enum kn_status opt_int(struct rs *r, const struct jnode *at, const struct jv *v,
                              bool given, int64_t dflt, int64_t *out)
{
    if (!given || v->t == JV_NONE) {
        *out = dflt;
        return KN_OK;
    }
    if (v->t != JV_INT && v->t != JV_BOOL)
        return rerr(r, at, JINJA_ERR_TYPE, "'%s' object cannot be interpreted as an integer",
                    type_name(v));
    *out = num_i(v);
    return KN_OK;
}

static enum kn_status call_method(struct rs *r, const struct jnode *at, int fn, struct jv self,
                                  struct jv *args, size_t nargs, struct jstr **kwn,
                                  struct jv *kwv, size_t nkw, struct jv *out)
{
    struct jv a[4];
    bool g[4];
    if (fn >= D_GET && fn <= D_COPY) {
        static const char *const p_get[] = {"key", "default"};
        if (fn == D_GET) {
            if (nkw)
                return rerr(r, at, JINJA_ERR_TYPE, "get() takes no keyword arguments");
            TRY(bind_args(r, at, "get", p_get, 2, args, nargs, NULL, NULL, 0, a, g));
            if (!g[0])
                return rerr(r, at, JINJA_ERR_TYPE, "get expected at least 1 argument, got 0");
            if (a[0].t == JV_LIST || a[0].t == JV_DICT)
                return rerr(r, at, JINJA_ERR_TYPE, "unhashable type: '%s'", type_name(&a[0]));
            struct jv *v = map_find(self.u.d, &a[0]);
            *out = v ? *v : g[1] ? a[1] : v_none();
            return KN_OK;
        }
        if (nargs || nkw)
            return rerr(r, at, JINJA_ERR_TYPE, "method takes no arguments");
        if (fn == D_COPY) {
            struct jmap *m = map_new(r);
            if (!m) return nomem(r);
            for (size_t i = 0; i < self.u.d->n; i++)
                if (!map_set(r, m, self.u.d->k[i], self.u.d->v[i])) return nomem(r);
            struct jv d = {.t = JV_DICT};
            d.u.d = m;
            *out = d;
            return KN_OK;
        }
        struct jseq *l = seq_new(r, self.u.d->n);
        if (!l) return nomem(r);
        for (size_t i = 0; i < self.u.d->n; i++) {
            if (fn == D_ITEMS) {
                struct jseq *p = seq_new(r, 2);
                if (!p) return nomem(r);
                p->v[0] = self.u.d->k[i];
                p->v[1] = self.u.d->v[i];
                p->n = 2;
                l->v[l->n++] = v_list(p, JV_TUPLE);
            } else {
                l->v[l->n++] = fn == D_KEYS ? self.u.d->k[i] : self.u.d->v[i];
            }
        }
        /* dict views print as dict_items([...]) in Python; treat as a generator for printing */
        *out = v_list(l, JV_LIST);
        return KN_OK;
    }
    if (fn >= L_INDEX && fn <= L_COPY) {
        if (nkw)
            return rerr(r, at, JINJA_ERR_TYPE, "method takes no keyword arguments");
        if (fn == L_COPY) {
            if (nargs) return rerr(r, at, JINJA_ERR_TYPE, "copy() takes no arguments");
            struct jseq *l = seq_new(r, self.u.l->n);
            if (!l) return nomem(r);
            for (size_t i = 0; i < self.u.l->n; i++) l->v[l->n++] = self.u.l->v[i];
            *out = v_list(l, JV_LIST);
            return KN_OK;
        }
        if (nargs != 1)
            return rerr(r, at, JINJA_ERR_TYPE, "method takes exactly one argument");
        int64_t cnt = 0, first = -1;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (py_eq(&self.u.l->v[i], &args[0])) {
                if (first < 0) first = (int64_t)i;
                cnt++;
            }
        if (fn == L_COUNT) { *out = v_int(cnt); return KN_OK; }
        if (first < 0)
            return rerr(r, at, JINJA_ERR_TYPE, "list.index(x): x not in list");
        *out = v_int(first);
        return KN_OK;
    }
    /* string methods */
    const struct jstr *s = self.u.s;
    static const char *const p_strip[] = {"chars"};
    static const char *const p_split[] = {"sep", "maxsplit"};
    static const char *const p_sw[] = {"prefix", "start", "end"};
    static const char *const p_repl[] = {"old", "new", "count"};
    static const char *const p_sub[] = {"sub", "start", "end"};
    static const char *const p_width[] = {"width", "fillchar"};
    switch (fn) {
    case S_STRIP: case S_LSTRIP: case S_RSTRIP: {
        if (nkw) return rerr(r, at, JINJA_ERR_TYPE, "strip() takes no keyword arguments");
        TRY(bind_args(r, at, "strip", p_strip, 1, args, nargs, NULL, NULL, 0, a, g));
        if (g[0]) TRY(want_str(r, at, "strip", &a[0], true));
        const struct jstr *chars = g[0] && a[0].t == JV_STR ? a[0].u.s : NULL;
        size_t b = 0, e = 0;
        strip_span(s, chars, fn != S_RSTRIP, fn != S_LSTRIP, &b, &e);
        return v_substr(r, out, &self, b, e) ? KN_OK : nomem(r);
    }
    case S_SPLIT: case S_RSPLIT: {
        TRY(bind_args(r, at, "split", p_split, 2, args, nargs, kwn, kwv, nkw, a, g));
        int64_t maxsplit = -1;
        TRY(opt_int(r, at, &a[1], g[1], -1, &maxsplit));
        struct jv sep = g[0] ? a[0] : v_none();
        return str_split(r, at, s, &sep, maxsplit, fn == S_RSPLIT, out);
    }
    case S_STARTSWITH: case S_ENDSWITH: {
        if (nkw) return rerr(r, at, JINJA_ERR_TYPE, "startswith() takes no keyword arguments");
        TRY(bind_args(r, at, fn == S_STARTSWITH ? "startswith" : "endswith", p_sw, 3, args, nargs,
                      NULL, NULL, 0, a, g));
        if (!g[0]) return rerr(r, at, JINJA_ERR_TYPE, "startswith() takes at least 1 argument (0 given)");
        int64_t len = (int64_t)utf8_count(s->p, s->n), st = 0, en = 0;
        TRY(opt_int(r, at, &a[1], g[1], 0, &st));
        TRY(opt_int(r, at, &a[2], g[2], len, &en));
        if (st < 0) { st += len; if (st < 0) st = 0; }
        if (en < 0) { en += len; if (en < 0) en = 0; }
        if (en > len) en = len;
        /* byte offsets of the code-point range */
        size_t bs = 0, be = 0, p = 0;
        for (int64_t i = 0; i <= len; i++) {
            if (i == st) bs = p;
            if (i == en) be = p;
            if (i < len) utf8_next(s->p, s->n, &p);
        }
        struct jseq one = {1, 1, &a[0]};
        struct jseq *cands = &one;
        if (a[0].t == JV_TUPLE) cands = a[0].u.l;
        else if (a[0].t != JV_STR)
            return rerr(r, at, JINJA_ERR_TYPE, "%s first arg must be str or a tuple of str, not %s",
                        fn == S_STARTSWITH ? "startswith" : "endswith", type_name(&a[0]));
        bool res = false;
        for (size_t i = 0; i < cands->n && !res; i++) {
            if (cands->v[i].t != JV_STR)
                return rerr(r, at, JINJA_ERR_TYPE, "tuple for startswith must only contain str, not %s",
                            type_name(&cands->v[i]));
            const struct jstr *x = cands->v[i].u.s;
            if (st > len || bs > be || x->n > be - bs) continue;
            res = fn == S_STARTSWITH ? memcmp(s->p + bs, x->p, x->n) == 0
                                     : memcmp(s->p + be - x->n, x->p, x->n) == 0;
        }
        *out = v_bool(res);
        return KN_OK;
    }
    case S_LOWER: case S_UPPER: case S_TITLE: case S_CAPITALIZE: case S_SWAPCASE: case S_CASEFOLD:
        if (nargs || nkw) return rerr(r, at, JINJA_ERR_TYPE, "method takes no arguments");
        return str_case(r, s, fn == S_LOWER || fn == S_CASEFOLD ? CM_LOWER : fn == S_UPPER ? CM_UPPER
                              : fn == S_TITLE ? CM_TITLE : fn == S_SWAPCASE ? CM_SWAP : CM_CAPITALIZE, out)
                   ? KN_OK : nomem(r);
    case S_REPLACE: {
        TRY(bind_args(r, at, "replace", p_repl, 3, args, nargs, kwn, kwv, nkw, a, g));
        if (!g[0] || !g[1]) return rerr(r, at, JINJA_ERR_TYPE, "replace expected at least 2 arguments");
        TRY(want_str(r, at, "replace", &a[0], false));
        TRY(want_str(r, at, "replace", &a[1], false));
        int64_t count = -1;
        TRY(opt_int(r, at, &a[2], g[2], -1, &count));
        return str_replace(r, s, a[0].u.s, a[1].u.s, count, out) ? KN_OK : nomem(r);
    }
    case S_FIND: case S_RFIND: case S_INDEX: case S_RINDEX: case S_COUNT: {
        if (nkw) return rerr(r, at, JINJA_ERR_TYPE, "method takes no keyword arguments");
        TRY(bind_args(r, at, "find", p_sub, 3, args, nargs, NULL, NULL, 0, a, g));
        if (!g[0]) return rerr(r, at, JINJA_ERR_TYPE, "method takes at least 1 argument");
        TRY(want_str(r, at, "find", &a[0], false));
        if (g[1] || g[2])
            return rerr(r, at, JINJA_ERR_UNSUPPORTED, "start/end arguments of find/count are not supported");
        if (fn == S_COUNT) {
            int64_t c = 0;
            const struct jstr *x = a[0].u.s;
            if (x->n == 0) c = (int64_t)utf8_count(s->p, s->n) + 1;
            else
                for (size_t i = 0; i + x->n <= s->n;) {
                    const char *f = memmem(s->p + i, s->n - i, x->p, x->n);
                    if (!f) break;
                    c++;
                    i = (size_t)(f - s->p) + x->n;
                }
            *out = v_int(c);
            return KN_OK;
        }
        int64_t pos;
        bool found = str_find(s, a[0].u.s, fn == S_RFIND || fn == S_RINDEX, &pos);
        if (!found && (fn == S_INDEX || fn == S_RINDEX))
            return rerr(r, at, JINJA_ERR_TYPE, "substring not found");
        *out = v_int(pos);
        return KN_OK;
    }
    case S_JOIN: {
        if (nargs != 1 || nkw) return rerr(r, at, JINJA_ERR_TYPE, "join() takes exactly one argument");
        struct jseq *l;
        TRY(iterate(r, at, args[0], &l));
        struct sb b = {.r = r}, m = {.r = r};
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].t != JV_STR)
                return rerr(r, at, JINJA_ERR_TYPE, "sequence item %zu: expected str instance, %s found",
                            i, type_name(&l->v[i]));
            if (i) sb_add_marked(&b, &m, &self);
            sb_add_marked(&b, &m, &l->v[i]);
        }
        return sb_done_marked(&b, &m, out) ? KN_OK : nomem(r);
    }
    case S_SPLITLINES: {
        static const char *const p_keep[] = {"keepends"};
        TRY(bind_args(r, at, "splitlines", p_keep, 1, args, nargs, kwn, kwv, nkw, a, g));
        struct jseq *l;
        TRY(splitlines(r, s->p, s->n, g[0] && truthy(&a[0]), &l));
        *out = v_list(l, JV_LIST);
        return KN_OK;
    }
    case S_ISDIGIT: case S_ISALPHA: case S_ISSPACE: case S_ISUPPER: case S_ISLOWER:
    case S_ISALNUM: case S_ISNUMERIC: case S_ISDECIMAL: case S_ISIDENTIFIER: case S_ISTITLE: {
        if (nargs || nkw) return rerr(r, at, JINJA_ERR_TYPE, "method takes no arguments");
        bool res = s->n > 0, any_cased = false, prev_cased = false, title_ok = true;
        size_t k = 0;
        for (size_t i = 0; i < s->n; k++) {
            uint32_t c = utf8_next(s->p, s->n, &i);
            switch (fn) {
            case S_ISDIGIT: case S_ISNUMERIC: case S_ISDECIMAL: if (!u_digit(c)) res = false; break;
            case S_ISALPHA: if (!u_alpha(c)) res = false; break;
            case S_ISALNUM: if (!u_alpha(c) && !u_digit(c)) res = false; break;
            case S_ISSPACE: if (!u_space(c)) res = false; break;
            case S_ISUPPER: if (u_islower(c)) res = false; if (u_isupper(c)) any_cased = true; break;
            case S_ISLOWER: if (u_isupper(c)) res = false; if (u_islower(c)) any_cased = true; break;
            case S_ISIDENTIFIER:
                if (!(c == '_' || u_alpha(c) || (k > 0 && u_digit(c)))) res = false;
                break;
            case S_ISTITLE:
                if (u_isupper(c)) { if (prev_cased) title_ok = false; prev_cased = true; any_cased = true; }
                else if (u_islower(c)) { if (!prev_cased) title_ok = false; prev_cased = true; }
                else prev_cased = false;
                break;
            default: break;
            }
        }
        if (fn == S_ISUPPER || fn == S_ISLOWER) res = res && any_cased;
        if (fn == S_ISTITLE) res = title_ok && any_cased;
        *out = v_bool(res);
        return KN_OK;
    }
    case S_CENTER: case S_LJUST: case S_RJUST: case S_ZFILL: {
        TRY(bind_args(r, at, "center", p_width, fn == S_ZFILL ? 1 : 2, args, nargs, kwn, kwv, nkw, a, g));
        int64_t w = 0;
        if (!g[0]) return rerr(r, at, JINJA_ERR_TYPE, "method takes at least 1 argument");
        TRY(opt_int(r, at, &a[0], true, 0, &w));
        const char *fill = " ";
        size_t filln = 1;
        if (fn != S_ZFILL && g[1]) {
            TRY(want_str(r, at, "center", &a[1], false));
            if (utf8_count(a[1].u.s->p, a[1].u.s->n) != 1)
                return rerr(r, at, JINJA_ERR_TYPE, "The fill character must be exactly one character long");
            fill = a[1].u.s->p;
            filln = a[1].u.s->n;
        }
        int64_t len = (int64_t)utf8_count(s->p, s->n);
        if (w > (int64_t)r->lim.max_output) return rerr(r, at, JINJA_ERR_LIMIT, "width too large");
        int64_t pad = w > len ? w - len : 0, left = 0;
        if (fn == S_CENTER) left = pad / 2 + (pad & w & 1);
        else if (fn == S_RJUST || fn == S_ZFILL) left = pad;
        struct sb b = {.r = r};
        size_t body = 0;
        if (fn == S_ZFILL && s->n && (s->p[0] == '-' || s->p[0] == '+')) { sb_add(&b, s->p, 1); body = 1; }
        for (int64_t i = 0; i < left; i++) sb_add(&b, fn == S_ZFILL ? "0" : fill, fn == S_ZFILL ? 1 : filln);
        sb_add(&b, s->p + body, s->n - body);
        for (int64_t i = left; i < pad; i++) sb_add(&b, fill, filln);
        if (!b.p) return v_str(r, out, "", 0) ? KN_OK : nomem(r);
        return sb_done(&b, out) ? KN_OK : nomem(r);
    }
    case S_PARTITION: case S_RPARTITION: {
        if (nargs != 1 || nkw) return rerr(r, at, JINJA_ERR_TYPE, "partition() takes exactly one argument");
        TRY(want_str(r, at, "partition", &args[0], false));
        const struct jstr *sep = args[0].u.s;
        if (!sep->n) return rerr(r, at, JINJA_ERR_TYPE, "empty separator");
        size_t pos = SIZE_MAX;
        if (fn == S_PARTITION) {
            const char *f = memmem(s->p, s->n, sep->p, sep->n);
            if (f) pos = (size_t)(f - s->p);
        } else if (s->n >= sep->n) {
            for (size_t k = s->n - sep->n + 1; k-- > 0;)
                if (memcmp(s->p + k, sep->p, sep->n) == 0) { pos = k; break; }
        }
        struct jseq *l = seq_new(r, 3);
        if (!l) return nomem(r);
        l->n = 3;
        bool ok;
        if (pos == SIZE_MAX) {
            ok = fn == S_PARTITION
                     ? v_str(r, &l->v[0], s->p, s->n) && v_str(r, &l->v[1], "", 0) && v_str(r, &l->v[2], "", 0)
                     : v_str(r, &l->v[0], "", 0) && v_str(r, &l->v[1], "", 0) && v_str(r, &l->v[2], s->p, s->n);
        } else {
            ok = v_str(r, &l->v[0], s->p, pos) && v_str(r, &l->v[1], sep->p, sep->n) &&
                 v_str(r, &l->v[2], s->p + pos + sep->n, s->n - pos - sep->n);
        }
        if (!ok) return nomem(r);
        *out = v_list(l, JV_TUPLE);
        return KN_OK;
    }
    case S_REMOVEPREFIX: case S_REMOVESUFFIX: {
        if (nargs != 1 || nkw) return rerr(r, at, JINJA_ERR_TYPE, "method takes exactly one argument");
        TRY(want_str(r, at, "removeprefix", &args[0], false));
        const struct jstr *x = args[0].u.s;
        if (x->n <= s->n && fn == S_REMOVEPREFIX && memcmp(s->p, x->p, x->n) == 0)
            return v_str(r, out, s->p + x->n, s->n - x->n) ? KN_OK : nomem(r);
        if (x->n <= s->n && fn == S_REMOVESUFFIX && memcmp(s->p + s->n - x->n, x->p, x->n) == 0)
            return v_str(r, out, s->p, s->n - x->n) ? KN_OK : nomem(r);
        *out = self;
        return KN_OK;
    }
    default:
        return rerr(r, at, JINJA_ERR_UNSUPPORTED, "this string method is not supported");
    }
}

/* ================================================================ filters ========== */

static const char *const k_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
    NULL};
static const char *const k_tests[] = {
    "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean",
    "false", "true", "integer", "float", "lower", "upper", "string", "mapping", "number",
    "sequence", "iterable", "callable", "sameas", "escaped", "in", "eq", "equalto", "ne", "gt",
    "greaterthan", "ge", "lt", "lessthan", "le", NULL};

bool jinja_filter_known(const char *name)
{
    for (size_t i = 0; k_filters[i]; i++)
        if (strcmp(k_filters[i], name) == 0)
            return true;
    return false;
}
bool jinja_test_known(const char *name)
{
    for (size_t i = 0; k_tests[i]; i++)
        if (strcmp(k_tests[i], name) == 0)
            return true;
    return false;
}

/* jinja's make_attrgetter: "a.b.0" walks items (then attributes) part by part. */
static enum kn_status attr_path(struct rs *r, const struct jnode *at, struct jv obj,
                                const struct jv *attr, struct jv *out)
{
    if (attr->t == JV_INT) {
        return get_item(r, at, obj, *attr, out);
    }
    if (attr->t != JV_STR)
        return rerr(r, at, JINJA_ERR_TYPE, "attribute must be a string or an integer");
    const char *p = attr->u.s->p, *end = p + attr->u.s->n;
    struct jv cur = obj;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        struct jv key;
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++)
            if (p[i] < '0' || p[i] > '9') digits = false;
        if (digits && n < 18) {
            key = v_int(strtoll(p, NULL, 10));
        } else if (!v_str(r, &key, p, n)) {
            return nomem(r);
        }
        TRY(get_item(r, at, cur, key, &cur));
        if (!dot)
            break;
        p = dot + 1;
    }
    *out = cur;
    return KN_OK;
}

static struct jv fold_case(struct rs *r, struct jv v, bool case_sensitive)
{
    if (!case_sensitive && v.t == JV_STR) {
        struct jv o;
        if (str_case(r, v.u.s, CM_LOWER, &o))
            return o;
    }
    return v;
}

/* Charges n units of work (comparisons, copies) to the render: lists can be long (range
 * gives up to 100000 items), so linear operations inside loops are bounded too. */
static enum kn_status charge(struct rs *r, const struct jnode *at, size_t n)
{
    r->work += n;
    if (r->work / 64 > r->lim.max_iterations)
        return rerr(r, at, JINJA_ERR_LIMIT, "template does too much work (more than %zu units)",
                    r->lim.max_iterations * 64);
    return KN_OK;
}

/* Stable merge sort of l by keys (Python's sorted: only '<' between keys). */
static enum kn_status sort_seq(struct rs *r, const struct jnode *at, struct jseq *l,
                               struct jv *keys, bool reverse)
{
    size_t n = l->n;
    if (n < 2)
        return KN_OK;
    struct jv *tv = ralloc(r, n * sizeof(*tv)), *tk = ralloc(r, n * sizeof(*tk));
    if (!tv || !tk)
        return nomem(r);
    for (size_t w = 1; w < n; w *= 2) {
        TRY(charge(r, at, n));
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                bool ok = true;
                /* take from the right only when it is strictly before the left: stable */
                int c = reverse ? cmp_vals(&keys[i], &keys[j], &ok) : cmp_vals(&keys[j], &keys[i], &ok);
                if (!ok)
                    return rerr(r, at, JINJA_ERR_TYPE,
                                "'<' not supported between instances of '%s' and '%s'",
                                type_name(&keys[j]), type_name(&keys[i]));
                bool right = c < 0;
                size_t k = right ? j++ : i++;
                tv[o] = l->v[k];
                tk[o++] = keys[k];
            }
            while (i < mid) { tv[o] = l->v[i]; tk[o++] = keys[i++]; }
            while (j < hi) { tv[o] = l->v[j]; tk[o++] = keys[j++]; }
        }
        memcpy(l->v, tv, n * sizeof(*tv));
        memcpy(keys, tk, n * sizeof(*tk));
    }
    return KN_OK;
}

#define FARGS(...)                                                                       \
    static const char *const P[] = {__VA_ARGS__};                                        \
    struct jv a[8];                                                                      \
    bool g[8];                                                                           \
    TRY(bind_args(r, at, name, P, sizeof P / sizeof P[0], args, nargs, kwn, kwv, nkw, a, g))
#define NOARGS()                                                                         \
    if (nargs || nkw)                                                                    \
    return rerr(r, at, JINJA_ERR_TYPE, "filter '%s' takes no arguments", name)

static enum kn_status select_impl(struct rs *r, struct scope *sc, const struct jnode *at,
                                  const char *name, struct jv val, struct jv *args, size_t nargs,
                                  size_t nkw, struct jv *out)
{
    bool attr = name[strlen(name) - 4] == 'a' && strstr(name, "attr") != NULL;
    bool select = name[0] == 's';
    if (nkw)
        return rerr(r, at, JINJA_ERR_TYPE, "filter '%s' takes no keyword arguments", name);
    size_t off = 0;
    struct jv attrname = v_none();
    if (attr) {
        if (nargs < 1)
            return rerr(r, at, JINJA_ERR_TYPE, "%s() missing the attribute argument", name);
        attrname = args[0];
        off = 1;
    }
    const char *test = NULL;
    if (nargs > off) {
        if (args[off].t != JV_STR)
            return rerr(r, at, JINJA_ERR_TYPE, "%s(): the test name must be a string", name);
        test = args[off].u.s->p;
        if (!jinja_test_known(test))
            return rerr(r, at, JINJA_ERR_TYPE, "No test named '%s'.", test);
        off++;
    }
    struct jseq *in;
    if (truthy(&val)) {
        TRY(iterate(r, at, val, &in));
    } else if (!(in = seq_new(r, 0))) { /* jinja: "if value:" before iterating */
        return nomem(r);
    }
    struct jseq *l = seq_new(r, 0);
    if (!l)
        return nomem(r);
    for (size_t i = 0; i < in->n; i++) {
        struct jv x = in->v[i], subj = x;
        if (attr)
            TRY(attr_path(r, at, x, &attrname, &subj));
        bool res = false;
        if (test)
            TRY(apply_test(r, sc, at, test, subj, args + off, nargs - off, &res));
        else
            res = truthy(&subj);
        if (res == select && !seq_push(r, l, x))
            return nomem(r);
    }
    *out = v_list(l, JV_LIST);
    out->gen = 1;
    return KN_OK;
}

static enum kn_status apply_filter(struct rs *r, struct scope *sc, const struct jnode *at,
                                   const char *name, struct jv val, struct jv *args, size_t nargs,
                                   struct jstr **kwn, struct jv *kwv, size_t nkw, struct jv *out)
{
#define IS(s) (strcmp(name, s) == 0)
    /* filters that turn the value into text would print a generator's address */
    if (IS("trim") || IS("upper") || IS("lower") || IS("capitalize") || IS("title") ||
        IS("string") || IS("replace") || IS("safe") || IS("e") || IS("escape") ||
        IS("forceescape") || IS("wordcount") || IS("center") || IS("format"))
        TRY(check_printable(r, at, &val));
    if (IS("default") || IS("d")) {
        FARGS("default_value", "boolean");
        bool use = val.t == JV_UNDEF || (g[1] && truthy(&a[1]) && !truthy(&val));
        if (use) {
            if (g[0]) *out = a[0];
            else if (!v_str(r, out, "", 0)) return nomem(r);
        } else {
            *out = val;
        }
        return KN_OK;
    }
    if (IS("length") || IS("count")) {
        NOARGS();
        int64_t n = 0;
        TRY(length_of(r, at, val, &n));
        *out = v_int(n);
        return KN_OK;
    }
    if (IS("tojson")) {
        FARGS("ensure_ascii", "indent", "separators", "sort_keys");
        struct jsonopt o = {0};
        o.ensure_ascii = g[0] && truthy(&a[0]);
        o.sort_keys = g[3] && truthy(&a[3]);
        char *ind = NULL;
        if (g[1] && a[1].t != JV_NONE) {
            o.has_indent = true;
            if (a[1].t == JV_STR) {
                o.indent = a[1].u.s->p;
                o.indent_n = a[1].u.s->n;
            } else if (a[1].t == JV_INT || a[1].t == JV_BOOL) {
                int64_t k = num_i(&a[1]);
                if (k > 1000) return rerr(r, at, JINJA_ERR_LIMIT, "tojson indent too large");
                if (k < 0) k = 0;
                ind = ralloc(r, (size_t)k + 1);
                if (!ind) return nomem(r);
                memset(ind, ' ', (size_t)k);
                o.indent = ind;
                o.indent_n = (size_t)k;
            } else {
                return rerr(r, at, JINJA_ERR_TYPE, "tojson: indent must be an int or a string");
            }
        }
        o.item_sep = o.has_indent ? "," : ", ";
        o.key_sep = ": ";
        if (g[2] && a[2].t != JV_NONE) {
            if ((a[2].t != JV_LIST && a[2].t != JV_TUPLE) || a[2].u.l->n != 2 ||
                a[2].u.l->v[0].t != JV_STR || a[2].u.l->v[1].t != JV_STR)
                return rerr(r, at, JINJA_ERR_TYPE, "tojson: separators must be a pair of strings");
            o.item_sep = a[2].u.l->v[0].u.s->p;
            o.key_sep = a[2].u.l->v[1].u.s->p;
        }
        o.item_n = strlen(o.item_sep);
        o.key_n = strlen(o.key_sep);
        if (g[2] && a[2].t != JV_NONE) {
            o.item_n = a[2].u.l->v[0].u.s->n;
            o.key_n = a[2].u.l->v[1].u.s->n;
        }
        struct sb b = {.r = r};
        TRY(json_dump(r, at, &b, &val, &o, 0));
        return sb_done(&b, out) ? KN_OK : nomem(r);
    }
    if (IS("trim")) {
        FARGS("chars");
        struct jv s;
        if (!str_of(r, &val, &s)) return nomem(r);
        if (g[0] && a[0].t != JV_NONE) TRY(want_str(r, at, "strip", &a[0], true));
        size_t b = 0, e = 0;
        strip_span(s.u.s, g[0] && a[0].t == JV_STR ? a[0].u.s : NULL, true, true, &b, &e);
        if (!v_substr(r, out, &s, b, e)) return nomem(r);
        out->markup = s.markup; /* Markup.strip() stays Markup */
        return KN_OK;
    }
    if (IS("upper") || IS("lower") || IS("capitalize") || IS("title")) {
        NOARGS();
        struct jv s;
        if (!str_of(r, &val, &s)) return nomem(r);
        enum casemode m = IS("upper") ? CM_UPPER : IS("lower") ? CM_LOWER
                          : IS("capitalize") ? CM_CAPITALIZE : CM_JTITLE;
        if (!str_case(r, s.u.s, m, out)) return nomem(r);
        out->markup = s.markup && m != CM_JTITLE;
        return KN_OK;
    }
    if (IS("string") || IS("safe") || IS("e") || IS("escape") || IS("forceescape")) {
        NOARGS();
        struct jv s;
        if (!str_of(r, &val, &s)) return nomem(r);
        if (IS("string")) {
            *out = s; /* soft_str keeps Markup */
            return KN_OK;
        }
        if (IS("safe") || ((IS("e") || IS("escape")) && val.t == JV_STR && val.markup)) {
            *out = s;
            out->markup = 1;
            return KN_OK;
        }
        return html_escape(r, s.u.s, out) ? KN_OK : nomem(r);
    }
    if (IS("items")) {
        NOARGS();
        if (val.t == JV_UNDEF) {
            struct jseq *l = seq_new(r, 0);
            if (!l) return nomem(r);
            *out = v_list(l, JV_LIST);
            out->gen = 1;
            return KN_OK;
        }
        if (val.t != JV_DICT)
            return rerr(r, at, JINJA_ERR_TYPE, "Can only get item pairs from a mapping.");
        TRY(call_method(r, at, D_ITEMS, val, NULL, 0, NULL, NULL, 0, out));
        out->gen = 1;
        return KN_OK;
    }
    if (IS("replace")) {
        FARGS("old", "new", "count");
        if (!g[0] || !g[1]) return rerr(r, at, JINJA_ERR_TYPE, "replace() missing arguments");
        struct jv s, o, n2;
        if (!str_of(r, &val, &s) || !str_of(r, &a[0], &o) || !str_of(r, &a[1], &n2)) return nomem(r);
        int64_t count = -1;
        TRY(opt_int(r, at, &a[2], g[2], -1, &count));
        return str_replace(r, s.u.s, o.u.s, n2.u.s, count, out) ? KN_OK : nomem(r);
    }
    if (IS("join")) {
        FARGS("d", "attribute");
        struct jseq *l;
        TRY(iterate(r, at, val, &l));
        struct jv sep;
        if (g[0]) { if (!str_of(r, &a[0], &sep)) return nomem(r); }
        else if (!v_str(r, &sep, "", 0)) return nomem(r);
        struct sb b = {.r = r}, m = {.r = r};
        for (size_t i = 0; i < l->n; i++) {
            struct jv x = l->v[i], s;
            if (g[1] && a[1].t != JV_NONE) TRY(attr_path(r, at, x, &a[1], &x));
            if (!str_of(r, &x, &s)) return nomem(r);
            if (i) sb_add_marked(&b, &m, &sep);
            sb_add_marked(&b, &m, &s);
        }
        return sb_done_marked(&b, &m, out) ? KN_OK : nomem(r);
    }
    if (IS("first") || IS("last")) {
        NOARGS();
        if (IS("last") && val.gen)
            return rerr(r, at, JINJA_ERR_TYPE, "'generator' object is not reversible");
        if (val.t == JV_UNDEF && IS("last"))
            return undef_error(r, at, &val);
        struct jseq *l;
        TRY(iterate(r, at, val, &l));
        if (l->n == 0) {
            *out = undef_fmt(r, "No %s item, sequence was empty.%s", IS("first") ? "first" : "last", "");
            return KN_OK;
        }
        *out = IS("first") ? l->v[0] : l->v[l->n - 1];
        return KN_OK;
    }
    if (IS("list")) {
        NOARGS();
        struct jseq *l;
        TRY(iterate(r, at, val, &l));
        struct jseq *c = seq_new(r, l->n);
        if (!c) return nomem(r);
        for (size_t i = 0; i < l->n; i++) c->v[c->n++] = l->v[i];
        *out = v_list(c, JV_LIST);
        return KN_OK;
    }
    if (IS("selectattr") || IS("rejectattr") || IS("select") || IS("reject")) {
        return select_impl(r, sc, at, name, val, args, nargs, nkw, out);
    }
    if (IS("map")) {
        struct jseq *in;
        if (truthy(&val)) {
            TRY(iterate(r, at, val, &in));
        } else if (!(in = seq_new(r, 0))) { /* jinja: "if value:" before iterating */
            return nomem(r);
        }
        struct jseq *l = seq_new(r, in->n);
        if (!l) return nomem(r);
        struct jv *attr = NULL, *dflt = NULL;
        if (in->n == 0) {
            *out = v_list(l, JV_LIST);
            out->gen = 1;
            return KN_OK;
        }
        for (size_t k = 0; k < nkw; k++) {
            if (strcmp(kwn[k]->p, "attribute") == 0) attr = &kwv[k];
            else if (strcmp(kwn[k]->p, "default") == 0) dflt = &kwv[k];
        }
        if (attr || (nargs == 0 && nkw)) {
            if (!attr) return rerr(r, at, JINJA_ERR_TYPE, "map() needs attribute= or a filter name");
            for (size_t i = 0; i < in->n; i++) {
                struct jv x;
                TRY(attr_path(r, at, in->v[i], attr, &x));
                if (x.t == JV_UNDEF && dflt) x = *dflt;
                l->v[l->n++] = x;
            }
        } else {
            if (nargs < 1 || args[0].t != JV_STR)
                return rerr(r, at, JINJA_ERR_TYPE, "map() needs a filter name or attribute=");
            const char *fname = args[0].u.s->p;
            if (!jinja_filter_known(fname))
                return rerr(r, at, JINJA_ERR_TYPE, "No filter named '%s'.", fname);
            for (size_t i = 0; i < in->n; i++) {
                struct jv x;
                TRY(apply_filter(r, sc, at, fname, in->v[i], args + 1, nargs - 1, kwn, kwv, nkw, &x));
                l->v[l->n++] = x;
            }
        }
        *out = v_list(l, JV_LIST);
        out->gen = 1;
        return KN_OK;
    }
    if (IS("unique")) {
        FARGS("case_sensitive", "attribute");
        struct jseq *in;
        TRY(iterate(r, at, val, &in));
        struct jseq *l = seq_new(r, 0), *seen = seq_new(r, 0);
        if (!l || !seen) return nomem(r);
        bool cs = g[0] && truthy(&a[0]);
        for (size_t i = 0; i < in->n; i++) {
            struct jv k = in->v[i];
            if (g[1] && a[1].t != JV_NONE) TRY(attr_path(r, at, k, &a[1], &k));
            k = fold_case(r, k, cs);
            TRY(charge(r, at, seen->n));
            bool dup = false;
            for (size_t j = 0; j < seen->n && !dup; j++) dup = py_eq(&seen->v[j], &k);
            if (!dup && (!seq_push(r, seen, k) || !seq_push(r, l, in->v[i]))) return nomem(r);
        }
        *out = v_list(l, JV_LIST);
        out->gen = 1;
        return KN_OK;
    }
    if (IS("int")) {
        FARGS("default", "base");
        struct jv dflt = g[0] ? a[0] : v_int(0);
        if (val.t == JV_UNDEF) return undef_error(r, at, &val);
        if (val.t == JV_INT) { *out = val; return KN_OK; }
        if (val.t == JV_BOOL) { *out = v_int(val.u.b); return KN_OK; }
        if (val.t == JV_FLOAT) {
            if (!isfinite(val.u.f) || fabs(val.u.f) >= 9.2e18) { *out = dflt; return KN_OK; }
            *out = v_int((int64_t)val.u.f);
            return KN_OK;
        }
        if (val.t == JV_STR) {
            int64_t base = 10;
            TRY(opt_int(r, at, &a[1], g[1], 10, &base));
            char buf[64];
            size_t b2 = 0, e = 0;
            strip_span(val.u.s, NULL, true, true, &b2, &e);
            size_t n = 0;
            for (size_t i = b2; i < e && n + 1 < sizeof buf; i++)
                if (val.u.s->p[i] != '_') buf[n++] = val.u.s->p[i];
            buf[n] = 0;
            char *end = buf;
            errno = 0;
            bool base_ok = base == 0 || (base >= 2 && base <= 36); /* else Python's ValueError */
            long long v = base_ok && n && e - b2 < sizeof buf ? strtoll(buf, &end, (int)base) : 0;
            if (base_ok && n && e - b2 < sizeof buf && *end == 0 && errno == 0 && buf[0] != ' ') {
                *out = v_int(v);
                return KN_OK;
            }
            end = buf;
            double d = n && e - b2 < sizeof buf ? strtod(buf, &end) : 0;
            if (n && e - b2 < sizeof buf && *end == 0 && isfinite(d) && fabs(d) < 9.2e18 &&
                !strpbrk(buf, "xXpP") && !strstr(buf, "nan") && !strstr(buf, "inf")) {
                *out = v_int((int64_t)d);
                return KN_OK;
            }
        }
        *out = dflt;
        return KN_OK;
    }
    if (IS("float")) {
        FARGS("default");
        struct jv dflt = g[0] ? a[0] : v_float(0.0);
        if (val.t == JV_UNDEF) return undef_error(r, at, &val);
        if (is_num(&val)) { *out = v_float(num_d(&val)); return KN_OK; }
        if (val.t == JV_STR) {
            size_t b2 = 0, e = 0;
            strip_span(val.u.s, NULL, true, true, &b2, &e);
            char buf[64];
            if (e > b2 && e - b2 < sizeof buf) {
                memcpy(buf, val.u.s->p + b2, e - b2);
                buf[e - b2] = 0;
                char *end;
                double d = strtod(buf, &end);
                if (*end == 0 && !strpbrk(buf, "xXpP")) { *out = v_float(d); return KN_OK; }
            }
        }
        *out = dflt;
        return KN_OK;
    }
    if (IS("abs")) {
        NOARGS();
        if (val.t == JV_FLOAT) { *out = v_float(fabs(val.u.f)); return KN_OK; }
        if (val.t == JV_INT || val.t == JV_BOOL) {
            int64_t i = num_i(&val);
            if (i == INT64_MIN) return rerr(r, at, JINJA_ERR_UNSUPPORTED, "integer does not fit in 64 bits");
            *out = v_int(i < 0 ? -i : i);
            return KN_OK;
        }
        return rerr(r, at, JINJA_ERR_TYPE, "bad operand type for abs(): '%s'", type_name(&val));
    }
    if (IS("round")) {
        FARGS("precision", "method");
        int64_t prec = 0;
        TRY(opt_int(r, at, &a[0], g[0], 0, &prec));
        const char *method = g[1] && a[1].t == JV_STR ? a[1].u.s->p : "common";
        if (!is_num(&val)) {
            return rerr(r, at, JINJA_ERR_TYPE, "type %s doesn't define __round__ method", type_name(&val));
        }
        if (prec < -20 || prec > 20) return rerr(r, at, JINJA_ERR_UNSUPPORTED, "round precision out of range");
        double x = num_d(&val), p10 = pow(10.0, (double)prec);
        if (strcmp(method, "common") == 0) {
            if (val.t != JV_FLOAT && prec >= 0) { *out = v_int(num_i(&val)); return KN_OK; }
            if (val.t != JV_FLOAT)
                return rerr(r, at, JINJA_ERR_UNSUPPORTED, "round of an int to negative precision");
            char buf[400];
            if (prec >= 0) {
                snprintf(buf, sizeof buf, "%.*f", (int)prec, x); /* correctly rounded, ties even */
                *out = v_float(strtod(buf, NULL));
            } else {
                *out = v_float(nearbyint(x / (1.0 / p10)) * (1.0 / p10));
            }
            return KN_OK;
        }
        if (strcmp(method, "ceil") == 0) { *out = v_float(ceil(x * p10) / p10); return KN_OK; }
        if (strcmp(method, "floor") == 0) { *out = v_float(floor(x * p10) / p10); return KN_OK; }
        return rerr(r, at, JINJA_ERR_TYPE, "method must be common, ceil or floor");
    }
    if (IS("reverse")) {
        NOARGS();
        if (val.t == JV_STR) {
            bool has[3] = {false, false, true};
            struct jv sv[3];
            sv[2] = v_int(-1);
            return slice_of(r, at, val, sv, has, out);
        }
        struct jseq *l;
        if (val.gen) return rerr(r, at, JINJA_ERR_TYPE, "'generator' object is not reversible");
        TRY(iterate(r, at, val, &l));
        struct jseq *c = seq_new(r, l->n);
        if (!c) return nomem(r);
        for (size_t i = l->n; i-- > 0;) c->v[c->n++] = l->v[i];
        *out = v_list(c, JV_LIST);
        out->gen = 1; /* a reverse iterator in Python */
        return KN_OK;
    }
    if (IS("sort")) {
        FARGS("reverse", "case_sensitive", "attribute");
        struct jseq *in;
        TRY(iterate(r, at, val, &in));
        struct jseq *l = seq_new(r, in->n);
        struct jv *keys = ralloc(r, (in->n + 1) * sizeof(*keys));
        if (!l || !keys) return nomem(r);
        for (size_t i = 0; i < in->n; i++) {
            struct jv k = in->v[i];
            if (g[2] && a[2].t != JV_NONE) TRY(attr_path(r, at, k, &a[2], &k));
            keys[i] = fold_case(r, k, g[1] && truthy(&a[1]));
            l->v[l->n++] = in->v[i];
        }
        TRY(sort_seq(r, at, l, keys, g[0] && truthy(&a[0])));
        *out = v_list(l, JV_LIST);
        return KN_OK;
    }
    if (IS("dictsort")) {
        FARGS("case_sensitive", "by", "reverse");
        if (val.t == JV_UNDEF) return undef_error(r, at, &val);
        if (val.t != JV_DICT) return rerr(r, at, JINJA_ERR_TYPE, "dictsort: value is not a mapping");
        bool by_value = g[1] && a[1].t == JV_STR && strcmp(a[1].u.s->p, "value") == 0;
        if (g[1] && a[1].t == JV_STR && !by_value && strcmp(a[1].u.s->p, "key") != 0)
            return rerr(r, at, JINJA_ERR_TYPE, "You can only sort by either \"key\" or \"value\"");
        struct jv items;
        TRY(call_method(r, at, D_ITEMS, val, NULL, 0, NULL, NULL, 0, &items));
        struct jseq *l = items.u.l;
        struct jv *keys = ralloc(r, (l->n + 1) * sizeof(*keys));
        if (!keys) return nomem(r);
        for (size_t i = 0; i < l->n; i++)
            keys[i] = fold_case(r, l->v[i].u.l->v[by_value ? 1 : 0], g[0] && truthy(&a[0]));
        TRY(sort_seq(r, at, l, keys, g[2] && truthy(&a[2])));
        *out = v_list(l, JV_LIST);
        return KN_OK;
    }
    if (IS("indent")) {
        FARGS("width", "first", "blank");
        if (val.t == JV_UNDEF) return undef_error(r, at, &val);
        if (val.t != JV_STR)
            return rerr(r, at, JINJA_ERR_TYPE, "indent: '%s' object has no attribute 'splitlines'",
                        type_name(&val));
        struct jv s;
        if (!str_of(r, &val, &s)) return nomem(r);
        struct jv ind;
        if (g[0] && a[0].t == JV_STR) ind = a[0];
        else {
            int64_t w = 0;
            if (g[0] && a[0].t == JV_UNDEF) /* " " * Undefined */
                return undef_error(r, at, &a[0]);
            TRY(opt_int(r, at, &a[0], g[0], 4, &w));
            if (w > 10000) return rerr(r, at, JINJA_ERR_LIMIT, "indent width too large");
            struct sb b = {.r = r};
            for (int64_t i = 0; i < w; i++) sb_adds(&b, " ");
            if (!b.p) { if (!v_str(r, &ind, "", 0)) return nomem(r); }
            else if (!sb_done(&b, &ind)) return nomem(r);
        }
        /* jinja appends "\n" before splitting (so a trailing newline keeps its line) */
        struct sb t = {.r = r};
        sb_add(&t, s.u.s->p, s.u.s->n);
        sb_adds(&t, "\n");
        if (t.fail) return nomem(r);
        struct jseq *lines;
        TRY(splitlines(r, t.p, t.n, false, &lines));
        struct sb b = {.r = r};
        bool blank = g[2] && truthy(&a[2]);
        if (g[1] && truthy(&a[1])) sb_add(&b, ind.u.s->p, ind.u.s->n);
        for (size_t i = 0; i < lines->n; i++) {
            const struct jstr *ln = lines->v[i].u.s;
            if (i) {
                sb_adds(&b, "\n");
                if (blank || ln->n) sb_add(&b, ind.u.s->p, ind.u.s->n);
            }
            sb_add(&b, ln->p, ln->n);
        }
        if (!b.p) return v_str(r, out, "", 0) ? KN_OK : nomem(r);
        return sb_done(&b, out) ? KN_OK : nomem(r);
    }
    if (IS("wordcount")) {
        NOARGS();
        struct jv s;
        if (!str_of(r, &val, &s)) return nomem(r);
        int64_t c = 0;
        bool in = false;
        for (size_t i = 0; i < s.u.s->n;) {
            uint32_t cp = utf8_next(s.u.s->p, s.u.s->n, &i);
            bool w = cp == '_' || u_digit(cp) || u_alpha(cp);
            if (w && !in) c++;
            in = w;
        }
        *out = v_int(c);
        return KN_OK;
    }
    if (IS("center")) {
        FARGS("width");
        struct jv s;
        if (!str_of(r, &val, &s)) return nomem(r);
        struct jv w = g[0] ? a[0] : v_int(80);
        return call_method(r, at, S_CENTER, s, &w, 1, NULL, NULL, 0, out);
    }
    if (IS("attr")) {
        FARGS("name");
        if (!g[0] || a[0].t != JV_STR) return rerr(r, at, JINJA_ERR_TYPE, "attr() needs a name");
        return get_attr(r, at, val, a[0].u.s->p, a[0].u.s->n, out);
    }
    if (IS("sum")) {
        FARGS("attribute", "start");
        struct jseq *in;
        TRY(iterate(r, at, val, &in));
        struct jv acc = g[1] ? a[1] : v_int(0);
        for (size_t i = 0; i < in->n; i++) {
            struct jv x = in->v[i];
            if (g[0] && a[0].t != JV_NONE) TRY(attr_path(r, at, x, &a[0], &x));
            TRY(arith(r, at, JOP_ADD, acc, x, &acc));
        }
        *out = acc;
        return KN_OK;
    }
    if (IS("min") || IS("max")) {
        FARGS("case_sensitive", "attribute");
        struct jseq *in;
        TRY(iterate(r, at, val, &in));
        if (in->n == 0) {
            *out = undef_fmt(r, "No aggregated item, sequence was empty.%s%s", "", "");
            return KN_OK;
        }
        size_t best = 0;
        struct jv bk = in->v[0];
        if (g[1] && a[1].t != JV_NONE) TRY(attr_path(r, at, bk, &a[1], &bk));
        bk = fold_case(r, bk, g[0] && truthy(&a[0]));
        for (size_t i = 1; i < in->n; i++) {
            struct jv k = in->v[i];
            if (g[1] && a[1].t != JV_NONE) TRY(attr_path(r, at, k, &a[1], &k));
            k = fold_case(r, k, g[0] && truthy(&a[0]));
            bool ok = true;
            int c = cmp_vals(&k, &bk, &ok);
            if (!ok) return rerr(r, at, JINJA_ERR_TYPE, "values cannot be compared");
            if ((IS("min") && c < 0) || (IS("max") && c > 0 && c != 2)) { best = i; bk = k; }
        }
        *out = in->v[best];
        return KN_OK;
    }
    if (IS("batch")) {
        FARGS("linecount", "fill_with");
        int64_t cnt = 0;
        TRY(opt_int(r, at, &a[0], g[0], 0, &cnt));
        if (cnt <= 0) return rerr(r, at, JINJA_ERR_TYPE, "batch size must be positive");
        struct jseq *in;
        TRY(iterate(r, at, val, &in));
        struct jseq *l = seq_new(r, 0), *cur = NULL;
        if (!l) return nomem(r);
        for (size_t i = 0; i < in->n; i++) {
            if (!cur || cur->n == (size_t)cnt) {
                if (!(cur = seq_new(r, 0)) || !seq_push(r, l, v_list(cur, JV_LIST))) return nomem(r);
            }
            if (!seq_push(r, cur, in->v[i])) return nomem(r);
        }
        if (cur && g[1] && a[1].t != JV_NONE)
            while (cur->n < (size_t)cnt)
                if (!seq_push(r, cur, a[1])) return nomem(r);
        *out = v_list(l, JV_LIST);
        out->gen = 1;
        return KN_OK;
    }
    if (IS("format")) {
        if (nargs && nkw)
            return rerr(r, at, JINJA_ERR_TYPE, "can't handle positional and keyword arguments at the same time");
        struct jv s;
        if (!str_of(r, &val, &s)) return nomem(r);
        struct jv fa;
        if (nkw) {
            struct jmap *m = map_new(r);
            if (!m) return nomem(r);
            for (size_t k = 0; k < nkw; k++)
                if (!map_set(r, m, v_strs(kwn[k]), kwv[k])) return nomem(r);
            fa = (struct jv){.t = JV_DICT};
            fa.u.d = m;
        } else {
            struct jseq *l = seq_new(r, nargs);
            if (!l) return nomem(r);
            for (size_t k = 0; k < nargs; k++) l->v[l->n++] = args[k];
            fa = v_list(l, JV_TUPLE);
        }
        return py_percent(r, at, s.u.s, fa, out);
    }
#undef IS
    return rerr(r, at, JINJA_ERR_UNSUPPORTED, "the filter '%s' is not supported", name);
}

/* ================================================================ tests ============ */

static enum kn_status apply_test(struct rs *r, struct scope *sc, const struct jnode *at,
                                 const char *name, struct jv v, struct jv *args, size_t nargs,
                                 bool *out)
{
    (void)sc;
#define IS(s) (strcmp(name, s) == 0)
    size_t want = (IS("divisibleby") || IS("sameas") || IS("in") || IS("eq") || IS("equalto") ||
                   IS("ne") || IS("gt") || IS("greaterthan") || IS("ge") || IS("lt") ||
                   IS("lessthan") || IS("le")) ? 1 : 0;
    if (nargs != want)
        return rerr(r, at, JINJA_ERR_TYPE, "test '%s' takes %zu argument%s, %zu given", name, want,
                    want == 1 ? "" : "s", nargs);
    if (IS("defined")) *out = v.t != JV_UNDEF;
    else if (IS("undefined")) *out = v.t == JV_UNDEF;
    else if (IS("none")) *out = v.t == JV_NONE;
    else if (IS("boolean")) *out = v.t == JV_BOOL;
    else if (IS("true")) *out = v.t == JV_BOOL && v.u.b;
    else if (IS("false")) *out = v.t == JV_BOOL && !v.u.b;
    else if (IS("integer")) *out = v.t == JV_INT;
    else if (IS("float")) *out = v.t == JV_FLOAT;
    else if (IS("number")) *out = is_num(&v);
    else if (IS("string")) *out = v.t == JV_STR;
    else if (IS("mapping")) *out = v.t == JV_DICT;
    else if (IS("iterable"))
        *out = v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST || v.t == JV_TUPLE || v.t == JV_DICT;
    else if (IS("sequence"))
        *out = v.t == JV_UNDEF || v.t == JV_STR || ((v.t == JV_LIST || v.t == JV_TUPLE) && !v.gen) ||
               v.t == JV_DICT;
    else if (IS("callable")) *out = v.t == JV_FUNC || v.t == JV_MACRO || v.t == JV_UNDEF;
    else if (IS("escaped")) *out = false;
    else if (IS("filter")) *out = v.t == JV_STR && jinja_filter_known(v.u.s->p);
    else if (IS("test")) *out = v.t == JV_STR && jinja_test_known(v.u.s->p);
    else if (IS("lower") || IS("upper")) {
        struct jv s, t;
        if (!str_of(r, &v, &s) || !str_case(r, s.u.s, IS("lower") ? CM_LOWER : CM_UPPER, &t))
            return nomem(r);
        *out = py_eq(&s, &t);
    } else if (IS("odd") || IS("even") || IS("divisibleby")) {
        struct jv m;
        TRY(arith(r, at, JOP_MOD, v, IS("divisibleby") ? args[0] : v_int(2), &m));
        bool zero = !truthy(&m);
        *out = IS("odd") ? !zero : zero;
    } else if (IS("sameas")) {
        *out = (v.t == args[0].t && (v.t == JV_NONE ||
                                     (v.t == JV_BOOL && v.u.b == args[0].u.b) ||
                                     (v.t == JV_INT && v.u.i == args[0].u.i &&
                                      v.u.i >= -5 && v.u.i <= 256))) ||
               (v.t >= JV_STR && v.t == args[0].t && v.u.l == args[0].u.l);
    } else if (IS("in")) {
        return contains(r, at, v, args[0], out);
    } else {
        int op = IS("eq") || IS("equalto") ? JOP_EQ : IS("ne") ? JOP_NE
               : IS("gt") || IS("greaterthan") ? JOP_GT : IS("ge") ? JOP_GE
               : IS("lt") || IS("lessthan") ? JOP_LT : JOP_LE;
        return compare(r, at, op, v, args[0], out);
    }
#undef IS
    return KN_OK;
}

/* ================================================================ statements ======= */

static enum kn_status capture(struct rs *r, struct scope *sc, struct jnode *const *body,
                              size_t cnt, struct jv *out)
{
    struct obuf buf = {0}, *saved = r->out;
    r->out = &buf;
    enum kn_status st = exec_body(r, sc, body, cnt);
    r->out = saved;
    if (!st && !v_str_m(r, out, buf.p ? buf.p : "", buf.n, r->track ? JTRUST_MIXED : JTRUST_NONE,
                        buf.m))
        st = nomem(r);
    free(buf.p);
    free(buf.m);
    return st;
}

static enum kn_status call_macro(struct rs *r, const struct jnode *at, struct jmacro *m,
                                 struct jv *args, size_t nargs, struct jstr **kwn,
                                 struct jv *kwv, size_t nkw, struct jv caller, struct jv *out)
{
    const struct jnode *mn = m->node;
    if (r->depth > r->lim.max_depth)
        return rerr(r, at, JINJA_ERR_LIMIT, "macro calls nested too deeply (more than %zu)",
                    r->lim.max_depth);
    if (nargs > mn->nkw)
        return rerr(r, at, JINJA_ERR_TYPE, "macro '%s' takes not more than %zu argument(s)",
                    mn->name->p, mn->nkw);
    struct scope *sc = scope_new(r, m->closure);
    if (!sc)
        return nomem(r);
    for (size_t k = 0; k < nkw; k++) {
        bool ok = false;
        for (size_t i = 0; i < mn->nkw; i++)
            if (strcmp(mn->kwn[i]->p, kwn[k]->p) == 0) {
                ok = i >= nargs;
                if (!ok)
                    return rerr(r, at, JINJA_ERR_TYPE, "macro '%s' got multiple values for argument '%s'",
                                mn->name->p, kwn[k]->p);
            }
        if (!ok)
            return rerr(r, at, JINJA_ERR_TYPE, "macro '%s' takes no keyword argument '%s'",
                        mn->name->p, kwn[k]->p);
    }
    for (size_t i = 0; i < mn->nkw; i++) {
        struct jv v;
        bool set = false;
        if (i < nargs) {
            v = args[i];
            set = true;
        }
        for (size_t k = 0; k < nkw && !set; k++)
            if (strcmp(mn->kwn[i]->p, kwn[k]->p) == 0) {
                v = kwv[k];
                set = true;
            }
        if (!set) {
            if (mn->kwv && mn->kwv[i]) {
                r->depth++;
                enum kn_status st = eval(r, sc, mn->kwv[i], &v);
                r->depth--;
                if (st)
                    return st;
            } else {
                v = undef_fmt(r, "parameter '%s' was not provided%s", mn->kwn[i]->p, "");
            }
        }
        if (!scope_set(r, sc, mn->kwn[i], v))
            return nomem(r);
    }
    static struct jstr *caller_name;
    struct jstr *cn = mkstr(r, "caller", 6);
    (void)caller_name;
    if (!cn)
        return nomem(r);
    if (mn->flag) {
        struct jv cv = caller.t == JV_NONE ? undef_fmt(r, "No caller defined%s%s", "", "") : caller;
        if (!scope_set(r, sc, cn, cv))
            return nomem(r);
    }
    r->depth++;
    enum kn_status st = capture(r, sc, mn->els, mn->nels, out);
    r->depth--;
    r->ctl = 0;
    return st;
}

static enum kn_status assign(struct rs *r, struct scope *sc, const struct jnode *target, struct jv v)
{
    if (target->kind == JN_NAME)
        return scope_set(r, sc, target->name, v) ? KN_OK : nomem(r);
    if (target->kind == JN_ATTR) {
        struct jv obj;
        TRY(eval(r, sc, target->a, &obj));
        if (obj.t != JV_NS)
            return rerr(r, target, JINJA_ERR_TYPE, "cannot assign attribute on non-namespace object");
        return map_set(r, obj.u.d, v_strs(target->name), v) ? KN_OK : nomem(r);
    }
    /* tuple unpacking */
    struct jseq *l;
    TRY(iterate(r, target, v, &l));
    if (l->n != target->nargs)
        return rerr(r, target, JINJA_ERR_TYPE, l->n > target->nargs
                                                   ? "too many values to unpack (expected %zu)"
                                                   : "not enough values to unpack (expected %zu)",
                    target->nargs);
    for (size_t i = 0; i < l->n; i++)
        TRY(assign(r, sc, target->args[i], l->v[i]));
    return KN_OK;
}

static enum kn_status exec_stmt(struct rs *r, struct scope *sc, const struct jnode *n)
{
    switch (n->kind) {
    case JN_DATA:
        return emit_m(r, n, n->lit.u.s->p, n->lit.u.s->n, JTRUST_ALL, NULL);
    case JN_OUT: {
        struct jv v, s;
        TRY(eval(r, sc, n->a, &v));
        TRY(check_printable(r, n, &v));
        if (!str_of(r, &v, &s))
            return nomem(r);
        return emit_v(r, n, &s);
    }
    case JN_IF: {
        struct jv c;
        TRY(eval(r, sc, n->a, &c));
        if (truthy(&c))
            return exec_body(r, sc, n->args, n->nargs);
        return exec_body(r, sc, n->els, n->nels);
    }
    case JN_FOR: {
        struct jv it;
        TRY(eval(r, sc, n->b, &it));
        struct jseq *items;
        TRY(iterate(r, n, it, &items));
        if (n->c) {
            struct jseq *f = seq_new(r, 0);
            if (!f)
                return nomem(r);
            for (size_t i = 0; i < items->n; i++) {
                if (++r->iters > r->lim.max_iterations)
                    return rerr(r, n, JINJA_ERR_LIMIT, "more than %zu loop iterations",
                                r->lim.max_iterations);
                struct scope *fs = scope_new(r, sc);
                if (!fs)
                    return nomem(r);
                TRY(assign(r, fs, n->a, items->v[i]));
                struct jv c;
                TRY(eval(r, fs, n->c, &c));
                if (truthy(&c) && !seq_push(r, f, items->v[i]))
                    return nomem(r);
            }
            items = f;
        } else if (items == it.u.l && (it.t == JV_LIST || it.t == JV_TUPLE)) {
            /* iterate over a snapshot: the body cannot change it (immutable), fine */
        }
        if (items->n == 0)
            return exec_body(r, sc, n->els, n->nels);
        struct jloop *lp = ralloc(r, sizeof(*lp));
        if (!lp)
            return nomem(r);
        memset(lp, 0, sizeof(*lp));
        lp->items = items;
        struct jv lv = {.t = JV_LOOP};
        lv.u.loop = lp;
        struct jstr *loopname = mkstr(r, "loop", 4);
        if (!loopname)
            return nomem(r);
        for (size_t i = 0; i < items->n; i++) {
            if (++r->iters > r->lim.max_iterations)
                return rerr(r, n, JINJA_ERR_LIMIT, "more than %zu loop iterations",
                            r->lim.max_iterations);
            lp->idx = i;
            struct scope *is = scope_new(r, sc);
            if (!is || !scope_set(r, is, loopname, lv))
                return nomem(r);
            TRY(assign(r, is, n->a, items->v[i]));
            TRY(exec_body(r, is, n->args, n->nargs));
            if (r->ctl == 1) {
                r->ctl = 0;
                break;
            }
            r->ctl = 0;
        }
        return KN_OK;
    }
    case JN_SET: {
        struct jv v;
        TRY(eval(r, sc, n->b, &v));
        return assign(r, sc, n->a, v);
    }
    case JN_SETBLOCK: {
        struct jv v;
        TRY(capture(r, sc, n->args, n->nargs, &v));
        if (n->b)
            TRY(eval_filter_chain(r, sc, n->b, &v, &v));
        return assign(r, sc, n->a, v);
    }
    case JN_MACRO: {
        struct jmacro *m = ralloc(r, sizeof(*m));
        if (!m)
            return nomem(r);
        m->node = (struct jnode *)n;
        m->closure = sc;
        m->caller = v_none();
        struct jv v = {.t = JV_MACRO};
        v.u.m = m;
        return scope_set(r, sc, n->name, v) ? KN_OK : nomem(r);
    }
    case JN_CALLBLOCK: {
        struct jmacro *cm = ralloc(r, sizeof(*cm));
        if (!cm)
            return nomem(r);
        cm->node = n->d;
        cm->closure = sc;
        cm->caller = v_none();
        struct jv callerv = {.t = JV_MACRO};
        callerv.u.m = cm;
        const struct jnode *call = n->a;
        struct jv fn;
        struct argv a;
        TRY(eval(r, sc, call->a, &fn));
        TRY(eval_args(r, sc, call, &a));
        if (fn.t != JV_MACRO)
            return rerr(r, n, JINJA_ERR_TYPE, "{%% call %%} needs a macro, got %s", type_name(&fn));
        struct jv res;
        TRY(call_macro(r, n, fn.u.m, a.pos, a.npos, a.kwn, a.kwv, a.nkw, callerv, &res));
        return emit_v(r, n, &res);
    }
    case JN_FILTERBLOCK: {
        struct jv v;
        TRY(capture(r, sc, n->args, n->nargs, &v));
        TRY(eval_filter_chain(r, sc, n->a, &v, &v));
        struct jv s;
        TRY(check_printable(r, n, &v));
        if (!str_of(r, &v, &s))
            return nomem(r);
        return emit_v(r, n, &s);
    }
    case JN_BREAK:
        r->ctl = 1;
        return KN_OK;
    case JN_CONTINUE:
        r->ctl = 2;
        return KN_OK;
    case JN_BODY:
        return exec_body(r, sc, n->args, n->nargs);
    case JN_WITH: {
        struct scope *ws = scope_new(r, sc);
        if (!ws)
            return nomem(r);
        for (size_t i = 0; i < n->nkw; i++) {
            struct jv v;
            TRY(eval(r, sc, n->kwv[i], &v));
            if (!scope_set(r, ws, n->kwn[i], v))
                return nomem(r);
        }
        return exec_body(r, ws, n->args, n->nargs);
    }
    case JN_NOLOADER:
        return rerr(r, n, JINJA_ERR_TYPE,
                    "no loader for this environment specified (chat templates cannot include, "
                    "import or extend other templates)");
    default:
        return rerr(r, n, JINJA_ERR_UNSUPPORTED, "unknown statement");
    }
}

static enum kn_status exec_body(struct rs *r, struct scope *sc, struct jnode *const *body, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++) {
        TRY(exec_stmt(r, sc, body[i]));
        if (r->a.failed)
            return nomem(r);
        if (r->ctl)
            return KN_OK;
    }
    return KN_OK;
}

/* ================================================================ API ============== */

/* The standard chat roles: a role string from this list cannot form a control token
 * with the template's text except the one the template means ('<|' + role + '|>'). */
static bool std_role(const struct jv *v)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool", "developer",
                                        "model", "ipython", "function"};
    if (v->t != JV_STR)
        return false;
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(v->u.s->p, roles[i]) == 0 && strlen(roles[i]) == v->u.s->n)
            return true;
    return false;
}

/* Marks the context values that count as template text: opts->trusted_vars and, with
 * opts->trust_roles, messages[i].role when it is a standard role. */
static void mark_trusted(const struct jinja_options *opts, const char *name, struct jv *v)
{
    for (size_t k = 0; k < opts->n_trusted_vars; k++)
        if (v->t == JV_STR && strcmp(opts->trusted_vars[k], name) == 0)
            v->trust = JTRUST_ALL;
    if (opts->trust_roles && strcmp(name, "messages") == 0 && v->t == JV_LIST) {
        for (size_t i = 0; i < v->u.l->n; i++) {
            struct jv *m = &v->u.l->v[i];
            struct jv *role = m->t == JV_DICT ? map_finds(m->u.d, "role", 4) : NULL;
            if (role && std_role(role))
                role->trust = JTRUST_ALL;
        }
    }
}

static enum kn_status render(const struct jinja_template *t, const struct json_value *context,
                             const struct jinja_options *opts, char **out, uint8_t **marks,
                             size_t *out_len, struct jinja_diag *diag, struct kn_err *err)
{
    *out = NULL;
    if (marks)
        *marks = NULL;
    if (out_len)
        *out_len = 0;
    if (diag)
        memset(diag, 0, sizeof(*diag));
    if (context && context->type != JSON_OBJECT)
        return kn_fail(err, KN_E_ARG, "the template context must be a JSON object");
    struct rs r = {0};
    r.lim = t->limits;
    if (opts) {
        struct jinja_limits l = opts->limits;
        if (l.max_depth) r.lim.max_depth = l.max_depth;
        if (l.max_iterations) r.lim.max_iterations = l.max_iterations;
        if (l.max_output) r.lim.max_output = l.max_output;
        if (l.max_memory) r.lim.max_memory = l.max_memory;
    }
    r.a.cap = r.lim.max_memory;
    r.opts = opts;
    r.err = err;
    r.diag = diag;
    r.track = marks != NULL;
    struct obuf main = {0};
    r.out = &main;
    enum kn_status st = KN_OK;
    r.root = scope_new(&r, NULL);
    if (!r.root)
        st = nomem(&r);
    for (size_t i = 0; !st && context && i < context->u.object.len; i++) {
        const struct json_member *m = &context->u.object.items[i];
        struct jv v;
        struct jstr *name = mkstr(&r, m->key, m->key_len);
        if (!name) {
            st = nomem(&r);
            break;
        }
        st = from_json(&r, m->value, &v, 0);
        if (!st && marks && opts)
            mark_trusted(opts, name->p, &v);
        if (!st && !scope_set(&r, r.root, name, v))
            st = nomem(&r);
    }
    if (!st)
        st = exec_body(&r, r.root, t->root->args, t->root->nargs);
    jarena_free(&r.a);
    if (st) {
        free(main.p);
        free(main.m);
        return st;
    }
    if (!main.p) {
        main.p = malloc(1);
        main.m = malloc(1);
        if (!main.p || !main.m) {
            free(main.p);
            free(main.m);
            return kn_fail(err, KN_E_NOMEM, "out of memory rendering a template");
        }
        main.p[0] = 0;
    }
    if (marks)
        *marks = main.m;
    else
        free(main.m);
    *out = main.p;
    if (out_len)
        *out_len = main.n;
    return KN_OK;
}

enum kn_status jinja_render(const struct jinja_template *t, const struct json_value *context,
                            const struct jinja_options *opts, char **out, size_t *out_len,
                            struct jinja_diag *diag, struct kn_err *err)
{
    return render(t, context, opts, out, NULL, out_len, diag, err);
}

enum kn_status jinja_render_marked(const struct jinja_template *t,
                                   const struct json_value *context,
                                   const struct jinja_options *opts, char **out, uint8_t **marks,
                                   size_t *out_len, struct jinja_diag *diag, struct kn_err *err)
{
    return render(t, context, opts, out, marks, out_len, diag, err);
}

enum kn_status jinja_chat_context(const struct json_value *messages,
                                  const struct json_value *tools,
                                  const struct json_value *documents, bool add_generation_prompt,
                                  const char *bos_token, const char *eos_token,
                                  const struct json_value *kwargs, struct json_value **out,
                                  struct kn_err *err)
{
    *out = NULL;
    if (!messages || messages->type != JSON_ARRAY)
        return kn_fail(err, KN_E_ARG, "chat messages must be a JSON array");
    if (kwargs && kwargs->type != JSON_OBJECT)
        return kn_fail(err, KN_E_ARG, "chat_template_kwargs must be a JSON object");
    struct json_value *ctx = json_new_object();
    if (!ctx)
        return kn_fail(err, KN_E_NOMEM, "out of memory building a chat context");
    enum kn_status st = json_object_set(ctx, "messages", json_clone(messages), err);
    if (!st)
        st = json_object_set(ctx, "tools", tools ? json_clone(tools) : json_new_null(), err);
    if (!st)
        st = json_object_set(ctx, "documents", documents ? json_clone(documents) : json_new_null(), err);
    if (!st)
        st = json_object_set(ctx, "add_generation_prompt", json_new_bool(add_generation_prompt), err);
    if (!st && bos_token)
        st = json_object_set(ctx, "bos_token", json_new_string(bos_token), err);
    if (!st && eos_token)
        st = json_object_set(ctx, "eos_token", json_new_string(eos_token), err);
    for (size_t i = 0; !st && kwargs && i < kwargs->u.object.len; i++) {
        const struct json_member *m = &kwargs->u.object.items[i];
        if (strlen(m->key) != m->key_len) {
            st = kn_fail(err, KN_E_ARG, "chat_template_kwargs: a key contains a NUL byte");
            break;
        }
        json_free(json_object_take(ctx, m->key));
        st = json_object_set(ctx, m->key, json_clone(m->value), err);
    }
    if (st) {
        json_free(ctx);
        return st;
    }
    *out = ctx;
    return KN_OK;
}

const char *jinja_pick_template(const struct json_value *ct, const char *name, size_t *len)
{
    if (!ct)
        return NULL;
    if (ct->type == JSON_STRING) {
        if (name && strcmp(name, "default") != 0)
            return NULL;
        if (len)
            *len = ct->u.string.len;
        return ct->u.string.s;
    }
    if (ct->type != JSON_ARRAY)
        return NULL;
    const char *want = name ? name : "default";
    for (size_t i = 0; i < ct->u.array.len; i++) {
        const struct json_value *e = ct->u.array.items[i];
        const char *n = json_str(json_get(e, "name"));
        const struct json_value *tv = json_get(e, "template");
        if (n && strcmp(n, want) == 0 && tv && tv->type == JSON_STRING) {
            if (len)
                *len = tv->u.string.len;
            return tv->u.string.s;
        }
    }
    return NULL;
}
