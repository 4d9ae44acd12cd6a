/* thread_pool.c - a minimal parallel-for over pthreads (the CPU reference and
 * simulation spread their work items over it). */
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
