/* verify.c: receipts from runs, and verify-receipt: token hashes, then the signature, then
 * the model file, then a rerun on one sequence with every speed feature off. */
#include "receipt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/session.h"
#include "../grammar/grammar.h"
#include "../kernels/kernels.h"
#include "../model/model.h"
#include "../text/text.h"
#include "../token/tok.h"
#include "buildid.h"
#include "hashcache.h"

/* The CPU's model name from /proc/cpuinfo, or "unknown CPU". */
static char *cpu_name(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *v = strchr(line, ':');
        if (!v)
            break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t n = strcspn(v, "\n");
        while (n && v[n - 1] == ' ')
            n--;
        v[n] = 0;
        fclose(f);
        return strdup(v);
    }
    if (f)
        fclose(f);
    return strdup("unknown CPU");
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

enum kn_status receipt_from_run(struct receipt *r, const struct session_record *run,
                                struct kn_err *err)
{
    memset(r, 0, sizeof *r);
    snprintf(r->version, sizeof r->version, "%s", KN_VERSION);
    snprintf(r->build, sizeof r->build, "%s", kn_build_id());
    snprintf(r->numerics, sizeof r->numerics, "%s", KN_NUMERICS);
    struct stat st;
    if (stat(run->model_path, &st) != 0)
        return kn_fail(err, KN_E_IO, "%s: cannot stat: %s", run->model_path, strerror(errno));
    r->model_size = (uint64_t)st.st_size;
    enum kn_status s = hashcache_model_blake3(run->model_path, r->model_blake3, err);
    if (s != KN_OK)
        return s;
    snprintf(r->device_class, sizeof r->device_class, "%s", kern_device_class(kern_isa_active()));
    snprintf(r->cache_type, sizeof r->cache_type, "%s", run->cache_type);
    r->ctx_size = run->ctx_size;
    r->sampling = *run->sampling;
    r->max_tokens = run->max_tokens;
    snprintf(r->finish, sizeof r->finish, "%s", run->finish);
    r->model_file = strdup(base_name(run->model_path));
    r->model_path = strdup(run->model_path);
    r->device_name = cpu_name();
    r->input = json_clone(run->input);
    r->prompt_ids = malloc(((size_t)run->n_prompt + 1) * sizeof(int32_t));
    r->output_ids = malloc(((size_t)run->n_output + 1) * sizeof(int32_t));
    r->stop = calloc((size_t)run->n_stop + 1, sizeof(char *));
    if (run->grammar && !(r->grammar = strdup(run->grammar))) {
        receipt_free(r);
        return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    }
    if (run->response_format && !(r->response_format = json_clone(run->response_format))) {
        receipt_free(r);
        return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    }
    size_t tl;
    r->text = json_utf8_sanitize(run->text ? run->text : "", run->text ? run->text_len : 0, &tl);
    if (!r->model_file || !r->model_path || !r->device_name || !r->input || !r->prompt_ids ||
        !r->output_ids || !r->stop || !r->text) {
        receipt_free(r);
        return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    }
    memcpy(r->prompt_ids, run->prompt, (size_t)run->n_prompt * sizeof(int32_t));
    r->n_prompt = run->n_prompt;
    memcpy(r->output_ids, run->output, (size_t)run->n_output * sizeof(int32_t));
    r->n_output = run->n_output;
    for (int64_t i = 0; i < run->n_stop; i++) {
        if (!(r->stop[i] = strdup(run->stop[i]))) {
            receipt_free(r);
            return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
        }
        r->n_stop = i + 1;
    }
    return KN_OK;
}

/* ================================================================ verify-receipt */

static bool class_to_isa(const char *cls, enum kern_isa *out)
{
    for (int i = 0; i < KERN_ISA_COUNT; i++)
        if (strcmp(cls, kern_device_class((enum kern_isa)i)) == 0) {
            *out = (enum kern_isa)i;
            return true;
        }
    return false;
}

/* A token's text for reports: the piece with control characters escaped, quoted. */
static void piece_quoted(const struct tok *tk, int32_t id, char *buf, size_t cap)
{
    size_t len = 0;
    const char *p = tok_piece(tk, id, true, &len);
    size_t o = 0;
    buf[o++] = '"';
    for (size_t i = 0; p && i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\%c", c);
        else if (c < 0x20)
            o += (size_t)snprintf(buf + o, cap - o, c == '\n' ? "\\n" : "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o++] = '"';
    buf[o] = 0;
}

/* Locates the model: --model, else the receipt's path as given, else next to the receipt. */
static char *find_model(const char *receipt_path, const struct receipt *r, const char *given)
{
    if (given)
        return strdup(given);
    struct stat st;
    if (stat(r->model_path, &st) == 0)
        return strdup(r->model_path);
    const char *slash = strrchr(receipt_path, '/');
    if (slash && r->model_file[0] && !strchr(r->model_file, '/')) {
        size_t n = (size_t)(slash - receipt_path) + 1 + strlen(r->model_file) + 1;
        char *p = malloc(n);
        if (p) {
            snprintf(p, n, "%.*s/%s", (int)(slash - receipt_path), receipt_path, r->model_file);
            if (stat(p, &st) == 0)
                return p;
            free(p);
        }
    }
    return strdup(r->model_path);
}

struct rerun_cmp {
    const struct receipt *r;
    int64_t first_diff; /* -1 while identical */
};

/* Stops the rerun at the first token that differs from the receipt's. */
static bool compare_token(void *ctx, int32_t id, int64_t i)
{
    struct rerun_cmp *c = ctx;
    if (i >= c->r->n_output || c->r->output_ids[i] != id) {
        c->first_diff = i;
        return false;
    }
    return true;
}

int receipt_verify(const char *path, const struct receipt_verify_opts *o, FILE *out)
{
    struct kn_err err = {0};
    struct json_value *doc = NULL;
    struct receipt r = {0};
    struct session s = {0};
    bool s_ok = false;
    char *model_path = NULL;
    struct grammar *gram = NULL;
    char *rf_gbnf = NULL;
    int rc = RECEIPT_EXIT_ERROR;

    struct json_limits lim = {.max_bytes = 64u << 20, .max_depth = 32};
    enum kn_status st = json_parse_file(path, &lim, &doc, &err);
    if (st != KN_OK) {
        fprintf(out, "receipt: %s\n", err.msg);
        return st == KN_E_IO ? RECEIPT_EXIT_ERROR : RECEIPT_EXIT_MALFORMED;
    }
    if (receipt_from_json(doc, &r, &err) != KN_OK) {
        fprintf(out, "%s\n", err.msg);
        json_free(doc);
        return RECEIPT_EXIT_MALFORMED;
    }
    fprintf(out,
            "receipt: %s, %lld prompt and %lld output tokens, seed %llu, made on %s by Kinetic %s "
            "(build %s)\n",
            r.model_file, (long long)r.n_prompt, (long long)r.n_output,
            (unsigned long long)r.sampling.seed, r.device_class, r.version, r.build);

    /* 1. token hashes */
    if (receipt_check_hashes(doc, &r, &err) != KN_OK) {
        fprintf(out, "tokens: %s: the receipt was changed or damaged\n", err.msg);
        rc = RECEIPT_EXIT_HASHES;
        goto done;
    }
    /* 2. signature: nothing else in the receipt is trusted before it is checked */
    switch (receipt_check_signature(doc, &r)) {
    case RECEIPT_SIG_VALID:
        if (o->public_key && strcmp(o->public_key, r.public_key) != 0) {
            fprintf(out, "signature: valid, but made with public key %s, not %s\n", r.public_key,
                    o->public_key);
            rc = RECEIPT_EXIT_SIGNATURE;
            goto done;
        }
        fprintf(out, "signature: valid, public key %s\n", r.public_key);
        break;
    case RECEIPT_SIG_INVALID:
        fprintf(out, "signature: INVALID for public key %s: the receipt was changed after signing\n",
                r.public_key);
        rc = RECEIPT_EXIT_SIGNATURE;
        goto done;
    case RECEIPT_SIG_ABSENT:
        if (o->public_key) {
            fprintf(out, "signature: absent, but --public-key asks for one\n");
            rc = RECEIPT_EXIT_SIGNATURE;
            goto done;
        }
        fprintf(out, "signature: absent (the receipt is not signed)\n");
        break;
    }

    /* The grammar must compile, and agree with the response_format it came from. */
    if (r.response_format) {
        if (grammar_from_response_format(r.response_format, &rf_gbnf, &err) != KN_OK) {
            fprintf(out, "receipt: sampling.%s\n", err.msg);
            rc = RECEIPT_EXIT_MALFORMED;
            goto done;
        }
        if ((rf_gbnf == NULL) != (r.grammar == NULL) ||
            (rf_gbnf && strcmp(rf_gbnf, r.grammar) != 0)) {
            fprintf(out, "receipt: MISMATCH: sampling.grammar is not the grammar "
                         "sampling.response_format gives; the receipt was changed\n");
            rc = RECEIPT_EXIT_MALFORMED;
            goto done;
        }
    }
    if (r.grammar && grammar_parse(r.grammar, strlen(r.grammar), NULL, &gram, &err) != KN_OK) {
        fprintf(out, "receipt: sampling.grammar: %s\n", err.msg);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }

    /* 3. the model file */
    model_path = find_model(path, &r, o->model);
    if (!model_path) {
        fprintf(out, "model: out of memory\n");
        goto done;
    }
    struct stat sb;
    if (stat(model_path, &sb) != 0) {
        fprintf(out, "model: %s: %s; point --model at the receipt's model (%s, BLAKE3 %.16s)\n",
                model_path, strerror(errno), r.model_file, r.model_blake3);
        rc = RECEIPT_EXIT_MODEL;
        goto done;
    }
    char hex[65];
    if (hashcache_model_blake3(model_path, hex, &err) != KN_OK) {
        fprintf(out, "model: %s\n", err.msg);
        rc = RECEIPT_EXIT_MODEL;
        goto done;
    }
    if (strcmp(hex, r.model_blake3) != 0) {
        fprintf(out,
                "model: %s is not the receipt's model: its BLAKE3 is %.16s, the receipt's (%s) is "
                "%.16s\n",
                model_path, hex, r.model_file, r.model_blake3);
        rc = RECEIPT_EXIT_MODEL;
        goto done;
    }
    fprintf(out, "model: %s matches (BLAKE3 %.16s)\n", base_name(model_path), hex);

    /* 4. the rerun: one sequence, recorded settings, every speed feature off */
    enum kern_isa isa = kern_isa_active();
    if (o->device && !class_to_isa(o->device, &isa)) {
        fprintf(out, "rerun: unknown device class '%s' (this build has cpu-x86_64-scalar, "
                     "cpu-x86_64-avx2, cpu-x86_64-avx512)\n", o->device);
        rc = RECEIPT_EXIT_USAGE;
        goto done;
    }
    if (kern_isa_set(isa, &err) != KN_OK) {
        fprintf(out, "rerun: %s\n", err.msg);
        goto done;
    }
    if (r.n_prompt == 0 || r.n_prompt >= r.ctx_size) {
        fprintf(out, "rerun: the receipt's %lld prompt tokens do not fit its context of %lld\n",
                (long long)r.n_prompt, (long long)r.ctx_size);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }
    enum model_kv_type kv;
    if (!model_kv_type_from_name(r.cache_type, &kv)) {
        fprintf(out, "rerun: the receipt's cache type '%s' is not one this build has\n",
                r.cache_type);
        goto done;
    }
    /* The session of kinetic run with the receipt's load and sampling settings; the
     * threads never change a token. */
    struct session_opts so;
    session_opts_default(&so);
    so.model_path = model_path;
    so.name = "kinetic verify-receipt";
    so.no_template = true; /* the prompt is the receipt's tokens */
    so.ctx_size = r.ctx_size;
    so.threads = o->threads > 0 ? o->threads : 0;
    so.kv_type = r.cache_type;
    so.no_draft = true;
    so.sp = r.sampling;
    so.sp.n_predict = r.max_tokens;
    so.grammar = gram;
    so.gbnf = r.grammar;
    so.response_format = r.response_format;
    if (session_open(&s, &so, &err) != KN_OK) {
        fprintf(out, "rerun: %s\n", err.msg);
        goto done;
    }
    s_ok = true;
    for (int64_t i = 0; i < r.n_prompt; i++)
        if (r.prompt_ids[i] >= s.n_vocab) {
            fprintf(out, "rerun: prompt token %lld (id %d) is outside the model's vocabulary\n",
                    (long long)i, r.prompt_ids[i]);
            rc = RECEIPT_EXIT_MALFORMED;
            goto done;
        }
    if (r.n_stop > TEXT_MAX_STOPS ||
        session_set_stop(&s, (const char *const *)r.stop, (int)r.n_stop, &err) != KN_OK) {
        fprintf(out, "receipt: sampling.stop: %s\n",
                r.n_stop > TEXT_MAX_STOPS ? "too many stop strings" : err.msg);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }
    struct rerun_cmp cmp = {&r, -1};
    struct session_gen gen;
    if (session_generate(&s, &s.o.sp, r.prompt_ids, r.n_prompt, compare_token,
                         &cmp, &gen, &err) != KN_OK) {
        fprintf(out, "rerun: %s\n", err.msg);
        goto done;
    }
    const int32_t *ids = gen.ids;
    int64_t n_ids = gen.n;
    enum engine_finish fin = gen.finish;
    const char *cls = kern_device_class(isa);
    if (cmp.first_diff < 0 && n_ids == r.n_output && strcmp(engine_finish_name(fin), r.finish) == 0) {
        char th[65];
        receipt_tokens_blake3(ids, n_ids, th);
        fprintf(out, "rerun: identical, %lld of %lld output tokens on %s (BLAKE3 %.16s)\n",
                (long long)n_ids, (long long)r.n_output, cls, th);
        rc = RECEIPT_EXIT_IDENTICAL;
        goto done;
    }
    /* The first difference: a different token, or one run ended where the other went on. */
    int64_t i = cmp.first_diff >= 0 ? cmp.first_diff : n_ids;
    char a[96], b[96];
    if (i < r.n_output)
        piece_quoted(s.tk, r.output_ids[i], a, sizeof a);
    if (cmp.first_diff >= 0)
        piece_quoted(s.tk, ids[i], b, sizeof b);
    if (i < r.n_output && cmp.first_diff >= 0)
        fprintf(out, "rerun: DIFFERS at output token %lld of %lld: the receipt has %d %s, the rerun %d %s\n",
                (long long)i, (long long)r.n_output, r.output_ids[i], a, ids[i], b);
    else if (i < r.n_output)
        fprintf(out, "rerun: DIFFERS at output token %lld of %lld: the receipt has %d %s, the rerun ended (%s)\n",
                (long long)i, (long long)r.n_output, r.output_ids[i], a, engine_finish_name(fin));
    else if (cmp.first_diff >= 0)
        fprintf(out, "rerun: DIFFERS at output token %lld: the receipt ended (%s), the rerun went on with %d %s\n",
                (long long)i, r.finish, ids[i], b);
    else
        fprintf(out, "rerun: DIFFERS: both give %lld tokens, but the receipt ended with \"%s\" and the rerun with \"%s\"\n",
                (long long)i, r.finish, engine_finish_name(fin));
    /* What differs between the runs, and whether a difference is then expected. */
    bool same_class = strcmp(cls, r.device_class) == 0, same_build = strcmp(kn_build_id(), r.build) == 0,
         same_numerics = strcmp(KN_NUMERICS, r.numerics) == 0;
    if (same_build && same_numerics)
        fprintf(out, "runs: the same build %s and numerics %s%s%s: this difference is a bug; please report it\n",
                r.build, r.numerics, same_class ? "" : ", device class ",
                same_class ? "" : cls);
    else
        fprintf(out, "runs: receipt on %s, build %s, numerics %s; rerun on %s, build %s, numerics %s: "
                     "bits are promised only for the same build and numerics\n",
                r.device_class, r.build, r.numerics, cls, kn_build_id(), KN_NUMERICS);
    rc = RECEIPT_EXIT_DIFFERS;

done:
    if (s_ok)
        session_close(&s);
    grammar_free(gram);
    free(rf_gbnf);
    free(model_path);
    receipt_free(&r);
    json_free(doc);
    return rc;
}
