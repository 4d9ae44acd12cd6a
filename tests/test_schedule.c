/* Tests of the denoising-step schedule and the per-layer plan. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vcattn.h"

TEST(schedule_groups_on_the_papers_steps) {
    vcattn_schedule s;
    vcattn_schedule_init(&s, 40);
    int steps[64], n = 0;
    CHECK_STATUS(vcattn_schedule_grouping_steps(&s, steps, &n), VCATTN_STATUS_SUCCESS);
    CHECK_EQ_INT(n, 3);
    CHECK(steps[0] == 0 && steps[1] == 4 && steps[2] == 8);
    vcattn_schedule_action a;
    CHECK_STATUS(vcattn_schedule_action_at(&s, 9, &a), VCATTN_STATUS_SUCCESS);
    CHECK(a == VCATTN_SCHEDULE_REUSE);
    CHECK_STATUS(vcattn_schedule_action_at(&s, 39, &a), VCATTN_STATUS_SUCCESS);
    CHECK(a == VCATTN_SCHEDULE_REUSE);
    /* 50 steps: window ceil(12.5) = 13 -> 0, 4, 8, 12 */
    vcattn_schedule_init(&s, 50);
    vcattn_schedule_grouping_steps(&s, steps, &n);
    CHECK(n == 4 && steps[3] == 12);
    /* one step: the window is that step */
    vcattn_schedule_init(&s, 1);
    vcattn_schedule_grouping_steps(&s, steps, &n);
    CHECK(n == 1 && steps[0] == 0);
    /* switches */
    vcattn_schedule_init(&s, 40);
    s.group_every_step = 1;
    vcattn_schedule_grouping_steps(&s, steps, &n);
    CHECK_EQ_INT(n, 40);
    vcattn_schedule_init(&s, 40);
    s.keep_demean_after_window = 0;
    vcattn_schedule_action_at(&s, 9, &a);
    CHECK(a == VCATTN_SCHEDULE_REUSE); /* still inside the window */
    vcattn_schedule_action_at(&s, 10, &a);
    CHECK(a == VCATTN_SCHEDULE_NO_SMOOTH);
    /* bad input */
    CHECK_STATUS(vcattn_schedule_action_at(&s, 40, &a), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(vcattn_schedule_action_at(&s, -1, &a), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(vcattn_schedule_action_at(NULL, 0, &a), VCATTN_STATUS_NULL_POINTER);
    s.refresh_every = 0;
    CHECK_STATUS(vcattn_schedule_action_at(&s, 0, &a), VCATTN_STATUS_INVALID_ARGUMENT);
    vcattn_schedule_init(&s, 0);
    CHECK_STATUS(vcattn_schedule_grouping_steps(&s, steps, &n), VCATTN_STATUS_BAD_SHAPE);
}

TEST(plan_reuses_and_warm_starts) {
    const int64_t L = 2, B = 1, H = 2, S = 512, D = 64;
    test_rng rng = {test_seed()};
    float *v = (float *)malloc(sizeof(float) * (size_t)(B * H * S * D));
    /* four well-separated clusters per head */
    for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
            for (int64_t d = 0; d < D; ++d)
                v[(h * S + s) * D + d] = (float)(10.0 * (double)((s * 7 + d) % 4 == (s % 4)) + test_rng_normal(&rng));
    const int64_t vs[3] = {H * S * D, S * D, D};
    vcattn_plan *plan = NULL;
    CHECK_STATUS(vcattn_plan_create(L, B, H, S, D, 8, &plan), VCATTN_STATUS_SUCCESS);
    const int32_t *perm = (const int32_t *)1;
    CHECK_STATUS(vcattn_plan_permutation(plan, 0, &perm), VCATTN_STATUS_SUCCESS);
    CHECK(perm == NULL); /* never planned */
    CHECK_STATUS(vcattn_plan_update(plan, 0, v, vs, 10, 3, 0), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_plan_permutation(plan, 0, &perm), VCATTN_STATUS_SUCCESS);
    CHECK(perm != NULL);
    double cold, warm;
    CHECK_STATUS(vcattn_block_energy_share(v, B, H, S, D, vs, perm, S, &cold), VCATTN_STATUS_SUCCESS);
    /* a warm-started update starts from the stored centroids: the seed no longer matters */
    vcattn_plan *twin = NULL;
    CHECK_STATUS(vcattn_plan_create(L, B, H, S, D, 8, &twin), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_plan_update(twin, 0, v, vs, 10, 3, 0), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_plan_update(plan, 0, v, vs, 1, 99, 0), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_plan_update(twin, 0, v, vs, 1, 12345, 0), VCATTN_STATUS_SUCCESS);
    const int32_t *p1 = NULL, *p2 = NULL;
    vcattn_plan_permutation(plan, 0, &p1);
    vcattn_plan_permutation(twin, 0, &p2);
    CHECK(p1 && p2 && memcmp(p1, p2, sizeof(int32_t) * (size_t)(B * H * S)) == 0);
    double seq;
    CHECK_STATUS(vcattn_block_energy_share(v, B, H, S, D, vs, NULL, 0, &seq), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_block_energy_share(v, B, H, S, D, vs, p1, S, &warm), VCATTN_STATUS_SUCCESS);
    CHECK_MSG(cold > seq && warm > seq, "clustered %g / warm %g vs sequence %g", cold, warm, seq);
    vcattn_plan_destroy(twin);
    /* layer 1 is independent: nothing until grouped, then its own V's plan (the same
     * permutation vcattn_vsmooth_plan gives), while layer 0 keeps its own */
    CHECK_STATUS(vcattn_plan_permutation(plan, 1, &perm), VCATTN_STATUS_SUCCESS);
    CHECK(perm == NULL);
    float *v1 = (float *)malloc(sizeof(float) * (size_t)(B * H * S * D));
    for (int64_t i = 0; i < B * H * S * D; ++i) v1[i] = (float)test_rng_normal(&rng) + (float)(i / D % 3);
    int32_t *want1 = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B * H * S));
    int32_t *keep0 = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B * H * S));
    memcpy(keep0, p1, sizeof(int32_t) * (size_t)(B * H * S));
    vcattn_kmeans_params km;
    vcattn_kmeans_params_init(&km);
    km.clusters = 8;
    km.iterations = 4;
    km.seed = 21;
    CHECK_STATUS(vcattn_vsmooth_plan(v1, B, H, S, D, vs, &km, want1, NULL, NULL), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_plan_update(plan, 1, v1, vs, 4, 21, 0), VCATTN_STATUS_SUCCESS);
    const int32_t *l0 = NULL, *l1 = NULL;
    CHECK_STATUS(vcattn_plan_permutation(plan, 0, &l0), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_plan_permutation(plan, 1, &l1), VCATTN_STATUS_SUCCESS);
    CHECK(l0 && l1 && l0 != l1);
    CHECK(l1 && memcmp(l1, want1, sizeof(int32_t) * (size_t)(B * H * S)) == 0);
    CHECK(l0 && memcmp(l0, keep0, sizeof(int32_t) * (size_t)(B * H * S)) == 0);
    CHECK(l0 && l1 && memcmp(l0, l1, sizeof(int32_t) * (size_t)(B * H * S)) != 0);
    free(v1);
    free(want1);
    free(keep0);
    size_t bytes = 0;
    CHECK_STATUS(vcattn_plan_memory_bytes(plan, &bytes), VCATTN_STATUS_SUCCESS);
    CHECK(bytes >= (size_t)(L * B * H * S * 4 + L * B * H * 8 * D * 4));
    CHECK_STATUS(vcattn_plan_update(plan, 2, v, vs, 1, 0, 0), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(vcattn_plan_update(plan, 0, NULL, vs, 1, 0, 0), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_plan_update(plan, 0, v, vs, 0, 0, 0), VCATTN_STATUS_INVALID_ARGUMENT);
    vcattn_plan_destroy(plan);
    vcattn_plan_destroy(NULL);
    vcattn_plan *bad = NULL;
    CHECK_STATUS(vcattn_plan_create(1, 1, 1, 0, 64, 8, &bad), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_plan_create(1, 1, 1, 8, 64, 0, &bad), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(vcattn_plan_create(INT64_MAX / 4, 1 << 20, 1, 8, 64, 8, &bad), VCATTN_STATUS_SIZE_OVERFLOW);
    CHECK(bad == NULL);
    free(v);
}
