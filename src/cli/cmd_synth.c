/* cmd_synth.c: placeholder until the module lands. */
#include "cli.h"
#include <stdio.h>

int cmd_synth(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "kinetic synth: not available yet\n");
    return 2;
}
