/* sample_examples.h: an out-of-range value for each row of the sampling settings table,
 * in its text form (flags, /set) and as JSON (requests, receipts, /save), made from the
 * row's type and range so that a new row gets one without editing the tests. Shared by
 * test_sample_settings.c and tests/tools/sample_table.c (which hands them to the Python
 * test that tries them on every surface). */
#ifndef KN_SAMPLE_EXAMPLES_H
#define KN_SAMPLE_EXAMPLES_H

#include <stdio.h>
#include <string.h>

#include "sample/sample.h"

static void sample_example_bad(const struct sample_setting *s, char *text, char *json, size_t n)
{
    switch (s->type) {
    case SAMPLE_T_FLOAT: snprintf(text, n, "%.10g", s->hi + 1); break;
    case SAMPLE_T_INT:
    case SAMPLE_T_INT64: snprintf(text, n, "%.0f", s->hi + 1); break;
    case SAMPLE_T_SEED: snprintf(text, n, "9223372036854775808"); break; /* 2^63 */
    case SAMPLE_T_BREAKERS:
        snprintf(text, n, "[\"\"]");
        snprintf(json, n, "[\"\"]");
        return;
    case SAMPLE_T_BIAS:
        snprintf(text, n, "1+101");
        snprintf(json, n, "[[1,101]]");
        return;
    case SAMPLE_T_CHAIN:
        snprintf(text, n, "top_k;bogus");
        snprintf(json, n, "\"top_k;bogus\"");
        return;
    }
    snprintf(json, n, "%s", text);
}

#endif
