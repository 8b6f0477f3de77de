/* ucx-shm.h — comm-ucx's same-host path: when every rank runs in one
 * host's namespaces, all_reduce, reduce_scatter, all_gather, all_to_all
 * and barrier go through one shared-memory segment instead of UCX
 * messages (see ucx-shm.c).
 *
 * The segment's ranks meet at numbered barriers. A waiting rank spins
 * while the ranks it waits for are seen running on other CPUs, and sleeps
 * on a futex that the next arriving rank wakes when they are not. At most
 * two wake-ups per chunk, against several per message over UCX, and none
 * while every rank has a CPU, is what keeps a collective fast on a host
 * whose cores are busy. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mixprec-plugin-abi.h"

typedef struct UcxComm UcxComm;
typedef struct UcxOp UcxOp;
typedef struct UcxShm UcxShm;

/* After the identity exchange: when MIXPREC_UCX_SHM allows it and every
 * rank shares this host's boot, IPC, mount and network namespaces, rank 0
 * creates the segment and the others map it (two more bootstrap
 * exchanges); otherwise, or when any rank fails to map it, comm->shm
 * stays NULL and every collective goes over UCX. Fails only when the
 * bootstrap does, or on a bad MIXPREC_UCX_SHM* setting. */
int      ucx_shm_open          (UcxComm                  *comm,
                                const MixprecBootstrapV1 *bootstrap,
                                char                     *errbuf,
                                size_t                    errbuf_len);
void     ucx_shm_close         (UcxComm                  *comm);

/* Whether @op (fresh from ucx_op_new) runs through the segment; sets it
 * up to do so. The decision depends only on what every rank shares (the
 * kind, count, dtypes and world), so all ranks make the same one. */
int      ucx_shm_adopt         (UcxOp                    *op);

/* Moves the communicator's oldest unfinished shared-memory operation as
 * far as it goes without waiting; returns non-zero when it moved. */
int      ucx_shm_progress      (UcxComm                  *comm);

/* Whether that operation waits for other ranks at a barrier. */
int      ucx_shm_waiting       (UcxComm                  *comm);

/* Waits for the barrier it waits at: spins until @spin_until (a
 * ucx_now_ns() time) while the missing ranks run on other CPUs (yielding
 * to one on this CPU), then sleeps at most @timeout_ns. Returns at once
 * when the segment is broken or the communicator aborted. */
void     ucx_shm_wait          (UcxComm                  *comm,
                                int64_t                   spin_until,
                                int64_t                   timeout_ns);

/* The longest a waiting rank spins before it sleeps (MIXPREC_UCX_SHM_SPIN_US). */
int64_t  ucx_shm_spin_ns       (const UcxComm            *comm);

/* The lowest rank that has not arrived at the barrier @op waits at, and
 * how many have not; world_size when @op is not waiting. */
unsigned ucx_shm_missing_rank  (const UcxOp              *op,
                                unsigned                 *n_missing);

/* Tells the other ranks that this one gave up, so that their waits end
 * with an error instead of a timeout. */
void     ucx_shm_mark_broken   (UcxComm                  *comm);

/* Wakes this rank's sleeping wait (abort(), from any thread). */
void     ucx_shm_wake          (UcxComm                  *comm);
