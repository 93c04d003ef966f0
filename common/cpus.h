/*
 * common/cpus.h - how many cores this process may use: its affinity mask
 * (sched_getaffinity: taskset, cpuset cgroups, numactl) and its cgroup's
 * CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us: docker
 * --cpus, Kubernetes limits), not the machine's core count. The budget
 * that `sluice train / eval / profile` share between compute threads and
 * the pipeline (issue 43), and the default of their --cpus.
 *
 * Threading: all functions are reentrant.
 */
#ifndef SL_CPUS_H
#define SL_CPUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cpus {
    int online;     /* sysconf(_SC_NPROCESSORS_ONLN) */
    int affinity;   /* cores in the affinity mask (online when it cannot be read) */
    double quota;   /* cores' worth of the cgroup quota; 0 = no quota */
    int usable;     /* min(affinity, quota rounded up), at least 1 */
    char why[96];   /* "2 cores", "3 of 8 cores (affinity)", "1.5 cores of a cgroup quota" */
} sl_cpus;

/* The real process's budget (root ""), or one read from a fake file tree
 * under root (tests): root/proc/self/cgroup names the cgroup, whose quota
 * files are looked for under root/sys/fs/cgroup (v2: the cgroup's folder,
 * and in a hybrid layout unified/<cgroup>, every parent up to the mount's
 * root, the smallest quota winning as the kernel applies them all; v1: the
 * cpu controller's folder, cpu/, cpu,cpuacct/ or cpuacct,cpu/). A file that
 * is not there means no quota; affinity always comes from the process. */
void sl_cpus_get_at(const char *root, sl_cpus *out);
void sl_cpus_get(sl_cpus *out);

/* One cpu.max text ("max 100000" or "150000 100000"): the cores' worth of
 * its quota in *cores (0 for max). -1 when the text is not cpu.max's. */
int sl_cpus_parse_max(const char *text, double *cores);

/* The start-up measurement: n threads spin for `seconds` of wall time and
 * the CPU time they got is summed: the cores' worth of CPU that n busy
 * threads of this process would get now (n on a quiet machine; about
 * n * n / (n + k) with k other busy threads on n cores). Costs n x seconds
 * of CPU. 0 when a thread cannot start or a clock cannot be read. */
double sl_cpus_free(int n, double seconds);

#ifdef __cplusplus
}
#endif
#endif
