#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The event-loop examples of examples/ against a real cmwqd on a private
# socket: each queues callbacks and an exec item and exits 0 only when all
# of them completed as expected.  TAP output; an example that configure did
# not build (no GLib) is a SKIP, with configure's reason.
set -u

cmwqd=${CMWQD:?}
build=${CMWQ_TEST_BUILDDIR:?}
examples="sd-event libevent glib"

echo "1..3"
tmp=$(mktemp -d /tmp/cmwq-examples.XXXXXX)
chmod 0755 "$tmp"
pid=
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

sock=$tmp/cmwqd.sock
"$cmwqd" --socket "$sock" --config /dev/null --state-dir "$tmp/state" 2>"$tmp/cmwqd.log" &
pid=$!
i=0
until [ -S "$sock" ]; do
        i=$((i + 1))
        if [ $i -ge 150 ] || ! kill -0 "$pid" 2>/dev/null; then
                echo "Bail out! cmwqd did not listen within 15 s:"
                sed 's/^/# /' "$tmp/cmwqd.log"
                exit 1
        fi
        sleep 0.1
done

n=0
for ex in $examples; do
        n=$((n + 1))
        prog=$build/examples/$ex
        if [ ! -x "$prog" ]; then
                echo "ok $n - examples/$ex.c # SKIP not built: configure found no $ex development files"
                continue
        fi
        # A stuck example fails by its own 60 s timeout; this is the backstop.
        if timeout 120 "$prog" "$sock" >"$tmp/$ex.out" 2>&1; then
                echo "ok $n - examples/$ex.c: callbacks and an exec item completed through the loop"
        else
                echo "not ok $n - examples/$ex.c exited $?"
        fi
        sed 's/^/# /' "$tmp/$ex.out"
done

kill "$pid" && wait "$pid"
st=$?
pid=
[ $st -eq 0 ] || { echo "# cmwqd exited $st:"; sed 's/^/# /' "$tmp/cmwqd.log"; exit 1; }
