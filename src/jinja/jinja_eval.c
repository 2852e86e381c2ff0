/* jinja_eval.c: evaluation of expressions: attributes and items through jinja's
 * sandbox, iteration, Python's % formatting, arithmetic, comparison, slicing, argument
 * lists, and eval() over the syntax tree. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include "jinja_render_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ evaluation ======= */

enum kn_status jr_undef_error(struct rs *r, const struct jnode *at, const struct jv *u)
{
    if (u->unsafe)
        return jr_rerr(r, at, JINJA_ERR_SECURITY, "%s", u->u.s ? u->u.s->p : "unsafe access");
    return jr_rerr(r, at, JINJA_ERR_UNDEFINED, "%s", u->u.s ? u->u.s->p : "value is undefined");
}

struct jv jr_undef_fmt(struct rs *r, const char *fmt, const char *a, const char *b2)
{
    char buf[400];
    snprintf(buf, sizeof buf, fmt, a, b2);
    return v_undef(mkstr(r, buf, strlen(buf)));
}

/* Python attribute access on obj through jinja's sandboxed getattr: methods first, then
 * (dicts, namespaces) items. Never fails except for undefined objects. */
enum kn_status jr_get_attr(struct rs *r, const struct jnode *at, struct jv obj,
                           const char *name, size_t n, struct jv *out)
{
    const struct jbuiltin *m = NULL;
    switch (obj.t) {
    case JV_UNDEF:
        return jr_undef_error(r, at, &obj);
    case JV_STR: m = jr_builtin_find(JB_STR, name, n); break;
    case JV_DICT: m = jr_builtin_find(JB_DICT, name, n); break;
    case JV_LIST: case JV_TUPLE:
        if (!obj.gen)
            m = jr_builtin_find(obj.t == JV_TUPLE ? JB_TUPLE : JB_LIST, name, n);
        break;
    case JV_NS: {
        struct jv *v = jr_map_finds(r, obj.u.d, name, n);
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
            *out = i > 0 ? l->items->v[i - 1] : jr_undef_fmt(r, "there is no previous item%s%s", "", "");
            return KN_OK;
        }
        if (IS("nextitem")) {
            *out = i + 1 < len ? l->items->v[i + 1] : jr_undef_fmt(r, "there is no next item%s%s", "", "");
            return KN_OK;
        }
#undef IS
        m = jr_builtin_find(JB_LOOP, name, n); /* cycle, changed */
        break;
    }
    default: break;
    }
    if (m) {
        if (!m->fn) {
            char buf[300];
            snprintf(buf, sizeof buf, "access to attribute '%.*s' of '%s' object is unsafe.",
                     (int)(n > 100 ? 100 : n), name, jr_type_name(&obj));
            *out = v_undef(mkstr(r, buf, strlen(buf)));
            out->unsafe = 1;
            return KN_OK;
        }
        *out = jr_builtin_value(r, m, &obj);
        return out->u.f2 ? KN_OK : jr_nomem(r);
    }
    if (obj.t == JV_DICT) {
        struct jv *v = jr_map_finds(r, obj.u.d, name, n);
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
        snprintf(tn, sizeof tn, "%s object", jr_type_name(&obj));
    *out = jr_undef_fmt(r, "'%s' has no attribute '%s'", tn, nm);
    return KN_OK;
}

/* Subscription obj[key] through jinja's sandboxed getitem: items first, then attributes. */
enum kn_status jr_get_item(struct rs *r, const struct jnode *at, struct jv obj,
                           struct jv key, struct jv *out)
{
    if (obj.t == JV_UNDEF)
        return jr_undef_error(r, at, &obj);
    if (obj.t == JV_DICT) {
        if (key.t == JV_LIST || key.t == JV_DICT)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "unhashable type: '%s'", jr_type_name(&key));
        struct jv *v = jr_map_find(r, obj.u.d, &key);
        if (v) {
            *out = *v;
            return KN_OK;
        }
    } else if ((obj.t == JV_LIST || obj.t == JV_TUPLE || obj.t == JV_STR) && !obj.gen &&
               (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i = num_i(&key);
        if (obj.t == JV_STR) {
            const struct jstr *s = obj.u.s;
            TRY(jr_charge(r, at, s->n));
            int64_t len = (int64_t)jr_utf8_count(s->p, s->n);
            if (i < 0) i += len;
            if (i >= 0 && i < len) {
                size_t p = 0;
                for (int64_t k = 0; k < i; k++)
                    jr_utf8_next(s->p, s->n, &p);
                size_t q = p;
                jr_utf8_next(s->p, s->n, &q);
                if (!jr_v_str(r, out, s->p + p, q - p))
                    return jr_nomem(r);
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
        return jr_get_attr(r, at, obj, key.u.s->p, key.u.s->n, out);
    struct sb b = {.r = r};
    jr_to_str(&b, &key, true);
    *out = jr_undef_fmt(r, "'%s object' has no attribute '%s'", jr_type_name(&obj), b.p ? b.p : "");
    return KN_OK;
}

/* Iterable contents as a sequence (lists/tuples shared, dict keys, string characters). */
enum kn_status jr_iterate(struct rs *r, const struct jnode *at, struct jv v, struct jseq **out)
{
    size_t cost = v.t == JV_STR ? v.u.s->n
                  : v.t == JV_LIST || v.t == JV_TUPLE ? jr_elems_work(v.u.l->n)
                  : v.t == JV_DICT ? jr_elems_work(v.u.d->n) : 0;
    TRY(jr_charge(r, at, cost));
    switch (v.t) {
    case JV_UNDEF:
        if (v.unsafe)
            return jr_undef_error(r, at, &v);
        *out = jr_seq_new(r, 0);
        return *out ? KN_OK : jr_nomem(r);
    case JV_LIST: case JV_TUPLE: *out = v.u.l; return KN_OK;
    case JV_DICT: case JV_NS: {
        if (v.t == JV_NS)
            break;
        struct jseq *l = jr_seq_new(r, v.u.d->n);
        if (!l)
            return jr_nomem(r);
        for (size_t i = 0; i < v.u.d->n; i++)
            l->v[l->n++] = v.u.d->k[i];
        *out = l;
        return KN_OK;
    }
    case JV_STR: {
        struct jseq *l = jr_seq_new(r, 0);
        if (!l)
            return jr_nomem(r);
        for (size_t i = 0; i < v.u.s->n;) {
            size_t st = i;
            jr_utf8_next(v.u.s->p, v.u.s->n, &i);
            struct jv c;
            if (!jr_v_str(r, &c, v.u.s->p + st, i - st) || !jr_seq_push(r, l, c))
                return jr_nomem(r);
        }
        *out = l;
        return KN_OK;
    }
    default: break;
    }
    return jr_rerr(r, at, JINJA_ERR_TYPE, "'%s' object is not iterable", jr_type_name(&v));
}

enum kn_status jr_length_of(struct rs *r, const struct jnode *at, struct jv v, int64_t *out)
{
    switch (v.t) {
    case JV_UNDEF: *out = 0; return KN_OK;
    case JV_STR:
        TRY(jr_charge(r, at, v.u.s->n));
        *out = (int64_t)jr_utf8_count(v.u.s->p, v.u.s->n);
        return KN_OK;
    case JV_LIST: case JV_TUPLE:
        if (v.gen) break;
        *out = (int64_t)v.u.l->n;
        return KN_OK;
    case JV_DICT: *out = (int64_t)v.u.d->n; return KN_OK;
    default: break;
    }
    return jr_rerr(r, at, JINJA_ERR_TYPE, "object of type '%s' has no len()", jr_type_name(&v));
}

enum kn_status jr_contains(struct rs *r, const struct jnode *at, struct jv item,
                           struct jv cont, bool *out)
{
    switch (cont.t) {
    case JV_UNDEF: *out = false; return KN_OK;
    case JV_STR:
        if (item.t != JV_STR)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "'in <string>' requires string as left operand, not %s",
                           jr_type_name(&item));
        if (item.u.s->n == 0) { *out = true; return KN_OK; }
        TRY(jr_charge(r, at, cont.u.s->n + item.u.s->n));
        *out = item.u.s->n <= cont.u.s->n &&
               memmem(cont.u.s->p, cont.u.s->n, item.u.s->p, item.u.s->n) != NULL;
        return KN_OK;
    case JV_LIST: case JV_TUPLE:
        *out = false;
        TRY(jr_charge(r, at, jr_elems_work(cont.u.l->n)));
        for (size_t i = 0; i < cont.u.l->n; i++)
            if (jr_py_eq(r, &item, &cont.u.l->v[i])) { *out = true; break; }
        return KN_OK;
    case JV_DICT:
        if (item.t == JV_LIST || item.t == JV_DICT)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "unhashable type: '%s'", jr_type_name(&item));
        *out = jr_map_find(r, cont.u.d, &item) != NULL;
        return KN_OK;
    default: break;
    }
    return jr_rerr(r, at, JINJA_ERR_TYPE, "argument of type '%s' is not iterable", jr_type_name(&cont));
}

/* Python's printf-style "fmt % args" (used by the format filter and the % operator):
 * %s %r %d %i %u %x %X %o %e %E %f %F %g %G %c %%, flags "#0- +", width, precision, '*'
 * not supported; args is a tuple (positional), a dict (%(name)s) or one value. */
enum kn_status jr_py_percent(struct rs *r, const struct jnode *at, const struct jstr *fmt,
                             struct jv args, struct jv *out)
{
    struct sb b = {.r = r};
    jr_sb_add(&b, "", 0);
    size_t argi = 0;
    bool tuple = args.t == JV_TUPLE, mapping = args.t == JV_DICT;
    size_t nargs = tuple ? args.u.l->n : 1;
    bool used_single = false;
    for (size_t i = 0; i < fmt->n;) {
        char c = fmt->p[i];
        if (c != '%') {
            jr_sb_add(&b, &c, 1);
            i++;
            continue;
        }
        i++;
        if (i >= fmt->n)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "incomplete format");
        struct jv v = {0};
        bool have_v = false;
        if (fmt->p[i] == '(') {
            size_t e = i + 1;
            while (e < fmt->n && fmt->p[e] != ')')
                e++;
            if (e >= fmt->n)
                return jr_rerr(r, at, JINJA_ERR_TYPE, "incomplete format key");
            if (!mapping)
                return jr_rerr(r, at, JINJA_ERR_TYPE, "format requires a mapping");
            struct jv *x = jr_map_finds(r, args.u.d, fmt->p + i + 1, e - i - 1);
            if (!x)
                return jr_rerr(r, at, JINJA_ERR_TYPE, "KeyError: '%.*s'", (int)(e - i - 1), fmt->p + i + 1);
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
            return jr_rerr(r, at, JINJA_ERR_UNSUPPORTED, "'*' width in %% formatting is not supported");
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
            return jr_rerr(r, at, JINJA_ERR_TYPE, "incomplete format");
        char conv = fmt->p[i++];
        if (width > 4096 || prec > 4096)
            return jr_rerr(r, at, JINJA_ERR_LIMIT, "format width or precision too large");
        if (conv == '%') {
            jr_sb_adds(&b, "%");
            continue;
        }
        if (!have_v) {
            if (mapping) {
                v = args;
            } else if (tuple) {
                if (argi >= nargs)
                    return jr_rerr(r, at, JINJA_ERR_TYPE, "not enough arguments for format string");
                v = args.u.l->v[argi++];
            } else {
                if (used_single)
                    return jr_rerr(r, at, JINJA_ERR_TYPE, "not enough arguments for format string");
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
                if (!jr_str_of(r, &v, &sv)) return jr_nomem(r);
            } else {
                struct sb t = {.r = r};
                jr_to_str(&t, &v, true);
                jr_sb_add(&t, "", 0);
                if (!jr_sb_done(&t, &sv)) return jr_nomem(r);
            }
            text = sv.u.s->p;
            tlen = sv.u.s->n;
            if (prec >= 0) { /* truncate to prec code points */
                size_t k = 0;
                for (int cp = 0; cp < prec && k < tlen; cp++)
                    jr_utf8_next(text, tlen, &k);
                tlen = k;
            }
        } else if (conv == 'c') {
            if (v.t == JV_INT && v.u.i >= 0 && v.u.i <= 0x10FFFF && !(v.u.i >= 0xD800 && v.u.i < 0xE000)) {
                tlen = jr_utf8_put(piece, (uint32_t)v.u.i);
                text = piece;
            } else if (v.t == JV_STR && jr_utf8_count(v.u.s->p, v.u.s->n) == 1) {
                text = v.u.s->p;
                tlen = v.u.s->n;
            } else {
                return jr_rerr(r, at, JINJA_ERR_TYPE, "%%c requires an int or a unicode character");
            }
        } else if (strchr("diuxXo", conv)) {
            int64_t iv;
            if (v.t == JV_INT || v.t == JV_BOOL) iv = num_i(&v);
            else if (v.t == JV_FLOAT && strchr("diu", conv) && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) iv = (int64_t)v.u.f;
            else
                return jr_rerr(r, at, JINJA_ERR_TYPE, "%%%c format: %s is not a number or not an integer",
                               conv, jr_type_name(&v));
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
                jr_sb_add(&b, body, o);
                continue;
            }
            int n;
            if (width >= 0 && prec >= 0) n = snprintf(piece, sizeof piece, spec, w, p2, (long long)iv);
            else if (width >= 0) n = snprintf(piece, sizeof piece, spec, w, (long long)iv);
            else if (prec >= 0) n = snprintf(piece, sizeof piece, spec, p2, (long long)iv);
            else n = snprintf(piece, sizeof piece, spec, (long long)iv);
            text = piece;
            tlen = n > 0 ? (size_t)n : 0;
            jr_sb_add(&b, text, tlen);
            continue;
        } else if (strchr("eEfFgG", conv)) {
            if (!is_num(&v))
                return jr_rerr(r, at, JINJA_ERR_TYPE, "must be real number, not %s", jr_type_name(&v));
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
            jr_sb_add(&b, piece, n > 0 ? (size_t)n : 0);
            continue;
        } else {
            return jr_rerr(r, at, JINJA_ERR_TYPE, "unsupported format character '%c'", conv);
        }
        /* strings: pad with spaces to width (code points) */
        size_t cps = jr_utf8_count(text, tlen);
        size_t pad = width > 0 && (size_t)width > cps ? (size_t)width - cps : 0;
        bool left = strchr(flags, '-') != NULL;
        if (!left) for (size_t k = 0; k < pad; k++) jr_sb_adds(&b, " ");
        jr_sb_add(&b, text, tlen);
        if (left) for (size_t k = 0; k < pad; k++) jr_sb_adds(&b, " ");
    }
    if (mapping) {
        /* fine: a mapping needs no count check */
    } else if ((tuple && argi < nargs) || (!tuple && !used_single && args.t != JV_DICT)) {
        return jr_rerr(r, at, JINJA_ERR_TYPE, "not all arguments converted during string formatting");
    }
    return jr_sb_done(&b, out) ? KN_OK : jr_nomem(r);
}

/* ---- arithmetic ---- */

enum kn_status jr_arith(struct rs *r, const struct jnode *at, int op, struct jv a,
                        struct jv b, struct jv *out)
{
    static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (a.t == JV_UNDEF)
        return jr_undef_error(r, at, &a);
    if (b.t == JV_UNDEF)
        return jr_undef_error(r, at, &b);
    if (is_num(&a) && is_num(&b)) {
        bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
        if (op == JOP_DIV) {
            double y = num_d(&b);
            if (y == 0)
                return jr_rerr(r, at, JINJA_ERR_TYPE, "division by zero");
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
                    return jr_rerr(r, at, JINJA_ERR_TYPE, "integer division or modulo by zero");
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
            return jr_rerr(r, at, JINJA_ERR_UNSUPPORTED,
                           "integer result of '%s' does not fit in 64 bits", sym[op]);
        }
        double x = num_d(&a), y = num_d(&b), z;
        switch (op) {
        case JOP_ADD: z = x + y; break;
        case JOP_SUB: z = x - y; break;
        case JOP_MUL: z = x * y; break;
        case JOP_FLOORDIV: case JOP_MOD:
            if (y == 0)
                return jr_rerr(r, at, JINJA_ERR_TYPE, "float division by zero");
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
        if (mk && !a.markup && !jr_html_escape(r, a.u.s, &a))
            return jr_nomem(r);
        if (mk && !b.markup && !jr_html_escape(r, b.u.s, &b))
            return jr_nomem(r);
        if (!jr_str_join2(r, &a, &b, out))
            return jr_nomem(r);
        out->markup = mk;
        return KN_OK;
    }
    if (op == JOP_ADD && (a.t == JV_LIST || a.t == JV_TUPLE) && a.t == b.t && !a.gen && !b.gen) {
        struct jseq *l = jr_seq_new(r, a.u.l->n + b.u.l->n);
        if (!l)
            return jr_nomem(r);
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
            return jr_rerr(r, at, JINJA_ERR_LIMIT, "string repetition larger than the output limit");
        struct sb sb2 = {.r = r};
        for (int64_t i = 0; i < k; i++)
            jr_sb_add(&sb2, s.u.s->p, s.u.s->n);
        return jr_sb_done(&sb2, out) ? KN_OK : jr_nomem(r);
    }
    if (op == JOP_MUL && (a.t == JV_LIST || a.t == JV_TUPLE) && !a.gen &&
        (b.t == JV_INT || b.t == JV_BOOL)) {
        int64_t k = num_i(&b);
        struct jseq *l = jr_seq_new(r, 0);
        if (!l)
            return jr_nomem(r);
        size_t tot;
        if (k > 0 && (!kn_mul_size(a.u.l->n, (size_t)k, &tot) || tot > r->lim.max_iterations))
            return jr_rerr(r, at, JINJA_ERR_LIMIT, "list repetition too large");
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < a.u.l->n; j++)
                if (!jr_seq_push(r, l, a.u.l->v[j]))
                    return jr_nomem(r);
        *out = v_list(l, a.t);
        return KN_OK;
    }
    if (op == JOP_ADD && a.t == JV_STR)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "can only concatenate str (not \"%s\") to str",
                       jr_type_name(&b));
    if (op == JOP_ADD && a.t == JV_LIST)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "can only concatenate list (not \"%s\") to list",
                       jr_type_name(&b));
    if (op == JOP_MOD && a.t == JV_STR)
        return jr_py_percent(r, at, a.u.s, b, out);
    return jr_rerr(r, at, JINJA_ERR_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'",
                   sym[op], jr_type_name(&a), jr_type_name(&b));
}

enum kn_status jr_compare(struct rs *r, const struct jnode *at, int op, struct jv a,
                          struct jv b, bool *out)
{
    switch (op) {
    case JOP_EQ: *out = jr_py_eq(r, &a, &b); return KN_OK;
    case JOP_NE: *out = !jr_py_eq(r, &a, &b); return KN_OK;
    case JOP_IN: return jr_contains(r, at, a, b, out);
    case JOP_NOTIN: TRY(jr_contains(r, at, a, b, out)); *out = !*out; return KN_OK;
    default: break;
    }
    if (a.t == JV_UNDEF)
        return jr_undef_error(r, at, &a);
    if (b.t == JV_UNDEF)
        return jr_undef_error(r, at, &b);
    bool ok = true;
    int c = jr_cmp_vals(r, &a, &b, &ok);
    static const char *const sym[] = {"<", "<=", ">", ">="};
    if (!ok)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "'%s' not supported between instances of '%s' and '%s'",
                       sym[op - JOP_LT], jr_type_name(&a), jr_type_name(&b));
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
enum kn_status jr_slice_of(struct rs *r, const struct jnode *at, struct jv obj,
                           struct jv *sv, bool *has, struct jv *out)
{
    if (obj.t == JV_UNDEF)
        return jr_undef_error(r, at, &obj);
    int64_t idx[3] = {0, 0, 1};
    for (int k = 0; k < 3; k++) {
        if (!has[k] || sv[k].t == JV_NONE) {
            has[k] = false;
            continue;
        }
        if (sv[k].t != JV_INT && sv[k].t != JV_BOOL)
            return jr_rerr(r, at, JINJA_ERR_TYPE,
                           "slice indices must be integers or None or have an __index__ method");
        idx[k] = num_i(&sv[k]);
    }
    int64_t step = has[2] ? idx[2] : 1;
    if (step == 0)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "slice step cannot be zero");
    struct jseq *items;
    size_t *offs = NULL;
    int64_t len;
    if (obj.t == JV_STR) {
        TRY(jr_charge(r, at, obj.u.s->n));
        len = (int64_t)jr_utf8_count(obj.u.s->p, obj.u.s->n);
        if ((size_t)len < obj.u.s->n) { /* not all ASCII: the byte offset of each code point */
            offs = ralloc(r, ((size_t)len + 1) * sizeof(*offs));
            if (!offs)
                return jr_nomem(r);
            size_t p = 0;
            for (int64_t i = 0; i < len; i++) {
                offs[i] = p;
                jr_utf8_next(obj.u.s->p, obj.u.s->n, &p);
            }
            offs[len] = obj.u.s->n;
        }
        items = NULL;
    } else if ((obj.t == JV_LIST || obj.t == JV_TUPLE) && !obj.gen) {
        items = obj.u.l;
        len = (int64_t)items->n;
    } else {
        *out = jr_undef_fmt(r, "'%s object' is not subscriptable%s", jr_type_name(&obj), "");
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
        if (!offs && step == 1 && start < stop)
            jr_sb_add(&b, obj.u.s->p + start, (size_t)(stop - start));
        else
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                size_t o = offs ? offs[i] : (size_t)i, e = offs ? offs[i + 1] : (size_t)i + 1;
                jr_sb_add(&b, obj.u.s->p + o, e - o);
            }
        if (!b.p)
            return jr_v_str(r, out, "", 0) ? KN_OK : jr_nomem(r);
        return jr_sb_done(&b, out) ? KN_OK : jr_nomem(r);
    }
    struct jseq *l = jr_seq_new(r, 0);
    if (!l)
        return jr_nomem(r);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (!jr_seq_push(r, l, items->v[i]))
            return jr_nomem(r);
    *out = v_list(l, obj.t);
    return KN_OK;
}

/* ---- evaluation of argument lists ---- */
enum kn_status jr_eval_args(struct rs *r, struct scope *sc, const struct jnode *n, struct argv *a)
{
    a->npos = n->nargs;
    a->nkw = n->nkw;
    a->kwn = n->kwn;
    a->pos = a->npos ? ralloc(r, a->npos * sizeof(struct jv)) : NULL;
    a->kwv = a->nkw ? ralloc(r, a->nkw * sizeof(struct jv)) : NULL;
    if ((a->npos && !a->pos) || (a->nkw && !a->kwv))
        return jr_nomem(r);
    for (size_t i = 0; i < a->npos; i++)
        TRY(jr_eval(r, sc, n->args[i], &a->pos[i]));
    for (size_t i = 0; i < a->nkw; i++)
        TRY(jr_eval(r, sc, n->kwv[i], &a->kwv[i]));
    return KN_OK;
}

/* Binds call arguments to named parameters in order; unknown keywords are an error. */
enum kn_status jr_bind_args(struct rs *r, const struct jnode *at, const char *fname,
                            const char *const *params, size_t np, struct jv *args,
                            size_t nargs, struct jstr **kwn, struct jv *kwv, size_t nkw,
                            struct jv *out, bool *given)
{
    if (nargs > np)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "%s() takes at most %zu arguments (%zu given)", fname,
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
            return jr_rerr(r, at, JINJA_ERR_TYPE, "%s() got an unexpected keyword argument '%s'",
                           fname, kwn[k]->p);
        if (given[i])
            return jr_rerr(r, at, JINJA_ERR_TYPE, "%s() got multiple values for argument '%s'",
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
    TRY(jr_eval(r, sc, n->a, &v));
    struct argv a;
    TRY(jr_eval_args(r, sc, n, &a));
    if (a.nkw)
        return jr_rerr(r, n, JINJA_ERR_TYPE, "tests take no keyword arguments");
    TRY(jr_apply_test(r, sc, n, n->name->p, v, a.pos, a.npos, out));
    if (n->op)
        *out = !*out;
    return KN_OK;
}

enum kn_status jr_eval_filter_chain(struct rs *r, struct scope *sc, const struct jnode *n,
                                    const struct jv *subject, struct jv *out)
{
    if (n->kind != JN_FILTER) {
        if (n->kind == JN_LIT && n->lit.t == JV_UNDEF && subject) {
            *out = *subject;
            return KN_OK;
        }
        return jr_eval(r, sc, n, out);
    }
    struct jv v;
    TRY(jr_eval_filter_chain(r, sc, n->a, subject, &v));
    struct argv a;
    TRY(jr_eval_args(r, sc, n, &a));
    return jr_apply_filter(r, sc, n, n->name->p, v, a.pos, a.npos, a.kwn, a.kwv, a.nkw, out);
}

enum kn_status jr_eval(struct rs *r, struct scope *sc, const struct jnode *n, struct jv *out)
{
    if (++r->depth > r->lim.max_depth * 4)
        return jr_rerr(r, n, JINJA_ERR_LIMIT, "evaluation nested too deeply");
    const struct jnode *outer = r->cur;
    r->cur = n;
    enum kn_status st = jr_charge(r, n, JINJA_STEP_WORK);
    if (st) {
        r->depth--;
        return st;
    }
    switch (n->kind) {
    case JN_LIT:
        *out = n->lit;
        if (out->t == JV_STR)
            out->trust = JTRUST_ALL; /* the template's own text */
        break;
    case JN_NAME:
        if (!jr_scope_get(r, sc, n->name->p, n->name->n, out)) {
            const char *nm = n->name->p;
            const struct jbuiltin *g = jr_builtin_find(JB_GLOBAL, nm, n->name->n);
            if (g) {
                *out = jr_builtin_value(r, g, NULL);
            } else {
                *out = jr_undef_fmt(r, "'%s' is undefined%s", nm, "");
            }
        }
        break;
    case JN_LIST: case JN_TUPLE: {
        struct jseq *l = jr_seq_new(r, n->nargs);
        if (!l) { st = jr_nomem(r); break; }
        for (size_t i = 0; i < n->nargs && !st; i++) {
            st = jr_eval(r, sc, n->args[i], &l->v[i]);
            l->n++;
        }
        *out = v_list(l, n->kind == JN_LIST ? JV_LIST : JV_TUPLE);
        break;
    }
    case JN_DICT: {
        struct jmap *m = jr_map_new(r);
        if (!m) { st = jr_nomem(r); break; }
        for (size_t i = 0; i < n->nargs && !st; i++) {
            struct jv k, v;
            st = jr_eval(r, sc, n->args[i], &k);
            if (!st && (k.t == JV_LIST || k.t == JV_DICT || k.t == JV_UNDEF))
                st = jr_rerr(r, n->args[i], JINJA_ERR_TYPE, "unhashable type: '%s'", jr_type_name(&k));
            if (!st)
                st = jr_eval(r, sc, n->els[i], &v);
            if (!st && !jr_map_set(r, m, k, v))
                st = jr_nomem(r);
        }
        struct jv d = {.t = JV_DICT};
        d.u.d = m;
        *out = d;
        break;
    }
    case JN_ATTR: {
        struct jv obj;
        st = jr_eval(r, sc, n->a, &obj);
        if (!st)
            st = jr_get_attr(r, n, obj, n->name->p, n->name->n, out);
        break;
    }
    case JN_ITEM: {
        struct jv obj, key;
        st = jr_eval(r, sc, n->a, &obj);
        if (!st)
            st = jr_eval(r, sc, n->b, &key);
        if (!st)
            st = jr_get_item(r, n, obj, key, out);
        break;
    }
    case JN_SLICE: {
        struct jv obj, sv[3];
        bool has[3] = {n->b != NULL, n->c != NULL, n->d != NULL};
        st = jr_eval(r, sc, n->a, &obj);
        for (int k = 0; k < 3 && !st; k++)
            if (has[k])
                st = jr_eval(r, sc, k == 0 ? n->b : k == 1 ? n->c : n->d, &sv[k]);
        if (!st)
            st = jr_slice_of(r, n, obj, sv, has, out);
        break;
    }
    case JN_CALL: {
        struct jv fn;
        struct argv a;
        st = jr_eval(r, sc, n->a, &fn);
        if (!st)
            st = jr_eval_args(r, sc, n, &a);
        if (!st)
            st = jr_call_value(r, sc, n, fn, a.pos, a.npos, a.kwn, a.kwv, a.nkw, out);
        break;
    }
    case JN_FILTER:
        st = jr_eval_filter_chain(r, sc, n, NULL, out);
        break;
    case JN_TEST: {
        bool b = false;
        st = eval_test_node(r, sc, n, &b);
        *out = v_bool(b);
        break;
    }
    case JN_NOT: {
        struct jv v;
        st = jr_eval(r, sc, n->a, &v);
        *out = v_bool(!jr_truthy(&v));
        break;
    }
    case JN_NEG: case JN_POS: {
        struct jv v;
        st = jr_eval(r, sc, n->a, &v);
        if (st)
            break;
        if (v.t == JV_UNDEF) { st = jr_undef_error(r, n, &v); break; }
        if (!is_num(&v)) {
            st = jr_rerr(r, n, JINJA_ERR_TYPE, "bad operand type for unary %c: '%s'",
                         n->kind == JN_NEG ? '-' : '+', jr_type_name(&v));
            break;
        }
        if (n->kind == JN_POS)
            *out = v.t == JV_BOOL ? v_int(v.u.b) : v;
        else if (v.t == JV_FLOAT)
            *out = v_float(-v.u.f);
        else if (num_i(&v) == INT64_MIN)
            st = jr_rerr(r, n, JINJA_ERR_UNSUPPORTED, "integer does not fit in 64 bits");
        else
            *out = v_int(-num_i(&v));
        break;
    }
    case JN_BIN: {
        struct jv a, b;
        st = jr_eval(r, sc, n->a, &a);
        if (!st)
            st = jr_eval(r, sc, n->b, &b);
        if (st)
            break;
        if (n->op == JOP_CONCAT) {
            struct jv sa, sbv;
            TRY(jr_check_printable(r, n, &a));
            TRY(jr_check_printable(r, n, &b));
            if (!jr_str_of(r, &a, &sa) || !jr_str_of(r, &b, &sbv)) { st = jr_nomem(r); break; }
            if (!jr_str_join2(r, &sa, &sbv, out)) st = jr_nomem(r);
        } else {
            st = jr_arith(r, n, n->op, a, b, out);
        }
        break;
    }
    case JN_CMP: {
        struct jv left, right;
        st = jr_eval(r, sc, n->a, &left);
        bool res = true;
        for (size_t i = 0; i < n->nargs && !st && res; i++) {
            st = jr_eval(r, sc, n->args[i], &right);
            if (!st)
                st = jr_compare(r, n, n->ops[i], left, right, &res);
            left = right;
        }
        *out = v_bool(res);
        break;
    }
    case JN_AND: case JN_OR: {
        struct jv a;
        st = jr_eval(r, sc, n->a, &a);
        if (st)
            break;
        bool t = jr_truthy(&a);
        if ((n->kind == JN_AND && !t) || (n->kind == JN_OR && t))
            *out = a;
        else
            st = jr_eval(r, sc, n->b, out);
        break;
    }
    case JN_COND: {
        struct jv c;
        st = jr_eval(r, sc, n->b, &c);
        if (st)
            break;
        if (jr_truthy(&c))
            st = jr_eval(r, sc, n->a, out);
        else if (n->c)
            st = jr_eval(r, sc, n->c, out);
        else
            *out = jr_undef_fmt(r, "the inline if-expression evaluated to false and no else "
                                "section was defined.%s%s", "", "");
        break;
    }
    default:
        st = jr_rerr(r, n, JINJA_ERR_UNSUPPORTED, "statement used as an expression");
    }
    r->depth--;
    if (!st && r->over_work)
        st = jr_work_error(r, n);
    if (!st && r->a.failed)
        st = jr_nomem(r);
    r->cur = outer;
    return st;
}
