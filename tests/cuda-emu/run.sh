#!/bin/bash
# run.sh - rebuild the emulated CUDA build from the repo's current files and
# run the GPU tests on it (README.md). Usage:
#   run.sh [build|selftest|test|all|ci|nccl|capture|graph|nccl_selftest] [criterion args...]  (default: all;
#   ci: what tools/dev test runs; nccl: its NCCL lanes: the nccl_* selftests, collectives_nccl,
#   train_nccl; capture, graph (cuDNN's graph API, emu_dnn_graph.cpp), nccl_selftest: one lane
#   each, as ctest runs them on CMake's build
#   of the emulator, -DSLUICE_CUDA_EMU=ON, with OUT=<build>/emu: CMakeLists.txt here)
#   ci's pipeline_gdec lane runs --decode gpu on the fake libnvjpeg (emu_nvjpeg.cpp)
# Env: REPO (this checkout), OFF (REPO/build-emu-off), OUT (REPO/build-emu), SKIP_CMAKE=1 (use OFF as it is),
#      EMU_LAZY=1 (deferred streams, default) / 0 (every op runs at once),
#      EMU_ABORT=1 (abort at the first misuse report), FILTER (criterion filter),
#      LOG (the test log's name in OUT, default tests.log).
set -u
EMU=$(cd "$(dirname "$0")" && pwd)
export REPO=${REPO:-$(cd "$EMU/../.." && pwd)}
OFF=${OFF:-$REPO/build-emu-off}
OUT=${OUT:-$REPO/build-emu}
what=${1:-all}; shift || true
mkdir -p "$OUT/obj"
CUDA_INC=/usr/local/cuda/include
DEFS="-D_GNU_SOURCE -DSLUICE_VERSION=\"0.1.0\" -DSLUICE_TRAIN_CUDA=1 -DSLUICE_WITH_CUDA=1"
CXX="g++ -std=c++17 -O2 -g -w -U_FORTIFY_SOURCE -fno-strict-aliasing $DEFS -I$REPO -I$CUDA_INC -I$EMU"
CC="gcc -std=gnu11 -O2 -g -Wall -Wextra -Wno-missing-field-initializers $DEFS -I$REPO -I$CUDA_INC"
LIBS="-lopenblas -lturbojpeg -ljpeg -lpng -lz -llmdb -lcjson -lcriterion -lpthread -lm"
MPI_LIB=$(pkg-config --libs ompi-c 2>/dev/null || echo "-L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi")
# the CUDA-OFF build's defines and include dirs of one of its targets (for
# the files recompiled here: SLUICE_WITH_MPI, the MPI and cJSON headers)
offflags() {
    local fm="$OFF/CMakeFiles/$1.dir/flags.make"
    if [ -f "$fm" ]; then
        sed -n 's/^C_DEFINES = //p; s/^C_INCLUDES = //p' "$fm" |
            sed 's/-DSLUICE_VERSION=[^ ]*//; s/-D_GNU_SOURCE//' | tr '\n' ' '
    else # not a Makefile build: the same from the cache and mpicc
        grep -q '^SLUICE_WITH_MPI:BOOL=ON' "$OFF/CMakeCache.txt" &&
            echo "-DSLUICE_WITH_MPI=1 $(mpicc --showme:compile 2>/dev/null)"
        grep -q '^SLUICE_WITH_DNNL:BOOL=ON' "$OFF/CMakeCache.txt" && echo " -DSLUICE_WITH_DNNL=1"
        echo " -I/usr/include/cjson $(pkg-config --cflags openblas 2>/dev/null)"
    fi
}

# the libraries the CUDA-OFF build linked train/ with beyond LIBS (oneDNN,
# OpenMP's runtime when it found them)
offlibs() {
    local c="$OFF/CMakeCache.txt"
    grep -q '^SLUICE_WITH_DNNL:BOOL=ON' "$c" 2>/dev/null && sed -n 's/^DNNL_LIBRARY:FILEPATH=//p' "$c"
    # records/'s remote reads (bytesrc.h) when that build has libcurl
    grep -q '^SLUICE_WITH_CURL:BOOL=ON' "$c" 2>/dev/null && pkg-config --libs libcurl
    # and WebP inputs (records/transcode.c) when it has libwebp
    grep -q '^SLUICE_WITH_WEBP:BOOL=ON' "$c" 2>/dev/null && pkg-config --libs libwebp
    sed -n 's/^OpenMP_gomp_LIBRARY:FILEPATH=//p' "$c" 2>/dev/null
}

build() {
    set -e
    rm -f "$OUT/emu_tests" "$OUT/sluice" "$OUT/selftest" # no stale binary after a failed build
    if [ -z "${SKIP_CMAKE:-}" ]; then
        echo "== cmake (CUDA OFF) $OFF"
        cmake -S "$REPO" -B "$OFF" -DSLUICE_WITH_CUDA=OFF -DSLUICE_WERROR=ON >/dev/null
        cmake --build "$OFF" -j2 >"$OUT/build-off.log" 2>&1 ||
            { grep -E "error|Error" "$OUT/build-off.log" | head -20; return 1; }
    fi
    cd "$OUT/obj"
    echo "== emulator"
    n=0
    for f in emu emu_rt emu_dnn emu_dnn_graph emu_blas emu_nccl; do
        $CXX -c "$EMU/$f.cpp" -o $f.o & n=$((n+1)); [ $((n % 2)) = 0 ] && wait
    done; wait
    echo "== .cu -> host C++"
    cu="$REPO/train/ops/act_cuda.cu $REPO/train/ops/amp_cuda.cu $REPO/train/ops/conv_cuda.cu $REPO/train/ops/cuda_ctx.cu \
        $REPO/train/ops/linear_cuda.cu $REPO/train/ops/norm_cuda.cu $REPO/train/ops/norm_pass_cuda.cu $REPO/train/ops/norm_sync_cuda.cu \
        $REPO/train/device/sgd_cuda.cu $REPO/pipeline/load_cuda.cu $REPO/pipeline/image/gdec_cuda.cu"
    # the fused conv+BN path's own kernels, once the file exists
    [ -f "$REPO/train/ops/fuse_cuda.cu" ] && cu="$cu $REPO/train/ops/fuse_cuda.cu"
    cuobjs=""
    for f in $cu; do
        b=$(basename "$f" .cu)
        python3 "$EMU/conv.py" "$f" "$b.emu.cpp"
        cuobjs="$cuobjs $b.emu.o"
    done
    n=0
    for f in $cu; do b=$(basename "$f" .cu); $CXX -c $b.emu.cpp -o $b.emu.o & n=$((n+1)); [ $((n % 2)) = 0 ] && wait; done; wait
    for f in $cuobjs; do [ -f $f ] || { echo "missing $f"; exit 1; }; done
    echo "== CUDA-ON C files"
    TRAIN_FLAGS="$(offflags sl_train)" # as the OFF build's train/ (SLUICE_WITH_DNNL, ...)
    # exec.c: the backend tables, the cuda one here; ops.c (the entry points)
    # from this tree too, so that mut.sh's mutants of it are what runs
    $CC $TRAIN_FLAGS -c "$REPO/train/ops/exec.c" -o exec.o
    $CC $TRAIN_FLAGS -c "$REPO/train/ops/ops.c" -o ops.o
    # train/device's cuda files, one job each (dev_int.h): dev_none.c's place;
    # and the exec's memory beside its context (train/ops/mem.h): mem_none.c's
    devobjs=""
    for f in device/dev_feed_cuda device/dev_loss_cuda device/dev_sgd_cuda device/dev_graph_cuda \
             ops/mem_cuda; do
        b=$(basename $f); $CC $TRAIN_FLAGS -c "$REPO/train/$f.c" -o $b.o; devobjs="$devobjs $b.o"
    done
    # the fused conv+BN path (cuDNN's graph API: emu_dnn_graph.cpp), once its files exist
    fused=""
    for f in train/ops/graph_cuda.c train/ops/graph_build_cuda.c train/ops/fuse.c; do
        b=$(basename "$f" .c)
        if [ -f "$REPO/$f" ]; then $CC $TRAIN_FLAGS -c "$REPO/$f" -o $b.o; fused="$fused $b.o"; else rm -f $b.o; fi
    done
    [ -f fuse_cuda.emu.o ] && [ -f "$REPO/train/ops/fuse_cuda.cu" ] && fused="$fused fuse_cuda.emu.o"
    # the nccl backend (emu_nccl.cpp under it) in place of nccl_none.c, and
    # comm.c's dispatch that knows it; replica.c from this tree too, so that
    # mut.sh's mutants of it are what runs
    COLL_FLAGS="$(offflags sl_collectives) -DSLUICE_WITH_NCCL=1"
    $CC $COLL_FLAGS -c "$REPO/collectives/nccl.c" -o nccl.o &
    $CC $COLL_FLAGS -c "$REPO/collectives/comm.c" -o comm.o &
    $CC $TRAIN_FLAGS -c "$REPO/train/loop/replica.c" -o replica.o & wait
    echo "== archives"
    rm -f libsl_train.a libsl_pipeline.a
    cp "$OFF/libsl_train.a" libsl_train.a; ar d libsl_train.a dev_none.c.o mem_none.c.o exec.c.o ops.c.o
    ar d libsl_train.a replica.c.o
    if ar t libsl_train.a | grep -qx fuse.c.o; then ar d libsl_train.a fuse.c.o; fi
    ar r libsl_train.a exec.o ops.o $devobjs replica.o act_cuda.emu.o amp_cuda.emu.o conv_cuda.emu.o cuda_ctx.emu.o \
        linear_cuda.emu.o norm_cuda.emu.o norm_pass_cuda.emu.o norm_sync_cuda.emu.o sgd_cuda.emu.o $fused 2>/dev/null
    rm -f libsl_collectives.a
    cp "$OFF/libsl_collectives.a" libsl_collectives.a; ar d libsl_collectives.a nccl_none.c.o comm.c.o
    ar r libsl_collectives.a nccl.o comm.o 2>/dev/null
    cp "$OFF/libsl_pipeline.a" libsl_pipeline.a; ar d libsl_pipeline.a load_nocuda.c.o gdec_nocuda.c.o
    ar r libsl_pipeline.a load_cuda.emu.o gdec_cuda.emu.o 2>/dev/null
    # the fake libnvjpeg that --decode gpu loads (SLUICE_NVJPEG, runtests)
    $CXX -fPIC -shared "$EMU/emu_nvjpeg.cpp" -o "$OUT/libnvjpeg_emu.so" -lturbojpeg
    ALL="libsl_train.a libsl_pipeline.a $OFF/libsl_records.a libsl_collectives.a $OFF/libsl_common.a \
         emu.o emu_rt.o emu_dnn.o emu_dnn_graph.o emu_blas.o emu_nccl.o"
    LIBS="$LIBS $(offlibs | tr '\n' ' ')"
    echo "== CLI $OUT/sluice"
    g++ -rdynamic -o "$OUT/sluice" "$OFF"/CMakeFiles/sluice.dir/tools/*.o $ALL "$OFF/libsl_cuda_probe.a" "$OFF/libsl_common.a" \
        $LIBS $MPI_LIB
    echo "== tests $OUT/emu_tests"
    TESTS="$REPO/tests/train/*/test_*.c $REPO/tests/pipeline/test_load.c $REPO/tests/pipeline/test_pipeline.c $REPO/tests/pipeline/test_gdec.c $REPO/tests/testutil.c"
    tobjs=""
    n=0
    for f in $TESTS; do
        o=t_$(basename "$f" .c).o
        $CC -I"$REPO/tests" -DSLUICE_BIN="\"$OUT/sluice\"" -DSLUICE_SOURCE_DIR="\"$REPO\"" \
            -DSLUICE_MPI_CHECK="\"$OFF/sluice_mpi_check\"" -c "$f" -o $o &
        tobjs="$tobjs $o"; n=$((n+1)); [ $((n % 2)) = 0 ] && wait
    done
    $CC -I"$REPO/tests" -DSLUICE_WITH_NCCL=1 -c "$REPO/tests/collectives/test_nccl.c" -o t_test_nccl.o
    tobjs="$tobjs t_test_nccl.o"; wait
    g++ -rdynamic -o "$OUT/emu_tests" $tobjs $ALL $LIBS $MPI_LIB
    gcc -O1 -g -I$CUDA_INC -c "$EMU/selftest.c" -o selftest.o
    g++ -rdynamic -o "$OUT/selftest" selftest.o emu.o emu_rt.o emu_dnn.o emu_dnn_graph.o emu_nccl.o -lopenblas -lpthread -lm
    set +e
}

runtests() {
    cd "$OUT"
    export SLUICE_FMNIST_T10K_DIR=${SLUICE_FMNIST_T10K_DIR:-/usr/share/datasets/fashion-mnist}
    export SLUICE_NVJPEG=${SLUICE_NVJPEG:-$OUT/libnvjpeg_emu.so} # --decode gpu (pipeline_gdec)
    local f=${FILTER:-'train_gpu/*'}
    echo "== $OUT/emu_tests --filter=$f (EMU_LAZY=${EMU_LAZY:-1})"
    local log="$OUT/${LOG:-tests.log}"
    "$OUT/emu_tests" --filter="$f" -j2 "$@" >"$log" 2>&1
    local rc=$?
    grep -E "^\[(----|FAIL|====)\]|EMU:|Synthesis|CRASH" "$log" | head -100
    echo "(full log: $log; misuse reports: grep 'EMU: error' $log)"
    # a misuse report fails the run even when every assertion held
    if [ $rc = 0 ] && grep -q "EMU: error" "$log"; then
        echo "run.sh: the emulator reported misuse (EMU: error) in $log"
        rc=1
    fi
    return $rc
}

selftest() {
    for t in ok host_deref free_host double_free kind range stream_after_destroy \
             event_never_recorded lazy_pinned nccl_ok nccl_mismatch nccl_timeout nccl_host_ptr \
             nccl_after_destroy nccl_dup_device nccl_peer_exit; do
        echo "== selftest $t"
        "$OUT/selftest" $t 2>&1 | grep -E "^EMU|^[a-zA-Z]" | grep -v "^EMU: [0-9]* misuse"
    done
}

# The NCCL misuse checks (selftest's nccl_* cases, two forked ranks each):
# each must report what it is about; a case that does not fails the run.
nccl_selftest() {
    local t want rc=0 out ok_out=""
    while IFS='|' read -r t want; do
        out=$(timeout 60 "$OUT/selftest" $t 2>&1)
        [ "$t" = nccl_ok ] && ok_out=$out
        if echo "$out" | grep -qE "$want"; then
            echo "== nccl selftest $t: ok"
        else
            echo "== nccl selftest $t: FAILED (no '$want' in:)"; echo "$out" | grep -v "^/\|^\./\|(+0x" | head -20
            rc=1
        fi
    done <<'CASES'
nccl_ok|rank 1: sum, bf16 avg, broadcast, all-gather of 786439 elements: 0 wrong
nccl_mismatch|EMU: error: nccl: rank 0 is at collective #1 \(ALLREDUCE sum f32, 786439 elements\) but rank 1
nccl_timeout|EMU: error: nccl: rank 0 waited 1 s at collective #1 \(ALLREDUCE
nccl_host_ptr|EMU: error: ncclAllReduce: sendbuff 0x[0-9a-f]+ is pageable host memory
nccl_after_destroy|EMU: error: ncclAllReduce: communicator \(rank 0 of 2\) used after ncclCommDestroy
nccl_dup_device|EMU: error: nccl: Duplicate GPU detected: rank 0 and rank 1 both on CUDA device 0
nccl_peer_exit|rank 0: async error: remote process exited.*rank 1 \(pid [0-9]+\) exited
CASES
    [ "$(echo "$ok_out" | grep -c "0 wrong")" = 2 ] || { echo "nccl_ok: a rank is wrong"; rc=1; }
    return $rc
}

# The stream-capture rules (selftest capture): every case must say ok.
capture_selftest() {
    local out
    out=$(EMU_ABORT=0 timeout 60 "$OUT/selftest" capture 2>&1)
    if [ "$(echo "$out" | grep -c '^capture: .*: ok ')" = 14 ] && ! echo "$out" | grep -q WRONG; then
        echo "== capture selftest: ok (14 cases)"
    else
        echo "== capture selftest: FAILED"; echo "$out" | grep -v "^/\|^\./\|(+0x" | head -30
        return 1
    fi
}

# cuDNN's backend graph API (selftest graph, emu_dnn_graph.cpp): every case
# ok, and the three misuse cases among them reported, nothing else.
graph_selftest() {
    local out n
    out=$(EMU_ABORT=0 timeout 120 "$OUT/selftest" graph 2>&1)
    n=$(echo "$out" | grep -c '^graph: .*: ok')
    if [ "$n" = 34 ] && ! echo "$out" | grep -q WRONG && [ "$(echo "$out" | grep -c '^EMU: error: ')" = 3 ] &&
        echo "$out" | grep -q "^EMU: error: cudnnBackendExecute: the variant pack has no pointer for w (uid 4)" &&
        echo "$out" | grep -q "^EMU: error: cudnnBackendExecute: workspace .* + 65536 bytes leaves device allocation" &&
        echo "$out" | grep -q "^EMU: error: cudnnBackendDestroyDescriptor: ENGINECFG .* used after cudnnBackendDestroyDescriptor"; then
        echo "== graph selftest: ok ($n cases)"
    else
        echo "== graph selftest: FAILED"; echo "$out" | grep -v "^/\|^\./\|(+0x\|EMU: warning" | head -40
        return 1
    fi
}

# The NCCL lanes (part of ci, or alone: run.sh nccl)
nccl_lanes() {
    nccl_selftest && FILTER='collectives_nccl/*' runtests && FILTER='train_nccl/*' runtests
}

case $what in
build) build ;;
test) runtests "$@" ;;
all) build && selftest && runtests "$@" ;;
ci)  # tools/dev test: every GPU test but the 8-minute Fashion-MNIST one, then the op and
     # pipeline device tests; each lane's failure fails the run
    build # a plain call: its set -e stops the script at the first failing step
    capture_selftest && graph_selftest && FILTER='train_gpu/[!b]*' runtests && FILTER='*cuda*/*' runtests &&
        FILTER='pipeline_load/*' runtests && FILTER='pipeline_gdec/*' runtests && nccl_lanes ;;
nccl) nccl_lanes ;;
selftest) selftest && capture_selftest && graph_selftest ;;
capture) capture_selftest ;;
graph) graph_selftest ;;
nccl_selftest) nccl_selftest ;;
*) echo "usage: run.sh [build|selftest|test|all|ci|nccl|capture|graph|nccl_selftest] [criterion args]"; exit 2 ;;
esac
