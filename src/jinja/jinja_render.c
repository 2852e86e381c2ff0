/* jinja_render.c: the Jinja interpreter's statements (output, if, for, set,
 * macros, call and filter blocks) and the API: jinja_render, jinja_render_marked,
 * jinja_chat_context, jinja_pick_template. Values, evaluation and the built-ins live in
 * the other jinja_*.c files (jinja_render_int.h). */
#include "jinja_render_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ output =========== */

static enum kn_status emit_m(struct rs *r, const struct jnode *at, const char *p, size_t n,
                             int trust, const uint8_t *mask)
{
    if (!n)
        return KN_OK;
    size_t tot;
    if (!kn_add_size(r->total_out, n, &tot) || tot > r->lim.max_output)
        return jr_rerr(r, at, JINJA_ERR_LIMIT, "output larger than the limit of %zu bytes",
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
    if (!jr_work(r, n))
        return jr_work_error(r, at);
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

/* ================================================================ statements ======= */

static enum kn_status capture(struct rs *r, struct scope *sc, struct jnode *const *body,
                              size_t cnt, struct jv *out)
{
    struct obuf buf = {0}, *saved = r->out;
    r->out = &buf;
    enum kn_status st = jr_exec_body(r, sc, body, cnt);
    r->out = saved;
    if (!st && !jr_v_str_m(r, out, buf.p ? buf.p : "", buf.n, r->track ? JTRUST_MIXED : JTRUST_NONE,
                           buf.m))
        st = jr_nomem(r);
    free(buf.p);
    free(buf.m);
    return st;
}

enum kn_status jr_call_macro(struct rs *r, const struct jnode *at, struct jmacro *m,
                             struct jv *args, size_t nargs, struct jstr **kwn,
                             struct jv *kwv, size_t nkw, struct jv caller, struct jv *out)
{
    const struct jnode *mn = m->node;
    if (r->depth > r->lim.max_depth)
        return jr_rerr(r, at, JINJA_ERR_LIMIT, "macro calls nested too deeply (more than %zu)",
                       r->lim.max_depth);
    if (nargs > mn->nkw)
        return jr_rerr(r, at, JINJA_ERR_TYPE, "macro '%s' takes not more than %zu argument(s)",
                       mn->name->p, mn->nkw);
    struct scope *sc = jr_scope_new(r, m->closure);
    if (!sc)
        return jr_nomem(r);
    for (size_t k = 0; k < nkw; k++) {
        bool ok = false;
        for (size_t i = 0; i < mn->nkw; i++)
            if (strcmp(mn->kwn[i]->p, kwn[k]->p) == 0) {
                ok = i >= nargs;
                if (!ok)
                    return jr_rerr(r, at, JINJA_ERR_TYPE, "macro '%s' got multiple values for argument '%s'",
                                   mn->name->p, kwn[k]->p);
            }
        if (!ok)
            return jr_rerr(r, at, JINJA_ERR_TYPE, "macro '%s' takes no keyword argument '%s'",
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
                enum kn_status st = jr_eval(r, sc, mn->kwv[i], &v);
                r->depth--;
                if (st)
                    return st;
            } else {
                v = jr_undef_fmt(r, "parameter '%s' was not provided%s", mn->kwn[i]->p, "");
            }
        }
        if (!jr_scope_set(r, sc, mn->kwn[i], v))
            return jr_nomem(r);
    }
    static struct jstr *caller_name;
    struct jstr *cn = mkstr(r, "caller", 6);
    (void)caller_name;
    if (!cn)
        return jr_nomem(r);
    if (mn->flag) {
        struct jv cv = caller.t == JV_NONE ? jr_undef_fmt(r, "No caller defined%s%s", "", "") : caller;
        if (!jr_scope_set(r, sc, cn, cv))
            return jr_nomem(r);
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
        return jr_scope_set(r, sc, target->name, v) ? KN_OK : jr_nomem(r);
    if (target->kind == JN_ATTR) {
        struct jv obj;
        TRY(jr_eval(r, sc, target->a, &obj));
        if (obj.t != JV_NS)
            return jr_rerr(r, target, JINJA_ERR_TYPE, "cannot assign attribute on non-namespace object");
        return jr_map_set(r, obj.u.d, v_strs(target->name), v) ? KN_OK : jr_nomem(r);
    }
    /* tuple unpacking */
    struct jseq *l;
    TRY(jr_iterate(r, target, v, &l));
    if (l->n != target->nargs)
        return jr_rerr(r, target, JINJA_ERR_TYPE, l->n > target->nargs
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
        TRY(jr_eval(r, sc, n->a, &v));
        TRY(jr_check_printable(r, n, &v));
        if (!jr_str_of(r, &v, &s))
            return jr_nomem(r);
        return emit_v(r, n, &s);
    }
    case JN_IF: {
        struct jv c;
        TRY(jr_eval(r, sc, n->a, &c));
        if (jr_truthy(&c))
            return jr_exec_body(r, sc, n->args, n->nargs);
        return jr_exec_body(r, sc, n->els, n->nels);
    }
    case JN_FOR: {
        struct jv it;
        TRY(jr_eval(r, sc, n->b, &it));
        struct jseq *items;
        TRY(jr_iterate(r, n, it, &items));
        if (n->c) {
            struct jseq *f = jr_seq_new(r, 0);
            if (!f)
                return jr_nomem(r);
            for (size_t i = 0; i < items->n; i++) {
                if (++r->iters > r->lim.max_iterations)
                    return jr_rerr(r, n, JINJA_ERR_LIMIT, "more than %zu loop iterations",
                                   r->lim.max_iterations);
                struct scope *fs = jr_scope_new(r, sc);
                if (!fs)
                    return jr_nomem(r);
                TRY(assign(r, fs, n->a, items->v[i]));
                struct jv c;
                TRY(jr_eval(r, fs, n->c, &c));
                if (jr_truthy(&c) && !jr_seq_push(r, f, items->v[i]))
                    return jr_nomem(r);
            }
            items = f;
        } else if (items == it.u.l && (it.t == JV_LIST || it.t == JV_TUPLE)) {
            /* iterate over a snapshot: the body cannot change it (immutable), fine */
        }
        if (items->n == 0)
            return jr_exec_body(r, sc, n->els, n->nels);
        struct jloop *lp = ralloc(r, sizeof(*lp));
        if (!lp)
            return jr_nomem(r);
        memset(lp, 0, sizeof(*lp));
        lp->items = items;
        struct jv lv = {.t = JV_LOOP};
        lv.u.loop = lp;
        struct jstr *loopname = mkstr(r, "loop", 4);
        if (!loopname)
            return jr_nomem(r);
        for (size_t i = 0; i < items->n; i++) {
            if (++r->iters > r->lim.max_iterations)
                return jr_rerr(r, n, JINJA_ERR_LIMIT, "more than %zu loop iterations",
                               r->lim.max_iterations);
            lp->idx = i;
            struct scope *is = jr_scope_new(r, sc);
            if (!is || !jr_scope_set(r, is, loopname, lv))
                return jr_nomem(r);
            TRY(assign(r, is, n->a, items->v[i]));
            TRY(jr_exec_body(r, is, n->args, n->nargs));
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
        TRY(jr_eval(r, sc, n->b, &v));
        return assign(r, sc, n->a, v);
    }
    case JN_SETBLOCK: {
        struct jv v;
        TRY(capture(r, sc, n->args, n->nargs, &v));
        if (n->b)
            TRY(jr_eval_filter_chain(r, sc, n->b, &v, &v));
        return assign(r, sc, n->a, v);
    }
    case JN_MACRO: {
        struct jmacro *m = ralloc(r, sizeof(*m));
        if (!m)
            return jr_nomem(r);
        m->node = (struct jnode *)n;
        m->closure = sc;
        m->caller = v_none();
        struct jv v = {.t = JV_MACRO};
        v.u.m = m;
        return jr_scope_set(r, sc, n->name, v) ? KN_OK : jr_nomem(r);
    }
    case JN_CALLBLOCK: {
        struct jmacro *cm = ralloc(r, sizeof(*cm));
        if (!cm)
            return jr_nomem(r);
        cm->node = n->d;
        cm->closure = sc;
        cm->caller = v_none();
        struct jv callerv = {.t = JV_MACRO};
        callerv.u.m = cm;
        const struct jnode *call = n->a;
        struct jv fn;
        struct argv a;
        TRY(jr_eval(r, sc, call->a, &fn));
        TRY(jr_eval_args(r, sc, call, &a));
        if (fn.t != JV_MACRO)
            return jr_rerr(r, n, JINJA_ERR_TYPE, "{%% call %%} needs a macro, got %s", jr_type_name(&fn));
        struct jv res;
        TRY(jr_call_macro(r, n, fn.u.m, a.pos, a.npos, a.kwn, a.kwv, a.nkw, callerv, &res));
        return emit_v(r, n, &res);
    }
    case JN_FILTERBLOCK: {
        struct jv v;
        TRY(capture(r, sc, n->args, n->nargs, &v));
        TRY(jr_eval_filter_chain(r, sc, n->a, &v, &v));
        struct jv s;
        TRY(jr_check_printable(r, n, &v));
        if (!jr_str_of(r, &v, &s))
            return jr_nomem(r);
        return emit_v(r, n, &s);
    }
    case JN_BREAK:
        r->ctl = 1;
        return KN_OK;
    case JN_CONTINUE:
        r->ctl = 2;
        return KN_OK;
    case JN_BODY:
        return jr_exec_body(r, sc, n->args, n->nargs);
    case JN_WITH: {
        struct scope *ws = jr_scope_new(r, sc);
        if (!ws)
            return jr_nomem(r);
        for (size_t i = 0; i < n->nkw; i++) {
            struct jv v;
            TRY(jr_eval(r, sc, n->kwv[i], &v));
            if (!jr_scope_set(r, ws, n->kwn[i], v))
                return jr_nomem(r);
        }
        return jr_exec_body(r, ws, n->args, n->nargs);
    }
    case JN_NOLOADER:
        return jr_rerr(r, n, JINJA_ERR_TYPE,
                       "no loader for this environment specified (chat templates cannot include, "
                       "import or extend other templates)");
    default:
        return jr_rerr(r, n, JINJA_ERR_UNSUPPORTED, "unknown statement");
    }
}

enum kn_status jr_exec_body(struct rs *r, struct scope *sc, struct jnode *const *body, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++) {
        TRY(jr_charge(r, body[i], JINJA_STEP_WORK));
        TRY(exec_stmt(r, sc, body[i]));
        if (r->over_work)
            return jr_work_error(r, body[i]);
        if (r->a.failed)
            return jr_nomem(r);
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
static void mark_trusted(struct rs *r, const struct jinja_options *opts, const char *name,
                         struct jv *v)
{
    for (size_t k = 0; k < opts->n_trusted_vars; k++)
        if (v->t == JV_STR && strcmp(opts->trusted_vars[k], name) == 0)
            v->trust = JTRUST_ALL;
    if (opts->trust_roles && strcmp(name, "messages") == 0 && v->t == JV_LIST) {
        for (size_t i = 0; i < v->u.l->n; i++) {
            struct jv *m = &v->u.l->v[i];
            struct jv *role = m->t == JV_DICT ? jr_map_finds(r, m->u.d, "role", 4) : NULL;
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
        if (l.max_work) r.lim.max_work = l.max_work;
    }
    r.a.cap = r.lim.max_memory;
    r.opts = opts;
    r.err = err;
    r.diag = diag;
    r.track = marks != NULL;
    struct obuf main = {0};
    r.out = &main;
    enum kn_status st = KN_OK;
    r.root = jr_scope_new(&r, NULL);
    if (!r.root)
        st = jr_nomem(&r);
    for (size_t i = 0; !st && context && i < context->u.object.len; i++) {
        const struct json_member *m = &context->u.object.items[i];
        struct jv v;
        struct jstr *name = mkstr(&r, m->key, m->key_len);
        if (!name) {
            st = jr_nomem(&r);
            break;
        }
        st = jr_from_json(&r, m->value, &v, 0);
        if (!st && marks && opts)
            mark_trusted(&r, opts, name->p, &v);
        if (!st && !jr_scope_set(&r, r.root, name, v))
            st = jr_nomem(&r);
    }
    if (!st)
        st = jr_exec_body(&r, r.root, t->root->args, t->root->nargs);
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
