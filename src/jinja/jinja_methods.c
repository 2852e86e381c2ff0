/* jinja_methods.c: the functions templates call: Python's str, dict and list
 * methods, the globals (range, dict, namespace, raise_exception, strftime_now) and the
 * loop's cycle() and changed(). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, gmtime_r */
#endif
#include "jinja_render_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ================================================================ strings ========== */

/* Python str.strip family. chars NULL: Unicode whitespace. */
static bool in_chars(uint32_t c, const struct jstr *chars)
{
    if (!chars)
        return jr_u_space(c);
    for (size_t i = 0; i < chars->n;) {
        if (jr_utf8_next(chars->p, chars->n, &i) == c)
            return true;
    }
    return false;
}
void jr_strip_span(struct rs *r, const struct jstr *s, const struct jstr *chars, bool left,
                   bool right, size_t *b, size_t *e)
{
    size_t i = 0, end = s->n, per = chars ? chars->n + 1 : 1; /* work of one in_chars */
    if (left) {
        while (i < end && jr_work(r, per)) {
            size_t j = i;
            uint32_t c = jr_utf8_next(s->p, s->n, &j);
            if (!in_chars(c, chars))
                break;
            i = j;
        }
    }
    if (right) {
        while (end > i && jr_work(r, per)) {
            size_t k = end - 1;
            while (k > i && ((unsigned char)s->p[k] & 0xC0) == 0x80)
                k--;
            size_t j = k;
            uint32_t c = jr_utf8_next(s->p, s->n, &j);
            if (!in_chars(c, chars))
                break;
            end = k;
        }
    }
    *b = i;
    *e = end;
}

/* The last occurrence of sub (m > 0 bytes) in s[0..n), or SIZE_MAX; charges the bytes it
 * scans and m for each place where sub's first byte matches (a backward memmem). */
static size_t rfind_bytes(struct rs *r, const char *s, size_t n, const char *sub, size_t m)
{
    if (m > n || !jr_work(r, n))
        return SIZE_MAX;
    for (size_t e = n - m + 1; e > 0;) {
        const char *f = memrchr(s, sub[0], e);
        if (!f || !jr_work(r, m))
            return SIZE_MAX;
        size_t k = (size_t)(f - s);
        if (memcmp(s + k, sub, m) == 0)
            return k;
        e = k;
    }
    return SIZE_MAX;
}

enum kn_status jr_want_str(struct rs *r, const struct jnode *at, const char *fn,
                           const struct jv *v, bool allow_none)
{
    if (v->t == JV_STR || (allow_none && v->t == JV_NONE))
        return KN_OK;
    return jr_rerr(r, at, JINJA_ERR_TYPE, "%s() argument must be str%s, not %s", fn,
                   allow_none ? " or None" : "", jr_type_name(v));
}

static enum kn_status str_split(struct rs *r, const struct jnode *at, const struct jstr *s,
                                const struct jv *sepv, int64_t maxsplit, bool rev, struct jv *out)
{
    TRY(jr_charge(r, at, s->n)); /* the scan; each piece charges its copy */
    struct jseq *l = jr_seq_new(r, 0);
    if (!l)
        return jr_nomem(r);
    struct jv item;
    if (sepv->t == JV_NONE) {
        /* whitespace runs; no empty strings */
        size_t i = 0, n = s->n;
        if (!rev) {
            int64_t splits = 0;
            for (;;) {
                while (i < n) {
                    size_t j = i;
                    if (!jr_u_space(jr_utf8_next(s->p, n, &j))) break;
                    i = j;
                }
                if (i >= n) break;
                if (maxsplit >= 0 && splits == maxsplit) {
                    size_t e = n;
                    /* remainder keeps trailing whitespace stripped? Python: rest unstripped
                     * at the right */
                    if (!jr_v_str(r, &item, s->p + i, e - i) || !jr_seq_push(r, l, item))
                        return jr_nomem(r);
                    break;
                }
                size_t st = i;
                while (i < n) {
                    size_t j = i;
                    if (jr_u_space(jr_utf8_next(s->p, n, &j))) break;
                    i = j;
                }
                if (!jr_v_str(r, &item, s->p + st, i - st) || !jr_seq_push(r, l, item))
                    return jr_nomem(r);
                splits++;
            }
        } else {
            /* collect from the right */
            size_t e = n;
            int64_t splits = 0;
            struct jseq *tmp = jr_seq_new(r, 0);
            if (!tmp) return jr_nomem(r);
            for (;;) {
                while (e > 0) {
                    size_t k = e - 1;
                    while (k > 0 && ((unsigned char)s->p[k] & 0xC0) == 0x80) k--;
                    size_t j = k;
                    if (!jr_u_space(jr_utf8_next(s->p, n, &j))) break;
                    e = k;
                }
                if (e == 0) break;
                if (maxsplit >= 0 && splits == maxsplit) {
                    if (!jr_v_str(r, &item, s->p, e) || !jr_seq_push(r, tmp, item)) return jr_nomem(r);
                    break;
                }
                size_t b = e;
                while (b > 0) {
                    size_t k = b - 1;
                    while (k > 0 && ((unsigned char)s->p[k] & 0xC0) == 0x80) k--;
                    size_t j = k;
                    if (jr_u_space(jr_utf8_next(s->p, n, &j))) break;
                    b = k;
                }
                if (!jr_v_str(r, &item, s->p + b, e - b) || !jr_seq_push(r, tmp, item)) return jr_nomem(r);
                e = b;
                splits++;
            }
            for (size_t k = tmp->n; k-- > 0;)
                if (!jr_seq_push(r, l, tmp->v[k])) return jr_nomem(r);
        }
        *out = v_list(l, JV_LIST);
        return KN_OK;
    }
    TRY(jr_want_str(r, at, "split", sepv, true));
    const struct jstr *sep = sepv->u.s;
    if (sep->n == 0)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "empty separator");
    if (!rev) {
        size_t i = 0;
        int64_t splits = 0;
        for (;;) {
            const char *f = (maxsplit < 0 || splits < maxsplit)
                                ? memmem(s->p + i, s->n - i, sep->p, sep->n) : NULL;
            if (!f) {
                if (!jr_v_str(r, &item, s->p + i, s->n - i) || !jr_seq_push(r, l, item)) return jr_nomem(r);
                break;
            }
            size_t k = (size_t)(f - s->p);
            if (!jr_v_str(r, &item, s->p + i, k - i) || !jr_seq_push(r, l, item)) return jr_nomem(r);
            i = k + sep->n;
            splits++;
        }
    } else {
        struct jseq *tmp = jr_seq_new(r, 0);
        if (!tmp) return jr_nomem(r);
        size_t e = s->n;
        int64_t splits = 0;
        for (;;) {
            size_t found = maxsplit < 0 || splits < maxsplit
                               ? rfind_bytes(r, s->p, e, sep->p, sep->n) : SIZE_MAX;
            if (r->over_work)
                return jr_work_error(r, at);
            if (found == SIZE_MAX) {
                if (!jr_v_str(r, &item, s->p, e) || !jr_seq_push(r, tmp, item)) return jr_nomem(r);
                break;
            }
            if (!jr_v_str(r, &item, s->p + found + sep->n, e - found - sep->n) || !jr_seq_push(r, tmp, item))
                return jr_nomem(r);
            e = found;
            splits++;
        }
        for (size_t k = tmp->n; k-- > 0;)
            if (!jr_seq_push(r, l, tmp->v[k])) return jr_nomem(r);
    }
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

bool jr_str_replace(struct rs *r, const struct jstr *s, const struct jstr *old,
                    const struct jstr *new, int64_t count, struct jv *out)
{
    struct sb b = {.r = r};
    size_t i = 0;
    int64_t done = 0;
    if (!jr_work(r, s->n + old->n)) /* the scan; the builder charges the result */
        return false;
    if (old->n == 0) {
        /* Python inserts new between every character (and at both ends) */
        if (count != 0) { jr_sb_add(&b, new->p, new->n); done++; }
        while (i < s->n) {
            size_t j = i;
            jr_utf8_next(s->p, s->n, &j);
            jr_sb_add(&b, s->p + i, j - i);
            i = j;
            if (count < 0 || done < count) { jr_sb_add(&b, new->p, new->n); done++; }
        }
    } else {
        while (i <= s->n) {
            const char *f = (count < 0 || done < count) ? memmem(s->p + i, s->n - i, old->p, old->n) : NULL;
            if (!f) {
                jr_sb_add(&b, s->p + i, s->n - i);
                break;
            }
            size_t k = (size_t)(f - s->p);
            if (!jr_work_elems(r, 1))
                return false;
            jr_sb_add(&b, s->p + i, k - i);
            jr_sb_add(&b, new->p, new->n);
            i = k + old->n;
            done++;
        }
    }
    if (!b.p)
        return jr_v_str(r, out, "", 0);
    return jr_sb_done(&b, out);
}

bool jr_str_case(struct rs *r, const struct jstr *s, enum casemode m, struct jv *out)
{
    if (!jr_work_elems(r, s->n)) /* maps each code point */
        return false;
    struct sb b = {.r = r};
    bool prev_cased = false, first = true, word_start = true;
    for (size_t i = 0; i < s->n;) {
        uint32_t c = jr_utf8_next(s->p, s->n, &i), o = c;
        switch (m) {
        case CM_LOWER: o = jr_u_lower(c); break;
        case CM_UPPER: o = jr_u_upper(c); break;
        case CM_SWAP: o = jr_u_isupper(c) ? jr_u_lower(c) : jr_u_upper(c); break;
        case CM_CAPITALIZE: o = first ? jr_u_upper(c) : jr_u_lower(c); break;
        case CM_TITLE:
            o = prev_cased ? jr_u_lower(c) : jr_u_upper(c);
            prev_cased = jr_u_cased(c);
            break;
        case CM_JTITLE: /* jinja's title: words start after - whitespace ( { [ < */
            o = word_start ? jr_u_upper(c) : jr_u_lower(c);
            word_start = c == '-' || jr_u_space(c) || c == '(' || c == '{' || c == '[' || c == '<';
            break;
        }
        first = false;
        if (c == 0xDF && (m == CM_UPPER || (m == CM_TITLE && o == 0xDF && !prev_cased))) {
            jr_sb_adds(&b, m == CM_UPPER ? "SS" : "Ss");
            continue;
        }
        jr_sb_cp(&b, o);
    }
    if (!b.p)
        return jr_v_str(r, out, "", 0);
    return jr_sb_done(&b, out);
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
enum kn_status jr_splitlines(struct rs *r, const char *p, size_t n, bool keepends, struct jseq **out)
{
    if (!jr_work(r, n))
        return jr_nomem(r);
    struct jseq *l = jr_seq_new(r, 0);
    if (!l)
        return jr_nomem(r);
    size_t st = 0, i = 0;
    while (i < n) {
        size_t bl;
        if (line_break_at(p, n, i, &bl)) {
            struct jv item;
            if (!jr_v_str(r, &item, p + st, (keepends ? i + bl : i) - st) || !jr_seq_push(r, l, item))
                return jr_nomem(r);
            i += bl;
            st = i;
        } else {
            i++;
        }
    }
    if (st < n) {
        struct jv item;
        if (!jr_v_str(r, &item, p + st, n - st) || !jr_seq_push(r, l, item))
            return jr_nomem(r);
    }
    *out = l;
    return KN_OK;
}

static bool str_find(struct rs *r, const struct jstr *s, const struct jstr *sub, bool rev,
                     int64_t *out)
{
    /* result in code points */
    size_t pos = SIZE_MAX;
    if (!rev) {
        const char *f = sub->n == 0 ? s->p
                        : jr_work(r, s->n + sub->n) ? memmem(s->p, s->n, sub->p, sub->n) : NULL;
        if (f) pos = (size_t)(f - s->p);
    } else if (sub->n == 0) {
        pos = s->n;
    } else {
        pos = rfind_bytes(r, s->p, s->n, sub->p, sub->n);
    }
    *out = pos == SIZE_MAX ? -1 : (int64_t)jr_utf8_count(s->p, pos);
    return pos != SIZE_MAX;
}

/* ---- strftime_now ---- */
static enum kn_status do_strftime(struct rs *r, const struct jnode *at, struct jv fmt, struct jv *out)
{
    TRY(jr_want_str(r, at, "strftime_now", &fmt, false));
    struct tm tm;
    time_t t;
    if (r->opts && r->opts->fixed_time) {
        t = (time_t)r->opts->now_unix;
        if (!gmtime_r(&t, &tm))
            return jr_rerr(r, at, JINJA_ERR_TYPE, "strftime_now: bad fixed time");
    } else {
        t = time(NULL);
        if (!localtime_r(&t, &tm))
            return jr_rerr(r, at, JINJA_ERR_TYPE, "strftime_now: no local time");
    }
    if (fmt.u.s->n > 256 || memchr(fmt.u.s->p, 0, fmt.u.s->n))
        return jr_rerr(r, at, JINJA_ERR_TYPE, "strftime_now: format too long or has NUL");
    char buf[2048];
    size_t n = fmt.u.s->n ? strftime(buf, sizeof buf, fmt.u.s->p, &tm) : 0;
    if (fmt.u.s->n && n == 0)
        buf[0] = 0;
    return jr_v_str(r, out, buf, n) ? KN_OK : jr_nomem(r);
}

/* ================================================================ calls ============ */

/* Each built-in a template can call is one row of k_builtins: its name, what it is a name
 * or a method of, the function (which reads the row's arg to tell variants apart) and, for
 * the classes dict and namespace, how the function object prints. A JV_FUNC value holds
 * its row's index (jv.fn) and, for a method, the object it is bound to. */

/* ---- globals ---- */

static enum kn_status g_range(const struct jcall *c, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    struct jv *args = c->args;
    size_t nargs = c->nargs;
    if (c->nkw)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "range() takes no keyword arguments");
    int64_t a[3] = {0, 0, 1};
    if (nargs < 1 || nargs > 3)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "range expected 1 to 3 arguments, got %zu", nargs);
    for (size_t i = 0; i < nargs; i++) {
        if (args[i].t != JV_INT && args[i].t != JV_BOOL)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "'%s' object cannot be interpreted as an integer",
                           jr_type_name(&args[i]));
    }
    if (nargs == 1) a[1] = num_i(&args[0]);
    else { a[0] = num_i(&args[0]); a[1] = num_i(&args[1]); if (nargs == 3) a[2] = num_i(&args[2]); }
    if (a[2] == 0)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "range() arg 3 must not be zero");
    struct jseq *l = jr_seq_new(r, 0);
    if (!l)
        return jr_nomem(r);
    size_t cnt = 0;
    for (int64_t i = a[0]; a[2] > 0 ? i < a[1] : i > a[1]; i += a[2]) {
        /* the sandbox caps range at 100000 items (MAX_RANGE) */
        if (++cnt > 100000)
            return jr_rerr(r, at, JINJA_ERR_LIMIT,
                           "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        if (!jr_seq_push(r, l, v_int(i)))
            return jr_nomem(r);
        if ((a[2] > 0 && i > INT64_MAX - a[2]) || (a[2] < 0 && i < INT64_MIN - a[2]))
            break;
    }
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

/* dict(...) and namespace(...) (arg: JV_DICT or JV_NS). */
static enum kn_status g_dict(const struct jcall *c, struct jv *out)
{
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    struct jv *args = c->args;
    struct jmap *m = jr_map_new(r);
    if (!m)
        return jr_nomem(r);
    if (c->nargs > 1)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "%s expected at most 1 argument, got %zu", c->name,
                       c->nargs);
    if (c->nargs == 1) {
        if (args[0].t == JV_UNDEF)
            return jr_undef_error(r, at, &args[0]);
        if (args[0].t == JV_DICT || args[0].t == JV_NS) {
            for (size_t i = 0; i < args[0].u.d->n; i++) /* into an empty m: keys stay unique */
                if (!jr_map_add(r, m, args[0].u.d->k[i], args[0].u.d->v[i]))
                    return jr_nomem(r);
        } else {
            struct jseq *l;
            TRY(jr_iterate(r, at, args[0], &l));
            for (size_t i = 0; i < l->n; i++) {
                struct jv p = l->v[i];
                if ((p.t != JV_LIST && p.t != JV_TUPLE) || p.gen || p.u.l->n != 2)
                    return jr_rerr(r, at, JINJA_ERR_TYPE,
                                   "dictionary update sequence element #%zu has the wrong length", i);
                if (!jr_map_set(r, m, p.u.l->v[0], p.u.l->v[1]))
                    return jr_nomem(r);
            }
        }
    }
    for (size_t k = 0; k < c->nkw; k++) {
        struct jv key = v_strs(c->kwn[k]);
        if (!jr_map_set(r, m, key, c->kwv[k]))
            return jr_nomem(r);
    }
    struct jv d = {.t = (uint8_t)c->arg};
    d.u.d = m;
    *out = d;
    return KN_OK;
}

static enum kn_status g_raise(const struct jcall *c, struct jv *out)
{
    (void)out;
    struct jv msg = c->nargs ? c->args[0] : (c->nkw ? c->kwv[0] : v_none());
    struct jv s;
    if (!jr_str_of(c->r, &msg, &s))
        return jr_nomem(c->r);
    return jr_rerr(c->r, c->at, JINJA_ERR_RAISED, "%s", s.u.s->p);
}

static enum kn_status g_strftime(const struct jcall *c, struct jv *out)
{
    if (c->nargs != 1 || c->nkw)
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "strftime_now() takes exactly one argument");
    return do_strftime(c->r, c->at, c->args[0], out);
}

static enum kn_status g_unsupported(const struct jcall *c, struct jv *out)
{
    (void)out;
    return jr_rerr(c->r, c->at, JINJA_ERR_UNSUPPORTED, "cycler, joiner and lipsum are not supported");
}

/* ---- loop.cycle, loop.changed ---- */

static enum kn_status loop_cycle(const struct jcall *c, struct jv *out)
{
    if (c->nargs == 0)
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "no items for cycling given");
    struct jloop *l = c->self.u.loop;
    *out = c->args[l->idx % c->nargs];
    return KN_OK;
}

static enum kn_status loop_changed(const struct jcall *c, struct jv *out)
{
    struct jloop *l = c->self.u.loop;
    struct jseq *vals = jr_seq_new(c->r, c->nargs);
    if (!vals)
        return jr_nomem(c->r);
    for (size_t i = 0; i < c->nargs; i++)
        vals->v[vals->n++] = c->args[i];
    struct jv cur = v_list(vals, JV_LIST);
    bool changed = !l->has_changed || !jr_py_eq(c->r, &cur, &l->last_changed);
    l->has_changed = true;
    l->last_changed = cur;
    *out = v_bool(changed);
    return KN_OK;
}

enum kn_status jr_opt_int(struct rs *r, const struct jnode *at, const struct jv *v,
                          bool given, int64_t dflt, int64_t *out)
{
    if (!given || v->t == JV_NONE) {
        *out = dflt;
        return KN_OK;
    }
    if (v->t != JV_INT && v->t != JV_BOOL)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "'%s' object cannot be interpreted as an integer",
                       jr_type_name(v));
    *out = num_i(v);
    return KN_OK;
}

/* ---- dict methods ---- */

static enum kn_status dict_get(const struct jcall *c, struct jv *out)
{
    static const char *const p_get[] = {"key", "default"};
    struct jv a[2];
    bool g[2];
    if (c->nkw)
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "get() takes no keyword arguments");
    TRY(jr_bind_args(c->r, c->at, "get", p_get, 2, c->args, c->nargs, NULL, NULL, 0, a, g));
    if (!g[0])
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "get expected at least 1 argument, got 0");
    if (a[0].t == JV_LIST || a[0].t == JV_DICT)
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "unhashable type: '%s'", jr_type_name(&a[0]));
    struct jv *v = jr_map_find(c->r, c->self.u.d, &a[0]);
    *out = v ? *v : g[1] ? a[1] : v_none();
    return KN_OK;
}

static enum kn_status dict_copy(const struct jcall *c, struct jv *out)
{
    struct rs *r = c->r;
    const struct jmap *self = c->self.u.d;
    if (c->nargs || c->nkw)
        return jr_rerr(r, c->at, JINJA_ERR_TYPE, "method takes no arguments");
    struct jmap *m = jr_map_new(r);
    if (!m) return jr_nomem(r);
    for (size_t i = 0; i < self->n; i++)
        if (!jr_map_add(r, m, self->k[i], self->v[i])) return jr_nomem(r);
    struct jv d = {.t = JV_DICT};
    d.u.d = m;
    *out = d;
    return KN_OK;
}

enum { VIEW_ITEMS, VIEW_KEYS, VIEW_VALUES };
/* items(), keys(), values() (arg: VIEW_*). */
static enum kn_status dict_view(const struct jcall *c, struct jv *out)
{
    struct rs *r = c->r;
    const struct jmap *self = c->self.u.d;
    if (c->nargs || c->nkw)
        return jr_rerr(r, c->at, JINJA_ERR_TYPE, "method takes no arguments");
    struct jseq *l = jr_seq_new(r, self->n);
    if (!l) return jr_nomem(r);
    for (size_t i = 0; i < self->n; i++) {
        if (c->arg == VIEW_ITEMS) {
            struct jseq *p = jr_seq_new(r, 2);
            if (!p) return jr_nomem(r);
            p->v[0] = self->k[i];
            p->v[1] = self->v[i];
            p->n = 2;
            l->v[l->n++] = v_list(p, JV_TUPLE);
        } else {
            l->v[l->n++] = c->arg == VIEW_KEYS ? self->k[i] : self->v[i];
        }
    }
    /* dict views print as dict_items([...]) in Python; treat as a generator for printing */
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

/* ---- list (and tuple) methods ---- */

static enum kn_status list_copy(const struct jcall *c, struct jv *out)
{
    const struct jseq *self = c->self.u.l;
    if (c->nkw)
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "method takes no keyword arguments");
    if (c->nargs) return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "copy() takes no arguments");
    struct jseq *l = jr_seq_new(c->r, self->n);
    if (!l) return jr_nomem(c->r);
    for (size_t i = 0; i < self->n; i++) l->v[l->n++] = self->v[i];
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

/* index(x) and count(x) (arg: true for count). */
static enum kn_status list_find(const struct jcall *c, struct jv *out)
{
    const struct jseq *self = c->self.u.l;
    if (c->nkw)
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "method takes no keyword arguments");
    if (c->nargs != 1)
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "method takes exactly one argument");
    int64_t cnt = 0, first = -1;
    for (size_t i = 0; i < self->n && !c->r->over_work; i++)
        if (jr_py_eq(c->r, &self->v[i], &c->args[0])) {
            if (first < 0) first = (int64_t)i;
            cnt++;
        }
    if (c->arg) { *out = v_int(cnt); return KN_OK; }
    if (first < 0)
        return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "list.index(x): x not in list");
    *out = v_int(first);
    return KN_OK;
}

/* ---- str methods ---- */

enum { SIDE_LEFT = 1, SIDE_RIGHT = 2 };
/* strip, lstrip, rstrip (arg: SIDE_*). */
static enum kn_status str_strip(const struct jcall *c, struct jv *out)
{
    static const char *const p_strip[] = {"chars"};
    struct jv a[1];
    bool g[1];
    if (c->nkw) return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "strip() takes no keyword arguments");
    TRY(jr_bind_args(c->r, c->at, "strip", p_strip, 1, c->args, c->nargs, NULL, NULL, 0, a, g));
    if (g[0]) TRY(jr_want_str(c->r, c->at, "strip", &a[0], true));
    const struct jstr *chars = g[0] && a[0].t == JV_STR ? a[0].u.s : NULL;
    size_t b = 0, e = 0;
    jr_strip_span(c->r, c->self.u.s, chars, c->arg & SIDE_LEFT, c->arg & SIDE_RIGHT, &b, &e);
    return jr_v_substr(c->r, out, &c->self, b, e) ? KN_OK : jr_nomem(c->r);
}

/* split, rsplit (arg: true for rsplit). */
static enum kn_status str_split_m(const struct jcall *c, struct jv *out)
{
    static const char *const p_split[] = {"sep", "maxsplit"};
    struct jv a[2];
    bool g[2];
    TRY(jr_bind_args(c->r, c->at, "split", p_split, 2, c->args, c->nargs, c->kwn, c->kwv, c->nkw, a, g));
    int64_t maxsplit = -1;
    TRY(jr_opt_int(c->r, c->at, &a[1], g[1], -1, &maxsplit));
    struct jv sep = g[0] ? a[0] : v_none();
    return str_split(c->r, c->at, c->self.u.s, &sep, maxsplit, c->arg, out);
}

/* startswith, endswith (arg: true for endswith). */
static enum kn_status str_affix(const struct jcall *c, struct jv *out)
{
    static const char *const p_sw[] = {"prefix", "start", "end"};
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    const struct jstr *s = c->self.u.s;
    bool ends = c->arg;
    struct jv a[3];
    bool g[3];
    if (c->nkw) return jr_rerr(r, at, JINJA_ERR_TYPE, "startswith() takes no keyword arguments");
    TRY(jr_bind_args(r, at, c->name, p_sw, 3, c->args, c->nargs, NULL, NULL, 0, a, g));
    if (!g[0]) return jr_rerr(r, at, JINJA_ERR_TYPE, "startswith() takes at least 1 argument (0 given)");
    TRY(jr_charge(r, at, s->n));
    int64_t len = (int64_t)jr_utf8_count(s->p, s->n), st = 0, en = 0;
    TRY(jr_opt_int(r, at, &a[1], g[1], 0, &st));
    TRY(jr_opt_int(r, at, &a[2], g[2], len, &en));
    if (st < 0) { st += len; if (st < 0) st = 0; }
    if (en < 0) { en += len; if (en < 0) en = 0; }
    if (en > len) en = len;
    /* byte offsets of the code-point range */
    size_t bs = 0, be = 0, p = 0;
    for (int64_t i = 0; i <= len; i++) {
        if (i == st) bs = p;
        if (i == en) be = p;
        if (i < len) jr_utf8_next(s->p, s->n, &p);
    }
    struct jseq one = {1, 1, &a[0]};
    struct jseq *cands = &one;
    if (a[0].t == JV_TUPLE) cands = a[0].u.l;
    else if (a[0].t != JV_STR)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "%s first arg must be str or a tuple of str, not %s",
                       c->name, jr_type_name(&a[0]));
    bool res = false;
    for (size_t i = 0; i < cands->n && !res; i++) {
        if (cands->v[i].t != JV_STR)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "tuple for startswith must only contain str, not %s",
                           jr_type_name(&cands->v[i]));
        const struct jstr *x = cands->v[i].u.s;
        TRY(jr_charge(r, at, x->n + 1));
        if (st > len || bs > be || x->n > be - bs) continue;
        res = !ends ? memcmp(s->p + bs, x->p, x->n) == 0
                    : memcmp(s->p + be - x->n, x->p, x->n) == 0;
    }
    *out = v_bool(res);
    return KN_OK;
}

/* lower, upper, title, capitalize, swapcase, casefold (arg: enum casemode). */
static enum kn_status str_case_m(const struct jcall *c, struct jv *out)
{
    if (c->nargs || c->nkw) return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "method takes no arguments");
    return jr_str_case(c->r, c->self.u.s, (enum casemode)c->arg, out) ? KN_OK : jr_nomem(c->r);
}

static enum kn_status str_replace_m(const struct jcall *c, struct jv *out)
{
    static const char *const p_repl[] = {"old", "new", "count"};
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    struct jv a[3];
    bool g[3];
    TRY(jr_bind_args(r, at, "replace", p_repl, 3, c->args, c->nargs, c->kwn, c->kwv, c->nkw, a, g));
    if (!g[0] || !g[1]) return jr_rerr(r, at, JINJA_ERR_TYPE, "replace expected at least 2 arguments");
    TRY(jr_want_str(r, at, "replace", &a[0], false));
    TRY(jr_want_str(r, at, "replace", &a[1], false));
    int64_t count = -1;
    TRY(jr_opt_int(r, at, &a[2], g[2], -1, &count));
    return jr_str_replace(r, c->self.u.s, a[0].u.s, a[1].u.s, count, out) ? KN_OK : jr_nomem(r);
}

enum { FIND_REV = 1, FIND_MUST = 2, FIND_COUNT = 4 };
/* find, rfind, index, rindex, count (arg: FIND_*). */
static enum kn_status str_find_m(const struct jcall *c, struct jv *out)
{
    static const char *const p_sub[] = {"sub", "start", "end"};
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    const struct jstr *s = c->self.u.s;
    struct jv a[3];
    bool g[3];
    if (c->nkw) return jr_rerr(r, at, JINJA_ERR_TYPE, "method takes no keyword arguments");
    TRY(jr_bind_args(r, at, "find", p_sub, 3, c->args, c->nargs, NULL, NULL, 0, a, g));
    if (!g[0]) return jr_rerr(r, at, JINJA_ERR_TYPE, "method takes at least 1 argument");
    TRY(jr_want_str(r, at, "find", &a[0], false));
    if (g[1] || g[2])
        return jr_rerr(r, at, JINJA_ERR_UNSUPPORTED, "start/end arguments of find/count are not supported");
    TRY(jr_charge(r, at, s->n + a[0].u.s->n));
    if (c->arg & FIND_COUNT) {
        int64_t n = 0;
        const struct jstr *x = a[0].u.s;
        if (x->n == 0) n = (int64_t)jr_utf8_count(s->p, s->n) + 1;
        else
            for (size_t i = 0; i + x->n <= s->n;) {
                const char *f = memmem(s->p + i, s->n - i, x->p, x->n);
                if (!f || !jr_work_elems(r, 1)) break;
                n++;
                i = (size_t)(f - s->p) + x->n;
            }
        *out = v_int(n);
        return KN_OK;
    }
    int64_t pos;
    bool found = str_find(r, s, a[0].u.s, c->arg & FIND_REV, &pos);
    if (r->over_work)
        return jr_work_error(r, at);
    if (!found && (c->arg & FIND_MUST))
        return jr_rerr(r, at, JINJA_ERR_TYPE, "substring not found");
    *out = v_int(pos);
    return KN_OK;
}

static enum kn_status str_join(const struct jcall *c, struct jv *out)
{
    struct rs *r = c->r;
    if (c->nargs != 1 || c->nkw)
        return jr_rerr(r, c->at, JINJA_ERR_TYPE, "join() takes exactly one argument");
    struct jseq *l;
    TRY(jr_iterate(r, c->at, c->args[0], &l));
    struct sb b = {.r = r}, m = {.r = r};
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].t != JV_STR)
            return jr_rerr(r, c->at, JINJA_ERR_TYPE, "sequence item %zu: expected str instance, %s found",
                           i, jr_type_name(&l->v[i]));
        if (i) jr_sb_add_marked(&b, &m, &c->self);
        jr_sb_add_marked(&b, &m, &l->v[i]);
    }
    return jr_sb_done_marked(&b, &m, out) ? KN_OK : jr_nomem(r);
}

static enum kn_status str_splitlines(const struct jcall *c, struct jv *out)
{
    static const char *const p_keep[] = {"keepends"};
    struct jv a[1];
    bool g[1];
    TRY(jr_bind_args(c->r, c->at, "splitlines", p_keep, 1, c->args, c->nargs, c->kwn, c->kwv, c->nkw, a, g));
    struct jseq *l;
    TRY(jr_splitlines(c->r, c->self.u.s->p, c->self.u.s->n, g[0] && jr_truthy(&a[0]), &l));
    *out = v_list(l, JV_LIST);
    return KN_OK;
}

enum { IS_DIGIT, IS_ALPHA, IS_ALNUM, IS_SPACE, IS_UPPER, IS_LOWER, IS_IDENTIFIER, IS_TITLE };
/* isdigit, isnumeric, isdecimal, isalpha, isalnum, isspace, isupper, islower,
 * isidentifier, istitle (arg: IS_*). */
static enum kn_status str_is(const struct jcall *c, struct jv *out)
{
    const struct jstr *s = c->self.u.s;
    if (c->nargs || c->nkw) return jr_rerr(c->r, c->at, JINJA_ERR_TYPE, "method takes no arguments");
    TRY(jr_charge(c->r, c->at, jr_elems_work(s->n))); /* classifies each code point */
    bool res = s->n > 0, any_cased = false, prev_cased = false, title_ok = true;
    size_t k = 0;
    for (size_t i = 0; i < s->n; k++) {
        uint32_t ch = jr_utf8_next(s->p, s->n, &i);
        switch (c->arg) {
        case IS_DIGIT: if (!u_digit(ch)) res = false; break;
        case IS_ALPHA: if (!jr_u_alpha(ch)) res = false; break;
        case IS_ALNUM: if (!jr_u_alpha(ch) && !u_digit(ch)) res = false; break;
        case IS_SPACE: if (!jr_u_space(ch)) res = false; break;
        case IS_UPPER: if (jr_u_islower(ch)) res = false; if (jr_u_isupper(ch)) any_cased = true; break;
        case IS_LOWER: if (jr_u_isupper(ch)) res = false; if (jr_u_islower(ch)) any_cased = true; break;
        case IS_IDENTIFIER:
            if (!(ch == '_' || jr_u_alpha(ch) || (k > 0 && u_digit(ch)))) res = false;
            break;
        case IS_TITLE:
            if (jr_u_isupper(ch)) { if (prev_cased) title_ok = false; prev_cased = true; any_cased = true; }
            else if (jr_u_islower(ch)) { if (!prev_cased) title_ok = false; prev_cased = true; }
            else prev_cased = false;
            break;
        default: break;
        }
    }
    if (c->arg == IS_UPPER || c->arg == IS_LOWER) res = res && any_cased;
    if (c->arg == IS_TITLE) res = title_ok && any_cased;
    *out = v_bool(res);
    return KN_OK;
}

enum { PAD_CENTER, PAD_LJUST, PAD_RJUST, PAD_ZFILL };
/* center, ljust, rjust, zfill (arg: PAD_*). */
static enum kn_status str_pad(const struct jcall *c, struct jv *out)
{
    static const char *const p_width[] = {"width", "fillchar"};
    struct rs *r = c->r;
    const struct jnode *at = c->at;
    const struct jstr *s = c->self.u.s;
    bool zfill = c->arg == PAD_ZFILL;
    struct jv a[2];
    bool g[2];
    TRY(jr_bind_args(r, at, "center", p_width, zfill ? 1 : 2, c->args, c->nargs, c->kwn, c->kwv,
                     c->nkw, a, g));
    int64_t w = 0;
    if (!g[0]) return jr_rerr(r, at, JINJA_ERR_TYPE, "method takes at least 1 argument");
    TRY(jr_opt_int(r, at, &a[0], true, 0, &w));
    const char *fill = " ";
    size_t filln = 1;
    if (!zfill && g[1]) {
        TRY(jr_want_str(r, at, "center", &a[1], false));
        if (jr_utf8_count(a[1].u.s->p, a[1].u.s->n) != 1)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "The fill character must be exactly one character long");
        fill = a[1].u.s->p;
        filln = a[1].u.s->n;
    }
    TRY(jr_charge(r, at, s->n));
    int64_t len = (int64_t)jr_utf8_count(s->p, s->n);
    if (w > (int64_t)r->lim.max_output) return jr_rerr(r, at, JINJA_ERR_LIMIT, "width too large");
    int64_t pad = w > len ? w - len : 0, left = 0;
    if (c->arg == PAD_CENTER) left = pad / 2 + (pad & w & 1);
    else if (c->arg == PAD_RJUST || zfill) left = pad;
    struct sb b = {.r = r};
    size_t body = 0;
    if (zfill && s->n && (s->p[0] == '-' || s->p[0] == '+')) { jr_sb_add(&b, s->p, 1); body = 1; }
    for (int64_t i = 0; i < left; i++) jr_sb_add(&b, zfill ? "0" : fill, zfill ? 1 : filln);
    jr_sb_add(&b, s->p + body, s->n - body);
    for (int64_t i = left; i < pad; i++) jr_sb_add(&b, fill, filln);
    if (!b.p) return jr_v_str(r, out, "", 0) ? KN_OK : jr_nomem(r);
    return jr_sb_done(&b, out) ? KN_OK : jr_nomem(r);
}

/* partition, rpartition (arg: true for rpartition). */
static enum kn_status str_partition(const struct jcall *c, struct jv *out)
{
    struct rs *r = c->r;
    const struct jstr *s = c->self.u.s;
    bool rev = c->arg;
    if (c->nargs != 1 || c->nkw)
        return jr_rerr(r, c->at, JINJA_ERR_TYPE, "partition() takes exactly one argument");
    TRY(jr_want_str(r, c->at, "partition", &c->args[0], false));
    const struct jstr *sep = c->args[0].u.s;
    if (!sep->n) return jr_rerr(r, c->at, JINJA_ERR_TYPE, "empty separator");
    size_t pos = SIZE_MAX;
    if (!rev) {
        TRY(jr_charge(r, c->at, s->n + sep->n));
        const char *f = memmem(s->p, s->n, sep->p, sep->n);
        if (f) pos = (size_t)(f - s->p);
    } else {
        pos = rfind_bytes(r, s->p, s->n, sep->p, sep->n);
        if (r->over_work)
            return jr_work_error(r, c->at);
    }
    struct jseq *l = jr_seq_new(r, 3);
    if (!l) return jr_nomem(r);
    l->n = 3;
    bool ok;
    if (pos == SIZE_MAX) {
        /* partition: (s, "", ""); rpartition: ("", "", s) */
        ok = jr_v_str(r, &l->v[0], s->p, rev ? 0 : s->n) && jr_v_str(r, &l->v[1], "", 0) &&
             jr_v_str(r, &l->v[2], s->p, rev ? s->n : 0);
    } else {
        ok = jr_v_str(r, &l->v[0], s->p, pos) && jr_v_str(r, &l->v[1], sep->p, sep->n) &&
             jr_v_str(r, &l->v[2], s->p + pos + sep->n, s->n - pos - sep->n);
    }
    if (!ok) return jr_nomem(r);
    *out = v_list(l, JV_TUPLE);
    return KN_OK;
}

/* removeprefix, removesuffix (arg: true for removesuffix). */
static enum kn_status str_remove(const struct jcall *c, struct jv *out)
{
    struct rs *r = c->r;
    const struct jstr *s = c->self.u.s;
    if (c->nargs != 1 || c->nkw)
        return jr_rerr(r, c->at, JINJA_ERR_TYPE, "method takes exactly one argument");
    TRY(jr_want_str(r, c->at, "removeprefix", &c->args[0], false));
    const struct jstr *x = c->args[0].u.s;
    TRY(jr_charge(r, c->at, x->n));
    if (x->n <= s->n && !c->arg && memcmp(s->p, x->p, x->n) == 0)
        return jr_v_str(r, out, s->p + x->n, s->n - x->n) ? KN_OK : jr_nomem(r);
    if (x->n <= s->n && c->arg && memcmp(s->p + s->n - x->n, x->p, x->n) == 0)
        return jr_v_str(r, out, s->p, s->n - x->n) ? KN_OK : jr_nomem(r);
    *out = c->self;
    return KN_OK;
}

static enum kn_status str_unsupported(const struct jcall *c, struct jv *out)
{
    (void)out;
    return jr_rerr(c->r, c->at, JINJA_ERR_UNSUPPORTED, "this string method is not supported");
}

/* ---- the table ---- */

#define LIST_OR_TUPLE (JB_LIST | JB_TUPLE)
static const struct jbuiltin k_builtins[] = {
    /* globals */
    {"range", JB_GLOBAL, g_range, 0, NULL},
    {"dict", JB_GLOBAL, g_dict, JV_DICT, "<class 'dict'>"},
    {"namespace", JB_GLOBAL, g_dict, JV_NS, "<class 'jinja2.utils.Namespace'>"},
    {"raise_exception", JB_GLOBAL, g_raise, 0, NULL},
    {"strftime_now", JB_GLOBAL, g_strftime, 0, NULL},
    {"cycler", JB_GLOBAL, g_unsupported, 0, NULL},
    {"joiner", JB_GLOBAL, g_unsupported, 0, NULL},
    {"lipsum", JB_GLOBAL, g_unsupported, 0, NULL},
    /* loop */
    {"cycle", JB_LOOP, loop_cycle, 0, NULL},
    {"changed", JB_LOOP, loop_changed, 0, NULL},
    /* str */
    {"strip", JB_STR, str_strip, SIDE_LEFT | SIDE_RIGHT, NULL},
    {"lstrip", JB_STR, str_strip, SIDE_LEFT, NULL},
    {"rstrip", JB_STR, str_strip, SIDE_RIGHT, NULL},
    {"split", JB_STR, str_split_m, false, NULL},
    {"rsplit", JB_STR, str_split_m, true, NULL},
    {"startswith", JB_STR, str_affix, false, NULL},
    {"endswith", JB_STR, str_affix, true, NULL},
    {"lower", JB_STR, str_case_m, CM_LOWER, NULL},
    {"upper", JB_STR, str_case_m, CM_UPPER, NULL},
    {"title", JB_STR, str_case_m, CM_TITLE, NULL},
    {"capitalize", JB_STR, str_case_m, CM_CAPITALIZE, NULL},
    {"swapcase", JB_STR, str_case_m, CM_SWAP, NULL},
    {"casefold", JB_STR, str_case_m, CM_LOWER, NULL},
    {"replace", JB_STR, str_replace_m, 0, NULL},
    {"find", JB_STR, str_find_m, 0, NULL},
    {"rfind", JB_STR, str_find_m, FIND_REV, NULL},
    {"index", JB_STR, str_find_m, FIND_MUST, NULL},
    {"rindex", JB_STR, str_find_m, FIND_REV | FIND_MUST, NULL},
    {"count", JB_STR, str_find_m, FIND_COUNT, NULL},
    {"join", JB_STR, str_join, 0, NULL},
    {"splitlines", JB_STR, str_splitlines, 0, NULL},
    {"isdigit", JB_STR, str_is, IS_DIGIT, NULL},
    {"isnumeric", JB_STR, str_is, IS_DIGIT, NULL},
    {"isdecimal", JB_STR, str_is, IS_DIGIT, NULL},
    {"isalpha", JB_STR, str_is, IS_ALPHA, NULL},
    {"isalnum", JB_STR, str_is, IS_ALNUM, NULL},
    {"isspace", JB_STR, str_is, IS_SPACE, NULL},
    {"isupper", JB_STR, str_is, IS_UPPER, NULL},
    {"islower", JB_STR, str_is, IS_LOWER, NULL},
    {"isidentifier", JB_STR, str_is, IS_IDENTIFIER, NULL},
    {"istitle", JB_STR, str_is, IS_TITLE, NULL},
    {"center", JB_STR, str_pad, PAD_CENTER, NULL},
    {"ljust", JB_STR, str_pad, PAD_LJUST, NULL},
    {"rjust", JB_STR, str_pad, PAD_RJUST, NULL},
    {"zfill", JB_STR, str_pad, PAD_ZFILL, NULL},
    {"partition", JB_STR, str_partition, false, NULL},
    {"rpartition", JB_STR, str_partition, true, NULL},
    {"removeprefix", JB_STR, str_remove, false, NULL},
    {"removesuffix", JB_STR, str_remove, true, NULL},
    {"format", JB_STR, str_unsupported, 0, NULL},
    {"expandtabs", JB_STR, str_unsupported, 0, NULL},
    {"encode", JB_STR, str_unsupported, 0, NULL},
    /* dict; the mutating methods are refused by the sandbox (no function) */
    {"get", JB_DICT, dict_get, 0, NULL},
    {"items", JB_DICT, dict_view, VIEW_ITEMS, NULL},
    {"keys", JB_DICT, dict_view, VIEW_KEYS, NULL},
    {"values", JB_DICT, dict_view, VIEW_VALUES, NULL},
    {"copy", JB_DICT, dict_copy, 0, NULL},
    {"clear", JB_DICT, NULL, 0, NULL},
    {"pop", JB_DICT, NULL, 0, NULL},
    {"popitem", JB_DICT, NULL, 0, NULL},
    {"setdefault", JB_DICT, NULL, 0, NULL},
    {"update", JB_DICT, NULL, 0, NULL},
    {"fromkeys", JB_DICT, NULL, 0, NULL},
    /* list (index and count on tuples too) */
    {"index", LIST_OR_TUPLE, list_find, false, NULL},
    {"count", LIST_OR_TUPLE, list_find, true, NULL},
    {"copy", JB_LIST, list_copy, 0, NULL},
    {"append", JB_LIST, NULL, 0, NULL},
    {"clear", JB_LIST, NULL, 0, NULL},
    {"extend", JB_LIST, NULL, 0, NULL},
    {"insert", JB_LIST, NULL, 0, NULL},
    {"pop", JB_LIST, NULL, 0, NULL},
    {"remove", JB_LIST, NULL, 0, NULL},
    {"reverse", JB_LIST, NULL, 0, NULL},
    {"sort", JB_LIST, NULL, 0, NULL},
};
#undef LIST_OR_TUPLE

const struct jbuiltin *jr_builtin_find(unsigned on, const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof k_builtins / sizeof k_builtins[0]; i++) {
        const struct jbuiltin *b = &k_builtins[i];
        if ((b->on & on) && strlen(b->name) == n && memcmp(b->name, name, n) == 0)
            return b;
    }
    return NULL;
}

const struct jbuiltin *jr_builtin(uint16_t id) { return &k_builtins[id]; }

struct jv jr_builtin_value(struct rs *r, const struct jbuiltin *b, const struct jv *self)
{
    struct jv v = {.t = JV_FUNC, .fn = (uint16_t)(b - k_builtins)};
    v.u.f2 = NULL;
    if (self) {
        struct jfunc *f = ralloc(r, sizeof(*f));
        if (f)
            f->self = *self;
        v.u.f2 = f;
    }
    return v;
}

enum kn_status jr_call_value(struct rs *r, struct scope *sc, const struct jnode *at,
                             struct jv fn, struct jv *args, size_t nargs,
                             struct jstr **kwn, struct jv *kwv, size_t nkw, struct jv *out)
{
    if (fn.t == JV_UNDEF)
        return jr_undef_error(r, at, &fn);
    if (fn.t == JV_MACRO)
        return jr_call_macro(r, at, fn.u.m, args, nargs, kwn, kwv, nkw, v_none(), out);
    if (fn.t != JV_FUNC)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "'%s' object is not callable", jr_type_name(&fn));
    const struct jbuiltin *b = jr_builtin(fn.fn); /* a JV_FUNC is made only from a row with fn */
    struct jcall c = {.r = r, .sc = sc, .at = at, .name = b->name, .arg = b->arg,
                      .self = fn.u.f2 ? fn.u.f2->self : v_none(), .args = args, .nargs = nargs,
                      .kwn = kwn, .kwv = kwv, .nkw = nkw};
    return b->fn(&c, out);
}

enum kn_status jr_call_method(struct rs *r, const struct jnode *at, struct jv self,
                              const char *name, struct jv *args, size_t nargs, struct jv *out)
{
    unsigned on = self.t == JV_STR ? JB_STR : self.t == JV_DICT ? JB_DICT
                  : self.t == JV_TUPLE ? JB_TUPLE : JB_LIST;
    const struct jbuiltin *b = jr_builtin_find(on, name, strlen(name));
    assert(b && b->fn);
    struct jcall c = {.r = r, .at = at, .name = b->name, .arg = b->arg, .self = self,
                      .args = args, .nargs = nargs};
    return b->fn(&c, out);
}
