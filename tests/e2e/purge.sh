#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The removal of the Debian packages, run by nspawn-e2e.sh inside its
# container after inner.sh: "purge.sh TOKEN N" prints TAP results numbered
# from N + 1, exactly PURGE_CHECKS of nspawn-e2e.sh of them.  With cmwqd
# running an item, "apt-get remove" must stop it and leave nothing running
# but keep the state; "apt-get purge" must leave nothing of the packages.
set -u

token=${1:-}
n=${2:-0}
bail() { echo "Bail out! $*"; exit 1; }

# It removes packages from the system it runs on: only in the test's container.
[ "$(cat /run/systemd/container 2>/dev/null)" = systemd-nspawn ] ||
        bail "purge.sh runs only inside the cmwq end-to-end container (no systemd-nspawn here)"
[ -n "$token" ] && [ "$(cat /var/lib/cmwq-e2e/marker 2>/dev/null)" = "$token" ] ||
        bail "purge.sh runs only inside the cmwq end-to-end container (no marker, or not ours)"

check() { # check DESCRIPTION COMMAND...: one TAP result
        local desc=$1
        shift
        n=$((n + 1))
        if "$@"; then
                echo "ok $n - $desc"
        else
                echo "not ok $n - $desc"
                return 1
        fi
}
say() { sed 's/^/# /'; }
poll() { # poll SECONDS COMMAND...: until COMMAND succeeds, every 0.1 s
        local i=0 max=$(($1 * 10))
        shift
        until "$@"; do
                i=$((i + 1))
                [ $i -ge $max ] && return 1
                sleep 0.1
        done
}
apt() { DEBIAN_FRONTEND=noninteractive apt-get -y -q "$@" 2>&1 | say; return "${PIPESTATUS[0]}"; }

pkgs=(cmwqd libcmwq-client0 libcmwq-client-dev)
# What the packages put on the system (files and links, not directories nor
# merged /usr's links to them).
files=$(dpkg -L "${pkgs[@]}" | sort -u | while read -r f; do [ -d "$f" ] || echo "$f"; done)

# A machine in use: the daemon running an item of another user's.
systemctl start cmwqd
item=$(runuser -u e2e -- cmwqctl submit system -- sleep 3600)
running() { cmwqctl --json show "$item" | grep -q '"state":"running"'; }
poll 10 running || echo "item '$item' did not start" | say
nothing_runs() {
        ! pgrep -x cmwqd >/dev/null && ! pgrep -f '^sleep 3600$' >/dev/null &&
                [ "$(systemctl is-active cmwqd.socket cmwqd.service | tr '\n' ' ')" = "inactive inactive " ]
}

was_running=no
running && was_running=yes
state_before=no
[ -d /var/lib/cmwqd ] && state_before=yes
activatable() { busctl --system list --activatable --no-legend 2>/dev/null | grep -q '^org\.cmwq\.cmwqd1 '; }
activatable_before=no
activatable && activatable_before=yes

apt remove "${pkgs[@]}"
st=$?
what_runs() { echo "$1: $(ps -eo pid=,user=,args= | grep -e '[c]mwqd' -e '[s]leep 3600' | tr -s ' ' | paste -sd';')" | say; }
what_runs "after the removal"
removed() { [ $st -eq 0 ] && [ $was_running = yes ] && poll 10 nothing_runs; }
check "apt-get remove (exit $st) stops cmwqd and its socket and kills its item (running before: $was_running)" removed
check "apt-get remove keeps the state directory /var/lib/cmwqd (there before: $state_before)" \
        bash -c "[ $state_before = yes ] && [ -d /var/lib/cmwqd ] &&
                [ \"\$(dpkg-query -W -f='\${Status}' cmwqd)\" = 'deinstall ok config-files' ]"

# The packages dpkg still knows after the removal: those with configuration
# files or state (cmwqd's postrm purges /var/lib/cmwqd); apt-get purge would
# refuse the others ("Unable to locate package").
known=$(dpkg-query -W -f='${Package} ' "${pkgs[@]}" 2>/dev/null)
echo "after the removal dpkg still knows: $known" | say
apt purge $known
st=$?
forgotten() { # no package of ours in dpkg's database
        local p s
        for p in "${pkgs[@]}"; do
                s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
                [ -z "$s" ] || [ "$s" = "unknown ok not-installed" ] || { echo "$p: $s" | say; return 1; }
        done
}
purged() { [ $st -eq 0 ] && [[ " $known" == *" cmwqd "* ]] && forgotten; }
check "apt-get purge $known(exit $st): dpkg knows none of the packages any more" purged

left=
for f in $files /var/lib/cmwqd /run/cmwqd /etc/systemd/system/*.wants/cmwqd.* \
        /var/lib/systemd/deb-systemd-helper-enabled/cmwqd.* \
        /var/lib/systemd/deb-systemd-helper-enabled/*.wants/cmwqd.*; do
        [ -e "$f" ] || [ -L "$f" ] && left+=" $f"
done
for u in cmwqd.service cmwqd.socket; do
        [ "$(systemctl show -P LoadState $u)" = not-found ] || left+=" unit:$u"
done
[ $activatable_before = yes ] || echo "org.cmwq.cmwqd1 was not activatable before the removal" | say
activatable && left+=" bus-name:org.cmwq.cmwqd1"
nothing_runs || { left+=" processes"; what_runs "after the purge"; }
[ -z "$left" ] || echo "left after the purge:$left" | say
check "nothing of cmwq is left: no file of the packages, no unit, no enablement link, no state or runtime directory, no process" \
        [ -z "$left" -a $activatable_before = yes ]
