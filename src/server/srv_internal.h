/* srv_internal.h: what the server's files share: the server object, the endpoint table
 * (routes.c) and what a handler is given and answers with (http.c), streaming (sse.c), a
 * parsed OpenAI request, and the error every handler can return. */
#ifndef KN_SRV_INTERNAL_H
#define KN_SRV_INTERNAL_H

#include "server.h"
#include "base/json.h"
#include "chat/chat.h"
#include "grammar/grammar.h"

#include <microhttpd.h>
#include <sys/socket.h>

enum srv_kind { SRV_KIND_CHAT = 0, SRV_KIND_COMPLETION = 1 };

/* An HTTP error in OpenAI's shape: {"error":{"message","type","param","code"}}. */
struct srv_error {
    int status;
    const char *type;  /* invalid_request_error, authentication_error, server_error ... */
    const char *code;  /* machine-readable, or NULL */
    const char *param; /* the offending request field, or NULL */
    char message[600];
};

int srv_error_set(struct srv_error *e, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...) KN_PRINTF(6, 7);

/* The most choices one request may ask for ("n"); each is one job in its own slot. */
#define SRV_MAX_CHOICES 16

/* A validated completion request. */
struct srv_request {
    enum srv_kind kind;
    int n_choices;             /* "n", 1..SRV_MAX_CHOICES */
    bool stream, include_usage, want_receipt, ignore_eos;
    bool logprobs;
    int top_logprobs;          /* 0..20 */
    int64_t max_tokens;        /* 0: not given */
    struct sample_params sampling;
    bool seed_given;
    char *stop[SRV_MAX_STOP];
    size_t stop_len[SRV_MAX_STOP];
    int n_stop;
    struct srv_msg *msgs;      /* chat */
    size_t n_msgs;
    char *prompt_text;         /* completions given text */
    size_t prompt_len;
    int32_t *ids;              /* the prompt's tokens */
    size_t n_ids;
    char *rendered;            /* chat: the rendered prompt */
    int64_t render_now;        /* chat: the clock the template's strftime_now read */
    struct json_value *input;  /* a copy of messages or prompt, as sent (for receipts) */
    struct json_value *tools;  /* chat: the request's tools (an array), or NULL */
    /* Tool calls (chat with tools): tool_choice, the function it names, parallel calls
     * allowed, and the template's call syntax; tools_parse: the answer is searched for
     * calls (tool_choice auto, required or a function; not none). */
    enum srv_tool_choice { SRV_TOOLS_NONE = 0, SRV_TOOLS_AUTO, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED } tool_choice;
    char *tool_name;
    bool parallel_tools;
    bool tools_parse;
    enum chat_tool_syntax tool_syntax;
    struct json_value *tmpl_kwargs; /* chat: chat_template_kwargs (an object), or NULL */
    /* Structured output: the compiled grammar (owned until handed to the job) from
     * "grammar" (GBNF), "json_schema" or "response_format"; the GBNF text it came from;
     * the response_format object as sent (receipts record both). */
    struct grammar *grammar;
    char *grammar_text;
    struct json_value *response_format;
    /* Reasoning split (chat only): markers, or NULL for none; think: the streaming
     * splitter's state (owned), set up when the request streams. */
    const char *think_open, *think_close;
    bool think_inside;
    struct text_think *think;
};

void srv_request_free(struct srv_request *r);

#define SRV_N_STATUS 14

struct srv {
    struct srv_config cfg;
    struct srv_backend *b;
    struct convoy *convoy;
    struct MHD_Daemon *d;
    char model_id[256];
    int port;
    volatile int stopping;
    int draining;              /* srv_drain was called (__atomic loads and stores) */
    /* X-Kinetic-Replica: "NAME; build=ID" while the model loads, "...; device=CLASS" once
     * srv_attach gave the backend (chosen by srv_ready, so neither is written while read) */
    char replica_loading[160], replica_ready[224];
    int ready;                 /* the backend is attached (srv_attach); read with
                                * __atomic_load_n: 0 while the model loads */
    pthread_mutex_t mmu;       /* guards the counters below */
    pthread_cond_t idle_cv;    /* signalled when active drops to 0 */
    int active;                /* requests between their first call and completion */
    struct gate *gate;         /* the listening socket and the connections before MHD */
    pthread_mutex_t gmu;       /* guards gvocab's creation */
    struct grammar_vocab *gvocab; /* built at the first grammar request; read-only after */
    pthread_mutex_t vmu;       /* held by the one POST /verify-receipt that may run */
    double verify_last;        /* when the last one ended (kn_now), under vmu */
    uint64_t requests[][SRV_N_STATUS]; /* answers by endpoint (srv_endpoints' rows) and
                                        * status (under mmu); srv_start sizes it */
};

/* ---------------------------------------------------------------- the endpoint table
 * One request as a handler sees it. A handler answers with srv_send_json, srv_queue_text,
 * srv_send_error or srv_fail (each counts the answer under the endpoint's row), or
 * returns MHD_NO to drop the connection (out of memory, the client gone). */
struct srv_call {
    struct srv *s;
    struct MHD_Connection *conn;
    size_t ep;                     /* its row of srv_endpoints */
    const char *path;              /* the row's path it came on */
    const struct json_value *body; /* POST: the body, a JSON object; GET: NULL */
    const char *raw;               /* POST: the body as sent (raw_len bytes) */
    size_t raw_len;
    int64_t *n_in, *n_out;         /* a completion's tokens, for its log line; they stay
                                    * writable until the request completes */
};
typedef enum MHD_Result srv_handler_fn(struct srv_call *c);

#define SRV_MAX_PATHS 3

/* One endpoint: the dispatch, the /metrics names, the 404 answer's list, the 405 and
 * CORS preflight answers all read this row. A POST endpoint's body must be a JSON
 * object (http.c checks it before the handler runs). */
struct srv_endpoint {
    const char *name;       /* its endpoint="..." label in /metrics */
    const char *method;     /* "GET" or "POST" */
    bool open;              /* answered without the API key */
    bool while_loading;     /* answered while the model loads (others: 503 model_loading) */
    srv_handler_fn *handler;
    const char *paths[SRV_MAX_PATHS + 1]; /* NULL-terminated; the first one is listed in
                                           * the 404 answer */
};

/* routes.c: the rows, in /metrics' order (they only grow at the end); srv_ep_other is the
 * row without paths or handler that counts answers no endpoint gave (404, the gate's). */
extern const struct srv_endpoint srv_endpoints[];
extern const size_t srv_n_endpoints, srv_ep_other;

/* http.c: answers c (body: malloc'd, taken; NULL drops the connection) with status, the
 * common headers and headers (name, value pairs, NULL-terminated; may be NULL). */
enum MHD_Result srv_queue_text(const struct srv_call *c, int status, char *body,
                               const char *ctype, const char *const *headers);
enum MHD_Result srv_send_json(const struct srv_call *c, int status, char *body);
/* An error in OpenAI's shape, with WWW-Authenticate or Retry-After where its status wants. */
enum MHD_Result srv_send_error(const struct srv_call *c, const struct srv_error *e);
enum MHD_Result srv_fail(const struct srv_call *c, int status, const char *type,
                         const char *code, const char *fmt, ...) KN_PRINTF(5, 6);
/* The statuses /metrics counts by name; the last (0) counts every other one. */
extern const int srv_status_codes[SRV_N_STATUS];
/* Counts an answer queued without the functions above (a stream's). */
void srv_count(struct srv *s, size_t ep, int status);
/* What every answer carries (Connection: close, CORS, X-Kinetic-Replica). */
void srv_add_common_headers(const struct srv *s, struct MHD_Response *r);
/* True when the peer has closed its side. */
bool srv_client_gone(struct MHD_Connection *conn);
/* True once the backend is attached (srv_attach). */
bool srv_ready(const struct srv *s);

/* The handlers, by API: h_openai.c (OpenAI's endpoints), h_native.c (llama-server's and
 * Kinetic's own), h_ops.c (health, metrics, stats, the web page). */
srv_handler_fn srv_handle_chat, srv_handle_completions, srv_handle_models,
    srv_handle_embeddings;
srv_handler_fn srv_handle_tokenize, srv_handle_detokenize, srv_handle_apply_template,
    srv_handle_props, srv_handle_slots, srv_handle_prefill, srv_handle_verify;
srv_handler_fn srv_handle_health, srv_handle_metrics, srv_handle_stats, srv_handle_ui;

/* h_openai.c: the receipt of job j of request r (NULL when none was asked for, or on
 * failure with e filled). */
struct json_value *srv_make_receipt(struct srv *s, const struct srv_request *r,
                                    const struct srv_job *j, struct srv_error *e);

/* sse.c: answers c with a stream of r's n choices (jobs, submitted). On success the
 * stream owns r and the jobs (*taken); otherwise the caller still does. */
enum MHD_Result srv_stream_answer(const struct srv_call *c, struct srv_request *r,
                                  struct srv_job *const *jobs, int n, const char *id,
                                  int64_t created, bool *taken);

/* ---------------------------------------------------------------- gate.c
 * The server's front door: it owns the listening socket and holds every new connection
 * until its request line and headers have arrived within the header timeout, checks
 * their framing on the raw bytes (gate_check_head), and only then hands the socket to
 * libmicrohttpd. Connections are counted per address (IPv6: per /64) and in all, open
 * and not yet handed over alike. It also closes requests whose body comes too slowly. */
struct gate;

/* Binds and listens on addr (the gate thread starts with gate_run); *port receives the
 * bound port. */
KN_MUST_USE enum kn_status gate_open(struct gate **out, struct srv *s, const struct sockaddr *addr,
                                     socklen_t addr_len, int *port, struct kn_err *err);
/* Starts accepting; s->d must be running. */
KN_MUST_USE enum kn_status gate_run(struct gate *g, struct kn_err *err);
/* Stops accepting and closes every connection not handed over yet. */
void gate_stop(struct gate *g);
void gate_free(struct gate *g);
/* A connection libmicrohttpd holds opened (+1) or closed (-1), for the counts. */
void gate_conn_count(struct gate *g, const struct sockaddr *addr, int delta);
/* Connections waiting for their headers and connections handed over. */
void gate_counts(struct gate *g, int *waiting, int *active);

/* A request whose body is being received, watched for the minimum body rate. */
struct srv_upload {
    int fd;
    double t0;    /* when its headers were complete */
    size_t got;   /* body bytes so far */
    bool on;      /* in the gate's list */
    struct srv_upload *prev, *next;
};
void gate_upload_begin(struct gate *g, struct srv_upload *u, int fd);
void gate_upload_add(struct gate *g, struct srv_upload *u, size_t n);
void gate_upload_end(struct gate *g, struct srv_upload *u);

/* Checks a request's head, the first n bytes of the connection. Returns 0 when the
 * head is not complete yet, 1 when it is complete and its framing sound (*head_len: its
 * length), or 400 with a message in msg when the request must be refused: a Content-Length
 * that is not 1..19 digits, two different ones, Content-Length with Transfer-Encoding,
 * a Transfer-Encoding other than chunked, %00 or a NUL byte in the target, a header
 * line folded or without a colon, white space before a colon. */
int gate_check_head(const char *buf, size_t n, size_t *head_len, char *msg, size_t cap);

/* http.c: counts an answer the gate gave (endpoint "other"). */
void srv_count_status(struct srv *s, int status);

/* api.c: frees what the API layer keeps in s (the grammar vocabulary). */
void api_free(struct srv *s);

/* api.c: parses and validates body as a completion request of kind; fills r (free with
 * srv_request_free) and returns 0, or fills e and returns its HTTP status. */
int api_parse_completion(struct srv *s, enum srv_kind kind, const struct json_value *body,
                         struct srv_request *r, struct srv_error *e);
/* POST /apply-template: renders body's messages (with chat_template_kwargs, tools and
 * add_generation_prompt, default true) with the model's chat template; *out receives
 * {"prompt": text} (malloc'd JSON). Returns 0, or fills e and returns its HTTP status. */
int api_apply_template(struct srv *s, const struct json_value *body, char **out,
                       struct srv_error *e);
/* api_response.c's building, for the other endpoints' files: sets o[k] = v (taking v;
 * any failure, a NULL o or v included, clears *ok), and writes root compactly (NULL
 * unless ok), freeing it. */
void api_json_set(struct json_value *o, const char *k, struct json_value *v, bool *ok);
char *api_json_finish(struct json_value *root, bool ok);
/* embeddings.c: POST /v1/embeddings (OpenAI's shape); *out receives the response
 * (malloc'd JSON). Returns 0, or fills e and returns its HTTP status. */
int api_embeddings(struct srv *s, const struct json_value *body, char **out,
                   struct srv_error *e);
/* Tokenizes the request's prompt into r->ids and checks it against the slot context. */
int api_prepare_prompt(struct srv *s, struct srv_request *r, struct srv_error *e);

/* The seed of choice i of a request with "n" choices: the request's seed + i (mod 2^63),
 * so choice i is exactly the answer to the same request with n = 1 and that seed. */
uint64_t api_choice_seed(const struct srv_request *r, int i);

/* api_response.c: responses (malloc'd JSON text, NULL when out of memory). They read the
 * jobs' results: the caller holds the convoy lock, unless the jobs are done (then nothing
 * writes them).
 * jobs[i] is choice i; receipts[i] (taken, may be NULL) its receipt: at the top level
 * for one choice (as before "n" existed), inside each choice for several. */
char *api_completion_response(struct srv *s, const struct srv_request *r,
                              struct srv_job *const *jobs, int n, const char *id,
                              int64_t created, struct json_value **receipts);
/* One streaming chunk of choice `index` (job j) for tokens [tok0, tok1) and text
 * [text0, text1), the reasoning split by think (NULL: none); final adds finish_reason
 * (and seed, receipt). */
char *api_stream_chunk(struct srv *s, const struct srv_request *r, const struct srv_job *j,
                       int index, struct text_think *think, const char *id, int64_t created,
                       bool role, int64_t tok0, int64_t tok1, size_t text0, size_t text1,
                       bool final, const char *finish, struct json_value *receipt);
/* A chat chunk carrying content (NULL: none) and, with tc, call k's head (id, type, name,
 * empty arguments: head_part) or its arguments, as OpenAI streams delta.tool_calls. */
char *api_tool_chunk(struct srv *s, const struct srv_request *r, int index, const char *id,
                     int64_t created, const char *content, size_t content_len,
                     const struct chat_tool_calls *tc, int k, bool head_part);
/* The id of call k of choice `index` in response `id` ("call_<id>_<index>_<k>"). */
void api_tool_call_id(const char *id, int index, int k, char *out, size_t cap);
/* The answer's content when the request splits reasoning off (*out: malloc'd, its
 * length returned); *out stays NULL when it does not (the content is the whole text). */
size_t api_answer_content(const struct srv_request *r, const struct srv_job *j, char **out);
/* The usage chunk: the prompt once, the completion tokens of every choice. */
char *api_usage_chunk(struct srv *s, const struct srv_request *r, struct srv_job *const *jobs,
                      int n, const char *id, int64_t created);
char *api_error_json(const struct srv_error *e);

#endif
