"""tests/python/emu_gpu_check.py DIR - sluice.Pipeline(device="cuda:0") on the
CUDA emulator (emu_gpu.sh builds the extension against it): every device
batch, read back with cudaMemcpy through the DLPack pointer after
__dlpack__(stream=1) (the legacy stream waits on the batch's copy event),
equals the host pipeline's batch, lent (hold=2, the lease syncs) and with
copy=True; a capsule kept past close() still holds its batch. Under the
emulator's lazy streams a missing event wait reads poison instead."""
import ctypes
import gc
import sys

import numpy as np

import sluice
from conftest import make_folder
import pathlib

so = ctypes.CDLL(sluice._sluice.__file__)
so.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
getp = ctypes.pythonapi.PyCapsule_GetPointer
getp.restype, getp.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
D2H = 2  # cudaMemcpyDeviceToHost


def read_capsule(cap, nbytes):
    data = ctypes.c_void_p.from_address(getp(cap, b"dltensor")).value  # DLTensor.data
    out = np.empty(nbytes, np.uint8)
    assert so.cudaMemcpy(out.ctypes.data, data, nbytes, D2H) == 0
    return out.tobytes()


def main():
    root = pathlib.Path(sys.argv[1])
    make_folder(root / "img", 90, seed=4)
    sluice.convert(root / "d", folder=root / "img", shards=3, fsync=False)
    cfg = dict(image_size=(24, 20), batch=16, workers=2, seed=3, epochs=3, layout="nhwc-u8")
    host = [(np.from_dlpack(b.images).tobytes(), np.from_dlpack(b.labels).tolist())
            for b in sluice.Pipeline(root / "d", **cfg)]
    for copy in (False, True):
        got = []
        for b in sluice.Pipeline(root / "d", device="cuda:0", copy=copy, **cfg):
            assert b.images.__dlpack_device__() == (2, 0) and b.images.device == "cuda:0"
            got.append((read_capsule(b.images.__dlpack__(stream=1), b.images.nbytes),
                        np.from_dlpack(b.labels).tolist()))
        assert len(got) == len(host) == 17, (len(got), len(host))
        bad = [i for i, (g, h) in enumerate(zip(got, host)) if g != h]
        assert not bad, f"copy={copy}: device batches {bad} differ from the host run's"
        print(f"copy={copy}: {len(got)} device batches equal the host pipeline's", flush=True)
    pipe = sluice.Pipeline(root / "d", device="cuda:0", **cfg)
    b = next(pipe)
    # a stream integer that cannot be a cudaStream_t is refused before it
    # reaches cudaStreamWaitEvent (it was cast to one as it came)
    for bad in (3, 5, 4097, 4096 + 4, -2, -(1 << 40)):
        try:
            b.images.__dlpack__(stream=bad)
        except ValueError as e:
            assert "not a CUDA stream" in str(e), str(e)
        else:
            raise AssertionError(f"stream={bad} was taken for a CUDA stream")
    print("stream integers that are no CUDA stream refused", flush=True)
    cap = b.images.__dlpack__(stream=2)
    pipe.close()
    assert read_capsule(cap, b.images.nbytes) == host[0][0], "the ring lives while a capsule does"
    del cap, b
    gc.collect()
    print("a capsule kept past close(): its batch intact", flush=True)


if __name__ == "__main__":
    main()
