/* Replays latencies (one number of nanoseconds a line on stdin) into the latency shim's
 * histogram (runner/workloads/latency.h) as malloc timings and writes its file to argv[1]:
 * the test compares the percentiles read back with those of the known values. */
#include <stdio.h>
#include <stdlib.h>

#include "latency.h"

static lat_hist hist;

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    unsigned long long ns;
    while (scanf("%llu", &ns) == 1)
        lat_record(&hist, LAT_MALLOC, ns);
    return lat_write(&hist, 1, argv[1]) == 0 ? 0 : 1;
}
