/* selftest.c - the emulator's misuse checks, one per argv[1]:
 *   host_deref  free_host  double_free  kind  range  stream_after_destroy
 *   event_never_recorded  lazy_pinned  ok
 * Each prints what the emulator reports (run.sh selftest runs them all). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

int main(int argc, char **argv)
{
    const char *w = argc > 1 ? argv[1] : "ok";
    float *d = NULL, h[4] = {1, 2, 3, 4};
    cudaError_t e = cudaMalloc((void **)&d, sizeof h);
    printf("cudaMalloc: %s\n", cudaGetErrorName(e));
    if (!strcmp(w, "host_deref")) {
        printf("host reads device memory...\n");
        fflush(stdout);
        printf("%g\n", d[0]); /* faults with a report */
    } else if (!strcmp(w, "free_host")) {
        printf("cudaFree(host): %s\n", cudaGetErrorName(cudaFree(h)));
    } else if (!strcmp(w, "double_free")) {
        cudaFree(d);
        printf("second cudaFree: %s\n", cudaGetErrorName(cudaFree(d)));
    } else if (!strcmp(w, "kind")) {
        printf("H2D with swapped pointers: %s\n",
               cudaGetErrorName(cudaMemcpy(h, d, sizeof h, cudaMemcpyHostToDevice)));
    } else if (!strcmp(w, "range")) {
        printf("copy of 5 floats into 4: %s\n",
               cudaGetErrorName(cudaMemcpy(d, h, 5 * sizeof(float), cudaMemcpyHostToDevice)));
    } else if (!strcmp(w, "stream_after_destroy")) {
        cudaStream_t s;
        cudaStreamCreate(&s);
        cudaStreamDestroy(s);
        printf("sync of a destroyed stream: %s\n", cudaGetErrorName(cudaStreamSynchronize(s)));
    } else if (!strcmp(w, "event_never_recorded")) {
        cudaEvent_t ev;
        cudaStream_t s;
        cudaEventCreate(&ev);
        cudaStreamCreate(&s);
        printf("wait on a never-recorded event: %s\n", cudaGetErrorName(cudaStreamWaitEvent(s, ev, 0)));
    } else if (!strcmp(w, "lazy_pinned")) {
        /* D2H into pinned memory, read before the stream sync: in lazy mode
         * the host sees the old (poisoned) bytes */
        float *p;
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        cudaHostAlloc((void **)&p, sizeof h, 0);
        cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
        cudaMemcpyAsync(p, d, sizeof h, cudaMemcpyDeviceToHost, s);
        printf("pinned before sync: %g (lazy: NaN poison), ", p[0]);
        cudaStreamSynchronize(s);
        printf("after sync: %g\n", p[0]);
    } else {
        cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
        float back[4];
        cudaMemcpy(back, d, sizeof h, cudaMemcpyDeviceToHost);
        printf("round trip: %g %g %g %g\n", back[0], back[1], back[2], back[3]);
    }
    return 0;
}
