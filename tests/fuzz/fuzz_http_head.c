/* fuzz_http_head.c: the gate's check of a request's head (gate_check_head) on fuzzed
 * bytes. Nothing may crash or read out of bounds; a verdict is 0 (incomplete), 1 (a
 * complete, sound head whose length ends at the empty line) or 400 with a message; an
 * accepted head is incomplete one byte shorter and accepted alone, so what follows it
 * (the body) never changes the verdict. */
#include "server/srv_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    char msg[300] = "";
    size_t head_len = 0;
    int v = gate_check_head(buf, size, &head_len, msg, sizeof msg);
    if (v == 400) {
        if (!msg[0])
            abort();
    } else if (v == 1) {
        if (head_len == 0 || head_len > size || buf[head_len - 1] != '\n')
            abort();
        size_t shorter = 0;
        char m2[300];
        if (gate_check_head(buf, head_len - 1, &shorter, m2, sizeof m2) != 0)
            abort(); /* one byte less: the empty line is not complete yet */
        size_t again = 0;
        if (gate_check_head(buf, head_len, &again, m2, sizeof m2) != 1 || again != head_len)
            abort();
    } else if (v != 0) {
        abort();
    }
    return 0;
}
