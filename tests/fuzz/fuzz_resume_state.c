/*
 * tests/fuzz/fuzz_resume_state.c - the pipeline's resume state
 * (sl_pipeline_create_from_state: the JSON, the config hash and its parts,
 * then the fast-forward to the saved batch and sample: the shuffle machine
 * replayed, the buffered records read back) over a 10-record dataset made
 * at start (util.c's fz_state_dataset; the seeds are states this very
 * configuration saved). A state that is accepted must give batches until
 * the run ends. Input: the state text.
 */
#include <stdlib.h>

#include "pipeline/pipeline.h"
#include "util.h"

static char path[512];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0])
        fz_state_dataset(fz_dir(), path, sizeof path);
    sl_pipeline_config cfg;
    fz_state_config(&cfg, path);
    sl_pipeline *p = NULL;
    if (sl_pipeline_create_from_state(&cfg, (const char *)data, size, &p) == SL_OK) {
        sl_batch *b;
        int rc, nb = 0;
        while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
            if (b->n < 1 || b->n > cfg.batch)
                abort();
            sl_pipeline_release(p, b);
            nb++;
        }
        if (rc != SL_EOF || nb > 2 * FZ_STATE_RECORDS)
            abort(); /* a resumed run ends cleanly, with at most what is left */
        sl_pipeline_destroy(p);
    }
    sl_clear_error();
    return 0;
}
