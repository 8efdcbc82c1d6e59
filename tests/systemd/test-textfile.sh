#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The node_exporter textfile collector units as built: they verify, and the
# service's command, run against a real cmwqd, leaves a complete cmwq.prom
# (replaced by a rename, nothing left beside it) that promtool accepts
# where promtool is installed (Debian: prometheus).  TAP output.
set -u

builddir=${CMWQ_TEST_BUILDDIR:?}
srcdir=${CMWQ_TEST_SRCDIR:?}/..
bindir=${CMWQ_BINDIR:?}
cmwqd=${CMWQD:?}
cmwqctl=${CMWQCTL:?}
analyze=${SYSTEMD_ANALYZE:-}
promtool=${PROMTOOL:-$(command -v promtool || true)}

if [ "$(id -u)" -ne 0 ]; then
        echo "1..0 # SKIP needs root (a system instance of cmwqd, as the service sees it)"
        exit 0
fi

echo "1..6"
tmp=$(mktemp -d /tmp/cmwq-textfile.XXXXXX)
pid=
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $*"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $*"; }

# The units with the built cmwqctl and a directory of the test's own.
mkdir -p "$tmp/units" "$tmp/textfile" "$tmp/runtime"
sed -e "s|^ExecStart=$bindir/cmwqctl|ExecStart=$builddir/cmwqctl|" \
    -e "s|/var/lib/prometheus/node-exporter|$tmp/textfile|g" \
    "$builddir/systemd/cmwq-textfile.service" >"$tmp/units/cmwq-textfile.service"
cp "$srcdir/systemd/cmwq-textfile.timer" "$tmp/units/"

if [ -z "$analyze" ] || [ ! -x "$analyze" ]; then
        skip "systemd-analyze not found at configure time"
else
        (cd "$tmp/units" && XDG_RUNTIME_DIR=$tmp/runtime SYSTEMD_LOG_COLOR=0 "$analyze" verify --man=no \
                "$tmp/units/cmwq-textfile.service" "$tmp/units/cmwq-textfile.timer") >"$tmp/verify.out" 2>&1
        if [ $? -eq 0 ] && [ ! -s "$tmp/verify.out" ]; then
                ok "cmwq-textfile.service and .timer verify"
        else
                sed 's/^/#   /' "$tmp/verify.out"
                not_ok "cmwq-textfile.service and .timer verify"
        fi
fi

exec_start=$(sed -n 's/^ExecStart=//p' "$builddir/systemd/cmwq-textfile.service")
case $exec_start in
"$bindir/cmwqctl stats --format=prometheus --output=/var/lib/prometheus/node-exporter/cmwq.prom")
        ok "the service runs the installed cmwqctl into node_exporter's directory" ;;
*) not_ok "the service runs '$exec_start'" ;;
esac

# A cmwqd of the test's own, and some work done.
"$cmwqd" --socket "$tmp/cmwqd.sock" --no-store --no-dbus >"$tmp/cmwqd.log" 2>&1 &
pid=$!
i=0
until "$cmwqctl" -s "$tmp/cmwqd.sock" list >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 200 ] || break
        sleep 0.05
done
"$cmwqctl" -s "$tmp/cmwqd.sock" submit system --wait -- /bin/true >/dev/null 2>&1

# The service's command, as the service runs it (its socket aside).
cmd=$(sed -n 's/^ExecStart=//p' "$tmp/units/cmwq-textfile.service")
prom=$tmp/textfile/cmwq.prom
# shellcheck disable=SC2086 # the unit's words
if CMWQ_SOCKET=$tmp/cmwqd.sock $cmd && [ -f "$prom" ] &&
   grep -q '^# TYPE cmwq_workqueue_started_total counter$' "$prom" &&
   grep -q '^cmwq_workqueue_started_total{workqueue="system",uid="0"} 1$' "$prom" &&
   [ "$(stat -c %a "$prom")" = 644 ] && [ "$(ls "$tmp/textfile")" = cmwq.prom ]; then
        ok "the service's command writes cmwq.prom, 0644, and nothing beside it"
else
        ls -l "$tmp/textfile" | sed 's/^/#   /'
        not_ok "the service's command writes cmwq.prom, 0644, and nothing beside it"
fi

# The next run replaces the file by a rename: a reader that opened the old
# one reads it whole.
exec 3<"$prom"
before=$(stat -c %i "$prom")
# shellcheck disable=SC2086
CMWQ_SOCKET=$tmp/cmwqd.sock $cmd
after=$(stat -c %i "$prom")
if [ "$before" != "$after" ] && tail -n 1 <&3 | grep -q '^cmwq_pool_callbacks_total{cpu="unbound",priority="highpri"} 0$'; then
        ok "a refresh replaces cmwq.prom by a rename"
else
        not_ok "a refresh replaces cmwq.prom by a rename (inode $before -> $after)"
fi
exec 3<&-

if [ -z "$promtool" ] || [ ! -x "$promtool" ]; then
        skip "promtool not installed (Debian: prometheus; or set PROMTOOL)"
elif "$promtool" check metrics <"$prom" >"$tmp/promtool.out" 2>&1; then
        ok "promtool check metrics accepts cmwq.prom"
else
        sed 's/^/#   /' "$tmp/promtool.out"
        not_ok "promtool check metrics accepts cmwq.prom"
fi

# Without node_exporter's directory the service is skipped, not failed.
if grep -q '^ConditionPathIsDirectory=/var/lib/prometheus/node-exporter$' "$builddir/systemd/cmwq-textfile.service"; then
        ok "the service runs only where node_exporter's directory exists"
else
        not_ok "the service runs only where node_exporter's directory exists"
fi
