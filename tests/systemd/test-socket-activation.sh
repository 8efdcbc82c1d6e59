#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# cmwqd started the way cmwqd.socket starts it: systemd-socket-activate binds
# the socket and, at the first connection, runs the daemon with it
# (sd_listen_fds); cmwqctl works through that socket, in system and user
# mode.  TAP output.
set -u

cmwqd=${CMWQD:?}
cmwqctl=${CMWQCTL:?}
activate=$(command -v systemd-socket-activate || true)
if [ -z "$activate" ]; then
        echo "1..0 # SKIP systemd-socket-activate not found (Debian: systemd)"
        exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
        echo "1..0 # SKIP needs root (a system instance, and a client of another uid)"
        exit 0
fi

echo "1..9"
tmp=$(mktemp -d /tmp/cmwq-activate.XXXXXX)
chmod 0755 "$tmp"
pid=
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
n=0
check() { # check DESCRIPTION COMMAND...
        desc=$1
        shift
        n=$((n + 1))
        if "$@"; then echo "ok $n - $desc"; else echo "not ok $n - $desc"; fi
}

wait_for_log() { # wait_for_log FILE PATTERN: up to 10 s
        i=0
        while [ $i -lt 100 ]; do
                grep -q "$2" "$1" 2>/dev/null && return 0
                sleep 0.1
                i=$((i + 1))
        done
        echo "# '$2' not in $1:" && sed 's/^/#   /' "$1"
        return 1
}

stop_daemon() {
        kill "$pid" && wait "$pid"
        status=$?
        pid=
        return $status
}

# wait_for_socket PATH: bound by the activator, then given the mode 0666 of
# cmwqd.socket's SocketMode= (the activator has no such option).
wait_for_socket() {
        i=0
        while [ $i -lt 100 ] && [ ! -S "$1" ]; do
                sleep 0.1
                i=$((i + 1))
        done
        chmod 0666 "$1"
}

# --- system mode
sock=$tmp/system.sock
"$activate" -l "$sock" "$cmwqd" >"$tmp/system.log" 2>&1 &
pid=$!
wait_for_socket "$sock"
out=$("$cmwqctl" --socket "$sock" submit system --wait -- /bin/echo activated 2>&1)
check "an item runs through the passed socket (got '$out')" [ "$out" = activated ]
check "system cmwqd took the socket from systemd" \
        wait_for_log "$tmp/system.log" "listening on $sock (socket from systemd)"
# anyone may connect to a system instance, and items run as the one who connects
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$cmwqctl" --socket "$sock" submit system --wait -- /usr/bin/id -u 2>&1)
check "another user's item runs as that user (got '$out')" [ "$out" = 65534 ]
check "cmwqd stops cleanly" stop_daemon
check "the socket systemd owns is left in place" [ -S "$sock" ]

# --- user mode: a user's own instance serves that user only.  The socket is
# 0666 here (not 0600 as in the user unit) so that what refuses is the daemon.
sock=$tmp/user.sock
XDG_RUNTIME_DIR=$tmp "$activate" -l "$sock" "$cmwqd" --user >"$tmp/user.log" 2>&1 &
pid=$!
wait_for_socket "$sock"
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$cmwqctl" --socket "$sock" list 2>&1)
status=$?
check "user cmwqd took the socket from systemd" \
        wait_for_log "$tmp/user.log" "listening on $sock (socket from systemd) (user instance"
refused() { [ "$status" -eq 3 ] && case $out in *"another user's cmwqd instance"*) true ;; *) false ;; esac; }
check "another user is refused by a user instance (exit $status: $out)" refused
check "cmwqd --user stops cleanly" stop_daemon

# --- more than one socket is refused, not half-used
"$activate" -l "$tmp/a.sock" -l "$tmp/b.sock" "$cmwqd" >"$tmp/two.log" 2>&1 &
pid=$!
wait_for_socket "$tmp/a.sock"
"$cmwqctl" --socket "$tmp/a.sock" list >/dev/null 2>&1
wait "$pid"
status=$?
pid=
check "two sockets from systemd: cmwqd refuses to start (exit $status)" \
        sh -c "[ $status -eq 1 ] && grep -q 'Expected one socket from systemd, got 2' '$tmp/two.log'"
