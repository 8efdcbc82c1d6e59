/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* cmwqd's counters as Prometheus metrics: "cmwqctl stats --format=openmetrics"
 * (OpenMetrics 1.0 text, ends with "# EOF") or --format=prometheus (the
 * Prometheus text format 0.0.4 that node_exporter's textfile collector
 * reads).  One series per workqueue (labels workqueue, uid) and per pool
 * (labels cpu, priority). */

#include <stdio.h>

#include "cmwq.pb-c.h"

typedef enum MetricsFormat {
        METRICS_OPENMETRICS,
        METRICS_PROMETHEUS,
} MetricsFormat;

/* Writes @snap in @format to @f.  Never fails; the caller checks @f. */
void metrics_write(const Cmwq__SnapshotReply *snap, MetricsFormat format, FILE *f);
