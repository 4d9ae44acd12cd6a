/* xorshift.h - the dev tools' one random stream (dev/randn_budget.c,
 * dev/pgain_model.c): xorshift64 from a fixed state, uniform on (0, 1). */
#pragma once
#include <stdint.h>

static uint64_t g_state = 88172645463325252ull;

static double uniform01(void) {
    g_state ^= g_state << 13;
    g_state ^= g_state >> 7;
    g_state ^= g_state << 17;
    return ((double)(g_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
