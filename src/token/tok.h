/* tok.h: tokenizers read from a GGUF vocabulary.
 *
 * Two families, chosen by tokenizer.ggml.model:
 *   "llama": SentencePiece-style. Spaces become U+2581, an optional space prefix, adjacent
 *            symbols merged by token score (best first, ties leftmost), unknown characters
 *            spelled with <0xXX> byte tokens (or the unknown token).
 *   "gpt2":  byte-level BPE. A pre-tokenizer (PCRE2 regexes chosen by tokenizer.ggml.pre)
 *            splits the text into words, bytes map to printable code points, and adjacent
 *            symbols merge by merge rank (lowest first, ties leftmost).
 *   "bert":  WordPiece for BERT-style embedding models (tok_wpm.c).
 * All reproduce llama.cpp's behaviour on its vocabulary tests, and Hugging Face's
 * tokenizers on the tokenizer.json the vocabulary came from (tests/py/test_tok_hf.py).
 *
 * A loaded tokenizer owns copies of everything it needs (the GGUF file may be closed) and
 * is read-only afterwards, so one tokenizer serves any number of threads at once. */
#ifndef KN_TOK_H
#define KN_TOK_H

#include "../base/base.h"
#include "../gguf/gguf.h"

#define TOK_NULL (-1)

enum tok_model {
    TOK_MODEL_SPM = 1, /* tokenizer.ggml.model = "llama" */
    TOK_MODEL_BPE = 2, /* tokenizer.ggml.model = "gpt2" */
    TOK_MODEL_WPM = 3, /* tokenizer.ggml.model = "bert" (WordPiece, embedding models) */
};

/* tokenizer.ggml.token_type values (as in GGUF files). Append only. */
enum tok_type {
    TOK_T_UNDEFINED = 0,
    TOK_T_NORMAL = 1,
    TOK_T_UNKNOWN = 2,
    TOK_T_CONTROL = 3,
    TOK_T_USER_DEFINED = 4,
    TOK_T_UNUSED = 5,
    TOK_T_BYTE = 6,
};

/* The special ids of a vocabulary; TOK_NULL where the vocabulary has none. */
struct tok_special {
    int32_t bos, eos, eot, eom, unk, pad, sep;
    bool add_bos;          /* tok_encode(add_special) prepends bos */
    bool add_eos;          /* tok_encode(add_special) appends eos */
    bool add_space_prefix; /* SPM: a space is put before text that starts a fragment */
};

struct tok;

/* Reads the vocabulary of an open GGUF file. Every id and length in the file is checked.
 * Errors name the key that is wrong; an unsupported tokenizer.ggml.model or
 * tokenizer.ggml.pre gives KN_E_UNSUPPORTED naming it. */
KN_MUST_USE enum kn_status tok_load(struct tok **out, const struct gguf_file *f, struct kn_err *err);
void tok_free(struct tok *t);

enum tok_model tok_model(const struct tok *t);
/* The pre-tokenizer name in use ("default" when the file names none; SPM: "default"). */
const char *tok_pre_name(const struct tok *t);
int32_t tok_n_vocab(const struct tok *t);
const struct tok_special *tok_specials(const struct tok *t);
/* The token's text as stored in the vocabulary (not NUL-terminated), or NULL if out of
 * range. */
const char *tok_text(const struct tok *t, int32_t id, size_t *len);
enum tok_type tok_type_of(const struct tok *t, int32_t id);
/* The id of a token whose text is exactly s (len bytes), or TOK_NULL. */
int32_t tok_find(const struct tok *t, const char *s, size_t len);

/* True for the ids that end generation: eos, eot, eom and the family's end-of-turn tokens
 * found by text (<end_of_turn>, <|im_end|>, <|eot_id|>, <|eom_id|>, <|end|>, <|endoftext|> ...). */
bool tok_is_eog(const struct tok *t, int32_t id);
/* The end-of-generation ids (at most TOK_MAX_EOG). */
#define TOK_MAX_EOG 16
int tok_eog_ids(const struct tok *t, int32_t *ids);

/* Tokenizes text (len bytes; any bytes, invalid UTF-8 included).
 * add_special: prepend bos (append eos) where the vocabulary asks for it
 *              (tokenizer.ggml.add_bos_token / add_eos_token).
 * parse_special: control-token texts in the text (e.g. "<|im_start|>") become their ids.
 *              User-defined tokens are always matched whole, as in llama.cpp and Hugging
 *              Face. Leave it false for user text so it cannot smuggle control tokens in.
 * Writes at most max ids; *n receives the full count. Returns KN_E_LIMIT when *n > max
 * (call again with a larger buffer; ids may be NULL when max is 0). */
KN_MUST_USE enum kn_status tok_encode(const struct tok *t, const char *text, size_t len,
                                      bool add_special, bool parse_special, int32_t *ids,
                                      size_t max, size_t *n, struct kn_err *err);

/* As tok_encode, into a new array (*ids, freed with free(); NULL when *n is 0). */
KN_MUST_USE enum kn_status tok_encode_alloc(const struct tok *t, const char *text, size_t len,
                                            bool add_special, bool parse_special, int32_t **ids,
                                            size_t *n, struct kn_err *err);

/* As tok_encode_alloc with parse_special, except that a control (or unknown) token's text
 * becomes that token only where all its bytes have marks[i] != 0 (marks: len bytes, as
 * jinja_render_marked gives them: 1 for the chat template's own text, 0 for message
 * content). Elsewhere it is ordinary text. The text between matched tokens is tokenized
 * as one piece whatever its marks, so a harmless prompt gives exactly the tokens of
 * tok_encode(parse_special = true). */
KN_MUST_USE enum kn_status tok_encode_marked(const struct tok *t, const char *text,
                                             const uint8_t *marks, size_t len, bool add_special,
                                             int32_t **ids, size_t *n, struct kn_err *err);
/* The bytes a token stands for: SPM U+2581 becomes a space and <0xXX> one byte; BPE code
 * points map back to bytes. Control and unknown tokens give their text only when special
 * is true, otherwise nothing. The result may be an incomplete UTF-8 sequence. Returns the
 * piece (inside the tokenizer) and its length in *len; an out-of-range id gives len 0. */
const char *tok_piece(const struct tok *t, int32_t id, bool special, size_t *len);
/* The longest piece of the vocabulary, in bytes. */
size_t tok_max_piece(const struct tok *t);

/* Detokenizes ids into out (cap bytes), like llama.cpp's detokenize without removing
 * specials: when the vocabulary adds a space prefix, the first piece loses one leading
 * space. *n receives the full length; KN_E_LIMIT when it exceeds cap. */
KN_MUST_USE enum kn_status tok_decode(const struct tok *t, const int32_t *ids, size_t n_ids,
                                      bool special, char *out, size_t cap, size_t *n,
                                      struct kn_err *err);

/* A streaming detokenizer: pieces go in one token at a time, complete UTF-8 comes out, and
 * an incomplete multi-byte sequence at the end is held back until its remaining bytes
 * arrive (bytes that can never complete a sequence are passed through as they are). */
struct tok_stream {
    const struct tok *tok;
    bool special;          /* render control tokens */
    uint8_t held[4];       /* the bytes of an incomplete trailing sequence */
    int n_held;
};

void tok_stream_init(struct tok_stream *s, const struct tok *t, bool special);
/* Adds one token. out must hold tok_max_piece(t) + 4 bytes; *n receives the bytes written. */
void tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t *n);
/* Emits whatever is held back (at most 4 bytes) at the end of a stream. */
void tok_stream_flush(struct tok_stream *s, char *out, size_t *n);

#endif
