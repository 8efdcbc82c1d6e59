#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# What a refresh of "cmwqctl top" (or one "stats --format=openmetrics")
# costs cmwqd: the daemon's CPU time (/proc/PID/schedstat, nanoseconds on
# the CPU) over REFRESHES Snapshot requests, divided by their number; with
# the built-in queues only, then with QUEUES more queues.  As root, like
# the other benchmarks (tests/bench/README.md, section 8).
#
#   tests/bench/top-cost.sh BUILDDIR [REFRESHES [QUEUES]]
set -eu

build=$(cd "${1:?usage: $0 BUILDDIR [REFRESHES [QUEUES]]}" && pwd)
refreshes=${2:-1000}
queues=${3:-100}
tmp=$(mktemp -d /tmp/cmwq-bench-top.XXXXXX)
pid=
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

"$build/cmwqd" --socket "$tmp/s" --no-store --no-dbus >"$tmp/log" 2>&1 &
pid=$!
export CMWQ_SOCKET="$tmp/s"
i=0
until "$build/cmwqctl" list >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -lt 200 ] || { echo "cmwqd did not start" >&2; exit 1; }
        sleep 0.05
done

cpu_ns() { cut -d' ' -f1 "/proc/$pid/schedstat"; }

# measure LABEL: REFRESHES refreshes of top, 1 ms apart
measure() {
        before=$(cpu_ns)
        start=$(date +%s%N)
        "$build/cmwqctl" top --plain --iterations "$refreshes" --interval 0.001 >/dev/null
        end=$(date +%s%N)
        after=$(cpu_ns)
        # top sends one request more than it shows refreshes: the first
        # snapshot, which rates are taken against
        n=$((refreshes + 1))
        echo "$1: cmwqd CPU $(( (after - before) / n / 1000 )).$(( (after - before) / n / 100 % 10 )) us per refresh" \
             "($n requests, $(( (after - before) / 1000000 )) ms CPU in $(( (end - start) / 1000000 )) ms)"
}

measure "6 built-in queues, $(nproc) CPUs"
i=0
while [ $i -lt "$queues" ]; do
        "$build/cmwqctl" create "q$i" >/dev/null
        i=$((i + 1))
done
measure "$((queues + 6)) queues, $(nproc) CPUs"
