#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Where a bound pool's exec throughput goes, item by item: N /bin/true
# items on the bound "system" queue, all on one CPU (the submitter's,
# pinned with taskset), against "taskset -c CPU xargs -P1 -n1 /bin/true" on
# the same N, in one run.  From the kernel's sched_process_exit and
# sched_process_exec events (perf record -a), per item:
#
#   gap   one /bin/true's exit to the next one's exec (the work between
#         two items: for cmwqd its exit's handling, the release of the
#         next, prepared process and that process's execve(); for xargs
#         its wait(), fork() and execve())
#   run   a /bin/true's exec to its exit (its own run, plus what else took
#         its CPU meanwhile)
#
# and the CPU time cmwqd's loop and its spawner used per item.  As root,
# like the other benchmarks (tests/bench/README.md, section 1).
#
#   tests/bench/start-gaps.sh BUILDDIR [N [CPU]] [-- CMWQD-OPTIONS...]
set -eu

build=$(cd "${1:?usage: $0 BUILDDIR [N [CPU]] [-- CMWQD-OPTIONS...]}" && pwd)
shift
n=500
cpu=$(($(nproc) - 1))
if [ $# -gt 0 ] && [ "$1" != "--" ]; then n=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then cpu=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
command -v perf >/dev/null || { echo "$0: needs perf (linux-perf)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/cmwq-bench-gaps.XXXXXX)
pid=
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

"$build/cmwqd" --socket "$tmp/s" --state-dir "$tmp/state" --no-dbus "$@" >"$tmp/log" 2>&1 &
pid=$!
i=0
until "$build/cmwqctl" --socket "$tmp/s" list >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -lt 200 ] || { echo "cmwqd did not start" >&2; cat "$tmp/log" >&2; exit 1; }
        sleep 0.05
done
spawner=$(pgrep -P "$pid" cmwqd-spawner | head -n1 || true)

# utime + stime of a process, in clock ticks
ticks() { [ -n "$1" ] && awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

events=sched:sched_process_exec,sched:sched_process_exit
loop0=$(ticks "$pid"); spawner0=$(ticks "$spawner")
perf record -q -a -e "$events" -o "$tmp/cmwqd.data" -- \
        taskset -c "$cpu" "$build/tests/bench/cmwq-bench" load "$tmp/s" system "$n" >/dev/null
loop1=$(ticks "$pid"); spawner1=$(ticks "$spawner")
seq "$n" | perf record -q -a -e "$events" -o "$tmp/xargs.data" -- taskset -c "$cpu" xargs -P1 -n1 /bin/true

# One line of figures from a recording: gaps and runs, p10/p50/p90/mean in us.
figures() {
        perf script -i "$1" -F comm,time,event 2>/dev/null | awk '
                $1 != "true" { next }
                { t = $2; sub(":", "", t); t *= 1e6 }
                /sched_process_exec/ { if (exit_t) print "gap", t - exit_t; exec_t = t }
                /sched_process_exit/ { if (exec_t) print "run", t - exec_t; exit_t = t }' |
        sort -k1,1 -k2,2n | awk '
                function show(k,   m) {
                        m = s[k] / c[k]
                        printf "%s p10 %5.0f p50 %5.0f p90 %5.0f mean %5.0f   ", k,
                               v[k, int(c[k] * 0.1) + 1], v[k, int(c[k] * 0.5) + 1], v[k, int(c[k] * 0.9) + 1], m
                }
                { c[$1]++; v[$1, c[$1]] = $2; s[$1] += $2 }
                END { if (c["gap"] && c["run"]) { show("gap"); show("run") } printf "(%d items)\n", c["run"] }'
}

hz=$(getconf CLK_TCK)
echo "$n /bin/true items on CPU $cpu, one after another; microseconds per item"
echo "  cmwqd 'system', submitter's CPU:  $(figures "$tmp/cmwqd.data")"
echo "  taskset xargs -P1 -n1 (peer):     $(figures "$tmp/xargs.data")"
echo "  cmwqd's CPU per item: loop and its threads $(( (loop1 - loop0) * 1000000 / hz / n )) us," \
     "spawner $(( (spawner1 - spawner0) * 1000000 / hz / n )) us"
