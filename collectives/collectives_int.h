/*
 * collectives/collectives_int.h - private to collectives/: the backend
 * table behind sl_comm, the common handle, and the element-wise kernels
 * (f16/bf16 conversion, reduce, scale) that the backends share.
 *
 *   comm.c     the public entry points: argument checks, sticky errors, the
 *              asynchronous requests and their progress thread, then a call
 *              through c->vt
 *   dtype.c    sl_dtype_*, conversions, sl_reduce_add, sl_scale
 *   local.c    the shared-memory ring (threads)
 *   mpi.c      OpenMPI (built with SLUICE_WITH_MPI; else mpi_none.c)
 *   nccl.c     NCCL (built with SLUICE_WITH_NCCL; else nccl_none.c)
 *   rendezvous.c  the TCP bootstrap
 *
 * A backend fills an sl_comm with sl_comm_init_common and its vt. Its vt
 * functions are called by comm.c with valid arguments (count > 0 for the
 * data ops, root and peer in range), one at a time per comm (from the rank's
 * thread or from the progress thread, never both at once), and return
 * SL_OK or sl_fail(code, "...") with a message that names the backend,
 * the rank and the peer. comm.c makes an error sticky.
 */
#ifndef SL_COLLECTIVES_INT_H
#define SL_COLLECTIVES_INT_H

#include <pthread.h>

#include "collectives/collectives.h"

typedef struct sl_comm_vt {
    const char *name;
    int (*allreduce)(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op);
    int (*broadcast)(sl_comm *c, void *buf, size_t count, sl_dtype t, int root);
    int (*allgather)(sl_comm *c, const void *send, void *recv, size_t count, sl_dtype t);
    int (*barrier)(sl_comm *c);
    /* NULL: SL_ENOTSUP */
    int (*send)(sl_comm *c, const void *buf, size_t count, sl_dtype t, int peer, int tag);
    int (*recv)(sl_comm *c, void *buf, size_t count, sl_dtype t, int peer, int tag,
                int timeout_ms, int *from, int *tag_out, size_t *got);
    /* Native asynchronous all-reduce (nccl: on its stream). NULL: comm.c
     * runs the blocking allreduce on its progress thread. start stores an
     * opaque token; wait completes it (and frees what start allocated). */
    int (*allreduce_start)(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op,
                           void **token);
    int (*allreduce_wait)(sl_comm *c, void *token);
    /* Stream-ordered (collectives.h): enqueue queues an all-reduce on the
     * backend's stream and returns without a host wait or an event (it may
     * run inside a CUDA stream capture); fence stores a token, waited with
     * allreduce_wait, for everything queued on that stream so far. NULL:
     * not a stream-ordered backend. */
    int (*allreduce_enqueue)(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op);
    int (*fence)(sl_comm *c, void **token);
    /* Wake peers blocked with this rank (any thread); may be NULL. */
    void (*abort_peers)(sl_comm *c, const char *why);
    /* Free the backend's state (c itself is freed by comm.c). */
    void (*destroy)(sl_comm *c);
} sl_comm_vt;

/* One queued asynchronous all-reduce (comm.c). */
struct sl_comm_req {
    void *buf;
    size_t count;
    sl_dtype t;
    sl_redop op;
    void *token;               /* native async */
    int done, rc;
    char msg[SL_ERRMSG_MAX];
    struct sl_comm_req *next;
};

struct sl_comm {
    const sl_comm_vt *vt;
    sl_comm_backend backend;
    int rank, world, local_rank, local_world;
    sl_comm_config cfg;
    void *impl;                /* the backend's state */

    /* sticky error (comm.c) */
    int broken;
    char broken_msg[SL_ERRMSG_MAX];

    /* progress thread (comm.c): FIFO of requests, lazily started */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_started, stopping;
    sl_comm_req *head, *tail;  /* queued, not yet run */
    int inflight;              /* started and not yet waited */
};

/* Allocate an sl_comm with vt, backend, rank and world set, cfg copied
 * (defaults resolved), local_rank = rank, local_world = world. NULL on
 * allocation failure (message set). */
sl_comm *sl_comm_alloc(const sl_comm_vt *vt, sl_comm_backend b, int rank, int world,
                       const sl_comm_config *cfg);
/* Free an sl_comm from sl_comm_alloc whose backend never finished setting up. */
void sl_comm_free(sl_comm *c);

/* ------------------------------------------------------------ dtype.c */

float sl_f16_to_f32(uint16_t h);
uint16_t sl_f32_to_f16(float f);   /* round to nearest even; overflow to inf; NaN kept */
float sl_bf16_to_f32(uint16_t h);
uint16_t sl_f32_to_bf16(float f);  /* round to nearest even; NaN kept quiet */
/* dst[i] += src[i] for n elements of t (f16/bf16: in f32, rounded once). */
void sl_reduce_add(sl_dtype t, void *dst, const void *src, size_t n);
/* dst[i] = a[i] + b[i] (dst may alias a or b). */
void sl_reduce_add3(sl_dtype t, void *dst, const void *a, const void *b, size_t n);
/* buf[i] *= s (f16/bf16: in f32, rounded once). */
void sl_scale(sl_dtype t, void *buf, size_t n, float s);

#endif /* SL_COLLECTIVES_INT_H */
