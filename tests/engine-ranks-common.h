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

/* In the parent: runs @world ranks of this binary (mp_run_ranks()) with
 * @child_var=1, MIXPREC_TEST_SCENARIO=@scenario and MIXPREC_TEST_OUT set
 * to a file in a scratch folder; asserts that each exits 0 and that rank
 * 0's snapshot is @expected, bit for bit; stores in @gathered[r] the bytes
 * rank r gathered. Removes the scratch folder. */
void      er_run_ranks         (const gchar         *child_var,
                                const gchar         *scenario,
                                guint                world,
                                guint                timeout_ms,
                                GByteArray          *expected,
                                guint64             *gathered);

G_END_DECLS
