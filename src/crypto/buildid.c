/* buildid.c: the build id, BLAKE3 of the running executable. */
#include "buildid.h"
#include "blake3.h"

#include <pthread.h>
#include <string.h>

enum kn_status kn_build_id_of(const char *path, char out[KN_BUILD_ID_LEN + 1],
                              struct kn_err *err)
{
    uint8_t hash[BLAKE3_OUT_LEN];
    enum kn_status st = blake3_hash_file(path, hash, 1, err);
    if (st != KN_OK)
        return st;
    blake3_hex(hash, KN_BUILD_ID_LEN / 2, out);
    return KN_OK;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char build_id[KN_BUILD_ID_LEN + 1] = "unknown";

static void compute(void)
{
    struct kn_err err;
    char id[KN_BUILD_ID_LEN + 1];
    if (kn_build_id_of("/proc/self/exe", id, &err) == KN_OK)
        memcpy(build_id, id, sizeof id);
    else
        kn_log(KN_LOG_WARN, "cannot compute the build id: %s", err.msg);
}

const char *kn_build_id(void)
{
    pthread_once(&once, compute);
    return build_id;
}
