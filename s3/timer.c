/*
 * s3/timer.c — the client's clock and randomness (both injectable by tests) and its timers:
 * hedges, backoffs and the test transport's delays, on one list sorted by due time (the loop
 * waits until the first, then fires what is due).
 *
 * Why a list: a client has few timers (about one per running attempt and one per request
 * waiting to retry), so a sorted list is enough, and the next due time is its head. The clock
 * is the caller's (s3_client_now_ms, which tests inject).
 * Threads: the client's thread only.
 */
#include <time.h>

#include "s3/engine.h"

/* ---- clock, random ---- */

uint64_t s3_client_now_ms(const s3_client *c)
{
    if (c->o.now_ms) return c->o.now_ms(c->o.seam_ctx);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint32_t s3_client_random(s3_client *c)
{
    if (c->o.random) return c->o.random(c->o.seam_ctx);
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return (uint32_t)(c->rng >> 32);
}

/* ---- timers ---- */

void s3_timer_arm(s3_timer **list, s3_timer *t, uint64_t due_ms, void (*fire)(s3_timer *))
{
    t->due_ms = due_ms;
    t->fire = fire;
    t->armed = true;
    s3_timer **pp = list, *prev = NULL;
    while (*pp && (*pp)->due_ms <= due_ms) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    t->next = *pp;
    t->prev = prev;
    if (*pp) (*pp)->prev = t;
    *pp = t;
}

void s3_timer_disarm(s3_timer **list, s3_timer *t)
{
    if (!t->armed) return;
    if (t->prev) t->prev->next = t->next;
    else *list = t->next;
    if (t->next) t->next->prev = t->prev;
    t->armed = false;
    t->prev = t->next = NULL;
}

void s3_timers_fire(s3_timer **list, uint64_t now_ms)
{
    s3_timer *t;
    while ((t = *list) && t->due_ms <= now_ms) {
        s3_timer_disarm(list, t);
        t->fire(t);
    }
}
