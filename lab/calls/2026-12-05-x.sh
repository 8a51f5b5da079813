# call x (written in the eighteenth session, not run): the two scans side by side (scans_overlap.py) at B2
# T8192 H32 and prod8192's B16 T8192 H16 K128 V256.  Carry build-gpu (main's build).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
for shape in "2 8192 32 128 128" "16 8192 16 128 256"; do
  KDART_LIBRARY=$(readlink -f build/libkdart.so) PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 120 python3 lab/calls/scans_overlap.py $shape 2>&1 | grep -v Warn
done | tee $O/scans.txt; el
