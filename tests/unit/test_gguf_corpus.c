/* test_gguf_corpus.c: replays the fuzzing corpus (tests/fuzz/corpus/gguf/, the seeds and
 * every input that once crashed the reader) through the fuzz target's checks, so CI
 * covers them without clang or libFuzzer. Each file is copied into a buffer of exactly
 * its size, so the sanitizer build catches any read past the end. */
#include "check.h"

#define FUZZ_GGUF_NO_MAIN
#include "../fuzz/fuzz_gguf.c"

#include <dirent.h>

int main(void)
{
    const char *src = getenv("KN_SOURCE");
    char dir[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/gguf", src ? src : ".");
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "cannot open %s", dir);
    int n = 0, valid = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *buf;
        size_t size;
        struct kn_err err = {0};
        CHECKF(kn_read_file(path, 1 << 20, &buf, &size, &err) == KN_OK, "%s", err.msg);
        uint8_t *exact = malloc(size ? size : 1);
        memcpy(exact, buf, size);
        free(buf);
        fuzz_gguf_one(exact, size); /* aborts on a broken invariant */
        struct gguf_file *f;
        if (gguf_open_memory(&f, exact, size, e->d_name, &err) == KN_OK) {
            valid++;
            gguf_close(f);
        }
        free(exact);
        n++;
    }
    if (d)
        closedir(d);
    printf("%d corpus files replayed, %d valid\n", n, valid);
    CHECKF(n >= 4 && valid >= 4, "corpus too small: %d files, %d valid", n, valid);
    CHECK_DONE();
}
