/*
 * tests/fuzz/fuzz_events.c - the TensorBoard event reader (sl_events_read_all:
 * TFRecord framing, the Event / Summary / Value protos, a record still
 * being written at the end). Input: an events.out.tfevents file.
 */
#include <stdlib.h>
#include <string.h>

#include "train/train.h"
#include "util.h"

static int on_scalar(void *ctx, int64_t step, double wall_time, const char *tag, float value)
{
    size_t *n = ctx;
    (void)step;
    (void)wall_time;
    (void)value;
    if (!tag)
        abort();
    *n += strlen(tag); /* NUL-terminated */
    return 0;
}

static int on_text(void *ctx, int64_t step, double wall_time, const char *tag, const char *text)
{
    size_t *n = ctx;
    (void)step;
    (void)wall_time;
    if (!tag || !text)
        abort();
    *n += strlen(tag) + strlen(text); /* NUL-terminated */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fz_path("events.out.tfevents.0.fuzz", path, sizeof path);
    fz_write(path, data, size);
    size_t n = 0;
    (void)sl_events_read_all(path, on_scalar, on_text, &n);
    sl_clear_error();
    return 0;
}
