/* mixprec-parallel-private.h — split an element range across CPU threads */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Processes elements [begin, end). Must not depend on how the range is
 * split: kernels are element-wise, so any split gives the same bits. */
typedef void (*_MixprecRangeFunc) (gsize    begin,
                                   gsize    end,
                                   gpointer user_data);

/* Runs @func over [0, n) on up to mixprec_get_num_threads() threads (the
 * caller is one of them) and returns when every part is done. Parts are
 * at least @min_chunk elements and start on multiples of @align (a power of
 * two, for SIMD alignment). Small ranges, and calls made from inside a
 * parallel region, run on the calling thread. */
void  _mixprec_parallel_for         (gsize             n,
                                     gsize             min_chunk,
                                     gsize             align,
                                     _MixprecRangeFunc func,
                                     gpointer          user_data);

guint _mixprec_parallel_num_threads (void);

G_END_DECLS
