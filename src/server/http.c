/* http.c: the HTTP layer (libmicrohttpd, one thread per connection): API keys, size
 * limits, request bodies, the answers' common parts and their counters, and the dispatch
 * by the endpoint table (routes.c) to the handlers (h_openai.c, h_native.c, h_ops.c;
 * streams: sse.c).
 *
 * Connections reach libmicrohttpd through the gate (gate.c), which owns the listening
 * socket and hands a connection over once its request's head is complete and sound.
 * Every answer says "Connection: close": one request per connection, so every request
 * passes the gate.
 *
 * A connection thread may block: a plain completion waits for its job inside the request
 * handler and a stream waits inside the content reader, both in short slices so that a
 * client that hangs up is noticed (its job is cancelled and the slot freed). */
#include "srv_internal.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

const int srv_status_codes[SRV_N_STATUS] = {200, 204, 400, 401, 403, 404, 405, 413, 415, 429, 431, 500, 503, 0};

/* Per-request state, from the first call of the access handler to the completion notice. */
struct req {
    const struct srv_endpoint *ep; /* NULL until the path and method matched a row */
    const char *ep_path;           /* the row's path that matched */
    char *body;
    size_t len, cap;
    bool too_big;
    bool answered;
    struct srv_upload up; /* the body's progress, for the minimum rate */
    /* for its log line (log_request) */
    char method[12], path[96];
    double t0;
    int64_t n_in, n_out;  /* prompt and generated tokens, a completion's */
};

/* ---------------------------------------------------------------- counters */

void srv_count(struct srv *s, size_t ep, int status)
{
    int k = SRV_N_STATUS - 1;
    for (int i = 0; i < SRV_N_STATUS - 1; i++)
        if (srv_status_codes[i] == status)
            k = i;
    pthread_mutex_lock(&s->mmu);
    s->requests[ep][k]++;
    pthread_mutex_unlock(&s->mmu);
}

void srv_count_status(struct srv *s, int status)
{
    srv_count(s, srv_ep_other, status);
}

/* ---------------------------------------------------------------- responses */

/* --cors ORIGIN: every answer names the origin browsers may read it from. */
static void add_cors(const struct srv *s, struct MHD_Response *r)
{
    if (!s->cfg.cors)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cfg.cors);
    if (strcmp(s->cfg.cors, "*") != 0)
        MHD_add_response_header(r, "Vary", "Origin");
}

bool srv_ready(const struct srv *s)
{
    return __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 0;
}

/* What every answer carries: one request per connection (gate.c), the CORS origin, and
 * which replica answered with its build and device class (behind a load balancer a
 * retried request's answer is the same on any replica of one build and class, and this
 * header shows where it came from). */
void srv_add_common_headers(const struct srv *s, struct MHD_Response *r)
{
    MHD_add_response_header(r, "Connection", "close");
    add_cors(s, r);
    MHD_add_response_header(r, "X-Kinetic-Replica",
                            srv_ready(s) ? s->replica_ready : s->replica_loading);
}

enum MHD_Result srv_queue_text(const struct srv_call *c, int status, char *body,
                               const char *ctype, const char *const *headers)
{
    if (!body)
        return MHD_NO; /* out of memory: drop the connection */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    srv_add_common_headers(c->s, r);
    for (int i = 0; headers && headers[i]; i += 2)
        MHD_add_response_header(r, headers[i], headers[i + 1]);
    enum MHD_Result ok = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_count(c->s, c->ep, status);
    return ok;
}

enum MHD_Result srv_send_json(const struct srv_call *c, int status, char *body)
{
    return srv_queue_text(c, status, body, "application/json", NULL);
}

enum MHD_Result srv_send_error(const struct srv_call *c, const struct srv_error *e)
{
    const char *hdrs[5] = {NULL};
    int h = 0;
    if (e->status == 401) {
        hdrs[h++] = "WWW-Authenticate";
        hdrs[h++] = "Bearer";
    } else if (e->status == 503) {
        hdrs[h++] = "Retry-After";
        hdrs[h++] = "1";
    } else if (e->status == 429) {
        hdrs[h++] = "Retry-After";
        hdrs[h++] = SRV_XSTR(SRV_VERIFY_INTERVAL_S);
    }
    return srv_queue_text(c, e->status, api_error_json(e), "application/json", hdrs);
}

enum MHD_Result srv_fail(const struct srv_call *c, int status, const char *type,
                         const char *code, const char *fmt, ...)
{
    struct srv_error e = {status, type, code, NULL, {0}};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return srv_send_error(c, &e);
}

/* ---------------------------------------------------------------- helpers */

/* True when the peer has closed its side (read end of file or a socket error). */
bool srv_client_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return true;
    char c;
    ssize_t n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* Constant-time comparison of a presented key with the configured one. */
static bool key_matches(const char *given, const char *want)
{
    size_t gl = strlen(given), wl = strlen(want);
    unsigned diff = (unsigned)(gl ^ wl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned)(uint8_t)want[i] ^ (unsigned)(uint8_t)(i < gl ? given[i] : 0);
    return diff == 0;
}

static bool authorized(struct srv *s, struct MHD_Connection *conn)
{
    if (!s->cfg.api_key)
        return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    return key_matches(h, s->cfg.api_key);
}

/* ---------------------------------------------------------------- dispatch */

static bool json_content_type(struct MHD_Connection *conn)
{
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    if (!ct)
        return true; /* simple clients send none; the body still has to be JSON */
    while (*ct == ' ')
        ct++;
    return strncasecmp(ct, "application/json", 16) == 0 &&
           (ct[16] == '\0' || ct[16] == ';' || ct[16] == ' ');
}

/* The endpoints' first paths, as the 404 answer lists them: "/a, /b, ...". */
static void endpoint_list(char *out, size_t cap)
{
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < srv_n_endpoints; i++)
        if (srv_endpoints[i].paths[0] && k < cap)
            k += (size_t)snprintf(out + k, cap - k, "%s%s", k ? ", " : "",
                                  srv_endpoints[i].paths[0]);
}

/* Runs the row's handler; a POST body must first be there, within --max-body, and a JSON
 * object. */
static enum MHD_Result dispatch(struct srv *s, struct MHD_Connection *conn, struct req *q)
{
    struct srv_call c = {s, conn, (size_t)(q->ep - srv_endpoints), q->ep_path, NULL, NULL, 0,
                         &q->n_in, &q->n_out};
    if (strcmp(q->ep->method, "POST") != 0)
        return q->ep->handler(&c);
    if (q->too_big)
        return srv_fail(&c, 413, "invalid_request_error", "request_too_large",
                        "the request body is larger than %zu bytes (--max-body)", s->cfg.max_body);
    if (q->len == 0)
        return srv_fail(&c, 400, "invalid_request_error", "invalid_json",
                        "the request body is empty; send a JSON object");
    struct json_limits lim = {s->cfg.max_body, (size_t)s->cfg.max_depth, s->cfg.max_body, 0};
    struct json_value *body = NULL;
    struct kn_err err = {0};
    if (json_parse(q->body, q->len, &lim, &body, &err) != KN_OK)
        return srv_fail(&c, 400, "invalid_request_error", "invalid_json",
                        "the request body is not valid JSON: %.500s", err.msg);
    enum MHD_Result res;
    if (!json_is(body, JSON_OBJECT)) {
        res = srv_fail(&c, 400, "invalid_request_error", "invalid_json",
                       "the request body must be a JSON object");
    } else {
        c.body = body;
        c.raw = q->body;
        c.raw_len = q->len;
        res = q->ep->handler(&c);
    }
    json_free(body);
    return res;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    struct srv *s = cls;
    struct req *q = *con_cls;
    if (!q) {
        /* First call: headers only. Refuse what needs no body as early as possible. */
        q = calloc(1, sizeof *q);
        if (!q)
            return MHD_NO;
        *con_cls = q;
        q->t0 = kn_now();
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->path, sizeof q->path, "%s", url);
        for (char *c = q->path; *c; c++) /* no line breaks or escapes into the log */
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        pthread_mutex_lock(&s->mmu);
        s->active++;
        pthread_mutex_unlock(&s->mmu);
        const struct srv_endpoint *path_match = NULL;
        for (size_t i = 0; i < srv_n_endpoints && !path_match; i++)
            for (int k = 0; srv_endpoints[i].paths[k]; k++)
                if (strcmp(url, srv_endpoints[i].paths[k]) == 0) {
                    path_match = &srv_endpoints[i];
                    q->ep_path = srv_endpoints[i].paths[k];
                }
        if (path_match && strcmp(method, path_match->method) == 0)
            q->ep = path_match;
        q->answered = true;
        struct srv_call c = {s, conn, path_match ? (size_t)(path_match - srv_endpoints)
                                                 : srv_ep_other,
                             q->ep_path, NULL, NULL, 0, &q->n_in, &q->n_out};
        if (!path_match) {
            char list[512];
            endpoint_list(list, sizeof list);
            return srv_fail(&c, 404, "invalid_request_error", "unknown_url",
                            "unknown endpoint: %s %.200s; see %s", method, url, list);
        }
        if (!q->ep && s->cfg.cors && strcmp(method, "OPTIONS") == 0) {
            /* a browser's CORS preflight: what the endpoint allows */
            char allow[32];
            snprintf(allow, sizeof allow, "%s, OPTIONS", path_match->method);
            const char *hdrs[] = {"Access-Control-Allow-Methods", allow,
                                  "Access-Control-Allow-Headers", "Authorization, Content-Type",
                                  "Access-Control-Max-Age", "86400", NULL};
            return srv_queue_text(&c, 204, strdup(""), "text/plain", hdrs);
        }
        if (!q->ep) {
            const char *hdrs[] = {"Allow", path_match->method, NULL};
            struct srv_error e = {405, "invalid_request_error", "method_not_allowed", NULL, {0}};
            snprintf(e.message, sizeof e.message, "%s is not allowed on %s; use %s", method,
                     q->ep_path, path_match->method);
            return srv_queue_text(&c, 405, api_error_json(&e), "application/json", hdrs);
        }
        if (!q->ep->open && !authorized(s, conn))
            return srv_fail(&c, 401, "invalid_request_error", "invalid_api_key",
                            "a valid API key is required: send 'Authorization: Bearer <key>'");
        if (!srv_ready(s) && !q->ep->while_loading)
            return srv_fail(&c, 503, "unavailable_error", "model_loading",
                            "the model is loading; retry when /health answers 200");
        if (strcmp(method, "POST") == 0 && __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE))
            return srv_fail(&c, 503, "unavailable_error", "draining",
                            "this replica is draining for a restart; retry the request (another "
                            "replica of the same build and device class gives the same answer)");
        if (strcmp(method, "POST") == 0) {
            if (!json_content_type(conn))
                return srv_fail(&c, 415, "invalid_request_error", "unsupported_media_type",
                                "the request body must be JSON (Content-Type: application/json)");
            const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
            if (cl) {
                char *end;
                errno = 0;
                unsigned long long n = strtoull(cl, &end, 10);
                if (errno || *end || n > s->cfg.max_body)
                    return srv_fail(&c, 413, "invalid_request_error", "request_too_large",
                                    "the request body (%s bytes) is larger than %zu bytes "
                                    "(--max-body)",
                                    cl, s->cfg.max_body);
            }
        }
        q->answered = false;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci)
            return MHD_NO;
        gate_upload_begin(s->gate, &q->up, ci->connect_fd);
        return MHD_YES;
    }
    if (q->answered) { /* an early answer was queued: discard any body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        gate_upload_add(s->gate, &q->up, n);
        if (q->too_big || q->len + n > s->cfg.max_body) {
            q->too_big = true;
            return MHD_YES;
        }
        if (q->len + n + 1 > q->cap) {
            size_t cap = q->cap ? q->cap : 4096;
            while (cap < q->len + n + 1)
                cap *= 2;
            char *b = realloc(q->body, cap);
            if (!b)
                return MHD_NO;
            q->body = b;
            q->cap = cap;
        }
        memcpy(q->body + q->len, upload, n);
        q->len += n;
        return MHD_YES;
    }
    q->answered = true;
    gate_upload_end(s->gate, &q->up); /* the body is in: generating may take its time */
    return dispatch(s, conn, q);
}

/* One line per request at the default level (docs/server.md "Logs"): method, path,
 * status (0: no answer went out), tokens in and out, seconds; --log-format json writes
 * the same as fields. */
static void log_request(struct MHD_Connection *conn, const struct req *q)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    int status = ci ? (int)ci->http_status : 0;
    double sec = kn_now() - q->t0;
    char msg[256];
    snprintf(msg, sizeof msg, "%s %s %d, %lld tokens in, %lld out, %.3f s", q->method, q->path,
             status, (long long)q->n_in, (long long)q->n_out, sec);
    struct json_value *f = json_new_object();
    if (f && json_object_set(f, "method", json_new_string(q->method), NULL) == KN_OK &&
        json_object_set(f, "path", json_utf8_valid(q->path, strlen(q->path))
                                       ? json_new_string(q->path) : json_new_string("?"), NULL) == KN_OK &&
        json_object_set(f, "status", json_new_int(status), NULL) == KN_OK &&
        json_object_set(f, "tokens_in", json_new_int(q->n_in), NULL) == KN_OK &&
        json_object_set(f, "tokens_out", json_new_int(q->n_out), NULL) == KN_OK &&
        json_object_set(f, "seconds", json_new_double(round(sec * 1e3) / 1e3), NULL) == KN_OK)
        kn_log_event(KN_LOG_INFO, msg, f);
    else
        kn_log_event(KN_LOG_INFO, msg, NULL);
    json_free(f);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    struct srv *s = cls;
    struct req *q = *con_cls;
    if (q) {
        log_request(conn, q);
        gate_upload_end(s->gate, &q->up);
        free(q->body);
        free(q);
        *con_cls = NULL;
        pthread_mutex_lock(&s->mmu);
        if (--s->active == 0)
            pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mmu);
    }
}

/* libmicrohttpd's connection notices: the gate counts the connections it holds. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct srv *s = cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        gate_conn_count(s->gate, ci->client_addr, 1);
        *socket_context = s;
    } else if (*socket_context) {
        gate_conn_count(s->gate, ci->client_addr, -1);
        *socket_context = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    kn_log(KN_LOG_DEBUG, "http: %s", msg);
}

/* ---------------------------------------------------------------- start and stop */

/* The X-Kinetic-Replica values: NAME (--replica, else HOST:PORT; control characters and
 * ';' become '_' so the header stays one field) and the build, then the device class once
 * the backend is known. */
static void replica_header(struct srv *s)
{
    char name[96];
    if (s->cfg.replica && s->cfg.replica[0])
        snprintf(name, sizeof name, "%s", s->cfg.replica);
    else
        snprintf(name, sizeof name, "%s:%d", s->cfg.host, s->port);
    for (char *p = name; *p; p++)
        if ((uint8_t)*p < 0x20 || *p == 0x7f || *p == ';')
            *p = '_';
    snprintf(s->replica_loading, sizeof s->replica_loading, "%s; build=%s", name,
             s->cfg.build && s->cfg.build[0] ? s->cfg.build : "unknown");
    if (s->b)
        snprintf(s->replica_ready, sizeof s->replica_ready, "%s; device=%s", s->replica_loading,
                 s->b->device_class);
}

/* Gives the server its backend and starts the scheduler; the endpoints answer from then
 * on (ready is published last). */
static enum kn_status attach(struct srv *s, struct srv_backend *b, struct kn_err *err)
{
    s->b = b;
    replica_header(s);
    snprintf(s->model_id, sizeof s->model_id, "%s", s->cfg.alias ? s->cfg.alias : b->name);
    for (char *p = s->model_id; *p; p++)
        if (*p == '"' || *p == '\\' || (uint8_t)*p < 0x20)
            *p = '_'; /* the id is written into JSON by hand in /v1/models */
    int queue = s->cfg.queue > 0 ? s->cfg.queue : 4 * b->n_slots;
    enum kn_status st = convoy_start_speed(&s->convoy, b, queue, &s->cfg.speed, err);
    if (st != KN_OK) {
        s->b = NULL;
        return st;
    }
    __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
    return KN_OK;
}

enum kn_status srv_attach(struct srv *s, struct srv_backend *b, struct kn_err *err)
{
    if (srv_ready(s))
        return kn_fail(err, KN_E_INTERNAL, "serve: the server has a backend already");
    return attach(s, b, err);
}

enum kn_status srv_start(struct srv **out, const struct srv_config *cfg, struct srv_backend *b,
                         struct kn_err *err)
{
    *out = NULL;
    assert(srv_endpoints[srv_ep_other].handler == NULL && "srv_ep_other is the row without paths");
    struct srv *s = kn_calloc(1, sizeof *s + srv_n_endpoints * sizeof s->requests[0], err);
    if (!s)
        return KN_E_NOMEM;
    s->cfg = *cfg;
    if (!s->cfg.host)
        s->cfg.host = "127.0.0.1";
    if (!s->cfg.max_body)
        s->cfg.max_body = 1u << 20;
    if (!s->cfg.max_depth)
        s->cfg.max_depth = 32;
    if (s->cfg.timeout_s <= 0)
        s->cfg.timeout_s = SRV_DEFAULT_TIMEOUT_S;
    if (s->cfg.header_timeout_s <= 0)
        s->cfg.header_timeout_s = SRV_DEFAULT_HEADER_TIMEOUT_S;
    if (s->cfg.max_connections <= 0)
        s->cfg.max_connections = SRV_DEFAULT_MAX_CONNECTIONS;
    if (s->cfg.max_connections_per_ip <= 0)
        s->cfg.max_connections_per_ip = SRV_DEFAULT_MAX_CONNECTIONS_PER_IP;
    pthread_mutex_init(&s->mmu, NULL);
    pthread_mutex_init(&s->gmu, NULL);
    pthread_mutex_init(&s->vmu, NULL);
    pthread_cond_init(&s->idle_cv, NULL);

    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    const struct sockaddr *addr;
    socklen_t addr_len;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, s->cfg.host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)s->cfg.port);
        addr = (const struct sockaddr *)&a4;
        addr_len = sizeof a4;
    } else if (inet_pton(AF_INET6, s->cfg.host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)s->cfg.port);
        addr = (const struct sockaddr *)&a6;
        addr_len = sizeof a6;
        flags |= MHD_USE_IPv6;
    } else {
        pthread_mutex_destroy(&s->mmu);
        free(s);
        return kn_fail(err, KN_E_ARG, "serve: --host '%s' is not an IPv4 or IPv6 address",
                       cfg->host);
    }
    if (s->cfg.port < 0 || s->cfg.port > 65535) {
        pthread_mutex_destroy(&s->mmu);
        free(s);
        return kn_fail(err, KN_E_ARG, "serve: --port %d is out of range (0..65535)", cfg->port);
    }

    struct kn_err gerr = {0};
    enum kn_status st = gate_open(&s->gate, s, addr, addr_len, &s->port, &gerr);
    if (st != KN_OK) {
        int e = errno;
        pthread_mutex_destroy(&s->mmu);
        free(s);
        if (st != KN_E_IO)
            return kn_fail(err, st, "%s", gerr.msg);
        return kn_fail(err, KN_E_IO, "serve: cannot listen on %s:%d (%s); is the port in use?",
                       cfg->host ? cfg->host : "127.0.0.1", cfg->port, strerror(e));
    }
    replica_header(s);
    st = b ? attach(s, b, err) : KN_OK;
    if (st != KN_OK) {
        gate_free(s->gate);
        pthread_mutex_destroy(&s->mmu);
        free(s);
        return st;
    }
    /* libmicrohttpd's own limits stay as a backstop; the gate counts first. */
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)s->cfg.max_connections_per_ip,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_END);
    if (!s->d || gate_run(s->gate, err) != KN_OK) {
        if (!s->d)
            kn_fail(err, KN_E_IO, "serve: cannot start the HTTP daemon");
        if (s->d)
            MHD_stop_daemon(s->d);
        convoy_stop(s->convoy);
        convoy_free(s->convoy);
        gate_free(s->gate);
        pthread_mutex_destroy(&s->mmu);
        free(s);
        return KN_E_IO;
    }
    *out = s;
    return KN_OK;
}

int srv_port(const struct srv *s)
{
    return s->port;
}

void srv_drain(struct srv *s)
{
    __atomic_store_n(&s->draining, 1, __ATOMIC_RELEASE);
}

bool srv_busy(struct srv *s)
{
    if (!srv_ready(s))
        return false;
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    return cs.slots_busy > 0 || cs.queued > 0;
}

void srv_stop(struct srv *s)
{
    if (!s)
        return;
    s->stopping = 1;
    /* Stop accepting, end every job (waiting handlers answer 503 or end their streams),
     * then join the connection threads; only then may the convoy go. */
    gate_stop(s->gate);
    convoy_stop(s->convoy);
    /* Let the answers to cancelled requests go out (bounded: 5 s). */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    pthread_mutex_lock(&s->mmu);
    while (s->active > 0)
        if (pthread_cond_timedwait(&s->idle_cv, &s->mmu, &dl) != 0)
            break;
    pthread_mutex_unlock(&s->mmu);
    MHD_stop_daemon(s->d);
    gate_free(s->gate);
    convoy_free(s->convoy);
    api_free(s);
    pthread_mutex_destroy(&s->mmu);
    pthread_mutex_destroy(&s->gmu);
    pthread_mutex_destroy(&s->vmu);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}

