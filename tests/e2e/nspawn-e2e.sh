#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The end-to-end tier (tests/e2e/README.md): a Debian 12 system with real
# systemd, logind and D-Bus, booted in systemd-nspawn, installs cmwq's Debian
# packages, runs cmwqd under its unit, goes through a suspend whose "sleep" is
# a write to a plain file, and purges the packages.  This script runs on the
# host: it makes (or reuses) the root file system, builds the packages from
# the build tree's "make distdir" with dpkg-buildpackage, checks them with
# lintian, boots the container with the packages in its volatile overlay,
# installs them with apt-get, runs inner.sh and purge.sh inside through
# nsenter, and always tears it down.  TAP output; the plan counts inner.sh's
# and purge.sh's checks too.
#
# Environment: CMWQ_TEST_BUILDDIR (the configured build tree: its "make
# distdir" is what the packages are built from), CMWQ_TEST_SRCDIR (tests/);
# optional CMWQ_E2E_ROOTFS (default /var/tmp/cmwq-e2e-rootfs),
# CMWQ_E2E_MIRROR (default: the Debian mirror of this machine's APT sources)
# and CMWQ_E2E_DEBS (a directory of .debs built before: used instead of
# building them, to iterate on the scenario faster).
set -uo pipefail

OUTER_CHECKS=5
INNER_CHECKS=32             # keep in step with inner.sh
PURGE_CHECKS=4              # keep in step with purge.sh
SUITE=bookworm
# systemd, logind (libpam-systemd) and D-Bus for the system under test; the
# libraries that cmwqd and cmwqctl link; passwd and util-linux for the test's
# user; procps for pgrep; libprotobuf-c-dev, on which libcmwq-client-dev
# depends (the container has no network: apt-get finds every dependency of
# the packages installed already).
PACKAGES=systemd,systemd-sysv,dbus,libpam-systemd,libevent-2.1-7,libprotobuf-c1,libsystemd0,passwd,util-linux,procps,libprotobuf-c-dev

builddir=${CMWQ_TEST_BUILDDIR:?}
testsdir=${CMWQ_TEST_SRCDIR:?}
rootfs=${CMWQ_E2E_ROOTFS:-/var/tmp/cmwq-e2e-rootfs}

echo "1..$((OUTER_CHECKS + INNER_CHECKS + PURGE_CHECKS))"
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $*"; }
bail() { echo "Bail out! $*"; exit 1; }
diag() { sed 's/^/# /'; }

[ "$(id -u)" -eq 0 ] || bail "the end-to-end tier needs root (debootstrap, systemd-nspawn)"
for tool in debootstrap systemd-nspawn nsenter flock dpkg-buildpackage dh lintian; do
        command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null ||
                bail "$tool not found (Debian: debootstrap systemd-container util-linux dpkg-dev debhelper lintian)"
done
PATH=$PATH:/usr/sbin:/sbin

work=$(mktemp -d /var/tmp/cmwq-e2e.XXXXXX) || bail "cannot make a work directory"
nspawn_pid=
leader=

# Stops the container: an orderly poweroff first (nspawn turns SIGTERM into
# one), then SIGKILL to its init, which ends everything in its namespaces.
teardown() {
        if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
                kill -TERM "$nspawn_pid" 2>/dev/null
                for _ in $(seq 150); do
                        kill -0 "$nspawn_pid" 2>/dev/null || break
                        sleep 0.2
                done
                if kill -0 "$nspawn_pid" 2>/dev/null; then
                        echo "# the container did not power off within 30 s: killing it"
                        [ -n "$leader" ] && kill -KILL "$leader" 2>/dev/null
                        kill -KILL "$nspawn_pid" 2>/dev/null
                fi
                wait "$nspawn_pid" 2>/dev/null
        fi
        nspawn_pid=
        rm -rf "$work"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# The first Debian mirror for $SUITE in this machine's APT sources, one-line
# (sources.list) or deb822 (*.sources) style: there is no other network.
apt_mirror() {
        local f
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
                [ -f "$f" ] || continue
                awk -v suite="$SUITE" '
                        $1 == "deb" {
                                i = 2
                                if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                                if ($(i + 1) == suite) { print $i; exit }
                        }' "$f"
        done
        for f in /etc/apt/sources.list.d/*.sources; do
                [ -f "$f" ] || continue
                awk -v suite="$SUITE" '
                        BEGIN { RS = ""; FS = "\n" }
                        {
                                types = uris = suites = ""; enabled = "yes"
                                for (i = 1; i <= NF; i++) {
                                        if ($i ~ /^#/) continue
                                        split($i, kv, ":[ \t]*")
                                        v = substr($i, index($i, ":") + 1); sub(/^[ \t]+/, "", v)
                                        if (kv[1] == "Types") types = v
                                        else if (kv[1] == "URIs") uris = v
                                        else if (kv[1] == "Suites") suites = v
                                        else if (kv[1] == "Enabled") enabled = v
                                }
                                if (enabled != "no" && (" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ")) {
                                        split(uris, u, /[ \t]+/); print u[1]; exit
                                }
                        }' "$f"
        done
}

# The cached root file system is usable if it was finished for this package
# list and every package is still installed in it.
rootfs_ok() {
        [ "$(cat "$rootfs/.cmwq-e2e-complete" 2>/dev/null)" = "$SUITE $PACKAGES" ] || return 1
        [ -x "$rootfs/usr/lib/systemd/systemd" ] || return 1
        local status
        status=$(chroot "$rootfs" dpkg-query -W -f='${Status}\n' ${PACKAGES//,/ } 2>/dev/null) || return 1
        [ -z "$(echo "$status" | grep -v -x 'install ok installed')" ]
}

make_rootfs() {
        local mirror=${CMWQ_E2E_MIRROR:-$(apt_mirror | head -1)} start=$SECONDS
        [ -n "$mirror" ] || { echo "# no Debian $SUITE mirror in /etc/apt/sources.list*"; return 1; }
        echo "# debootstrap $SUITE from $mirror into $rootfs"
        rm -rf "$rootfs.new"
        if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs.new" "$mirror" \
                >"$work/debootstrap.log" 2>&1; then
                tail -20 "$work/debootstrap.log" | diag
                rm -rf "$rootfs.new"
                return 1
        fi
        echo "$SUITE $PACKAGES" >"$rootfs.new/.cmwq-e2e-complete"
        rm -rf "$rootfs"
        mv "$rootfs.new" "$rootfs"
        echo "# debootstrap took $((SECONDS - start)) s"
}

# One e2e run at a time on this machine: the cache is shared.
exec 9>"$rootfs.lock"
flock -w 900 9 || bail "another end-to-end run holds $rootfs.lock"

# --- 1: the root file system
if rootfs_ok; then
        ok "Debian $SUITE root file system cached in $rootfs"
elif make_rootfs && rootfs_ok; then
        ok "Debian $SUITE root file system made in $rootfs"
else
        not_ok "Debian $SUITE root file system"
        bail "no root file system to boot"
fi

# --- 2: the Debian packages, built from what "make dist" would ship (the
# tree's debian/ included), without their test suite: "make check" is running
# it already.  A few minutes on two CPUs; CMWQ_E2E_DEBS skips it.
debs=$work/debs
mkdir -p "$debs"
build_debs() {
        local src=$work/src
        if [ -n "${CMWQ_E2E_DEBS:-}" ]; then
                echo "# the packages of $CMWQ_E2E_DEBS (CMWQ_E2E_DEBS), not built from this tree"
                cp "$CMWQ_E2E_DEBS"/*.deb "$debs"/
                return
        fi
        make -C "$builddir" distdir distdir="$src" >"$work/dist.log" 2>&1 || { tail -20 "$work/dist.log" | diag; return 1; }
        # (its own make, not the one of "make check" that runs this script)
        (cd "$src" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
                DEB_BUILD_OPTIONS="nocheck noautodbgsym parallel=$(nproc)" \
                dpkg-buildpackage -b -us -uc) >"$work/dpkg-buildpackage.log" 2>&1 ||
                { tail -30 "$work/dpkg-buildpackage.log" | diag; return 1; }
        mv "$work"/*.deb "$debs"/
}
start=$SECONDS
if build_debs && ls "$debs"/cmwqd_*.deb "$debs"/libcmwq-client0_*.deb "$debs"/libcmwq-client-dev_*.deb >/dev/null; then
        ok "dpkg-buildpackage -b: $(cd "$debs" && echo *.deb) ($((SECONDS - start)) s)"
else
        not_ok "dpkg-buildpackage -b of the tree's debian/"
        bail "no packages to test"
fi
# No errors; the warnings are listed (and explained in debian/README.source).
lintian_ok() {
        local out st
        out=$(lintian --fail-on error "$debs"/*.deb 2>&1)
        st=$?
        [ -z "$out" ] || echo "$out" | diag
        return $st
}
if lintian_ok; then
        ok "lintian: no errors in the packages"
else
        not_ok "lintian: no errors in the packages"
fi

token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
stage=$work/stage
install -D -m 0644 -t "$stage/var/lib/cmwq-e2e/debs" "$debs"/*.deb
install -D -m 0755 "$testsdir/e2e/inner.sh" "$stage/var/lib/cmwq-e2e/inner.sh"
install -D -m 0755 "$testsdir/e2e/purge.sh" "$stage/var/lib/cmwq-e2e/purge.sh"
install -D -m 0755 "$testsdir/e2e/sleep-hold.sh" "$stage/usr/lib/systemd/system-sleep/cmwq-e2e-hold"
echo "$token" >"$stage/var/lib/cmwq-e2e/marker"

# What the container sees as /sys/power: a plain file "state", so that
# systemd-sleep writes there and never to the kernel; the token tells the
# inner script that the bind is ours.
mkdir -p "$work/power"
echo "freeze mem" >"$work/power/state"
echo "$token" >"$work/power/cmwq-e2e-token"

# --- 3: boot it.  No systemd on this machine to register with or to make a
# scope for the container: --register=no --keep-unit.  --volatile=overlay
# keeps the cached tree untouched (changes go to a tmpfs).  nspawn's system
# call filter leaves out perf_event_open, which the sleep detector uses.
systemd-nspawn --quiet -b --register=no --keep-unit --volatile=overlay --private-network \
        --system-call-filter=perf_event_open \
        --console=read-only --bind="$work/power:/sys/power" -D "$rootfs" \
        >"$work/boot.log" 2>&1 </dev/null &
nspawn_pid=$!

# The leader is nspawn's child that runs systemd as PID 1 of the container.
for _ in $(seq 100); do
        for pid in $(cat /proc/"$nspawn_pid"/task/*/children 2>/dev/null); do
                [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = systemd ] && leader=$pid
        done
        [ -n "$leader" ] && break
        kill -0 "$nspawn_pid" 2>/dev/null || break
        sleep 0.1
done
in_container() {
        nsenter --target "$leader" --all -- \
                env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root \
                "$@"
}
# "is-system-running --wait" once the manager answers at all (right after the
# exec, it has no socket yet).
system_state() { nsenter --target "$leader" --all -- /bin/systemctl is-system-running 2>&1; }
state=
if [ -n "$leader" ]; then
        for _ in $(seq 300); do
                state=$(system_state)
                case $state in initializing | starting | running | degraded | maintenance | stopping) break ;; esac
                kill -0 "$nspawn_pid" 2>/dev/null || break
                sleep 0.1
        done
        state=$(timeout 120 nsenter --target "$leader" --all -- /bin/systemctl is-system-running --wait 2>&1)
fi
if [ "$state" = running ]; then
        ok "the container booted (leader pid $leader), its system is running"
else
        not_ok "the container booted: '$state'"
        tail -30 "$work/boot.log" | diag
        [ -n "$leader" ] && in_container systemctl --failed --no-pager 2>&1 | diag
        bail "the container did not come up"
fi

# --- 4: the test's files into the container's overlay (keeping merged /usr's
# symlinks), then the packages as an administrator installs them: their
# postinst enables and starts the service and its socket (Debian's default).
installed() {
        local out st
        tar -C "$stage" -cf - . | in_container tar -C / --keep-directory-symlink -xf - || return 1
        out=$(in_container sh -c 'cd /var/lib/cmwq-e2e/debs && DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -q --no-install-recommends ./cmwqd_*.deb ./libcmwq-client0_*.deb ./libcmwq-client-dev_*.deb' 2>&1)
        st=$?
        echo "$out" | grep -v '^\(Selecting\|Preparing\|Unpacking\|(Reading\)' | tail -15 | diag
        [ $st -eq 0 ] || return 1
        out=$(in_container systemctl is-enabled cmwqd.service cmwqd.socket; in_container systemctl is-active cmwqd.service cmwqd.socket)
        echo "# is-enabled, is-active:" $out
        [ "$(echo $out)" = "enabled enabled active active" ]
}
if installed; then
        ok "apt-get install ./cmwqd_*.deb ./libcmwq-client*.deb: cmwqd.service and cmwqd.socket enabled and running"
else
        not_ok "apt-get install ./cmwqd_*.deb ./libcmwq-client*.deb: cmwqd.service and cmwqd.socket enabled and running"
        bail "the packages did not install"
fi

# --- the scenario, inside
in_container /var/lib/cmwq-e2e/inner.sh "$token" "$n"
status=$?
n=$((n + INNER_CHECKS))
in_container /var/lib/cmwq-e2e/purge.sh "$token" "$n" || status=1
n=$((n + PURGE_CHECKS))
if [ $status -ne 0 ]; then
        echo "# inner.sh exited $status; the daemon's journal:"
        in_container journalctl -b --no-pager -o short-monotonic -u cmwqd -u systemd-logind \
                -u systemd-suspend 2>&1 | tail -60 | diag
fi
# What systemd-sleep wrote went to our file (inner.sh checked it too).
echo "# /sys/power/state as the container left it: '$(cat "$work/power/state")'"
exit $status
