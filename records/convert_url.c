/*
 * records/convert_url.c - one listed URL's bytes for the converter's
 * workers (sl_convert_read_url, records_int.h): `sluice convert --from
 * list` lines whose path is http://, https:// or s3://, read through the
 * byte source (records/bytesrc.h: retries with backoff, SigV4 for s3://).
 *
 * What is a skip: the object is not there (404/410) or refused (401/403),
 * or larger than an image may be. Those are the input's own faults, named
 * with their status in the skip list. A 403 that says the request's own
 * credentials are wrong (S3's SignatureDoesNotMatch, InvalidAccessKeyId,
 * ExpiredToken, InvalidToken) is not: every input would be refused alike,
 * so it stops the run naming the keys to check. Anything else that is still failing
 * after the byte source's retries (timeouts, 5xx, resets) stops the run
 * with the URL and the status: that is the network's fault, and a task
 * that fails is retried whole by its engine, while a skip would be final.
 *
 * Threading: reentrant (each worker thread passes its own buffer).
 */
#include <stdlib.h>
#include <string.h>

#include "bytesrc.h"
#include "records_int.h"

/* "sl_bytes_get: URL: GET: HTTP 404: not found" -> "HTTP 404: not found". */
static const char *status_part(const char *msg)
{
    const char *p = strstr(msg, ": GET: ");
    return p ? p + 7 : msg;
}

int sl_convert_read_url(const char *url, uint64_t max, uint8_t **buf, size_t *cap, size_t *len)
{
    uint8_t *b = NULL;
    size_t n = 0;
    static const char *const keys_wrong[] = {"(SignatureDoesNotMatch)", "(InvalidAccessKeyId)",
                                             "(ExpiredToken)", "(InvalidToken)"};
    int rc = sl_bytes_get(url, &b, &n);
    for (size_t i = 0; rc == SL_EPERM && i < sizeof keys_wrong / sizeof *keys_wrong; i++)
        if (strstr(sl_errmsg(), keys_wrong[i]))
            return rc; /* the message says what to check */
    if (rc == SL_ENOENT || rc == SL_EPERM)
        return sl_fail(SL_EIMAGE, "%s", status_part(sl_errmsg()));
    if (rc)
        return rc;
    if ((uint64_t)n > max) {
        free(b);
        return sl_fail(SL_EIMAGE, "%zu bytes: too large for an image", n);
    }
    free(*buf);
    *buf = b;
    *cap = n + 1; /* sl_bytes_get's buffer holds a NUL past the bytes */
    *len = n;
    return SL_OK;
}
