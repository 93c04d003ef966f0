#!/bin/bash
# mut.sh FILE OLD NEW FILTER [EMU_LAZY] - a mutant of one repo file (path
# relative to the repo; a file run.sh compiles itself: train/device/dev_*_cuda.c,
# train/ops/exec.c, train/ops/ops.c, train/ops/graph_cuda.c, train/ops/fuse.c, train/loop/replica.c,
# collectives/nccl.c, collectives/comm.c,
# train/*/*.cu, pipeline/load_cuda.cu, tests/cuda-emu/*.cpp, or a test), built
# into MUT (default REPO/build-emu-mut) against the repo's CUDA-OFF
# libraries (OFF, default REPO/build-emu-off); runs the tests matching FILTER.
# Shows whether the emulated tests notice the change.
set -u
f=$1; old=$2; new=$3; filt=$4
EMU=$(cd "$(dirname "$0")" && pwd)
REPO0=${REPO:-$(cd "$EMU/../.." && pwd)}
MUT=${MUT:-$REPO0/build-emu-mut}
M=$MUT/repo
rm -rf $M && mkdir -p $M
(cd $REPO0 && tar cf - train pipeline tests common records collectives tools) | (cd $M && tar xf -)
python3 - "$M/$f" "$old" "$new" <<'PY' || exit 1
import sys
p, old, new = sys.argv[1:4]
s = open(p).read()
assert old in s, 'not found: ' + old
open(p, 'w').write(s.replace(old, new, 1))
PY
# the copy's run.sh: an emulator mutant (tests/cuda-emu/*.cpp) is built too
REPO=$M OFF=${OFF:-$REPO0/build-emu-off} OUT=$MUT/out SKIP_CMAKE=1 "$M/tests/cuda-emu/run.sh" build 2>&1 | grep -E "error|undefined"
cd $MUT/out && EMU_LAZY=${5:-1} timeout 900 ./emu_tests --filter="$filt" -j2 --verbose > mut.log 2>&1
grep -E "^\[(FAIL|PASS)|Synthesis|EMU: error" mut.log | sort | uniq -c | head -20
