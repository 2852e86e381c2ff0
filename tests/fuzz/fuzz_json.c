/* fuzz_json.c: libFuzzer target for the JSON reader and writer. Beyond not crashing, it
 * checks the properties receipts rely on: whatever parses writes canonically, the compact
 * and pretty forms both parse back to the same canonical bytes, a clone writes the same,
 * the RFC 8785 (JCS) form reads back to the same JCS bytes, and sanitized UTF-8 is valid. */
#include "base/json.h"

#include <stdlib.h>
#include <string.h>

static char *canonical(const struct json_value *v, size_t *n)
{
    char *s;
    struct kn_err err;
    if (json_write(v, JSON_COMPACT, &s, n, &err) != KN_OK)
        abort(); /* a parsed tree is always writable */
    return s;
}

/* The JCS form; every parsed tree has one (the reader refuses NaN and infinities). What it
 * writes reads back to the same bytes: its numbers are the shortest text of their doubles,
 * its members already sorted. */
static void jcs_stable(const struct json_value *v)
{
    char *s, *t;
    size_t n, m;
    struct kn_err err;
    if (json_write(v, JSON_JCS, &s, &n, &err) != KN_OK)
        abort();
    struct json_limits lim = {.max_depth = 32, .max_string = 1 << 16};
    struct json_value *back;
    if (json_parse(s, n, &lim, &back, &err) != KN_OK ||
        json_write(back, JSON_JCS, &t, &m, &err) != KN_OK)
        abort();
    if (m != n || memcmp(s, t, n) != 0)
        abort();
    free(t);
    free(s);
    json_free(back);
}

static void reparse_same(const char *text, size_t len, const char *want, size_t want_len)
{
    struct json_value *v;
    struct kn_err err;
    /* The writer never goes deeper than the reader allowed, so the same limits suffice. */
    struct json_limits lim = {.max_depth = 32, .max_string = 1 << 16};
    if (json_parse(text, len, &lim, &v, &err) != KN_OK)
        abort();
    size_t n;
    char *c = canonical(v, &n);
    if (n != want_len || memcmp(c, want, n) != 0)
        abort();
    free(c);
    json_free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct json_limits lim = {.max_bytes = 1 << 16, .max_depth = 32, .max_string = 1 << 16};
    struct json_value *v;
    struct kn_err err;
    if (json_parse((const char *)data, size, &lim, &v, &err) == KN_OK) {
        size_t n, pn;
        char *c = canonical(v, &n);
        reparse_same(c, n, c, n);
        char *p;
        if (json_write(v, JSON_PRETTY, &p, &pn, &err) != KN_OK)
            abort();
        reparse_same(p, pn, c, n);
        jcs_stable(v);
        struct json_value *k = json_clone(v);
        size_t kn;
        char *kc = canonical(k, &kn);
        if (kn != n || memcmp(kc, c, n) != 0)
            abort();
        free(kc);
        json_free(k);
        free(p);
        free(c);
        json_free(v);
    } else if (strncmp(err.msg, "JSON: ", 6) != 0) {
        abort(); /* every reader error names JSON and the position */
    }
    size_t sn;
    char *s = json_utf8_sanitize((const char *)data, size, &sn);
    if (s && !json_utf8_valid(s, sn))
        abort();
    free(s);
    return 0;
}
