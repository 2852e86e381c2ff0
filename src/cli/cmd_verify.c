/* cmd_verify.c: kinetic verify-receipt. */
#include "cli.h"

#include <stdio.h>

#include "base/progress.h"
#include "engine/session.h"
#include "kernels/kernels.h"
#include "receipt/receipt.h"

static const char *const verify_usage =
    "FILE [--model PATH] [--device CLASS] [--threads N] [--public-key HEX]\n"
    "\n"
    "Checks a receipt: its token hashes, its signature, that the model file is the\n"
    "receipt's (by BLAKE3), then reruns the recorded prompt tokens with the recorded\n"
    "settings on one sequence with every speed feature off, and prints 'identical' or the\n"
    "first output token that differs. The rerun's progress (tokens done of the prompt's and\n"
    "the output's) goes to standard error.\n"
    "\n"
    "It also renders the input again with the recorded template and settings and checks it\n"
    "gives the prompt tokens, and decodes the output tokens (stop strings and reasoning split\n"
    "as recorded) and checks they give output.text byte for byte.\n"
    "\n"
    "exit status: 0 identical; 1 could not check (I/O, model does not load); 2 usage;\n"
    "3 malformed receipt; 4 token hashes do not match; 5 signature invalid (or absent with\n"
    "--public-key); 6 model missing or not the receipt's; 7 the rerun differs (or ran under\n"
    "another numerics version); 8 input, output.text or model.size is not what the tokens\n"
    "and the model file say.";

int cmd_verify(int argc, char **argv)
{
    const char *model = NULL, *device = NULL, *public_key = NULL;
    int64_t threads = session_default_threads(), gpu_layers = -1;
    const struct cli_opt opts[] = {
        {"model", 'm', CLI_STR, &model, "PATH", "the model file, when it moved since the receipt was made", NULL},
        {"device", 0, CLI_STR, &device, "DEV", "rerun on this device: a CPU class (e.g. cpu-x86_64-scalar), " DEVICE_HELP "; default: the receipt's class where this machine has it, else the CPU", NULL},
        {"gpu-layers", 0, CLI_INT, &gpu_layers, "N", "with a GPU: the first N layers on it (default: the receipt's)", NULL},
        {"threads", 't', CLI_INT, &threads, "N", "threads for the rerun, 1..256 (default: CPUs online, at most " CLI_XSTR(SESSION_THREADS_MAX_DEFAULT) "; never changes its result)", NULL},
        {"public-key", 0, CLI_STR, &public_key, "HEX", "require a signature made with this Ed25519 public key", NULL},
        {NULL, 0, 0, NULL, NULL, NULL, NULL},
    };
    const char *pos[1];
    int n_pos;
    int rc = cli_parse("verify-receipt", verify_usage, argc, argv, opts, pos, 1, &n_pos);
    if (rc == 1)
        return 0;
    if (rc)
        return RECEIPT_EXIT_USAGE;
    if (n_pos != 1) {
        fprintf(stderr, "kinetic verify-receipt: give a receipt file; see 'kinetic verify-receipt --help'\n");
        return RECEIPT_EXIT_USAGE;
    }
    if (threads < 1 || threads > KERN_POOL_MAX_THREADS) {
        fprintf(stderr, "kinetic verify-receipt: --threads must be in 1..%d\n", KERN_POOL_MAX_THREADS);
        return RECEIPT_EXIT_USAGE;
    }
    if (public_key && !receipt_key_hex_ok(public_key)) {
        fprintf(stderr, "kinetic verify-receipt: --public-key must be an Ed25519 public key as 64 "
                        "hex digits, not '%.80s'\n", public_key);
        return RECEIPT_EXIT_USAGE;
    }
    if (gpu_layers < -1 || gpu_layers > INT32_MAX) {
        fprintf(stderr, "kinetic verify-receipt: --gpu-layers must be 0 or more\n");
        return RECEIPT_EXIT_USAGE;
    }
    struct receipt_verify_opts o = {model, device, (int)threads, public_key, gpu_layers,
                                    kn_progress_mode_for(stderr)};
    int code = receipt_verify(pos[0], &o, stdout);
    fflush(stdout);
    return code;
}
