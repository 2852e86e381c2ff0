/* json.c: strict JSON reader, canonical and pretty writer (see json.h). */
#include "json.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_BYTES ((size_t)64 << 20)
#define DEFAULT_MAX_DEPTH 64
#define DEFAULT_MAX_STRING ((size_t)16 << 20)
/* The writer recurses once per level; built trees are bounded too. */
#define WRITE_MAX_DEPTH 1000

/* ---------------------------------------------------------------- UTF-8 ----------- */

/* Length of the valid UTF-8 sequence at p (n bytes available), or 0 if invalid: no
 * overlong forms, no surrogates (U+D800..DFFF), nothing above U+10FFFF. */
static size_t utf8_seq(const uint8_t *p, size_t n)
{
    uint8_t b = p[0];
    if (b < 0x80)
        return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

bool json_utf8_valid(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        size_t k = utf8_seq(p + i, len - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

char *json_utf8_sanitize(const char *s, size_t len, size_t *out_len)
{
    /* Each invalid byte becomes 3 bytes at most. */
    size_t cap;
    if (!kn_mul_size(len, 3, &cap) || !kn_add_size(cap, 1, &cap))
        return NULL;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < len) {
        size_t k = utf8_seq(p + i, len - i);
        if (k) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    if (out_len)
        *out_len = o;
    return out;
}

/* --------------------------------------------------------------- numbers ---------- */

/* Numbers are converted in the C locale whatever the program's locale is, so a decimal
 * comma can never change a receipt's bytes. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void c_locale_init(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

static double strtod_c(const char *s, char **end)
{
    pthread_once(&c_locale_once, c_locale_init);
    if (c_locale)
        return strtod_l(s, end, c_locale);
    return strtod(s, end);
}

/* printf("%.*e") in the C locale. */
static int format_c(char *buf, size_t n, int prec, double d)
{
    pthread_once(&c_locale_once, c_locale_init);
    locale_t old = c_locale ? uselocale(c_locale) : (locale_t)0;
    int r = snprintf(buf, n, "%.*e", prec, d);
    if (c_locale)
        uselocale(old);
    return r;
}

/* The canonical text of a finite double (docs/receipts.md, "Canonical JSON"): the fewest
 * significant digits p (1..17) whose correctly rounded p-digit decimal reads back as the same
 * double, written like Python's repr(float): fixed-point when the decimal exponent E of the
 * first digit is in [-4, 16), with at least one digit after the point ("1.0", "0.0001",
 * "100.0"); otherwise d.ddde+XX / d.ddde-XX with at least two exponent digits ("1e+16",
 * "1.5e-07"). buf holds at least 48 bytes. */
static void format_double(double d, char *buf)
{
    char e[40];
    for (int p = 1; p <= 17; p++) {
        format_c(e, sizeof e, p - 1, d);
        double back = strtod_c(e, NULL);
        if (memcmp(&back, &d, sizeof d) == 0)
            break;
    }
    /* e is [-]D[.DDD]e(+|-)XX */
    const char *s = e;
    char *o = buf;
    if (*s == '-')
        *o++ = *s++;
    char dig[24];
    int n = 0;
    dig[n++] = *s++;
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++)
            dig[n++] = *s;
    int exp = atoi(s + 1); /* s is at 'e' */
    while (n > 1 && dig[n - 1] == '0')
        n--;
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp - 1; i++)
                *o++ = '0';
            for (int i = 0; i < n; i++)
                *o++ = dig[i];
        } else {
            for (int i = 0; i <= exp; i++)
                *o++ = i < n ? dig[i] : '0';
            *o++ = '.';
            if (n > exp + 1)
                for (int i = exp + 1; i < n; i++)
                    *o++ = dig[i];
            else
                *o++ = '0';
        }
        *o = 0;
    } else {
        *o++ = dig[0];
        if (n > 1) {
            *o++ = '.';
            for (int i = 1; i < n; i++)
                *o++ = dig[i];
        }
        snprintf(o, 16, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

/* The shortest decimal that reads back as d (finite, > 0), as ECMAScript's Number::toString
 * chooses it (ECMA-262 Number::toString, step 5; RFC 8785 section 3.2.2.3): the fewest
 * significant digits k, and among the k-digit decimals that read back as d the one closest
 * to d. At each k only two decimals can: the largest at or below d and the smallest at or
 * above it. printf's correctly rounded %.*e is the closer of the two; when it does not read
 * back, the other may (at a power of two the gap below d is half the gap above, so a
 * farther decimal above can read back where the nearer one below does not). dig gets the
 * k digits (no trailing zeros), *e10 the decimal exponent of the first. */
static void shortest_digits(double d, char dig[24], int *k, int *e10)
{
    char e[40];
    int n = 0, exp = 0;
    for (int p = 1; p <= 17; p++) {
        format_c(e, sizeof e, p - 1, d);
        /* e is D[.DDD]e(+|-)XX */
        n = 0;
        const char *s = e;
        dig[n++] = *s++;
        if (*s == '.')
            for (s++; *s >= '0' && *s <= '9'; s++)
                dig[n++] = *s;
        exp = atoi(s + 1);
        double back = strtod_c(e, NULL);
        if (back == d || p == 17)
            break;
        /* The other neighbour: one unit in the p-th digit towards d. */
        char o[24];
        int oexp = exp;
        memcpy(o, dig, (size_t)n);
        if (back > d) {
            int i = n - 1;
            while (i >= 0 && o[i] == '0')
                o[i--] = '9';
            o[i]--;
            if (o[0] == '0') { /* 10...0 - 1 unit: 9...9 a decade lower, p digits */
                memset(o, '9', (size_t)n);
                oexp--;
            }
        } else {
            int i = n - 1;
            while (i >= 0 && o[i] == '9')
                o[i--] = '0';
            if (i < 0) { /* 9...9 + 1 unit: 10...0 a decade higher */
                o[0] = '1';
                oexp++;
            } else {
                o[i]++;
            }
        }
        char t[48];
        int tl = 0;
        t[tl++] = o[0];
        if (n > 1) {
            t[tl++] = '.';
            memcpy(t + tl, o + 1, (size_t)n - 1);
            tl += n - 1;
        }
        snprintf(t + tl, sizeof t - (size_t)tl, "e%d", oexp);
        if (strtod_c(t, NULL) == d) {
            memcpy(dig, o, (size_t)n);
            exp = oexp;
            break;
        }
    }
    while (n > 1 && dig[n - 1] == '0')
        n--;
    *k = n;
    *e10 = exp;
}

/* A finite double as ECMAScript's Number::toString writes it, which RFC 8785 (JCS) makes the
 * form of every number (section 3.2.2.3): with the k shortest digits and n the position of
 * the decimal point (the value is 0.DIGITS x 10^n): an integer when k <= n <= 21 ("100";
 * "1e+21" beyond), a fraction when 0 < n <= 21 ("1.5") or -6 < n <= 0 ("0.5",
 * "0.000001"), else d.ddde+X / d.ddde-X, the exponent unpadded ("1e-7", "5e-324").
 * -0 is "0". buf holds at least 48 bytes. */
static void format_ecmascript(double d, char *buf)
{
    char *o = buf;
    if (d == 0) {
        strcpy(buf, "0");
        return;
    }
    if (d < 0) {
        *o++ = '-';
        d = -d;
    }
    char dig[24];
    int k, e10;
    shortest_digits(d, dig, &k, &e10);
    int n = e10 + 1;
    if (k <= n && n <= 21) {
        memcpy(o, dig, (size_t)k);
        o += k;
        for (int i = k; i < n; i++)
            *o++ = '0';
    } else if (0 < n && n <= 21) {
        memcpy(o, dig, (size_t)n);
        o += n;
        *o++ = '.';
        memcpy(o, dig + n, (size_t)(k - n));
        o += k - n;
    } else if (-6 < n && n <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -n; i++)
            *o++ = '0';
        memcpy(o, dig, (size_t)k);
        o += k;
    } else {
        *o++ = dig[0];
        if (k > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, (size_t)(k - 1));
            o += k - 1;
        }
        o += sprintf(o, "e%c%d", n - 1 < 0 ? '-' : '+', n - 1 < 0 ? 1 - n : n - 1);
    }
    *o = 0;
}

/* ---------------------------------------------------------------- values ---------- */

static struct json_value *new_value(enum json_type t)
{
    struct json_value *v = calloc(1, sizeof *v);
    if (v)
        v->type = t;
    return v;
}

void json_free(struct json_value *v)
{
    if (!v)
        return;
    switch (v->type) {
    case JSON_NUMBER:
        free(v->u.number.text);
        break;
    case JSON_STRING:
        free(v->u.string.s);
        break;
    case JSON_ARRAY:
        for (size_t i = 0; i < v->u.array.len; i++)
            json_free(v->u.array.items[i]);
        free(v->u.array.items);
        break;
    case JSON_OBJECT:
        for (size_t i = 0; i < v->u.object.len; i++) {
            free(v->u.object.items[i].key);
            json_free(v->u.object.items[i].value);
        }
        free(v->u.object.items);
        break;
    case JSON_NULL:
    case JSON_BOOL:
        break;
    }
    free(v);
}

struct json_value *json_new_null(void)
{
    return new_value(JSON_NULL);
}

struct json_value *json_new_bool(bool b)
{
    struct json_value *v = new_value(JSON_BOOL);
    if (v)
        v->u.boolean = b;
    return v;
}

struct json_value *json_new_int(int64_t i)
{
    struct json_value *v = new_value(JSON_NUMBER);
    if (!v)
        return NULL;
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)i);
    v->u.number.text = strdup(buf);
    if (!v->u.number.text) {
        free(v);
        return NULL;
    }
    v->u.number.is_int = true;
    v->u.number.i = i;
    v->u.number.d = (double)i;
    return v;
}

struct json_value *json_new_float(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    return json_new_double(strtod(buf, NULL));
}

struct json_value *json_new_double(double d)
{
    struct json_value *v = new_value(JSON_NUMBER);
    if (!v)
        return NULL;
    char buf[48];
    if (isfinite(d))
        format_double(d, buf);
    else
        snprintf(buf, sizeof buf, "%s", isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
    v->u.number.text = strdup(buf);
    if (!v->u.number.text) {
        free(v);
        return NULL;
    }
    v->u.number.d = d;
    return v;
}

struct json_value *json_new_stringn(const char *s, size_t len)
{
    struct json_value *v = new_value(JSON_STRING);
    if (!v)
        return NULL;
    size_t n;
    if (!kn_add_size(len, 1, &n) || !(v->u.string.s = malloc(n))) {
        free(v);
        return NULL;
    }
    memcpy(v->u.string.s, s, len);
    v->u.string.s[len] = 0;
    v->u.string.len = len;
    return v;
}

struct json_value *json_new_string(const char *s)
{
    return json_new_stringn(s, strlen(s));
}

struct json_value *json_new_array(void)
{
    return new_value(JSON_ARRAY);
}

struct json_value *json_new_object(void)
{
    return new_value(JSON_OBJECT);
}

/* Grows an array of elem-sized items to hold one more. */
static bool grow(void **items, size_t *cap, size_t len, size_t elem)
{
    if (len < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 4, bytes;
    if (nc < *cap || !kn_mul_size(nc, elem, &bytes))
        return false;
    void *p = realloc(*items, bytes);
    if (!p)
        return false;
    *items = p;
    *cap = nc;
    return true;
}

enum kn_status json_array_push(struct json_value *arr, struct json_value *v, struct kn_err *err)
{
    if (!v)
        return kn_fail(err, KN_E_NOMEM, "JSON: out of memory");
    if (!arr || arr->type != JSON_ARRAY) {
        json_free(v);
        return kn_fail(err, KN_E_INTERNAL, "JSON: push onto a value that is not an array");
    }
    if (!grow((void **)&arr->u.array.items, &arr->u.array.cap, arr->u.array.len,
              sizeof *arr->u.array.items)) {
        json_free(v);
        return kn_fail(err, KN_E_NOMEM, "JSON: out of memory");
    }
    arr->u.array.items[arr->u.array.len++] = v;
    return KN_OK;
}

static const struct json_member *find_member(const struct json_value *obj, const char *key,
                                             size_t key_len)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->u.object.len; i++) {
        const struct json_member *m = &obj->u.object.items[i];
        if (m->key_len == key_len && memcmp(m->key, key, key_len) == 0)
            return m;
    }
    return NULL;
}

/* Appends a member whose key buffer (malloc'd, NUL-terminated) passes to the object. */
static bool add_member(struct json_value *obj, char *key, size_t key_len, struct json_value *v)
{
    if (!grow((void **)&obj->u.object.items, &obj->u.object.cap, obj->u.object.len,
              sizeof *obj->u.object.items))
        return false;
    obj->u.object.items[obj->u.object.len++] =
        (struct json_member){.key = key, .key_len = key_len, .value = v};
    return true;
}

enum kn_status json_object_set(struct json_value *obj, const char *key, struct json_value *v,
                               struct kn_err *err)
{
    if (!v)
        return kn_fail(err, KN_E_NOMEM, "JSON: out of memory");
    if (!obj || obj->type != JSON_OBJECT) {
        json_free(v);
        return kn_fail(err, KN_E_INTERNAL, "JSON: member set on a value that is not an object");
    }
    size_t klen = strlen(key);
    if (find_member(obj, key, klen)) {
        json_free(v);
        return kn_fail(err, KN_E_ARG, "JSON: key \"%s\" is already in the object", key);
    }
    char *k = strdup(key);
    if (!k || !add_member(obj, k, klen, v)) {
        free(k);
        json_free(v);
        return kn_fail(err, KN_E_NOMEM, "JSON: out of memory");
    }
    return KN_OK;
}

struct json_value *json_object_take(struct json_value *obj, const char *key)
{
    const struct json_member *m = find_member(obj, key, strlen(key));
    if (!m)
        return NULL;
    size_t i = (size_t)(m - obj->u.object.items);
    struct json_value *v = m->value;
    free(m->key);
    memmove(&obj->u.object.items[i], &obj->u.object.items[i + 1],
            (obj->u.object.len - i - 1) * sizeof *obj->u.object.items);
    obj->u.object.len--;
    return v;
}

struct json_value *json_clone(const struct json_value *v)
{
    if (!v)
        return NULL;
    struct json_value *c = NULL;
    switch (v->type) {
    case JSON_NULL:
        return json_new_null();
    case JSON_BOOL:
        return json_new_bool(v->u.boolean);
    case JSON_NUMBER:
        c = new_value(JSON_NUMBER);
        if (!c)
            return NULL;
        c->u.number = v->u.number;
        c->u.number.text = strdup(v->u.number.text);
        if (!c->u.number.text) {
            free(c);
            return NULL;
        }
        return c;
    case JSON_STRING:
        return json_new_stringn(v->u.string.s, v->u.string.len);
    case JSON_ARRAY:
        c = json_new_array();
        for (size_t i = 0; c && i < v->u.array.len; i++)
            if (json_array_push(c, json_clone(v->u.array.items[i]), NULL) != KN_OK) {
                json_free(c);
                c = NULL;
            }
        return c;
    case JSON_OBJECT:
        c = json_new_object();
        for (size_t i = 0; c && i < v->u.object.len; i++) {
            const struct json_member *m = &v->u.object.items[i];
            struct json_value *cv = json_clone(m->value);
            char *k = malloc(m->key_len + 1);
            if (k)
                memcpy(k, m->key, m->key_len + 1);
            if (!cv || !k || !add_member(c, k, m->key_len, cv)) {
                free(k);
                json_free(cv);
                json_free(c);
                c = NULL;
            }
        }
        return c;
    }
    return NULL;
}

/* ---------------------------------------------------------------- access ---------- */

const struct json_value *json_get(const struct json_value *obj, const char *key)
{
    const struct json_member *m = find_member(obj, key, strlen(key));
    return m ? m->value : NULL;
}

size_t json_len(const struct json_value *v)
{
    if (v && v->type == JSON_ARRAY)
        return v->u.array.len;
    if (v && v->type == JSON_OBJECT)
        return v->u.object.len;
    return 0;
}

const struct json_value *json_at(const struct json_value *arr, size_t i)
{
    if (!arr || arr->type != JSON_ARRAY || i >= arr->u.array.len)
        return NULL;
    return arr->u.array.items[i];
}

const char *json_str(const struct json_value *v)
{
    return v && v->type == JSON_STRING ? v->u.string.s : NULL;
}

bool json_int(const struct json_value *v, int64_t *out)
{
    if (!v || v->type != JSON_NUMBER || !v->u.number.is_int)
        return false;
    *out = v->u.number.i;
    return true;
}

bool json_double(const struct json_value *v, double *out)
{
    if (!v || v->type != JSON_NUMBER)
        return false;
    *out = v->u.number.d;
    return true;
}

bool json_is(const struct json_value *v, enum json_type t)
{
    return v && v->type == t;
}

/* ---------------------------------------------------------------- reader ---------- */

struct parser {
    const uint8_t *start, *p, *end;
    struct json_limits lim;
    size_t depth;
    size_t n_values;
    struct kn_err *err;
};

/* Fails with the position of `at`: 1-based line, 1-based column in characters (UTF-8
 * lead bytes), 0-based byte offset. */
KN_PRINTF(4, 5)
static enum kn_status perr(struct parser *ps, const uint8_t *at, enum kn_status st,
                           const char *fmt, ...)
{
    size_t line = 1, col = 1;
    for (const uint8_t *q = ps->start; q < at; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else if ((*q & 0xC0) != 0x80) {
            col++;
        }
    }
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kn_fail(ps->err, st, "JSON: line %zu, column %zu (byte %zu): %s", line, col,
                   (size_t)(at - ps->start), msg);
}

static void skip_ws(struct parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

/* Describes the byte at p for messages. */
static const char *describe(const struct parser *ps, const uint8_t *p, char buf[16])
{
    if (p >= ps->end)
        return "the end of the input";
    if (*p >= 0x21 && *p < 0x7F)
        snprintf(buf, 16, "'%c'", *p);
    else
        snprintf(buf, 16, "byte 0x%02x", *p);
    return buf;
}

static int hex4(const uint8_t *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(uint8_t *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xC0 | c >> 6);
        o[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | c >> 12);
        o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | c >> 18);
    o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* Parses a string at ps->p (on the opening quote) into a new buffer. */
static enum kn_status parse_string(struct parser *ps, char **out, size_t *out_len)
{
    const uint8_t *open = ps->p++;
    /* Find the closing quote first: the decoded string is never longer than the raw. */
    const uint8_t *q = ps->p;
    while (q < ps->end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
    }
    if (q >= ps->end)
        return perr(ps, open, KN_E_FORMAT, "string not terminated (no closing '\"')");
    size_t raw = (size_t)(q - ps->p);
    uint8_t *buf = malloc(raw + 1);
    if (!buf)
        return kn_fail(ps->err, KN_E_NOMEM, "JSON: out of memory for a %zu-byte string", raw);
    size_t o = 0;
    const uint8_t *p = ps->p;
    enum kn_status st = KN_OK;
    while (p < q) {
        uint8_t c = *p;
        if (c == '\\') {
            const uint8_t *esc = p;
            p++;
            switch (*p) {
            case '"': buf[o++] = '"'; p++; break;
            case '\\': buf[o++] = '\\'; p++; break;
            case '/': buf[o++] = '/'; p++; break;
            case 'b': buf[o++] = '\b'; p++; break;
            case 'f': buf[o++] = '\f'; p++; break;
            case 'n': buf[o++] = '\n'; p++; break;
            case 'r': buf[o++] = '\r'; p++; break;
            case 't': buf[o++] = '\t'; p++; break;
            case 'u': {
                int u = q - p >= 5 ? hex4(p + 1) : -1;
                if (u < 0) {
                    st = perr(ps, esc, KN_E_FORMAT, "\\u must be followed by 4 hex digits");
                    goto fail;
                }
                p += 5;
                uint32_t cp = (uint32_t)u;
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    st = perr(ps, esc, KN_E_FORMAT,
                              "\\u%04X is a low surrogate without a high surrogate before it",
                              (unsigned)cp);
                    goto fail;
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    int lo = (q - p >= 6 && p[0] == '\\' && p[1] == 'u') ? hex4(p + 2) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        st = perr(ps, esc, KN_E_FORMAT,
                                  "\\u%04X is a high surrogate not followed by a \\u low "
                                  "surrogate (DC00-DFFF)",
                                  (unsigned)cp);
                        goto fail;
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    p += 6;
                }
                o += put_utf8(buf + o, cp);
                break;
            }
            default:
                st = perr(ps, esc, KN_E_FORMAT, "invalid escape '\\%c' in a string",
                          *p >= 0x20 && *p < 0x7F ? *p : '?');
                goto fail;
            }
        } else if (c < 0x20) {
            st = perr(ps, p, KN_E_FORMAT,
                      "control character 0x%02x in a string; write it as an escape (\\n, "
                      "\\u00%02x)",
                      c, c);
            goto fail;
        } else if (c < 0x80) {
            buf[o++] = c;
            p++;
        } else {
            size_t k = utf8_seq(p, (size_t)(q - p));
            if (!k) {
                st = perr(ps, p, KN_E_FORMAT, "invalid UTF-8 (byte 0x%02x) in a string", c);
                goto fail;
            }
            memcpy(buf + o, p, k);
            o += k;
            p += k;
        }
        if (o > ps->lim.max_string) {
            st = perr(ps, open, KN_E_LIMIT, "string longer than the limit of %zu bytes",
                      ps->lim.max_string);
            goto fail;
        }
    }
    buf[o] = 0;
    ps->p = q + 1;
    *out = (char *)buf;
    *out_len = o;
    return KN_OK;
fail:
    free(buf);
    return st;
}

static enum kn_status parse_number(struct parser *ps, struct json_value **out)
{
    const uint8_t *s = ps->p, *p = s;
    bool integer = true;
    if (p < ps->end && *p == '-')
        p++;
    if (p >= ps->end || *p < '0' || *p > '9')
        return perr(ps, s, KN_E_FORMAT, "a number needs a digit after '-'");
    if (*p == '0') {
        p++;
        if (p < ps->end && *p >= '0' && *p <= '9')
            return perr(ps, s, KN_E_FORMAT, "numbers may not have leading zeros");
    } else {
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < ps->end && *p == '.') {
        integer = false;
        p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return perr(ps, p, KN_E_FORMAT, "a digit must follow the decimal point");
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        integer = false;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return perr(ps, p, KN_E_FORMAT, "an exponent needs digits");
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    size_t n = (size_t)(p - s);
    struct json_value *v = new_value(JSON_NUMBER);
    char *text = malloc(n + 1);
    if (!v || !text) {
        free(v);
        free(text);
        return kn_fail(ps->err, KN_E_NOMEM, "JSON: out of memory");
    }
    memcpy(text, s, n);
    text[n] = 0;
    v->u.number.text = text;
    v->u.number.d = strtod_c(text, NULL);
    if (isinf(v->u.number.d)) {
        json_free(v);
        return perr(ps, s, KN_E_FORMAT, "number %.*s is too large for a double", (int)(n > 40 ? 40 : n), (const char *)s);
    }
    if (integer) {
        errno = 0;
        long long i = strtoll(text, NULL, 10);
        if (errno == 0) {
            v->u.number.is_int = true;
            v->u.number.i = i;
        }
    }
    ps->p = p;
    *out = v;
    return KN_OK;
}

static enum kn_status parse_value(struct parser *ps, struct json_value **out);

/* Rejects duplicate keys: pairwise for small objects, by sorting for large ones, so a
 * hostile object with many keys costs O(n log n). */
static int member_cmp(const void *a, const void *b)
{
    const struct json_member *x = *(const struct json_member *const *)a;
    const struct json_member *y = *(const struct json_member *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

static const struct json_member *find_duplicate(const struct json_value *obj)
{
    size_t n = obj->u.object.len;
    const struct json_member *m = obj->u.object.items;
    if (n <= 16) {
        for (size_t i = 1; i < n; i++)
            for (size_t j = 0; j < i; j++)
                if (m[i].key_len == m[j].key_len && memcmp(m[i].key, m[j].key, m[i].key_len) == 0)
                    return &m[i];
        return NULL;
    }
    const struct json_member **s = malloc(n * sizeof *s);
    if (!s) /* fall back to the quadratic check rather than skip it */
    {
        for (size_t i = 1; i < n; i++)
            for (size_t j = 0; j < i; j++)
                if (m[i].key_len == m[j].key_len && memcmp(m[i].key, m[j].key, m[i].key_len) == 0)
                    return &m[i];
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        s[i] = &m[i];
    qsort(s, n, sizeof *s, member_cmp);
    const struct json_member *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (member_cmp(&s[i - 1], &s[i]) == 0)
            dup = s[i] > s[i - 1] ? s[i] : s[i - 1];
    free(s);
    return dup;
}

static enum kn_status parse_container(struct parser *ps, struct json_value **out)
{
    const uint8_t *open = ps->p;
    bool is_obj = *open == '{';
    if (++ps->depth > ps->lim.max_depth)
        return perr(ps, open, KN_E_LIMIT, "nested deeper than the limit of %zu levels",
                    ps->lim.max_depth);
    struct json_value *v = is_obj ? json_new_object() : json_new_array();
    if (!v)
        return kn_fail(ps->err, KN_E_NOMEM, "JSON: out of memory");
    /* Key offsets, to report a duplicate key where it appears. */
    const uint8_t **key_at = NULL;
    size_t key_at_cap = 0;
    enum kn_status st;
    char b[16];
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
        ps->p++;
        goto done;
    }
    for (;;) {
        skip_ws(ps);
        if (is_obj) {
            if (ps->p >= ps->end || *ps->p != '"') {
                st = perr(ps, ps->p, KN_E_FORMAT, "expected a string key, found %s",
                          describe(ps, ps->p, b));
                goto fail;
            }
            const uint8_t *kat = ps->p;
            char *key;
            size_t klen;
            if ((st = parse_string(ps, &key, &klen)) != KN_OK)
                goto fail;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                st = perr(ps, ps->p, KN_E_FORMAT, "expected ':' after an object key, found %s",
                          describe(ps, ps->p, b));
                goto fail;
            }
            ps->p++;
            skip_ws(ps);
            struct json_value *item;
            if ((st = parse_value(ps, &item)) != KN_OK) {
                free(key);
                goto fail;
            }
            if (!grow((void **)&key_at, &key_at_cap, v->u.object.len, sizeof *key_at) ||
                !add_member(v, key, klen, item)) {
                free(key);
                json_free(item);
                st = kn_fail(ps->err, KN_E_NOMEM, "JSON: out of memory");
                goto fail;
            }
            key_at[v->u.object.len - 1] = kat;
        } else {
            struct json_value *item;
            if ((st = parse_value(ps, &item)) != KN_OK)
                goto fail;
            if ((st = json_array_push(v, item, ps->err)) != KN_OK)
                goto fail;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
                st = perr(ps, ps->p - 1, KN_E_FORMAT, "trailing comma before '%c'", *ps->p);
                goto fail;
            }
            continue;
        }
        if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
            ps->p++;
            break;
        }
        st = perr(ps, ps->p, KN_E_FORMAT, "expected ',' or '%c' in the %s opened at byte %zu, found %s",
                  is_obj ? '}' : ']', is_obj ? "object" : "array", (size_t)(open - ps->start),
                  describe(ps, ps->p, b));
        goto fail;
    }
done:
    if (is_obj) {
        const struct json_member *dup = find_duplicate(v);
        if (dup) {
            size_t i = (size_t)(dup - v->u.object.items);
            st = perr(ps, key_at[i], KN_E_FORMAT, "duplicate key \"%.*s\"",
                      (int)(dup->key_len > 100 ? 100 : dup->key_len), dup->key);
            goto fail;
        }
    }
    free(key_at);
    ps->depth--;
    *out = v;
    return KN_OK;
fail:
    free(key_at);
    json_free(v);
    return st;
}

static bool match(struct parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static enum kn_status parse_value(struct parser *ps, struct json_value **out)
{
    *out = NULL;
    char b[16];
    if (ps->p >= ps->end)
        return perr(ps, ps->p, KN_E_FORMAT, "expected a value, found the end of the input");
    const uint8_t *at = ps->p;
    if (ps->lim.max_values && ++ps->n_values > ps->lim.max_values)
        return perr(ps, at, KN_E_LIMIT, "more than %zu values in the document (the limit)",
                    ps->lim.max_values);
    switch (*ps->p) {
    case '{':
    case '[':
        return parse_container(ps, out);
    case '"': {
        char *s;
        size_t n;
        enum kn_status st = parse_string(ps, &s, &n);
        if (st != KN_OK)
            return st;
        struct json_value *v = new_value(JSON_STRING);
        if (!v) {
            free(s);
            return kn_fail(ps->err, KN_E_NOMEM, "JSON: out of memory");
        }
        v->u.string.s = s;
        v->u.string.len = n;
        *out = v;
        return KN_OK;
    }
    case 't':
    case 'f':
    case 'n': {
        struct json_value *v = NULL;
        if (match(ps, "true"))
            v = json_new_bool(true);
        else if (match(ps, "false"))
            v = json_new_bool(false);
        else if (match(ps, "null"))
            v = json_new_null();
        else
            break;
        if (!v)
            return kn_fail(ps->err, KN_E_NOMEM, "JSON: out of memory");
        *out = v;
        return KN_OK;
    }
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return parse_number(ps, out);
        break;
    }
    return perr(ps, at, KN_E_FORMAT, "expected a value (object, array, string, number, true, "
                "false or null), found %s", describe(ps, at, b));
}

enum kn_status json_parse(const char *text, size_t len, const struct json_limits *limits,
                          struct json_value **out, struct kn_err *err)
{
    *out = NULL;
    struct parser ps = {.start = (const uint8_t *)text, .p = (const uint8_t *)text,
                        .end = (const uint8_t *)text + len, .err = err};
    if (limits)
        ps.lim = *limits;
    if (!ps.lim.max_bytes)
        ps.lim.max_bytes = DEFAULT_MAX_BYTES;
    if (!ps.lim.max_depth)
        ps.lim.max_depth = DEFAULT_MAX_DEPTH;
    if (!ps.lim.max_string)
        ps.lim.max_string = DEFAULT_MAX_STRING;
    if (len > ps.lim.max_bytes)
        return kn_fail(err, KN_E_LIMIT, "JSON: document of %zu bytes exceeds the limit of %zu",
                       len, ps.lim.max_bytes);
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        return perr(&ps, ps.p, KN_E_FORMAT, "byte order mark at the start; save the file as "
                    "UTF-8 without BOM");
    skip_ws(&ps);
    if (ps.p >= ps.end)
        return perr(&ps, ps.p, KN_E_FORMAT, "empty document");
    struct json_value *v;
    enum kn_status st = parse_value(&ps, &v);
    if (st != KN_OK)
        return st;
    skip_ws(&ps);
    if (ps.p < ps.end) {
        char b[16];
        json_free(v);
        return perr(&ps, ps.p, KN_E_FORMAT, "unexpected %s after the document",
                    describe(&ps, ps.p, b));
    }
    *out = v;
    return KN_OK;
}

enum kn_status json_parse_file(const char *path, const struct json_limits *limits,
                               struct json_value **out, struct kn_err *err)
{
    *out = NULL;
    size_t max = limits && limits->max_bytes ? limits->max_bytes : DEFAULT_MAX_BYTES;
    char *text;
    size_t len;
    enum kn_status st = kn_read_file(path, max, &text, &len, err);
    if (st != KN_OK)
        return st;
    st = json_parse(text, len, limits, out, err);
    free(text);
    if (st != KN_OK)
        kn_err_prefix(err, path);
    return st;
}

/* ---------------------------------------------------------------- writer ---------- */

struct wbuf {
    char *data;
    size_t len, cap;
    bool oom;
};

static void put(struct wbuf *w, const void *s, size_t n)
{
    if (w->oom)
        return;
    size_t need;
    if (!kn_add_size(w->len, n + 1, &need)) {
        w->oom = true;
        return;
    }
    if (need > w->cap) {
        size_t nc = w->cap ? w->cap : 256;
        while (nc < need) {
            if (nc > SIZE_MAX / 2) {
                w->oom = true;
                return;
            }
            nc *= 2;
        }
        char *p = realloc(w->data, nc);
        if (!p) {
            w->oom = true;
            return;
        }
        w->data = p;
        w->cap = nc;
    }
    memcpy(w->data + w->len, s, n);
    w->len += n;
    w->data[w->len] = 0;
}

static void puts_(struct wbuf *w, const char *s)
{
    put(w, s, strlen(s));
}

/* Escapes only what JSON requires: '"', '\\' and control characters below 0x20 (as \b \f
 * \n \r \t, else \u00xx with lowercase hex). Everything else, non-ASCII UTF-8 and DEL
 * included, is copied as is. */
static void put_string(struct wbuf *w, const char *s, size_t len)
{
    static const char hexd[] = "0123456789abcdef";
    put(w, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        const char *e = NULL;
        char u[7];
        if (c == '"')
            e = "\\\"";
        else if (c == '\\')
            e = "\\\\";
        else if (c < 0x20) {
            switch (c) {
            case '\b': e = "\\b"; break;
            case '\f': e = "\\f"; break;
            case '\n': e = "\\n"; break;
            case '\r': e = "\\r"; break;
            case '\t': e = "\\t"; break;
            default:
                memcpy(u, "\\u00", 4);
                u[4] = hexd[c >> 4];
                u[5] = hexd[c & 15];
                u[6] = 0;
                e = u;
            }
        }
        if (e) {
            put(w, s + i - run, run);
            run = 0;
            puts_(w, e);
        } else {
            run++;
        }
    }
    put(w, s + len - run, run);
    put(w, "\"", 1);
}

static void indent(struct wbuf *w, size_t level)
{
    static const char spaces[] = "                                ";
    size_t n = level * 2;
    while (n) {
        size_t k = n < 32 ? n : 32;
        put(w, spaces, k);
        n -= k;
    }
}

static bool scalar(const struct json_value *v)
{
    return v->type != JSON_ARRAY && v->type != JSON_OBJECT;
}

/* The next code point of valid UTF-8 s (n bytes) at *i, advancing *i. */
static uint32_t utf8_next(const uint8_t *s, size_t n, size_t *i)
{
    size_t len = utf8_seq(s + *i, n - *i);
    uint32_t c = len == 1 ? s[*i] : (uint32_t)(s[*i] & (0x7F >> len));
    for (size_t k = 1; k < len; k++)
        c = c << 6 | (s[*i + k] & 0x3F);
    *i += len ? len : 1;
    return c;
}

/* Orders keys by their UTF-16 code units, as RFC 8785 section 3.2.3 sorts members. UTF-8
 * bytes order as code points, which agrees except where a code point above U+FFFF (a
 * surrogate pair, D800..DBFF first) meets one in U+E000..U+FFFF: UTF-16 puts the pair
 * first. Keys are valid UTF-8 (checked before sorting). */
static int utf16_cmp(const struct json_member *a, const struct json_member *b)
{
    const uint8_t *x = (const uint8_t *)a->key, *y = (const uint8_t *)b->key;
    size_t i = 0, j = 0;
    while (i < a->key_len && j < b->key_len) {
        uint32_t cx = utf8_next(x, a->key_len, &i), cy = utf8_next(y, b->key_len, &j);
        if (cx == cy)
            continue;
        uint32_t ux = cx > 0xFFFF ? 0xD800 + ((cx - 0x10000) >> 10) : cx;
        uint32_t uy = cy > 0xFFFF ? 0xD800 + ((cy - 0x10000) >> 10) : cy;
        if (ux != uy)
            return ux < uy ? -1 : 1;
        return cx < cy ? -1 : 1; /* one high surrogate: the low ones order as the code points */
    }
    return (i < a->key_len) - (j < b->key_len);
}

static int member_ptr_utf16_cmp(const void *a, const void *b)
{
    return utf16_cmp(*(const struct json_member *const *)a, *(const struct json_member *const *)b);
}

static enum kn_status write_value(struct wbuf *w, const struct json_value *v,
                                  enum json_style style, size_t level, struct kn_err *err)
{
    if (level > WRITE_MAX_DEPTH)
        return kn_fail(err, KN_E_LIMIT, "JSON: cannot write values nested over %d levels",
                       WRITE_MAX_DEPTH);
    bool pretty = style == JSON_PRETTY, jcs = style == JSON_JCS;
    char buf[48];
    switch (v->type) {
    case JSON_NULL:
        puts_(w, "null");
        break;
    case JSON_BOOL:
        puts_(w, v->u.boolean ? "true" : "false");
        break;
    case JSON_NUMBER:
        if (jcs) {
            /* JCS numbers are IEEE doubles, as every JCS library parses them: an integer
             * is written as its double (d is its nearest), so 2^53 + 1 is 9007199254740992,
             * and what JCS writes reads back to the same bytes. */
            if (!isfinite(v->u.number.d))
                return kn_fail(err, KN_E_ARG, "JSON: cannot write %s (JSON has no NaN or "
                               "infinity)", v->u.number.text);
            format_ecmascript(v->u.number.d, buf);
        } else if (v->u.number.is_int) {
            snprintf(buf, sizeof buf, "%lld", (long long)v->u.number.i);
        } else {
            if (!isfinite(v->u.number.d))
                return kn_fail(err, KN_E_ARG, "JSON: cannot write %s (JSON has no NaN or "
                               "infinity)", v->u.number.text);
            format_double(v->u.number.d, buf);
        }
        puts_(w, buf);
        break;
    case JSON_STRING:
        if (!json_utf8_valid(v->u.string.s, v->u.string.len))
            return kn_fail(err, KN_E_ARG, "JSON: a string is not valid UTF-8; clean it with "
                           "json_utf8_sanitize first");
        put_string(w, v->u.string.s, v->u.string.len);
        break;
    case JSON_ARRAY: {
        size_t n = v->u.array.len;
        bool flat = true;
        for (size_t i = 0; i < n; i++)
            flat = flat && scalar(v->u.array.items[i]);
        put(w, "[", 1);
        for (size_t i = 0; i < n; i++) {
            if (i)
                put(w, ",", 1);
            if (pretty && flat && i)
                put(w, " ", 1);
            if (pretty && !flat) {
                put(w, "\n", 1);
                indent(w, level + 1);
            }
            enum kn_status st = write_value(w, v->u.array.items[i], style, level + 1, err);
            if (st != KN_OK)
                return st;
        }
        if (pretty && !flat && n) {
            put(w, "\n", 1);
            indent(w, level);
        }
        put(w, "]", 1);
        break;
    }
    case JSON_OBJECT: {
        size_t n = v->u.object.len;
        for (size_t i = 0; i < n; i++)
            if (!json_utf8_valid(v->u.object.items[i].key, v->u.object.items[i].key_len))
                return kn_fail(err, KN_E_ARG, "JSON: an object key is not valid UTF-8");
        /* JCS: members sorted by key; the others keep insertion order. */
        const struct json_member **order = NULL;
        if (jcs && n > 1) {
            order = malloc(n * sizeof *order);
            if (!order)
                return kn_fail(err, KN_E_NOMEM, "JSON: out of memory while writing");
            for (size_t i = 0; i < n; i++)
                order[i] = &v->u.object.items[i];
            qsort(order, n, sizeof *order, member_ptr_utf16_cmp);
        }
        put(w, "{", 1);
        enum kn_status st = KN_OK;
        for (size_t i = 0; i < n && st == KN_OK; i++) {
            const struct json_member *m = order ? order[i] : &v->u.object.items[i];
            if (i)
                put(w, ",", 1);
            if (pretty) {
                put(w, "\n", 1);
                indent(w, level + 1);
            }
            put_string(w, m->key, m->key_len);
            put(w, pretty ? ": " : ":", pretty ? 2 : 1);
            st = write_value(w, m->value, style, level + 1, err);
        }
        free(order);
        if (st != KN_OK)
            return st;
        if (pretty && n) {
            put(w, "\n", 1);
            indent(w, level);
        }
        put(w, "}", 1);
        break;
    }
    }
    return KN_OK;
}

enum kn_status json_write(const struct json_value *v, enum json_style style, char **out,
                          size_t *out_len, struct kn_err *err)
{
    *out = NULL;
    struct wbuf w = {0};
    enum kn_status st = write_value(&w, v, style, 0, err);
    if (st == KN_OK && style == JSON_PRETTY)
        put(&w, "\n", 1);
    if (st == KN_OK && w.oom)
        st = kn_fail(err, KN_E_NOMEM, "JSON: out of memory while writing");
    if (st != KN_OK) {
        free(w.data);
        return st;
    }
    *out = w.data;
    if (out_len)
        *out_len = w.len;
    return KN_OK;
}
