#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# What the durable store costs: tests/bench/store.sh BUILDDIR (also the last
# part of run.sh).  Submission alone (items delayed by an hour, so nothing
# runs) with the state log on the disk under /tmp, against --no-store, with
# 1, 16 and all requests in flight on one connection.  Each figure comes
# from a fresh daemon; the median of ROUNDS is printed.
#
# Knobs (environment):
#   CMWQ_BENCH_SUBMIT_N=5000   submissions per run
#   CMWQ_BENCH_ROUNDS=3        runs per figure
set -eu

if [ $# -lt 1 ] || [ ! -x "$1/cmwqd" ] || [ ! -x "$1/tests/bench/cmwq-bench" ]; then
        echo "usage: $0 BUILDDIR   (with cmwqd and tests/bench/cmwq-bench built: make bench)" >&2
        exit 2
fi
BUILD=$(cd "$1" && pwd)
CMWQD=$BUILD/cmwqd
CTL=$BUILD/cmwqctl
BENCH=$BUILD/tests/bench/cmwq-bench
N=${CMWQ_BENCH_SUBMIT_N:-5000}
ROUNDS=${CMWQ_BENCH_ROUNDS:-3}

TMP=$(mktemp -d /tmp/cmwq-bench-store-XXXXXX)
PID=
cleanup() {
        if [ -n "$PID" ]; then
                kill -TERM "$PID" 2>/dev/null || true
                wait "$PID" 2>/dev/null || true
        fi
        rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_once MODE DEPTH: prints "submits/s mean-latency-us" of a fresh daemon
run_once() {
        local opt waited=0 out rc=0
        if [ "$1" = on ]; then
                rm -rf "$TMP/state"
                opt=(--state-dir "$TMP/state")
        else
                opt=(--no-store)
        fi
        "$CMWQD" --socket "$TMP/sock" "${opt[@]}" 2>"$TMP/log" &
        PID=$!
        until "$CTL" --socket "$TMP/sock" list >/dev/null 2>&1; do
                if ! kill -0 "$PID" 2>/dev/null || [ $waited -ge 1500 ]; then
                        echo "$0: cmwqd did not start; its log:" >&2
                        cat "$TMP/log" >&2
                        exit 1
                fi
                sleep 0.01
                waited=$((waited + 1))
        done
        out=$("$BENCH" submit "$TMP/sock" "$N" "$2")
        kill -TERM "$PID"
        wait "$PID" || rc=$?
        PID=
        if [ $rc -ne 0 ]; then
                echo "$0: cmwqd exited $rc at SIGTERM; its log:" >&2
                cat "$TMP/log" >&2
                exit 1
        fi
        echo "$out"
}

median() {
        printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

echo "6. durable store: $N submissions of items delayed by 1 h (nothing runs) on one connection;"
echo "   state log on $(df -T "$TMP" | awk 'NR == 2 { print $1 " (" $2 ")" }') vs --no-store; fresh daemon per run,"
echo "   median of $ROUNDS runs; latency = mean time from a request's send to its reply"
printf '  %-16s %16s %14s %16s %14s %8s\n' "" "store: submits/s" "latency us" "no-store: /s" "latency us" "ratio"
for depth in 1 16 "$N"; do
        on_rate=(); on_lat=(); off_rate=(); off_lat=()
        for round in $(seq "$ROUNDS"); do
                read -r rate lat < <(run_once on "$depth")
                on_rate+=("$rate"); on_lat+=("$lat")
                [ "$round" = 1 ] && log_bytes=$(stat -c %s "$TMP/state/log")
                read -r rate lat < <(run_once off "$depth")
                off_rate+=("$rate"); off_lat+=("$lat")
        done
        on=$(median "${on_rate[@]}"); off=$(median "${off_rate[@]}")
        printf '  %-16s %16s %14s %16s %14s %8s\n' "in flight: $depth" "$on" "$(median "${on_lat[@]}")" \
                "$off" "$(median "${off_lat[@]}")" "$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.3fx", a / b }')"
done
echo "  state log after $N submissions (SIGTERM, no compaction): $log_bytes bytes, $((log_bytes / N)) per item"
echo "  (the bench's items carry a 1-entry environment; cmwqctl sends the caller's whole environment)"
