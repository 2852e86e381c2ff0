/* routes.c: the server's endpoints, one row each: its name in /metrics, method, whether it
 * needs the API key or answers while the model loads, its handler, and its paths. The
 * dispatch (http.c), /metrics' counters, the 404 answer's list of endpoints and the 405 and
 * CORS preflight answers are all read from here, so a new endpoint is one row (at the end:
 * the rows' order is /metrics' order) and its handler. */
#include "srv_internal.h"

const struct srv_endpoint srv_endpoints[] = {
    {"chat_completions", "POST", false, false, srv_handle_chat,
     {"/v1/chat/completions", "/chat/completions"}},
    {"completions", "POST", false, false, srv_handle_completions,
     {"/v1/completions", "/completions"}},
    {"models", "GET", false, false, srv_handle_models, {"/v1/models", "/models"}},
    {"health", "GET", true, true, srv_handle_health, {"/health"}},
    {"metrics", "GET", false, false, srv_handle_metrics, {"/metrics"}},
    {"tokenize", "POST", false, false, srv_handle_tokenize, {"/tokenize"}},
    {"detokenize", "POST", false, false, srv_handle_detokenize, {"/detokenize"}},
    {"prefill", "POST", false, false, srv_handle_prefill, {"/prefill", "/v1/prefill"}},
    {"stats", "GET", false, false, srv_handle_stats, {"/stats"}},
    {"other", NULL, false, false, NULL, {NULL}}, /* srv_ep_other */
    {"apply_template", "POST", false, false, srv_handle_apply_template, {"/apply-template"}},
    {"slots", "GET", false, false, srv_handle_slots, {"/slots"}},
    {"ui", "GET", true, false, srv_handle_ui,
     {"/", "/vendor/marked.min.js", "/vendor/purify.min.js"}},
    {"verify_receipt", "POST", false, false, srv_handle_verify, {"/verify-receipt"}},
    {"embeddings", "POST", false, false, srv_handle_embeddings,
     {"/v1/embeddings", "/embeddings"}},
    {"props", "GET", false, false, srv_handle_props, {"/props"}},
};

const size_t srv_n_endpoints = sizeof srv_endpoints / sizeof srv_endpoints[0];
const size_t srv_ep_other = 9;
