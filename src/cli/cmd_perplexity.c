/* cmd_perplexity.c: kinetic perplexity, llama-perplexity's measurement on Kinetic.
 *
 * The method (the one llama.cpp's tools/perplexity uses, so the figures compare):
 * the text is tokenized with the vocabulary's special tokens (a BOS where the model asks
 * for one), cut into n_chunk = n_tokens / c chunks of c tokens; each chunk is evaluated
 * alone from an empty cache, its first token replaced by BOS when the model adds one;
 * the tokens of the second half are scored: for j in [c/2, c-2], -log p(token j+1 | the
 * chunk up to j). The running estimate exp(mean NLL) is printed after each chunk as
 * "[i]ppl,"; the final line is "Final estimate: PPL = X +/- Y" with Y = PPL times the
 * standard error of the mean NLL, sqrt((E[nll^2] - E[nll]^2) / (count - 1)).
 *
 * --kl-divergence-base FILE saves, beside the perplexity, every scored row's
 * log-probabilities in llama-perplexity's file layout (so either tool reads the other's
 * file); --kl-divergence then compares the model's distributions against that file:
 * mean KL divergence, the perplexities of both and their ratio, Δp of the right token
 * and how often the top token agrees, printed as llama-perplexity does.
 *
 * The file (little-endian): "_logits_", u32 c, i32 n_vocab, i32 n_chunk, the i32 tokens
 * of all chunks (n_chunk * c, as tokenized, no BOS substitution), then for each chunk its
 * c - 1 - c/2 scored rows, each nv = 2 * ceil(n_vocab / 2) + 4 u16: two f32 (scale, the
 * smallest log-probability kept, m) and n_vocab u16 q with log p = scale * q + m for the
 * log-probabilities within 16 of the largest logit (q = 0 below). */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "token/tok.h"

static const char *const ppl_usage =
    "MODEL.gguf -f FILE [-c N] [--chunks N] [-b N] [-t N] [--kl-divergence-base FILE [--kl-divergence]]\n"
    "\n"
    "Perplexity of the model over a text, with llama-perplexity's method and output: chunks\n"
    "of -c tokens (default 512) from an empty cache, BOS first where the model adds one, the\n"
    "second half of each chunk scored, '[i]ppl' after each chunk and 'Final estimate: PPL = X\n"
    "+/- Y'. --kl-divergence-base FILE also saves the scored log-probabilities (llama-perplexity's\n"
    "file layout); with --kl-divergence, compares against a saved FILE instead: mean KL\n"
    "divergence, PPL ratio, Δp and top-token agreement (the file's tokens and -c are used).";

#define PPL_MAGIC "_logits_"
#define PPL_KEEP_NATS 16.0f /* log-probabilities kept below the largest (llama.cpp's) */

/* u16 per saved row: the two f32 header words, then n_vocab rounded up to even. */
static size_t row_u16(int32_t n_vocab)
{
    return 2 * (((size_t)n_vocab + 1) / 2) + 4;
}

struct row_stats {
    float max;      /* the largest logit */
    int32_t imax;   /* its id (the first such) */
    float lse;      /* log sum exp(l - max) */
};

/* The max and log-sum-exp of one logits row (the sum in double, as llama.cpp does). */
static struct row_stats row_stats(const float *l, int32_t n)
{
    struct row_stats r = {l[0], 0, 0};
    for (int32_t i = 1; i < n; i++)
        if (l[i] > r.max)
            r.max = l[i], r.imax = i;
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        sum += expf(l[i] - r.max);
    r.lse = (float)log(sum);
    return r;
}

/* Writes one row's log-probabilities into q (row_u16 entries). */
static void row_quantize(const float *l, int32_t n, const struct row_stats *rs, uint16_t *q)
{
    float lo = l[0];
    for (int32_t i = 1; i < n; i++)
        lo = l[i] < lo ? l[i] : lo;
    if (lo < rs->max - PPL_KEEP_NATS)
        lo = rs->max - PPL_KEEP_NATS;
    float hdr[2] = {(rs->max - lo) / 65535.0f, lo - rs->max - rs->lse};
    memcpy(q, hdr, sizeof hdr);
    uint16_t *v = q + 4;
    memset(v, 0, (row_u16(n) - 4) * sizeof *v);
    if (hdr[0] == 0)
        return;
    float inv = 1.0f / hdr[0];
    for (int32_t i = 0; i < n; i++)
        if (l[i] > lo)
            v[i] = (uint16_t)lrintf(inv * (l[i] - lo));
}

/* ---------------------------------------------------------------- KL divergence sums */

struct kld_sums {
    double nll, nll2, nll_base, nll_base2, nll_nll_base, kld, kld2, dp, dp2, dp4;
    float max_dp;
    int64_t same_top, count;
    float *kld_v, *dp_v; /* (count) each row's KLD and Δp, for the percentiles */
};

/* Compares one row of logits l against a saved row q for the right token tok. */
static void kld_row(struct kld_sums *k, const float *l, int32_t n, const uint16_t *q, int32_t tok)
{
    struct row_stats rs = row_stats(l, n);
    float hdr[2];
    memcpy(hdr, q, sizeof hdr);
    const uint16_t *v = q + 4;
    float nll = rs.max + rs.lse - l[tok];
    float nll_base = -(hdr[0] * v[tok] + hdr[1]);
    float norm = rs.max + rs.lse;
    double sum = 0;
    int32_t imax_base = 0;
    float best = 0;
    for (int32_t i = 0; i < n; i++) {
        float lpb = hdr[0] * v[i] + hdr[1];
        if (i == 0 || lpb > best)
            best = lpb, imax_base = i;
        if (lpb > -PPL_KEEP_NATS)
            sum += expf(lpb) * (lpb - (l[i] - norm));
    }
    float dp = expf(-nll) - expf(-nll_base);
    k->nll += nll;
    k->nll2 += (double)nll * nll;
    k->nll_base += nll_base;
    k->nll_base2 += (double)nll_base * nll_base;
    k->nll_nll_base += (double)nll * nll_base;
    k->kld += sum;
    k->kld2 += sum * sum;
    k->dp += dp;
    k->dp2 += (double)dp * dp;
    k->dp4 += (double)dp * dp * dp * dp;
    k->max_dp = fabsf(dp) > k->max_dp ? fabsf(dp) : k->max_dp;
    k->same_top += rs.imax == imax_base;
    k->kld_v[k->count] = (float)sum;
    k->dp_v[k->count] = dp;
    k->count++;
}

/* Mean of a quantity from its sum and sum of squares, and the standard error of that
 * mean (0 for 10 values or fewer). */
static void mean_err(double sum, double sum2, int64_t n, double *mean, double *se)
{
    *mean = n > 0 ? sum / (double)n : 0;
    double var = n > 0 ? sum2 / (double)n - *mean * *mean : 0;
    *se = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0;
}

static double covariance(double sa, double sb, double sab, int64_t n)
{
    if (n < 10)
        return 0;
    double c = sab / (double)n - (sa / (double)n) * (sb / (double)n);
    return c / (double)(n - 1);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The value at fraction f of sorted v (linear between neighbours). */
static float percentile(const float *v, int64_t n, float f)
{
    if (f <= 0)
        return v[0];
    if (f >= 1)
        return v[n - 1];
    float p = f * (float)(n - 1);
    int64_t i = (int64_t)p;
    p -= (float)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

static float median(const float *v, int64_t n)
{
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2] + v[n / 2 - 1]);
}

/* The per-chunk line of --kl-divergence. */
static void kld_print_chunk(const struct kld_sums *k, int chunk)
{
    double lp, lp_se, lb, lb_se, kl, kl_se, ms, ms_se;
    mean_err(k->nll, k->nll2, k->count, &lp, &lp_se);
    mean_err(k->nll_base, k->nll_base2, k->count, &lb, &lb_se);
    double cov = covariance(k->nll, k->nll_base, k->nll_nll_base, k->count);
    mean_err(k->kld, k->kld2, k->count, &kl, &kl_se);
    mean_err(k->dp2, k->dp4, k->count, &ms, &ms_se);
    double rms = sqrt(ms), rms_se = rms > 0 ? 0.5 / rms * ms_se : 0;
    double top = (double)k->same_top / (double)k->count;
    double top_se = k->count > 1 ? sqrt(top * (1 - top) / (double)(k->count - 1)) : 0;
    printf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
           chunk, exp(lp), exp(lp) * lp_se, lp - lb,
           sqrt(fmax(0, lp_se * lp_se + lb_se * lb_se - 2 * cov)), kl, kl_se, 100 * rms,
           100 * rms_se, 100 * top, 100 * top_se);
}

static void kld_print_final(struct kld_sums *k)
{
    int64_t n = k->count;
    if (n < 100) {
        printf("(fewer than 100 scored tokens: no summary statistics)\n");
        return;
    }
    qsort(k->kld_v, (size_t)n, sizeof(float), cmp_float);
    qsort(k->dp_v, (size_t)n, sizeof(float), cmp_float);
    double lp, lp_se, lb, lb_se;
    mean_err(k->nll, k->nll2, n, &lp, &lp_se);
    mean_err(k->nll_base, k->nll_base2, n, &lb, &lb_se);
    double cov = covariance(k->nll, k->nll_base, k->nll_nll_base, n);
    double ppl = exp(lp), ppl_se = ppl * lp_se, pb = exp(lb), pb_se = pb * lb_se;
    double ratio_se = sqrt(fmax(0, lp_se * lp_se + lb_se * lb_se - 2 * cov));
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl_se);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", pb, pb_se);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n",
           lp_se > 0 && lb_se > 0 ? 100 * cov / (lp_se * lb_se) : 0.0);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lp - lb, ratio_se);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lp - lb), exp(lp - lb) * ratio_se);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", ppl - pb,
           sqrt(fmax(0, ppl_se * ppl_se + pb_se * pb_se - 2 * ppl * pb * cov)));
    printf("\n====== KL divergence statistics ======\n");
    double kl, kl_se;
    mean_err(k->kld, k->kld2, n, &kl, &kl_se);
    printf("Mean    KLD: %10.6f ± %10.6f\n", kl, kl_se);
    printf("Maximum KLD: %10.6f\n", k->kld_v[n - 1]);
    static const float fr[] = {0.999f, 0.99f, 0.95f, 0.90f};
    static const char *const fn[] = {"99.9%", "99.0%", "95.0%", "90.0%"};
    for (int i = 0; i < 4; i++)
        printf("%s   KLD: %10.6f\n", fn[i], percentile(k->kld_v, n, fr[i]));
    printf("Median  KLD: %10.6f\n", median(k->kld_v, n));
    static const float lo[] = {0.10f, 0.05f, 0.01f, 0.001f};
    static const char *const ln[] = {"10.0%", " 5.0%", " 1.0%", " 0.1%"};
    for (int i = 0; i < 4; i++)
        printf("%s   KLD: %10.6f\n", ln[i], percentile(k->kld_v, n, lo[i]));
    printf("Minimum KLD: %10.6f\n", k->kld_v[0]);
    printf("\n====== Token probability statistics ======\n");
    double dp, dp_se, ms, ms_se;
    mean_err(k->dp, k->dp2, n, &dp, &dp_se);
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * dp, 100 * dp_se);
    printf("Maximum Δp: %6.3f%%\n", 100 * k->dp_v[n - 1]);
    static const float pf[] = {0.999f, 0.99f, 0.95f, 0.90f, 0.75f};
    static const char *const pn[] = {"99.9%", "99.0%", "95.0%", "90.0%", "75.0%"};
    for (int i = 0; i < 5; i++)
        printf("%s   Δp: %6.3f%%\n", pn[i], 100 * percentile(k->dp_v, n, pf[i]));
    printf("Median  Δp: %6.3f%%\n", 100 * median(k->dp_v, n));
    static const float qf[] = {0.25f, 0.10f, 0.05f, 0.01f, 0.001f};
    static const char *const qn[] = {"25.0%", "10.0%", " 5.0%", " 1.0%", " 0.1%"};
    for (int i = 0; i < 5; i++)
        printf("%s   Δp: %6.3f%%\n", qn[i], 100 * percentile(k->dp_v, n, qf[i]));
    printf("Minimum Δp: %6.3f%%\n", 100 * k->dp_v[0]);
    mean_err(k->dp2, k->dp4, n, &ms, &ms_se);
    double rms = sqrt(ms);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * rms, rms > 0 ? 100 * 0.5 / rms * ms_se : 0.0);
    double top = (double)k->same_top / (double)n;
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * top, 100 * sqrt(top * (1 - top) / (double)(n - 1)));
}

/* ---------------------------------------------------------------- the command */

struct ppl_run {
    struct session s;
    const char *path;          /* --kl-divergence-base */
    FILE *f;
    int32_t *tokens;
    int64_t n_tokens, n_ctx, n_chunk;
    float *logits;             /* (n_ctx - first, n_vocab) */
    uint16_t *q;               /* one saved row, or a chunk's saved rows (--kl-divergence) */
};

/* Evaluates chunk i from an empty cache (BOS first where the model adds one) and leaves
 * the logits of its tokens first..n_ctx-1 in r->logits. */
static enum kn_status eval_chunk(struct ppl_run *r, int64_t i, int64_t first, struct kn_err *err)
{
    struct engine *e = &r->s.e;
    int32_t *t = r->tokens + i * r->n_ctx;
    int32_t keep = t[0];
    const struct tok_special *sp = tok_specials(r->s.tk);
    if (sp->add_bos && sp->bos >= 0)
        t[0] = sp->bos;
    engine_reset(e);
    enum kn_status st = engine_eval_rows(e, t, r->n_ctx, first, r->logits, err);
    t[0] = keep;
    return st;
}

static bool write_all(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n;
}

static bool read_all(FILE *f, void *p, size_t n)
{
    return fread(p, 1, n, f) == n;
}

static int run_perplexity(struct ppl_run *r, struct kn_err *err)
{
    int32_t nv = (int32_t)r->s.n_vocab;
    int64_t first = r->n_ctx / 2, n_score = r->n_ctx - 1 - first;
    size_t ru = row_u16(nv);
    if (r->path) {
        r->f = fopen(r->path, "wb");
        if (!r->f) {
            fprintf(stderr, "kinetic perplexity: cannot create %s: %s\n", r->path, strerror(errno));
            return 1;
        }
        uint32_t c = (uint32_t)r->n_ctx;
        int32_t nc = (int32_t)r->n_chunk;
        if (!write_all(r->f, PPL_MAGIC, 8) || !write_all(r->f, &c, 4) || !write_all(r->f, &nv, 4) ||
            !write_all(r->f, &nc, 4) ||
            !write_all(r->f, r->tokens, (size_t)(r->n_chunk * r->n_ctx) * sizeof(int32_t)))
            goto write_failed;
        fprintf(stderr, "perplexity: saving the scored log-probabilities to %s\n", r->path);
    }
    fprintf(stderr, "perplexity: calculating perplexity over %lld chunks, n_ctx=%lld, batch_size=%lld, n_seq=1\n",
            (long long)r->n_chunk, (long long)r->n_ctx, (long long)r->s.e.n_batch);
    double nll = 0, nll2 = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < r->n_chunk; i++) {
        double t0 = kn_now();
        if (eval_chunk(r, i, first, err) != KN_OK) {
            fprintf(stderr, "kinetic perplexity: %s\n", err->msg);
            return 1;
        }
        if (i == 0)
            fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", kn_now() - t0,
                    (kn_now() - t0) * (double)r->n_chunk / 60.0);
        const int32_t *t = r->tokens + i * r->n_ctx + first;
        for (int64_t j = 0; j < n_score; j++) {
            const float *l = r->logits + (size_t)j * (size_t)nv;
            struct row_stats rs = row_stats(l, nv);
            double v = (double)rs.max + rs.lse - l[t[j + 1]];
            nll += v;
            nll2 += v * v;
            if (r->f) {
                row_quantize(l, nv, &rs, r->q);
                if (!write_all(r->f, r->q, ru * sizeof(uint16_t)))
                    goto write_failed;
            }
        }
        count += n_score;
        printf("[%lld]%.4f,", (long long)i + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    printf("\n");
    if (r->f) {
        FILE *f = r->f;
        r->f = NULL;
        if (fclose(f) != 0) {
            fprintf(stderr, "kinetic perplexity: cannot write %s: %s\n", r->path, strerror(errno));
            return 1;
        }
    }
    nll /= (double)count;
    nll2 = nll2 / (double)count - nll * nll;
    double ppl = exp(nll);
    if (nll2 <= 0 || count < 2) {
        fprintf(stderr, "kinetic perplexity: the log-probabilities have no spread (%lld scored tokens); no error estimate\n",
                (long long)count);
        printf("Final estimate: PPL = %.4f\n", ppl);
        return 1;
    }
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, sqrt(nll2 / (double)(count - 1)) * ppl);
    return 0;
write_failed:
    fprintf(stderr, "kinetic perplexity: cannot write %s: %s\n", r->path, strerror(errno));
    return 1;
}

/* Reads the header and tokens of a saved file; checks them against the model. */
static int kld_open(struct ppl_run *r, int64_t ctx_asked)
{
    r->f = fopen(r->path, "rb");
    if (!r->f) {
        fprintf(stderr, "kinetic perplexity: cannot open %s: %s\n", r->path, strerror(errno));
        return 1;
    }
    char magic[8];
    uint32_t c;
    int32_t nv, nc;
    if (!read_all(r->f, magic, 8) || memcmp(magic, PPL_MAGIC, 8) != 0) {
        fprintf(stderr, "kinetic perplexity: %s is not a file of saved log-probabilities (no '%s' at its start); make one with --kl-divergence-base FILE without --kl-divergence\n",
                r->path, PPL_MAGIC);
        return 1;
    }
    if (!read_all(r->f, &c, 4) || !read_all(r->f, &nv, 4) || !read_all(r->f, &nc, 4)) {
        fprintf(stderr, "kinetic perplexity: %s ends inside its header; the file is truncated\n", r->path);
        return 1;
    }
    if (c < 4 || c > MODEL_MAX_CTX || nc < 1) {
        fprintf(stderr, "kinetic perplexity: %s: context %u and %d chunks are out of range\n", r->path,
                c, nc);
        return 1;
    }
    if (nv != r->s.n_vocab) {
        fprintf(stderr, "kinetic perplexity: %s was saved with a vocabulary of %d tokens; this model has %lld\n",
                r->path, nv, (long long)r->s.n_vocab);
        return 1;
    }
    if (ctx_asked > 0 && ctx_asked != (int64_t)c) {
        fprintf(stderr, "kinetic perplexity: %s was saved with -c %u, not -c %lld; leave -c out or give %u\n",
                r->path, c, (long long)ctx_asked, c);
        return 1;
    }
    r->n_ctx = c;
    r->n_chunk = nc;
    r->n_tokens = (int64_t)c * nc;
    r->tokens = malloc((size_t)r->n_tokens * sizeof *r->tokens);
    if (!r->tokens) {
        fprintf(stderr, "kinetic perplexity: out of memory for %lld tokens\n", (long long)r->n_tokens);
        return 1;
    }
    if (!read_all(r->f, r->tokens, (size_t)r->n_tokens * sizeof *r->tokens)) {
        fprintf(stderr, "kinetic perplexity: %s ends inside its tokens; the file is truncated\n", r->path);
        return 1;
    }
    for (int64_t i = 0; i < r->n_tokens; i++)
        if (r->tokens[i] < 0 || r->tokens[i] >= nv) {
            fprintf(stderr, "kinetic perplexity: %s: token %lld is %d, outside the vocabulary of %d\n",
                    r->path, (long long)i, r->tokens[i], nv);
            return 1;
        }
    return 0;
}

static int run_kld(struct ppl_run *r, struct kn_err *err)
{
    int32_t nv = (int32_t)r->s.n_vocab;
    int64_t first = r->n_ctx / 2, n_score = r->n_ctx - 1 - first;
    size_t ru = row_u16(nv);
    struct kld_sums k = {0};
    k.kld_v = malloc((size_t)(n_score * r->n_chunk) * sizeof(float));
    k.dp_v = malloc((size_t)(n_score * r->n_chunk) * sizeof(float));
    uint16_t *q = malloc((size_t)n_score * ru * sizeof *q);
    int rc = 0;
    if (!k.kld_v || !k.dp_v || !q) {
        fprintf(stderr, "kinetic perplexity: out of memory\n");
        rc = 1;
        goto done;
    }
    fprintf(stderr, "kl_divergence: %lld chunks of %lld tokens from %s\n", (long long)r->n_chunk,
            (long long)r->n_ctx, r->path);
    printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n");
    for (int64_t i = 0; i < r->n_chunk && rc == 0; i++) {
        if (!read_all(r->f, q, (size_t)n_score * ru * sizeof *q)) {
            fprintf(stderr, "kinetic perplexity: %s ends inside chunk %lld's log-probabilities; the file is truncated\n",
                    r->path, (long long)i + 1);
            rc = 1;
            break;
        }
        if (eval_chunk(r, i, first, err) != KN_OK) {
            fprintf(stderr, "kinetic perplexity: %s\n", err->msg);
            rc = 1;
            break;
        }
        const int32_t *t = r->tokens + i * r->n_ctx + first;
        for (int64_t j = 0; j < n_score; j++)
            kld_row(&k, r->logits + (size_t)j * (size_t)nv, nv, q + (size_t)j * ru, t[j + 1]);
        kld_print_chunk(&k, (int)i + 1);
        fflush(stdout);
    }
    if (rc == 0) {
        printf("\n");
        kld_print_final(&k);
    }
done:
    free(k.kld_v);
    free(k.dp_v);
    free(q);
    return rc;
}

int cmd_perplexity(int argc, char **argv)
{
    const char *file = NULL, *kld_base = NULL, *kv_type = SESSION_KV_TYPE_DEFAULT;
    const char *repack_cache = NULL;
    int64_t ctx = 0, chunks = -1, batch = SESSION_BATCH_DEFAULT, threads = 0;
    bool kld = false;
    const char *cache_type_k = NULL, *cache_type_v = NULL;
    const char *pos[1] = {NULL};
    const struct cli_opt opts[] = {
        {"model", 'm', CLI_POS, &pos[0], "MODEL.gguf", "the model file (instead of the argument)", NULL, NULL},
        {"file", 'f', CLI_STR, &file, "FILE", "the text to score", NULL, NULL},
        {"ctx-size", 'c', CLI_INT, &ctx, "N", "tokens per chunk (default 512)", NULL, NULL},
        {"chunks", 0, CLI_INT, &chunks, "N", "score at most N chunks (default: all)", NULL, NULL},
        {"batch-size", 'b', CLI_INT, &batch, "N", CLI_HELP_BATCH, NULL, NULL},
        {"threads", 't', CLI_INT, &threads, "N", CLI_HELP_THREADS, NULL, NULL},
        {"kv-type", 0, CLI_STR, &kv_type, "T", CLI_HELP_KV, NULL, NULL},
        {"cache-type-k", 0, CLI_STR, &cache_type_k, "T", CLI_HELP_KV_K, NULL, "-ctk"},
        {"cache-type-v", 0, CLI_STR, &cache_type_v, "T", CLI_HELP_KV_V, NULL, "-ctv"},
        {"repack-cache", 0, CLI_STR, &repack_cache, "DIR", CLI_HELP_REPACK_CACHE, NULL, NULL},
        {"kl-divergence-base", 0, CLI_STR, &kld_base, "FILE",
         "save the scored log-probabilities to FILE (with --kl-divergence: read them from it)", NULL, NULL},
        {"kl-divergence", 0, CLI_FLAG, &kld, NULL,
         "compare against the log-probabilities saved in --kl-divergence-base FILE", NULL, NULL},
        CLI_OPT_FLASH_ATTN,
        CLI_OPT_END,
    };
    int n_pos;
    int rc = cli_parse("perplexity", ppl_usage, argc, argv, opts, pos, 1, &n_pos);
    if (rc == 1)
        return 0;
    if (rc)
        return rc;
    if (n_pos != 1) {
        fprintf(stderr, "kinetic perplexity: give a model file; see 'kinetic perplexity --help'\n");
        return 2;
    }
    if (kld && !kld_base) {
        fprintf(stderr, "kinetic perplexity: --kl-divergence compares against a saved file: give --kl-divergence-base FILE\n");
        return 2;
    }
    if (!kld && !file) {
        fprintf(stderr, "kinetic perplexity: give the text to score with -f FILE\n");
        return 2;
    }
    if (ctx != 0 && ctx < 4) {
        fprintf(stderr, "kinetic perplexity: -c must be at least 4 (a chunk scores its second half)\n");
        return 2;
    }
    if (chunks == 0 || chunks < -1) {
        fprintf(stderr, "kinetic perplexity: --chunks must be positive\n");
        return 2;
    }
    if (cli_kv_types("perplexity", &kv_type, cache_type_k, cache_type_v) != 0 ||
        cli_check_session("perplexity", ctx, threads, batch, kv_type, true) != 0)
        return 2;

    struct kn_err err = {0};
    struct ppl_run r = {0};
    r.path = kld_base;
    struct session_opts so;
    session_opts_default(&so);
    so.model_path = pos[0];
    so.name = "kinetic perplexity";
    so.level = SESSION_MODEL;
    so.raw = true;
    so.threads = (int)threads;
    so.kv_type = kv_type;
    so.repack_cache = repack_cache;
    so.batch = batch;
    so.ctx_size = ctx ? ctx : 512; /* warns past the trained context; the engine is below */
    if (session_open(&r.s, &so, &err) != KN_OK) {
        fprintf(stderr, "kinetic perplexity: %s\n", err.msg);
        return 1;
    }
    const struct tok_special *sp = tok_specials(r.s.tk);
    if (sp->add_eos) {
        fprintf(stderr, "kinetic perplexity: the vocabulary appends an end-of-sequence token to every text; perplexity over chunks is not defined for it\n");
        rc = 1;
        goto out;
    }
    if (kld) {
        if ((rc = kld_open(&r, ctx)) != 0)
            goto out;
    } else {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_prompt(file, &text, &len, &err) != KN_OK) {
            fprintf(stderr, "kinetic perplexity: %s\n", err.msg);
            rc = 1;
            goto out;
        }
        size_t n = 0;
        enum kn_status st = tok_encode_alloc(r.s.tk, text, len, true, false, &r.tokens, &n, &err);
        free(text);
        if (st != KN_OK) {
            fprintf(stderr, "kinetic perplexity: %s\n", err.msg);
            rc = 1;
            goto out;
        }
        r.n_ctx = ctx ? ctx : 512;
        r.n_tokens = (int64_t)n;
        if (r.n_tokens < 2 * r.n_ctx) {
            fprintf(stderr, "kinetic perplexity: %s tokenizes to %lld tokens; -c %lld needs at least %lld (two chunks)\n",
                    file, (long long)r.n_tokens, (long long)r.n_ctx, (long long)(2 * r.n_ctx));
            rc = 1;
            goto out;
        }
        r.n_chunk = r.n_tokens / r.n_ctx;
        if (chunks > 0 && chunks < r.n_chunk)
            r.n_chunk = chunks;
    }
    {
        struct engine_params ep = {.n_ctx = r.n_ctx, .n_batch = r.s.n_batch, .kv_type = r.s.kv_type,
                                   .no_draft = true};
        if (engine_init(&r.s.e, r.s.m, r.s.pool, &ep, &err) != KN_OK) {
            fprintf(stderr, "kinetic perplexity: %s\n", err.msg);
            rc = 1;
            goto out;
        }
        r.s.engine_ok = true;
    }
    int64_t first = r.n_ctx / 2;
    r.logits = malloc((size_t)(r.n_ctx - first) * (size_t)r.s.n_vocab * sizeof(float));
    r.q = malloc(row_u16((int32_t)r.s.n_vocab) * sizeof(uint16_t));
    if (!r.logits || !r.q) {
        fprintf(stderr, "kinetic perplexity: out of memory for %lld rows of %lld logits\n",
                (long long)(r.n_ctx - first), (long long)r.s.n_vocab);
        rc = 1;
        goto out;
    }
    rc = kld ? run_kld(&r, &err) : run_perplexity(&r, &err);
out:
    if (r.f)
        fclose(r.f);
    free(r.tokens);
    free(r.logits);
    free(r.q);
    session_close(&r.s);
    return rc;
}
