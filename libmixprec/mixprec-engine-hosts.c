/* mixprec-engine-hosts.c — ZeRO-3's gathers over several hosts, in two
 * levels.
 *
 * A gather over the world sends each rank's slice (or, under qwZ, its
 * int8 codes and scales) to every other rank: W - R of the W - 1 copies
 * leave the host (R ranks a host). Over several hosts of R consecutive
 * ranks each, the gather runs in two levels instead, as topology-aware
 * collectives do: first each rank sends its slice to the rank of the same
 * place (local index j) on every other host, so that rank (h, j) holds
 * the slices of ranks (h', j) for every host h'; then, for each host h',
 * the ranks of a host swap the slices of h' they hold, and every rank has
 * all of them. A rank sends its slice across hosts N - 1 times (N hosts)
 * instead of W - R times; the total is the same W - 1 slices, and the
 * bytes move unchanged, so every gathered bit is the one-level gather's.
 *
 * Each level is an all_to_all_v (plugin ABI 1.7) over the gathered
 * buffer itself, the slices sitting at their ranks' places: a rank sends
 * one slice to each peer and receives each peer's at that peer's place,
 * so nothing is packed. The first level starts with the gather (a
 * prefetch overlaps it); the second runs when the gather is waited for,
 * in the order every rank waits. Host memory only: on a device the
 * communicator's own collectives know the topology. */
#include "config.h"

#include <string.h>

#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-comm-private.h"

guint
_mixprec_engine_host_ranks (MixprecEngine *self)
{
  guint r = 0;

  if (self->comm == NULL || self->world < 2 || !_mixprec_comm_has_all_to_all_v (self->comm))
    return 0;
  while (r < self->world && _mixprec_comm_get_host (self->comm, r) == 0)
    r++;
  if (r <= 1 || r >= self->world || self->world % r != 0)
    return 0;
  for (guint q = 0; q < self->world; q++)
    if (_mixprec_comm_get_host (self->comm, q) != q / r * r)
      return 0;
  return r;
}

gpointer
_mixprec_engine_exchange (MixprecEngine     *self,
                          _MixprecCommClass  cls,
                          gconstpointer      send,
                          const gsize       *send_at,
                          gpointer           recv,
                          const gsize       *recv_at,
                          const guint       *peers,
                          guint              n,
                          gsize              len,
                          gboolean           blocking,
                          GError           **error)
{
  gsize w = self->world;
  g_autofree gsize *runs = g_new0 (gsize, 4 * w);

  for (guint i = 0; i < n; i++)
    {
      runs[peers[i]] = len;
      runs[w + peers[i]] = send_at != NULL ? send_at[i] : 0;
      runs[2 * w + peers[i]] = len;
      runs[3 * w + peers[i]] = recv_at[i];
    }
  _mixprec_comm_count_next_as (self->comm, cls);
  if (blocking)
    return _mixprec_comm_all_to_all_v (self->comm, send, runs, runs + w, recv, runs + 2 * w, runs + 3 * w,
                                       error) ? recv : NULL;
  return _mixprec_comm_all_to_all_v_start (self->comm, send, runs, runs + w, recv, runs + 2 * w,
                                           runs + 3 * w, error);
}

/* One exchange over @buf, @chunk bytes a rank's place: this rank's place
 * @from goes to each of the @n @peers, and peer i's place @at[i] arrives
 * from it. */
static gpointer
swap_places (MixprecEngine *self,
             guint8        *buf,
             guint64        chunk,
             const guint   *peers,
             guint          n,
             guint          from,
             const guint   *at,
             gboolean       blocking,
             GError       **error)
{
  g_autofree gsize *recv_at = g_new (gsize, MAX (n, 1));

  for (guint i = 0; i < n; i++)
    recv_at[i] = (gsize) at[i] * chunk;
  return _mixprec_engine_exchange (self, _MIXPREC_COMM_WEIGHTS, buf + (gsize) from * chunk, NULL, buf, recv_at,
                                   peers, n, chunk, blocking, error);
}

MixprecCommRequest *
_mixprec_engine_gather2_start (MixprecEngine *self,
                               guint          per_host,
                               guint8        *buf,
                               guint64        chunk,
                               GError       **error)
{
  guint n = self->world / per_host, j = self->rank % per_host, k = 0;
  g_autofree guint *peers = g_new (guint, n);

  /* The rank of this place on every other host, which sends its slice
   * to its own place. */
  for (guint h = 0; h < n; h++)
    if (h * per_host + j != self->rank)
      peers[k++] = h * per_host + j;
  return swap_places (self, buf, chunk, peers, k, self->rank, peers, FALSE, error);
}

gboolean
_mixprec_engine_gather2_finish (MixprecEngine *self,
                                guint          per_host,
                                guint8        *buf,
                                guint64        chunk,
                                GError       **error)
{
  guint n = self->world / per_host, j = self->rank % per_host, first = self->rank / per_host * per_host;
  g_autofree guint *peers = g_new (guint, per_host);
  g_autofree guint *at = g_new (guint, per_host);

  /* Host h's slices: this rank holds the one of place j and sends it to
   * the other ranks of its host; rank (this host, j'') sends the one of
   * place j''. */
  for (guint h = 0; h < n; h++)
    {
      guint k = 0;

      for (guint jj = 0; jj < per_host; jj++)
        if (jj != j)
          {
            peers[k] = first + jj;
            at[k++] = h * per_host + jj;
          }
      if (swap_places (self, buf, chunk, peers, k, h * per_host + j, at, TRUE, error) == NULL)
        return FALSE;
    }
  return TRUE;
}
