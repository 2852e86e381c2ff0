/* draft.c: RAD-1, speculative decoding without a draft model: its constants and rules
 * (see engine.h). The generation step (slots.c) applies them.
 *
 * After sampling token t at position p, RAD-1 looks the sequence's recent suffix up in
 * the earlier sequence (prompt and generated text) and proposes the tokens that followed
 * it: d1..dk. One forward pass evaluates [t, d1..dk] at positions p..p+k and returns the
 * logits of every position. Row j is exactly the logits plain decoding would see after
 * d_j, provided d1..dj are the tokens plain decoding samples (docs/numerics.md: a token's
 * result depends only on its own token, position and the KV entries it attends to). So
 * the step samples row 0 with token index n, row 1 with index n+1, ... (each with its own
 * random number and the history up to that position) and moves on to row j+1 only while
 * the sampled token equals d_{j+1}. The first mismatch keeps the sampled token (plain
 * decoding's token) and drops the rest: the sequence goes back to the last valid position
 * and the stale KV entries above it are overwritten by the next pass. */
#include "engine.h"

#include <string.h>

/* Lookup window: suffixes of 4 down to 2 tokens. A single-token match predicts badly on
 * ordinary text (every "the" would draft), and a rejected draft costs a wider pass. */
enum { DRAFT_NGRAM_MAX = 4, DRAFT_NGRAM_MIN = 2, DRAFT_MAX_DEFAULT = 16, DRAFT_LEN_START = 4 };

enum kn_status engine_draft_max(bool no_draft, int64_t draft_max, int64_t max_batch, int32_t *out,
                                struct kn_err *err)
{
    *out = 0;
    if (draft_max < 0 || draft_max > ENGINE_DRAFT_LIMIT)
        return kn_fail(err, KN_E_ARG, "--draft-max must be in 0..%d, not %lld", ENGINE_DRAFT_LIMIT,
                       (long long)draft_max);
    int64_t dmax = no_draft ? 0 : draft_max ? draft_max : DRAFT_MAX_DEFAULT;
    if (dmax > max_batch - 1) /* a pass holds the decoded token and its drafts */
        dmax = max_batch - 1;
    *out = (int32_t)(dmax > 0 ? dmax : 0);
    return KN_OK;
}

int32_t engine_draft_start(int32_t dmax)
{
    return DRAFT_LEN_START < dmax ? DRAFT_LEN_START : dmax;
}

int32_t engine_draft_adapt(int32_t len, int32_t dmax, int64_t accepted, int64_t proposed,
                           struct engine_draft_stats *st)
{
    st->full += accepted == proposed;
    st->none += accepted == 0;
    st->partial += accepted > 0 && accepted < proposed;
    int64_t next = accepted == proposed ? (int64_t)len * 2 : accepted + 1;
    if (next > dmax)
        next = dmax;
    if (next < 1)
        next = 1;
    return (int32_t)next;
}

int64_t engine_draft_next(const int32_t *seq, int64_t p, int32_t len, int64_t room, int64_t n_ctx,
                          int64_t n_out, int64_t max_tokens, int32_t *out)
{
    int64_t lim = len;
    if (lim > n_ctx - 1 - p)
        lim = n_ctx - 1 - p;
    if (max_tokens >= 0 && lim > max_tokens - n_out - 1)
        lim = max_tokens - n_out - 1;
    if (lim > room)
        lim = room;
    if (lim <= 0)
        return 0;
    return engine_draft_propose(seq, p + 1, DRAFT_NGRAM_MAX, DRAFT_NGRAM_MIN, out, lim);
}

int64_t engine_draft_propose(const int32_t *seq, int64_t n, int32_t n_max, int32_t n_min,
                             int32_t *out, int64_t max_out)
{
    if (max_out <= 0 || n_min < 1)
        return 0;
    for (int64_t L = n_max; L >= n_min; L--) {
        if (L >= n)
            continue;
        const int32_t *suf = seq + n - L;
        /* Occurrences start at i, most recent first, with a token after them. */
        for (int64_t i = n - L - 1; i >= 0; i--) {
            if (seq[i] != suf[0] || memcmp(seq + i, suf, (size_t)L * sizeof(int32_t)) != 0)
                continue;
            /* The continuation may run into the proposal itself (periodic text):
             * seq followed by out is the predicted sequence. */
            int64_t k = 0;
            for (; k < max_out; k++) {
                int64_t idx = i + L + k;
                out[k] = idx < n ? seq[idx] : out[idx - n];
            }
            return k;
        }
    }
    return 0;
}
