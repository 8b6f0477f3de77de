/* mixprec-checkpoint-save.c — mixprec_engine_save_checkpoint(): every rank
 * writes its shard into a temporary folder, rank 0 checks and hashes them
 * all, writes the manifest, renames the folder into place and only then
 * moves `latest`. Each step is made durable before the next, so a crash
 * anywhere leaves the previous checkpoint whole and `latest` naming a
 * complete one. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-engine-private.h"

typedef struct
{
  MixprecEngine *engine;
  GArray        *shards;     /* _MixprecEngineShard */
  _MixprecEngineCounters counters;
  guint          rank;
  guint          world;
  const gchar   *root;
  const gchar   *tag;
  gchar         *tmp_name;   /* .tmp-<tag> */
  gchar         *tmp;        /* root/.tmp-<tag> */
  gchar         *final;      /* root/<tag> */
  int            root_fd;    /* root, opened once; -1 until then */
  int            tmp_fd;     /* root/.tmp-<tag>, never through a link */
  gchar         *shard_sha256; /* of the file this rank wrote */
} Save;

typedef struct
{
  const Save  *save;
  const gchar *point;
} Halfway;

static void
hook (const Save  *s,
      const gchar *point)
{
  _mixprec_checkpoint_hook (point, s->rank, s->root);
}

static void
halfway_hook (gpointer data,
              gpointer unused)
{
  const Halfway *h = data;

  hook (h->save, h->point);
}

static gchar *
shard_name (guint rank)
{
  return g_strdup_printf (_MIXPREC_CHECKPOINT_SHARD_FORMAT, rank);
}

/* Stored bytes handed to the writer: codes as the engine keeps them,
 * made little-endian and, for int4, packed from the piece's first element. */
typedef enum { RAW_BYTES, RAW_U16, RAW_INT4 } RawKind;

typedef struct
{
  const guint8 *data;
  RawKind       kind;
  guint         code_phase;  /* RAW_INT4: nibble of the first element */
  guint64       n;           /* RAW_INT4: elements */
} Raw;

static gboolean
fill_raw (gpointer   user_data,
          guint64    offset,
          gsize      n_bytes,
          guint8    *dest,
          GError   **error)
{
  const Raw *raw = user_data;

  switch (raw->kind)
    {
    case RAW_BYTES:
      memcpy (dest, raw->data + offset, n_bytes);
      break;
    case RAW_U16:
      for (gsize i = 0; i < n_bytes; i += 2)
        {
          guint16 v;

          memcpy (&v, raw->data + offset + i, 2);
          v = GUINT16_TO_LE (v);
          memcpy (dest + i, &v, 2);
        }
      break;
    case RAW_INT4:
      for (gsize i = 0; i < n_bytes; i++)
        {
          guint64 e = (offset + i) * 2;
          guint8 b = 0;

          for (guint h = 0; h < 2 && e + h < raw->n; h++)
            b |= (guint8) (_mixprec_checkpoint_load_nibble (raw->data, raw->code_phase + e + h) << (4 * h));
          dest[i] = b;
        }
      break;
    }
  return TRUE;
}

static gboolean
add_raw (_MixprecSafetensorsWriter *w,
         GPtrArray                 *keep,
         const gchar               *tensor,
         const gchar               *dtype,
         guint64                    length,
         RawKind                    kind,
         gconstpointer              data,
         guint                      code_phase,
         guint64                    n,
         GError                   **error)
{
  Raw *raw = g_new0 (Raw, 1);

  raw->data = data;
  raw->kind = kind;
  raw->code_phase = code_phase;
  raw->n = n;
  g_ptr_array_add (keep, raw);
  return _mixprec_safetensors_writer_add_filled (w, tensor, dtype, &length, 1, fill_raw, raw, error);
}

/* One state slot of @sh as the engine keeps it, and its block scales. */
static gboolean
add_state (_MixprecSafetensorsWriter *w,
           GPtrArray                 *keep,
           const _MixprecEngineShard *sh,
           guint                      k,
           const gchar               *tensor,
           GError                   **error)
{
  MixprecPluginStateFormat format = sh->state_formats[k];
  guint64 n = sh->end - sh->begin;
  const gchar *dtype = _mixprec_checkpoint_state_st_dtype (format);
  g_autofree gchar *scales = NULL;
  guint64 nb;

  switch (format)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT32:
      return _mixprec_safetensors_writer_add_array (w, tensor, dtype, &n, 1, MIXPREC_DTYPE_FLOAT32,
                                                    sh->states[k], error);
    case MIXPREC_PLUGIN_STATE_BFLOAT16:
      /* bfloat16 state is saved as it is: widening it would double the
       * file and add nothing. */
      return _mixprec_safetensors_writer_add_array (w, tensor, dtype, &n, 1, MIXPREC_DTYPE_BFLOAT16,
                                                    sh->states[k], error);
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      if (!add_raw (w, keep, tensor, dtype, n, RAW_U16, sh->states[k], 0, n, error))
        return FALSE;
      break;
    case MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED:
    case MIXPREC_PLUGIN_STATE_INT8_DYNAMIC:
      if (!add_raw (w, keep, tensor, dtype, n, RAW_BYTES, sh->states[k], 0, n, error))
        return FALSE;
      break;
    case MIXPREC_PLUGIN_STATE_INT4_DYNAMIC:
    default:
      if (!add_raw (w, keep, tensor, dtype, _mixprec_checkpoint_state_stored (format, n), RAW_INT4,
                    sh->states[k], sh->code_phase, n, error))
        return FALSE;
      break;
    }
  scales = g_strconcat (tensor, "/scales", NULL);
  nb = _mixprec_checkpoint_n_blocks (sh->block_phase, n, sh->block_size);
  return _mixprec_safetensors_writer_add_array (w, scales, "F32", &nb, 1, MIXPREC_DTYPE_FLOAT32,
                                                sh->state_scales[k], error);
}

/* The master of @sh: FP32 (the working values widened without a master
 * copy), or the bfloat16 working copy and its second half. */
static gboolean
add_master (_MixprecSafetensorsWriter *w,
            GPtrArray                 *keep,
            const _MixprecEngineShard *sh,
            const gchar               *name,
            GError                   **error)
{
  g_autofree gchar *tensor = g_strconcat (name, "/master", NULL);
  g_autofree gchar *extra = NULL;
  guint64 n = sh->end - sh->begin;

  if (sh->master_format == MIXPREC_PLUGIN_MASTER_FLOAT32)
    return _mixprec_safetensors_writer_add_array (w, tensor, "F32", &n, 1,
                                                  sh->master != NULL ? MIXPREC_DTYPE_FLOAT32
                                                                     : sh->working_dtype,
                                                  sh->master != NULL ? (gconstpointer) sh->master
                                                                     : sh->working,
                                                  error);
  if (!_mixprec_safetensors_writer_add_array (w, tensor, "BF16", &n, 1, MIXPREC_DTYPE_BFLOAT16,
                                              sh->working, error))
    return FALSE;
  if (sh->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER)
    {
      extra = g_strconcat (name, "/" _MIXPREC_CHECKPOINT_REMAINDER, NULL);
      return add_raw (w, keep, extra, "I16", n, RAW_U16, sh->master_extra, 0, n, error);
    }
  extra = g_strconcat (name, "/" _MIXPREC_CHECKPOINT_COMPENSATION, NULL);
  return _mixprec_safetensors_writer_add_array (w, extra, "BF16", &n, 1, MIXPREC_DTYPE_BFLOAT16,
                                                sh->master_extra, error);
}

static gboolean
add_shard_tensors (const Save                *s,
                   _MixprecSafetensorsWriter *w,
                   GPtrArray                 *keep,
                   GError                   **error)
{
  const gchar * const *slots = mixprec_feature_get_state_names (_mixprec_engine_get_optimizer (s->engine));
  g_autofree gchar *text = NULL;

  _mixprec_safetensors_writer_add_metadata (w, "format", _MIXPREC_CHECKPOINT_SHARD_KIND);
  text = g_strdup_printf ("%u", _mixprec_checkpoint_shards_version (s->shards));
  _mixprec_safetensors_writer_add_metadata (w, "format_version", text);
  g_free (text);
  text = g_strdup_printf ("%u", s->rank);
  _mixprec_safetensors_writer_add_metadata (w, "rank", text);
  g_free (text);
  text = g_strdup_printf ("%u", s->world);
  _mixprec_safetensors_writer_add_metadata (w, "world_size", text);
  g_free (text);
  text = g_strdup_printf ("%" G_GUINT64_FORMAT, s->counters.steps);
  _mixprec_safetensors_writer_add_metadata (w, "step", text);

  /* The engine's shards are disjoint across ranks at every stage (under
   * ZeRO-0 each rank saves its partition), so each element is stored once. */
  for (guint i = 0; i < s->shards->len; i++)
    {
      const _MixprecEngineShard *sh = &g_array_index (s->shards, _MixprecEngineShard, i);
      const gchar *name = mixprec_param_get_name (sh->param);
      guint64 n = sh->end - sh->begin;
      g_autofree gchar *key = NULL;
      g_autofree gchar *value = NULL;
      const guint64 *shape;
      guint n_dims;

      if (n == 0)
        continue;
      key = _mixprec_checkpoint_range_key (name);
      value = g_strdup_printf ("%" G_GUINT64_FORMAT ":%" G_GUINT64_FORMAT, sh->begin, sh->end);
      _mixprec_safetensors_writer_add_metadata (w, key, value);
      g_free (key);
      g_free (value);
      shape = mixprec_param_get_shape (sh->param, &n_dims);
      key = _mixprec_checkpoint_shape_key (name);
      value = _mixprec_checkpoint_format_shape (shape, n_dims, ",");
      _mixprec_safetensors_writer_add_metadata (w, key, value);
      if (sh->block_size != 0)
        {
          g_free (key);
          g_free (value);
          key = _mixprec_checkpoint_phase_key (name);
          value = g_strdup_printf ("%" G_GUINT64_FORMAT, sh->block_phase);
          _mixprec_safetensors_writer_add_metadata (w, key, value);
        }

      if (!add_master (w, keep, sh, name, error))
        return FALSE;
      for (guint k = 0; k < sh->n_state_slots && slots != NULL && slots[k] != NULL; k++)
        {
          g_autofree gchar *tensor = g_strconcat (name, "/", slots[k], NULL);

          if (!add_state (w, keep, sh, k, tensor, error))
            return FALSE;
        }
    }

  /* ZeRO++ LoCo: this rank's error feedback, one per element it sends. */
  {
    const guint16 *err;
    guint64 n, steps;
    guint group;

    for (guint i = 0; _mixprec_engine_zeropp_loco_buffer (s->engine, i, &group, &err, &n, &steps); i++)
      {
        g_autofree gchar *tensor = g_strdup_printf ("zeropp/loco_error/%u", group);
        g_autofree gchar *key = g_strdup_printf ("zeropp/loco_steps/%u", group);

        g_free (text);
        text = g_strdup_printf ("%" G_GUINT64_FORMAT, steps);
        _mixprec_safetensors_writer_add_metadata (w, key, text);
        if (!add_raw (w, keep, tensor, "F16", n, RAW_U16, err, 0, n, error))
          return FALSE;
      }
  }

  /* Per-tensor numerics: this rank's part of the FP32 shadow and its
   * optimizer state, with the layout they belong to. */
  {
    const gfloat *shadow;
    const gfloat *const *states;
    const gchar *tensor, *key;
    g_autofree gchar *layout = NULL;
    guint n_states;
    guint64 n;

    if (_mixprec_engine_numerics_shadow_saved (s->engine, &shadow, &states, &n_states, &n, &tensor, &key, &layout))
      {
        _mixprec_safetensors_writer_add_metadata (w, key, layout);
        if (!_mixprec_safetensors_writer_add_array (w, tensor, "F32", &n, 1, MIXPREC_DTYPE_FLOAT32, shadow, error))
          return FALSE;
        for (guint k = 0; k < n_states; k++)
          {
            g_autofree gchar *name = _mixprec_engine_numerics_shadow_state_name (k);

            if (!_mixprec_safetensors_writer_add_array (w, name, "F32", &n, 1, MIXPREC_DTYPE_FLOAT32, states[k],
                                                        error))
              return FALSE;
          }
      }
  }
  return TRUE;
}

/* The shard is written under a temporary name and renamed when complete
 * and synced: rank 0 takes the final name as this rank's word that it is. */
static gboolean
open_save_dirs (Save    *s,
                GError **error)
{
  if (s->root_fd < 0 && (s->root_fd = _mixprec_open_dir (s->root, error)) < 0)
    return FALSE;
  if (s->tmp_fd < 0 &&
      (s->tmp_fd = _mixprec_open_subdir (s->root_fd, s->root, s->tmp_name, error)) < 0)
    return FALSE;
  return TRUE;
}

static gboolean
write_shard (Save    *s,
             GError **error)
{
  g_autoptr(GPtrArray) keep = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(_MixprecSafetensorsWriter) w = _mixprec_safetensors_writer_new ();
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autofree gchar *name = shard_name (s->rank);
  g_autofree gchar *partial_name = g_strconcat (name, ".partial", NULL);
  g_autofree gchar *path = g_build_filename (s->tmp, name, NULL);
  g_autofree gchar *partial = g_build_filename (s->tmp, partial_name, NULL);
  Halfway halfway = { s, "mid-shard-write" };
  gboolean ok;
  int fd;

  if (!add_shard_tensors (s, w, keep, error) || !open_save_dirs (s, error))
    return FALSE;
  fd = openat (s->tmp_fd, partial_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
               0644);
  if (fd < 0)
    {
      _mixprec_set_io_error (error, errno, partial, "cannot create");
      return FALSE;
    }
  ok = _mixprec_safetensors_writer_write (w, fd, partial, sum, halfway_hook, &halfway, error);
  if (ok)
    hook (s, "after-shard-write");
  ok = ok && _mixprec_fsync_fd (fd, partial, error);
  if (close (fd) != 0 && ok)
    {
      _mixprec_set_io_error (error, errno, partial, "cannot close");
      ok = FALSE;
    }
  if (ok && renameat (s->tmp_fd, partial_name, s->tmp_fd, name) != 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot rename the finished shard into place");
      ok = FALSE;
    }
  if (!ok)
    {
      /* A full disk (or any failure) must not leave a half shard behind
       * to fill it further. */
      unlinkat (s->tmp_fd, partial_name, 0);
      return FALSE;
    }
  hook (s, "after-shard-fsync");
  s->shard_sha256 = g_strdup (g_checksum_get_string (sum));
  return TRUE;
}

static gboolean
parse_range (const gchar *text,
             guint64     *begin,
             guint64     *end)
{
  g_auto(GStrv) parts = text != NULL ? g_strsplit (text, ":", 3) : NULL;

  return parts != NULL && g_strv_length (parts) == 2 &&
         g_ascii_string_to_unsigned (parts[0], 10, 0, G_MAXINT64, begin, NULL) &&
         g_ascii_string_to_unsigned (parts[1], 10, 0, G_MAXINT64, end, NULL);
}

/* Rank 0, once every rank has written: hashes each shard and reads back
 * which ranges it holds, so the manifest describes the files as they are
 * on disk. */
static gboolean
describe_files (const Save       *s,
                _MixprecManifest *m,
                GError          **error)
{
  for (guint r = 0; r < s->world; r++)
    {
      _MixprecManifestFile *f = g_new0 (_MixprecManifestFile, 1);
      g_autofree gchar *path = NULL;
      g_autoptr(_MixprecSafetensors) st = NULL;
      struct stat sb;

      f->name = shard_name (r);
      f->rank = r;
      g_ptr_array_add (m->files, f);
      path = g_build_filename (s->tmp, f->name, NULL);
      if (fstatat (s->tmp_fd, f->name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD,
                       "%s: rank %u did not finish writing its shard; the checkpoint is "
                       "abandoned and the previous one stays current", path, r);
          return FALSE;
        }
      f->sha256 = _mixprec_file_sha256 (path, &f->size, error);
      if (f->sha256 == NULL || (st = _mixprec_safetensors_open (path, error)) == NULL)
        return FALSE;
      for (guint i = 0; i < m->params->len; i++)
        {
          _MixprecManifestParam *p = g_ptr_array_index (m->params, i);
          g_autofree gchar *key = _mixprec_checkpoint_range_key (p->name);
          const gchar *range = _mixprec_safetensors_get_metadata (st, key);
          _MixprecManifestPiece piece = { r, r, 0, 0 };

          if (range == NULL)
            continue;
          if (!parse_range (range, &piece.begin, &piece.end))
            {
              g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                           "%s: metadata '%s' is '%s', not begin:end", path, key, range);
              return FALSE;
            }
          g_array_append_val (p->pieces, piece);
        }
    }
  for (guint i = 0; i < m->params->len; i++)
    if (!_mixprec_manifest_check_pieces (g_ptr_array_index (m->params, i), s->tmp, error))
      return FALSE;
  return TRUE;
}

static gboolean
build_manifest (const Save       *s,
                _MixprecManifest *m,
                GError          **error)
{
  MixprecConfig *config = mixprec_engine_get_config (s->engine);
  MixprecLossScaler *scaler = mixprec_engine_get_loss_scaler (s->engine);
  MixprecLrSchedule *schedule = _mixprec_engine_get_schedule (s->engine);
  MixprecFeature *optimizer = _mixprec_engine_get_optimizer (s->engine);
  JsonObject *hparams = mixprec_config_get_optimizer_params (config);

  m->format_version = _mixprec_checkpoint_shards_version (s->shards);
  _mixprec_checkpoint_shards_repr (s->shards, &m->repr);
  m->libmixprec_version = g_strdup (MIXPREC_VERSION_S);
  m->tag = g_strdup (s->tag);
  m->step = s->counters.steps;
  m->applied_steps = s->counters.applied_steps;
  m->skipped_steps = s->counters.skipped_steps;
  m->seed = s->counters.seed;
  m->precision_mode = g_strdup (mixprec_precision_mode_get_name (mixprec_config_get_precision_mode (config)));
  m->low_dtype = g_strdup (mixprec_dtype_get_name (mixprec_config_get_low_dtype (config)));
  m->world_size = s->world;
  m->zero_stage = _mixprec_engine_get_zero_stage (s->engine);
  m->scaler_type = g_strdup (G_OBJECT_TYPE_NAME (scaler));
  m->scaler_state = mixprec_loss_scaler_save_state (scaler);
  {
    g_autoptr(GPtrArray) params = mixprec_engine_get_params (s->engine);

    /* Each fp8 parameter's scaling: the same on every rank. */
    for (guint i = 0; i < params->len; i++)
      {
        MixprecFp8Scaling *scaling = mixprec_param_get_fp8_scaling (g_ptr_array_index (params, i));

        if (scaling != NULL)
          g_hash_table_replace (m->fp8_states,
                                g_strdup (mixprec_param_get_name (g_ptr_array_index (params, i))),
                                mixprec_fp8_scaling_save_state (scaling));
      }
  }
  m->auto_precision = _mixprec_engine_autoprec_save_state (s->engine);
  m->lr_schedule_type = g_strdup (mixprec_lr_schedule_get_type_name (schedule));
  m->lr_position = mixprec_lr_schedule_get_position (schedule);
  m->base_lr = mixprec_lr_schedule_get_base_lr (schedule);
  m->optimizer_name = g_strdup (mixprec_feature_get_name (optimizer));
  m->state_names = g_strdupv ((GStrv) mixprec_feature_get_state_names (optimizer));
  if (m->state_names == NULL)
    m->state_names = g_new0 (gchar *, 1);
  if (hparams != NULL)
    {
      m->hyper_parameters = json_node_new (JSON_NODE_OBJECT);
      json_node_set_object (m->hyper_parameters, hparams);
    }

  for (guint i = 0; i < s->shards->len; i++)
    {
      MixprecParam *param = g_array_index (s->shards, _MixprecEngineShard, i).param;
      _MixprecManifestParam *p = g_new0 (_MixprecManifestParam, 1);
      const guint64 *shape = mixprec_param_get_shape (param, &p->n_dims);

      p->name = g_strdup (mixprec_param_get_name (param));
      p->shape = g_memdup2 (shape, sizeof (guint64) * MAX (p->n_dims, 1));
      p->numel = mixprec_param_get_numel (param);
      p->module_type = g_strdup (mixprec_param_get_module_type (param));
      p->master_format = g_array_index (s->shards, _MixprecEngineShard, i).master_format;
      p->pieces = g_array_new (FALSE, FALSE, sizeof (_MixprecManifestPiece));
      g_ptr_array_add (m->params, p);
      g_hash_table_insert (m->param_index, p->name, p);
    }
  return describe_files (s, m, error);
}

/* Calls @func for each `.tmp-*` entry of the save folder; stops at the
 * first FALSE. */
static gboolean
for_each_tmp_entry (const Save *s,
                    gboolean  (*func) (const Save *s, const gchar *name, GError **error),
                    GError    **error)
{
  /* A descriptor of its own: readdir moves the offset it shares. */
  int fd = openat (s->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  struct dirent *entry;
  DIR *d;

  if (fd < 0 || (d = fdopendir (fd)) == NULL)
    {
      _mixprec_set_io_error (error, errno, s->root, "cannot list the folder");
      if (fd >= 0)
        close (fd);
      return FALSE;
    }
  while ((entry = readdir (d)) != NULL)
    if (g_str_has_prefix (entry->d_name, _MIXPREC_CHECKPOINT_TMP_PREFIX))
      g_ptr_array_add (names, g_strdup (entry->d_name));
  closedir (d);
  for (guint i = 0; i < names->len; i++)
    if (!func (s, g_ptr_array_index (names, i), error))
      return FALSE;
  return TRUE;
}

static gboolean
refuse_tmp_link (const Save  *s,
                 const gchar *name,
                 GError     **error)
{
  return _mixprec_refuse_link_at (s->root_fd, s->root, name, error);
}

/* A save swaps out what is at its tag and removes what it finds under
 * `.tmp-*` names; through a link, either would reach the folder the link
 * points to (another checkpoint, or anything at all) and delete its
 * files. libmixprec never creates links there, so it saves next to none:
 * the user removes the link, knowing what it was for. */
static gboolean
refuse_foreign_links (const Save *s,
                      GError    **error)
{
  return _mixprec_refuse_link_at (s->root_fd, s->root, s->tag, error) &&
         for_each_tmp_entry (s, refuse_tmp_link, error);
}

static gboolean
remove_if_stale (const Save  *s,
                 const gchar *name,
                 GError     **error)
{
  if (!g_str_has_suffix (name, ".old"))
    _mixprec_remove_flat_dir_at (s->root_fd, s->root, name);
  return TRUE;
}

/* Folders left by saves that crashed, now that a newer save succeeded.
 * A `.tmp-TAG.old` folder stays: it is a whole checkpoint that a crash
 * left aside, and the error of a load that finds TAG missing tells the
 * user to rename it back. Only its owner may decide it is obsolete.
 * Links are never followed (see _mixprec_remove_flat_dir_at()). */
static void
remove_stale (const Save *s)
{
  g_autoptr(GError) error = NULL;

  if (!for_each_tmp_entry (s, remove_if_stale, &error))
    g_debug ("%s", error->message);
}

/* A folder already at the new checkpoint's name is replaced only when it
 * is a whole checkpoint of that tag (re-saving a tag such as "best").
 * Anything else there (a checkpoint whose manifest is missing or damaged,
 * a folder of someone else's) was not written by a save this one
 * supersedes: it is renamed to TAG.damaged (or TAG.damaged-N) and kept. */
static gboolean
keep_damaged_aside (const Save *s,
                    GError    **error)
{
  g_autofree gchar *manifest = g_build_filename (s->final, _MIXPREC_CHECKPOINT_MANIFEST, NULL);
  g_autofree gchar *data = NULL;
  g_autofree gchar *aside = NULL;
  g_autoptr(GError) why = NULL;
  _MixprecManifest m;
  gsize length;
  gboolean whole;
  struct stat sb;

  if (fstatat (s->root_fd, s->tag, &sb, AT_SYMLINK_NOFOLLOW) != 0)
    return TRUE;
  data = _mixprec_read_small_file (manifest, _MIXPREC_CHECKPOINT_MAX_MANIFEST, &length, &why);
  _mixprec_manifest_init (&m);
  whole = data != NULL && _mixprec_manifest_parse (&m, manifest, data, length, &why);
  _mixprec_manifest_clear (&m);
  if (whole)
    return TRUE;
  for (guint n = 1; aside == NULL || fstatat (s->root_fd, aside, &sb, AT_SYMLINK_NOFOLLOW) == 0; n++)
    {
      g_free (aside);
      aside = n == 1 ? g_strconcat (s->tag, ".damaged", NULL)
                     : g_strdup_printf ("%s.damaged-%u", s->tag, n);
    }
  if (renameat (s->root_fd, s->tag, s->root_fd, aside) != 0)
    {
      _mixprec_set_io_error (error, errno, s->final,
                             "is not a whole checkpoint and cannot be moved aside to make room");
      return FALSE;
    }
  g_message ("%s: not a whole checkpoint (%s); kept as %s/%s instead of being replaced",
             s->final, why->message, s->root, aside);
  return TRUE;
}

/* Rank 0's part after every shard is on disk. */
static gboolean
commit (Save                       *s,
        MixprecCheckpointSaveFlags  flags,
        GError                    **error)
{
  _MixprecManifest m;
  g_autofree gchar *json = NULL;
  g_autofree gchar *latest = NULL;
  Halfway mid_manifest = { s, "mid-manifest" };
  Halfway mid_latest = { s, "mid-latest" };
  gboolean swapped = FALSE;
  gboolean ok;

  hook (s, "before-manifest");
  _mixprec_manifest_init (&m);
  ok = build_manifest (s, &m, error);
  if (ok)
    json = _mixprec_manifest_to_json (&m);
  _mixprec_manifest_clear (&m);
  if (!ok ||
      !_mixprec_write_file_synced_at (s->tmp_fd, s->tmp, _MIXPREC_CHECKPOINT_MANIFEST, json,
                                      strlen (json), halfway_hook, &mid_manifest, error))
    return FALSE;
  hook (s, "after-manifest");
  if (!_mixprec_fsync_dir_fd (s->tmp_fd, s->tmp, error))
    return FALSE;
  hook (s, "before-rename");
  if (!keep_damaged_aside (s, error) ||
      !_mixprec_rename_dir_at (s->root_fd, s->root, s->tmp_name, s->tag, &swapped, error))
    return FALSE;
  hook (s, "after-rename");
  if (!_mixprec_fsync_dir_fd (s->root_fd, s->root, error))
    return FALSE;

  if (!(flags & MIXPREC_CHECKPOINT_SAVE_NO_LATEST))
    {
      hook (s, "before-latest");
      latest = g_strconcat (s->tag, "\n", NULL);
      if (!_mixprec_write_file_synced_at (s->root_fd, s->root, _MIXPREC_CHECKPOINT_LATEST ".tmp",
                                          latest, strlen (latest), halfway_hook, &mid_latest,
                                          error))
        return FALSE;
      hook (s, "after-latest-tmp");
      g_free (latest);
      latest = g_build_filename (s->root, _MIXPREC_CHECKPOINT_LATEST, NULL);
      /* renameat replaces a link at `latest` itself, never its target. */
      if (renameat (s->root_fd, _MIXPREC_CHECKPOINT_LATEST ".tmp",
                    s->root_fd, _MIXPREC_CHECKPOINT_LATEST) != 0)
        {
          _mixprec_set_io_error (error, errno, latest, "cannot replace");
          return FALSE;
        }
      hook (s, "after-latest");
      if (!_mixprec_fsync_dir_fd (s->root_fd, s->root, error))
        return FALSE;
    }
  hook (s, "before-cleanup");
  /* After a swap the temporary name holds the previous checkpoint of the
   * same tag; it goes with the other leftovers. */
  remove_stale (s);
  return TRUE;
}

/* Ranks other than 0 learn whether rank 0 committed from the shared
 * filesystem: the committed manifest must record the very bytes this rank
 * wrote. */
static gboolean
confirm (const Save *s,
         GError    **error)
{
  g_autofree gchar *path = g_build_filename (s->final, _MIXPREC_CHECKPOINT_MANIFEST, NULL);
  g_autofree gchar *data = NULL;
  _MixprecManifest m;
  gsize length;
  gboolean ok;

  data = _mixprec_read_small_file (path, _MIXPREC_CHECKPOINT_MAX_MANIFEST, &length, error);
  if (data == NULL)
    return FALSE;
  _mixprec_manifest_init (&m);
  ok = _mixprec_manifest_parse (&m, path, data, length, error);
  if (ok && (s->rank >= m.files->len ||
             !g_str_equal (((_MixprecManifestFile *) g_ptr_array_index (m.files, s->rank))->sha256,
                           s->shard_sha256)))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                   "%s: rank 0 did not commit the shard rank %u wrote (see rank 0's error)",
                   path, s->rank);
      ok = FALSE;
    }
  _mixprec_manifest_clear (&m);
  return ok;
}

/* Rank 0, before any rank writes: the save folder exists, holds no link
 * a save could follow, and has a fresh, empty `.tmp-TAG` folder. */
static gboolean
prepare_tmp_dir (Save    *s,
                 GError **error)
{
  if (g_mkdir_with_parents (s->root, 0755) != 0)
    {
      _mixprec_set_io_error (error, errno, s->root, "cannot create the folder");
      return FALSE;
    }
  if ((s->root_fd = _mixprec_open_dir (s->root, error)) < 0 ||
      !refuse_foreign_links (s, error))
    return FALSE;
  _mixprec_remove_flat_dir_at (s->root_fd, s->root, s->tmp_name);
  if (mkdirat (s->root_fd, s->tmp_name, 0755) != 0)
    {
      _mixprec_set_io_error (error, errno, s->tmp, "cannot create the folder");
      return FALSE;
    }
  hook (s, "after-tmpdir");
  return TRUE;
}

/* See mixprec_engine_save_checkpoint_full() (mixprec-engine-checkpoint.c). */
gboolean
_mixprec_checkpoint_save (MixprecEngine              *engine,
                          const gchar                *dir,
                          const gchar                *tag,
                          MixprecCheckpointSaveFlags  flags,
                          GError                    **error)
{
  Save s = { 0 };
  g_autofree gchar *default_tag = NULL;
  g_autoptr(GError) local_error = NULL;
  gboolean ok = TRUE;

  if (dir[0] == '\0')
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT,
                   "the folder to save the checkpoint into is an empty path (''); name a "
                   "folder, such as 'checkpoints' or '.'");
      return FALSE;
    }
  s.engine = engine;
  s.root = dir;
  s.rank = _mixprec_engine_get_rank (engine);
  s.world = _mixprec_engine_get_world_size (engine);
  _mixprec_engine_get_counters (engine, &s.counters);
  if (tag == NULL)
    tag = default_tag = g_strdup_printf ("step-%" G_GUINT64_FORMAT, s.counters.steps);
  if (!_mixprec_checkpoint_name_is_valid (tag) || g_str_equal (tag, _MIXPREC_CHECKPOINT_LATEST) ||
      g_str_equal (tag, _MIXPREC_CHECKPOINT_LATEST ".tmp"))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT,
                   "'%s' cannot tag a checkpoint: a tag is 1 to 200 characters from "
                   "A-Z a-z 0-9 . _ -, does not start with '.', and is not 'latest'", tag);
      return FALSE;
    }
  s.shards = _mixprec_engine_get_shards (engine, error);
  if (s.shards == NULL)
    return FALSE;
  s.tag = tag;
  s.tmp_name = g_strconcat (_MIXPREC_CHECKPOINT_TMP_PREFIX, tag, NULL);
  s.tmp = g_build_filename (dir, s.tmp_name, NULL);
  s.final = g_build_filename (dir, tag, NULL);
  s.root_fd = -1;
  s.tmp_fd = -1;

  /* Failures do not return early: the other ranks wait at the barriers. */
  if (s.rank == 0)
    ok = prepare_tmp_dir (&s, &local_error);
  if (!_mixprec_engine_barrier (engine, ok ? &local_error : NULL))
    ok = FALSE;
  if (ok && !write_shard (&s, &local_error))
    ok = FALSE;
  if (!_mixprec_engine_barrier (engine, ok ? &local_error : NULL))
    ok = FALSE;
  if (ok && s.rank == 0 && !commit (&s, flags, &local_error))
    ok = FALSE;
  if (!_mixprec_engine_barrier (engine, ok ? &local_error : NULL))
    ok = FALSE;
  if (ok && s.rank != 0 && !confirm (&s, &local_error))
    ok = FALSE;

  g_array_unref (s.shards);
  if (s.tmp_fd >= 0)
    close (s.tmp_fd);
  if (s.root_fd >= 0)
    close (s.root_fd);
  g_free (s.tmp_name);
  g_free (s.tmp);
  g_free (s.final);
  g_free (s.shard_sha256);
  if (!ok)
    {
      if (local_error == NULL)
        g_set_error (&local_error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                     "%s: the ranks could not synchronise during the save", dir);
      g_propagate_error (error, g_steal_pointer (&local_error));
    }
  return ok;
}
