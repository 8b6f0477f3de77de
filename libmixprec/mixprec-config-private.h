/* mixprec-config-private.h — what the configuration files share: the
 * resolved settings, the list of problems found while reading a document,
 * and the strict JSON scanner that runs before json-glib. */
#pragma once

#include "mixprec.h"
#include "mixprec-json-read-private.h"

G_BEGIN_DECLS

/* Deeper documents are refused before json-glib, whose parser recurses
 * once per level, ever sees them. A real configuration nests about 4. */
#define _MIXPREC_CONFIG_MAX_DEPTH 64

/* A configuration is a few kilobytes; a bigger file is a mistake (or
 * /dev/zero), and reading it whole would only exhaust memory. */
#define _MIXPREC_CONFIG_MAX_FILE_SIZE (16 * 1024 * 1024)

typedef struct
{
  MixprecConfigError code;
  gchar *message;            /* "<path>: <rule>, got <value>" */
} MixprecConfigProblem;

typedef struct
{
  GPtrArray  *problems;      /* MixprecConfigProblem */
  GPtrArray  *warnings;      /* gchar*, no NULL terminator until the end */
  GArray     *warning_codes; /* MixprecConfigError of each warning, the code
                              * it becomes under mixprec.strict */
  GHashTable *reported;      /* paths already reported by the scanner */
  GHashTable *overridden;    /* paths an override wrote, with the objects it
                              * created on the way */
} MixprecConfigReport;

void _mixprec_config_report_init  (MixprecConfigReport *report);
void _mixprec_config_report_clear (MixprecConfigReport *report);
void _mixprec_config_report_error (MixprecConfigReport *report,
                                   MixprecConfigError   code,
                                   const gchar         *format,
                                   ...) G_GNUC_PRINTF (3, 4);
void _mixprec_config_report_warning (MixprecConfigReport *report,
                                     const gchar         *format,
                                     ...) G_GNUC_PRINTF (2, 3);
/* A warning that mixprec.strict turns into an error with @code. */
void _mixprec_config_report_warning_code (MixprecConfigReport *report,
                                          MixprecConfigError   code,
                                          const gchar         *format,
                                          ...) G_GNUC_PRINTF (3, 4);

/* mixprec.auto_precision (mixprec-engine-autoprec.c): which statistics
 * widen a parameter above @widen_above for @widen_patience measured steps
 * in a row, narrow it back below @narrow_below for @narrow_patience (0:
 * never), at most @max_widened_fraction of the parameters' elements
 * widened, to the dtypes of @widen_to (MixprecDType bits: 1 << dtype). */
typedef struct
{
  gboolean enabled;
  GStrv    watch;
  gdouble  widen_above;
  guint64  widen_patience;
  gdouble  narrow_below;
  guint64  narrow_patience;
  gdouble  max_widened_fraction;
  guint    widen_to;
} _MixprecAutoPrecSettings;

/* The typed settings behind a MixprecConfig, every default filled in. */
typedef struct
{
  MixprecPrecisionMode mode;

  /* fp16 */
  gboolean fp16_enabled;
  gdouble  loss_scale;
  gint     initial_scale_power;
  guint    loss_scale_window;
  guint    hysteresis;
  gboolean consecutive_hysteresis;
  gdouble  min_loss_scale;
  /* fp16 weights updated in place, no FP32 master (DeepSpeed's key, Apex
   * O3 or master_weights false): MIXPREC_PRECISION_MODE_FP16_NO_MASTER. */
  gboolean fp16_master_weights_and_grads;

  /* bf16 */
  gboolean bf16_enabled;
  gboolean check_grad_overflow;
  gboolean bf16_master_weights_and_grads;
  gboolean bf16_optimizer_states;
  /* Resolved: the dtype of every optimizer state slot. */
  MixprecDType optimizer_state_dtype;
  /* mixprec.master_weights (resolved: FP32 or NONE from the mode when
   * absent) and mixprec.optimizer_states: the format of the slots not
   * named (state_format_default), the named ones (state_slot_names, with
   * state_slot_formats in the same order), and block_size (0: each
   * format's default). */
  MixprecMasterWeights master_weights;
  MixprecStateFormat state_format_default;
  GStrv    state_slot_names;
  GArray  *state_slot_formats;     /* MixprecStateFormat */
  guint    state_block_size;

  /* dtypes */
  MixprecDType grad_accum_dtype;
  MixprecDType communication_dtype;
  /* mixprec.reduce_accumulation "fp32" (FALSE: "grad_accum_dtype");
   * resolved, TRUE whenever grad_accum_dtype is FP32 */
  gboolean     reduce_fp32;

  /* torch_autocast */
  gboolean     autocast_enabled;
  MixprecDType autocast_dtype;
  GStrv        lower_precision_safe_modules;

  /* zero_optimization */
  guint    zero_stage;
  guint64  reduce_bucket_size;
  guint64  allgather_bucket_size;
  gboolean overlap_comm;
  gboolean contiguous_gradients;
  guint64  prefetch_bucket_size;          /* stage3_*, or the unprefixed alias */
  guint64  param_persistence_threshold;
  guint64  max_live_parameters;
  /* ZeRO++: ZeRO-3 gathers the working copies as int8 blocks (qwZ). */
  gboolean zero_quantized_weights;
  /* ZeRO++: ZeRO-3's gradient reduce-scatters move int4 blocks (qgZ). */
  gboolean zero_quantized_gradients;
  /* mixprec.quantized_weights_format / quantized_gradients_format: the
   * codes qwZ and qgZ move (a _MixprecZeroppFormat: 0 DeepSpeed's int8 /
   * int4, 1 FP8 E4M3 blocks, 2 FP8 E5M2 blocks). */
  guint    zeropp_weights_format;
  guint    zeropp_gradients_format;
  /* ZeRO++ LoCo (zeropp_loco_param): error feedback for qgZ. */
  gboolean zeropp_loco;
  gdouble  zeropp_loco_err_beta;
  guint    zeropp_loco_reset_t;
  /* ZeRO++ hpZ: ranks per secondary partition group; 0 and 1: off. */
  guint    zero_hpz_partition_size;

  /* training; 0 means unset for the three batch values */
  gdouble  gradient_clipping;
  guint    gradient_accumulation_steps;
  guint    train_batch_size;
  guint    train_micro_batch_size_per_gpu;
  gchar      *optimizer_type;
  JsonObject *optimizer_params;
  gchar      *scheduler_type;
  JsonObject *scheduler_params;
  /* The optimizer's parameters as the engine will run them: its plugin's
   * defaults with the document's values applied (also without an
   * optimizer section, for the default AdamW). NULL when they could not
   * be checked. */
  JsonObject *resolved_optimizer_params;

  /* mixprec */
  GStrv    fp32_modules;
  GStrv    fp32_params;
  gboolean stochastic_rounding;
  guint64  seed;
  MixprecScalerSemantics semantics;
  gdouble  max_scale;
  gdouble  growth_factor;
  gdouble  backoff_factor;
  gboolean raise_at_min_scale;
  gchar   *comm_backend;
  gdouble  timeout;               /* mixprec.timeout, seconds */
  gboolean require_job_secret;    /* mixprec.require_job_secret */
  gchar   *device;
  guint    offload_optimizer;     /* _MixprecOffload */
  gboolean offload_pin_memory;
  gchar   *offload_path;          /* the key that asked for it, for messages */
  guint    offload_param;         /* _MixprecOffload: zero_optimization.offload_param */
  gboolean offload_param_pin_memory;
  gchar   *offload_param_path;    /* the key that asked for it, for messages */
  gboolean strict;
  guint    weight_decay_exempt;   /* _MixprecWeightDecayExempt */
  gboolean fp32_check_grad_overflow;  /* mixprec.check_grad_overflow */

  /* steps_per_print (0: never), csv_monitor, tensorboard */
  guint64  steps_per_print;
  gboolean monitor_enabled[2];    /* _MixprecMonitorKind */
  gchar   *monitor_output_path[2];
  gchar   *monitor_job_name[2];

  /* mixprec.numerics: per-tensor statistics every that many steps (0: off);
   * the parameters an FP32 shadow follows: names or glob patterns, and a
   * fraction of all */
  guint64  numerics_every;
  GStrv    numerics_shadow;
  gdouble  numerics_shadow_fraction;

  /* mixprec.auto_precision: closed-loop precision (see
   * mixprec-engine-autoprec.c) */
  _MixprecAutoPrecSettings auto_precision;

  /* fp8: FP8 working copies of the parameters of fp8_modules */
  gboolean fp8_enabled;
  guint    fp8_recipe;              /* MixprecFp8RecipeKind */
  guint    fp8_format;              /* MixprecFp8Format */
  guint    fp8_amax_history_len;
  guint    fp8_amax_compute_algo;   /* MixprecFp8AmaxAlgo */
  gint     fp8_margin;
  guint    fp8_mx_block_size;
  guint    fp8_mx_scale_mode;       /* MixprecMxScaleMode */
  gboolean fp8_saturate;
  GStrv    fp8_modules;
  MixprecFp8Recipe *fp8_recipe_object;   /* built when fp8_enabled */

  /* fp4: 4-bit working copies of the parameters of fp4_modules
   * (mixprec-engine-fp4.c) */
  gboolean fp4_enabled;
  guint    fp4_recipe;              /* MixprecBlockRecipe: NVFP4 or MXFP4 as written */
  gboolean fp4_weights_2d;          /* NVFP4: 16x16 tiles for the weights */
  guint    fp4_scale_mode;          /* MixprecMxScaleMode */
  gboolean fp4_rht;
  guint64  fp4_rht_seed;
  GStrv    fp4_modules;
  GStrv    fp4_exclude_params;      /* name globs that keep the working dtype */
} MixprecConfigSettings;

/* zero_optimization.offload_optimizer.device, in the order of the JSON
 * choices. */
typedef enum
{
  _MIXPREC_OFFLOAD_NONE = 0,
  _MIXPREC_OFFLOAD_CPU,
  _MIXPREC_OFFLOAD_NVME,                 /* refused by the loader */
} _MixprecOffload;

/* TRUE for offload_optimizer "cpu": an engine on a device (not "cpu",
 * where they are in host memory anyway) keeps the FP32 masters and the
 * optimizer state in host memory and steps there. */
gboolean _mixprec_config_get_offload_optimizer (MixprecConfig *config);
gboolean _mixprec_config_get_offload_pin_memory (MixprecConfig *config);
/* TRUE for offload_param "cpu" (which the loader accepts only beside
 * offload_optimizer "cpu"): across ranks under ZeRO-3 on a device, each
 * rank's partition of the working copies lives in host memory between
 * gathers. */
gboolean _mixprec_config_get_offload_param (MixprecConfig *config);
gboolean _mixprec_config_get_offload_param_pin_memory (MixprecConfig *config);

/* zero_optimization.zero_quantized_weights (ZeRO++ qwZ): ZeRO-3's
 * gathers move int8 blocks (mixprec-engine-zeropp.c). */
gboolean _mixprec_config_get_zero_quantized_weights (MixprecConfig *config);
/* zero_optimization.zero_quantized_gradients (ZeRO++ qgZ): ZeRO-3's
 * reduce-scatters move int4 blocks through an all-to-all. */
gboolean _mixprec_config_get_zero_quantized_gradients (MixprecConfig *config);
/* mixprec.quantized_weights_format and quantized_gradients_format: what
 * qwZ and qgZ move, a _MixprecZeroppFormat (mixprec-zeropp-private.h). */
guint    _mixprec_config_get_zeropp_weights_format   (MixprecConfig *config);
guint    _mixprec_config_get_zeropp_gradients_format (MixprecConfig *config);
/* zero_optimization.zeropp_loco_param (LoCo error feedback for qgZ):
 * whether it is set, its err_beta and reset_T. */
gboolean _mixprec_config_get_zeropp_loco (MixprecConfig *config,
                                          gdouble       *err_beta,
                                          guint         *reset_t);
/* zero_optimization.zero_hpz_partition_size (ZeRO++ hpZ), as written. */
guint    _mixprec_config_get_zero_hpz_partition_size (MixprecConfig *config);

/* mixprec.weight_decay_exempt: which parameters the optimizer's weight
 * decay skips. */
typedef enum
{
  _MIXPREC_WEIGHT_DECAY_EXEMPT_1D = 0,   /* nanoGPT: tensors of fewer than 2 dims */
  _MIXPREC_WEIGHT_DECAY_EXEMPT_NONE,     /* DeepSpeed, torch.optim: none */
  _MIXPREC_WEIGHT_DECAY_EXEMPT_NAMES,    /* Hugging Face Trainer: biases, norms */
} _MixprecWeightDecayExempt;

extern const gchar *const _mixprec_weight_decay_exempt_names[];

/* mixprec.reduce_accumulation: "grad_accum_dtype", "fp32". */
extern const gchar *const _mixprec_reduce_accumulation_names[];
extern const gchar *const _mixprec_zeropp_weights_format_names[];
extern const gchar *const _mixprec_zeropp_gradients_format_names[];

guint    _mixprec_config_get_weight_decay_exempt (MixprecConfig *config);
gboolean _mixprec_config_get_require_job_secret (MixprecConfig *config);

/* 1 when the optimizer's weight decay applies to the parameter @name
 * (of @module_type, nullable, with @n_dims dimensions) under @config's
 * mixprec.weight_decay_exempt, 0 when it is exempt. */
gdouble  _mixprec_weight_decay_multiplier         (MixprecConfig *config,
                                                   const gchar   *name,
                                                   const gchar   *module_type,
                                                   guint          n_dims);

/* The monitors DeepSpeed configures with a section of the same name. */
typedef enum
{
  _MIXPREC_MONITOR_CSV = 0,              /* csv_monitor */
  _MIXPREC_MONITOR_TENSORBOARD,          /* tensorboard */
} _MixprecMonitorKind;

extern const gchar *const _mixprec_monitor_sections[];

/* steps_per_print: a progress message every that many steps; 0: never. */
guint64  _mixprec_config_get_steps_per_print (MixprecConfig *config);
/* Whether the monitor @kind is enabled, and its output_path and job_name
 * (owned by @config). */
gboolean _mixprec_config_get_monitor         (MixprecConfig      *config,
                                              _MixprecMonitorKind kind,
                                              const gchar       **output_path,
                                              const gchar       **job_name);

/* mixprec.numerics.every: per-tensor numerics every that many steps; 0: off.
 * mixprec.numerics.shadow (owned by @config) and shadow_fraction: the
 * parameters an FP32 shadow follows. */
guint64  _mixprec_config_get_numerics_every  (MixprecConfig *config);
/* mixprec.auto_precision, owned by @config. */
const _MixprecAutoPrecSettings *_mixprec_config_get_auto_precision (MixprecConfig *config);
const gchar * const *_mixprec_config_get_numerics_shadow (MixprecConfig *config,
                                                          gdouble       *fraction);

void     _mixprec_config_settings_init_defaults (MixprecConfigSettings *settings);
void     _mixprec_config_settings_clear         (MixprecConfigSettings *settings);

/* Reads @root into @settings, reporting every problem into @report.
 * Returns TRUE when no error was reported. */
gboolean _mixprec_config_settings_load          (MixprecConfigSettings *settings,
                                                 JsonNode              *root,
                                                 MixprecConfigReport   *report);

/* One override: @value replaces whatever the document holds at the dotted
 * @path, before "auto" is resolved and the document is read. */
typedef struct
{
  gchar    *path;
  JsonNode *value;
} MixprecConfigOverride;

void     _mixprec_config_override_free          (MixprecConfigOverride *override);

/* Parses a dotted path ("zero_optimization.reduce_bucket_size") into its
 * keys; NULL with @error set when a key is empty. */
GStrv    _mixprec_config_override_split         (const gchar           *path,
                                                 GError               **error);

/* Reads a document from @data with @overrides (MixprecConfigOverride,
 * may be NULL) applied; @origin (nullable) prefixes every message. */
MixprecConfig *_mixprec_config_new_from_bytes   (const gchar           *data,
                                                 gsize                  length,
                                                 const gchar           *origin,
                                                 GPtrArray             *overrides,
                                                 GError               **error);

MixprecConfig *_mixprec_config_new_from_file    (const gchar           *path,
                                                 GPtrArray             *overrides,
                                                 GError               **error);

/* Writes @overrides into the (mutable) @root, recording their paths in
 * report->overridden. The pseudo-path model.hidden_size is not written:
 * its value lands in *hidden_size (0 when absent). */
void     _mixprec_config_apply_overrides        (JsonNode              *root,
                                                 GPtrArray             *overrides,
                                                 MixprecConfigReport   *report,
                                                 gint64                *hidden_size);

/* Replaces each Hugging Face "auto" placeholder that has a derivation or
 * a published default by that value, reporting each as a warning
 * 'path: "auto" -> value (why)'. What is left is reported by the reader. */
void     _mixprec_config_resolve_auto           (JsonNode              *root,
                                                 gint64                 hidden_size,
                                                 MixprecConfigReport   *report);

/* Checks @data is strict RFC 8259 JSON that json-glib can be trusted with:
 * UTF-8, nesting at most _MIXPREC_CONFIG_MAX_DEPTH, numbers that fit,
 * no duplicate keys. Syntax problems stop the scan (returns FALSE); range
 * and duplicate problems are reported with their path added to
 * report->reported, and the scan goes on. */
gboolean _mixprec_json_scan                     (const gchar           *data,
                                                 gsize                  length,
                                                 MixprecConfigReport   *report);

/* Appends @node as indented JSON (two spaces per @level) whose numbers read
 * back to the same values; json-glib 1.6's generator does not. */
void     _mixprec_json_write                    (GString               *out,
                                                 JsonNode              *node,
                                                 guint                  level);

/* Damerau-Levenshtein (optimal string alignment) distance, ASCII
 * case-insensitive. */
guint    _mixprec_edit_distance                 (const gchar           *a,
                                                 const gchar           *b);
/* The closest of @candidates to @word, or NULL when none is close enough
 * to be a plausible typo. */
const gchar *_mixprec_suggest                   (const gchar           *word,
                                                 const gchar * const   *candidates);

/* Canonical DeepSpeed spelling of a dtype: "fp32", "fp16", "bf16". */
const gchar *_mixprec_config_dtype_short_name   (MixprecDType           dtype);

/* Whether a module type @type matches @listed: equal, or equal after
 * dropping a dotted package prefix from either ("torch.nn.Linear" matches
 * "Linear"). */
gboolean _mixprec_module_type_matches           (const gchar           *type,
                                                 const gchar           *listed);

G_END_DECLS
