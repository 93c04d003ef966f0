/* common/status.c - sl_strerror, thread-local messages (see status.h). */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char tl_msg[SL_ERRMSG_MAX];

static const char *const names[SL_STATUS_COUNT] = {
    [SL_OK] = "success",
    [SL_EOF] = "end of stream",
    [SL_EINVAL] = "invalid argument",
    [SL_ENOMEM] = "out of memory",
    [SL_EIO] = "I/O error",
    [SL_ECORRUPT] = "data corrupt",
    [SL_ENOENT] = "not found",
    [SL_EEXIST] = "already exists",
    [SL_EIMAGE] = "bad image",
    [SL_ECUDA] = "CUDA error",
    [SL_ENCCL] = "NCCL error",
    [SL_EMPI] = "MPI error",
    [SL_ENOTSUP] = "not supported",
    [SL_ECANCELED] = "canceled",
    [SL_ETIMEDOUT] = "timed out",
    [SL_EPERM] = "permission denied",
};

const char *sl_strerror(int code)
{
    if (code < 0 || code >= SL_STATUS_COUNT || !names[code])
        return "unknown status";
    return names[code];
}

const char *sl_errmsg(void) { return tl_msg; }

void sl_clear_error(void) { tl_msg[0] = '\0'; }

int sl_check_config_size(const char *fn, size_t size, size_t want)
{
    if (size == want)
        return SL_OK;
    return sl_fail(SL_EINVAL, "%s: config of %zu bytes, this library's is %zu: rebuild against "
                   "this sluice's headers", fn, size, want);
}

int sl_fail(int code, const char *fmt, ...)
{
    char tmp[SL_ERRMSG_MAX];
    va_list ap;

    /* Format into a scratch buffer first: the arguments may point at tl_msg. */
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(tl_msg, tmp, sizeof tmp);
    return code;
}
