/* tok_internal.h: the tokenizer's data, shared by tok.c (loading, special tokens,
 * detokenization), tok_spm.c and tok_bpe.c. Not part of the public API. */
#ifndef KN_TOK_INTERNAL_H
#define KN_TOK_INTERNAL_H

#include "tok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define TOK_MAX_REGEX 8

/* One merge of a BPE vocabulary: left and right texts stored back to back in merge_blob. */
struct tok_merge {
    uint32_t off;
    uint32_t left_len;
    uint32_t right_len;
};

/* A growable id vector for one encode call. */
struct tok_ids {
    int32_t *v;
    size_t n, cap;
};

struct tok {
    enum tok_model model;
    char pre_name[64];
    int32_t n_vocab;
    size_t max_text_len; /* the longest token text, in bytes */

    /* Token texts, back to back; token i is text_blob[text_off[i] .. +text_len[i]). */
    char *text_blob;
    uint32_t *text_off;
    uint32_t *text_len;
    float *scores;
    uint8_t *types; /* enum tok_type */

    /* Pieces for detokenization (special rendering), same layout. */
    char *piece_blob;
    uint32_t *piece_off;
    uint32_t *piece_len;
    size_t max_piece;

    /* Open-addressing table: text -> id + 1 (0 = empty). */
    uint32_t *vocab_table;
    uint32_t vocab_mask;

    /* BPE merges: (left, right) -> rank, open addressing, rank + 1 (0 = empty). */
    struct tok_merge *merges;
    char *merge_blob;
    uint32_t n_merges;
    uint32_t *merge_table;
    uint32_t merge_mask;

    /* Byte fallback: SPM <0xXX> token per byte; BPE the token of the byte's code point. */
    int32_t byte_token[256];

    /* Tokens matched whole in the text (control, user-defined, unknown), longest first. */
    int32_t *special_ids;
    int32_t n_special;

    struct tok_special sp;
    int32_t eog[TOK_MAX_EOG];
    int n_eog;

    /* BPE pre-tokenizer. */
    pcre2_code *regex[TOK_MAX_REGEX];
    int n_regex;
    bool ignore_merges; /* a word that is a token is taken whole (llama3) */
    bool nfc;           /* normalize text to NFC first (qwen2) */
};

uint32_t tok_hash_bytes(const void *data, size_t len, uint32_t seed);

bool tok_ids_push(struct tok_ids *v, int32_t id);

/* Appends the tokens of one text fragment (no special tokens in it). Return false only
 * when out of memory. */
bool tok_spm_encode(const struct tok *t, const char *text, size_t len, struct tok_ids *out);
bool tok_bpe_encode(const struct tok *t, const char *text, size_t len, struct tok_ids *out);
bool tok_wpm_encode(const struct tok *t, const char *text, size_t len, struct tok_ids *out);

/* BPE setup: pre-tokenizer regexes for t->pre_name, and the merges table. */
enum kn_status tok_bpe_init(struct tok *t, const struct gguf_file *f, struct kn_err *err);
void tok_bpe_free(struct tok *t);
/* The byte <-> code point map of byte-level BPE. */
uint32_t tok_bpe_byte_to_cpt(uint8_t b);
/* The byte a code point stands for, or -1. */
int tok_bpe_cpt_to_byte(uint32_t cpt);

/* UTF-8 helpers. */
size_t tok_utf8_len(uint8_t lead);
size_t tok_utf8_encode(uint32_t cpt, char *out);

#endif
