#!/bin/bash
# tests/python/emu_gpu.sh PYTHON - the Python package's device path
# (device="cuda:0": python/src/device.c, the lease syncs, DLPack on kDLCUDA)
# on tests/cuda-emu, the host emulator of the CUDA runtime: the extension is
# linked here against the CUDA-OFF build's libraries (build-emu-off, made by
# `tests/cuda-emu/run.sh ci`) with pipeline/load_cuda.cu converted by the
# emulator's conv.py in place of load_nocuda.c, then emu_gpu_check.py runs
# with PYTHON (numpy needed). tools/dev test runs it after the emulator lanes.
# Env: REPO, OFF (REPO/build-emu-off), OUT (REPO/build-emu/python).
set -euo pipefail
py=${1:?usage: emu_gpu.sh PYTHON}
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
OFF=${OFF:-$REPO/build-emu-off}
OUT=${OUT:-$REPO/build-emu/python}
EMU=$REPO/tests/cuda-emu
CUDA_INC=/usr/local/cuda/include
[ -f "$OFF/libsl_pipeline.a" ] || { echo "emu_gpu.sh: no $OFF/libsl_pipeline.a (run tests/cuda-emu/run.sh build)" >&2; exit 1; }
pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
rm -rf "$OUT"; mkdir -p "$OUT/obj" "$OUT/pkg/sluice"; cd "$OUT/obj"
DEFS='-D_GNU_SOURCE -DSLUICE_VERSION="0.1.0" -DSLUICE_WITH_CUDA=1'
CXX="g++ -std=c++17 -O2 -g -w -fPIC -U_FORTIFY_SOURCE -fno-strict-aliasing $DEFS -I$REPO -I$CUDA_INC -I$EMU"
echo "== emulated extension $OUT/pkg/sluice"
for f in emu emu_rt; do $CXX -c "$EMU/$f.cpp" -o $f.o & done
python3 "$EMU/conv.py" "$REPO/pipeline/load_cuda.cu" load_cuda.emu.cpp
$CXX -c load_cuda.emu.cpp -o load_cuda.emu.o
wait
for f in "$REPO"/python/src/*.c; do
    gcc -std=gnu11 -O2 -g -fPIC -Wall -Wextra -Werror -Wno-missing-field-initializers $DEFS \
        -DPy_LIMITED_API=0x03080000 -I"$pyinc" -I"$REPO" -I$CUDA_INC -c "$f" -o "py_$(basename "$f" .c).o"
done
cp "$OFF/libsl_pipeline.a" libp.a; ar d libp.a load_nocuda.c.o; ar r libp.a load_cuda.emu.o 2>/dev/null
g++ -shared -o "$OUT/pkg/sluice/_sluice.abi3.so" py_*.o libp.a "$OFF/libsl_records.a" \
    "$OFF/libsl_common.a" emu.o emu_rt.o -lturbojpeg -ljpeg -lpng -lz -llmdb -lcjson -lopenblas -lpthread -lm \
    $(grep -q '^SLUICE_WITH_CURL:BOOL=ON' "$OFF/CMakeCache.txt" && pkg-config --libs libcurl) \
    $(grep -q '^SLUICE_WITH_WEBP:BOOL=ON' "$OFF/CMakeCache.txt" && pkg-config --libs libwebp)
cp "$REPO"/python/sluice/*.py "$OUT/pkg/sluice/"
echo "== emu_gpu_check.py (EMU_LAZY=${EMU_LAZY:-1})"
cd "$REPO/tests/python"
PYTHONPATH="$OUT/pkg" "$py" emu_gpu_check.py "$OUT/data" 2>"$OUT/check.err" || { cat "$OUT/check.err"; exit 1; }
if grep -q "EMU: error" "$OUT/check.err"; then
    echo "emu_gpu.sh: the emulator reported misuse:"; grep "EMU" "$OUT/check.err" | head; exit 1
fi
