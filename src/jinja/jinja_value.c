/* jinja_value.c: the renderer's values with Python semantics: errors, strings with
 * their provenance, lists and dicts, UTF-8 and case helpers, str()/repr(), json.dumps,
 * ordering, scopes, and the conversion of the JSON context into values. */
#include "jinja_render_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ errors =========== */

enum kn_status jr_rerr(struct rs *r, const struct jnode *at, enum jinja_error_kind kind,
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

enum kn_status jr_nomem(struct rs *r)
{
    if (r->over_work) /* a builder stopped because the budget ran out */
        return jr_work_error(r, NULL);
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

/* ================================================================ values =========== */

bool jr_v_str(struct rs *r, struct jv *out, const char *p, size_t n)
{
    if (!jr_work(r, n))
        return false;
    struct jstr *s = mkstr(r, p, n);
    if (!s)
        return false;
    *out = (struct jv){.t = JV_STR};
    out->u.s = s;
    return true;
}

/* ---- provenance of strings (jinja_render_marked) ---- */

/* The per-byte mask of a JTRUST_MIXED string; NULL otherwise. */

/* A string value with a provenance: trust JTRUST_NONE/ALL, or JTRUST_MIXED with mask (n
 * bytes), which is normalised to NONE or ALL when it is uniform. */
bool jr_v_str_m(struct rs *r, struct jv *out, const char *p, size_t n, int trust,
                const uint8_t *mask)
{
    if (trust == JTRUST_MIXED) {
        if (!jr_work(r, n))
            return false;
        size_t ones = 0;
        for (size_t i = 0; i < n; i++)
            ones += mask[i] != 0;
        trust = ones == 0 ? JTRUST_NONE : ones == n ? JTRUST_ALL : JTRUST_MIXED;
    }
    if (trust != JTRUST_MIXED) {
        if (!jr_v_str(r, out, p, n))
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
bool jr_v_substr(struct rs *r, struct jv *out, const struct jv *s, size_t b, size_t e)
{
    const uint8_t *m = str_mask(s);
    return jr_v_str_m(r, out, s->u.s->p + b, e - b, s->trust, m ? m + b : NULL);
}

/* a + b for two strings, keeping each byte's provenance. */
bool jr_str_join2(struct rs *r, const struct jv *a, const struct jv *b, struct jv *out)
{
    size_t na = a->u.s->n, nb = b->u.s->n, n;
    if (!kn_add_size(na, nb, &n) || !jr_work(r, n))
        return false;
    char *p = ralloc(r, n + 1);
    if (!p)
        return false;
    memcpy(p, a->u.s->p, na);
    memcpy(p + na, b->u.s->p, nb);
    if (a->trust == b->trust && a->trust != JTRUST_MIXED)
        return jr_v_str_m(r, out, p, n, a->trust, NULL);
    uint8_t *m = ralloc(r, n ? n : 1);
    if (!m)
        return false;
    for (size_t i = 0; i < na; i++)
        m[i] = trusted_at(a, i);
    for (size_t i = 0; i < nb; i++)
        m[na + i] = trusted_at(b, i);
    return jr_v_str_m(r, out, p, n, JTRUST_MIXED, m);
}

struct jseq *jr_seq_new(struct rs *r, size_t cap)
{
    if (!jr_work_elems(r, cap))
        return NULL;
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
bool jr_seq_push(struct rs *r, struct jseq *l, struct jv x)
{
    if (!jr_work_elems(r, 1))
        return false;
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
struct jmap *jr_map_new(struct rs *r)
{
    struct jmap *m = ralloc(r, sizeof(*m));
    if (m)
        memset(m, 0, sizeof(*m));
    return m;
}

/* Lookups are linear (dicts of chat templates are small): each charges its scan. */
struct jv *jr_map_find(struct rs *r, struct jmap *m, const struct jv *k)
{
    for (size_t i = 0; i < m->n; i++)
        if (jr_py_eq(r, &m->k[i], k))
            return &m->v[i];
    return NULL;
}
struct jv *jr_map_finds(struct rs *r, struct jmap *m, const char *key, size_t n)
{
    if (!jr_work_elems(r, m->n))
        return NULL;
    for (size_t i = 0; i < m->n; i++)
        if (m->k[i].t == JV_STR && m->k[i].u.s->n == n && memcmp(m->k[i].u.s->p, key, n) == 0)
            return &m->v[i];
    return NULL;
}
bool jr_map_set(struct rs *r, struct jmap *m, struct jv k, struct jv v)
{
    struct jv *slot = jr_map_find(r, m, &k);
    if (slot) {
        *slot = v;
        return true;
    }
    return r->over_work ? false : jr_map_add(r, m, k, v);
}

/* Appends key k, which the caller knows is not in m (the keys of a JSON object or of
 * another dict). */
bool jr_map_add(struct rs *r, struct jmap *m, struct jv k, struct jv v)
{
    if (!jr_work_elems(r, 1))
        return false;
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

const char *jr_type_name(const struct jv *v)
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

bool jr_truthy(const struct jv *v)
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

bool jr_py_eq(struct rs *r, const struct jv *a, const struct jv *b)
{
    if (!jr_work_elems(r, 1))
        return false;
    if (is_num(a) && is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT)
            return num_i(a) == num_i(b);
        return num_d(a) == num_d(b);
    }
    if (a->t != b->t)
        return false;
    switch (a->t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR:
        return a->u.s->n == b->u.s->n && jr_work(r, a->u.s->n) &&
               memcmp(a->u.s->p, b->u.s->p, a->u.s->n) == 0;
    case JV_LIST: case JV_TUPLE:
        if (a->gen || b->gen || a->u.l == b->u.l)
            return a->u.l == b->u.l;
        if (a->u.l->n != b->u.l->n)
            return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!jr_py_eq(r, &a->u.l->v[i], &b->u.l->v[i]))
                return false;
        return true;
    case JV_DICT:
        if (a->u.d == b->u.d)
            return true;
        if (a->u.d->n != b->u.d->n)
            return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            struct jv *o = jr_map_find(r, b->u.d, &a->u.d->k[i]);
            if (!o || !jr_py_eq(r, &a->u.d->v[i], o))
                return false;
        }
        return true;
    case JV_FUNC: return a->fn == b->fn && a->u.f2 == b->u.f2;
    default: return a->u.l == b->u.l; /* identity */
    }
}

/* ---- UTF-8 helpers ---- */

uint32_t jr_utf8_next(const char *s, size_t n, size_t *i)
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
size_t jr_utf8_put(char *buf, uint32_t cp)
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
size_t jr_utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            c++;
    return c;
}
/* Python's str.isspace() for a code point. */
bool jr_u_space(uint32_t c)
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
uint32_t jr_u_lower(uint32_t c)
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
uint32_t jr_u_upper(uint32_t c)
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
bool jr_u_isupper(uint32_t c) { return jr_u_lower(c) != c; }
bool jr_u_islower(uint32_t c) { return jr_u_upper(c) != c || c == 0xDF; }
bool jr_u_cased(uint32_t c) { return jr_u_isupper(c) || jr_u_islower(c); }
bool jr_u_alpha(uint32_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= 0xAA && !jr_u_space(c) && u_printable(c) && c != 0xD7 && c != 0xF7 &&
            !(c >= 0x2000 && c <= 0x2BFF) && !(c >= 0x3000 && c <= 0x303F) &&
            !(c >= 0xFF00 && c <= 0xFF0F) && !(c >= 0xB0 && c <= 0xBF && c != 0xB5 && c != 0xBA));
}

/* ---- string builder in the arena ---- */
void jr_sb_add(struct sb *b, const char *s, size_t n)
{
    size_t need;
    if (b->fail)
        return;
    if (!jr_work(b->r, n) || !kn_add_size(b->n, n, &need) || !kn_add_size(need, 1, &need)) {
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
void jr_sb_adds(struct sb *b, const char *s) { jr_sb_add(b, s, strlen(s)); }
void jr_sb_cp(struct sb *b, uint32_t cp)
{
    char t[4];
    jr_sb_add(b, t, jr_utf8_put(t, cp));
}
/* Finishes into a string value (the buffer becomes the jstr's storage when possible). */
bool jr_sb_done(struct sb *b, struct jv *out)
{
    if (b->fail)
        return false;
    return jr_v_str(b->r, out, b->p ? b->p : "", b->n);
}

/* Appends string v to b and its marks to m (a byte per byte, as chars). */
void jr_sb_add_marked(struct sb *b, struct sb *m, const struct jv *v)
{
    size_t n = v->u.s->n;
    jr_sb_add(b, v->u.s->p, n);
    if (v->trust == JTRUST_MIXED) {
        jr_sb_add(m, (const char *)str_mask(v), n);
        return;
    }
    char fill[64];
    memset(fill, v->trust == JTRUST_ALL, sizeof fill);
    for (size_t k = 0; k < n; k += sizeof fill)
        jr_sb_add(m, fill, n - k < sizeof fill ? n - k : sizeof fill);
}

/* Finishes a marked string built with sb_add_marked. */
bool jr_sb_done_marked(struct sb *b, struct sb *m, struct jv *out)
{
    if (b->fail || m->fail)
        return false;
    if (!b->p)
        return jr_v_str(b->r, out, "", 0);
    return jr_v_str_m(b->r, out, b->p, b->n, JTRUST_MIXED, (const uint8_t *)m->p);
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
    jr_sb_add(b, &q, 1);
    for (size_t i = 0; i < n;) {
        size_t st = i;
        uint32_t c = jr_utf8_next(s, n, &i);
        char t[16];
        if (c == (uint32_t)q || c == '\\') {
            t[0] = '\\';
            t[1] = (char)c;
            jr_sb_add(b, t, 2);
        } else if (c == '\n') jr_sb_adds(b, "\\n");
        else if (c == '\r') jr_sb_adds(b, "\\r");
        else if (c == '\t') jr_sb_adds(b, "\\t");
        else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !u_printable(c))) {
            if (c < 0x100) snprintf(t, sizeof t, "\\x%02x", c);
            else if (c < 0x10000) snprintf(t, sizeof t, "\\u%04x", c);
            else snprintf(t, sizeof t, "\\U%08x", c);
            jr_sb_adds(b, t);
        } else {
            jr_sb_add(b, s + st, i - st);
        }
    }
    jr_sb_add(b, &q, 1);
}

void jr_to_str(struct sb *b, const struct jv *v, bool repr)
{
    char t[64];
    switch (v->t) {
    case JV_UNDEF: if (repr) jr_sb_adds(b, "Undefined"); break;
    case JV_NONE: jr_sb_adds(b, "None"); break;
    case JV_BOOL: jr_sb_adds(b, v->u.b ? "True" : "False"); break;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)v->u.i); jr_sb_adds(b, t); break;
    case JV_FLOAT: fmt_float(v->u.f, t, sizeof t); jr_sb_adds(b, t); break;
    case JV_STR:
        if (repr) repr_str(b, v->u.s->p, v->u.s->n);
        else jr_sb_add(b, v->u.s->p, v->u.s->n);
        break;
    case JV_LIST: case JV_TUPLE: {
        if (v->gen) {
            jr_sb_adds(b, "<generator object>");
            break;
        }
        jr_sb_adds(b, v->t == JV_LIST ? "[" : "(");
        for (size_t i = 0; i < v->u.l->n && !b->fail; i++) {
            if (i) jr_sb_adds(b, ", ");
            jr_to_str(b, &v->u.l->v[i], true);
        }
        if (v->t == JV_TUPLE && v->u.l->n == 1) jr_sb_adds(b, ",");
        jr_sb_adds(b, v->t == JV_LIST ? "]" : ")");
        break;
    }
    case JV_DICT: case JV_NS: {
        if (v->t == JV_NS) jr_sb_adds(b, "<Namespace ");
        jr_sb_adds(b, "{");
        for (size_t i = 0; i < v->u.d->n && !b->fail; i++) {
            if (i) jr_sb_adds(b, ", ");
            jr_to_str(b, &v->u.d->k[i], true);
            jr_sb_adds(b, ": ");
            jr_to_str(b, &v->u.d->v[i], true);
        }
        jr_sb_adds(b, "}");
        if (v->t == JV_NS) jr_sb_adds(b, ">");
        break;
    }
    case JV_LOOP:
        snprintf(t, sizeof t, "<LoopContext %zu/%zu>", v->u.loop->idx + 1, v->u.loop->items->n);
        jr_sb_adds(b, t);
        break;
    case JV_MACRO:
        jr_sb_adds(b, "<Macro '");
        jr_sb_adds(b, v->u.m->node->name->p);
        jr_sb_adds(b, "'>");
        break;
    default:
        jr_sb_adds(b, jr_builtin(v->fn)->repr ? jr_builtin(v->fn)->repr : "<built-in method>");
        break;
    }
}

/* str(v) as a string value. Fails (false) only when out of memory. */
bool jr_str_of(struct rs *r, const struct jv *v, struct jv *out)
{
    if (v->t == JV_STR) {
        *out = *v;
        return true;
    }
    struct sb b = {.r = r};
    jr_to_str(&b, v, false);
    return jr_sb_done(&b, out);
}

/* Generators and loop objects print with an address in Python: refuse them. */
enum kn_status jr_check_printable(struct rs *r, const struct jnode *at, const struct jv *v)
{
    if ((v->t == JV_LIST && v->gen) || v->t == JV_LOOP ||
        (v->t == JV_FUNC && !jr_builtin(v->fn)->repr))
        return jr_rerr(r, at, JINJA_ERR_TYPE,
                       "printing a %s gives a memory address in Python; convert it first "
                       "(for example with |list)", jr_type_name(v));
    if (v->t == JV_LIST || v->t == JV_TUPLE || v->t == JV_DICT || v->t == JV_NS) {
        size_t n = v->t == JV_DICT || v->t == JV_NS ? v->u.d->n : v->u.l->n;
        TRY(jr_charge(r, at, jr_elems_work(n)));
        for (size_t i = 0; i < n; i++) {
            if (v->t == JV_DICT || v->t == JV_NS) {
                TRY(jr_check_printable(r, at, &v->u.d->k[i]));
                TRY(jr_check_printable(r, at, &v->u.d->v[i]));
            } else {
                TRY(jr_check_printable(r, at, &v->u.l->v[i]));
            }
        }
    }
    return KN_OK;
}

/* ---- json.dumps ---- */

static void json_esc(struct sb *b, const char *s, size_t n, bool ascii)
{
    jr_sb_adds(b, "\"");
    for (size_t i = 0; i < n;) {
        size_t st = i;
        uint32_t c = jr_utf8_next(s, n, &i);
        char t[16];
        switch (c) {
        case '"': jr_sb_adds(b, "\\\""); break;
        case '\\': jr_sb_adds(b, "\\\\"); break;
        case '\n': jr_sb_adds(b, "\\n"); break;
        case '\r': jr_sb_adds(b, "\\r"); break;
        case '\t': jr_sb_adds(b, "\\t"); break;
        case '\b': jr_sb_adds(b, "\\b"); break;
        case '\f': jr_sb_adds(b, "\\f"); break;
        default:
            if (c < 0x20 || (ascii && c >= 0x7F)) {
                if (c < 0x7F || c < 0x10000) {
                    snprintf(t, sizeof t, "\\u%04x", c);
                } else {
                    uint32_t v = c - 0x10000;
                    snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                }
                jr_sb_adds(b, t);
            } else {
                jr_sb_add(b, s + st, i - st);
            }
        }
    }
    jr_sb_adds(b, "\"");
}

enum kn_status jr_json_dump(struct rs *r, const struct jnode *at, struct sb *b,
                            const struct jv *v, const struct jsonopt *o, size_t level)
{
    if (level > r->lim.max_depth)
        return jr_rerr(r, at, JINJA_ERR_LIMIT, "tojson: value nested too deeply");
    char t[64];
    switch (v->t) {
    case JV_NONE: jr_sb_adds(b, "null"); return KN_OK;
    case JV_BOOL: jr_sb_adds(b, v->u.b ? "true" : "false"); return KN_OK;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)v->u.i); jr_sb_adds(b, t); return KN_OK;
    case JV_FLOAT:
        if (isnan(v->u.f)) jr_sb_adds(b, "NaN");
        else if (isinf(v->u.f)) jr_sb_adds(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else { fmt_float(v->u.f, t, sizeof t); jr_sb_adds(b, t); }
        return KN_OK;
    case JV_STR: json_esc(b, v->u.s->p, v->u.s->n, o->ensure_ascii); return KN_OK;
    case JV_LIST: case JV_TUPLE: case JV_DICT: {
        if (v->gen)
            break;
        bool dict = v->t == JV_DICT;
        size_t n = dict ? v->u.d->n : v->u.l->n;
        if (n == 0) {
            jr_sb_adds(b, dict ? "{}" : "[]");
            return KN_OK;
        }
        size_t *order = NULL;
        if (dict && o->sort_keys) {
            order = ralloc(r, n * sizeof(*order));
            if (!order)
                return jr_nomem(r);
            for (size_t i = 0; i < n; i++)
                order[i] = i;
            for (size_t i = 1; i < n; i++) { /* insertion sort: stable */
                size_t x = order[i], j = i;
                while (j > 0) {
                    bool ok = true;
                    int c = jr_cmp_vals(r, &v->u.d->k[x], &v->u.d->k[order[j - 1]], &ok);
                    if (r->over_work)
                        return jr_work_error(r, at);
                    if (!ok)
                        return jr_rerr(r, at, JINJA_ERR_TYPE,
                                       "tojson(sort_keys=true): keys of different types cannot be sorted");
                    if (c >= 0)
                        break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        jr_sb_adds(b, dict ? "{" : "[");
        for (size_t i = 0; i < n && !b->fail; i++) {
            if (i)
                jr_sb_add(b, o->item_sep, o->item_n);
            if (o->has_indent) {
                jr_sb_adds(b, "\n");
                for (size_t k = 0; k <= level; k++)
                    jr_sb_add(b, o->indent, o->indent_n);
            }
            if (dict) {
                size_t x = order ? order[i] : i;
                const struct jv *k = &v->u.d->k[x];
                if (k->t == JV_STR) {
                    json_esc(b, k->u.s->p, k->u.s->n, o->ensure_ascii);
                } else if (k->t == JV_INT || k->t == JV_BOOL || k->t == JV_NONE || k->t == JV_FLOAT) {
                    jr_sb_adds(b, "\"");
                    TRY(jr_json_dump(r, at, b, k, o, level + 1));
                    jr_sb_adds(b, "\"");
                } else {
                    return jr_rerr(r, at, JINJA_ERR_TYPE,
                                   "keys must be str, int, float, bool or None, not %s", jr_type_name(k));
                }
                jr_sb_add(b, o->key_sep, o->key_n);
                TRY(jr_json_dump(r, at, b, &v->u.d->v[x], o, level + 1));
            } else {
                TRY(jr_json_dump(r, at, b, &v->u.l->v[i], o, level + 1));
            }
        }
        if (o->has_indent) {
            jr_sb_adds(b, "\n");
            for (size_t k = 0; k < level; k++)
                jr_sb_add(b, o->indent, o->indent_n);
        }
        jr_sb_adds(b, dict ? "}" : "]");
        return KN_OK;
    }
    default: break;
    }
    return jr_rerr(r, at, JINJA_ERR_TYPE, "Object of type %s is not JSON serializable", jr_type_name(v));
}

/* markupsafe.escape of a plain string. */
bool jr_html_escape(struct rs *r, const struct jstr *s, struct jv *out)
{
    struct sb b = {.r = r};
    jr_sb_add(&b, "", 0);
    for (size_t i = 0; i < s->n; i++) {
        char c = s->p[i];
        if (c == '&') jr_sb_adds(&b, "&amp;");
        else if (c == '<') jr_sb_adds(&b, "&lt;");
        else if (c == '>') jr_sb_adds(&b, "&gt;");
        else if (c == '"') jr_sb_adds(&b, "&#34;");
        else if (c == '\'') jr_sb_adds(&b, "&#39;");
        else jr_sb_add(&b, &c, 1);
    }
    if (!jr_sb_done(&b, out))
        return false;
    out->markup = 1;
    return true;
}

/* ---- ordering ---- */
int jr_cmp_vals(struct rs *r, const struct jv *a, const struct jv *b, bool *ok)
{
    if (!jr_work_elems(r, 1))
        return 0;
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
        if (!jr_work(r, n))
            return 0;
        int c = memcmp(a->u.s->p, b->u.s->p, n);
        if (c) return c < 0 ? -1 : 1;
        return a->u.s->n < b->u.s->n ? -1 : a->u.s->n > b->u.s->n;
    }
    if ((a->t == JV_LIST || a->t == JV_TUPLE) && a->t == b->t && !a->gen && !b->gen) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jr_py_eq(r, &a->u.l->v[i], &b->u.l->v[i]))
                continue;
            return jr_cmp_vals(r, &a->u.l->v[i], &b->u.l->v[i], ok);
        }
        return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
    }
    *ok = false;
    return 0;
}

/* ================================================================ scopes =========== */

struct scope *jr_scope_new(struct rs *r, struct scope *parent)
{
    struct scope *s = ralloc(r, sizeof(*s));
    if (s) {
        memset(s, 0, sizeof(*s));
        s->parent = parent;
    }
    return s;
}
bool jr_scope_set(struct rs *r, struct scope *s, struct jstr *name, struct jv v)
{
    if (!jr_work_elems(r, s->n))
        return false;
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
bool jr_scope_get(struct rs *r, struct scope *s, const char *name, size_t n, struct jv *out)
{
    for (; s && jr_work_elems(r, s->n + 1); s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->names[i]->n == n && memcmp(s->names[i]->p, name, n) == 0) {
                *out = s->vals[i];
                return true;
            }
    return false;
}

/* ================================================================ conversion ======= */

enum kn_status jr_from_json(struct rs *r, const struct json_value *j, struct jv *out, size_t depth)
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
        if (!jr_v_str(r, out, j->u.string.s, j->u.string.len))
            return jr_nomem(r);
        return KN_OK;
    case JSON_ARRAY: {
        struct jseq *l = jr_seq_new(r, j->u.array.len);
        if (!l)
            return jr_nomem(r);
        for (size_t i = 0; i < j->u.array.len; i++) {
            TRY(jr_from_json(r, j->u.array.items[i], &l->v[i], depth + 1));
            l->n++;
        }
        *out = v_list(l, JV_LIST);
        return KN_OK;
    }
    case JSON_OBJECT: {
        struct jmap *m = jr_map_new(r);
        if (!m)
            return jr_nomem(r);
        for (size_t i = 0; i < j->u.object.len; i++) {
            struct jv k, v;
            if (!jr_v_str(r, &k, j->u.object.items[i].key, j->u.object.items[i].key_len))
                return jr_nomem(r);
            TRY(jr_from_json(r, j->u.object.items[i].value, &v, depth + 1));
            if (!jr_map_add(r, m, k, v)) /* JSON objects have unique keys (json.h) */
                return jr_nomem(r);
        }
        struct jv d = {.t = JV_DICT};
        d.u.d = m;
        *out = d;
        return KN_OK;
    }
    }
    return kn_fail(r->err, KN_E_INTERNAL, "bad JSON value type");
}
