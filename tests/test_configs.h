/* test_configs.h - the P paths of methods retired from the method list (docs/kernel-log.md,
 * "Methods retired"): ExpCast with the tail line, and ExpCast against each block's max (the
 * split's ExpCast keys).  The simulation keeps their P formats, so the tests keep them as
 * configs, with ids past VCATTN_METHOD_COUNT that test_config_get / test_config_name take
 * wherever a method id goes. */
#ifndef VCATTN_TEST_CONFIGS_H
#define VCATTN_TEST_CONFIGS_H

#include "vcattn.h"

#define TEST_CONFIG_EXPCAST_TAIL ((vcattn_method)(VCATTN_METHOD_COUNT + 0))
#define TEST_CONFIG_EXPCAST_BLOCKMAX ((vcattn_method)(VCATTN_METHOD_COUNT + 1))

static inline vcattn_status test_config_get(vcattn_method m, vcattn_method_config *c) {
    if (m != TEST_CONFIG_EXPCAST_TAIL && m != TEST_CONFIG_EXPCAST_BLOCKMAX) return vcattn_method_config_get(m, c);
    vcattn_status st = vcattn_method_config_get(VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT, c);
    if (m == TEST_CONFIG_EXPCAST_TAIL) c->p_format = VCATTN_P_FORMAT_EXPCAST_TAIL;
    else c->p_scale = VCATTN_P_SCALE_BLOCK_MAX;
    c->exact_keys = 0; /* as they were retired: their goldens keep their hashes */
    return st;
}

static inline const char *test_config_name(vcattn_method m) {
    return m == TEST_CONFIG_EXPCAST_TAIL       ? "expcast-tail (config)"
           : m == TEST_CONFIG_EXPCAST_BLOCKMAX ? "expcast-blockmax (config)"
                                               : vcattn_method_name(m);
}

#endif
