/*
 * tests/fuzz/fuzz_ckpt_json.c - the checkpoint sidecar PREFIX.json
 * (sl_checkpoint_read_state: cJSON parse, the format check and the raw
 * "state" span taken from the text), whose state must come back as one
 * JSON object. Input: the sidecar file.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "train/train.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char prefix[512], path[560];
    fz_path("ckpt-000000001", prefix, sizeof prefix);
    snprintf(path, sizeof path, "%s.json", prefix);
    fz_write(path, data, size);
    char *state = NULL;
    if (sl_checkpoint_read_state(prefix, &state) == SL_OK) {
        /* The caller hands this to sl_pipeline_create_from_state and the
         * trainer's parser: it must be one JSON object. */
        cJSON *j = cJSON_ParseWithOpts(state, NULL, 1);
        if (!cJSON_IsObject(j))
            abort();
        cJSON_Delete(j);
    }
    free(state);
    sl_clear_error();
    return 0;
}
