/* mixprec-plugin-abi.h — the plugin ABI: what a plugin .so exports and the
 * vtables it registers. (MixprecPlugin, the object describing a loaded
 * plugin, is mixprec-plugin-object.h; <mixprec/mixprec-plugin.h>, this
 * header's name until 1.1, still includes it.)
 *
 * Plain C on purpose: plugins are built separately from the library, maybe
 * by other compilers and years apart, so nothing here depends on GLib's
 * types or on the library's internals. The discipline is NCCL's net-plugin
 * one: a released struct is frozen; a new revision is a new struct (…V2),
 * and the library upgrades a registered old one to the newest struct of
 * its kind (in libmixprec/mixprec-plugin-compat.c). Structs that the library
 * fills for the plugin begin with their size so fields can be appended in a
 * minor revision; structs a plugin fills end with reserved space that must
 * be zero.
 *
 * A plugin file named `mixprec-NAME.so` (dashes allowed in NAME) exports one
 * symbol, `mixprec_plugin_NAME_get_desc` (dashes turned into underscores),
 * returning a static #MixprecPluginDesc. The library checks the ABI version
 * (major equal, minor at most the library's), then calls init(), which
 * registers the plugin's features through the host table.
 *
 * This header may be included on its own, without <mixprec/mixprec.h>.
 * Since: 1.1 under this name.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI revision this header describes; also in mixprec-version.h as
 * MIXPREC_PLUGIN_ABI_MAJOR/MINOR for the library's own use. */
#define MIXPREC_PLUGIN_ABI_VERSION_MAJOR 1
#define MIXPREC_PLUGIN_ABI_VERSION_MINOR 7

/* The revisions of the optimizer vtable (MixprecOptimizerV1, …V3) this
 * header declares; 1.1 added MixprecOptimizerV2, 1.4 MixprecOptimizerV3. */
#define MIXPREC_PLUGIN_OPTIMIZER_REVISION 3

/* The revisions of the device vtable (MixprecDeviceV1, …V3) this header
 * declares; 1.2 added MixprecDeviceV2, 1.3 MixprecDeviceV3. */
#define MIXPREC_PLUGIN_DEVICE_REVISION 3

/* The revisions of the communicator vtable (MixprecCommV1, MixprecCommV2)
 * this header declares; 1.5 added MixprecCommV2, 1.7 its all_to_all_v. */
#define MIXPREC_PLUGIN_COMM_REVISION 2

#if defined(__GNUC__)
# define MIXPREC_PLUGIN_EXPORT __attribute__((visibility ("default")))
#else
# define MIXPREC_PLUGIN_EXPORT
#endif

/* Return codes of plugin functions. A failing call also writes a sentence
 * into the caller's error buffer (see each function). */
typedef enum {
  MIXPREC_PLUGIN_OK = 0,
  MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT = 1,   /* the caller passed something wrong */
  MIXPREC_PLUGIN_ERR_UNSUPPORTED = 2,        /* a dtype, rounding or option this feature lacks */
  MIXPREC_PLUGIN_ERR_RUNTIME = 3,            /* the device or transport failed */
  MIXPREC_PLUGIN_ERR_TIMEOUT = 4,            /* a peer did not answer in time */
  MIXPREC_PLUGIN_ERR_NO_MEMORY = 5,
  MIXPREC_PLUGIN_ERR_PEER_FAILED = 6,        /* the transport reported a peer's failure */
} MixprecPluginStatus;

/* Element types, numerically equal to MixprecDType. */
typedef enum {
  MIXPREC_PLUGIN_DTYPE_FLOAT32 = 0,
  MIXPREC_PLUGIN_DTYPE_FLOAT16 = 1,
  MIXPREC_PLUGIN_DTYPE_BFLOAT16 = 2,
  MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3 = 3,
  MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2 = 4,
} MixprecPluginDType;

/* Rounding modes, numerically equal to MixprecRounding. */
typedef enum {
  MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN = 0,
  MIXPREC_PLUGIN_ROUNDING_STOCHASTIC = 1,
} MixprecPluginRounding;

/* ------------------------------------------------------------ hyper-parameters */

typedef enum {
  MIXPREC_HPARAM_DOUBLE = 0,
  MIXPREC_HPARAM_BOOL = 1,     /* stored as 0.0 or 1.0 */
  MIXPREC_HPARAM_INT = 2,      /* stored as an integral double */
} MixprecHParamType;

/* One hyper-parameter of an optimizer: the schema users see in
 * mixprec-inspect and the config is validated against. Values travel as
 * doubles in schema order. */
typedef struct {
  const char *name;            /* "lr", "beta1", "beta2", "eps", "weight_decay"...:
                                  DeepSpeed's optimizer.params keys, with the
                                  "betas" pair split into beta1 and beta2 */
  const char *description;
  MixprecHParamType type;
  double default_value;
  double min_value;            /* inclusive bounds */
  double max_value;
  void *reserved[4];
} MixprecHParamSpecV1;

/* ------------------------------------------------------------ optimizers */

/* Arguments of one fused optimizer step over a contiguous range of n
 * elements. Filled by the library; plugins read only the first
 * struct_size bytes they know. */
typedef struct {
  size_t struct_size;          /* sizeof (MixprecOptimizerStepV1) of the caller */
  const double *hparams;       /* n_hparams values, schema order */
  unsigned n_hparams;
  uint64_t step;               /* 1-based count of applied steps, for bias correction */
  double lr;                   /* the scheduled learning rate of this step */
  float grad_factor;           /* multiply every gradient by this first:
                                  1 / (loss_scale * clip_coef) */
  MixprecPluginDType grad_dtype;     /* float32, float16 or bfloat16 */
  MixprecPluginDType working_dtype;  /* dtype of working[] */
  MixprecPluginRounding rounding;    /* how working[] is written */
  uint64_t seed;               /* stochastic rounding: per tensor and step */
  uint64_t first_index;        /* global element index of element 0, so the
                                  random stream does not depend on sharding */
  void *device_stream;         /* device optimizers: the stream the step is
                                  queued on (a cudaStream_t for "cuda");
                                  NULL for "cpu" */
} MixprecOptimizerStepV1;

/* A fused optimizer for one device. step() handles one contiguous range;
 * it is called concurrently from several threads on disjoint ranges, so it
 * keeps no mutable global state.
 *
 * Buffers of step():
 *   master   FP32 master weights, updated in place; NULL when the parameter
 *            has no FP32 master (bf16 without master weights): then the
 *            parameter is read from working[] and written back to it.
 *   grad     gradients in args->grad_dtype (not modified)
 *   states   n_state_slots FP32 arrays, updated in place
 *   working  the low-precision copy written from the new master; NULL when
 *            the master is itself the parameter (FP32 training)
 * On failure returns a MixprecPluginStatus and writes a sentence into
 * errbuf (errbuf_len bytes, always NUL-terminated). */
typedef struct {
  const char *name;            /* "adamw" */
  const char *device;          /* "cpu", "cuda" */
  unsigned rank;               /* the highest rank wins among equal names */
  const char *description;
  const MixprecHParamSpecV1 *hparams;
  unsigned n_hparams;
  unsigned n_state_slots;      /* FP32 values of state per element */
  const char *const *state_names;   /* n_state_slots names, e.g. "exp_avg" */
  int (*step) (const MixprecOptimizerStepV1 *args,
               float                        *master,
               const void                   *grad,
               float *const                 *states,
               void                         *working,
               size_t                        n,
               char                         *errbuf,
               size_t                        errbuf_len);
  void *reserved[8];
} MixprecOptimizerV1;

/* Revision 2 (ABI 1.1): optimizer state in a dtype per slot.
 *
 * The arguments of a V2 step() begin with a whole MixprecOptimizerStepV1
 * (its struct_size is then sizeof (MixprecOptimizerStepV2) of the caller),
 * so a V2 plugin reads every V1 field where it always was and the library
 * reaches a V1 plugin with &args->base. Fields may be appended; a plugin
 * reads only the first base.struct_size bytes it knows. */
typedef struct {
  MixprecOptimizerStepV1 base;
  /* n_state_slots dtypes, one per slot: FLOAT32 or BFLOAT16 (only dtypes
   * the vtable's state_dtype_mask names). A BFLOAT16 slot is read by
   * widening (exact) and written by rounding the FP32 result of the
   * update, as state_rounding says. */
  const MixprecPluginDType *state_dtypes;
  MixprecPluginRounding state_rounding;
  /* Stochastic rounding of state: slot k of element i draws its bits from
   * the stream (state_seed + k, base.first_index + i), the working copy's
   * convention with its own seed, so the state and the working copy do not
   * share random bits and the result does not depend on sharding. */
  uint64_t state_seed;
} MixprecOptimizerStepV2;

/* An optimizer of revision 2, registered with
 * MixprecPluginHostV1.register_optimizer_v2. Everything is as in
 * MixprecOptimizerV1 except:
 *   state_dtype_mask  bit (1 << MixprecPluginDType) per dtype the state
 *                     slots may have; FLOAT32 must be among them
 *   step()            states are n_state_slots arrays, each in its
 *                     args->state_dtypes[k]
 * FLOAT16 state is not part of the contract: its range (65504) cannot hold
 * Adam's second moment of ordinary gradients nor its 1e-8 epsilon scale. */
typedef struct {
  const char *name;
  const char *device;
  unsigned rank;
  const char *description;
  const MixprecHParamSpecV1 *hparams;
  unsigned n_hparams;
  unsigned n_state_slots;      /* values of state per element */
  const char *const *state_names;
  unsigned state_dtype_mask;
  int (*step) (const MixprecOptimizerStepV2 *args,
               float                        *master,
               const void                   *grad,
               void *const                  *states,
               void                         *working,
               size_t                        n,
               char                         *errbuf,
               size_t                        errbuf_len);
  void *reserved[8];
} MixprecOptimizerV2;

/* Revision 3 (ABI 1.4): state slots stored in fewer bits with a scale per
 * block, and masters kept in 16 bits beside the bfloat16 working copy.
 *
 * How one state slot is stored. The scaled and quantized formats keep one
 * FP32 scale per block of MixprecOptimizerStepV3.block_size elements;
 * blocks start at element 0 of the call, and the library cuts calls at
 * block boundaries (only the last block of a call may be short, and it is
 * then a whole block: the end of a unit of parameters or of a rank's
 * slice of it). A value is scale * decode (stored):
 *   FLOAT32, BFLOAT16   revision 2's slots, no scale
 *   *_SCALED            the dtype's value; the block's scale is
 *                       max (absmax, 1e-12) divided by the dtype's largest
 *                       finite value for FLOAT16 (65504) and FLOAT8_E4M3
 *                       (448), and not divided for BFLOAT16 (its largest
 *                       value, ~3.4e38, would leave small blocks' scales
 *                       subnormal); each element is x / scale rounded to
 *                       nearest even, saturating
 *   INT8_DYNAMIC        one byte, an index into the 256-value dynamic map
 *                       (signed map for a slot of state_signed_mask,
 *                       unsigned otherwise); the scale is
 *                       max (absmax, 1e-12); x / scale goes to the nearest
 *                       map value, ties to the larger
 *   INT4_DYNAMIC        4-bit indices, two per byte, element 2j in the low
 *                       nibble of byte j (blocks are then even); signed
 *                       slots use the 16-value dynamic map (3 exponent
 *                       bits), unsigned slots the linear map 1/16 .. 1
 * The maps and rounding are those of the widely used 8-bit and 4-bit
 * optimizers; docs/reference/optimizer-states.md lists them. Every format
 * is decoded to FP32, updated by the same FP32 arithmetic as a FLOAT32
 * slot and encoded again in the same pass. */
typedef enum {
  MIXPREC_PLUGIN_STATE_FLOAT32 = 0,
  MIXPREC_PLUGIN_STATE_BFLOAT16 = 1,
  MIXPREC_PLUGIN_STATE_FLOAT16_SCALED = 2,
  MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED = 3,
  MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED = 4,
  MIXPREC_PLUGIN_STATE_INT8_DYNAMIC = 5,
  MIXPREC_PLUGIN_STATE_INT4_DYNAMIC = 6,
} MixprecPluginStateFormat;

/* How the parameter's FP32 value is kept.
 *   FLOAT32    master[] (revision 1's contract: NULL means the parameter
 *              is read from and written to working[])
 *   REMAINDER  master is NULL; working[] is bfloat16 and master_extra
 *              holds an int16 per element: the FP32 value's bit pattern is
 *              the working copy's high half joined with the remainder's
 *              low half, the high half one lower where the remainder is
 *              negative. Exact both ways; the working copy is the FP32
 *              value rounded to nearest, ties (low half 0x8000) away from
 *              zero: a 16-bit remainder cannot keep ties to even.
 *   KAHAN      master is NULL; working[] is bfloat16 and master_extra a
 *              bfloat16 compensation per element: the rounding error of
 *              the last write, added back before the next (Kahan
 *              summation of the updates). */
typedef enum {
  MIXPREC_PLUGIN_MASTER_FLOAT32 = 0,
  MIXPREC_PLUGIN_MASTER_REMAINDER = 1,
  MIXPREC_PLUGIN_MASTER_KAHAN = 2,
} MixprecPluginMasterFormat;

/* The arguments of a V3 step(): a whole MixprecOptimizerStepV2 (its
 * base.struct_size is sizeof (MixprecOptimizerStepV3) of the caller), then
 * the formats. state_dtypes is filled for FLOAT32 and BFLOAT16 slots and
 * otherwise names the stored dtype where there is one; a V3 plugin reads
 * state_formats. */
typedef struct {
  MixprecOptimizerStepV2 v2;
  const MixprecPluginStateFormat *state_formats;   /* n_state_slots */
  /* n_state_slots pointers: the scale of the call's first block, for the
   * scaled and quantized formats; NULL for the others. Written in place. */
  float *const *state_scales;
  unsigned block_size;         /* elements per scale block: a power of two,
                                  32 .. 4096; 0 when no slot is scaled */
  MixprecPluginMasterFormat master_format;
  void *master_extra;          /* REMAINDER: int16[n]; KAHAN: bfloat16[n]; else NULL */
  /* ABI 1.6: per-tensor numerics measured in this pass (see
   * MixprecOptimizerNumericsV1), or NULL. The library sets it only for an
   * optimizer whose numerics_master_mask has this call's master_format and
   * only when every slot is FLOAT32 or BFLOAT16. A plugin reads these
   * fields only when base.struct_size covers them: a library of ABI 1.4
   * or 1.5 passes the struct up to master_extra. */
  struct MixprecOptimizerNumericsV1 *numerics;
  unsigned n_numerics;         /* runs of numerics[], which tile [0, n) */
  /* The working format's precision p (significand bits with the
   * implicit one: 8 for bfloat16, 11 for float16) and smallest normal
   * exponent emin, for the stale count. */
  int working_precision;
  int working_emin;
} MixprecOptimizerStepV3;

/* What an optimizer measures of one run of its call when the library
 * asks (ABI 1.6), exactly as the library would itself: integers, and sums
 * in a fixed order, so the numbers do not depend on who measured.
 *
 * The gradient is read as the call reads it, before grad_factor; a
 * value's magnitude a is its FP32 bits without the sign (float16 and
 * bfloat16 widened exactly). a >= 0x7f800000 is non-finite; otherwise
 * a != 0 is non-zero, and of those a < grad_under underflows, a >=
 * grad_over overflows, and grad_amax is the largest a.
 *
 * With a master (master != NULL), old is the master before the update and
 * now after it, d = now - old in FP32, and element k of the run (k from
 * 0) adds d * d to lane k % 8 of one sum and old * old to lane k % 8 of
 * another, each product and sum rounded to FP32 (no fused multiply-add);
 * the eight lanes are then added in double as ((0 + 1) + (2 + 3)) +
 * ((4 + 5) + (6 + 7)). With a working copy too, an element is stale when
 * the working value w written by the call is finite and |d| * 2^p <
 * 2^max(e, emin) in FP32, where e is w's exponent (p and emin:
 * MixprecOptimizerStepV3.working_precision and working_emin): the update
 * was less than half an ulp of w. */
typedef struct MixprecOptimizerNumericsV1 {
  /* In: the run is elements [end of the previous run (0 for the first),
   * end) of the call; the last ends at n. */
  size_t end;
  uint32_t grad_under;         /* in: FP32 bits of a magnitude */
  uint32_t grad_over;          /* in: FP32 bits of a magnitude */
  /* Out: written by the plugin. */
  uint64_t nonfinite;
  uint64_t nonzero;
  uint64_t under;
  uint64_t over;
  uint32_t grad_amax;
  uint32_t measured;           /* 1 once the plugin filled this record */
  uint64_t stale;              /* 0 without a master or a working copy */
  double delta_sumsq;          /* 0 without a master */
  double old_sumsq;
} MixprecOptimizerNumericsV1;

/* An optimizer of revision 3, registered with
 * MixprecPluginHostV1.register_optimizer_v3. As MixprecOptimizerV2, and:
 *   state_format_mask   bit (1 << MixprecPluginStateFormat) per format the
 *                       slots may have; FLOAT32 must be among them
 *   master_format_mask  bit (1 << MixprecPluginMasterFormat) per master
 *                       format; FLOAT32 must be among them
 *   state_signed_mask   bit k when slot k may be negative (Adam's first
 *                       moment) and so takes a signed map
 * state_dtype_mask keeps revision 2's meaning for FLOAT32 and BFLOAT16. */
typedef struct {
  const char *name;
  const char *device;
  unsigned rank;
  const char *description;
  const MixprecHParamSpecV1 *hparams;
  unsigned n_hparams;
  unsigned n_state_slots;
  const char *const *state_names;
  unsigned state_dtype_mask;
  unsigned state_format_mask;
  unsigned master_format_mask;
  unsigned state_signed_mask;
  int (*step) (const MixprecOptimizerStepV3 *args,
               float                        *master,
               const void                   *grad,
               void *const                  *states,
               void                         *working,
               size_t                        n,
               char                         *errbuf,
               size_t                        errbuf_len);
  /* ABI 1.6, in revision 3's first reserved word (zero in an older
   * plugin): bit (1 << MixprecPluginMasterFormat) per master format whose
   * calls step() measures when MixprecOptimizerStepV3.numerics is set,
   * within master_format_mask; 0: the library measures around the call. */
  uintptr_t numerics_master_mask;
  void *reserved[7];
} MixprecOptimizerV3;

/* ------------------------------------------------------------ communication */

typedef enum {
  MIXPREC_PLUGIN_REDUCE_SUM = 0,
  MIXPREC_PLUGIN_REDUCE_MAX = 1,
} MixprecPluginReduceOp;

/* Flags of the collectives. */
enum {
  /* reduce_scatter and all_reduce: add the reduction onto what recv already
   * holds, as its first term: recv = ((recv + x_0) + x_1) + ... (for MAX,
   * recv joins the comparison the same way). The engine folds micro-steps
   * this way so the order of additions is the same at any world size.
   * all_reduce: recv must hold the same values on every rank (as it does
   * when it holds earlier all_reduce results); a communicator may take the
   * first term from any one rank's copy. */
  MIXPREC_PLUGIN_COMM_ACCUMULATE = 1u << 0,
  /* reduce_scatter and all_reduce: recv is FP32 whatever dtype send has;
   * the FP32 sum is stored without rounding to dtype. Gradients travel in
   * the communication dtype but land in an FP32 accumulation buffer. */
  MIXPREC_PLUGIN_COMM_RECV_FP32 = 1u << 1,
};

/* The rendezvous the library offers a communicator at init(): small control
 * messages between all ranks, e.g. to swap transport addresses. Both calls
 * are collective and block until every rank has called them or the timeout
 * passes. */
typedef struct {
  size_t struct_size;
  unsigned rank;
  unsigned world_size;
  unsigned local_rank;         /* rank among the processes of this host */
  unsigned local_world_size;
  void *ctx;                   /* pass back unchanged */
  /* out receives world_size * len bytes: rank r's bytes at r * len. */
  int (*all_gather) (void       *ctx,
                     const void *in,
                     size_t      len,
                     void       *out,
                     char       *errbuf,
                     size_t      errbuf_len);
  int (*barrier) (void   *ctx,
                  char   *errbuf,
                  size_t  errbuf_len);
  void *reserved[8];
} MixprecBootstrapV1;

/* Arguments of a communicator's init(). */
typedef struct {
  size_t struct_size;
  const MixprecBootstrapV1 *bootstrap;   /* valid during init() only */
  unsigned timeout_ms;         /* a peer silent this long is a failure */
  void *device_stream;         /* device communicators: the engine's stream */
} MixprecCommInitV1;

/* A communicator over one group of ranks.
 *
 * Determinism is part of the contract: a SUM is formed in rank order,
 * ((x_0 + x_1) + x_2) + ..., in FP32 for float16 and bfloat16 data (rounded
 * to nearest even once, at the end), and every rank receives the same bits.
 * A MAX compares in the same order and keeps the larger value; a NaN wins
 * over any number (the first NaN in rank order when there are several).
 * Buffers are in the memory kind of @device ("cpu": host memory).
 *
 * Every rank calls the same collectives in the same order with the same
 * counts, dtypes and roots. Calls on one communicator come from one thread
 * at a time, except abort().
 *
 * Each collective takes an optional request out-pointer: NULL makes the call
 * blocking; otherwise the call starts the operation and returns a request
 * the caller must pass to wait() exactly once (test() may be called before).
 * Several requests may be outstanding at once; they complete in any order.
 * Counts are in elements. On failure a function returns a
 * MixprecPluginStatus and writes a sentence naming the peer rank into
 * errbuf; a peer whose failure the transport reports is
 * MIXPREC_PLUGIN_ERR_PEER_FAILED, one that stays silent longer than the
 * timeout is MIXPREC_PLUGIN_ERR_TIMEOUT: never a hang. */
typedef struct {
  const char *name;            /* "ucx" */
  const char *device;          /* memory the buffers live in: "cpu", "cuda" */
  unsigned rank;               /* the highest rank wins among equal names */
  const char *description;
  unsigned dtype_mask;         /* bit (1 << MixprecPluginDType) per dtype */
  int (*init) (const MixprecCommInitV1 *args,
               void                   **comm,
               char                    *errbuf,
               size_t                   errbuf_len);
  /* recv[i] = op over ranks of send[i]; send == recv is allowed (not with
   * RECV_FP32 for a narrower dtype). */
  int (*all_reduce) (void                 *comm,
                     const void           *send,
                     void                 *recv,
                     size_t                count,
                     MixprecPluginDType    dtype,
                     MixprecPluginReduceOp op,
                     unsigned              flags,
                     void                **request,
                     char                 *errbuf,
                     size_t                errbuf_len);
  /* send holds world_size * count elements; rank r receives in recv (count
   * elements) the reduction of every rank's send[r * count ...]. recv may
   * be exactly send + rank * count (in place) when neither ACCUMULATE nor,
   * for a narrower dtype, RECV_FP32 is set; it overlaps send nowhere else. */
  int (*reduce_scatter) (void                 *comm,
                         const void           *send,
                         void                 *recv,
                         size_t                count,
                         MixprecPluginDType    dtype,
                         MixprecPluginReduceOp op,
                         unsigned              flags,
                         void                **request,
                         char                 *errbuf,
                         size_t                errbuf_len);
  /* Each rank contributes count elements; recv (world_size * count) gets
   * rank r's at r * count. send may point into recv at rank * count. */
  int (*all_gather) (void              *comm,
                     const void        *send,
                     void              *recv,
                     size_t             count,
                     MixprecPluginDType dtype,
                     void             **request,
                     char              *errbuf,
                     size_t             errbuf_len);
  int (*broadcast) (void              *comm,
                    void              *buf,
                    size_t             count,
                    MixprecPluginDType dtype,
                    unsigned           root,
                    void             **request,
                    char              *errbuf,
                    size_t             errbuf_len);
  int (*barrier) (void   *comm,
                  void  **request,
                  char   *errbuf,
                  size_t  errbuf_len);
  /* Advances the request without blocking: *done = 1 once it finished,
   * successfully or not (then wait() returns at once with its status).
   * Returns MIXPREC_PLUGIN_OK unless the test itself could not run. */
  int (*test) (void   *comm,
               void   *request,
               int    *done,
               char   *errbuf,
               size_t  errbuf_len);
  /* Waits for the request and releases it; its status is the operation's. */
  int (*wait) (void   *comm,
               void   *request,
               char   *errbuf,
               size_t  errbuf_len);
  /* Makes every pending and future operation fail quickly (a peer failed).
   * Safe to call from another thread while one waits. */
  void (*abort) (void *comm);
  /* Releases the communicator; pending requests must have been waited for. */
  int (*finalize) (void   *comm,
                   char   *errbuf,
                   size_t  errbuf_len);
  void *reserved[8];
} MixprecCommV1;

/* Revision 2 (ABI 1.5): a whole MixprecCommV1 first, then an all-to-all,
 * registered with MixprecPluginHostV1.register_comm_v2. The library
 * reaches every V1 function through &comm->base; base.reserved must be
 * zero as in V1. A communicator of revision 1 has no all-to-all: the
 * engine then refuses what needs one (ZeRO++'s quantized gradients),
 * naming the communicator.
 *
 *   all_to_all  @send holds world_size runs of @bytes bytes; run r goes
 *               to rank r. @recv (world_size * @bytes) receives at
 *               r * @bytes the run rank r sent to this rank, this rank's
 *               own run included. The bytes move unchanged (codes and
 *               scales of a quantized buffer: no dtype, no reduction).
 *               @send and @recv do not overlap. Non-blocking with a
 *               request, failures and timeouts name the peer, and
 *               abort() ends it, as the V1 collectives.
 *
 * ABI 1.7, in revision 2's first reserved word (NULL in an older plugin;
 * the library then refuses what needs it, naming the communicator):
 *
 *   all_to_all_v  all_to_all with a size of its own for each peer, so a
 *               collective over part of the world (a group of ranks, one
 *               rank per host) moves bytes only between the ranks it
 *               names: send_bytes[r] bytes at @send + send_offsets[r] go
 *               to rank r, and recv_bytes[r] bytes from rank r land at
 *               @recv + recv_offsets[r]. A size of 0 sends or expects
 *               nothing from that rank; this rank's own run is copied.
 *               Sizes agree pairwise (rank a's send_bytes[b] is rank b's
 *               recv_bytes[a]; a peer that sends more than expected is a
 *               failure naming it). Every rank calls it, also one that
 *               moves nothing. The four arrays (world_size entries each)
 *               are read during the call only; the runs of @recv do not
 *               overlap each other or @send's. Non-blocking with a
 *               request, as all_to_all.
 */
typedef struct {
  MixprecCommV1 base;
  int (*all_to_all) (void       *comm,
                     const void *send,
                     void       *recv,
                     size_t      bytes,
                     void      **request,
                     char       *errbuf,
                     size_t      errbuf_len);
  int (*all_to_all_v) (void         *comm,
                       const void   *send,
                       const size_t *send_bytes,
                       const size_t *send_offsets,
                       void         *recv,
                       const size_t *recv_bytes,
                       const size_t *recv_offsets,
                       void        **request,
                       char         *errbuf,
                       size_t        errbuf_len);
  void *reserved[7];
} MixprecCommV2;

/* ------------------------------------------------------------ devices */

/* Directions of MixprecDeviceV1.copy(). */
typedef enum {
  MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE = 0,
  MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST = 1,
  MIXPREC_PLUGIN_COPY_DEVICE_TO_DEVICE = 2,
} MixprecPluginCopyKind;

/* Arguments of a device's open(). Filled by the library. */
typedef struct {
  size_t struct_size;
  int ordinal;                 /* the device to use; -1: the plugin's default
                                  (for "cuda": LOCAL_RANK, else 0). Across
                                  ranks the engine passes the bootstrap's
                                  local rank modulo the probed count. */
} MixprecDeviceOpenV1;

/* One range of the multi-tensor sum of squares: n elements of dtype in
 * device memory, cut into blocks of block_size elements (the last one
 * shorter). */
typedef struct {
  const void *data;
  MixprecPluginDType dtype;
  size_t n;
} MixprecDeviceRangeV1;

/* A device: memory, copies, one stream, events, and the element-wise
 * kernels of the engine's step pipeline. The library opens at most one
 * handle per engine and calls it from one thread at a time.
 *
 * Ordering: every copy and kernel is queued on the handle's one stream
 * (get_stream()) and runs in call order; a function returns once the work
 * is queued, except where it says it waits. Kernels read and write device
 * memory only. An error of an asynchronous launch may surface at a later
 * call; every call that fails writes a sentence naming the runtime call
 * and its error into errbuf.
 *
 * The kernels produce the same bits as the library's CPU kernels:
 *   convert      dst[i] = src[i] converted (as mixprec_convert_array(), with
 *                stochastic-rounding bits drawn from (seed, first_index + i):
 *                word first_index + i of the stream, or for bf16 half of
 *                word (first_index + i) / 2, as that function describes)
 *   accumulate   dst[i] = first ? round(src[i]) : round(dst[i] + src[i]),
 *                the sum formed in FP32 and rounded to nearest even once
 *   scale        buf[i] = round(buf[i] * factor), the product in FP32
 *   sumsq_blocks for each range in order, for each block of it in order, one
 *                double: the squares (in double) of the block's values added
 *                into eight lanes (element i into lane i % 8, in order),
 *                the lanes combined as ((0+1)+(2+3))+((4+5)+(6+7));
 *                written to consecutive entries of block_sums (device)
 *   sum_ordered  *out (device) = ((0 + v[0]) + v[1]) + ... + v[n-1], in double
 */
typedef struct {
  const char *name;            /* "cuda" */
  unsigned rank;               /* the highest rank wins among equal names */
  const char *description;
  /* Whether a device is usable here: MIXPREC_PLUGIN_OK with *n_devices > 0,
   * or another status with the reason in errbuf (no driver, no device...).
   * Cheap, creates no context beyond what the runtime needs to count. */
  int (*probe) (int    *n_devices,
                char   *errbuf,
                size_t  errbuf_len);
  int (*open) (const MixprecDeviceOpenV1 *args,
               void                    **device,
               char                     *errbuf,
               size_t                    errbuf_len);
  /* Waits for the stream and releases the handle (its allocations must
   * have been freed). */
  int (*close) (void   *device,
                char   *errbuf,
                size_t  errbuf_len);
  /* One line about the open device: model, ordinal, capability, memory. */
  int (*describe) (void   *device,
                   char   *out,
                   size_t  out_len);
  /* The stream every call is queued on (a cudaStream_t for "cuda"); comm
   * plugins of this device and device optimizers receive it. */
  void *(*get_stream) (void *device);
  /* Device memory, aligned to at least 256 bytes; alloc of 0 bytes gives
   * NULL. free() waits for the stream first. */
  int (*alloc) (void   *device,
                size_t  bytes,
                void  **ptr,
                char   *errbuf,
                size_t  errbuf_len);
  int (*free) (void   *device,
               void   *ptr,
               char   *errbuf,
               size_t  errbuf_len);
  int (*memset_zero) (void   *device,
                      void   *ptr,
                      size_t  bytes,
                      char   *errbuf,
                      size_t  errbuf_len);
  /* Host memory may be pageable. A copy from the host returns once the host
   * buffer may be reused; a copy to the host returns once the data is
   * there (it waits for the stream). */
  int (*copy) (void                 *device,
               void                 *dst,
               const void           *src,
               size_t                bytes,
               MixprecPluginCopyKind kind,
               char                 *errbuf,
               size_t                errbuf_len);
  /* Waits until everything queued so far has run. */
  int (*synchronize) (void   *device,
                      char   *errbuf,
                      size_t  errbuf_len);
  /* Events mark a point of the stream: record() marks the work queued so
   * far; query() sets *done without waiting; wait() blocks the host. */
  int (*event_create) (void   *device,
                       void  **event,
                       char   *errbuf,
                       size_t  errbuf_len);
  int (*event_record) (void   *device,
                       void   *event,
                       char   *errbuf,
                       size_t  errbuf_len);
  int (*event_query) (void   *device,
                      void   *event,
                      int    *done,
                      char   *errbuf,
                      size_t  errbuf_len);
  int (*event_wait) (void   *device,
                     void   *event,
                     char   *errbuf,
                     size_t  errbuf_len);
  int (*event_destroy) (void   *device,
                        void   *event,
                        char   *errbuf,
                        size_t  errbuf_len);
  /* The kernels (see above). */
  int (*convert) (void                 *device,
                  const void           *src,
                  MixprecPluginDType    src_dtype,
                  void                 *dst,
                  MixprecPluginDType    dst_dtype,
                  size_t                n,
                  MixprecPluginRounding rounding,
                  uint64_t              seed,
                  uint64_t              first_index,
                  char                 *errbuf,
                  size_t                errbuf_len);
  int (*accumulate) (void              *device,
                     void              *dst,
                     MixprecPluginDType dst_dtype,
                     const void        *src,
                     MixprecPluginDType src_dtype,
                     size_t             n,
                     int                first,
                     char              *errbuf,
                     size_t             errbuf_len);
  int (*scale) (void              *device,
                void              *buf,
                MixprecPluginDType dtype,
                size_t             n,
                float              factor,
                char              *errbuf,
                size_t             errbuf_len);
  /* @ranges is host memory, read before the call returns. */
  int (*sumsq_blocks) (void                       *device,
                       const MixprecDeviceRangeV1 *ranges,
                       unsigned                    n_ranges,
                       size_t                      block_size,
                       double                     *block_sums,
                       char                       *errbuf,
                       size_t                      errbuf_len);
  int (*sum_ordered) (void         *device,
                      const double *values,
                      size_t        n,
                      double       *out,
                      char         *errbuf,
                      size_t        errbuf_len);
  void *reserved[16];
} MixprecDeviceV1;

/* Revision 2 (ABI 1.2): a whole MixprecDeviceV1 first, then page-locked
 * ("pinned") host memory, registered with
 * MixprecPluginHostV1.register_device_v2. The library reaches every V1
 * function through &device->base; base.reserved must be zero as in V1.
 *
 * Pinned memory is host memory the device copies from and to at full
 * bandwidth (for "cuda": cudaHostAlloc with cudaHostAllocPortable). The
 * engine keeps the buffers of zero_optimization.offload_optimizer's
 * transfers there when pin_memory is true. A device of revision 1 has
 * none: the engine then uses ordinary (pageable) host memory.
 *
 *   host_alloc  @bytes of pinned host memory in *ptr, aligned to at least
 *               64 bytes, contents unspecified; 0 bytes gives NULL.
 *   host_free   releases a host_alloc() pointer (NULL: nothing); waits for
 *               the stream first, since a copy queued on it may still read
 *               or write the memory.
 */
typedef struct {
  MixprecDeviceV1 base;
  int (*host_alloc) (void   *device,
                     size_t  bytes,
                     void  **ptr,
                     char   *errbuf,
                     size_t  errbuf_len);
  int (*host_free) (void   *device,
                    void   *ptr,
                    char   *errbuf,
                    size_t  errbuf_len);
  void *reserved[16];
} MixprecDeviceV2;

/* Revision 3 (ABI 1.3): a whole MixprecDeviceV2 first, then the float8
 * casts of FP8 working copies, registered with
 * MixprecPluginHostV1.register_device_v3. The library reaches every V1 and
 * V2 function through &device->base; base.reserved and base.base.reserved
 * must be zero. An engine with fp8.enabled refuses a device of revision 1
 * or 2 (mixprec.json(5), the fp8 section).
 *
 * Both kernels read @n FP32 values of device memory and write device
 * memory, with the bits of the library's CPU casts (mixprec-fp8.h):
 *
 *   fp8_cast  dst[i] = the float8 (@fp8_dtype: FLOAT8_E4M3 or FLOAT8_E5M2)
 *             of src[i] * scale, the product in FP32 rounded to nearest
 *             even, saturating to ±max when @saturate is non-zero (NaN
 *             stays NaN), else overflow as mixprec_fp8_quantize()
 *             describes; @dst NULL: no cast, the amax only. @amax, when
 *             not NULL, is one float of device memory holding a running
 *             maximum: *amax = max (*amax, |src[i]|) over the inputs
 *             before scaling, NaN skipped. Non-negative floats order as
 *             their bit patterns, so an integer maximum of the bits (an
 *             atomic one) gives the same float whatever order the threads
 *             run in. The library zeroes the slot before the first call.
 *   mx_cast   OCP MX v1.0 block scaling as mixprec_mx_quantize(): blocks
 *             of @block_size consecutive elements (the last one may be
 *             shorter), one E8M0 byte per block in scales[b] (ceil (n /
 *             block_size) bytes), the elements a saturating cast of
 *             src[i] / 2^(scales[b] - 127); @elem_dtype FLOAT8_E4M3 or
 *             FLOAT8_E5M2.
 */
typedef struct {
  MixprecDeviceV2 base;
  int (*fp8_cast) (void              *device,
                   MixprecPluginDType fp8_dtype,
                   int                saturate,
                   float              scale,
                   const float       *src,
                   uint8_t           *dst,
                   size_t             n,
                   float             *amax,
                   char              *errbuf,
                   size_t             errbuf_len);
  int (*mx_cast) (void              *device,
                  MixprecPluginDType elem_dtype,
                  unsigned           block_size,
                  const float       *src,
                  uint8_t           *dst,
                  uint8_t           *scales,
                  size_t             n,
                  char              *errbuf,
                  size_t             errbuf_len);
  void *reserved[16];
} MixprecDeviceV3;

/* ------------------------------------------------------------ plugins */

/* Severities of a plugin's log messages, mapped onto GLib's levels (an
 * error of a call is not logged: it is the call's status and errbuf). */
typedef enum {
  MIXPREC_PLUGIN_LOG_WARNING = 0,    /* something is wrong but the plugin goes on */
  MIXPREC_PLUGIN_LOG_MESSAGE = 1,    /* worth a user's attention */
  MIXPREC_PLUGIN_LOG_INFO = 2,       /* what the plugin chose (a transport, kernels) */
  MIXPREC_PLUGIN_LOG_DEBUG = 3,      /* for whoever debugs the plugin */
} MixprecPluginLogLevel;

/* The logger the library hands a plugin at init() (NCCL's net plugins get
 * one the same way): it writes to GLib's structured log with the plugin's
 * name in the field MIXPREC_PLUGIN and the log domain "Mixprec-NAME", so
 * G_MESSAGES_DEBUG=Mixprec-NAME shows one plugin's debug messages. @file,
 * @line and @func say where the message comes from (may be NULL/0); the
 * message is a printf() format. @log_data is MixprecPluginHostV1.log_data.
 * Unlike the host table, the logger and its data stay valid while the
 * module is loaded, from any thread: a plugin keeps them (see
 * MIXPREC_PLUGIN_DEFINE, which does). */
typedef void (*MixprecPluginLogFunc) (void                 *log_data,
                                      MixprecPluginLogLevel level,
                                      const char           *file,
                                      int                   line,
                                      const char           *func,
                                      const char           *format,
                                      ...)
#if defined(__GNUC__)
  __attribute__ ((format (printf, 6, 7)))
#endif
  ;

/* What the library offers a plugin during init(). The table is valid only
 * until init() returns: a plugin must not keep it. A registration the
 * library refuses makes the whole plugin fail to load, even when init()
 * then returns MIXPREC_PLUGIN_OK. */
typedef struct MixprecPluginHostV1 MixprecPluginHostV1;
struct MixprecPluginHostV1 {
  size_t struct_size;
  unsigned abi_major;          /* the library's plugin ABI */
  unsigned abi_minor;
  void *host_data;             /* pass back unchanged */
  /* Registers a feature; the vtable must stay valid while the module is
   * loaded (modules are never unloaded). Returns MIXPREC_PLUGIN_OK or an
   * error with a sentence in errbuf. */
  int (*register_optimizer) (MixprecPluginHostV1      *host,
                             const MixprecOptimizerV1 *optimizer,
                             char                     *errbuf,
                             size_t                    errbuf_len);
  int (*register_comm) (MixprecPluginHostV1 *host,
                        const MixprecCommV1 *comm,
                        char                *errbuf,
                        size_t               errbuf_len);
  int (*register_device) (MixprecPluginHostV1   *host,
                          const MixprecDeviceV1 *device,
                          char                  *errbuf,
                          size_t                 errbuf_len);
  /* ABI 1.1: registers a MixprecOptimizerV2. A plugin checks that
   * struct_size covers this field (and that it is not NULL) before it
   * calls it; a library of ABI 1.0 leaves it zero, inside reserved space. */
  int (*register_optimizer_v2) (MixprecPluginHostV1      *host,
                                const MixprecOptimizerV2 *optimizer,
                                char                     *errbuf,
                                size_t                    errbuf_len);
  /* ABI 1.2: registers a MixprecDeviceV2. A plugin checks that struct_size
   * covers this field (and that it is not NULL) before it calls it, and
   * otherwise registers &device->base with register_device. */
  int (*register_device_v2) (MixprecPluginHostV1   *host,
                             const MixprecDeviceV2 *device,
                             char                  *errbuf,
                             size_t                 errbuf_len);
  /* ABI 1.3: registers a MixprecDeviceV3, checked by a plugin as
   * register_device_v2 is (falling back to register_device_v2 with
   * &device->base, then register_device). */
  int (*register_device_v3) (MixprecPluginHostV1   *host,
                             const MixprecDeviceV3 *device,
                             char                  *errbuf,
                             size_t                 errbuf_len);
  /* Library 1.1 (in plugin ABI 1.3's reserved space, so a plugin checks
   * that struct_size covers it and that it is not NULL; a library 1.0
   * leaves it zero): the plugin's logger and what to pass it. */
  MixprecPluginLogFunc log;
  void *log_data;
  /* ABI 1.4: registers a MixprecOptimizerV3, checked by a plugin as
   * register_device_v2 is (falling back to register_optimizer_v2 with a
   * revision 2 vtable). */
  int (*register_optimizer_v3) (MixprecPluginHostV1      *host,
                                const MixprecOptimizerV3 *optimizer,
                                char                     *errbuf,
                                size_t                    errbuf_len);
  /* ABI 1.5: registers a MixprecCommV2, checked by a plugin as
   * register_device_v2 is (falling back to register_comm with
   * &comm->base, which has no all-to-all). */
  int (*register_comm_v2) (MixprecPluginHostV1 *host,
                           const MixprecCommV2 *comm,
                           char                *errbuf,
                           size_t               errbuf_len);
  void *reserved[7];
};

/* The static description a plugin returns from its entry point. abi_major
 * and abi_minor stay the first two fields in every revision: the library
 * reads nothing else before it has checked them. */
typedef struct {
  unsigned abi_major;          /* MIXPREC_PLUGIN_ABI_VERSION_MAJOR at build time */
  unsigned abi_minor;
  const char *name;            /* "optim-adamw" */
  const char *description;
  const char *version;
  const char *license;         /* SPDX identifier */
  const char *origin;          /* where it comes from (URL or package) */
  /* Registers the plugin's features. Returns MIXPREC_PLUGIN_OK, or another
   * status with a sentence in errbuf: then the plugin is reported as failed
   * and none of its features are used. */
  int (*init) (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len);
  void *reserved[8];
} MixprecPluginDesc;

/* The type of the entry point `mixprec_plugin_NAME_get_desc`. */
typedef const MixprecPluginDesc *(*MixprecPluginGetDescFunc) (void);

/* ------------------------------------------------------------ defining a plugin */

#if defined(__GNUC__)
# define MIXPREC_PLUGIN_HIDDEN __attribute__((visibility ("hidden")))
#else
# define MIXPREC_PLUGIN_HIDDEN
#endif

/* Whether this header has MIXPREC_PLUGIN_DEFINE and MIXPREC_PLUGIN_LOG
 * (libmixprec 1.1; the plugin ABI they produce is 1.3, as before). */
#define MIXPREC_PLUGIN_HAVE_DEFINE 1

/* The logger of the plugin being compiled, kept by MIXPREC_PLUGIN_DEFINE
 * (one per plugin module, hidden from every other module); NULL when the
 * library offered none. */
extern MIXPREC_PLUGIN_HIDDEN MixprecPluginLogFunc _mixprec_plugin_log_func;
extern MIXPREC_PLUGIN_HIDDEN void *_mixprec_plugin_log_data;

/* What init() of a MIXPREC_PLUGIN_DEFINE plugin does first: keeps the
 * logger the library offers, when the host table is long enough to hold
 * one (a library 1.0 leaves the slot zero). */
static inline void
_mixprec_plugin_keep_logger (const MixprecPluginHostV1 *host)
{
  if (host != NULL &&
      host->struct_size >= offsetof (MixprecPluginHostV1, log_data) + sizeof host->log_data &&
      host->log != NULL)
    {
      _mixprec_plugin_log_data = host->log_data;
      _mixprec_plugin_log_func = host->log;
    }
}

/**
 * MIXPREC_PLUGIN_LOG:
 * @level: a #MixprecPluginLogLevel
 * @...: a printf() format and its arguments
 *
 * Logs a message of a plugin defined with MIXPREC_PLUGIN_DEFINE() through
 * the logger the library handed it at init(), with the source location;
 * nothing when the library offered no logger. Usable from any file of the
 * plugin and any thread, once init() has run.
 *
 * Since: 1.1
 */
#define MIXPREC_PLUGIN_LOG(level, ...) \
  ((_mixprec_plugin_log_func != NULL) \
   ? _mixprec_plugin_log_func (_mixprec_plugin_log_data, (level), __FILE__, __LINE__, \
                               __func__, __VA_ARGS__) \
   : (void) 0)

/**
 * MIXPREC_PLUGIN_DEFINE:
 * @symbol: the plugin's name as a C identifier, dashes turned into
 *   underscores (`optim_adamw` for the file mixprec-optim-adamw.so)
 * @name: the plugin's name, a string ("optim-adamw")
 * @description: (nullable): one sentence about the plugin
 * @init: the plugin's init function, an `int (*) (MixprecPluginHostV1 *,
 *   char *errbuf, size_t errbuf_len)` registering its features
 * @version: (nullable): the plugin's version, e.g. PACKAGE_VERSION
 * @license: (nullable): an SPDX license identifier
 * @origin: (nullable): where the plugin comes from (a URL or package)
 *
 * Defines everything a plugin file exports, the way GST_PLUGIN_DEFINE()
 * does for GStreamer: a static #MixprecPluginDesc of this header's plugin
 * ABI, its entry point `mixprec_plugin_<symbol>_get_desc` (exported), and
 * an init() that keeps the library's logger for MIXPREC_PLUGIN_LOG()
 * before it calls @init. Use it once, at file scope, in one file of the
 * plugin:
 *
 * |[<!-- language="C" -->
 * MIXPREC_PLUGIN_DEFINE (optim_example, "optim-example",
 *                        "an example optimizer", example_init,
 *                        "1.0", "LGPL-2.1-or-later", "https://example.org")
 * ]|
 *
 * Since: 1.1
 */
#define MIXPREC_PLUGIN_DEFINE(symbol, name, description, init, version, license, origin) \
  MIXPREC_PLUGIN_HIDDEN MixprecPluginLogFunc _mixprec_plugin_log_func; \
  MIXPREC_PLUGIN_HIDDEN void *_mixprec_plugin_log_data; \
  static int \
  symbol##_plugin_init (MixprecPluginHostV1 *host, \
                        char                *errbuf, \
                        size_t               errbuf_len) \
  { \
    _mixprec_plugin_keep_logger (host); \
    return (init) (host, errbuf, errbuf_len); \
  } \
  static const MixprecPluginDesc symbol##_plugin_desc = { \
    MIXPREC_PLUGIN_ABI_VERSION_MAJOR, MIXPREC_PLUGIN_ABI_VERSION_MINOR, \
    (name), (description), (version), (license), (origin), \
    symbol##_plugin_init, { NULL } \
  }; \
  MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_##symbol##_get_desc (void); \
  const MixprecPluginDesc * \
  mixprec_plugin_##symbol##_get_desc (void) \
  { \
    return &symbol##_plugin_desc; \
  }

/**
 * MIXPREC_PLUGIN_DEFINE_FEATURE:
 * @symbol: as for MIXPREC_PLUGIN_DEFINE()
 * @name: as for MIXPREC_PLUGIN_DEFINE()
 * @description: as for MIXPREC_PLUGIN_DEFINE()
 * @register_func: the host table's entry for @vtable's struct, e.g.
 *   `register_comm` or `register_device_v3`
 * @vtable: the plugin's one feature, a static vtable
 * @version: as for MIXPREC_PLUGIN_DEFINE()
 * @license: as for MIXPREC_PLUGIN_DEFINE()
 * @origin: as for MIXPREC_PLUGIN_DEFINE()
 *
 * MIXPREC_PLUGIN_DEFINE() for the common plugin of one feature: its init()
 * registers @vtable through @register_func and returns what that answers.
 *
 * |[<!-- language="C" -->
 * MIXPREC_PLUGIN_DEFINE_FEATURE (comm_example, "comm-example", "an example communicator",
 *                                register_comm, example_comm,
 *                                "1.0", "LGPL-2.1-or-later", "https://example.org")
 * ]|
 *
 * Since: 1.1
 */
#define MIXPREC_PLUGIN_DEFINE_FEATURE(symbol, name, description, register_func, vtable, \
                                      version, license, origin) \
  static int \
  symbol##_register_feature (MixprecPluginHostV1 *host, \
                             char                *errbuf, \
                             size_t               errbuf_len) \
  { \
    return host->register_func (host, &(vtable), errbuf, errbuf_len); \
  } \
  MIXPREC_PLUGIN_DEFINE (symbol, name, description, symbol##_register_feature, \
                         version, license, origin)

#ifdef __cplusplus
}
#endif
