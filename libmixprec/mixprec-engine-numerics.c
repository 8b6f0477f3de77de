/* mixprec-engine-numerics.c — per-tensor numerics (mixprec.numerics):
 * every N-th step, per parameter and per module type, what its gradient
 * and its update lost to low precision, measured on the step's own
 * buffers, agreed across ranks, and recorded in the monitors.
 *
 * Every value is a function of fixed pieces: the intersection of a
 * parameter with one sum-of-squares block of its unit (a *slot*). A
 * block lies in one rank's slice at any world size (slices are whole
 * blocks), so one rank measures each slot, element by element in the
 * same order at every world size; the slots travel in one all-gather
 * and each is taken from the rank that owns it. Counts and maxima are
 * exact; sums of squares are added slot after slot in the order of the
 * parameter's blocks. The results are therefore the same bits at any
 * world size, given the same reduced gradients.
 *
 * The optimizer's pass measures the slots as it goes where its calls can
 * be cut at block boundaries (mixprec-engine-step.c); passes of their own
 * measure the rest with the same kernels (mixprec-numerics-kernels.c).
 * An FP32 shadow of chosen parameters is stepped every applied step, and
 * its distance from the working copies measured with the rest.
 *
 * Every pass reads host memory: an engine on a device whose memory the
 * CPU cannot read refuses mixprec.numerics at creation. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-dtype-private.h"
#include "mixprec-fp8-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-comm-private.h"
#include "mixprec-numerics-private.h"
#include "mixprec-registry-private.h"
#include "mixprec-numerics-kernels-private.h"

#include "mixprec-engine-numerics-private.h"
#include "mixprec-engine-autoprec-private.h"

/* ---------------------------------------------------------------- the number formats */

/* Precision (bits of significand, the leading one included) and the
 * smallest normal exponent of @dtype. */
static void
format_of (MixprecDType dtype, gint *p, gint *emin)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      *p = 11, *emin = -14;
      break;
    case MIXPREC_DTYPE_BFLOAT16:
      *p = 8, *emin = -126;
      break;
    case MIXPREC_DTYPE_FLOAT8_E4M3:
      *p = 4, *emin = -6;
      break;
    case MIXPREC_DTYPE_FLOAT8_E5M2:
      *p = 3, *emin = -14;
      break;
    default:
      *p = 24, *emin = -126;
      break;
    }
}

/* Rounded to nearest even in a format of precision p and minimum normal
 * exponent emin, |v| becomes zero or subnormal exactly below the midpoint
 * of the largest subnormal and 2^emin, 2^emin (1 - 2^-p) (the tie goes
 * to 2^emin, whose significand is even), and infinity from the midpoint
 * of the largest finite value and 2^(emax + 1), max + ulp(max) / 2 (the
 * tie goes up: the largest finite significand is odd). As FP32 bits of
 * the smallest float at or above each bound, the tests become integer
 * comparisons of |v|'s bits. */
typedef struct {
  guint32 under;             /* |v| bits < under: zero or subnormal */
  guint32 over;              /* |v| bits >= over: infinite */
} WireBounds;

static guint32
float_bits_at_least (gdouble bound)
{
  gfloat f = (gfloat) bound;
  guint32 bits;

  if ((gdouble) f < bound)
    f = nextafterf (f, INFINITY);
  memcpy (&bits, &f, sizeof bits);
  return bits;
}

static WireBounds
wire_bounds (MixprecDType dtype)
{
  WireBounds b = { 0, 0x7f800000u };
  gint p, emin;

  format_of (dtype, &p, &emin);
  b.under = float_bits_at_least (ldexp (1.0 - ldexp (1.0, -p), emin));
  if (dtype != MIXPREC_DTYPE_FLOAT32)
    {
      gdouble max = mixprec_dtype_get_max (dtype);
      gint e;

      frexp (max, &e);       /* max = m 2^e, m in [0.5, 1): its ulp is 2^(e - p) */
      b.over = float_bits_at_least (max + ldexp (1.0, e - p - 1));
    }
  return b;
}

/* ---------------------------------------------------------------- where the values are */

/* The step's gradients of elements [lo, ...) of @np's unit on this rank:
 * the reduced slice across ranks, the accumulation buffer or the
 * gradient buffers read in place on one process. */
gconstpointer
_mixprec_numerics_grad_run (MixprecEngine *self, const NumParam *np, guint64 lo, MixprecDType *dtype)
{
  Group *g = np->group;
  const Unit *u = &g_array_index (g->units, Unit, np->unit);
  gconstpointer src;

  if (self->world == 1)
    {
      guint64 o = u->flat + lo;
      const Segment *seg = _mixprec_engine_segment_of (g, u->flat + np->start);

      if (g->accum != NULL)
        {
          *dtype = g->dtypes.accum;
          return _mixprec_engine_at (g->accum, g->dtypes.accum, o);
        }
      *dtype = g->dtypes.grad;
      return _mixprec_engine_at (seg->grad, g->dtypes.grad, o - seg->offset);
    }
  src = _mixprec_engine_slice_source (self, g, u, dtype);
  return _mixprec_engine_at ((gpointer) src, *dtype, lo - self->rank * UNIT_SLICE (self, u));
}

/* The FP32 values and the working copy (NULL when they are the same) of
 * element @lo of @np's unit on this rank. */
void
_mixprec_numerics_values_run (MixprecEngine *self, const NumParam *np, guint64 lo, gfloat **master, gpointer *working)
{
  Group *g = np->group;
  const Unit *u = &g_array_index (g->units, Unit, np->unit);
  guint64 state_at;

  if (self->world == 1)
    {
      guint64 o = u->flat + lo;
      const Segment *seg = _mixprec_engine_segment_of (g, u->flat + np->start);

      *master = seg->master != NULL ? seg->master + (o - seg->master_base) : NULL;
      *working = seg->working != (gpointer) seg->master
                 ? _mixprec_engine_at (seg->working, g->dtypes.working, o - seg->working_base) : NULL;
      return;
    }
  _mixprec_engine_values_at (self, g, u, lo, master, &state_at, working);
}

/* ---------------------------------------------------------------- the slots */

/* The gradient norm's block that holds exactly @s's elements, whose sum
 * of squares it formed this step from the same gradients with the same
 * kernel (mixprec-engine-norm.c, or the intake's and the fold's sums), or
 * G_MAXUINT64: a slot that starts a block of this rank's slice and fills
 * it, the slice's last block being as long as its real elements. */
static guint64
norm_block_of (MixprecEngine *self, Group *g, const NumParam *np, const NumSlot *s)
{
  const Unit *u = &g_array_index (g->units, Unit, np->unit);
  guint64 b = s->lo - self->rank * UNIT_SLICE (self, u);
  guint64 real = _mixprec_engine_real_in_slice (self, u);

  if (b % _MIXPREC_SUMSQ_BLOCK != 0 || b >= real || s->hi - s->lo != MIN (_MIXPREC_SUMSQ_BLOCK, real - b))
    return G_MAXUINT64;
  return u->first_block + b / _MIXPREC_SUMSQ_BLOCK;
}

void
_mixprec_numerics_layout (MixprecEngine *self, struct _MixprecEngineNumerics *nm)
{
  guint64 at = 0;

  nm->params = g_array_new (FALSE, TRUE, sizeof (NumParam));
  nm->slots = g_array_new (FALSE, TRUE, sizeof (NumSlot));
  nm->owned = g_array_new (FALSE, FALSE, sizeof (guint64));
  nm->n_groups = self->groups->len;
  nm->by_group = g_new0 (GArray *, self->groups->len);
  nm->fused = g_new0 (gboolean, self->groups->len);
  for (guint j = 0; j < self->groups->len; j++)
    nm->by_group[j] = g_array_new (FALSE, FALSE, sizeof (guint64));
  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      _MixprecParamStorage *st = _mixprec_param_get_storage (p);
      Group *g = g_ptr_array_index (self->groups, st->group);
      const Unit *u = &g_array_index (g->units, Unit, st->unit);
      guint64 slice = UNIT_SLICE (self, u);
      NumParam np = { 0 };

      np.param = p;
      np.group = g;
      np.unit = st->unit;
      np.start = st->index - u->index;
      np.numel = mixprec_param_get_numel (p);
      np.first_slot = nm->slots->len;
      np.has_values = g->dtypes.has_master || g->dtypes.working == MIXPREC_DTYPE_FLOAT32;
      np.has_working = g->dtypes.has_master && g->dtypes.working != MIXPREC_DTYPE_FLOAT32;
      np.shadow = _mixprec_numerics_shadowed (self, i, mixprec_param_get_name (p));
      np.fp8 = g->fp8.enabled && g->fp8.kind != MIXPREC_FP8_RECIPE_MX;
      np.fp8_mx = g->fp8.enabled && g->fp8.kind == MIXPREC_FP8_RECIPE_MX;
      np.wire = _mixprec_engine_autoprec_probe_wire (self, i, g->wire);
      {
        WireBounds b = wire_bounds (np.wire);

        np.wire_under = b.under;
        np.wire_over = b.over;
      }
      /* One slot per block the parameter meets. */
      for (guint64 lo = np.start; lo < np.start + np.numel;)
        {
          guint64 hi = MIN ((lo / _MIXPREC_SUMSQ_BLOCK + 1) * _MIXPREC_SUMSQ_BLOCK, np.start + np.numel);
          NumSlot s = { nm->params->len, lo, hi, u->index + lo, (guint) (lo / slice), 0 };
          guint64 k = nm->slots->len;

          s.norm_block = G_MAXUINT64;
          if (s.owner == self->rank)
            {
              s.norm_block = norm_block_of (self, g, &np, &s);
              s.at = at;
              at += hi - lo;
              if (np.shadow)
                {
                  s.shadow_at = nm->shadow_n;
                  nm->shadow_n += hi - lo;
                }
              g_array_append_val (nm->owned, k);
            }
          g_array_append_val (nm->slots, s);
          g_array_append_val (nm->by_group[st->group], k);
          lo = hi;
        }
      np.n_slots = nm->slots->len - np.first_slot;
      g_array_append_val (nm->params, np);
    }
  nm->records = g_new0 (gdouble, (gsize) MAX (nm->slots->len, 1) * N_REC);
  nm->old_n = at;
  /* Across ranks the records are agreed on first (agree_records()). */
  if (self->world == 1)
    {
      nm->param_sums = g_new0 (gdouble, (gsize) MAX (nm->params->len, 1) * N_REC);
      nm->summed = g_new0 (guint8, MAX (nm->params->len, 1));
      nm->prefix_next = g_new0 (guint64, MAX (nm->params->len, 1));
    }
}

/* ---------------------------------------------------------------- one slot */

static void
slot_grads (gdouble *rec, const NumParam *np, gconstpointer src, MixprecDType dtype, guint64 n)
{
  WireBounds b = { np->wire_under, np->wire_over };
  _MixprecGradCounts c;
  gfloat amax;

  _mixprec_numerics_grad_best (src, dtype, n, b.under, b.over, &c);
  memcpy (&amax, &c.amax, sizeof amax);
  rec[REC_NONFINITE] = (gdouble) c.nonfinite;
  rec[REC_NONZERO] = (gdouble) c.nonzero;
  rec[REC_UNDERFLOW] = (gdouble) c.under;
  rec[REC_OVERFLOW] = (gdouble) c.over;
  rec[REC_AMAX] = amax;
  rec[REC_SUMSQ] = c.sumsq;
}

/* The gradients of a slot that fills a whole block of its unit, whose sum
 * of squares the gradient norm formed this step from the same gradients
 * with the same kernel (mixprec-engine-norm.c, or the intake's and the
 * fold's sums): only the counts are left to take. */
static void
slot_counts (gdouble *rec, const NumParam *np, gconstpointer src, MixprecDType dtype, guint64 n, gdouble sumsq)
{
  WireBounds b = { np->wire_under, np->wire_over };
  _MixprecGradCounts c;
  gfloat amax;

  _mixprec_numerics_counts_best (src, dtype, n, b.under, b.over, &c);
  memcpy (&amax, &c.amax, sizeof amax);
  rec[REC_NONFINITE] = (gdouble) c.nonfinite;
  rec[REC_NONZERO] = (gdouble) c.nonzero;
  rec[REC_UNDERFLOW] = (gdouble) c.under;
  rec[REC_OVERFLOW] = (gdouble) c.over;
  rec[REC_AMAX] = amax;
  rec[REC_SUMSQ] = sumsq;
}

/* @working: NULL when the FP32 values are the working copy (no stale
 * count). */
static void
slot_update (gdouble *rec, MixprecDType wdtype, const gfloat *old, const gfloat *now,
             gconstpointer working, guint64 n)
{
  _MixprecUpdateSums u;
  gint p, emin;

  format_of (wdtype, &p, &emin);
  _mixprec_numerics_update_best (old, now, working, wdtype, n, p, emin, &u);
  rec[REC_STALE] = (gdouble) u.stale;
  rec[REC_DELTA_SUMSQ] = u.delta_sumsq;
  rec[REC_MASTER_SUMSQ] = u.old_sumsq;
}

/* ---------------------------------------------------------------- passes of their own
 * For the groups whose optimizer pass cannot measure (see
 * _mixprec_engine_numerics_fuse()), and for the gradients of a skipped
 * step. */

typedef struct {
  MixprecEngine *engine;
  struct _MixprecEngineNumerics *nm;
  gboolean all;              /* every group, fused or not */
} Job;

static gboolean
slot_in_pass (Job *job, const NumSlot *slot)
{
  const NumParam *np = &g_array_index (job->nm->params, NumParam, slot->param);

  return job->all || !job->nm->fused[np->group->index];
}

static void
grad_slots (gsize first, gsize end, gpointer data)
{
  Job *job = data;
  struct _MixprecEngineNumerics *nm = job->nm;

  for (gsize k = first; k < end; k++)
    {
      guint64 s = g_array_index (nm->owned, guint64, k);
      const NumSlot *slot = &g_array_index (nm->slots, NumSlot, s);
      const NumParam *np = &g_array_index (nm->params, NumParam, slot->param);
      MixprecDType dtype;
      gconstpointer src;

      if (!slot_in_pass (job, slot))
        continue;
      src = _mixprec_numerics_grad_run (job->engine, np, slot->lo, &dtype);
      slot_grads (nm->records + s * N_REC, np, src, dtype, slot->hi - slot->lo);
    }
}

static void
keep_masters (gsize first, gsize end, gpointer data)
{
  Job *job = data;
  struct _MixprecEngineNumerics *nm = job->nm;

  for (gsize k = first; k < end; k++)
    {
      const NumSlot *slot = &g_array_index (nm->slots, NumSlot, g_array_index (nm->owned, guint64, k));
      const NumParam *np = &g_array_index (nm->params, NumParam, slot->param);
      gfloat *master;
      gpointer working;

      if (!np->has_values || !slot_in_pass (job, slot))
        continue;
      _mixprec_numerics_values_run (job->engine, np, slot->lo, &master, &working);
      memcpy (nm->old_master + slot->at, master, (slot->hi - slot->lo) * sizeof (gfloat));
    }
}

static void
update_slots (gsize first, gsize end, gpointer data)
{
  Job *job = data;
  struct _MixprecEngineNumerics *nm = job->nm;

  for (gsize k = first; k < end; k++)
    {
      guint64 s = g_array_index (nm->owned, guint64, k);
      const NumSlot *slot = &g_array_index (nm->slots, NumSlot, s);
      const NumParam *np = &g_array_index (nm->params, NumParam, slot->param);
      gfloat *master;
      gpointer working;

      if (!np->has_values || !slot_in_pass (job, slot))
        continue;
      _mixprec_numerics_values_run (job->engine, np, slot->lo, &master, &working);
      slot_update (nm->records + s * N_REC, np->group->dtypes.working, nm->old_master + slot->at,
                   master, working, slot->hi - slot->lo);
    }
}

/* The FP8 copies the step wrote (host memory: engines on other devices
 * refuse numerics), against this rank's FP32 values: how many values lie
 * beyond the format once scaled (per-tensor scaling: clamped, or NaN
 * without saturation), and how many non-zero values became a zero code.
 * Under ZeRO-3 the copy holds this rank's slices.
 *
 * A value saturates when rounding its scaled value to nearest even would
 * leave the format, not merely when it is above the largest finite value:
 * current scaling makes the amax times 448 / amax, which the FP32 product
 * can round a few ulps above 448, and E4M3 rounds everything up to 464 (the
 * tie goes to 448's even significand) back to 448, losing nothing. So the
 * count asks the non-saturating cast, whose overflow is NaN (E4M3) or Inf
 * (E5M2). Under the MX recipe each element is scaled by its block's E8M0
 * scale: with the FLOOR rule a block's largest values land between the
 * format's largest and twice it, and the cast clamps them. */
/* Whether a non-saturating cast's byte is its overflow: NaN in E4M3,
 * ±Inf in E5M2. */
static gboolean
fp8_overflows (guint   format,
               guint8  code)
{
  return format == _MIXPREC_FP8_E4M3 ? (code & 0x7F) == 0x7F : (code & 0x7F) == 0x7C;
}

static void
fp8_slots (gsize first, gsize end, gpointer data)
{
  Job *job = data;
  MixprecEngine *self = job->engine;
  struct _MixprecEngineNumerics *nm = job->nm;

  for (gsize k = first; k < end; k++)
    {
      guint64 s = g_array_index (nm->owned, guint64, k);
      const NumSlot *slot = &g_array_index (nm->slots, NumSlot, s);
      const NumParam *np = &g_array_index (nm->params, NumParam, slot->param);
      Group *g = np->group;
      const Unit *u = &g_array_index (g->units, Unit, np->unit);
      gdouble *rec = nm->records + s * N_REC;
      guint64 n = slot->hi - slot->lo, saturated = 0, nonzero = 0, under = 0;
      const guint8 *codes;
      gfloat *master, scale = 1.0f, max;
      const guint8 *mx_scales = NULL;
      guint format, mx_block = 1;
      gpointer working;

      if (!np->fp8 && !np->fp8_mx)
        continue;
      _mixprec_numerics_values_run (self, np, slot->lo, &master, &working);
      codes = g->working_local ? g->fp8.data + u->local + (slot->lo - self->rank * UNIT_SLICE (self, u))
                               : g->fp8.data + u->flat + slot->lo;
      max = (gfloat) mixprec_dtype_get_max (g->fp8.dtype);
      format = _mixprec_fp8_format (g->fp8.dtype);
      if (np->fp8)
        scale = mixprec_fp8_scaling_get_scale (_mixprec_param_get_storage (np->param)->fp8_scaling);
      else
        {
          /* MX: each element's block scale. An MX parameter starts its
           * unit and slots start at multiples of 4096 in it, so the
           * slot's first element starts a block. */
          guint b = MAX (mixprec_fp8_recipe_get_block_size (self->fp8_recipe), 1);

          mx_scales = g->working_local
                      ? g->fp8.scales + u->fp8.scales_local + (slot->lo - self->rank * UNIT_SLICE (self, u)) / b
                      : g->fp8.scales + u->fp8.scales_at + slot->lo / b;
          mx_block = b;
        }
      for (guint64 i = 0; i < n; i++)
        {
          /* The cast's own product: one FP32 multiplication. */
          gfloat by = mx_scales != NULL ? _mixprec_mx_inv_scale (mx_scales[i / mx_block]) : scale;
          gfloat x = master[i] * by;

          saturated += fabsf (x) > max && !isnan (master[i]) &&
                       fp8_overflows (format, _mixprec_fp8_cast (format, FALSE, master[i], by));
          if (master[i] != 0.0f)
            {
              nonzero++;
              under += (codes[i] & 0x7f) == 0;
            }
        }
      rec[REC_FP8_SATURATED] = (gdouble) saturated;
      rec[REC_FP8_NONZERO] = (gdouble) nonzero;
      rec[REC_FP8_UNDERFLOW] = (gdouble) under;
    }
}

/* ---------------------------------------------------------------- per thread */

/* The sums over a parameter (or a module type) of its slots. */
typedef struct {
  gdouble rec[N_REC];        /* counts and sums added, amax the largest */
  guint64 numel;
  gboolean values, working;
  gboolean fp8, fp8_mx;
  gdouble fp8_scale;         /* one parameter's; NaN for several */
  guint n_fp8;
  gboolean shadow;
  gboolean any;
} Totals;

/* @from's fields into @t, all but the records' sums. */
static void
add_fields (Totals *t, const Totals *from)
{
  t->numel += from->numel;
  t->values |= from->values;
  t->working |= from->working;
  t->fp8 |= from->fp8;
  t->shadow |= from->shadow;
  t->fp8_mx |= from->fp8_mx;
  if (from->n_fp8 > 0)
    t->fp8_scale = from->fp8_scale;
  t->n_fp8 += from->n_fp8;
  t->any |= from->any;
}

/* The parameter's own fields of @t. */
static void
add_param (Totals *t, const NumParam *np)
{
  Totals mine = { { 0 } };

  mine.numel = np->numel;
  mine.values = np->has_values;
  mine.working = np->has_working;
  mine.fp8 = np->fp8;
  mine.shadow = np->shadow;
  mine.fp8_mx = np->fp8_mx;
  if (np->fp8)
    {
      mine.fp8_scale = mixprec_fp8_scaling_get_scale (_mixprec_param_get_storage (np->param)->fp8_scaling);
      mine.n_fp8 = 1;
    }
  mine.any = TRUE;
  add_fields (t, &mine);
}

/* A call's runs: one buffer per thread, grown as needed. */
typedef struct {
  MixprecOptimizerNumericsV1 *runs;
  gint64 *slot;              /* per run: the slot it measures, or -1 */
  gsize cap;
  /* The parameter whose slots this thread is adding up (slot_summed()) */
  gconstpointer nm;
  gint generation;
  guint param;
  guint64 next_slot;
  gdouble sums[N_REC];
  guint last;                /* in_pass(): where the last call's slots ended in
                                its group's list, a guess at the next call's first */
} Runs;

static void
runs_free (gpointer data)
{
  Runs *r = data;

  g_free (r->runs);
  g_free (r->slot);
  g_free (r);
}

static GPrivate runs_key = G_PRIVATE_INIT (runs_free);

static Runs *
runs_local (void)
{
  Runs *r = g_private_get (&runs_key);

  if (r == NULL)
    {
      r = g_new0 (Runs, 1);
      g_private_set (&runs_key, r);
    }
  return r;
}

static Runs *
runs_buffer (gsize n)
{
  Runs *r = runs_local ();

  if (r->cap < n)
    {
      r->cap = MAX (n, 2 * r->cap);
      r->runs = g_renew (MixprecOptimizerNumericsV1, r->runs, r->cap);
      r->slot = g_renew (gint64, r->slot, r->cap);
    }
  return r;
}

/* One process: a thread that meets a parameter's first slot adds up its
 * records as it goes through the slots in order, instead of writing them,
 * while they are in cache: the same additions in the same order as
 * add_slots() from the records. The last slot leaves the parameter's sums
 * in nm->param_sums (summed 2); where the thread's part of the pass ends
 * before it, the sums so far and the next slot (summed 1), and whoever
 * measures the rest writes their records. */

/* The thread's sums so far, if @nm's. */
static void
sequence_flush (struct _MixprecEngineNumerics *nm, Runs *r)
{
  if (r->nm == nm && r->generation == nm->generation)
    {
      memcpy (nm->param_sums + (gsize) r->param * N_REC, r->sums, sizeof r->sums);
      nm->prefix_next[r->param] = r->next_slot;
      nm->summed[r->param] = 1;
    }
  r->nm = NULL;
}

/* Whether slot @k's record @rec went into its parameter's sums in order,
 * so that it need not be written. */
static gboolean
slot_summed (struct _MixprecEngineNumerics *nm, Runs *r, guint64 k, const NumSlot *s, const NumParam *np,
             const gdouble *rec)
{
  gdouble amax;

  /* The FP8 and shadow fields come after the pass. */
  if (nm->param_sums == NULL || np->fp8 || np->fp8_mx || np->shadow)
    return FALSE;
  if (k == np->first_slot)
    {
      sequence_flush (nm, r);
      r->nm = nm;
      r->generation = nm->generation;
      r->param = s->param;
      memset (r->sums, 0, sizeof r->sums);
    }
  else if (r->nm != nm || r->generation != nm->generation || r->param != s->param || r->next_slot != k)
    return FALSE;
  amax = r->sums[REC_AMAX];
  for (guint j = 0; j < N_REC; j++)
    r->sums[j] += rec[j];
  r->sums[REC_AMAX] = MAX (amax, rec[REC_AMAX]);
  r->next_slot = k + 1;
  if (r->next_slot == np->first_slot + np->n_slots)
    {
      memcpy (nm->param_sums + (gsize) s->param * N_REC, r->sums, sizeof r->sums);
      nm->summed[s->param] = 2;
      r->nm = NULL;
    }
  return TRUE;
}

/* The record of slot @k: into its parameter's sums or written. */
static void
slot_done (struct _MixprecEngineNumerics *nm, Runs *r, guint64 k, const NumSlot *s, const NumParam *np,
           const gdouble *rec)
{
  if (!slot_summed (nm, r, k, s, np, rec))
    memcpy (nm->records + k * N_REC, rec, N_REC * sizeof (gdouble));
}

void
_mixprec_engine_numerics_chunk_end (gpointer fuse)
{
  sequence_flush (fuse, runs_local ());
}

/* ---------------------------------------------------------------- in the optimizer's pass */

/* The first of the group's slots (this rank's list) ending after @index. */
static guint
first_slot_after (struct _MixprecEngineNumerics *nm, GArray *mine, guint64 index)
{
  guint lo = 0, hi = mine->len;

  while (lo < hi)
    {
      guint mid = (lo + hi) / 2;
      const NumSlot *s = &g_array_index (nm->slots, NumSlot, g_array_index (mine, guint64, mid));

      if (s->index + (s->hi - s->lo) <= index)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo;
}

/* The same, from where this thread's last call ended (@r->last): a
 * thread's calls mostly follow one another. A slot that starts exactly
 * at @index is the first ending after it; otherwise the search. */
static guint
first_slot_from (struct _MixprecEngineNumerics *nm, GArray *mine, guint64 index, const Runs *r)
{
  if (r->last < mine->len &&
      g_array_index (nm->slots, NumSlot, g_array_index (mine, guint64, r->last)).index == index)
    return r->last;
  return first_slot_after (nm, mine, index);
}

/* Whether the optimizer's pass over @g can measure it: its calls then
 * start at a multiple of the block size from a unit's first element and
 * end at another or at the end of a run of the unit, so that every slot
 * lies in one call and is measured as the passes of their own measure it
 * (mixprec-engine-step.c cuts them so when _mixprec_engine_numerics_fuse()
 * says). Not: staged blocks (scaled state on one process), ZeRO-0's
 * gathered windows, offloaded steps. */
static gboolean
fusable (MixprecEngine *self, Group *g)
{
  if (self->offload || !_mixprec_device_memory_is_host (g->device))
    return FALSE;
  if (self->world == 1)
    return self->repr.block_size == 0;
  return self->stage >= 1 || g->accum_mode == ACCUM_IN_GRAD;
}

/* The masters of one call, kept before the optimizer writes them: one
 * buffer per thread, grown as needed. */
typedef struct {
  gfloat *data;
  gsize n;
} Kept;

static void
kept_free (gpointer data)
{
  Kept *kept = data;

  g_free (kept->data);
  g_free (kept);
}

static GPrivate kept_key = G_PRIVATE_INIT (kept_free);

static gfloat *
kept_buffer (gsize n)
{
  Kept *kept = g_private_get (&kept_key);

  if (kept == NULL)
    {
      kept = g_new0 (Kept, 1);
      g_private_set (&kept_key, kept);
    }
  if (kept->n < n)
    {
      g_free (kept->data);
      kept->data = g_new (gfloat, n);
      kept->n = n;
    }
  return kept->data;
}

gpointer
_mixprec_engine_numerics_fuse (MixprecEngine *self,
                               Group         *g)
{
  struct _MixprecEngineNumerics *nm = self->numerics;

  return nm != NULL && nm->measuring && nm->fused[g->index] ? nm : NULL;
}

guint64
_mixprec_engine_numerics_cut (Group   *g,
                              guint64  index)
{
  guint lo = 0, hi = g->units->len;
  const Unit *u;

  /* The unit holding @index: the last starting at or before it. */
  while (hi - lo > 1)
    {
      guint mid = (lo + hi) / 2;

      if (g_array_index (g->units, Unit, mid).index <= index)
        lo = mid;
      else
        hi = mid;
    }
  u = &g_array_index (g->units, Unit, lo);
  /* From a block boundary the rest of the unit is one piece (the pass
   * cuts it only at others); from inside a block, the block's rest. */
  if ((index - u->index) % _MIXPREC_SUMSQ_BLOCK == 0)
    return u->index + u->numel;
  return MIN (u->index + ((index - u->index) / _MIXPREC_SUMSQ_BLOCK + 1) * _MIXPREC_SUMSQ_BLOCK,
              u->index + u->numel);
}

void
_mixprec_engine_numerics_fused_before (gpointer      fuse,
                                       Group        *g,
                                       const gfloat *master,
                                       guint64       n)
{
  if (master != NULL && (g->dtypes.has_master || g->dtypes.working == MIXPREC_DTYPE_FLOAT32))
    memcpy (kept_buffer (n), master, n * sizeof (gfloat));
}

void
_mixprec_engine_numerics_fused_after (gpointer       fuse,
                                      MixprecEngine *self,
                                      Group         *g,
                                      guint64        index,
                                      gconstpointer  grad,
                                      MixprecDType   grad_dtype,
                                      const gfloat  *master,
                                      gconstpointer  working,
                                      guint64        n)
{
  struct _MixprecEngineNumerics *nm = fuse;
  GArray *mine = nm->by_group[g->index];
  const gfloat *kept = master != NULL ? kept_buffer (n) : NULL;
  Runs *r = runs_local ();
  guint i;

  for (i = first_slot_from (nm, mine, index, r); i < mine->len; i++)
    {
      guint64 k = g_array_index (mine, guint64, i);
      const NumSlot *s = &g_array_index (nm->slots, NumSlot, k);
      const NumParam *np = &g_array_index (nm->params, NumParam, s->param);
      guint64 len = s->hi - s->lo, at = s->index - index, block;
      gdouble rec[N_REC] = { 0 };

      if (s->index >= index + n)
        break;
      /* ZeRO-0 steps every element on every rank: each slot is its
       * owner's. */
      if (s->owner != self->rank)
        continue;
      if (s->index < index || s->index + len > index + n)
        {
          g_atomic_int_set (&nm->cut, 1);
          continue;
        }
      /* A block of the norm's: it summed the squares already (its blocks
       * lie in host memory where the pass measures, this rank's first). */
      block = s->norm_block;
      if (block != G_MAXUINT64)
        slot_counts (rec, np, _mixprec_engine_at ((gpointer) grad, grad_dtype, at), grad_dtype, len,
                     g->norm.blocks[block]);
      else
        slot_grads (rec, np, _mixprec_engine_at ((gpointer) grad, grad_dtype, at), grad_dtype, len);
      if (np->has_values && master != NULL)
        slot_update (rec, g->dtypes.working, kept + at, master + at,
                     working != NULL ? _mixprec_engine_at ((gpointer) working, g->dtypes.working, at) : NULL,
                     len);
      slot_done (nm, r, k, s, np, rec);
    }
  r->last = i;
}

/* ---------------------------------------------------------------- measured by the optimizer
 * An optimizer whose numerics_master_mask has the call's master format
 * measures the call itself (ABI 1.6) while the old and new masters, the
 * gradient and the working copy are in registers: no copy of the masters
 * before the pass and no second read after it. The engine hands it one
 * run per slot of the call (and a run for whatever lies between slots)
 * with the slot's gradient bounds, and takes back exactly what
 * slot_counts() and slot_update() would have recorded (the plugin's
 * arithmetic is the kernels' order, MixprecOptimizerNumericsV1). */

/* MIXPREC_NUMERICS_IN_PASS=0 has the library measure around the
 * optimizer even where the optimizer could measure in its pass (the same
 * numbers, for comparing the two and their cost); 1 or unset: the
 * optimizer measures where it can. Anything else is ignored with a
 * warning, once. */
static gboolean
in_pass_allowed (void)
{
  static gsize warned = 0;
  const gchar *v = g_getenv ("MIXPREC_NUMERICS_IN_PASS");

  if (v == NULL || g_str_equal (v, "1"))
    return TRUE;
  if (g_str_equal (v, "0"))
    return FALSE;
  if (g_once_init_enter (&warned))
    {
      g_autofree gchar *shown = g_strescape (v, NULL);

      g_warning ("MIXPREC_NUMERICS_IN_PASS=\"%.40s\" is neither 0 nor 1; ignored", shown);
      g_once_init_leave (&warned, 1);
    }
  return TRUE;
}

gboolean
_mixprec_engine_numerics_by_optimizer (gpointer                  fuse,
                                       MixprecEngine            *self,
                                       MixprecPluginMasterFormat master_format)
{
  struct _MixprecEngineNumerics *nm = fuse;

  return nm->in_pass && _mixprec_feature_optimizer_measures (self->optimizer, master_format);
}

void
_mixprec_engine_numerics_in_pass (gpointer                   fuse,
                                  MixprecEngine             *self,
                                  Group                     *g,
                                  guint64                    index,
                                  guint64                    n,
                                  MixprecOptimizerStepV3    *args)
{
  struct _MixprecEngineNumerics *nm = fuse;
  GArray *mine = nm->by_group[g->index];
  Runs *r = runs_local ();
  guint first = first_slot_from (nm, mine, index, r), n_runs = 0, i;
  guint64 at = 0;
  gint p, emin;

  r = runs_buffer (2 * (gsize) (mine->len - first) + 1);
  for (i = first; i < mine->len; i++)
    {
      guint64 k = g_array_index (mine, guint64, i);
      const NumSlot *s = &g_array_index (nm->slots, NumSlot, k);
      const NumParam *np = &g_array_index (nm->params, NumParam, s->param);
      guint64 len = s->hi - s->lo;

      if (s->index >= index + n)
        break;
      /* ZeRO-0 steps every element on every rank: each slot is its
       * owner's. A slot the call cuts is measured by nobody. */
      if (s->owner != self->rank)
        continue;
      if (s->index < index || s->index + len > index + n)
        {
          g_atomic_int_set (&nm->cut, 1);
          continue;
        }
      if (s->index - index > at)
        {
          memset (&r->runs[n_runs], 0, sizeof r->runs[n_runs]);
          r->runs[n_runs].end = s->index - index;
          r->slot[n_runs++] = -1;
        }
      memset (&r->runs[n_runs], 0, sizeof r->runs[n_runs]);
      r->runs[n_runs].end = s->index - index + len;
      r->runs[n_runs].grad_under = np->wire_under;
      r->runs[n_runs].grad_over = np->wire_over;
      r->slot[n_runs++] = (gint64) k;
      at = s->index - index + len;
    }
  r->last = i;
  if (at < n)
    {
      memset (&r->runs[n_runs], 0, sizeof r->runs[n_runs]);
      r->runs[n_runs].end = n;
      r->slot[n_runs++] = -1;
    }
  format_of (g->dtypes.working, &p, &emin);
  args->numerics = r->runs;
  args->n_numerics = n_runs;
  args->working_precision = p;
  args->working_emin = emin;
}

void
_mixprec_engine_numerics_in_pass_after (gpointer                      fuse,
                                        MixprecEngine                *self,
                                        Group                        *g,
                                        const MixprecOptimizerStepV3 *args,
                                        gconstpointer                 grad,
                                        MixprecDType                  grad_dtype,
                                        const gfloat                 *master)
{
  struct _MixprecEngineNumerics *nm = fuse;
  Runs *r = g_private_get (&runs_key);
  guint64 start = 0;

  for (guint j = 0; j < args->n_numerics; j++)
    {
      const MixprecOptimizerNumericsV1 *run = &args->numerics[j];
      gint64 k = r->slot[j];
      const NumSlot *s;
      const NumParam *np;
      gdouble rec[N_REC] = { 0 };
      guint64 len = run->end - start, block;
      gfloat amax;

      start = run->end;
      if (k < 0)
        continue;
      if (!run->measured)
        {
          g_atomic_int_set (&nm->cut, 1);
          continue;
        }
      s = &g_array_index (nm->slots, NumSlot, (guint64) k);
      np = &g_array_index (nm->params, NumParam, s->param);
      memcpy (&amax, &run->grad_amax, sizeof amax);
      rec[REC_NONFINITE] = (gdouble) run->nonfinite;
      rec[REC_NONZERO] = (gdouble) run->nonzero;
      rec[REC_UNDERFLOW] = (gdouble) run->under;
      rec[REC_OVERFLOW] = (gdouble) run->over;
      rec[REC_AMAX] = amax;
      /* A norm block's sum of squares is the norm's; any other slot's
       * (where a unit packs parameters, the blocks they share) is summed
       * here the same way, the counts being the optimizer's. */
      block = s->norm_block;
      if (block != G_MAXUINT64)
        rec[REC_SUMSQ] = g->norm.blocks[block];
      else
        rec[REC_SUMSQ] = _mixprec_kernel_sumsq_best (_mixprec_engine_at ((gpointer) grad, grad_dtype, run->end - len),
                                                     grad_dtype, len);
      if (np->has_values && master != NULL)
        {
          rec[REC_STALE] = (gdouble) run->stale;
          rec[REC_DELTA_SUMSQ] = run->delta_sumsq;
          rec[REC_MASTER_SUMSQ] = run->old_sumsq;
        }
      slot_done (nm, r, (guint64) k, s, np, rec);
    }
}

/* ---------------------------------------------------------------- the engine's calls */

gboolean
_mixprec_engine_numerics_setup (MixprecEngine *self,
                                GError       **error)
{
  guint64 every = _mixprec_config_get_numerics_every (self->config);

  if (every == 0)
    return TRUE;
  if (!_mixprec_device_memory_is_host (self->device))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "mixprec.numerics.every: per-tensor numerics read the buffers in host memory, "
                   "but mixprec.device \"%s\" keeps them in device memory; set it to 0 or use "
                   "the \"cpu\" device", mixprec_config_get_device (self->config));
      return FALSE;
    }
  self->numerics = g_new0 (struct _MixprecEngineNumerics, 1);
  self->numerics->every = every;
  return TRUE;
}

void
_mixprec_engine_numerics_relayout (MixprecEngine *self)
{
  struct _MixprecEngineNumerics *nm = self->numerics;

  if (nm == NULL)
    return;
  for (guint j = 0; nm->by_group != NULL && j < nm->n_groups; j++)
    g_array_unref (nm->by_group[j]);
  g_clear_pointer (&nm->by_group, g_free);
  g_clear_pointer (&nm->fused, g_free);
  nm->n_groups = 0;
  g_clear_pointer (&nm->params, g_array_unref);
  g_clear_pointer (&nm->slots, g_array_unref);
  g_clear_pointer (&nm->owned, g_array_unref);
  g_clear_pointer (&nm->records, g_free);
  g_clear_pointer (&nm->param_sums, g_free);
  g_clear_pointer (&nm->summed, g_free);
  g_clear_pointer (&nm->prefix_next, g_free);
  g_clear_pointer (&nm->old_master, g_free);
  nm->old_n = 0;
  _mixprec_numerics_shadow_free (nm);
  nm->shadow = NULL;
  memset (nm->shadow_states, 0, sizeof nm->shadow_states);
  nm->shadow_n = 0;
  nm->shadow_started = FALSE;
}

void
_mixprec_engine_numerics_free (MixprecEngine *self)
{
  struct _MixprecEngineNumerics *nm = g_steal_pointer (&self->numerics);

  if (nm == NULL)
    return;
  for (guint j = 0; nm->by_group != NULL && j < nm->n_groups; j++)
    g_array_unref (nm->by_group[j]);
  g_free (nm->by_group);
  g_free (nm->fused);
  g_clear_pointer (&nm->params, g_array_unref);
  g_clear_pointer (&nm->slots, g_array_unref);
  g_clear_pointer (&nm->owned, g_array_unref);
  g_free (nm->records);
  g_free (nm->param_sums);
  g_free (nm->summed);
  g_free (nm->prefix_next);
  g_free (nm->old_master);
  _mixprec_numerics_shadow_free (nm);
  g_clear_object (&nm->last);
  g_free (nm);
}

/* Measured steps of all engines so far, each one's number telling a
 * thread's sums of this step from those of earlier ones (slot_summed()). */
static gint generations;

gboolean
_mixprec_engine_numerics_begin (MixprecEngine *self,
                                gdouble        divisor,
                                gboolean       skipped)
{
  struct _MixprecEngineNumerics *nm = self->numerics;
  Job job = { self, nm, skipped };
  gboolean separate = skipped;

  if (nm == NULL)
    return FALSE;
  /* Laid out at the first step, measured or not, so that a measured
   * step costs only its measuring. */
  if (nm->params == NULL)
    _mixprec_numerics_layout (self, nm);
  nm->measuring = (self->steps + 1) % nm->every == 0;
  if (!nm->measuring)
    return FALSE;
  nm->updated = FALSE;
  nm->divisor = divisor;
  nm->cut = 0;
  if (nm->summed != NULL)
    memset (nm->summed, 0, MAX (nm->params->len, 1));
  nm->generation = g_atomic_int_add (&generations, 1) + 1;
  for (guint j = 0; j < self->groups->len; j++)
    {
      nm->fused[j] = !skipped && fusable (self, g_ptr_array_index (self->groups, j));
      separate |= !nm->fused[j];
    }
  /* A pass that measures a slot writes its whole record or adds it to its
   * parameter's sums (a slot it cuts is reported as cut), and the FP8 and
   * shadow fields are set after it; only passes of their own need the
   * records zero. */
  if (separate)
    memset (nm->records, 0, (gsize) nm->slots->len * N_REC * sizeof (gdouble));
  /* The optimizer measures calls whose slots are all unscaled (ABI 1.6). */
  nm->in_pass = in_pass_allowed ();
  for (guint k = 0; k < mixprec_feature_get_n_state_slots (self->optimizer) &&
                    k < G_N_ELEMENTS (self->repr.slots); k++)
    if (self->repr.slots[k] != MIXPREC_PLUGIN_STATE_FLOAT32 &&
        self->repr.slots[k] != MIXPREC_PLUGIN_STATE_BFLOAT16)
      nm->in_pass = FALSE;
  if (!separate)
    return TRUE;
  /* The gradients before the optimizer consumes them, and the masters it
   * is about to overwrite. */
  _mixprec_device_dispatch (NULL, nm->owned->len, 16, 1, grad_slots, &job);
  if (!skipped)
    {
      g_free (nm->old_master);
      nm->old_master = g_new (gfloat, MAX (nm->old_n, 1));
      _mixprec_device_dispatch (NULL, nm->owned->len, 16, 1, keep_masters, &job);
    }
  return TRUE;
}

void
_mixprec_engine_numerics_after_update (MixprecEngine *self)
{
  struct _MixprecEngineNumerics *nm = self->numerics;
  Job job = { self, nm, FALSE };

  if (nm == NULL || !nm->measuring)
    return;
  if (nm->old_master != NULL)
    _mixprec_device_dispatch (NULL, nm->owned->len, 16, 1, update_slots, &job);
  g_clear_pointer (&nm->old_master, g_free);
  if (self->fp8_recipe != NULL)
    _mixprec_device_dispatch (NULL, nm->owned->len, 16, 1, fp8_slots, &job);
  _mixprec_numerics_shadow_drift (self, nm);
  nm->updated = TRUE;
}

/* Every rank's records, each slot from its owner, into nm->records. */
static gboolean
agree_records (MixprecEngine *self, struct _MixprecEngineNumerics *nm, GError **error)
{
  gsize n = (gsize) nm->slots->len * N_REC;
  g_autofree gdouble *all = NULL;
  GError *local = NULL;

  if (self->world == 1)
    return TRUE;
  all = g_new (gdouble, MAX (n, 1) * self->world);
  if (!_mixprec_engine_before_comm (self, error))
    return FALSE;
  /* Raw bytes: the gather moves floats, and gathering is exact. */
  _mixprec_comm_count_next_as (self->comm, _MIXPREC_COMM_SCALARS);
  if (!mixprec_comm_all_gather (self->comm, nm->records, all, n * 2, MIXPREC_DTYPE_FLOAT32, &local))
    return _mixprec_engine_comm_failed (error, local, "agreeing on the per-tensor numerics");
  for (guint64 s = 0; s < nm->slots->len; s++)
    {
      guint owner = g_array_index (nm->slots, NumSlot, s).owner;

      memcpy (nm->records + s * N_REC, all + (gsize) owner * n + s * N_REC, N_REC * sizeof (gdouble));
    }
  return TRUE;
}

/* The sums over @np's slots from slot @from into @t (every field is a
 * sum but REC_AMAX, the largest), in slot order, in registers. */
static void
add_slots (Totals *t, const NumParam *np, guint64 from, const gdouble *records)
{
  const gdouble *rec = records + from * N_REC;
  gdouble sums[N_REC], amax;

  memcpy (sums, t->rec, sizeof sums);
  amax = sums[REC_AMAX];
  for (guint64 s = from; s < np->first_slot + np->n_slots; s++, rec += N_REC)
    {
      for (guint r = 0; r < N_REC; r++)
        sums[r] += rec[r];
      amax = MAX (amax, rec[REC_AMAX]);
    }
  sums[REC_AMAX] = amax;
  memcpy (t->rec, sums, sizeof sums);
  add_param (t, np);
}

/* @from's sums into @t: a module type's totals are its parameters',
 * added in the order they were registered. */
static void
add_totals (Totals *t, const Totals *from)
{
  for (guint r = 0; r < N_REC; r++)
    t->rec[r] = r == REC_AMAX ? MAX (t->rec[r], from->rec[r]) : t->rec[r] + from->rec[r];
  add_fields (t, from);
}

/* Each parameter's totals, from the records (across the thread pool). */
typedef struct {
  struct _MixprecEngineNumerics *nm;
  Totals *totals;
} TotalsJob;

static void
param_totals (gsize first, gsize end, gpointer data)
{
  TotalsJob *job = data;

  struct _MixprecEngineNumerics *nm = job->nm;

  for (gsize i = first; i < end; i++)
    {
      const NumParam *np = &g_array_index (nm->params, NumParam, i);

      Totals *t = &job->totals[i];
      guint8 summed = nm->summed != NULL ? nm->summed[i] : 0;

      if (summed == 0)
        {
          add_slots (t, np, np->first_slot, nm->records);
          continue;
        }
      /* The sums so far go on from where the pass left them. */
      memcpy (t->rec, nm->param_sums + i * N_REC, sizeof t->rec);
      if (summed == 2)
        add_param (t, np);
      else
        add_slots (t, np, nm->prefix_next[i], nm->records);
    }
}

static gdouble
fraction (gdouble count, gdouble of)
{
  return of > 0.0 ? count / of : 0.0;
}

static void
put (MixprecNumerics *out, gboolean by_type, const gchar *name, const Totals *t,
     gboolean updated, gdouble divisor)
{
  /* Each name once: parameter names are unique, and so are the types. */
  _MixprecNumericsRow *row = _mixprec_numerics_append_row (out, by_type, name);

  /* What a monitor shows: the gradients unscaled like the step's norm. */
  _mixprec_numerics_row_set (row, _MIXPREC_NUM_GRAD_AMAX, t->rec[REC_AMAX] / divisor);
  _mixprec_numerics_row_set (row, _MIXPREC_NUM_GRAD_NORM, sqrt (t->rec[REC_SUMSQ]) / divisor);
  _mixprec_numerics_row_set (row, _MIXPREC_NUM_GRAD_NONFINITE,
                             fraction (t->rec[REC_NONFINITE], (gdouble) t->numel));
  _mixprec_numerics_row_set (row, _MIXPREC_NUM_GRAD_UNDERFLOW,
                             fraction (t->rec[REC_UNDERFLOW], t->rec[REC_NONZERO]));
  _mixprec_numerics_row_set (row, _MIXPREC_NUM_GRAD_OVERFLOW,
                             fraction (t->rec[REC_OVERFLOW], t->rec[REC_NONZERO]));
  if (updated && t->shadow)
    {
      _mixprec_numerics_row_set (row, _MIXPREC_NUM_SHADOW_REL_L2,
                                 t->rec[REC_SHADOW_SUMSQ] > 0.0
                                 ? sqrt (t->rec[REC_SHADOW_DIFF_SUMSQ]) / sqrt (t->rec[REC_SHADOW_SUMSQ])
                                 : t->rec[REC_SHADOW_DIFF_SUMSQ] > 0.0 ? INFINITY : 0.0);
      _mixprec_numerics_row_set (row, _MIXPREC_NUM_SHADOW_MAX_ULP, t->rec[REC_SHADOW_ULP]);
    }
  if (!updated || !t->values)
    return;
  if (t->fp8 || t->fp8_mx)
    {
      _mixprec_numerics_row_set (row, _MIXPREC_NUM_FP8_SATURATION,
                                 fraction (t->rec[REC_FP8_SATURATED], (gdouble) t->numel));
      _mixprec_numerics_row_set (row, _MIXPREC_NUM_FP8_UNDERFLOW,
                                 fraction (t->rec[REC_FP8_UNDERFLOW], t->rec[REC_FP8_NONZERO]));
      /* The scale in use: a tensor's own (a module type's rows have
       * several). */
      if (!by_type && t->n_fp8 == 1)
        _mixprec_numerics_row_set (row, _MIXPREC_NUM_FP8_SCALE, t->fp8_scale);
    }
  if (t->working)
    _mixprec_numerics_row_set (row, _MIXPREC_NUM_STALE,
                               fraction (t->rec[REC_STALE], (gdouble) t->numel));
  /* A zero tensor that moved moved infinitely far relative to itself. */
  _mixprec_numerics_row_set (row, _MIXPREC_NUM_UPDATE_RATIO,
                             t->rec[REC_MASTER_SUMSQ] > 0.0
                             ? sqrt (t->rec[REC_DELTA_SUMSQ]) / sqrt (t->rec[REC_MASTER_SUMSQ])
                             : t->rec[REC_DELTA_SUMSQ] > 0.0 ? INFINITY : 0.0);
}

gboolean
_mixprec_engine_numerics_finish (MixprecEngine *self,
                                 guint64        step,
                                 gboolean       applied,
                                 GError       **error)
{
  struct _MixprecEngineNumerics *nm = self->numerics;
  g_autoptr(GHashTable) by_type = NULL;
  g_autoptr(GPtrArray) types = NULL;
  g_autofree Totals *totals = NULL;
  MixprecNumerics *out;

  if (nm == NULL || !nm->measuring)
    return TRUE;
  nm->measuring = FALSE;
  g_clear_pointer (&nm->old_master, g_free);
  if (g_atomic_int_get (&nm->cut))
    g_critical ("step %" G_GUINT64_FORMAT ": the optimizer's pass cut a slot of the per-tensor "
                "numerics; its statistics are incomplete", step);
  if (!agree_records (self, nm, error))
    return FALSE;
  out = _mixprec_numerics_new (step, applied);
  totals = g_new0 (Totals, MAX (nm->params->len, 1));
  {
    TotalsJob job = { nm, totals };

    _mixprec_device_dispatch (NULL, nm->params->len, 64, 1, param_totals, &job);
  }
  by_type = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, g_free);
  types = g_ptr_array_new ();
  for (guint i = 0; i < nm->params->len; i++)
    {
      const NumParam *np = &g_array_index (nm->params, NumParam, i);
      const gchar *type = mixprec_param_get_module_type (np->param);
      Totals *tt;

      if (np->numel == 0)
        continue;
      put (out, FALSE, mixprec_param_get_name (np->param), &totals[i], nm->updated, nm->divisor);
      /* Parameters of no module type are in no module type's row. */
      if (type == NULL || *type == '\0')
        continue;
      tt = g_hash_table_lookup (by_type, type);
      if (tt == NULL)
        {
          tt = g_new0 (Totals, 1);
          g_hash_table_insert (by_type, (gpointer) type, tt);
          g_ptr_array_add (types, (gpointer) type);
        }
      add_totals (tt, &totals[i]);
    }
  for (guint i = 0; i < types->len; i++)
    put (out, TRUE, types->pdata[i], g_hash_table_lookup (by_type, types->pdata[i]), nm->updated,
         nm->divisor);
  g_clear_object (&nm->last);
  nm->last = out;
  _mixprec_engine_record_numerics (self, out);
  return TRUE;
}

/**
 * mixprec_engine_get_numerics:
 * @self: a #MixprecEngine
 *
 * Gets the per-tensor numerics of the last step that measured them
 * (every `mixprec.numerics.every` steps, see #MixprecNumerics): the same
 * values on every rank, recorded by rank 0 in the monitors.
 *
 * Returns: (transfer full) (nullable): the last measured step's
 *   statistics, or %NULL when mixprec.numerics is off or no step has
 *   measured them yet
 *
 * Since: 1.1
 */
MixprecNumerics *
mixprec_engine_get_numerics (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);

  if (self->numerics == NULL || self->numerics->last == NULL)
    return NULL;
  return g_object_ref (self->numerics->last);
}
