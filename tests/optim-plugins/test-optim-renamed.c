/* test-optim-renamed.c — "adamw-renamed": the cpu adamw of
 * plugins/optim-adamw/ (its hyper-parameters, prepare() and scalar
 * kernel) with its two slots named "m" and "v". Its second moment is
 * unsigned (state_signed_mask 0x1) under a name that is not
 * "exp_avg_sq", so the library can only learn the sign from the mask:
 * test-state-signed reads its low-bit states back through the engine and
 * through checkpoints. */
#include "config.h"

#include "optim-adamw/adamw-kernels.h"

static const char *const renamed_states[2] = { "m", "v" };

_MIXPREC_OPTIM_PLUGIN_DEFINE (test_optim_renamed, "test-optim-renamed",
                              "adamw with its state slots renamed (tests)",
                              "adamw-renamed",
                              "adamw whose slots are \"m\" (signed) and \"v\" (unsigned)",
                              _mixprec_adamw_hparams, renamed_states, 0x1u, _mixprec_adamw_prepare,
                              _mixprec_adamw_run_scalar, NULL, NULL, NULL)
