/* fuzz_jinja.c: libFuzzer target for the Jinja engine. The input is a template, optionally
 * followed by a NUL byte and a JSON context (otherwise a fixed chat context is used). Beyond
 * not crashing or leaking, it checks that every failure says what kind it is, and that a
 * successful render is deterministic (a second render gives the same bytes). Limits are
 * small so that loops and recursion end quickly. */
#include "jinja/jinja.h"

#include <stdlib.h>
#include <string.h>

static const char k_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": "
    "\"h\\u00e9llo\"}, {\"role\": \"assistant\", \"content\": \"x\", \"tool_calls\": [{\"function\": "
    "{\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}}]}], \"tools\": null, "
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"n\": 3}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    size_t tlen = size;
    const char *ctx_text = k_ctx;
    size_t ctx_len = sizeof k_ctx - 1;
    const char *nul = memchr(data, 0, size);
    if (nul) {
        tlen = (size_t)(nul - src);
        ctx_text = nul + 1;
        ctx_len = size - tlen - 1;
    }
    struct kn_err err;
    struct json_value *ctx = NULL;
    struct json_limits jl = {.max_bytes = 1 << 16, .max_depth = 16, .max_string = 1 << 12};
    if (json_parse(ctx_text, ctx_len, &jl, &ctx, &err) != KN_OK || ctx->type != JSON_OBJECT) {
        json_free(ctx);
        ctx = NULL;
    }
    struct jinja_options opts = {
        .limits = {.max_source = 1 << 16, .max_depth = 48, .max_iterations = 20000,
                   .max_output = 1 << 18, .max_memory = 32u << 20, .max_work = 1u << 22},
        .fixed_time = true,
        .now_unix = 1764374400,
    };
    struct jinja_template *t = NULL;
    struct jinja_diag diag;
    if (jinja_parse(&t, src, tlen, &opts.limits, &diag, &err) != KN_OK) {
        if (err.status != KN_E_NOMEM && diag.kind == JINJA_ERR_NONE)
            abort(); /* a parse failure must say what kind it is */
        json_free(ctx);
        return 0;
    }
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    enum kn_status s1 = jinja_render(t, ctx, &opts, &a, &na, &diag, &err);
    if (s1 != KN_OK && s1 != KN_E_NOMEM && diag.kind == JINJA_ERR_NONE)
        abort();
    if (s1 == KN_OK) {
        if (!a || a[na] != 0)
            abort();
        if (jinja_render(t, ctx, &opts, &b, &nb, &diag, &err) != KN_OK || nb != na ||
            memcmp(a, b, na) != 0)
            abort(); /* renders are deterministic */
    }
    free(a);
    free(b);
    jinja_free(t);
    json_free(ctx);
    return 0;
}
