/* cli_session.c: the ranges of the session flags shared by run, chat and serve, and the
 * llama.cpp flags that map onto them (-ctk/-ctv, --chat-template NAME, --reasoning-format). */
#include "cli.h"
#include "engine/session.h"
#include "kernels/kernels.h"
#include "chat/chat.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cli_check_session(const char *cmd, int64_t ctx_size, int64_t threads, int64_t batch,
                      const char *kv_type, bool zero_is_default)
{
    const int64_t lo = zero_is_default ? 0 : 1;
    if (ctx_size < 0 || ctx_size > MODEL_MAX_CTX) {
        fprintf(stderr, "kinetic %s: --ctx-size must be between 0 (the default: min(model's, %d)) "
                        "and %lld, not %lld\n",
                cmd, SESSION_CTX_MAX_DEFAULT, (long long)MODEL_MAX_CTX, (long long)ctx_size);
        return 2;
    }
    if (threads < lo || threads > KERN_POOL_MAX_THREADS) {
        fprintf(stderr, "kinetic %s: --threads must be between %lld and %d, not %lld\n", cmd,
                (long long)lo, KERN_POOL_MAX_THREADS, (long long)threads);
        return 2;
    }
    if (batch < lo || batch > SESSION_BATCH_MAX) {
        fprintf(stderr, "kinetic %s: --batch-size must be between %lld and %d, not %lld\n", cmd,
                (long long)lo, SESSION_BATCH_MAX, (long long)batch);
        return 2;
    }
    enum model_kv_type t;
    if (!model_kv_type_from_name(kv_type, &t)) {
        fprintf(stderr, "kinetic %s: --kv-type must be " MODEL_KV_TYPE_NAMES ", not '%s'\n", cmd, kv_type);
        return 2;
    }
    return 0;
}

int cli_device_open(const char *cmd, struct cli_device *d, struct session_opts *so)
{
    const char *spec = d->spec ? d->spec : "cpu";
    if (!device_spec_valid(spec) && strncmp(spec, "cuda", 4) != 0) {
        fprintf(stderr, "kinetic %s: unknown --device '%s' (%s)\n", cmd, spec, DEVICE_HELP);
        return 2;
    }
    if (d->gpu_layers < -1 || d->gpu_layers > INT32_MAX) {
        fprintf(stderr, "kinetic %s: --gpu-layers must be 0 or more, not %lld\n", cmd,
                (long long)d->gpu_layers);
        return 2;
    }
    struct kn_err err = {0};
    if (device_open(spec, &d->dev, &err) != KN_OK) {
        fprintf(stderr, "kinetic %s: %s\n", cmd, err.msg);
        return err.status == KN_E_ARG ? 2 : 1;
    }
    d->open = true;
    if (!device_is_gpu(&d->dev) && d->gpu_layers > 0) {
        fprintf(stderr, "kinetic %s: --gpu-layers puts layers on a GPU; give one with --device "
                        "(%s)\n", cmd, DEVICE_HELP);
        cli_device_close(d);
        return 2;
    }
    if (device_is_gpu(&d->dev) && strcmp(d->dev.numerics, KN_NUMERICS) != 0)
        fprintf(stderr, "kinetic %s: warning: %s does not meet %s, so its receipts verify only "
                        "on the same GPU and driver (numerics %s): %s\n", cmd, d->dev.spec,
                KN_NUMERICS, d->dev.numerics, d->dev.report);
    if (so) {
        so->device = d->dev.be;
        so->gpu_layers = d->gpu_layers;
        so->device_class = d->dev.cls;
        so->device_name = d->dev.name;
    }
    return 0;
}

void cli_device_close(struct cli_device *d)
{
    if (d->open)
        device_close(&d->dev);
    d->open = false;
}

int cli_kv_types(const char *cmd, const char **kv_type, const char *k, const char *v)
{
    const char *kt = k ? k : *kv_type, *vt = v ? v : *kv_type;
    enum model_kv_type t;
    const char *flag = NULL, *bad = NULL;
    if (!model_kv_type_from_name(kt, &t)) {
        flag = k ? "--cache-type-k (-ctk)" : "--kv-type";
        bad = kt;
    } else if (!model_kv_type_from_name(vt, &t)) {
        flag = v ? "--cache-type-v (-ctv)" : "--kv-type";
        bad = vt;
    }
    if (bad) {
        fprintf(stderr, "kinetic %s: %s must be " MODEL_KV_TYPE_NAMES ", not '%s'\n", cmd, flag,
                bad);
        return 2;
    }
    if (strcmp(kt, vt) != 0) {
        fprintf(stderr, "kinetic %s: Kinetic keeps K and V in one KV cache type, but K would be "
                "%s (%s) and V %s (%s); give -ctk and -ctv the same type, or --kv-type T\n", cmd,
                kt, k ? "-ctk" : "--kv-type or its default", vt,
                v ? "-ctv" : "--kv-type or its default");
        return 2;
    }
    *kv_type = kt;
    return 0;
}

/* The built-in families' names, "chatml, llama3, ..., raw", for messages. */
static void chat_format_names(char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 1; i <= CHAT_FORMAT_COUNT; i++) { /* raw (0) last */
        int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "",
                         chat_format_name((enum chat_format)(i % CHAT_FORMAT_COUNT)));
        if (w < 0 || (size_t)w >= n - len)
            return;
        len += (size_t)w;
    }
}

int cli_chat_template(const char *cmd, const char **chat_format, const char **chat_template,
                      const char *chat_template_file)
{
    if (chat_template_file && *chat_template) {
        fprintf(stderr, "kinetic %s: give --chat-template or --chat-template-file, not both\n",
                cmd);
        return 2;
    }
    if (chat_template_file) {
        *chat_template = chat_template_file;
        return 0;
    }
    enum chat_format f;
    if (!*chat_template)
        return 0;
    if (!chat_format_from_name(*chat_template, &f)) {
        if (access(*chat_template, F_OK) == 0)
            return 0; /* a file: the session names it if it cannot read it */
        char names[160];
        chat_format_names(names, sizeof names);
        fprintf(stderr, "kinetic %s: --chat-template '%s' is neither a built-in template (%s) "
                "nor a file\n", cmd, *chat_template, names);
        return 2;
    }
    if (*chat_format && strcmp(*chat_format, *chat_template) != 0) {
        fprintf(stderr, "kinetic %s: --chat-template %s and --chat-format %s name two different "
                "built-in templates; give one\n", cmd, *chat_template, *chat_format);
        return 2;
    }
    *chat_format = *chat_template;
    *chat_template = NULL;
    return 0;
}

int cli_reasoning_format(const char *cmd, const char *fmt, bool server)
{
    if (!fmt || strcmp(fmt, "auto") == 0 || (!server && strcmp(fmt, "deepseek") == 0))
        return 0;
    if (server)
        fprintf(stderr, "kinetic serve: --reasoning-format %s: each request chooses its own "
                "(\"reasoning_format\": \"auto\", \"deepseek\" or \"none\"; default auto); the "
                "server takes no other default\n", fmt);
    else if (strcmp(fmt, "none") == 0)
        fprintf(stderr, "kinetic %s: --reasoning-format none (reasoning left in the answer) has no "
                "equivalent: Kinetic always splits <think> reasoning off the answer (auto and "
                "deepseek do that); --reasoning show prints it, --reasoning hide does not\n", cmd);
    else
        fprintf(stderr, "kinetic %s: --reasoning-format must be auto or deepseek (both split "
                "<think> reasoning off the answer, as Kinetic always does), not '%s'\n", cmd, fmt);
    return 2;
}
