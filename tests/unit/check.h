/* check.h: the unit-test harness. Each test file is one executable run by CTest; a
 * failed CHECK prints file, line and expression and the test continues, so one run
 * shows every failure. main() ends with CHECK_DONE(). */
#ifndef KN_CHECK_H
#define KN_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        check_count++;                                                                \
        if (!(cond)) {                                                                \
            check_failures++;                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
        }                                                                             \
    } while (0)

#define CHECKF(cond, ...)                                                             \
    do {                                                                              \
        check_count++;                                                                \
        if (!(cond)) {                                                                \
            check_failures++;                                                         \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

/* A set-up step the rest of the test depends on (a data file opened, a model loaded): its
 * failure ends the test at once, naming what failed, instead of running on with half a
 * state (test_grammar_gen once did so and crashed where its vocabulary was missing). */
#define REQUIRE(cond, ...)                                                            \
    do {                                                                              \
        check_count++;                                                                \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: required step failed: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                           \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

#define CHECK_EQ_INT(a, b) CHECKF((a) == (b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_STR(a, b) CHECKF(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))

#define CHECK_DONE()                                                                  \
    do {                                                                              \
        printf("%d checks, %d failed\n", check_count, check_failures);                \
        return check_failures ? 1 : 0;                                                \
    } while (0)

/* The tests' data folder (models, vocabularies, templates, tokenizers, vectors): tests/data
 * in this repository (tests/data/SOURCES.md names each file's source and licence), built in
 * as KN_TEST_DATA_DIR; KN_DATA overrides it. */
static inline const char *check_data_dir(void)
{
    const char *d = getenv("KN_DATA");
    return d ? d : KN_TEST_DATA_DIR;
}

/* Whether this binary is the sanitizer build (AddressSanitizer: gcc defines
 * __SANITIZE_ADDRESS__, clang answers __has_feature), where a heavy test may check fewer
 * cases, saying why (tests/py/srvutil.py sanitizer_build is the Python side). */
#if defined(__SANITIZE_ADDRESS__)
#define CHECK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHECK_SANITIZED 1
#endif
#endif
#ifndef CHECK_SANITIZED
#define CHECK_SANITIZED 0
#endif

#endif
