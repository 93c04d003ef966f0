/* tests/common/test_cpus.c - common/cpus.c: cpu.max's text, and the quota of
 * fake cgroup trees (v2, v2 under a parent's tighter limit, hybrid
 * unified/, v1 cpu,cpuacct, no quota, unreadable files) against the
 * affinity mask. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpus.h"
#include "common/fileio.h"
#include "testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tu_tmpdir(); }

static void teardown(void)
{
    tu_rmrf(g_dir);
    free(g_dir);
}

TestSuite(cpus, .init = setup, .fini = teardown);

/* Write text to g_dir/rel, making its folders. */
static void put(const char *rel, const char *text)
{
    char *path = tu_join(g_dir, rel);
    char *dir = strdup(path);
    *strrchr(dir, '/') = '\0';
    cr_assert_eq(sl_mkdir_p(dir, "test"), 0);
    cr_assert_eq(tu_write_file(path, text, strlen(text)), 0);
    free(dir);
    free(path);
}

static int affinity(void)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    return CPU_COUNT(&set);
}

/* The fake tree's budget: its quota and usable cores as expected. */
static sl_cpus expect(double quota, int usable)
{
    sl_cpus c;
    sl_cpus_get_at(g_dir, &c);
    cr_assert_float_eq(c.quota, quota, 1e-12, "quota %g, want %g", c.quota, quota);
    cr_assert_eq(c.usable, usable, "usable %d, want %d", c.usable, usable);
    return c;
}

Test(cpus, parse_max)
{
    double c = -1;
    cr_assert_eq(sl_cpus_parse_max("max 100000\n", &c), 0);
    cr_assert_eq(c, 0);
    cr_assert_eq(sl_cpus_parse_max("150000 100000\n", &c), 0);
    cr_assert_float_eq(c, 1.5, 1e-12);
    cr_assert_eq(sl_cpus_parse_max("50000 100000", &c), 0);
    cr_assert_float_eq(c, 0.5, 1e-12);
    cr_assert_eq(sl_cpus_parse_max("", &c), -1);
    cr_assert_eq(sl_cpus_parse_max("12x 100000", &c), -1);
    cr_assert_eq(sl_cpus_parse_max("100 0", &c), -1);
    cr_assert_eq(sl_cpus_parse_max("-5 100000", &c), -1);
}

Test(cpus, no_cgroup_files_is_the_affinity_mask)
{
    sl_cpus c = expect(0, affinity());
    cr_assert_eq(c.affinity, affinity());
    sl_cpus real;
    sl_cpus_get(&real); /* this machine: whatever it has, at least one */
    cr_assert_geq(real.usable, 1);
    cr_assert_leq(real.usable, real.online);
}

Test(cpus, v2_quota_rounds_up_and_caps)
{
    put("proc/self/cgroup", "0::/job/step\n");
    put("sys/fs/cgroup/job/step/cpu.max", "50000 100000\n");
    sl_cpus c = expect(0.5, 1); /* half a core is one thread's worth */
    cr_assert(strstr(c.why, "cgroup quota of 0.5"), "%s", c.why);
}

Test(cpus, v2_a_parents_tighter_limit_wins)
{
    put("proc/self/cgroup", "0::/a/b\n");
    put("sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/a/cpu.max", "100000 100000\n");
    expect(1.0, 1);
}

Test(cpus, v2_hybrid_unified_and_container_root)
{
    /* hybrid layout: v2 under unified/; the cgroup's own folder is absent
     * (a container sees its cgroup as the mount's root), so the root's
     * file counts */
    put("proc/self/cgroup", "1:cpu:/\n0::/not/here\n");
    put("sys/fs/cgroup/unified/cpu.max", "100000 100000\n");
    expect(1.0, 1);
}

Test(cpus, v1_cpu_cpuacct)
{
    put("proc/self/cgroup", "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    expect(2.5, affinity() < 3 ? affinity() : 3);
}

Test(cpus, v1_no_quota_and_other_controllers_ignored)
{
    put("proc/self/cgroup", "2:cpuacct:/\n1:cpu:/\n");
    put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpuacct/cpu.cfs_quota_us", "10000\n"); /* not the cpu controller */
    put("sys/fs/cgroup/cpuacct/cpu.cfs_period_us", "100000\n");
    expect(0, affinity());
}

Test(cpus, garbage_files_mean_no_quota)
{
    put("proc/self/cgroup", "0::/g\n");
    put("sys/fs/cgroup/g/cpu.max", "lots\n");
    expect(0, affinity());
}

/* The probe: at most the threads it ran (a little slack for the clocks'
 * granularity), more than nothing, and garbage requests answer 0. On a
 * shared machine the share itself cannot be asserted. */
Test(cpus, free_probe)
{
    double f = sl_cpus_free(2, 0.03);
    cr_assert_gt(f, 0.0);
    cr_assert_leq(f, 2.05, "%g cores' worth from 2 threads", f);
    cr_assert_eq(sl_cpus_free(0, 0.03), 0);
    cr_assert_eq(sl_cpus_free(1, 0), 0);
}
