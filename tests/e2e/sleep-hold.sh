#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# A system-sleep hook of the end-to-end tier, installed only in its
# container (systemd-sleep runs it as "HOOK pre|post suspend").  Before
# systemd-sleep writes the sleep state (to the test's plain file that stands
# in for /sys/power/state), it holds the machine "asleep" until inner.sh
# creates /run/cmwq-e2e/release, at most 60 s: logind has sent
# PrepareForSleep(true) and not yet PrepareForSleep(false), so the test can
# look at a suspended cmwqd.  It marks both edges in the test's order log.
#
# It holds in "pre", not "post": systemd-sleep runs the hooks of a phase in
# parallel, and cmwqd's own hook (systemd/system-sleep) thaws in "post".

[ "$(cat /run/systemd/container 2>/dev/null)" = systemd-nspawn ] || exit 0
[ -s /var/lib/cmwq-e2e/marker ] || exit 0
[ "$1" = pre ] || exit 0

dir=/run/cmwq-e2e
log=/var/tmp/cmwq-e2e/order
mkdir -p "$dir"
echo asleep >>"$log"
touch "$dir/asleep"
i=0
while [ ! -e "$dir/release" ] && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
done
echo resumed >>"$log"
