#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The zsh completion (shell-completion/zsh/_cmwqctl) as a user meets it: an
# interactive zsh on a pseudo-terminal runs compinit with the file in its
# $fpath, each command line is typed and <TAB> pressed (zsh-complete.zsh),
# and the matches offered are read.  Verbs, options, an option's choices
# after '=', a program after "--", and workqueue names and item IDs from a
# real cmwqd (a user instance on a private socket).  TAP output; skipped
# where zsh is not installed (quickstart.sh installs it).
set -u

cmwqd=${CMWQD:?}
cmwqctl=${CMWQCTL:?}
fdir=${CMWQ_TEST_SRCDIR:?}/../shell-completion/zsh
driver=$CMWQ_TEST_SRCDIR/integration/zsh-complete.zsh
unset CMWQ_SOCKET

if ! command -v zsh >/dev/null; then
        echo "1..0 # SKIP zsh is not installed"
        exit 0
fi

echo "1..9"
tmp=$(mktemp -d /tmp/cmwq-completion-zsh.XXXXXX)
pid=
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
n=0
check() { # check DESCRIPTION COMMAND...
        local desc=$1
        shift
        n=$((n + 1))
        if "$@"; then echo "ok $n - $desc"; else echo "not ok $n - $desc"; fi
}

DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/cmwq-test/system_bus_socket XDG_RUNTIME_DIR=$tmp \
        "$cmwqd" --user --socket "$tmp/cmwqd.sock" --config /dev/null --state-dir "$tmp/state" \
        --no-dbus --no-sleep-inhibitor 2>"$tmp/cmwqd.log" &
pid=$!
ctl() { "$cmwqctl" --socket "$tmp/cmwqd.sock" "$@"; }
for ((i = 0; i < 150; i++)); do
        ctl list >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
done
ctl create completion-build >/dev/null 2>&1 ||
        { echo "# cannot create a queue; cmwqd's log:"; sed 's/^/#   /' "$tmp/cmwqd.log"; }
later=$(ctl submit completion-build --delay 3600 -- /bin/true 2>&1)
done_id=$(ctl submit completion-build -- /bin/true 2>&1)
ctl wait "$done_id" >/dev/null 2>&1 || echo "# submit or wait failed: '$later' '$done_id'"

# Every line in one zsh: compinit once.
s="--socket $tmp/cmwqd.sock"
lines=(
        "$cmwqctl "
        "$cmwqctl se"
        "$cmwqctl create q --on-interrupt=r"
        "$cmwqctl freeze --t"
        "$cmwqctl $s flush completion-"
        "$cmwqctl $s submit completion-build -- /bin/tru"
        "$cmwqctl $s wait "
        "$cmwqctl $s show "
)
all=$(zsh -f "$driver" "$fdir" "${lines[@]}" 2>"$tmp/zsh.err") ||
        { echo "# zsh-complete.zsh failed:"; sed 's/^/#   /' "$tmp/zsh.err"; }

# matches N: what line N offered, one a line, in $got.
matches() { got=$(sed -n "s/^$1://p" <<<"$all"); }
has() { grep -qxF -- "$1" <<<"$got" || { echo "# '$1' not offered; got: ${got//$'\n'/ }"; return 1; }; }
lacks() { ! grep -qxF -- "$1" <<<"$got" || { echo "# '$1' offered: ${got//$'\n'/ }"; return 1; }; }
has_all() { for w; do has "$w" || return 1; done; }
only() { [ "$got" = "$1" ] || { echo "# expected only '$1'; got: ${got//$'\n'/ }"; return 1; }; }

matches 1
check "every verb completes" \
        has_all create destroy set-max-active flush drain freeze thaw submit wait show cancel list pools stats top
check "the hidden helper is not offered" lacks __complete
matches 2
check "a verb completes from its start" only set-max-active
matches 3
check "an option's choices after '='" only rerun
matches 4
check "an option from its start" only --timeout
matches 5
check "a queue name from the daemon --socket names" only completion-build
matches 6
check "after the queue, the program" has true
matches 7
check "wait offers the item that has not ended, not the one that has" \
        eval 'has "$later" && lacks "$done_id"'
matches 8
check "show offers both, the finished one from the history" has_all "$later" "$done_id"
