/* cli_session.c: the ranges of the session flags shared by run, chat and serve. */
#include "cli.h"
#include "engine/session.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <stdio.h>

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
