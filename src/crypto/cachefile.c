/* cachefile.c: the folder rule and the MAC of Kinetic's cache files (cachefile.h). */
#include "cachefile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum cachefile_where cachefile_dir(const char *setting, const char *env, const char *sub,
                                   char *out, size_t cap, struct kn_err *why)
{
    if (!setting || !*setting)
        setting = getenv(env);
    if (setting && !*setting)
        setting = NULL;
    if (setting && strcmp(setting, "off") == 0)
        return CACHEFILE_OFF;
    if (setting) {
        if (snprintf(out, cap, "%s", setting) >= (int)cap) {
            kn_fail(why, KN_E_ARG, "the folder name is longer than %zu bytes", cap - 1);
            return CACHEFILE_BAD;
        }
        return CACHEFILE_DIR;
    }
    if (kn_cache_dir(out, cap, why) != KN_OK)
        return CACHEFILE_BAD;
    size_t len = strlen(out);
    if (snprintf(out + len, cap - len, "/%s", sub) >= (int)(cap - len)) {
        kn_fail(why, KN_E_ARG, "the cache path is longer than %zu bytes", cap - 1);
        return CACHEFILE_BAD;
    }
    return CACHEFILE_DIR;
}

void cachefile_key(const char *context, const struct kn_part *keys, size_t n,
                   uint8_t key[BLAKE3_KEY_LEN])
{
    struct blake3_hasher kh;
    blake3_hasher_init_derive_key(&kh, context);
    for (size_t i = 0; i < n; i++)
        blake3_hasher_update(&kh, keys[i].data, keys[i].size);
    blake3_hasher_finalize(&kh, key, BLAKE3_KEY_LEN);
}

void cachefile_mac(const uint8_t key[BLAKE3_KEY_LEN], const struct kn_part *parts, size_t n,
                   int mapped_threads, uint8_t mac[BLAKE3_OUT_LEN])
{
    struct blake3_hasher mh;
    blake3_hasher_init_keyed(&mh, key);
    for (size_t i = 0; i < n; i++) {
        if (mapped_threads == 0)
            blake3_hasher_update(&mh, parts[i].data, parts[i].size);
        else
            blake3_hasher_update_mapped(&mh, parts[i].data, parts[i].size, mapped_threads);
    }
    blake3_hasher_finalize(&mh, mac, BLAKE3_OUT_LEN);
}
