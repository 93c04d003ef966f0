/*
 * pipeline/image/nvjpeg_load.c - libnvjpeg loaded at run time (nvjpeg_api.h says
 * why it is not linked). Compiled in every build: it needs only dlfcn.h;
 * a build without CUDA never calls it.
 *
 * Threading: sl_nvjpeg_load/unload on one thread per table; dlopen and
 * dlerror are thread-safe in glibc (dlerror's text is per thread).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "pipeline/image/nvjpeg_api.h"

const char *sl_nvjpeg_status_name(nvjpegStatus_t s)
{
    static const char *const names[] = {
        "NVJPEG_STATUS_SUCCESS", "NVJPEG_STATUS_NOT_INITIALIZED",
        "NVJPEG_STATUS_INVALID_PARAMETER", "NVJPEG_STATUS_BAD_JPEG",
        "NVJPEG_STATUS_JPEG_NOT_SUPPORTED", "NVJPEG_STATUS_ALLOCATOR_FAILURE",
        "NVJPEG_STATUS_EXECUTION_FAILED", "NVJPEG_STATUS_ARCH_MISMATCH",
        "NVJPEG_STATUS_INTERNAL_ERROR", "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
        "NVJPEG_STATUS_INCOMPLETE_BITSTREAM",
    };
    unsigned i = (unsigned)s;
    return i < sizeof names / sizeof names[0] ? names[i] : "NVJPEG_STATUS_(unknown)";
}

void sl_nvjpeg_unload(sl_nvjpeg_lib *lib)
{
    if (lib && lib->dl)
        dlclose(lib->dl);
    if (lib)
        memset(lib, 0, sizeof *lib);
}

/* Resolve one symbol into a function pointer (void * to function pointer
 * through memcpy: ISO C has no cast between them; POSIX guarantees they
 * have the same representation). */
static int sym(sl_nvjpeg_lib *lib, const char *name, void *fnptr, size_t size)
{
    void *p = dlsym(lib->dl, name);
    if (!p)
        return sl_fail(SL_ENOTSUP, "%s: no symbol %s (not an nvJPEG library?)", lib->path, name);
    memcpy(fnptr, &p, size);
    return SL_OK;
}

#define SYM(field) sym(lib, "nvjpeg" #field, &lib->field, sizeof lib->field)

int sl_nvjpeg_load(sl_nvjpeg_lib *lib)
{
    /* the loader's search path first (LD_LIBRARY_PATH, the binary's RUNPATH, which CMake sets
     * to the toolkit's lib directory, ldconfig), then the toolkit's usual place */
    static const char *const names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so",
                                        "/usr/local/cuda/lib64/libnvjpeg.so.13",
                                        "/usr/local/cuda/lib64/libnvjpeg.so.12"};
    memset(lib, 0, sizeof *lib);
    const char *env = getenv("SLUICE_NVJPEG");
    char why[1024] = "";
    size_t used = 0;
    for (size_t i = 0; i < (env && *env ? 1 : sizeof names / sizeof names[0]); i++) {
        const char *name = env && *env ? env : names[i];
        lib->dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (lib->dl) {
            snprintf(lib->path, sizeof lib->path, "%s", name);
            break;
        }
        const char *e = dlerror();
        int n = snprintf(why + used, sizeof why - used, "%s%s", used ? "; " : "",
                         e ? e : name);
        if (n > 0)
            used = used + (size_t)n < sizeof why ? used + (size_t)n : sizeof why - 1;
    }
    if (!lib->dl)
        return sl_fail(SL_ENOTSUP, "libnvjpeg not found: %s%s", why,
                       env && *env ? " (SLUICE_NVJPEG)" : "");
    int rc;
    if ((rc = SYM(GetProperty)) || (rc = SYM(CreateEx)) || (rc = SYM(Destroy)) ||
        (rc = SYM(JpegStateCreate)) || (rc = SYM(JpegStateDestroy)) ||
        (rc = SYM(GetImageInfo)) || (rc = SYM(DecodeBatchedInitialize)) ||
        (rc = SYM(DecodeBatched)) || (rc = SYM(JpegStreamCreate)) ||
        (rc = SYM(JpegStreamDestroy)) || (rc = SYM(JpegStreamParse)) ||
        (rc = SYM(DecodeBatchedSupported))) {
        sl_nvjpeg_unload(lib);
        return rc;
    }
    return SL_OK;
}
