/*
 * kvtier-fuzz: a random C-API fuzzer with an oracle.
 *
 * Several requests make random sequences of valid and invalid calls on one
 * manager: lookups, loads, touches, stores completed whole, in parts, with
 * failure, or naming keys other requests planned; step ends, event drains,
 * statistics, cache resets.  Behind the primary tier sit a C tier whose
 * worker threads complete jobs through kvtier_manager_complete_job (with
 * failed jobs and partial loads that leave garbage in the slots they did
 * not deliver) and, with --fs, the built-in file-system tier.
 *
 * The oracle checks what an engine relies on:
 *   - every block a load hands out holds its own key's bytes;
 *   - every slot a store plan or a promotion hands out is in use by nobody
 *     (no outstanding plan, load pin or tier job on it);
 *   - every block a cascade reads holds its own key's bytes;
 *   - every invalid call is refused with a status, and valid calls succeed;
 *   - pins are tracked per request and key: a request may finish with its
 *     loads in flight and complete them later, while active requests unpin
 *     keys such finished requests hold (beyond their own pins, as vLLM
 *     allows); a late completion must never release a pin another request
 *     holds: after it, the primary tier still counts at least every slot
 *     that live requests' untaken pins hold as pinned, and no key such a
 *     pin holds is evicted nor its slot handed to a store or a promotion;
 *     a late completion whose pin was taken succeeds and is counted
 *     (`spent_load_completions`, checked against the oracle's count);
 *   - at the end, once every request finished and the tiers are idle, no
 *     slot is write pending or pinned, and every resident block is right.
 *
 * Usage: kvtier-fuzz [--seed N] [--ops N | --seconds N] [--fs] [--sync-tier] [--rss-limit-mib N]
 * (--sync-tier: the C tier finishes each job inside its submit call, so a
 * run without --fs is the same on every run of one seed.)
 * Prints one summary line; exits 1 on the first oracle failure (naming it).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvtier.h"

#define SLOTS 48
#define BLOCK 4096
#define NKEYS 96
#define NREQ 6
#define MAX_BATCH 8
#define TIER_QUEUE 1024
#define WORKERS 2

/* ---------- failures and randomness ---------- */

/* The operation under way (named by failures). */
static unsigned long long current_op;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kvtier-fuzz: ORACLE FAILURE at op %llu: ", current_op);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void expect_ok(kvtier_status st, const char *what) {
    if (st != KVTIER_STATUS_OK)
        fail("%s failed: %s: %s", what, kvtier_status_str(st), kvtier_last_error_message());
}

static void expect_status(kvtier_status st, kvtier_status want, const char *what) {
    if (st != want)
        fail("%s: %s, expected %s (%s)", what, kvtier_status_str(st), kvtier_status_str(want),
             kvtier_last_error_message());
}

static uint64_t rng_state;
static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint32_t below(uint32_t n) { return (uint32_t)(next_u64() % n); }
static bool chance(uint32_t percent) { return below(100) < percent; }

/* ---------- keys and their bytes ---------- */

static uint8_t key_bytes[NKEYS][64];
static size_t key_len[NKEYS];

static void make_keys(void) {
    for (int i = 0; i < NKEYS; i++) {
        key_len[i] = 2 + (size_t)(i * 7) % 63; /* 2..64 bytes */
        key_bytes[i][0] = (uint8_t)i;
        key_bytes[i][1] = 0xA5;
        for (size_t b = 2; b < key_len[i]; b++) key_bytes[i][b] = (uint8_t)(i * 31 + b * 7);
    }
}

static kvtier_key key_view(int id) {
    kvtier_key k;
    k.data = key_bytes[id];
    k.len = key_len[id];
    return k;
}

/* The key id of key bytes handed to a tier; fails on bytes that are no key of ours. */
static int key_id(const kvtier_key *k) {
    if (k->len < 2 || k->len > 64) fail("a tier was handed a key of %zu bytes", k->len);
    int id = k->data[0];
    if (id >= NKEYS || k->len != key_len[id] || memcmp(k->data, key_bytes[id], k->len) != 0)
        fail("a tier was handed key bytes that no caller passed");
    return id;
}

static uint8_t pattern(int id, size_t offset) { return (uint8_t)(id * 131 + offset * 29 + (offset >> 8)); }

static uint8_t *slot_base;
static size_t slot_stride;

static uint8_t *slot_at(uint32_t slot) {
    if (slot >= SLOTS) fail("slot %u handed out, beyond the %d slots", slot, SLOTS);
    return slot_base + (size_t)slot * slot_stride;
}

/* ---------- each slot's recent history, printed when a check fails ---------- */

#define HISTORY 24
static pthread_mutex_t history_lock = PTHREAD_MUTEX_INITIALIZER;
static char history[SLOTS][HISTORY][72];
static unsigned history_next[SLOTS];
static unsigned long history_seq;

static void note(uint32_t slot, const char *fmt, ...) {
    if (slot >= SLOTS) return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&history_lock);
    char *line = history[slot][history_next[slot]++ % HISTORY];
    int n = snprintf(line, 72, "%lu ", ++history_seq);
    vsnprintf(line + n, (size_t)(72 - n), fmt, ap);
    pthread_mutex_unlock(&history_lock);
    va_end(ap);
}

/* Fails, printing the recent history of `slot` first. */
static void fail_at(uint32_t slot, const char *fmt, ...) {
    pthread_mutex_lock(&history_lock);
    if (slot < SLOTS) {
        fprintf(stderr, "kvtier-fuzz: history of slot %u, oldest first:\n", slot);
        unsigned n = history_next[slot];
        for (unsigned i = n > HISTORY ? n - HISTORY : 0; i < n; i++) fprintf(stderr, "  %s\n", history[slot][i % HISTORY]);
    }
    pthread_mutex_unlock(&history_lock);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kvtier-fuzz: ORACLE FAILURE at op %llu: ", current_op);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void write_block(uint32_t slot, int id) {
    note(slot, "write key %d", id);
    uint8_t *p = slot_at(slot);
    for (size_t o = 0; o < BLOCK; o++) p[o] = pattern(id, o);
}

static void write_garbage(uint32_t slot) {
    note(slot, "write garbage");
    memset(slot_at(slot), 0xEE, BLOCK);
}

static bool block_is(uint32_t slot, int id) {
    const uint8_t *p = slot_at(slot);
    for (size_t o = 0; o < BLOCK; o++)
        if (p[o] != pattern(id, o)) return false;
    return true;
}

/* ---------- who uses each slot (the oracle's view) ---------- */

static pthread_mutex_t oracle_lock = PTHREAD_MUTEX_INITIALIZER;
static int slot_plans[SLOTS];     /* outstanding store plans on the slot */
static int slot_pins[SLOTS];      /* outstanding load pins held by requests */
static int slot_tier_jobs[SLOTS]; /* C-tier jobs in flight on the slot */

static void check_free_for_handout(uint32_t slot, const char *what) {
    pthread_mutex_lock(&oracle_lock);
    int plans = slot_plans[slot], pins = slot_pins[slot], jobs = slot_tier_jobs[slot];
    pthread_mutex_unlock(&oracle_lock);
    if (plans || pins || jobs)
        fail_at(slot, "%s handed out slot %u while it is in use (%d plans, %d load pins, %d tier jobs)", what, slot, plans,
             pins, jobs);
}

static void slot_count(int *table, uint32_t slot, int delta) {
    pthread_mutex_lock(&oracle_lock);
    table[slot] += delta;
    pthread_mutex_unlock(&oracle_lock);
}

/* ---------- the C tier: memory, worker threads, complete_job ---------- */

typedef struct {
    uint64_t id;
    int32_t direction;
    size_t len;
    int keys[MAX_BATCH * 4];
    uint32_t slots[MAX_BATCH * 4];
} tier_job;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    tier_job queue[TIER_QUEUE];
    size_t head, count, busy;
    bool stop;
    pthread_t threads[WORKERS];
    bool present[NKEYS];
    uint8_t data[NKEYS][BLOCK];
    const kvtier_manager *manager;
    size_t index;
    uint64_t rng;
    size_t jobs_done, jobs_failed, partial_loads, blocks_checked;
} c_tier;

static uint64_t tier_rand(c_tier *t) { /* under t->lock */
    t->rng = t->rng * 6364136223846793005ull + 1442695040888963407ull;
    return t->rng >> 33;
}

/* Runs one job: copies, checks, reports it through complete_job.  Called
 * without t->lock, by a worker thread or (--sync-tier) inside submit. */
static void run_job(c_tier *t, const tier_job *jp, uint64_t roll) {
        tier_job job = *jp;

        kvtier_key delivered[MAX_BATCH * 4];
        size_t n_delivered = 0;
        bool ok = roll >= 5; /* 5% of jobs fail */
        bool partial = job.direction == KVTIER_JOB_LOAD && roll >= 5 && roll < 15;
        for (size_t i = 0; i < job.len; i++) {
            int id = job.keys[i];
            uint32_t slot = job.slots[i];
            if (job.direction == KVTIER_JOB_STORE) {
                if (!block_is(slot, id)) fail_at(slot, "a cascade of key %d read slot %u, which holds another block", id, slot);
                pthread_mutex_lock(&t->lock);
                memcpy(t->data[id], slot_at(slot), BLOCK);
                if (ok) t->present[id] = true;
                t->blocks_checked++;
                pthread_mutex_unlock(&t->lock);
            } else {
                pthread_mutex_lock(&t->lock);
                bool have = t->present[id];
                bool deliver = have && ok && !(partial && (i % 2 == 1));
                if (deliver) memcpy(slot_at(slot), t->data[id], BLOCK);
                pthread_mutex_unlock(&t->lock);
                if (deliver) {
                    delivered[n_delivered++] = key_view(id);
                } else {
                    write_garbage(slot); /* what a torn transfer leaves */
                    ok = partial ? ok : false;
                }
            }
        }
        for (size_t i = 0; i < job.len; i++) {
            note(job.slots[i], "tier job %llu %s key %d done (job ok=%d)", (unsigned long long)job.id,
                 job.direction == KVTIER_JOB_STORE ? "store" : "load", job.keys[i], (int)ok);
            slot_count(slot_tier_jobs, job.slots[i], -1);
        }
        kvtier_job_result r;
        memset(&r, 0, sizeof r);
        r.id = job.id;
        r.success = ok && (!partial || n_delivered == job.len);
        if (job.direction == KVTIER_JOB_LOAD && !r.success) {
            r.succeeded_keys = n_delivered ? delivered : NULL;
            r.succeeded_len = n_delivered;
        }
        r.bytes = (uint64_t)job.len * BLOCK;
        kvtier_status st = kvtier_manager_complete_job(t->manager, t->index, &r);
        if (st != KVTIER_STATUS_OK) fail("complete_job of a real job: %s", kvtier_status_str(st));
        pthread_mutex_lock(&t->lock);
        t->jobs_done++;
        if (!r.success) t->jobs_failed++;
        if (partial) t->partial_loads++;
        pthread_mutex_unlock(&t->lock);
}

static void *tier_worker(void *arg) {
    c_tier *t = (c_tier *)arg;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (!t->stop && t->count == 0) pthread_cond_wait(&t->wake, &t->lock);
        if (t->count == 0 && t->stop) break;
        tier_job job = t->queue[t->head];
        t->head = (t->head + 1) % TIER_QUEUE;
        t->count--;
        t->busy++;
        uint64_t roll = tier_rand(t) % 100;
        pthread_mutex_unlock(&t->lock);
        run_job(t, &job, roll);
        pthread_mutex_lock(&t->lock);
        t->busy--;
        if (t->busy == 0 && t->count == 0) pthread_cond_broadcast(&t->idle);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

static int32_t ct_lookup(void *ud, const kvtier_key *k, const kvtier_request *r, kvtier_lookup_result *answer) {
    c_tier *t = (c_tier *)ud;
    (void)r;
    int id = key_id(k);
    pthread_mutex_lock(&t->lock);
    *answer = t->present[id] ? KVTIER_LOOKUP_HIT : KVTIER_LOOKUP_MISS;
    if (tier_rand(t) % 100 < 3) *answer = KVTIER_LOOKUP_RETRY;
    pthread_mutex_unlock(&t->lock);
    return KVTIER_STATUS_OK;
}

static bool sync_tier;

static int32_t ct_submit(void *ud, const kvtier_job *job) {
    const kvtier_job *job_in = job;
    c_tier *t = (c_tier *)ud;
    if (job->len == 0 || job->len > MAX_BATCH * 4) return KVTIER_STATUS_INVALID_ARGUMENT;
    for (size_t i = 0; i < job->len; i++) {
        if (job->direction == KVTIER_JOB_LOAD) check_free_for_handout(job->slots[i], "a promotion");
        slot_at(job->slots[i]);
    }
    if (sync_tier) { /* deterministic: the job runs and is reported now */
        tier_job job;
        job.id = job_in->id;
        job.direction = job_in->direction;
        job.len = job_in->len;
        for (size_t i = 0; i < job_in->len; i++) {
            job.keys[i] = key_id(&job_in->keys[i]);
            job.slots[i] = job_in->slots[i];
            note(job.slots[i], "tier job %llu %s key %d submitted", (unsigned long long)job.id,
                 job.direction == KVTIER_JOB_STORE ? "store" : "load", job.keys[i]);
            slot_count(slot_tier_jobs, job.slots[i], 1);
        }
        pthread_mutex_lock(&t->lock);
        uint64_t roll = tier_rand(t) % 100;
        pthread_mutex_unlock(&t->lock);
        run_job(t, &job, roll);
        return KVTIER_STATUS_OK;
    }
    pthread_mutex_lock(&t->lock);
    if (t->count == TIER_QUEUE) {
        pthread_mutex_unlock(&t->lock);
        return KVTIER_STATUS_NO_SPACE;
    }
    tier_job *q = &t->queue[(t->head + t->count) % TIER_QUEUE];
    q->id = job->id;
    q->direction = job->direction;
    q->len = job->len;
    for (size_t i = 0; i < job->len; i++) {
        q->keys[i] = key_id(&job->keys[i]);
        q->slots[i] = job->slots[i];
        note(job->slots[i], "tier job %llu %s key %d submitted", (unsigned long long)job->id,
             job->direction == KVTIER_JOB_STORE ? "store" : "load", q->keys[i]);
        slot_count(slot_tier_jobs, job->slots[i], 1);
    }
    t->count++;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    return KVTIER_STATUS_OK;
}

static int32_t ct_pending(void *ud, bool *pending) {
    c_tier *t = (c_tier *)ud;
    pthread_mutex_lock(&t->lock);
    *pending = t->count > 0 || t->busy > 0;
    pthread_mutex_unlock(&t->lock);
    return KVTIER_STATUS_OK;
}

static int32_t ct_drain(void *ud) {
    c_tier *t = (c_tier *)ud;
    pthread_mutex_lock(&t->lock);
    while (t->count > 0 || t->busy > 0) pthread_cond_wait(&t->idle, &t->lock);
    pthread_mutex_unlock(&t->lock);
    return KVTIER_STATUS_OK;
}

static int32_t ct_shutdown(void *ud) {
    c_tier *t = (c_tier *)ud;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->lock);
    for (int i = 0; i < WORKERS; i++) pthread_join(t->threads[i], NULL);
    return KVTIER_STATUS_OK;
}

static size_t tier_jobs_done, tier_jobs_failed, tier_partial_loads, tier_blocks_checked;

static void ct_destroy(void *ud) {
    c_tier *t = (c_tier *)ud;
    tier_jobs_done = t->jobs_done;
    tier_jobs_failed = t->jobs_failed;
    tier_partial_loads = t->partial_loads;
    tier_blocks_checked = t->blocks_checked;
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->wake);
    pthread_cond_destroy(&t->idle);
    free(t);
}

/* ---------- requests as the oracle sees them ---------- */

typedef struct {
    int key;
    uint32_t slot;
} held;

typedef struct {
    char name[32];
    kvtier_request_handle handle; /* from kvtier_manager_request_begin */
    unsigned generation;
    bool active;   /* started, not finished */
    bool finished; /* finished, waiting on its plans and its loads' pins */
    held pins[64];
    size_t n_pins;
    held plans[64];
    size_t n_plans;
} request;

static request reqs[NREQ];
static bool fs_tier_present;
static kvtier_manager *mgr;

static struct {
    uint64_t calls, invalid_rejected, loads_verified, blocks_stored, plans_completed_in_parts, foreign_keys_named,
        resets, lookups_hit, lookups_pending, late_loads, pins_taken, spent_completions;
} counts;

/* Per key: pins active requests' unpins took (beyond their own pins) that
 * no finished request's late completion was charged with yet.  The slot's
 * count in slot_pins already went down when the pin was taken. */
static int spent[NKEYS];

/* Pins requests (active and finished) hold on key `id`, taken ones included. */
static int pins_on(int id, bool finished_only) {
    int n = 0;
    for (int q = 0; q < NREQ; q++) {
        if (finished_only && !reqs[q].finished) continue;
        for (size_t i = 0; i < reqs[q].n_pins; i++) n += reqs[q].pins[i].key == id;
    }
    return n;
}

static double stat_value(size_t tier, const char *name);
static bool stat_present(size_t tier, const char *name);

/* The primary tier counts every slot untaken pins hold as pinned (cascades
 * may pin more), and the late completions charged with taken pins. */
static void check_pins(const char *after) {
    int held_slots = 0;
    pthread_mutex_lock(&oracle_lock);
    for (uint32_t slot = 0; slot < SLOTS; slot++) {
        if (slot_pins[slot] < 0) {
            pthread_mutex_unlock(&oracle_lock);
            fail_at(slot, "after %s the oracle counts %d load pins on slot %u", after, slot_pins[slot], slot);
        }
        held_slots += slot_pins[slot] > 0;
    }
    pthread_mutex_unlock(&oracle_lock);
    double pinned = stat_value(0, "pinned");
    if (pinned < held_slots)
        fail("after %s the primary tier counts %g pinned slots, but live requests' loads hold %d: a pin another "
             "request holds was released",
             after, pinned, held_slots);
    if (stat_present(0, "spent_load_completions") &&
        stat_value(0, "spent_load_completions") != (double)counts.spent_completions)
        fail("after %s spent_load_completions is %g, the oracle counts %llu", after,
             stat_value(0, "spent_load_completions"), (unsigned long long)counts.spent_completions);
}

/* The slot each key was last loaded from: where its untaken pins are (a
 * pinned key stays in its slot; a request's own record of a pin that
 * another request's unpin took may name a slot the key has left since). */
static uint32_t key_slot[NKEYS];

static void drop_pin(request *r, size_t i) {
    uint32_t slot = key_slot[r->pins[i].key];
    note(slot, "%s unpins key %d", r->name, r->pins[i].key);
    slot_count(slot_pins, slot, -1);
    r->pins[i] = r->pins[--r->n_pins];
}

static void drop_plan(request *r, size_t i) {
    note(r->plans[i].slot, "%s plan of key %d ends", r->name, r->plans[i].key);
    slot_count(slot_plans, r->plans[i].slot, -1);
    r->plans[i] = r->plans[--r->n_plans];
}

static void start_request(request *r) {
    r->generation++;
    snprintf(r->name, sizeof r->name, "fz%d.%u", (int)(r - reqs), r->generation);
    kvtier_request_handle before = r->handle;
    counts.calls++;
    expect_ok(kvtier_manager_request_begin(mgr, r->name, NULL, &r->handle, NULL), "request_begin");
    if (r->handle == 0 || r->handle == before) fail("request_begin handed out handle %llu again", (unsigned long long)r->handle);
    r->active = true;
    r->finished = false;
}

/* Looks up 1..MAX_BATCH random keys as a prefix in one call (odd calls) or
 * key by key until the first that is not a hit (even calls), and checks
 * the answer's shape. */
static void do_lookup(request *r) {
    kvtier_key keys[MAX_BATCH];
    size_t n = 1 + below(MAX_BATCH);
    for (size_t i = 0; i < n; i++) keys[i] = key_view((int)below(NKEYS));
    kvtier_lookup_answer a;
    memset(&a, 0xff, sizeof a);
    bool prefix = (counts.calls++ & 1) != 0;
    if (prefix) expect_ok(kvtier_manager_lookup(mgr, r->handle, keys, n, &a), "lookup");
    else expect_ok(kvtier_manager_lookup_per_key(mgr, r->handle, keys, n, &a), "lookup_per_key");
    if (a.hits > a.end || a.end > n) fail("lookup of %zu keys answered %zu hits, end %zu", n, a.hits, a.end);
    if (a.pending > a.end - a.hits || (a.pending == 0) != (a.hits == a.end))
        fail("lookup: %zu hits, %zu pending, end %zu", a.hits, a.pending, a.end);
    if ((a.hits == n) != (a.stop == KVTIER_LOOKUP_HIT)) fail("lookup: %zu of %zu hits, stop %d", a.hits, n, a.stop);
    if ((a.stop == KVTIER_LOOKUP_MISS) != (a.end == a.hits && a.hits < n))
        fail("lookup: stop %d with %zu hits, end %zu", a.stop, a.hits, a.end);
    if (prefix ? (a.end < n) != (a.reason != KVTIER_MISS_NONE)
               : (a.stop == KVTIER_LOOKUP_MISS) != (a.reason != KVTIER_MISS_NONE))
        fail("lookup: stop %d, end %zu of %zu, reason %d", a.stop, a.end, n, a.reason);
    counts.lookups_hit += a.hits;
    if (a.stop == KVTIER_LOOKUP_HIT_PENDING || a.stop == KVTIER_LOOKUP_RETRY) counts.lookups_pending++;
    else if (a.stop == KVTIER_LOOKUP_MISS) {
        if (a.reason != KVTIER_MISS_ABSENT && a.reason != KVTIER_MISS_NO_ROOM && a.reason != KVTIER_MISS_TIMED_OUT)
            fail("miss reason %d", a.reason);
    } else if (a.stop != KVTIER_LOOKUP_HIT) fail("lookup answered %d", a.stop);
}

/* Whether `k` answers HIT for `r` now. */
static bool is_hit(request *r, const kvtier_key *k) {
    kvtier_lookup_answer a;
    counts.calls++;
    expect_ok(kvtier_manager_lookup(mgr, r->handle, k, 1, &a), "lookup before load");
    return a.stop == KVTIER_LOOKUP_HIT;
}

/* Loads up to MAX_BATCH keys that answer HIT, and checks every block. */
static void do_load(request *r) {
    int ids[MAX_BATCH];
    kvtier_key keys[MAX_BATCH];
    size_t n = 0;
    for (int tries = 0; tries < 3 * MAX_BATCH && n < 1 + below(MAX_BATCH); tries++) {
        int id = (int)below(NKEYS);
        kvtier_key k = key_view(id);
        if (is_hit(r, &k) && r->n_pins + n < 64) {
            ids[n] = id;
            keys[n++] = k;
        }
    }
    /* A lookup that started a promotion may have evicted a key found
     * before it: look the keys up again until one pass finds every kept
     * key HIT (such a pass starts nothing), and prepare_load must then
     * accept them. */
    for (bool stable = false; !stable && n > 0;) {
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            if (is_hit(r, &keys[i])) {
                ids[kept] = ids[i];
                keys[kept++] = keys[i];
            }
        }
        stable = kept == n;
        n = kept;
    }
    if (n == 0) return;
    uint32_t slots[MAX_BATCH];
    counts.calls++;
    expect_ok(kvtier_manager_prepare_load(mgr, r->handle, keys, n, slots), "prepare_load of HIT keys");
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&oracle_lock);
        int plans = slot_plans[slots[i]];
        pthread_mutex_unlock(&oracle_lock);
        if (plans) fail_at(slots[i], "prepare_load of key %d handed out slot %u, which a store plan still holds", ids[i], slots[i]);
        if (!block_is(slots[i], ids[i])) fail_at(slots[i], "prepare_load of key %d: slot %u holds another block", ids[i], slots[i]);
        note(slots[i], "%s pins key %d", r->name, ids[i]);
        key_slot[ids[i]] = slots[i];
        counts.loads_verified++;
        r->pins[r->n_pins].key = ids[i];
        r->pins[r->n_pins++].slot = slots[i];
        slot_count(slot_pins, slots[i], 1);
    }
    kvtier_key touched[MAX_BATCH];
    for (size_t i = 0; i < n; i++) touched[i] = keys[n - 1 - i];
    counts.calls++;
    expect_ok(kvtier_manager_touch(mgr, r->handle, touched, n), "touch");
}

static void do_complete_load(request *r) {
    if (r->n_pins == 0) return;
    size_t i = below((uint32_t)r->n_pins);
    int id = r->pins[i].key;
    kvtier_key k = key_view(id);
    counts.calls++;
    expect_ok(kvtier_manager_complete_load(mgr, r->handle, &k, 1),
              r->active ? "complete_load of a held pin" : "late complete_load of a held pin");
    if (!r->active && spent[id] > 0) {
        /* Charged with a pin another request's unpin took: nothing released. */
        note(r->pins[i].slot, "%s late completion of key %d charged (its pin was taken)", r->name, id);
        spent[id]--;
        counts.spent_completions++;
        r->pins[i] = r->pins[--r->n_pins];
    } else {
        drop_pin(r, i);
    }
    if (!r->active) {
        counts.late_loads++;
        check_pins("a late complete_load");
    }
}

/* Active request `r` unpins a key that a finished request's load holds and
 * `r` does not (as vLLM allows an active request): it takes a pin that is
 * not its own.  Only keys whose finished holders have untaken pins left, so
 * that every active holder's own completion still finds a pin. */
static void do_foreign_unpin(request *r) {
    int candidates[NKEYS];
    int n = 0;
    for (int q = 0; q < NREQ; q++) {
        if (!reqs[q].finished) continue;
        for (size_t i = 0; i < reqs[q].n_pins; i++) {
            int id = reqs[q].pins[i].key;
            bool own = false, listed = false;
            for (size_t j = 0; j < r->n_pins; j++) own |= r->pins[j].key == id;
            for (int c = 0; c < n; c++) listed |= candidates[c] == id;
            if (!own && !listed && pins_on(id, true) > spent[id]) candidates[n++] = id;
        }
    }
    if (n == 0) return;
    int c = (int)below((uint32_t)n);
    kvtier_key k = key_view(candidates[c]);
    counts.calls++;
    expect_ok(kvtier_manager_complete_load(mgr, r->handle, &k, 1), "complete_load of another request's pin");
    uint32_t slot = key_slot[candidates[c]];
    note(slot, "%s unpins key %d, a finished request's pin", r->name, candidates[c]);
    slot_count(slot_pins, slot, -1);
    spent[candidates[c]]++;
    counts.pins_taken++;
    check_pins("an unpin of another request's pin");
}

static void do_prepare_store(request *r) {
    if (r->n_plans + MAX_BATCH > 64) return;
    int ids[MAX_BATCH];
    kvtier_key keys[MAX_BATCH];
    size_t n = 1 + below(MAX_BATCH);
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int)below(NKEYS);
        keys[i] = key_view(ids[i]);
    }
    size_t idx[MAX_BATCH];
    uint32_t slots[MAX_BATCH];
    kvtier_key_buf evicted[MAX_BATCH];
    kvtier_store_plan plan = {idx, slots, evicted, 0, 0, false};
    counts.calls++;
    expect_ok(kvtier_manager_prepare_store(mgr, r->handle, keys, n, &plan), "prepare_store");
    if (plan.evicted_count > n) fail("prepare_store of %zu keys evicted %zu", n, plan.evicted_count);
    for (size_t e = 0; e < plan.evicted_count; e++) {
        if (evicted[e].len < 2 || evicted[e].len > 64) fail("evicted key of %zu bytes", evicted[e].len);
        int id = evicted[e].bytes[0];
        if (id < NKEYS && pins_on(id, false) > spent[id])
            fail("prepare_store evicted key %d, which live requests' loads still pin (%d pins, %d taken)", id,
                 pins_on(id, false), spent[id]);
    }
    if (plan.refused) return;
    size_t n_store = plan.store_count;
    for (size_t s = 0; s < n_store; s++) {
        if (idx[s] >= n) fail("prepare_store named position %zu of %zu keys", idx[s], n);
        check_free_for_handout(slots[s], "a store plan");
        note(slots[s], "%s plans key %d", r->name, ids[idx[s]]);
        r->plans[r->n_plans].key = ids[idx[s]];
        r->plans[r->n_plans++].slot = slots[s];
        slot_count(slot_plans, slots[s], 1);
    }
    /* The GPU writes some blocks now, the rest at completion. */
    for (size_t s = 0; s < n_store; s++)
        if (chance(50)) write_block(slots[s], ids[idx[s]]);
}

/* Completes part or all of the request's plan, with success or failure,
 * sometimes naming keys this request did not plan (other requests' planned
 * keys, random keys): those must be left alone. */
static void do_complete_store(request *r) {
    if (r->n_plans == 0) return;
    bool success = !chance(10);
    size_t take = chance(40) ? 1 + below((uint32_t)r->n_plans) : r->n_plans;
    if (take < r->n_plans) counts.plans_completed_in_parts++;
    kvtier_key keys[64 + 4];
    size_t n = 0;
    for (size_t c = 0; c < take; c++) {
        size_t i = below((uint32_t)r->n_plans);
        if (success) write_block(r->plans[i].slot, r->plans[i].key);
        else write_garbage(r->plans[i].slot);
        keys[n++] = key_view(r->plans[i].key);
        counts.blocks_stored += success;
        drop_plan(r, i);
    }
    size_t own_keys = n;
    if (chance(30)) { /* a key another request planned, or any key */
        request *o = &reqs[below(NREQ)];
        int id = (int)below(NKEYS);
        if (o != r && o->n_plans) {
            held *h = &o->plans[below((uint32_t)o->n_plans)];
            id = h->key;
            note(h->slot, "%s names %s's key %d in its completion (success %d)", r->name, o->name, id, (int)success);
        }
        /* A random key may be one this request still plans: completing it
         * would be right, so it is no foreign key then. */
        bool own = false;
        for (size_t i = 0; i < r->n_plans; i++) own |= r->plans[i].key == id;
        if (!own) {
            keys[n++] = key_view(id);
            counts.foreign_keys_named++;
        }
    }
    counts.calls++;
    kvtier_store_completion done;
    /* The status says whether a key named was left alone: exactly when a
     * key not this request's to complete was added. */
    expect_status(kvtier_manager_complete_store(mgr, r->handle, keys, n, success, &done),
                  own_keys == n ? KVTIER_STATUS_OK : KVTIER_STATUS_KEYS_IGNORED, "complete_store");
    if (done.ready != (success ? own_keys : 0) || done.dropped != (success ? 0 : own_keys))
        fail("complete_store of %zu own keys (success %d) made %zu ready and dropped %zu", own_keys,
             (int)success, done.ready, done.dropped);
    if (done.ignored + done.foreign + done.already_ready != n - own_keys)
        fail("complete_store of %zu keys, %zu not its own, left %zu alone", n, n - own_keys,
             done.ignored + done.foreign + done.already_ready);
}

/* The handle of the request finished last (0 before any). */
static kvtier_request_handle last_finished;

/* Finishes `r`; with `keep_loads` its loads stay in flight (an abort),
 * completed after the finish. */
static void finish_request(request *r, bool keep_loads) {
    while (r->n_pins && !keep_loads) do_complete_load(r);
    counts.calls++;
    expect_ok(kvtier_manager_request_finished(mgr, r->handle), "request_finished");
    last_finished = r->handle;
    r->active = false;
    r->finished = true;
}

/* Completes every outstanding plan (success), so the request can go. */
static void settle_request(request *r) {
    while (r->n_plans) {
        kvtier_key keys[64];
        size_t n = 0;
        while (r->n_plans) {
            write_block(r->plans[r->n_plans - 1].slot, r->plans[r->n_plans - 1].key);
            keys[n++] = key_view(r->plans[r->n_plans - 1].key);
            drop_plan(r, r->n_plans - 1);
        }
        counts.calls++;
        expect_ok(kvtier_manager_complete_store(mgr, r->handle, keys, n, true, NULL), "complete_store (settle)");
    }
}

static kvtier_event_buffer *event_keys;

static void drain_events(void) {
    kvtier_event ev[16];
    size_t written, queued;
    bool more = true;
    counts.calls++;
    expect_ok(kvtier_manager_events_queued(mgr, &queued, NULL), "events_queued");
    size_t taken = 0;
    while (more) {
        counts.calls++;
        expect_ok(kvtier_manager_take_events(mgr, event_keys, ev, 16, &written, &more), "take_events");
        taken += written;
        for (size_t i = 0; i < written; i++) {
            if (ev[i].kind != KVTIER_EVENT_STORED && ev[i].kind != KVTIER_EVENT_REMOVED && ev[i].kind != KVTIER_EVENT_CLEARED)
                fail("event of kind %d", ev[i].kind);
            if ((ev[i].kind == KVTIER_EVENT_CLEARED) != (ev[i].len == 0)) fail("event of kind %d with %zu keys", ev[i].kind, ev[i].len);
            for (size_t k = 0; k < ev[i].len; k++)
                if (ev[i].keys[k].len < 2 || ev[i].keys[k].len > 64) fail("event key of %zu bytes", ev[i].keys[k].len);
        }
    }
    /* Events only join the queue (no other thread takes): all that was
     * counted as queued was taken, in at least as many entries. */
    if (taken < queued) fail("events_queued counted %zu events, the takes handed out %zu", queued, taken);
}

/* A cache reset, between batches: every load finishes first.  Outstanding
 * plans become void: their slots are freed, so the "GPU" no longer writes
 * them, and their completions are ignored. */
static void do_reset(void) {
    for (int q = 0; q < NREQ; q++)
        while (reqs[q].active && reqs[q].n_pins) do_complete_load(&reqs[q]);
    counts.calls++;
    expect_ok(kvtier_manager_reset_cache(mgr), "reset_cache");
    /* The reset drops finished requests' pins, taken ones included (the
     * only pins left: active requests completed theirs). */
    for (int q = 0; q < NREQ; q++) reqs[q].n_pins = 0;
    pthread_mutex_lock(&oracle_lock);
    memset(slot_pins, 0, sizeof slot_pins);
    pthread_mutex_unlock(&oracle_lock);
    memset(spent, 0, sizeof spent);
    for (uint32_t slot = 0; slot < SLOTS; slot++) note(slot, "reset");
    counts.resets++;
    for (int q = 0; q < NREQ; q++) {
        request *r = &reqs[q];
        kvtier_key keys[64];
        size_t n = 0;
        while (r->n_plans) {
            keys[n++] = key_view(r->plans[r->n_plans - 1].key);
            drop_plan(r, r->n_plans - 1);
        }
        /* A finished request is finalized by the reset; an active one
         * completes its void plan, which is ignored. */
        if (n && r->active) {
            counts.calls++;
            kvtier_store_completion done;
            memset(&done, 0xff, sizeof done);
            expect_status(kvtier_manager_complete_store(mgr, r->handle, keys, n, true, &done),
                          KVTIER_STATUS_KEYS_IGNORED, "complete_store after reset");
            if (done.ready || done.dropped || done.ignored || done.foreign || done.already_ready)
                fail("complete_store with no store in flight reported keys");
        }
    }
    counts.calls++;
    expect_ok(kvtier_manager_reset_flushed(mgr), "reset_flushed");
}

/* Invalid calls: each must be refused with a status and change nothing. */
static void do_invalid(request *r) {
    kvtier_status st = KVTIER_STATUS_OK;
    kvtier_key k = key_view((int)below(NKEYS));
    uint8_t long_key[65] = {0};
    kvtier_lookup_answer answer;
    uint32_t slot;
    size_t idx;
    kvtier_store_plan plan = {&idx, &slot, NULL, 0, 0, false};
    switch (below(10)) {
    case 0:
        st = kvtier_manager_lookup(NULL, r->handle, &k, 1, &answer);
        break;
    case 1: /* 0 is never a handle; a finished request's handle is unknown */
        st = kvtier_manager_lookup(mgr, below(2) ? 0 : last_finished, &k, 1, &answer);
        break;
    case 2:
        k.len = 0;
        st = kvtier_manager_lookup(mgr, r->handle, &k, 1, &answer);
        break;
    case 3:
        k.data = long_key;
        k.len = 65;
        st = kvtier_manager_prepare_store(mgr, r->handle, &k, 1, &plan);
        break;
    case 4:
        st = kvtier_manager_prepare_load(mgr, r->handle, NULL, 3, &slot);
        break;
    case 5: { /* a key that is absent from the primary tier cannot be loaded */
        if (is_hit(r, &k)) return;
        st = kvtier_manager_prepare_load(mgr, r->handle, &k, 1, &slot);
        break;
    }
    case 6: {
        kvtier_job_result res;
        memset(&res, 0, sizeof res);
        res.id = 1u << 30;
        /* Tier 0 is the primary tier, 99 no tier, and a built-in tier
         * (fs, index 1) reports through polling only. */
        size_t bad[3] = {0, 99, 1};
        st = kvtier_manager_complete_job(mgr, bad[below(fs_tier_present ? 3 : 2)], &res);
        break;
    }
    case 7: {
        kvtier_request_handle h = 0;
        st = kvtier_manager_request_begin(mgr, r->name, NULL, &h, NULL); /* r is active: a duplicate */
        if (st != KVTIER_STATUS_OK && h != 0) fail("a refused request_begin wrote a handle");
        break;
    }
    case 9: { /* a finished request's late completion of a key it holds no pin of */
        request *f = NULL;
        for (int q = 0; q < NREQ && !f; q++)
            if (reqs[q].finished && reqs[q].n_pins) f = &reqs[q];
        if (!f) return;
        int id = (int)below(NKEYS);
        for (size_t i = 0; i < f->n_pins; i++)
            if (f->pins[i].key == id) return;
        k = key_view(id);
        st = kvtier_manager_complete_load(mgr, f->handle, &k, 1);
        break;
    }
    default:
        st = kvtier_manager_request_finished(mgr, 0);
        break;
    }
    counts.calls++;
    if (st == KVTIER_STATUS_OK) fail("an invalid call was accepted");
    counts.invalid_rejected++;
}

static void wait_idle(void) {
    int fd = -1;
    expect_ok(kvtier_manager_wake_fd(mgr, &fd), "wake_fd");
    bool pending = true;
    for (int waited = 0; waited < 20000 && pending; waited += 5) {
        counts.calls += 2;
        expect_ok(kvtier_manager_schedule_end(mgr), "schedule_end");
        expect_ok(kvtier_manager_has_pending_work(mgr, &pending), "has_pending_work");
        if (pending) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 5) > 0) {
                uint64_t c;
                if (read(fd, &c, sizeof c) < 0 && errno != EAGAIN) fail("read of the wake descriptor failed");
            }
        }
    }
    if (pending) fail("the manager still has pending work after 20 s");
}

static bool stat_present(size_t tier, const char *name) {
    static kvtier_tier_stat stats[512];
    size_t n = 0;
    expect_ok(kvtier_manager_read_tier_stats(mgr, tier, stats, 512, &n), "read_tier_stats");
    for (size_t i = 0; i < n; i++)
        if (strcmp(stats[i].name, name) == 0) return true;
    return false;
}

static double stat_value(size_t tier, const char *name) {
    static kvtier_tier_stat stats[512];
    size_t n = 0;
    expect_ok(kvtier_manager_read_tier_stats(mgr, tier, stats, 512, &n), "read_tier_stats");
    for (size_t i = 0; i < n; i++)
        if (strcmp(stats[i].name, name) == 0) return stats[i].value;
    fail("no statistic %s of tier %zu", name, tier);
    return 0;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    uint64_t seed = 1, ops = 20000;
    double seconds = 0;
    bool with_fs = false;
    long rss_limit_mib = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--ops") && i + 1 < argc) ops = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--fs")) with_fs = true;
        else if (!strcmp(argv[i], "--sync-tier")) sync_tier = true;
        else if (!strcmp(argv[i], "--rss-limit-mib") && i + 1 < argc) rss_limit_mib = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--seed N] [--ops N | --seconds N] [--fs] [--sync-tier] [--rss-limit-mib N]\n", argv[0]);
            return 2;
        }
    }
    rng_state = seed;
    fs_tier_present = with_fs;
    make_keys();
    expect_ok(kvtier_event_buffer_new(&event_keys), "event_buffer_new");

    char dir[64] = "";
    char json[512];
    if (with_fs) {
        snprintf(dir, sizeof dir, "/tmp/kvtier-fuzz-XXXXXX");
        if (!mkdtemp(dir)) fail("mkdtemp failed");
        snprintf(json, sizeof json,
                 "{\"block_bytes\": %d, \"primary\": {\"capacity\": %d, \"event_capacity\": 64},"
                 " \"tiers\": [{\"type\": \"fs\", \"options\": {\"directory\": \"%s\", \"capacity_bytes\": %d,"
                 " \"direct_io\": false, \"read_threads\": 2, \"write_threads\": 2}}]}",
                 BLOCK, SLOTS, dir, 40 * (BLOCK + 4096));
    } else {
        snprintf(json, sizeof json, "{\"block_bytes\": %d, \"primary\": {\"capacity\": %d, \"event_capacity\": 64}}",
                 BLOCK, SLOTS);
    }
    expect_ok(kvtier_manager_new_from_json(json, strlen(json), &mgr), "manager_new_from_json");
    size_t slot_bytes;
    uint32_t slot_count_out;
    expect_ok(kvtier_manager_slot_memory(mgr, (void **)&slot_base, &slot_stride, &slot_bytes, &slot_count_out),
              "slot_memory");
    if (slot_count_out != SLOTS || slot_bytes < BLOCK) fail("slot memory of %u slots of %zu bytes", slot_count_out, slot_bytes);

    c_tier *t = (c_tier *)calloc(1, sizeof *t);
    if (!t) fail("out of memory");
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->wake, NULL);
    pthread_cond_init(&t->idle, NULL);
    t->rng = seed * 2654435761u + 1;
    kvtier_tier_vtable vt = kvtier_tier_vtable_default();
    vt.user_data = t;
    vt.name = "fuzz";
    vt.lookup = ct_lookup;
    vt.submit_store = ct_submit;
    vt.submit_load = ct_submit;
    vt.has_pending_work = ct_pending;
    vt.drain = ct_drain;
    vt.shutdown = ct_shutdown;
    vt.destroy = ct_destroy;
    expect_ok(kvtier_manager_add_tier(mgr, &vt, NULL, &t->index), "add_tier");
    t->manager = mgr;
    for (int i = 0; i < WORKERS; i++) pthread_create(&t->threads[i], NULL, tier_worker, t);

    double start = now_s();
    long rss_start = -1;
    uint64_t op = 0;
    for (;; op++) {
        if (seconds > 0 ? now_s() - start >= seconds : op >= ops) break;
        current_op = op;
        if (op == 2000) rss_start = rss_kib();
        request *r = &reqs[below(NREQ)];
        if (!r->active) {
            /* A finished request completes its stores and loads late. */
            if (r->finished && r->n_pins && (r->n_plans == 0 || chance(50))) do_complete_load(r);
            else if (r->finished && r->n_plans) do_complete_store(r);
            else start_request(r);
            continue;
        }
        uint32_t roll = below(1000);
        if (roll < 200) do_lookup(r);
        else if (roll < 380) do_load(r);
        else if (roll < 470) do_complete_load(r);
        else if (roll < 500) do_foreign_unpin(r);
        else if (roll < 680) do_prepare_store(r);
        else if (roll < 820) do_complete_store(r);
        else if (roll < 860) finish_request(r, chance(50));
        else if (roll < 930) {
            counts.calls++;
            expect_ok(kvtier_manager_schedule_end(mgr), "schedule_end");
        } else if (roll < 960) drain_events();
        else if (roll < 995) do_invalid(r);
        else if (roll < 998) (void)stat_value(0, "pinned");
        else do_reset();
        if (rss_limit_mib > 0 && op % 100000 == 0 && rss_start > 0 && rss_kib() - rss_start > rss_limit_mib * 1024)
            fail("resident memory grew by %ld KiB (limit %ld MiB)", rss_kib() - rss_start, rss_limit_mib);
    }

    /* The end: every request settles and finishes, the tiers go idle. */
    for (int q = 0; q < NREQ; q++) {
        if (reqs[q].active) finish_request(&reqs[q], false);
        while (reqs[q].n_pins) do_complete_load(&reqs[q]);
        settle_request(&reqs[q]);
    }
    for (int id = 0; id < NKEYS; id++)
        if (spent[id]) fail("at the end key %d has %d taken pins no late completion was charged with", id, spent[id]);
    wait_idle();
    drain_events();
    double pending = stat_value(0, "write_pending"), pinned = stat_value(0, "pinned");
    if (pending != 0 || pinned != 0) fail("at the end %g slots are write pending and %g pinned", pending, pinned);
    /* Every resident block is right. */
    request *v = &reqs[0];
    start_request(v);
    size_t resident = 0;
    for (int id = 0; id < NKEYS; id++) {
        kvtier_key k = key_view(id);
        if (!is_hit(v, &k)) continue;
        uint32_t slot;
        expect_ok(kvtier_manager_prepare_load(mgr, v->handle, &k, 1, &slot), "final prepare_load");
        if (!block_is(slot, id)) fail_at(slot, "at the end key %d's slot %u holds another block", id, slot);
        expect_ok(kvtier_manager_complete_load(mgr, v->handle, &k, 1), "final complete_load");
        resident++;
    }
    finish_request(v, false);
    wait_idle();
    long rss_end = rss_kib();
    expect_ok(kvtier_manager_shutdown(mgr), "shutdown");
    kvtier_manager_free(mgr);
    kvtier_event_buffer_free(event_keys);
    if (with_fs) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "kvtier-fuzz: could not remove %s\n", dir);
    }
    printf("kvtier-fuzz: seed=%llu fs=%d ops=%llu calls=%llu invalid_rejected=%llu loads_verified=%llu "
           "blocks_stored=%llu parts=%llu foreign_keys=%llu resets=%llu tier_jobs=%zu tier_failed=%zu "
           "partial_loads=%zu cascade_blocks_checked=%zu resident_verified=%zu late_loads=%llu pins_taken=%llu "
           "spent_completions=%llu rss_kib=%ld->%ld secs=%.1f\n",
           (unsigned long long)seed, with_fs, (unsigned long long)op, (unsigned long long)counts.calls,
           (unsigned long long)counts.invalid_rejected, (unsigned long long)counts.loads_verified,
           (unsigned long long)counts.blocks_stored, (unsigned long long)counts.plans_completed_in_parts,
           (unsigned long long)counts.foreign_keys_named, (unsigned long long)counts.resets, tier_jobs_done,
           tier_jobs_failed, tier_partial_loads, tier_blocks_checked, resident, (unsigned long long)counts.late_loads,
           (unsigned long long)counts.pins_taken, (unsigned long long)counts.spent_completions, rss_start, rss_end,
           now_s() - start);
    return 0;
}
