/*
 * common/status.h - status codes and error messages shared by every module.
 *
 * Threading: sl_errmsg() is thread-local; sl_fail() sets the calling thread's
 * message only. Handles that run worker threads keep a sticky copy of the
 * first worker error and hand it back from their next call (see each module).
 *
 * Convention (STYLE.md): action functions return sl_status; SL_OK == 0.
 * Messages read "function: object: what: detail", e.g.
 *   "sl_tfrecord_reader_next: train-00017-of-00064.tfrecord: record 4411 @ 9123456: data CRC mismatch"
 */
#ifndef SL_STATUS_H
#define SL_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_status {
    SL_OK = 0,
    SL_EOF,        /* end of a stream; not an error for sequential readers */
    SL_EINVAL,     /* bad argument or configuration */
    SL_ENOMEM,     /* allocation failed */
    SL_EIO,        /* operating-system I/O error (errno text in the message) */
    SL_ECORRUPT,   /* data on disk breaks its format (names file, record, offset) */
    SL_ENOENT,     /* file, feature or key not found */
    SL_EEXIST,     /* target exists and would be overwritten */
    SL_EIMAGE,     /* image cannot be decoded or encoded */
    SL_ECUDA,      /* CUDA runtime / cuDNN / cuBLAS error */
    SL_ENCCL,      /* NCCL error */
    SL_EMPI,       /* MPI error */
    SL_ENOTSUP,    /* not supported by this build or backend */
    SL_ECANCELED,  /* stopped on request (or a peer aborted a collective) */
    SL_ETIMEDOUT,  /* a peer did not arrive within the timeout */
    SL_EPERM,      /* refused: credentials or permissions (HTTP 401/403) */
    SL_STATUS_COUNT
} sl_status;

/* Short fixed description of a code ("data corrupt"); never NULL. */
const char *sl_strerror(int code);

/* The calling thread's last message set by sl_fail(); "" when none.
 * Valid until the next sl_fail() on this thread. */
const char *sl_errmsg(void);

/* Set the calling thread's message (printf format) and return code.
 * The arguments may include sl_errmsg() itself (it is copied first), so a
 * caller can wrap a callee's message with more context:
 *     return sl_fail(rc, "%s: record %llu: %s", path, n, sl_errmsg());      */
int sl_fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clear the calling thread's message. */
void sl_clear_error(void);

/* The versioned-config check (NCCL's ncclConfig_t pattern): a config
 * struct that crosses the library boundary starts with `size_t size`, set
 * to sizeof the struct by its _INIT macro or init function. SL_OK when
 * size == want; else SL_EINVAL with "fn: config of SIZE bytes, this
 * library's is WANT: rebuild against this sluice's headers" (a caller
 * built against other headers, or a config not started from its _INIT). */
int sl_check_config_size(const char *fn, size_t size, size_t want);

#define SL_ERRMSG_MAX 1024

#ifdef __cplusplus
}
#endif
#endif /* SL_STATUS_H */
