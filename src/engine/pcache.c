/* pcache.c: Warm Start, the prompt cache (see engine.h).
 *
 * The cache holds token sequences with the KV entries of every position of each. A KV
 * entry's bits depend only on the tokens up to its position (docs/numerics.md rules 1
 * and 5), so the entries of a cached sequence are valid for any new sequence that starts
 * with the same tokens, up to the last common one: a restore copies the longest common
 * prefix, at any token boundary.
 *
 * Storage is one record per sequence (tokens plus position-major KV rows: for each
 * position, layer by layer, the key row then the value row, each row head by head; the
 * engine's cache is head-major, (n_head_kv, n_ctx, head_dim) per layer; an lfm2 conv
 * layer has its one row bx(p) of n_embd f32 instead). Storing a sequence that
 * extends a cached one replaces it; storing a prefix of a cached one only refreshes it.
 * Memory is bounded: the least recently used records go first. One mutex guards the
 * cache, so engines on several threads (server slots) can share one.
 *
 * The one thing besides the tokens that decides a KV entry's bits is phi3's LongRoPE
 * choice: the long or the short factors, by the context of the cache that made it
 * (model_rope_long). Each record holds its choice (rope), and a record restores only into
 * a cache that makes the same one, so entries made under one set never mix with the
 * other's; for every other model the choice is always 0. */
#include "engine.h"

#include "../crypto/blake3.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct pcache_rec {
    int32_t *tokens;
    uint8_t *kv;        /* (n, row_bytes) */
    int64_t n;
    uint64_t last_use;
    uint32_t rope;      /* rope_choice of the cache it was made in */
};

struct pcache {
    pthread_mutex_t mu;
    const struct model *m;          /* borrowed: outlives the cache */
    enum model_kv_type type;
    int64_t n_layer, n_vocab, n_head_kv;
    size_t k_head, v_head;          /* one head's row in the engine's cache */
    size_t k_row, v_row, row_bytes; /* row_bytes: one position, every layer, K and V */
    size_t conv_row;                /* an lfm2 conv layer's row (model_kv conv_row_bytes) */
    bool conv[MODEL_MAX_LAYERS];    /* the conv layers */
    size_t max_bytes, bytes;
    struct pcache_rec *recs;
    size_t n_recs, cap;
    uint64_t clock;
    struct pcache_stats stats;
};

enum kn_status pcache_create(struct pcache **out, const struct model *m, enum model_kv_type type,
                             size_t max_bytes, struct kn_err *err)
{
    *out = NULL;
    struct pcache *c = kn_calloc(1, sizeof *c, err);
    if (!c)
        return KN_E_NOMEM;
    const struct model_hparams *hp = &m->hp;
    c->m = m;
    c->type = type;
    c->n_layer = hp->n_layer;
    c->n_vocab = hp->n_vocab;
    c->n_head_kv = hp->n_head_kv;
    c->k_head = kern_kv_row_bytes(model_kv_qtype(type), hp->head_dim_k);
    c->v_head = kern_kv_row_bytes(model_kv_qtype(type), hp->head_dim_v);
    c->k_row = c->k_head * (size_t)hp->n_head_kv;
    c->v_row = c->v_head * (size_t)hp->n_head_kv;
    if (c->k_head == 0 || c->v_head == 0) {
        free(c);
        return kn_fail(err, KN_E_UNSUPPORTED, "the prompt cache cannot hold a %s KV cache of "
                       "head dims %lld and %lld", model_kv_type_name(type),
                       (long long)hp->head_dim_k, (long long)hp->head_dim_v);
    }
    int64_t n_conv = 0;
    for (int64_t l = 0; l < hp->n_layer; l++)
        n_conv += c->conv[l] = hp->conv_layer[l];
    c->conv_row = n_conv ? (size_t)hp->n_embd * sizeof(float) : 0;
    size_t attn_bytes;
    if (!kn_mul_size(c->k_row + c->v_row, (size_t)(hp->n_layer - n_conv), &attn_bytes) ||
        !kn_add_size(attn_bytes, c->conv_row * (size_t)n_conv, &c->row_bytes)) {
        free(c);
        return kn_fail(err, KN_E_LIMIT, "prompt cache row size overflows");
    }
    c->max_bytes = max_bytes;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return kn_fail(err, KN_E_NOMEM, "cannot create the prompt cache's lock");
    }
    *out = c;
    return KN_OK;
}

static size_t rec_bytes(const struct pcache *c, int64_t n)
{
    return (size_t)n * (c->row_bytes + sizeof(int32_t));
}

static void rec_drop(struct pcache *c, size_t i)
{
    struct pcache_rec *r = &c->recs[i];
    c->bytes -= rec_bytes(c, r->n);
    free(r->tokens);
    free(r->kv);
    c->recs[i] = c->recs[--c->n_recs];
}

void pcache_free(struct pcache *c)
{
    if (!c)
        return;
    while (c->n_recs)
        rec_drop(c, c->n_recs - 1);
    free(c->recs);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void pcache_clear(struct pcache *c)
{
    pthread_mutex_lock(&c->mu);
    while (c->n_recs)
        rec_drop(c, c->n_recs - 1);
    pthread_mutex_unlock(&c->mu);
}

struct pcache_stats pcache_get_stats(struct pcache *c)
{
    pthread_mutex_lock(&c->mu);
    struct pcache_stats s = c->stats;
    s.bytes = c->bytes;
    s.records = (int64_t)c->n_recs;
    pthread_mutex_unlock(&c->mu);
    return s;
}

int64_t engine_common_prefix(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    int64_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* The RoPE choice a KV cache of n_ctx positions makes: 1 for phi3's long LongRoPE
 * factors, else 0. */
static uint32_t rope_choice(const struct pcache *c, int64_t n_ctx)
{
    return model_rope_long(c->m, n_ctx) ? 1 : 0;
}

/* The record made under RoPE choice rope sharing the longest prefix with tokens (-1 if
 * none shares a token). */
static int64_t best_rec(const struct pcache *c, uint32_t rope, const int32_t *tokens, int64_t n,
                        int64_t *len)
{
    int64_t best = -1;
    *len = 0;
    for (size_t i = 0; i < c->n_recs; i++) {
        if (c->recs[i].rope != rope)
            continue;
        int64_t l = engine_common_prefix(c->recs[i].tokens, c->recs[i].n, tokens, n);
        if (l > *len) {
            *len = l;
            best = (int64_t)i;
        }
    }
    return best;
}

static bool kv_shape_ok(const struct pcache *c, const struct model_kv *kv)
{
    return kv->type == c->type && kv->n_layer == c->n_layer && kv->k_row_bytes == c->k_row &&
           kv->v_row_bytes == c->v_row && kv->conv_row_bytes == c->conv_row;
}

static bool kv_compatible(const struct pcache *c, const struct engine *e)
{
    return kv_shape_ok(c, &e->kv) && e->m->hp.n_vocab == c->n_vocab;
}

/* The bytes layer l takes in a record row: its conv row, or its key and value rows. */
static size_t layer_bytes(const struct pcache *c, int64_t l)
{
    return c->conv[l] ? c->conv_row : c->k_row + c->v_row;
}

/* Copies position p's keys and values (or conv row) of every layer with a host address
 * between the engine's cache (head-major keys and values, position-major conv rows) and a
 * position-major record row (to_rec: engine -> record); device layers are skipped
 * (copy_range). */
static void copy_pos(const struct pcache *c, const struct model_kv *kv, int64_t p, uint8_t *row,
                     bool to_rec)
{
    const size_t nctx = (size_t)kv->n_ctx;
    for (int64_t l = 0; l < c->n_layer; l++) {
        if (!kv->k[l] || (!c->conv[l] && !kv->v[l])) {
            row += layer_bytes(c, l);
            continue;
        }
        if (c->conv[l]) {
            uint8_t *er = (uint8_t *)kv->k[l] + (size_t)p * c->conv_row;
            if (to_rec)
                memcpy(row, er, c->conv_row);
            else
                memcpy(er, row, c->conv_row);
            row += c->conv_row;
            continue;
        }
        for (int64_t h = 0; h < c->n_head_kv; h++) {
            uint8_t *ek = (uint8_t *)kv->k[l] + ((size_t)h * nctx + (size_t)p) * c->k_head;
            if (to_rec)
                memcpy(row, ek, c->k_head);
            else
                memcpy(ek, row, c->k_head);
            row += c->k_head;
        }
        for (int64_t h = 0; h < c->n_head_kv; h++) {
            uint8_t *ev = (uint8_t *)kv->v[l] + ((size_t)h * nctx + (size_t)p) * c->v_head;
            if (to_rec)
                memcpy(row, ev, c->v_head);
            else
                memcpy(ev, row, c->v_head);
            row += c->v_head;
        }
    }
}

/* What stage_walk does for each device layer's piece (a head's keys or values, or the
 * conv rows): record rows -> stage and a from_host copy into the cache; a to_host copy of
 * the cache into the stage; stage -> record rows. */
enum stage_step { STAGE_FROM_ROWS, STAGE_TO_HOST, STAGE_TO_ROWS };

/* One contiguous piece of a device layer's cache for positions p0..p0+n-1: pb bytes per
 * position at byte at of buffer b, and at byte in_row of each record row. */
static void stage_piece(const struct pcache *c, struct kern_buf *b, size_t at, size_t pb,
                        uint8_t *rows, size_t in_row, size_t n, uint8_t *stage,
                        enum stage_step step, struct kern_stream *s)
{
    if (step == STAGE_TO_HOST) {
        s->ops->to_host(s, b, at, stage, n * pb);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t *st = stage + i * pb, *rw = rows + i * c->row_bytes + in_row;
        memcpy(step == STAGE_TO_ROWS ? rw : st, step == STAGE_TO_ROWS ? st : rw, pb);
    }
    if (step == STAGE_FROM_ROWS)
        s->ops->from_host(s, b, at, stage, n * pb);
}

static void stage_walk(const struct pcache *c, const struct model_kv *kv, int64_t p0, size_t n,
                       uint8_t *rows, uint8_t *stage, enum stage_step step, struct kern_stream *s)
{
    const size_t nctx = (size_t)kv->n_ctx;
    size_t o = 0, in_row = 0;
    for (int64_t l = 0; l < c->n_layer; in_row += layer_bytes(c, l), l++) {
        if (kv->k[l] && (c->conv[l] || kv->v[l]))
            continue; /* a host layer: copy_pos */
        if (c->conv[l]) {
            stage_piece(c, kv->kb[l], (size_t)p0 * c->conv_row, c->conv_row, rows, in_row, n,
                        stage + o, step, s);
            o += n * c->conv_row;
            continue;
        }
        for (int kvi = 0; kvi < 2; kvi++) {
            const size_t hb = kvi ? c->v_head : c->k_head;
            for (int64_t h = 0; h < c->n_head_kv; h++, o += n * hb)
                stage_piece(c, kvi ? kv->vb[l] : kv->kb[l], ((size_t)h * nctx + (size_t)p0) * hb,
                            hb, rows, in_row + (kvi ? c->k_row : 0) + (size_t)h * hb, n,
                            stage + o, step, s);
        }
    }
}

/* Copies positions p0..p1-1 of every layer between the engine's cache and record rows
 * (rows: position p0's row first; to_rec: engine -> record). A layer whose cache has a
 * host address is copied directly; one on a device (--device, --gpu-layers) goes through
 * its backend: one pass of to_host or from_host copies (each head's positions, and the
 * conv rows, are contiguous in the cache), staged in host memory. */
static enum kn_status copy_range(const struct pcache *c, const struct model_kv *kv, int64_t p0,
                                 int64_t p1, uint8_t *rows, bool to_rec, struct kn_err *err)
{
    const size_t n = (size_t)(p1 - p0);
    struct kern_backend *dev = NULL;
    for (int64_t l = 0; l < c->n_layer; l++)
        if (!kv->k[l] || (!c->conv[l] && !kv->v[l]))
            dev = kv->kb[l]->be;
    for (size_t i = 0; i < n; i++)
        copy_pos(c, kv, p0 + (int64_t)i, rows + i * c->row_bytes, to_rec);
    if (!dev || n == 0)
        return KN_OK;
    /* The device layers (one backend: the model's device). */
    uint8_t *stage = kn_malloc(n * c->row_bytes, err);
    struct kern_stream_shape shape = {.max_tokens = 1};
    struct kern_stream *s = stage ? dev->ops->stream_create(dev, &shape, NULL, err) : NULL;
    if (!s) {
        free(stage);
        return err ? err->status : KN_E_NOMEM;
    }
    dev->ops->begin(s);
    stage_walk(c, kv, p0, n, rows, stage, to_rec ? STAGE_TO_HOST : STAGE_FROM_ROWS, s);
    enum kn_status st = dev->ops->end(s, err);
    if (st == KN_OK && to_rec)
        stage_walk(c, kv, p0, n, rows, stage, STAGE_TO_ROWS, s);
    dev->ops->stream_free(s);
    free(stage);
    return st;
}

int64_t pcache_lookup(struct pcache *c, int64_t n_ctx, const int32_t *tokens, int64_t n)
{
    pthread_mutex_lock(&c->mu);
    int64_t len;
    best_rec(c, rope_choice(c, n_ctx), tokens, n, &len);
    pthread_mutex_unlock(&c->mu);
    return len;
}

int64_t pcache_restore_kv(struct pcache *c, struct model_kv *kv, const int32_t *tokens,
                          int64_t keep, int64_t max_n)
{
    if (max_n > kv->n_ctx)
        max_n = kv->n_ctx;
    if (!c || !kv_shape_ok(c, kv) || max_n <= keep)
        return keep;
    pthread_mutex_lock(&c->mu);
    int64_t len;
    int64_t bi = best_rec(c, rope_choice(c, kv->n_ctx), tokens, max_n, &len);
    if (bi < 0 || len <= keep) {
        c->stats.misses++;
        pthread_mutex_unlock(&c->mu);
        return keep;
    }
    struct pcache_rec *r = &c->recs[bi];
    r->last_use = ++c->clock;
    struct kn_err err;
    if (copy_range(c, kv, keep, len, r->kv + (size_t)keep * c->row_bytes, false, &err) != KN_OK) {
        /* A device that failed the copy: the positions are evaluated instead. */
        kn_log(KN_LOG_WARN, "prompt cache: restoring %lld positions failed: %s",
               (long long)(len - keep), err.msg);
        c->stats.misses++;
        pthread_mutex_unlock(&c->mu);
        return keep;
    }
    c->stats.hits++;
    c->stats.tokens_restored += len - keep;
    pthread_mutex_unlock(&c->mu);
    return len;
}

int64_t pcache_restore(struct pcache *c, struct engine *e, const int32_t *tokens, int64_t n,
                       int64_t max_n)
{
    if (max_n > n)
        max_n = n;
    if (max_n > e->n_ctx)
        max_n = e->n_ctx;
    /* What the engine holds already stays (Zero Wait, chat turns). */
    int64_t keep = engine_common_prefix(e->history, e->n_past, tokens, max_n);
    engine_truncate(e, keep);
    if (!c || !kv_compatible(c, e) || max_n <= keep)
        return keep;
    int64_t len = pcache_restore_kv(c, &e->kv, tokens, keep, max_n);
    if (len <= keep)
        return keep;
    memcpy(e->history + keep, tokens + keep, (size_t)(len - keep) * sizeof(int32_t));
    e->n_past = len;
    e->have_logits = false;
    return len;
}

/* Frees least recently used records until need more bytes fit. */
static void make_room(struct pcache *c, size_t need)
{
    while (c->n_recs && c->bytes + need > c->max_bytes) {
        size_t lru = 0;
        for (size_t i = 1; i < c->n_recs; i++)
            if (c->recs[i].last_use < c->recs[lru].last_use)
                lru = i;
        rec_drop(c, lru);
        c->stats.evictions++;
    }
}

/* Adds a record that takes ownership of tokens and kv (both freed on failure). */
static enum kn_status add_rec(struct pcache *c, int32_t *tokens, uint8_t *kv, int64_t n,
                              uint32_t rope, struct kn_err *err)
{
    if (c->n_recs == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        struct pcache_rec *t = realloc(c->recs, cap * sizeof *t);
        if (!t) {
            free(tokens);
            free(kv);
            return kn_fail(err, KN_E_NOMEM, "out of memory growing the prompt cache");
        }
        c->recs = t;
        c->cap = cap;
    }
    c->recs[c->n_recs++] = (struct pcache_rec){tokens, kv, n, ++c->clock, rope};
    c->bytes += rec_bytes(c, n);
    return KN_OK;
}

enum kn_status pcache_store_kv(struct pcache *c, const struct model_kv *kv, const int32_t *tokens,
                               int64_t n, struct kn_err *err)
{
    if (n > kv->n_ctx)
        n = kv->n_ctx;
    if (n <= 0 || !kv_shape_ok(c, kv))
        return KN_OK;
    /* A sequence larger than the whole cache keeps its longest prefix that fits. */
    int64_t fit = (int64_t)(c->max_bytes / (c->row_bytes + sizeof(int32_t)));
    if (n > fit)
        n = fit;
    if (n <= 0)
        return KN_OK;
    const uint32_t rope = rope_choice(c, kv->n_ctx);
    pthread_mutex_lock(&c->mu);
    enum kn_status st = KN_OK;
    /* Already held (a prefix of a record made under the same RoPE choice): refresh it.
     * Such records that are prefixes of the new sequence become redundant. */
    for (size_t i = 0; i < c->n_recs;) {
        struct pcache_rec *r = &c->recs[i];
        if (r->rope != rope) {
            i++;
            continue;
        }
        int64_t l = engine_common_prefix(r->tokens, r->n, tokens, n);
        if (l == n) {
            r->last_use = ++c->clock;
            c->stats.stores_redundant++;
            pthread_mutex_unlock(&c->mu);
            return KN_OK;
        }
        if (l == r->n)
            rec_drop(c, i);
        else
            i++;
    }
    make_room(c, rec_bytes(c, n));
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    uint8_t *rows = malloc((size_t)n * c->row_bytes);
    if (!toks || !rows) {
        free(toks);
        free(rows);
        st = kn_fail(err, KN_E_NOMEM, "out of memory storing %lld tokens in the prompt cache",
                     (long long)n);
        goto done;
    }
    memcpy(toks, tokens, (size_t)n * sizeof *toks);
    if ((st = copy_range(c, kv, 0, n, rows, true, err)) != KN_OK) {
        free(toks);
        free(rows);
        goto done;
    }
    st = add_rec(c, toks, rows, n, rope, err);
    if (st == KN_OK)
        c->stats.stores++;
done:
    pthread_mutex_unlock(&c->mu);
    return st;
}

enum kn_status pcache_store(struct pcache *c, const struct engine *e, int64_t n, struct kn_err *err)
{
    if (n > e->n_past)
        n = e->n_past;
    if (n <= 0 || !kv_compatible(c, e))
        return KN_OK;
    return pcache_store_kv(c, &e->kv, e->history, n, err);
}

/* ---------------------------------------------------------------- the cache file */

/* Layout (little-endian), docs/speed.md "Prompt cache file":
 *   header (128 bytes): magic "KNPCACHE", u32 version, u32 kv type, char numerics[16],
 *     char model_blake3[64] (hex), u32 n_layer, u32 n_vocab, u64 k_row_bytes,
 *     u64 v_row_bytes, u64 n_records
 *   records, least recently used first: u64 n, u32 rope (the record's RoPE choice),
 *     i32 tokens[n], KV rows (n * row_bytes)
 *   trailer: BLAKE3 (32 bytes) of everything before it.
 * Version 2 added rope; version 1 files are refused (remade), as they cannot say which
 * LongRoPE factors made their entries. */
#define PCACHE_MAGIC "KNPCACHE"
enum { PCACHE_VERSION = 2, PCACHE_HEADER = 128, PCACHE_TRAILER = 32 };

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void make_header(const struct pcache *c, const char *model_hex, uint64_t n_recs,
                        uint8_t h[PCACHE_HEADER])
{
    memset(h, 0, PCACHE_HEADER);
    memcpy(h, PCACHE_MAGIC, 8);
    put_u32(h + 8, PCACHE_VERSION);
    put_u32(h + 12, (uint32_t)c->type);
    strncpy((char *)h + 16, KN_NUMERICS, 15);
    memcpy(h + 32, model_hex, 64);
    put_u32(h + 96, (uint32_t)c->n_layer);
    put_u32(h + 100, (uint32_t)c->n_vocab);
    put_u64(h + 104, c->k_row);
    put_u64(h + 112, c->v_row);
    put_u64(h + 120, n_recs);
}

/* Tokens are written as little-endian int32 whatever the host. */
static bool write_tokens(FILE *f, struct blake3_hasher *h, const int32_t *t, int64_t n)
{
    uint8_t buf[4096];
    for (int64_t i = 0; i < n;) {
        size_t k = 0;
        for (; i < n && k + 4 <= sizeof buf; i++, k += 4)
            put_u32(buf + k, (uint32_t)t[i]);
        blake3_hasher_update(h, buf, k);
        if (fwrite(buf, 1, k, f) != k)
            return false;
    }
    return true;
}

enum kn_status pcache_save(struct pcache *c, const char *path, const char *model_hex,
                           struct kn_err *err)
{
    if (strlen(model_hex) != 64)
        return kn_fail(err, KN_E_ARG, "prompt cache: the model hash must be 64 hex digits");
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        enum kn_status st = kn_fail(err, KN_E_IO, "cannot write the prompt cache %s: %s", tmp,
                                    strerror(errno));
        free(tmp);
        return st;
    }
    pthread_mutex_lock(&c->mu);
    /* Oldest first, so a load that must evict drops the same ones. */
    size_t *order = malloc((c->n_recs + 1) * sizeof *order);
    bool ok = order != NULL;
    for (size_t i = 0; ok && i < c->n_recs; i++) {
        size_t j = i;
        order[i] = i;
        while (j > 0 && c->recs[order[j - 1]].last_use > c->recs[order[j]].last_use) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
            j--;
        }
    }
    struct blake3_hasher h;
    blake3_hasher_init(&h);
    uint8_t hdr[PCACHE_HEADER];
    make_header(c, model_hex, c->n_recs, hdr);
    blake3_hasher_update(&h, hdr, sizeof hdr);
    ok = ok && fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr;
    for (size_t i = 0; ok && i < c->n_recs; i++) {
        const struct pcache_rec *r = &c->recs[order[i]];
        uint8_t nb[12];
        put_u64(nb, (uint64_t)r->n);
        put_u32(nb + 8, r->rope);
        blake3_hasher_update(&h, nb, 12);
        ok = fwrite(nb, 1, 12, f) == 12 && write_tokens(f, &h, r->tokens, r->n);
        size_t kvb = (size_t)r->n * c->row_bytes;
        blake3_hasher_update(&h, r->kv, kvb);
        ok = ok && fwrite(r->kv, 1, kvb, f) == kvb;
    }
    pthread_mutex_unlock(&c->mu);
    free(order);
    uint8_t sum[32];
    blake3_hasher_finalize(&h, sum, 32);
    ok = ok && fwrite(sum, 1, 32, f) == 32 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        enum kn_status st = kn_fail(err, KN_E_IO, "cannot write the prompt cache %s: %s", path,
                                    strerror(errno));
        unlink(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    return KN_OK;
}

enum kn_status pcache_load(struct pcache *c, const char *path, const char *model_hex,
                           struct kn_err *err)
{
    struct kn_map map;
    enum kn_status st = kn_map_open(&map, path, err);
    if (st != KN_OK)
        return st;
    const uint8_t *d = map.data;
    size_t size = map.size;
    st = KN_E_FORMAT;
    uint8_t want[PCACHE_HEADER];
    make_header(c, model_hex, 0, want);
    if (size < PCACHE_HEADER + PCACHE_TRAILER || memcmp(d, PCACHE_MAGIC, 8) != 0) {
        kn_fail(err, st, "%s is not a Kinetic prompt cache", path);
        goto out;
    }
    if (get_u32(d + 8) != PCACHE_VERSION) {
        kn_fail(err, st, "%s: prompt cache version %u, this build reads %d", path, get_u32(d + 8),
                PCACHE_VERSION);
        goto out;
    }
    if (memcmp(d + 16, want + 16, 80) != 0) {
        kn_fail(err, st, "%s was made for another model or numerics version", path);
        goto out;
    }
    if (memcmp(d + 12, want + 12, 4) != 0 || memcmp(d + 96, want + 96, 24) != 0) {
        kn_fail(err, st, "%s was made for another KV cache type or shape", path);
        goto out;
    }
    uint8_t sum[32];
    struct blake3_hasher h;
    blake3_hasher_init(&h);
    blake3_hasher_update_threads(&h, d, size - PCACHE_TRAILER, 0);
    blake3_hasher_finalize(&h, sum, 32);
    if (memcmp(sum, d + size - PCACHE_TRAILER, 32) != 0) {
        kn_fail(err, st, "%s is damaged (checksum mismatch)", path);
        goto out;
    }
    uint64_t n_recs = get_u64(d + 120);
    size_t off = PCACHE_HEADER, end = size - PCACHE_TRAILER;
    const size_t per_tok = c->row_bytes + sizeof(int32_t);
    pthread_mutex_lock(&c->mu);
    for (uint64_t i = 0; i < n_recs; i++) {
        if (end - off < 12) {
            kn_fail(err, st, "%s: record %llu is truncated", path, (unsigned long long)i);
            break;
        }
        uint64_t n = get_u64(d + off);
        uint32_t rope = get_u32(d + off + 8);
        off += 12;
        if (rope > (c->m->rope_long ? 1u : 0u)) {
            kn_fail(err, st, "%s: record %llu claims RoPE choice %u; this model has %s", path,
                    (unsigned long long)i, rope,
                    c->m->rope_long ? "0 (short factors) and 1 (long)" : "only 0");
            break;
        }
        if (n == 0 || n > INT32_MAX || n > (end - off) / per_tok) {
            kn_fail(err, st, "%s: record %llu claims %llu tokens, more than the file holds", path,
                    (unsigned long long)i, (unsigned long long)n);
            break;
        }
        int32_t *toks = malloc((size_t)n * sizeof *toks);
        uint8_t *kv = malloc((size_t)n * c->row_bytes);
        if (!toks || !kv) {
            free(toks);
            free(kv);
            kn_fail(err, KN_E_NOMEM, "out of memory loading the prompt cache");
            st = KN_E_NOMEM;
            break;
        }
        bool bad = false;
        for (uint64_t t = 0; t < n; t++) {
            uint32_t v = get_u32(d + off + 4 * t);
            bad |= v >= (uint64_t)c->n_vocab;
            toks[t] = (int32_t)v;
        }
        off += (size_t)n * 4;
        memcpy(kv, d + off, (size_t)n * c->row_bytes);
        off += (size_t)n * c->row_bytes;
        if (bad) {
            free(toks);
            free(kv);
            kn_fail(err, st, "%s: record %llu holds a token outside the vocabulary", path,
                    (unsigned long long)i);
            break;
        }
        /* Bounded like any store: the oldest go when the file is larger than the cache. */
        if (rec_bytes(c, (int64_t)n) > c->max_bytes) {
            free(toks);
            free(kv);
            continue;
        }
        make_room(c, rec_bytes(c, (int64_t)n));
        if (add_rec(c, toks, kv, (int64_t)n, rope, err) != KN_OK) {
            st = KN_E_NOMEM;
            break;
        }
        if (i + 1 == n_recs) {
            if (off != end)
                kn_fail(err, st, "%s: %zu bytes after the last record", path, end - off);
            else
                st = KN_OK;
        }
    }
    if (n_recs == 0)
        st = off == end ? KN_OK : kn_fail(err, st, "%s: bytes after the header", path);
    if (st != KN_OK)
        while (c->n_recs)
            rec_drop(c, c->n_recs - 1);
    pthread_mutex_unlock(&c->mu);
out:
    kn_map_close(&map);
    return st;
}
