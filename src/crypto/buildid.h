/* buildid.h: the build id recorded in receipts and printed by `kinetic --version`: the
 * first 16 hex digits of the BLAKE3 of the running executable. It pins every kernel
 * compiled into the binary, so two builds with the same id compute the same bits. */
#ifndef KN_CRYPTO_BUILDID_H
#define KN_CRYPTO_BUILDID_H

#include "../base/base.h"

#define KN_BUILD_ID_LEN 16

/* The build id of the running executable (/proc/self/exe), hashed once and cached; a
 * NUL-terminated string of 16 lowercase hex digits, or "unknown" if the executable could
 * not be read (the reason is logged once as a warning). Thread-safe. */
const char *kn_build_id(void);

/* Computes the build id of the executable at path into out (17 bytes). */
KN_MUST_USE enum kn_status kn_build_id_of(const char *path, char out[KN_BUILD_ID_LEN + 1],
                                          struct kn_err *err);

#endif
