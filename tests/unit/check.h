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

#define CHECK_EQ_INT(a, b) CHECKF((a) == (b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_STR(a, b) CHECKF(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))

#define CHECK_DONE()                                                                  \
    do {                                                                              \
        printf("%d checks, %d failed\n", check_count, check_failures);                \
        return check_failures ? 1 : 0;                                                \
    } while (0)

/* The shared data folder (models, vocabularies, vectors), from the environment. */
static inline const char *check_shared_dir(void)
{
    const char *d = getenv("KN_SHARED");
    return d ? d : "../shared";
}

#endif
