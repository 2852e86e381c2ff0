/* jinja_filters.c: jinja2's built-in filters (and transformers' tojson), one small function
 * each, found by name in the table k_filters at the end of the file. */
#include "jinja_render_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ filters ========== */

/* jinja's make_attrgetter: "a.b.0" walks items (then attributes) part by part. */
static enum kn_status attr_path(struct rs *r, const struct jnode *at, struct jv obj,
                                const struct jv *attr, struct jv *out)
{
    if (attr->t == JV_INT) {
        return jr_get_item(r, at, obj, *attr, out);
    }
    if (attr->t != JV_STR)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "attribute must be a string or an integer");
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
        } else if (!jr_v_str(r, &key, p, n)) {
            return jr_nomem(r);
        }
        TRY(jr_get_item(r, at, cur, key, &cur));
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
        if (jr_str_case(r, v.u.s, CM_LOWER, &o))
            return o;
    }
    return v;
}

enum kn_status jr_work_error(struct rs *r, const struct jnode *at)
{
    return jr_rerr(r, at ? at : r->cur, JINJA_ERR_LIMIT,
                   "template exceeds its work budget of %zu units (string and list scans, "
                   "comparisons, copies and evaluation steps); it is refused as runaway or hostile",
                   r->lim.max_work);
}

enum kn_status jr_charge(struct rs *r, const struct jnode *at, size_t n)
{
    return jr_work(r, n) ? KN_OK : jr_work_error(r, at);
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
        return jr_nomem(r);
    for (size_t w = 1; w < n; w *= 2) {
        TRY(jr_charge(r, at, jr_elems_work(n)));
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                bool ok = true;
                /* take from the right only when it is strictly before the left: stable */
                int c = reverse ? jr_cmp_vals(r, &keys[i], &keys[j], &ok)
                                : jr_cmp_vals(r, &keys[j], &keys[i], &ok);
                if (r->over_work)
                    return jr_work_error(r, at);
                if (!ok)
                    return jr_rerr(r, at, JINJA_ERR_TYPE,
                                   "'<' not supported between instances of '%s' and '%s'",
                                   jr_type_name(&keys[j]), jr_type_name(&keys[i]));
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

/* Binds the call's arguments to the filter's named parameters: a[i], given g[i]. */
#define FARGS(...)                                                                       \
    static const char *const P[] = {__VA_ARGS__};                                        \
    struct jv a[8];                                                                      \
    bool g[8];                                                                           \
    TRY(jr_bind_args(c->r, c->at, c->name, P, sizeof P / sizeof P[0], c->args, c->nargs, c->kwn, \
                     c->kwv, c->nkw, a, g))
#define NOARGS()                                                                         \
    if (c->nargs || c->nkw)                                                              \
    return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "filter '%s' takes no arguments", c->name)

enum { SEL_SELECT = 1, SEL_ATTR = 2 };
/* select, reject, selectattr, rejectattr (arg: SEL_*). */
static enum kn_status f_select(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    const char *name = c->name;
    struct jv *args = c->args;
    size_t nargs = c->nargs;
    bool attr = c->arg & SEL_ATTR;
    bool select = c->arg & SEL_SELECT;
    if (c->nkw)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "filter '%s' takes no keyword arguments", name);
    size_t off = 0;
    struct jv attrname = v_none();
    if (attr) {
        if (nargs < 1)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "%s() missing the attribute argument", name);
        attrname = args[0];
        off = 1;
    }
    const char *test = NULL;
    if (nargs > off) {
        if (args[off].t != JV_STR)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "%s(): the test name must be a string", name);
        test = args[off].u.s->p;
        if (!jinja_test_known(test))
            return jr_rerr(r, at, JINJA_ERR_TYPE, "No test named '%s'.", test);
        off++;
    }
    struct jseq *in;
    if (jr_truthy(&val)) {
        TRY(jr_iterate(r, at, val, &in));
    } else if (!(in = jr_seq_new(r, 0))) { /* jinja: "if value:" before iterating */
        return jr_nomem(r);
    }
    struct jseq *l = jr_seq_new(r, 0);
    if (!l)
        return jr_nomem(r);
    for (size_t i = 0; i < in->n; i++) {
        struct jv x = in->v[i], subj = x;
        if (attr)
            TRY(attr_path(r, at, x, &attrname, &subj));
        bool res = false;
        if (test)
            TRY(jr_apply_test(r, c->sc, at, test, subj, args + off, nargs - off, &res));
        else
            res = jr_truthy(&subj);
        if (res == select && !jr_seq_push(r, l, x))
            return jr_nomem(r);
    }
    *out = v_list(l, JV_LIST);
    out->gen = 1;
    return KN_OK;
}

static enum kn_status f_default(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    FARGS("default_value", "boolean");
    bool use = val.t == JV_UNDEF || (g[1] && jr_truthy(&a[1]) && !jr_truthy(&val));
    if (use) {
        if (g[0]) *out = a[0];
        else if (!jr_v_str(r, out, "", 0)) return jr_nomem(r);
    } else {
        *out = val;
    }
    return KN_OK;
}

static enum kn_status f_length(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    NOARGS();
    int64_t n = 0;
    TRY(jr_length_of(r, at, val, &n));
    *out = v_int(n);
    return KN_OK;
}

static enum kn_status f_tojson(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("ensure_ascii", "indent", "separators", "sort_keys");
    struct jsonopt o = {0};
    o.ensure_ascii = g[0] && jr_truthy(&a[0]);
    o.sort_keys = g[3] && jr_truthy(&a[3]);
    char *ind = NULL;
    if (g[1] && a[1].t != JV_NONE) {
        o.has_indent = true;
        if (a[1].t == JV_STR) {
            o.indent = a[1].u.s->p;
            o.indent_n = a[1].u.s->n;
        } else if (a[1].t == JV_INT || a[1].t == JV_BOOL) {
            int64_t k = num_i(&a[1]);
            if (k > 1000) return jr_rerr(r, at, JINJA_ERR_LIMIT, "tojson indent too large");
            if (k < 0) k = 0;
            ind = ralloc(r, (size_t)k + 1);
            if (!ind) return jr_nomem(r);
            memset(ind, ' ', (size_t)k);
            o.indent = ind;
            o.indent_n = (size_t)k;
        } else {
            return jr_rerr(r, at, JINJA_ERR_TYPE, "tojson: indent must be an int or a string");
        }
    }
    o.item_sep = o.has_indent ? "," : ", ";
    o.key_sep = ": ";
    if (g[2] && a[2].t != JV_NONE) {
        if ((a[2].t != JV_LIST && a[2].t != JV_TUPLE) || a[2].u.l->n != 2 ||
            a[2].u.l->v[0].t != JV_STR || a[2].u.l->v[1].t != JV_STR)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "tojson: separators must be a pair of strings");
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
    TRY(jr_json_dump(r, at, &b, &val, &o, 0));
    return jr_sb_done(&b, out) ? KN_OK : jr_nomem(r);
}

static enum kn_status f_trim(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("chars");
    struct jv s;
    if (!jr_str_of(r, &val, &s)) return jr_nomem(r);
    if (g[0] && a[0].t != JV_NONE) TRY(jr_want_str(r, at, "strip", &a[0], true));
    size_t b = 0, e = 0;
    jr_strip_span(r, s.u.s, g[0] && a[0].t == JV_STR ? a[0].u.s : NULL, true, true, &b, &e);
    if (!jr_v_substr(r, out, &s, b, e)) return jr_nomem(r);
    out->markup = s.markup; /* Markup.strip() stays Markup */
    return KN_OK;
}

/* upper, lower, capitalize, title (arg: enum casemode). */
static enum kn_status f_case(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    NOARGS();
    struct jv s;
    if (!jr_str_of(r, &val, &s)) return jr_nomem(r);
    enum casemode m = (enum casemode)c->arg;
    if (!jr_str_case(r, s.u.s, m, out)) return jr_nomem(r);
    out->markup = s.markup && m != CM_JTITLE;
    return KN_OK;
}

enum { ESC_STRING, ESC_SAFE, ESC_ESCAPE, ESC_FORCE };
/* string, safe, e/escape, forceescape (arg: ESC_*). */
static enum kn_status f_string(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    NOARGS();
    struct jv s;
    if (!jr_str_of(r, &val, &s)) return jr_nomem(r);
    if (c->arg == ESC_STRING) {
        *out = s; /* soft_str keeps Markup */
        return KN_OK;
    }
    if (c->arg == ESC_SAFE || (c->arg == ESC_ESCAPE && val.t == JV_STR && val.markup)) {
        *out = s;
        out->markup = 1;
        return KN_OK;
    }
    return jr_html_escape(r, s.u.s, out) ? KN_OK : jr_nomem(r);
}

static enum kn_status f_items(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    NOARGS();
    if (val.t == JV_UNDEF) {
        struct jseq *l = jr_seq_new(r, 0);
        if (!l) return jr_nomem(r);
        *out = v_list(l, JV_LIST);
        out->gen = 1;
        return KN_OK;
    }
    if (val.t != JV_DICT)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "Can only get item pairs from a mapping.");
    TRY(jr_call_method(r, at, val, "items", NULL, 0, out));
    out->gen = 1;
    return KN_OK;
}

static enum kn_status f_replace(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("old", "new", "count");
    if (!g[0] || !g[1]) return jr_rerr(r, at, JINJA_ERR_TYPE, "replace() missing arguments");
    struct jv s, o, n2;
    if (!jr_str_of(r, &val, &s) || !jr_str_of(r, &a[0], &o) || !jr_str_of(r, &a[1], &n2)) return jr_nomem(r);
    int64_t count = -1;
    TRY(jr_opt_int(r, at, &a[2], g[2], -1, &count));
    return jr_str_replace(r, s.u.s, o.u.s, n2.u.s, count, out) ? KN_OK : jr_nomem(r);
}

static enum kn_status f_join(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("d", "attribute");
    struct jseq *l;
    TRY(jr_iterate(r, at, val, &l));
    struct jv sep;
    if (g[0]) { if (!jr_str_of(r, &a[0], &sep)) return jr_nomem(r); }
    else if (!jr_v_str(r, &sep, "", 0)) return jr_nomem(r);
    struct sb b = {.r = r}, m = {.r = r};
    for (size_t i = 0; i < l->n; i++) {
        struct jv x = l->v[i], s;
        if (g[1] && a[1].t != JV_NONE) TRY(attr_path(r, at, x, &a[1], &x));
        if (!jr_str_of(r, &x, &s)) return jr_nomem(r);
        if (i) jr_sb_add_marked(&b, &m, &sep);
        jr_sb_add_marked(&b, &m, &s);
    }
    return jr_sb_done_marked(&b, &m, out) ? KN_OK : jr_nomem(r);
}

/* first, last (arg: true for last). */
static enum kn_status f_first(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    NOARGS();
    if (c->arg && val.gen)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "'generator' object is not reversible");
    if (val.t == JV_UNDEF && c->arg)
        return jr_undef_error(r, at, &val);
    struct jseq *l;
    TRY(jr_iterate(r, at, val, &l));
    if (l->n == 0) {
        *out = jr_undef_fmt(r, "No %s item, sequence was empty.%s", c->name, "");
        return KN_OK;
    }
    *out = !c->arg ? l->v[0] : l->v[l->n - 1];
    return KN_OK;
}

static enum kn_status f_list(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    NOARGS();
    struct jseq *l;
    TRY(jr_iterate(r, at, val, &l));
    struct jseq *cp = jr_seq_new(r, l->n);
    if (!cp) return jr_nomem(r);
    for (size_t i = 0; i < l->n; i++) cp->v[cp->n++] = l->v[i];
    *out = v_list(cp, JV_LIST);
    return KN_OK;
}

static enum kn_status f_map(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    struct jseq *in;
    if (jr_truthy(&val)) {
        TRY(jr_iterate(r, at, val, &in));
    } else if (!(in = jr_seq_new(r, 0))) { /* jinja: "if value:" before iterating */
        return jr_nomem(r);
    }
    struct jseq *l = jr_seq_new(r, in->n);
    if (!l) return jr_nomem(r);
    struct jv *attr = NULL, *dflt = NULL;
    if (in->n == 0) {
        *out = v_list(l, JV_LIST);
        out->gen = 1;
        return KN_OK;
    }
    for (size_t k = 0; k < c->nkw; k++) {
        if (strcmp(c->kwn[k]->p, "attribute") == 0) attr = &c->kwv[k];
        else if (strcmp(c->kwn[k]->p, "default") == 0) dflt = &c->kwv[k];
    }
    if (attr || (c->nargs == 0 && c->nkw)) {
        if (!attr) return jr_rerr(r, at, JINJA_ERR_TYPE, "map() needs attribute= or a filter name");
        for (size_t i = 0; i < in->n; i++) {
            struct jv x;
            TRY(attr_path(r, at, in->v[i], attr, &x));
            if (x.t == JV_UNDEF && dflt) x = *dflt;
            l->v[l->n++] = x;
        }
    } else {
        if (c->nargs < 1 || c->args[0].t != JV_STR)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "map() needs a filter name or attribute=");
        const char *fname = c->args[0].u.s->p;
        if (!jinja_filter_known(fname))
            return jr_rerr(r, at, JINJA_ERR_TYPE, "No filter named '%s'.", fname);
        for (size_t i = 0; i < in->n; i++) {
            struct jv x;
            TRY(jr_apply_filter(r, c->sc, at, fname, in->v[i], c->args + 1, c->nargs - 1, c->kwn,
                                c->kwv, c->nkw, &x));
            l->v[l->n++] = x;
        }
    }
    *out = v_list(l, JV_LIST);
    out->gen = 1;
    return KN_OK;
}

static enum kn_status f_unique(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("case_sensitive", "attribute");
    struct jseq *in;
    TRY(jr_iterate(r, at, val, &in));
    struct jseq *l = jr_seq_new(r, 0), *seen = jr_seq_new(r, 0);
    if (!l || !seen) return jr_nomem(r);
    bool cs = g[0] && jr_truthy(&a[0]);
    for (size_t i = 0; i < in->n; i++) {
        struct jv k = in->v[i];
        if (g[1] && a[1].t != JV_NONE) TRY(attr_path(r, at, k, &a[1], &k));
        k = fold_case(r, k, cs);
        bool dup = false;
        for (size_t j = 0; j < seen->n && !dup && !r->over_work; j++) dup = jr_py_eq(r, &seen->v[j], &k);
        if (r->over_work)
            return jr_work_error(r, at);
        if (!dup && (!jr_seq_push(r, seen, k) || !jr_seq_push(r, l, in->v[i]))) return jr_nomem(r);
    }
    *out = v_list(l, JV_LIST);
    out->gen = 1;
    return KN_OK;
}

static enum kn_status f_int(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("default", "base");
    struct jv dflt = g[0] ? a[0] : v_int(0);
    if (val.t == JV_UNDEF) return jr_undef_error(r, at, &val);
    if (val.t == JV_INT) { *out = val; return KN_OK; }
    if (val.t == JV_BOOL) { *out = v_int(val.u.b); return KN_OK; }
    if (val.t == JV_FLOAT) {
        if (!isfinite(val.u.f) || fabs(val.u.f) >= 9.2e18) { *out = dflt; return KN_OK; }
        *out = v_int((int64_t)val.u.f);
        return KN_OK;
    }
    if (val.t == JV_STR) {
        int64_t base = 10;
        TRY(jr_opt_int(r, at, &a[1], g[1], 10, &base));
        char buf[64];
        size_t b2 = 0, e = 0;
        jr_strip_span(r, val.u.s, NULL, true, true, &b2, &e);
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

static enum kn_status f_float(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("default");
    struct jv dflt = g[0] ? a[0] : v_float(0.0);
    if (val.t == JV_UNDEF) return jr_undef_error(r, at, &val);
    if (is_num(&val)) { *out = v_float(num_d(&val)); return KN_OK; }
    if (val.t == JV_STR) {
        size_t b2 = 0, e = 0;
        jr_strip_span(r, val.u.s, NULL, true, true, &b2, &e);
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

static enum kn_status f_abs(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    NOARGS();
    if (val.t == JV_FLOAT) { *out = v_float(fabs(val.u.f)); return KN_OK; }
    if (val.t == JV_INT || val.t == JV_BOOL) {
        int64_t i = num_i(&val);
        if (i == INT64_MIN) return jr_rerr(r, at, JINJA_ERR_UNSUPPORTED, "integer does not fit in 64 bits");
        *out = v_int(i < 0 ? -i : i);
        return KN_OK;
    }
    return jr_rerr(r, at, JINJA_ERR_TYPE, "bad operand type for abs(): '%s'", jr_type_name(&val));
}

static enum kn_status f_round(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("precision", "method");
    int64_t prec = 0;
    TRY(jr_opt_int(r, at, &a[0], g[0], 0, &prec));
    const char *method = g[1] && a[1].t == JV_STR ? a[1].u.s->p : "common";
    if (!is_num(&val)) {
        return jr_rerr(r, at, JINJA_ERR_TYPE, "type %s doesn't define __round__ method", jr_type_name(&val));
    }
    if (prec < -20 || prec > 20) return jr_rerr(r, at, JINJA_ERR_UNSUPPORTED, "round precision out of range");
    double x = num_d(&val), p10 = pow(10.0, (double)prec);
    if (strcmp(method, "common") == 0) {
        if (val.t != JV_FLOAT && prec >= 0) { *out = v_int(num_i(&val)); return KN_OK; }
        if (val.t != JV_FLOAT)
            return jr_rerr(r, at, JINJA_ERR_UNSUPPORTED, "round of an int to negative precision");
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
    return jr_rerr(r, at, JINJA_ERR_TYPE, "method must be common, ceil or floor");
}

static enum kn_status f_reverse(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    NOARGS();
    if (val.t == JV_STR) {
        bool has[3] = {false, false, true};
        struct jv sv[3];
        sv[2] = v_int(-1);
        return jr_slice_of(r, at, val, sv, has, out);
    }
    struct jseq *l;
    if (val.gen) return jr_rerr(r, at, JINJA_ERR_TYPE, "'generator' object is not reversible");
    TRY(jr_iterate(r, at, val, &l));
    struct jseq *cp = jr_seq_new(r, l->n);
    if (!cp) return jr_nomem(r);
    for (size_t i = l->n; i-- > 0;) cp->v[cp->n++] = l->v[i];
    *out = v_list(cp, JV_LIST);
    out->gen = 1; /* a reverse iterator in Python */
    return KN_OK;
}

static enum kn_status f_sort(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("reverse", "case_sensitive", "attribute");
    struct jseq *in;
    TRY(jr_iterate(r, at, val, &in));
    struct jseq *l = jr_seq_new(r, in->n);
    struct jv *keys = ralloc(r, (in->n + 1) * sizeof(*keys));
    if (!l || !keys) return jr_nomem(r);
    for (size_t i = 0; i < in->n; i++) {
        struct jv k = in->v[i];
        if (g[2] && a[2].t != JV_NONE) TRY(attr_path(r, at, k, &a[2], &k));
        keys[i] = fold_case(r, k, g[1] && jr_truthy(&a[1]));
        l->v[l->n++] = in->v[i];
    }
    TRY(sort_seq(r, at, l, keys, g[0] && jr_truthy(&a[0])));
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

static enum kn_status f_dictsort(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("case_sensitive", "by", "reverse");
    if (val.t == JV_UNDEF) return jr_undef_error(r, at, &val);
    if (val.t != JV_DICT) return jr_rerr(r, at, JINJA_ERR_TYPE, "dictsort: value is not a mapping");
    bool by_value = g[1] && a[1].t == JV_STR && strcmp(a[1].u.s->p, "value") == 0;
    if (g[1] && a[1].t == JV_STR && !by_value && strcmp(a[1].u.s->p, "key") != 0)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "You can only sort by either \"key\" or \"value\"");
    struct jv items;
    TRY(jr_call_method(r, at, val, "items", NULL, 0, &items));
    struct jseq *l = items.u.l;
    struct jv *keys = ralloc(r, (l->n + 1) * sizeof(*keys));
    if (!keys) return jr_nomem(r);
    for (size_t i = 0; i < l->n; i++)
        keys[i] = fold_case(r, l->v[i].u.l->v[by_value ? 1 : 0], g[0] && jr_truthy(&a[0]));
    TRY(sort_seq(r, at, l, keys, g[2] && jr_truthy(&a[2])));
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

static enum kn_status f_indent(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("width", "first", "blank");
    if (val.t == JV_UNDEF) return jr_undef_error(r, at, &val);
    if (val.t != JV_STR)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "indent: '%s' object has no attribute 'splitlines'",
                       jr_type_name(&val));
    struct jv s;
    if (!jr_str_of(r, &val, &s)) return jr_nomem(r);
    struct jv ind;
    if (g[0] && a[0].t == JV_STR) ind = a[0];
    else {
        int64_t w = 0;
        if (g[0] && a[0].t == JV_UNDEF) /* " " * Undefined */
            return jr_undef_error(r, at, &a[0]);
        TRY(jr_opt_int(r, at, &a[0], g[0], 4, &w));
        if (w > 10000) return jr_rerr(r, at, JINJA_ERR_LIMIT, "indent width too large");
        struct sb b = {.r = r};
        for (int64_t i = 0; i < w; i++) jr_sb_adds(&b, " ");
        if (!b.p) { if (!jr_v_str(r, &ind, "", 0)) return jr_nomem(r); }
        else if (!jr_sb_done(&b, &ind)) return jr_nomem(r);
    }
    /* jinja appends "\n" before splitting (so a trailing newline keeps its line) */
    struct sb t = {.r = r};
    jr_sb_add(&t, s.u.s->p, s.u.s->n);
    jr_sb_adds(&t, "\n");
    if (t.fail) return jr_nomem(r);
    struct jseq *lines;
    TRY(jr_splitlines(r, t.p, t.n, false, &lines));
    struct sb b = {.r = r};
    bool blank = g[2] && jr_truthy(&a[2]);
    if (g[1] && jr_truthy(&a[1])) jr_sb_add(&b, ind.u.s->p, ind.u.s->n);
    for (size_t i = 0; i < lines->n; i++) {
        const struct jstr *ln = lines->v[i].u.s;
        if (i) {
            jr_sb_adds(&b, "\n");
            if (blank || ln->n) jr_sb_add(&b, ind.u.s->p, ind.u.s->n);
        }
        jr_sb_add(&b, ln->p, ln->n);
    }
    if (!b.p) return jr_v_str(r, out, "", 0) ? KN_OK : jr_nomem(r);
    return jr_sb_done(&b, out) ? KN_OK : jr_nomem(r);
}

static enum kn_status f_wordcount(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    NOARGS();
    struct jv s;
    if (!jr_str_of(r, &val, &s)) return jr_nomem(r);
    TRY(jr_charge(r, c->at, jr_elems_work(s.u.s->n))); /* classifies each code point */
    int64_t words = 0;
    bool in = false;
    for (size_t i = 0; i < s.u.s->n;) {
        uint32_t cp = jr_utf8_next(s.u.s->p, s.u.s->n, &i);
        bool w = cp == '_' || u_digit(cp) || jr_u_alpha(cp);
        if (w && !in) words++;
        in = w;
    }
    *out = v_int(words);
    return KN_OK;
}

static enum kn_status f_center(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("width");
    struct jv s;
    if (!jr_str_of(r, &val, &s)) return jr_nomem(r);
    struct jv w = g[0] ? a[0] : v_int(80);
    return jr_call_method(r, at, s, "center", &w, 1, out);
}

static enum kn_status f_attr(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("name");
    if (!g[0] || a[0].t != JV_STR) return jr_rerr(r, at, JINJA_ERR_TYPE, "attr() needs a name");
    return jr_get_attr(r, at, val, a[0].u.s->p, a[0].u.s->n, out);
}

static enum kn_status f_sum(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("attribute", "start");
    struct jseq *in;
    TRY(jr_iterate(r, at, val, &in));
    struct jv acc = g[1] ? a[1] : v_int(0);
    for (size_t i = 0; i < in->n; i++) {
        struct jv x = in->v[i];
        if (g[0] && a[0].t != JV_NONE) TRY(attr_path(r, at, x, &a[0], &x));
        TRY(jr_arith(r, at, JOP_ADD, acc, x, &acc));
    }
    *out = acc;
    return KN_OK;
}

/* min, max (arg: true for max). */
static enum kn_status f_minmax(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("case_sensitive", "attribute");
    struct jseq *in;
    TRY(jr_iterate(r, at, val, &in));
    if (in->n == 0) {
        *out = jr_undef_fmt(r, "No aggregated item, sequence was empty.%s%s", "", "");
        return KN_OK;
    }
    size_t best = 0;
    struct jv bk = in->v[0];
    if (g[1] && a[1].t != JV_NONE) TRY(attr_path(r, at, bk, &a[1], &bk));
    bk = fold_case(r, bk, g[0] && jr_truthy(&a[0]));
    for (size_t i = 1; i < in->n; i++) {
        struct jv k = in->v[i];
        if (g[1] && a[1].t != JV_NONE) TRY(attr_path(r, at, k, &a[1], &k));
        k = fold_case(r, k, g[0] && jr_truthy(&a[0]));
        bool ok = true;
        int cmp = jr_cmp_vals(r, &k, &bk, &ok);
        if (r->over_work) return jr_work_error(r, at);
        if (!ok) return jr_rerr(r, at, JINJA_ERR_TYPE, "values cannot be compared");
        if ((!c->arg && cmp < 0) || (c->arg && cmp > 0 && cmp != 2)) { best = i; bk = k; }
    }
    *out = in->v[best];
    return KN_OK;
}

static enum kn_status f_batch(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    FARGS("linecount", "fill_with");
    int64_t cnt = 0;
    TRY(jr_opt_int(r, at, &a[0], g[0], 0, &cnt));
    if (cnt <= 0) return jr_rerr(r, at, JINJA_ERR_TYPE, "batch size must be positive");
    struct jseq *in;
    TRY(jr_iterate(r, at, val, &in));
    struct jseq *l = jr_seq_new(r, 0), *cur = NULL;
    if (!l) return jr_nomem(r);
    for (size_t i = 0; i < in->n; i++) {
        if (!cur || cur->n == (size_t)cnt) {
            if (!(cur = jr_seq_new(r, 0)) || !jr_seq_push(r, l, v_list(cur, JV_LIST))) return jr_nomem(r);
        }
        if (!jr_seq_push(r, cur, in->v[i])) return jr_nomem(r);
    }
    if (cur && g[1] && a[1].t != JV_NONE)
        while (cur->n < (size_t)cnt)
            if (!jr_seq_push(r, cur, a[1])) return jr_nomem(r);
    *out = v_list(l, JV_LIST);
    out->gen = 1;
    return KN_OK;
}

static enum kn_status f_format(const struct jcall *c, struct jv val, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    if (c->nargs && c->nkw)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "can't handle positional and keyword arguments at the same time");
    struct jv s;
    if (!jr_str_of(r, &val, &s)) return jr_nomem(r);
    struct jv fa;
    if (c->nkw) {
        struct jmap *m = jr_map_new(r);
        if (!m) return jr_nomem(r);
        for (size_t k = 0; k < c->nkw; k++)
            if (!jr_map_set(r, m, v_strs(c->kwn[k]), c->kwv[k])) return jr_nomem(r);
        fa = (struct jv){.t = JV_DICT};
        fa.u.d = m;
    } else {
        struct jseq *l = jr_seq_new(r, c->nargs);
        if (!l) return jr_nomem(r);
        for (size_t k = 0; k < c->nargs; k++) l->v[l->n++] = c->args[k];
        fa = v_list(l, JV_TUPLE);
    }
    return jr_py_percent(r, at, s.u.s, fa, out);
}

/* ---- the table ---- */

/* jinja2's filters, each a function (NULL: known to jinja2 but not supported here, so
 * a template naming one parses, and fails only if it runs it). text: the filter turns
 * its value into text, so a generator or loop object (which Python prints by address)
 * is refused first. */
struct jfilter {
    const char *name;
    enum kn_status (*fn)(const struct jcall *c, struct jv val, struct jv *out);
    int arg;
    bool text;
};
static const struct jfilter k_filters[] = {
    {"abs", f_abs, 0, false},
    {"attr", f_attr, 0, false},
    {"batch", f_batch, 0, false},
    {"capitalize", f_case, CM_CAPITALIZE, true},
    {"center", f_center, 0, true},
    {"count", f_length, 0, false},
    {"d", f_default, 0, false},
    {"default", f_default, 0, false},
    {"dictsort", f_dictsort, 0, false},
    {"e", f_string, ESC_ESCAPE, true},
    {"escape", f_string, ESC_ESCAPE, true},
    {"filesizeformat", NULL, 0, false},
    {"first", f_first, false, false},
    {"float", f_float, 0, false},
    {"forceescape", f_string, ESC_FORCE, true},
    {"format", f_format, 0, true},
    {"groupby", NULL, 0, false},
    {"indent", f_indent, 0, false},
    {"int", f_int, 0, false},
    {"items", f_items, 0, false},
    {"join", f_join, 0, false},
    {"last", f_first, true, false},
    {"length", f_length, 0, false},
    {"list", f_list, 0, false},
    {"lower", f_case, CM_LOWER, true},
    {"map", f_map, 0, false},
    {"max", f_minmax, true, false},
    {"min", f_minmax, false, false},
    {"pprint", NULL, 0, false},
    {"random", NULL, 0, false},
    {"reject", f_select, 0, false},
    {"rejectattr", f_select, SEL_ATTR, false},
    {"replace", f_replace, 0, true},
    {"reverse", f_reverse, 0, false},
    {"round", f_round, 0, false},
    {"safe", f_string, ESC_SAFE, true},
    {"select", f_select, SEL_SELECT, false},
    {"selectattr", f_select, SEL_SELECT | SEL_ATTR, false},
    {"slice", NULL, 0, false},
    {"sort", f_sort, 0, false},
    {"string", f_string, ESC_STRING, true},
    {"striptags", NULL, 0, false},
    {"sum", f_sum, 0, false},
    {"title", f_case, CM_JTITLE, true},
    {"tojson", f_tojson, 0, false},
    {"trim", f_trim, 0, true},
    {"truncate", NULL, 0, false},
    {"unique", f_unique, 0, false},
    {"upper", f_case, CM_UPPER, true},
    {"urlencode", NULL, 0, false},
    {"urlize", NULL, 0, false},
    {"wordcount", f_wordcount, 0, true},
    {"wordwrap", NULL, 0, false},
    {"xmlattr", NULL, 0, false},
};

static const struct jfilter *find_filter(const char *name)
{
    for (size_t i = 0; i < sizeof k_filters / sizeof k_filters[0]; i++)
        if (strcmp(k_filters[i].name, name) == 0)
            return &k_filters[i];
    return NULL;
}

bool jinja_filter_known(const char *name) { return find_filter(name) != NULL; }

enum kn_status jr_apply_filter(struct rs *r, struct scope *sc, const struct jnode *at,
                               const char *name, struct jv val, struct jv *args, size_t nargs,
                               struct jstr **kwn, struct jv *kwv, size_t nkw, struct jv *out)
{
    const struct jfilter *f = find_filter(name);
    if (f && f->text)
        TRY(jr_check_printable(r, at, &val));
    if (!f || !f->fn)
        return jr_rerr(r, at, JINJA_ERR_UNSUPPORTED, "the filter '%s' is not supported", name);
    struct jcall c = {.r = r, .sc = sc, .at = at, .name = name, .arg = f->arg, .args = args,
                      .nargs = nargs, .kwn = kwn, .kwv = kwv, .nkw = nkw};
    return f->fn(&c, val, out);
}
