/* sample.c: the sampler chain. Logit biases and the grammar mask come first, then the
 * configured steps (default: penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p,
 * xtc, temperature), then one draw. Candidates are either all n_vocab tokens indexed by
 * id ("unsorted") or a prefix cand[0..k) in the total order (logit desc, id asc); every
 * float step runs in the order docs/numerics.md ("Sampling") states. */
#include "sample.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/json.h"
#include "grammar/grammar.h"
#include "kernels/kernels.h"
#include "token/tok.h"

const uint8_t sample_default_chain[9] = {
    SAMPLE_PENALTIES, SAMPLE_DRY,   SAMPLE_TOP_N_SIGMA, SAMPLE_TOP_K,      SAMPLE_TYPICAL_P,
    SAMPLE_TOP_P,     SAMPLE_MIN_P, SAMPLE_XTC,         SAMPLE_TEMPERATURE,
};

static const char *const step_names[SAMPLE_N_STEPS] = {
    "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature",
};

const char *sample_step_name(int step)
{
    return step >= 0 && step < SAMPLE_N_STEPS ? step_names[step] : NULL;
}

bool sample_step_parse(const char *name, size_t len, int *step)
{
    static const struct {
        const char *name;
        int step;
    } alias[] = {
        {"penalties", SAMPLE_PENALTIES}, {"dry", SAMPLE_DRY},
        {"top_n_sigma", SAMPLE_TOP_N_SIGMA}, {"top-n-sigma", SAMPLE_TOP_N_SIGMA},
        {"top_k", SAMPLE_TOP_K}, {"top-k", SAMPLE_TOP_K},
        {"typ_p", SAMPLE_TYPICAL_P}, {"typical_p", SAMPLE_TYPICAL_P},
        {"typical-p", SAMPLE_TYPICAL_P}, {"typical", SAMPLE_TYPICAL_P}, {"typ-p", SAMPLE_TYPICAL_P},
        {"typ", SAMPLE_TYPICAL_P}, {"top_p", SAMPLE_TOP_P}, {"top-p", SAMPLE_TOP_P},
        {"nucleus", SAMPLE_TOP_P}, {"min_p", SAMPLE_MIN_P}, {"min-p", SAMPLE_MIN_P},
        {"xtc", SAMPLE_XTC}, {"temperature", SAMPLE_TEMPERATURE}, {"temp", SAMPLE_TEMPERATURE},
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (strlen(alias[i].name) == len && memcmp(alias[i].name, name, len) == 0) {
            *step = alias[i].step;
            return true;
        }
    return false;
}

enum kn_status sample_chain_parse(struct sample_params *p, const char *text, struct kn_err *err)
{
    int n = 0;
    const char *s = text;
    while (*s) {
        while (*s == ';' || *s == ',' || *s == ' ')
            s++;
        if (!*s)
            break;
        const char *e = s;
        while (*e && *e != ';' && *e != ',' && *e != ' ')
            e++;
        int step;
        if (!sample_step_parse(s, (size_t)(e - s), &step))
            return kn_fail(err, KN_E_ARG,
                           "samplers: unknown sampler '%.*s' in the chain; use penalties, dry, "
                           "top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature",
                           (int)(e - s), s);
        if (n == SAMPLE_MAX_CHAIN)
            return kn_fail(err, KN_E_ARG, "samplers: the chain has more than %d steps",
                           SAMPLE_MAX_CHAIN);
        p->samplers[n++] = (uint8_t)step;
        s = e;
    }
    if (n == 0)
        return kn_fail(err, KN_E_ARG, "samplers: the chain is empty; name at least one step");
    p->n_samplers = n;
    return KN_OK;
}

uint64_t sample_fresh_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    }
    /* Seeds travel through JSON: keep them exact in a double (53 bits). */
    return s & ((UINT64_C(1) << 53) - 1);
}

/* SplitMix64's finaliser: a bijective mixer with good avalanche. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

float sample_uniform(uint64_t seed, uint64_t index)
{
    uint64_t z = mix64(mix64(seed ^ UINT64_C(0x4b696e6574696321)) + index * UINT64_C(0x9e3779b97f4a7c15));
    return (float)(z >> 40) * 0x1p-24f;
}

uint64_t sample_xtc_key(uint64_t seed)
{
    /* "XTC-strm": any fixed non-zero constant gives a stream unrelated to the token draw. */
    return mix64(seed ^ UINT64_C(0x5854432d7374726d));
}

enum kn_status sample_ctx_init(struct sample_ctx *s, int32_t n_vocab, struct kn_err *err)
{
    memset(s, 0, sizeof *s);
    if (n_vocab <= 0)
        return kn_fail(err, KN_E_ARG, "vocabulary size must be positive, not %d", n_vocab);
    s->n_vocab = n_vocab;
    s->cand = kn_calloc((size_t)n_vocab, sizeof *s->cand, err);
    s->count = kn_calloc((size_t)n_vocab, sizeof *s->count, err);
    s->allowed = kn_calloc((size_t)n_vocab, 1, err);
    s->scratch = kn_calloc((size_t)n_vocab, sizeof *s->scratch, err);
    s->dry_len = kn_calloc((size_t)n_vocab, sizeof *s->dry_len, err);
    s->dry_single = kn_calloc((size_t)n_vocab, 1, err);
    s->mirostat_mu = NAN;
    if (!s->cand || !s->count || !s->allowed || !s->scratch || !s->dry_len || !s->dry_single) {
        sample_ctx_free(s);
        return KN_E_NOMEM;
    }
    return KN_OK;
}

void sample_ctx_free(struct sample_ctx *s)
{
    free(s->cand);
    free(s->count);
    free(s->dry_len);
    free(s->dry_z);
    free(s->dry_single);
    free(s->scratch);
    free(s->allowed);
    memset(s, 0, sizeof *s);
}

const char *sample_tok_piece(const void *tok, int32_t id, size_t *len)
{
    return tok_piece(tok, id, true, len);
}

void sample_ctx_reset(struct sample_ctx *s)
{
    s->mirostat_mu = NAN;
}

enum kn_status sample_ctx_prepare(struct sample_ctx *s, const struct sample_params *p,
                                  int64_t max_history,
                                  const char *(*piece)(const void *pctx, int32_t id, size_t *len),
                                  const void *pctx, struct kn_err *err)
{
    size_t nv = (size_t)s->n_vocab;
    if (max_history < 0)
        return kn_fail(err, KN_E_ARG, "max_history must be >= 0, not %lld", (long long)max_history);
    enum kn_status vst = sample_params_check_vocab(p, s->n_vocab, err);
    if (vst != KN_OK)
        return vst;
    if (max_history > s->max_history) {
        free(s->dry_z);
        s->max_history = 0;
        s->dry_z = kn_calloc((size_t)max_history, sizeof *s->dry_z, err);
        if (!s->dry_z)
            return KN_E_NOMEM;
        s->max_history = max_history;
    }
    s->piece = piece;
    s->pctx = pctx;
    memset(s->dry_single, 0, nv);
    if (piece && p->dry_multiplier != 0) {
        for (int32_t id = 0; id < s->n_vocab; id++) {
            size_t len;
            const char *t = piece(pctx, id, &len);
            for (int b = 0; t && b < p->n_dry_breakers; b++) {
                size_t bl = strlen(p->dry_breakers[b]);
                for (size_t o = 0; o + bl <= len; o++)
                    if (memcmp(t + o, p->dry_breakers[b], bl) == 0) {
                        s->dry_single[id] = 1;
                        break;
                    }
            }
        }
    }
    sample_ctx_reset(s);
    return KN_OK;
}

void sample_ctx_set_grammar(struct sample_ctx *s, struct grammar_state *g,
                            const struct grammar_vocab *gv)
{
    assert(!g || (gv && grammar_vocab_n(gv) == s->n_vocab)); /* sized for the same logits */
    s->grammar = g;
    s->gvocab = gv;
}

/* The total order of candidates: higher logit first, then lower id. */
static inline bool cand_before(const struct sample_cand *a, const struct sample_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const struct sample_cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* The sort key of a finite or +inf logit: unsigned order of keys is descending order of
 * logits, and -0 and +0 (equal logits) get the same key, as cand_before sees them. */
static inline uint32_t cand_key(float l)
{
    if (l == 0)
        l = 0; /* -0 -> +0 */
    uint32_t u;
    memcpy(&u, &l, sizeof u);
    uint32_t asc = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~asc;
}

/* Sorts cand[0..n) (finite or +inf logits, ids ascending) into the total order with a
 * stable LSD radix sort on the logit key: ties keep their ascending ids, so the result is
 * exactly the order cand_before defines (the same as any comparison sort gives), in
 * O(n) instead of O(n log n) calls through qsort's comparator: sorting a 262k vocabulary
 * for top-p was a third of decode time. */
static void radix_sort_cands(struct sample_cand *cand, int32_t n, struct sample_cand *scratch)
{
    enum { BITS = 11, BUCKETS = 1 << BITS };
    uint32_t count[BUCKETS];
    struct sample_cand *src = cand, *dst = scratch;
    for (int shift = 0; shift < 32; shift += BITS) {
        memset(count, 0, sizeof count);
        for (int32_t i = 0; i < n; i++)
            count[(cand_key(src[i].logit) >> shift) & (BUCKETS - 1)]++;
        uint32_t sum = 0;
        for (int b = 0; b < BUCKETS; b++) {
            uint32_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (int32_t i = 0; i < n; i++)
            dst[count[(cand_key(src[i].logit) >> shift) & (BUCKETS - 1)]++] = src[i];
        struct sample_cand *t = src;
        src = dst;
        dst = t;
    }
    /* Three passes (11 + 11 + 10 bits): the result is in scratch. */
    memcpy(cand, src, (size_t)n * sizeof *cand);
}

/* Moves the k first candidates in the total order to cand[0..k), sorted. A min-heap of
 * the best k seen so far: O(n log k). */
static void select_top_k(struct sample_cand *cand, int32_t n, int32_t k, struct sample_cand *scratch)
{
    if (k >= n) {
        /* The whole order. -inf candidates come last in id order (they are in id order
         * whenever this runs on all tokens), so only the finite ones need sorting: under a
         * grammar that is often a small part. Any sort gives the same (total) order. */
        int32_t nf = 0, ni = 0;
        for (int32_t i = 0; i < n; i++)
            if (cand[i].logit != -INFINITY)
                cand[nf++] = cand[i];
            else
                scratch[ni++] = cand[i];
        memcpy(cand + nf, scratch, (size_t)ni * sizeof *cand);
        bool ids_up = true;
        for (int32_t i = 1; i < nf && ids_up; i++)
            ids_up = cand[i - 1].id < cand[i].id;
        if (ids_up && nf >= 2048)
            radix_sort_cands(cand, nf, scratch);
        else
            qsort(cand, (size_t)nf, sizeof *cand, cand_cmp);
        bool by_id = true; /* the -inf ones kept their relative order */
        for (int32_t i = nf + 1; i < n && by_id; i++)
            by_id = cand[i - 1].id < cand[i].id;
        if (!by_id)
            qsort(cand + nf, (size_t)ni, sizeof *cand, cand_cmp);
        return;
    }
    /* heap[0] is the worst of the kept candidates */
    for (int32_t i = 1; i < k; i++) {
        int32_t c = i;
        while (c > 0) {
            int32_t parent = (c - 1) / 2;
            if (!cand_before(&cand[parent], &cand[c]))
                break;
            struct sample_cand t = cand[c];
            cand[c] = cand[parent];
            cand[parent] = t;
            c = parent;
        }
    }
    for (int32_t i = k; i < n; i++) {
        if (!cand_before(&cand[i], &cand[0]))
            continue;
        cand[0] = cand[i];
        int32_t c = 0;
        for (;;) {
            int32_t l = 2 * c + 1, r = l + 1, worst = c;
            if (l < k && cand_before(&cand[worst], &cand[l]))
                worst = l;
            if (r < k && cand_before(&cand[worst], &cand[r]))
                worst = r;
            if (worst == c)
                break;
            struct sample_cand t = cand[c];
            cand[c] = cand[worst];
            cand[worst] = t;
            c = worst;
        }
    }
    qsort(cand, (size_t)k, sizeof *cand, cand_cmp);
}


/* ---------------------------------------------------------------- the chain */

struct chain {
    struct sample_ctx *s;
    const struct sample_params *p;
    int32_t n;        /* n_vocab */
    int32_t k;        /* live candidates: cand[0..k) when sorted, all n (by id) when not */
    bool sorted;      /* cand[0..k) is in the total order */
    bool probs;       /* cand[i].p = kern_expf(l_i - l_0) for i < k, their sum in sum */
    float sum;
    int32_t min_keep; /* >= 1 */
};

static void ensure_sorted(struct chain *c)
{
    if (c->sorted)
        return;
    select_top_k(c->s->cand, c->n, c->n, c->s->scratch);
    c->sorted = true;
    c->k = c->n;
    c->probs = false;
}

/* Sorted, and nothing left has any probability. */
static bool dead(const struct chain *c)
{
    return c->s->cand[0].logit == -INFINITY;
}

static void compute_probs(struct chain *c)
{
    if (c->probs)
        return;
    struct sample_cand *cand = c->s->cand;
    float sum = 0;
    for (int32_t i = 0; i < c->k; i++) {
        cand[i].p = kern_expf(cand[i].logit - cand[0].logit);
        sum = sum + cand[i].p;
    }
    c->sum = sum;
    c->probs = true;
}

/* After a step changed logits of a sorted prefix: restore the order. */
static void resort(struct chain *c)
{
    if (c->sorted)
        qsort(c->s->cand, (size_t)c->k, sizeof *c->s->cand, cand_cmp);
    c->probs = false;
}

static void penalize(struct sample_cand *c, const struct sample_params *p, int32_t count)
{
    if (c->logit <= 0)
        c->logit = c->logit * p->repeat_penalty;
    else
        c->logit = c->logit / p->repeat_penalty;
    c->logit = c->logit - ((float)count * p->frequency_penalty + p->presence_penalty);
}

static void step_penalties(struct chain *c, const int32_t *history, int64_t n_history)
{
    const struct sample_params *p = c->p;
    struct sample_ctx *s = c->s;
    if (p->repeat_last_n == 0 ||
        (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    int64_t n = p->repeat_last_n < 0 || p->repeat_last_n > n_history ? n_history : p->repeat_last_n;
    const int32_t *recent = history + (n_history - n);
    for (int64_t i = 0; i < n; i++)
        if (recent[i] >= 0 && recent[i] < s->n_vocab)
            s->count[recent[i]]++;
    if (!c->sorted) {
        for (int64_t i = 0; i < n; i++) {
            int32_t id = recent[i];
            if (id < 0 || id >= s->n_vocab || s->count[id] == 0)
                continue; /* out of range, or already applied */
            penalize(&s->cand[id], p, s->count[id]);
            s->count[id] = 0;
        }
        return;
    }
    for (int32_t i = 0; i < c->k; i++)
        if (s->count[s->cand[i].id] > 0)
            penalize(&s->cand[i], p, s->count[s->cand[i].id]);
    for (int64_t i = 0; i < n; i++)
        if (recent[i] >= 0 && recent[i] < s->n_vocab)
            s->count[recent[i]] = 0;
    resort(c);
}

/* DRY: how many of the most recent tokens come after the last sequence breaker, found
 * in the text (a breaker may span tokens). rev[-i] is the i-th token from the end. */
static int64_t dry_rep_limit(const struct chain *c, const int32_t *rev, int64_t n)
{
    const struct sample_ctx *s = c->s;
    const struct sample_params *p = c->p;
    if (!s->piece || p->n_dry_breakers == 0)
        return n;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *t = s->piece(s->pctx, rev[-i], &len);
        if (!t)
            continue;
        int64_t best = -1;
        for (size_t o = 0; o < len; o++)
            for (int b = 0; b < p->n_dry_breakers; b++) {
                const char *br = p->dry_breakers[b];
                if (t[o] != br[0])
                    continue;
                size_t bl = strlen(br), m = 0, off = o, tl = len;
                const char *tp = t;
                int64_t j = i;
                bool ok = true;
                while (m < bl) {
                    if (off == tl) { /* continue into the next, more recent token */
                        if (j == 0) {
                            ok = false;
                            break;
                        }
                        j--;
                        tp = s->piece(s->pctx, rev[-j], &tl);
                        if (!tp)
                            tl = 0;
                        off = 0;
                        continue;
                    }
                    if (tp[off] != br[m]) {
                        ok = false;
                        break;
                    }
                    off++;
                    m++;
                }
                if (ok && (best < 0 || j < best))
                    best = j;
            }
        if (best >= 0)
            return best; /* the tokens after the breaker's last token */
    }
    return n;
}

static void step_dry(struct chain *c, const int32_t *history, int64_t n_history)
{
    const struct sample_params *p = c->p;
    struct sample_ctx *s = c->s;
    if (p->dry_multiplier == 0.0f || p->dry_base < 1.0f || p->dry_penalty_last_n == 0 || !s->dry_z)
        return;
    int64_t n = p->dry_penalty_last_n < 0 || p->dry_penalty_last_n > n_history
                    ? n_history
                    : p->dry_penalty_last_n;
    if (n > s->max_history)
        n = s->max_history;
    if (n <= p->dry_allowed_length)
        return;
    const int32_t *rev = history + n_history - 1; /* rev[-i]: i-th token from the end */
    int64_t limit = dry_rep_limit(c, rev, n);
    if (limit < p->dry_allowed_length)
        return;
    /* Z-function of the reversed window: z[i] = how many tokens before position i (from
     * the end) repeat the last tokens; the token that followed them is rev[-(i-1)]. */
    int32_t *z = s->dry_z;
    z[0] = (int32_t)n;
    int64_t l = 0, r = 0;
    for (int64_t i = 1; i < n; i++) {
        int64_t zi = 0;
        if (i < r)
            zi = r - i < z[i - l] ? r - i : z[i - l];
        while (i + zi < n && rev[-zi] == rev[-(i + zi)])
            zi++;
        z[i] = (int32_t)zi;
        if (i + zi > r) {
            l = i;
            r = i + zi;
        }
    }
    for (int64_t i = 1; i < n; i++) {
        int64_t len = z[i] < limit ? z[i] : limit;
        int32_t tok = rev[-(i - 1)];
        if (len < p->dry_allowed_length || tok < 0 || tok >= s->n_vocab)
            continue;
        if (s->dry_len[tok] < len + 1)
            s->dry_len[tok] = (int32_t)(len + 1);
    }
    int max_exp = 0;
    if (p->dry_base > 1.000001f)
        max_exp = (int)(88.7228391f / kern_logf(p->dry_base));
    int32_t m = c->sorted ? c->k : c->n;
    for (int32_t i = 0; i < m; i++) {
        int32_t id = s->cand[i].id, len = s->dry_len[id];
        if (len == 0 || s->dry_single[id])
            continue;
        int e = len - 1 - p->dry_allowed_length;
        if (max_exp > 0 && e > max_exp)
            e = max_exp;
        float pw = 1.0f;
        for (int j = 0; j < e; j++)
            pw = pw * p->dry_base;
        s->cand[i].logit = s->cand[i].logit - p->dry_multiplier * pw;
    }
    for (int64_t i = 1; i < n; i++) {
        int32_t tok = rev[-(i - 1)];
        if (tok >= 0 && tok < s->n_vocab)
            s->dry_len[tok] = 0;
    }
    if (c->sorted)
        resort(c);
}

static void step_top_n_sigma(struct chain *c)
{
    float nsig = c->p->top_n_sigma;
    struct sample_cand *cand = c->s->cand;
    int32_t m = c->sorted ? c->k : c->n;
    if (nsig <= 0 || m <= 1)
        return;
    float max = -INFINITY, sum = 0;
    int32_t cnt = 0;
    for (int32_t i = 0; i < m; i++) {
        float l = cand[i].logit;
        if (l != -INFINITY) {
            if (l > max)
                max = l;
            sum = sum + l;
            cnt++;
        }
    }
    if (cnt == 0)
        return;
    float mean = sum / (float)cnt, acc = 0;
    for (int32_t i = 0; i < m; i++) {
        float l = cand[i].logit;
        if (l != -INFINITY) {
            float d = l - mean;
            acc = acc + d * d;
        }
    }
    float limit = max - nsig * sqrtf(acc / (float)cnt);
    if (c->sorted) {
        int32_t keep = 0;
        while (keep < c->k && !(cand[keep].logit < limit))
            keep++;
        c->k = keep;
    } else {
        for (int32_t i = 0; i < m; i++)
            if (cand[i].logit < limit)
                cand[i].logit = -INFINITY;
    }
    c->probs = false;
}

static void step_top_k(struct chain *c)
{
    int32_t tk = c->p->top_k;
    if (!c->sorted) {
        int32_t kk = tk > 0 && tk < c->n ? tk : c->n;
        select_top_k(c->s->cand, c->n, kk, c->s->scratch);
        c->sorted = true;
        c->k = kk;
        c->probs = false;
    } else if (tk > 0 && tk < c->k) {
        c->k = tk;
        c->probs = false;
    }
}

static int scratch_cmp(const void *pa, const void *pb)
{
    const struct sample_cand *a = pa, *b = pb;
    if (a->p != b->p)
        return a->p < b->p ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static void step_typical(struct chain *c)
{
    float tp = c->p->typical_p;
    if (tp <= 0 || tp >= 1)
        return;
    ensure_sorted(c);
    if (dead(c))
        return;
    compute_probs(c);
    struct sample_cand *cand = c->s->cand, *scr = c->s->scratch;
    float S = c->sum, h = 0;
    for (int32_t i = 0; i < c->k; i++) {
        float q = cand[i].p / S;
        if (q > 0)
            h = h + -q * kern_logf(q);
    }
    for (int32_t i = 0; i < c->k; i++) {
        float q = cand[i].p / S;
        scr[i].id = i; /* position in the sorted prefix: ties keep the total order */
        scr[i].p = q > 0 ? fabsf(-kern_logf(q) - h) : INFINITY;
        scr[i].logit = q;
    }
    qsort(scr, (size_t)c->k, sizeof *scr, scratch_cmp);
    float cum = 0;
    int32_t last = c->k;
    for (int32_t j = 0; j < c->k; j++) {
        cum = cum + scr[j].logit;
        if (cum > tp && j + 1 >= c->min_keep) {
            last = j + 1;
            break;
        }
    }
    for (int32_t j = 0; j < last; j++)
        cand[scr[j].id].p = -1; /* mark kept */
    int32_t w = 0;
    for (int32_t i = 0; i < c->k; i++)
        if (cand[i].p < 0)
            cand[w++] = cand[i];
    c->k = w;
    c->probs = false;
}

static void step_top_p(struct chain *c)
{
    if (c->p->top_p >= 1.0f)
        return;
    ensure_sorted(c);
    if (dead(c))
        return;
    compute_probs(c);
    struct sample_cand *cand = c->s->cand;
    float limit = c->p->top_p * c->sum, cum = 0;
    int32_t keep = c->k;
    for (int32_t i = 0; i < c->k; i++) {
        cum = cum + cand[i].p;
        if (cum >= limit && i + 1 >= c->min_keep) {
            keep = i + 1;
            break;
        }
    }
    c->k = keep;
    c->probs = false;
}

static void step_min_p(struct chain *c)
{
    if (c->p->min_p <= 0)
        return;
    ensure_sorted(c);
    if (dead(c))
        return;
    compute_probs(c);
    struct sample_cand *cand = c->s->cand;
    int32_t keep = 1;
    while (keep < c->k && cand[keep].p >= c->p->min_p)
        keep++;
    if (keep < c->min_keep)
        keep = c->min_keep < c->k ? c->min_keep : c->k;
    c->k = keep;
    c->probs = false;
}

static void step_xtc(struct chain *c, uint64_t token_index)
{
    const struct sample_params *p = c->p;
    if (p->xtc_probability <= 0 || p->xtc_threshold > 0.5f)
        return;
    ensure_sorted(c);
    if (c->k < 2 || dead(c))
        return;
    if (sample_uniform(sample_xtc_key(p->seed), token_index) > p->xtc_probability)
        return;
    compute_probs(c);
    struct sample_cand *cand = c->s->cand;
    int32_t last = 0;
    for (int32_t i = 0; i < c->k; i++) {
        if (cand[i].p / c->sum >= p->xtc_threshold)
            last = i;
        else
            break;
    }
    if (last > 0 && c->k - last >= c->min_keep) {
        memmove(cand, cand + last, (size_t)(c->k - last) * sizeof *cand);
        c->k -= last;
        c->probs = false;
    }
}

static void step_temperature(struct chain *c)
{
    struct sample_cand *cand = c->s->cand;
    int32_t m = c->sorted ? c->k : c->n;
    float max = -INFINITY;
    if (c->sorted)
        max = cand[0].logit;
    else
        for (int32_t i = 0; i < m; i++)
            if (cand[i].logit > max)
                max = cand[i].logit;
    if (max == -INFINITY)
        return;
    /* Relative to the best, so the best becomes exactly 0 and the draw's kern_expf(l_i - l_0)
     * is kern_expf((l_i - l_max) / T), as in canonical-1's original chain. */
    for (int32_t i = 0; i < m; i++)
        cand[i].logit = (cand[i].logit - max) / c->p->temperature;
    c->probs = false;
}

/* Nothing has any probability: the lowest id the grammar allows (-1 if none); without a
 * grammar the lowest id. */
static int32_t fallback(const struct chain *c)
{
    if (c->s->grammar) {
        for (int32_t id = 0; id < c->n; id++)
            if (c->s->allowed[id])
                return id;
        return -1;
    }
    return c->sorted ? c->s->cand[0].id : 0;
}

/* One draw from cand[0..k) with weights kern_expf(l_i - l_0); *sum receives their sum. */
static int32_t draw(struct chain *c, uint64_t token_index, float *sum_out)
{
    struct sample_cand *cand = c->s->cand;
    float sum = 0;
    for (int32_t i = 0; i < c->k; i++) {
        cand[i].p = kern_expf(cand[i].logit - cand[0].logit);
        sum = sum + cand[i].p;
    }
    float target = sample_uniform(c->p->seed, token_index) * sum, cum = 0;
    *sum_out = sum;
    for (int32_t i = 0; i < c->k; i++) {
        cum = cum + cand[i].p;
        if (cum > target)
            return i;
    }
    /* Rounding left no candidate (u * S rounded up to S): canonical-1 takes the last
     * kept one. Under a grammar that one may be masked (p = 0): take the last with p > 0. */
    int32_t last = c->k - 1;
    if (c->s->grammar)
        while (last > 0 && cand[last].p == 0)
            last--;
    return last;
}

#define KN_LOG2E 1.44269504f
#define KN_LN2 0.693147181f

static int32_t mirostat(struct chain *c, uint64_t token_index)
{
    struct sample_ctx *s = c->s;
    const struct sample_params *p = c->p;
    step_temperature(c);
    ensure_sorted(c);
    if (dead(c))
        return fallback(c);
    compute_probs(c);
    struct sample_cand *cand = s->cand;
    float mu = s->mirostat_mu;
    if (mu != mu)
        mu = 2.0f * p->mirostat_tau;
    float S = c->sum;
    if (p->mirostat == 2) {
        int32_t keep = 0;
        while (keep < c->k && !(-kern_logf(cand[keep].p / S) * KN_LOG2E > mu))
            keep++;
        c->k = keep > 0 ? keep : 1;
    } else {
        /* Zipf exponent estimated from the 100 most likely tokens, then top-k. */
        float sum_tb = 0, sum_tt = 0;
        for (int32_t i = 0; i + 1 < c->k && i < 99; i++) {
            float pa = cand[i].p / S, pb = cand[i + 1].p / S;
            if (!(pb > 0))
                break;
            float t = kern_logf((float)(i + 2) / (float)(i + 1));
            float b = kern_logf(pa / pb);
            sum_tb = sum_tb + t * b;
            sum_tt = sum_tt + t * t;
        }
        int32_t kk = 1;
        if (sum_tt > 0) {
            float s_hat = sum_tb / sum_tt, eps = s_hat - 1;
            float num = eps * kern_expf(mu * KN_LN2);
            float den = 1 - kern_expf(-eps * kern_logf((float)c->n));
            float kf = kern_expf(kern_logf(num / den) / s_hat);
            if (kf >= 1)
                kk = kf >= (float)c->k ? c->k : (int32_t)kf;
        }
        c->k = kk;
    }
    float sum;
    int32_t j = draw(c, token_index, &sum);
    float surprise = -kern_logf(cand[j].p / sum) * KN_LOG2E;
    s->mirostat_mu = mu - p->mirostat_eta * (surprise - p->mirostat_tau);
    return cand[j].id;
}

static int32_t sample_chain(struct chain *c, const int32_t *history, int64_t n_history,
                            uint64_t token_index, int first_step)
{
    const struct sample_params *p = c->p;
    struct sample_cand *cand = c->s->cand;
    const uint8_t *steps = p->n_samplers > 0 ? p->samplers : sample_default_chain;
    int n_steps = p->n_samplers > 0 ? p->n_samplers : (int)sizeof sample_default_chain;

    if (p->temperature <= 0) {
        /* Greedy: only the steps that move logits matter to the argmax. */
        for (int i = 0; i < n_steps; i++) {
            if (steps[i] == SAMPLE_PENALTIES)
                step_penalties(c, history, n_history);
            else if (steps[i] == SAMPLE_DRY)
                step_dry(c, history, n_history);
        }
        int32_t best = 0;
        for (int32_t i = 1; i < c->n; i++)
            if (cand[i].logit > cand[best].logit)
                best = i;
        if (cand[best].logit == -INFINITY && c->s->grammar)
            return fallback(c);
        return best;
    }
    if (p->mirostat != 0)
        return mirostat(c, token_index);

    for (int i = first_step; i < n_steps; i++) {
        switch (steps[i]) {
        case SAMPLE_PENALTIES: step_penalties(c, history, n_history); break;
        case SAMPLE_DRY: step_dry(c, history, n_history); break;
        case SAMPLE_TOP_N_SIGMA: step_top_n_sigma(c); break;
        case SAMPLE_TOP_K: step_top_k(c); break;
        case SAMPLE_TYPICAL_P: step_typical(c); break;
        case SAMPLE_TOP_P: step_top_p(c); break;
        case SAMPLE_MIN_P: step_min_p(c); break;
        case SAMPLE_XTC: step_xtc(c, token_index); break;
        case SAMPLE_TEMPERATURE: step_temperature(c); break;
        default: break;
        }
    }
    ensure_sorted(c);
    if (dead(c))
        return fallback(c);
    float sum;
    return cand[draw(c, token_index, &sum)].id;
}

static void load_candidates(struct sample_ctx *s, const struct sample_params *p, const float *logits)
{
    int32_t n = s->n_vocab;
    struct sample_cand *cand = s->cand;
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        cand[i].id = i;
        cand[i].logit = l != l ? -INFINITY : l; /* NaN never wins */
        cand[i].p = 0;
    }
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias[i].id;
        float b = p->logit_bias[i].bias;
        if (id < 0 || id >= n)
            continue;
        cand[id].logit = b <= -100.0f ? -INFINITY : cand[id].logit + b;
    }
}

/* The grammar's fast path. Masking the whole vocabulary and then taking the top k gives
 * the same candidates as walking the unmasked candidates in the total order and keeping
 * the first k the grammar allows, provided the steps before top_k only move logits one
 * token at a time (penalties, DRY: they commute with the mask) and those k all have
 * finite logits (steps that are off are skipped). Checking a few hundred tokens one by one is much cheaper than masking
 * 262k when the grammar allows most of them (inside a JSON string). Returns the step to
 * resume the chain at, with cand[0..k) set, or -1 to take the full mask (candidates are
 * then reloaded). Greedy is the case k = 1 with every step before it. */
static int grammar_fast(struct chain *c, const int32_t *history, int64_t n_history,
                        const uint8_t *steps, int n_steps)
{
    const struct sample_params *p = c->p;
    struct sample_ctx *s = c->s;
    if (p->mirostat != 0)
        return -1;
    int32_t k;
    int resume;
    if (p->temperature <= 0) {
        k = 1;
        resume = n_steps;
    } else {
        int j = 0;
        while (j < n_steps && steps[j] != SAMPLE_TOP_K) {
            bool off = (steps[j] == SAMPLE_TOP_N_SIGMA && p->top_n_sigma <= 0) ||
                       (steps[j] == SAMPLE_TYPICAL_P && (p->typical_p <= 0 || p->typical_p >= 1)) ||
                       (steps[j] == SAMPLE_TOP_P && p->top_p >= 1) ||
                       (steps[j] == SAMPLE_MIN_P && p->min_p <= 0) ||
                       (steps[j] == SAMPLE_XTC &&
                        (p->xtc_probability <= 0 || p->xtc_threshold > 0.5f));
            if (steps[j] != SAMPLE_PENALTIES && steps[j] != SAMPLE_DRY && !off)
                return -1;
            j++;
        }
        if (j == n_steps || p->top_k <= 0)
            return -1;
        k = p->top_k;
        resume = j + 1;
    }
    int32_t m = k + k / 2 < 256 ? 256 : k + k / 2;
    if (m >= c->n)
        return -1;
    for (int i = 0; i < resume; i++) {
        if (steps[i] == SAMPLE_PENALTIES)
            step_penalties(c, history, n_history);
        else if (steps[i] == SAMPLE_DRY)
            step_dry(c, history, n_history);
    }
    select_top_k(s->cand, c->n, m, s->scratch);
    int32_t found = 0;
    for (int32_t i = 0; i < m && found < k; i++) {
        if (s->cand[i].logit == -INFINITY)
            break;
        if (grammar_allows(s->grammar, s->gvocab, s->cand[i].id))
            s->cand[found++] = s->cand[i];
    }
    if (found < k)
        return -1;
    c->sorted = true;
    c->k = k;
    c->probs = false;
    return resume;
}

int32_t sample_token(struct sample_ctx *s, const struct sample_params *p, const float *logits,
                     const int32_t *history, int64_t n_history, uint64_t token_index)
{
    int32_t n = s->n_vocab;
    struct sample_cand *cand = s->cand;
    const uint8_t *steps = p->n_samplers > 0 ? p->samplers : sample_default_chain;
    int n_steps = p->n_samplers > 0 ? p->n_samplers : (int)sizeof sample_default_chain;
    struct chain c = {
        .s = s, .p = p, .n = n, .k = n, .sorted = false, .probs = false,
        .min_keep = p->min_keep > 1 ? p->min_keep : 1,
    };
    load_candidates(s, p, logits);
    int first = 0;
    if (s->grammar) {
        first = grammar_fast(&c, history, n_history, steps, n_steps);
        if (first < 0) {
            first = 0;
            c.k = n;
            c.sorted = false;
            c.probs = false;
            load_candidates(s, p, logits);
            grammar_mask(s->grammar, s->gvocab, s->allowed);
            for (int32_t i = 0; i < n; i++)
                if (!s->allowed[i])
                    cand[i].logit = -INFINITY;
        }
    }
    int32_t id;
    if (first > 0 && p->temperature <= 0)
        id = cand[0].id; /* greedy through the fast path */
    else
        id = sample_chain(&c, history, n_history, token_index, first);
    if (s->grammar && id >= 0)
        grammar_accept_token(s->grammar, s->gvocab, id);
    return id;
}
