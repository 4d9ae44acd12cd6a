/* test_methods.c - the method list (src/method_list.h) and what the kernel reads from it:
 * every method with a kernel has the kernel's Q/K/V recipe, a P path of its own, and an
 * exact-P sibling that has a kernel too; the default runs on the GPU. */
#include "method_list.h"
#include "p_path.h"
#include "test.h"

TEST(methods_with_a_kernel_are_what_the_kernel_reads) {
    int paths[VCATTN_METHOD_COUNT], n = 0;
    for (int i = 0; i < VCATTN_METHOD_COUNT; ++i) {
        const vcattn_method m = (vcattn_method)i;
        vcattn_method_config c, e;
        CHECK_STATUS(vcattn_method_config_get(m, &c), VCATTN_STATUS_SUCCESS);
        if (!vcattn_method_has_kernel(m)) continue;
        /* INT8 per-thread Q/K with K smoothing, per-channel E4M3 V (the preprocessing's one recipe) */
        CHECK_MSG(c.qk_format == VCATTN_QK_FORMAT_INT8 && c.qk_granularity == VCATTN_QK_GRANULARITY_THREAD &&
                      c.smooth_k && !c.smooth_q && c.v_format == VCATTN_V_FORMAT_E4M3_PER_CHANNEL,
                  "%s: not the kernel's Q/K/V recipe", vcattn_method_name(m));
        /* the kernel's ones rows give V-Smooth's r and the quantized row sum together */
        CHECK_MSG(c.v_smooth == c.rowsum_from_quantized_p, "%s: v_smooth without the quantized row sum",
                  vcattn_method_name(m));
        const int pp = VC_P_PATH_OF(c);
        for (int j = 0; j < n; ++j) CHECK_MSG(paths[j] != pp, "%s: a P path twice", vcattn_method_name(m));
        paths[n++] = pp;
        CHECK(VC_PP_FORMAT(pp) == c.p_format && VC_PP_BLOCK_MAX(pp) == (c.p_scale == VCATTN_P_SCALE_BLOCK_MAX) &&
              VC_PP_V_SMOOTH(pp) == !!c.v_smooth);
        if (vcattn_method_exact_p(&c, &e) == VCATTN_STATUS_SUCCESS) {
            /* the per-head exact-P recipe launches the sibling's kernel */
            int found = 0;
            for (int k = 0; k < VCATTN_METHOD_COUNT; ++k) {
                vcattn_method_config o;
                vcattn_method_config_get((vcattn_method)k, &o);
                found |= vcattn_method_has_kernel((vcattn_method)k) && VC_P_PATH_OF(o) == VC_P_PATH_OF(e);
            }
            CHECK_MSG(found, "%s: its exact-P sibling has no kernel", vcattn_method_name(m));
        }
    }
    CHECK(n >= 2);
    CHECK(vcattn_method_has_kernel(VCATTN_METHOD_DEFAULT));
    CHECK_EQ_INT(vcattn_method_default(), VCATTN_METHOD_DEFAULT);
    CHECK(!vcattn_method_has_kernel(VCATTN_METHOD_SAGE3_4BIT)); /* NVFP4: Blackwell */
    CHECK(!vcattn_method_has_kernel((vcattn_method)-1) && !vcattn_method_has_kernel(VCATTN_METHOD_COUNT));
}
