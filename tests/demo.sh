#!/usr/bin/env bash
# A live demo of concurrency management: cmwqd on a private socket, items
# that block all progressing together on one CPU, short CPU-bound items on
# one CPU taking turns, a spinning item marked CPU-intensive so that it
# cannot hold its pool, and a C service's callbacks sharing a CPU with exec
# items.  Usage: tests/demo.sh BUILDDIR (with tests/integration/probe and
# tests/demo-callbacks built)
set -euo pipefail
build=$(readlink -f "${1:-build}")
cmwqd=$build/cmwqd
probe=$build/tests/integration/probe
tmp=$(mktemp -d /tmp/cmwq-demo.XXXXXX)
chmod 755 "$tmp"
export CMWQ_SOCKET=$tmp/cmwqd.sock
ctl() { "$build/cmwqctl" "$@"; }

cleanup() {
        [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

# timeline LOG: one bar per item, 1 character = 10 ms from the first start
timeline() {
        sort -k3,3n "$1" | awk '
                $2 != "start" && $2 != "end" { next }
                !($1 in s) { order[++n] = $1; s[$1] = 0 }
                { if ($2 == "start") s[$1] = $3; else e[$1] = $3; if (!t0) t0 = $3 }
                END {
                        for (i = 1; i <= n; i++) {
                                k = order[i]; a = (s[k] - t0) / 1e6; b = (e[k] - t0) / 1e6
                                bar = ""
                                for (c = 0; c < 50; c++) bar = bar ((c * 10 + 10 > a && c * 10 < b) ? "#" : ".")
                                printf "  %-7s %7.1f ms -> %7.1f ms  |%s|\n", k, a, b, bar
                        }
                        printf "  (one character = 10 ms)\n"
                }'
}

say "Starting cmwqd on $CMWQ_SOCKET"
"$cmwqd" --socket "$CMWQ_SOCKET" --state-dir "$tmp/state" 2>"$tmp/cmwqd.log" &
daemon=$!
for _ in $(seq 100); do [ -S "$CMWQ_SOCKET" ] && ctl list >/dev/null 2>&1 && break; sleep 0.05; done
sed 's/^/  /' "$tmp/cmwqd.log"
ctl pools

say "1. Six items that block (sleep 400 ms), all queued on CPU 0 of one bound queue."
echo "   Each blocks at once, so the pool starts the next one immediately: all six run together."
ctl create demo >/dev/null
for i in 1 2 3 4 5 6; do ctl submit demo --cpu 0 -- "$probe" sleep 400 "$tmp/a.log" "blk$i" >/dev/null; done
for _ in 1 2 3; do sleep 0.1; ctl pools | sed -n '1,2p'; done
ctl flush demo
timeline "$tmp/a.log"

say "2. Six short CPU-bound items (4 ms of CPU each) on CPU 0: they never block,"
echo "   so the pool runs exactly one at a time - no oversubscription."
for i in 1 2 3 4 5 6; do ctl submit demo --cpu 0 -- "$probe" spin 4 "$tmp/b.log" "cpu$i" >/dev/null; done
ctl flush demo
timeline "$tmp/b.log"

say "3. An item that spins for 150 ms, then four short ones on the same CPU."
echo "   After 10 ms of CPU it is marked CPU-intensive and stops holding the pool,"
echo "   so the short ones run beside it instead of waiting 150 ms."
ctl submit demo --cpu 0 -- "$probe" spin 150 "$tmp/c.log" "hog" >/dev/null
for i in 1 2 3 4; do ctl submit demo --cpu 0 -- "$probe" spin 2 "$tmp/c.log" "short$i" >/dev/null; done
ctl flush demo
timeline "$tmp/c.log"

say "4. A C service (tests/demo-callbacks.c) queues callbacks and exec items on CPU 0."
echo "   Three callbacks that block (sleep 300 ms) run together, as items do; three"
echo "   that compute for 4 ms take turns with three exec items that do the same:"
echo "   callbacks and exec items share the CPU's one concurrency level (the pools"
echo "   count the service's worker threads and its callbacks)."
"$build/tests/demo-callbacks" "$tmp/d.log" "$probe" 3 3 &
client=$!
sleep 0.15
ctl pools | sed -n '1,2p'
wait "$client"
timeline "$tmp/d.log"

say "5. Statistics (the kernel's wq_monitor.py columns) and pools afterwards"
ctl stats | sed -n '1p;/^demo /p'
ctl pools

say "Stopping cmwqd (SIGTERM)"
kill "$daemon"
wait "$daemon" && echo "  cmwqd exited cleanly"
daemon=
tail -n 2 "$tmp/cmwqd.log" | sed 's/^/  /'
