/* fuzz_server.c: the server's request path on fuzzed bodies: the strict JSON reader with
 * the server's limits, OpenAI request validation for both endpoints, prompt preparation
 * (chat rendering, tokenization) with the toy backend, and the error body. Nothing may
 * crash, leak or read out of bounds, whatever the body. */
#include "server/srv_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct srv s;
    static struct srv_backend b;
    static bool ready;
    if (!ready) {
        struct kn_err err = {0};
        if (srv_toy_backend(&b, 2, 256, 0, &err) != KN_OK)
            abort();
        s.b = &b;
        s.cfg.max_body = 1 << 20;
        s.cfg.max_depth = 32;
        snprintf(s.model_id, sizeof s.model_id, "toy");
        ready = true;
    }
    struct json_limits lim = {s.cfg.max_body, (size_t)s.cfg.max_depth, s.cfg.max_body, 0};
    struct json_value *body = NULL;
    struct kn_err err = {0};
    if (json_parse((const char *)data, size, &lim, &body, &err) != KN_OK)
        return 0;
    for (int kind = 0; kind < 2; kind++) {
        struct srv_request r;
        struct srv_error e = {0};
        if (api_parse_completion(&s, (enum srv_kind)kind, body, &r, &e) == 0 &&
            api_prepare_prompt(&s, &r, &e) == 0) {
            if (r.n_ids == 0 || (int64_t)r.n_ids >= b.n_ctx)
                abort(); /* validation must have refused it */
        } else {
            char *msg = api_error_json(&e);
            if (!msg || e.status < 400)
                abort();
            free(msg);
        }
        srv_request_free(&r);
    }
    json_free(body);
    return 0;
}
