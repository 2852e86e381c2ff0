/* jinja_int.h: internals shared by the Jinja lexer/parser and the renderer. */
#ifndef KN_JINJA_INT_H
#define KN_JINJA_INT_H

#include "jinja.h"

/* ---- arena: bump allocation with a cap; everything of a template or a render ---- */
struct jarena_chunk;
struct jarena {
    struct jarena_chunk *head;
    size_t used, cap; /* bytes handed out, limit */
    bool failed;
    bool over_cap; /* failed because of cap (a limit), not malloc */
};
void *jarena_alloc(struct jarena *a, size_t size);
void jarena_free(struct jarena *a);

/* ---- values ---- */
enum jv_type {
    JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_TUPLE, JV_DICT,
    JV_NS, JV_LOOP, JV_MACRO, JV_FUNC,
};
/* JV_STR provenance: no byte, every byte, or some bytes (then a mask of n bytes, 1 = from
 * the template, follows the string's NUL) came from the template's own text. */
enum { JTRUST_NONE = 0, JTRUST_ALL = 1, JTRUST_MIXED = 2 };
struct jstr {
    size_t n;
    char p[]; /* NUL-terminated */
};
/* A copy of p[0..n-1] in the arena; NULL when it is full (or the size overflows). */
struct jstr *jstr_make(struct jarena *a, const char *p, size_t n);
struct jv {
    uint8_t t;
    uint8_t gen;   /* JV_LIST: produced by a generator filter (select, map...) */
    uint8_t unsafe; /* JV_UNDEF: a sandbox-refused attribute: calling it fails */
    uint8_t markup; /* JV_STR: a markupsafe.Markup (from |safe, |escape): + escapes plain str */
    uint8_t trust;  /* JV_STR: where the bytes came from (jinja_render_marked): JTRUST_* */
    uint16_t fn;   /* JV_FUNC: its row in k_builtins (jinja_methods.c: jr_builtin) */
    union {
        bool b;
        int64_t i;
        double f;
        struct jstr *s;     /* JV_STR; JV_UNDEF: the hint (may be NULL) */
        struct jseq *l;     /* JV_LIST, JV_TUPLE */
        struct jmap *d;     /* JV_DICT, JV_NS */
        struct jloop *loop;
        struct jmacro *m;
        struct jfunc *f2;   /* JV_FUNC: bound object (may be NULL) */
    } u;
};
struct jseq {
    size_t n, cap;
    struct jv *v;
};
struct jmap {
    size_t n, cap;
    struct jv *k, *v;
};

/* ---- syntax tree ---- */
enum jn_kind {
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL,
    JN_FILTER, JN_TEST, JN_NOT, JN_NEG, JN_POS, JN_BIN, JN_CMP, JN_AND, JN_OR, JN_COND,
    /* statements */
    JN_DATA, JN_OUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_CALLBLOCK,
    JN_FILTERBLOCK, JN_BREAK, JN_CONTINUE, JN_BODY, JN_WITH, JN_NOLOADER,
};
enum jn_op {
    JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN,
};
struct jnode {
    uint8_t kind;
    uint8_t op;      /* JN_BIN: enum jn_op; JN_TEST: negated */
    uint32_t line, col;
    struct jstr *name;  /* JN_NAME, JN_ATTR attr, JN_FILTER/JN_TEST name, JN_MACRO name */
    struct jv lit;      /* JN_LIT; JN_DATA text as string */
    struct jnode *a, *b, *c, *d; /* operands; JN_IF: a cond; JN_FOR: a target, b iter, c filter */
    struct jnode **args; size_t nargs;   /* items, positional args, body statements */
    struct jnode **kwv; struct jstr **kwn; size_t nkw; /* keyword args / macro defaults */
    struct jnode **els; size_t nels;     /* else body; JN_CMP: extra operands */
    uint8_t *ops;                        /* JN_CMP: operators (nargs of them) */
    bool flag;                           /* JN_FOR: recursive; JN_MACRO: uses caller */
};

struct jinja_template {
    struct jarena arena;
    struct jnode *root; /* JN_BODY */
    struct jinja_limits limits;
};

void jinja_limits_fill(struct jinja_limits *out, const struct jinja_limits *in);
bool jinja_filter_known(const char *name);
bool jinja_test_known(const char *name);

#endif
