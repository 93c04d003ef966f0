/*
 * tools/cmd_convert_task.h - `sluice convert`'s planned conversion
 * (tools/cmd_convert_task.c): --plan-out cuts a plan after the one-machine
 * options are parsed (tools/cmd_convert.c); --plan PLAN with --task or
 * --finish is a command line of its own.
 */
#ifndef SL_CMD_CONVERT_TASK_H
#define SL_CMD_CONVERT_TASK_H

#include "records/records.h"

typedef struct convert_plan_opts {
    const char *plan_out;  /* --plan-out PLAN */
    unsigned tasks;        /* --tasks N (0: one per shard) */
} convert_plan_opts;

/* argv holds --plan (a task or the finish, not a one-machine run). */
int convert_is_planned(int argc, char **argv);
/* `sluice convert --plan PLAN (--task K --tasks N | --finish)`: exit status. */
int cmd_convert_planned(int argc, char **argv);
/* --plan-out: cut the plan of cfg; exit status. */
int convert_plan_out(const sl_convert_config *cfg, const convert_plan_opts *po);

#endif
