#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# cmwq benchmarks: tests/bench/run.sh BUILDDIR  (or "make bench")
#
# Starts its own private cmwqd instances (system mode, as root, sockets in a
# fresh temporary directory), runs the three benchmarks of tests/bench/README.md
# and prints their figures.  It asserts no timing: it fails only when something
# does not work at all.
#
# Knobs (environment):
#   CMWQ_BENCH_N=2000          items per throughput batch
#   CMWQ_BENCH_ROUNDS=3        throughput rounds (median reported)
#   CMWQ_BENCH_REPS=200        block-reaction repetitions per detector
#   CMWQ_BENCH_IDLE_SECONDS=10 idle window
#   CMWQ_BENCH_LOAD=1000       items run before the second RSS reading
#   CMWQ_BENCH_PROFILE=1       also profile cmwqd during a throughput batch
#                              (perf stat, perf record, strace -c)
#   CMWQ_BENCH_CLIENTS=1000    load: concurrent clients (own connection each)
#   CMWQ_BENCH_CLIENT_ITEMS=100  load: items each client submits before its flush
#   CMWQ_BENCH_PENDING=1000000 load: items kept pending for the memory figure
#   CMWQ_BENCH_ONLY=throughput,reaction,idle,load,lib,services,store   the benchmarks to run
#   CMWQ_BENCH_LIB_N=100000    empty callbacks per library run
#   CMWQ_BENCH_MIX_N=10000     block-1-ms-then-compute-100-us items per library run
#   CMWQ_BENCH_K=8             services: processes at once (a list runs each: 2,8,32)
#   CMWQ_BENCH_SERVICES_REPS=3 services: repetitions (every runner once per rep, interleaved)
#   CMWQ_BENCH_SERVICES_RUNNERS=cmwq-bound,glib-n,glib-4n,libuv,cmwq-unbound,cmwq-local
#   CMWQ_BENCH_SERVICES_MIXES=block,compute,open50,open90
#   CMWQ_BENCH_SERVICES_N=     services: items per process for every mix (default: block 1000,
#                              compute 100, open 150, times 8/K)
#   CMWQ_BENCH_SERVICES_KEEP=FILE  services: keep the raw ROW lines there
#   CMWQ_BENCH_MAX_ACTIVE=N    services: cmwq-bound/-local on a queue of each process's own, max_active N
#   CMWQ_BENCH_DAEMON_ARGS=    options added to every cmwqd started here (e.g. --no-store)
set -eu

if [ $# -lt 1 ] || [ ! -x "$1/cmwqd" ]; then
        echo "usage: $0 BUILDDIR   (a build directory with cmwqd, cmwqctl and tests/bench built: make bench)" >&2
        exit 2
fi
BUILD=$(cd "$1" && pwd)
CMWQD=$BUILD/cmwqd
CTL=$BUILD/cmwqctl
BENCH=$BUILD/tests/bench/cmwq-bench
BLOCKER=$BUILD/tests/bench/blocker
LOADTOOL=$BUILD/tests/bench/cmwq-load
LIBBENCH=$BUILD/tests/bench/lib-bench
SVCBENCH=$BUILD/tests/bench/services-bench
for f in "$CMWQD" "$CTL" "$BENCH" "$BLOCKER" "$LOADTOOL" "$LIBBENCH" "$SVCBENCH"; do
        [ -x "$f" ] || { echo "$0: $f is not built (make bench builds it)" >&2; exit 2; }
done
if [ "$(id -u)" != 0 ]; then
        echo "$0: run as root: the daemons run in system mode on private sockets" >&2
        exit 2
fi

N=${CMWQ_BENCH_N:-2000}
ROUNDS=${CMWQ_BENCH_ROUNDS:-3}
REPS=${CMWQ_BENCH_REPS:-200}
IDLE=${CMWQ_BENCH_IDLE_SECONDS:-10}
LOAD=${CMWQ_BENCH_LOAD:-1000}
PROFILE=${CMWQ_BENCH_PROFILE:-0}
CLIENTS=${CMWQ_BENCH_CLIENTS:-1000}
CLIENT_ITEMS=${CMWQ_BENCH_CLIENT_ITEMS:-100}
PENDING=${CMWQ_BENCH_PENDING:-1000000}
ONLY=${CMWQ_BENCH_ONLY:-throughput,reaction,idle,load,lib,services,store}
LIB_N=${CMWQ_BENCH_LIB_N:-100000}
MIX_N=${CMWQ_BENCH_MIX_N:-10000}
SVC_K=${CMWQ_BENCH_K:-8}
SVC_REPS=${CMWQ_BENCH_SERVICES_REPS:-3}
SVC_RUNNERS=${CMWQ_BENCH_SERVICES_RUNNERS:-cmwq-bound,glib-n,glib-4n,libuv,cmwq-unbound,cmwq-local}
SVC_MIXES=${CMWQ_BENCH_SERVICES_MIXES:-block,compute,open50,open90}
SVC_N=${CMWQ_BENCH_SERVICES_N:-}
DAEMON_ARGS=${CMWQ_BENCH_DAEMON_ARGS:-}
NCPU=$(nproc)

TMP=$(mktemp -d /tmp/cmwq-bench-XXXXXX)
chmod 0755 "$TMP"
DAEMONS=()
PEER=

cleanup() {
        local p
        for p in "${DAEMONS[@]}" $PEER; do
                kill -TERM "$p" 2>/dev/null || true
        done
        for p in "${DAEMONS[@]}" $PEER; do
                wait "$p" 2>/dev/null || true
        done
        rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemon NAME DETECTOR [OPTION...]: sets DAEMON_PID and DAEMON_SOCK; the
# state (the durable log) goes to $TMP/NAME.state unless an option says otherwise
start_daemon() {
        local name=$1 det=$2 waited=0
        shift 2
        DAEMON_SOCK=$TMP/$name.sock
        # shellcheck disable=SC2086 # DAEMON_ARGS: options, split at blanks
        "$CMWQD" --socket "$DAEMON_SOCK" --sleep-detector "$det" --state-dir "$TMP/$name.state" $DAEMON_ARGS "$@" \
                2>"$TMP/$name.log" &
        DAEMON_PID=$!
        DAEMONS+=("$DAEMON_PID")
        until "$CTL" --socket "$DAEMON_SOCK" list >/dev/null 2>&1; do
                if ! kill -0 "$DAEMON_PID" 2>/dev/null || [ $waited -ge 1500 ]; then
                        echo "$0: cmwqd ($det) did not start; its log:" >&2
                        cat "$TMP/$name.log" >&2
                        exit 1
                fi
                sleep 0.01
                waited=$((waited + 1))
        done
        if ! grep -q "sleep detector $det" "$TMP/$name.log"; then
                echo "$0: cmwqd did not use the $det detector; its log:" >&2
                cat "$TMP/$name.log" >&2
                exit 1
        fi
}

# stop_daemon PID NAME
stop_daemon() {
        local pid=$1 name=$2 rc=0 keep=() p
        kill -TERM "$pid"
        wait "$pid" || rc=$?
        for p in "${DAEMONS[@]}"; do
                [ "$p" = "$pid" ] || keep+=("$p")
        done
        DAEMONS=("${keep[@]+"${keep[@]}"}")
        if [ $rc -ne 0 ]; then
                echo "$0: cmwqd ($name) exited $rc at SIGTERM; its log:" >&2
                cat "$TMP/$name.log" >&2
                exit 1
        fi
}

# status_field PID FIELD: a "Key: value" of /proc/PID/status, in its unit
status_field() {
        awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"
}

# ctxt PID: voluntary + nonvoluntary context switches of all its threads
ctxt() {
        cat /proc/"$1"/task/*/status 2>/dev/null |
                awk '$1 == "voluntary_ctxt_switches:" || $1 == "nonvoluntary_ctxt_switches:" { n += $2 } END { print n + 0 }'
}

# want NAME: whether benchmark NAME is in CMWQ_BENCH_ONLY
want() {
        case ",$ONLY," in *",$1,"*) return 0 ;; esac
        return 1
}

hr() {
        printf '%s\n' "-------------------------------------------------------------------------------------------------"
}

model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
echo "cmwq benchmarks  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "  $("$CMWQD" --version 2>/dev/null | head -n1), kernel $(uname -r), $NCPU CPUs${model:+ ($model)}"
echo "  build: $BUILD"
echo "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews every figure)"
[ -z "$DAEMON_ARGS" ] || echo "  every cmwqd started with: $DAEMON_ARGS"

# ---------------------------------------------------------------------------
if want throughput; then
hr
echo "1. exec throughput: N=$N /bin/true items, one pipelined batch on one connection + flush;"
echo "   median of $ROUNDS rounds, interleaved with the xargs peer (target: >= 0.80x xargs)"
for det in perf proc; do
        start_daemon "tp-$det" "$det"
        echo " [cmwqd --sleep-detector $det]"
        rss0=$(status_field "$DAEMON_PID" VmRSS)
        "$BENCH" throughput "$DAEMON_SOCK" "$N" "$ROUNDS" system system:rr system_unbound
        echo "  cmwqd VmRSS: $rss0 KiB before the batches, $(status_field "$DAEMON_PID" VmRSS) KiB after" \
                "($((ROUNDS * 3 * N)) items; it keeps the last 1000 finished ones per user)"
        if [ "$PROFILE" = 1 ] && [ "$det" = perf ]; then
                pid=$DAEMON_PID
                echo " [profile of cmwqd alone (not its children) during system_unbound batches of $N]"
                if command -v perf >/dev/null 2>&1; then
                        perf stat --no-inherit -e task-clock,context-switches,page-faults -p "$pid" \
                                -o "$TMP/perf-stat.txt" -- "$BENCH" load "$DAEMON_SOCK" system_unbound "$N" | sed 's/^/   /'
                        grep -E 'task-clock|context-switches|page-faults' "$TMP/perf-stat.txt" |
                                awk -v n="$N" '{ v = $1; gsub(",", "", v); printf "   %-18s %12s  = %9.2f per item\n", $2 == "msec" ? $3 " ms" : $2, $1, v / n }'
                        perf record -q --no-inherit -F 4999 -g -p "$pid" -o "$TMP/perf.data" -- \
                                "$BENCH" load "$DAEMON_SOCK" system_unbound "$N" >/dev/null 2>&1
                        echo "   perf record --no-inherit: cmwqd's samples by symbol, self (top 15):"
                        perf report -i "$TMP/perf.data" --stdio --no-children --sort sym 2>/dev/null |
                                grep -E '^ +[0-9.]+%' | head -n 15 | sed 's/^ */     /'
                        echo "   the same, including callees (top 15 kernel entry points):"
                        perf report -i "$TMP/perf.data" --stdio --children --sort sym 2>/dev/null |
                                grep -E '^ +[0-9.]+% +[0-9.]+% +\[k\]' | grep -vE 'entry_SYSCALL|do_syscall_64|\] (0x)?[0-9a-f]{16}$' |
                                head -n 15 | sed 's/^ */     /'
                fi
                if command -v strace >/dev/null 2>&1; then
                        strace -q -c -S calls -p "$pid" -o "$TMP/strace.txt" &
                        spid=$!
                        sleep 1
                        "$BENCH" load "$DAEMON_SOCK" system_unbound "$N" | sed 's/^/   (under strace) /'
                        kill -INT $spid
                        wait $spid || true
                        echo "   strace -c of cmwqd (not its children), top 15 by calls, per item:"
                        awk -v n="$N" 'NR > 2 && $1 ~ /^[0-9.]+$/ && $NF != "total" {
                                calls = $4; printf "     %-20s %8d calls %7.2f per item\n", $NF, calls, calls / n }' \
                                "$TMP/strace.txt" | head -n 15
                fi
        fi
        stop_daemon "$DAEMON_PID" "tp-$det"
done
fi

# ---------------------------------------------------------------------------
if want reaction; then
hr
echo "2. block reaction: a running item blocks (nanosleep), the item queued behind it on the same"
echo "   CPU must start; $REPS reps per detector (target: detection median < 100 us with perf)"
# trace_daemon PID FILE: records (CLOCK_MONOTONIC), in the background, when
# cmwqd returns from epoll_wait() (it woke up) and when it sends a 1-byte
# message on a go socket (daemon/exec/exec.c: "attached" when an item's process is
# ready, "go" when it may run); sets TRACE_PID (empty when perf cannot)
trace_daemon() {
        local ev e
        TRACE_PID=
        command -v perf >/dev/null 2>&1 || return 0
        ev=(-e syscalls:sys_enter_sendto --filter 'len == 1')
        for e in epoll_wait epoll_pwait epoll_pwait2; do
                [ -d /sys/kernel/tracing/events/syscalls/sys_exit_$e ] ||
                        [ -d /sys/kernel/debug/tracing/events/syscalls/sys_exit_$e ] && ev+=(-e "syscalls:sys_exit_$e")
        done
        perf record -q -k mono --no-inherit "${ev[@]}" -p "$1" -o "$2" >/dev/null 2>&1 &
        TRACE_PID=$!
        sleep 1         # perf attaches
        kill -0 "$TRACE_PID" 2>/dev/null || TRACE_PID=
}

# trace_join DUMP TRACE KIND: for each pair of DUMP ("KIND T_BLOCK T_MAIN"),
# the first go send of cmwqd between the two (T_GO), and its last wake-up
# between T_BLOCK and T_GO (T_WAKE): prints the median, p99, min, max of
# T_WAKE - T_BLOCK (detection), T_GO - T_WAKE (decision), T_GO - T_BLOCK and
# T_MAIN - T_GO (start)
trace_join() {
        perf script -i "$2" -F time,event --ns 2>/dev/null |
                awk '{ t = $1; sub(":$", "", t); ev = $2; sub(":$", "", ev); print t, (ev ~ /sendto/ ? "go" : "wake") }' |
                sort -n >"$2.txt" || true
        awk -v kind="$3" '
                function pct(a, n, p,   k) { k = int(p / 100 * n + 0.999999); if (k < 1) k = 1; if (k > n) k = n; return a[k] }
                function sortn(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t } }
                function row(label, a, n) {
                        if (n == 0) { printf "  %-52s %9s\n", label, "(no trace)"; return }
                        sortn(a, n)
                        printf "  %-52s %9.1f %9.1f %9.1f %9.1f %5d\n", label, pct(a, n, 50), pct(a, n, 99), a[1], a[n], n
                }
                FNR == NR { t[++nt] = int($1 * 1e9 + 0.5); w[nt] = $2; next }
                $1 == kind {
                        # first event after T_BLOCK
                        lo = 1; hi = nt + 1
                        while (lo < hi) { mid = int((lo + hi) / 2); if (t[mid] <= $2) lo = mid + 1; else hi = mid }
                        first = lo
                        for (k = first; k <= nt && t[k] < $3 && w[k] != "go"; k++)
                                ;
                        if (k > nt || t[k] >= $3) { miss++; next }
                        go = t[k]; wake = 0
                        for (j = k - 1; j >= first; j--) if (w[j] == "wake") { wake = t[j]; break }
                        n++; bg[n] = (go - $2) / 1e3; gm[n] = ($3 - go) / 1e3
                        if (wake) { m++; bw[m] = (wake - $2) / 1e3; wg[m] = (go - wake) / 1e3 } else awake++
                }
                END {
                        what = kind == "block" ? "block" : "exit"
                        row(what " -> cmwqd wakes up      [detection]", bw, m)
                        row("cmwqd wakes up -> sends go   [decision]", wg, m)
                        row(what " -> cmwqd sends go      [detection+decision]", bg, n)
                        row("cmwqd sends go -> next main() [start]", gm, n)
                        if (miss + awake > 0)
                                printf "  (%d pairs without a go send in between, %d with cmwqd already awake at the %s)\n", miss, awake, what
                }' "$2.txt" "$1"
}

for det in perf proc; do
        start_daemon "re-$det" "$det"
        echo " [cmwqd --sleep-detector $det]"
        trace_daemon "$DAEMON_PID" "$TMP/trace-$det.data"
        "$BENCH" reaction "$DAEMON_SOCK" "$BLOCKER" "$REPS" "$TMP/pairs-$det.txt"
        if [ -n "$TRACE_PID" ]; then
                kill -INT "$TRACE_PID"
                wait "$TRACE_PID" || true
                echo "  the same pairs, split by a trace of cmwqd's wake-ups and go sends (perf record -k mono):"
                trace_join "$TMP/pairs-$det.txt" "$TMP/trace-$det.data" block
                trace_join "$TMP/pairs-$det.txt" "$TMP/trace-$det.data" exit
        fi
        stop_daemon "$DAEMON_PID" "re-$det"
done
fi

# ---------------------------------------------------------------------------
if want idle; then
hr
echo "3. idle cost: fresh daemons, 2 s to settle, then ${IDLE} s idle (targets: RSS < 4 MiB, 0 wake-ups)"
start_daemon idle-perf perf
PID_PERF=$DAEMON_PID; SOCK_PERF=$DAEMON_SOCK
start_daemon idle-proc proc
PID_PROC=$DAEMON_PID; SOCK_PROC=$DAEMON_SOCK
sleep $((IDLE + 30)) &
PEER=$!
sleep 2

# idle_window LABEL...: measures every daemon and the peer over IDLE seconds
idle_window() {
        local c0p c0q c0s c1p c1q c1s
        c0p=$(ctxt "$PID_PERF"); c0q=$(ctxt "$PID_PROC"); c0s=$(ctxt "$PEER")
        sleep "$IDLE"
        c1p=$(ctxt "$PID_PERF"); c1q=$(ctxt "$PID_PROC"); c1s=$(ctxt "$PEER")
        printf '  %-34s %10s %10s %8s %13s %13s\n' "" "VmRSS KiB" "VmHWM KiB" "threads" "ctx switches" "wake-ups/s"
        for row in "cmwqd (perf detector)|$PID_PERF|$c0p|$c1p" "cmwqd (proc detector)|$PID_PROC|$c0q|$c1q" \
                   "peer: sleep $((IDLE + 30))|$PEER|$c0s|$c1s"; do
                IFS='|' read -r label pid a b <<<"$row"
                printf '  %-34s %10s %10s %8s %13s %13s\n' "$label" "$(status_field "$pid" VmRSS)" \
                        "$(status_field "$pid" VmHWM)" "$(status_field "$pid" Threads)" "$((b - a))" \
                        "$(awk -v d=$((b - a)) -v s="$IDLE" 'BEGIN { printf "%.2f", d / s }')"
        done
}

echo " [fresh, idle]"
idle_window
echo " [after running $LOAD /bin/true items on the bound 'system' queue, 2 s to settle, then ${IDLE} s idle]"
"$BENCH" load "$SOCK_PERF" system "$LOAD" | sed 's/^/  perf daemon: /'
"$BENCH" load "$SOCK_PROC" system "$LOAD" | sed 's/^/  proc daemon: /'
sleep 2
idle_window
stop_daemon "$PID_PERF" idle-perf
stop_daemon "$PID_PROC" idle-proc
fi

# ---------------------------------------------------------------------------
if want load; then
hr
echo "4. load: $CLIENTS concurrent clients x $CLIENT_ITEMS items each + flush, on system_unbound; every item"
echo "   must run exactly once and cmwqd's fds come back; then $PENDING items kept pending (frozen queue)"
start_daemon load perf
"$LOADTOOL" clients "$DAEMON_SOCK" "$DAEMON_PID" "$CLIENTS" "$CLIENT_ITEMS" "$TMP" 1 system_unbound | sed 's/^/  /'
if [ "${PIPESTATUS[0]}" != 0 ]; then
        echo "$0: items were lost, ran twice, or cmwqd kept fds (see above)" >&2
        exit 1
fi
stop_daemon "$DAEMON_PID" load
start_daemon pending perf
"$LOADTOOL" pending "$DAEMON_SOCK" "$DAEMON_PID" "$PENDING" "$TMP/pending.state" | sed 's/^/  /'
stop_daemon "$DAEMON_PID" pending
echo "   a flood by uid 65534 under the default limits (delayed items, until refused), then root and"
echo "   uid 1 (daemon) must still be served:"
start_daemon flood perf
setpriv --reuid 65534 --regid 65534 --clear-groups "$LOADTOOL" pending "$DAEMON_SOCK" "$DAEMON_PID" "$PENDING" |
        sed 's/^/  /'
for who in 0 1; do
        out=$(setpriv --reuid $who --regid $who --clear-groups "$CTL" --socket "$DAEMON_SOCK" submit system --wait -- \
                /bin/sh -c 'echo served uid $(id -u)') || { echo "$0: uid $who was not served during the flood" >&2; exit 1; }
        echo "  $out"
done
stop_daemon "$DAEMON_PID" flood
fi

hr
if want lib; then
echo "5. libcmwq-client callbacks vs libuv uv_queue_work (default pool) and GLib GThreadPool"
echo "   (max threads = CPUs), all in one process, one after the other"
start_daemon lib perf
echo " [empty callbacks: $LIB_N items (target: items/s >= 0.5x the faster peer)]"
"$LIBBENCH" empty "$DAEMON_SOCK" "$LIB_N"
echo " [$MIX_N items that block 1 ms, then compute 100 us (targets: shorter makespan than both,"
echo "  threads <= max blocked + $NCPU CPUs); bound: queued round-robin over the CPUs]"
"$LIBBENCH" mix "$DAEMON_SOCK" "$MIX_N"
stop_daemon "$DAEMON_PID" lib
fi
if want services; then
hr
echo "6. services: K processes each run N items at once (a start barrier), each on a private pool"
echo "   (GLib GThreadPool of $NCPU and $((4 * NCPU)) threads, libuv's default pool) or on cmwqd's shared one"
echo "   (libcmwq-client: 'system' with item i on CPU i mod $NCPU, 'system' on the submitter's CPU,"
echo "   'system_unbound'); a fresh cmwqd (perf detector) for every cmwq row; $SVC_REPS reps, runners"
echo "   interleaved in each.  Times in s, latencies in us; see tests/bench/README.md section 6."
SVC_ROWS=$TMP/services.rows
: >"$SVC_ROWS"
svc_header() {
        printf '  %-13s %8s %6s %7s %6s %5s %6s %8s %8s %7s %7s %7s %6s %8s %8s %8s %8s\n' runner makespan idle threads atonce ran \
                maxrun vcsw ivcsw cpu itemcpu cmwqd dwake qs50 qs99 qe50 qe99
}
for rep in $(seq 1 "$SVC_REPS"); do
        for k in ${SVC_K//,/ }; do
                for mix in ${SVC_MIXES//,/ }; do
                        if [ -n "$SVC_N" ]; then
                                n=$SVC_N
                        else
                                case $mix in block) n=1000 ;; compute) n=100 ;; *) n=150 ;; esac
                                n=$((n * 8 / k)); [ "$n" -ge 10 ] || n=10
                        fi
                        echo " [rep $rep, K=$k, mix $mix, N=$n per process, load average $(cut -d' ' -f1-3 /proc/loadavg)]"
                        svc_header
                        for runner in ${SVC_RUNNERS//,/ }; do
                                case $runner in
                                cmwq-*)
                                        start_daemon "svc-$rep-$k-$mix-$runner" perf
                                        "$SVCBENCH" "$DAEMON_SOCK" "$DAEMON_PID" "$runner" "$mix" "$k" "$n" "$rep" \
                                                >"$TMP/svc.out" || { cat "$TMP/svc.out"; exit 1; }
                                        stop_daemon "$DAEMON_PID" "svc-$rep-$k-$mix-$runner"
                                        ;;
                                *)
                                        "$SVCBENCH" - 0 "$runner" "$mix" "$k" "$n" "$rep" >"$TMP/svc.out" ||
                                                { cat "$TMP/svc.out"; exit 1; }
                                        ;;
                                esac
                                grep -v '^ROW ' "$TMP/svc.out"
                                grep '^ROW ' "$TMP/svc.out" | sed "s/\$/ load=$(cut -d' ' -f1 /proc/loadavg)/" >>"$SVC_ROWS"
                        done
                done
        done
done
echo " [medians over the reps, and the targets of issue 11 as ratios to the best private pool of the"
echo "  same K and mix (best: shortest makespan; open loop: lowest p99 queue->end)]"
awk -f "$(dirname "$0")/services-summary.awk" "$SVC_ROWS"
[ -z "${CMWQ_BENCH_SERVICES_KEEP:-}" ] || cp "$SVC_ROWS" "$CMWQ_BENCH_SERVICES_KEEP"
fi
if want store; then
hr
"$(dirname "$0")/store.sh" "$BUILD"
fi
hr
echo "all daemons stopped cleanly"
