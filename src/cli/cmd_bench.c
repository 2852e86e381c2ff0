/* cmd_bench.c: kinetic bench, llama-bench's measurements on Kinetic: prompt processing
 * (pp: N random tokens in one batch) and text generation (tg: N tokens one at a time),
 * from an empty cache or after -d N tokens already in it (llama-bench's depth), after a
 * warm-up, repeated, reported as mean ± standard deviation of tokens per second. --json
 * uses llama-bench's field names so the two compare directly.
 *
 * Decode is a stream of the weights, so tg rows also say how many GB/s of weights they
 * read (the bytes one decode token reads, from the model's tensors, times tokens per
 * second) beside the machine's own streaming-read rate, measured around each repetition
 * with the same threads: how close decode is to the memory limit. A shared VM's memory
 * bandwidth can change by half from one second to the next (seen: 30 and 50 GB/s
 * alternating), so the share compares each repetition with the reads just before and
 * after it, and the row gives the median share. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "crypto/buildid.h"

static const char *const bench_usage =
    "MODEL.gguf [-p N[,N...]] [-n N[,N...]] [-d N[,N...]] [-t N[,N...]] [-r REPS] [-b N] [--json]\n"
    "\n"
    "Measures prompt processing (pp: -p random tokens evaluated as one prompt, in batches of\n"
    "-b) and text generation (tg: -n tokens decoded one at a time) with -t threads, after -d\n"
    "tokens already in the cache (default 0), after one warm-up run, -r times each; prints\n"
    "mean ± standard deviation of tokens per second as a markdown table like llama-bench, or\n"
    "with --json a list of results with llama-bench's field names (n_prompt, n_gen, n_depth,\n"
    "n_threads, avg_ts, stddev_ts, ...). -p 0 or -n 0 skips that test.\n"
    "tg rows also give the GB/s of weights decode reads (the bytes of every weight one token\n"
    "reads; MoE: the experts it uses) and the machine's streaming-read rate with the same\n"
    "threads, read just before and just after each repetition (a plain read of --stream-mib\n"
    "MiB), and in brackets the median over repetitions of the repetition's rate over the mean\n"
    "of its two reads.";

/* Parses "512" or "128,256" into at most max positive integers (0 allowed). */
static int parse_list(const char *flag, const char *s, int64_t *out, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v > 1000000 || (*end && *end != ',') || n == max) {
            fprintf(stderr, "kinetic bench: %s wants a list of counts like 128 or 128,512, not '%s'\n",
                    flag, s);
            return -1;
        }
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "kinetic bench: %s is empty\n", flag);
        return -1;
    }
    return n;
}

/* "268.10 M", "1.10 B" as llama-bench writes parameter counts. */
static void fmt_params(uint64_t n, char *buf, size_t cap)
{
    if (n >= 1000000000)
        snprintf(buf, cap, "%.2f B", (double)n / 1e9);
    else
        snprintf(buf, cap, "%.2f M", (double)n / 1e6);
}

/* The model's type as llama-bench shows it: architecture, size class, file type (guessed
 * from the output weight's type when the file does not say). */
static void model_type(const struct model *m, uint64_t params, char *buf, size_t cap)
{
    uint32_t ft = 0;
    int64_t guess = gguf_file_type_guess(m->output.type);
    const char *ftn = gguf_get_u32(m->gguf, "general.file_type", &ft) ? gguf_file_type_name(ft)
                      : guess >= 0 ? gguf_file_type_name((uint32_t)guess) : "?";
    double p = (double)params;
    const char *arch = model_arch_name(m->hp.arch);
    if (p >= 1e9)
        snprintf(buf, cap, "%s %.1fB %s", arch, p / 1e9, ftn);
    else if (p >= 1e6)
        snprintf(buf, cap, "%s %.0fM %s", arch, p / 1e6, ftn);
    else
        snprintf(buf, cap, "%s %.0fK %s", arch, p / 1e3, ftn);
}

struct bench_result {
    int64_t n_prompt, n_gen, n_depth, n_threads;
    double avg_ts, stddev_ts, avg_ns, stddev_ns;
    double samples_ts[64];
    double stream_gbps[64]; /* tg with a stream probe: the mean of the reads around sample i */
    int n_samples;
};

/* ---------------------------------------------------------------- the memory limit */

/* The bytes of weights one decode token reads: every weight tensor, except that the
 * token embedding is one row (unless it is also the output matrix) and an expert tensor
 * counts n_expert_used of its n_expert experts. */
static uint64_t decode_weight_bytes(const struct model *m)
{
    uint64_t total = 0;
    bool tied = true;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++)
        if (strcmp(gguf_tensor_at(m->gguf, i)->name, "output.weight") == 0)
            tied = false;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        if (strcmp(t->name, "token_embd.weight") == 0)
            total += tied ? t->size : m->tok_embd_row_bytes;
        else if (strstr(t->name, "_exps") && m->hp.n_expert > 0)
            total += t->size / (uint64_t)m->hp.n_expert * (uint64_t)m->hp.n_expert_used;
        else
            total += t->size;
    }
    return total;
}

/* ---------------------------------------------------------------- the tests */

/* Times one test: pp (n_prompt tokens, one evaluation in batches) or tg (n_gen decode
 * steps), after the n_depth positions already in e's cache (the rest is forgotten).
 * Returns seconds, or a negative value on failure (err set). */
static double run_once(struct engine *e, const int32_t *toks, int64_t n_depth, int64_t n_prompt,
                       int64_t n_gen, struct kn_err *err)
{
    engine_truncate(e, n_depth);
    double t0 = kn_now();
    if (n_prompt > 0 && engine_eval(e, toks, n_prompt, err) != KN_OK)
        return -1;
    for (int64_t i = 0; i < n_gen; i++)
        if (engine_eval(e, &toks[i], 1, err) != KN_OK)
            return -1;
    return kn_now() - t0;
}

/* Runs one test reps times after a warm-up. With sp (tg tests), the streaming read is
 * measured just before and after each repetition, on the engine's own threads. */
static int bench_one(const struct model *m, int threads, int64_t n_depth, int64_t n_prompt,
                     int64_t n_gen, int reps, int64_t batch, const int32_t *toks,
                     const int32_t *depth_toks, struct kern_memread *sp,
                     struct bench_result *res, struct kn_err *err)
{
    struct kern_pool *pool = NULL;
    struct engine e;
    int64_t n_ctx = n_depth + n_prompt + n_gen + 1;
    struct engine_params ep = {.n_ctx = n_ctx, .n_batch = batch, .kv_type = MODEL_KV_F32};
    if (kern_pool_create(threads, &pool, err) != KN_OK)
        return -1;
    if (engine_init(&e, m, pool, &ep, err) != KN_OK) {
        kern_pool_free(pool);
        return -1;
    }
    int rc = 0;
    memset(res, 0, sizeof *res);
    res->n_prompt = n_prompt;
    res->n_gen = n_gen;
    res->n_depth = n_depth;
    res->n_threads = threads;
    /* the depth, once (untimed): each run starts from these positions */
    if (n_depth > 0 && engine_eval(&e, depth_toks, n_depth, err) != KN_OK)
        rc = -1;
    /* warm-up: pages in the weights, settles the thread pool */
    if (rc == 0 && run_once(&e, toks, n_depth, n_prompt ? n_prompt : 0, n_prompt ? 0 : 1, err) < 0)
        rc = -1;
    double sum_ts = 0, sum_ns = 0;
    double before = sp && rc == 0 ? kern_memread_run(sp, pool) : 0;
    for (int r = 0; rc == 0 && r < reps; r++) {
        double s = run_once(&e, toks, n_depth, n_prompt, n_gen, err);
        if (s < 0) {
            rc = -1;
            break;
        }
        double ts = (double)(n_prompt + n_gen) / s;
        if (sp) {
            double after = kern_memread_run(sp, pool);
            res->stream_gbps[res->n_samples] = (before + after) / 2;
            before = after;
        }
        res->samples_ts[res->n_samples++] = ts;
        sum_ts += ts;
        sum_ns += s * 1e9;
    }
    if (rc == 0) {
        int n = res->n_samples;
        res->avg_ts = sum_ts / n;
        res->avg_ns = sum_ns / n;
        double v_ts = 0, v_ns = 0;
        for (int i = 0; i < n; i++) {
            double d = res->samples_ts[i] - res->avg_ts;
            double t = (double)(n_prompt + n_gen) / res->samples_ts[i] * 1e9 - res->avg_ns;
            v_ts += d * d;
            v_ns += t * t;
        }
        res->stddev_ts = n > 1 ? sqrt(v_ts / (n - 1)) : 0;
        res->stddev_ns = n > 1 ? sqrt(v_ns / (n - 1)) : 0;
    }
    engine_free(&e);
    kern_pool_free(pool);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    const char *p_arg = "512", *n_arg = "128", *t_arg = NULL, *d_arg = "0";
    int64_t reps = 5, batch = 512, stream_mib = 1024;
    bool json = false;
    const char *output = NULL;
    struct cli_device dv = CLI_DEVICE_INIT;
    const char *pos[1] = {NULL};
    const struct cli_opt opts[] = {
        {"model", 'm', CLI_POS, &pos[0], "MODEL.gguf", "the model file (instead of the argument)", NULL, NULL},
        {"device", 0, CLI_STR, &dv.spec, "DEV", CLI_HELP_DEVICE, NULL, NULL},
        {"gpu-layers", 0, CLI_INT, &dv.gpu_layers, "N", CLI_HELP_GPU_LAYERS, NULL, CLI_ALIAS_GPU_LAYERS},
        {"n-prompt", 'p', CLI_STR, &p_arg, "N", "prompt tokens for the pp test(s), e.g. 512 or 128,512 (default 512)", NULL, NULL},
        {"n-gen", 'n', CLI_STR, &n_arg, "N", "tokens for the tg test(s) (default 128)", NULL, NULL},
        {"n-depth", 'd', CLI_STR, &d_arg, "N", "tokens already in the cache before each test, e.g. 0,4096 (default 0)", NULL, NULL},
        {"stream-mib", 0, CLI_INT, &stream_mib, "N", "MiB of the streaming-read measurement (default 1024; 0: skip it)", NULL, NULL},
        {"threads", 't', CLI_STR, &t_arg, "N", "thread counts, e.g. 2 or 1,2 (default: CPUs online)", NULL, NULL},
        {"repetitions", 'r', CLI_INT, &reps, "N", "measured runs of each test (default 5)", NULL, NULL},
        {"batch-size", 'b', CLI_INT, &batch, "N", "prompt tokens per forward pass (default 512)", NULL, NULL},
        {"json", 0, CLI_FLAG, &json, NULL, "print the results as JSON (llama-bench's field names)", NULL, NULL},
        {"output", 'o', CLI_STR, &output, "FMT", "md or json (as llama-bench's -o)", NULL, NULL},
        CLI_OPT_FLASH_ATTN,
        CLI_OPT_END,
    };
    int n_pos;
    int rc = cli_parse("bench", bench_usage, argc, argv, opts, pos, 1, &n_pos);
    if (rc == 1)
        return 0;
    if (rc)
        return rc;
    if (n_pos != 1) {
        fprintf(stderr, "kinetic bench: give a model file; see 'kinetic bench --help'\n");
        return 2;
    }
    if (output) {
        if (strcmp(output, "json") == 0)
            json = true;
        else if (strcmp(output, "md") != 0) {
            fprintf(stderr, "kinetic bench: -o takes md or json, not '%s'\n", output);
            return 2;
        }
    }
    if (reps < 1 || reps > 64) {
        fprintf(stderr, "kinetic bench: -r must be in 1..64\n");
        return 2;
    }
    if (batch < 1 || batch > 65536) {
        fprintf(stderr, "kinetic bench: -b must be in 1..65536\n");
        return 2;
    }
    if (stream_mib < 0 || stream_mib > KERN_MEMREAD_MAX_MIB) {
        fprintf(stderr, "kinetic bench: --stream-mib must be in 0..%d\n", KERN_MEMREAD_MAX_MIB);
        return 2;
    }
    int64_t ps[16], ns[16], ts[16], ds[16];
    int np = parse_list("-p", p_arg, ps, 16), nn = parse_list("-n", n_arg, ns, 16), nt;
    int nd = parse_list("-d", d_arg, ds, 16);
    if (np < 0 || nn < 0 || nd < 0)
        return 2;
    if (t_arg) {
        nt = parse_list("-t", t_arg, ts, 16);
        if (nt < 0)
            return 2;
        for (int i = 0; i < nt; i++)
            if (ts[i] < 1 || ts[i] > 256) {
                fprintf(stderr, "kinetic bench: thread counts must be in 1..256\n");
                return 2;
            }
    } else {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        ts[0] = c < 1 ? 1 : c > 16 ? 16 : c;
        nt = 1;
    }

    struct kn_err err = {0};
    struct model *m = NULL;
    if ((rc = cli_device_open("bench", &dv, NULL)) != 0)
        return rc;
    struct model_load_opts lo = {.repack = true, .device = dv.dev.be,
                                 .device_layers = dv.gpu_layers < 0 ? INT64_MAX : dv.gpu_layers};
    if (model_open(&m, pos[0], &lo, &err) != KN_OK) {
        fprintf(stderr, "kinetic bench: %s\n", err.msg);
        cli_device_close(&dv);
        return 1;
    }
    /* The backend column: the CPU's ISA, or the GPU and how many layers it runs. */
    char backend[320];
    if (m->dev && m->n_dev_layers > 0)
        snprintf(backend, sizeof backend, "Vulkan (%s, %lld of %lld layers)", dv.dev.name,
                 (long long)m->n_dev_layers, (long long)m->hp.n_layer);
    else
        snprintf(backend, sizeof backend, "CPU (%s)", kn_isa_name(kn_isa_active()));
    uint64_t params = 0, bytes = 0;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        uint64_t n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n *= (uint64_t)t->ne[d];
        params += n;
        bytes += t->size;
    }
    uint64_t tok_bytes = decode_weight_bytes(m);
    char type[128], pstr[32];
    model_type(m, params, type, sizeof type);
    fmt_params(params, pstr, sizeof pstr);

    /* The tokens: fixed pseudo-random ids (like llama-bench's random prompt). */
    int64_t max_tok = 1;
    for (int i = 0; i < nd; i++)
        max_tok = ds[i] > max_tok ? ds[i] : max_tok;
    for (int i = 0; i < np; i++)
        max_tok = ps[i] > max_tok ? ps[i] : max_tok;
    for (int i = 0; i < nn; i++)
        max_tok = ns[i] > max_tok ? ns[i] : max_tok;
    int32_t *toks = malloc((size_t)max_tok * sizeof *toks);
    if (!toks) {
        model_close(m);
        cli_device_close(&dv);
        fprintf(stderr, "kinetic bench: out of memory\n");
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int64_t i = 0; i < max_tok; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        toks[i] = (int32_t)(x % (uint64_t)m->hp.n_vocab);
    }

    /* the depth's tokens: another stream of the same generator */
    int32_t *dtoks = malloc((size_t)max_tok * sizeof *dtoks);
    if (!dtoks) {
        free(toks);
        model_close(m);
        cli_device_close(&dv);
        fprintf(stderr, "kinetic bench: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < max_tok; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        dtoks[i] = (int32_t)(x % (uint64_t)m->hp.n_vocab);
    }

    if (!json) {
        printf("| model | size | params | backend | threads | test | t/s | weights GB/s | stream GB/s |\n");
        printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    } else {
        printf("[\n");
    }
    int status = 0, n_out = 0;
    /* the memory limit, measured around every tg repetition */
    bool have_tg = false;
    for (int k = 0; k < nn; k++)
        have_tg |= ns[k] > 0;
    struct kern_memread *sp = NULL;
    if (have_tg && stream_mib > 0 && kern_memread_create(stream_mib, &sp, &err) != KN_OK) {
        fprintf(stderr, "kinetic bench: %s (--stream-mib)\n", err.msg);
        status = 1;
    }
    for (int ti = 0; ti < nt && status == 0; ti++) {
        for (int dp = 0; dp < nd * 2 && status == 0; dp++) {
            int di = dp / 2, pass = dp % 2; /* each depth: its pp tests, then its tg tests */
            int cnt = pass == 0 ? np : nn;
            for (int k = 0; k < cnt && status == 0; k++) {
                int64_t n_prompt = pass == 0 ? ps[k] : 0, n_gen = pass == 0 ? 0 : ns[k];
                if (n_prompt == 0 && n_gen == 0)
                    continue;
                struct bench_result r;
                if (bench_one(m, (int)ts[ti], ds[di], n_prompt, n_gen, (int)reps, batch, toks,
                              dtoks, n_gen > 0 ? sp : NULL, &r, &err) != 0) {
                    fprintf(stderr, "kinetic bench: %s\n", err.msg);
                    status = 1;
                    break;
                }
                char test[64];
                int tl = snprintf(test, sizeof test, n_prompt ? "pp%lld" : "tg%lld",
                                  (long long)(n_prompt ? n_prompt : n_gen));
                if (ds[di] > 0)
                    snprintf(test + tl, sizeof test - (size_t)tl, " @ d%lld", (long long)ds[di]);
                /* decode reads every weight once per token */
                double wgbps = n_gen > 0 ? (double)tok_bytes * r.avg_ts / 1e9 : 0;
                double stream = 0, share = 0;
                if (n_gen > 0 && sp) {
                    double st[64], sh[64];
                    for (int i = 0; i < r.n_samples; i++) {
                        st[i] = r.stream_gbps[i];
                        sh[i] = (double)tok_bytes * r.samples_ts[i] / 1e9 / r.stream_gbps[i];
                    }
                    stream = kn_median(st, r.n_samples);
                    share = kn_median(sh, r.n_samples);
                }
                if (!json) {
                    char wcol[32] = "-", scol[32] = "-";
                    if (n_gen > 0)
                        snprintf(wcol, sizeof wcol, "%.1f", wgbps);
                    if (n_gen > 0 && stream > 0)
                        snprintf(scol, sizeof scol, "%.1f (%.0f%%)", stream, 100 * share);
                    printf("| %s | %.2f MiB | %s | %s | %lld | %s | %.2f ± %.2f | %s | %s |\n", type,
                           (double)bytes / (1024.0 * 1024.0), pstr, backend, (long long)ts[ti],
                           test, r.avg_ts, r.stddev_ts, wcol, scol);
                    fflush(stdout);
                    continue;
                }
                printf("%s  {\n", n_out++ ? ",\n" : "");
                printf("    \"build_commit\": \"%s\",\n", kn_build_id());
                printf("    \"build_number\": 0,\n");
                printf("    \"cpu_info\": \"%s\",\n", kern_device_class(kn_isa_active()));
                printf("    \"backends\": \"%s\",\n", m->n_dev_layers > 0 ? "Vulkan" : "CPU");
                printf("    \"n_gpu_layers\": %lld,\n", (long long)m->n_dev_layers);
                printf("    \"model_filename\": ");
                struct json_value *fn = json_new_string(pos[0]);
                char *s = NULL;
                if (fn && json_write(fn, JSON_COMPACT, &s, NULL, &err) == KN_OK)
                    printf("%s,\n", s);
                else
                    printf("\"\",\n");
                free(s);
                json_free(fn);
                printf("    \"model_type\": \"%s\",\n", type);
                printf("    \"model_size\": %llu,\n", (unsigned long long)bytes);
                printf("    \"model_n_params\": %llu,\n", (unsigned long long)params);
                printf("    \"n_batch\": %lld,\n", (long long)batch);
                printf("    \"n_ubatch\": %lld,\n", (long long)batch);
                printf("    \"n_threads\": %lld,\n", (long long)r.n_threads);
                printf("    \"type_k\": \"f32\",\n    \"type_v\": \"f32\",\n");
                printf("    \"n_prompt\": %lld,\n", (long long)r.n_prompt);
                printf("    \"n_gen\": %lld,\n", (long long)r.n_gen);
                printf("    \"n_depth\": %lld,\n", (long long)r.n_depth);
                printf("    \"weights_bytes_per_token\": %llu,\n", (unsigned long long)tok_bytes);
                printf("    \"weights_gbps\": %.3f,\n", wgbps);
                printf("    \"stream_gbps\": %.3f,\n", stream);
                printf("    \"stream_share\": %.4f,\n", share);
                printf("    \"avg_ns\": %.0f,\n", r.avg_ns);
                printf("    \"stddev_ns\": %.0f,\n", r.stddev_ns);
                printf("    \"avg_ts\": %.6f,\n", r.avg_ts);
                printf("    \"stddev_ts\": %.6f,\n", r.stddev_ts);
                printf("    \"samples_ts\": [");
                for (int i = 0; i < r.n_samples; i++)
                    printf(i ? ", %.6f" : "%.6f", r.samples_ts[i]);
                printf("],\n    \"samples_stream_gbps\": [");
                for (int i = 0; n_gen > 0 && sp && i < r.n_samples; i++)
                    printf(i ? ", %.3f" : "%.3f", r.stream_gbps[i]);
                printf("]\n  }");
                fflush(stdout);
            }
        }
    }
    if (json)
        printf("\n]\n");
    kern_memread_free(sp);
    free(toks);
    free(dtoks);
    model_close(m);
    cli_device_close(&dv); /* after the model, whose buffers live on it */
    return status;
}
