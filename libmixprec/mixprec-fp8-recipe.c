/* mixprec-fp8-recipe.c — FP8 scaling recipes (delayed, current, MX) and the
 * per-tensor scaling state that carries their amax history and scale. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "mixprec-fp8-recipe-private.h"
#include "mixprec-enum-types.h"

/**
 * MixprecFp8Recipe:
 *
 * How FP8 tensors are scaled: the recipe kind (#MixprecFp8RecipeKind), the
 * FP8 encodings (#MixprecFp8Format) and the kind's parameters. A recipe is
 * immutable; each FP8 tensor keeps its own state in a #MixprecFp8Scaling
 * made by mixprec_fp8_recipe_new_scaling().
 *
 * The recipes follow Transformer Engine's `transformer_engine.common.recipe`
 * classes of the same names and torchao's float8 and MX training:
 *
 * - delayed scaling (`DelayedScaling`): a tensor is cast with the scale
 *   computed from the amaxes of its earlier casts, and the amax of this cast
 *   is recorded for the next update; see mixprec_fp8_scaling_update() for
 *   the arithmetic, step by step;
 * - current scaling (`Float8CurrentScaling`; torchao's tensorwise dynamic
 *   scaling): the amax of the tensor is taken first and the scale computed
 *   from it before the cast; the same formula with no history;
 * - MX block scaling (`MXFP8BlockScaling`; torchao's MX): blocks of
 *   %MIXPREC_FP8_MX_BLOCK_SIZE consecutive elements, one E8M0 power-of-two
 *   scale per block, computed while casting (OCP Microscaling Formats v1.0);
 *   no per-tensor state.
 *
 * Casts saturate by default (#MixprecFp8Recipe:saturate): values beyond the
 * FP8 range become ±max, as Transformer Engine's cast kernels do.
 *
 * Since: 1.1
 */
struct _MixprecFp8Recipe
{
  GObject parent_instance;

  MixprecFp8RecipeKind kind;
  MixprecFp8Format format;
  guint amax_history_len;
  MixprecFp8AmaxAlgo amax_compute_algo;
  gint margin;
  guint block_size;
  gboolean saturate;
  MixprecMxScaleMode mx_scale_mode;
};

G_DEFINE_FINAL_TYPE (MixprecFp8Recipe, mixprec_fp8_recipe, G_TYPE_OBJECT)

/**
 * mixprec_fp8_recipe_error_quark:
 *
 * Gets the error domain of FP8 recipes and scalings.
 *
 * Returns: the quark behind %MIXPREC_FP8_RECIPE_ERROR
 *
 * Since: 1.1
 */
G_DEFINE_QUARK (mixprec-fp8-recipe-error-quark, mixprec_fp8_recipe_error)

enum {
  RECIPE_PROP_0,
  RECIPE_PROP_KIND,
  RECIPE_PROP_FORMAT,
  RECIPE_PROP_AMAX_HISTORY_LEN,
  RECIPE_PROP_AMAX_COMPUTE_ALGO,
  RECIPE_PROP_MARGIN,
  RECIPE_PROP_BLOCK_SIZE,
  RECIPE_PROP_SATURATE,
  RECIPE_PROP_MX_SCALE_MODE,
  RECIPE_N_PROPS
};

static GParamSpec *recipe_properties[RECIPE_N_PROPS];

static void
mixprec_fp8_recipe_get_property (GObject    *object,
                                 guint       prop_id,
                                 GValue     *value,
                                 GParamSpec *pspec)
{
  MixprecFp8Recipe *self = MIXPREC_FP8_RECIPE (object);

  switch (prop_id)
    {
    case RECIPE_PROP_KIND:
      g_value_set_enum (value, self->kind);
      break;
    case RECIPE_PROP_FORMAT:
      g_value_set_enum (value, self->format);
      break;
    case RECIPE_PROP_AMAX_HISTORY_LEN:
      g_value_set_uint (value, self->amax_history_len);
      break;
    case RECIPE_PROP_AMAX_COMPUTE_ALGO:
      g_value_set_enum (value, self->amax_compute_algo);
      break;
    case RECIPE_PROP_MARGIN:
      g_value_set_int (value, self->margin);
      break;
    case RECIPE_PROP_BLOCK_SIZE:
      g_value_set_uint (value, self->block_size);
      break;
    case RECIPE_PROP_SATURATE:
      g_value_set_boolean (value, self->saturate);
      break;
    case RECIPE_PROP_MX_SCALE_MODE:
      g_value_set_enum (value, self->mx_scale_mode);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_fp8_recipe_set_property (GObject      *object,
                                 guint         prop_id,
                                 const GValue *value,
                                 GParamSpec   *pspec)
{
  MixprecFp8Recipe *self = MIXPREC_FP8_RECIPE (object);

  switch (prop_id)
    {
    case RECIPE_PROP_KIND:
      self->kind = g_value_get_enum (value);
      break;
    case RECIPE_PROP_FORMAT:
      self->format = g_value_get_enum (value);
      break;
    case RECIPE_PROP_AMAX_HISTORY_LEN:
      self->amax_history_len = g_value_get_uint (value);
      break;
    case RECIPE_PROP_AMAX_COMPUTE_ALGO:
      self->amax_compute_algo = g_value_get_enum (value);
      break;
    case RECIPE_PROP_MARGIN:
      self->margin = g_value_get_int (value);
      break;
    case RECIPE_PROP_BLOCK_SIZE:
      self->block_size = g_value_get_uint (value);
      break;
    case RECIPE_PROP_SATURATE:
      self->saturate = g_value_get_boolean (value);
      break;
    case RECIPE_PROP_MX_SCALE_MODE:
      self->mx_scale_mode = g_value_get_enum (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_fp8_recipe_class_init (MixprecFp8RecipeClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags flags = G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS;

  object_class->get_property = mixprec_fp8_recipe_get_property;
  object_class->set_property = mixprec_fp8_recipe_set_property;

  /**
   * MixprecFp8Recipe:kind:
   *
   * The recipe: delayed, current or MX block scaling.
   *
   * Since: 1.1
   */
  recipe_properties[RECIPE_PROP_KIND] =
    g_param_spec_enum ("kind", NULL, NULL, MIXPREC_TYPE_FP8_RECIPE_KIND,
                       MIXPREC_FP8_RECIPE_DELAYED, flags);

  /**
   * MixprecFp8Recipe:format:
   *
   * The FP8 encodings: hybrid (E4M3 forward, E5M2 backward) or E4M3
   * everywhere.
   *
   * Since: 1.1
   */
  recipe_properties[RECIPE_PROP_FORMAT] =
    g_param_spec_enum ("format", NULL, NULL, MIXPREC_TYPE_FP8_FORMAT,
                       MIXPREC_FP8_FORMAT_HYBRID, flags);

  /**
   * MixprecFp8Recipe:amax-history-len:
   *
   * Delayed scaling: the number of slots of each tensor's amax history,
   * slot 0 included (Transformer Engine's `amax_history_len`, 1024 by
   * default). Recipes of the other kinds ignore it and report the length
   * of the history their scalings keep (1 for current, 0 for MX).
   *
   * Since: 1.1
   */
  recipe_properties[RECIPE_PROP_AMAX_HISTORY_LEN] =
    g_param_spec_uint ("amax-history-len", NULL, NULL,
                       1, MIXPREC_FP8_MAX_AMAX_HISTORY_LEN, 1024, flags);

  /**
   * MixprecFp8Recipe:amax-compute-algo:
   *
   * Delayed scaling: which amax of the history the scale is computed from.
   *
   * Since: 1.1
   */
  recipe_properties[RECIPE_PROP_AMAX_COMPUTE_ALGO] =
    g_param_spec_enum ("amax-compute-algo", NULL, NULL, MIXPREC_TYPE_FP8_AMAX_ALGO,
                       MIXPREC_FP8_AMAX_MAX, flags);

  /**
   * MixprecFp8Recipe:margin:
   *
   * Delayed and current scaling: the scale is divided by 2^margin, leaving
   * that many binades of headroom above the amax (Transformer Engine's
   * `margin`). MX recipes report 0.
   *
   * Since: 1.1
   */
  recipe_properties[RECIPE_PROP_MARGIN] =
    g_param_spec_int ("margin", NULL, NULL,
                      -MIXPREC_FP8_MAX_MARGIN, MIXPREC_FP8_MAX_MARGIN, 0, flags);

  /**
   * MixprecFp8Recipe:block-size:
   *
   * MX: the number of consecutive elements sharing one E8M0 scale; only
   * %MIXPREC_FP8_MX_BLOCK_SIZE (32), as the OCP MX specification fixes it.
   * Recipes of the other kinds report 0.
   *
   * Since: 1.1
   */
  recipe_properties[RECIPE_PROP_BLOCK_SIZE] =
    g_param_spec_uint ("block-size", NULL, NULL,
                       MIXPREC_FP8_MX_BLOCK_SIZE, MIXPREC_FP8_MX_BLOCK_SIZE,
                       MIXPREC_FP8_MX_BLOCK_SIZE, flags);

  /**
   * MixprecFp8Recipe:saturate:
   *
   * Whether casts to FP8 saturate (values beyond the format's largest
   * finite value become ±max, infinities too; NaN stays NaN), as
   * Transformer Engine's cast kernels do. When %FALSE, out-of-range
   * values become NaN (E4M3, which has no infinities) or ±Inf (E5M2), as
   * torch's `Tensor.to(torch.float8_e4m3fn)` does.
   *
   * Since: 1.1
   */
  recipe_properties[RECIPE_PROP_SATURATE] =
    g_param_spec_boolean ("saturate", NULL, NULL, TRUE, flags);

  /**
   * MixprecFp8Recipe:mx-scale-mode:
   *
   * MX: how each block's E8M0 scale comes from its amax, one of torchao's
   * four `ScaleCalculationMode`s (see
   * mixprec_mx_quantize_with_scale_mode()); FLOOR, the MX
   * specification's rule, by default. Other recipes ignore it.
   *
   * Since: 1.1
   */
  recipe_properties[RECIPE_PROP_MX_SCALE_MODE] =
    g_param_spec_enum ("mx-scale-mode", NULL, NULL, MIXPREC_TYPE_MX_SCALE_MODE,
                       MIXPREC_MX_SCALE_FLOOR, flags);

  g_object_class_install_properties (object_class, RECIPE_N_PROPS, recipe_properties);
}

static void
mixprec_fp8_recipe_init (MixprecFp8Recipe *self)
{
  self->kind = MIXPREC_FP8_RECIPE_DELAYED;
  self->format = MIXPREC_FP8_FORMAT_HYBRID;
  self->amax_history_len = 1024;
  self->amax_compute_algo = MIXPREC_FP8_AMAX_MAX;
  self->block_size = MIXPREC_FP8_MX_BLOCK_SIZE;
  self->saturate = TRUE;
}

static gboolean
check_enum (GType         type,
            gint          value,
            const gchar  *what,
            GError      **error)
{
  g_autoptr(GEnumClass) klass = g_type_class_ref (type);

  if (g_enum_get_value (klass, value) == NULL)
    {
      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE,
                   "FP8 recipe: %d is not a %s", value, what);
      return FALSE;
    }
  return TRUE;
}

MixprecFp8Recipe *
_mixprec_fp8_recipe_new (MixprecFp8RecipeKind  kind,
                         MixprecFp8Format      format,
                         guint                 amax_history_len,
                         MixprecFp8AmaxAlgo    amax_compute_algo,
                         gint                  margin,
                         guint                 block_size,
                         gboolean              saturate,
                         GError              **error)
{
  return _mixprec_fp8_recipe_new_full (kind, format, amax_history_len, amax_compute_algo, margin,
                                       block_size, saturate, MIXPREC_MX_SCALE_FLOOR, error);
}

MixprecFp8Recipe *
_mixprec_fp8_recipe_new_full (MixprecFp8RecipeKind  kind,
                              MixprecFp8Format      format,
                              guint                 amax_history_len,
                              MixprecFp8AmaxAlgo    amax_compute_algo,
                              gint                  margin,
                              guint                 block_size,
                              gboolean              saturate,
                              MixprecMxScaleMode    mx_scale_mode,
                              GError              **error)
{
  if (!check_enum (MIXPREC_TYPE_FP8_RECIPE_KIND, kind, "MixprecFp8RecipeKind", error) ||
      !check_enum (MIXPREC_TYPE_FP8_FORMAT, format, "MixprecFp8Format", error) ||
      !check_enum (MIXPREC_TYPE_MX_SCALE_MODE, mx_scale_mode, "MixprecMxScaleMode", error))
    return NULL;
  if (kind != MIXPREC_FP8_RECIPE_MX)
    mx_scale_mode = MIXPREC_MX_SCALE_FLOOR;

  if (kind == MIXPREC_FP8_RECIPE_DELAYED)
    {
      if (!check_enum (MIXPREC_TYPE_FP8_AMAX_ALGO, amax_compute_algo, "MixprecFp8AmaxAlgo", error))
        return NULL;
      if (amax_history_len < 1 || amax_history_len > MIXPREC_FP8_MAX_AMAX_HISTORY_LEN)
        {
          g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE,
                       "FP8 recipe: amax_history_len must be between 1 and %u, got %u",
                       (guint) MIXPREC_FP8_MAX_AMAX_HISTORY_LEN, amax_history_len);
          return NULL;
        }
    }
  else
    {
      amax_history_len = 1;
      amax_compute_algo = MIXPREC_FP8_AMAX_MOST_RECENT;
    }

  if (kind != MIXPREC_FP8_RECIPE_MX)
    {
      if (margin < -MIXPREC_FP8_MAX_MARGIN || margin > MIXPREC_FP8_MAX_MARGIN)
        {
          g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE,
                       "FP8 recipe: margin must be between %d and %d, got %d",
                       -MIXPREC_FP8_MAX_MARGIN, MIXPREC_FP8_MAX_MARGIN, margin);
          return NULL;
        }
    }
  else
    {
      if (block_size != MIXPREC_FP8_MX_BLOCK_SIZE)
        {
          g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE,
                       "FP8 recipe: the MX block size must be %u (OCP MX), got %u",
                       (guint) MIXPREC_FP8_MX_BLOCK_SIZE, block_size);
          return NULL;
        }
      margin = 0;
    }

  return g_object_new (MIXPREC_TYPE_FP8_RECIPE,
                       "kind", kind,
                       "format", format,
                       "amax-history-len", amax_history_len,
                       "amax-compute-algo", amax_compute_algo,
                       "margin", margin,
                       "block-size", (guint) MIXPREC_FP8_MX_BLOCK_SIZE,
                       "saturate", saturate,
                       "mx-scale-mode", mx_scale_mode,
                       NULL);
}

/**
 * mixprec_fp8_recipe_new_delayed:
 * @format: the FP8 encodings
 * @amax_history_len: slots of each tensor's amax history, 1 to
 *   %MIXPREC_FP8_MAX_AMAX_HISTORY_LEN (Transformer Engine's default: 1024)
 * @amax_compute_algo: which amax of the history the scale comes from
 * @margin: binades of headroom, -%MIXPREC_FP8_MAX_MARGIN to
 *   %MIXPREC_FP8_MAX_MARGIN (default 0)
 * @error: return location for a #GError
 *
 * Makes a delayed-scaling recipe, Transformer Engine's `DelayedScaling`
 * with the default `scaling_factor_compute_algo`. See
 * mixprec_fp8_scaling_update() for the arithmetic.
 *
 * Returns: (transfer full): the recipe, or %NULL with @error set to
 *   %MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE when an argument is out of
 *   range
 *
 * Since: 1.1
 */
MixprecFp8Recipe *
mixprec_fp8_recipe_new_delayed (MixprecFp8Format    format,
                                guint               amax_history_len,
                                MixprecFp8AmaxAlgo  amax_compute_algo,
                                gint                margin,
                                GError            **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_fp8_recipe_new (MIXPREC_FP8_RECIPE_DELAYED, format, amax_history_len,
                                  amax_compute_algo, margin, MIXPREC_FP8_MX_BLOCK_SIZE,
                                  TRUE, error);
}

/**
 * mixprec_fp8_recipe_new_current:
 * @format: the FP8 encodings
 * @margin: binades of headroom, -%MIXPREC_FP8_MAX_MARGIN to
 *   %MIXPREC_FP8_MAX_MARGIN (0 is Transformer Engine's and torchao's
 *   behaviour)
 * @error: return location for a #GError
 *
 * Makes a current-scaling recipe: each cast takes the amax of the tensor
 * being cast and computes its scale from it first (Transformer Engine's
 * `Float8CurrentScaling`, torchao's tensorwise dynamic scaling).
 *
 * Returns: (transfer full): the recipe, or %NULL with @error set to
 *   %MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE when an argument is out of
 *   range
 *
 * Since: 1.1
 */
MixprecFp8Recipe *
mixprec_fp8_recipe_new_current (MixprecFp8Format   format,
                                gint               margin,
                                GError           **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_fp8_recipe_new (MIXPREC_FP8_RECIPE_CURRENT, format, 1,
                                  MIXPREC_FP8_AMAX_MOST_RECENT, margin,
                                  MIXPREC_FP8_MX_BLOCK_SIZE, TRUE, error);
}

/**
 * mixprec_fp8_recipe_new_mx:
 * @format: the FP8 element encodings (Transformer Engine's
 *   `MXFP8BlockScaling` defaults to %MIXPREC_FP8_FORMAT_E4M3)
 * @block_size: elements per scale; must be %MIXPREC_FP8_MX_BLOCK_SIZE (32)
 * @error: return location for a #GError
 *
 * Makes an MXFP8 block-scaling recipe (OCP Microscaling Formats v1.0):
 * blocks of @block_size consecutive elements share one E8M0 scale, the
 * power of two 2^(floor(log2(block amax)) - emax), emax being the largest
 * exponent of the element format (8 for E4M3, 15 for E5M2); the elements
 * are the saturating casts of the values divided by it. The scales are
 * computed while casting, so the recipe's scalings hold no state.
 *
 * Returns: (transfer full): the recipe, or %NULL with @error set to
 *   %MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE when an argument is invalid
 *
 * Since: 1.1
 */
MixprecFp8Recipe *
mixprec_fp8_recipe_new_mx (MixprecFp8Format   format,
                           guint              block_size,
                           GError           **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_fp8_recipe_new (MIXPREC_FP8_RECIPE_MX, format, 1,
                                  MIXPREC_FP8_AMAX_MOST_RECENT, 0, block_size, TRUE, error);
}

/**
 * mixprec_fp8_recipe_get_kind:
 * @self: a #MixprecFp8Recipe
 *
 * Says how the recipe scales tensors: delayed or current per-tensor
 * scaling, or MX block scaling.
 *
 * Returns: the recipe kind
 *
 * Since: 1.1
 */
MixprecFp8RecipeKind
mixprec_fp8_recipe_get_kind (MixprecFp8Recipe *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), MIXPREC_FP8_RECIPE_DELAYED);
  return self->kind;
}

/**
 * mixprec_fp8_recipe_get_format:
 * @self: a #MixprecFp8Recipe
 *
 * Gives which FP8 encodings the recipe casts to: E4M3 for every tensor, or
 * E4M3 forward and E5M2 for gradients (hybrid).
 *
 * Returns: the FP8 encodings of the recipe
 *
 * Since: 1.1
 */
MixprecFp8Format
mixprec_fp8_recipe_get_format (MixprecFp8Recipe *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), MIXPREC_FP8_FORMAT_HYBRID);
  return self->format;
}

/**
 * mixprec_fp8_recipe_get_amax_history_len:
 * @self: a #MixprecFp8Recipe
 *
 * Gives how many past amax values each scaling of the recipe remembers.
 *
 * Returns: the length of the amax history of each scaling: the configured
 *   length for delayed scaling, 1 for current scaling (the amax recorded
 *   since the last update), 0 for MX
 *
 * Since: 1.1
 */
guint
mixprec_fp8_recipe_get_amax_history_len (MixprecFp8Recipe *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), 0);

  switch (self->kind)
    {
    case MIXPREC_FP8_RECIPE_DELAYED:
      return self->amax_history_len;
    case MIXPREC_FP8_RECIPE_CURRENT:
      return 1;
    case MIXPREC_FP8_RECIPE_MX:
    default:
      return 0;
    }
}

/**
 * mixprec_fp8_recipe_get_amax_compute_algo:
 * @self: a #MixprecFp8Recipe
 *
 * Says how delayed scaling reduces the amax history to the amax it
 * computes the scale from.
 *
 * Returns: which amax of the history delayed scaling uses;
 *   %MIXPREC_FP8_AMAX_MOST_RECENT for the other kinds
 *
 * Since: 1.1
 */
MixprecFp8AmaxAlgo
mixprec_fp8_recipe_get_amax_compute_algo (MixprecFp8Recipe *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), MIXPREC_FP8_AMAX_MAX);
  return self->kind == MIXPREC_FP8_RECIPE_DELAYED ? self->amax_compute_algo
                                                   : MIXPREC_FP8_AMAX_MOST_RECENT;
}

/**
 * mixprec_fp8_recipe_get_margin:
 * @self: a #MixprecFp8Recipe
 *
 * Gives the margin of the recipe: a scale is computed as if the format's
 * largest value were 2^margin times smaller, leaving that much headroom.
 *
 * Returns: the margin (0 for MX)
 *
 * Since: 1.1
 */
gint
mixprec_fp8_recipe_get_margin (MixprecFp8Recipe *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), 0);
  return self->kind == MIXPREC_FP8_RECIPE_MX ? 0 : self->margin;
}

/**
 * mixprec_fp8_recipe_get_block_size:
 * @self: a #MixprecFp8Recipe
 *
 * Gives how many consecutive elements share one scale under the recipe.
 *
 * Returns: the MX block size (32); 0 for the per-tensor recipes
 *
 * Since: 1.1
 */
guint
mixprec_fp8_recipe_get_block_size (MixprecFp8Recipe *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), 0);
  return self->kind == MIXPREC_FP8_RECIPE_MX ? self->block_size : 0;
}

/**
 * mixprec_fp8_recipe_new_mx_with_scale_mode:
 * @format: the FP8 element encodings
 * @block_size: elements per scale; must be %MIXPREC_FP8_MX_BLOCK_SIZE (32)
 * @scale_mode: how each block's E8M0 scale comes from its amax
 * @error: return location for a #GError
 *
 * mixprec_fp8_recipe_new_mx() with the block scales of @scale_mode (see
 * mixprec_mx_quantize_with_scale_mode()); %MIXPREC_MX_SCALE_FLOOR gives
 * mixprec_fp8_recipe_new_mx()'s recipe.
 *
 * Returns: (transfer full): the recipe, or %NULL with @error set to
 *   %MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE when an argument is invalid
 *
 * Since: 1.1
 */
MixprecFp8Recipe *
mixprec_fp8_recipe_new_mx_with_scale_mode (MixprecFp8Format    format,
                                           guint               block_size,
                                           MixprecMxScaleMode  scale_mode,
                                           GError            **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_fp8_recipe_new_full (MIXPREC_FP8_RECIPE_MX, format, 1,
                                       MIXPREC_FP8_AMAX_MOST_RECENT, 0, block_size, TRUE,
                                       scale_mode, error);
}

/**
 * mixprec_fp8_recipe_get_mx_scale_mode:
 * @self: a #MixprecFp8Recipe
 *
 * How the MX recipe derives its block scales (#MixprecFp8Recipe:mx-scale-mode).
 *
 * Returns: the scale mode; %MIXPREC_MX_SCALE_FLOOR for the other recipes
 *
 * Since: 1.1
 */
MixprecMxScaleMode
mixprec_fp8_recipe_get_mx_scale_mode (MixprecFp8Recipe *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), MIXPREC_MX_SCALE_FLOOR);
  return self->mx_scale_mode;
}

/**
 * mixprec_fp8_recipe_get_saturate:
 * @self: a #MixprecFp8Recipe
 *
 * Tells whether values beyond the FP8 range clamp to its largest value
 * under this recipe, rather than becoming infinity or NaN.
 *
 * Returns: whether casts under this recipe saturate
 *   (#MixprecFp8Recipe:saturate)
 *
 * Since: 1.1
 */
gboolean
mixprec_fp8_recipe_get_saturate (MixprecFp8Recipe *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), TRUE);
  return self->saturate;
}

/**
 * mixprec_fp8_recipe_get_dtype:
 * @self: a #MixprecFp8Recipe
 * @role: what the tensor is used for
 *
 * The FP8 dtype of tensors of @role: %MIXPREC_DTYPE_FLOAT8_E5M2 for
 * backward tensors of a hybrid recipe, %MIXPREC_DTYPE_FLOAT8_E4M3
 * otherwise.
 *
 * Returns: the dtype
 *
 * Since: 1.1
 */
MixprecDType
mixprec_fp8_recipe_get_dtype (MixprecFp8Recipe *self,
                              MixprecFp8Role    role)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), MIXPREC_DTYPE_FLOAT8_E4M3);

  if (self->format == MIXPREC_FP8_FORMAT_HYBRID && role == MIXPREC_FP8_ROLE_BACKWARD)
    return MIXPREC_DTYPE_FLOAT8_E5M2;
  return MIXPREC_DTYPE_FLOAT8_E4M3;
}

/**
 * MixprecFp8Scaling:
 *
 * The scaling state of one FP8 tensor under a #MixprecFp8Recipe: its
 * dtype, its scale (1.0 until the first update that computes one) and, for
 * delayed and current scaling, its amax history. A tensor is cast as
 * `fp8 = cast (x * scale)` and read back as `x ≈ decode (fp8) * scale_inv`.
 *
 * The engine keeps one scaling per FP8 parameter; a trainer that casts its
 * own activations may keep its own.
 *
 * Since: 1.1
 */
struct _MixprecFp8Scaling
{
  GObject parent_instance;

  MixprecFp8Recipe *recipe;
  MixprecFp8Role role;
  MixprecDType dtype;
  gfloat fp8_max;
  gfloat scale;
  gfloat scale_inv;
  guint history_len;
  gfloat *history;
};

G_DEFINE_FINAL_TYPE (MixprecFp8Scaling, mixprec_fp8_scaling, G_TYPE_OBJECT)

enum {
  SCALING_PROP_0,
  SCALING_PROP_RECIPE,
  SCALING_PROP_ROLE,
  SCALING_PROP_SCALE,
  SCALING_N_PROPS
};

static GParamSpec *scaling_properties[SCALING_N_PROPS];

static void
mixprec_fp8_scaling_constructed (GObject *object)
{
  MixprecFp8Scaling *self = MIXPREC_FP8_SCALING (object);

  G_OBJECT_CLASS (mixprec_fp8_scaling_parent_class)->constructed (object);

  /* A scaling made by g_object_new() without a recipe gets the default
   * one, so that every scaling has a valid state. */
  if (self->recipe == NULL)
    self->recipe = g_object_new (MIXPREC_TYPE_FP8_RECIPE, NULL);

  self->dtype = mixprec_fp8_recipe_get_dtype (self->recipe, self->role);
  self->fp8_max = (gfloat) mixprec_dtype_get_max (self->dtype);
  self->history_len = mixprec_fp8_recipe_get_amax_history_len (self->recipe);
  self->history = g_new0 (gfloat, MAX (self->history_len, 1));
}

static void
mixprec_fp8_scaling_finalize (GObject *object)
{
  MixprecFp8Scaling *self = MIXPREC_FP8_SCALING (object);

  g_clear_object (&self->recipe);
  g_free (self->history);

  G_OBJECT_CLASS (mixprec_fp8_scaling_parent_class)->finalize (object);
}

static void
mixprec_fp8_scaling_get_property (GObject    *object,
                                  guint       prop_id,
                                  GValue     *value,
                                  GParamSpec *pspec)
{
  MixprecFp8Scaling *self = MIXPREC_FP8_SCALING (object);

  switch (prop_id)
    {
    case SCALING_PROP_RECIPE:
      g_value_set_object (value, self->recipe);
      break;
    case SCALING_PROP_ROLE:
      g_value_set_enum (value, self->role);
      break;
    case SCALING_PROP_SCALE:
      g_value_set_float (value, self->scale);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_fp8_scaling_set_property (GObject      *object,
                                  guint         prop_id,
                                  const GValue *value,
                                  GParamSpec   *pspec)
{
  MixprecFp8Scaling *self = MIXPREC_FP8_SCALING (object);

  switch (prop_id)
    {
    case SCALING_PROP_RECIPE:
      self->recipe = g_value_dup_object (value);
      break;
    case SCALING_PROP_ROLE:
      self->role = g_value_get_enum (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_fp8_scaling_class_init (MixprecFp8ScalingClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->constructed = mixprec_fp8_scaling_constructed;
  object_class->finalize = mixprec_fp8_scaling_finalize;
  object_class->get_property = mixprec_fp8_scaling_get_property;
  object_class->set_property = mixprec_fp8_scaling_set_property;

  /**
   * MixprecFp8Scaling:recipe:
   *
   * The recipe this scaling follows.
   *
   * Since: 1.1
   */
  scaling_properties[SCALING_PROP_RECIPE] =
    g_param_spec_object ("recipe", NULL, NULL, MIXPREC_TYPE_FP8_RECIPE,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * MixprecFp8Scaling:role:
   *
   * What the tensor is used for; with the recipe's format it decides the
   * dtype.
   *
   * Since: 1.1
   */
  scaling_properties[SCALING_PROP_ROLE] =
    g_param_spec_enum ("role", NULL, NULL, MIXPREC_TYPE_FP8_ROLE, MIXPREC_FP8_ROLE_FORWARD,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * MixprecFp8Scaling:scale:
   *
   * The current scale (see mixprec_fp8_scaling_get_scale()); notified
   * when an update or a restored state changes it.
   *
   * Since: 1.1
   */
  scaling_properties[SCALING_PROP_SCALE] =
    g_param_spec_float ("scale", NULL, NULL, 0.0f, G_MAXFLOAT, 1.0f,
                        G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, SCALING_N_PROPS, scaling_properties);
}

static void
mixprec_fp8_scaling_init (MixprecFp8Scaling *self)
{
  self->role = MIXPREC_FP8_ROLE_FORWARD;
  self->scale = 1.0f;
  self->scale_inv = 1.0f;
}

/**
 * mixprec_fp8_recipe_new_scaling:
 * @self: a #MixprecFp8Recipe
 * @role: what the tensor is used for
 *
 * Makes the scaling state of one tensor: scale 1.0 and an amax history of
 * mixprec_fp8_recipe_get_amax_history_len() zeros.
 *
 * Returns: (transfer full): a new #MixprecFp8Scaling
 *
 * Since: 1.1
 */
MixprecFp8Scaling *
mixprec_fp8_recipe_new_scaling (MixprecFp8Recipe *self,
                                MixprecFp8Role    role)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_RECIPE (self), NULL);
  g_return_val_if_fail (role == MIXPREC_FP8_ROLE_FORWARD || role == MIXPREC_FP8_ROLE_BACKWARD, NULL);

  return g_object_new (MIXPREC_TYPE_FP8_SCALING, "recipe", self, "role", role, NULL);
}

/**
 * mixprec_fp8_scaling_get_recipe:
 * @self: a #MixprecFp8Scaling
 *
 * Gives the recipe this scaling follows.
 *
 * Returns: (transfer none): the recipe of the scaling
 *
 * Since: 1.1
 */
MixprecFp8Recipe *
mixprec_fp8_scaling_get_recipe (MixprecFp8Scaling *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), NULL);
  return self->recipe;
}

/**
 * mixprec_fp8_scaling_get_role:
 * @self: a #MixprecFp8Scaling
 *
 * Says whether the scaled tensor is used in the forward pass (weights,
 * activations) or in the backward pass (gradients).
 *
 * Returns: what the tensor is used for
 *
 * Since: 1.1
 */
MixprecFp8Role
mixprec_fp8_scaling_get_role (MixprecFp8Scaling *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), MIXPREC_FP8_ROLE_FORWARD);
  return self->role;
}

/**
 * mixprec_fp8_scaling_get_dtype:
 * @self: a #MixprecFp8Scaling
 *
 * Gives the FP8 data type the scaled tensor is cast to.
 *
 * Returns: the FP8 dtype the tensor is cast to
 *   (mixprec_fp8_recipe_get_dtype() of its recipe and role)
 *
 * Since: 1.1
 */
MixprecDType
mixprec_fp8_scaling_get_dtype (MixprecFp8Scaling *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), MIXPREC_DTYPE_FLOAT8_E4M3);
  return self->dtype;
}

/**
 * mixprec_fp8_scaling_get_scale:
 * @self: a #MixprecFp8Scaling
 *
 * The factor a value is multiplied by (in single precision) before it is
 * cast to FP8. It is 1.0 until an update computes one, and always finite
 * and positive. MX scalings have no per-tensor scale and report 1.0 (the
 * scales are the blocks' E8M0 bytes).
 *
 * Returns: the scale
 *
 * Since: 1.1
 */
gfloat
mixprec_fp8_scaling_get_scale (MixprecFp8Scaling *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), 1.0f);
  return self->scale;
}

/**
 * mixprec_fp8_scaling_get_scale_inv:
 * @self: a #MixprecFp8Scaling
 *
 * The factor a decoded FP8 value is multiplied by to read it back: `1 /
 * scale` rounded to single precision (Transformer Engine's `scale_inv`).
 * It is 1.0 for MX scalings, and +Inf when the scale is so small
 * (below 2^-128) that its reciprocal overflows.
 *
 * Returns: the inverse scale
 *
 * Since: 1.1
 */
gfloat
mixprec_fp8_scaling_get_scale_inv (MixprecFp8Scaling *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), 1.0f);
  return self->scale_inv;
}

/* torch.maximum(): NaN wins. On a tie the first wins, so that a -0
 * recorded over a zeroed slot leaves +0 there. */
static inline gfloat
nan_max (gfloat a,
         gfloat b)
{
  if (isnan (a) || isnan (b))
    return NAN;
  return a >= b ? a : b;
}

/**
 * mixprec_fp8_scaling_record_amax:
 * @self: a #MixprecFp8Scaling
 * @amax: the largest magnitude of (a part of) the tensor as cast: zero or
 *   positive, +Inf or NaN
 *
 * Records an amax for the next mixprec_fp8_scaling_update(). Slot 0 of the
 * history becomes `max (slot 0, amax)`, a NaN winning as in
 * torch.maximum(), so a tensor cast in parts may record each part's amax,
 * and an amax agreed across ranks (MAX) may be recorded over the local
 * one. For delayed scaling slot 0 is Transformer Engine's `amax_history[0]`;
 * for current scaling it is the amax the next update computes the scale
 * from. MX scalings ignore it.
 *
 * Since: 1.1
 */
void
mixprec_fp8_scaling_record_amax (MixprecFp8Scaling *self,
                                 gfloat             amax)
{
  g_return_if_fail (MIXPREC_IS_FP8_SCALING (self));
  g_return_if_fail (!(amax < 0.0f));

  if (self->history_len == 0)
    return;
  self->history[0] = nan_max (self->history[0], amax);
}

/* Transformer Engine's `_default_sf_compute`: the scale from an amax, the
 * previous scale kept when the amax is zero or not finite, FLT_MAX when the
 * quotient overflows. The division by 2^margin is exact unless the quotient
 * is subnormal; a quotient that underflows to zero (an amax near FLT_MAX
 * with a large margin) keeps the previous scale rather than storing a zero
 * scale nothing could be cast with. */
static gfloat
compute_scale (gfloat fp8_max,
               gfloat amax,
               gint   margin,
               gfloat previous)
{
  gfloat two_margin = ldexpf (1.0f, margin);
  gfloat scale;

  if (!(amax > 0.0f) || !isfinite (amax))
    return previous;

  scale = (fp8_max / amax) / two_margin;
  if (isinf (scale))
    return FLT_MAX;
  if (scale == 0.0f)
    return previous;
  return scale;
}

/**
 * mixprec_fp8_scaling_update:
 * @self: a #MixprecFp8Scaling
 * @error: return location for a #GError
 *
 * Computes the scale for the next casts from the recorded amaxes.
 * `fp8_max` is the largest finite value of the scaling's dtype (448 for
 * E4M3, 57344 for E5M2); all arithmetic is IEEE single precision with
 * round-to-nearest-even.
 *
 * Delayed scaling, Transformer Engine's `DelayedScaling` step
 * (`_default_get_amax_and_update_history` then `_default_sf_compute`), over
 * the history h[0..n-1] of n = #MixprecFp8Recipe:amax-history-len slots,
 * where h[0] holds the amax recorded since the last update:
 *
 * 1. amax = max (h[0], ..., h[n-1]) for %MIXPREC_FP8_AMAX_MAX (NaN when any
 *    slot is NaN, as torch.max()), h[0] for %MIXPREC_FP8_AMAX_MOST_RECENT;
 * 2. the history rolls by one towards slot 0, as `torch.roll (h, -1)`
 *    (h[i] = h[i+1], h[n-1] = the old h[0]), then h[0] = 0: the amax just
 *    used becomes the newest of the window and the oldest (the old h[1])
 *    drops out; with n = 1 the one slot is only zeroed;
 * 3. q = (fp8_max / amax) / 2^margin, each division correctly rounded;
 * 4. scale = the previous scale when amax is 0, not finite or NaN;
 *    otherwise FLT_MAX when q is +Inf (an amax so small that the quotient
 *    overflows), the previous scale when q underflows to 0 (where
 *    Transformer Engine would store 0), q otherwise;
 * 5. scale_inv = 1 / scale.
 *
 * Current scaling is the same computation with a history of one slot: the
 * amax recorded since the last update (the amax of the tensor about to be
 * cast), which the update then zeroes. Transformer Engine's
 * `Float8CurrentScaling` and torchao's tensorwise scaling compute the same
 * quotient; they differ only for an amax of 0, Inf or NaN (Transformer
 * Engine returns 1.0, torchao clamps the amax to 1e-12), where this keeps
 * the previous scale; the cast of such a tensor does not depend on it.
 *
 * MX scalings have nothing to update.
 *
 * Returns: %TRUE; %FALSE is kept for recipes that may refuse a step
 *
 * Since: 1.1
 */
gboolean
mixprec_fp8_scaling_update (MixprecFp8Scaling  *self,
                            GError            **error)
{
  MixprecFp8Recipe *recipe;
  gfloat amax;
  gfloat scale;
  guint n;

  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  recipe = self->recipe;
  n = self->history_len;
  if (n == 0)
    return TRUE;

  amax = self->history[0];
  if (recipe->kind == MIXPREC_FP8_RECIPE_DELAYED && recipe->amax_compute_algo == MIXPREC_FP8_AMAX_MAX)
    {
      for (guint i = 1; i < n; i++)
        amax = nan_max (amax, self->history[i]);
    }

  if (n > 1)
    {
      gfloat newest = self->history[0];

      memmove (self->history, self->history + 1, (n - 1) * sizeof (gfloat));
      self->history[n - 1] = newest;
    }
  self->history[0] = 0.0f;

  scale = compute_scale (self->fp8_max, amax, mixprec_fp8_recipe_get_margin (recipe), self->scale);
  if (scale != self->scale)
    {
      self->scale = scale;
      self->scale_inv = 1.0f / scale;
      g_object_notify_by_pspec (G_OBJECT (self), scaling_properties[SCALING_PROP_SCALE]);
    }
  return TRUE;
}

/**
 * mixprec_fp8_scaling_get_amax_history:
 * @self: a #MixprecFp8Scaling
 * @n: (out): return location for the number of slots
 *
 * The amax history: slot 0 holds the amax recorded since the last update,
 * slots n-1, n-2, ... the amaxes of the earlier updates, newest first
 * (Transformer Engine's `amax_history` layout). Current scalings have the
 * one slot 0; MX scalings none.
 *
 * Returns: (array length=n) (transfer none) (nullable): the history, valid
 *   until the next call that changes the scaling; %NULL when @n is 0
 *
 * Since: 1.1
 */
const gfloat *
mixprec_fp8_scaling_get_amax_history (MixprecFp8Scaling *self,
                                      guint             *n)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), NULL);
  g_return_val_if_fail (n != NULL, NULL);

  *n = self->history_len;
  return self->history_len > 0 ? self->history : NULL;
}

/**
 * mixprec_fp8_scaling_dup_amax_history:
 * @self: a #MixprecFp8Scaling
 *
 * The amax history as mixprec_fp8_scaling_get_amax_history() describes it,
 * copied: the native-endian single-precision values one after another (a
 * NumPy `float32` buffer).
 *
 * Returns: (transfer full): the history's bytes (empty for MX)
 *
 * Since: 1.1
 */
GBytes *
mixprec_fp8_scaling_dup_amax_history (MixprecFp8Scaling *self)
{
  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), NULL);

  return g_bytes_new (self->history, self->history_len * sizeof (gfloat));
}

static const gchar *
kind_name (MixprecFp8RecipeKind kind)
{
  switch (kind)
    {
    case MIXPREC_FP8_RECIPE_DELAYED:
      return "delayed";
    case MIXPREC_FP8_RECIPE_CURRENT:
      return "current";
    case MIXPREC_FP8_RECIPE_MX:
    default:
      return "mx";
    }
}

/**
 * mixprec_fp8_scaling_save_state:
 * @self: a #MixprecFp8Scaling
 *
 * Describes everything needed to resume this scaling bit-exactly: a
 * dictionary (`a{sv}`) holding "recipe" (`s`: "delayed", "current" or
 * "mx"), "dtype" (`s`, mixprec_dtype_get_name()), "scale" (`d`, the
 * single-precision scale, exactly) and "amax_history" (`ad`, the history
 * in the order mixprec_fp8_scaling_get_amax_history() gives it).
 *
 * Returns: (transfer full): the state, a non-floating `a{sv}` #GVariant
 *
 * Since: 1.1
 */
GVariant *
mixprec_fp8_scaling_save_state (MixprecFp8Scaling *self)
{
  g_auto(GVariantDict) dict = G_VARIANT_DICT_INIT (NULL);
  g_autofree gdouble *history = NULL;

  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), NULL);

  history = g_new0 (gdouble, MAX (self->history_len, 1));
  for (guint i = 0; i < self->history_len; i++)
    history[i] = self->history[i];

  g_variant_dict_insert (&dict, "recipe", "s", kind_name (self->recipe->kind));
  g_variant_dict_insert (&dict, "dtype", "s", mixprec_dtype_get_name (self->dtype));
  g_variant_dict_insert (&dict, "scale", "d", (gdouble) self->scale);
  g_variant_dict_insert_value (&dict, "amax_history",
                               g_variant_new_fixed_array (G_VARIANT_TYPE_DOUBLE, history,
                                                          self->history_len, sizeof (gdouble)));

  return g_variant_ref_sink (g_variant_dict_end (&dict));
}

static gboolean
state_lookup (GVariantDict        *dict,
              const gchar         *key,
              const GVariantType  *type,
              GVariant           **value,
              GError             **error)
{
  g_autoptr(GVariant) v = g_variant_dict_lookup_value (dict, key, NULL);

  if (v == NULL)
    {
      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                   "FP8 scaling state: the key “%s” is missing; "
                   "pass a state from mixprec_fp8_scaling_save_state()", key);
      return FALSE;
    }
  if (!g_variant_is_of_type (v, type))
    {
      g_autofree gchar *wanted = g_variant_type_dup_string (type);

      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                   "FP8 scaling state: the key “%s” must hold a value of type “%s”, got “%s”",
                   key, wanted, g_variant_get_type_string (v));
      return FALSE;
    }
  *value = g_steal_pointer (&v);
  return TRUE;
}

/* A double that is exactly a single-precision value (NaN and ±Inf too). */
static gboolean
is_float_value (gdouble d)
{
  return isnan (d) || (gdouble) (gfloat) d == d;
}

/**
 * mixprec_fp8_scaling_restore_state:
 * @self: a #MixprecFp8Scaling
 * @state: a state from mixprec_fp8_scaling_save_state()
 * @error: return location for a #GError
 *
 * Puts the scaling back into a saved state, after which it continues
 * exactly as the scaling that saved it would have. Keys the scaling does
 * not know are ignored, so that newer versions can add some. Everything is
 * checked before anything changes.
 *
 * Returns: %TRUE on success; %FALSE with @error set to
 *   %MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE, naming the key, when @state is
 *   not an `a{sv}` dictionary, lacks a key, holds a value of the wrong
 *   type, was saved under another recipe kind or dtype or with another
 *   history length, holds a scale that is not a finite positive
 *   single-precision value or an amax that is negative or not a
 *   single-precision value. The scaling is unchanged on failure.
 *
 * Since: 1.1
 */
gboolean
mixprec_fp8_scaling_restore_state (MixprecFp8Scaling  *self,
                                   GVariant           *state,
                                   GError            **error)
{
  g_autoptr(GVariantDict) dict = NULL;
  g_autoptr(GVariant) recipe = NULL;
  g_autoptr(GVariant) dtype = NULL;
  g_autoptr(GVariant) scale_v = NULL;
  g_autoptr(GVariant) history_v = NULL;
  const gdouble *history;
  gsize n_history = 0;
  gdouble scale;

  g_return_val_if_fail (MIXPREC_IS_FP8_SCALING (self), FALSE);
  g_return_val_if_fail (state != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!g_variant_is_of_type (state, G_VARIANT_TYPE_VARDICT))
    {
      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                   "FP8 scaling state: must be a dictionary of type “a{sv}”, got a value of type “%s”",
                   g_variant_get_type_string (state));
      return FALSE;
    }
  dict = g_variant_dict_new (state);

  if (!state_lookup (dict, "recipe", G_VARIANT_TYPE_STRING, &recipe, error) ||
      !state_lookup (dict, "dtype", G_VARIANT_TYPE_STRING, &dtype, error) ||
      !state_lookup (dict, "scale", G_VARIANT_TYPE_DOUBLE, &scale_v, error) ||
      !state_lookup (dict, "amax_history", G_VARIANT_TYPE ("ad"), &history_v, error))
    return FALSE;

  if (g_strcmp0 (g_variant_get_string (recipe, NULL), kind_name (self->recipe->kind)) != 0)
    {
      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                   "FP8 scaling state: “recipe” is “%s”, but this scaling follows a %s recipe",
                   g_variant_get_string (recipe, NULL), kind_name (self->recipe->kind));
      return FALSE;
    }
  if (g_strcmp0 (g_variant_get_string (dtype, NULL), mixprec_dtype_get_name (self->dtype)) != 0)
    {
      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                   "FP8 scaling state: “dtype” is “%s”, but this scaling casts to %s",
                   g_variant_get_string (dtype, NULL), mixprec_dtype_get_name (self->dtype));
      return FALSE;
    }

  scale = g_variant_get_double (scale_v);
  if (!isfinite (scale) || !(scale > 0.0) || !is_float_value (scale))
    {
      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                   "FP8 scaling state: “scale” must be a finite, positive single-precision value, got %g",
                   scale);
      return FALSE;
    }
  if (self->history_len == 0 && scale != 1.0)
    {
      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                   "FP8 scaling state: “scale” must be 1 for an MX scaling, which has no "
                   "per-tensor scale, got %g", scale);
      return FALSE;
    }

  history = g_variant_get_fixed_array (history_v, &n_history, sizeof (gdouble));
  if (n_history != self->history_len)
    {
      g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                   "FP8 scaling state: “amax_history” has %" G_GSIZE_FORMAT " values, "
                   "but this scaling's recipe keeps %u",
                   n_history, self->history_len);
      return FALSE;
    }
  for (gsize i = 0; i < n_history; i++)
    {
      if (history[i] < 0.0 || !is_float_value (history[i]))
        {
          g_set_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
                       "FP8 scaling state: “amax_history”[%" G_GSIZE_FORMAT "] must be zero, "
                       "positive or NaN and a single-precision value, got %g",
                       i, history[i]);
          return FALSE;
        }
    }

  for (gsize i = 0; i < n_history; i++)
    self->history[i] = (gfloat) history[i];
  if ((gfloat) scale != self->scale)
    {
      self->scale = (gfloat) scale;
      self->scale_inv = 1.0f / self->scale;
      g_object_notify_by_pspec (G_OBJECT (self), scaling_properties[SCALING_PROP_SCALE]);
    }
  return TRUE;
}
