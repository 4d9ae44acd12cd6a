/* parallel.c - a minimal parallel-for over pthreads, plus shared checks. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

typedef struct {
    vc_task_fn fn;
    void *ctx;
    int64_t n;
    int64_t next;
    pthread_mutex_t lock;
} vc_pool;

typedef struct {
    vc_pool *pool;
    int worker;
} vc_worker_arg;

static void *vc_worker_main(void *arg) {
    vc_worker_arg *w = (vc_worker_arg *)arg;
    vc_pool *p = w->pool;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int64_t i = p->next++;
        pthread_mutex_unlock(&p->lock);
        if (i >= p->n) break;
        p->fn(p->ctx, i, w->worker);
    }
    return NULL;
}

int vc_thread_count(int threads) {
    if (threads > 0) return threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > 256 ? 256 : n) : 1;
}

int vc_parallel_for(int64_t n, int threads, vc_task_fn fn, void *ctx) {
    int t = vc_thread_count(threads);
    if (t > n) t = (int)(n > 0 ? n : 1);
    vc_pool pool = {fn, ctx, n, 0, PTHREAD_MUTEX_INITIALIZER};
    if (t <= 1) {
        vc_worker_arg w = {&pool, 0};
        vc_worker_main(&w);
        return 0;
    }
    pthread_t *ids = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)t);
    vc_worker_arg *args = (vc_worker_arg *)malloc(sizeof(vc_worker_arg) * (size_t)t);
    if (!ids || !args) {
        free(ids);
        free(args);
        vc_worker_arg w = {&pool, 0};
        vc_worker_main(&w); /* degrade to one thread rather than fail */
        return 0;
    }
    int started = 0;
    for (int i = 1; i < t; ++i) {
        args[i].pool = &pool;
        args[i].worker = i;
        if (pthread_create(&ids[i], NULL, vc_worker_main, &args[i]) != 0) break;
        ++started;
    }
    args[0].pool = &pool;
    args[0].worker = 0;
    vc_worker_main(&args[0]); /* the caller works too */
    for (int i = 1; i <= started; ++i) pthread_join(ids[i], NULL);
    free(ids);
    free(args);
    pthread_mutex_destroy(&pool.lock);
    return 0;
}

vcattn_status vc_check_strides(int64_t b, int64_t h, int64_t s, int64_t d, const int64_t stride[3]) {
    if (!stride) return VCATTN_STATUS_NULL_POINTER;
    int64_t dims[3] = {b, h, s};
    int64_t max_off = d - 1;
    for (int i = 0; i < 3; ++i) {
        if (stride[i] < 0) return VCATTN_STATUS_BAD_STRIDE;
        int64_t t;
        if (!vc_mul_i64(dims[i] - 1, stride[i], &t) || max_off > INT64_MAX - t)
            return VCATTN_STATUS_SIZE_OVERFLOW;
        max_off += t;
    }
    /* Rows must not overlap: order the axes of size > 1 by stride; each
     * must step over the whole extent of the axes inside it (this accepts
     * (B,H,S,D), (B,S,H,D) and any other permutation of the outer axes). */
    int64_t sd[3][2];
    int m = 0;
    for (int i = 0; i < 3; ++i)
        if (dims[i] > 1) { sd[m][0] = stride[i]; sd[m][1] = dims[i]; ++m; }
    for (int i = 1; i < m; ++i)
        for (int j = i; j > 0 && sd[j][0] < sd[j - 1][0]; --j) {
            int64_t t0 = sd[j][0], t1 = sd[j][1];
            sd[j][0] = sd[j - 1][0]; sd[j][1] = sd[j - 1][1];
            sd[j - 1][0] = t0; sd[j - 1][1] = t1;
        }
    int64_t extent = d;
    for (int i = 0; i < m; ++i) {
        if (sd[i][0] < extent) return VCATTN_STATUS_BAD_STRIDE;
        extent = (sd[i][1] - 1) * sd[i][0] + extent;
    }
    return VCATTN_STATUS_SUCCESS;
}

int vc_has_non_finite(const float *x, int64_t b, int64_t h, int64_t s, int64_t d,
                      const int64_t stride[3]) {
    for (int64_t ib = 0; ib < b; ++ib)
        for (int64_t ih = 0; ih < h; ++ih)
            for (int64_t is = 0; is < s; ++is) {
                const float *row = vc_row(x, stride, ib, ih, is);
                float acc = 0.0f;
                for (int64_t j = 0; j < d; ++j) acc += row[j] * 0.0f; /* NaN/Inf poison the sum */
                if (acc != 0.0f) return 1;
            }
    return 0;
}
