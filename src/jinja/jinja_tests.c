/* jinja_tests.c: jinja2's built-in tests (x is defined, x is divisibleby(3)...). */
#include "jinja_render_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ tests ============ */

enum kn_status jr_apply_test(struct rs *r, struct scope *sc, const struct jnode *at,
                             const char *name, struct jv v, struct jv *args, size_t nargs,
                             bool *out)
{
    (void)sc;
#define IS(s) (strcmp(name, s) == 0)
    size_t want = (IS("divisibleby") || IS("sameas") || IS("in") || IS("eq") || IS("equalto") ||
                   IS("ne") || IS("gt") || IS("greaterthan") || IS("ge") || IS("lt") ||
                   IS("lessthan") || IS("le")) ? 1 : 0;
    if (nargs != want)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "test '%s' takes %zu argument%s, %zu given", name, want,
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
        if (!jr_str_of(r, &v, &s) || !jr_str_case(r, s.u.s, IS("lower") ? CM_LOWER : CM_UPPER, &t))
            return jr_nomem(r);
        *out = jr_py_eq(&s, &t);
    } else if (IS("odd") || IS("even") || IS("divisibleby")) {
        struct jv m;
        TRY(jr_arith(r, at, JOP_MOD, v, IS("divisibleby") ? args[0] : v_int(2), &m));
        bool zero = !jr_truthy(&m);
        *out = IS("odd") ? !zero : zero;
    } else if (IS("sameas")) {
        *out = (v.t == args[0].t && (v.t == JV_NONE ||
                                     (v.t == JV_BOOL && v.u.b == args[0].u.b) ||
                                     (v.t == JV_INT && v.u.i == args[0].u.i &&
                                      v.u.i >= -5 && v.u.i <= 256))) ||
               (v.t >= JV_STR && v.t == args[0].t && v.u.l == args[0].u.l);
    } else if (IS("in")) {
        return jr_contains(r, at, v, args[0], out);
    } else {
        int op = IS("eq") || IS("equalto") ? JOP_EQ : IS("ne") ? JOP_NE
               : IS("gt") || IS("greaterthan") ? JOP_GT : IS("ge") ? JOP_GE
               : IS("lt") || IS("lessthan") ? JOP_LT : JOP_LE;
        return jr_compare(r, at, op, v, args[0], out);
    }
#undef IS
    return KN_OK;
}
