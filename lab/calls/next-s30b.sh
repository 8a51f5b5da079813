# call s30b (carry build-gpu, .whl, .whl-cudnn, .triton-carry): on an H200 the official rows (next-s28c.sh:
# B2 production with fla's H200 autotune saved, then cuDNN's configuration); on an H100 the checks of
# main instead (next-s30a.sh: test_gpu's whole / fwd_h lists and the Python whole tests).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash lab/calls/next-s28c.sh
else
  LIMIT=${LIMIT:-200} exec bash lab/calls/next-s30a.sh
fi
