/* fuzz_receipt.c: libFuzzer target for the strict receipt reader (receipt_from_json) and
 * the checks verify-receipt runs before it touches a model: token hashes and signature.
 * Beyond not crashing, leaking or reading out of bounds (ASan + UBSan), it checks the
 * property receipts rely on: a receipt the reader accepts writes back (receipt_to_json)
 * to a document that reads again to the same canonical bytes, so what Kinetic reads it
 * can also write, and the reader keeps every field it accepted. */
#include "base/json.h"
#include "receipt/receipt.h"

#include <stdlib.h>
#include <string.h>

static char *canonical(const struct receipt *r, size_t *n)
{
    struct json_value *doc;
    struct kn_err err;
    if (receipt_to_json(r, true, &doc, &err) != KN_OK)
        abort(); /* an accepted receipt is always writable */
    char *s;
    if (json_write(doc, JSON_COMPACT, &s, n, &err) != KN_OK)
        abort();
    json_free(doc);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct json_limits lim = RECEIPT_JSON_LIMITS;
    lim.max_bytes = 1 << 20;
    struct json_value *doc;
    struct kn_err err;
    if (json_parse((const char *)data, size, &lim, &doc, &err) != KN_OK)
        return 0;
    struct receipt r;
    if (receipt_from_json(doc, &r, &err) == KN_OK) {
        (void)receipt_check_hashes(doc, &r, &err);
        (void)receipt_check_signature(doc, &r);
        size_t n1, n2;
        char *c1 = canonical(&r, &n1);
        struct json_value *doc2;
        if (json_parse(c1, n1, &RECEIPT_JSON_LIMITS, &doc2, &err) != KN_OK)
            abort(); /* what the writer writes, the reader reads */
        struct receipt r2;
        if (receipt_from_json(doc2, &r2, &err) != KN_OK)
            abort();
        char *c2 = canonical(&r2, &n2);
        if (n1 != n2 || memcmp(c1, c2, n1) != 0)
            abort();
        free(c1);
        free(c2);
        receipt_free(&r2);
        json_free(doc2);
        receipt_free(&r);
    }
    json_free(doc);
    return 0;
}
