/* cli_prompt.c: reading a prompt file (-f FILE, or '-' for standard input), bounded. */
#include "cli.h"
#include "base/base.h"

#include <string.h>

int cli_read_prompt(const char *path, char **out, size_t *len, struct kn_err *err)
{
    enum kn_status st = kn_read_file(path, CLI_PROMPT_MAX_BYTES, out, len, err);
    const char *name = strcmp(path, "-") == 0 ? "standard input" : path;
    if (st == KN_E_LIMIT)
        return kn_fail(err, st, "the prompt in %s is larger than %zu MiB, more than the largest "
                       "context (%zu tokens) can hold; give a shorter prompt", name,
                       CLI_PROMPT_MAX_BYTES >> 20, CLI_PROMPT_MAX_TOKENS);
    if (st != KN_OK)
        kn_err_prefix(err, "-f");
    return st;
}
