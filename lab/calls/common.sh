# lab/calls/common.sh: sourced by the call scripts (sessions 9-11), which run on the lent GPU machine
# from the repository root with OUT set.  What every one of them starts with: the environment, the clock,
# the runs they start side by side, and the steps they all end with.  Each starter (gc_*) puts its job in
# the background and leaves its pid (gc_test_gpu: all three in $pids; gc_sanitize and gc_warm: none, a
# plain `wait` collects them); the gpu_* steps run in the foreground.
O=$OUT; t0=$(date +%s); R=$PWD
# the build folder carried as build-gpu becomes build/ (replacing a warm machine's older one)
[ -d build-gpu ] && { rm -rf build && mv build-gpu build; }
# a machine that was not warm has no build/ (a call that found none lost 455 s to fla's warm-up before
# failing): stop at once
[ -x build/kdart ] && [ -f build/libkdart.so ] || { echo "no build/ here: carry build-gpu (and mv it)"; exit 3; }
export KDART_TORCH_EXT_DIR=/tmp/kext LD_LIBRARY_PATH=/usr/local/cuda/lib64
export KDART_CACHE_DIR=$R/build/devcache KDART_KERNEL_DIR=$R/kernel_src
# pytest ids of the 80 GB test, both as the repo root and as python/ (pytest's rootdir there) spell them
DS="--deselect=python/tests/test_torch_gpu.py::test_beyond_32bit_indexing --deselect=tests/test_torch_gpu.py::test_beyond_32bit_indexing"
el() { echo "t=$(( $(date +%s) - t0 ))"; }
# the card this call runs on, for the scripts' branches (H100 or H200) and the log
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
# fla for every gpu_check that follows (once, before they run side by side)
gc_fla_site() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl; }
# test_gpu in $2 processes (default three), every test in exactly one (KDART_GPU_PART); $1: each one's
# time limit
gc_test_gpu() {
  local n=${2:-3}
  pids=""
  for i in $(seq 0 $((n - 1))); do
    (KDART_GPU_PART=$i/$n CK_FORK=no timeout "$1" build/tests/test_gpu > $O/test_gpu$i.txt 2>&1
     echo "test_gpu part $i/$n rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu$i.txt) &
    pids="$pids $!"
  done
}
gc_selftest() { (timeout 240 build/kdart selftest > $O/selftest.txt 2>&1; echo "selftest rc=$?" >> $O/selftest.txt) & sp=$!; }
gc_ext_build() { (cd python && timeout 150 python3 -m kdart.torch_ext > $O/ext_build.txt 2>&1; echo "ext build rc=$?" >> $O/ext_build.txt) & ep=$!; }
# one pytest run through gpu_check, fla's Triton in first-config mode, in the background: $1 its log name
# (pytest_$1.txt; "prod" also keeps the production tests' error lines), $2 its time limit, $3 pytest's
# arguments
gc_pytest() {
  (KDART_ERR_LOG=$O/$1_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_$1 PYTEST_TRITON=first \
    PYTEST_TIMEOUT=$2 PYTEST_ARGS="$3" tools/gpu_check.sh build $O > $O/$1_rc.txt 2>&1) &
}
# fla's recipes in first-config mode, five workers
gc_fla_recipes() { gc_pytest fla 250 "-n 5 python/tests/test_fla_gpu.py"; fp=$!; }
# memcheck and racecheck over test_gpu side by side; $1: each one's time limit, the rest: environment
# assignments that pick the tests (KDART_GPU_SMALL=1 or KDART_GPU_TESTS=...)
gc_sanitize() {
  local limit=$1; shift
  for tool in memcheck racecheck; do
    (env "$@" CK_FORK=no timeout "$limit" compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
     echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
  done
}
# fla's Triton warm-up of bench/masked_dhu.py's cases $3 (K:V[:v],...) into $O/warm_mdhu.txt; $1: time
# limit, $2: workers
gc_warm_mdhu() {
  (PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout "$1" \
     python3 tools/triton_warm.py -j "$2" --log /tmp/warm-mdhu -- python3 bench/masked_dhu.py --warm-only --cases "$3" \
     >> $O/warm_mdhu.txt 2>&1; echo "warm rc=$?" >> $O/warm_mdhu.txt) &
}
# fla's Triton warm-up (gpu_check.sh's warm part) into $O/warm; arguments: its WARM_* assignments
gc_warm() { (mkdir -p $O/warm && env "$@" GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O/warm > $O/warm_rc.txt 2>&1) & }
# the torch tests on the Python path, then through the C++ fast path (torch_ext built: gc_ext_build)
gpu_torch_pypath() {
  KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=150 \
    PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py $DS" tools/gpu_check.sh build $O; el
}
gpu_torch_ext() {
  GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_ext PYTEST_TIMEOUT=120 \
    PYTEST_ARGS="python/tests/test_torch_gpu.py python/tests/test_torch_ext.py $DS" tools/gpu_check.sh build $O; el
}
# the tables alone: side_by_side rows $1; varlen rows $1 with time limit $2 and budget $3
gpu_sbs() { GPU_CHECK_PARTS=sbs SBS_ARGS="--rows $1" SBS_TIMEOUT=120 SBS_BUDGET=100 tools/gpu_check.sh build $O; el; }
gpu_varlen() { GPU_CHECK_PARTS=varlen VARLEN_ARGS="--rows $1" VARLEN_TIMEOUT=$2 VARLEN_BUDGET=$3 tools/gpu_check.sh build $O; el; }
# kdart bench's bwd_dhu line for B2 T8192 H16 at each K,V of the arguments, into $O/bench_masked.txt
gpu_bench_dhu() {
  for s in "$@"; do
    timeout 60 build/kdart bench --shape 2,8192,16,16,$s --reps 30 2>&1 | grep -E "bwd_dhu|ERROR|error"
  done | tee $O/bench_masked.txt; el
}
# fla's autotuning results (fla-core 0.6.0 caches them: FLA_CACHE_RESULTS=1, *.autotune.json in Triton's
# cache): restored from the carried .triton-carry/*.tgz and lab/triton-autotune/*.tgz before a run that
# autotunes, saved as $OUT/triton-autotune-$1.tgz after it (a file of its own: gc_pack's archive leaves
# .tgz files out).  A shape whose results are there skips the benchmarking, the 300-330 s of an e2e row.
gc_triton_restore() {
  mkdir -p "$TRITON_CACHE_DIR"
  for f in .triton-carry/*.tgz lab/triton-autotune/*.tgz; do [ -f "$f" ] && tar xzf "$f" -C "$TRITON_CACHE_DIR"; done
  echo "autotune results restored: $(find "$TRITON_CACHE_DIR" -name '*.autotune.json' | wc -l)"
}
gc_triton_save() {
  (cd "$TRITON_CACHE_DIR" && find . -name '*.autotune.json' | tar czf "$O/triton-autotune-$1.tgz" -T -) 2>/dev/null
  echo "autotune results saved: $(find "$TRITON_CACHE_DIR" -name '*.autotune.json' | wc -l)"
}
# the setup of a call that runs fla and cuDNN frontend beside kdart (carry .whl, .whl-cudnn): both sites,
# Triton's cache with fla's autotuning restored (the H100's carried results only on an H100: on an H200 they
# would hand fla another card's configs), kdart's library for Python
gc_peers_setup() {
  gc_fla_site
  python3 -m pip install -q --no-index --no-deps --target /tmp/cudnn-site .whl-cudnn/*.whl 2>&1 | tail -1
  export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1
  if grep -q H100 $O/gpu.txt; then gc_triton_restore; else mkdir -p $TRITON_CACHE_DIR
    for f in lab/triton-autotune/*.tgz; do [ -f "$f" ] && tar xzf "$f" -C "$TRITON_CACHE_DIR"; done; fi
}
# every log under $OUT in one archive (only a few files come back from a call; rewritten at each phase)
gc_pack() { (cd $O && tar czf all.tgz --exclude=all.tgz --exclude='*.tgz' . 2>/dev/null); }
# the end of every call: failed tests, then every log in one archive
gpu_finish() {
  grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
  [ -f $O/side_by_side.txt ] && grep -E "ERROR|^\| bwd" $O/side_by_side.txt
  [ -f $O/varlen.txt ] && grep "^| bwd" $O/varlen.txt
  (cd $O && tar czf 0logs.tgz --exclude=0logs.tgz --exclude='*.tgz' .)
}
# the start of session 12's calls: fla's site, test_gpu in three processes, the selftest and the sanitizers
# on small shapes side by side; $1: test_gpu's and the sanitizers' time limit
gc_suite() { gc_fla_site; gc_test_gpu "$1"; gc_selftest; gc_sanitize "$1" KDART_GPU_SMALL=1; }
# the recompute's rows alone (lab/experiments/rwu/rwu_bench.py, rows $1) into $O/rwu_bench.txt
gpu_rwu_bench() {
  PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 \
    timeout 100 python3 lab/experiments/rwu/rwu_bench.py "$1" > $O/rwu_bench.txt 2>&1
  echo "rwu bench rc=$?"; grep -vE "Warning|warn_once" $O/rwu_bench.txt | tail -6; el
}
# bench/e2e.py's production row at B2 T8192 H32 (profile), until $1 seconds into the call, into $O/e2e.txt
gpu_e2e_prod() {
  PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( $1 - ($(date +%s) - t0) )) \
    python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 8 > $O/e2e.txt 2>&1
  echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|other:|Python call|overhead" $O/e2e.txt | tail -30
}
# test_gpu's tests $2 (KDART_GPU_TESTS=name,...) in the background into $O/test_gpu_$3.txt; $1: its time limit
gc_gpu_tests() {
  (KDART_GPU_TESTS=$2 CK_FORK=no timeout "$1" build/tests/test_gpu > $O/test_gpu_$3.txt 2>&1
   echo "test_gpu $3 rc=$?" >> $O/test_gpu_$3.txt) &
}
# kdart.fla's GPU tests (fla's recipes) and the production whole-function float64 tests side by side, four
# workers each, in the background (a plain `wait` collects them); $1: each one's time limit
gc_fla_prod() {
  gc_pytest prod "$1" "-n 4 python/tests/test_production_gpu.py"
  gc_pytest fla "$1" "-n 4 python/tests/test_fla_gpu.py"
}
# the start of the fifth session's calls: Triton's cache, fla's site, kdart's library for Python, and the
# default cache prewarmed on 16 cores
gc_prologue() {
  export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
  gc_fla_site
  export KDART_LIBRARY=$R/build/libkdart.so
  timeout 100 build/kdart prewarm --jobs 16 > $O/prewarm.txt 2>&1
  echo "prewarm rc=$?"; tail -1 $O/prewarm.txt; el
}
# ncu source counters of the fused wy_dqkg + intra launch at B2 T8192 H32 (lab/calls/fused_ncu.py), exported as
# CSV per SASS instruction ($O/src.csv, gzipped beside it) with the details page; $1: extra ncu sections
gpu_ncu_fused() {
  PYTHONPATH=$R/python:$R/python/tests timeout 200 ncu --kernel-name regex:kdart_wy_dqkg --launch-skip 2 \
    --launch-count 1 --section SourceCounters --section WarpStateStats ${1:-} -o /tmp/fused \
    python3 lab/calls/fused_ncu.py > $O/ncu_run.txt 2>&1
  echo "ncu rc=$?"; el; tail -3 $O/ncu_run.txt
  ncu -i /tmp/fused.ncu-rep --page source --csv --print-source sass > $O/src.csv 2> $O/src_err.txt
  echo "export rc=$? $(wc -l < $O/src.csv) lines"
  ncu -i /tmp/fused.ncu-rep --page details --print-details all > $O/details.txt 2>&1
  gzip -k $O/src.csv; gc_pack; el
}
# memcheck and racecheck side by side on the kernels of directory $1 (own caches); $2: each one's time
# limit, $3: KDART_GPU_SMALL's list (results in $O/san.txt)
gc_sanitize_dir() {
  for tool in memcheck racecheck; do
    (KDART_KERNEL_DIR=$1 KDART_CACHE_DIR=/tmp/csan_$tool KDART_GPU_SMALL=$3 CK_FORK=no timeout "$2" \
       compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
     echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
  done
}
# kernel sources timed against each other: two rounds alternating the directories "$@" (each a kdart
# kernel dir /tmp/NAME/k, labelled NAME), wy_intra_bench's rows $AB_ROWS and (unless AB_WHOLE=0)
# whole_ab's bare C call and peak memory, into $O/${AB_OUT:-ab}.txt.  A tree that needs a library or a
# Python package of its own has them beside its k: /tmp/NAME/libkdart.so, /tmp/NAME/py.
gpu_ab_dirs() {
  for i in 1 2; do for d in "$@"; do
    t=$(dirname $d) v=$(basename $(dirname $d)) lib=${KDART_LIBRARY:-} py=$R/python
    [ -e $t/libkdart.so ] && lib=$(readlink -f $t/libkdart.so)  # its $ORIGIN: the build with libuv
    [ -d $t/py ] && py=$t/py
    KDART_LIBRARY=$lib KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$py:$py/tests:$R/lab/calls \
      timeout 100 python3 lab/calls/wy_intra_bench.py ${AB_ROWS:-b2_t8192_h32,packed32768,prod8192} 2>&1 \
      | grep -vE "Warning|warn|^row" | sed "s|^|$i $v |"
    [ "${AB_WHOLE:-1}" = 0 ] && continue
    KDART_LIBRARY=$lib KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$py:$py/tests:$R/lab/calls \
      timeout 80 python3 lab/calls/whole_ab.py 2>&1 | grep -E "bare|peak" | sed "s|^|$i $v |"
  done; done | tee $O/${AB_OUT:-ab}.txt; el
}
# the whole-backward Python tests side by side in the background (production -k whole: three workers;
# test_whole_gpu.py: four), fla's Triton in first-config mode; $1: each one's time limit.  gpu_whole_report
# prints their results after a `wait`.
gc_whole_tests() {
  gc_pytest prod "$1" "-n 3 python/tests/test_production_gpu.py -k whole"
  gc_pytest whole "$1" "-n 4 python/tests/test_whole_gpu.py"
}
gpu_whole_report() {
  grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
  grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -8
}
# fused_probes.py's probe trees under /tmp/pr (NAME/k each) and main's kernels as /tmp/pr/main/k, for
# gpu_ab_dirs; KDART_LIBRARY: this build's library
gc_probes() {
  export KDART_LIBRARY=$R/build/libkdart.so
  python3 lab/calls/fused_probes.py kernel_src /tmp/pr
  rm -rf /tmp/pr/main && mkdir -p /tmp/pr/main && cp -a kernel_src /tmp/pr/main/k
}
# ncu inside the bare whole call at B2 T8192 H32 (whole_ab.py's WHOLE_NCU: the bare call three times), the
# first two matching launches skipped; $1: time limit, $2: the log's name under $O, $3: kernel regex, $4:
# launches to profile, then ncu's section arguments
gc_ncu_whole() {
  local lim=$1 out=$2 re=$3 n=$4; shift 4
  WHOLE_NCU=1 PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout "$lim" ncu --kernel-name regex:"$re" \
    --launch-skip 2 --launch-count "$n" "$@" python3 lab/calls/whole_ab.py b2_t8192_h32 > $O/$out 2>&1; el
}
# the fused kernel's (the third call's launch) into $O/ncu_fused.txt, and its headline lines; $1: time limit,
# $2: extra ncu arguments
gc_ncu_fused() {
  gc_ncu_whole "$1" ncu_fused.txt kdart_wy_dqkg 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis ${2:-}
  grep -E "Duration|Throughput|Registers|Achieved Occupancy|Stall|Block Limit|Hit Rate|Eligible|Issued|Busy|Pipe" \
    $O/ncu_fused.txt | head -40
}
# a branch timed against main (sessions 17-): main's build as build-gpu (its kernels in build-gpu/k), the
# branch's as build, laid out for gpu_ab_dirs as /tmp/main/k and /tmp/$1/k (default cta1), each with its
# library beside it
gc_ab_trees() {
  local b=${1:-cta1}
  mkdir -p /tmp/main /tmp/$b
  cp -r $R/build-gpu/k /tmp/main/k && ln -s $(readlink -f $R/build-gpu/libkdart.so) /tmp/main/libkdart.so
  cp -r $R/kernel_src /tmp/$b/k && ln -s $(readlink -f $R/build/libkdart.so) /tmp/$b/libkdart.so
}
# whole_ab.py's bare C call and profile (rows $4) for kernel dir $2 with library $3, labelled $1 (the library
# by its resolved path: its $ORIGIN, where libuv lies, is the folder of the path it is loaded by); the
# caller's environment goes with it (KDART_FUSE_POST=0 gc_whole_bare ...); WB_LIMIT: its time limit, WB_CACHE:
# its kernel cache (default one per label; one for all saves the compiles the labels share)
gc_whole_bare() {
  KDART_LIBRARY=$(readlink -f $3) KDART_KERNEL_DIR=$2 KDART_CACHE_DIR=${WB_CACHE:-/tmp/cw$1} \
    PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout ${WB_LIMIT:-100} python3 lab/calls/whole_ab.py $4 2>&1 | tee $O/wb_$1.log | grep -E "bare (C|profile)" | sed "s|^|$1 |"
}
# variants LABEL=KDIR[=LIB] (LIB default build/libkdart.so) of the bare whole call on rows $2, each timed
# alone, one after another, $1 rounds; the profiles appended to $O/$3.txt
gc_bare_rounds() {
  local n=$1 rows=$2 log=$3 r v l d b; shift 3
  for r in $(seq 1 $n); do
    for v in "$@"; do
      IFS== read -r l d b <<< "$v"
      gc_whole_bare ${l}_$r $d ${b:-build/libkdart.so} $rows
    done | gc_prof | cut -c1-300 | tee -a $O/$log.txt
  done
}
# memcheck and racecheck of test_gpu's chunk_bwd_whole (or SAN_TESTS) side by side, each in its own cache, until $1 seconds
# have passed; their summaries printed
gc_san_whole() {
  for tool in memcheck racecheck; do
    (KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=${SAN_TESTS:-chunk_bwd_whole} CK_FORK=no timeout $1 \
       compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
  done; wait
  for tool in memcheck racecheck; do tail -1 $O/$tool.txt; grep -E "SUMMARY|Race|hazard|Invalid" $O/$tool.txt | sort | uniq -c | head -6; done; el
}
# test_gpu's tests $1 alone (time limit $2), the summary lines into $O/test_gpu.txt
gc_tests_quick() { KDART_GPU_TESTS=$1 CK_FORK=no timeout $2 build/tests/test_gpu 2>&1 | grep -E "Checks|F:" | tee $O/test_gpu.txt; }
# test_gpu's tests $1 (time limit $3) beside memcheck and racecheck of the tests $2, all waited for; the
# results and racecheck's distinct reports printed
gc_tests_san() {
  (KDART_GPU_TESTS=$1 CK_FORK=no timeout $3 build/tests/test_gpu > $O/test_gpu.txt 2>&1
   echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
  for tool in memcheck racecheck; do
    (KDART_CACHE_DIR=/tmp/csan_$tool KDART_GPU_TESTS=$2 CK_FORK=no timeout $3 \
       compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
     echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
  done
  wait; el
  tail -3 $O/test_gpu.txt; grep -E "rel RMS|differ|written|Error" $O/test_gpu.txt | head; cat $O/san.txt
  grep -E "Race reported|Error" $O/racecheck.txt | sort | uniq -c | head -8
}
# test_gpu's chunk_bwd_whole once per KDART_FUSE_POST level of "$@" (exp/gate-d), every case line printed,
# each run's log in $O/test_gpu_LEVEL.txt
gc_whole_levels() {
  for lv in "$@"; do
    KDART_FUSE_POST=$lv KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 120 build/tests/test_gpu > $O/test_gpu_$lv.txt 2>&1
    echo "level $lv rc=$?"; grep -E "chunk_bwd|Checks|F:" $O/test_gpu_$lv.txt | cut -c1-230
  done; el
}
# gc_whole_bare's lines shortened: kernel names without their template arguments and parameter types
gc_prof() { sed 's/void //g; s/kdart::enable_if<BwdDhuTraits<[0-9, ]*>::kValid, void>::type //g; s/(kdart[a-z_:<>]*params[a-z_:<>]*)//g; s/<kdart::bf16, [^>]*>//g; s/kdart_wy_dqkg(kdart::wy::ParamsOf<true>::type)/wy/'; }
# bench/e2e.py's production rows "$@" (whole route, profile), one process a row into $O/e2e_ROW.txt, each
# started only while 50 s are left before ${LIMIT:-590} seconds into the call; $E2E_SAVE=1: fla's autotune
# saved after each row (gc_triton_save)
gpu_e2e_rows() {
  local ROW left
  for ROW in "$@"; do
    left=$(( ${LIMIT:-590} - ($(date +%s) - t0) )); [ $left -gt 50 ] || break
    PYTHONPATH=/tmp/site:$R/python PYTHONUNBUFFERED=1 timeout $left python3 bench/e2e.py --shapes $ROW --configs prod \
      --profile --iters 6 --route whole --no-overhead > $O/e2e_$ROW.txt 2>&1
    echo "e2e $ROW rc=$?"; [ "${E2E_SAVE:-0}" = 1 ] && gc_triton_save $ROW
    grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_$ROW.txt |
      grep -E "ratio|prod |queued|idle|floor|peak|kernel total|\(kdart|host" | cut -c1-160 | head -20
  done
}
# bench/e2e.py in cuDNN frontend's configuration at B2 T8192 H32 (route $1: whole or both; profiled, cuDNN
# beside) for $2 seconds, into $O/e2e_cudnn.txt, fla's autotuning saved, the headline lines printed
gc_e2e_cudnn() {
  PYTHONPATH=/tmp/site:/tmp/cudnn-site:$R/python PYTHONUNBUFFERED=1 timeout $2 python3 bench/e2e.py \
    --shapes b2_t8192_h32 --configs cudnn --iters 6 --route $1 --no-overhead --profile > $O/e2e_cudnn.txt 2>&1
  echo "e2e cudnn rc=$?"; el; gc_triton_save cudnn_b2_t8192_h32
  grep -vE "Warning|_warn_once|nanobind|leaked| - " $O/e2e_cudnn.txt |
    grep -E "cudnn |queued|kernel total|fwd_h|wy_dqkg|recompute|dhu|dav|post|first" | cut -c1-200 | tail -24
}
