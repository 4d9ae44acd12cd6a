/* eval_policy.h - `vcattn eval --policy`: one head's per-head recipes, measured and chosen as a
 * vcattn.Plan chooses them (docs/method.md, "Per-head recipes"). */
#ifndef VCATTN_EVAL_POLICY_H
#define VCATTN_EVAL_POLICY_H

#include <stdint.h>

#include "vcattn.h"

/* p: one head of every batch item, a (B, 1, S, D) view; perm its (B, Skv) k-means order.  The
 * recipes are measured on rows (n_rows) and chosen; under FLOOR the batch items whose method as
 * designed does not reach the floor are measured again on rows2 (n_rows2; 0: never) and take
 * that choice.  Writes, per batch item: recipe, gain (the chosen recipe's PSNR over sage2-8bit on
 * its rows, dB), stderr_db (that gain's standard error) and rechecked (1: from rows2). */
vcattn_status vc_eval_head_recipes(const vcattn_attention_params *p, vcattn_method method, const int32_t *perm,
                                   const int64_t *rows, int64_t n_rows, const int64_t *rows2, int64_t n_rows2,
                                   vcattn_head_policy policy, double margin_db, double stderrs, uint8_t *recipe,
                                   double *gain, double *stderr_db, uint8_t *rechecked);

#endif
