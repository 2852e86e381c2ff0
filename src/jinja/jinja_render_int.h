/* jinja_render_int.h: what the renderer's files share (jinja_value.c, jinja_eval.c,
 * jinja_methods.c, jinja_filters.c, jinja_tests.c, jinja_render.c): the render state,
 * the value helpers and the functions one file calls in another, prefixed jr_. Nothing
 * outside src/jinja includes it. */
#ifndef KN_JINJA_RENDER_INT_H
#define KN_JINJA_RENDER_INT_H

#include "jinja_int.h"

#include <stdio.h>
#include <string.h>

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
    size_t total_out, depth, iters;
    size_t work;             /* units spent of lim.max_work (jr_work) */
    bool over_work;          /* sticky: the budget ran out; the render fails */
    const struct jnode *cur; /* the expression being evaluated (where errors point) */
    int ctl; /* 1 break, 2 continue */
    struct scope *root;
};

/* What a built-in is a name or a method of (struct jbuiltin.on). */
enum { JB_GLOBAL = 1, JB_STR = 2, JB_DICT = 4, JB_LIST = 8, JB_TUPLE = 16, JB_LOOP = 32 };

/* Returns the status of x when it fails. */
#define TRY(x)                    \
    do {                          \
        enum kn_status st_ = (x); \
        if (st_)                  \
            return st_;           \
    } while (0)

/* ---- the work budget ----
 * Every operation whose cost grows with the data (a scan, a comparison, a copy, a lookup in
 * a dict or a scope) charges what it touches with jr_work: a byte is one unit, a value
 * JINJA_ELEM_WORK units, an evaluation step JINJA_STEP_WORK units. jr_work never fails by itself: it sets the sticky over_work, a
 * loop that can run long stops on its false result, and jr_eval, jr_exec_body and
 * jr_nomem turn the flag into the error (jr_work_error), so a hostile template stops
 * within one bounded operation of its budget. */
static inline bool jr_work(struct rs *r, size_t n)
{
    if (r->over_work || n > r->lim.max_work - r->work) { /* invariant: work <= max_work */
        r->over_work = true;
        return false;
    }
    r->work += n;
    return true;
}
/* The work of touching n values (JINJA_ELEM_WORK each), saturated. */
static inline size_t jr_elems_work(size_t n)
{
    return n > SIZE_MAX / JINJA_ELEM_WORK ? SIZE_MAX : n * JINJA_ELEM_WORK;
}
static inline bool jr_work_elems(struct rs *r, size_t n) { return jr_work(r, jr_elems_work(n)); }

/* ---- small value helpers ---- */
static inline void *ralloc(struct rs *r, size_t size) { return jarena_alloc(&r->a, size); }
static inline struct jv v_undef(struct jstr *hint)
{
    struct jv v = {.t = JV_UNDEF};
    v.u.s = hint;
    return v;
}
static inline struct jv v_none(void) { return (struct jv){.t = JV_NONE}; }
static inline struct jv v_bool(bool b) { struct jv v = {.t = JV_BOOL}; v.u.b = b; return v; }
static inline struct jv v_int(int64_t i) { struct jv v = {.t = JV_INT}; v.u.i = i; return v; }
static inline struct jv v_float(double f) { struct jv v = {.t = JV_FLOAT}; v.u.f = f; return v; }
static inline struct jstr *mkstr(struct rs *r, const char *p, size_t n) { return jstr_make(&r->a, p, n); }
static inline struct jv v_strs(struct jstr *s)
{
    struct jv v = {.t = JV_STR};
    v.u.s = s;
    return v;
}
static inline const uint8_t *str_mask(const struct jv *v)
{
    return v->trust == JTRUST_MIXED ? (const uint8_t *)v->u.s->p + v->u.s->n + 1 : NULL;
}
static inline bool trusted_at(const struct jv *v, size_t i)
{
    return v->trust == JTRUST_ALL || (v->trust == JTRUST_MIXED && str_mask(v)[i]);
}
static inline struct jv v_list(struct jseq *l, int t)
{
    struct jv v = {.t = (uint8_t)t};
    v.u.l = l;
    return v;
}
static inline bool is_num(const struct jv *v)
{
    return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}
static inline double num_d(const struct jv *v)
{
    return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : (double)v->u.b;
}
static inline int64_t num_i(const struct jv *v) { return v->t == JV_INT ? v->u.i : (int64_t)v->u.b; }
static inline bool u_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* A string builder in the render's arena (jr_sb_*): fail is sticky, checked at the end. */
struct sb {
    struct rs *r;
    char *p;
    size_t n, cap;
    bool fail;
};

/* json.dumps options (the tojson filter). */
struct jsonopt {
    bool ensure_ascii, sort_keys, has_indent;
    const char *indent;
    size_t indent_n;
    const char *item_sep, *key_sep;
    size_t item_n, key_n;
};

/* A call's evaluated arguments: positional, then keyword names and values. */
struct argv {
    struct jv *pos;
    size_t npos;
    struct jstr **kwn;
    struct jv *kwv;
    size_t nkw;
};

/* The case mappings of jr_str_case (CM_JTITLE: jinja's title filter). */
enum casemode { CM_LOWER, CM_UPPER, CM_TITLE, CM_CAPITALIZE, CM_SWAP, CM_JTITLE };

/* One call of a built-in (a filter, a test, a global or a method): the render and the
 * node errors are reported at, the table row's name and arg (which variant of a function
 * shared by several rows), the object a method is bound to, and the arguments. */
struct jcall {
    struct rs *r;
    struct scope *sc;
    const struct jnode *at;
    const char *name;
    int arg;
    struct jv self;
    struct jv *args;
    size_t nargs;
    struct jstr **kwn;
    struct jv *kwv;
    size_t nkw;
};

/* A global function or a method of str, dict, list, tuple or loop (jinja_methods.c). */
struct jbuiltin {
    const char *name;
    uint8_t on; /* JB_*: where the name is found */
    /* NULL: a mutating method the sandbox refuses (reading it gives an unsafe undefined) */
    enum kn_status (*fn)(const struct jcall *c, struct jv *out);
    int arg;
    const char *repr; /* str() of the function object, if it is a class (dict, namespace) */
};

/* ---- jinja_value.c ---- */
enum kn_status jr_rerr(struct rs *r, const struct jnode *at, enum jinja_error_kind kind,
                       const char *fmt, ...) KN_PRINTF(4, 5);
enum kn_status jr_nomem(struct rs *r);
bool jr_v_str(struct rs *r, struct jv *out, const char *p, size_t n);
bool jr_v_str_m(struct rs *r, struct jv *out, const char *p, size_t n, int trust,
                const uint8_t *mask);
bool jr_v_substr(struct rs *r, struct jv *out, const struct jv *s, size_t b, size_t e);
bool jr_str_join2(struct rs *r, const struct jv *a, const struct jv *b, struct jv *out);
struct jseq *jr_seq_new(struct rs *r, size_t cap);
bool jr_seq_push(struct rs *r, struct jseq *l, struct jv x);
struct jmap *jr_map_new(struct rs *r);
struct jv *jr_map_find(struct rs *r, struct jmap *m, const struct jv *k);
struct jv *jr_map_finds(struct rs *r, struct jmap *m, const char *key, size_t n);
bool jr_map_set(struct rs *r, struct jmap *m, struct jv k, struct jv v);
bool jr_map_add(struct rs *r, struct jmap *m, struct jv k, struct jv v);
const char *jr_type_name(const struct jv *v);
bool jr_truthy(const struct jv *v);
bool jr_py_eq(struct rs *r, const struct jv *a, const struct jv *b);
uint32_t jr_utf8_next(const char *s, size_t n, size_t *i);
size_t jr_utf8_put(char *buf, uint32_t cp);
size_t jr_utf8_count(const char *s, size_t n);
bool jr_u_space(uint32_t c);
uint32_t jr_u_lower(uint32_t c);
uint32_t jr_u_upper(uint32_t c);
bool jr_u_isupper(uint32_t c);
bool jr_u_islower(uint32_t c);
bool jr_u_cased(uint32_t c);
bool jr_u_alpha(uint32_t c);
void jr_sb_add(struct sb *b, const char *s, size_t n);
void jr_sb_adds(struct sb *b, const char *s);
void jr_sb_cp(struct sb *b, uint32_t cp);
bool jr_sb_done(struct sb *b, struct jv *out);
void jr_sb_add_marked(struct sb *b, struct sb *m, const struct jv *v);
bool jr_sb_done_marked(struct sb *b, struct sb *m, struct jv *out);
void jr_to_str(struct sb *b, const struct jv *v, bool repr);
bool jr_str_of(struct rs *r, const struct jv *v, struct jv *out);
enum kn_status jr_check_printable(struct rs *r, const struct jnode *at, const struct jv *v);
enum kn_status jr_json_dump(struct rs *r, const struct jnode *at, struct sb *b,
                            const struct jv *v, const struct jsonopt *o, size_t level);
bool jr_html_escape(struct rs *r, const struct jstr *s, struct jv *out);
int jr_cmp_vals(struct rs *r, const struct jv *a, const struct jv *b, bool *ok);
struct scope *jr_scope_new(struct rs *r, struct scope *parent);
bool jr_scope_set(struct rs *r, struct scope *s, struct jstr *name, struct jv v);
bool jr_scope_get(struct rs *r, struct scope *s, const char *name, size_t n, struct jv *out);
enum kn_status jr_from_json(struct rs *r, const struct json_value *j, struct jv *out, size_t depth);

/* ---- jinja_eval.c ---- */
enum kn_status jr_undef_error(struct rs *r, const struct jnode *at, const struct jv *u);
struct jv jr_undef_fmt(struct rs *r, const char *fmt, const char *a, const char *b2);
enum kn_status jr_get_attr(struct rs *r, const struct jnode *at, struct jv obj,
                           const char *name, size_t n, struct jv *out);
enum kn_status jr_get_item(struct rs *r, const struct jnode *at, struct jv obj,
                           struct jv key, struct jv *out);
enum kn_status jr_iterate(struct rs *r, const struct jnode *at, struct jv v, struct jseq **out);
enum kn_status jr_length_of(struct rs *r, const struct jnode *at, struct jv v, int64_t *out);
enum kn_status jr_contains(struct rs *r, const struct jnode *at, struct jv item,
                           struct jv cont, bool *out);
enum kn_status jr_py_percent(struct rs *r, const struct jnode *at, const struct jstr *fmt,
                             struct jv args, struct jv *out);
enum kn_status jr_arith(struct rs *r, const struct jnode *at, int op, struct jv a,
                        struct jv b, struct jv *out);
enum kn_status jr_compare(struct rs *r, const struct jnode *at, int op, struct jv a,
                          struct jv b, bool *out);
enum kn_status jr_slice_of(struct rs *r, const struct jnode *at, struct jv obj,
                           struct jv *sv, bool *has, struct jv *out);
enum kn_status jr_eval_args(struct rs *r, struct scope *sc, const struct jnode *n, struct argv *a);
enum kn_status jr_bind_args(struct rs *r, const struct jnode *at, const char *fname,
                            const char *const *params, size_t np, struct jv *args,
                            size_t nargs, struct jstr **kwn, struct jv *kwv, size_t nkw,
                            struct jv *out, bool *given);
enum kn_status jr_eval_filter_chain(struct rs *r, struct scope *sc, const struct jnode *n,
                                    const struct jv *subject, struct jv *out);
enum kn_status jr_eval(struct rs *r, struct scope *sc, const struct jnode *n, struct jv *out);

/* ---- jinja_methods.c ---- */
void jr_strip_span(struct rs *r, const struct jstr *s, const struct jstr *chars, bool left, bool right,
                   size_t *b, size_t *e);
enum kn_status jr_want_str(struct rs *r, const struct jnode *at, const char *fn,
                           const struct jv *v, bool allow_none);
bool jr_str_replace(struct rs *r, const struct jstr *s, const struct jstr *old,
                    const struct jstr *new, int64_t count, struct jv *out);
bool jr_str_case(struct rs *r, const struct jstr *s, enum casemode m, struct jv *out);
enum kn_status jr_splitlines(struct rs *r, const char *p, size_t n, bool keepends, struct jseq **out);
/* The built-in named name among those found on `on` (JB_*), or NULL. */
const struct jbuiltin *jr_builtin_find(unsigned on, const char *name, size_t n);
/* The row of a JV_FUNC value's fn. */
const struct jbuiltin *jr_builtin(uint16_t id);
/* A JV_FUNC value for b, bound to *self (a method) or to nothing (self NULL); u.f2 is NULL
 * when a bound one ran out of memory. */
struct jv jr_builtin_value(struct rs *r, const struct jbuiltin *b, const struct jv *self);
/* Calls a function value: a macro or a built-in. */
enum kn_status jr_call_value(struct rs *r, struct scope *sc, const struct jnode *at,
                             struct jv fn, struct jv *args, size_t nargs,
                             struct jstr **kwn, struct jv *kwv, size_t nkw, struct jv *out);
enum kn_status jr_opt_int(struct rs *r, const struct jnode *at, const struct jv *v,
                          bool given, int64_t dflt, int64_t *out);
/* Calls self's method name (which must exist) with positional arguments. */
enum kn_status jr_call_method(struct rs *r, const struct jnode *at, struct jv self,
                              const char *name, struct jv *args, size_t nargs, struct jv *out);

/* ---- jinja_filters.c ---- */
/* Charges n units (jr_work) and fails at `at` when the budget is spent. */
enum kn_status jr_charge(struct rs *r, const struct jnode *at, size_t n);
/* The error of a spent budget, at `at` (or the expression being evaluated). */
enum kn_status jr_work_error(struct rs *r, const struct jnode *at);
enum kn_status jr_apply_filter(struct rs *r, struct scope *sc, const struct jnode *at,
                               const char *name, struct jv val, struct jv *args, size_t nargs,
                               struct jstr **kwn, struct jv *kwv, size_t nkw, struct jv *out);

/* ---- jinja_tests.c ---- */
enum kn_status jr_apply_test(struct rs *r, struct scope *sc, const struct jnode *at,
                             const char *name, struct jv v, struct jv *args, size_t nargs,
                             bool *out);

/* ---- jinja_render.c ---- */
enum kn_status jr_call_macro(struct rs *r, const struct jnode *at, struct jmacro *m,
                             struct jv *args, size_t nargs, struct jstr **kwn,
                             struct jv *kwv, size_t nkw, struct jv caller, struct jv *out);
enum kn_status jr_exec_body(struct rs *r, struct scope *sc, struct jnode *const *body, size_t cnt);

#endif
