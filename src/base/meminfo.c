/* meminfo.c — the memory available to this process (meminfo.h). Reads a few
 * small text files once per call; called at load and session creation, never
 * in the decode path. */
#include "base/meminfo.h"

#include "moefast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first unsigned number in a file, or UINT64_MAX ("max", absent, junk). */
static uint64_t read_u64_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return UINT64_MAX;
    char buf[64] = "";
    const char *ok = fgets(buf, sizeof buf, f);
    fclose(f);
    if (!ok) return UINT64_MAX;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    return end == buf ? UINT64_MAX : (uint64_t)v;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* limit - usage, both read from dir; UINT64_MAX when there is no limit. */
static uint64_t cgroup_room(const char *dir, const char *limit, const char *usage) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, limit);
    uint64_t l = read_u64_file(p);
    /* v1 reports "no limit" as a huge page-rounded number (2^63 - 4096) */
    if (l == UINT64_MAX || l >= (UINT64_C(1) << 62)) return UINT64_MAX;
    snprintf(p, sizeof p, "%s/%s", dir, usage);
    uint64_t u = read_u64_file(p);
    if (u == UINT64_MAX) return UINT64_MAX;
    return l > u ? l - u : 0;
}

/* This process's cgroup directories from /proc/self/cgroup: the v2 line
 * "0::/path" and the v1 line naming the memory controller. */
static uint64_t cgroups_room(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return UINT64_MAX;
    uint64_t room = UINT64_MAX;
    char line[1024], dir[1200];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        const char *path = c2 + 1;
        if (c1[1] == ':') {                              /* v2: "0::/path" */
            snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", path);
            room = min_u64(room, cgroup_room(dir, "memory.max", "memory.current"));
        } else {                                          /* v1: "N:ctl,ctl:/path" */
            *c2 = 0;
            if (!strstr(c1 + 1, "memory")) continue;
            snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory%s", path);
            room = min_u64(room, cgroup_room(dir, "memory.limit_in_bytes", "memory.usage_in_bytes"));
        }
    }
    fclose(f);
    /* In a container the process's path may not exist under its own
     * namespace's mount (the cgroup is mounted at the root): try the root. */
    if (room == UINT64_MAX) {
        room = min_u64(cgroup_room("/sys/fs/cgroup", "memory.max", "memory.current"),
                       cgroup_room("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"));
    }
    return room;
}

static uint64_t meminfo_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return UINT64_MAX;
    char line[256];
    uint64_t v = UINT64_MAX;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) { v = (uint64_t)kb * 1024; break; }
    }
    fclose(f);
    return v;
}

uint64_t moe_mem_available(void) {
    const char *e = getenv("MOEFAST_MEM_AVAILABLE");
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (end != e && *end == 0) return (uint64_t)v;
    }
    return min_u64(meminfo_available(), cgroups_room());
}

int moe_mem_fits(uint64_t need, uint64_t *avail) {
    uint64_t a = moe_mem_available();
    if (avail) *avail = a;
    return a == UINT64_MAX || need <= a / 10 * 9;
}

long long moe_proc_status_bytes(const char *field) {
    if (!field || !*field) return -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    const size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            char *end;
            const long long v = strtoll(line + n + 1, &end, 10);
            if (end != line + n + 1 && v >= 0) kb = v;
            break;
        }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}
