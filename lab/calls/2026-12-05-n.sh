set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
for n in full nodiag nooff nofold none; do
  WB_LIMIT=60 gc_whole_bare $n $R/build/probes/$n/k $R/build/libkdart.so b2_t8192_h32
done | tee $O/probes.txt; el
