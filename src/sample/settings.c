/* settings.c: the table of sampling settings (sample.h, "the settings table") and the
 * functions every surface uses through it: defaults, the range check and its message,
 * the text form (flags, /set), and JSON (requests, receipts, /save). */
#include "sample.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

/* ---------------------------------------------------------------- on predicates */

static bool on_temperature(const struct sample_params *p) { return p->temperature > 0; }
static bool on_top_k(const struct sample_params *p) { return p->top_k > 0; }
static bool on_top_p(const struct sample_params *p) { return p->top_p < 1; }
static bool on_min_p(const struct sample_params *p) { return p->min_p > 0; }
static bool on_penalties(const struct sample_params *p)
{
    return p->repeat_last_n != 0 &&
           (p->repeat_penalty != 1 || p->presence_penalty != 0 || p->frequency_penalty != 0);
}
static bool on_typical(const struct sample_params *p)
{
    return p->typical_p > 0 && p->typical_p < 1;
}
static bool on_top_n_sigma(const struct sample_params *p) { return p->top_n_sigma > 0; }
static bool on_xtc(const struct sample_params *p) { return p->xtc_probability > 0; }
static bool on_dry(const struct sample_params *p) { return p->dry_multiplier > 0; }
static bool on_mirostat(const struct sample_params *p) { return p->mirostat != 0; }
static bool on_min_keep(const struct sample_params *p) { return p->min_keep > 1; }
static bool on_bias(const struct sample_params *p) { return p->n_logit_bias > 0; }
static bool on_chain(const struct sample_params *p) { return p->n_samplers > 0; }

/* ---------------------------------------------------------------- the table */

#define OFF(f) offsetof(struct sample_params, f)
#define I32 ((double)INT32_MAX)

/* Order matters: SAMPLE_JSON_BASE writes the "always" rows in this order (the receipt
 * spec's), SAMPLE_JSON_EXTRA the others in this order (the order receipts since issue 10
 * have). */
const struct sample_setting sample_settings[] = {
    {.name = "temperature", .key = "temperature", .flag = "temp",
     .type = SAMPLE_T_FLOAT, .offset = OFF(temperature), .def = 0.8, .lo = 0, .hi = 100,
     .note = "0: greedy", .always = true, .on = on_temperature, .metavar = "F",
     .help = "sampling temperature"},
    {.name = "top_k", .key = "top_k", .flag = "top-k",
     .type = SAMPLE_T_INT, .offset = OFF(top_k), .def = 50, .lo = 0, .hi = I32,
     .note = "0: off", .always = true, .on = on_top_k, .metavar = "N",
     .help = "keep the N most likely tokens"},
    {.name = "top_p", .key = "top_p", .flag = "top-p",
     .type = SAMPLE_T_FLOAT, .offset = OFF(top_p), .def = 0.95, .lo = 0, .hi = 1,
     .note = "1: off", .always = true, .on = on_top_p, .metavar = "F",
     .help = "nucleus: keep the smallest set with probability >= F"},
    {.name = "min_p", .key = "min_p", .flag = "min-p",
     .type = SAMPLE_T_FLOAT, .offset = OFF(min_p), .def = 0.05, .lo = 0, .hi = 1,
     .note = "0: off", .always = true, .on = on_min_p, .metavar = "F",
     .help = "drop tokens below F times the top probability"},
    {.name = "repeat_penalty", .key = "repeat_penalty", .flag = "repeat-penalty",
     .type = SAMPLE_T_FLOAT, .offset = OFF(repeat_penalty), .def = 1.1, .lo = 0, .hi = 100,
     .lo_open = true,
     .note = "1: off", .always = true, .on = on_penalties, .metavar = "F",
     .help = "penalise recent tokens (positive logits divided by F, negative ones multiplied)"},
    {.name = "presence_penalty", .key = "presence_penalty", .flag = "presence-penalty",
     .type = SAMPLE_T_FLOAT, .offset = OFF(presence_penalty), .def = 0, .lo = -100, .hi = 100,
     .note = "0: off", .always = true, .on = on_penalties, .metavar = "F",
     .help = "subtract F from recent tokens' logits"},
    {.name = "frequency_penalty", .key = "frequency_penalty", .flag = "frequency-penalty",
     .type = SAMPLE_T_FLOAT, .offset = OFF(frequency_penalty), .def = 0, .lo = -100, .hi = 100,
     .note = "0: off", .always = true, .on = on_penalties, .metavar = "F",
     .help = "subtract F times their count"},
    {.name = "repeat_last_n", .key = "repeat_last_n", .flag = "repeat-last-n",
     .type = SAMPLE_T_INT, .offset = OFF(repeat_last_n), .def = 64, .lo = -1, .hi = I32,
     .note = "-1: all, 0: off", .always = true, .on = on_penalties, .metavar = "N",
     .help = "tokens the penalties look back at"},
    {.name = "seed", .key = "seed", .flag = "seed", .short_flag = 's',
     .type = SAMPLE_T_SEED, .offset = OFF(seed),
     .always = true, .metavar = "N",
     .help = "random seed (run and chat without one draw a fresh one)"},
    {.name = "n_predict", .key = "max_tokens", .flag = "n-predict", .short_flag = 'n',
     .alias = {"max_completion_tokens", "n_predict"},
     .type = SAMPLE_T_INT64, .offset = OFF(n_predict), .def = -1, .lo = -1, .hi = 1048576,
     .no_zero = true,
     .note = "-1: until the end or the context limit", .always = true, .metavar = "N",
     .help = "generate at most N tokens"},
    {.name = "typical_p", .key = "typical_p", .flag = "typical",
     .type = SAMPLE_T_FLOAT, .offset = OFF(typical_p), .def = 1, .lo = 0, .hi = 1,
     .note = "1: off", .on = on_typical, .metavar = "F",
     .help = "locally typical sampling"},
    {.name = "top_n_sigma", .key = "top_n_sigma", .flag = "top-nsigma",
     .type = SAMPLE_T_FLOAT, .offset = OFF(top_n_sigma), .def = 0, .lo = -100, .hi = 100,
     .note = "<= 0: off", .on = on_top_n_sigma, .metavar = "F",
     .help = "keep logits within F standard deviations of the top"},
    {.name = "xtc_probability", .key = "xtc_probability", .flag = "xtc-probability",
     .type = SAMPLE_T_FLOAT, .offset = OFF(xtc_probability), .def = 0, .lo = 0, .hi = 1,
     .note = "0: off", .on = on_xtc, .metavar = "F",
     .help = "XTC: probability of removing the top choices"},
    {.name = "xtc_threshold", .key = "xtc_threshold", .flag = "xtc-threshold",
     .type = SAMPLE_T_FLOAT, .offset = OFF(xtc_threshold), .def = 0.1, .lo = 0, .hi = 1,
     .note = "> 0.5: off", .on = on_xtc, .metavar = "F",
     .help = "XTC: probability a choice needs to be removable"},
    {.name = "dry_multiplier", .key = "dry_multiplier", .flag = "dry-multiplier",
     .type = SAMPLE_T_FLOAT, .offset = OFF(dry_multiplier), .def = 0, .lo = 0, .hi = 100,
     .note = "0: off", .on = on_dry, .metavar = "F",
     .help = "DRY repetition penalty strength"},
    {.name = "dry_base", .key = "dry_base", .flag = "dry-base",
     .type = SAMPLE_T_FLOAT, .offset = OFF(dry_base), .def = 1.75, .lo = 0, .hi = 100,
     .note = "< 1: off", .on = on_dry, .metavar = "F",
     .help = "DRY base"},
    {.name = "dry_allowed_length", .key = "dry_allowed_length", .flag = "dry-allowed-length",
     .type = SAMPLE_T_INT, .offset = OFF(dry_allowed_length), .def = 2, .lo = 0, .hi = I32,
     .on = on_dry, .metavar = "N",
     .help = "DRY: repeats this long are free"},
    {.name = "dry_penalty_last_n", .key = "dry_penalty_last_n", .flag = "dry-penalty-last-n",
     .type = SAMPLE_T_INT, .offset = OFF(dry_penalty_last_n), .def = -1, .lo = -1, .hi = I32,
     .note = "-1: all, 0: off", .on = on_dry, .metavar = "N",
     .help = "DRY: tokens to look back at"},
    {.name = "dry_sequence_breakers", .key = "dry_sequence_breakers",
     .flag = "dry-sequence-breakers",
     .type = SAMPLE_T_BREAKERS, .offset = OFF(dry_breakers),
     .on = on_dry, .metavar = "JSON",
     .help = "DRY: strings that end a repeat, a JSON array such as '[\"\\n\", \":\"]', or none"},
    {.name = "mirostat", .key = "mirostat", .flag = "mirostat",
     .type = SAMPLE_T_INT, .offset = OFF(mirostat), .def = 0, .lo = 0, .hi = 2,
     .note = "0: off", .on = on_mirostat, .metavar = "N",
     .help = "Mirostat version 1 or 2"},
    {.name = "mirostat_tau", .key = "mirostat_tau", .flag = "mirostat-ent",
     .type = SAMPLE_T_FLOAT, .offset = OFF(mirostat_tau), .def = 5, .lo = 0, .hi = 100,
     .on = on_mirostat, .metavar = "F",
     .help = "Mirostat target entropy tau"},
    {.name = "mirostat_eta", .key = "mirostat_eta", .flag = "mirostat-lr",
     .type = SAMPLE_T_FLOAT, .offset = OFF(mirostat_eta), .def = 0.1, .lo = 0, .hi = 1,
     .on = on_mirostat, .metavar = "F",
     .help = "Mirostat learning rate eta"},
    {.name = "min_keep", .key = "min_keep", .flag = "min-keep",
     .type = SAMPLE_T_INT, .offset = OFF(min_keep), .def = 0, .lo = 0, .hi = I32,
     .on = on_min_keep, .metavar = "N",
     .help = "samplers keep at least N candidates"},
    {.name = "logit_bias", .key = "logit_bias", .flag = "logit-bias",
     .type = SAMPLE_T_BIAS, .offset = OFF(logit_bias),
     .on = on_bias, .metavar = "LIST",
     .help = "add to token logits: ID+B,ID-B,...; ID-inf bans a token; none: no bias"},
    {.name = "samplers", .key = "samplers", .flag = "samplers",
     .type = SAMPLE_T_CHAIN, .offset = OFF(samplers),
     .on = on_chain, .metavar = "LIST",
     .help = "sampler order, e.g. \"penalties;top_k;top_p;min_p;temperature\"; default: "
             "llama.cpp's order"},
};
const size_t sample_n_settings = sizeof sample_settings / sizeof sample_settings[0];
static_assert(sizeof sample_settings / sizeof sample_settings[0] <= SAMPLE_MAX_SETTINGS,
              "raise SAMPLE_MAX_SETTINGS");

static const char *const default_breakers[] = {"\n", ":", "\"", "*"};

#define FIELD(p, s, T) ((T *)((char *)(p) + (s)->offset))
#define CFIELD(p, s, T) ((const T *)((const char *)(p) + (s)->offset))

void sample_params_default(struct sample_params *p)
{
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        switch (s->type) {
        case SAMPLE_T_FLOAT: *FIELD(p, s, float) = (float)s->def; break;
        case SAMPLE_T_INT: *FIELD(p, s, int32_t) = (int32_t)s->def; break;
        case SAMPLE_T_INT64: *FIELD(p, s, int64_t) = (int64_t)s->def; break;
        case SAMPLE_T_SEED: *FIELD(p, s, uint64_t) = (uint64_t)s->def; break;
        case SAMPLE_T_BREAKERS:
            p->n_dry_breakers = 4;
            for (int k = 0; k < 4; k++)
                strcpy(p->dry_breakers[k], default_breakers[k]);
            break;
        case SAMPLE_T_BIAS:  /* none */
        case SAMPLE_T_CHAIN: /* the default chain */
            break;
        }
    }
}

const struct sample_setting *sample_setting_find(const char *name)
{
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        if (strcmp(name, s->name) == 0 || strcmp(name, s->key) == 0 ||
            strcmp(name, s->flag) == 0 || (s->alias[0] && strcmp(name, s->alias[0]) == 0) ||
            (s->alias[1] && strcmp(name, s->alias[1]) == 0))
            return s;
    }
    return NULL;
}

bool sample_setting_on(const struct sample_setting *s, const struct sample_params *p)
{
    return !s->on || s->on(p);
}

/* ---------------------------------------------------------------- ranges */

void sample_setting_range(const struct sample_setting *s, char *buf, size_t n)
{
    char lo[32], hi[32];
    if (s->type == SAMPLE_T_SEED) {
        snprintf(lo, sizeof lo, "0");
        snprintf(hi, sizeof hi, "%lld", (long long)SAMPLE_SEED_MAX);
    } else {
        snprintf(lo, sizeof lo, "%.10g", s->no_zero ? 1.0 : s->lo);
        snprintf(hi, sizeof hi, "%.10g", s->hi);
    }
    const char *form = s->no_zero ? "-1 or between %s and %s"
                       : s->lo_open ? "above %s and at most %s"
                                    : "between %s and %s";
    int k = snprintf(buf, n, form, lo, hi);
    if (s->note && k >= 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " (%s)", s->note);
}

/* The setting as messages name it: "temperature", "n_predict (max_tokens)". */
static const char *label(const struct sample_setting *s, char *buf, size_t n)
{
    if (strcmp(s->name, s->key) == 0)
        return s->name;
    snprintf(buf, n, "%s (%s)", s->name, s->key);
    return buf;
}

/* The one range message: "temperature must be between 0 and 100 (0: greedy), not 150". */
static enum kn_status range_fail(const struct sample_setting *s, const char *shown,
                                 struct kn_err *err)
{
    char range[160], lb[80];
    sample_setting_range(s, range, sizeof range);
    return kn_fail(err, KN_E_ARG, "%s must be %s, not %s", label(s, lb, sizeof lb), range, shown);
}

static bool float_ok(const struct sample_setting *s, double v)
{
    return !isnan(v) && (s->lo_open ? v > s->lo : v >= s->lo) && v <= s->hi;
}

static bool int_ok(const struct sample_setting *s, int64_t v)
{
    if (s->type == SAMPLE_T_SEED)
        return v >= 0;
    if (s->no_zero && v == 0)
        return false;
    return (double)v >= s->lo && (double)v <= s->hi;
}

static void store_int(const struct sample_setting *s, struct sample_params *p, int64_t v)
{
    if (s->type == SAMPLE_T_INT)
        *FIELD(p, s, int32_t) = (int32_t)v;
    else if (s->type == SAMPLE_T_INT64)
        *FIELD(p, s, int64_t) = v;
    else
        *FIELD(p, s, uint64_t) = (uint64_t)v;
}

static enum kn_status set_float(const struct sample_setting *s, double v, struct sample_params *p,
                                struct kn_err *err)
{
    if (!float_ok(s, v)) {
        char shown[40];
        snprintf(shown, sizeof shown, "%g", v);
        return range_fail(s, shown, err);
    }
    *FIELD(p, s, float) = (float)v;
    return KN_OK;
}

static enum kn_status set_int(const struct sample_setting *s, int64_t v, struct sample_params *p,
                              struct kn_err *err)
{
    if (!int_ok(s, v)) {
        char shown[40];
        snprintf(shown, sizeof shown, "%lld", (long long)v);
        return range_fail(s, shown, err);
    }
    store_int(s, p, v);
    return KN_OK;
}

/* ---------------------------------------------------------------- list settings */

static const char *const chain_names =
    "penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature";

static enum kn_status bias_push(struct sample_bias *dst, int32_t *n, int64_t id, double b,
                                struct kn_err *err)
{
    if (*n >= SAMPLE_MAX_BIAS)
        return kn_fail(err, KN_E_ARG, "logit_bias has more than %d entries", SAMPLE_MAX_BIAS);
    if (id < 0 || id > INT32_MAX || isnan(b) || b > 100)
        return kn_fail(err, KN_E_ARG,
                       "logit_bias entry %d: the token id must be >= 0 and the bias a number "
                       "up to 100 (or -inf), not %lld: %g",
                       *n, (long long)id, b);
    dst[*n] = (struct sample_bias){(int32_t)id, (float)b};
    (*n)++;
    return KN_OK;
}

/* llama.cpp's --logit-bias form: ID+B,ID-B,ID-inf separated by commas; "none": no entry. */
static enum kn_status bias_parse(const char *text, struct sample_params *p, struct kn_err *err)
{
    struct sample_bias tmp[SAMPLE_MAX_BIAS];
    int32_t n = 0;
    if (strcmp(text, "none") != 0)
        for (const char *q = text; *q;) {
            char *end;
            errno = 0;
            long long id = strtoll(q, &end, 10);
            if (end == q || errno || (*end != '+' && *end != '-'))
                return kn_fail(err, KN_E_ARG,
                               "logit_bias wants ID+BIAS or ID-BIAS entries separated by commas, "
                               "e.g. 15043+1,2-inf; '%s' is not",
                               text);
            double b;
            if (strncmp(end, "-inf", 4) == 0) {
                b = -INFINITY;
                end += 4;
            } else {
                char *e2;
                b = strtod(end, &e2);
                if (e2 == end)
                    return kn_fail(err, KN_E_ARG, "logit_bias: no bias after token %lld", id);
                end = e2;
            }
            enum kn_status st = bias_push(tmp, &n, id, b, err);
            if (st != KN_OK)
                return st;
            if (*end == ',')
                end++;
            else if (*end)
                return kn_fail(err, KN_E_ARG, "logit_bias: unexpected '%s'", end);
            q = end;
        }
    memcpy(p->logit_bias, tmp, (size_t)n * sizeof tmp[0]);
    p->n_logit_bias = n;
    return KN_OK;
}

static enum kn_status bias_json(const struct json_value *v, struct sample_params *p,
                                struct kn_err *err)
{
    size_t n = json_len(v);
    if ((!json_is(v, JSON_ARRAY) && !json_is(v, JSON_OBJECT)) || n > SAMPLE_MAX_BIAS)
        return kn_fail(err, KN_E_FORMAT,
                       "logit_bias must be [[id, bias], ...] or {\"id\": bias, ...} with at "
                       "most %d entries",
                       SAMPLE_MAX_BIAS);
    struct sample_bias tmp[SAMPLE_MAX_BIAS];
    int32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        double b;
        bool ok;
        if (json_is(v, JSON_ARRAY)) {
            const struct json_value *pair = json_at(v, i);
            ok = json_is(pair, JSON_ARRAY) && json_len(pair) == 2 &&
                 json_int(json_at(pair, 0), &id) && json_double(json_at(pair, 1), &b);
        } else {
            const struct json_member *m = &v->u.object.items[i];
            char *end;
            id = strtoll(m->key, &end, 10);
            ok = m->key[0] >= '0' && m->key[0] <= '9' && *end == 0 &&
                 (json_double(m->value, &b) ||
                  (json_is(m->value, JSON_BOOL) && !m->value->u.boolean && (b = -100, true)));
        }
        if (!ok || !(b >= -1e30 && b <= 1e30))
            return kn_fail(err, KN_E_FORMAT, "logit_bias entry %zu must be a token id and a number",
                           i);
        enum kn_status st = bias_push(tmp, &k, id, b, err);
        if (st != KN_OK)
            return st;
    }
    memcpy(p->logit_bias, tmp, (size_t)k * sizeof tmp[0]);
    p->n_logit_bias = k;
    return KN_OK;
}

static enum kn_status breakers_json(const struct json_value *v, struct sample_params *p,
                                    struct kn_err *err)
{
    if (!json_is(v, JSON_ARRAY) || json_len(v) > SAMPLE_MAX_BREAKERS)
        return kn_fail(err, KN_E_FORMAT,
                       "dry_sequence_breakers must be an array of at most %d strings",
                       SAMPLE_MAX_BREAKERS);
    char tmp[SAMPLE_MAX_BREAKERS][SAMPLE_MAX_BREAKER_LEN + 1];
    for (size_t i = 0; i < json_len(v); i++) {
        const struct json_value *e = json_at(v, i);
        const char *str = json_str(e);
        if (!str || e->u.string.len == 0 || e->u.string.len > SAMPLE_MAX_BREAKER_LEN ||
            strlen(str) != e->u.string.len)
            return kn_fail(err, KN_E_FORMAT,
                           "dry_sequence_breakers[%zu] must be a string of 1 to %d bytes", i,
                           SAMPLE_MAX_BREAKER_LEN);
        memcpy(tmp[i], str, e->u.string.len + 1);
    }
    memcpy(p->dry_breakers, tmp, json_len(v) * sizeof tmp[0]);
    p->n_dry_breakers = (int32_t)json_len(v);
    return KN_OK;
}

static enum kn_status chain_json(const struct json_value *v, struct sample_params *p,
                                 struct kn_err *err)
{
    if (json_is(v, JSON_STRING) && strcmp(json_str(v), "default") == 0) {
        p->n_samplers = 0;
        return KN_OK;
    }
    if (json_is(v, JSON_STRING))
        return sample_chain_parse(p, json_str(v), err);
    if (!json_is(v, JSON_ARRAY) || json_len(v) == 0 || json_len(v) > SAMPLE_MAX_CHAIN)
        return kn_fail(err, KN_E_FORMAT, "samplers must be 1 to %d names", SAMPLE_MAX_CHAIN);
    uint8_t tmp[SAMPLE_MAX_CHAIN];
    for (size_t i = 0; i < json_len(v); i++) {
        const char *name = json_str(json_at(v, i));
        int step;
        if (!name || !sample_step_parse(name, strlen(name), &step))
            return kn_fail(err, KN_E_FORMAT, "samplers[%zu] is not a sampler name (%s)", i,
                           chain_names);
        tmp[i] = (uint8_t)step;
    }
    memcpy(p->samplers, tmp, json_len(v));
    p->n_samplers = (int32_t)json_len(v);
    return KN_OK;
}

/* ---------------------------------------------------------------- text form */

enum kn_status sample_setting_parse(const struct sample_setting *s, const char *text,
                                    struct sample_params *p, struct kn_err *err)
{
    char *end, lb[80];
    switch (s->type) {
    case SAMPLE_T_FLOAT: {
        errno = 0;
        double v = strtod(text, &end);
        while (*end == ' ' || *end == '\t')
            end++;
        if (end == text || *end || isnan(v))
            return kn_fail(err, KN_E_ARG, "%s must be a number, not '%s'",
                           label(s, lb, sizeof lb), text);
        return set_float(s, v, p, err);
    }
    case SAMPLE_T_INT:
    case SAMPLE_T_INT64:
    case SAMPLE_T_SEED: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        bool range = errno == ERANGE;
        while (*end == ' ' || *end == '\t')
            end++;
        if (end == text || *end || (errno && !range))
            return kn_fail(err, KN_E_ARG, "%s must be an integer, not '%s'",
                           label(s, lb, sizeof lb), text);
        if (range)
            return range_fail(s, text, err);
        return set_int(s, v, p, err);
    }
    case SAMPLE_T_BIAS:
        return bias_parse(text, p, err);
    case SAMPLE_T_CHAIN:
        if (strcmp(text, "default") == 0) {
            p->n_samplers = 0;
            return KN_OK;
        }
        return sample_chain_parse(p, text, err);
    case SAMPLE_T_BREAKERS: {
        if (strcmp(text, "none") == 0) {
            p->n_dry_breakers = 0;
            return KN_OK;
        }
        struct json_value *v = NULL;
        struct kn_err jerr = {0};
        if (json_parse(text, strlen(text), NULL, &v, &jerr) != KN_OK) {
            json_free(v);
            if (jerr.status == KN_E_NOMEM)
                return kn_fail(err, KN_E_NOMEM, "out of memory");
            return kn_fail(err, KN_E_ARG,
                           "dry_sequence_breakers must be a JSON array of strings, e.g. "
                           "'[\"\\n\", \":\"]', or none: %s", jerr.msg);
        }
        enum kn_status st = breakers_json(v, p, err);
        json_free(v);
        if (st == KN_E_FORMAT)
            err->status = st = KN_E_ARG;
        return st;
    }
    }
    return kn_fail(err, KN_E_ARG, "%s cannot be set", s->name);
}

/* The shortest decimal that reads back as f. */
static void float_text(float f, char *buf, size_t n)
{
    if (isinf(f)) {
        snprintf(buf, n, f > 0 ? "inf" : "-inf");
        return;
    }
    if (f == floorf(f) && fabsf(f) < 1e9f) { /* "100", not "1e+02" */
        snprintf(buf, n, "%.0f", (double)f);
        return;
    }
    for (int d = 1; d <= 9; d++) {
        snprintf(buf, n, "%.*g", d, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
}

bool sample_setting_format(const struct sample_setting *s, const struct sample_params *p,
                           struct kn_buf *b)
{
    char t[64];
    switch (s->type) {
    case SAMPLE_T_FLOAT: float_text(*CFIELD(p, s, float), t, sizeof t); break;
    case SAMPLE_T_INT: snprintf(t, sizeof t, "%d", *CFIELD(p, s, int32_t)); break;
    case SAMPLE_T_INT64: snprintf(t, sizeof t, "%lld", (long long)*CFIELD(p, s, int64_t)); break;
    case SAMPLE_T_SEED:
        snprintf(t, sizeof t, "%llu", (unsigned long long)*CFIELD(p, s, uint64_t));
        break;
    case SAMPLE_T_BIAS:
        if (p->n_logit_bias == 0)
            return kn_buf_add(b, "none", 4);
        for (int32_t i = 0; i < p->n_logit_bias; i++) {
            char f[40];
            float bias = p->logit_bias[i].bias;
            float_text(bias, f, sizeof f);
            snprintf(t, sizeof t, "%s%d%s%s", i ? "," : "", p->logit_bias[i].id,
                     bias >= 0 || isnan(bias) ? "+" : "", f);
            if (!kn_buf_add(b, t, strlen(t)))
                return false;
        }
        return true;
    case SAMPLE_T_CHAIN:
        if (p->n_samplers == 0)
            return kn_buf_add(b, "default", 7);
        for (int32_t i = 0; i < p->n_samplers; i++) {
            const char *name = sample_step_name(p->samplers[i]);
            if ((i && !kn_buf_add(b, ";", 1)) || !kn_buf_add(b, name ? name : "?",
                                                             strlen(name ? name : "?")))
                return false;
        }
        return true;
    case SAMPLE_T_BREAKERS: {
        if (p->n_dry_breakers == 0)
            return kn_buf_add(b, "none", 4);
        struct json_value *a = json_new_array();
        bool ok = a != NULL;
        for (int32_t i = 0; ok && i < p->n_dry_breakers; i++)
            ok = json_array_push(a, json_new_string(p->dry_breakers[i]), NULL) == KN_OK;
        char *text = NULL;
        size_t len = 0;
        ok = ok && json_write(a, JSON_COMPACT, &text, &len, NULL) == KN_OK &&
             kn_buf_add(b, text, len);
        free(text);
        json_free(a);
        return ok;
    }
    }
    return kn_buf_add(b, t, strlen(t));
}

/* ---------------------------------------------------------------- checks */

enum kn_status sample_params_check(const struct sample_params *p, struct kn_err *err)
{
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        struct sample_params scratch;
        enum kn_status st = KN_OK;
        switch (s->type) {
        case SAMPLE_T_FLOAT: st = set_float(s, *CFIELD(p, s, float), &scratch, err); break;
        case SAMPLE_T_INT: st = set_int(s, *CFIELD(p, s, int32_t), &scratch, err); break;
        case SAMPLE_T_INT64: st = set_int(s, *CFIELD(p, s, int64_t), &scratch, err); break;
        case SAMPLE_T_SEED:
            if (p->seed > (uint64_t)SAMPLE_SEED_MAX) {
                char shown[32];
                snprintf(shown, sizeof shown, "%llu", (unsigned long long)p->seed);
                st = range_fail(s, shown, err);
            }
            break;
        case SAMPLE_T_BREAKERS:
            if (p->n_dry_breakers < 0 || p->n_dry_breakers > SAMPLE_MAX_BREAKERS)
                return kn_fail(err, KN_E_ARG, "at most %d DRY sequence breakers, not %d",
                               SAMPLE_MAX_BREAKERS, p->n_dry_breakers);
            for (int k = 0; k < p->n_dry_breakers; k++) {
                size_t len = strnlen(p->dry_breakers[k], SAMPLE_MAX_BREAKER_LEN + 1);
                if (len == 0 || len > SAMPLE_MAX_BREAKER_LEN)
                    return kn_fail(err, KN_E_ARG,
                                   "DRY sequence breaker %d must have 1 to %d bytes, not %zu", k,
                                   SAMPLE_MAX_BREAKER_LEN, len);
            }
            break;
        case SAMPLE_T_BIAS: {
            if (p->n_logit_bias < 0 || p->n_logit_bias > SAMPLE_MAX_BIAS)
                return kn_fail(err, KN_E_ARG, "logit_bias has %d entries (at most %d)",
                               p->n_logit_bias, SAMPLE_MAX_BIAS);
            int32_t n = 0;
            for (int32_t k = 0; k < p->n_logit_bias && st == KN_OK; k++)
                st = bias_push(scratch.logit_bias, &n, p->logit_bias[k].id,
                               p->logit_bias[k].bias, err);
            break;
        }
        case SAMPLE_T_CHAIN:
            if (p->n_samplers < 0 || p->n_samplers > SAMPLE_MAX_CHAIN)
                return kn_fail(err, KN_E_ARG, "the sampler chain has %d steps (at most %d)",
                               p->n_samplers, SAMPLE_MAX_CHAIN);
            for (int k = 0; k < p->n_samplers; k++)
                if (p->samplers[k] >= SAMPLE_N_STEPS)
                    return kn_fail(err, KN_E_ARG, "sampler chain step %d is unknown (%d)", k,
                                   p->samplers[k]);
            break;
        }
        if (st != KN_OK)
            return st;
    }
    return KN_OK;
}

enum kn_status sample_params_check_vocab(const struct sample_params *p, int64_t n_vocab,
                                         struct kn_err *err)
{
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].id >= n_vocab)
            return kn_fail(err, KN_E_ARG,
                           "logit_bias names token %d, outside the vocabulary of %lld tokens "
                           "(0 to %lld)",
                           p->logit_bias[i].id, (long long)n_vocab, (long long)n_vocab - 1);
    return KN_OK;
}

/* ---------------------------------------------------------------- JSON */

enum kn_status sample_setting_read(const struct sample_setting *s, const struct json_value *v,
                                   struct sample_params *p, struct kn_err *err)
{
    enum kn_status st;
    char lb[80];
    if (json_is(v, JSON_NULL) && s->type == SAMPLE_T_INT64) {
        store_int(s, p, -1); /* no limit */
        return KN_OK;
    }
    switch (s->type) {
    case SAMPLE_T_FLOAT: {
        double d;
        if (!json_double(v, &d))
            return kn_fail(err, KN_E_FORMAT, "%s must be a number", label(s, lb, sizeof lb));
        st = set_float(s, d, p, err);
        break;
    }
    case SAMPLE_T_INT:
    case SAMPLE_T_INT64:
    case SAMPLE_T_SEED: {
        int64_t i;
        double d;
        if (json_int(v, &i)) {
            st = set_int(s, i, p, err);
        } else if (json_double(v, &d) && d == floor(d) && fabs(d) < 9.2e18) {
            st = set_int(s, (int64_t)d, p, err); /* 2.0 */
        } else if (json_double(v, &d) && d == floor(d) && isfinite(d)) {
            char shown[48]; /* a whole number beyond int64 */
            snprintf(shown, sizeof shown, "%.0f", d);
            st = range_fail(s, shown, err);
        } else {
            return kn_fail(err, KN_E_FORMAT, "%s must be an integer", label(s, lb, sizeof lb));
        }
        break;
    }
    case SAMPLE_T_BREAKERS: return breakers_json(v, p, err);
    case SAMPLE_T_BIAS: st = bias_json(v, p, err); break;
    case SAMPLE_T_CHAIN: st = chain_json(v, p, err); break;
    default: return kn_fail(err, KN_E_FORMAT, "%s cannot be read", s->name);
    }
    if (st == KN_E_ARG)
        err->status = st = KN_E_FORMAT;
    return st;
}

static struct json_value *setting_json(const struct sample_setting *s,
                                       const struct sample_params *p)
{
    switch (s->type) {
    case SAMPLE_T_FLOAT: return json_new_float(*CFIELD(p, s, float));
    case SAMPLE_T_INT: return json_new_int(*CFIELD(p, s, int32_t));
    case SAMPLE_T_INT64: {
        int64_t v = *CFIELD(p, s, int64_t);
        return v < 0 ? json_new_null() : json_new_int(v);
    }
    case SAMPLE_T_SEED: return json_new_int((int64_t)*CFIELD(p, s, uint64_t));
    case SAMPLE_T_BREAKERS: {
        struct json_value *a = json_new_array();
        for (int i = 0; a && i < p->n_dry_breakers; i++)
            if (json_array_push(a, json_new_string(p->dry_breakers[i]), NULL) != KN_OK) {
                json_free(a);
                return NULL;
            }
        return a;
    }
    case SAMPLE_T_BIAS: {
        struct json_value *a = json_new_array();
        for (int32_t i = 0; a && i < p->n_logit_bias; i++) {
            float b = p->logit_bias[i].bias <= -100.0f ? -100.0f : p->logit_bias[i].bias;
            struct json_value *pair = json_new_array();
            if (!pair || json_array_push(pair, json_new_int(p->logit_bias[i].id), NULL) != KN_OK ||
                json_array_push(pair, json_new_float(b), NULL) != KN_OK ||
                json_array_push(a, pair, NULL) != KN_OK) {
                json_free(a);
                return NULL;
            }
        }
        return a;
    }
    case SAMPLE_T_CHAIN: {
        if (p->n_samplers == 0) /* the default chain: only /save writes it */
            return json_new_string("default");
        struct json_value *a = json_new_array();
        for (int i = 0; a && i < p->n_samplers; i++) {
            const char *name = sample_step_name(p->samplers[i]);
            if (json_array_push(a, json_new_string(name ? name : "?"), NULL) != KN_OK) {
                json_free(a);
                return NULL;
            }
        }
        return a;
    }
    }
    return NULL;
}

enum kn_status sample_params_json_write(const struct sample_params *p, struct json_value *obj,
                                        unsigned what, struct kn_err *err)
{
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        bool want = (what & SAMPLE_JSON_ALL) ||
                    ((what & SAMPLE_JSON_BASE) && s->always) ||
                    ((what & SAMPLE_JSON_EXTRA) && !s->always && sample_setting_on(s, p));
        if (!want)
            continue;
        struct json_value *v = setting_json(s, p);
        if (!v)
            return kn_fail(err, KN_E_NOMEM, "out of memory writing sampling settings");
        enum kn_status st = json_object_set(obj, s->key, v, err);
        if (st != KN_OK)
            return st;
    }
    return KN_OK;
}

/* Whether k names row s in a JSON object read with how: its key, or with
 * SAMPLE_READ_ALIASES also its aliases and its name. */
static bool json_key_of(const struct sample_setting *s, const char *k, unsigned how)
{
    if (strcmp(k, s->key) == 0)
        return true;
    if (!(how & SAMPLE_READ_ALIASES))
        return false;
    return strcmp(k, s->name) == 0 || (s->alias[0] && strcmp(k, s->alias[0]) == 0) ||
           (s->alias[1] && strcmp(k, s->alias[1]) == 0);
}

const struct json_value *sample_setting_lookup(const struct sample_setting *s,
                                               const struct json_value *obj, unsigned how,
                                               const char **key)
{
    const char *keys[4] = {s->key, NULL, NULL, NULL};
    if (how & SAMPLE_READ_ALIASES) {
        keys[0] = s->alias[0];
        keys[1] = s->alias[1];
        keys[2] = s->key;
        keys[3] = strcmp(s->name, s->key) != 0 ? s->name : NULL;
    }
    for (int k = 0; k < 4; k++) {
        const struct json_value *v = keys[k] ? json_get(obj, keys[k]) : NULL;
        if (v && (!(how & SAMPLE_READ_ALIASES) || !json_is(v, JSON_NULL) ||
                  s->type == SAMPLE_T_INT64)) {
            if (key)
                *key = keys[k];
            return v;
        }
    }
    return NULL;
}

enum kn_status sample_params_json_read(const struct json_value *obj, struct sample_params *p,
                                       unsigned how, const char *const *extra, struct kn_err *err)
{
    if (how & SAMPLE_READ_STRICT)
        for (size_t i = 0; i < json_len(obj); i++) {
            const char *k = obj->u.object.items[i].key;
            bool known = false;
            for (size_t r = 0; r < sample_n_settings && !known; r++)
                known = json_key_of(&sample_settings[r], k, how);
            for (const char *const *q = extra; q && *q && !known; q++)
                known = strcmp(*q, k) == 0;
            if (!known)
                return kn_fail(err, KN_E_FORMAT, "unknown setting '%s'", k);
        }
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        const struct json_value *v = sample_setting_lookup(s, obj, how, NULL);
        if (!v) {
            if ((how & SAMPLE_READ_BASE) && s->always)
                return kn_fail(err, KN_E_FORMAT, "%s is missing", s->key);
            continue;
        }
        enum kn_status st = sample_setting_read(s, v, p, err);
        if (st != KN_OK)
            return st;
    }
    return KN_OK;
}
