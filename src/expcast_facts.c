/* expcast_facts.c - the ExpCast-FP8 facts measured on the shared numerics. */
#include <math.h>
#include <stdlib.h>

#include "numerics.h"
#include "vcattn.h"

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
