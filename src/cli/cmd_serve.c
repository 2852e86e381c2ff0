/* cmd_serve.c: `kinetic serve`: an OpenAI-compatible HTTP server over one model, with
 * Convoy batching across --parallel slots. Runs until SIGINT or SIGTERM, then stops
 * cleanly (open requests end, threads are joined). */
#include "cli.h"
#include "base/base.h"
#include "base/json.h"
#include "engine/session.h"
#include "crypto/buildid.h"
#include "crypto/hashcache.h"
#include "sample/sample.h"
#include "server/server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

static const char *usage = "MODEL.gguf [options]";
#define STR_(x) #x
#define STR(x) STR_(x)
static const char *const more_help =
    "\n"
    "Endpoints (OpenAI's shapes and error format): POST /v1/chat/completions and\n"
    "/v1/completions (\"stream\": true for server-sent events), GET /v1/models, GET /health\n"
    "(no key needed), GET /metrics (Prometheus), POST /tokenize, POST /detokenize,\n"
    "POST /apply-template ({\"messages\": [...]} -> {\"prompt\": the rendered text}).\n"
    "POST /prefill (Zero Wait: a chat or completion body whose prompt is evaluated into the\n"
    "prompt cache ahead of the real request), GET /stats (counters, drafts, cache hits).\n"
    "\n"
    "Convoy: each step runs one forward pass over every busy slot's next token plus prompt\n"
    "chunks; a request's tokens and log-probabilities are the same alone or in a crowd.\n"
    "Requests beyond the slots wait in a queue; when it is full the answer is 503 with\n"
    "Retry-After. A request without \"seed\" gets a fresh one, reported as \"seed\".\n"
    "RAD-1 drafting, Warm Start (slots keep and share prompt prefixes) and Zero Wait are on\n"
    "by default and never change a token; \"timings\" reports cache_n, draft_n and\n"
    "draft_n_accepted per request (docs/speed.md).\n"
    "\"receipt\": true adds a receipt (signed with --sign-key) that `kinetic verify-receipt`\n"
    "reruns. Chat templates are chosen as `kinetic run` chooses them (the model's Jinja\n"
    "template; --chat-template FILE or NAME, --chat-template-kwargs JSON); a chat request's \"tools\"\n"
    "and \"chat_template_kwargs\" go to the template, and calls in the answer come back as\n"
    "message.tool_calls (tool_choice auto, none, required or a function: the last two forced\n"
    "by a grammar from the tools' schemas). \"n\" asks for several choices, choice i with\n"
    "seed + i. /health is 503 while the model loads; /metrics, /slots and --cors serve\n"
    "gateways and browsers. Every answer names its replica, build and device class in\n"
    "X-Kinetic-Replica (behind a load balancer: docs/scale-out.md).\n"
    "SIGTERM or SIGINT drains: new requests get 503 (a balancer retries them elsewhere),\n"
    "running ones finish (at most --drain-timeout seconds), then the server exits; a second\n"
    "signal stops it at once.\n"
    "Every sampler of kinetic run (typical_p, top_n_sigma, xtc_*, dry_*, mirostat*,\n"
    "logit_bias, min_keep, samplers), stop strings, \"grammar\" (GBNF), \"json_schema\",\n"
    "\"response_format\" (json_object, json_schema) and \"reasoning_format\" (auto, deepseek,\n"
    "none: <think> text as reasoning_content) are request fields (docs/server.md).\n";

/* How long a drain waits for running requests by default: below Kubernetes' default
 * terminationGracePeriodSeconds (30), so the pod exits before it is killed. */
#define SERVE_DRAIN_TIMEOUT_DEFAULT_S 25

static const char *sig_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

/* The graceful drain after the first stop signal: refuse new work, let what runs finish
 * (polled every 100 ms), up to timeout_s seconds or a second signal. */
static void drain(struct srv *s, const sigset_t *sigs, int sig, int64_t timeout_s)
{
    if (timeout_s <= 0 || !srv_busy(s)) {
        fprintf(stderr, "kinetic serve: %s received, shutting down\n", sig_name(sig));
        return;
    }
    srv_drain(s);
    fprintf(stderr, "kinetic serve: %s received, draining: new requests get 503, running ones "
            "finish (at most %lld s; a second signal stops at once)\n", sig_name(sig),
            (long long)timeout_s);
    const double end = kn_now() + (double)timeout_s;
    while (srv_busy(s)) {
        if (kn_now() >= end) {
            fprintf(stderr, "kinetic serve: --drain-timeout %lld s reached; stopping what still "
                    "runs\n", (long long)timeout_s);
            return;
        }
        const struct timespec tick = {0, 100 * 1000 * 1000};
        int again = sigtimedwait(sigs, NULL, &tick);
        if (again > 0) {
            fprintf(stderr, "kinetic serve: %s received again, stopping now\n", sig_name(again));
            return;
        }
    }
    fprintf(stderr, "kinetic serve: drained, shutting down\n");
}

int cmd_serve(int argc, char **argv)
{
    const char *host = "127.0.0.1", *api_key = NULL, *alias = NULL, *sign_key = NULL;
    const char *chat_format = NULL, *chat_template = NULL, *chat_template_kwargs = NULL;
    const char *repack_cache = NULL, *chat_template_file = NULL, *reasoning_format = NULL;
    const char *cache_type_k = NULL, *cache_type_v = NULL;
    const char *pos[1] = {NULL};
    const char *kv_type = SESSION_KV_TYPE_DEFAULT, *cors = NULL, *replica = getenv("KINETIC_REPLICA");
    struct cli_device dv = CLI_DEVICE_INIT;
    int64_t port = 8080, parallel = 4, ctx_size = 0, threads = 0, max_body = 1 << 20;
    int64_t timeout = SRV_DEFAULT_TIMEOUT_S, header_timeout = SRV_DEFAULT_HEADER_TIMEOUT_S;
    int64_t max_conn = SRV_DEFAULT_MAX_CONNECTIONS, max_conn_ip = SRV_DEFAULT_MAX_CONNECTIONS_PER_IP;
    int64_t queue = 0, max_tokens = 0, toy_delay = 0, depth = 32, batch = 0;
    int64_t drain_timeout = SERVE_DRAIN_TIMEOUT_DEFAULT_S;
    bool toy = false, verbose = false, no_draft = false, no_warm = false, no_zero_wait = false;
    bool no_verify = false;
    const char *log_format = NULL;
    int64_t draft_max = 0, cache_ram = 256;
    const struct cli_opt opts[] = {
        {"model", 'm', CLI_POS, &pos[0], "MODEL.gguf", "the model file (instead of the argument)", NULL, NULL},
        {"host", 0, CLI_STR, &host, "ADDR", "address to listen on (default 127.0.0.1)", NULL, NULL},
        {"port", 0, CLI_INT, &port, "N", "port (default 8080; 0 picks a free one)", NULL, NULL},
        {"parallel", 0, CLI_INT, &parallel, "N", "slots: requests served at once (default 4)", NULL, CLI_ALIAS_PARALLEL},
        {"ctx-size", 'c', CLI_INT, &ctx_size, "N", "context positions per slot (default: min(model's, " CLI_XSTR(SESSION_CTX_MAX_DEFAULT) "))", NULL, NULL},
        {"batch-size", 'b', CLI_INT, &batch, "N", "most tokens in one forward pass (default " CLI_XSTR(SESSION_BATCH_DEFAULT) ")", NULL, NULL},
        {"threads", 't', CLI_INT, &threads, "N", CLI_HELP_THREADS, NULL, NULL},
        {"kv-type", 0, CLI_STR, &kv_type, "T", "KV cache type of the slots and the prompt cache: " MODEL_KV_TYPE_NAMES " (default " SESSION_KV_TYPE_DEFAULT ")", NULL, NULL},
        {"cache-type-k", 0, CLI_STR, &cache_type_k, "T", CLI_HELP_KV_K, NULL, "-ctk"},
        {"cache-type-v", 0, CLI_STR, &cache_type_v, "T", CLI_HELP_KV_V, NULL, "-ctv"},
        {"repack-cache", 0, CLI_STR, &repack_cache, "DIR", CLI_HELP_REPACK_CACHE, NULL, NULL},
        {"device", 0, CLI_STR, &dv.spec, "DEV", CLI_HELP_DEVICE, NULL, NULL},
        {"gpu-layers", 0, CLI_INT, &dv.gpu_layers, "N", CLI_HELP_GPU_LAYERS, NULL, CLI_ALIAS_GPU_LAYERS},
        {"cors", 0, CLI_STR, &cors, "ORIGIN", "let browser pages from ORIGIN (or *) call the API: Access-Control-Allow-Origin on every answer, preflights answered", NULL, NULL},
        {"api-key", 0, CLI_STR, &api_key, "KEY", "require 'Authorization: Bearer KEY' (or env KINETIC_API_KEY)", NULL, NULL},
        {"alias", 'a', CLI_STR, &alias, "NAME", "model id shown to clients (default: the file name)", NULL, NULL},
        {"sign-key", 0, CLI_STR, &sign_key, "FILE", "Ed25519 key that signs receipts", NULL, NULL},
        {"chat-format", 0, CLI_STR, &chat_format, "NAME", CLI_HELP_CHAT_FORMAT, NULL, NULL},
        {"chat-template", 0, CLI_STR, &chat_template, "FILE|NAME", CLI_HELP_CHAT_TEMPLATE, NULL, NULL},
        {"chat-template-file", 0, CLI_STR, &chat_template_file, "FILE", CLI_HELP_CHAT_TEMPLATE_FILE, NULL, NULL},
        {"chat-template-kwargs", 0, CLI_STR, &chat_template_kwargs, "JSON", "extra template variables for every request, a JSON object (a request's chat_template_kwargs go over them)", NULL, NULL},
        CLI_OPT_JINJA,
        {"reasoning-format", 0, CLI_STR, &reasoning_format, "FMT", "llama-server's: only auto, which every request has unless it sets \"reasoning_format\"", NULL, NULL},
        CLI_OPT_FLASH_ATTN,
        {"max-body", 0, CLI_INT, &max_body, "BYTES", "largest request body (default 1 MiB)", NULL, NULL},
        {"max-depth", 0, CLI_INT, &depth, "N", "deepest JSON nesting accepted (default 32, at most 60)", NULL, NULL},
        {"timeout", 0, CLI_INT, &timeout, "SECONDS", "close idle connections after this long (default " STR(SRV_DEFAULT_TIMEOUT_S) ")", NULL, NULL},
        {"header-timeout", 0, CLI_INT, &header_timeout, "SECONDS", "a request's line and headers must arrive within this long (default " STR(SRV_DEFAULT_HEADER_TIMEOUT_S) "; 408 after); its body then must average " STR(SRV_MIN_BODY_RATE) " bytes/s after the same grace", NULL, NULL},
        {"max-connections", 0, CLI_INT, &max_conn, "N", "connections open at once, in all (default " STR(SRV_DEFAULT_MAX_CONNECTIONS) "); more get 503", NULL, NULL},
        {"max-connections-per-ip", 0, CLI_INT, &max_conn_ip, "N", "connections open at once from one address, IPv6: one /64 (default " STR(SRV_DEFAULT_MAX_CONNECTIONS_PER_IP) ")", NULL, NULL},
        {"queue", 0, CLI_INT, &queue, "N", "requests that may wait for a slot (default 4 x parallel); more get 503", NULL, NULL},
        {"max-tokens", 'n', CLI_INT, &max_tokens, "N", "default token limit of a request (default: the rest of the context)", NULL, "--n-predict"},
        {"no-draft", 0, CLI_FLAG, &no_draft, NULL, "turn RAD-1 drafting off (never changes the output)", NULL, NULL},
        {"draft-max", 0, CLI_INT, &draft_max, "N", "most RAD-1 draft tokens per slot and step (default 16)", NULL, NULL},
        {"cache-ram", 0, CLI_INT, &cache_ram, "MiB", "the prompt cache shared by the slots (default 256; 0: none)", NULL, NULL},
        {"no-warm-start", 0, CLI_FLAG, &no_warm, NULL, "reuse no prompt prefix: neither what a slot holds nor the prompt cache", NULL, NULL},
        {"no-zero-wait", 0, CLI_FLAG, &no_zero_wait, NULL, "POST /prefill evaluates nothing (answers {\"tokens\": 0})", NULL, NULL},
        {"replica", 0, CLI_STR, &replica, "NAME", "this replica's name in the X-Kinetic-Replica header (default: env KINETIC_REPLICA, else HOST:PORT)", NULL, NULL},
        {"drain-timeout", 0, CLI_INT, &drain_timeout, "SECONDS", "on SIGTERM or SIGINT, wait this long at most for running requests to finish (default " STR(SERVE_DRAIN_TIMEOUT_DEFAULT_S) "; 0: stop at once)", NULL, NULL},
        {"no-verify", 0, CLI_FLAG, &no_verify, NULL, "turn POST /verify-receipt off (the web page's Verify reruns a receipt; one at a time, " STR(SRV_VERIFY_INTERVAL_S) " s apart)", NULL, NULL},
        {"toy", 0, CLI_FLAG, &toy, NULL, "serve the built-in deterministic toy model (for testing)", NULL, NULL},
        {"toy-delay-us", 0, CLI_INT, &toy_delay, "US", "toy model: simulated time per forward pass", NULL, NULL},
        {"verbose", 'v', CLI_FLAG, &verbose, NULL, "log every HTTP-level event", NULL, NULL},
        {"log-format", 0, CLI_STR, &log_format, "text|json", "log lines (one per request, warnings) as text (the default) or one JSON object a line", NULL, NULL},
        CLI_OPT_END,
    };
    int n_pos = 0;
    int rc = cli_parse("serve", usage, argc, argv, opts, pos, 1, &n_pos);
    if (rc == 1)
        fputs(more_help, stdout);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (verbose)
        kn_log_set_level(KN_LOG_DEBUG);
    if (log_format && strcmp(log_format, "text") != 0 && strcmp(log_format, "json") != 0) {
        fprintf(stderr, "kinetic serve: --log-format must be text or json, not '%s'\n", log_format);
        return 2;
    }
    kn_log_set_format(log_format && strcmp(log_format, "json") == 0 ? KN_LOG_JSON : KN_LOG_TEXT);
    if (!api_key)
        api_key = getenv("KINETIC_API_KEY");
    if (api_key && !*api_key)
        api_key = NULL;
    if (parallel < 1 || parallel > 256) {
        fprintf(stderr, "kinetic serve: --parallel %lld is out of range (1..256)\n", (long long)parallel);
        return 2;
    }
    if (timeout < 1 || timeout > 86400 || header_timeout < 1 || header_timeout > 3600) {
        fprintf(stderr, "kinetic serve: --timeout must be 1..86400 and --header-timeout 1..3600 seconds\n");
        return 2;
    }
    if (max_conn < 1 || max_conn > 65536 || max_conn_ip < 1 || max_conn_ip > max_conn) {
        fprintf(stderr, "kinetic serve: --max-connections must be 1..65536 and "
                        "--max-connections-per-ip 1..--max-connections (%lld, %lld given)\n",
                (long long)max_conn, (long long)max_conn_ip);
        return 2;
    }
    if (cli_kv_types("serve", &kv_type, cache_type_k, cache_type_v) != 0 ||
        cli_check_session("serve", ctx_size, threads, batch, kv_type, true) != 0 ||
        cli_reasoning_format("serve", reasoning_format, true) != 0 ||
        cli_chat_template("serve", &chat_format, &chat_template, chat_template_file) != 0)
        return 2;
    if (max_body < 1024 || max_body > (1LL << 30) || depth < 2 || depth > JSON_MAX_INPUT_DEPTH ||
        queue < 0 || max_tokens < -1 || ctx_size < 0 || batch < 0 || toy_delay < 0 ||
        toy_delay > 1000000 || draft_max < 0 || draft_max > ENGINE_DRAFT_LIMIT || cache_ram < 0 ||
        cache_ram > (1 << 20)) {
        fprintf(stderr, "kinetic serve: an option is out of range (--max-body 1024..1 GiB, "
                        "--max-depth 2..60 (what a receipt can record), --draft-max 0..%d, --cache-ram 0..1048576, "
                        "others >= 0)\n", ENGINE_DRAFT_LIMIT);
        return 2;
    }
    if (drain_timeout < 0 || drain_timeout > 86400) {
        fprintf(stderr, "kinetic serve: --drain-timeout must be 0 .. 86400 seconds, not %lld\n",
                (long long)drain_timeout);
        return 2;
    }
    if (max_tokens) { /* the settings table's n_predict range, as requests and receipts */
        struct sample_params t;
        struct kn_err terr = {0};
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)max_tokens);
        if (sample_setting_parse(sample_setting_find("n_predict"), text, &t, &terr) != KN_OK) {
            fprintf(stderr, "kinetic serve: --max-tokens: %s\n", terr.msg);
            return 2;
        }
    }
    if (max_tokens == -1) /* llama-server's -n -1, "no limit": the default, the context */
        max_tokens = 0;

    if (toy && n_pos) {
        fprintf(stderr, "kinetic serve: give either a model file or --toy, not both\n");
        return 2;
    }
    if (!toy && !n_pos) {
        fprintf(stderr, "kinetic serve: no model file given; usage: kinetic serve %s\n", usage);
        return 2;
    }
    if (toy && (sign_key || dv.spec)) {
        fprintf(stderr, "kinetic serve: --%s needs a model file: the toy model %s\n",
                sign_key ? "sign-key" : "device", sign_key ? "makes no receipts" : "runs on the CPU");
        return 2;
    }
    if (!toy && (rc = cli_device_open("serve", &dv, NULL)) != 0)
        return rc;
    struct kn_err err = {0};
    struct srv_signer *signer = NULL;
    if (!toy && srv_signer_open(&signer, sign_key, &err) != KN_OK) {
        fprintf(stderr, "kinetic serve: --sign-key %s: %s\n", sign_key, err.msg);
        cli_device_close(&dv);
        return 1;
    }

    /* Block the stop signals in every thread; this one waits for them below. */
    sigset_t stop_sigs;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Each connection holds a socket: let the process open that many, and more for the
     * model and the logs. */
    struct rlimit fds;
    rlim_t want = (rlim_t)max_conn + 64;
    if (getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < want) {
        fds.rlim_cur = fds.rlim_max < want ? fds.rlim_max : want;
        if (setrlimit(RLIMIT_NOFILE, &fds) != 0 || fds.rlim_cur < want)
            kn_log(KN_LOG_WARN, "serve: only %llu file descriptors may be open; --max-connections "
                   "%lld may not be reached", (unsigned long long)fds.rlim_cur, (long long)max_conn);
    }

    struct srv_config cfg = {
        .host = host,
        .port = (int)port,
        .api_key = api_key,
        .alias = alias,
        .max_body = (size_t)max_body,
        .max_depth = (int)depth,
        .timeout_s = (int)timeout,
        .header_timeout_s = (int)header_timeout,
        .max_connections = (int)max_conn,
        .max_connections_per_ip = (int)max_conn_ip,
        .queue = (int)queue,
        .default_max_tokens = max_tokens,
        .receipt = signer ? srv_receipt_build : NULL,
        .receipt_ctx = signer,
        .speed = {.no_draft = no_draft, .draft_max = (int)draft_max, .no_warm_start = no_warm},
        .no_zero_wait = no_zero_wait,
        .cors = cors,
        .no_verify = no_verify,
        .replica = replica,
        .build = kn_build_id(),
    };
    /* Listen first: while the model loads, /health answers 503 (a load balancer's
     * readiness probe) and every other endpoint 503 "model_loading". */
    struct srv *s = NULL;
    if (srv_start(&s, &cfg, NULL, &err) != KN_OK) {
        fprintf(stderr, "kinetic serve: %s\n", err.msg);
        srv_signer_free(signer);
        cli_device_close(&dv);
        return 1;
    }
    printf("kinetic serve: loading %s; answering on http://%s:%d (/health: 503 until ready)\n",
           toy ? "the toy model" : pos[0], host, srv_port(s));
    fflush(stdout);

    struct srv_backend backend;
    enum kn_status st;
    if (toy) {
        st = srv_toy_backend(&backend, (int)parallel, ctx_size ? ctx_size : 512, (int)toy_delay, &err);
        if (st == KN_OK && batch)
            backend.max_batch = batch < parallel ? parallel : batch;
    } else {
        struct srv_model_opts mo = {.n_slots = (int)parallel, .cache_ram_mib = no_warm ? 0 : cache_ram};
        session_opts_default(&mo.session);
        mo.session.model_path = pos[0];
        mo.session.chat_format = chat_format;
        mo.session.chat_template = chat_template;
        mo.session.chat_template_kwargs = chat_template_kwargs;
        mo.session.ctx_size = ctx_size;
        mo.session.batch = batch;
        mo.session.threads = (int)threads;
        mo.session.kv_type = kv_type;
        mo.session.repack_cache = repack_cache;
        mo.session.device = dv.dev.be;
        mo.session.gpu_layers = dv.gpu_layers;
        mo.session.device_class = dv.dev.cls;
        mo.session.device_name = dv.dev.name;
        st = srv_model_backend(&backend, &mo, &err);
        if (st == KN_OK) {
            /* Hash the model now (or find it in the cache), not in the first receipt request. */
            char hex[65];
            struct kn_err herr = {0};
            if (hashcache_model_blake3(pos[0], hex, &herr) != KN_OK)
                kn_log(KN_LOG_WARN, "serve: %s", herr.msg);
        }
    }
    if (st == KN_OK && (st = srv_attach(s, &backend, &err)) != KN_OK)
        backend.free(backend.ctx);
    if (st != KN_OK) {
        fprintf(stderr, "kinetic serve: %s\n", err.msg);
        srv_stop(s);
        srv_signer_free(signer);
        cli_device_close(&dv);
        return 1;
    }
    char kv_text[96] = "";
    if (backend.cache_type)
        snprintf(kv_text, sizeof kv_text, ", KV cache %s: %.1f MiB per slot", backend.cache_type,
                 (double)backend.kv_bytes_per_slot / (1024.0 * 1024.0));
    printf("kinetic serve: listening on http://%s:%d (model %s, %d slots of %lld positions%s, "
           "chat format %s, %s)\n",
           host, srv_port(s), alias ? alias : backend.name, backend.n_slots,
           (long long)backend.n_ctx, kv_text, backend.chat_format, backend.device_class);
    fflush(stdout);

    int sig = 0;
    sigwait(&stop_sigs, &sig);
    drain(s, &stop_sigs, sig, drain_timeout);
    srv_stop(s);
    backend.free(backend.ctx);
    srv_signer_free(signer);
    cli_device_close(&dv); /* after the model, whose buffers live on it */
    fprintf(stderr, "kinetic serve: stopped\n");
    return 0;
}
