/* mixprec-comm-private.h — what the library shares about communicators;
 * never installed. */
#pragma once

#include "mixprec.h"
#include "mixprec-plugin.h"

G_BEGIN_DECLS

/* The communicator "local" (mixprec-comm-local.c), registered by the
 * plugin "builtin". */
const MixprecCommV2 *_mixprec_comm_local_get_vtable (void);

/* mixprec_comm_new() whose collectives are queued on @device_stream (a
 * device's stream, e.g. the engine's cudaStream_t; NULL: the backend's
 * own). */
MixprecComm         *_mixprec_comm_new_on_stream    (MixprecBootstrap *bootstrap,
                                                     const gchar      *backend,
                                                     const gchar      *device,
                                                     guint             timeout_ms,
                                                     gpointer          device_stream,
                                                     GError          **error);

/* The all-to-all of communicator revision 2 (MixprecCommV2): @send holds
 * world_size runs of @bytes bytes, run r for rank r; @recv receives at
 * r * @bytes rank r's run for this rank. Bytes move unchanged; the
 * buffers do not overlap. has_all_to_all: whether the backend has one,
 * else FALSE with an error naming the backend, its plugin and revision. */
gboolean             _mixprec_comm_has_all_to_all   (MixprecComm  *self,
                                                     GError      **error);
gboolean             _mixprec_comm_all_to_all       (MixprecComm   *self,
                                                     gconstpointer  send,
                                                     gpointer       recv,
                                                     gsize          bytes,
                                                     GError       **error);
MixprecCommRequest  *_mixprec_comm_all_to_all_start (MixprecComm   *self,
                                                     gconstpointer  send,
                                                     gpointer       recv,
                                                     gsize          bytes,
                                                     GError       **error);

/* The all_to_all_v of plugin ABI 1.7: @send_bytes[r] bytes at @send +
 * @send_offsets[r] go to rank r, @recv_bytes[r] from rank r land at @recv
 * + @recv_offsets[r] (world_size entries each, read during the call);
 * empty runs move nothing, so a collective over a group of ranks moves
 * bytes only inside it. Sizes agree pairwise across ranks; receive runs
 * overlap nothing. has_all_to_all_v: whether the backend has it. Bytes
 * are counted per peer, where that peer is. */
gboolean             _mixprec_comm_has_all_to_all_v   (MixprecComm   *self);
gboolean             _mixprec_comm_all_to_all_v       (MixprecComm   *self,
                                                       gconstpointer  send,
                                                       const gsize   *send_bytes,
                                                       const gsize   *send_offsets,
                                                       gpointer       recv,
                                                       const gsize   *recv_bytes,
                                                       const gsize   *recv_offsets,
                                                       GError       **error);
MixprecCommRequest  *_mixprec_comm_all_to_all_v_start (MixprecComm   *self,
                                                       gconstpointer  send,
                                                       const gsize   *send_bytes,
                                                       const gsize   *send_offsets,
                                                       gpointer       recv,
                                                       const gsize   *recv_bytes,
                                                       const gsize   *recv_offsets,
                                                       GError       **error);

/* What a communicator counts of the bytes this rank sends, by class.
 * Bytes sent: the payload this rank hands to other ranks when each
 * collective moves data directly between ranks (the bandwidth-optimal
 * count, whatever algorithm the backend runs): all_gather and
 * reduce_scatter (W - 1) x count x element size, all_to_all (W - 1) x the
 * bytes per rank, all_reduce 2 (W - 1) / W x the buffer (a reduce-scatter
 * then an all-gather), broadcast (W - 1) x the buffer on the root and
 * nothing elsewhere, barrier nothing; each peer's share counted as
 * intra-host ([0]) or inter-host ([1]) by the hosts the bootstrap learnt.
 * A collective counts under the class set by count_next_as() just before
 * it, else by kind: reduce_scatter and all_to_all GRADIENTS, all_reduce
 * SCALARS, the rest OTHER. The counts only grow. */
typedef enum {
  _MIXPREC_COMM_WEIGHTS,       /* all-gathers of working weights */
  _MIXPREC_COMM_GRADIENTS,     /* reduce-scatters / all-to-alls of gradients */
  _MIXPREC_COMM_SCALARS,       /* norms, amaxes, flags, statistics */
  _MIXPREC_COMM_OTHER,
  _MIXPREC_COMM_N_CLASSES
} _MixprecCommClass;

void                 _mixprec_comm_count_next_as    (MixprecComm        *self,
                                                     _MixprecCommClass   cls);
void                 _mixprec_comm_get_sent         (MixprecComm        *self,
                                                     guint64             sent[_MIXPREC_COMM_N_CLASSES][2]);
/* Rank @rank's host, as the lowest rank on it (every rank learns the
 * same from the rendezvous; 0 in a world of one). */
guint                _mixprec_comm_get_host         (MixprecComm        *self,
                                                     guint               rank);
/* Other ranks on this rank's host. */
guint                _mixprec_comm_get_local_peers  (MixprecComm        *self);

/* The feature a communicator runs on (transfer none). */
MixprecFeature      *_mixprec_comm_get_feature      (MixprecComm *self);

/* Between the communicator and its requests (mixprec-comm-request.c):
 * the plugin's test() and wait() under the communicator's lock, and a
 * plugin status turned into a MIXPREC_COMM_ERROR naming the operation. */
int                  _mixprec_comm_plugin_test      (MixprecComm *self,
                                                     void        *handle,
                                                     int         *done,
                                                     char        *errbuf,
                                                     size_t       errbuf_len);
int                  _mixprec_comm_plugin_wait      (MixprecComm *self,
                                                     void        *handle,
                                                     char        *errbuf,
                                                     size_t       errbuf_len);
gboolean             _mixprec_comm_check_status     (MixprecComm *self,
                                                     int          status,
                                                     const char  *errbuf,
                                                     const gchar *what,
                                                     GError     **error);
/* Takes @what. */
MixprecCommRequest  *_mixprec_comm_request_new      (MixprecComm *comm,
                                                     void        *handle,
                                                     gchar       *what);

G_END_DECLS
