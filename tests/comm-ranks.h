/* comm-ranks.h — the rank side of test-comm's multi-process cases: the
 * test program runs itself again as each rank with
 * `--child SCENARIO RANK WORLD PORT LOG`. */
#pragma once

/* The comm timeout of the multi-process runs: short, so that the failure
 * cases finish quickly, long enough for four ranks on two busy cores. */
#define CHILD_TIMEOUT_MS 2000
/* How long the parent lets a group of ranks run before it kills them, and
 * how long a rank lets itself live. */
#define GROUP_DEADLINE_S 90

/* Runs one rank of a scenario ("collectives", "kill", "stop", "abort");
 * never returns: exits 0 when this rank saw what it should. */
int comm_ranks_main (int    argc,
                     char **argv);
