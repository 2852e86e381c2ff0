/* receipt.h: receipts (the receipt spec in the shared seeds; docs/receipts.md): what a
 * run was (model, build, device class, settings, prompt tokens) and what it produced
 * (output tokens and text), optionally signed with Ed25519 over the canonical compact
 * JSON of every other field.
 *
 * A receipt is built from a run, written as pretty JSON, read back strictly (every field
 * present with its type, nothing unknown), and checked: token hashes, signature, model
 * hash, then a re-run (src/receipt/verify.c). */
#ifndef KN_RECEIPT_H
#define KN_RECEIPT_H

#include "../base/base.h"
#include "../base/json.h"
#include "../base/progress.h"
#include "../engine/session.h"
#include "../sample/sample.h"

#include <stdio.h>

/* The receipt format version ("receipt") Kinetic writes: 2, signed over RFC 8785 (JCS,
 * JSON_JCS), so any JCS library rebuilds the signed bytes from a parsed receipt. Version 1
 * receipts (signed over JSON_COMPACT: insertion order, Python's float text, exact int64)
 * are still read and verified over that legacy form; receipt_version_style is the one map
 * between them. A receipt holding an integer JCS cannot sign exactly (a seed beyond 2^53)
 * is still written as version 1 (receipt_version_for). */
#define RECEIPT_VERSION 2
#define RECEIPT_VERSION_LEGACY 1
#define RECEIPT_KEY_HEX 64  /* an Ed25519 public key as hex */
#define RECEIPT_SIG_HEX 128 /* an Ed25519 signature as hex */

/* The one nesting limit for receipts: the deepest JSON a receipt file may hold. A
 * receipt nests what it records (messages, tools, template kwargs, a response_format's
 * schema) at most RECEIPT_WRAP_DEPTH levels deeper than the input had it (run's
 * --json-schema: sampling.response_format.json_schema.schema), and input is at most
 * JSON_MAX_INPUT_DEPTH deep (src/base/json.h), so every receipt Kinetic writes reads
 * back. docs/receipts.md states both. */
#define RECEIPT_WRAP_DEPTH 4
#define RECEIPT_MAX_DEPTH (JSON_MAX_INPUT_DEPTH + RECEIPT_WRAP_DEPTH)
/* The largest receipt file read (bytes), and the most JSON values in it: the ids a
 * context can hold (MODEL_MAX_CTX + 1, checked in receipt.c) and about 1M more for
 * messages, tools and schemas, so a hostile file cannot make the reader build a huge tree. */
#define RECEIPT_MAX_BYTES ((size_t)64 << 20)
#define RECEIPT_MAX_VALUES ((size_t)2 << 20)
#define RECEIPT_JSON_LIMITS                                                               \
    ((struct json_limits){.max_bytes = RECEIPT_MAX_BYTES, .max_depth = RECEIPT_MAX_DEPTH, \
                          .max_values = RECEIPT_MAX_VALUES})

/* How the input became the prompt tokens (the receipt's "template" object). Absent
 * (present == false) in receipts made before Kinetic recorded it. */
struct receipt_template {
    bool present;
    /* "jinja"; a built-in family ("raw", "chatml", "llama3", ...); "text": the input
     * string tokenized with special tokens parsed and BOS added (the server's
     * /v1/completions); "ids": the input string is the token ids (--prompt-ids). */
    char engine[16];
    /* Chat engines: "model" (chosen from the model file as run and serve choose),
     * "file" (a --chat-template file, its source in text) or "forced" (--chat-format,
     * --raw). "" for text and ids. */
    char source[8];
    char blake3[65];             /* jinja: the BLAKE3 of the template's source */
    char *text;                  /* source "file": the template's source */
    bool add_generation_prompt;
    struct json_value *kwargs;   /* the template variables given, or NULL */
    struct json_value *tools;    /* the tool definitions given, or NULL */
    bool has_now;                /* the template reads the clock (strftime_now) */
    int64_t now;                 /* ... and this is what it read (chat_renderer.now) */
};

/* The reasoning split output.text was made with ("output.think"); absent: none. */
struct receipt_think {
    bool present;
    char open[64], close[64];
    bool inside;                 /* the output started inside the reasoning */
};

struct receipt {
    /* The format version ("receipt"), which selects the canonical form the signature
     * covers: as read, or receipt_version_for's choice for a built receipt; 0: choose
     * (receipt_version_for) when written. */
    int64_t format;
    /* kinetic */
    char version[32];       /* Kinetic's version, e.g. "0.1.0" */
    char build[32];         /* first 16 hex digits of the executable's BLAKE3 */
    char numerics[256];     /* the numerics contract, e.g. "canonical-1", or a device's own
                               class (vulkan-<gpu>-<driver>) when it failed its self-test */
    /* model */
    char *model_file;       /* base name */
    char *model_path;       /* as given on the command line */
    uint64_t model_size;
    char model_blake3[65];
    /* device */
    char device_class[128]; /* "cpu-x86_64-avx512" ..., "vulkan-<gpu>" */
    char *device_name;      /* the CPU's or the GPU's model name */
    int64_t ctx_size;       /* load settings that change the bits */
    int64_t gpu_layers;     /* --gpu-layers: the layers a device ran; 0: none (CPU only),
                               and then not written */
    char cache_type[8];     /* KV cache element type: "f32", "f16" or "q8_0" */
    /* input: the chat messages (array of {role, content}) or the prompt text (string) */
    struct json_value *input;
    struct receipt_template tmpl;
    /* prompt */
    int32_t *prompt_ids;
    int64_t n_prompt;
    /* sampling */
    struct sample_params sampling;
    int64_t max_tokens;     /* -1: no limit (null) */
    char **stop;            /* stop strings */
    int64_t n_stop;
    char *grammar;          /* the GBNF text generation was constrained by, or NULL */
    struct json_value *response_format; /* the request's response_format as given, or NULL */
    /* output */
    char finish[16];        /* "stop" or "length" */
    char *text;
    size_t text_len;        /* text may hold NUL bytes (a model can emit them) */
    struct receipt_think think;
    int32_t *output_ids;
    int64_t n_output;
    /* signature (optional) */
    bool has_signature;
    char public_key[RECEIPT_KEY_HEX + 1];
    char signature[RECEIPT_SIG_HEX + 1];
};

/* Frees every owned field and zeroes r. */
void receipt_free(struct receipt *r);

/* BLAKE3 of token ids as little-endian 32-bit integers, as 64 hex digits + NUL. */
void receipt_tokens_blake3(const int32_t *ids, int64_t n, char out_hex[65]);

/* The receipt as a JSON tree in the spec's field order; with or without "signature". */
KN_MUST_USE enum kn_status receipt_to_json(const struct receipt *r, bool with_signature,
                                           struct json_value **out, struct kn_err *err);
/* The canonical JSON the signature covers (every field but "signature"), in the form of
 * r's format version (receipt_version_style). */
KN_MUST_USE enum kn_status receipt_signed_bytes(const struct receipt *r, char **out,
                                                size_t *out_len, struct kn_err *err);

/* The canonical form a receipt of format version v is signed over (JSON_JCS for 2,
 * JSON_COMPACT for 1); false for a version this Kinetic does not read. */
KN_MUST_USE bool receipt_version_style(int64_t v, enum json_style *style);
/* The version a receipt with r's values is written as: RECEIPT_VERSION, unless it holds an
 * integer Kinetic uses exactly beyond 2^53 (sampling.seed, model.size, template.now),
 * which RFC 8785's doubles cannot sign exactly: then RECEIPT_VERSION_LEGACY, whose form is
 * exact for every int64 (though a JavaScript round trip breaks its signature). */
int64_t receipt_version_for(const struct receipt *r);

/* Reads a receipt strictly from a parsed document. Every field must be present with
 * its type and nothing unknown may be there; the token hashes and counts are not
 * checked here (receipt_check_hashes). */
KN_MUST_USE enum kn_status receipt_from_json(const struct json_value *doc, struct receipt *r,
                                             struct kn_err *err);
/* Reads a receipt file (at most RECEIPT_MAX_BYTES, RECEIPT_MAX_DEPTH deep). */
KN_MUST_USE enum kn_status receipt_read(const char *path, struct receipt *r, struct kn_err *err);
/* Writes the receipt (pretty JSON, atomically). */
KN_MUST_USE enum kn_status receipt_write(const struct receipt *r, const char *path,
                                         struct kn_err *err);

/* Checks prompt and output counts and BLAKE3s against the ids. KN_E_MISMATCH names the
 * field that does not match. */
KN_MUST_USE enum kn_status receipt_check_hashes(const struct json_value *doc,
                                               const struct receipt *r, struct kn_err *err);

/* ---------------------------------------------------------------- signing */

/* An Ed25519 signing key. The file holds the 32-byte secret seed as 32 raw bytes or as 64
 * hex digits (surrounding whitespace allowed). */
struct receipt_key {
    unsigned char sk[64]; /* libsodium's secret key (seed || public key) */
    unsigned char pk[32];
};
KN_MUST_USE enum kn_status receipt_key_load(const char *path, struct receipt_key *key,
                                            struct kn_err *err);
/* Wipes the secret. */
void receipt_key_wipe(struct receipt_key *key);
/* Signs r (sets public_key, signature, has_signature). */
KN_MUST_USE enum kn_status receipt_sign(struct receipt *r, const struct receipt_key *key,
                                        struct kn_err *err);

enum receipt_sig_state {
    RECEIPT_SIG_ABSENT = 0,
    RECEIPT_SIG_VALID,
    RECEIPT_SIG_INVALID,
};
/* Checks the signature over the canonical form of doc without its "signature" member, in
 * the form of the receipt's version (doc is the parsed receipt file, so any change to any
 * field shows, the version included). */
enum receipt_sig_state receipt_check_signature(const struct json_value *doc,
                                               const struct receipt *r);


/* ---------------------------------------------------------------- from a run */

struct chat_renderer;
/* Records how a renderer made a prompt: its engine, where the template came from (its
 * BLAKE3, and its source for a --chat-template file), the renderer's and the request's
 * template variables (merged as the renderer merges them), the tools, whether the
 * generation prompt was added and, for a template that reads the clock, the time it read
 * (chat_prompt.now). The engine "raw" for --raw and a base model. */
KN_MUST_USE enum kn_status receipt_template_from_renderer(struct receipt_template *t,
                                                          const struct chat_renderer *cr,
                                                          const struct json_value *tools,
                                                          const struct json_value *kwargs,
                                                          bool add_generation_prompt,
                                                          int64_t now, struct kn_err *err);
/* A template record for prompts made without a chat template: "text" or "ids". */
void receipt_template_plain(struct receipt_template *t, const char *engine);
void receipt_template_free(struct receipt_template *t);
/* A deep copy of src into dst. */
KN_MUST_USE enum kn_status receipt_template_copy(struct receipt_template *dst,
                                                 const struct receipt_template *src,
                                                 struct kn_err *err);
/* Whether name is an engine a template record may name. */
bool receipt_template_engine_known(const char *name);

/* What a finished generation hands over to become a receipt is the session's record
 * (struct session_record, engine/session.h: session_record_init fills the session's part),
 * so run, chat, serve and verify describe a run with the same fields. */
/* Fills r from a run: Kinetic's version and build id, the numerics version, the model
 * file's size and BLAKE3 (through the model-hash cache), the active device class and the
 * CPU's name. */
KN_MUST_USE enum kn_status receipt_from_run(struct receipt *r, const struct session_record *run,
                                            struct kn_err *err);

/* ---------------------------------------------------------------- verification */

/* verify-receipt's exit codes (documented in docs/receipts.md). */
enum receipt_exit {
    RECEIPT_EXIT_IDENTICAL = 0, /* every check passed and the rerun is identical */
    RECEIPT_EXIT_ERROR = 1,     /* could not check: I/O, memory, model does not load */
    RECEIPT_EXIT_USAGE = 2,     /* bad command line */
    RECEIPT_EXIT_MALFORMED = 3, /* not a receipt: bad JSON, missing or mistyped field */
    RECEIPT_EXIT_HASHES = 4,    /* a token count or BLAKE3 does not match the ids */
    RECEIPT_EXIT_SIGNATURE = 5, /* the signature is invalid (or absent when required) */
    RECEIPT_EXIT_MODEL = 6,     /* the model file is missing or is not the receipt's */
    RECEIPT_EXIT_DIFFERS = 7,   /* the rerun produced other tokens */
    RECEIPT_EXIT_TEXT = 8,      /* input or output.text is not what the tokens are */
};

struct receipt_verify_opts {
    const char *model;      /* NULL: the receipt's model.path */
    const char *device;     /* NULL: the receipt's class (a GPU of it, else this CPU's best
                             * class); else a CPU class ("cpu-x86_64-scalar"), "cpu", a
                             * registry device ("vulkan:0") or a receipt class ("vulkan-...") */
    int threads;            /* 1..256 */
    const char *public_key; /* NULL, or the hex key the signature must be made with
                             * (64 hex digits, either case; cmd_verify checks the form) */
    int64_t gpu_layers;     /* with a GPU: layers on it; -1: the receipt's (else all) */
    enum kn_progress_mode progress; /* the rerun's tokens done, on standard error
                                     * (KN_PROGRESS_OFF, the zero value: none) */
};

/* Whether s is an Ed25519 public key as hex (64 digits, either case). */
bool receipt_key_hex_ok(const char *s);

/* Checks the receipt at path (token hashes, signature, model, rerun) and prints the
 * report to out. Returns an enum receipt_exit code. */
int receipt_verify(const char *path, const struct receipt_verify_opts *o, FILE *out);
/* The same for a receipt held in memory, as if it had been read from path (the model is
 * looked for beside it; NULL: only model.path or o->model): parsed (doc, owned: freed here),
 * as one found inside a saved server response, or as text (len bytes of JSON), as a client
 * sends it. */
struct json_value;
int receipt_verify_json(struct json_value *doc, const char *path,
                        const struct receipt_verify_opts *o, FILE *out);
int receipt_verify_text(const char *text, size_t len, const char *path,
                        const struct receipt_verify_opts *o, FILE *out);

#endif
