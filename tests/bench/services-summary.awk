#!/usr/bin/awk -f
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The summary of the services benchmark (tests/bench/run.sh, section 6):
# reads the "ROW key=value ..." lines of services-bench, prints per K and mix
# the median of every figure over the reps, and for each cmwq runner the
# ratios the targets of issue 11 ask for, against the best private pool of
# the same K and mix (the GLib and libuv rows): the shortest median makespan
# (closed loop), or the lowest median p99 queue->end (open loop).
#
#   services-summary.awk ROWS_FILE

function sortn(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) {
                t = a[i]
                for (j = i - 1; j >= 1 && a[j] > t; j--)
                        a[j + 1] = a[j]
                a[j + 1] = t
        }
}

function median(key, f,   n, i, a) {
        n = cnt[key]
        for (i = 1; i <= n; i++)
                a[i] = val[key, i, f] + 0
        sortn(a, n)
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}

function ratio(a, b) {
        return b > 0 ? sprintf("%.2fx", a / b) : "-"
}

{
        delete kv
        for (i = 2; i <= NF; i++) {
                eq = index($i, "=")
                if (eq)
                        kv[substr($i, 1, eq - 1)] = substr($i, eq + 1)
        }
        key = kv["k"] SUBSEP kv["mix"] SUBSEP kv["runner"]
        if (!(key in cnt)) {
                cnt[key] = 0
                group = kv["k"] SUBSEP kv["mix"]
                if (!(group in ngroup)) {
                        ngroup[group] = 0
                        groups[++nshown] = group
                }
                members[group, ++ngroup[group]] = kv["runner"]
        }
        n = ++cnt[key]
        for (f in kv)
                val[key, n, f] = kv[f]
        loads[key] = n == 1 ? kv["load"] : loads[key] "," kv["load"]
        ideal[kv["k"], kv["mix"]] = kv["ideal"]
        items[kv["k"], kv["mix"]] = kv["k"] * kv["n"]
}

END {
        split("makespan idle threads atonce ran maxrun vcsw ivcsw cpu item_cpu dcpu dwake qs50 qs99 qe50 qe99", fields, " ")
        for (g = 1; g <= nshown; g++) {
                group = groups[g]
                split(group, km, SUBSEP)
                k = km[1]; mix = km[2]
                open = mix ~ /^open/
                printf "\n  K=%s, mix %s: %d items, ideal makespan (items' compute / CPUs) %.3f s\n", k, mix,
                       items[k, mix], ideal[k, mix]
                printf "  %-13s %8s %6s %7s %6s %5s %6s %8s %8s %7s %7s %7s %6s %8s %8s %8s %8s  %s\n", "runner", "makespan",
                       "idle", "threads", "atonce", "ran", "maxrun", "vcsw", "ivcsw", "cpu", "itemcpu", "cmwqd", "dwake", "qs50",
                       "qs99", "qe50", "qe99", "reps (load avg)"
                best = ""
                for (m = 1; m <= ngroup[group]; m++) {
                        r = members[group, m]
                        key = k SUBSEP mix SUBSEP r
                        for (i = 1; i in fields; i++)
                                med[r, fields[i]] = median(key, fields[i])
                        printf "  %-13s %8.3f %6.2f %7d %6d %5d %6d %8d %8d %7.3f %7.3f %7.3f %6d %8.1f %8.1f %8.1f %8.1f  %d (%s)\n",
                               r, med[r, "makespan"], med[r, "idle"], med[r, "threads"], med[r, "atonce"], med[r, "ran"], med[r, "maxrun"],
                               med[r, "vcsw"], med[r, "ivcsw"], med[r, "cpu"], med[r, "item_cpu"], med[r, "dcpu"],
                               med[r, "dwake"], med[r, "qs50"], med[r, "qs99"], med[r, "qe50"], med[r, "qe99"],
                               cnt[key], loads[key]
                        if (r ~ /^cmwq-/)
                                continue
                        score = open ? med[r, "qe99"] : med[r, "makespan"]
                        if (best == "" || score < bestscore) {
                                best = r
                                bestscore = score
                        }
                }
                if (best == "") {
                        print "  (no private-pool peer ran: no ratios)"
                        continue
                }
                printf "  best peer: %s\n", best
                for (m = 1; m <= ngroup[group]; m++) {
                        r = members[group, m]
                        if (r !~ /^cmwq-/)
                                continue
                        printf "  %-13s makespan %s of the best peer", r, ratio(med[r, "makespan"], med[best, "makespan"])
                        if (mix == "block")
                                printf " (target for cmwq-bound <= 0.80x)"
                        else if (mix == "compute")
                                printf " (target <= 1.00x)"
                        printf ", %s of the ideal%s\n", ratio(med[r, "makespan"], ideal[k, mix]),
                               mix == "compute" ? " (target <= 1.10x)" : ""
                        printf "  %-13s threads %d against its %d (%s; target: fewer); alive at once, machine-wide, %d against its %d\n",
                               "", med[r, "threads"], med[best, "threads"], ratio(med[r, "threads"], med[best, "threads"]),
                               med[r, "atonce"], med[best, "atonce"]
                        printf "  %-13s cmwqd CPU %s of the items' CPU (target <= 0.05x); client CPU %s of the peer's (target <= 1.10x)\n",
                               "", ratio(med[r, "dcpu"], med[r, "item_cpu"]), ratio(med[r, "cpu"], med[best, "cpu"])
                        printf "  %-13s cmwqd wake-ups %.2f per item; context switches per item: %.2f voluntary, %.2f involuntary (peer: %.2f, %.2f)\n",
                               "", med[r, "dwake"] / items[k, mix], med[r, "vcsw"] / items[k, mix],
                               med[r, "ivcsw"] / items[k, mix], med[best, "vcsw"] / items[k, mix],
                               med[best, "ivcsw"] / items[k, mix]
                        printf "  %-13s p99 queue->start %s, queue->end %s of the best peer's%s\n", "",
                               ratio(med[r, "qs99"], med[best, "qs99"]), ratio(med[r, "qe99"], med[best, "qe99"]),
                               open ? " (target <= 1.00x)" : ""
                }
        }
}
