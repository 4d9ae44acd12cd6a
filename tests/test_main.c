/* The test runner: runs every registered TEST (or those whose name contains
 * argv[1]) and ends with the line "N passed, N failed". */
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TESTS 512

static struct { const char *name; test_fn fn; } g_tests[MAX_TESTS];
static int g_count;
static int g_current_failed;
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
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_current_failed = 1;
}

uint64_t test_seed(void) { return g_seed++; }

static int by_name(const void *a, const void *b) {
    return strcmp(((const char *const *)a)[0], ((const char *const *)b)[0]);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    const char *env = getenv("VCATTN_TEST_SEED");
    g_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    printf("test seed %llu (set VCATTN_TEST_SEED to repeat)\n", (unsigned long long)g_seed);
    qsort(g_tests, (size_t)g_count, sizeof g_tests[0], by_name);
    int passed = 0, failed = 0;
    for (int i = 0; i < g_count; ++i) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        g_current_failed = 0;
        clock_t t0 = clock();
        g_tests[i].fn();
        double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
        printf("%s %s (%.2fs cpu)\n", g_current_failed ? "FAIL" : "ok  ", g_tests[i].name, s);
        fflush(stdout);
        if (g_current_failed) ++failed; else ++passed;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
