/* test_vsmooth_plan.c - the V-Smooth planner (k-means permutation), the
 * static cube order and the block-energy share, on fresh random inputs. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vcattn.h"

/* ---- helpers ---------------------------------------------------------------- */

static float *alloc_f(int64_t n) { return (float *)malloc(sizeof(float) * (size_t)n); }
static int32_t *alloc_i(int64_t n) { return (int32_t *)malloc(sizeof(int32_t) * (size_t)n); }

static void fill_normal(float *x, int64_t n, test_rng *r, double scale, double offset) {
    for (int64_t i = 0; i < n; ++i) x[i] = (float)(offset + scale * test_rng_normal(r));
}

static void contiguous_strides(int64_t h, int64_t s, int64_t d, int64_t st[3]) {
    st[0] = h * s * d;
    st[1] = s * d;
    st[2] = d;
}

static int is_permutation(const int32_t *p, int64_t n) {
    char *seen = (char *)calloc((size_t)n, 1);
    int ok = 1;
    for (int64_t i = 0; i < n && ok; ++i) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]]) ok = 0;
        else seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void random_permutation(int32_t *p, int64_t n, test_rng *r) {
    for (int64_t i = 0; i < n; ++i) p[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; --i) {
        int64_t j = (int64_t)(test_rng_next(r) % (uint64_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

/* S tokens of a (B=1,H=1)-slice drawn from `c` well-separated Gaussian
 * clusters of equal size, in shuffled order; truth[s] = cluster of token s. */
static void make_clusters(float *v, int32_t *truth, int64_t s_n, int64_t d_n, int c,
                          double centre_std, double noise_std, test_rng *r) {
    float *centre = alloc_f(c * d_n);
    fill_normal(centre, c * d_n, r, centre_std, 0.0);
    int32_t *order = alloc_i(s_n);
    random_permutation(order, s_n, r);
    for (int64_t s = 0; s < s_n; ++s) {
        int32_t j = (int32_t)(order[s] % c);
        truth[s] = j;
        for (int64_t d = 0; d < d_n; ++d)
            v[s * d_n + d] = centre[j * d_n + d] + (float)(noise_std * test_rng_normal(r));
    }
    free(order);
    free(centre);
}

static double sqdist(const float *a, const float *b, int64_t d_n) {
    double acc = 0.0;
    for (int64_t d = 0; d < d_n; ++d) acc += ((double)a[d] - b[d]) * ((double)a[d] - b[d]);
    return acc;
}

/* k-means objective of one (b, h): sum |v - c_label|^2 in double */
static double inertia(const float *v, const int64_t st[3], int64_t s_n, int64_t d_n,
                      const int32_t *labels, const float *cen) {
    double j = 0.0;
    for (int64_t s = 0; s < s_n; ++s) j += sqdist(v + s * st[2], cen + labels[s] * d_n, d_n);
    return j;
}

/* ---- the planner ---------------------------------------------------------------- */

TEST(vsmooth_plan_perm_groups_nearest_centroid_labels) {
    /* odd sizes hit every tail of the tiling: S % 4, k % 8, D odd; a
     * (B, S, H, D) layout and a large channel offset exercise the strides
     * and the centring */
    const int64_t B = 2, H = 3, S = 1003, D = 37, k = 13;
    test_rng r = {test_seed()};
    float *v = alloc_f(B * S * H * D);
    fill_normal(v, B * S * H * D, &r, 1.0, 0.0);
    for (int64_t i = 0; i < B * S * H * D; ++i) v[i] += (float)(20.0 * ((i % D) % 3) - 15.0);
    const int64_t st[3] = {S * H * D, D, H * D};
    int32_t *perm = alloc_i(B * H * S), *labels = alloc_i(B * H * S);
    float *cen = alloc_f(B * H * k * D);
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    CHECK_EQ_INT(p.clusters, 64);
    CHECK_EQ_INT(p.iterations, 8);
    CHECK(p.seed == 0 && p.init_centroids == NULL && p.num_threads == 0);
    p.clusters = (int)k;
    p.iterations = 4;
    p.seed = test_rng_next(&r);
    CHECK_STATUS(vcattn_vsmooth_plan(v, B, H, S, D, st, &p, perm, labels, cen),
                 VCATTN_STATUS_SUCCESS);
    int bad_perm = 0, bad_order = 0, bad_label = 0, not_nearest = 0;
    for (int64_t bh = 0; bh < B * H; ++bh) {
        const int32_t *pp = perm + bh * S, *ll = labels + bh * S;
        const float *cc = cen + bh * k * D;
        const float *vb = v + (bh / H) * st[0] + (bh % H) * st[1];
        if (!is_permutation(pp, S)) { ++bad_perm; continue; }
        for (int64_t i = 0; i < S; ++i) {
            if (ll[i] < 0 || ll[i] >= k) ++bad_label;
            if (i == 0) continue;
            int32_t l0 = ll[pp[i - 1]], l1 = ll[pp[i]];
            /* clusters contiguous, ascending; original order inside a cluster */
            if (l1 < l0 || (l1 == l0 && pp[i] < pp[i - 1])) ++bad_order;
        }
        for (int64_t s = 0; s < S; ++s) {
            const float *row = vb + s * st[2];
            double own = sqdist(row, cc + ll[s] * D, D), best = own;
            for (int64_t j = 0; j < k; ++j) {
                double dj = sqdist(row, cc + j * D, D);
                if (dj < best) best = dj;
            }
            /* float distances: allow a near-tie to go either way */
            if (own > best + 1e-4 * (best + 1.0)) ++not_nearest;
        }
    }
    CHECK_EQ_INT(bad_perm, 0);
    CHECK_EQ_INT(bad_order, 0);
    CHECK_EQ_INT(bad_label, 0);
    CHECK_EQ_INT(not_nearest, 0);
    free(v);
    free(perm);
    free(labels);
    free(cen);
}

TEST(vsmooth_plan_deterministic_across_threads_and_heads) {
    const int64_t B = 2, H = 3, S = 700, D = 16, k = 10;
    test_rng r = {test_seed()};
    float *v = alloc_f(B * H * S * D);
    fill_normal(v, B * H * S * D, &r, 1.0, 0.5);
    int64_t st[3];
    contiguous_strides(H, S, D, st);
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    p.clusters = (int)k;
    p.iterations = 6;
    p.seed = test_rng_next(&r);
    int32_t *perm0 = alloc_i(B * H * S), *lab0 = alloc_i(B * H * S);
    int32_t *perm1 = alloc_i(B * H * S), *lab1 = alloc_i(B * H * S);
    float *cen0 = alloc_f(B * H * k * D), *cen1 = alloc_f(B * H * k * D);
    p.num_threads = 1;
    CHECK_STATUS(vcattn_vsmooth_plan(v, B, H, S, D, st, &p, perm0, lab0, cen0), VCATTN_STATUS_SUCCESS);
    const int threads[] = {1, 2, 5, 0};
    for (int i = 0; i < 4; ++i) {
        p.num_threads = threads[i];
        memset(perm1, 0, sizeof(int32_t) * (size_t)(B * H * S));
        CHECK_STATUS(vcattn_vsmooth_plan(v, B, H, S, D, st, &p, perm1, lab1, cen1),
                     VCATTN_STATUS_SUCCESS);
        CHECK_MSG(!memcmp(perm0, perm1, sizeof(int32_t) * (size_t)(B * H * S)),
                  "perm differs with %d threads", threads[i]);
        CHECK(!memcmp(lab0, lab1, sizeof(int32_t) * (size_t)(B * H * S)));
        CHECK(!memcmp(cen0, cen1, sizeof(float) * (size_t)(B * H * k * D)));
    }
    /* optional outputs do not change the plan */
    CHECK_STATUS(vcattn_vsmooth_plan(v, B, H, S, D, st, &p, perm1, NULL, NULL), VCATTN_STATUS_SUCCESS);
    CHECK(!memcmp(perm0, perm1, sizeof(int32_t) * (size_t)(B * H * S)));

    /* warm start: each (b, h) uses its own slice of init_centroids and of v,
     * so planning one head alone gives the same answer */
    float *init = alloc_f(B * H * k * D);
    fill_normal(init, B * H * k * D, &r, 1.0, 0.5);
    p.init_centroids = init;
    p.num_threads = 0;
    CHECK_STATUS(vcattn_vsmooth_plan(v, B, H, S, D, st, &p, perm0, lab0, NULL), VCATTN_STATUS_SUCCESS);
    int mismatched_heads = 0;
    for (int64_t bh = 0; bh < B * H; ++bh) {
        p.init_centroids = init + bh * k * D;
        CHECK_STATUS(vcattn_vsmooth_plan(v + bh * S * D, 1, 1, S, D, st, &p, perm1, lab1, NULL),
                     VCATTN_STATUS_SUCCESS);
        if (memcmp(perm0 + bh * S, perm1, sizeof(int32_t) * (size_t)S) ||
            memcmp(lab0 + bh * S, lab1, sizeof(int32_t) * (size_t)S))
            ++mismatched_heads;
    }
    CHECK_EQ_INT(mismatched_heads, 0);
    free(init);
    free(v);
    free(perm0);
    free(perm1);
    free(lab0);
    free(lab1);
    free(cen0);
    free(cen1);
}

/* A head planned alone through vcattn_vsmooth_plan_heads (random init, its
 * own seed stream) gets the plan it gets in the whole-tensor call; through
 * vcattn_vsmooth_plan as head 0 of a one-head view it would not. */
TEST(vsmooth_plan_heads_matches_whole_tensor) {
    const int64_t B = 2, H = 3, S = 500, D = 16, k = 8;
    test_rng r = {test_seed()};
    float *v = alloc_f(B * H * S * D);
    fill_normal(v, B * H * S * D, &r, 1.0, 0.5);
    int64_t st[3];
    contiguous_strides(H, S, D, st);
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    p.clusters = (int)k;
    p.iterations = 3;
    p.seed = test_rng_next(&r);
    int32_t *perm = alloc_i(B * H * S), *one = alloc_i(B * S), *lab = alloc_i(B * H * S), *lab1 = alloc_i(B * S);
    CHECK_STATUS(vcattn_vsmooth_plan(v, B, H, S, D, st, &p, perm, lab, NULL), VCATTN_STATUS_SUCCESS);
    int mismatches = 0, differs_as_head0 = 0;
    for (int64_t h = 0; h < H; ++h) {
        /* head h of both batch items: a (B, 1, S, D) view */
        CHECK_STATUS(vcattn_vsmooth_plan_heads(v + h * S * D, B, 1, h, S, D, st, &p, one, lab1, NULL),
                     VCATTN_STATUS_SUCCESS);
        for (int64_t b = 0; b < B; ++b)
            mismatches += memcmp(one + b * S, perm + (b * H + h) * S, sizeof(int32_t) * (size_t)S) != 0 ||
                          memcmp(lab1 + b * S, lab + (b * H + h) * S, sizeof(int32_t) * (size_t)S) != 0;
        CHECK_STATUS(vcattn_vsmooth_plan(v + h * S * D, B, 1, S, D, st, &p, one, lab1, NULL), VCATTN_STATUS_SUCCESS);
        if (h > 0) differs_as_head0 += memcmp(lab1, lab + h * S, sizeof(int32_t) * (size_t)S) != 0;
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK_MSG(differs_as_head0 > 0, "the seed stream should depend on the head index");
    CHECK_STATUS(vcattn_vsmooth_plan_heads(v, B, 1, -1, S, D, st, &p, one, NULL, NULL), VCATTN_STATUS_INVALID_ARGUMENT);
    free(v); free(perm); free(one); free(lab); free(lab1);
}

TEST(vsmooth_plan_lloyd_objective_never_increases) {
    /* Lloyd's two steps each lower sum |v - c_label|^2; the planner returns
     * (labels of the final assignment, centroids they were assigned to), so
     * the objective of its outputs is non-increasing in `iterations` */
    const int64_t S = 600, D = 8, k = 12;
    test_rng r = {test_seed()};
    float *v = alloc_f(S * D);
    fill_normal(v, S * D, &r, 1.0, 0.0);
    int64_t st[3];
    contiguous_strides(1, S, D, st);
    int32_t *perm = alloc_i(S), *lab = alloc_i(S);
    float *cen = alloc_f(k * D);
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    p.clusters = (int)k;
    p.seed = test_rng_next(&r);
    double prev = INFINITY, first = 0.0;
    int increases = 0;
    for (int it = 1; it <= 10; ++it) {
        p.iterations = it;
        CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm, lab, cen), VCATTN_STATUS_SUCCESS);
        double j = inertia(v, st, S, D, lab, cen);
        if (it == 1) first = j;
        if (j > prev * (1.0 + 1e-6)) ++increases;
        prev = j;
    }
    CHECK_EQ_INT(increases, 0);
    CHECK(prev < first); /* and it does improve on Gaussian data */
    free(v);
    free(perm);
    free(lab);
    free(cen);
}

TEST(vsmooth_plan_recovers_separated_clusters) {
    /* 8 clusters of 128 tokens, centres ~ N(0, 3^2), noise N(0, 1): every
     * token is far nearer its own centre than any other */
    const int64_t H = 2, S = 1024, D = 64;
    const int C = 8;
    test_rng r = {test_seed()};
    float *v = alloc_f(H * S * D);
    int32_t *truth = alloc_i(H * S);
    for (int64_t h = 0; h < H; ++h)
        make_clusters(v + h * S * D, truth + h * S, S, D, C, 3.0, 1.0, &r);
    int64_t st[3];
    contiguous_strides(H, S, D, st);

    /* Lloyd from one token of each true cluster (cluster order) must find
     * the partition exactly, label = true cluster */
    float *init = alloc_f(H * C * D);
    for (int64_t h = 0; h < H; ++h)
        for (int j = 0; j < C; ++j) {
            int64_t s = (int64_t)(test_rng_next(&r) % (uint64_t)S);
            while (truth[h * S + s] != j) s = (s + 1) % S;
            memcpy(init + (h * C + j) * D, v + (h * S + s) * D, sizeof(float) * (size_t)D);
        }
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    p.clusters = C;
    p.init_centroids = init;
    int32_t *perm = alloc_i(H * S), *lab = alloc_i(H * S);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, H, S, D, st, &p, perm, lab, NULL), VCATTN_STATUS_SUCCESS);
    CHECK(!memcmp(lab, truth, sizeof(int32_t) * (size_t)(H * S)));

    /* clusters of 128 land exactly on the 128-token blocks: the block mean
     * removes most of the energy; in the shuffled sequence order it removes
     * only the part of the mean of all centres */
    double clustered = 0.0, shuffled = 1.0;
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, perm, S, &clustered), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, NULL, 0, &shuffled), VCATTN_STATUS_SUCCESS);
    if (getenv("VCATTN_TEST_MEASURE")) printf("    M clustered %.4f shuffled %.4f\n", clustered, shuffled);
    /* measured (default seed, seeds 1-60): clustered 0.889-0.906, shuffled <= 0.155
     * (8 centres ~ N(0, 9) against noise 1: 1/128 plus the centres' common part) */
    CHECK_MSG(clustered > 0.8, "clustered share %.3f", clustered);
    CHECK_MSG(shuffled < 0.2, "shuffled share %.3f", shuffled);

    /* Random init (k distinct tokens): with 48 draws over 4 clusters every
     * true cluster gets a centroid (miss probability ~4e-6), and then Lloyd
     * can never mix clusters: every k-means cluster lies inside one true one.
     * (With k = C a random init usually puts two centroids in one cluster
     * and none in another, and Lloyd cannot undo that.) */
    int32_t *truth4 = alloc_i(S);
    make_clusters(v, truth4, S, D, 4, 3.0, 1.0, &r);
    p.init_centroids = NULL;
    p.clusters = 48;
    p.seed = test_rng_next(&r);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm, lab, NULL), VCATTN_STATUS_SUCCESS);
    int32_t owner[48];
    for (int j = 0; j < 48; ++j) owner[j] = -1;
    int impure = 0;
    for (int64_t s = 0; s < S; ++s) {
        int32_t j = lab[s];
        if (owner[j] < 0) owner[j] = truth4[s];
        else if (owner[j] != truth4[s]) ++impure;
    }
    CHECK_EQ_INT(impure, 0);
    free(truth4);
    free(v);
    free(truth);
    free(init);
    free(perm);
    free(lab);
}

TEST(vsmooth_plan_warm_start_from_converged_centroids) {
    const int64_t S = 1500, D = 16;
    const int k = 6;
    test_rng r = {test_seed()};
    float *v = alloc_f(S * D);
    int32_t *truth = alloc_i(S);
    make_clusters(v, truth, S, D, k, 2.0, 1.0, &r);
    int64_t st[3];
    contiguous_strides(1, S, D, st);
    int32_t *perm0 = alloc_i(S), *lab0 = alloc_i(S), *perm1 = alloc_i(S), *lab1 = alloc_i(S);
    float *cen0 = alloc_f(k * D), *cen1 = alloc_f(k * D);
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    p.clusters = k;
    p.iterations = 300; /* Lloyd reaches a fixed point long before */
    p.seed = test_rng_next(&r);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm0, lab0, cen0), VCATTN_STATUS_SUCCESS);

    /* converged: every non-empty centroid is the mean of its tokens */
    double worst = 0.0;
    for (int j = 0; j < k; ++j) {
        double mean[16] = {0};
        int64_t n = 0;
        for (int64_t s = 0; s < S; ++s)
            if (lab0[s] == j) {
                ++n;
                for (int64_t d = 0; d < D; ++d) mean[d] += v[s * D + d];
            }
        for (int64_t d = 0; n > 0 && d < D; ++d) {
            double e = fabs(mean[d] / (double)n - cen0[j * D + d]);
            if (e > worst) worst = e;
        }
    }
    CHECK_NEAR(worst, 0.0, 1e-5);

    /* one more round from those centroids changes nothing */
    p.iterations = 1;
    p.init_centroids = cen0;
    p.seed = test_rng_next(&r); /* unused with a warm start */
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm1, lab1, cen1), VCATTN_STATUS_SUCCESS);
    CHECK(!memcmp(lab0, lab1, sizeof(int32_t) * (size_t)S));
    CHECK(!memcmp(perm0, perm1, sizeof(int32_t) * (size_t)S));
    double cdiff = 0.0;
    for (int64_t i = 0; i < k * D; ++i) cdiff = fmax(cdiff, fabs((double)cen0[i] - cen1[i]));
    CHECK_NEAR(cdiff, 0.0, 1e-5);

    /* an extra centroid far from every token stays empty and keeps its place */
    float *cen7 = alloc_f((k + 1) * D), *out7 = alloc_f((k + 1) * D);
    memcpy(cen7, cen0, sizeof(float) * (size_t)(k * D));
    for (int64_t d = 0; d < D; ++d) cen7[k * D + d] = (float)(1000.0 + test_rng_normal(&r));
    p.clusters = k + 1;
    p.iterations = 3;
    p.init_centroids = cen7;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm1, lab1, out7), VCATTN_STATUS_SUCCESS);
    CHECK(!memcmp(lab0, lab1, sizeof(int32_t) * (size_t)S));
    double far_moved = 0.0;
    for (int64_t d = 0; d < D; ++d) far_moved = fmax(far_moved, fabs((double)out7[k * D + d] - cen7[k * D + d]));
    CHECK_NEAR(far_moved, 0.0, 1e-3);
    free(cen7);
    free(out7);
    free(v);
    free(truth);
    free(perm0);
    free(perm1);
    free(lab0);
    free(lab1);
    free(cen0);
    free(cen1);
}

TEST(vsmooth_plan_fewer_tokens_than_clusters) {
    /* S < k: each token becomes its own cluster; the rows past S repeat */
    const int64_t S = 10, D = 12;
    const int k = 64;
    test_rng r = {test_seed()};
    float *v = alloc_f(S * D);
    fill_normal(v, S * D, &r, 1.0, 0.0);
    int64_t st[3];
    contiguous_strides(1, S, D, st);
    int32_t perm[10], lab[10];
    float *cen = alloc_f(k * D);
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    p.seed = test_rng_next(&r);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm, lab, cen), VCATTN_STATUS_SUCCESS);
    CHECK(is_permutation(perm, S));
    CHECK(is_permutation(lab, S));
    double err = 0.0;
    for (int64_t s = 0; s < S; ++s) err = fmax(err, sqdist(v + s * D, cen + lab[s] * D, D));
    CHECK_NEAR(err, 0.0, 1e-10);
    int copies_ok = 1;
    for (int j = (int)S; j < k; ++j)
        if (memcmp(cen + j * D, cen + (j % S) * D, sizeof(float) * (size_t)D)) copies_ok = 0;
    CHECK(copies_ok);
    free(v);
    free(cen);
}

TEST(vsmooth_plan_rejects_bad_input) {
    const int64_t S = 64, D = 8;
    test_rng r = {test_seed()};
    float v[64 * 8], init[4 * 8];
    fill_normal(v, S * D, &r, 1.0, 0.0);
    fill_normal(init, 4 * D, &r, 1.0, 0.0);
    int64_t st[3];
    contiguous_strides(1, S, D, st);
    int32_t perm[64], lab[64];
    float cen[4 * 8];
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    p.clusters = 4;
    const vcattn_status ok = VCATTN_STATUS_SUCCESS;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm, lab, cen), ok);

    CHECK_STATUS(vcattn_vsmooth_plan(NULL, 1, 1, S, D, st, &p, perm, lab, cen), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, NULL, &p, perm, lab, cen), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, NULL, perm, lab, cen), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, NULL, lab, cen), VCATTN_STATUS_NULL_POINTER);

    CHECK_STATUS(vcattn_vsmooth_plan(v, 0, 1, S, D, st, &p, perm, lab, cen), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, -1, S, D, st, &p, perm, lab, cen), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, 0, D, st, &p, perm, lab, cen), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, 0, st, &p, perm, lab, cen), VCATTN_STATUS_BAD_SHAPE);

    vcattn_kmeans_params q = p;
    q.clusters = 0;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &q, perm, lab, cen), VCATTN_STATUS_INVALID_ARGUMENT);
    q = p;
    q.iterations = 0;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &q, perm, lab, cen), VCATTN_STATUS_INVALID_ARGUMENT);
    q = p;
    q.num_threads = -1;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &q, perm, lab, cen), VCATTN_STATUS_INVALID_ARGUMENT);

    /* sizes are checked before any data is read */
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, (int64_t)INT32_MAX + 1, 1, st, &p, perm, lab, NULL),
                 VCATTN_STATUS_SIZE_OVERFLOW);
    CHECK_STATUS(vcattn_vsmooth_plan(v, INT64_MAX / 2, 4, S, D, st, &p, perm, lab, NULL),
                 VCATTN_STATUS_SIZE_OVERFLOW);
    q = p;
    q.clusters = INT32_MAX;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, 1, (int64_t)1 << 40, st, &q, perm, lab, cen),
                 VCATTN_STATUS_SIZE_OVERFLOW);

    int64_t bad[3] = {S * D, S * D, D - 1}; /* rows overlap */
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, bad, &p, perm, lab, cen), VCATTN_STATUS_BAD_STRIDE);
    int64_t neg[3] = {S * D, S * D, -D};
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, neg, &p, perm, lab, cen), VCATTN_STATUS_BAD_STRIDE);

    for (int i = 0; i < 64; ++i) perm[i] = -7;
    float keep = v[5 * D + 3];
    v[5 * D + 3] = NAN;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm, lab, cen), VCATTN_STATUS_NON_FINITE);
    v[5 * D + 3] = -INFINITY;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm, lab, cen), VCATTN_STATUS_NON_FINITE);
    v[5 * D + 3] = keep;
    CHECK_EQ_INT(perm[0], -7); /* failed calls write nothing */

    q = p;
    init[7] = NAN;
    q.init_centroids = init;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &q, perm, lab, cen), VCATTN_STATUS_NON_FINITE);
    init[7] = 0.25f;
    CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &q, perm, lab, cen), ok);
    CHECK(is_permutation(perm, S));
}

/* ---- block-energy share ------------------------------------------------------------ */

TEST(block_energy_share_matches_hand_computation) {
    const int64_t H = 2, S = 2 * 128 + 37, D = 5; /* the 37-token tail block is not counted */
    test_rng r = {test_seed()};
    float *v = alloc_f(H * S * D);
    fill_normal(v, H * S * D, &r, 1.0, 0.7);
    int64_t st[3];
    contiguous_strides(H, S, D, st);
    int32_t *perm = alloc_i(H * S);
    for (int64_t h = 0; h < H; ++h) random_permutation(perm + h * S, S, &r);

    double want = 0.0;
    for (int64_t h = 0; h < H; ++h)
        for (int64_t blk = 0; blk < 2; ++blk) {
            double mu[5] = {0}, energy = 0.0, mu2 = 0.0;
            for (int64_t i = 0; i < 128; ++i) {
                const float *row = v + (h * S + perm[h * S + blk * 128 + i]) * D;
                for (int64_t d = 0; d < D; ++d) {
                    mu[d] += row[d] / 128.0;
                    energy += (double)row[d] * row[d];
                }
            }
            for (int64_t d = 0; d < D; ++d) mu2 += mu[d] * mu[d];
            want += 128.0 * mu2 / energy / 4.0;
        }
    double got = -1.0;
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, perm, S, &got), VCATTN_STATUS_SUCCESS);
    CHECK_NEAR(got, want, 1e-12);

    /* the same data in a (B, S, H, D) layout */
    float *vt = alloc_f(H * S * D);
    for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
            memcpy(vt + (s * H + h) * D, v + (h * S + s) * D, sizeof(float) * (size_t)D);
    const int64_t stt[3] = {S * H * D, D, H * D};
    double got_t = -1.0;
    CHECK_STATUS(vcattn_block_energy_share(vt, 1, H, S, D, stt, perm, S, &got_t), VCATTN_STATUS_SUCCESS);
    CHECK_NEAR(got_t, got, 1e-12);

    /* identity perm, shared (stride 0) or per head, equals perm = NULL */
    int32_t *ident = alloc_i(H * S);
    for (int64_t i = 0; i < H * S; ++i) ident[i] = (int32_t)(i % S);
    double s_null = -1.0, s_id0 = -2.0, s_idS = -3.0;
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, NULL, 0, &s_null), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, ident, 0, &s_id0), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, ident, S, &s_idS), VCATTN_STATUS_SUCCESS);
    CHECK(s_null == s_id0 && s_null == s_idS);

    /* a shared perm (stride 0) equals the same perm repeated per head */
    memcpy(ident + S, perm, sizeof(int32_t) * (size_t)S);
    memcpy(ident, perm, sizeof(int32_t) * (size_t)S);
    double s_shared = -1.0, s_rep = -2.0;
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, perm, 0, &s_shared), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, ident, S, &s_rep), VCATTN_STATUS_SUCCESS);
    CHECK(s_shared == s_rep);

    /* a block with no energy is skipped, not counted as 0 */
    double three = 0.0;
    for (int64_t h = 0; h < H; ++h)
        for (int64_t blk = 0; blk < 2; ++blk) {
            if (h == 1 && blk == 0) continue;
            double mu[5] = {0}, energy = 0.0, mu2 = 0.0;
            for (int64_t i = 0; i < 128; ++i) {
                const float *row = v + (h * S + blk * 128 + i) * D;
                for (int64_t d = 0; d < D; ++d) {
                    mu[d] += row[d] / 128.0;
                    energy += (double)row[d] * row[d];
                }
            }
            for (int64_t d = 0; d < D; ++d) mu2 += mu[d] * mu[d];
            three += 128.0 * mu2 / energy / 3.0;
        }
    memset(v + S * D, 0, sizeof(float) * 128 * (size_t)D);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, H, S, D, st, NULL, 0, &got), VCATTN_STATUS_SUCCESS);
    CHECK_NEAR(got, three, 1e-12);
    free(v);
    free(vt);
    free(perm);
    free(ident);
}

TEST(block_energy_share_rejects_bad_input) {
    const int64_t S = 130, D = 4;
    test_rng r = {test_seed()};
    float v[130 * 4];
    fill_normal(v, S * D, &r, 1.0, 0.0);
    int64_t st[3];
    contiguous_strides(1, S, D, st);
    int32_t perm[130];
    random_permutation(perm, S, &r);
    double share = 42.0;
    CHECK_STATUS(vcattn_block_energy_share(NULL, 1, 1, S, D, st, perm, S, &share), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, NULL, perm, S, &share), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, perm, S, NULL), VCATTN_STATUS_NULL_POINTER);
    CHECK_STATUS(vcattn_block_energy_share(v, 0, 1, S, D, st, perm, S, &share), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, -2, st, perm, S, &share), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, 127, D, st, NULL, 0, &share), VCATTN_STATUS_BAD_SHAPE);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, perm, 1, &share), VCATTN_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, perm, S + 1, &share), VCATTN_STATUS_INVALID_ARGUMENT);
    int64_t bad[3] = {S * D, S * D, 2}; /* rows overlap */
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, bad, perm, S, &share), VCATTN_STATUS_BAD_STRIDE);

    int32_t keep = perm[17];
    perm[17] = perm[90]; /* a duplicate */
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, perm, S, &share), VCATTN_STATUS_INVALID_ARGUMENT);
    perm[17] = -1;
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, perm, S, &share), VCATTN_STATUS_INVALID_ARGUMENT);
    perm[17] = (int32_t)S;
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, perm, 0, &share), VCATTN_STATUS_INVALID_ARGUMENT);
    perm[17] = keep;

    v[129 * D + 1] = NAN; /* even outside the counted block: the input is bad */
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, perm, S, &share), VCATTN_STATUS_NON_FINITE);
    CHECK(share == 42.0); /* untouched by failed calls */
    v[129 * D + 1] = 0.5f;
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, perm, S, &share), VCATTN_STATUS_SUCCESS);
    /* one full block: the first 128 permuted tokens */
    double mu[4] = {0}, energy = 0.0, mu2 = 0.0;
    for (int64_t i = 0; i < 128; ++i)
        for (int64_t d = 0; d < D; ++d) {
            double x = v[perm[i] * D + d];
            mu[d] += x / 128.0;
            energy += x * x;
        }
    for (int64_t d = 0; d < D; ++d) mu2 += mu[d] * mu[d];
    CHECK_NEAR(share, 128.0 * mu2 / energy, 1e-12);
}

/* ---- static cube order ---------------------------------------------------------------- */

TEST(cube_permutation_lists_cubes_in_raster_order) {
    test_rng r = {test_seed()};
    for (int trial = 0; trial < 20; ++trial) {
        const int64_t T = 1 + (int64_t)(test_rng_next(&r) % 5), Hh = 1 + (int64_t)(test_rng_next(&r) % 9),
                      W = 1 + (int64_t)(test_rng_next(&r) % 11);
        const int64_t ct = 1 + (int64_t)(test_rng_next(&r) % 4), ch = 1 + (int64_t)(test_rng_next(&r) % 5),
                      cw = 1 + (int64_t)(test_rng_next(&r) % 6);
        const int64_t n = T * Hh * W;
        int32_t *perm = alloc_i(n);
        CHECK_STATUS(vcattn_cube_permutation(T, Hh, W, ct, ch, cw, perm), VCATTN_STATUS_SUCCESS);
        CHECK(is_permutation(perm, n));
        /* sorted by (cube t, cube y, cube x, t, y, x) */
        int unsorted = 0;
        for (int64_t i = 1; i < n; ++i) {
            int64_t key[2][6];
            for (int a = 0; a < 2; ++a) {
                int64_t s = perm[i - 1 + a], x = s % W, y = (s / W) % Hh, t = s / (W * Hh);
                int64_t k6[6] = {t / ct, y / ch, x / cw, t, y, x};
                memcpy(key[a], k6, sizeof k6);
            }
            int cmp = 0;
            for (int e = 0; e < 6 && !cmp; ++e) cmp = (key[0][e] > key[1][e]) - (key[0][e] < key[1][e]);
            if (cmp >= 0) ++unsorted;
        }
        CHECK_EQ_INT(unsorted, 0);
        free(perm);
    }
    /* cubes of one token, or as big as the grid: sequence order */
    int32_t p[60];
    CHECK_STATUS(vcattn_cube_permutation(3, 4, 5, 1, 1, 1, p), VCATTN_STATUS_SUCCESS);
    int ident = 1;
    for (int i = 0; i < 60; ++i) ident &= p[i] == i;
    CHECK_STATUS(vcattn_cube_permutation(3, 4, 5, 9, 4, 100, p), VCATTN_STATUS_SUCCESS);
    for (int i = 0; i < 60; ++i) ident &= p[i] == i;
    CHECK(ident);
}

TEST(cube_permutation_groups_smooth_video) {
    /* V varies smoothly over (t, y, x): a few low-frequency waves per channel
     * plus a little noise.  2 x 8 x 8 cubes are 128-token blocks of near
     * neighbours, so their mean removes much of the energy; a shuffled order
     * mixes the whole clip and removes almost none. */
    enum { D = 32 };
    const int64_t T = 4, Hh = 16, W = 16, S = T * Hh * W;
    test_rng r = {test_seed()};
    float *v = alloc_f(S * D);
    double f[D][3][4];
    for (int64_t d = 0; d < D; ++d)
        for (int w = 0; w < 3; ++w) {
            for (int a = 0; a < 3; ++a) f[d][w][a] = 0.5 * (2.0 * test_rng_uniform(&r) - 1.0);
            f[d][w][3] = 6.283185307179586 * test_rng_uniform(&r);
        }
    for (int64_t t = 0; t < T; ++t)
        for (int64_t y = 0; y < Hh; ++y)
            for (int64_t x = 0; x < W; ++x)
                for (int64_t d = 0; d < D; ++d) {
                    double val = 0.05 * test_rng_normal(&r);
                    for (int w = 0; w < 3; ++w)
                        val += cos(6.283185307179586 * (f[d][w][0] * t / T + f[d][w][1] * y / Hh +
                                                        f[d][w][2] * x / W) + f[d][w][3]);
                    v[((t * Hh + y) * W + x) * D + d] = (float)val;
                }
    /* zero clip mean per channel: what is left is purely local structure */
    for (int64_t d = 0; d < D; ++d) {
        double m = 0.0;
        for (int64_t s = 0; s < S; ++s) m += v[s * D + d];
        for (int64_t s = 0; s < S; ++s) v[s * D + d] -= (float)(m / (double)S);
    }
    int64_t st[3];
    contiguous_strides(1, S, D, st);
    int32_t *cube = alloc_i(S), *shuf = alloc_i(S);
    CHECK_STATUS(vcattn_cube_permutation(T, Hh, W, 2, 8, 8, cube), VCATTN_STATUS_SUCCESS);
    CHECK(is_permutation(cube, S));
    random_permutation(shuf, S, &r);
    double s_cube = 0.0, s_shuf = 1.0;
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, cube, S, &s_cube), VCATTN_STATUS_SUCCESS);
    CHECK_STATUS(vcattn_block_energy_share(v, 1, 1, S, D, st, shuf, S, &s_shuf), VCATTN_STATUS_SUCCESS);
    /* measured over 300 seeds: cube >= 0.63 (mean 0.67), shuffled <= 0.012 (~1/128);
     * re-measured on the fixed default seed and seeds 1-60: cube 0.634-0.702,
     * shuffled <= 0.0111 */
    if (getenv("VCATTN_TEST_MEASURE")) printf("    M cube %.4f shuffled %.4f\n", s_cube, s_shuf);
    CHECK_MSG(s_cube > 0.55 && s_shuf < 0.025, "cube %.3f vs shuffled %.3f", s_cube, s_shuf);
    free(v);
    free(cube);
    free(shuf);
}

TEST(cube_permutation_rejects_bad_input) {
    int32_t p[8];
    CHECK_STATUS(vcattn_cube_permutation(2, 2, 2, 1, 1, 1, NULL), VCATTN_STATUS_NULL_POINTER);
    const int64_t good[6] = {2, 2, 2, 1, 1, 1};
    for (int i = 0; i < 6; ++i) {
        int64_t a[6];
        memcpy(a, good, sizeof a);
        a[i] = i % 2 ? 0 : -3;
        CHECK_STATUS(vcattn_cube_permutation(a[0], a[1], a[2], a[3], a[4], a[5], p), VCATTN_STATUS_BAD_SHAPE);
    }
    CHECK_STATUS(vcattn_cube_permutation(2048, 1024, 1024, 1, 1, 1, p), VCATTN_STATUS_SIZE_OVERFLOW);
    CHECK_STATUS(vcattn_cube_permutation(INT64_MAX / 2, 4, 4, 1, 1, 1, p), VCATTN_STATUS_SIZE_OVERFLOW);
    CHECK_STATUS(vcattn_cube_permutation(2, 2, 2, 1, 1, 1, p), VCATTN_STATUS_SUCCESS);
}

/* ---- Lloyd, step by step ----------------------------------------------------------------- */

/* Straightforward Lloyd in double: n rounds of (assign to the nearest
 * centroid, ties to the lower index; move each non-empty centroid to the mean
 * of its tokens), then a final assignment.  v (S, D) contiguous. */
static void lloyd_model(const float *v, int64_t s_n, int64_t d_n, int k, const float *init, int n,
                        double *cen, int32_t *labels) {
    for (int64_t i = 0; i < k * d_n; ++i) cen[i] = init[i];
    double *sum = (double *)malloc(sizeof(double) * (size_t)(k * d_n));
    int64_t *cnt = (int64_t *)malloc(sizeof(int64_t) * (size_t)k);
    for (int round = 0; round <= n; ++round) {
        for (int64_t s = 0; s < s_n; ++s) {
            double best = INFINITY;
            int32_t arg = 0;
            for (int j = 0; j < k; ++j) {
                double dist = 0.0;
                for (int64_t d = 0; d < d_n; ++d) {
                    double e = (double)v[s * d_n + d] - cen[j * d_n + d];
                    dist += e * e;
                }
                if (dist < best) { best = dist; arg = j; }
            }
            labels[s] = arg;
        }
        if (round == n) break;
        memset(sum, 0, sizeof(double) * (size_t)(k * d_n));
        memset(cnt, 0, sizeof(int64_t) * (size_t)k);
        for (int64_t s = 0; s < s_n; ++s) {
            ++cnt[labels[s]];
            for (int64_t d = 0; d < d_n; ++d) sum[labels[s] * d_n + d] += v[s * d_n + d];
        }
        for (int j = 0; j < k; ++j)
            for (int64_t d = 0; cnt[j] && d < d_n; ++d) cen[j * d_n + d] = sum[j * d_n + d] / (double)cnt[j];
    }
    free(sum);
    free(cnt);
}

/* `iterations` = n means exactly n Lloyd updates: the planner's labels and
 * centroids equal the model's after n rounds, for every n while the model
 * still moves.  Tokens spread along a line, centroids started bunched at one
 * end: each round moves them a visible step, so one round more or fewer is
 * a different answer (checked on the model itself). */
TEST(vsmooth_plan_runs_exactly_the_asked_lloyd_iterations) {
    const int64_t S = 90, D = 3;
    const int k = 4;
    test_rng r = {test_seed()};
    float v[90 * 3], init[4 * 3], cen[4 * 3];
    for (int64_t s = 0; s < S; ++s) {
        v[s * D + 0] = (float)(10.0 * test_rng_uniform(&r));
        v[s * D + 1] = (float)(0.1 * test_rng_normal(&r));
        v[s * D + 2] = (float)(0.1 * test_rng_normal(&r) + 5.0); /* an offset: the planner centres it */
    }
    for (int j = 0; j < k; ++j) {
        init[j * D + 0] = (float)(0.3 * j + 0.05 * test_rng_normal(&r));
        init[j * D + 1] = (float)(0.1 * test_rng_normal(&r));
        init[j * D + 2] = 5.0f;
    }
    int64_t st[3];
    contiguous_strides(1, S, D, st);
    int32_t perm[90], lab[90], want_lab[90], prev_lab[90];
    double want[4 * 3], prev[4 * 3];
    vcattn_kmeans_params p;
    vcattn_kmeans_params_init(&p);
    p.clusters = k;
    p.init_centroids = init;
    lloyd_model(v, S, D, k, init, 0, prev, prev_lab);
    int moving = 0;
    for (int n = 1; n <= 12; ++n) {
        lloyd_model(v, S, D, k, init, n, want, want_lab);
        double step = 0.0;
        for (int i = 0; i < k * D; ++i) step = fmax(step, fabs(want[i] - prev[i]));
        if (step < 1e-3) break; /* converged: n and n-1 no longer differ */
        ++moving;
        p.iterations = n;
        CHECK_STATUS(vcattn_vsmooth_plan(v, 1, 1, S, D, st, &p, perm, lab, cen), VCATTN_STATUS_SUCCESS);
        double err = 0.0;
        for (int i = 0; i < k * D; ++i) err = fmax(err, fabs((double)cen[i] - want[i]));
        /* centroids are float-rounded means: ~1e-6 of |v| ~ 10 */
        CHECK_MSG(err < 1e-5, "iterations %d: centroids differ from %d Lloyd rounds by %g (one round moves %g)", n, n,
                  err, step);
        CHECK_MSG(memcmp(lab, want_lab, sizeof lab) == 0, "iterations %d: labels differ from %d Lloyd rounds", n, n);
        memcpy(prev, want, sizeof want);
        memcpy(prev_lab, want_lab, sizeof want_lab);
    }
    if (getenv("VCATTN_TEST_MEASURE")) printf("    %d moving rounds checked\n", moving);
    CHECK_MSG(moving >= 4, "the input converged after %d rounds: too few to tell n from n-1", moving);
}
