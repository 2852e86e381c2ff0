/* cmd_info.c: placeholder until the module lands. */
#include "cli.h"
#include <stdio.h>

int cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kinetic info: not available yet\n");
    return 2;
}
