/* mixprec-fp8-recipe-private.h — what the config shares with the FP8 recipes */
#pragma once

#include "mixprec-fp8-recipe.h"

G_BEGIN_DECLS

/* Checks every argument by the public constructors' rules and builds the
 * recipe, with #MixprecFp8Recipe:saturate as given (the config's
 * "saturate"). Arguments the kind does not use are ignored. */
MixprecFp8Recipe *_mixprec_fp8_recipe_new (MixprecFp8RecipeKind  kind,
                                           MixprecFp8Format      format,
                                           guint                 amax_history_len,
                                           MixprecFp8AmaxAlgo    amax_compute_algo,
                                           gint                  margin,
                                           guint                 block_size,
                                           gboolean              saturate,
                                           GError              **error);

/* _mixprec_fp8_recipe_new() with the MX recipe's scale mode (ignored by
 * the other kinds). */
MixprecFp8Recipe *_mixprec_fp8_recipe_new_full (MixprecFp8RecipeKind  kind,
                                                MixprecFp8Format      format,
                                                guint                 amax_history_len,
                                                MixprecFp8AmaxAlgo    amax_compute_algo,
                                                gint                  margin,
                                                guint                 block_size,
                                                gboolean              saturate,
                                                MixprecMxScaleMode    mx_scale_mode,
                                                GError              **error);

G_END_DECLS
