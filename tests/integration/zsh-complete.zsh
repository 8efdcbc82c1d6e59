# SPDX-License-Identifier: LGPL-2.1-or-later
#
# zsh -f zsh-complete.zsh DIR LINE...: the matches zsh's completion system
# offers for a <TAB> at the end of each LINE, as a user meets them: an
# interactive zsh on a pseudo-terminal (zsh/zpty), compinit with DIR first
# in $fpath, the line typed and <TAB> pressed.  The matches are those the
# completion functions hand to compadd (what the menu would list), printed
# one a line as "N:MATCH", N counting the LINEs from 1.  Exits 1 if the
# shell does not answer within 60 s.

zmodload zsh/zpty || exit 1
dir=${1:?}
shift
out=$(mktemp /tmp/cmwq-zsh-complete.XXXXXX) || exit 1
trap 'zpty -d comp 2>/dev/null; rm -f $out' EXIT

zpty comp zsh -f -i
zpty -w comp "PS1='' RPS1=''; unsetopt beep; fpath=(${(q)dir} \$fpath)"
zpty -w comp "autoload -Uz compinit && compinit -u -D"
# compadd, seen from the completion functions: note what is offered.
zpty -w comp "compadd() { if (( \${@[(I)-[OAD]*]} )); then builtin compadd \"\$@\"; return; fi; local -a m; builtin compadd -O m \"\$@\"; (( \$#m )) && print -rl -- \$m >>${(q)out}; builtin compadd \"\$@\"; }"
zpty -w comp "_tab() { zle complete-word; print -r -- '-- end --' >>${(q)out}; }; zle -N _tab; bindkey '^I' _tab"

local junk line
integer n=0 i
for line in "$@"; do
        n+=1
        : >$out
        zpty -w -n comp "$line"$'\t'
        for i in {1..600}; do
                grep -qx -- '-- end --' $out && break
                zpty -r -t comp junk 2>/dev/null
                sleep 0.1
        done
        grep -qx -- '-- end --' $out || { print -u2 "zsh did not complete '$line'"; exit 1; }
        grep -vx -- '-- end --' $out | sort -u | sed "s/^/$n:/"
        zpty -w -n comp $'\C-u'        # kill-whole-line: the next line from scratch
done
exit 0
