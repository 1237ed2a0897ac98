/* Where an instance's start goes: the worker that starts it opens a trace
 * (steps_begin), the building blocks it calls mark the end of each step
 * (steps_mark: a no-op on a thread with no trace open, such as a unit test
 * or the smoke test), and the worker writes the trace beside the instance
 * (DATA/instances/<id>/timing.json) for bench/instances.py to read, and
 * logs it in one line, as it logs a stop's and a release's (converge.c).
 * Monotonic microseconds; the wall clock only for
 * the trace's start, so the bench can place it beside its own times. */
#ifndef SL_NODE_STEPS_H
#define SL_NODE_STEPS_H

#include <stddef.h>
#include <stdint.h>

#include "../lib/error.h"

#define STEPS_MAX 32

struct steps {
    int64_t wall_us;         /* CLOCK_REALTIME at steps_begin */
    int64_t start_us;        /* monotonic, at steps_begin */
    int64_t last_us;         /* monotonic, at the last mark */
    int64_t desired_wall_us; /* CLOCK_REALTIME when the agent read what it acts on; 0: unknown */
    unsigned n;
    struct steps_step {
        const char *name; /* a string literal */
        int64_t us;       /* since the previous mark */
    } step[STEPS_MAX];
    /* the steps of a thread that ran beside these (steps_beside) */
    unsigned n_beside;
    struct steps_step beside[STEPS_MAX];
};

/* CLOCK_REALTIME in microseconds. */
int64_t steps_wall_us(void);

/* Opens a trace on this thread; steps_mark adds to it until steps_end.
 * desired_wall_us: when the agent read the state it acts on (0: unknown). */
void steps_begin(struct steps *s, int64_t desired_wall_us);
void steps_end(void);

/* The trace open on this thread, or NULL. */
struct steps *steps_current(void);

/* The step that just ended, named by a string literal; one named like the
 * one before it adds to it (a loop's rounds). */
void steps_mark(const char *name);

/* Adds the steps of another thread's trace, which ran beside this one's,
 * apart from this one's own (their times overlap). */
void steps_beside(struct steps *s, const struct steps *other);

/* {"wall_us": W, "desired_wall_us": D, "total_us": T, "steps": [[NAME, US], ...],
 * "beside": [[NAME, US], ...]} plus the
 * fields of extra (may be NULL), written to path (not synced: a trace
 * lost in a crash is only a trace). */
int steps_write(const struct steps *s, const char *path, const char *extra_json,
                struct sl_error *err);

/* "disks 12.3, mount 4.0, ..." in ms, for the log. */
void steps_format(const struct steps *s, char *buf, size_t size);

#endif
