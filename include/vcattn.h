/* vcattn.h - VC-Attention: low-bit attention for video Diffusion Transformers.
 *
 * The one public header of libvcattn.  Plain C11, usable from C++ and CUDA.
 *
 * Conventions
 *  - Every call returns a vcattn_status; the library never prints or exits.
 *  - Tensors are float32 on the CPU, indexed (batch, head, seq, dim) with
 *    explicit element strides for the first three axes; the last axis (dim)
 *    is contiguous.  vcattn_attention_params_init() fills the strides of a
 *    contiguous (B, H, S, D) layout; set them by hand for (B, S, H, D).
 *  - Sizes are int64_t; anything <= 0 is rejected with VCATTN_STATUS_BAD_SHAPE.
 *  - num_threads = 0 means "all online cores".
 */
#ifndef VCATTN_H
#define VCATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VCATTN_VERSION_MAJOR 0
#define VCATTN_VERSION_MINOR 1
#define VCATTN_VERSION_PATCH 0

/* ---- status ---------------------------------------------------------------- */

typedef enum vcattn_status {
    VCATTN_STATUS_SUCCESS = 0,
    VCATTN_STATUS_NULL_POINTER,       /* a required pointer was NULL */
    VCATTN_STATUS_BAD_SHAPE,          /* a size <= 0, or sizes that do not agree */
    VCATTN_STATUS_BAD_STRIDE,         /* a stride that makes rows overlap or is < 0 */
    VCATTN_STATUS_UNSUPPORTED_HEAD_DIM, /* head_dim not in {64, 128} */
    VCATTN_STATUS_SIZE_OVERFLOW,      /* element or byte counts overflow int64 / size_t */
    VCATTN_STATUS_NON_FINITE,         /* NaN or Inf in an input that must be finite */
    VCATTN_STATUS_INVALID_ARGUMENT,   /* an enum, name or option out of range */
    VCATTN_STATUS_OUT_OF_MEMORY,
    VCATTN_STATUS_IO_ERROR,           /* a file could not be opened, read or written */
    VCATTN_STATUS_BAD_FILE_FORMAT,    /* a .npy file we cannot read (dtype, order, header) */
    VCATTN_STATUS_UNSUPPORTED_DEVICE, /* no CUDA device of compute capability 9.0 */
    VCATTN_STATUS_CUDA_ERROR,         /* a CUDA runtime call failed */
    VCATTN_STATUS_NOT_BUILT,          /* this build has no CUDA support */
    VCATTN_STATUS_SCORE_OVERFLOW,     /* finite inputs whose scaled scores overflow FP32 (the
                                         quantized paths compute them in FP32; the reference
                                         and the FP64 path: FP64): scale Q, K or sm_scale down */
    VCATTN_STATUS_OUTPUT_NOT_FINITE,  /* the GPU kernel wrote a non-finite output or LSE for
                                         finite inputs (vcattn_gpu_output_status) */
    VCATTN_STATUS_COUNT
} vcattn_status;

/* A static English sentence for the status (never NULL). */
const char *vcattn_status_string(vcattn_status status);

/* "0.1.0" */
const char *vcattn_version_string(void);

/* ---- attention problem on the CPU -------------------------------------------- */

typedef struct vcattn_attention_params {
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    const float *q;   /* (B, H, Sq, D) */
    const float *k;   /* (B, H, Skv, D) */
    const float *v;   /* (B, H, Skv, D) */
    float *o;         /* (B, H, Sq, D) output */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3]; /* batch, head, seq */
    float *lse;       /* optional (B, H, Sq) contiguous, natural log of the row sum */
    double softmax_scale; /* <= 0: 1/sqrt(head_dim) */
    int num_threads;      /* 0: all cores */
    /* Optional per-batch valid lengths (host arrays of `batch` entries; NULL = the whole
     * axis): batch element b attends with its first q_lens[b] query rows (0..seq_q) over
     * its first kv_lens[b] keys (0..seq_kv) - a key-padding mask, or a joint
     * valid[i] & valid[j] one whose valid tokens come first.  See "Valid lengths" below. */
    const int64_t *q_lens, *kv_lens;
} vcattn_attention_params;

/* ---- valid lengths ----------------------------------------------------------------
 * With q_lens / kv_lens set (vcattn_attention_params, vcattn_gpu_params) every batch element
 * runs as the unpadded problem of its valid rows and keys: those rows are bit-identical
 * to the same call on the valid tokens alone (batch 1, seq_q = q_lens[b], seq_kv =
 * kv_lens[b]), and keys past kv_lens[b] take no part in anything (probabilities, the
 * V-Smooth block means, the K mean, the quantization scales).  Rows past q_lens[b], and
 * every row of an element with kv_lens[b] = 0, are written as zeros with LSE -inf (torch
 * SDPA's answer for a fully masked row).  A permutation (perm, B x H x seq_kv) is read
 * over the first kv_lens[b] entries of each head, which must permute 0..kv_lens[b]-1;
 * head_exact as without lengths.  A length outside 0..seq is INVALID_ARGUMENT; so are
 * lengths with the *_rows calls and with vcattn_sim_outputs. */

/* Contiguous (B, H, S, D) strides, default scale, lse = NULL, all threads. */
void vcattn_attention_params_init(vcattn_attention_params *p, int64_t batch, int64_t heads,
                                  int64_t seq_q, int64_t seq_kv, int64_t head_dim,
                                  const float *q, const float *k, const float *v, float *o);

/* Checks shapes, strides, pointers and head_dim (not the data). */
vcattn_status vcattn_attention_params_validate(const vcattn_attention_params *p);

/* Exact attention: FP64 accumulation of scores, softmax and output.
 * Non-finite Q, K or V: NON_FINITE.  Finite inputs whose scaled scores
 * overflow FP64 (|q.k| * softmax_scale beyond ~1e308, e.g. softmax_scale
 * 1e300, or the scaled query |q| * softmax_scale, which is formed first):
 * SCORE_OVERFLOW (the row would be NaN); anything below is answered,
 * except that with p->lse set an LSE (about the row's max score) beyond
 * FP32 is SCORE_OVERFLOW too (without lse the same call answers o). */
vcattn_status vcattn_reference_attention(const vcattn_attention_params *p);

/* ---- query-row sampling ---------------------------------------------------------
 * The *_rows variants compute only the query rows rows[0..n_rows) of every
 * (batch, head), each EXACTLY over all Skv keys (nothing about the keys is
 * sampled).  rows: strictly ascending, in [0, seq_q), n_rows >= 1, else
 * INVALID_ARGUMENT.  Outputs are compact, indexed by the position i of the
 * row in the list instead of the sequence position: p->o row (b, h, i) at
 * b*o_stride[0] + h*o_stride[1] + i*o_stride[2] (o_stride must describe a
 * (B, H, n_rows, D) view), p->lse (B, H, n_rows) contiguous.  Every output
 * row is bit-identical to row rows[i] of the full call. */

/* rows[i] = floor(i * seq_q / n_rows) for i in [0, n_rows): n_rows rows
 * evenly strided over [0, seq_q), the first one row 0.  1 <= n_rows <= seq_q. */
vcattn_status vcattn_strided_rows(int64_t seq_q, int64_t n_rows, int64_t *rows);

/* One row in each of n_rows equal strata of [0, seq_q) (stratum i is
 * [floor(i*seq_q/n_rows), floor((i+1)*seq_q/n_rows))), at an offset within
 * the stratum fixed by a hash of i: strictly ascending, the same on every
 * call.  The rows the per-head policy measures.  Unlike strided rows they
 * cannot line up with a period of the sequence: 512 strided rows of a
 * 115,200-token layer of 3,600-token frames fall on the same 16 positions of
 * every frame, and 32 of them on frame-first tokens (docs/fidelity-analysis.md). */
vcattn_status vcattn_stratified_rows(int64_t seq_q, int64_t n_rows, int64_t *rows);

vcattn_status vcattn_reference_attention_rows(const vcattn_attention_params *p,
                                              const int64_t *rows, int64_t n_rows);

/* ---- methods ---------------------------------------------------------------- */

typedef enum vcattn_method {
    VCATTN_METHOD_FP8_NAIVE = 0,        /* per-block E4M3 Q, K, V, P; no smoothing */
    VCATTN_METHOD_SAGE2_8BIT,           /* SageAttention2 sm90 recipe */
    VCATTN_METHOD_VSMOOTH_8BIT,         /* sage2-8bit + V-Smooth */
    VCATTN_METHOD_VSMOOTH_EXPCAST_8BIT, /* vsmooth-8bit with P written by ExpCast */
    VCATTN_METHOD_SAGE3_4BIT,           /* SageAttention3 NVFP4 recipe */
    VCATTN_METHOD_VSMOOTH_4BIT,         /* sage3-4bit + V-Smooth NVFP4 residual */
    VCATTN_METHOD_VSMOOTH_BLOCKMAX_8BIT, /* vsmooth-8bit (exact exp2, E4M3 P) with each block's P
                                            against its own max; "most faithful" */
    VCATTN_METHOD_VSMOOTH_SPLIT_BLOCKMAX_8BIT, /* the block-max scale with P split: a quarter of each
                                                  block's keys by the exp path, the rest by ExpCast;
                                                  "fast", the default (VCATTN_METHOD_DEFAULT) */
    VCATTN_METHOD_COUNT
} vcattn_method;

typedef enum vcattn_qk_format {
    VCATTN_QK_FORMAT_FP32 = 0, /* no quantization */
    VCATTN_QK_FORMAT_INT8,     /* symmetric INT8, scales per granularity */
    VCATTN_QK_FORMAT_E4M3,     /* E4M3, scales per granularity */
    VCATTN_QK_FORMAT_NVFP4     /* E2M1 in 16-element blocks along D */
} vcattn_qk_format;

typedef enum vcattn_qk_granularity {
    VCATTN_QK_GRANULARITY_BLOCK = 0, /* one scale per 128-token block (Q: per 128-row tile) */
    VCATTN_QK_GRANULARITY_THREAD     /* SageAttention2 sm90 "per_thread" groups */
} vcattn_qk_granularity;

typedef enum vcattn_v_format {
    VCATTN_V_FORMAT_FP32 = 0,
    VCATTN_V_FORMAT_E4M3_PER_BLOCK,   /* one scale per 128-token block */
    VCATTN_V_FORMAT_E4M3_PER_CHANNEL, /* one scale per channel per (batch, head) */
    VCATTN_V_FORMAT_NVFP4             /* 16-token blocks along the key axis */
} vcattn_v_format;

typedef enum vcattn_p_format {
    VCATTN_P_FORMAT_FP32 = 0,
    VCATTN_P_FORMAT_E4M3,    /* FP32 exp2, scaled to the E4M3 max (448), RNE cast */
    VCATTN_P_FORMAT_EXPCAST, /* ExpCast code straight from the score */
    VCATTN_P_FORMAT_NVFP4,   /* SageAttention3's two-level NVFP4 P */
    VCATTN_P_FORMAT_EXPCAST_TAIL, /* ExpCast with the tail line (softmax_numerics.h, vc_expcast_tail_code_biased) */
    VCATTN_P_FORMAT_SPLIT /* 1/4 of the keys (vc_split_key_is_exp) by FP32 exp2 + RNE cast in
                             ExpCast's scale, the rest by ExpCast's codes with beta = -0.453
                             (softmax_numerics.h, "the split P") */
} vcattn_p_format;

/* The scale each key block's P is written against (softmax_numerics.h, "the block-max
 * P scale"): the running row max of the online softmax, or the block's own max,
 * falling at most d = min(1, 64 / blocks) log2 units per block (only with
 * P_FORMAT_E4M3, whose block max then sits at 256 instead of 448, EXPCAST or SPLIT). */
typedef enum vcattn_p_scale {
    VCATTN_P_SCALE_RUNNING_MAX = 0,
    VCATTN_P_SCALE_BLOCK_MAX
} vcattn_p_scale;

/* One code path, many methods: a method is a named set of these flags. */
typedef struct vcattn_method_config {
    vcattn_qk_format qk_format;
    vcattn_qk_granularity qk_granularity;
    int smooth_k;           /* subtract the per-channel token mean of K (per batch, head) */
    int smooth_q;           /* subtract the per-block mean of Q, add its score term back */
    vcattn_v_format v_format;
    int v_smooth;           /* permute K/V by the plan, demean each 128-token block */
    vcattn_p_format p_format;
    int rowsum_from_quantized_p; /* l (and the restore's r) from quantized P; else FP32 P */
    vcattn_p_scale p_scale;      /* what each block's P is scaled against (0: the running max) */
    int exact_keys;              /* V-Smooth only: per (batch, head) this many keys of largest V
                                    norm (at most seq_kv / 16, at most 16) skip quantization and
                                    are merged in FP32 (docs/method.md, "Exact keys"); 0 = none */
} vcattn_method_config;

/* The default method of the library, the CLI and Python: vsmooth-split-blockmax-8bit (fast,
 * and at or above SageAttention2's recipe in fidelity; docs/method.md). */
#define VCATTN_METHOD_DEFAULT VCATTN_METHOD_VSMOOTH_SPLIT_BLOCKMAX_8BIT
vcattn_method vcattn_method_default(void); /* VCATTN_METHOD_DEFAULT, for bindings */
/* 1 when the Hopper kernel (vcattn_gpu_attention) runs the method, else 0 */
int vcattn_method_has_kernel(vcattn_method method);
const char *vcattn_method_name(vcattn_method method); /* "sage2-8bit", NULL if out of range */
vcattn_status vcattn_method_from_name(const char *name, vcattn_method *method);
vcattn_status vcattn_method_config_get(vcattn_method method, vcattn_method_config *config);

/* The method's config with P written by the exact exponential (FP32 exp2, RNE cast to
 * E4M3) against the same scale: the split and ExpCast (with or without the tail line)
 * become the exp path, an E4M3 method stays itself.  INVALID_ARGUMENT for a method
 * without V-Smooth or whose P is not E4M3-class (NVFP4, FP32). */
vcattn_status vcattn_method_exact_p(const vcattn_method_config *config, vcattn_method_config *exact);

/* ---- head recipes: the plan's per-head policy (docs/method.md, "Per-head recipes")
 * A V-Smooth method can run each (batch, head) one of four ways, a recipe byte: */
#define VCATTN_RECIPE_SEQUENCE 1u /* sequence order: the plan holds the identity for the head */
#define VCATTN_RECIPE_EXACT_P 2u  /* P by the exact exponential (vcattn_method_exact_p) */
#define VCATTN_RECIPE_COUNT 4     /* recipe 0: the plan's k-means order, the method's P */

typedef enum vcattn_head_policy {
    VCATTN_HEAD_POLICY_FLOOR = 0, /* per head the first recipe, in the order 0 1 2 3 (fastest,
                                     and the method as designed, first), whose measured PSNR is
                                     at least the host recipe's (sage2-8bit) on the same rows
                                     by more than the measurement's uncertainty (below);
                                     if none is, the most faithful */
    VCATTN_HEAD_POLICY_FASTEST,   /* the method's P on every head, in the better measured order */
    VCATTN_HEAD_POLICY_FAITHFUL,  /* the most faithful measured recipe on every head */
    VCATTN_HEAD_POLICY_COUNT
} vcattn_head_policy;

/* The defaults of the measurement and the choice (one definition for the C tools and Python):
 * query rows measured per head; the margin over the host recipe the FLOOR policy asks for
 * besides the measurement's own uncertainty (dB); and how many standard errors of a
 * recipe's measured gain over the host recipe it must clear.  A few hundred rows' PSNR is an
 * estimate whose error depends on the head (0.03 dB on randn, 0.1-0.75 dB on video heads at
 * 512 rows): docs/method.md, "Per-head recipes"; docs/fidelity-analysis.md, "The
 * measurement's error". */
#define VCATTN_HEAD_POLICY_ROWS 512
#define VCATTN_HEAD_POLICY_MARGIN_DB 0.0
#define VCATTN_HEAD_POLICY_STDERRS 2.0
void vcattn_head_policy_defaults(int64_t *rows, double *margin_db, double *stderrs);

/* The standard error (dB) of a recipe's measured gain over the host recipe, 10 log10 of
 * sum(host_err) / sum(recipe_err), from the paired per-row squared errors of n sampled rows
 * out of `population` query rows (the delta method for a ratio of sums, with the finite
 * population correction: 0 when every row was measured).  INFINITY when it cannot be
 * estimated (one row of several), 0 when either sum is 0 (the gain is then +-inf or 0). */
vcattn_status vcattn_head_gain_stderr(const double *host_err, const double *recipe_err, int64_t n,
                                      int64_t population, double *stderr_db);

/* The choice, from measurements: psnr (n_heads, VCATTN_RECIPE_COUNT) in dB of each recipe
 * on each head, stderr_db (n_heads, VCATTN_RECIPE_COUNT) the standard error of each recipe's
 * gain over the host recipe (NULL: none known, 0), floor_db (n_heads) the host recipe's PSNR
 * on the same rows (may be NULL for FASTEST and FAITHFUL).  Under FLOOR a recipe reaches the
 * floor when psnr >= floor_db + margin_db + stderrs * stderr_db.  Writes recipe (n_heads).
 * Ties go to the lower recipe (faster, then k-means order). */
vcattn_status vcattn_head_recipes_choose(vcattn_head_policy policy, int64_t n_heads, const double *psnr,
                                         const double *stderr_db, const double *floor_db, double margin_db,
                                         double stderrs, uint8_t *recipe);

/* Per head, whether one of the recipes 0 .. n_recipes-1 reaches the FLOOR policy's floor (the
 * rule of vcattn_head_recipes_choose; a recipe not measured, NaN, does not): reached (n_heads)
 * 1 or 0.  With n_recipes 1 it says whether the method as designed did.  A head where it did
 * not is measured again, once, on vcattn_head_policy_recheck_rows() rows, and takes the second
 * measurement's choice: on heavy-tailed heads a few hundred rows under-read the method's gain,
 * and giving up the grouping (or the fast P) for a recipe that merely measured better would
 * be a false rejection (docs/method.md, "Per-head recipes"). */
vcattn_status vcattn_head_recipes_reached(int64_t n_heads, int n_recipes, const double *psnr,
                                          const double *stderr_db, const double *floor_db, double margin_db,
                                          double stderrs, uint8_t *reached);
/* The rows of that second measurement: 4 x rows, at most seq_q (then every row, measured whole).
 * 0 when rows >= seq_q already (no second measurement) or on a bad argument. */
int64_t vcattn_head_policy_recheck_rows(int64_t rows, int64_t seq_q);

/* The measurement on the CPU: every recipe of `method` (a V-Smooth method with an exact
 * sibling) and sage2-8bit, simulated on the listed query rows of p (p->o: a (B, H, n_rows,
 * D) view, as for vcattn_simulate_attention_rows; it is used as scratch), each compared
 * per (batch, head) with the FP64 reference of the same rows.  perm: the plan's (B, H, Skv)
 * k-means order.  psnr and stderr_db (may be NULL): (B*H, VCATTN_RECIPE_COUNT), the latter
 * as vcattn_head_gain_stderr gives it; floor_db: (B*H). */
vcattn_status vcattn_head_recipes_measure(const vcattn_attention_params *p, vcattn_method method,
                                          const int32_t *perm, const int64_t *rows, int64_t n_rows,
                                          double *psnr, double *stderr_db, double *floor_db);

/* ---- CPU simulation ------------------------------------------------------------
 * Runs a method with the kernel's tiling (128-query tiles, 128-key blocks,
 * online softmax) and rounding.  perm: (B, H, Skv) contiguous permutation of
 * the keys per (batch, head) used when config->v_smooth is set; NULL means
 * sequence order.  Optional extra outputs: */
typedef struct vcattn_sim_outputs {
    float *o_pq_v;      /* (B,H,Sq,D) contiguous: quantized P times the exact V,
                           normalized like o: splits the error budget */
    double *row_tv;     /* (B,H,ceil(Sq/tv_row_stride)) total variation of the
                           normalized quantized probabilities vs the exact ones:
                           0.5 sum |P_q / l - P|.  With the FP32 row sum
                           (rowsum_from_quantized_p = 0) the weights P_q / l need
                           not sum to 1, and where the quantized scores pick
                           another winner it can exceed 1 a little (<= 1.14) */
    int64_t tv_row_stride; /* sample every n-th query row for row_tv (>= 1) */
    double *o_f64;      /* (B,H,Sq,D) contiguous: the output before its FP32 store
                           (shows the exact path's FP64 agreement, below float rounding) */
} vcattn_sim_outputs;

/* Every finite input gives a finite output close to the reference or a
 * status: SCORE_OVERFLOW when the scaled scores (or their scale factors)
 * overflow FP32, which the quantized paths compute them in (e.g. Q and K each
 * ~1e20), or are too large for FP32 to resolve their differences (with Q
 * smoothing a score is two FP32 terms: at ~1e26 a row can lose every key,
 * whose sum is then 0), or when an operand or output does not fit FP32: Q, K or V within
 * a small factor of FLT_MAX (K - mean(K) of K = +-3e38 is 6e38; quantized P
 * summing to a little more than 1 takes P V past FLT_MAX), or an LSE of
 * ~1e40 even where K smoothing keeps the scores in range; the
 * unquantized FP64 path and vcattn_reference_attention answer those exactly.  Subnormal inputs and scales 1e-30 .. 1e30 of Q, K, V and
 * softmax_scale are answered (tests/test_edge_cases.c). */
vcattn_status vcattn_simulate_attention(const vcattn_attention_params *p,
                                        const vcattn_method_config *config,
                                        const int32_t *perm, vcattn_sim_outputs *extra);

/* The simulation of the listed query rows only (the sampling rules above).
 * The numerics are the full call's: K and V are prepared over the whole
 * sequence, and each listed row's Q is quantized (and, for smooth_q,
 * demeaned) together with its whole 128-row tile, so the outputs are
 * bit-identical to the same rows of vcattn_simulate_attention.  The extra
 * outputs are compact too: o_pq_v and o_f64 (B, H, n_rows, D), row_tv
 * (B, H, ceil(n_rows / tv_row_stride)) for list positions i with
 * i % tv_row_stride == 0. */
vcattn_status vcattn_simulate_attention_rows(const vcattn_attention_params *p,
                                             const vcattn_method_config *config,
                                             const int32_t *perm, const int64_t *rows,
                                             int64_t n_rows, vcattn_sim_outputs *extra);

/* Either of the two with a recipe per (batch, head) (rows = NULL: every row): perm holds
 * each head's order (the identity for a sequence-order head), head_exact (B, H) bytes,
 * nonzero = that head's P by vcattn_method_exact_p(config); NULL = none. */
vcattn_status vcattn_simulate_attention_heads(const vcattn_attention_params *p,
                                              const vcattn_method_config *config,
                                              const int32_t *perm, const uint8_t *head_exact,
                                              const int64_t *rows, int64_t n_rows,
                                              vcattn_sim_outputs *extra);

/* ---- V-Smooth planner -------------------------------------------------------------
 * Plain k-means (Lloyd) over the value tokens of each (batch, head);
 * permutation = stable argsort of the labels (clusters contiguous, ascending
 * label, original order within a cluster).  Deterministic for a seed. */
typedef struct vcattn_kmeans_params {
    int clusters;                /* k >= 1 (default 64) */
    int iterations;              /* >= 1 (default 8) */
    uint64_t seed;               /* initial centroids drawn from tokens by this seed */
    const float *init_centroids; /* optional (B, H, k, D): warm start */
    int num_threads;
} vcattn_kmeans_params;

void vcattn_kmeans_params_init(vcattn_kmeans_params *p);

/* v: (B,H,S,D) with strides v_stride (batch, head, seq), any head_dim > 0.
 * perm: (B,H,S) out.  labels (B,H,S) and centroids (B,H,k,D) are optional
 * outputs.  With S < k (and no warm start) every token is its own cluster and
 * the unused centroid rows are copies.  Non-finite V or warm-start centroids:
 * VCATTN_STATUS_NON_FINITE; num_threads < 0: INVALID_ARGUMENT.  The result
 * does not depend on the thread count. */
vcattn_status vcattn_vsmooth_plan(const float *v, int64_t batch, int64_t heads, int64_t seq,
                                  int64_t head_dim, const int64_t v_stride[3],
                                  const vcattn_kmeans_params *params, int32_t *perm,
                                  int32_t *labels, float *centroids);

/* The same plan for heads first_head .. first_head + heads - 1 of a larger
 * tensor, v pointing at head first_head (a view): each head gets exactly
 * the permutation vcattn_vsmooth_plan gives it on the whole tensor (the
 * initial centroids are drawn from a stream per (seed, batch, head index in
 * the whole tensor)).  Outputs as vcattn_vsmooth_plan, for the view's heads;
 * first_head < 0: INVALID_ARGUMENT. */
vcattn_status vcattn_vsmooth_plan_heads(const float *v, int64_t batch, int64_t heads,
                                        int64_t first_head, int64_t seq, int64_t head_dim,
                                        const int64_t v_stride[3],
                                        const vcattn_kmeans_params *params, int32_t *perm,
                                        int32_t *labels, float *centroids);

/* Static 3-D cube order over a T x H x W token grid (sequence = t-major
 * raster): cubes of ct x ch x cw tokens, cube by cube, raster inside. */
vcattn_status vcattn_cube_permutation(int64_t frames, int64_t height, int64_t width, int64_t ct,
                                      int64_t ch, int64_t cw, int32_t *perm);

/* Share of block energy the 128-token block mean removes,
 * 128 |mu_b|^2 / |V_b|_F^2, averaged over full blocks and (batch, head)
 * (blocks with zero energy are skipped; 0 if all are; S < 128: BAD_SHAPE).
 * perm: (B,H,S) or NULL (sequence order); a perm of one (batch, head) may be
 * shared by passing perm_stride_bh = 0, else perm_stride_bh = S. */
vcattn_status vcattn_block_energy_share(const float *v, int64_t batch, int64_t heads, int64_t seq,
                                        int64_t head_dim, const int64_t v_stride[3],
                                        const int32_t *perm, int64_t perm_stride_bh,
                                        double *share);

/* ---- the denoising-step schedule ---------------------------------------------------
 * The paper's policy: group (run k-means, refresh the permutation) on the
 * first ceil(group_fraction * n) steps, every `refresh_every` steps inside
 * that window (a 40-step run groups at steps 0, 4, 8); reuse the last
 * permutation afterwards.  A pipeline only passes the step index. */
typedef struct vcattn_schedule {
    int num_steps;                /* n >= 1 */
    double group_fraction;        /* (0, 1], default 0.25 */
    int refresh_every;            /* >= 1, default 4 */
    int group_every_step;         /* 1: group on every step (ablation / safest) */
    int keep_demean_after_window; /* 1 (default): keep V-Smooth with the last plan after
                                     the window; 0: drop demeaning (plain sage2 path) */
} vcattn_schedule;

typedef enum vcattn_schedule_action {
    VCATTN_SCHEDULE_GROUP = 0, /* compute a fresh plan (warm-started), then V-Smooth */
    VCATTN_SCHEDULE_REUSE,     /* V-Smooth with the last plan */
    VCATTN_SCHEDULE_NO_SMOOTH  /* no V-Smooth on this step */
} vcattn_schedule_action;

void vcattn_schedule_init(vcattn_schedule *s, int num_steps);
/* step in [0, num_steps) */
vcattn_status vcattn_schedule_action_at(const vcattn_schedule *s, int step,
                                        vcattn_schedule_action *action);
/* Steps that group, written to steps[0..*count) (capacity >= num_steps). */
vcattn_status vcattn_schedule_grouping_steps(const vcattn_schedule *s, int *steps, int *count);

/* ---- plan: permutations and centroids per layer, reused across steps -------------------
 * Holds, for each layer, the (B,H,S) permutation and the (B,H,k,D) centroids
 * of the last grouping; an update warm-starts k-means from them. */
typedef struct vcattn_plan vcattn_plan;

vcattn_status vcattn_plan_create(int64_t layers, int64_t batch, int64_t heads, int64_t seq,
                                 int64_t head_dim, int clusters, vcattn_plan **plan);
/* Runs k-means on v (strides as vcattn_vsmooth_plan) for `layer`, warm-started
 * from the layer's previous centroids when it has them. */
vcattn_status vcattn_plan_update(vcattn_plan *plan, int64_t layer, const float *v,
                                 const int64_t v_stride[3], int iterations, uint64_t seed,
                                 int num_threads);
/* The layer's (B,H,S) permutation, or NULL in *perm if it was never updated. */
vcattn_status vcattn_plan_permutation(const vcattn_plan *plan, int64_t layer, const int32_t **perm);
/* Bytes the plan holds (host memory). */
vcattn_status vcattn_plan_memory_bytes(const vcattn_plan *plan, size_t *bytes);
void vcattn_plan_destroy(vcattn_plan *plan);

/* ---- metrics ---------------------------------------------------------------------- */

typedef struct vcattn_fidelity {
    double rel_l2;    /* |out - ref|_2 / |ref|_2 */
    double cosine;    /* <out, ref> / (|out| |ref|) */
    double psnr_db;   /* 20 log10(max|ref| / RMSE) */
    double max_abs_error;
} vcattn_fidelity;

vcattn_status vcattn_fidelity_compare(const float *ref, const float *out, int64_t n,
                                      vcattn_fidelity *f);

/* ---- workloads -------------------------------------------------------------------- */

/* Synthetic video-DiT attention inputs; see docs/workload.md for what it models. */
typedef struct vcattn_workload_params {
    int64_t batch, heads, frames, height, width, head_dim; /* S = frames*height*width */
    uint64_t seed;
    float spatial_correlation;   /* 0..1: how much a token shares its neighbours' content */
    float temporal_correlation;  /* 0..1: how much a token shares the previous frame's */
    float k_channel_offset;      /* std of the per-channel constant added to K */
    float v_outlier_fraction;    /* share of V tokens that are outliers */
    float v_outlier_scale;       /* outlier magnitude, in units of the V std */
    int v_outlier_channels;      /* channels an outlier token inflates (vary per head) */
    float v_channel_offset;      /* std of the per-channel constant added to V */
    /* Long-video extensions (docs/workload.md, "Long-video presets").  All zero
     * in vcattn_workload_params_init, which keeps the built-in workload
     * bit-identical; the presets below turn them on. */
    float rope_theta;            /* 3-D RoPE base (Wan 10000, HunyuanVideo 256); 0 = no RoPE */
    int rope_dims[3];            /* channels rotated by the t, y, x bands (even; sum <= head_dim) */
    float q_channel_offset;      /* std of the per-channel constant added to Q (before RoPE) */
    float qk_offset_alignment;   /* -1..1: correlation of the Q offset with the K offset */
    float head_scale_min;        /* per-head Q multiplier, log-uniform in [min, max]; */
    float head_scale_max;        /*   both 0 = every head 1 */
    float v_frame_token_scale;   /* first token of each frame: V += this x a per-head N(0,1)
                                    vector (massive tokens); 0 = off */
    /* Sink heads (docs/workload.md, "Sink heads"): a dozen or so tokens of massive V (the
     * first of every frame and sink_extra_tokens more) that take most of the softmax
     * mass in every sink_head_every-th head.  All zero = off. */
    int sink_head_every;         /* head h is a sink head when h % every == every / 2; 0 = off */
    int sink_extra_tokens;       /* sink tokens besides the first of every frame (0..64) */
    float sink_logit;            /* the sink keys' score above the others, in nats (0..50) */
    float sink_v_scale;          /* a sink token's V norm, up to this many typical V norms
                                    (uniform in [0.4, 1] x this; 0..1e3) */
} vcattn_workload_params;

/* Defaults: 1 x 2 heads x (8 x 32 x 32 = 8192 tokens) x 128. */
void vcattn_workload_params_init(vcattn_workload_params *p);

/* Named presets (defaults, then the preset's fields): "video-long-wan720p"
 * (21 x 45 x 80 = 75,600 tokens, 4 heads), "video-long-hunyuan720p"
 * (33 x 45 x 80 = 118,800 tokens, 4 heads), "video-9600" (4 x 48 x 50 =
 * 9,600 tokens, 8 heads), and "video-9600-sinks" / "video-long-wan720p-sinks"
 * (the same grids with sink heads 2 and 6 / head 2); D = 128, seed 1.  Unknown name: INVALID_ARGUMENT
 * (p untouched).  vcattn_workload_preset_name(i) lists them (NULL past the end). */
vcattn_status vcattn_workload_preset(const char *name, vcattn_workload_params *p);
const char *vcattn_workload_preset_name(int index);

/* q, k, v: (B, H, S, D) contiguous, caller-allocated. */
vcattn_status vcattn_workload_generate(const vcattn_workload_params *p, float *q, float *k,
                                       float *v);

/* .npy input: float32, float16, bfloat16 (stored as uint16, '<u2', or as
 * ml_dtypes writes it, '<V2') or float64 (numpy's default dtype: converted
 * to float32 with round-to-nearest; NaN and Inf stay NaN and Inf, a finite
 * value beyond float32's range is refused), little-endian, C order, 4-D
 * (B, H, S, D).  *data is malloc'ed (NULL after any failure); free it with
 * vcattn_free. */
vcattn_status vcattn_npy_load(const char *path, float **data, int64_t shape[4]);

/* Why a load failed: each reason has one status (in brackets). */
typedef enum vcattn_npy_reason {
    VCATTN_NPY_OK = 0,
    VCATTN_NPY_NULL_ARGUMENT,        /* [NULL_POINTER] path, data or shape is NULL */
    VCATTN_NPY_OPEN_FAILED,          /* [IO_ERROR] missing, unreadable, or a directory */
    VCATTN_NPY_READ_FAILED,          /* [IO_ERROR] a read error (not end of file) */
    VCATTN_NPY_NOT_NPY,              /* [BAD_FILE_FORMAT] no "\x93NUMPY" magic */
    VCATTN_NPY_UNSUPPORTED_VERSION,  /* [BAD_FILE_FORMAT] format version not 1, 2 or 3 */
    VCATTN_NPY_BAD_HEADER,           /* [BAD_FILE_FORMAT] header length or dict malformed */
    VCATTN_NPY_UNSUPPORTED_DTYPE,    /* [BAD_FILE_FORMAT] e.g. int16, complex, structured */
    VCATTN_NPY_BIG_ENDIAN,           /* [BAD_FILE_FORMAT] '>f4', '>f2', '>u2', '>f8' */
    VCATTN_NPY_FORTRAN_ORDER,        /* [BAD_FILE_FORMAT] fortran_order: True */
    VCATTN_NPY_WRONG_RANK,           /* [BAD_FILE_FORMAT] not 4-D */
    VCATTN_NPY_ZERO_DIMENSION,       /* [BAD_SHAPE] a dimension is 0 */
    VCATTN_NPY_TOO_LARGE,            /* [SIZE_OVERFLOW] the element count overflows */
    VCATTN_NPY_TRUNCATED,            /* [BAD_FILE_FORMAT] fewer bytes than the header needs */
    VCATTN_NPY_FLOAT64_OUT_OF_RANGE, /* [BAD_FILE_FORMAT] a finite float64 beyond float32 */
    VCATTN_NPY_OUT_OF_MEMORY,        /* [OUT_OF_MEMORY] */
    VCATTN_NPY_REASON_COUNT
} vcattn_npy_reason;

typedef struct vcattn_npy_error {
    vcattn_npy_reason reason;
    /* One line naming the cause with the file's own details (the dtype, the
     * shape, the byte counts) and the fix; "" on success.  No trailing newline. */
    char message[320];
} vcattn_npy_error;

/* vcattn_npy_load, telling why it failed: `error` (may be NULL) is filled on
 * every return. */
vcattn_status vcattn_npy_load_ex(const char *path, float **data, int64_t shape[4],
                                 vcattn_npy_error *error);
/* A static sentence for the reason, with the usual fix (never NULL). */
const char *vcattn_npy_reason_string(vcattn_npy_reason reason);
/* Writes a float32 C-order .npy of any rank <= 8. */
vcattn_status vcattn_npy_save_f32(const char *path, const float *data, int ndim,
                                  const int64_t *shape);
void vcattn_free(void *ptr);

/* ==== GPU (CUDA, sm_90a) ==============================================================
 * Present in every build; a build without CUDA answers VCATTN_STATUS_NOT_BUILT. */

/* The fused attention call.
 *
 * One call = preprocessing (Q quantize; K smooth + gather + quantize;
 * V gather + block demean + per-channel E4M3 + transpose + FP16 means) and
 * the fused wgmma attention kernel, enqueued on the caller's stream.  Nothing
 * is allocated inside: the caller asks for the workspace size, allocates it
 * once (cudaMalloc) and reuses it.  Every failure is a vcattn_status; the
 * library never prints or exits.
 *
 * Methods: those of vcattn_method_has_kernel - sage2-8bit, vsmooth-8bit,
 * vsmooth-expcast-8bit, vsmooth-blockmax-8bit, vsmooth-split-blockmax-8bit (the contract is
 * the CPU simulation's, vcattn_simulate_attention); anything else is INVALID_ARGUMENT.
 */

typedef enum vcattn_gpu_dtype {
    VCATTN_GPU_DTYPE_BF16 = 0,
    VCATTN_GPU_DTYPE_FP16
} vcattn_gpu_dtype;

/* All pointers are device pointers.  Strides are in elements for the
 * (batch, head, seq) axes; the head_dim axis must be contiguous.  A
 * (B, S, H, D) tensor is described by strides {S*H*D, D, H*D}.
 * Alignment: every row start must be 8-byte aligned (strides multiples of 4
 * elements, base pointers 8-byte aligned), else VCATTN_STATUS_BAD_STRIDE. */
typedef struct vcattn_gpu_params {
    int64_t batch, heads, seq_q, seq_kv, head_dim; /* head_dim 64 or 128 */
    vcattn_method method;
    double softmax_scale;          /* <= 0: 1/sqrt(head_dim) */
    vcattn_gpu_dtype input_dtype;  /* q, k, v */
    vcattn_gpu_dtype output_dtype; /* o */
    const void *q, *k, *v;
    void *o;
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    const int32_t *perm; /* optional (B, H, Skv) contiguous int32 permutation
                            (V-Smooth methods): permuted position j holds
                            original token perm[j]; NULL = identity */
    float *lse;          /* optional (B, H, Sq) contiguous FP32 natural-log LSE */
    const uint8_t *head_exact; /* optional (B, H) contiguous device bytes: nonzero = that
                                  head writes P by the exact exponential
                                  (vcattn_method_exact_p; a plan's VCATTN_RECIPE_EXACT_P);
                                  NULL = every head the method's P */
    const int64_t *q_lens, *kv_lens; /* optional HOST arrays (B,): per-batch valid lengths
                                        ("Valid lengths" above; each batch element is then
                                        launched as its own problem on the stream) */
    int v_smooth_off; /* nonzero: a V-Smooth method's P path without V-Smooth (a schedule's off
                         step: no permutation, no block demean, no restore), as the simulation
                         runs the config with v_smooth = 0; perm and head_exact must be NULL */
} vcattn_gpu_params;

/* Contiguous (B, H, S, D) strides for all four tensors, BF16 in and out,
 * method vsmooth-split-blockmax-8bit (the default), default scale, no permutation, no LSE,
 * every head the method's P. */
void vcattn_gpu_params_init(vcattn_gpu_params *p, int64_t batch, int64_t heads, int64_t seq_q,
                            int64_t seq_kv, int64_t head_dim, const void *q, const void *k,
                            const void *v, void *o);

/* Checks shapes, strides, alignment, method and pointers (not the data).
 * SCORE_OVERFLOW for a softmax_scale the kernel cannot hold: sm_scale or
 * sm_scale * log2(e) beyond FP32, or, for the ExpCast methods, above ~6.8e10
 * (where its one-FMA code bracket loses the code for every input). */
vcattn_status vcattn_gpu_params_validate(const vcattn_gpu_params *p);

/* Bytes of device workspace vcattn_gpu_attention needs for these params. */
vcattn_status vcattn_gpu_workspace_size(const vcattn_gpu_params *p, size_t *bytes);

/* UNSUPPORTED_DEVICE unless the current device is compute capability 9.0. */
vcattn_status vcattn_gpu_device_check(void);

/* The full call: preprocessing + attention on `stream` (a cudaStream_t, NULL
 * for the default stream).  Asynchronous: errors of the kernels themselves
 * surface at the caller's next synchronization; launch errors are returned.
 * The workspace: at least vcattn_gpu_workspace_size bytes, 256-byte aligned
 * (as cudaMalloc returns it), else INVALID_ARGUMENT. */
vcattn_status vcattn_gpu_attention(const vcattn_gpu_params *p, void *workspace,
                                   size_t workspace_bytes, void *stream);

/* The two halves of vcattn_gpu_attention, for timing the kernel alone.
 * vcattn_gpu_attention_kernel reads the workspace written by
 * vcattn_gpu_preprocess and writes o, lse and two things of the workspace:
 * its output flag and, where lse is NULL and the method keeps exact keys,
 * the quantized pass's LSE (the exact keys' merge rewrites it in place).
 * Kernels that share one preprocessed workspace at the same time (on
 * different streams) must each pass an lse of their own; they then share
 * only the output flag.  Preprocess with lse set as the runs will have it:
 * the preprocessing keeps what the LSE needs only then. */
vcattn_status vcattn_gpu_preprocess(const vcattn_gpu_params *p, void *workspace,
                                    size_t workspace_bytes, void *stream);
vcattn_status vcattn_gpu_attention_kernel(const vcattn_gpu_params *p, void *workspace,
                                          size_t workspace_bytes, void *stream);

/* Whether the last vcattn_gpu_attention on this workspace wrote only finite
 * outputs (and LSE): OUTPUT_NOT_FINITE if any row came out NaN or Inf (finite
 * inputs beyond the kernel's FP32 pipeline, which a launch cannot report),
 * SUCCESS otherwise.  Synchronizes `stream` (one 4-byte copy): call it when
 * the answer matters more than the overlap (the Python op does with
 * strict=True); INVALID_ARGUMENT while `stream` is being captured into a
 * CUDA graph (no synchronization possible there). */
vcattn_status vcattn_gpu_output_status(const vcattn_gpu_params *p, const void *workspace,
                                       size_t workspace_bytes, void *stream);

/* FP32-accurate attention of a few query rows on the GPU: the per-head policy's reference
 * (python: vcattn._gpu.reference_rows), one pass over K and V on the tensor cores.  BF16 q
 * (B, H, rows, D), k and v (B, H, seq_kv, D) with (batch, head, seq) element strides (channels
 * contiguous, 8-byte aligned rows); o: (B, H, rows, D) contiguous FP32; head_dim 64 or 128.
 * The scores are FP32 sums of exact products, the softmax FP32, and P enters P V as two BF16
 * parts (~2^-17 relative): a few 1e-6 from FP64 on short rows, up to ~2e-4 on rows of 75,600
 * flat keys (the tensor core's FP32 accumulation; src/cuda/reference_rows.cu).  The keys
 * are split over CTAs by the shape alone, so the result does not depend on the device.  The
 * workspace: vcattn_gpu_reference_workspace_size bytes, 256-byte aligned. */
typedef struct vcattn_gpu_reference_params {
    int64_t batch, heads, rows, seq_kv, head_dim;
    double softmax_scale; /* <= 0: 1/sqrt(head_dim) */
    const void *q, *k, *v;
    int64_t q_stride[3], k_stride[3], v_stride[3];
    float *o;
} vcattn_gpu_reference_params;

vcattn_status vcattn_gpu_reference_workspace_size(const vcattn_gpu_reference_params *p, size_t *bytes);
vcattn_status vcattn_gpu_reference_rows(const vcattn_gpu_reference_params *p, void *workspace,
                                        size_t workspace_bytes, void *stream);

/* Where the preprocessed operands live inside the workspace (byte offsets),
 * for tests that compare codes with a CPU implementation.  Layouts:
 *   q_codes  int8  (B*H, sq_pad, 128)        channels >= head_dim are 0
 *   q_scale  f32   (B*H, sq_pad/64, 32)      index blk*32 + warp*8 + lane/4
 *   k_codes  int8  (B*H, skv_pad, 128)       permuted order, zero past Skv
 *   k_scale  f32   (B*H, skv_pad/128, 4)
 *   k_mean   f32   (B*H, head_dim)
 *   v_codes  e4m3  (B*H, 128, skv_pad)       V^T; inside each 16 keys the
 *            physical position p holds key 16*(p/16) + {0,1,8,9,2,3,10,11,
 *            4,5,12,13,6,7,14,15}[p%16]
 *   v_scale  f32   (B*H, 128)
 *   v_mean   f32   (B*H, skv_pad/128, 128)  fp16_round(mu_b / v_scale) (V-Smooth only;
 *            FP16 values kept in FP32 words so the kernel needs no conversion)
 *   v_mean_tc f16  the same means as the B operand of the kernel's tensor-core
 *            restore (rows of K-major core matrices), V-Smooth methods:
 *            (B*H, ngroups, 2, 128, 8), ngroups = ceil(blocks / 8): group g,
 *            half h, channel c holds the means of blocks 8g + 4h .. 8g + 4h + 3,
 *            each twice (blocks past the last: 0) */
typedef struct vcattn_gpu_layout {
    int64_t sq_pad, skv_pad;
    int64_t exact_keys; /* per (batch, head) keys kept exact (exact_keys.h); 0 = none, and the
                           three offsets below are unused */
    size_t q_codes, q_scale, q_km, k_codes, k_scale, k_mean, k_partial, v_codes, v_scale,
        v_mean, v_block_mean, v_amax, v_mean_tc,
        output_flag, /* u32: zeroed by the preprocessing, set by the kernel (vcattn_gpu_output_status) */
        direct_rows,  /* u32 per (batch, head, 64-row block of Q), by the preprocessing: which kernel (fast or DIRECT) runs its tile */
        key_norm,     /* f32 (B, H, seq_kv): the V norms the exact keys are ranked by (scratch: then
                         each head's first entries hold the exact keys' positions, i32) */
        key_order,    /* i32 (B, H, seq_kv): the order the call runs, the exact keys at its end */
        lse_q,        /* f32 (B, H, seq_q): the quantized pass's LSE, when the caller asks none */
        total;
} vcattn_gpu_layout;

/* With valid lengths (q_lens / kv_lens) the workspace is the call's output flag (offset 0)
 * and one region per batch element; the operand offsets are then batch element 0's. */
vcattn_status vcattn_gpu_workspace_layout(const vcattn_gpu_params *p, vcattn_gpu_layout *layout);

/* V-Smooth grouping on the GPU.
 *
 * k-means over the value tokens of every (batch, head) at once; the
 * permutation is the stable argsort of the labels (clusters contiguous in
 * ascending label order, sequence order inside a cluster), exactly like the
 * CPU planner vcattn_vsmooth_plan.  Deterministic for a given input, seed and
 * warm start (no floating-point atomics). */

typedef struct vcattn_gpu_kmeans_params {
    int64_t batch, heads, seq, head_dim; /* head_dim 64 or 128 */
    vcattn_gpu_dtype dtype;              /* of v */
    const void *v;                       /* device (B,H,S,D), element strides below */
    int64_t v_stride[3];                 /* batch, head, seq; head_dim contiguous */
    int clusters;                        /* 16..128, a multiple of 16 (default 64) */
    int iterations;                      /* Lloyd iterations >= 0 (default 8) */
    uint64_t seed;                       /* initial centroids, when no warm start */
    const float *init_centroids;         /* optional device (B,H,k,D) FP32: warm start */
    float *centroids;                    /* device (B,H,k,D) FP32 out (may alias init) */
    int32_t *perm;                       /* device (B,H,S) out */
    int32_t *labels;                     /* optional device (B,H,S) out */
} vcattn_gpu_kmeans_params;

/* clusters 64, iterations 8, BF16, everything else zero. */
void vcattn_gpu_kmeans_params_init(vcattn_gpu_kmeans_params *p);
vcattn_status vcattn_gpu_kmeans_workspace_size(const vcattn_gpu_kmeans_params *p, size_t *bytes);
/* Enqueues the grouping on `stream` (cudaStream_t or NULL).  The workspace: at least
 * vcattn_gpu_kmeans_workspace_size bytes, 256-byte aligned (as cudaMalloc returns it),
 * else INVALID_ARGUMENT. */
vcattn_status vcattn_gpu_kmeans(const vcattn_gpu_kmeans_params *p, void *workspace,
                                size_t workspace_bytes, void *stream);

/* A device plan: per layer, the (B,H,S) permutation and (B,H,k,D) centroids
 * of the last grouping, in device memory, reused across denoising steps; an
 * update warm-starts k-means from the layer's centroids.  Drive it with
 * vcattn_schedule_action_at: update on VCATTN_SCHEDULE_GROUP steps, pass
 * vcattn_gpu_plan_permutation() as vcattn_gpu_params.perm otherwise. */
typedef struct vcattn_gpu_plan vcattn_gpu_plan;

/* Allocates everything (device memory) up front; clusters as vcattn_gpu_kmeans. */
vcattn_status vcattn_gpu_plan_create(int64_t layers, int64_t batch, int64_t heads, int64_t seq,
                                     int64_t head_dim, int clusters, vcattn_gpu_plan **plan);
/* k-means on v (device, (B,H,S,D) with element strides) for `layer` on `stream`. */
vcattn_status vcattn_gpu_plan_update(vcattn_gpu_plan *plan, int64_t layer, const void *v,
                                     vcattn_gpu_dtype dtype, const int64_t v_stride[3],
                                     int iterations, uint64_t seed, void *stream);
/* The layer's device permutation, or NULL in *perm if it was never updated. */
vcattn_status vcattn_gpu_plan_permutation(const vcattn_gpu_plan *plan, int64_t layer,
                                          const int32_t **perm);
/* Device bytes the plan holds (permutations, centroids, the k-means workspace). */
vcattn_status vcattn_gpu_plan_memory_bytes(const vcattn_gpu_plan *plan, size_t *bytes);
void vcattn_gpu_plan_destroy(vcattn_gpu_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* VCATTN_H */
