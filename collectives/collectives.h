/*
 * collectives/collectives.h - one communicator interface for gradient
 * all-reduce and friends (DESIGN.md section 6), with three backends:
 *
 *   local  replicas as threads of one process: ring reduce-scatter then
 *          all-gather over shared memory, in segments, no global lock
 *          (collectives/local.c)
 *   mpi    processes and machines through OpenMPI (collectives/mpi.c); a
 *          process started by mpirun finds its rank and world there
 *   nccl   GPUs (collectives/nccl.c); the unique id travels over MPI when
 *          launched by mpirun, else over a TCP rendezvous at MASTER_ADDR /
 *          MASTER_PORT with RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets
 *          them; buffers are device pointers
 *
 * Semantics, as NCCL's: every rank calls the same collectives in the same
 * order with the same count and dtype; all-reduce and broadcast are in
 * place; the result of an all-reduce is bitwise identical on every rank
 * (each reduced element is computed once and copied).
 *
 * Failures are errors, not hangs: a collective whose peers do not arrive
 * within cfg.timeout_ms returns SL_ETIMEDOUT with a message naming the
 * backend, this rank, the peer waited for and the operation; a peer that
 * called sl_comm_abort makes the others' collectives return SL_ECANCELED
 * with its reason. After an error the communicator is broken (sticky): every
 * later call returns the same code and message.
 *
 * Threading: a communicator is used by one thread at a time (the rank's
 * thread); the local backend's comms of one group are used by different
 * threads, one each, concurrently. Asynchronous all-reduces run on a
 * per-communicator progress thread (or the NCCL stream) in the order they
 * were started; a blocking call made while some are in flight queues
 * behind them. sl_comm_abort may be called from any thread.
 *
 * Errors: sl_status codes with sl_errmsg(); nothing here exits. MPI is
 * initialized (MPI_THREAD_SERIALIZED or better) by the first sl_comm_mpi_create
 * when the program has not done it, and finalized when the last MPI
 * communicator is destroyed.
 */
#ifndef SL_COLLECTIVES_H
#define SL_COLLECTIVES_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sl_dtype (f32, bf16, f16): common/dtype.h */

typedef enum sl_redop {
    SL_RED_SUM = 0,
    SL_RED_AVG,     /* sum, then times 1/world (rounded once, in the dtype) */
} sl_redop;

typedef enum sl_comm_backend {
    SL_COMM_LOCAL = 0,
    SL_COMM_MPI,
    SL_COMM_NCCL,
} sl_comm_backend;

typedef struct sl_comm_config {
    size_t size;          /* sizeof(sl_comm_config), set by SL_COMM_CONFIG_INIT: the create
                           * functions refuse another (a caller built against other headers) */
    int timeout_ms;       /* a collective waits at most this long for its peers; 300000 */
    size_t segment_bytes; /* local ring: buffers are reduced in segments of at most this
                           * many bytes (cache-sized steps); 0 = 1 MiB x world */
    int device;           /* nccl: CUDA device; -1 = LOCAL_RANK (or 0) */
    void *stream;         /* nccl: cudaStream_t the collectives run on; NULL = own stream */
} sl_comm_config;

#define SL_COMM_CONFIG_INIT                                                                    \
    {.size = sizeof(sl_comm_config), .timeout_ms = 300000, .segment_bytes = 0, .device = -1,   \
     .stream = NULL}

typedef struct sl_comm sl_comm;

const char *sl_comm_backend_name(sl_comm_backend b);          /* "local", "mpi", "nccl" */
int sl_comm_backend_parse(const char *name, sl_comm_backend *out); /* SL_EINVAL if unknown */
/* sl_dtype_size, sl_dtype_name, sl_dtype_parse: common/dtype.h */

/* Which backends this build has (local always; mpi and nccl when built). */
int sl_comm_backend_available(sl_comm_backend b);

/* ------------------------------------------------------------------ local */

/* A group of world replicas in this process. Create the group once, then
 * each replica's thread opens its comm with sl_comm_local_open(g, rank).
 * The group must outlive its comms; destroy it after all are destroyed. */
typedef struct sl_comm_group sl_comm_group;
int sl_comm_local_group_create(int world, const sl_comm_config *cfg, sl_comm_group **out);
/* The comm of rank (0 <= rank < world; each rank once). */
int sl_comm_local_open(sl_comm_group *g, int rank, sl_comm **out);
void sl_comm_local_group_destroy(sl_comm_group *g); /* NULL is a no-op */

/* -------------------------------------------------------------------- mpi */

/* Predicate: this process was started by mpirun/mpiexec (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE or PMIX_RANK in the environment). */
int sl_comm_mpi_launched(void);
/* A communicator over MPI_COMM_WORLD (duplicated). SL_ENOTSUP in a build
 * without MPI; SL_EMPI when MPI cannot start. local_rank comes from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). */
int sl_comm_mpi_create(const sl_comm_config *cfg, sl_comm **out);

/* ------------------------------------------------------------------- nccl */

/* A communicator over the GPUs of the job: rank/world from MPI when
 * sl_comm_mpi_launched(), else RANK/WORLD_SIZE/LOCAL_RANK (+ MASTER_ADDR/
 * MASTER_PORT when WORLD_SIZE > 1), else rank 0 of 1. SL_ENOTSUP in a build
 * without NCCL; SL_ECUDA / SL_ENCCL with the library's message. */
int sl_comm_nccl_create(const sl_comm_config *cfg, sl_comm **out);

/* TCP rendezvous (the NCCL bootstrap without MPI, usable on its own): rank
 * 0 listens on addr:port and sends len bytes of blob to each of the world-1
 * others, which connect (retrying until timeout_ms) and receive them into
 * blob. SL_ETIMEDOUT (listing the ranks that never came) when the
 * deadline passes, SL_EINVAL when a peer disagrees on world or len, SL_EIO
 * naming the address for other failures. */
int sl_rendezvous_tcp(const char *addr, int port, int rank, int world, void *blob, size_t len,
                      int timeout_ms);

/* -------------------------------------------------------------- every one */

int sl_comm_rank(const sl_comm *c);
int sl_comm_world(const sl_comm *c);
int sl_comm_local_rank(const sl_comm *c);  /* rank among the ranks of this machine */
int sl_comm_local_world(const sl_comm *c); /* ranks on this machine */
sl_comm_backend sl_comm_backend_of(const sl_comm *c);

/* In place: buf (count elements of dtype) becomes the sum (or average) of
 * every rank's buf. */
int sl_comm_allreduce(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op);
/* In place: every rank's buf becomes root's. */
int sl_comm_broadcast(sl_comm *c, void *buf, size_t count, sl_dtype t, int root);
/* recv (world * count elements) = every rank's send (count elements), in
 * rank order. send and recv must not overlap except send == recv + rank*count. */
int sl_comm_allgather(sl_comm *c, const void *send, void *recv, size_t count, sl_dtype t);
int sl_comm_barrier(sl_comm *c);
/* In place: buf (count int64 values in host memory) becomes the exact sum
 * of every rank's buf, the same on every rank: for counts (records,
 * images) that an f32 all-reduce would round above 2^24. Built on
 * sl_comm_allgather (comm.c says why): allocates world x count x 16 bytes.
 * local and mpi; nccl is SL_ENOTSUP (its buffers are device memory). A sum
 * outside int64 is SL_EINVAL on every rank, buf unchanged, the comm still
 * usable. */
int sl_comm_allreduce_i64(sl_comm *c, int64_t *buf, size_t count);

/* Point to point (mpi only; others SL_ENOTSUP), for the parameter server:
 * send count elements to peer with tag; receive from peer (-1: any) with
 * tag (-1: any) into buf of capacity count; *from, *tag_out and *got
 * (elements received) may be NULL. Both honour the timeout (timeout_ms < 0
 * in the call: wait forever). */
int sl_comm_send(sl_comm *c, const void *buf, size_t count, sl_dtype t, int peer, int tag);
int sl_comm_recv(sl_comm *c, void *buf, size_t count, sl_dtype t, int peer, int tag,
                 int timeout_ms, int *from, int *tag_out, size_t *got);

/* Asynchronous all-reduce, for overlapping gradient buckets with backward:
 * start returns at once with a request; buf must not be touched until
 * sl_comm_wait(req) returns (which frees req, whatever it returns). Requests
 * complete in start order. */
typedef struct sl_comm_req sl_comm_req;
int sl_comm_allreduce_start(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op,
                            sl_comm_req **req);
int sl_comm_wait(sl_comm *c, sl_comm_req *req);

/* Stream-ordered collectives (nccl only), for a training step captured into
 * a CUDA graph: the host neither waits nor records an event, so the call
 * can sit inside a stream capture.
 *   sl_comm_stream_ordered    1 when c's collectives run on a CUDA stream
 *                             (nccl: cfg.stream, or its own), else 0
 *   sl_comm_allreduce_enqueue in place, like sl_comm_allreduce, but queued
 *                             on that stream behind the work already there
 *                             and not waited for: buf is reduced when the
 *                             stream reaches it (a kernel queued after it on
 *                             the stream sees the result). Others: SL_ENOTSUP.
 *   sl_comm_fence             a request that completes once everything
 *                             queued on the stream so far has run (a graph
 *                             launch with its collectives included); waited
 *                             with sl_comm_wait, which holds it to
 *                             cfg.timeout_ms and aborts the communicator on
 *                             a dead peer as for any request. Others: a
 *                             request complete at once.
 * Errors of an enqueued all-reduce surface at the next fence or blocking
 * call. Same ordering rule as every collective: all ranks enqueue the same
 * all-reduces in the same order. */
int sl_comm_stream_ordered(const sl_comm *c);
int sl_comm_allreduce_enqueue(sl_comm *c, void *buf, size_t count, sl_dtype t, sl_redop op);
int sl_comm_fence(sl_comm *c, sl_comm_req **req);

/* Break the communicator on purpose (a replica failed): peers blocked in a
 * collective with this rank return SL_ECANCELED naming this rank and why
 * (local: at once; mpi: within about 300 ms, through a second communicator
 * kept for aborts; nccl: ncclCommAbort). After a timeout or an abort an MPI
 * comm's destroy does not call MPI_Finalize (it would hang on the dead
 * peer): the process should exit. Any thread. */
void sl_comm_abort(sl_comm *c, const char *why);

/* Wait for in-flight requests, stop the progress thread, free. NULL is a no-op. */
void sl_comm_destroy(sl_comm *c);

#ifdef __cplusplus
}
#endif

#endif /* SL_COLLECTIVES_H */
