/* cli_sampling.c: the sampling flags of `kinetic run` and `kinetic chat`, made from the
 * settings table (sample.h) so that both commands take every setting, with the table's
 * defaults, ranges, messages and help. */
#include "cli.h"

#include "base/base.h"
#include "sample/sample.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static_assert(SAMPLE_MAX_SETTINGS <= 32, "struct cli_sampling holds 32 rows");

/* "sampling temperature: between 0 and 100 (0: greedy); default 0.8" (the seed has no
 * default: run and chat draw a fresh one; the chain's default is said by its help). */
static void row_help(const struct sample_setting *s, char *buf, size_t n)
{
    char range[160] = "";
    bool numeric = s->type == SAMPLE_T_FLOAT || s->type == SAMPLE_T_INT ||
                   s->type == SAMPLE_T_INT64 || s->type == SAMPLE_T_SEED;
    if (numeric)
        sample_setting_range(s, range, sizeof range);
    struct sample_params d;
    sample_params_default(&d);
    struct kn_buf b = {0};
    bool have_def = s->type != SAMPLE_T_SEED && s->type != SAMPLE_T_CHAIN &&
                    sample_setting_format(s, &d, &b);
    snprintf(buf, n, "%s%s%s%s%s", s->help, numeric ? ": " : "", range,
             have_def ? "; default " : "", have_def ? b.p : "");
    free(b.p);
}

int cli_parse_sampling(const char *cmd, const char *usage, const char *more_help, int argc,
                       char **argv, const struct cli_opt *own, struct cli_sampling *cs,
                       struct sample_params *p, const char **pos, int max_pos, int *n_pos)
{
    struct cli_opt opts[SAMPLE_MAX_SETTINGS + 64];
    const int cap = (int)(sizeof opts / sizeof opts[0]);
    int k = 0;
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        cs->text[i] = NULL;
        row_help(s, cs->help[i], sizeof cs->help[i]);
        opts[k++] = (struct cli_opt){s->flag, s->short_flag, CLI_STR, &cs->text[i], s->metavar,
                                     cs->help[i], NULL, NULL};
    }
    for (const struct cli_opt *o = own; o->name; o++) {
        assert(k < cap - 1 && "raise the option capacity");
        opts[k++] = *o;
    }
    opts[k] = (struct cli_opt)CLI_OPT_END;
    int rc = cli_parse(cmd, usage, argc, argv, opts, pos, max_pos, n_pos);
    if (rc == 1) {
        fputs(more_help, stdout);
        return -1;
    }
    if (rc)
        return rc;
    if (*n_pos < 1) {
        fprintf(stderr, "kinetic %s: give a model file; see 'kinetic %s --help'\n", cmd, cmd);
        return 2;
    }
    sample_params_default(p);
    for (size_t i = 0; i < sample_n_settings; i++) {
        struct kn_err err = {0};
        if (cs->text[i] && sample_setting_parse(&sample_settings[i], cs->text[i], p, &err) != KN_OK) {
            fprintf(stderr, "kinetic %s: %s\n", cmd, err.msg);
            return err.status == KN_E_NOMEM ? 1 : 2;
        }
    }
    return 0;
}

bool cli_sampling_given(const struct cli_sampling *cs, const char *name)
{
    for (size_t i = 0; i < sample_n_settings; i++)
        if (strcmp(sample_settings[i].name, name) == 0)
            return cs->text[i] != NULL;
    return false;
}
