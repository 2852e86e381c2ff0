/* h_ops.c: the endpoints for operators: GET /health (a load balancer's readiness probe),
 * /metrics (Prometheus), /stats (the scheduler's and speed features' counters) and the web
 * page (GET / and the scripts it loads). */
#include "srv_internal.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 200 when the model is loaded and the server accepts work; 503 while it loads, drains
 * or shuts down (a load balancer's readiness probe). */
enum MHD_Result srv_handle_health(struct srv_call *c)
{
    struct srv *s = c->s;
    char *out = NULL;
    if (!srv_ready(s)) {
        if (asprintf(&out, "{\"status\":\"%s\"}", s->stopping ? "shutting down" : "loading model") < 0)
            out = NULL;
        return srv_send_json(c, 503, out);
    }
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    const bool draining = __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) != 0;
    int status = s->stopping || draining ? 503 : 200;
    if (asprintf(&out, "{\"status\":\"%s\",\"slots_idle\":%d,\"slots_processing\":%d,"
                       "\"requests_waiting\":%d}",
                 s->stopping ? "shutting down" : draining ? "draining" : "ok",
                 cs.n_slots - cs.slots_busy, cs.slots_busy, cs.queued) < 0)
        out = NULL;
    return srv_send_json(c, status, out);
}

enum MHD_Result srv_handle_metrics(struct srv_call *c)
{
    struct srv *s = c->s;
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    size_t cap = 32768, k = 0; /* every endpoint x status pair fits */
    char *out = malloc(cap);
    if (!out)
        return MHD_NO;
#define EMIT(...) k += (size_t)snprintf(out + k, k < cap ? cap - k : 0, __VA_ARGS__)
    EMIT("# HELP kinetic_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE kinetic_requests_total counter\n");
    pthread_mutex_lock(&s->mmu);
    for (size_t e = 0; e < srv_n_endpoints; e++)
        for (int i = 0; i < SRV_N_STATUS; i++)
            if (s->requests[e][i])
                EMIT("kinetic_requests_total{endpoint=\"%s\",status=\"%s%d\"} %" PRIu64 "\n",
                     srv_endpoints[e].name, srv_status_codes[i] ? "" : "other",
                     srv_status_codes[i] ? srv_status_codes[i] : 0,
                     s->requests[e][i]);
    pthread_mutex_unlock(&s->mmu);
    double tps = cs.busy_seconds > 0 ? (double)cs.tokens_generated / cs.busy_seconds : 0.0;
    EMIT("# HELP kinetic_prompt_tokens_total Prompt tokens processed.\n"
         "# TYPE kinetic_prompt_tokens_total counter\nkinetic_prompt_tokens_total %" PRIu64 "\n"
         "# HELP kinetic_generated_tokens_total Tokens generated.\n"
         "# TYPE kinetic_generated_tokens_total counter\nkinetic_generated_tokens_total %" PRIu64 "\n"
         "# HELP kinetic_completions_total Completions finished (stop or length).\n"
         "# TYPE kinetic_completions_total counter\nkinetic_completions_total %" PRIu64 "\n"
         "# HELP kinetic_completions_cancelled_total Completions cancelled (client gone).\n"
         "# TYPE kinetic_completions_cancelled_total counter\nkinetic_completions_cancelled_total %" PRIu64 "\n"
         "# HELP kinetic_scheduler_steps_total Convoy steps (one forward pass each).\n"
         "# TYPE kinetic_scheduler_steps_total counter\nkinetic_scheduler_steps_total %" PRIu64 "\n"
         "# HELP kinetic_queue_length Requests waiting for a slot.\n"
         "# TYPE kinetic_queue_length gauge\nkinetic_queue_length %d\n"
         "# HELP kinetic_queue_capacity Requests that may wait for a slot.\n"
         "# TYPE kinetic_queue_capacity gauge\nkinetic_queue_capacity %d\n"
         "# HELP kinetic_slots_busy Slots generating or reading a prompt.\n"
         "# TYPE kinetic_slots_busy gauge\nkinetic_slots_busy %d\n"
         "# HELP kinetic_slots_total Slots (--parallel).\n"
         "# TYPE kinetic_slots_total gauge\nkinetic_slots_total %d\n"
         "# HELP kinetic_tokens_per_second Generated tokens per second of scheduler work.\n"
         "# TYPE kinetic_tokens_per_second gauge\nkinetic_tokens_per_second %.3f\n",
         cs.tokens_prompt, cs.tokens_generated, cs.jobs_done, cs.jobs_cancelled, cs.steps, cs.queued,
         cs.queue_cap, cs.slots_busy, cs.n_slots, tps);
    EMIT("# HELP kinetic_draft_tokens_total RAD-1 draft tokens verified and accepted.\n"
         "# TYPE kinetic_draft_tokens_total counter\n"
         "kinetic_draft_tokens_total{result=\"proposed\"} %" PRIu64 "\n"
         "kinetic_draft_tokens_total{result=\"accepted\"} %" PRIu64 "\n"
         "# HELP kinetic_prompt_tokens_reused_total Prompt positions not recomputed (Warm Start).\n"
         "# TYPE kinetic_prompt_tokens_reused_total counter\nkinetic_prompt_tokens_reused_total %" PRIu64 "\n"
         "# HELP kinetic_prefills_total Zero Wait prefills done.\n"
         "# TYPE kinetic_prefills_total counter\nkinetic_prefills_total %" PRIu64 "\n",
         cs.draft_proposed, cs.draft_accepted, cs.prompt_tokens_reused, cs.prefills_done);
    /* llama-server's names (llamacpp:*) for what it also reports, and the gauges the
     * Gateway API Inference Extension's endpoint picker reads: the queue and the KV
     * cache's utilization (positions held by busy slots over slots x context). */
    int64_t kv_used = 0, kv_total = 0;
    convoy_kv_usage(s->convoy, &kv_used, &kv_total);
    EMIT("# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
         "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total %" PRIu64 "\n"
         "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n"
         "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total %" PRIu64 "\n"
         "# HELP llamacpp:n_decode_total Total number of forward passes (Convoy steps).\n"
         "# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total %" PRIu64 "\n"
         "# HELP llamacpp:requests_processing Number of requests processing.\n"
         "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n"
         "# HELP llamacpp:requests_deferred Number of requests deferred (waiting for a slot).\n"
         "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred %d\n"
         "# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.\n"
         "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio %.6f\n"
         "# HELP llamacpp:kv_cache_tokens KV-cache positions in use by busy slots.\n"
         "# TYPE llamacpp:kv_cache_tokens gauge\nllamacpp:kv_cache_tokens %lld\n"
         "# HELP kinetic_kv_cache_positions KV-cache positions of all slots (slots x context).\n"
         "# TYPE kinetic_kv_cache_positions gauge\nkinetic_kv_cache_positions %lld\n",
         cs.tokens_prompt, cs.tokens_generated, cs.steps, cs.slots_busy, cs.queued,
         kv_total > 0 ? (double)kv_used / (double)kv_total : 0.0, (long long)kv_used,
         (long long)kv_total);
    int waiting = 0, active = 0;
    gate_counts(s->gate, &waiting, &active);
    EMIT("# HELP kinetic_http_connections Open connections: waiting for their request's head "
         "(in the gate) or with libmicrohttpd.\n"
         "# TYPE kinetic_http_connections gauge\n"
         "kinetic_http_connections{state=\"headers\"} %d\n"
         "kinetic_http_connections{state=\"active\"} %d\n",
         waiting, active);
#undef EMIT
    if (k >= cap) {
        free(out);
        return srv_fail(c, 500, "server_error", NULL, "metrics text too long");
    }
    return srv_queue_text(c, 200, out, "text/plain; version=0.0.4", NULL);
}

/* GET /stats: the scheduler's counters and the speed features' (docs/speed.md). */
enum MHD_Result srv_handle_stats(struct srv_call *c)
{
    struct srv *s = c->s;
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    struct srv_cache_stats ks = {0};
    bool cache = s->b->cache_stats && !s->cfg.speed.no_warm_start;
    if (cache)
        s->b->cache_stats(s->b->ctx, &ks);
    char cache_json[512] = "null";
    if (cache)
        snprintf(cache_json, sizeof cache_json,
                 "{\"hits\":%lld,\"misses\":%lld,\"tokens_restored\":%lld,\"stores\":%lld,"
                 "\"evictions\":%lld,\"records\":%lld,\"bytes\":%zu,\"max_bytes\":%zu}",
                 (long long)ks.hits, (long long)ks.misses, (long long)ks.tokens_restored,
                 (long long)ks.stores, (long long)ks.evictions, (long long)ks.records, ks.bytes,
                 ks.max_bytes);
    char *out = NULL;
    if (asprintf(&out,
                 "{\"slots\":%d,\"slots_busy\":%d,\"requests_waiting\":%d,\"queue_capacity\":%d,"
                 "\"completions\":%" PRIu64 ",\"cancelled\":%" PRIu64 ",\"prompt_tokens\":%" PRIu64
                 ",\"generated_tokens\":%" PRIu64 ",\"steps\":%" PRIu64 ",\"busy_seconds\":%.3f,"
                 "\"draft\":{\"enabled\":%s,\"max\":%d,\"proposed\":%" PRIu64 ",\"accepted\":%" PRIu64
                 ",\"passes\":%" PRIu64 "},"
                 "\"warm_start\":{\"enabled\":%s,\"prompt_tokens_reused\":%" PRIu64
                 ",\"slot_reuse_tokens\":%" PRIu64 ",\"cache_restored_tokens\":%" PRIu64
                 ",\"cache\":%s},"
                 "\"zero_wait\":{\"enabled\":%s,\"prefills\":%" PRIu64 ",\"preempted\":%" PRIu64
                 ",\"tokens\":%" PRIu64 ",\"queued\":%d,\"queue_capacity\":%d}}",
                 cs.n_slots, cs.slots_busy, cs.queued, cs.queue_cap, cs.jobs_done, cs.jobs_cancelled,
                 cs.tokens_prompt, cs.tokens_generated, cs.steps, cs.busy_seconds,
                 cs.draft_max > 0 ? "true" : "false", cs.draft_max, cs.draft_proposed,
                 cs.draft_accepted, cs.draft_passes, s->cfg.speed.no_warm_start ? "false" : "true",
                 cs.prompt_tokens_reused, cs.slot_reuse_tokens, cs.cache_restored_tokens, cache_json,
                 s->cfg.no_zero_wait || s->cfg.speed.no_warm_start ? "false" : "true",
                 cs.prefills_done, cs.prefills_preempted, cs.prefill_tokens, cs.prefill_queued,
                 cs.prefill_queue_cap) < 0)
        out = NULL;
    return srv_send_json(c, 200, out);
}

/* ---------------------------------------------------------------- the web page */

/* The page and the scripts it renders Markdown with (src/server/vendor), embedded by
 * cmake/embed_text.cmake, each answered at its route's path. */
extern const unsigned char srv_webui_html[], srv_webui_marked[], srv_webui_purify[];
extern const size_t srv_webui_html_len, srv_webui_marked_len, srv_webui_purify_len;

enum MHD_Result srv_handle_ui(struct srv_call *c)
{
    static const struct {
        const char *path, *ctype;
        const unsigned char *data;
        const size_t *len;
    } files[] = {
        {"/", "text/html; charset=utf-8", srv_webui_html, &srv_webui_html_len},
        {"/vendor/marked.min.js", "text/javascript; charset=utf-8", srv_webui_marked,
         &srv_webui_marked_len},
        {"/vendor/purify.min.js", "text/javascript; charset=utf-8", srv_webui_purify,
         &srv_webui_purify_len},
    };
    const size_t n = sizeof files / sizeof files[0];
    size_t i = 0;
    while (i < n && strcmp(files[i].path, c->path) != 0)
        i++;
    assert(i < n && "every path of the ui row has its file");
    char *body = malloc(*files[i].len + 1);
    if (!body)
        return MHD_NO;
    memcpy(body, files[i].data, *files[i].len + 1);
    const char *hdrs[] = {"Cache-Control", "no-cache", NULL};
    return srv_queue_text(c, 200, body, files[i].ctype, hdrs);
}
