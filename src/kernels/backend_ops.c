/* backend_ops.c: the op table of the device seam (backend.h KERN_BACKEND_OPS) and what
 * reads it: which ops a backend has, the first of a set it lacks, and the optional ones
 * it lacks with what needs them. */
#include "backend.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef void (*kern_op_fn)(void);

/* The list and the struct agree: every member is listed, in member order (a member added
 * without its line, or a line without its member, stops the build here). */
#define KERN_OP_AT_REQ_(name)                                                                   \
    _Static_assert(offsetof(struct kern_backend_ops, name) == KERN_OP_##name * sizeof(kern_op_fn), \
                   "KERN_BACKEND_OPS: " #name " is not at its place in struct kern_backend_ops");
#define KERN_OP_AT_OPT_(name, needs) KERN_OP_AT_REQ_(name)
KERN_BACKEND_OPS(KERN_OP_AT_REQ_, KERN_OP_AT_OPT_)
_Static_assert(sizeof(struct kern_backend_ops) == KERN_OP_COUNT * sizeof(kern_op_fn),
               "KERN_BACKEND_OPS lists fewer ops than struct kern_backend_ops has");

#define KERN_OP_DESC_REQ_(name) {#name, offsetof(struct kern_backend_ops, name), false, NULL},
#define KERN_OP_DESC_OPT_(name, needs) {#name, offsetof(struct kern_backend_ops, name), true, needs},
const struct kern_op_desc kern_backend_op_table[KERN_OP_COUNT] = {
    KERN_BACKEND_OPS(KERN_OP_DESC_REQ_, KERN_OP_DESC_OPT_)};

#define KERN_OP_REQ_BIT_(name) KERN_OP_BIT(name) |
#define KERN_OP_OPT_BIT_(name, needs)
const kern_op_set kern_backend_required_ops = KERN_BACKEND_OPS(KERN_OP_REQ_BIT_, KERN_OP_OPT_BIT_) 0;

bool kern_backend_has_op(const struct kern_backend *be, enum kern_op op)
{
    kern_op_fn f;
    memcpy(&f, (const char *)be->ops + kern_backend_op_table[op].offset, sizeof f);
    return f != NULL;
}

enum kern_op kern_backend_first_missing(const struct kern_backend *be, kern_op_set need)
{
    for (int i = 0; i < KERN_OP_COUNT; i++)
        if ((need >> i & 1) && !kern_backend_has_op(be, (enum kern_op)i))
            return (enum kern_op)i;
    return KERN_OP_COUNT;
}

const char *kern_backend_missing_op(const struct kern_backend *be)
{
    enum kern_op op = kern_backend_first_missing(be, kern_backend_required_ops);
    return op == KERN_OP_COUNT ? NULL : kern_backend_op_table[op].name;
}

int kern_backend_missing_optional(const struct kern_backend *be, char *out, size_t cap)
{
    int n = 0;
    size_t len = 0;
    if (cap)
        out[0] = '\0';
    for (int i = 0; i < KERN_OP_COUNT; i++) {
        const struct kern_op_desc *d = &kern_backend_op_table[i];
        if (!d->optional || kern_backend_has_op(be, (enum kern_op)i))
            continue;
        /* ops that the same layers need are listed together: "moe_route, moe_ffn (...)" */
        const struct kern_op_desc *next = NULL;
        for (int j = i + 1; j < KERN_OP_COUNT && !next; j++)
            if (kern_backend_op_table[j].optional && !kern_backend_has_op(be, (enum kern_op)j))
                next = &kern_backend_op_table[j];
        bool same = next && strcmp(next->needs, d->needs) == 0;
        int w = snprintf(out + len, cap > len ? cap - len : 0, "%s%s%s%s%s", d->name,
                         same ? ", " : " (", same ? "" : d->needs, same ? "" : ")",
                         !same && next ? "; " : "");
        len += w > 0 ? (size_t)w : 0;
        n++;
    }
    return n;
}
