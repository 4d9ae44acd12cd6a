/* expcast_facts.c - the ExpCast-FP8 facts measured on the shared numerics. */
#include <math.h>
#include <stdlib.h>

#include "numerics.h"
#include "tiling.h"
#include "vcattn.h"
#include "vcattn_research.h"

#define NORMAL_DOUBLINGS 14 /* u in [-14, 0): values 2^-6 .. 2^8, the normal codes 8..120 */

vcattn_status vcattn_expcast_measure(int64_t samples_per_doubling, vcattn_expcast_facts *facts) {
    if (!facts) return VCATTN_STATUS_NULL_POINTER;
    if (samples_per_doubling < 16 || samples_per_doubling > (int64_t)1 << 32)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    int64_t agree = 0, total = 0;
    int max_diff = 0;
    double rmin = INFINITY, rmax = 0.0;
    for (int d = 1; d <= NORMAL_DOUBLINGS; ++d)
        for (int64_t i = 0; i < samples_per_doubling; ++i) {
            double u = -d + ((double)i + 0.5) / (double)samples_per_doubling;
            double exact = exp2(u + 8.0); /* P scaled by 2^8: the row max is 256 */
            uint8_t direct = vc_expcast_code((float)u);
            uint8_t cast = vc_e4m3_encode((float)exact);
            int diff = abs((int)direct - (int)cast);
            agree += diff == 0;
            if (diff > max_diff) max_diff = diff;
            double ratio = vc_e4m3_decode(direct) / exact;
            if (ratio < rmin) rmin = ratio;
            if (ratio > rmax) rmax = ratio;
            ++total;
        }
    facts->agree_share = (double)agree / (double)total;
    facts->max_code_diff = max_diff;
    facts->ratio_min = rmin;
    facts->ratio_max = rmax;
    facts->row_tv_bound = (sqrt(rmax) - sqrt(rmin)) / (sqrt(rmax) + sqrt(rmin));
    facts->beta = VC_EXPCAST_BETA;
    return VCATTN_STATUS_SUCCESS;
}

/* one P path's code for u (log2 units below the row max) */
static uint8_t tail_path_code(int path, double u) {
    switch (path) {
    case 0: return vc_exp_then_cast_code((float)(u + (VC_SAGE2_P_LOG2_OFFSET - 8.0))); /* max at 448 */
    case 1: return vc_expcast_code((float)u);
    case 2: return vc_expcast_tail_code((float)u);
    default: return vc_exp_then_cast_code((float)u); /* max at 256 (VC_BLOCKMAX_E4M3_P_LOG2_OFFSET) */
    }
}

vcattn_status vcattn_expcast_tail_measure(int64_t samples_per_doubling, vcattn_expcast_tail_facts *facts) {
    if (!facts) return VCATTN_STATUS_NULL_POINTER;
    if (samples_per_doubling < 16 || samples_per_doubling > (int64_t)1 << 32)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    const double n = (double)samples_per_doubling;
    for (int path = 0; path < 4; ++path) {
        /* the scale: geometric mean of decoded / 2^u over the normal range */
        double lr = 0.0;
        for (int64_t i = 0; i < 8 * samples_per_doubling; ++i) {
            const double u = -((double)i + 0.5) / n;
            lr += log(vc_e4m3_decode(tail_path_code(path, u)) / exp2(u));
        }
        const double scale = exp(lr / (8.0 * n));
        double got = 0.0, exact = 0.0, cut = 0.0;
        for (int64_t i = 0; i < 7 * samples_per_doubling; ++i) {
            const double u = -20.0 + ((double)i + 0.5) / n;
            exact += exp2(u);
            got += vc_e4m3_decode(tail_path_code(path, u)) / scale;
        }
        for (int64_t i = 0; i < 40 * samples_per_doubling; ++i) { /* deepest non-zero code */
            const double u = -((double)i + 0.5) / n;
            if (tail_path_code(path, u) != 0) cut = -u;
        }
        facts->cut_octaves[path] = cut;
        facts->tail_mass_ratio[path] = got / exact;
    }
    facts->slope = VC_EXPCAST_TAIL_SLOPE;
    facts->offset = VC_EXPCAST_TAIL_OFFSET;
    return VCATTN_STATUS_SUCCESS;
}

/* softmax_numerics.h, "the split P": both parts' scales and per-key errors over the
 * normal range, each part as the split writes it */
vcattn_status vcattn_split_measure(int64_t samples_per_doubling, vcattn_split_facts *facts) {
    if (!facts) return VCATTN_STATUS_NULL_POINTER;
    if (samples_per_doubling < 16 || samples_per_doubling > (int64_t)1 << 32)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    int exp_keys = 0;
    for (int j = 0; j < VC_BLOCK_K; ++j) exp_keys += vc_split_key_is_exp(j);
    facts->exp_share = (double)exp_keys / VC_BLOCK_K;
    const double n = (double)(8 * samples_per_doubling);
    for (int path = 0; path < 2; ++path) {
        double s1 = 0.0, s2 = 0.0;
        for (int64_t i = 0; i < 8 * samples_per_doubling; ++i) {
            const double u = -((double)i + 0.5) / (double)samples_per_doubling;
            /* the exp keys as the split writes them: vc_exp_then_cast_code puts u = 0 at 256 */
            const uint8_t code = path == 0 ? vc_exp_then_cast_code((float)(u + (VC_SPLIT_EXP_LOG2_OFFSET - 8.0)))
                                           : vc_split_expcast_code((float)u);
            const double r = log2(vc_e4m3_decode(code) / exp2(u + 8.0));
            s1 += r;
            s2 += r * r;
        }
        const double mean = s1 / n;
        facts->scale[path] = exp2(mean);
        facts->rms_log2_error[path] = sqrt(fmax(s2 / n - mean * mean, 0.0));
    }
    facts->top_gain[0] = vc_e4m3_decode(vc_exp_then_cast_code(VC_SPLIT_EXP_LOG2_OFFSET - 8.0f)) / 256.0;
    facts->top_gain[1] = vc_e4m3_decode(vc_split_expcast_code(0.0f)) / 256.0;
    facts->scale_ratio = facts->scale[1] / facts->scale[0];
    return VCATTN_STATUS_SUCCESS;
}
