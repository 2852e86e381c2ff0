/* main.c: the kinetic executable. Dispatches to subcommands; only main() exits. */
#include "cli.h"
#include "base/base.h"
#include "device/device.h"
#include "kernels/isa.h"
#include "crypto/buildid.h"

#include <stdio.h>
#include <string.h>

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
    {"bench", cmd_bench, "measure prompt and generation speed, like llama-bench"},
    {"chat", cmd_chat, "talk with a model: line editing, receipts, Warm Start, Zero Wait"},
    {"devices", cmd_devices, "list the devices --device can name, and the numerics each meets"},
    {"embed", cmd_embed, "print the embedding of texts, like llama-embedding"},
    {"info", cmd_info, "describe a GGUF model file"},
    {"perplexity", cmd_perplexity, "measure perplexity and KL divergence over a text, like llama-perplexity"},
    {"run", cmd_run, "generate text from a prompt"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server with Convoy batching"},
    {"synth", cmd_synth, "write a random-weight model with real shapes"},
    {"tokenize", cmd_tokenize, "show how a model's tokenizer splits text"},
    {"verify-receipt", cmd_verify, "check a receipt: hashes, signature, model, and a rerun"},
};

static void print_usage(FILE *out)
{
    fprintf(out,
            "usage: kinetic COMMAND [ARGS]\n"
            "\n"
            "Kinetic runs GGUF language models with output that is reproducible bit for bit.\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-16s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\n"
            "  --version        print the version, build id, the CPU's instruction sets and the backends\n"
            "  --help           show this help\n"
            "\n"
            "'kinetic COMMAND --help' describes a command.\n");
}

/* Prints what identifies this binary's bits: version, numerics contract, build id (the
 * BLAKE3 of the executable, as receipts record it) and the instruction sets. */
static int print_version(void)
{
    struct kn_err err;
    bool isa_ok = kn_isa_init(&err) == KN_OK;
    printf("kinetic %s\n", KN_VERSION);
    printf("numerics: %s\n", KN_NUMERICS);
    printf("build: %s\n", kn_build_id());
    printf("isa:");
    for (int i = 0; i < KN_ISA_COUNT; i++)
        if (kn_isa_supported((enum kn_isa)i))
            printf(" %s", kn_isa_name((enum kn_isa)i));
    printf(" (active: %s)\n", kn_isa_name(kn_isa_active()));
    struct kn_err pf_err;
    bool pf_ok = kern_prefetch_init(&pf_err) == KN_OK;
    const char *why;
    size_t pf_default = kern_prefetch_default(&why), pf = kern_prefetch_bytes();
    if (pf == pf_default)
        printf("prefetch: %zu bytes ahead (%s)\n", pf, why);
    else
        printf("prefetch: %zu bytes ahead (KINETIC_PREFETCH; default %zu)\n", pf, pf_default);
    printf("backends: %s\n", device_backends_built());
    if (!isa_ok)
        fprintf(stderr, "kinetic: warning: %s\n", err.msg);
    if (!pf_ok)
        fprintf(stderr, "kinetic: warning: %s\n", pf_err.msg);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0)
        return print_version();
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    enum { N = sizeof commands / sizeof commands[0] };
    const char *names[N];
    for (size_t i = 0; i < N; i++)
        names[i] = commands[i].name;
    char near[64];
    if (cli_nearest_word(cmd, names, N, near, sizeof near))
        fprintf(stderr, "kinetic: unknown command '%s'; did you mean '%s'? (see 'kinetic --help')\n",
                cmd, near);
    else
        fprintf(stderr, "kinetic: unknown command '%s'; see 'kinetic --help'\n", cmd);
    return 2;
}
