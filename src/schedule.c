/* schedule.c - when to group: the action of each denoising step (group, reuse
 * the last plan, or no smoothing).  The plan object is plan.c. */
#include <math.h>

#include "internal.h"

void vcattn_schedule_init(vcattn_schedule *s, int num_steps) {
    if (!s) return;
    s->num_steps = num_steps;
    s->group_fraction = 0.25;
    s->refresh_every = 4;
    s->group_every_step = 0;
    s->keep_demean_after_window = 1;
}

static vcattn_status schedule_check(const vcattn_schedule *s) {
    if (!s) return VCATTN_STATUS_NULL_POINTER;
    if (s->num_steps < 1) return VCATTN_STATUS_BAD_SHAPE;
    if (!(s->group_fraction > 0.0 && s->group_fraction <= 1.0) || s->refresh_every < 1)
        return VCATTN_STATUS_INVALID_ARGUMENT;
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_schedule_action_at(const vcattn_schedule *s, int step,
                                        vcattn_schedule_action *action) {
    vcattn_status st = schedule_check(s);
    if (st) return st;
    if (!action) return VCATTN_STATUS_NULL_POINTER;
    if (step < 0 || step >= s->num_steps) return VCATTN_STATUS_INVALID_ARGUMENT;
    /* the window: the first ceil(fraction * n) steps (at least one) */
    int window = (int)ceil(s->group_fraction * (double)s->num_steps - 1e-9);
    if (window < 1) window = 1;
    if (s->group_every_step || (step < window && step % s->refresh_every == 0))
        *action = VCATTN_SCHEDULE_GROUP;
    else if (step < window || s->keep_demean_after_window)
        *action = VCATTN_SCHEDULE_REUSE;
    else
        *action = VCATTN_SCHEDULE_NO_SMOOTH;
    return VCATTN_STATUS_SUCCESS;
}

vcattn_status vcattn_schedule_grouping_steps(const vcattn_schedule *s, int *steps, int *count) {
    vcattn_status st = schedule_check(s);
    if (st) return st;
    if (!steps || !count) return VCATTN_STATUS_NULL_POINTER;
    *count = 0;
    for (int i = 0; i < s->num_steps; ++i) {
        vcattn_schedule_action a;
        vcattn_schedule_action_at(s, i, &a);
        if (a == VCATTN_SCHEDULE_GROUP) steps[(*count)++] = i;
    }
    return VCATTN_STATUS_SUCCESS;
}
