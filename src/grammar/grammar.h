/* grammar.h: GBNF grammars (llama.cpp's format) that constrain generation.
 *
 * A grammar is a set of rules, "name ::= alternatives", with literals ("abc", escapes
 * \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), character classes ([a-z0-9_], [^"\\], with
 * ranges, negation and the same escapes), "." (any character), rule references, groups
 * ( ... ), alternatives |, the repetitions * + ? {m} {m,} {m,n}, and # comments. A rule
 * ends at the end of its line, except inside parentheses and after "|" or "::=".
 * Matching is on Unicode code points (the text is UTF-8); the start rule is "root" unless
 * named otherwise.
 *
 * A grammar_state tracks every way the text so far can continue (a set of stacks of
 * positions in the rules, as in a pushdown automaton). grammar_mask walks a trie of the
 * vocabulary's token pieces with those stacks, so a whole vocabulary is filtered in time
 * proportional to the part of the trie the grammar allows, not to its size.
 *
 * The JSON Schema converter turns a schema into GBNF text (then parse it like any other). */
#ifndef KN_GRAMMAR_H
#define KN_GRAMMAR_H

#include "../base/base.h"

struct grammar;        /* compiled rules; read-only, shareable between threads */
struct grammar_vocab;  /* the vocabulary's pieces as a trie; read-only, shareable */
struct grammar_state;  /* one request's position in a grammar */
struct tok;

/* Compiles GBNF text (len bytes) with start rule root (NULL: "root"). Errors give the
 * line and column and say what was expected ("line 3, column 12: expected '::=' after the
 * rule name"); undefined rules, rules defined twice and left recursion (which a
 * top-down matcher cannot run) are errors too. */
KN_MUST_USE enum kn_status grammar_parse(const char *text, size_t len, const char *root,
                                         struct grammar **out, struct kn_err *err);
void grammar_free(struct grammar *g);
/* Counts, for tests and logs. */
int grammar_n_rules(const struct grammar *g);

/* The vocabulary as pieces: piece(pctx, id, &len) gives token id's bytes (copied);
 * tokens with empty pieces can never be sampled under a grammar; the eog ids are allowed
 * exactly when the grammar is complete. */
KN_MUST_USE enum kn_status grammar_vocab_init(struct grammar_vocab **out, int32_t n_vocab,
                                              const char *(*piece)(const void *pctx, int32_t id,
                                                                   size_t *len),
                                              const void *pctx, const int32_t *eog, int n_eog,
                                              struct kn_err *err);
/* The same from a tokenizer: pieces without control tokens (tok_piece(special = false)),
 * end-of-generation ids from tok_eog_ids. n_vocab: the model's logit count (ids past the
 * tokenizer's have no piece and are never allowed), or 0 for the tokenizer's. */
KN_MUST_USE enum kn_status grammar_vocab_from_tok(struct grammar_vocab **out, const struct tok *t,
                                                  int32_t n_vocab, struct kn_err *err);
void grammar_vocab_free(struct grammar_vocab *gv);
int32_t grammar_vocab_n(const struct grammar_vocab *gv);

/* The matcher's bounds, so that one request's grammar cannot hold up the others: a
 * state tracks at most GRAMMAR_MAX_STACKS ways to continue the text at once, and filtering
 * one token (grammar_mask, grammar_allows, between two accepted texts) takes at most
 * GRAMMAR_WORK_PER_PIECE stack steps per vocabulary entry (at least GRAMMAR_MIN_WORK; a
 * step is some 10 ns, a JSON grammar takes about 9 per entry). A grammar past either (a
 * 50,000-way enum, 30 optional repetitions side by side) fails its state:
 * grammar_state_init returns KN_E_LIMIT, or, when it happens later, the state refuses
 * every token from then on and grammar_state_error says why. */
#define GRAMMAR_MAX_STACKS 4096
#define GRAMMAR_WORK_PER_PIECE 64
#define GRAMMAR_MIN_WORK 1000000

/* A state at the start of g (which must outlive it). */
KN_MUST_USE enum kn_status grammar_state_init(struct grammar_state **out, const struct grammar *g,
                                              struct kn_err *err);
void grammar_state_free(struct grammar_state *st);
/* Makes dst (a state of the same grammar) a copy of src: a snapshot to return to, e.g.
 * before checking draft tokens that may be rejected. */
KN_MUST_USE enum kn_status grammar_state_copy(struct grammar_state *dst,
                                              const struct grammar_state *src, struct kn_err *err);
/* Back to the start of the grammar. */
void grammar_state_reset(struct grammar_state *st);
/* Feeds text; false (and the state unchanged) if the grammar cannot continue with it. A
 * trailing incomplete UTF-8 sequence is kept until its remaining bytes arrive. */
bool grammar_accept_bytes(struct grammar_state *st, const char *bytes, size_t len);
/* Feeds one token: its piece, or for an end-of-generation token, the end (allowed only
 * when complete). False (state unchanged) if not allowed. */
bool grammar_accept_token(struct grammar_state *st, const struct grammar_vocab *gv, int32_t id);
/* The text so far is a complete sentence of the grammar (it may still go on). */
bool grammar_is_complete(const struct grammar_state *st);
/* An end-of-generation token was accepted. */
bool grammar_is_done(const struct grammar_state *st);
/* Why the state refuses everything (a limit above, or out of memory), or NULL. */
const char *grammar_state_error(const struct grammar_state *st);
/* Sets allowed[id] (gv's n_vocab bytes) to 1 for the tokens that can continue the text,
 * 0 for the others. Out of memory makes the state refuse everything (all 0). */
void grammar_mask(struct grammar_state *st, const struct grammar_vocab *gv, uint8_t *allowed);
/* True if token id can continue the text (the same answer grammar_mask gives for id). */
bool grammar_allows(struct grammar_state *st, const struct grammar_vocab *gv, int32_t id);

/* ---------------------------------------------------------------- JSON */

/* GBNF for any JSON value with an object at the top (OpenAI's response_format
 * {"type": "json_object"}), whitespace limited as in llama.cpp's json.gbnf. */
const char *grammar_json_object_gbnf(void);

/* Converts a JSON Schema (len bytes of JSON text) to GBNF text in a new NUL-terminated
 * buffer (*out, free()). Supported: type (string, number, integer, boolean, null, object,
 * array, or a list of them), properties + required (properties in the schema's order,
 * required ones always present), additionalProperties (false or absent: no other keys;
 * true or a schema: other keys allowed only on objects without "properties"), enum,
 * const, items + minItems/maxItems, prefixItems (2020-12 tuples: item i follows
 * prefixItems[i], items the ones after, items: false closes the array; minItems/maxItems
 * count them all), minLength/maxLength, format (date, time, date-time, uuid), anyOf/oneOf
 * (as alternatives), $ref to "#/$defs/NAME" or "#/definitions/NAME" of the same document
 * (any other ref, "#" included, is an error naming it), and {} or true for any value. Anything else that would constrain the
 * output (pattern, minimum, allOf...) is an error naming the keyword and its path, so an
 * output never silently misses the schema. */
KN_MUST_USE enum kn_status grammar_from_json_schema(const char *schema, size_t len, char **out,
                                                    struct kn_err *err);
struct json_value;
/* Converts n parsed schemas into one GBNF text (*out, free()) without a root: rule
 * names[i] is a value of schemas[i] (nothing after it), so a caller's own rules can use
 * several schemas (the tool-call grammar: one per tool). Same support and errors as above;
 * each schema's $refs resolve in that schema. */
KN_MUST_USE enum kn_status grammar_from_json_schemas(const struct json_value *const *schemas,
                                                     const char *const *names, int n, char **out,
                                                     struct kn_err *err);

/* The GBNF an OpenAI response_format asks for, in a new buffer (*out, free()):
 * {"type": "text"} (or NULL / null): none (*out = NULL); {"type": "json_object"}: any JSON
 * object (grammar_json_object_gbnf), or with llama.cpp's "schema" member that schema;
 * {"type": "json_schema", "json_schema": {"schema": S, ...}}: S converted. Errors name the
 * member that is wrong. */
KN_MUST_USE enum kn_status grammar_from_response_format(const struct json_value *rf, char **out,
                                                        struct kn_err *err);

#endif
