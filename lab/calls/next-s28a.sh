# call s28a (carry build-gpu, build-Y, build-S, .whl, .whl-cudnn, .triton-carry; the headers of next-s26g.sh
# and next-s27b.sh say how to make build-Y and build-S): next-s26g.sh until S26G_END (default 360) seconds into
# the call, then next-s27b.sh (the split margin's A/B and tests) in what is left of 585 s, if 150 s are.
set -u
T0=$(date +%s)
CALL_END=${S26G_END:-360} PYT=${PYT:-160} bash lab/calls/next-s26g.sh
mv $OUT/test_gpu.txt $OUT/test_gpu_s26g.txt 2>/dev/null
left=$(( 585 - ($(date +%s) - T0) )); echo "== s27b: $left s left"
[ $left -gt 150 ] && timeout $left bash lab/calls/next-s27b.sh
