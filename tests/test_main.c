/* The test runner: runs every registered TEST (or those whose name contains
 * argv[1]) and ends with the line "N passed, N failed".
 *
 * Seeds: the base seed is fixed (VCATTN_TEST_DEFAULT_SEED) so every run sees
 * the same inputs; VCATTN_TEST_SEED=<n> overrides it (VCATTN_TEST_SEED=random
 * takes one from the clock, to explore).  Each test derives its own stream
 * from the base seed and its name, so a test run alone (with a filter) sees
 * exactly the inputs it sees in the full run.  A failing test prints the seed
 * that reproduces it. */
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TESTS 512
#define VCATTN_TEST_DEFAULT_SEED 20261201ull

static struct { const char *name; test_fn fn; } g_tests[MAX_TESTS];
static int g_count;
static int g_current_failed;
static const char *g_current_name;
static uint64_t g_base_seed;
static uint64_t g_seed;

void test_register(const char *name, test_fn fn) {
    if (g_count < MAX_TESTS) {
        g_tests[g_count].name = name;
        g_tests[g_count].fn = fn;
        ++g_count;
    }
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    if (!g_current_failed)
        fprintf(stderr, "    [%s failed; reproduce with VCATTN_TEST_SEED=%llu vcattn_tests %s]\n",
                g_current_name ? g_current_name : "?", (unsigned long long)g_base_seed,
                g_current_name ? g_current_name : "");
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_current_failed = 1;
}

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* base seed and test name -> the test's first seed */
static uint64_t seed_for(uint64_t base, const char *name) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a */
    for (const char *c = name; *c; ++c) h = (h ^ (unsigned char)*c) * 0x100000001B3ull;
    return mix64(base ^ mix64(h));
}

uint64_t test_seed(void) { return mix64(g_seed++); }

static int by_name(const void *a, const void *b) {
    return strcmp(((const char *const *)a)[0], ((const char *const *)b)[0]);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    const char *env = getenv("VCATTN_TEST_SEED");
    if (env && strcmp(env, "random") == 0)
        g_base_seed = (uint64_t)time(NULL);
    else
        g_base_seed = env && *env ? strtoull(env, NULL, 10) : VCATTN_TEST_DEFAULT_SEED;
    printf("test seed %llu (%s; VCATTN_TEST_SEED=<n> or =random to change)\n",
           (unsigned long long)g_base_seed, env && *env ? "from VCATTN_TEST_SEED" : "the fixed default");
    qsort(g_tests, (size_t)g_count, sizeof g_tests[0], by_name);
    int passed = 0, failed = 0;
    for (int i = 0; i < g_count; ++i) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        g_current_failed = 0;
        g_current_name = g_tests[i].name;
        g_seed = seed_for(g_base_seed, g_tests[i].name);
        clock_t t0 = clock();
        g_tests[i].fn();
        double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
        printf("%s %s (%.2fs cpu)\n", g_current_failed ? "FAIL" : "ok  ", g_tests[i].name, s);
        fflush(stdout);
        if (g_current_failed) ++failed; else ++passed;
    }
    printf("%d passed, %d failed\n", passed, failed);
    if (failed) printf("seed %llu: rerun with VCATTN_TEST_SEED=%llu\n", (unsigned long long)g_base_seed,
                       (unsigned long long)g_base_seed);
    return failed ? 1 : 0;
}
