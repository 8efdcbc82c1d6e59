#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# cmwqctl --help and cmwqctl VERB --help against cmwqctl(1): every command
# of the help has its entry under COMMANDS, every entry there is a command,
# every option a command takes is described in its entry, and the common
# options under OPTIONS.  The help is printed from the table the parser
# reads (client/cmwqctl-verbs.h), so this keeps the man page in step with
# the program.  TAP output.
set -u

cmwqctl=${CMWQCTL:?}
man=${CMWQ_TEST_SRCDIR:?}/../man/cmwqctl.1

# The commands of --help: "  NAME ..." lines between the first heading and
# "Options:".
mapfile -t verbs < <("$cmwqctl" --help |
        awk '/^Options:/ { exit } /^[A-Z][a-z ]*:$/ { in_verbs = 1; next }
             in_verbs && /^  [a-z]/ { print $1 }')

# man_entry VERB: the man page's entry of VERB, from its .TP under COMMANDS
# to the next .TP, .SS or .SH outside an .RS block.
man_entry() {
        awk -v verb="$1" '
                /^\.SH / { in_cmds = ($2 == "COMMANDS") }
                !in_cmds { next }
                /^\.RS/ { depth++ }
                /^\.RE/ { depth-- }
                depth == 0 && (/^\.TP/ || /^\.S[SH] /) { if (printing) exit; tp = NR; next }
                NR == tp + 1 {
                        line = $0
                        gsub(/\\f[BIR]/, "", line)
                        gsub(/\\-/, "-", line)
                        sub(/^\.B[IR]? /, "", line)
                        split(line, w, /[ \t]/)
                        if (w[1] == verb) printing = 1
                }
                printing { print }
        ' "$man"
}

# The first word of every entry under COMMANDS.
man_verbs() {
        awk '
                /^\.SH / { in_cmds = ($2 == "COMMANDS") }
                !in_cmds { next }
                /^\.RS/ { depth++ }
                /^\.RE/ { depth-- }
                depth == 0 && /^\.TP/ { tp = NR; next }
                NR == tp + 1 {
                        line = $0
                        gsub(/\\f[BIR]/, "", line)
                        gsub(/\\-/, "-", line)
                        sub(/^\.B[IR]? /, "", line)
                        split(line, w, /[ \t]/)
                        print w[1]
                }
        ' "$man"
}

# The long options of "cmwqctl VERB --help", common ones included.
verb_options() {
        "$cmwqctl" "$1" --help | sed -n 's/^  \(-. \)\? *--\([a-z-]*\).*/\2/p'
}

common=(socket json help version)
total=$((${#verbs[@]} + 2))
echo "1..$total"
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; }

# The common options, under OPTIONS.
missing=
options_section=$(sed -n '/^\.SH OPTIONS/,/^\.SH /p' "$man")
for o in "${common[@]}"; do
        grep -qF -- "\\-\\-${o//-/\\-}" <<<"$options_section" || missing+=" --$o"
done
if [ -z "$missing" ]; then ok "the common options are under OPTIONS"; else
        not_ok "the common options are under OPTIONS"; echo "# not there:$missing"; fi

for v in "${verbs[@]}"; do
        entry=$(man_entry "$v")
        if [ -z "$entry" ]; then
                not_ok "$v: an entry under COMMANDS"
                continue
        fi
        missing=
        for o in $(verb_options "$v"); do
                [[ " ${common[*]} " == *" $o "* ]] && continue
                grep -qF -- "\\-\\-${o//-/\\-}" <<<"$entry" || missing+=" --$o"
        done
        if [ -z "$missing" ]; then ok "$v: its entry under COMMANDS describes its options"; else
                not_ok "$v: its entry under COMMANDS describes its options"; echo "# not there:$missing"; fi
done

extra=
for w in $(man_verbs); do
        [[ " ${verbs[*]} " == *" $w "* ]] || extra+=" $w"
done
if [ -z "$extra" ]; then ok "every entry under COMMANDS is a command of --help"; else
        not_ok "every entry under COMMANDS is a command of --help"; echo "# not commands:$extra"; fi
