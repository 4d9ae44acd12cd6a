/* prep_debug.h - the test/benchmark knob of the preprocessing passes (not in the
 * public API; tests/gpu/gpu_check and gpu_bench call it).  C and CUDA.
 *
 * vcattn_gpu_prep_debug(impl, passes) sets state of the CALLING THREAD that its
 * later vcattn_gpu_attention calls read (thread-local: other threads keep the
 * defaults, so a test flipping it cannot change another thread's calls):
 *   impl   0 = the vectorized path whenever the views allow it (the default),
 *          1 = always the scalar path, 2 = as 0 with 3 key blocks per V statistics
 *          CTA whatever the size (tests that loop);
 *   passes bit mask of the passes launched (1 K mean, 2 K quantize, 4 Q quantize,
 *          8 V statistics, 16 V quantize; 31 = all, the default).
 * vcattn_gpu_prep_debug(0, 31u) restores the defaults. */
#ifndef VCATTN_PREP_DEBUG_H
#define VCATTN_PREP_DEBUG_H

#ifdef __cplusplus
extern "C" {
#endif

void vcattn_gpu_prep_debug(int impl, unsigned passes);

#ifdef __cplusplus
}
#endif

#endif
