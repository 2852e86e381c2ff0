/* json_schema.c: JSON Schema to GBNF, and the generic JSON grammar. Each (sub)schema
 * becomes one rule; values have no surrounding whitespace, containers allow the same
 * limited whitespace as llama.cpp's json.gbnf between tokens. Anything in a schema that
 * would constrain the output but that the converter cannot express is an error, so an
 * output that follows the grammar always validates against the schema (oneOf aside: its
 * alternatives are not made exclusive). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "grammar.h"

#define JSON_PRIMITIVES                                                                          \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"                                                     \
    "jchar ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"  \
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"                                                      \
    "jint ::= \"0\" | [1-9] [0-9]{0,15}\n"                                                        \
    "jinteger ::= \"-\"? jint\n"                                                                  \
    "jnumber ::= \"-\"? jint ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"                 \
    "jboolean ::= \"true\" | \"false\"\n"                                                         \
    "jnull ::= \"null\"\n"                                                                        \
    "jvalue ::= jobject | jarray | jstring | jnumber | jboolean | jnull\n"                         \
    "jobject ::= \"{\" ws ( jstring ws \":\" ws jvalue ws ( \",\" ws jstring ws \":\" ws jvalue ws )* )? \"}\"\n" \
    "jarray ::= \"[\" ws ( jvalue ws ( \",\" ws jvalue ws )* )? \"]\"\n"

static const char json_object_gbnf[] = "root ::= jobject ws\n" JSON_PRIMITIVES;

const char *grammar_json_object_gbnf(void)
{
    return json_object_gbnf;
}

/* ---- a growing string */

struct sb {
    char *s;
    size_t len, cap;
    bool oom;
};

static void sb_add(struct sb *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_printf(struct sb *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = true; /* only used for short fixed pieces */
        return;
    }
    sb_add(b, tmp, (size_t)n);
}

/* Appends a GBNF literal for the bytes s[0..n). */
static void sb_literal(struct sb *b, const char *s, size_t n)
{
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_add(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            sb_printf(b, "\\x%02X", c);
        } else {
            sb_add(b, (const char *)&c, 1);
        }
    }
    sb_add(b, "\"", 1);
}

/* ---- the converter */

struct conv {
    const struct json_value *root;
    struct sb rules;
    int n_rules;
    struct kn_err *err;
    enum kn_status st;
    struct {
        char *ref;
        int rule;
    } refs[256];
    int n_refs;
    int depth;
};

static int fail(struct conv *c, const char *path, const char *fmt, ...)
{
    if (c->st == KN_OK) {
        char m[300];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        c->st = kn_fail(c->err, KN_E_UNSUPPORTED, "JSON schema: at %s: %s", path[0] ? path : "/", m);
    }
    return -1;
}

static const char *const annotations[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", NULL,
};
static const char *const handled[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems",
    "enum", "const", "minLength", "maxLength", "format", "anyOf", "oneOf", "$ref", NULL,
};

static bool in_list(const char *k, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(k, list[i]) == 0)
            return true;
    return false;
}

/* A rule name for rule number i. */
static void rule_name(char *out, size_t cap, int i)
{
    if (i == 0)
        snprintf(out, cap, "root-value");
    else
        snprintf(out, cap, "s%d", i);
}

static int gen(struct conv *c, const struct json_value *s, const char *path);

/* Emits "name ::= body" where body was built in b; returns the rule number. */
static int emit(struct conv *c, int rule, struct sb *body)
{
    char name[32];
    rule_name(name, sizeof name, rule);
    sb_printf(&c->rules, "%s ::= ", name);
    if (body->s)
        sb_add(&c->rules, body->s, body->len);
    sb_add(&c->rules, "\n", 1);
    if (body->oom)
        c->rules.oom = true;
    free(body->s);
    return rule;
}

static void add_ref(struct sb *b, int rule)
{
    char name[32];
    rule_name(name, sizeof name, rule);
    sb_add(b, name, strlen(name));
}

static bool get_count(struct conv *c, const struct json_value *s, const char *key, const char *path,
                      int64_t *out, int64_t max)
{
    const struct json_value *v = json_get(s, key);
    if (!v)
        return true;
    if (!json_int(v, out) || *out < 0 || *out > max) {
        fail(c, path, "'%s' must be an integer from 0 to %lld", key, (long long)max);
        return false;
    }
    return true;
}

static void literal_json(struct conv *c, struct sb *b, const struct json_value *v)
{
    char *text = NULL;
    size_t len = 0;
    struct kn_err e;
    if (json_write(v, JSON_COMPACT, &text, &len, &e) != KN_OK) {
        b->oom = true;
        return;
    }
    sb_literal(b, text, len);
    free(text);
    (void)c;
}

static const char *format_rule(const char *f)
{
    if (strcmp(f, "date") == 0)
        return "\"\\\"\" jdate \"\\\"\"";
    if (strcmp(f, "time") == 0)
        return "\"\\\"\" jtime \"\\\"\"";
    if (strcmp(f, "date-time") == 0)
        return "\"\\\"\" jdate \"T\" jtime \"\\\"\"";
    if (strcmp(f, "uuid") == 0)
        return "\"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
               "[0-9a-f]{12} \"\\\"\"";
    return NULL;
}

/* The body of an array schema: prefixItems (JSON Schema 2020-12 tuples: item i follows
 * prefixItems[i]), items for the items after them (absent: any value; false: none), and
 * minItems/maxItems on the whole count. Items past the prefix come as a repetition; the
 * prefix's items nest, each optional from minItems on, so any count in range is a sentence:
 *     "[" ws P0 ws ( "," ws P1 ws ( "," ws R ws ){0,3} )? "]"      (minItems 1, maxItems 5) */
static void gen_array(struct conv *c, const struct json_value *s, const char *path, struct sb *b)
{
    char sub[512];
    const struct json_value *prefix = json_get(s, "prefixItems");
    const struct json_value *items = json_get(s, "items");
    if (prefix && (!json_is(prefix, JSON_ARRAY) || json_len(prefix) == 0)) {
        fail(c, path, "'prefixItems' must be a non-empty array of schemas");
        return;
    }
    int64_t k = (int64_t)json_len(prefix);
    if (k > 256) {
        fail(c, path, "more than 256 prefixItems");
        return;
    }
    int64_t mn = 0, mx = -1;
    if (!get_count(c, s, "minItems", path, &mn, 1000))
        return;
    if (json_get(s, "maxItems") && !get_count(c, s, "maxItems", path, &mx, 1000))
        return;
    if (mx >= 0 && mx < mn) {
        fail(c, path, "maxItems is below minItems");
        return;
    }
    /* items: false closes the array after the prefix */
    bool closed = items && json_is(items, JSON_BOOL) && !items->u.boolean;
    if (closed && (mx < 0 || mx > k))
        mx = k;
    if (mx >= 0 && mx < mn) {
        fail(c, path, "minItems is %lld but items: false allows only the %lld prefixItems",
             (long long)mn, (long long)k);
        return;
    }
    int pr[256];
    for (int64_t i = 0; i < k; i++) {
        snprintf(sub, sizeof sub, "%s/prefixItems/%lld", path, (long long)i);
        if ((pr[i] = gen(c, json_at(prefix, (size_t)i), sub)) == -1)
            return;
    }
    int item = -2; /* any value */
    if (items && !closed) {
        snprintf(sub, sizeof sub, "%s/items", path);
        if ((item = gen(c, items, sub)) == -1)
            return;
    }
    if (mx == 0) {
        sb_add(b, "\"[\" ws \"]\"", 10);
        return;
    }
    struct sb it = {0};
    if (item == -2)
        sb_add(&it, "jvalue", 6);
    else
        add_ref(&it, item);
    const char *iv = it.s ? it.s : "jvalue";
    if (k == 0) {
        if (mn == 0) {
            sb_printf(b, "\"[\" ws ( %s ws ( \",\" ws %s ws )", iv, iv);
            if (mx < 0)
                sb_add(b, "*", 1);
            else
                sb_printf(b, "{0,%lld}", (long long)(mx - 1));
            sb_add(b, " )? \"]\"", 7);
        } else {
            sb_printf(b, "\"[\" ws %s ws ( \",\" ws %s ws )", iv, iv);
            if (mx < 0)
                sb_printf(b, "{%lld,}", (long long)(mn - 1));
            else
                sb_printf(b, "{%lld,%lld}", (long long)(mn - 1), (long long)(mx - 1));
            sb_add(b, " \"]\"", 4);
        }
    } else {
        /* Built from the end: tail is what may follow item i - 1. */
        struct sb tail = {0};
        int64_t last = mx >= 0 && mx < k ? mx : k; /* prefix items that may appear */
        if (mx < 0 || mx > k) {
            int64_t lo = mn > k ? mn - k : 0;
            sb_printf(&tail, "( \",\" ws %s ws )", iv);
            if (mx < 0 && lo == 0)
                sb_add(&tail, "*", 1);
            else if (mx < 0)
                sb_printf(&tail, "{%lld,}", (long long)lo);
            else
                sb_printf(&tail, "{%lld,%lld}", (long long)lo, (long long)(mx - k));
            sb_add(&tail, " ", 1);
        }
        for (int64_t i = last; i-- > 0;) {
            struct sb e = {0};
            if (i >= mn)
                sb_add(&e, "( ", 2);
            if (i > 0)
                sb_add(&e, "\",\" ws ", 7);
            add_ref(&e, pr[i]);
            sb_add(&e, " ws ", 4);
            if (tail.s)
                sb_add(&e, tail.s, tail.len);
            if (i >= mn)
                sb_add(&e, ")? ", 3);
            if (tail.oom)
                e.oom = true;
            free(tail.s);
            tail = e;
        }
        sb_add(b, "\"[\" ws ", 7);
        if (tail.s)
            sb_add(b, tail.s, tail.len);
        sb_add(b, "\"]\"", 3);
        if (tail.oom)
            b->oom = true;
        free(tail.s);
    }
    if (it.oom)
        b->oom = true;
    free(it.s);
}

/* The body for one type name (with the schema's keywords for that type). */
static void gen_type(struct conv *c, const struct json_value *s, const char *t, const char *path,
                     struct sb *b)
{
    char sub[512];
    if (strcmp(t, "string") == 0) {
        const struct json_value *fv = json_get(s, "format");
        const char *f = json_str(fv);
        int64_t mn = 0, mx = -1;
        if (!get_count(c, s, "minLength", path, &mn, 5000))
            return;
        if (json_get(s, "maxLength") && !get_count(c, s, "maxLength", path, &mx, 5000))
            return;
        if (mx >= 0 && mx < mn) {
            fail(c, path, "maxLength is below minLength");
            return;
        }
        const char *fr = f ? format_rule(f) : NULL;
        if (fr) {
            if (json_get(s, "minLength") || json_get(s, "maxLength")) {
                fail(c, path, "minLength/maxLength together with format '%s' is not supported", f);
                return;
            }
            sb_add(b, fr, strlen(fr));
        } else if (mn == 0 && mx < 0) {
            sb_add(b, "jstring", 7);
        } else if (mx < 0) {
            sb_printf(b, "\"\\\"\" jchar{%lld,} \"\\\"\"", (long long)mn);
        } else {
            sb_printf(b, "\"\\\"\" jchar{%lld,%lld} \"\\\"\"", (long long)mn, (long long)mx);
        }
    } else if (strcmp(t, "number") == 0) {
        sb_add(b, "jnumber", 7);
    } else if (strcmp(t, "integer") == 0) {
        sb_add(b, "jinteger", 8);
    } else if (strcmp(t, "boolean") == 0) {
        sb_add(b, "jboolean", 8);
    } else if (strcmp(t, "null") == 0) {
        sb_add(b, "jnull", 5);
    } else if (strcmp(t, "array") == 0) {
        gen_array(c, s, path, b);
    } else if (strcmp(t, "object") == 0) {
        const struct json_value *props = json_get(s, "properties");
        const struct json_value *req = json_get(s, "required");
        const struct json_value *addl = json_get(s, "additionalProperties");
        if (props && !json_is(props, JSON_OBJECT)) {
            fail(c, path, "'properties' must be an object");
            return;
        }
        if (req && !json_is(req, JSON_ARRAY)) {
            fail(c, path, "'required' must be an array of names");
            return;
        }
        size_t np = props ? props->u.object.len : 0;
        if (np == 0) {
            /* free-form object: any keys, values per additionalProperties */
            if (addl && json_is(addl, JSON_BOOL) && !addl->u.boolean) {
                if (req && json_len(req) > 0) {
                    fail(c, path, "'required' names properties that additionalProperties: false forbids");
                    return;
                }
                sb_add(b, "\"{\" ws \"}\"", 10);
                return;
            }
            if (req && json_len(req) > 0) {
                fail(c, path, "'required' without 'properties' is not supported");
                return;
            }
            int vr = -2;
            if (addl && !json_is(addl, JSON_BOOL)) {
                snprintf(sub, sizeof sub, "%s/additionalProperties", path);
                vr = gen(c, addl, sub);
                if (vr == -1)
                    return;
            }
            struct sb v = {0};
            if (vr == -2)
                sb_add(&v, "jvalue", 6);
            else
                add_ref(&v, vr);
            const char *vv = v.s ? v.s : "jvalue";
            sb_printf(b,
                      "\"{\" ws ( jstring ws \":\" ws %s ws ( \",\" ws jstring ws \":\" ws %s ws )* )? \"}\"",
                      vv, vv);
            free(v.s);
            return;
        }
        /* key-value rules in property order, required ones first-class */
        int kv[256];
        bool required[256];
        if (np > 256) {
            fail(c, path, "more than 256 properties");
            return;
        }
        for (size_t i = 0; i < json_len(req); i++) {
            const char *name = json_str(json_at(req, i));
            if (!name) {
                fail(c, path, "'required' must be an array of names");
                return;
            }
            if (!json_get(props, name)) {
                fail(c, path, "required property '%s' is not in 'properties'", name);
                return;
            }
        }
        size_t n_req = 0;
        for (size_t i = 0; i < np; i++) {
            const struct json_member *m = &props->u.object.items[i];
            required[i] = false;
            for (size_t j = 0; j < json_len(req); j++)
                if (strcmp(json_str(json_at(req, j)), m->key) == 0)
                    required[i] = true;
            n_req += required[i];
            snprintf(sub, sizeof sub, "%s/properties/%s", path, m->key);
            int vr = gen(c, m->value, sub);
            if (vr == -1)
                return;
            struct sb kb = {0};
            struct json_value *key = json_new_stringn(m->key, m->key_len);
            if (!key) {
                b->oom = true;
                return;
            }
            literal_json(c, &kb, key);
            json_free(key);
            sb_add(&kb, " ws \":\" ws ", 11);
            if (vr == -2)
                sb_add(&kb, "jvalue", 6);
            else
                add_ref(&kb, vr);
            kv[i] = emit(c, ++c->n_rules, &kb);
        }
        sb_add(b, "\"{\" ws ", 7);
        if (n_req > 0) {
            bool first = true;
            for (size_t i = 0; i < np; i++)
                if (required[i]) {
                    if (!first)
                        sb_add(b, "\",\" ws ", 7);
                    add_ref(b, kv[i]);
                    sb_add(b, " ws ", 4);
                    first = false;
                }
            for (size_t i = 0; i < np; i++)
                if (!required[i]) {
                    sb_add(b, "( \",\" ws ", 9);
                    add_ref(b, kv[i]);
                    sb_add(b, " ws )? ", 7);
                }
        } else {
            /* none required: start_i ::= kv_i ws ( "," ws kv_j ws )? ... | start_{i+1} */
            int next = -1;
            for (size_t i = np; i-- > 0;) {
                struct sb sbody = {0};
                add_ref(&sbody, kv[i]);
                sb_add(&sbody, " ws", 3);
                for (size_t j = i + 1; j < np; j++) {
                    sb_add(&sbody, " ( \",\" ws ", 10);
                    add_ref(&sbody, kv[j]);
                    sb_add(&sbody, " ws )?", 6);
                }
                if (next >= 0) {
                    sb_add(&sbody, " | ", 3);
                    add_ref(&sbody, next);
                }
                next = emit(c, ++c->n_rules, &sbody);
            }
            sb_add(b, "( ", 2);
            add_ref(b, next);
            sb_add(b, " )? ", 4);
        }
        sb_add(b, "\"}\"", 3);
    } else {
        fail(c, path, "unknown type '%s'", t);
    }
}

/* "a number", "an object"...: what a JSON value is, for messages. */
static const char *kind_name(const struct json_value *v)
{
    switch (v->type) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    default: return "an object";
    }
}

/* Finds the schema a "$ref" names: "#/$defs/NAME" or "#/definitions/NAME", an entry of
 * the document's $defs or definitions. Anything else (the whole document "#", "", a
 * pointer into another keyword, a missing name or entry) fails naming the ref. */
static bool resolve_ref(struct conv *c, const char *ref, const char *path,
                        const struct json_value **out)
{
    static const char *const containers[] = {"$defs", "definitions"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(containers[i]);
        if (strncmp(ref, "#/", 2) != 0 || strncmp(ref + 2, containers[i], n) != 0 ||
            ref[2 + n] != '/')
            continue;
        const char *name = ref + 3 + n;
        if (!*name) {
            fail(c, path, "$ref '%s' names no entry of #/%s (it ends after the '/')", ref,
                 containers[i]);
            return false;
        }
        const struct json_value *defs = json_get(c->root, containers[i]);
        if (!json_is(defs, JSON_OBJECT)) {
            fail(c, path, "$ref '%s' points into #/%s, which the schema does not have", ref,
                 containers[i]);
            return false;
        }
        *out = json_get(defs, name);
        if (!*out) {
            fail(c, path, "$ref '%s': #/%s has no entry '%s'", ref, containers[i], name);
            return false;
        }
        return true;
    }
    fail(c, path, "$ref '%s' is not supported: only \"#/$defs/NAME\" and "
         "\"#/definitions/NAME\" (an entry of the same document) are", ref);
    return false;
}

/* Generates the rule for schema s; returns its number, -2 for "any value" (jvalue), -1
 * on error. */
static int gen(struct conv *c, const struct json_value *s, const char *path)
{
    if (c->st != KN_OK)
        return -1;
    if (++c->depth > 64) {
        c->depth--;
        return fail(c, path, "schema nested more than 64 deep");
    }
    int result = -1;
    char sub[512];
    struct sb b = {0};
    if (json_is(s, JSON_BOOL)) {
        result = s->u.boolean ? -2 : fail(c, path, "the schema 'false' matches nothing");
        goto out;
    }
    if (!json_is(s, JSON_OBJECT)) {
        result = fail(c, path, "a schema must be an object or a boolean");
        goto out;
    }
    for (size_t i = 0; i < s->u.object.len; i++) {
        const char *k = s->u.object.items[i].key;
        if (!in_list(k, handled) && !in_list(k, annotations)) {
            result = fail(c, path,
                          "'%s' is not supported (it would constrain the output and the grammar "
                          "cannot enforce it)",
                          k);
            goto out;
        }
    }
    const struct json_value *v;
    if ((v = json_get(s, "$ref"))) {
        const char *ref = json_str(v);
        if (!ref) {
            result = fail(c, path, "'$ref' must be a string such as \"#/$defs/name\", not %s",
                          kind_name(v));
            goto out;
        }
        const struct json_value *target = NULL;
        if (!resolve_ref(c, ref, path, &target))
            goto out;
        for (int i = 0; i < c->n_refs; i++)
            if (strcmp(c->refs[i].ref, ref) == 0) {
                result = c->refs[i].rule;
                goto out;
            }
        if (c->n_refs == 256) {
            result = fail(c, path, "more than 256 distinct $refs");
            goto out;
        }
        /* Reserve the rule first so recursive references find it. */
        int rule = ++c->n_rules;
        c->refs[c->n_refs].ref = strdup(ref);
        c->refs[c->n_refs++].rule = rule;
        snprintf(sub, sizeof sub, "%s", ref);
        int body = gen(c, target, sub);
        if (body == -1)
            goto out;
        if (body == -2)
            sb_add(&b, "jvalue", 6);
        else
            add_ref(&b, body);
        result = emit(c, rule, &b);
        b.s = NULL;
        goto out;
    }
    if ((v = json_get(s, "const"))) {
        literal_json(c, &b, v);
    } else if ((v = json_get(s, "enum"))) {
        if (!json_is(v, JSON_ARRAY) || json_len(v) == 0) {
            result = fail(c, path, "'enum' must be a non-empty array");
            goto out;
        }
        for (size_t i = 0; i < json_len(v); i++) {
            if (i)
                sb_add(&b, " | ", 3);
            literal_json(c, &b, json_at(v, i));
        }
    } else if ((v = json_get(s, "anyOf")) || (v = json_get(s, "oneOf"))) {
        if (!json_is(v, JSON_ARRAY) || json_len(v) == 0) {
            result = fail(c, path, "'anyOf'/'oneOf' must be a non-empty array");
            goto out;
        }
        if (json_get(s, "type") || json_get(s, "properties") || json_get(s, "items") ||
            json_get(s, "prefixItems")) {
            result = fail(c, path, "'anyOf'/'oneOf' next to 'type', 'properties', 'items' or "
                                   "'prefixItems' is not supported; move them into each "
                                   "alternative");
            goto out;
        }
        for (size_t i = 0; i < json_len(v); i++) {
            snprintf(sub, sizeof sub, "%s/anyOf/%zu", path, i);
            int r = gen(c, json_at(v, i), sub);
            if (r == -1)
                goto out;
            if (i)
                sb_add(&b, " | ", 3);
            if (r == -2)
                sb_add(&b, "jvalue", 6);
            else
                add_ref(&b, r);
        }
    } else if ((v = json_get(s, "type"))) {
        if (json_is(v, JSON_STRING)) {
            gen_type(c, s, json_str(v), path, &b);
        } else if (json_is(v, JSON_ARRAY) && json_len(v) > 0) {
            for (size_t i = 0; i < json_len(v) && c->st == KN_OK; i++) {
                const char *t = json_str(json_at(v, i));
                if (!t) {
                    result = fail(c, path, "'type' must be a name or a list of names");
                    goto out;
                }
                if (i)
                    sb_add(&b, " | ", 3);
                sb_add(&b, "( ", 2);
                gen_type(c, s, t, path, &b);
                sb_add(&b, " )", 2);
            }
        } else {
            result = fail(c, path, "'type' must be a name or a list of names");
            goto out;
        }
    } else if (json_get(s, "properties")) {
        gen_type(c, s, "object", path, &b);
    } else if (json_get(s, "items") || json_get(s, "prefixItems")) {
        gen_type(c, s, "array", path, &b);
    } else {
        result = -2; /* {} or only annotations: any value */
        goto out;
    }
    if (c->st != KN_OK)
        goto out;
    result = emit(c, ++c->n_rules, &b);
    b.s = NULL;
out:
    free(b.s);
    c->depth--;
    return c->st != KN_OK ? -1 : result;
}

/* Converts n schema documents into one GBNF text (*out): rule heads[i] is document i's
 * value, e.g. "root ::= s3 ws". The JSON primitives and the rules of every document
 * follow once; a document's $refs resolve in that document. */
static enum kn_status convert(const struct json_value *const *docs, const char *const *heads,
                              const char *const *tails, int n, char **out, struct kn_err *err)
{
    *out = NULL;
    struct conv c = {.err = err, .st = KN_OK};
    struct sb g = {0};
    for (int d = 0; d < n && c.st == KN_OK; d++) {
        for (int i = 0; i < c.n_refs; i++)
            free(c.refs[i].ref);
        c.n_refs = 0;
        c.root = docs[d];
        int top = gen(&c, docs[d], "");
        if (c.st != KN_OK)
            break;
        sb_printf(&g, "%s ::= ", heads[d]);
        if (top == -2)
            sb_add(&g, "jvalue", 6);
        else
            add_ref(&g, top);
        sb_printf(&g, "%s\n", tails[d]);
    }
    if (c.st == KN_OK) {
        sb_add(&g, JSON_PRIMITIVES, strlen(JSON_PRIMITIVES));
        static const char dates[] =
            /* days per month without leap days, so every date is a real one */
            "jdate ::= [1-9] [0-9]{3} \"-\" ( ( \"01\" | \"03\" | \"05\" | \"07\" | \"08\" | "
            "\"10\" | \"12\" ) \"-\" jd31 | ( \"04\" | \"06\" | \"09\" | \"11\" ) \"-\" jd30 | "
            "\"02\" \"-\" jd28 )\n"
            "jd28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
            "jd30 ::= jd28 | \"29\" | \"30\"\n"
            "jd31 ::= jd30 | \"31\"\n"
            "jtime ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
            "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n";
        sb_add(&g, dates, strlen(dates));
        if (c.rules.s)
            sb_add(&g, c.rules.s, c.rules.len);
        if (g.oom || c.rules.oom)
            c.st = kn_fail(err, KN_E_NOMEM, "JSON schema: out of memory");
    }
    for (int i = 0; i < c.n_refs; i++)
        free(c.refs[i].ref);
    free(c.rules.s);
    if (c.st != KN_OK) {
        free(g.s);
        return c.st;
    }
    *out = g.s;
    return KN_OK;
}

enum kn_status grammar_from_json_schema(const char *schema, size_t len, char **out,
                                        struct kn_err *err)
{
    *out = NULL;
    struct json_value *doc = NULL;
    struct kn_err jerr;
    if (json_parse(schema, len, NULL, &doc, &jerr) != KN_OK)
        return kn_fail(err, KN_E_FORMAT, "JSON schema: not valid JSON: %s", jerr.msg);
    const struct json_value *docs[1] = {doc};
    const char *heads[1] = {"root"}, *tails[1] = {" ws"};
    enum kn_status st = convert(docs, heads, tails, 1, out, err);
    json_free(doc);
    return st;
}

enum kn_status grammar_from_json_schemas(const struct json_value *const *schemas,
                                         const char *const *names, int n, char **out,
                                         struct kn_err *err)
{
    *out = NULL;
    const char **tails = calloc(n > 0 ? (size_t)n : 1, sizeof *tails);
    if (!tails)
        return kn_fail(err, KN_E_NOMEM, "JSON schema: out of memory");
    for (int i = 0; i < n; i++)
        tails[i] = "";
    enum kn_status st = convert(schemas, names, tails, n, out, err);
    free(tails);
    return st;
}
