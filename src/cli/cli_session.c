/* cli_session.c: the ranges of the session flags shared by run, chat and serve. */
#include "cli.h"
#include "engine/session.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

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
