/* test_util.h - helpers shared by the unit tests: locating test inputs, skipping honestly,
 * reading files, comparing float vectors.
 *
 * Skips: a test whose input is absent calls test_skip(), which prints the reason and exits
 * 77 (ctest SKIP_RETURN_CODE), so it is reported as skipped, never passed. The test model
 * is special: with DERAS_REQUIRE_MODEL=1 (set by tools/bootstrap test) its absence fails.
 */
#ifndef DERAS_TEST_UTIL_H
#define DERAS_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline void test_skip(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void test_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIPPED: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
    exit(77);
}

/* $DERAS_TEST_DATA/rel, or a skip if DERAS_TEST_DATA is unset. Static buffer per call site
 * is not needed: returns a malloc'd string the test may leak. */
static inline char *test_data_path(const char *rel)
{
    const char *dir = getenv("DERAS_TEST_DATA");
    if (!dir || !*dir)
        test_skip("DERAS_TEST_DATA is not set (run the tests through ctest)");
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, rel);
    return p;
}

/* The test model path; skips (or fails, under DERAS_REQUIRE_MODEL=1) when absent. */
static inline const char *test_model_path(void)
{
    const char *p = getenv("DERAS_TEST_MODEL");
    struct stat st;
    if (p && *p && stat(p, &st) == 0)
        return p;
    const char *req = getenv("DERAS_REQUIRE_MODEL");
    if (req && !strcmp(req, "1")) {
        fprintf(stderr, "FAIL: test model not found at '%s' (run tools/bootstrap model)\n",
                p ? p : "(DERAS_TEST_MODEL unset)");
        exit(1);
    }
    test_skip("test model not found at '%s' (run tools/bootstrap model)", p ? p : "(unset)");
}

/* The outside tokenizer vectors folder (../shared/tokenizer-vectors); skips when absent. */
static inline const char *test_tokenizer_vectors_dir(void)
{
    const char *p = getenv("DERAS_TOKENIZER_VECTORS");
    struct stat st;
    if (p && *p && stat(p, &st) == 0 && S_ISDIR(st.st_mode))
        return p;
    test_skip("outside tokenizer vectors not found at '%s' (a checkout without ../shared)",
              p ? p : "(DERAS_TOKENIZER_VECTORS unset)");
}

/* Read a whole file; NULL on failure. *len excludes the NUL appended for convenience. */
static inline char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

/* Relative L2 error ||a - b|| / ||b|| in double precision. */
static inline double test_rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Deterministic random floats in [-1, 1) from a 64-bit seed (splitmix64). */
static inline uint64_t test_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float test_rng_float(uint64_t *s)
{
    return (float)((test_rng_next(s) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}
static inline void test_fill_random(float *x, size_t n, uint64_t *s, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = test_rng_float(s) * scale;
}

#endif
