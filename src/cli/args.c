/* args.c: the shared option parser. Each command's options are one table (struct cli_opt):
 * the long name, a short letter, other spellings (llama.cpp's), the kind and destination,
 * and the help; parsing, help, and the did-you-mean of an unknown option all walk it. */
#include "cli.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ spellings */

/* Calls fn on each spelling of o, dashes included ("--gpu-layers", "-ngl", ...), until it
 * returns true; returns whether one did. */
static bool each_spelling(const struct cli_opt *o, bool (*fn)(void *ctx, const char *s, size_t n),
                          void *ctx)
{
    char buf[80];
    int n = snprintf(buf, sizeof buf, "--%s", o->name);
    assert(n > 0 && (size_t)n < sizeof buf && "option names are short");
    if (fn(ctx, buf, (size_t)n))
        return true;
    if (o->short_name) {
        char sh[3] = {'-', o->short_name, 0};
        if (fn(ctx, sh, 2))
            return true;
    }
    for (const char *a = o->aliases; a && *a;) {
        size_t len = strcspn(a, " ");
        if (len && fn(ctx, a, len))
            return true;
        a += len;
        a += strspn(a, " ");
    }
    return false;
}

struct match {
    const char *s;
    size_t n;
};

static bool same_spelling(void *ctx, const char *s, size_t n)
{
    const struct match *m = ctx;
    return n == m->n && memcmp(s, m->s, n) == 0;
}

/* The option spelled as the first n bytes of s ("--ctx-size", "-c", "-ngl"). */
static const struct cli_opt *find_opt(const struct cli_opt *opts, const char *s, size_t n)
{
    struct match m = {s, n};
    for (const struct cli_opt *o = opts; o && o->name; o++)
        if (each_spelling(o, same_spelling, &m))
            return o;
    return NULL;
}

/* The optimal-string-alignment distance of a and b (edits: insert, delete, substitute, or
 * swap two neighbours), or max + 1 when it is larger than max. */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb, size_t max)
{
    enum { W = 80 };
    if (na >= W || nb >= W)
        return max + 1;
    size_t d[3][W]; /* rows i-2, i-1, i of the table, rotating */
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t *cur = d[i % 3], *prev = d[(i - 1) % 3], *prev2 = d[(i + 1) % 3];
        cur[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t v = prev[j - 1] + cost;
            if (prev[j] + 1 < v)
                v = prev[j] + 1;
            if (cur[j - 1] + 1 < v)
                v = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < v)
                v = prev2[j - 2] + 1;
            cur[j] = v;
        }
    }
    return d[na % 3][nb] > max ? max + 1 : d[na % 3][nb];
}

struct nearest {
    const char *typed;
    size_t n_typed;
    size_t best;       /* distance of the best so far */
    char spelling[80]; /* it */
};

static bool consider(void *ctx, const char *s, size_t n)
{
    struct nearest *nr = ctx;
    size_t d = edit_distance(nr->typed, nr->n_typed, s, n, nr->best);
    if (d < nr->best && n < sizeof nr->spelling) {
        nr->best = d;
        memcpy(nr->spelling, s, n);
        nr->spelling[n] = 0;
    }
    return false;
}

/* Starts a search for the word nearest to typed: a word is near when it is at most 1 edit
 * in 4 characters away, and at least one. A mistyped single letter ("-x") is near every
 * other letter, so it gets none (false). */
static bool nearest_start(struct nearest *nr, const char *typed, size_t n)
{
    nr->typed = typed;
    nr->n_typed = n;
    nr->best = 1 + n / 4 + 1; /* one more than the largest distance accepted */
    nr->spelling[0] = 0;
    return n > 2;
}

const char *cli_nearest_word(const char *typed, const char *const *words, size_t n_words,
                             char *buf, size_t size)
{
    struct nearest nr;
    if (!nearest_start(&nr, typed, strlen(typed)))
        return NULL;
    for (size_t i = 0; i < n_words; i++)
        consider(&nr, words[i], strlen(words[i]));
    if (!nr.spelling[0] || strlen(nr.spelling) >= size)
        return NULL;
    memcpy(buf, nr.spelling, strlen(nr.spelling) + 1);
    return buf;
}

/* The spelling of any option (and of --help) nearest to typed, or NULL when none is near
 * (nearest_start's rule). */
static const char *nearest_spelling(const struct cli_opt *opts, const char *typed, size_t n,
                                    struct nearest *nr)
{
    if (!nearest_start(nr, typed, n))
        return NULL;
    for (const struct cli_opt *o = opts; o && o->name; o++)
        each_spelling(o, consider, nr);
    consider(nr, "--help", 6);
    return nr->spelling[0] ? nr->spelling : NULL;
}

/* ================================================================ help */

struct alias_list {
    char *buf;
    size_t cap, len;
    bool first; /* the first spelling, the long name, is in the left column already */
};

static bool add_alias(void *ctx, const char *s, size_t n)
{
    struct alias_list *l = ctx;
    if (l->first) {
        l->first = false;
        return false;
    }
    if (n == 2 && s[0] == '-' && s[1] != '-')
        return false; /* the short letter, also in the left column */
    int w = snprintf(l->buf + l->len, l->cap - l->len, "%s%.*s", l->len ? ", " : "", (int)n, s);
    if (w > 0 && (size_t)w < l->cap - l->len)
        l->len += (size_t)w;
    return false;
}

void cli_print_help(const char *cmd, const char *usage, const struct cli_opt *opts)
{
    printf("usage: kinetic %s %s\n", cmd, usage);
    if (!opts || !opts[0].name)
        return;
    printf("\noptions:\n");
    for (const struct cli_opt *o = opts; o->name; o++) {
        char lhs[64];
        if (o->short_name)
            snprintf(lhs, sizeof lhs, "-%c, --%s%s%s", o->short_name, o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        else
            snprintf(lhs, sizeof lhs, "    --%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        char also[160];
        struct alias_list l = {also, sizeof also, 0, true};
        also[0] = 0;
        each_spelling(o, add_alias, &l);
        printf("  %-28s %s%s%s%s\n", lhs, o->help, l.len ? " (also " : "", also, l.len ? ")" : "");
    }
    printf("  %-28s %s\n", "-h, --help", "show this help");
}

/* ================================================================ parsing */

static int store(const char *cmd, const struct cli_opt *o, const char *val)
{
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG:
        *(bool *)o->dest = true;
        break;
    case CLI_STR:
    case CLI_POS:
        *(const char **)o->dest = val;
        break;
    case CLI_NOTE:
        break;
    case CLI_STRS: {
        struct cli_strs *l = o->dest;
        if (l->n >= CLI_MAX_STRS) {
            fprintf(stderr, "kinetic %s: --%s may be given at most %d times\n", cmd, o->name,
                    CLI_MAX_STRS);
            return 2;
        }
        l->v[l->n++] = val;
        break;
    }
    case CLI_INT: {
        long long v = strtoll(val, &end, 10);
        if (errno || end == val || *end) {
            fprintf(stderr, "kinetic %s: --%s wants an integer, not '%s'\n", cmd, o->name, val);
            return 2;
        }
        *(int64_t *)o->dest = v;
        break;
    }
    case CLI_FLOAT: {
        double v = strtod(val, &end);
        if (errno || end == val || *end || v != v) {
            fprintf(stderr, "kinetic %s: --%s wants a number, not '%s'\n", cmd, o->name, val);
            return 2;
        }
        *(double *)o->dest = v;
        break;
    }
    }
    if (o->seen)
        *o->seen = true;
    return 0;
}

/* Whether o's value is optional: its arg lists the words it may take, "[on|off|auto]". */
static bool optional_value(const struct cli_opt *o)
{
    return o->arg && o->arg[0] == '[';
}

/* Whether word is one of the words of an optional value's arg. */
static bool optional_word(const struct cli_opt *o, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = o->arg + 1; *p && *p != ']';) {
        size_t len = strcspn(p, "|]");
        if (len == n && memcmp(p, word, n) == 0)
            return true;
        p += len;
        if (*p == '|')
            p++;
    }
    return false;
}

/* Places the loose positionals in the slots no CLI_POS flag filled, in order; checks that
 * every slot up to the last filled one is filled. */
static int place_positionals(const char *cmd, const struct cli_opt *opts, const char **loose,
                             int n_loose, const bool *given, const char **pos, int max_pos,
                             int *n_pos)
{
    int j = 0;
    for (int k = 0; k < max_pos && j < n_loose; k++)
        if (!given[k])
            pos[k] = loose[j++];
    if (j < n_loose) {
        fprintf(stderr, "kinetic %s: unexpected argument '%s'; see 'kinetic %s --help'\n", cmd,
                loose[j], cmd);
        return 2;
    }
    /* Filled: the slots given by flags and the first n_loose free ones. */
    bool filled[CLI_MAX_POS] = {0};
    int last = -1;
    j = 0;
    for (int k = 0; k < max_pos; k++) {
        filled[k] = given[k];
        if (!given[k] && j < n_loose) {
            filled[k] = true;
            j++;
        }
        if (filled[k])
            last = k;
    }
    for (int k = 0; k < last; k++)
        if (!filled[k]) {
            const struct cli_opt *by = NULL;
            for (const struct cli_opt *o = opts; o->name && !by; o++)
                if (o->kind == CLI_POS && (const char **)o->dest == &pos[k])
                    by = o;
            if (by)
                fprintf(stderr, "kinetic %s: no %s given: give it as argument %d or with --%s; "
                        "see 'kinetic %s --help'\n", cmd, by->arg, k + 1, by->name, cmd);
            else
                fprintf(stderr, "kinetic %s: argument %d is missing; see 'kinetic %s --help'\n",
                        cmd, k + 1, cmd);
            return 2;
        }
    *n_pos = last + 1;
    return 0;
}

int cli_parse(const char *cmd, const char *usage, int argc, char **argv,
              const struct cli_opt *opts, const char **pos, int max_pos, int *n_pos)
{
    assert(max_pos >= 0 && max_pos <= CLI_MAX_POS);
    *n_pos = 0;
    const char *loose[CLI_MAX_POS + 1];
    int n_loose = 0;
    bool given[CLI_MAX_POS] = {0};
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == 0) {
            if (n_loose >= max_pos) {
                fprintf(stderr, "kinetic %s: unexpected argument '%s'; see 'kinetic %s --help'\n",
                        cmd, a, cmd);
                return 2;
            }
            loose[n_loose++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_print_help(cmd, usage, opts);
            return 1;
        }
        /* --name=value; a single dash takes no "=" (-ngl, -c) */
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const char *val = eq ? eq + 1 : NULL;
        const struct cli_opt *o = find_opt(opts, a, len);
        if (!o) {
            struct nearest nr;
            const char *near = nearest_spelling(opts, a, len, &nr);
            if (near)
                fprintf(stderr, "kinetic %s: unknown option '%.*s'; did you mean '%s'? (see "
                        "'kinetic %s --help')\n", cmd, (int)len, a, near, cmd);
            else
                fprintf(stderr, "kinetic %s: unknown option '%.*s'; see 'kinetic %s --help'\n",
                        cmd, (int)len, a, cmd);
            return 2;
        }
        if (o->kind == CLI_FLAG || (o->kind == CLI_NOTE && !o->arg)) {
            if (val) {
                fprintf(stderr, "kinetic %s: --%s takes no value\n", cmd, o->name);
                return 2;
            }
        } else if (optional_value(o)) {
            if (!val && i + 1 < argc && optional_word(o, argv[i + 1]))
                val = argv[++i];
            if (val && !optional_word(o, val)) {
                fprintf(stderr, "kinetic %s: --%s takes %s, not '%s'\n", cmd, o->name, o->arg,
                        val);
                return 2;
            }
        } else if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kinetic %s: %s needs a value (%s); see 'kinetic %s --help'\n",
                        cmd, a, o->arg ? o->arg : "VALUE", cmd);
                return 2;
            }
            val = argv[++i];
        }
        if (o->kind == CLI_NOTE)
            fprintf(stderr, "kinetic %s: note: %.*s %s\n", cmd, (int)len, a, o->help);
        if (o->kind == CLI_POS) {
            ptrdiff_t k = (const char **)o->dest - pos;
            assert(pos && k >= 0 && k < max_pos && "a CLI_POS flag points into pos");
            given[k] = true;
        }
        int rc = store(cmd, o, val);
        if (rc)
            return rc;
    }
    return place_positionals(cmd, opts, loose, n_loose, given, pos, max_pos, n_pos);
}
