/* inspect-checkpoint.c — `mixprec-inspect --checkpoint DIR [--verify]`:
 * what a checkpoint holds and how it is laid out across ranks, and with
 * --verify whether every file still has the checksum it was saved with. */
#include "config.h"

#include <string.h>

#include "inspect-private.h"

static void
print_scaler (MixprecCheckpoint *ckpt)
{
  GVariant *state = mixprec_checkpoint_get_scaler_state (ckpt);
  GVariantIter iter;
  const gchar *key;
  GVariant *value;

  g_print ("  loss scaler      %s\n", mixprec_checkpoint_get_scaler_type (ckpt));
  g_variant_iter_init (&iter, state);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autofree gchar *text = NULL;

      if (g_strcmp0 (key, "type") != 0)
        {
          text = g_variant_print (value, FALSE);
          g_print ("    %-24s %s\n", key, text);
        }
      g_variant_unref (value);
    }
}

static void
print_params (MixprecCheckpoint *ckpt)
{
  g_auto(GStrv) names = mixprec_checkpoint_get_param_names (ckpt);
  gsize width = 4;

  for (guint i = 0; names[i] != NULL; i++)
    width = MAX (width, strlen (names[i]));
  g_print ("  parameters (%u), FP32 masters and %u optimizer state slot%s each\n",
           g_strv_length (names), g_strv_length ((GStrv) mixprec_checkpoint_get_state_names (ckpt)),
           g_strv_length ((GStrv) mixprec_checkpoint_get_state_names (ckpt)) == 1 ? "" : "s");
  for (guint i = 0; names[i] != NULL; i++)
    {
      GString *shape = g_string_new ("[");
      GString *owners = g_string_new (NULL);
      const guint64 *dims;
      const gchar *master;
      guint n_dims, n_pieces;

      dims = mixprec_checkpoint_get_param_shape (ckpt, names[i], &n_dims);
      for (guint d = 0; d < n_dims; d++)
        g_string_append_printf (shape, "%s%" G_GUINT64_FORMAT, d ? ", " : "", dims[d]);
      g_string_append_c (shape, ']');
      n_pieces = mixprec_checkpoint_get_param_n_pieces (ckpt, names[i]);
      for (guint k = 0; k < n_pieces; k++)
        {
          guint rank;
          guint64 begin, end;

          mixprec_checkpoint_get_param_piece (ckpt, names[i], k, &rank, &begin, &end, NULL);
          g_string_append_printf (owners, "%srank %u [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT ")",
                                  k ? ", " : "", rank, begin, end);
        }
      master = mixprec_checkpoint_get_param_master_format (ckpt, names[i]);
      /* An FP32 master prints as before; the others say how it is kept. */
      if (g_str_equal (master, "fp32"))
        g_print ("    %-*s %-14s F32  %-12s %s\n", (int) width, names[i], shape->str,
                 mixprec_checkpoint_get_param_module_type (ckpt, names[i]), owners->str);
      else
        g_print ("    %-*s %-14s F32  %-12s %s; master %s\n", (int) width, names[i], shape->str,
                 mixprec_checkpoint_get_param_module_type (ckpt, names[i]), owners->str,
                 g_str_equal (master, "remainder") ? "remainder (bf16 + int16, exact)"
                                                   : "kahan (bf16 + bf16 compensation)");
      g_string_free (shape, TRUE);
      g_string_free (owners, TRUE);
    }
}

/* How each state slot is stored, and the block scales' size. */
static void
print_states (MixprecCheckpoint *ckpt)
{
  const gchar * const *slots = mixprec_checkpoint_get_state_names (ckpt);
  guint block = mixprec_checkpoint_get_block_size (ckpt);

  if (slots == NULL || slots[0] == NULL)
    return;
  g_print ("  state formats   ");
  for (guint s = 0; slots[s] != NULL; s++)
    g_print (" %s %s%s", slots[s], mixprec_checkpoint_get_state_format (ckpt, slots[s]),
             slots[s + 1] != NULL ? "," : "");
  if (block != 0)
    g_print (" (one FP32 scale per %u elements)", block);
  g_print ("\n");
}

int
inspect_checkpoint (const gchar *dir,
                    gboolean     verify)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecCheckpoint) ckpt = mixprec_checkpoint_open (dir, &error);
  g_auto(GStrv) files = NULL;
  g_autofree gchar *slots = NULL;

  if (ckpt == NULL)
    {
      g_printerr ("error: %s\n", error->message);
      return 1;
    }
  slots = g_strjoinv (", ", (GStrv) mixprec_checkpoint_get_state_names (ckpt));

  g_print ("Checkpoint %s (tag %s)\n", mixprec_checkpoint_get_path (ckpt),
           mixprec_checkpoint_get_tag (ckpt));
  g_print ("  format version   %u (saved by libmixprec %s)\n",
           mixprec_checkpoint_get_format_version (ckpt),
           mixprec_checkpoint_get_libmixprec_version (ckpt));
  g_print ("  step             %" G_GUINT64_FORMAT " (%" G_GUINT64_FORMAT " applied, %"
           G_GUINT64_FORMAT " skipped)\n", mixprec_checkpoint_get_step (ckpt),
           mixprec_checkpoint_get_applied_steps (ckpt), mixprec_checkpoint_get_skipped_steps (ckpt));
  g_print ("  precision mode   %s\n", mixprec_checkpoint_get_precision_mode (ckpt));
  g_print ("  world size       %u\n", mixprec_checkpoint_get_world_size (ckpt));
  g_print ("  ZeRO stage       %u\n", mixprec_checkpoint_get_zero_stage (ckpt));
  g_print ("  seed             %" G_GUINT64_FORMAT "\n", mixprec_checkpoint_get_seed (ckpt));
  g_print ("  optimizer        %s (state: %s)\n", mixprec_checkpoint_get_optimizer_name (ckpt),
           *slots ? slots : "none");
  g_print ("  LR schedule      %s at position %" G_GUINT64_FORMAT "\n",
           mixprec_checkpoint_get_lr_schedule_type (ckpt), mixprec_checkpoint_get_lr_position (ckpt));
  print_scaler (ckpt);

  files = mixprec_checkpoint_get_file_names (ckpt);
  g_print ("  files (%u, one per rank)\n", g_strv_length (files));
  for (guint i = 0; files[i] != NULL; i++)
    g_print ("    %s\n", files[i]);
  print_states (ckpt);
  print_params (ckpt);

  if (verify)
    {
      if (!mixprec_checkpoint_verify (ckpt, &error))
        {
          g_printerr ("error: %s\n", error->message);
          g_print ("verify: FAILED\n");
          return 1;
        }
      g_print ("verify: %u %s size and SHA-256; every tensor the manifest places is present\n",
               g_strv_length (files),
               g_strv_length (files) == 1 ? "file matches its" : "files match their");
    }
  return 0;
}
