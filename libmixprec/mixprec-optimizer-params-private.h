/* mixprec-optimizer-params-private.h — the optimizer a configuration
 * names, found in the plugin registry, and its parameters checked against
 * the plugin's schema: shared by the engine, which runs it, and the
 * configuration, which reports what the engine would refuse. */
#pragma once

#include <json-glib/json-glib.h>

#include "mixprec.h"

G_BEGIN_DECLS

/* The optimizer a configuration without an optimizer section runs. */
#define _MIXPREC_DEFAULT_OPTIMIZER_TYPE "AdamW"

/* The feature name a DeepSpeed optimizer type maps onto: Adam, AdamW and
 * FusedAdam onto adamw; any other type lower-cased. */
gchar          *_mixprec_optimizer_feature_name (const gchar *type);

/* Finds the optimizer for @type (NULL: the default) on @device and checks
 * @params (nullable) against its hyper-parameter schema. Each problem is
 * appended to @errors as one "path: rule, got value" line ending in '\n',
 * every one of them, not only the first; DeepSpeed's keys that only choose
 * an implementation are appended to @warnings (nullable) the same way. Returns the feature (transfer
 * full) with *@hparams (transfer full, schema order: defaults overridden
 * by @params) and *@n_hparams set, also when a parameter was refused; NULL
 * when no plugin provides the optimizer (the reason is in @errors). */
MixprecFeature *_mixprec_optimizer_resolve      (const gchar *type,
                                                 JsonObject  *params,
                                                 const gchar *device,
                                                 gdouble    **hparams,
                                                 guint       *n_hparams,
                                                 GString     *errors,
                                                 GString     *warnings);

/* @hparams of @feature written as an optimizer "params" object, in the
 * spelling of a DeepSpeed configuration (beta1 and beta2 as "betas"). */
JsonObject     *_mixprec_optimizer_params_to_json (MixprecFeature *feature,
                                                   const gdouble  *hparams);

G_END_DECLS
