/* npy_internal.h - the .npy loader over an open stream (not public).
 *
 * vcattn_npy_load_ex opens the file and hands the stream here; the fuzzer
 * (fuzz/fuzz_npy.c) hands it bytes through fmemopen, so both run the very
 * same parser, reads, seeks and decoding. */
#ifndef VCATTN_NPY_INTERNAL_H
#define VCATTN_NPY_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "vcattn.h"

/* As vcattn_npy_load_ex, reading from `f` (positioned at the magic; it is
 * read, and seeked when it can seek, never closed).  `name` appears in the
 * messages in place of the path.  descr (optional, 16 bytes): on success,
 * the file's dtype string ("<f4", "<f2", "<u2", "<V2", "|V2" or "<f8"),
 * else "".  f, name, data or shape NULL: NULL_ARGUMENT. */
vcattn_status vc_npy_load_stream(FILE *f, const char *name, float **data, int64_t shape[4],
                                 vcattn_npy_error *error, char descr[16]);

#endif
