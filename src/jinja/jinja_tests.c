/* jinja_tests.c: jinja2's built-in tests (x is defined, x is divisibleby(3)...), found by
 * name in the table k_tests. */
#include "jinja_render_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ tests ============ */

/* Each test is a row of k_tests: its name, how many arguments it takes, and either a
 * predicate on the value alone or a function (which reads the row's arg). */

static bool t_defined(const struct jv *v) { return v->t != JV_UNDEF; }
static bool t_undefined(const struct jv *v) { return v->t == JV_UNDEF; }
static bool t_none(const struct jv *v) { return v->t == JV_NONE; }
static bool t_boolean(const struct jv *v) { return v->t == JV_BOOL; }
static bool t_true(const struct jv *v) { return v->t == JV_BOOL && v->u.b; }
static bool t_false(const struct jv *v) { return v->t == JV_BOOL && !v->u.b; }
static bool t_integer(const struct jv *v) { return v->t == JV_INT; }
static bool t_float(const struct jv *v) { return v->t == JV_FLOAT; }
static bool t_number(const struct jv *v) { return is_num(v); }
static bool t_string(const struct jv *v) { return v->t == JV_STR; }
static bool t_mapping(const struct jv *v) { return v->t == JV_DICT; }
static bool t_iterable(const struct jv *v)
{
    return v->t == JV_UNDEF || v->t == JV_STR || v->t == JV_LIST || v->t == JV_TUPLE ||
           v->t == JV_DICT;
}
static bool t_sequence(const struct jv *v)
{
    return v->t == JV_UNDEF || v->t == JV_STR || ((v->t == JV_LIST || v->t == JV_TUPLE) && !v->gen) ||
           v->t == JV_DICT;
}
static bool t_callable(const struct jv *v)
{
    return v->t == JV_FUNC || v->t == JV_MACRO || v->t == JV_UNDEF;
}
static bool t_escaped(const struct jv *v)
{
    (void)v;
    return false;
}
static bool t_filter(const struct jv *v) { return v->t == JV_STR && jinja_filter_known(v->u.s->p); }
static bool t_test(const struct jv *v) { return v->t == JV_STR && jinja_test_known(v->u.s->p); }

/* lower, upper (arg: enum casemode): str(v) is unchanged by the case mapping. */
static enum kn_status t_case(const struct jcall *c, struct jv v, bool *out)
{
    struct jv s, t;
    if (!jr_str_of(c->r, &v, &s) || !jr_str_case(c->r, s.u.s, (enum casemode)c->arg, &t))
        return jr_nomem(c->r);
    *out = jr_py_eq(c->r, &s, &t);
    return KN_OK;
}

enum { PAR_ODD, PAR_EVEN, PAR_DIVISIBLE };
/* odd, even, divisibleby(n) (arg: PAR_*). */
static enum kn_status t_parity(const struct jcall *c, struct jv v, bool *out)
{
    struct jv m;
    TRY(jr_arith(c->r, c->at, JOP_MOD, v, c->arg == PAR_DIVISIBLE ? c->args[0] : v_int(2), &m));
    bool zero = !jr_truthy(&m);
    *out = c->arg == PAR_ODD ? !zero : zero;
    return KN_OK;
}

/* Python's "is": None, booleans, the small ints CPython caches, and the same object. */
static enum kn_status t_sameas(const struct jcall *c, struct jv v, bool *out)
{
    const struct jv *a = &c->args[0];
    *out = (v.t == a->t && (v.t == JV_NONE ||
                            (v.t == JV_BOOL && v.u.b == a->u.b) ||
                            (v.t == JV_INT && v.u.i == a->u.i && v.u.i >= -5 && v.u.i <= 256))) ||
           (v.t >= JV_STR && v.t == a->t && v.u.l == a->u.l);
    return KN_OK;
}

static enum kn_status t_in(const struct jcall *c, struct jv v, bool *out)
{
    return jr_contains(c->r, c->at, v, c->args[0], out);
}

/* eq, ne, gt, ge, lt, le and their long names (arg: enum jn_op). */
static enum kn_status t_compare(const struct jcall *c, struct jv v, bool *out)
{
    return jr_compare(c->r, c->at, c->arg, v, c->args[0], out);
}

struct jtest {
    const char *name;
    size_t nargs;
    bool (*is)(const struct jv *v);
    enum kn_status (*fn)(const struct jcall *c, struct jv v, bool *out);
    int arg;
};
static const struct jtest k_tests[] = {
    {"odd", 0, NULL, t_parity, PAR_ODD},
    {"even", 0, NULL, t_parity, PAR_EVEN},
    {"divisibleby", 1, NULL, t_parity, PAR_DIVISIBLE},
    {"defined", 0, t_defined, NULL, 0},
    {"undefined", 0, t_undefined, NULL, 0},
    {"filter", 0, t_filter, NULL, 0},
    {"test", 0, t_test, NULL, 0},
    {"none", 0, t_none, NULL, 0},
    {"boolean", 0, t_boolean, NULL, 0},
    {"false", 0, t_false, NULL, 0},
    {"true", 0, t_true, NULL, 0},
    {"integer", 0, t_integer, NULL, 0},
    {"float", 0, t_float, NULL, 0},
    {"lower", 0, NULL, t_case, CM_LOWER},
    {"upper", 0, NULL, t_case, CM_UPPER},
    {"string", 0, t_string, NULL, 0},
    {"mapping", 0, t_mapping, NULL, 0},
    {"number", 0, t_number, NULL, 0},
    {"sequence", 0, t_sequence, NULL, 0},
    {"iterable", 0, t_iterable, NULL, 0},
    {"callable", 0, t_callable, NULL, 0},
    {"sameas", 1, NULL, t_sameas, 0},
    {"escaped", 0, t_escaped, NULL, 0},
    {"in", 1, NULL, t_in, 0},
    {"eq", 1, NULL, t_compare, JOP_EQ},
    {"equalto", 1, NULL, t_compare, JOP_EQ},
    {"ne", 1, NULL, t_compare, JOP_NE},
    {"gt", 1, NULL, t_compare, JOP_GT},
    {"greaterthan", 1, NULL, t_compare, JOP_GT},
    {"ge", 1, NULL, t_compare, JOP_GE},
    {"lt", 1, NULL, t_compare, JOP_LT},
    {"lessthan", 1, NULL, t_compare, JOP_LT},
    {"le", 1, NULL, t_compare, JOP_LE},
};

static const struct jtest *find_test(const char *name)
{
    for (size_t i = 0; i < sizeof k_tests / sizeof k_tests[0]; i++)
        if (strcmp(k_tests[i].name, name) == 0)
            return &k_tests[i];
    return NULL;
}

bool jinja_test_known(const char *name) { return find_test(name) != NULL; }

enum kn_status jr_apply_test(struct rs *r, struct scope *sc, const struct jnode *at,
                             const char *name, struct jv v, struct jv *args, size_t nargs,
                             bool *out)
{
    const struct jtest *t = find_test(name);
    if (!t) /* the parser and select() refuse unknown tests first */
        return jr_rerr(r, at, JINJA_ERR_TYPE, "No test named '%s'.", name);
    if (nargs != t->nargs)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "test '%s' takes %zu argument%s, %zu given", name,
                       t->nargs, t->nargs == 1 ? "" : "s", nargs);
    if (t->is) {
        *out = t->is(&v);
        return KN_OK;
    }
    struct jcall c = {.r = r, .sc = sc, .at = at, .name = name, .arg = t->arg, .args = args,
                      .nargs = nargs};
    return t->fn(&c, v, out);
}
