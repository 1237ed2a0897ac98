/* Instance states and their transitions, as tables (docs/design/instances.md,
 * "States"): what a renter's verb does in each state, and where a node's
 * report moves an instance, given what is desired and what is recorded.
 * Pure functions over enums: no store, no I/O; the callers (instances.c,
 * instance-sync.c, stops.c) read and write the rows. The strings are the
 * ones the store, the API and the node agent use. */
#ifndef SL_INSTANCE_STATES_H
#define SL_INSTANCE_STATES_H

#include <stdbool.h>

/* What the control plane records (instances.state). desired is one of
 * RUNNING, STOPPED, RELEASED. */
enum instance_state {
    INSTANCE_CREATING,
    INSTANCE_STARTING,
    INSTANCE_RUNNING,
    INSTANCE_STOPPING,
    INSTANCE_STOPPED,
    INSTANCE_FAILED,
    INSTANCE_RELEASING,
    INSTANCE_RELEASED,
    INSTANCE_STATE_COUNT,
};

/* What a node reports of an instance it was told about. */
enum instance_report {
    REPORT_RUNNING, /* its container runs (generation: the one it runs) */
    REPORT_STOPPED, /* its disks are there, nothing runs */
    REPORT_ABSENT,  /* nothing of it is on the host */
    REPORT_FAILED,  /* the start of this generation failed (message: why) */
    REPORT_COUNT,
};

/* The renter's verbs (and the loops that act for them: billing, stops). */
enum instance_verb {
    VERB_START,
    VERB_STOP,
    VERB_RESTART,
    VERB_RELEASE,
    VERB_COUNT,
};

/* What a verb does in a state. */
enum verb_outcome {
    VERB_APPLIES, /* moves the instance to instance_verb_next() */
    VERB_ALREADY, /* it is there or on its way: nothing to do, no error */
    VERB_REFUSED, /* 409 invalid_state, with instance_verb_refusal() */
};

/* "creating", "running", ...; NULL for a value out of range. */
const char *instance_state_name(enum instance_state s);
/* The state named s, or -1 for a name that is none (NULL included). */
int instance_state_parse(const char *s);
/* The report named s ("running", "stopped", "absent", "failed"), or -1. */
int instance_report_parse(const char *s);

/* Released or on its way there: the instance's ports, idle stop and such
 * are gone. */
bool instance_state_gone(enum instance_state s);
/* Asked to run and not stopped yet (creating, starting, running): a stop can
 * be scheduled for it. */
bool instance_state_up(enum instance_state s);

/* What verb does to an instance in state now. */
enum verb_outcome instance_verb_check(enum instance_verb verb, enum instance_state now);
/* The state and desired state a verb that applies leaves the instance in
 * (the node then converges; a report moves it on). */
enum instance_state instance_verb_next(enum instance_verb verb);
enum instance_state instance_verb_desired(enum instance_verb verb);
/* The end of the 409's message for a refused verb, what to do instead:
 * "instance 'ID' is STATE: <this>". */
const char *instance_verb_refusal(enum instance_verb verb);

/* Where a node's report moves an instance recorded in state now that
 * should be desired: true and *next when it moves (the event written has
 * the same name as the state), false when it stays. current_generation:
 * the node runs the generation asked for, or a later one (a restart or a
 * start increments it; a container of the previous generation is not the
 * start asked for). */
bool instance_after_report(enum instance_state now, enum instance_state desired,
                           enum instance_report reported, bool current_generation,
                           enum instance_state *next);

#endif
