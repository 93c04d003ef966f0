/*
 * common/cpus.c - the cores this process may use (cpus.h): affinity and
 * cgroup quota.
 *
 * Written here rather than taken from libcgroup: that library manages
 * cgroups (create, move, set) and needs its config; all we need is two
 * small files read the way the kernel documents them
 * (Documentation/admin-guide/cgroup-v2.rst "cpu.max";
 * scheduler/sched-bwc.rst for v1's cfs_quota_us / cfs_period_us), the way
 * Go's runtime (internal/runtime/cgroup, GOMAXPROCS from Go 1.25) and the
 * JVM's container support read them. The mount points are the usual ones
 * (/sys/fs/cgroup, its unified/ in a hybrid layout, cpu/ or cpu,cpuacct/
 * for v1), not parsed from mountinfo: a quota we cannot find leaves the
 * budget at the affinity mask, the answer without cgroups.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/cpus.h"

int sl_cpus_parse_max(const char *text, double *cores)
{
    char q[32];
    long long period;
    *cores = 0;
    if (sscanf(text, "%31s %lld", q, &period) != 2 || period <= 0)
        return -1;
    if (!strcmp(q, "max"))
        return 0;
    char *end;
    long long quota = strtoll(q, &end, 10);
    if (*end || quota <= 0)
        return -1;
    *cores = (double)quota / (double)period;
    return 0;
}

/* The first line of file path into buf; 0 when read. */
static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

/* v1: cfs_quota_us and cfs_period_us in dir; the cores' worth, 0 for none. */
static double quota_v1(const char *dir)
{
    char path[8600], a[64], b[64];
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    if (read_line(path, a, sizeof a))
        return 0;
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
    if (read_line(path, b, sizeof b))
        return 0;
    long long quota = atoll(a), period = atoll(b);
    return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

static double quota_v2(const char *dir)
{
    char path[8600], line[128];
    double cores = 0;
    snprintf(path, sizeof path, "%s/cpu.max", dir);
    if (read_line(path, line, sizeof line) || sl_cpus_parse_max(line, &cores))
        return 0;
    return cores;
}

/* The smallest quota on cgroup cg (a "/a/b" path) and its parents under
 * mount base, read by fn; 0 for none. A cgroup whose folder is not under
 * base (a container sees its own cgroup as the mount's root) starts at the
 * mount's root. */
static double walk_quota(const char *base, const char *cg, double (*fn)(const char *))
{
    char dir[8400];
    double best = 0;
    snprintf(dir, sizeof dir, "%s%s", base, cg);
    size_t blen = strlen(base);
    for (;;) {
        size_t n = strlen(dir);
        while (n > blen && dir[n - 1] == '/')
            dir[--n] = '\0';
        double q = fn(dir);
        if (q > 0 && (best == 0 || q < best))
            best = q;
        if (n <= blen)
            break;
        char *slash = strrchr(dir + blen, '/');
        if (!slash)
            dir[blen] = '\0';
        else
            *slash = '\0';
    }
    return best;
}

static double min_quota(double a, double b) { return a > 0 && (b == 0 || a < b) ? a : b; }

/* The cgroup quota of the process as root/proc/self/cgroup names it. */
static double cgroup_quota(const char *root)
{
    char path[4200], line[4096], base[4200];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    double best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0';
        const char *ctrls = c1 + 1, *cg = c2 + 1;
        if (!*ctrls) { /* v2: "0::/path" */
            snprintf(base, sizeof base, "%s/sys/fs/cgroup", root);
            best = min_quota(walk_quota(base, cg, quota_v2), best);
            snprintf(base, sizeof base, "%s/sys/fs/cgroup/unified", root);
            best = min_quota(walk_quota(base, cg, quota_v2), best);
            continue;
        }
        int cpu = 0; /* v1: does the controller list name "cpu"? */
        char list[256];
        snprintf(list, sizeof list, "%s", ctrls);
        for (char *s, *t = strtok_r(list, ",", &s); t; t = strtok_r(NULL, ",", &s))
            cpu |= !strcmp(t, "cpu");
        if (!cpu)
            continue;
        static const char *const mounts[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
        for (size_t i = 0; i < sizeof mounts / sizeof *mounts; i++) {
            snprintf(base, sizeof base, "%s/sys/fs/cgroup/%s", root, mounts[i]);
            best = min_quota(walk_quota(base, cg, quota_v1), best);
        }
    }
    fclose(f);
    return best;
}

void sl_cpus_get_at(const char *root, sl_cpus *out)
{
    memset(out, 0, sizeof *out);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    out->online = n > 0 ? (int)n : 1;
    cpu_set_t set;
    out->affinity = out->online;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        out->affinity = CPU_COUNT(&set);
    out->quota = cgroup_quota(root ? root : "");
    out->usable = out->affinity;
    if (out->quota > 0 && (int)ceil(out->quota - 1e-9) < out->usable)
        out->usable = (int)ceil(out->quota - 1e-9);
    if (out->usable < 1)
        out->usable = 1;
    if (out->quota > 0 && out->quota < out->affinity)
        snprintf(out->why, sizeof out->why, "%d core%s (a cgroup quota of %.3g)", out->usable,
                 out->usable == 1 ? "" : "s", out->quota);
    else if (out->affinity < out->online)
        snprintf(out->why, sizeof out->why, "%d of %d cores (affinity)", out->affinity,
                 out->online);
    else
        snprintf(out->why, sizeof out->why, "%d core%s", out->usable,
                 out->usable == 1 ? "" : "s");
}

void sl_cpus_get(sl_cpus *out) { sl_cpus_get_at("", out); }

/* ------------------------------------------------ the contention probe */

typedef struct probe {
    double until; /* CLOCK_MONOTONIC seconds */
    double cpu;   /* this thread's CPU seconds while spinning */
    int ok;
} probe;

static void *spin(void *arg)
{
    probe *p = arg;
    double c0 = sl_clock_s(CLOCK_THREAD_CPUTIME_ID), now;
    volatile unsigned long x = 0; /* volatile: the loop is not optimized away */
    while ((now = sl_clock_s(CLOCK_MONOTONIC)) >= 0 && now < p->until)
        for (int i = 0; i < 2000; i++)
            x = x + (unsigned long)i;
    double c1 = sl_clock_s(CLOCK_THREAD_CPUTIME_ID);
    p->ok = c0 >= 0 && c1 >= 0 && now >= 0 && x != 1; /* x read: clang's set-but-unused */
    p->cpu = c1 - c0;
    return NULL;
}

double sl_cpus_free(int n, double seconds)
{
    if (n < 1 || n > 4096 || !(seconds > 0))
        return 0;
    probe *p = calloc((size_t)n, sizeof *p);
    pthread_t *t = calloc((size_t)n, sizeof *t);
    double got = 0, t0 = sl_clock_s(CLOCK_MONOTONIC);
    int started = 0, ok = p && t && t0 >= 0;
    for (int i = 0; ok && i < n; i++) {
        p[i].until = t0 + seconds;
        if (pthread_create(&t[i], NULL, spin, &p[i]))
            ok = 0;
        else
            started++;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        ok &= p[i].ok;
        got += p[i].cpu;
    }
    /* measured over the threads' spin, not their start: a late start
     * shortens a spin, and that is CPU it did not get */
    double wall = sl_clock_s(CLOCK_MONOTONIC) - t0;
    free(p);
    free(t);
    if (!ok || !(wall > 0))
        return 0;
    return got / (wall > seconds ? wall : seconds);
}
