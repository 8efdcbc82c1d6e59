#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The systemd units as built pass "systemd-analyze verify".  ExecStart names
# the installed cmwqd ($CMWQ_SBINDIR), which need not exist yet; the copies
# checked here name the cmwqd just built instead, so that verify also checks
# that the program exists and is executable.  TAP output.
set -u

builddir=${CMWQ_TEST_BUILDDIR:?}
srcdir=${CMWQ_TEST_SRCDIR:?}/..
sbindir=${CMWQ_SBINDIR:?}
analyze=${SYSTEMD_ANALYZE:-}

if [ -z "$analyze" ] || [ ! -x "$analyze" ]; then
        echo "1..0 # SKIP systemd-analyze not found at configure time"
        exit 0
fi

echo "1..5"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $*"; }

# copy_units SRC DEST: DEST gets the units of SRC (a directory of the build
# or source tree) with the built cmwqd in ExecStart.
copy_units() {
        mkdir -p "$2"
        for f in "$builddir/$1/cmwqd.service" "$srcdir/$1/cmwqd.socket"; do
                sed "s|^ExecStart=$sbindir/cmwqd|ExecStart=$builddir/cmwqd|" "$f" >"$2/${f##*/}"
        done
}

# verify DIR [--user]: no diagnostics at all, not only a zero exit.
verify() {
        dir=$1
        shift
        # Documentation= is checked below against the source tree; man(1)
        # may not be installed and would look at installed pages anyway.
        (cd "$dir" && XDG_RUNTIME_DIR=$tmp/runtime SYSTEMD_LOG_COLOR=0 \
                "$analyze" "$@" verify --man=no "$dir/cmwqd.socket" "$dir/cmwqd.service") >"$dir.out" 2>&1
        status=$?
        if [ $status -eq 0 ] && [ ! -s "$dir.out" ]; then
                return 0
        fi
        echo "# systemd-analyze verify exited $status:"
        sed 's/^/#   /' "$dir.out"
        return 1
}

mkdir -p "$tmp/runtime"
copy_units systemd "$tmp/system"
copy_units systemd/user "$tmp/user"

if verify "$tmp/system"; then ok "system units verify"; else not_ok "system units verify"; fi
if verify "$tmp/user" --user; then ok "user units verify"; else not_ok "user units verify"; fi

# The generated services run the cmwqd that "make install" puts in sbindir.
for f in systemd/cmwqd.service systemd/user/cmwqd.service; do
        exec_start=$(sed -n 's/^ExecStart=//p' "$builddir/$f")
        case $exec_start in
        "$sbindir/cmwqd" | "$sbindir/cmwqd --user") ok "$f runs $exec_start" ;;
        *) not_ok "$f runs '$exec_start', not $sbindir/cmwqd" ;;
        esac
done

# Every manual page a unit points to is one we ship.
missing=
for page in $(sed -n 's/^Documentation=//p' "$srcdir"/systemd/*.in "$srcdir"/systemd/*.socket \
                "$srcdir"/systemd/user/*.in "$srcdir"/systemd/user/*.socket | tr ' ' '\n' | sort -u); do
        file=$(echo "$page" | sed -n 's/^man:\([^(]*\)(\([0-9]\))$/\1.\2/p')
        [ -n "$file" ] && [ -f "$srcdir/man/$file" ] || missing="$missing $page"
done
if [ -z "$missing" ]; then ok "Documentation= names shipped manual pages"; else not_ok "not shipped:$missing"; fi
