/* cmd_devices.c: `kinetic devices [--no-selftest]`: every device this build can run on
 * (the names --device takes), with its driver, memory, the numerics it meets and, where
 * it does not meet canonical-1, why (the self-test's report). The diagnosis command: its
 * self-test always runs the ops check, never the recorded verdict, and rewrites the
 * record (device_list). */
#include "cli.h"
#include "device/device.h"

#include <stdio.h>

int cmd_devices(int argc, char **argv)
{
    static const char usage[] = "[--no-selftest]";
    bool no_selftest = false;
    const struct cli_opt opts[] = {
        {"no-selftest", 0, CLI_FLAG, &no_selftest, NULL,
         "describe the Vulkan devices without running their self-test", NULL, NULL},
        CLI_OPT_END,
    };
    int n_pos = 0;
    int rc = cli_parse("devices", usage, argc, argv, opts, NULL, 0, &n_pos);
    if (rc)
        return rc == 1 ? 0 : rc;
    return device_list(stdout, !no_selftest, kn_progress_mode_for(stderr));
}
