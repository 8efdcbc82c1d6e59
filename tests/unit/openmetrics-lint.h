/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A checker of the OpenMetrics 1.0 text format's rules, for the tests of
 * "cmwqctl stats --format=openmetrics" (promtool, where installed, reads
 * only the Prometheus format).  It checks: every line ends with a newline
 * and none is empty; the text ends with "# EOF" and nothing follows; the
 * only comments are HELP, TYPE and UNIT, each at most once per family and
 * before its samples, with a valid type, a unit that ends the family's
 * name, and HELP escapes of \\ \" \n only; metric and label names; a
 * family's samples are not interleaved with another's; a counter's samples
 * are named FAMILY_total (or _created), so a counter family's name does not
 * end in _total; label values are quoted with only \\ \" \n escaped, no
 * label twice in a sample; values are numbers, a counter's not negative;
 * no series (name and label set) appears twice. */

#include <stddef.h>

/* 0 if @text follows the rules; else -1 with the first broken rule and its
 * line number in @err. */
int openmetrics_lint(const char *text, char *err, size_t err_size);
