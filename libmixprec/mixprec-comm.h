/* mixprec-comm.h — collectives between ranks over a communication backend */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"
#include "mixprec-bootstrap.h"

G_BEGIN_DECLS

/**
 * MixprecReduceOp:
 * @MIXPREC_REDUCE_SUM: the sum, formed in rank order in FP32 (rounded once
 *   to a float16 or bfloat16 buffer's dtype)
 * @MIXPREC_REDUCE_MAX: the largest value; a NaN wins over any number
 *
 * How all-reduce and reduce-scatter combine the ranks' values. Values are
 * appended only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_REDUCE_SUM = 0,
  MIXPREC_REDUCE_MAX = 1,
} MixprecReduceOp;

/**
 * MixprecCommFlags:
 * @MIXPREC_COMM_NONE: no flag
 * @MIXPREC_COMM_ACCUMULATE: add the reduction onto what the receive
 *   buffer holds, as the first term: recv = ((recv + x_0) + x_1) + ...
 *   (for %MIXPREC_REDUCE_MAX, recv joins the comparison). For an
 *   all-reduce, the receive buffer must hold the same values on every rank.
 * @MIXPREC_COMM_RECV_FP32: the receive buffer holds float32 whatever the
 *   send buffer's dtype: the FP32 result is stored without rounding (and
 *   with %MIXPREC_COMM_ACCUMULATE the FP32 values are the first term).
 *   Gradients travel in a narrow dtype and land in an FP32 accumulation
 *   buffer this way.
 *
 * Options of mixprec_comm_all_reduce() and mixprec_comm_reduce_scatter().
 *
 * Since: 1.0
 */
typedef enum /*< flags >*/ {
  MIXPREC_COMM_NONE = 0,
  MIXPREC_COMM_ACCUMULATE = 1 << 0,
  MIXPREC_COMM_RECV_FP32 = 1 << 1,
} MixprecCommFlags;

/**
 * MIXPREC_COMM_ERROR:
 *
 * The error domain of #MixprecComm. Errors in this domain are from the
 * #MixprecCommError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_COMM_ERROR (mixprec_comm_error_quark ())

/**
 * MixprecCommError:
 * @MIXPREC_COMM_ERROR_NOT_FOUND: no communication backend of that name
 *   for that device, or none that serves this world size
 * @MIXPREC_COMM_ERROR_INIT: the backend failed to set up the communicator
 * @MIXPREC_COMM_ERROR_INVALID_ARGUMENT: a count, dtype, operation, flag,
 *   root or buffer layout the collective does not accept
 * @MIXPREC_COMM_ERROR_TIMEOUT: a peer did not answer within the timeout
 * @MIXPREC_COMM_ERROR_PEER_FAILED: the transport reported that a peer
 *   died or closed its connection
 * @MIXPREC_COMM_ERROR_ABORTED: mixprec_comm_abort() was called
 * @MIXPREC_COMM_ERROR_FAILED: the backend failed for another reason
 *
 * Errors of #MixprecComm. After %MIXPREC_COMM_ERROR_TIMEOUT,
 * %MIXPREC_COMM_ERROR_PEER_FAILED or %MIXPREC_COMM_ERROR_ABORTED the
 * communicator is broken: every later collective fails. Values are
 * appended only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_COMM_ERROR_NOT_FOUND,
  MIXPREC_COMM_ERROR_INIT,
  MIXPREC_COMM_ERROR_INVALID_ARGUMENT,
  MIXPREC_COMM_ERROR_TIMEOUT,
  MIXPREC_COMM_ERROR_PEER_FAILED,
  MIXPREC_COMM_ERROR_ABORTED,
  MIXPREC_COMM_ERROR_FAILED,
} MixprecCommError;

MIXPREC_AVAILABLE_IN_1_0
GQuark mixprec_comm_error_quark (void);

#define MIXPREC_TYPE_COMM (mixprec_comm_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecComm, mixprec_comm, MIXPREC, COMM, GObject)

#define MIXPREC_TYPE_COMM_REQUEST (mixprec_comm_request_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecCommRequest, mixprec_comm_request, MIXPREC, COMM_REQUEST, GObject)

MIXPREC_AVAILABLE_IN_1_0
MixprecComm        *mixprec_comm_new                   (MixprecBootstrap    *bootstrap,
                                                        const gchar         *backend,
                                                        const gchar         *device,
                                                        guint                timeout_ms,
                                                        GError             **error);

MIXPREC_AVAILABLE_IN_1_0
guint               mixprec_comm_get_rank              (MixprecComm         *self);
MIXPREC_AVAILABLE_IN_1_0
guint               mixprec_comm_get_world_size        (MixprecComm         *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar        *mixprec_comm_get_backend           (MixprecComm         *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar        *mixprec_comm_get_device            (MixprecComm         *self);
MIXPREC_AVAILABLE_IN_1_0
guint               mixprec_comm_get_timeout           (MixprecComm         *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_supports_dtype        (MixprecComm         *self,
                                                        MixprecDType         dtype);

MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_all_reduce            (MixprecComm         *self,
                                                        gconstpointer        send,
                                                        gpointer             recv,
                                                        gsize                count,
                                                        MixprecDType         dtype,
                                                        MixprecReduceOp      op,
                                                        MixprecCommFlags     flags,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_reduce_scatter        (MixprecComm         *self,
                                                        gconstpointer        send,
                                                        gpointer             recv,
                                                        gsize                count,
                                                        MixprecDType         dtype,
                                                        MixprecReduceOp      op,
                                                        MixprecCommFlags     flags,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_all_gather            (MixprecComm         *self,
                                                        gconstpointer        send,
                                                        gpointer             recv,
                                                        gsize                count,
                                                        MixprecDType         dtype,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_broadcast             (MixprecComm         *self,
                                                        gpointer             buf,
                                                        gsize                count,
                                                        MixprecDType         dtype,
                                                        guint                root,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_barrier               (MixprecComm         *self,
                                                        GError             **error);

MIXPREC_AVAILABLE_IN_1_0
MixprecCommRequest *mixprec_comm_all_reduce_start      (MixprecComm         *self,
                                                        gconstpointer        send,
                                                        gpointer             recv,
                                                        gsize                count,
                                                        MixprecDType         dtype,
                                                        MixprecReduceOp      op,
                                                        MixprecCommFlags     flags,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecCommRequest *mixprec_comm_reduce_scatter_start  (MixprecComm         *self,
                                                        gconstpointer        send,
                                                        gpointer             recv,
                                                        gsize                count,
                                                        MixprecDType         dtype,
                                                        MixprecReduceOp      op,
                                                        MixprecCommFlags     flags,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecCommRequest *mixprec_comm_all_gather_start      (MixprecComm         *self,
                                                        gconstpointer        send,
                                                        gpointer             recv,
                                                        gsize                count,
                                                        MixprecDType         dtype,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecCommRequest *mixprec_comm_broadcast_start       (MixprecComm         *self,
                                                        gpointer             buf,
                                                        gsize                count,
                                                        MixprecDType         dtype,
                                                        guint                root,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecCommRequest *mixprec_comm_barrier_start         (MixprecComm         *self,
                                                        GError             **error);

MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_request_test          (MixprecCommRequest  *request,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_request_wait          (MixprecCommRequest  *request,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean            mixprec_comm_request_is_done       (MixprecCommRequest  *request);
MIXPREC_AVAILABLE_IN_1_0
void                mixprec_comm_request_free          (MixprecCommRequest  *request);

MIXPREC_AVAILABLE_IN_1_0
GBytes             *mixprec_comm_all_reduce_bytes      (MixprecComm         *self,
                                                        GBytes              *send,
                                                        MixprecDType         dtype,
                                                        MixprecReduceOp      op,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
GBytes             *mixprec_comm_reduce_scatter_bytes  (MixprecComm         *self,
                                                        GBytes              *send,
                                                        MixprecDType         dtype,
                                                        MixprecReduceOp      op,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
GBytes             *mixprec_comm_all_gather_bytes      (MixprecComm         *self,
                                                        GBytes              *send,
                                                        MixprecDType         dtype,
                                                        GError             **error);
MIXPREC_AVAILABLE_IN_1_0
GBytes             *mixprec_comm_broadcast_bytes       (MixprecComm         *self,
                                                        GBytes              *data,
                                                        MixprecDType         dtype,
                                                        guint                root,
                                                        GError             **error);

MIXPREC_AVAILABLE_IN_1_0
void                mixprec_comm_abort                 (MixprecComm         *self);

G_END_DECLS
