/* meminfo.h — how much memory this process may still take, so that a load or
 * a session that would not fit is refused (or streamed from the file
 * mapping) up front instead of growing until the kernel kills it. */
#ifndef MOE_MEMINFO_H
#define MOE_MEMINFO_H

#include <stdint.h>

/* Bytes this process can still allocate without swapping or being killed:
 * the smallest of MemAvailable (/proc/meminfo), the cgroup v2 limit
 * (memory.max - memory.current) and the cgroup v1 limit (limit_in_bytes -
 * usage_in_bytes) of this process's cgroup. UINT64_MAX when none can be read
 * (not Linux, no /proc). MOEFAST_MEM_AVAILABLE=BYTES overrides everything
 * (for tests and diagnosis: pretend the machine is smaller). */
uint64_t moe_mem_available(void);

/* Whether `need` bytes fit in the available memory with a margin (90 % of
 * it: page cache, the rest of the process, other allocations); *avail gets
 * what moe_mem_available returned. */
int moe_mem_fits(uint64_t need, uint64_t *avail);

#endif
