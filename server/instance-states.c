/* Instance states and transitions as tables (instance-states.h). */
#include "instance-states.h"

#include <stddef.h>
#include <string.h>

#define BIT(s)     (1u << (s))
#define ALL_STATES ((1u << INSTANCE_STATE_COUNT) - 1)
/* released is final: no report moves it */
#define NOT_RELEASED (ALL_STATES & ~BIT(INSTANCE_RELEASED))

static const char *const state_names[INSTANCE_STATE_COUNT] = {
    [INSTANCE_CREATING] = "creating",   [INSTANCE_STARTING] = "starting",
    [INSTANCE_RUNNING] = "running",     [INSTANCE_STOPPING] = "stopping",
    [INSTANCE_STOPPED] = "stopped",     [INSTANCE_FAILED] = "failed",
    [INSTANCE_RELEASING] = "releasing", [INSTANCE_RELEASED] = "released",
};

static const char *const report_names[REPORT_COUNT] = {
    [REPORT_RUNNING] = "running",
    [REPORT_STOPPED] = "stopped",
    [REPORT_ABSENT] = "absent",
    [REPORT_FAILED] = "failed",
};

/* A verb: the states it applies in and those where it is already done
 * (any other refuses it), and where it leaves the instance. */
static const struct verb_rule {
    unsigned applies, already;
    enum instance_state next, desired;
    const char *refusal;
} verb_rules[VERB_COUNT] = {
    [VERB_START] = { .applies = BIT(INSTANCE_STOPPED) | BIT(INSTANCE_FAILED),
                     .already = BIT(INSTANCE_RUNNING) | BIT(INSTANCE_STARTING),
                     .next = INSTANCE_STARTING,
                     .desired = INSTANCE_RUNNING,
                     .refusal = "wait until it is stopped, then start it" },
    [VERB_STOP] = { .applies = BIT(INSTANCE_CREATING) | BIT(INSTANCE_RUNNING) |
                               BIT(INSTANCE_STARTING) | BIT(INSTANCE_FAILED),
                    .already = BIT(INSTANCE_STOPPED) | BIT(INSTANCE_STOPPING),
                    .next = INSTANCE_STOPPING,
                    .desired = INSTANCE_STOPPED,
                    .refusal = "it cannot stop" },
    /* a new generation of the running container; desired stays running */
    [VERB_RESTART] = { .applies = BIT(INSTANCE_RUNNING),
                       .already = 0,
                       .next = INSTANCE_STARTING,
                       .desired = INSTANCE_RUNNING,
                       .refusal = "only a running instance restarts (use start)" },
    [VERB_RELEASE] = { .applies = ALL_STATES & ~(BIT(INSTANCE_RELEASING) | BIT(INSTANCE_RELEASED)),
                       .already = BIT(INSTANCE_RELEASING) | BIT(INSTANCE_RELEASED),
                       .next = INSTANCE_RELEASING,
                       .desired = INSTANCE_RELEASED,
                       .refusal = "" },
};

/* desired x reported: the state a report moves the instance to, from the
 * states in `from` (none: the report changes nothing). A state moves
 * forward only when the node reports reaching what was asked. */
static const struct report_rule {
    unsigned from;
    enum instance_state next;
    bool needs_current_generation;
} report_rules[INSTANCE_STATE_COUNT][REPORT_COUNT] = {
    [INSTANCE_RUNNING] = {
        /* sshd answered inside: running, unless it failed (a new start
         * retries) or runs an older generation (a restart is under way) */
        [REPORT_RUNNING] = { .from = NOT_RELEASED & ~(BIT(INSTANCE_RUNNING) | BIT(INSTANCE_FAILED)),
                             .next = INSTANCE_RUNNING,
                             .needs_current_generation = true },
        [REPORT_FAILED] = { .from = NOT_RELEASED & ~BIT(INSTANCE_FAILED), .next = INSTANCE_FAILED },
    },
    [INSTANCE_STOPPED] = {
        [REPORT_STOPPED] = { .from = NOT_RELEASED & ~BIT(INSTANCE_STOPPED), .next = INSTANCE_STOPPED },
        [REPORT_ABSENT] = { .from = NOT_RELEASED & ~BIT(INSTANCE_STOPPED), .next = INSTANCE_STOPPED },
    },
    [INSTANCE_RELEASED] = {
        [REPORT_ABSENT] = { .from = NOT_RELEASED, .next = INSTANCE_RELEASED },
    },
};

static int lookup(const char *s, const char *const *names, int n)
{
    if (!s)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

const char *instance_state_name(enum instance_state s)
{
    return (unsigned)s < INSTANCE_STATE_COUNT ? state_names[s] : NULL;
}

int instance_state_parse(const char *s)
{
    return lookup(s, state_names, INSTANCE_STATE_COUNT);
}

int instance_report_parse(const char *s)
{
    return lookup(s, report_names, REPORT_COUNT);
}

bool instance_state_gone(enum instance_state s)
{
    return s == INSTANCE_RELEASING || s == INSTANCE_RELEASED;
}

bool instance_state_up(enum instance_state s)
{
    return s == INSTANCE_CREATING || s == INSTANCE_STARTING || s == INSTANCE_RUNNING;
}

enum verb_outcome instance_verb_check(enum instance_verb verb, enum instance_state now)
{
    if ((unsigned)verb >= VERB_COUNT || (unsigned)now >= INSTANCE_STATE_COUNT)
        return VERB_REFUSED;
    const struct verb_rule *r = &verb_rules[verb];
    if (r->applies & BIT(now))
        return VERB_APPLIES;
    if (r->already & BIT(now))
        return VERB_ALREADY;
    return VERB_REFUSED;
}

enum instance_state instance_verb_next(enum instance_verb verb)
{
    return verb_rules[verb].next;
}

enum instance_state instance_verb_desired(enum instance_verb verb)
{
    return verb_rules[verb].desired;
}

const char *instance_verb_refusal(enum instance_verb verb)
{
    return verb_rules[verb].refusal;
}

bool instance_after_report(enum instance_state now, enum instance_state desired,
                           enum instance_report reported, bool current_generation,
                           enum instance_state *next)
{
    if ((unsigned)now >= INSTANCE_STATE_COUNT || (unsigned)desired >= INSTANCE_STATE_COUNT ||
        (unsigned)reported >= REPORT_COUNT)
        return false;
    const struct report_rule *r = &report_rules[desired][reported];
    if (!(r->from & BIT(now)) || (r->needs_current_generation && !current_generation))
        return false;
    *next = r->next;
    return true;
}
