#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# cmwqd --help against cmwqd(8): every long option the help prints is in
# the man page's SYNOPSIS (but --help and --version) and has its entry under
# OPTIONS, and every option in the SYNOPSIS is in the help.  TAP output.
set -u

cmwqd=${CMWQD:?}
man=${CMWQ_TEST_SRCDIR:?}/../man/cmwqd.8

mapfile -t help_opts < <("$cmwqd" --help | sed -n 's/^  \(-., \)\? *--\([a-z-]*\).*/\2/p' | sort -u)
# The man page's long options, roff's "\-\-name" as "name".
man_opts() {
        sed -n "$1" "$man" | grep -o '\\-\\-[a-z\\-]*[a-z]' | sed 's/\\-/-/g; s/^--//' | sort -u
}
mapfile -t synopsis < <(man_opts '/^\.SH SYNOPSIS/,/^\.SH /p')
mapfile -t entries < <(sed -n '/^\.SH OPTIONS/,/^\.SH [A-Z]/p' "$man" | awk '/^\.TP/ { getline; print }' |
        grep -o '\\-\\-[a-z\\-]*[a-z]' | sed 's/\\-/-/g; s/^--//' | sort -u)

echo "1..3"
check() {       # check N DESCRIPTION MISSING...
        local n=$1 what=$2
        shift 2
        if [ $# -eq 0 ]; then echo "ok $n - $what"; else echo "not ok $n - $what"; echo "# missing: $*"; fi
}
missing_from() {        # missing_from LIST-NAME WORDS...: the words not in the list
        local -n list=$1
        shift
        for o in "$@"; do
                printf '%s\n' "${list[@]}" | grep -qxF -- "$o" || printf '%s ' "--$o"
        done
}

[ ${#help_opts[@]} -ge 10 ] || { echo "Bail out! cmwqd --help lists ${#help_opts[@]} options"; exit 1; }
# shellcheck disable=SC2046
check 1 "every option of --help is in the SYNOPSIS (but --help and --version)" \
        $(missing_from synopsis $(printf '%s\n' "${help_opts[@]}" | grep -vx 'help\|version'))
# shellcheck disable=SC2046
check 2 "every option of --help has its entry under OPTIONS" $(missing_from entries "${help_opts[@]}")
# shellcheck disable=SC2046
check 3 "every option of the SYNOPSIS is in --help" $(missing_from help_opts "${synopsis[@]}")
