/* test-abi.c — the binary layout of every public struct and vtable, and the
 * plugin ABI version checked in both directions.
 *
 * The layouts are a committed table for x86-64 (LP64, System V), worked out
 * by hand from the declarations: a program or plugin compiled against one
 * release must find every field at the same offset in the next. A change
 * that moves a field fails here as well as in `make check-abi`; a new
 * public struct fails /abi/layout/complete until it has its row below.
 * Other ABIs skip the layout tests (their table would differ).
 *
 * Plugin ABI, both directions:
 *  - library -> plugin: the registry refuses a plugin built for another
 *    major or a newer minor (tests/test-registry.c) and accepts equal ones;
 *    here, the host table the library passes to init() carries its
 *    struct_size and ABI version (a plugin reads them back);
 *  - plugin -> library: the shipped plugins check the host table before
 *    they use it: one too short for register_optimizer (an older library)
 *    is refused with a sentence, not read past its end; a longer one with a
 *    newer minor (a newer library) is accepted, reading only the fields the
 *    plugin knows. */
#include <stddef.h>
#include <string.h>

#include <gmodule.h>
#include <mixprec/mixprec.h>
#include <mixprec/mixprec-plugin-abi.h>

#if defined(__x86_64__) && defined(__LP64__)
# define ABI_TABLE_APPLIES 1
#else
# define ABI_TABLE_APPLIES 0
#endif

typedef struct {
  const gchar *field;
  gsize offset;
  gsize expected;
} FieldOffset;

typedef struct {
  const gchar *name;
  gsize size;
  gsize expected_size;
  const FieldOffset *fields;   /* NULL-terminated */
} Layout;

#define F(T, f, n) { #f, G_STRUCT_OFFSET (T, f), n }
#define END { NULL, 0, 0 }

/* ------------------------------------------------------------ the GObject API */

/* gboolean, then 8-byte fields from offset 8; four reserved pointers. */
static const FieldOffset step_result_fields[] = {
  F (MixprecStepResult, applied, 0),
  F (MixprecStepResult, loss_scale, 8),
  F (MixprecStepResult, next_loss_scale, 16),
  F (MixprecStepResult, grad_norm, 24),
  F (MixprecStepResult, clip_coef, 32),
  F (MixprecStepResult, step, 40),
  F (MixprecStepResult, applied_steps, 48),
  F (MixprecStepResult, skipped_steps, 56),
  F (MixprecStepResult, lr, 64),
  F (MixprecStepResult, _mixprec_reserved, 72),
  END
};

static const FieldOffset memory_report_fields[] = {
  F (MixprecMemoryReport, working, 0),
  F (MixprecMemoryReport, gradients, 8),
  F (MixprecMemoryReport, accumulation, 16),
  F (MixprecMemoryReport, masters, 24),
  F (MixprecMemoryReport, optimizer_state, 32),
  F (MixprecMemoryReport, communication, 40),
  F (MixprecMemoryReport, total, 48),
  F (MixprecMemoryReport, _mixprec_reserved, 56),
  END
};

/* Eight guint64, then four reserved pointers. */
static const FieldOffset comm_bytes_fields[] = {
  F (MixprecCommBytes, all_gather, 0),
  F (MixprecCommBytes, reduce_scatter, 8),
  F (MixprecCommBytes, scalars, 16),
  F (MixprecCommBytes, other, 24),
  F (MixprecCommBytes, total, 32),
  F (MixprecCommBytes, inter_host, 40),
  F (MixprecCommBytes, inter_host_all_gather, 48),
  F (MixprecCommBytes, inter_host_reduce_scatter, 56),
  F (MixprecCommBytes, _mixprec_reserved, 64),
  END
};

static const FieldOffset memory_buffer_fields[] = {
  F (MixprecMemoryBuffer, name, 0),
  F (MixprecMemoryBuffer, bytes, 8),
  F (MixprecMemoryBuffer, peak_bytes, 16),
  F (MixprecMemoryBuffer, planned_bytes, 24),
  F (MixprecMemoryBuffer, _mixprec_reserved, 32),
  END
};

/* guint, padding to 8, three guint64. */
static const FieldOffset partition_piece_fields[] = {
  F (MixprecPartitionPiece, param_index, 0),
  F (MixprecPartitionPiece, param_offset, 8),
  F (MixprecPartitionPiece, flat_offset, 16),
  F (MixprecPartitionPiece, length, 24),
  END
};

/* Six 4-byte enums and gboolean, then the reserved pointers at 24. */
static const FieldOffset param_precision_fields[] = {
  F (MixprecParamPrecision, working_dtype, 0),
  F (MixprecParamPrecision, master_dtype, 4),
  F (MixprecParamPrecision, has_master, 8),
  F (MixprecParamPrecision, grad_accum_dtype, 12),
  F (MixprecParamPrecision, comm_dtype, 16),
  F (MixprecParamPrecision, reason, 20),
  F (MixprecParamPrecision, _mixprec_reserved, 24),
  END
};

/* A derivable type's instance is its parent instance: GObject is a GTypeInstance
 * pointer, a guint ref count and a GData pointer (24 bytes). */
static const FieldOffset loss_scaler_fields[] = {
  F (MixprecLossScaler, parent_instance, 0),
  END
};

/* GObjectClass is 136 bytes (GTypeClass, a GSList pointer, eight methods,
 * four gsize/pointer fields and three pointers of padding); the four
 * virtual methods follow, then eight reserved pointers. */
static const FieldOffset loss_scaler_class_fields[] = {
  F (MixprecLossScalerClass, parent_class, 0),
  F (MixprecLossScalerClass, get_scale, 136),
  F (MixprecLossScalerClass, update, 144),
  F (MixprecLossScalerClass, fill_state, 152),
  F (MixprecLossScalerClass, apply_state, 160),
  F (MixprecLossScalerClass, _mixprec_reserved, 168),
  END
};

/* ------------------------------------------------------------ the plugin ABI */

static const FieldOffset hparam_spec_fields[] = {
  F (MixprecHParamSpecV1, name, 0),
  F (MixprecHParamSpecV1, description, 8),
  F (MixprecHParamSpecV1, type, 16),
  F (MixprecHParamSpecV1, default_value, 24),
  F (MixprecHParamSpecV1, min_value, 32),
  F (MixprecHParamSpecV1, max_value, 40),
  F (MixprecHParamSpecV1, reserved, 48),
  END
};

static const FieldOffset optimizer_step_fields[] = {
  F (MixprecOptimizerStepV1, struct_size, 0),
  F (MixprecOptimizerStepV1, hparams, 8),
  F (MixprecOptimizerStepV1, n_hparams, 16),
  F (MixprecOptimizerStepV1, step, 24),
  F (MixprecOptimizerStepV1, lr, 32),
  F (MixprecOptimizerStepV1, grad_factor, 40),
  F (MixprecOptimizerStepV1, grad_dtype, 44),
  F (MixprecOptimizerStepV1, working_dtype, 48),
  F (MixprecOptimizerStepV1, rounding, 52),
  F (MixprecOptimizerStepV1, seed, 56),
  F (MixprecOptimizerStepV1, first_index, 64),
  F (MixprecOptimizerStepV1, device_stream, 72),
  END
};

static const FieldOffset optimizer_fields[] = {
  F (MixprecOptimizerV1, name, 0),
  F (MixprecOptimizerV1, device, 8),
  F (MixprecOptimizerV1, rank, 16),
  F (MixprecOptimizerV1, description, 24),
  F (MixprecOptimizerV1, hparams, 32),
  F (MixprecOptimizerV1, n_hparams, 40),
  F (MixprecOptimizerV1, n_state_slots, 44),
  F (MixprecOptimizerV1, state_names, 48),
  F (MixprecOptimizerV1, step, 56),
  F (MixprecOptimizerV1, reserved, 64),
  END
};

/* Revision 2 (ABI 1.1): a whole V1 block first, so &args->base is a V1
 * argument block. */
static const FieldOffset optimizer_step_v2_fields[] = {
  F (MixprecOptimizerStepV2, base, 0),
  F (MixprecOptimizerStepV2, state_dtypes, 80),
  F (MixprecOptimizerStepV2, state_rounding, 88),
  F (MixprecOptimizerStepV2, state_seed, 96),
  END
};

static const FieldOffset optimizer_v2_fields[] = {
  F (MixprecOptimizerV2, name, 0),
  F (MixprecOptimizerV2, device, 8),
  F (MixprecOptimizerV2, rank, 16),
  F (MixprecOptimizerV2, description, 24),
  F (MixprecOptimizerV2, hparams, 32),
  F (MixprecOptimizerV2, n_hparams, 40),
  F (MixprecOptimizerV2, n_state_slots, 44),
  F (MixprecOptimizerV2, state_names, 48),
  F (MixprecOptimizerV2, state_dtype_mask, 56),
  F (MixprecOptimizerV2, step, 64),
  F (MixprecOptimizerV2, reserved, 72),
  END
};

/* Revision 3 (ABI 1.4): a whole V2 step first, then the formats. */
static const FieldOffset optimizer_step_v3_fields[] = {
  F (MixprecOptimizerStepV3, v2, 0),
  F (MixprecOptimizerStepV3, state_formats, 104),
  F (MixprecOptimizerStepV3, state_scales, 112),
  F (MixprecOptimizerStepV3, block_size, 120),
  F (MixprecOptimizerStepV3, master_format, 124),
  F (MixprecOptimizerStepV3, master_extra, 128),
  /* ABI 1.6 appended the numerics fields: a plugin reads them only where
   * struct_size covers them, so the 136 bytes of 1.4 still work. */
  F (MixprecOptimizerStepV3, numerics, 136),
  F (MixprecOptimizerStepV3, n_numerics, 144),
  F (MixprecOptimizerStepV3, working_precision, 148),
  F (MixprecOptimizerStepV3, working_emin, 152),
  END
};

/* ABI 1.6: one run's numerics, filled by the optimizer. */
static const FieldOffset optimizer_numerics_v1_fields[] = {
  F (MixprecOptimizerNumericsV1, end, 0),
  F (MixprecOptimizerNumericsV1, grad_under, 8),
  F (MixprecOptimizerNumericsV1, grad_over, 12),
  F (MixprecOptimizerNumericsV1, nonfinite, 16),
  F (MixprecOptimizerNumericsV1, nonzero, 24),
  F (MixprecOptimizerNumericsV1, under, 32),
  F (MixprecOptimizerNumericsV1, over, 40),
  F (MixprecOptimizerNumericsV1, grad_amax, 48),
  F (MixprecOptimizerNumericsV1, measured, 52),
  F (MixprecOptimizerNumericsV1, stale, 56),
  F (MixprecOptimizerNumericsV1, delta_sumsq, 64),
  F (MixprecOptimizerNumericsV1, old_sumsq, 72),
  END
};

static const FieldOffset optimizer_v3_fields[] = {
  F (MixprecOptimizerV3, name, 0),
  F (MixprecOptimizerV3, device, 8),
  F (MixprecOptimizerV3, rank, 16),
  F (MixprecOptimizerV3, description, 24),
  F (MixprecOptimizerV3, hparams, 32),
  F (MixprecOptimizerV3, n_hparams, 40),
  F (MixprecOptimizerV3, n_state_slots, 44),
  F (MixprecOptimizerV3, state_names, 48),
  F (MixprecOptimizerV3, state_dtype_mask, 56),
  F (MixprecOptimizerV3, state_format_mask, 60),
  F (MixprecOptimizerV3, master_format_mask, 64),
  F (MixprecOptimizerV3, state_signed_mask, 68),
  F (MixprecOptimizerV3, step, 72),
  /* ABI 1.6: the first of revision 3's eight reserved words. */
  F (MixprecOptimizerV3, numerics_master_mask, 80),
  F (MixprecOptimizerV3, reserved, 88),
  END
};

static const FieldOffset bootstrap_fields[] = {
  F (MixprecBootstrapV1, struct_size, 0),
  F (MixprecBootstrapV1, rank, 8),
  F (MixprecBootstrapV1, world_size, 12),
  F (MixprecBootstrapV1, local_rank, 16),
  F (MixprecBootstrapV1, local_world_size, 20),
  F (MixprecBootstrapV1, ctx, 24),
  F (MixprecBootstrapV1, all_gather, 32),
  F (MixprecBootstrapV1, barrier, 40),
  F (MixprecBootstrapV1, reserved, 48),
  END
};

static const FieldOffset comm_init_fields[] = {
  F (MixprecCommInitV1, struct_size, 0),
  F (MixprecCommInitV1, bootstrap, 8),
  F (MixprecCommInitV1, timeout_ms, 16),
  F (MixprecCommInitV1, device_stream, 24),
  END
};

static const FieldOffset comm_fields[] = {
  F (MixprecCommV1, name, 0),
  F (MixprecCommV1, device, 8),
  F (MixprecCommV1, rank, 16),
  F (MixprecCommV1, description, 24),
  F (MixprecCommV1, dtype_mask, 32),
  F (MixprecCommV1, init, 40),
  F (MixprecCommV1, all_reduce, 48),
  F (MixprecCommV1, reduce_scatter, 56),
  F (MixprecCommV1, all_gather, 64),
  F (MixprecCommV1, broadcast, 72),
  F (MixprecCommV1, barrier, 80),
  F (MixprecCommV1, test, 88),
  F (MixprecCommV1, wait, 96),
  F (MixprecCommV1, abort, 104),
  F (MixprecCommV1, finalize, 112),
  F (MixprecCommV1, reserved, 120),
  END
};

static const FieldOffset device_open_fields[] = {
  F (MixprecDeviceOpenV1, struct_size, 0),
  F (MixprecDeviceOpenV1, ordinal, 8),
  END
};

static const FieldOffset device_range_fields[] = {
  F (MixprecDeviceRangeV1, data, 0),
  F (MixprecDeviceRangeV1, dtype, 8),
  F (MixprecDeviceRangeV1, n, 16),
  END
};

static const FieldOffset device_fields[] = {
  F (MixprecDeviceV1, name, 0),
  F (MixprecDeviceV1, rank, 8),
  F (MixprecDeviceV1, description, 16),
  F (MixprecDeviceV1, probe, 24),
  F (MixprecDeviceV1, open, 32),
  F (MixprecDeviceV1, close, 40),
  F (MixprecDeviceV1, describe, 48),
  F (MixprecDeviceV1, get_stream, 56),
  F (MixprecDeviceV1, alloc, 64),
  F (MixprecDeviceV1, free, 72),
  F (MixprecDeviceV1, memset_zero, 80),
  F (MixprecDeviceV1, copy, 88),
  F (MixprecDeviceV1, synchronize, 96),
  F (MixprecDeviceV1, event_create, 104),
  F (MixprecDeviceV1, event_record, 112),
  F (MixprecDeviceV1, event_query, 120),
  F (MixprecDeviceV1, event_wait, 128),
  F (MixprecDeviceV1, event_destroy, 136),
  F (MixprecDeviceV1, convert, 144),
  F (MixprecDeviceV1, accumulate, 152),
  F (MixprecDeviceV1, scale, 160),
  F (MixprecDeviceV1, sumsq_blocks, 168),
  F (MixprecDeviceV1, sum_ordered, 176),
  F (MixprecDeviceV1, reserved, 184),
  END
};

/* Revision 2 (ABI 1.5): a whole V1 vtable first, then the all-to-all. */
static const FieldOffset comm_v2_fields[] = {
  F (MixprecCommV2, base, 0),
  F (MixprecCommV2, all_to_all, 184),
  F (MixprecCommV2, all_to_all_v, 192),
  F (MixprecCommV2, reserved, 200),
  END
};

/* Revision 2 (ABI 1.2): a whole V1 vtable first, then pinned host memory. */
static const FieldOffset device_v2_fields[] = {
  F (MixprecDeviceV2, base, 0),
  F (MixprecDeviceV2, host_alloc, 312),
  F (MixprecDeviceV2, host_free, 320),
  F (MixprecDeviceV2, reserved, 328),
  END
};

/* Revision 3 (ABI 1.3): a whole V2 vtable first, then the float8 casts. */
static const FieldOffset device_v3_fields[] = {
  F (MixprecDeviceV3, base, 0),
  F (MixprecDeviceV3, fp8_cast, 456),
  F (MixprecDeviceV3, mx_cast, 464),
  F (MixprecDeviceV3, reserved, 472),
  END
};

static const FieldOffset plugin_host_fields[] = {
  F (MixprecPluginHostV1, struct_size, 0),
  F (MixprecPluginHostV1, abi_major, 8),
  F (MixprecPluginHostV1, abi_minor, 12),
  F (MixprecPluginHostV1, host_data, 16),
  F (MixprecPluginHostV1, register_optimizer, 24),
  F (MixprecPluginHostV1, register_comm, 32),
  F (MixprecPluginHostV1, register_device, 40),
  /* ABI 1.1 took the first reserved pointer; the size did not change. */
  F (MixprecPluginHostV1, register_optimizer_v2, 48),
  /* ABI 1.2 took the next one. */
  F (MixprecPluginHostV1, register_device_v2, 56),
  /* ABI 1.3 took the next one. */
  F (MixprecPluginHostV1, register_device_v3, 64),
  /* Library 1.1 took the next two for the plugin's logger. */
  F (MixprecPluginHostV1, log, 72),
  F (MixprecPluginHostV1, log_data, 80),
  /* ABI 1.4 took the next one. */
  F (MixprecPluginHostV1, register_optimizer_v3, 88),
  /* ABI 1.5 took the next one. */
  F (MixprecPluginHostV1, register_comm_v2, 96),
  F (MixprecPluginHostV1, reserved, 104),
  END
};

/* abi_major and abi_minor first in every revision: the library reads them
 * before anything else. */
static const FieldOffset plugin_desc_fields[] = {
  F (MixprecPluginDesc, abi_major, 0),
  F (MixprecPluginDesc, abi_minor, 4),
  F (MixprecPluginDesc, name, 8),
  F (MixprecPluginDesc, description, 16),
  F (MixprecPluginDesc, version, 24),
  F (MixprecPluginDesc, license, 32),
  F (MixprecPluginDesc, origin, 40),
  F (MixprecPluginDesc, init, 48),
  F (MixprecPluginDesc, reserved, 56),
  END
};

#define L(T, n, fields) { #T, sizeof (T), n, fields }

static const Layout layouts[] = {
  L (MixprecStepResult, 104, step_result_fields),
  L (MixprecMemoryReport, 88, memory_report_fields),
  L (MixprecMemoryBuffer, 64, memory_buffer_fields),
  L (MixprecCommBytes, 96, comm_bytes_fields),
  L (MixprecPartitionPiece, 32, partition_piece_fields),
  L (MixprecParamPrecision, 56, param_precision_fields),
  L (MixprecLossScaler, 24, loss_scaler_fields),
  L (MixprecLossScalerClass, 232, loss_scaler_class_fields),
  L (MixprecHParamSpecV1, 80, hparam_spec_fields),
  L (MixprecOptimizerStepV1, 80, optimizer_step_fields),
  L (MixprecOptimizerV1, 128, optimizer_fields),
  L (MixprecOptimizerStepV2, 104, optimizer_step_v2_fields),
  L (MixprecOptimizerV2, 136, optimizer_v2_fields),
  L (MixprecOptimizerStepV3, 160, optimizer_step_v3_fields),
  L (MixprecOptimizerNumericsV1, 80, optimizer_numerics_v1_fields),
  L (MixprecOptimizerV3, 144, optimizer_v3_fields),
  L (MixprecBootstrapV1, 112, bootstrap_fields),
  L (MixprecCommInitV1, 32, comm_init_fields),
  L (MixprecCommV1, 184, comm_fields),
  L (MixprecCommV2, 256, comm_v2_fields),
  L (MixprecDeviceOpenV1, 16, device_open_fields),
  L (MixprecDeviceRangeV1, 24, device_range_fields),
  L (MixprecDeviceV1, 312, device_fields),
  L (MixprecDeviceV2, 456, device_v2_fields),
  L (MixprecDeviceV3, 600, device_v3_fields),
  L (MixprecPluginHostV1, 160, plugin_host_fields),
  L (MixprecPluginDesc, 120, plugin_desc_fields),
};

static void
test_layout (gconstpointer data)
{
  const Layout *layout = data;

  if (!ABI_TABLE_APPLIES)
    {
      g_test_skip ("the layout table is written for x86-64 (LP64)");
      return;
    }
  for (const FieldOffset *f = layout->fields; f->field != NULL; f++)
    {
      if (f->offset != f->expected)
        g_test_message ("%s.%s is at offset %" G_GSIZE_FORMAT ", the released ABI has it at %" G_GSIZE_FORMAT,
                        layout->name, f->field, f->offset, f->expected);
      g_assert_cmpuint (f->offset, ==, f->expected);
    }
  if (layout->size != layout->expected_size)
    g_test_message ("sizeof (%s) is %" G_GSIZE_FORMAT ", the released ABI has %" G_GSIZE_FORMAT,
                    layout->name, layout->size, layout->expected_size);
  g_assert_cmpuint (layout->size, ==, layout->expected_size);
}

/* ------------------------------------------------------------ completeness */

/* Adds the name of every struct (and union) that the header text defines:
 * `typedef struct [tag] { ... } Name;`, `struct [_]Name { ... };` and the
 * instance and class structs of G_DECLARE_DERIVABLE_TYPE. G_DECLARE_FINAL_TYPE
 * defines no public layout beyond its parent's. */
static void
collect_struct_names (const gchar *text,
                      GHashTable  *names)
{
  g_autoptr(GRegex) comments = g_regex_new ("/\\*.*?\\*/|//[^\\n]*", G_REGEX_DOTALL, 0, NULL);
  g_autoptr(GRegex) opening = g_regex_new ("\\b(typedef\\s+)?(?:struct|union)\\s*(\\w*)\\s*\\{", 0, 0, NULL);
  g_autoptr(GRegex) closing = g_regex_new ("^\\s*(\\w+)\\s*;", 0, 0, NULL);
  g_autoptr(GRegex) derivable = g_regex_new ("G_DECLARE_DERIVABLE_TYPE\\s*\\(\\s*(\\w+)", 0, 0, NULL);
  g_autofree gchar *code = g_regex_replace_literal (comments, text, -1, 0, " ", 0, NULL);
  g_autoptr(GMatchInfo) match = NULL;

  g_regex_match (opening, code, 0, &match);
  while (g_match_info_matches (match))
    {
      g_autofree gchar *is_typedef = g_match_info_fetch (match, 1);
      g_autofree gchar *tag = g_match_info_fetch (match, 2);
      gint start, end, depth = 1;
      const gchar *p;

      g_match_info_fetch_pos (match, 0, &start, &end);
      for (p = code + end; *p != '\0' && depth > 0; p++)
        depth += (*p == '{') - (*p == '}');
      if (is_typedef != NULL && *is_typedef != '\0')
        {
          g_autoptr(GMatchInfo) name = NULL;

          if (g_regex_match (closing, p, 0, &name))
            g_hash_table_add (names, g_match_info_fetch (name, 1));
        }
      else if (tag != NULL && *tag != '\0')
        g_hash_table_add (names, g_strdup (tag[0] == '_' ? tag + 1 : tag));
      g_match_info_next (match, NULL);
    }
  g_clear_pointer (&match, g_match_info_free);

  g_regex_match (derivable, code, 0, &match);
  while (g_match_info_matches (match))
    {
      g_autofree gchar *type = g_match_info_fetch (match, 1);

      g_hash_table_add (names, g_strdup (type));
      g_hash_table_add (names, g_strconcat (type, "Class", NULL));
      g_match_info_next (match, NULL);
    }
}

static void
test_layout_complete (void)
{
  g_autofree gchar *dir = g_test_build_filename (G_TEST_DIST, "..", "libmixprec", NULL);
  g_autoptr(GHashTable) names = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) headers = g_dir_open (dir, 0, &error);
  g_autoptr(GString) missing = g_string_new (NULL);
  const gchar *file;
  guint n_headers = 0;
  GHashTableIter iter;
  gpointer name;

  g_assert_no_error (error);
  while ((file = g_dir_read_name (headers)) != NULL)
    {
      g_autofree gchar *path = NULL;
      g_autofree gchar *text = NULL;

      if (!g_str_has_prefix (file, "mixprec") || !g_str_has_suffix (file, ".h") ||
          g_str_has_suffix (file, "-private.h"))
        continue;
      path = g_build_filename (dir, file, NULL);
      g_assert_true (g_file_get_contents (path, &text, NULL, &error));
      g_assert_no_error (error);
      collect_struct_names (text, names);
      n_headers++;
    }
  g_assert_cmpuint (n_headers, >, 10);
  /* The scan itself must find the structs the table already has. */
  g_assert_true (g_hash_table_contains (names, "MixprecStepResult"));
  g_assert_true (g_hash_table_contains (names, "MixprecPartitionPiece"));
  g_assert_true (g_hash_table_contains (names, "MixprecPluginHostV1"));
  g_assert_true (g_hash_table_contains (names, "MixprecLossScalerClass"));

  g_hash_table_iter_init (&iter, names);
  while (g_hash_table_iter_next (&iter, &name, NULL))
    {
      gboolean known = FALSE;

      for (gsize i = 0; i < G_N_ELEMENTS (layouts) && !known; i++)
        known = g_str_equal (layouts[i].name, name);
      if (!known)
        g_string_append_printf (missing, " %s", (const gchar *) name);
    }
  if (missing->len > 0)
    g_test_message ("public structs without a row in tests/test-abi.c's layout table:%s; "
                    "add their sizes and field offsets (x86-64) there", missing->str);
  g_assert_cmpstr (missing->str, ==, "");
}

/* ------------------------------------------------------------ plugin ABI */

/* The library -> plugin direction: the host table the registry hands to
 * init() is read back through tests/abi-plugins/test-host-check.c. */
static void
test_plugin_host_table (void)
{
  g_autofree gchar *dir = g_test_build_filename (G_TEST_BUILT, "abi-plugins", NULL);
  const gchar *paths[] = { dir, NULL };
  g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (paths, FALSE);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecFeature) feature = NULL;
  g_autofree gchar *expected = g_strdup_printf ("struct_size=%" G_GSIZE_FORMAT " abi=%d.%d",
                                                sizeof (MixprecPluginHostV1),
                                                MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
                                                MIXPREC_PLUGIN_ABI_VERSION_MINOR);
  GList *failures = mixprec_registry_get_failures (registry);

  for (GList *l = failures; l != NULL; l = l->next)
    g_test_message ("%s", mixprec_plugin_get_load_error (l->data)->message);
  g_assert_null (failures);

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER,
                                           "hostcheck", "cpu", &error);
  g_assert_no_error (error);
  g_assert_nonnull (feature);
  g_assert_cmpstr (mixprec_feature_get_description (feature), ==, expected);
  g_assert_cmpuint (mixprec_plugin_get_abi_major (mixprec_feature_get_plugin (feature)), ==,
                    MIXPREC_PLUGIN_ABI_VERSION_MAJOR);
  g_assert_cmpuint (mixprec_plugin_get_abi_minor (mixprec_feature_get_plugin (feature)), <=,
                    MIXPREC_PLUGIN_ABI_VERSION_MINOR);
}

/* A newer library's host table: the V1 fields, then fields a later minor
 * revision appends. */
typedef struct {
  MixprecPluginHostV1 v1;
  void *appended[4];
} NewerHost;

typedef struct {
  guint n_registered;
  const MixprecOptimizerV2 *optimizer;
} Registrations;

/* The shipped optimizers speak revision 2: a V1 registration is a bug. */
static int
record_optimizer (MixprecPluginHostV1      *host,
                  const MixprecOptimizerV1 *optimizer,
                  char                     *errbuf,
                  size_t                    errbuf_len)
{
  g_assert_not_reached ();
  return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
}

static int
record_optimizer_v2 (MixprecPluginHostV1      *host,
                     const MixprecOptimizerV2 *optimizer,
                     char                     *errbuf,
                     size_t                    errbuf_len)
{
  Registrations *r = host->host_data;

  r->n_registered++;
  r->optimizer = optimizer;
  return MIXPREC_PLUGIN_OK;
}

static const MixprecPluginDesc *
open_shipped_plugin (const gchar *name)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *base = g_strdup_printf ("mixprec-%s.so", name);
  g_autofree gchar *symbol = g_strdup_printf ("mixprec_plugin_%s_get_desc", name);
  g_autofree gchar *path = NULL;
  MixprecPluginGetDescFunc get_desc = NULL;
  GModule *module;

  g_assert_nonnull (top);
  path = g_build_filename (top, "plugins", ".libs", base, NULL);
  module = g_module_open (path, G_MODULE_BIND_LOCAL);
  if (module == NULL)
    g_error ("%s", g_module_error ());
  g_module_make_resident (module);
  g_strdelimit (symbol, "-", '_');
  g_assert_true (g_module_symbol (module, symbol, (gpointer *) &get_desc));
  return get_desc ();
}

static const gchar *const optim_plugins[][2] = {
  { "optim-adamw", "adamw" },
  { "optim-sgd", "sgd" },
  { "optim-lion", "lion" },
};

/* The plugin -> library direction, for each shipped optimizer plugin. */
static void
test_plugin_checks_host (void)
{
  for (gsize i = 0; i < G_N_ELEMENTS (optim_plugins); i++)
    {
      const MixprecPluginDesc *desc = open_shipped_plugin (optim_plugins[i][0]);
      Registrations r = { 0 };
      NewerHost newer;
      MixprecPluginHostV1 older;
      char errbuf[256];
      int status;

      /* What the registry checks before init(). */
      g_assert_nonnull (desc);
      g_assert_cmpuint (desc->abi_major, ==, MIXPREC_PLUGIN_ABI_VERSION_MAJOR);
      g_assert_cmpuint (desc->abi_minor, <=, MIXPREC_PLUGIN_ABI_VERSION_MINOR);
      g_assert_cmpstr (desc->name, ==, optim_plugins[i][0]);

      /* An older library whose table ends before register_optimizer: the
       * plugin must refuse it without calling through it. */
      memset (&older, 0, sizeof older);
      older.struct_size = offsetof (MixprecPluginHostV1, register_optimizer);
      older.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
      older.host_data = &r;
      older.register_optimizer = record_optimizer;
      errbuf[0] = '\0';
      status = desc->init (&older, errbuf, sizeof errbuf);
      g_assert_cmpint (status, ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
      g_assert_cmpuint (r.n_registered, ==, 0);
      g_assert_nonnull (strstr (errbuf, "register_optimizer"));

      /* A library of ABI 1.0: the whole table, register_optimizer_v2 still
       * reserved (zero). These plugins need revision 2 at least. */
      memset (&older, 0, sizeof older);
      older.struct_size = sizeof older;
      older.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
      older.host_data = &r;
      older.register_optimizer = record_optimizer;
      errbuf[0] = '\0';
      status = desc->init (&older, errbuf, sizeof errbuf);
      g_assert_cmpint (status, ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
      g_assert_cmpuint (r.n_registered, ==, 0);
      g_assert_nonnull (strstr (errbuf, "register_optimizer_v2"));

      /* A newer library: larger table, higher minor, extra fields the
       * plugin does not know (filled with a pattern it must not need). */
      memset (&newer, 0xA5, sizeof newer);
      memset (&newer.v1, 0, sizeof newer.v1);
      newer.v1.struct_size = sizeof newer;
      newer.v1.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
      newer.v1.abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR + 1;
      newer.v1.host_data = &r;
      newer.v1.register_optimizer = record_optimizer;
      newer.v1.register_optimizer_v2 = record_optimizer_v2;
      errbuf[0] = '\0';
      status = desc->init (&newer.v1, errbuf, sizeof errbuf);
      if (status != MIXPREC_PLUGIN_OK)
        g_test_message ("%s: %s", optim_plugins[i][0], errbuf);
      g_assert_cmpint (status, ==, MIXPREC_PLUGIN_OK);
      g_assert_cmpuint (r.n_registered, ==, 1);
      g_assert_cmpstr (r.optimizer->name, ==, optim_plugins[i][1]);
      g_assert_cmpstr (r.optimizer->device, ==, "cpu");
      g_assert_nonnull (r.optimizer->step);
      g_assert_cmpuint (r.optimizer->state_dtype_mask, ==,
                        (1u << MIXPREC_PLUGIN_DTYPE_FLOAT32) | (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16));
    }
}

/* Per call, too: a step argument block shorter than MixprecOptimizerStepV2
 * (a library older than the plugin) is refused, not read past its end. */
static void
test_plugin_checks_step_args (void)
{
  for (gsize i = 0; i < G_N_ELEMENTS (optim_plugins); i++)
    {
      const MixprecPluginDesc *desc = open_shipped_plugin (optim_plugins[i][0]);
      Registrations r = { 0 };
      MixprecPluginHostV1 host = { 0 };
      MixprecOptimizerStepV2 args = { 0 };
      gfloat master[1] = { 1.0f }, grad[1] = { 1.0f }, state[2][1] = { { 0 } };
      void *states[2] = { state[0], state[1] };
      char errbuf[256] = "";

      host.struct_size = sizeof host;
      host.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
      host.abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR;
      host.host_data = &r;
      host.register_optimizer = record_optimizer;
      host.register_optimizer_v2 = record_optimizer_v2;
      g_assert_cmpint (desc->init (&host, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
      g_assert_cmpuint (r.optimizer->n_state_slots, <=, G_N_ELEMENTS (states));

      /* A V1-sized block (a library that knows no V2 fields) is refused. */
      args.base.struct_size = sizeof (MixprecOptimizerStepV1);
      args.base.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
      args.base.working_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
      g_assert_cmpint (r.optimizer->step (&args, master, grad, states, NULL, 1,
                                          errbuf, sizeof errbuf), ==,
                       MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
      g_assert_cmpuint (strlen (errbuf), >, 0);
      g_assert_cmpfloat (master[0], ==, 1.0f);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  for (gsize i = 0; i < G_N_ELEMENTS (layouts); i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/abi/layout/%s", layouts[i].name);

      g_test_add_data_func (path, &layouts[i], test_layout);
    }
  g_test_add_func ("/abi/layout/complete", test_layout_complete);
  g_test_add_func ("/abi/plugin/host-table", test_plugin_host_table);
  g_test_add_func ("/abi/plugin/checks-host", test_plugin_checks_host);
  g_test_add_func ("/abi/plugin/checks-step-args", test_plugin_checks_step_args);
  return g_test_run ();
}
