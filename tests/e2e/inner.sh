#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The end-to-end scenario, run by nspawn-e2e.sh inside the container it
# booted: "inner.sh TOKEN N" prints TAP results numbered from N + 1, exactly
# INNER_CHECKS of nspawn-e2e.sh of them, whatever fails on the way.
#
# It suspends the machine it runs on: so it refuses to do anything unless it
# is in a systemd-nspawn container that carries the outer script's marker,
# and never suspends unless /sys/power/state is the outer script's plain file.
set -u

token=${1:-}
n=${2:-0}
bail() { echo "Bail out! $*"; exit 1; }

[ "$(cat /run/systemd/container 2>/dev/null)" = systemd-nspawn ] ||
        bail "inner.sh runs only inside the cmwq end-to-end container (no systemd-nspawn here)"
[ -n "$token" ] && [ "$(cat /var/lib/cmwq-e2e/marker 2>/dev/null)" = "$token" ] ||
        bail "inner.sh runs only inside the cmwq end-to-end container (no marker, or not ours)"

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
# The checks that need cmwqd's logind inhibitor are TODO (expected to fail,
# and counted as neither passed nor failed) while the installed cmwqd has no
# such thing: it is being written on another branch.  Once cmwqd has it (its
# --no-sleep-inhibitor option), they count like every other check.
if cmwqd --help | grep -q -- --no-sleep-inhibitor; then
        todo_inhibitor=
else
        todo_inhibitor=" # TODO this cmwqd takes no logind sleep inhibitor yet"
fi
check_inhibitor() { # check_inhibitor DESCRIPTION COMMAND...
        local desc=$1
        shift
        check "$desc$todo_inhibitor" "$@"
}
# The same for the D-Bus front end (cmwqd's --no-dbus option).
if cmwqd --help | grep -q -- --no-dbus; then
        todo_dbus=
else
        todo_dbus=" # TODO this cmwqd has no D-Bus interface yet"
fi
check_dbus() { # check_dbus DESCRIPTION COMMAND...
        local desc=$1
        shift
        check "$desc$todo_dbus" "$@"
}
say() { sed 's/^/# /'; }
# poll SECONDS COMMAND...: until COMMAND succeeds, every 0.1 s
poll() {
        local i=0 max=$(($1 * 10))
        shift
        until "$@"; do
                i=$((i + 1))
                [ $i -ge $max ] && return 1
                sleep 0.1
        done
}

user=e2e
dir=/var/tmp/cmwq-e2e
log=$dir/order
ctl() { cmwqctl "$@"; }
as_user() { (cd /home/$user && runuser -u $user -- "$@"); }

# The field of one workqueue in "cmwqctl --json list", e.g. "frozen":true
wq_field() { # wq_field NAME FIELD
        cmwqctl --json list | grep -o "{\"name\":\"$1\"[^}]*}" | grep -o "\"$2\":[a-z0-9]*" | cut -d: -f2
}
item_state() {
        cmwqctl --json show "$1" | grep -o '"state":"[a-z_]*"' | cut -d'"' -f4
}
holds_inhibitor() {
        systemd-inhibit --list --no-pager --no-legend 2>/dev/null | grep 'cmwqd.*sleep.*delay' >/dev/null
}

# --- never suspend unless the sleep goes to our file
power_is_ours() {
        [ -f /sys/power/state ] && [ ! -L /sys/power/state ] &&
                [ "$(stat -f -c %T /sys/power)" != sysfs ] &&
                [ "$(cat /sys/power/cmwq-e2e-token 2>/dev/null)" = "$token" ] &&
                [ "$(cat /sys/power/state)" = "freeze mem" ]
}
check "/sys/power/state is the test's plain file, not the kernel's" power_is_ours ||
        bail "/sys/power is not the test's directory: refusing to suspend anything"

# --- the system unit, started the way an administrator does
useradd -m -U -s /bin/bash $user && groupadd e2e-extra && usermod -aG e2e-extra $user
uid=$(id -u $user)
mkdir -p $dir && chmod 1777 $dir

started() {
        systemctl start cmwqd &&
                [ "$(systemctl is-active cmwqd.socket cmwqd.service | tr '\n' ' ')" = "active active " ]
}
check "systemctl start cmwqd: socket and service active" started
status=$(systemctl show -P StatusText cmwqd)
echo "cmwqd's status: $status" | say
check "READY and STATUS through sd_notify, on the socket from cmwqd.socket" \
        bash -c "[[ '$status' == 'Serving '*' on /run/cmwqd/cmwqd.sock, '* ]] &&
                journalctl -b -u cmwqd --no-pager | grep -q 'listening on /run/cmwqd/cmwqd.sock (socket from systemd)'"
check "the perf sleep detector works under the unit's capabilities" \
        bash -c "[[ '$status' == *'sleep detector perf'* ]]"

cg=$(ctl submit system --wait -- cat /proc/self/cgroup | grep '^0::')
echo "an item's cgroup: $cg" | say
check "Delegate=yes: items get cgroups below the service's" \
        bash -c "[[ '$status' == *'items in cgroups'* && '$cg' == *'/system.slice/cmwqd.service/cmwq-items-'*'/item-'* ]]"

# --- capabilities, each by what it is for
ids=$(as_user cmwqctl submit system --wait -- /bin/sh -c 'id -u; id -g; id -G | tr " " "\n" | sort -n | tr "\n" " "')
want=$(printf '%s\n%s\n%s' "$uid" "$(id -g $user)" "$(id -G $user | tr ' ' '\n' | sort -n | tr '\n' ' ')")
echo "another user's item: $(echo $ids); wanted $(echo $want)" | say
check "CAP_SETUID, CAP_SETGID: another user's item has that user's uid, gid and groups" [ "$ids" = "$want" ]
check "root's item runs as root" [ "$(ctl submit system --wait -- id -u)" = 0 ]

where=$(as_user cmwqctl submit system --wait -- /bin/sh -c 'pwd; echo hi >/tmp/cmwq-e2e-from-item')
check "no ProtectHome=/PrivateTmp=: the item ran in /home/$user and wrote the real /tmp" \
        bash -c "[ '$where' = /home/$user ] && [ \"\$(stat -c %U /tmp/cmwq-e2e-from-item)\" = $user ]"

start=$SECONDS
as_user cmwqctl submit system --timeout 1 --wait -- sleep 60 2>&1 | say
st=${PIPESTATUS[0]}
check "CAP_KILL or cgroup.kill: another user's item is killed at its timeout (exit $st, 124 wanted)" \
        bash -c "[ $st -eq 124 ] && [ $((SECONDS - start)) -lt 20 ] && ! pgrep -u $user -x sleep"

# Without a cgroup (ProtectControlGroups= makes them read-only), killing the
# process group is all there is, and it needs CAP_KILL.
mkdir -p /run/systemd/system/cmwqd.service.d
printf '[Service]\nProtectControlGroups=yes\n' >/run/systemd/system/cmwqd.service.d/no-cgroups.conf
systemctl daemon-reload && systemctl restart cmwqd
nocg_status=$(systemctl show -P StatusText cmwqd)
start=$SECONDS
as_user cmwqctl submit system --timeout 1 --wait -- sleep 60 2>&1 | say
st=${PIPESTATUS[0]}
check "CAP_KILL: without cgroups too ($nocg_status), the item is killed at its timeout (exit $st)" \
        bash -c "[[ '$nocg_status' == *'process groups only'* ]] && [ $st -eq 124 ] &&
                [ $((SECONDS - start)) -lt 20 ] && ! pgrep -u $user -x sleep"
rm /run/systemd/system/cmwqd.service.d/no-cgroups.conf
systemctl daemon-reload && systemctl restart cmwqd

nice_root=$(ctl submit system_highpri --wait -- nice)
nice_user=$(as_user cmwqctl submit system_highpri --wait -- nice)
check "CAP_SYS_NICE: root's high-priority item runs at nice -20 (got $nice_root), another user's at 0 (got $nice_user)" \
        [ "$nice_root" = -20 -a "$nice_user" = 0 ]

# Root's items are bounded by the unit's set too: CAP_SETUID CAP_SETGID
# CAP_KILL CAP_SYS_NICE CAP_PERFMON = bits 7 6 5 23 38.
bounded() {
        local st bnd
        st=$(ctl submit system --wait -- cat /proc/self/status)
        bnd=$(echo "$st" | sed -n 's/^CapBnd:\t*//p')
        echo "root's item: CapBnd $bnd, $(echo "$st" | grep NoNewPrivs)" | say
        [ -n "$bnd" ] && [ $((0x$bnd & ~0x40008000e0)) -eq 0 ] && echo "$st" | grep -q '^NoNewPrivs:[[:space:]]*1$' &&
                as_user cmwqctl submit system --wait -- cat /proc/self/status | grep -q '^CapEff:[[:space:]]*0*$'
}
check "items have no capability outside the unit's bounding set, no new privileges, none at all for users" bounded

# --- journal fields: a queue's lines are found with journalctl CMWQ_QUEUE= (cmwqd(8), LOGGING);
# the queueing, start and end of items are logged at debug level.
mkdir -p /run/systemd/system/cmwqd.service.d
printf '[Service]\nExecStart=\nExecStart=%s --log-level=debug\n' "$(command -v cmwqd)" \
        >/run/systemd/system/cmwqd.service.d/debug-log.conf
systemctl daemon-reload && systemctl restart cmwqd
as_user cmwqctl create e2e_journal >/dev/null || echo "cannot create e2e_journal" | say
jid=$(as_user cmwqctl submit e2e_journal -- /bin/true) && as_user cmwqctl wait "$jid" >/dev/null ||
        echo "the item of e2e_journal did not run" | say
journal_fields() { # the queue's lines, and the item's end with its own fields
        local out
        out=$(journalctl -b -o json --no-pager CMWQ_QUEUE=e2e_journal)
        echo "$out" | grep -q '"MESSAGE":"Created workqueue e2e_journal ' &&
                echo "$out" | grep "\"CMWQ_ITEM\":\"$jid\"" | grep "\"CMWQ_UID\":\"$uid\"" |
                grep -q "\"MESSAGE\":\"Item $jid of workqueue e2e_journal finished: exit status 0\""
}
check "journalctl CMWQ_QUEUE=e2e_journal -o json: the queue's lines, item $jid's with CMWQ_ITEM= and CMWQ_UID=" \
        poll 10 journal_fields || journalctl -b -o json --no-pager CMWQ_QUEUE=e2e_journal | say
as_user cmwqctl destroy e2e_journal >/dev/null
rm /run/systemd/system/cmwqd.service.d/debug-log.conf
systemctl daemon-reload && systemctl restart cmwqd

# --- the D-Bus front end on the real system bus, with the installed policy
bus_cpus() { as_user busctl --system get-property org.cmwq.cmwqd1 /org/cmwq/cmwqd1 org.cmwq.cmwqd1.Manager CPUs; }
cpus=$(bus_cpus 2>&1)
check_dbus "another user reads org.cmwq.cmwqd1's Manager over the system bus (got '$cpus')" \
        [ "$cpus" = "u $(nproc)" ]

# --- suspend: the daemon's delay inhibitor, freeze, release, thaw
as_user cmwqctl create e2e_frz --ordered --freezable >/dev/null &&
        as_user cmwqctl create e2e_live --ordered >/dev/null || echo "cannot create the queues" | say
held=no
check_inhibitor "cmwqd holds a delay inhibitor on sleep" poll 10 holds_inhibitor && held=yes

# A freezable item that is running when the suspend comes is let finish.
as_user cmwqctl submit e2e_frz -- /bin/sh -c "echo long-start >>$log; sleep 2; echo long-end >>$log" >/dev/null
poll 10 grep -q long-start $log || echo "the long item did not start" | say

systemctl suspend
check "systemctl suspend is accepted" [ $? -eq 0 ]
asleep() { [ -e /run/cmwq-e2e/asleep ]; }
check "systemd-sleep runs the sleep hooks (the test's holds the sleep)" poll 60 asleep
order_has() { # order_has FIRST SECOND: both in the log, FIRST earlier
        local a b
        a=$(grep -n -x "$1" $log | head -1 | cut -d: -f1)
        b=$(grep -n -x "$2" $log | head -1 | cut -d: -f1)
        [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ]
}
check_inhibitor "the running freezable item finished before the sleep" order_has long-end asleep
check_inhibitor "cmwqd released the inhibitor it held for the sleep" bash -c "[ $held = yes ] && ! systemd-inhibit --list --no-pager --no-legend | grep -q 'cmwqd.*sleep.*delay'"
frz=$(wq_field e2e_frz frozen) live=$(wq_field e2e_live frozen) sysfrz=$(wq_field system_freezable frozen)
check_inhibitor "asleep: freezable queues are frozen (e2e_frz $frz, system_freezable $sysfrz), others not (e2e_live $live)" \
        [ "$frz" = true -a "$sysfrz" = true -a "$live" = false ]

f1=$(as_user cmwqctl submit e2e_frz -- /bin/sh -c "echo F1 >>$log")
f2=$(as_user cmwqctl submit e2e_frz -- /bin/sh -c "echo F2 >>$log")
as_user cmwqctl submit e2e_live --wait -- /bin/sh -c "echo N1 >>$log"
check "asleep: an item of a non-freezable queue runs" [ $? -eq 0 -a "$(grep -c -x N1 $log)" = 1 ]
sleep 1
s1=$(item_state "$f1") s2=$(item_state "$f2")
# (with the long item done, only the freeze holds them: the queue is ordered)
check_inhibitor "asleep: items of a frozen queue do not start (states $s1, $s2)" \
        [ "$s1" = inactive -a "$s2" = inactive -a "$(grep -c -x -e F1 -e F2 $log)" = 0 \
                -a "$(grep -c -x long-end $log)" = 1 ]

touch /run/cmwq-e2e/release
resumed() {
        journalctl -b --no-pager -u systemd-suspend | grep 'System returned from sleep state' >/dev/null &&
                journalctl -b --no-pager -u systemd-logind | grep "Operation 'sleep' finished" >/dev/null
}
check "systemd-sleep completed and logind finished the operation" poll 30 resumed
state=$(cat /sys/power/state)
check "the sleep went to the stand-in /sys/power/state: '$state'" \
        bash -c "[ '$state' = mem ] || [ '$state' = standby ] || [ '$state' = freeze ]"
as_user timeout 60 cmwqctl flush e2e_frz
st=$?
check "thawed: flush of the freezable queue returns (exit $st), the queue is not frozen" \
        [ $st -eq 0 -a "$(wq_field e2e_frz frozen)" = false ]
order=$(tr '\n' ' ' <$log)
echo "order: $order" | say
check_inhibitor "every item ran exactly once, in order, around the sleep" \
        [ "$order" = "long-start long-end asleep N1 resumed F1 F2 " ]
check_inhibitor "cmwqd takes a new inhibitor after the resume" poll 10 holds_inhibitor

# --- socket activation through the real units
stopped() {
        systemctl stop cmwqd.service 2>&1 | say
        [ "${PIPESTATUS[0]}" -eq 0 ] && [ "$(systemctl show -P Result cmwqd.service)" = success ] &&
                [ "$(systemctl is-active cmwqd.socket)" = active ]
}
check "systemctl stop cmwqd: a clean stop, the socket stays" stopped
bus_activated() {
        [ "$(bus_cpus)" = "u $(nproc)" ] && [ "$(systemctl is-active cmwqd.service)" = active ] &&
                systemctl stop cmwqd.service 2>/dev/null
}
check_dbus "a D-Bus call starts cmwqd (bus activation through cmwqd.service)" bus_activated
check "a client's connection starts cmwqd again (socket activation)" \
        bash -c "[ \"\$(runuser -u $user -- cmwqctl submit system --wait -- id -u)\" = $uid ] &&
                [ \"\$(systemctl is-active cmwqd.service)\" = active ]"

# --- the user units: a user's own instance, socket-activated by their manager
loginctl enable-linger $user
as_user_manager() { runuser -u $user -- env XDG_RUNTIME_DIR=/run/user/$uid "$@"; }
user_manager() { [ "$(systemctl is-active user@$uid.service)" = active ]; }
poll 30 user_manager || echo "the user manager of $user did not come up" | say
user_instance() {
        local out
        as_user_manager systemctl --user start cmwqd.socket || return 1
        out=$(cd /home/$user && as_user_manager cmwqctl submit system --wait -- /bin/sh -c 'id -u; cat /proc/self/cgroup')
        echo "$out" | say
        [ "$(as_user_manager systemctl --user is-active cmwqd.service)" = active ] &&
                [ "$(echo "$out" | head -1)" = "$uid" ] &&
                echo "$out" | grep "^0::.*/user@$uid.service/.*cmwqd.service/cmwq-items-" >/dev/null
}
check "a user's own cmwqd (user units): socket-activated, items in its delegated cgroup" user_instance
as_user_manager systemctl --user stop cmwqd.socket cmwqd.service 2>/dev/null
systemctl stop cmwqd.socket cmwqd.service
check "systemctl stop cmwqd.socket cmwqd: both inactive" \
        [ "$(systemctl is-active cmwqd.socket cmwqd.service | tr '\n' ' ')" = "inactive inactive " ]
