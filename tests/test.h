/* test.h - a tiny test harness: TEST(name) { ... } registers itself; CHECK
 * records a failure and continues; the runner prints "N passed, N failed". */
#ifndef VCATTN_TEST_H
#define VCATTN_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...);
/* The next seed of the running test: a fixed stream per (base seed, test
 * name); the base seed is fixed, VCATTN_TEST_SEED overrides it (test_main.c). */
uint64_t test_seed(void);

#define TEST(name)                                                                     \
    static void test_##name(void);                                                     \
    __attribute__((constructor)) static void test_register_##name(void) {             \
        test_register(#name, test_##name);                                             \
    }                                                                                  \
    static void test_##name(void)

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                \
    } while (0)

#define CHECK_MSG(cond, ...)                                                           \
    do {                                                                               \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);                       \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                             \
    do {                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                            \
        if (a_ != b_) test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                          \
    do {                                                                               \
        double a_ = (double)(a), b_ = (double)(b);                                     \
        if (!(fabs(a_ - b_) <= (tol)))                                                 \
            test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_, (double)(tol)); \
    } while (0)

#define CHECK_STATUS(call, expected)                                                   \
    do {                                                                               \
        vcattn_status s_ = (call);                                                     \
        if (s_ != (expected))                                                          \
            test_fail(__FILE__, __LINE__, "%s returned %s, expected %s", #call,        \
                      vcattn_status_string(s_), vcattn_status_string(expected));       \
    } while (0)

/* splitmix64-based generator for test inputs */
typedef struct test_rng { uint64_t s; } test_rng;
static inline uint64_t test_rng_next(test_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double test_rng_uniform(test_rng *r) { return (double)(test_rng_next(r) >> 11) * 0x1.0p-53; }
static inline double test_rng_normal(test_rng *r) {
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
