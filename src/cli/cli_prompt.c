/* cli_prompt.c: reading a prompt file (-f FILE, or '-' for standard input), bounded. */
#include "cli.h"
#include "base/base.h"
#include "model/model.h"

#include <string.h>

/* The largest prompt run and tokenize read (a file or standard input): what the largest
 * context holds, MODEL_MAX_CTX positions, at 16 bytes a token (text runs at about 4; the
 * margin covers long tokens). A longer prompt could never fit, so it is refused as soon
 * as that much has been read. */
#define CLI_PROMPT_BYTES_PER_TOKEN 16
#define CLI_PROMPT_MAX_BYTES ((size_t)MODEL_MAX_CTX * CLI_PROMPT_BYTES_PER_TOKEN)

int cli_read_prompt(const char *path, char **out, size_t *len, struct kn_err *err)
{
    enum kn_status st = kn_read_file(path, CLI_PROMPT_MAX_BYTES, out, len, err);
    const char *name = strcmp(path, "-") == 0 ? "standard input" : path;
    if (st == KN_E_LIMIT)
        return kn_fail(err, st, "the prompt in %s is larger than %zu MiB, more than the largest "
                       "context (%zu tokens) can hold; give a shorter prompt", name,
                       CLI_PROMPT_MAX_BYTES >> 20, (size_t)MODEL_MAX_CTX);
    if (st != KN_OK)
        kn_err_prefix(err, "-f");
    return st;
}
