/* engine-ranks-common.h — what the ZeRO tests of the low-precision working
 * copies (test-fp8-zero, test-fp4-engine) share: the training steps, whose
 * gradients depend on the micro-batch and not on the rank, the report of a
 * rank child (its bitwise snapshot and the bytes it gathered, in files next
 * to the parent's output), and the parent's comparison with a one-process
 * reference. The model, the snapshot and the expected byte counts stay in
 * each test. */
#pragma once

#include <mixprec/mixprec.h>

G_BEGIN_DECLS

/* The elements of one parameter's ZeRO flat buffer over @world ranks:
 * @numel padded to a multiple of world x 4096 (the sum-of-squares block). */
guint64   er_padded_numel      (guint64              numel,
                                guint                world);

/* One optimizer step of @engine as rank @rank of @world with @gas
 * micro-batches: micro-batch m = local * @world + @rank gives parameter p
 * (registration order) element i the gradient
 * sin (0.37 m + 0.011 i + 1.3 @step + p) * 2^((7 i + m) % 9 - 4), a wide
 * dynamic range that depends on the micro-batch only, so that W ranks
 * equal one process accumulating W micro-batches. */
gboolean  er_step              (MixprecEngine       *engine,
                                guint                step,
                                guint                rank,
                                guint                world,
                                guint                gas,
                                GError             **error);

/* Parses a child's MIXPREC_TEST_SCENARIO, "TAG:STAGE:WORLD:STEPS"; @tag is
 * interned. FALSE when the text has not four fields. */
gboolean  er_parse_scenario    (const gchar         *text,
                                const gchar        **tag,
                                guint               *stage,
                                guint               *world,
                                guint               *steps);

/* Whether the buffers named @names that @engine holds are, byte for byte,
 * those mixprec_memory_plan_list_buffers() predicts for matrices of
 * @sizes elements (one group) over @world ranks; the first @n_required
 * must also be non-empty. Prints the first difference. */
gboolean  er_buffers_match_plan (MixprecEngine      *engine,
                                 const guint64      *sizes,
                                 guint               n_sizes,
                                 guint               world,
                                 const gchar * const *names,
                                 guint               n_names,
                                 guint               n_required);

/* In a rank child: writes @gathered to "@out.gathered<RANK>" and, on rank
 * 0, @snapshot to @out. */
gboolean  er_write_rank_result (const gchar        *out,
                                guint               rank,
                                guint64             gathered,
                                GByteArray         *snapshot,
                                GError            **error);

/* In the parent: runs @world ranks with @env (mp_run_ranks()), asserts
 * that each exits 0 and that rank 0's snapshot at @out is @expected, bit
 * for bit. */
void      er_run_and_compare   (guint                world,
                                guint                timeout_ms,
                                const gchar * const *env,
                                const gchar         *out,
                                GByteArray          *expected);

/* In the parent: the bytes rank @rank gathered, read from (and removing)
 * its file next to @out. */
guint64   er_take_gathered     (const gchar        *out,
                                guint               rank);

G_END_DECLS
