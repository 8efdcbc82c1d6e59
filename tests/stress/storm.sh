#!/bin/bash
# tests/stress/storm.sh BUILDDIR [RUNS] [CMWQD OPTION...]: runs callback-storm
# RUNS times (default 40) against one fresh cmwqd and prints the runs that
# took over 5 s, then how many.  See tests/stress/README.md.
set -u
build=$(readlink -f "${1:?usage: storm.sh BUILDDIR [RUNS] [CMWQD OPTION...]}")
runs=${2:-40}
shift $(( $# >= 2 ? 2 : 1 ))
tmp=$(mktemp -d)
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
"$build/cmwqd" --socket "$tmp/s" --no-store --no-dbus "$@" 2>"$tmp/log" &
daemon=$!
until "$build/cmwqctl" --socket "$tmp/s" list >/dev/null 2>&1; do sleep 0.05; done
slow=0
for i in $(seq "$runs"); do
        start=$(date +%s%N)
        LD_LIBRARY_PATH=$build/.libs timeout 120 "$build/tests/stress/callback-storm" "$tmp/s" || echo "run $i: exit $?"
        ms=$(( ($(date +%s%N) - start) / 1000000 ))
        if [ "$ms" -gt 5000 ]; then
                slow=$((slow + 1))
                echo "run $i: $ms ms"
        fi
done
echo "$slow of $runs runs took over 5 s"
