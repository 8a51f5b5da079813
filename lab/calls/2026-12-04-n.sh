#!/usr/bin/env bash
# lab/calls/2026-12-04-n.sh (OUT set; carry build-gpu as build): `kdart selftest` alone (every kernel's
# specializations against the float64 reference; calls j and k timed it out beside other jobs), timed.
set -u
. lab/calls/common.sh
/usr/bin/time -v timeout 380 build/kdart selftest > $O/selftest.txt 2> $O/selftest_time.txt; echo "selftest rc=$?"; el
grep -E "Elapsed|Maximum resident" $O/selftest_time.txt; tail -3 $O/selftest.txt
awk '{print $1}' $O/selftest.txt | sort | uniq -c | sort -rn | head -12
grep -iE "fail|mismatch" $O/selftest.txt | head
