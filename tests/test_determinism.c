/* test_determinism.c - the CPU paths give bit-identical answers whoever calls
 * them and however often: the reference, the simulation of every method (full
 * and sampled rows, with the extra outputs), the k-means planner, the
 * per-layer plan, the block-energy share and the workload generator, each
 * called with the same inputs from several threads at once (each with its
 * own num_threads, 0 = all cores, so the library's own workers interleave
 * too) give what one single-threaded call gives, and a repeated call gives
 * it again.  That is what holds if the library keeps no process-wide
 * mutable state and its results do not depend on how the work is split.
 *
 * Inputs: 1 x 2 heads, Sq = 150, Skv = 200 (a partial second 128-row tile
 * and key block), D = 64, from the test's seed. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vcattn.h"

enum { DB = 1, DH = 2, DSQ = 150, DSKV = 200, DD = 64, DK = 8, NCALLERS = 4, NROWS = 37 };
enum { NQ = DB * DH * DSQ * DD, NKV = DB * DH * DSKV * DD, NL = DB * DH * DSQ };

/* num_threads of each concurrent caller */
static const int k_caller_threads[NCALLERS] = {1, 2, 0, 3};

typedef struct {
    float q[NQ], k[NKV], v[NKV];
    int64_t rows[NROWS];
} det_inputs;

/* Everything one caller computes, for comparison byte by byte. */
typedef struct {
    float ref[NQ], ref_lse[NL];
    float ref_rows[DB * DH * NROWS * DD];
    int32_t perm[DB * DH * DSKV], labels[DB * DH * DSKV];
    float centroids[DB * DH * DK * DD];
    float sim[VCATTN_METHOD_COUNT][NQ], sim_lse[VCATTN_METHOD_COUNT][NL];
    float pqv[VCATTN_METHOD_COUNT][NQ];
    double tv[VCATTN_METHOD_COUNT][DB * DH * DSQ];
    float sim_rows[VCATTN_METHOD_COUNT][DB * DH * NROWS * DD];
    double share[2];
    int32_t layer_perm[2][DB * DH * DSKV]; /* plan object: first grouping, then a warm start */
    float wq[DB * DH * 256 * DD];          /* workload: 1 x 2 x (4 x 8 x 8) x 64 */
    vcattn_status st; /* first failure, if any */
} det_outputs;

/* The start line: callers wait until every thread exists, then enter the
 * library together. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go;
} det_start;

typedef struct {
    const det_inputs *in;
    det_outputs *out;
    int threads;
    det_start *start;
} det_job;

static void keep_first_failure(det_outputs *o, vcattn_status st) {
    if (st != VCATTN_STATUS_SUCCESS && o->st == VCATTN_STATUS_SUCCESS) o->st = st;
}

/* One caller's whole sequence of calls. */
static void det_run(const det_inputs *in, det_outputs *o, int threads) {
    memset(o, 0, sizeof *o);
    vcattn_attention_params p;
    vcattn_attention_params_init(&p, DB, DH, DSQ, DSKV, DD, in->q, in->k, in->v, o->ref);
    p.num_threads = threads;
    p.lse = o->ref_lse;
    keep_first_failure(o, vcattn_reference_attention(&p));
    p.lse = NULL;
    p.o = o->ref_rows;
    p.o_stride[0] = DH * NROWS * DD;
    p.o_stride[1] = NROWS * DD;
    keep_first_failure(o, vcattn_reference_attention_rows(&p, in->rows, NROWS));

    const int64_t vs[3] = {DH * DSKV * DD, DSKV * DD, DD};
    vcattn_kmeans_params km;
    vcattn_kmeans_params_init(&km);
    km.clusters = DK;
    km.iterations = 4;
    km.seed = 11;
    km.num_threads = threads;
    keep_first_failure(o, vcattn_vsmooth_plan(in->v, DB, DH, DSKV, DD, vs, &km, o->perm, o->labels, o->centroids));

    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) {
        vcattn_method_config cfg;
        keep_first_failure(o, vcattn_method_config_get((vcattn_method)m, &cfg));
        vcattn_attention_params_init(&p, DB, DH, DSQ, DSKV, DD, in->q, in->k, in->v, o->sim[m]);
        p.num_threads = threads;
        p.lse = o->sim_lse[m];
        vcattn_sim_outputs extra = {o->pqv[m], o->tv[m], 1, NULL};
        keep_first_failure(o, vcattn_simulate_attention(&p, &cfg, o->perm, &extra));
        p.lse = NULL;
        p.o = o->sim_rows[m];
        p.o_stride[0] = DH * NROWS * DD;
        p.o_stride[1] = NROWS * DD;
        keep_first_failure(o, vcattn_simulate_attention_rows(&p, &cfg, o->perm, in->rows, NROWS, NULL));
    }

    keep_first_failure(o, vcattn_block_energy_share(in->v, DB, DH, DSKV, DD, vs, NULL, 0, &o->share[0]));
    keep_first_failure(o, vcattn_block_energy_share(in->v, DB, DH, DSKV, DD, vs, o->perm, DSKV, &o->share[1]));

    vcattn_plan *plan = NULL;
    vcattn_status st = vcattn_plan_create(1, DB, DH, DSKV, DD, DK, &plan);
    keep_first_failure(o, st);
    if (st == VCATTN_STATUS_SUCCESS) {
        for (int round = 0; round < 2; ++round) {
            const int32_t *lp = NULL;
            keep_first_failure(o, vcattn_plan_update(plan, 0, in->v, vs, 2, 5, threads));
            keep_first_failure(o, vcattn_plan_permutation(plan, 0, &lp));
            if (lp) memcpy(o->layer_perm[round], lp, sizeof o->layer_perm[round]);
        }
        vcattn_plan_destroy(plan);
    }

    vcattn_workload_params wp;
    vcattn_workload_params_init(&wp);
    wp.heads = DH;
    wp.frames = 4;
    wp.height = 8;
    wp.width = 8;
    wp.head_dim = DD;
    float *wk = (float *)malloc(sizeof o->wq), *wv = (float *)malloc(sizeof o->wq);
    if (wk && wv) keep_first_failure(o, vcattn_workload_generate(&wp, o->wq, wk, wv));
    else keep_first_failure(o, VCATTN_STATUS_OUT_OF_MEMORY);
    free(wk);
    free(wv);
}

static void *det_thread(void *arg) {
    det_job *j = (det_job *)arg;
    pthread_mutex_lock(&j->start->lock);
    while (!j->start->go) pthread_cond_wait(&j->start->cond, &j->start->lock);
    pthread_mutex_unlock(&j->start->lock);
    det_run(j->in, j->out, j->threads);
    return NULL;
}

/* Which part of two results differs (NULL: none), byte by byte. */
static const char *det_first_difference(const det_outputs *a, const det_outputs *b) {
#define DET_SAME(field) \
    if (memcmp(&a->field, &b->field, sizeof a->field) != 0) return #field
    DET_SAME(ref);
    DET_SAME(ref_lse);
    DET_SAME(ref_rows);
    DET_SAME(perm);
    DET_SAME(labels);
    DET_SAME(centroids);
    for (int m = 0; m < VCATTN_METHOD_COUNT; ++m) {
        DET_SAME(sim[m]);
        DET_SAME(sim_lse[m]);
        DET_SAME(pqv[m]);
        DET_SAME(tv[m]);
        DET_SAME(sim_rows[m]);
    }
    DET_SAME(share);
    DET_SAME(layer_perm);
    DET_SAME(wq);
#undef DET_SAME
    return NULL;
}

static det_inputs *det_make_inputs(void) {
    det_inputs *in = (det_inputs *)malloc(sizeof *in);
    if (!in) return NULL;
    test_rng r = {test_seed()};
    for (int i = 0; i < NQ; ++i) in->q[i] = (float)test_rng_normal(&r);
    for (int i = 0; i < NKV; ++i) in->k[i] = (float)(test_rng_normal(&r) + 0.3);
    for (int i = 0; i < NKV; ++i) in->v[i] = (float)(test_rng_normal(&r) * (1.0 + (i % DD == 5 ? 8.0 : 0.0)));
    if (vcattn_strided_rows(DSQ, NROWS, in->rows) != VCATTN_STATUS_SUCCESS) {
        free(in);
        return NULL;
    }
    return in;
}

TEST(determinism_concurrent_callers_match_one_single_threaded_call) {
    det_inputs *in = det_make_inputs();
    det_outputs *single = (det_outputs *)malloc(sizeof *single);
    det_outputs *again = (det_outputs *)malloc(sizeof *again);
    det_outputs *conc = (det_outputs *)malloc(sizeof *conc * NCALLERS);
    CHECK(in && single && again && conc);
    if (!in || !single || !again || !conc) goto done;

    det_run(in, single, 1);
    CHECK_STATUS(single->st, VCATTN_STATUS_SUCCESS);
    /* the inputs are ordinary: the answers are not all zero (a comparison of
     * two empty results would prove nothing) */
    CHECK(single->ref[0] != 0.0f && single->sim[VCATTN_METHOD_VSMOOTH_8BIT][0] != 0.0f && single->share[1] > 0.0);

    det_start start = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t ids[NCALLERS];
    det_job jobs[NCALLERS];
    int started = 0;
    for (int i = 0; i < NCALLERS; ++i) {
        jobs[i] = (det_job){in, &conc[i], k_caller_threads[i], &start};
        if (pthread_create(&ids[i], NULL, det_thread, &jobs[i]) != 0) break;
        ++started;
    }
    CHECK_EQ_INT(started, NCALLERS);
    pthread_mutex_lock(&start.lock);
    start.go = 1;
    pthread_cond_broadcast(&start.cond);
    pthread_mutex_unlock(&start.lock);
    for (int i = 0; i < started; ++i) pthread_join(ids[i], NULL);
    for (int i = 0; i < started; ++i) {
        CHECK_STATUS(conc[i].st, VCATTN_STATUS_SUCCESS);
        const char *diff = det_first_difference(single, &conc[i]);
        CHECK_MSG(diff == NULL, "caller %d (num_threads %d): %s differs from the single-threaded call", i,
                  k_caller_threads[i], diff);
    }

    /* and once more, alone: the same bits again */
    det_run(in, again, 0);
    CHECK_STATUS(again->st, VCATTN_STATUS_SUCCESS);
    const char *diff = det_first_difference(single, again);
    CHECK_MSG(diff == NULL, "a repeated call: %s differs", diff);
done:
    free(in);
    free(single);
    free(again);
    free(conc);
}

/* The comparison itself can fail: one flipped bit in any output is found. */
TEST(determinism_comparison_sees_one_bit) {
    det_outputs *a = (det_outputs *)calloc(1, sizeof *a), *b = (det_outputs *)calloc(1, sizeof *b);
    CHECK(a && b);
    if (a && b) {
        CHECK(det_first_difference(a, b) == NULL);
        ((unsigned char *)b->sim_rows[VCATTN_METHOD_COUNT - 1])[3] ^= 1u;
        const char *d = det_first_difference(a, b);
        CHECK(d != NULL && strstr(d, "sim_rows") != NULL);
        memset(b, 0, sizeof *b);
        b->layer_perm[1][DB * DH * DSKV - 1] = 1;
        d = det_first_difference(a, b);
        CHECK(d != NULL && strcmp(d, "layer_perm") == 0);
    }
    free(a);
    free(b);
}
