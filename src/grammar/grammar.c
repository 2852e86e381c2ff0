/* grammar.c: the GBNF parser, the stack-set matcher and the trie walk that filters a
 * vocabulary. Rules compile to one array of elements: each rule is its alternatives, each
 * ended by ALT (END after the last); an element is a character set, a rule reference or
 * one of those ends. A stack is a linked list of element positions (its top is the next
 * thing to match, below it where to continue when that rule is done); a state is the set
 * of stacks the text so far can be in, every top a character set (or the empty stack:
 * the text is complete). */
#include "grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "token/tok.h"

enum { GEL_END = 0, GEL_ALT, GEL_RULE, GEL_SET, GEL_NSET };

struct gel {
    uint8_t type;
    uint32_t a; /* GEL_RULE: rule index; GEL_SET/NSET: first range */
    uint32_t b; /* GEL_SET/NSET: number of ranges */
};

struct grammar {
    struct gel *els;
    uint32_t n_els;
    uint32_t *ranges; /* pairs lo, hi (inclusive code points) */
    uint32_t n_ranges;
    uint32_t *rule_start; /* n_rules */
    int n_rules;
    uint32_t root;
};

#define NIL UINT32_MAX
#define GRAMMAR_STR_(x) #x
#define GRAMMAR_STR(x) GRAMMAR_STR_(x)

/* ================================================================ parser */

struct prule {
    char *name;
    size_t name_len;
    struct gel *els;
    size_t n, cap;
    bool defined;
    const char *first_ref; /* where it was first used, for "undefined rule" errors */
};

struct parser {
    const char *src, *p, *end;
    struct prule *rules;
    int n_rules, cap_rules;
    uint32_t *ranges;
    size_t n_ranges, cap_ranges;
    struct kn_err *err;
    enum kn_status st;
    int depth;
};

static void where(const struct parser *ps, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *q = ps->src; q < at && q < ps->end; q++) {
        if (*q == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)*q & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

#define PFAIL(ps, at, ...)                                                                    \
    do {                                                                                      \
        if ((ps)->st == KN_OK) {                                                              \
            int l_, c_;                                                                       \
            where((ps), (at), &l_, &c_);                                                      \
            char m_[160];                                                                     \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                             \
            (ps)->st = kn_fail((ps)->err, KN_E_FORMAT, "grammar: line %d, column %d: %s", l_, \
                               c_, m_);                                                       \
        }                                                                                     \
        return 0;                                                                             \
    } while (0)

static bool grow(void **buf, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *nb = realloc(*buf, nc * size);
    if (!nb)
        return false;
    *buf = nb;
    *cap = nc;
    return true;
}

static int oom(struct parser *ps)
{
    if (ps->st == KN_OK)
        ps->st = kn_fail(ps->err, KN_E_NOMEM, "grammar: out of memory");
    return 0;
}

static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips spaces, tabs and comments, and newlines if nl. */
static void skip_space(struct parser *ps, bool nl)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
        } else {
            break;
        }
    }
}

/* Index of the rule named name (created undefined if new), or -1 when out of memory. */
static int rule_index(struct parser *ps, const char *name, size_t len)
{
    for (int i = 0; i < ps->n_rules; i++)
        if (ps->rules[i].name_len == len && memcmp(ps->rules[i].name, name, len) == 0)
            return i;
    if (ps->n_rules == ps->cap_rules) {
        size_t cap = (size_t)ps->cap_rules;
        if (!grow((void **)&ps->rules, &cap, cap + 1, sizeof *ps->rules))
            return -1;
        ps->cap_rules = (int)cap;
    }
    struct prule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(len + 1);
    if (!r->name)
        return -1;
    memcpy(r->name, name, len);
    r->name[len] = 0;
    r->name_len = len;
    return ps->n_rules++;
}

/* A fresh rule named after its parent, for groups and repetitions. */
static int new_rule(struct parser *ps, int parent)
{
    char name[300];
    int n = snprintf(name, sizeof name, "%.200s_%d", ps->rules[parent].name, ps->n_rules);
    int r = rule_index(ps, name, (size_t)n);
    if (r >= 0)
        ps->rules[r].defined = true;
    return r;
}

static bool push_el(struct prule *r, uint8_t type, uint32_t a, uint32_t b)
{
    if (!grow((void **)&r->els, &r->cap, r->n + 1, sizeof *r->els))
        return false;
    r->els[r->n++] = (struct gel){type, a, b};
    return true;
}

static bool push_range(struct parser *ps, uint32_t lo, uint32_t hi)
{
    if (!grow((void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + 2, sizeof *ps->ranges))
        return false;
    ps->ranges[ps->n_ranges++] = lo;
    ps->ranges[ps->n_ranges++] = hi;
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes one UTF-8 code point at *s (< end); 0 on invalid input. */
static int utf8_decode(const char *s, const char *end, uint32_t *cp)
{
    unsigned char c = (unsigned char)*s;
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || end - s < n)
        return 0;
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int i = 1; i < n; i++) {
        unsigned char d = (unsigned char)s[i];
        if ((d & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (d & 0x3Fu);
    }
    *cp = v;
    return n;
}

/* One character of a literal or class, with escapes; returns 0 (and sets the error) on
 * bad input. */
static int parse_char(struct parser *ps, uint32_t *cp)
{
    const char *at = ps->p;
    if (ps->p >= ps->end)
        PFAIL(ps, at, "unexpected end of grammar inside a literal or character class");
    if (*ps->p == '\\') {
        ps->p++;
        if (ps->p >= ps->end)
            PFAIL(ps, at, "unexpected end of grammar after '\\'");
        char c = *ps->p++;
        int digits = 0;
        switch (c) {
        case 'n': *cp = '\n'; return 1;
        case 'r': *cp = '\r'; return 1;
        case 't': *cp = '\t'; return 1;
        case '0': *cp = 0; return 1;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
            *cp = (unsigned char)c;
            return 1;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default: PFAIL(ps, at, "unknown escape '\\%c'", c);
        }
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = ps->p < ps->end ? hexval(*ps->p) : -1;
            if (h < 0)
                PFAIL(ps, at, "'\\%c' needs %d hexadecimal digits", c, digits);
            v = v << 4 | (uint32_t)h;
            ps->p++;
        }
        if (v > 0x10FFFF)
            PFAIL(ps, at, "code point U+%X is beyond U+10FFFF", v);
        *cp = v;
        return 1;
    }
    int n = utf8_decode(ps->p, ps->end, cp);
    if (n == 0)
        PFAIL(ps, at, "invalid UTF-8");
    ps->p += n;
    return 1;
}

static int parse_alternates(struct parser *ps, int rule, bool nested);

/* Rewrites the item at [from, r->n) of rule `rule` as item{min,max} (max < 0: no bound). */
static int repeat(struct parser *ps, int rule, size_t from, long min, long max)
{
    struct prule *r = &ps->rules[rule];
    size_t len = r->n - from;
    if (len == 0)
        return 1; /* repeating nothing ("" or an empty group) is nothing */
    struct gel item[64];
    struct gel *it = item;
    if (len > 64) {
        it = malloc(len * sizeof *it);
        if (!it)
            return oom(ps);
    }
    memcpy(it, r->els + from, len * sizeof *it);
    r->n = from;
    bool ok = true;
    for (long i = 0; ok && i < min; i++)
        for (size_t j = 0; ok && j < len; j++)
            ok = push_el(&ps->rules[rule], it[j].type, it[j].a, it[j].b);
    if (ok && max < 0) {
        /* s ::= item s | (empty) */
        int s = new_rule(ps, rule);
        ok = s >= 0;
        for (size_t j = 0; ok && j < len; j++)
            ok = push_el(&ps->rules[s], it[j].type, it[j].a, it[j].b);
        ok = ok && push_el(&ps->rules[s], GEL_RULE, (uint32_t)s, 0) &&
             push_el(&ps->rules[s], GEL_ALT, 0, 0) && push_el(&ps->rules[s], GEL_END, 0, 0) &&
             push_el(&ps->rules[rule], GEL_RULE, (uint32_t)s, 0);
    } else if (ok && max > min) {
        /* nested optionals: o_1 ::= item | ; o_j ::= item o_{j-1} | */
        int prev = -1;
        for (long j = 0; ok && j < max - min; j++) {
            int o = new_rule(ps, rule);
            ok = o >= 0;
            for (size_t q = 0; ok && q < len; q++)
                ok = push_el(&ps->rules[o], it[q].type, it[q].a, it[q].b);
            if (ok && prev >= 0)
                ok = push_el(&ps->rules[o], GEL_RULE, (uint32_t)prev, 0);
            ok = ok && push_el(&ps->rules[o], GEL_ALT, 0, 0) && push_el(&ps->rules[o], GEL_END, 0, 0);
            prev = o;
        }
        ok = ok && push_el(&ps->rules[rule], GEL_RULE, (uint32_t)prev, 0);
    }
    if (it != item)
        free(it);
    return ok ? 1 : oom(ps);
}

static int parse_number(struct parser *ps, long *v)
{
    const char *at = ps->p;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        PFAIL(ps, at, "expected a number in the repetition {m,n}");
    long n = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        n = n * 10 + (*ps->p++ - '0');
        if (n > 10000)
            PFAIL(ps, at, "repetition count above 10000");
    }
    *v = n;
    return 1;
}

static int parse_sequence(struct parser *ps, int rule, bool nested)
{
    size_t last_item = SIZE_MAX; /* start of the last item, for postfix operators */
    for (;;) {
        if (ps->p >= ps->end)
            return 1;
        const char *at = ps->p;
        char c = *ps->p;
        size_t start = ps->rules[rule].n;
        if (c == '"') {
            ps->p++;
            while (ps->p < ps->end && *ps->p != '"') {
                uint32_t cp;
                if (!parse_char(ps, &cp))
                    return 0;
                uint32_t ri = (uint32_t)ps->n_ranges / 2;
                if (!push_range(ps, cp, cp) || !push_el(&ps->rules[rule], GEL_SET, ri, 1))
                    return oom(ps);
            }
            if (ps->p >= ps->end)
                PFAIL(ps, at, "unterminated literal (missing '\"')");
            ps->p++;
            last_item = start;
        } else if (c == '[') {
            ps->p++;
            uint8_t type = GEL_SET;
            if (ps->p < ps->end && *ps->p == '^') {
                type = GEL_NSET;
                ps->p++;
            }
            uint32_t ri = (uint32_t)ps->n_ranges / 2, nr = 0;
            while (ps->p < ps->end && *ps->p != ']') {
                uint32_t lo, hi;
                if (!parse_char(ps, &lo))
                    return 0;
                hi = lo;
                if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
                    ps->p++;
                    const char *rat = ps->p;
                    if (!parse_char(ps, &hi))
                        return 0;
                    if (hi < lo)
                        PFAIL(ps, rat, "character range ends below its start (U+%X-U+%X)", lo, hi);
                }
                if (!push_range(ps, lo, hi))
                    return oom(ps);
                nr++;
            }
            if (ps->p >= ps->end)
                PFAIL(ps, at, "unterminated character class (missing ']')");
            ps->p++;
            if (!push_el(&ps->rules[rule], type, ri, nr))
                return oom(ps);
            last_item = start;
        } else if (c == '.') {
            ps->p++;
            if (!push_el(&ps->rules[rule], GEL_NSET, 0, 0))
                return oom(ps);
            last_item = start;
        } else if (is_word(c)) {
            const char *s = ps->p;
            while (ps->p < ps->end && is_word(*ps->p))
                ps->p++;
            int ref = rule_index(ps, s, (size_t)(ps->p - s));
            if (ref < 0)
                return oom(ps);
            if (!ps->rules[ref].first_ref)
                ps->rules[ref].first_ref = s;
            if (!push_el(&ps->rules[rule], GEL_RULE, (uint32_t)ref, 0))
                return oom(ps);
            last_item = start;
        } else if (c == '(') {
            ps->p++;
            if (++ps->depth > 100)
                PFAIL(ps, at, "groups nested more than 100 deep");
            int sub = new_rule(ps, rule);
            if (sub < 0)
                return oom(ps);
            skip_space(ps, true);
            if (!parse_alternates(ps, sub, true))
                return 0;
            if (ps->p >= ps->end || *ps->p != ')')
                PFAIL(ps, at, "unclosed group (missing ')')");
            ps->p++;
            ps->depth--;
            if (!push_el(&ps->rules[rule], GEL_RULE, (uint32_t)sub, 0))
                return oom(ps);
            last_item = start;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last_item == SIZE_MAX)
                PFAIL(ps, at, "'%c' must follow something to repeat", c);
            ps->p++;
            long min = 0, max = -1;
            if (c == '+')
                min = 1;
            else if (c == '?')
                max = 1;
            else if (c == '{') {
                skip_space(ps, false);
                if (!parse_number(ps, &min))
                    return 0;
                skip_space(ps, false);
                max = min;
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    skip_space(ps, false);
                    max = -1;
                    if (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9' && !parse_number(ps, &max))
                        return 0;
                    skip_space(ps, false);
                }
                if (ps->p >= ps->end || *ps->p != '}')
                    PFAIL(ps, at, "expected '}' to close the repetition");
                ps->p++;
                if (max >= 0 && max < min)
                    PFAIL(ps, at, "repetition {%ld,%ld} has its maximum below its minimum", min, max);
            }
            if (!repeat(ps, rule, last_item, min, max))
                return 0;
            /* a repeated item cannot be repeated again without a group */
        } else {
            return 1; /* '|', ')', newline or something the caller judges */
        }
        skip_space(ps, nested);
    }
}

static int parse_alternates(struct parser *ps, int rule, bool nested)
{
    for (;;) {
        if (!parse_sequence(ps, rule, nested))
            return 0;
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            if (!push_el(&ps->rules[rule], GEL_ALT, 0, 0))
                return oom(ps);
            skip_space(ps, true);
            continue;
        }
        if (!push_el(&ps->rules[rule], GEL_END, 0, 0))
            return oom(ps);
        return 1;
    }
}

static int parse_rules(struct parser *ps)
{
    skip_space(ps, true);
    while (ps->p < ps->end) {
        const char *at = ps->p;
        if (!is_word(*ps->p))
            PFAIL(ps, at, "expected a rule name, found '%c'", *ps->p);
        const char *s = ps->p;
        while (ps->p < ps->end && is_word(*ps->p))
            ps->p++;
        int r = rule_index(ps, s, (size_t)(ps->p - s));
        if (r < 0)
            return oom(ps);
        if (ps->rules[r].defined)
            PFAIL(ps, at, "rule '%.*s' is defined twice", (int)(ps->p - s), s);
        ps->rules[r].defined = true;
        skip_space(ps, false);
        if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0)
            PFAIL(ps, ps->p, "expected '::=' after the rule name '%.*s'", (int)(ps->p - s), s);
        ps->p += 3;
        skip_space(ps, true);
        if (!parse_alternates(ps, r, false))
            return 0;
        if (ps->p < ps->end && *ps->p == '\r')
            ps->p++;
        if (ps->p < ps->end && *ps->p != '\n')
            PFAIL(ps, ps->p, "unexpected '%c' (expected a newline, '|' or another element)",
                  *ps->p);
        skip_space(ps, true);
    }
    return 1;
}

/* ---- checks after parsing */

static bool el_end(uint8_t t)
{
    return t == GEL_END || t == GEL_ALT;
}

/* Left recursion: rule r can reach itself without consuming a character. */
static int check_left_recursion(struct parser *ps, const struct grammar *g)
{
    int n = g->n_rules;
    bool *nullable = calloc((size_t)n, 1);
    uint8_t *mark = calloc((size_t)n, 1);
    int *stack = malloc((size_t)n * 2 * sizeof *stack);
    if (!nullable || !mark || !stack) {
        free(nullable);
        free(mark);
        free(stack);
        return oom(ps);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            const struct gel *e = &g->els[g->rule_start[r]];
            bool alt_null = true;
            for (;; e++) {
                if (el_end(e->type)) {
                    if (alt_null) {
                        nullable[r] = changed = true;
                        break;
                    }
                    if (e->type == GEL_END)
                        break;
                    alt_null = true;
                } else if (e->type != GEL_RULE || !nullable[e->a]) {
                    alt_null = false;
                }
            }
        }
    }
    /* Depth-first search over "r starts with s" edges; mark 1 = on the path. */
    int bad = -1;
    for (int root = 0; root < n && bad < 0; root++) {
        if (mark[root])
            continue;
        /* iterative DFS: stack of (rule, element cursor) */
        int sp = 0;
        stack[sp++] = root;
        stack[sp++] = (int)g->rule_start[root];
        mark[root] = 1;
        while (sp > 0 && bad < 0) {
            int r = stack[sp - 2];
            uint32_t i = (uint32_t)stack[sp - 1];
            /* find the next element of r that can start it */
            int next = -1;
            for (;;) {
                const struct gel *e = &g->els[i];
                if (e->type == GEL_END) {
                    break;
                }
                /* is every earlier element of this alternative nullable? */
                uint32_t j = i;
                bool reach = true;
                while (j > g->rule_start[r] && !el_end(g->els[j - 1].type)) {
                    j--;
                    if (g->els[j].type != GEL_RULE || !nullable[g->els[j].a]) {
                        reach = false;
                        break;
                    }
                }
                i++;
                if (e->type == GEL_RULE && reach) {
                    next = (int)e->a;
                    break;
                }
            }
            stack[sp - 1] = (int)i;
            if (next < 0) {
                mark[r] = 2;
                sp -= 2;
            } else if (mark[next] == 1) {
                bad = next;
            } else if (mark[next] == 0) {
                mark[next] = 1;
                stack[sp++] = next;
                stack[sp++] = (int)g->rule_start[next];
            }
        }
    }
    free(nullable);
    free(mark);
    free(stack);
    if (bad >= 0) {
        if (ps->st == KN_OK)
            ps->st = kn_fail(ps->err, KN_E_FORMAT,
                             "grammar: rule '%s' is left-recursive (it can reach itself before "
                             "matching any character, e.g. through a repetition of something "
                             "that can be empty); rewrite it with the repetition on the right",
                             ps->rules[bad].name);
        return 0;
    }
    return 1;
}

enum kn_status grammar_parse(const char *text, size_t len, const char *root, struct grammar **out,
                             struct kn_err *err)
{
    *out = NULL;
    struct parser ps = {.src = text, .p = text, .end = text + len, .err = err, .st = KN_OK};
    struct grammar *g = NULL;
    if (!root)
        root = "root";
    if (parse_rules(&ps)) {
        for (int i = 0; i < ps.n_rules; i++)
            if (!ps.rules[i].defined) {
                int l, c;
                where(&ps, ps.rules[i].first_ref, &l, &c);
                ps.st = kn_fail(err, KN_E_FORMAT,
                                "grammar: line %d, column %d: rule '%s' is used but never defined",
                                l, c, ps.rules[i].name);
                break;
            }
    }
    int root_i = -1;
    if (ps.st == KN_OK) {
        for (int i = 0; i < ps.n_rules; i++)
            if (strcmp(ps.rules[i].name, root) == 0)
                root_i = i;
        if (root_i < 0)
            ps.st = kn_fail(err, KN_E_FORMAT, "grammar: no rule named '%s' to start from", root);
    }
    if (ps.st == KN_OK) {
        g = calloc(1, sizeof *g);
        size_t total = 0;
        for (int i = 0; i < ps.n_rules; i++)
            total += ps.rules[i].n;
        if (g) {
            g->els = malloc((total + 1) * sizeof *g->els);
            g->rule_start = malloc(((size_t)ps.n_rules + 1) * sizeof *g->rule_start);
            g->ranges = malloc((ps.n_ranges + 2) * sizeof *g->ranges);
        }
        if (!g || !g->els || !g->rule_start || !g->ranges) {
            oom(&ps);
        } else {
            for (int i = 0; i < ps.n_rules; i++) {
                g->rule_start[i] = g->n_els;
                memcpy(g->els + g->n_els, ps.rules[i].els, ps.rules[i].n * sizeof *g->els);
                g->n_els += (uint32_t)ps.rules[i].n;
            }
            if (ps.n_ranges)
                memcpy(g->ranges, ps.ranges, ps.n_ranges * sizeof *g->ranges);
            g->n_ranges = (uint32_t)ps.n_ranges / 2;
            g->n_rules = ps.n_rules;
            g->root = (uint32_t)root_i;
            check_left_recursion(&ps, g);
        }
    }
    for (int i = 0; i < ps.n_rules; i++) {
        free(ps.rules[i].name);
        free(ps.rules[i].els);
    }
    free(ps.rules);
    free(ps.ranges);
    if (ps.st != KN_OK) {
        grammar_free(g);
        return ps.st;
    }
    *out = g;
    return KN_OK;
}

void grammar_free(struct grammar *g)
{
    if (!g)
        return;
    free(g->els);
    free(g->ranges);
    free(g->rule_start);
    free(g);
}

int grammar_n_rules(const struct grammar *g)
{
    return g->n_rules;
}

/* ================================================================ matcher */

struct gnode {
    uint32_t pos;  /* element index */
    uint32_t next; /* the stack below, or NIL */
    uint32_t h;    /* a hash of the whole stack from here down (stack_hash) */
};

/* Why a state refuses everything (grammar_state_error). */
enum gfail { GFAIL_NONE, GFAIL_OOM, GFAIL_STACKS, GFAIL_WORK };

struct arena {
    struct gnode *n;
    size_t len, cap;
};

struct grammar_state {
    const struct grammar *g;
    struct arena a, b;  /* a: live nodes; b: compaction target */
    uint32_t *set;      /* stack of sets: the current state's set is set[0..n_cur) */
    size_t n_set, cap_set;
    size_t n_cur;
    uint32_t cp;        /* a code point being assembled from UTF-8 bytes */
    int rem;            /* its missing continuation bytes */
    bool done, oom;     /* oom: the state refuses everything; why in fail */
    enum gfail fail;
    size_t work;        /* stack steps since the last accepted text */
    size_t work_cap;    /* inside grammar_mask and grammar_allows: the most work allows
                         * (grammar_work_cap); 0 elsewhere (accepting text is linear) */
    /* An index of the set being built (set_add): slots hold set positions + 1, 0 empty;
     * it covers set[ht_from .. ht_from + ht_count). */
    uint32_t *ht;
    size_t ht_cap, ht_from, ht_count;
    uint32_t *path;     /* compaction scratch */
    size_t cap_path;
    /* grammar_mask's cache. A mask is a function of the state (its stacks and UTF-8
     * position) and the vocabulary, and states come back: inside a JSON string every
     * ordinary character leads to the same state. A hit costs a copy of n_vocab bytes
     * instead of a walk of the vocabulary's trie. */
    struct mask_entry {
        uint32_t *key;
        size_t len, cap;
        uint8_t *mask;
        const struct grammar_vocab *gv;
    } mc[4];
    int mc_next;
    uint32_t *key;      /* the current state's key (scratch) */
    size_t key_len, key_cap;
};

/* Marks the state failed: from now on it refuses every byte and token. */
static void state_fail(struct grammar_state *st, enum gfail why)
{
    if (!st->oom)
        st->fail = why;
    st->oom = true;
}

static uint32_t stack_hash(const struct arena *a, uint32_t pos, uint32_t next)
{
    uint32_t below = next == NIL ? 0x9e3779b9u : a->n[next].h;
    uint32_t h = (pos + 0x7f4a7c15u) * 0x85ebca6bu ^ (below * 0xc2b2ae35u + (below >> 15));
    return h ^ (h >> 13);
}

static uint32_t node_new(struct grammar_state *st, uint32_t pos, uint32_t next)
{
    if (!grow((void **)&st->a.n, &st->a.cap, st->a.len + 1, sizeof *st->a.n)) {
        state_fail(st, GFAIL_OOM);
        return NIL;
    }
    st->a.n[st->a.len] = (struct gnode){pos, next, stack_hash(&st->a, pos, next)};
    return (uint32_t)st->a.len++;
}

static bool stack_eq(const struct grammar_state *st, uint32_t x, uint32_t y)
{
    while (x != y) {
        if (x == NIL || y == NIL || st->a.n[x].pos != st->a.n[y].pos)
            return false;
        x = st->a.n[x].next;
        y = st->a.n[y].next;
    }
    return true;
}

static uint32_t set_hash(const struct grammar_state *st, uint32_t s)
{
    return s == NIL ? 0x2545f491u : st->a.n[s].h;
}

/* Sets smaller than this are searched by a scan; larger ones through the index. */
#define SET_SCAN 16

/* Puts set position i into the index (which has room). */
static void ht_put(struct grammar_state *st, size_t i)
{
    size_t mask = st->ht_cap - 1;
    for (size_t k = set_hash(st, st->set[i]) & mask;; k = (k + 1) & mask)
        if (!st->ht[k]) {
            st->ht[k] = (uint32_t)(i + 1);
            return;
        }
}

/* Makes the index cover the set at set[from..n_set), at least twice as big as it, so
 * a lookup is a probe or two. False when out of memory. */
static bool ht_cover(struct grammar_state *st, size_t from)
{
    size_t n = st->n_set - from;
    if (st->ht_from == from && st->ht_count == n && 4 * (n + 1) <= st->ht_cap * 2)
        return true; /* the usual case: the same set, one more stack since the last call */
    size_t cap = st->ht_cap ? st->ht_cap : 64;
    while (cap < 4 * (n + 1))
        cap *= 2;
    if (cap != st->ht_cap) {
        uint32_t *t = realloc(st->ht, cap * sizeof *t);
        if (!t)
            return false;
        st->ht = t;
        st->ht_cap = cap;
    }
    memset(st->ht, 0, st->ht_cap * sizeof *st->ht);
    st->ht_from = from;
    st->ht_count = n;
    for (size_t i = from; i < st->n_set; i++)
        ht_put(st, i);
    return true;
}

/* Adds stack s to the set that starts at set[from] (the top of the set stack), unless it
 * is there already. A set larger than GRAMMAR_MAX_STACKS fails the state: a grammar that
 * ambiguous would make every token cost seconds. */
static void set_add(struct grammar_state *st, size_t from, uint32_t s)
{
    if (st->oom)
        return;
    bool indexed = st->n_set - from >= SET_SCAN;
    if (!indexed) { /* small sets (nearly all of them): a scan is cheaper than an index */
        for (size_t i = from; i < st->n_set; i++)
            if (stack_eq(st, st->set[i], s))
                return;
    } else {
        if (!ht_cover(st, from)) {
            state_fail(st, GFAIL_OOM);
            return;
        }
        size_t mask = st->ht_cap - 1;
        uint32_t h = set_hash(st, s);
        for (size_t k = h & mask; st->ht[k]; k = (k + 1) & mask) {
            uint32_t x = st->set[st->ht[k] - 1];
            if (set_hash(st, x) == h && stack_eq(st, x, s))
                return;
        }
    }
    if (st->n_set - from >= GRAMMAR_MAX_STACKS) {
        state_fail(st, GFAIL_STACKS);
        return;
    }
    if (!grow((void **)&st->set, &st->cap_set, st->n_set + 1, sizeof *st->set)) {
        state_fail(st, GFAIL_OOM);
        return;
    }
    st->set[st->n_set++] = s;
    if (indexed) {
        st->ht_count++;
        ht_put(st, st->n_set - 1);
    }
}

/* Expands stack s until every top is a character set, adding the results to the set at
 * set[from..]. No left recursion means this ends. */
static void expand(struct grammar_state *st, size_t from, uint32_t s)
{
    const struct grammar *g = st->g;
    for (;;) {
        if (st->oom)
            return;
        if (s == NIL) {
            set_add(st, from, NIL);
            return;
        }
        struct gnode nd = st->a.n[s];
        const struct gel *e = &g->els[nd.pos];
        if (el_end(e->type)) {
            s = nd.next; /* this rule is done: continue below */
            continue;
        }
        if (e->type != GEL_RULE) {
            set_add(st, from, s);
            return;
        }
        uint32_t cont = nd.next;
        if (!el_end(g->els[nd.pos + 1].type))
            cont = node_new(st, nd.pos + 1, nd.next);
        uint32_t i = g->rule_start[e->a];
        for (; !st->oom; st->work++) {
            if (el_end(g->els[i].type))
                expand(st, from, cont); /* an empty alternative */
            else
                expand(st, from, node_new(st, i, cont));
            while (!el_end(g->els[i].type))
                i++;
            if (g->els[i].type == GEL_END)
                break;
            i++;
        }
        return;
    }
}

static bool set_match(const struct grammar *g, const struct gel *e, uint32_t cp)
{
    const uint32_t *r = g->ranges + 2 * (size_t)e->a;
    bool in = false;
    for (uint32_t i = 0; i < e->b && !in; i++)
        in = cp >= r[2 * i] && cp <= r[2 * i + 1];
    return e->type == GEL_SET ? in : !in;
}

/* Could some code point in [lo, hi] match e? */
static bool set_match_range(const struct grammar *g, const struct gel *e, uint32_t lo, uint32_t hi)
{
    const uint32_t *r = g->ranges + 2 * (size_t)e->a;
    for (uint32_t i = 0; i < e->b; i++) {
        if (e->type == GEL_SET && r[2 * i] <= hi && r[2 * i + 1] >= lo)
            return true;
        if (e->type == GEL_NSET && r[2 * i] <= lo && r[2 * i + 1] >= hi)
            return false;
    }
    return e->type == GEL_NSET;
}

/* Advances the set set[from..to) by code point cp into a new set at the top; returns the
 * new set's start (its end is st->n_set). */
static size_t advance(struct grammar_state *st, size_t from, size_t to, uint32_t cp)
{
    size_t start = st->n_set;
    st->work += to - from;
    if (st->work_cap && st->work > st->work_cap) {
        state_fail(st, GFAIL_WORK);
        return start;
    }
    for (size_t i = from; i < to && !st->oom; i++) {
        uint32_t s = st->set[i];
        if (s == NIL)
            continue;
        struct gnode nd = st->a.n[s];
        if (set_match(st->g, &st->g->els[nd.pos], cp))
            expand(st, start, node_new(st, nd.pos + 1, nd.next));
    }
    return start;
}

static bool viable(struct grammar_state *st, size_t from, size_t to, uint32_t lo, uint32_t hi)
{
    for (size_t i = from; i < to; i++) {
        uint32_t s = st->set[i];
        if (s != NIL && set_match_range(st->g, &st->g->els[st->a.n[s].pos], lo, hi))
            return true;
    }
    return false;
}

/* One byte: from the set [*from, *to) and UTF-8 state (*cp, *rem) to the next. Returns
 * false if the byte cannot continue; new sets are pushed on the set stack. */
static bool step_byte(struct grammar_state *st, size_t *from, size_t *to, uint32_t *cp, int *rem,
                      unsigned char b)
{
    if (*rem == 0) {
        if (b < 0x80) {
            *from = advance(st, *from, *to, b);
            *to = st->n_set;
            return *to > *from && !st->oom;
        }
        int n = (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : 0;
        if (n == 0 || b < 0xC2 || b > 0xF4)
            return false;
        *cp = n == 1 ? (b & 0x1Fu) : n == 2 ? (b & 0x0Fu) : (b & 0x07u);
        *rem = n;
        /* the code points this lead byte can start: E0 and F0 begin at U+0800 and
         * U+10000 (shorter forms are overlong), F4 ends at U+10FFFF */
        uint32_t lo = *cp << (6 * n), hi = lo | ((1u << (6 * n)) - 1);
        if (n == 2 && lo < 0x800)
            lo = 0x800;
        if (n == 3 && lo < 0x10000)
            lo = 0x10000;
        if (hi > 0x10FFFF)
            hi = 0x10FFFF;
        return viable(st, *from, *to, lo, hi);
    }
    if ((b & 0xC0) != 0x80)
        return false;
    /* the second byte rules out overlong forms, surrogates and values past U+10FFFF */
    uint32_t lead_bits = *cp;
    if (*rem == 2 && lead_bits == 0 && b < 0xA0)
        return false; /* E0 80..9F: overlong */
    if (*rem == 2 && lead_bits == 0x0D && b >= 0xA0)
        return false; /* ED A0..BF: surrogates */
    if (*rem == 3 && lead_bits == 0 && b < 0x90)
        return false; /* F0 80..8F: overlong */
    if (*rem == 3 && lead_bits == 4 && b >= 0x90)
        return false; /* F4 90..: beyond U+10FFFF */
    *cp = *cp << 6 | (b & 0x3Fu);
    if (--*rem > 0) {
        uint32_t lo = *cp << (6 * *rem), hi = lo | ((1u << (6 * *rem)) - 1);
        return viable(st, *from, *to, lo, hi);
    }
    *from = advance(st, *from, *to, *cp);
    *to = st->n_set;
    return *to > *from && !st->oom;
}

/* Makes set[from..to) the current state: copies its stacks to fresh nodes (dropping
 * everything else) so memory stays bounded by the live stacks. */
static void commit(struct grammar_state *st, size_t from, size_t to)
{
    st->b.len = 0;
    size_t n = to - from;
    for (size_t i = 0; i < n && !st->oom; i++) {
        uint32_t s = st->set[from + i];
        size_t depth = 0;
        for (uint32_t x = s; x != NIL; x = st->a.n[x].next) {
            if (!grow((void **)&st->path, &st->cap_path, depth + 1, sizeof *st->path)) {
                st->oom = true;
                break;
            }
            st->path[depth++] = st->a.n[x].pos;
        }
        uint32_t top = NIL;
        for (size_t d = depth; d-- > 0;) {
            if (!grow((void **)&st->b.n, &st->b.cap, st->b.len + 1, sizeof *st->b.n)) {
                st->oom = true;
                break;
            }
            st->b.n[st->b.len] = (struct gnode){st->path[d], top, stack_hash(&st->b, st->path[d], top)};
            top = (uint32_t)st->b.len++;
        }
        st->set[i] = top; /* i <= from + i: safe to overwrite in place */
    }
    struct arena t = st->a;
    st->a = st->b;
    st->b = t;
    st->n_set = st->n_cur = n;
    st->ht_count = SIZE_MAX; /* the nodes moved: the index is rebuilt on next use */
}

void grammar_state_reset(struct grammar_state *st)
{
    st->a.len = 0;
    st->n_set = 0;
    st->rem = 0;
    st->cp = 0;
    st->done = false;
    st->oom = false;
    st->fail = GFAIL_NONE;
    st->work = 0;
    st->ht_count = SIZE_MAX;
    uint32_t i = st->g->rule_start[st->g->root];
    for (; !st->oom;) {
        if (el_end(st->g->els[i].type))
            expand(st, 0, NIL);
        else
            expand(st, 0, node_new(st, i, NIL));
        while (!el_end(st->g->els[i].type))
            i++;
        if (st->g->els[i].type == GEL_END)
            break;
        i++;
    }
    st->n_cur = st->n_set;
    commit(st, 0, st->n_set);
}

enum kn_status grammar_state_init(struct grammar_state **out, const struct grammar *g,
                                  struct kn_err *err)
{
    struct grammar_state *st = kn_calloc(1, sizeof *st, err);
    *out = NULL;
    if (!st)
        return KN_E_NOMEM;
    st->g = g;
    grammar_state_reset(st);
    if (st->oom) {
        enum gfail why = st->fail;
        const char *msg = grammar_state_error(st);
        enum kn_status code = why == GFAIL_OOM ? KN_E_NOMEM : KN_E_LIMIT;
        kn_fail(err, code, "grammar: %s", msg);
        grammar_state_free(st);
        return code;
    }
    *out = st;
    return KN_OK;
}

void grammar_state_free(struct grammar_state *st)
{
    if (!st)
        return;
    free(st->a.n);
    free(st->b.n);
    free(st->set);
    free(st->path);
    for (size_t i = 0; i < sizeof st->mc / sizeof st->mc[0]; i++) {
        free(st->mc[i].key);
        free(st->mc[i].mask);
    }
    free(st->key);
    free(st->ht);
    free(st);
}

enum kn_status grammar_state_copy(struct grammar_state *dst, const struct grammar_state *src,
                                  struct kn_err *err)
{
    if (dst->g != src->g)
        return kn_fail(err, KN_E_ARG, "grammar: copying a state between different grammars");
    if (!grow((void **)&dst->a.n, &dst->a.cap, src->a.len, sizeof *dst->a.n) ||
        !grow((void **)&dst->set, &dst->cap_set, src->n_cur, sizeof *dst->set))
        return kn_fail(err, KN_E_NOMEM, "grammar: out of memory");
    if (src->a.len)
        memcpy(dst->a.n, src->a.n, src->a.len * sizeof *dst->a.n);
    if (src->n_cur)
        memcpy(dst->set, src->set, src->n_cur * sizeof *dst->set);
    dst->a.len = src->a.len;
    dst->n_set = dst->n_cur = src->n_cur;
    dst->cp = src->cp;
    dst->rem = src->rem;
    dst->done = src->done;
    dst->oom = src->oom;
    dst->fail = src->fail;
    dst->work = src->work;
    dst->ht_count = SIZE_MAX;
    return KN_OK;
}

bool grammar_accept_bytes(struct grammar_state *st, const char *bytes, size_t len)
{
    if (st->oom || st->done)
        return false;
    size_t from = 0, to = st->n_cur, mark_nodes = st->a.len;
    uint32_t cp = st->cp;
    int rem = st->rem;
    for (size_t i = 0; i < len; i++)
        if (!step_byte(st, &from, &to, &cp, &rem, (unsigned char)bytes[i])) {
            st->n_set = st->n_cur;
            st->a.len = mark_nodes;
            return false;
        }
    st->cp = cp;
    st->rem = rem;
    if (from != 0 || to != st->n_cur)
        commit(st, from, to);
    else
        st->n_set = st->n_cur;
    st->work = 0; /* the next token's filtering starts its budget afresh */
    return !st->oom;
}

bool grammar_is_complete(const struct grammar_state *st)
{
    if (st->rem != 0 || st->oom)
        return false;
    for (size_t i = 0; i < st->n_cur; i++)
        if (st->set[i] == NIL)
            return true;
    return false;
}

bool grammar_is_done(const struct grammar_state *st)
{
    return st->done;
}

const char *grammar_state_error(const struct grammar_state *st)
{
    switch (st->oom ? st->fail : GFAIL_NONE) {
    case GFAIL_NONE: return NULL;
    case GFAIL_STACKS:
        return "the grammar is too ambiguous: the text so far can continue in more than "
               GRAMMAR_STR(GRAMMAR_MAX_STACKS) " ways at once (GRAMMAR_MAX_STACKS); use fewer "
               "alternatives that start alike and fewer optional repetitions side by side";
    case GFAIL_WORK:
        return "the grammar needs more than " GRAMMAR_STR(GRAMMAR_WORK_PER_PIECE) " steps per "
               "vocabulary entry to filter a token (GRAMMAR_WORK_PER_PIECE); make it less "
               "ambiguous";
    default: return "out of memory";
    }
}

/* ================================================================ vocabulary trie */

struct tnode {
    uint32_t child, sibling;
    int32_t token; /* a token whose piece ends here, or -1; more in same_next */
    uint8_t byte;
};

struct grammar_vocab {
    int32_t n_vocab;
    struct tnode *t;
    uint32_t n_nodes;
    int32_t *same_next; /* n_vocab: the next token with the same piece, or -1 */
    char *bytes;        /* all pieces */
    uint64_t *off;      /* n_vocab + 1 offsets into bytes */
    int32_t eog[16];
    int n_eog;
};

struct piece_ref {
    const char *s;
    size_t len;
    int32_t id;
};

static int piece_cmp(const void *pa, const void *pb)
{
    const struct piece_ref *a = pa, *b = pb;
    size_t m = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, m);
    if (c)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static bool is_eog(const struct grammar_vocab *gv, int32_t id)
{
    for (int i = 0; i < gv->n_eog; i++)
        if (gv->eog[i] == id)
            return true;
    return false;
}

enum kn_status grammar_vocab_init(struct grammar_vocab **out, int32_t n_vocab,
                                  const char *(*piece)(const void *pctx, int32_t id, size_t *len),
                                  const void *pctx, const int32_t *eog, int n_eog,
                                  struct kn_err *err)
{
    *out = NULL;
    if (n_vocab <= 0 || n_eog < 0 || n_eog > 16)
        return kn_fail(err, KN_E_ARG, "grammar: bad vocabulary (%d tokens, %d end ids)", n_vocab,
                       n_eog);
    struct grammar_vocab *gv = kn_calloc(1, sizeof *gv, err);
    if (!gv)
        return KN_E_NOMEM;
    gv->n_vocab = n_vocab;
    gv->n_eog = n_eog;
    for (int i = 0; i < n_eog; i++)
        gv->eog[i] = eog[i];
    enum kn_status status = KN_E_NOMEM;
    struct piece_ref *refs = NULL;
    uint32_t *path = NULL, *last_child = NULL;
    size_t total = 0;
    gv->off = kn_calloc((size_t)n_vocab + 1, sizeof *gv->off, err);
    gv->same_next = kn_calloc((size_t)n_vocab, sizeof *gv->same_next, err);
    refs = kn_calloc((size_t)n_vocab, sizeof *refs, err);
    if (!gv->off || !gv->same_next || !refs)
        goto out;
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len = 0;
        const char *s = piece(pctx, id, &len);
        if (!s)
            len = 0;
        gv->off[id] = total;
        total += len;
        gv->same_next[id] = -1;
    }
    gv->off[n_vocab] = total;
    gv->bytes = kn_malloc(total + 1, err);
    if (!gv->bytes)
        goto out;
    size_t nref = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len = 0;
        const char *s = piece(pctx, id, &len);
        if (!s || len != gv->off[id + 1] - gv->off[id]) {
            status = kn_fail(err, KN_E_INTERNAL, "grammar: token %d's piece changed", id);
            goto out;
        }
        memcpy(gv->bytes + gv->off[id], s, len);
        if (len > 0 && !is_eog(gv, id))
            refs[nref++] = (struct piece_ref){gv->bytes + gv->off[id], len, id};
    }
    qsort(refs, nref, sizeof *refs, piece_cmp);
    /* Build the trie from sorted pieces: a new piece shares a prefix with the previous
     * one and appends its other bytes as last children. */
    size_t maxlen = 0;
    for (size_t i = 0; i < nref; i++)
        if (refs[i].len > maxlen)
            maxlen = refs[i].len;
    size_t cap = total + 1;
    gv->t = kn_calloc(cap, sizeof *gv->t, err);
    path = kn_calloc(maxlen + 1, sizeof *path, err);
    last_child = kn_calloc(cap, sizeof *last_child, err);
    if (!gv->t || !path || !last_child)
        goto out;
    gv->t[0] = (struct tnode){NIL, NIL, -1, 0};
    last_child[0] = NIL;
    gv->n_nodes = 1;
    path[0] = 0;
    const struct piece_ref *prev = NULL;
    for (size_t i = 0; i < nref; i++) {
        const struct piece_ref *r = &refs[i];
        size_t common = 0;
        if (prev)
            while (common < prev->len && common < r->len && prev->s[common] == r->s[common])
                common++;
        for (size_t d = common; d < r->len; d++) {
            uint32_t parent = path[d], nn = gv->n_nodes++;
            gv->t[nn] = (struct tnode){NIL, NIL, -1, (uint8_t)r->s[d]};
            last_child[nn] = NIL;
            if (last_child[parent] == NIL)
                gv->t[parent].child = nn;
            else
                gv->t[last_child[parent]].sibling = nn;
            last_child[parent] = nn;
            path[d + 1] = nn;
        }
        uint32_t node = path[r->len];
        if (gv->t[node].token < 0) {
            gv->t[node].token = r->id;
        } else { /* same piece as an earlier token: chain it */
            int32_t t = gv->t[node].token;
            while (gv->same_next[t] >= 0)
                t = gv->same_next[t];
            gv->same_next[t] = r->id;
        }
        prev = r;
    }
    status = KN_OK;
out:
    free(refs);
    free(path);
    free(last_child);
    if (status != KN_OK) {
        grammar_vocab_free(gv);
        return status;
    }
    *out = gv;
    return KN_OK;
}

static const char *tok_piece_plain(const void *t, int32_t id, size_t *len)
{
    *len = 0;
    if (id >= tok_n_vocab(t))
        return "";
    return tok_piece(t, id, false, len);
}

enum kn_status grammar_vocab_from_tok(struct grammar_vocab **out, const struct tok *t,
                                      int32_t n_vocab, struct kn_err *err)
{
    int32_t eog[TOK_MAX_EOG];
    int n = tok_eog_ids(t, eog);
    return grammar_vocab_init(out, n_vocab > 0 ? n_vocab : tok_n_vocab(t), tok_piece_plain, t, eog,
                              n > 16 ? 16 : n, err);
}

void grammar_vocab_free(struct grammar_vocab *gv)
{
    if (!gv)
        return;
    free(gv->t);
    free(gv->same_next);
    free(gv->bytes);
    free(gv->off);
    free(gv);
}

int32_t grammar_vocab_n(const struct grammar_vocab *gv)
{
    return gv->n_vocab;
}

bool grammar_accept_token(struct grammar_state *st, const struct grammar_vocab *gv, int32_t id)
{
    if (id < 0 || id >= gv->n_vocab || st->done)
        return false;
    if (is_eog(gv, id)) {
        if (!grammar_is_complete(st))
            return false;
        st->done = true;
        return true;
    }
    size_t len = gv->off[id + 1] - gv->off[id];
    if (len == 0)
        return false;
    return grammar_accept_bytes(st, gv->bytes + gv->off[id], len);
}

/* The work one token's filtering may take: GRAMMAR_WORK_PER_PIECE steps per vocabulary
 * entry (a mask walks at most the whole trie), at least GRAMMAR_MIN_WORK. */
static size_t grammar_work_cap(const struct grammar_vocab *gv)
{
    size_t cap = (size_t)gv->n_vocab * GRAMMAR_WORK_PER_PIECE;
    return cap > GRAMMAR_MIN_WORK ? cap : GRAMMAR_MIN_WORK;
}

bool grammar_allows(struct grammar_state *st, const struct grammar_vocab *gv, int32_t id)
{
    if (id < 0 || id >= gv->n_vocab || st->done || st->oom)
        return false;
    if (is_eog(gv, id))
        return grammar_is_complete(st);
    size_t len = gv->off[id + 1] - gv->off[id];
    if (len == 0)
        return false;
    size_t from = 0, to = st->n_cur, mark_nodes = st->a.len;
    uint32_t cp = st->cp;
    int rem = st->rem;
    bool ok = true;
    const char *b = gv->bytes + gv->off[id];
    st->work_cap = grammar_work_cap(gv);
    for (size_t i = 0; i < len && ok; i++)
        ok = step_byte(st, &from, &to, &cp, &rem, (unsigned char)b[i]);
    st->work_cap = 0;
    st->n_set = st->n_cur;
    st->a.len = mark_nodes;
    return ok && !st->oom;
}

/* Depth-first walk under trie node tn with the set [from, to) and UTF-8 state (cp, rem). */
static void walk(struct grammar_state *st, const struct grammar_vocab *gv, uint32_t tn, size_t from,
                 size_t to, uint32_t cp, int rem, uint8_t *allowed)
{
    for (uint32_t c = gv->t[tn].child; c != NIL; c = gv->t[c].sibling) {
        size_t f = from, t = to, mark_set = st->n_set, mark_nodes = st->a.len;
        uint32_t cp2 = cp;
        int rem2 = rem;
        if (step_byte(st, &f, &t, &cp2, &rem2, gv->t[c].byte)) {
            for (int32_t id = gv->t[c].token; id >= 0; id = gv->same_next[id])
                allowed[id] = 1;
            if (gv->t[c].child != NIL) {
                bool live = rem2 > 0;
                for (size_t i = f; i < t && !live; i++)
                    live = st->set[i] != NIL;
                if (live)
                    walk(st, gv, c, f, t, cp2, rem2, allowed);
            }
        }
        st->n_set = mark_set;
        st->a.len = mark_nodes;
    }
}

/* Writes the current state's key to st->key: the UTF-8 position, then each stack's
 * element positions from the top, each stack ended by NIL. False when out of memory. */
static bool state_key(struct grammar_state *st)
{
    size_t n = 0;
    if (!grow((void **)&st->key, &st->key_cap, 3, sizeof *st->key))
        return false;
    st->key[n++] = st->cp;
    st->key[n++] = (uint32_t)st->rem;
    st->key[n++] = (uint32_t)st->n_cur;
    for (size_t i = 0; i < st->n_cur; i++) {
        for (uint32_t x = st->set[i];; x = st->a.n[x].next) {
            if (!grow((void **)&st->key, &st->key_cap, n + 1, sizeof *st->key))
                return false;
            if (x == NIL) {
                st->key[n++] = NIL;
                break;
            }
            st->key[n++] = st->a.n[x].pos;
        }
    }
    st->key_len = n;
    return true;
}

static void walk_mask(struct grammar_state *st, const struct grammar_vocab *gv, uint8_t *allowed);

void grammar_mask(struct grammar_state *st, const struct grammar_vocab *gv, uint8_t *allowed)
{
    if (st->done || st->oom) {
        memset(allowed, 0, (size_t)gv->n_vocab);
        return;
    }
    bool keyed = state_key(st);
    const size_t n_mc = sizeof st->mc / sizeof st->mc[0];
    for (size_t i = 0; keyed && i < n_mc; i++) {
        struct mask_entry *m = &st->mc[i];
        if (m->mask && m->gv == gv && m->len == st->key_len &&
            memcmp(m->key, st->key, st->key_len * sizeof *st->key) == 0) {
            memcpy(allowed, m->mask, (size_t)gv->n_vocab);
            return;
        }
    }
    walk_mask(st, gv, allowed);
    if (!keyed || st->oom)
        return;
    /* Remember it (round robin); a failed allocation only means no cache. */
    struct mask_entry *m = &st->mc[st->mc_next];
    if (m->gv != gv) {
        free(m->mask);
        m->mask = NULL;
        m->gv = NULL;
    }
    if (!m->mask)
        m->mask = malloc((size_t)gv->n_vocab);
    if (!m->mask || !grow((void **)&m->key, &m->cap, st->key_len, sizeof *m->key)) {
        free(m->mask);
        m->mask = NULL;
        m->gv = NULL;
        return;
    }
    memcpy(m->key, st->key, st->key_len * sizeof *m->key);
    m->len = st->key_len;
    memcpy(m->mask, allowed, (size_t)gv->n_vocab);
    m->gv = gv;
    st->mc_next = (st->mc_next + 1) % (int)n_mc;
}

static void walk_mask(struct grammar_state *st, const struct grammar_vocab *gv, uint8_t *allowed)
{
    memset(allowed, 0, (size_t)gv->n_vocab);
    st->work_cap = grammar_work_cap(gv);
    walk(st, gv, 0, 0, st->n_cur, st->cp, st->rem, allowed);
    st->work_cap = 0;
    if (st->oom) {
        memset(allowed, 0, (size_t)gv->n_vocab);
        return;
    }
    bool complete = grammar_is_complete(st);
    for (int i = 0; i < gv->n_eog; i++)
        if (gv->eog[i] >= 0 && gv->eog[i] < gv->n_vocab)
            allowed[gv->eog[i]] = complete;
}
