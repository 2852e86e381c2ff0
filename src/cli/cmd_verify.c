/* cmd_verify.c: kinetic verify-receipt: a receipt file, or a saved server response (a
 * completion, a stream's final chunk, or a whole stream's "data: {...}" lines) whose
 * receipts it finds and checks. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/json.h"
#include "base/progress.h"
#include "engine/session.h"
#include "kernels/kernels.h"
#include "receipt/receipt.h"

/* ================================================================ finding the receipt
 *
 * Where the server puts receipts (src/server/api.c): a completion or a stream's final chunk
 * carries its receipt under "receipt"; with "n" > 1, each choice under choices[i].receipt
 * (in a stream, in that choice's final chunk). A receipt itself has "receipt" too, its
 * version number; a response's is an object. */

/* choices[i].receipt in a response is this much deeper than the receipt alone. */
#define VERIFY_RESPONSE_DEPTH 3
/* The most receipts checked in one file: a request has at most 16 choices (the server's
 * limit), so a response, or a stream, holds at most that many. */
#define VERIFY_MAX_FOUND 64

struct found {
    struct json_value *receipt[VERIFY_MAX_FOUND]; /* owned copies */
    char where[VERIFY_MAX_FOUND][64];
    int n;
    bool nomem;
};

static void found_free(struct found *f)
{
    for (int i = 0; i < f->n; i++)
        json_free(f->receipt[i]);
}

/* Whether doc is a server response (or stream chunk) rather than a receipt. */
static bool is_response(const struct json_value *doc)
{
    return json_is(json_get(doc, "receipt"), JSON_OBJECT) ||
           json_is(json_get(doc, "choices"), JSON_ARRAY) ||
           json_is(json_get(doc, "error"), JSON_OBJECT);
}

static void add_found(struct found *f, const struct json_value *r, const char *where)
{
    if (f->n == VERIFY_MAX_FOUND)
        return;
    if (!(f->receipt[f->n] = json_clone(r))) {
        f->nomem = true;
        return;
    }
    snprintf(f->where[f->n++], sizeof f->where[0], "%s", where);
}

/* Adds the receipts of one response or chunk; line > 0 names the stream line it is on. */
static void find_receipts(const struct json_value *doc, int line, struct found *f)
{
    char at[24] = "", where[64];
    if (line > 0)
        snprintf(at, sizeof at, " (line %d)", line);
    const struct json_value *r = json_get(doc, "receipt");
    if (json_is(r, JSON_OBJECT)) {
        snprintf(where, sizeof where, "\"receipt\"%s", at);
        add_found(f, r, where);
    }
    const struct json_value *ch = json_get(doc, "choices");
    for (size_t i = 0; i < json_len(ch); i++) {
        const struct json_value *c = json_at(ch, i);
        int64_t index = (int64_t)i;
        json_int(json_get(c, "index"), &index); /* a stream chunk holds one choice */
        r = json_get(c, "receipt");
        if (json_is(r, JSON_OBJECT)) {
            snprintf(where, sizeof where, "choices[%lld].receipt%s", (long long)index, at);
            add_found(f, r, where);
        }
    }
}

/* A stream's "data: {...}" lines: the receipts of each event into f. Returns the number of
 * data lines (0: not a stream), or -1 after printing why a line is not JSON. */
static int parse_stream(const char *path, const char *text, size_t len,
                        const struct json_limits *lim, struct found *f)
{
    int line = 0, data_lines = 0;
    for (size_t i = 0; i < len; line++) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        size_t n = end - i;
        if (n && text[i + n - 1] == '\r')
            n--;
        if (n >= 5 && memcmp(text + i, "data:", 5) == 0) {
            data_lines++;
            size_t k = i + 5;
            while (k < i + n && text[k] == ' ')
                k++;
            size_t m = i + n - k;
            if (!(m == 6 && memcmp(text + k, "[DONE]", 6) == 0)) {
                struct kn_err err = {0};
                struct json_value *doc = NULL;
                if (json_parse(text + k, m, lim, &doc, &err) != KN_OK) {
                    printf("receipt: %s: line %d is a stream event that is not JSON: %s\n", path,
                           line + 1, err.msg);
                    return -1;
                }
                find_receipts(doc, line + 1, f);
                json_free(doc);
            }
        }
        i = end + 1;
    }
    return data_lines;
}

/* Checks each receipt found, one after the other: the first failure's exit code, else 0. */
static int verify_found(const char *path, const char *what, struct found *f,
                        const struct receipt_verify_opts *o)
{
    int code = RECEIPT_EXIT_IDENTICAL;
    for (int i = 0; i < f->n; i++) {
        printf("%sreceipt %d of %d in %s (%s), under %s\n", i ? "\n" : "", i + 1, f->n, path,
               what, f->where[i]);
        fflush(stdout);
        /* as if read from the response's file: model.file is looked for beside it */
        int c = receipt_verify_json(f->receipt[i], path, o, stdout);
        f->receipt[i] = NULL; /* freed by the verifier */
        if (code == RECEIPT_EXIT_IDENTICAL)
            code = c;
    }
    return code;
}

/* Verifies path: a receipt as it is, or the receipts a saved server response holds. */
static int verify_file(const char *path, const struct receipt_verify_opts *o)
{
    char *text = NULL;
    size_t len = 0;
    struct kn_err err = {0};
    /* Anything unreadable, or too large, is receipt_verify's to report, as for a receipt. */
    if (kn_read_file(path, RECEIPT_MAX_BYTES, &text, &len, &err) != KN_OK)
        return receipt_verify(path, o, stdout);
    struct json_limits lim = RECEIPT_JSON_LIMITS;
    lim.max_depth += VERIFY_RESPONSE_DEPTH;
    struct json_value *doc = NULL;
    struct found f = {0};
    char kind[80] = "a server response";
    int code;
    if (json_parse(text, len, &lim, &doc, &err) == KN_OK) {
        if (!is_response(doc)) { /* a receipt (or not one: the verifier says why), read
                                  * again under the receipt's own limits */
            json_free(doc);
            code = receipt_verify_text(text, len, path, o, stdout);
            free(text);
            return code;
        }
        const char *obj = json_str(json_get(doc, "object"));
        if (obj)
            snprintf(kind, sizeof kind, "a %s", obj);
        const struct json_value *e = json_get(doc, "error");
        if (json_is(e, JSON_OBJECT) && !json_get(doc, "choices")) {
            const char *msg = json_str(json_get(e, "message"));
            printf("receipt: %s is an error response, not a receipt: %s\n", path,
                   msg ? msg : "(no message)");
            json_free(doc);
            free(text);
            return RECEIPT_EXIT_MALFORMED;
        }
        find_receipts(doc, 0, &f);
        json_free(doc);
    } else {
        int lines = parse_stream(path, text, len, &lim, &f);
        if (lines < 0) {
            found_free(&f);
            free(text);
            return RECEIPT_EXIT_MALFORMED;
        }
        if (lines == 0) { /* neither JSON nor a stream: the JSON error, as for a receipt
                           * (not parsed a second time: a huge file costs one parse) */
            kn_err_prefix(&err, path);
            printf("receipt: %s\n", err.msg);
            free(text);
            return RECEIPT_EXIT_MALFORMED;
        }
        snprintf(kind, sizeof kind, "a stream of %d events", lines);
    }
    free(text);
    if (f.nomem) {
        printf("receipt: out of memory\n");
        code = RECEIPT_EXIT_ERROR;
    } else if (f.n == 0) {
        printf("receipt: no receipt in this response (%s): a server response carries it under "
               "\"receipt\" when the request sets \"receipt\": true (with \"n\" > 1, each choice's "
               "under choices[i].receipt; a stream, in its final chunk)\n", kind);
        code = RECEIPT_EXIT_MALFORMED;
    } else {
        code = verify_found(path, kind, &f, o);
    }
    found_free(&f);
    return code;
}

static const char *const verify_usage =
    "FILE [--model PATH] [--device CLASS] [--threads N] [--public-key HEX]\n"
    "\n"
    "FILE is a receipt, or a saved server response that holds receipts: a chat completion\n"
    "or completion (\"receipt\": true in the request), a stream's final chunk, or a whole\n"
    "stream's 'data: {...}' lines; each receipt in it is checked in turn.\n"
    "\n"
    "Checks a receipt: its token hashes, its signature, that the model file is the\n"
    "receipt's (by BLAKE3), then reruns the recorded prompt tokens with the recorded\n"
    "settings on one sequence with every speed feature off, and prints 'identical' or the\n"
    "first output token that differs. The rerun's progress (tokens done of the prompt's and\n"
    "the output's) goes to standard error.\n"
    "\n"
    "It also renders the input again with the recorded template and settings and checks it\n"
    "gives the prompt tokens, and decodes the output tokens (stop strings and reasoning split\n"
    "as recorded) and checks they give output.text byte for byte.\n"
    "\n"
    "exit status: 0 identical; 1 could not check (I/O, model does not load); 2 usage;\n"
    "3 malformed receipt; 4 token hashes do not match; 5 signature invalid (or absent with\n"
    "--public-key); 6 model missing or not the receipt's; 7 the rerun differs (or ran under\n"
    "another numerics version); 8 input, output.text or model.size is not what the tokens\n"
    "and the model file say.";

int cmd_verify(int argc, char **argv)
{
    const char *model = NULL, *device = NULL, *public_key = NULL;
    int64_t threads = session_default_threads(), gpu_layers = -1;
    const struct cli_opt opts[] = {
        {"model", 'm', CLI_STR, &model, "PATH", "the model file, when it moved since the receipt was made", NULL, NULL},
        {"device", 0, CLI_STR, &device, "DEV", "rerun on this device: a CPU class (e.g. cpu-x86_64-scalar), " DEVICE_HELP "; default: the receipt's class where this machine has it, else the CPU", NULL, NULL},
        {"gpu-layers", 0, CLI_INT, &gpu_layers, "N", "with a GPU: the first N layers on it (default: the receipt's)", NULL, CLI_ALIAS_GPU_LAYERS},
        {"threads", 't', CLI_INT, &threads, "N", "threads for the rerun, 1..256 (default: CPUs online, at most " CLI_XSTR(SESSION_THREADS_MAX_DEFAULT) "; never changes its result)", NULL, NULL},
        {"public-key", 0, CLI_STR, &public_key, "HEX", "require a signature made with this Ed25519 public key", NULL, NULL},
        CLI_OPT_END,
    };
    const char *pos[1];
    int n_pos;
    int rc = cli_parse("verify-receipt", verify_usage, argc, argv, opts, pos, 1, &n_pos);
    if (rc == 1)
        return 0;
    if (rc)
        return RECEIPT_EXIT_USAGE;
    if (n_pos != 1) {
        fprintf(stderr, "kinetic verify-receipt: give a receipt file; see 'kinetic verify-receipt --help'\n");
        return RECEIPT_EXIT_USAGE;
    }
    if (threads < 1 || threads > KERN_POOL_MAX_THREADS) {
        fprintf(stderr, "kinetic verify-receipt: --threads must be in 1..%d\n", KERN_POOL_MAX_THREADS);
        return RECEIPT_EXIT_USAGE;
    }
    if (public_key && !receipt_key_hex_ok(public_key)) {
        fprintf(stderr, "kinetic verify-receipt: --public-key must be an Ed25519 public key as 64 "
                        "hex digits, not '%.80s'\n", public_key);
        return RECEIPT_EXIT_USAGE;
    }
    if (gpu_layers < -1 || gpu_layers > INT32_MAX) {
        fprintf(stderr, "kinetic verify-receipt: --gpu-layers must be 0 or more\n");
        return RECEIPT_EXIT_USAGE;
    }
    struct receipt_verify_opts o = {model, device, (int)threads, public_key, gpu_layers,
                                    kn_progress_mode_for(stderr)};
    int code = verify_file(pos[0], &o);
    fflush(stdout);
    return code;
}
