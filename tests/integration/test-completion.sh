#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The bash completion (shell-completion/bash/cmwqctl) as a user meets it: the
# shell's COMP_WORDS and COMP_CWORD set as bash sets them for a <TAB>, the
# completion function run, COMPREPLY read.  Verbs, each verb's options, an
# option's choices, and workqueue names from a real cmwqd (a user instance
# on a private socket), the caller's item IDs for wait, show and cancel.
# TAP output.
set -u

cmwqd=${CMWQD:?}
cmwqctl=${CMWQCTL:?}
script=${CMWQ_TEST_SRCDIR:?}/../shell-completion/bash/cmwqctl
unset CMWQ_SOCKET

echo "1..18"
tmp=$(mktemp -d /tmp/cmwq-completion.XXXXXX)
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

# shellcheck source=../../shell-completion/bash/cmwqctl
source "$script"

# complete WORD...: COMPREPLY for a <TAB> at the end of "cmwqctl WORD...",
# the words split as bash splits them (at '=' too), one a line in $got.
complete_line() {
        COMP_WORDS=("$cmwqctl" "$@")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        COMP_LINE="${COMP_WORDS[*]}"
        COMP_POINT=${#COMP_LINE}
        COMPREPLY=()
        _cmwqctl
        got=$(printf '%s\n' "${COMPREPLY[@]}")
}
# has WORD: the last completion offered WORD.
has() { grep -qxF -- "$1" <<<"$got" || { echo "# '$1' not offered; got: ${got//$'\n'/ }"; return 1; }; }
lacks() { ! grep -qxF -- "$1" <<<"$got" || { echo "# '$1' offered: ${got//$'\n'/ }"; return 1; }; }
has_all() { for w; do has "$w" || return 1; done; }
only() { [ "$got" = "$1" ] || { echo "# expected only '$1'; got: ${got//$'\n'/ }"; return 1; }; }

check "the completion is registered for cmwqctl" \
        eval 'complete -p cmwqctl | grep -q -- "-F _cmwqctl"'

complete_line ""
check "every verb completes" \
        has_all create destroy set-max-active flush drain freeze thaw submit wait show cancel list pools stats
check "the hidden helper is not offered" lacks __complete

complete_line se
check "a verb completes from its start" eval 'has set-max-active && lacks submit'

complete_line create q --
check "create's options, and the common ones" \
        eval 'has_all --max-active --on-interrupt --json --socket && lacks --delay'

complete_line thaw --t
check "thaw has no --timeout (freeze has)" only ""
complete_line freeze --t
check "freeze --t gives --timeout" only --timeout

complete_line create q --on-interrupt = r
check "an option's choices after '='" only rerun

# A real daemon: a user instance on a private socket, off the buses (not
# the session bus of whoever runs the tests).
DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/cmwq-test/system_bus_socket XDG_RUNTIME_DIR=$tmp \
        "$cmwqd" --user --socket "$tmp/cmwqd.sock" --config /dev/null --state-dir "$tmp/state" \
        --no-dbus --no-sleep-inhibitor 2>"$tmp/cmwqd.log" &
pid=$!
for ((i = 0; i < 150; i++)); do
        "$cmwqctl" --socket "$tmp/cmwqd.sock" list >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
done
"$cmwqctl" --socket "$tmp/cmwqd.sock" create completion-build >/dev/null 2>&1 ||
        { echo "# cannot create a queue; cmwqd's log:"; sed 's/^/#   /' "$tmp/cmwqd.log"; }

complete_line --socket "$tmp/cmwqd.sock" flush completion-
check "a queue name from the daemon --socket names" only completion-build

CMWQ_SOCKET=$tmp/cmwqd.sock complete_line submit --wait compl
check "a queue name from \$CMWQ_SOCKET's daemon, after options" only completion-build

complete_line --socket "$tmp/cmwqd.sock" submit completion-build --wait -- /bin/tru
check "after the queue, the program" has /bin/true

# Item IDs: one item that has not ended (delayed for an hour, so no
# process), one that has.
ctl() { "$cmwqctl" --socket "$tmp/cmwqd.sock" "$@"; }
later=$(ctl submit completion-build --delay 3600 -- /bin/true 2>&1)
done_id=$(ctl submit completion-build -- /bin/true 2>&1)
ctl wait "$done_id" >/dev/null 2>&1 || echo "# submit or wait failed: '$later' '$done_id'"

complete_line --socket "$tmp/cmwqd.sock" wait ""
check "wait offers the item that has not ended, not the one that has" \
        eval 'has "$later" && lacks "$done_id"'
complete_line --socket "$tmp/cmwqd.sock" cancel ""
check "cancel offers the item that has not ended, not the one that has" \
        eval 'has "$later" && lacks "$done_id"'
complete_line --socket "$tmp/cmwqd.sock" show ""
check "show offers both, the finished one from the history" has_all "$later" "$done_id"
complete_line --socket "$tmp/cmwqd.sock" --json show "$done_id"
check "an ID completes from its start, after options" has "$done_id"
complete_line --socket "$tmp/cmwqd.sock" show "$done_id" ""
check "show takes one ID: nothing after it" only ""
ctl cancel "$later" >/dev/null 2>&1

# However many items the caller has, the reply holds at most 1024 IDs, the
# unfinished first: 1030 of them here (held on a frozen queue, or delayed,
# by the load tool, on one connection), and 2 in the history.
"${CMWQ_LOAD:?}" pending "$tmp/cmwqd.sock" "$pid" 1030 >"$tmp/load.out" 2>&1 ||
        { echo "# cmwq-load pending failed:"; sed 's/^/#   /' "$tmp/load.out"; }
mapfile -t got_ids < <("$cmwqctl" __complete 4 "$cmwqctl" --socket "$tmp/cmwqd.sock" show "")
got=$(printf '%s\n' "${got_ids[@]:1}")
check "at most 1024 IDs, the unfinished ones first" \
        eval '[ ${#got_ids[@]} -eq 1025 ] && lacks "$done_id" && lacks "$later" ||
              { echo "# ${#got_ids[@]} lines"; false; }'

kill "$pid" && wait "$pid"
pid=
complete_line --socket "$tmp/cmwqd.sock" flush completion-
check "no daemon: no names, and no noise" only ""
