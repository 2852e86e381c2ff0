/* args.c: the shared option parser. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        printf("  %-28s %s\n", lhs, o->help);
    }
    printf("  %-28s %s\n", "-h, --help", "show this help");
}

static const struct cli_opt *find_long(const struct cli_opt *opts, const char *name, size_t len)
{
    for (const struct cli_opt *o = opts; o && o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

static const struct cli_opt *find_short(const struct cli_opt *opts, char c)
{
    for (const struct cli_opt *o = opts; o && o->name; o++)
        if (o->short_name == c)
            return o;
    return NULL;
}

static int store(const char *cmd, const struct cli_opt *o, const char *val)
{
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG:
        *(bool *)o->dest = true;
        break;
    case CLI_STR:
        *(const char **)o->dest = val;
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

int cli_parse(const char *cmd, const char *usage, int argc, char **argv,
              const struct cli_opt *opts, const char **pos, int max_pos, int *n_pos)
{
    *n_pos = 0;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == 0) {
            if (*n_pos >= max_pos) {
                fprintf(stderr, "kinetic %s: unexpected argument '%s'; see 'kinetic %s --help'\n",
                        cmd, a, cmd);
                return 2;
            }
            pos[(*n_pos)++] = a;
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
        const struct cli_opt *o;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            o = find_long(opts, name, len);
            if (eq)
                val = eq + 1;
        } else {
            o = a[2] == 0 ? find_short(opts, a[1]) : NULL;
        }
        if (!o) {
            fprintf(stderr, "kinetic %s: unknown option '%s'; see 'kinetic %s --help'\n", cmd, a,
                    cmd);
            return 2;
        }
        if (o->kind == CLI_FLAG) {
            if (val) {
                fprintf(stderr, "kinetic %s: --%s takes no value\n", cmd, o->name);
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
        int rc = store(cmd, o, val);
        if (rc)
            return rc;
    }
    return 0;
}
