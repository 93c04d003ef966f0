/*
 * tests/fuzz/fuzz_ckpt_json.c - the checkpoint sidecar PREFIX.json
 * (sl_checkpoint_read_state: cJSON parse, the format check and the raw
 * "state" span taken from the text), whose state must come back as one
 * JSON object; then the trainer's reading of that state for a resume
 * (sl_resume_info_read, io/resume.c's sl_resume_plan_make: step, batch, world,
 * steps_per_epoch checked for range and integrality before any
 * conversion, which the fuzz build's float-cast-overflow check watches).
 * Input: the sidecar file.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "common/json.h"
#include "train/io/io_int.h" /* sl_resume_info_read */
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
    sl_resume_info ri;
    if (sl_resume_info_read(prefix, &ri) == SL_OK) {
        /* what resume_plan goes on with: in range, a state to hand on */
        if (ri.step < 0 || ri.step > SL_JSON_INT_MAX || ri.world < 1 || ri.world > INT_MAX ||
            ri.batch < 0 || ri.batch > UINT_MAX || ri.steps_per_epoch < 0 || !ri.pipeline)
            abort();
        sl_resume_info_fini(&ri);
    } else if (ri.pipeline) {
        abort(); /* zeroed on error */
    }
    sl_clear_error();
    return 0;
}
