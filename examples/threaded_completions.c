/*
 * threaded_completions.c: a C tier that finishes its jobs on its own worker
 * threads and reports them with kvtier_manager_complete_job, the
 * thread-safe call (the tier has no poll_finished).  The engine stores
 * blocks (they cascade to the tier), overwrites the primary tier with other
 * blocks (evicting the first ones), then promotes the first ones back and
 * checks their bytes.  `drain` waits for the workers, as reset_cache needs.
 * Exits non-zero on any mismatch or failed call.
 */
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier.h"
#include "example_util.h"

#define SLOTS 16
#define BLOCK 128
#define WORKERS 3
#define KEYS 16
#define MAX_JOB 16
#define QUEUE 256

static uint8_t *slot_memory;

typedef struct {
    uint64_t id;
    int32_t direction;
    size_t len;
    uint8_t keys[MAX_JOB];
    uint32_t slots[MAX_JOB];
} queued_job;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    queued_job queue[QUEUE];
    size_t head, count, busy;
    int stop;
    pthread_t threads[WORKERS];
    uint8_t store[256][BLOCK]; /* the tier's memory, by key byte */
    uint8_t present[256];
    const kvtier_manager *manager; /* set after registration */
    size_t tier_index;
    size_t completed, report_failures;
} thread_tier;

static void *worker(void *arg) {
    thread_tier *t = (thread_tier *)arg;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (!t->stop && t->count == 0) pthread_cond_wait(&t->wake, &t->lock);
        if (t->count == 0 && t->stop) break;
        queued_job job = t->queue[t->head];
        t->head = (t->head + 1) % QUEUE;
        t->count--;
        t->busy++;
        pthread_mutex_unlock(&t->lock);
        bool ok = true;
        for (size_t i = 0; i < job.len; i++) { /* the copy, outside the lock */
            uint8_t *slot = slot_memory + (size_t)job.slots[i] * BLOCK;
            if (job.direction == KVTIER_JOB_STORE) {
                memcpy(t->store[job.keys[i]], slot, BLOCK);
            } else if (t->present[job.keys[i]]) {
                memcpy(slot, t->store[job.keys[i]], BLOCK);
            } else {
                ok = false;
            }
        }
        pthread_mutex_lock(&t->lock);
        if (job.direction == KVTIER_JOB_STORE)
            for (size_t i = 0; i < job.len; i++) t->present[job.keys[i]] = 1;
        pthread_mutex_unlock(&t->lock);
        kvtier_job_result r;
        memset(&r, 0, sizeof r);
        r.id = job.id;
        r.success = ok;
        r.bytes = (uint64_t)job.len * BLOCK;
        kvtier_status st = kvtier_manager_complete_job(t->manager, t->tier_index, &r);
        pthread_mutex_lock(&t->lock);
        if (st != KVTIER_STATUS_OK) t->report_failures++;
        t->completed++;
        t->busy--;
        if (t->busy == 0 && t->count == 0) pthread_cond_broadcast(&t->idle);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

static int32_t tt_lookup(void *ud, const kvtier_key *k, const kvtier_request *r, kvtier_lookup_result *answer) {
    thread_tier *t = (thread_tier *)ud;
    (void)r;
    pthread_mutex_lock(&t->lock);
    *answer = t->present[k->data[0]] ? KVTIER_LOOKUP_HIT : KVTIER_LOOKUP_MISS;
    pthread_mutex_unlock(&t->lock);
    return KVTIER_STATUS_OK;
}

static int32_t tt_submit(void *ud, const kvtier_job *job) {
    thread_tier *t = (thread_tier *)ud;
    if (job->len > MAX_JOB) return KVTIER_STATUS_INVALID_ARGUMENT;
    pthread_mutex_lock(&t->lock);
    if (t->count == QUEUE) {
        pthread_mutex_unlock(&t->lock);
        return KVTIER_STATUS_NO_SPACE;
    }
    queued_job *q = &t->queue[(t->head + t->count) % QUEUE];
    q->id = job->id;
    q->direction = job->direction;
    q->len = job->len;
    for (size_t i = 0; i < job->len; i++) {
        q->keys[i] = job->keys[i].data[0];
        q->slots[i] = job->slots[i];
    }
    t->count++;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    return KVTIER_STATUS_OK;
}

static int32_t tt_pending(void *ud, bool *pending) {
    thread_tier *t = (thread_tier *)ud;
    pthread_mutex_lock(&t->lock);
    *pending = t->count > 0 || t->busy > 0;
    pthread_mutex_unlock(&t->lock);
    return KVTIER_STATUS_OK;
}

static int32_t tt_drain(void *ud) {
    thread_tier *t = (thread_tier *)ud;
    pthread_mutex_lock(&t->lock);
    while (t->count > 0 || t->busy > 0) pthread_cond_wait(&t->idle, &t->lock);
    pthread_mutex_unlock(&t->lock);
    return KVTIER_STATUS_OK;
}

static int32_t tt_shutdown(void *ud) {
    thread_tier *t = (thread_tier *)ud;
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->lock);
    for (int i = 0; i < WORKERS; i++) pthread_join(t->threads[i], NULL);
    return KVTIER_STATUS_OK;
}

static size_t destroyed_completed = 0, destroyed_failures = 1;

static void tt_destroy(void *ud) {
    thread_tier *t = (thread_tier *)ud;
    destroyed_completed = t->completed;
    destroyed_failures = t->report_failures;
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->wake);
    pthread_cond_destroy(&t->idle);
    free(t);
}

/* Sleeps up to 10 ms on the manager's wake-up descriptor, which the
 * workers' kvtier_manager_complete_job calls make readable, then resets it. */
static void sleep_on_wake_fd(kvtier_manager *m) {
    int fd = -1;
    CHECK(kvtier_manager_wake_fd(m, &fd));
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, 10) > 0) {
        uint64_t count;
        if (read(fd, &count, sizeof count) < 0) {
            /* Already reset by an earlier read: nothing to do. */
        }
    }
}

/* Waits (up to 30 s) until the manager has no pending work, sleeping
 * between steps instead of spinning. */
static void wait_idle(kvtier_manager *m) {
    bool pending = true;
    for (int waited_ms = 0; waited_ms < 30000; waited_ms += 10) {
        CHECK(kvtier_manager_schedule_end(m));
        CHECK(kvtier_manager_has_pending_work(m, &pending));
        if (!pending) {
            return;
        }
        sleep_on_wake_fd(m);
    }
    fprintf(stderr, "the tier never finished its jobs\n");
    exit(EXIT_FAILURE);
}

/* Stores keys first..first+n-1 for request `req`, writing their pattern. */
static void store(const kvtier_manager *m, kvtier_request_handle req, uint8_t *key_bytes, size_t first,
                  size_t n) {
    kvtier_key keys[KEYS];
    size_t idx[KEYS];
    uint32_t slots[KEYS];
    kvtier_store_plan plan = {idx, slots, NULL, 0, 0, false};
    example_byte_keys(key_bytes + first, n, keys);
    CHECK(kvtier_manager_prepare_store(m, req, keys, n, &plan));
    size_t n_store = plan.store_count;
    if (plan.refused) {
        fprintf(stderr, "store refused\n");
        exit(EXIT_FAILURE);
    }
    kvtier_key done[KEYS];
    for (size_t s = 0; s < n_store; s++) {
        uint8_t k = key_bytes[first + idx[s]];
        for (size_t o = 0; o < BLOCK; o++) slot_memory[(size_t)slots[s] * BLOCK + o] = example_pattern(&k, 1, o);
        done[s] = keys[idx[s]];
    }
    CHECK(kvtier_manager_complete_store(m, req, done, n_store, true, NULL));
}

int main(void) {
    static uint8_t key_bytes[2 * KEYS];
    for (int i = 0; i < 2 * KEYS; i++) key_bytes[i] = (uint8_t)(i + 1);
    slot_memory = (uint8_t *)calloc(SLOTS, BLOCK);
    thread_tier *t = (thread_tier *)calloc(1, sizeof *t);
    if (!slot_memory || !t) return EXIT_FAILURE;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->wake, NULL);
    pthread_cond_init(&t->idle, NULL);

    kvtier_manager_options opts = kvtier_manager_options_default();
    opts.capacity = SLOTS;
    kvtier_manager *m = NULL;
    CHECK(kvtier_manager_new(&opts, NULL, &m));
    kvtier_tier_vtable vt = kvtier_tier_vtable_default();
    vt.user_data = t;
    vt.name = "threaded";
    vt.lookup = tt_lookup;
    vt.submit_store = tt_submit;
    vt.submit_load = tt_submit;
    vt.has_pending_work = tt_pending;
    vt.drain = tt_drain;
    vt.shutdown = tt_shutdown;
    vt.destroy = tt_destroy;
    CHECK(kvtier_manager_add_tier(m, &vt, NULL, &t->tier_index));
    t->manager = m;
    for (int i = 0; i < WORKERS; i++) pthread_create(&t->threads[i], NULL, worker, t);

    /* 1. store keys 1..16 (they cascade), then 17..32 in small batches (evicting the first) */
    kvtier_request_handle writer = 0, reader = 0;
    CHECK(kvtier_manager_request_begin(m, "writer", NULL, &writer, NULL));
    store(m, writer, key_bytes, 0, KEYS);
    wait_idle(m);
    for (size_t b = 0; b < KEYS; b += 4) {
        store(m, writer, key_bytes, KEYS + b, 4);
        wait_idle(m);
    }
    CHECK(kvtier_manager_request_finished(m, writer));

    /* 2. a reader finds keys 1..16 in the tier and promotes them back */
    CHECK(kvtier_manager_request_begin(m, "reader", NULL, &reader, NULL));
    size_t promoted = 0, verified = 0;
    for (size_t i = 0; i < KEYS; i++) {
        kvtier_key k;
        k.data = &key_bytes[i];
        k.len = 1;
        kvtier_lookup_answer answer = {0, KVTIER_LOOKUP_MISS, KVTIER_MISS_NONE, 0, 0};
        for (int tries = 0; tries < 3000; tries++) { /* up to about 30 s */
            CHECK(kvtier_manager_lookup(m, reader, &k, 1, &answer));
            if (answer.stop == KVTIER_LOOKUP_HIT || answer.stop == KVTIER_LOOKUP_MISS) break;
            if (tries == 0) promoted++;
            CHECK(kvtier_manager_schedule_end(m)); /* submits the load; workers finish it */
            sleep_on_wake_fd(m);
        }
        if (answer.stop != KVTIER_LOOKUP_HIT) {
            fprintf(stderr, "key %u was not promoted back\n", key_bytes[i]);
            return EXIT_FAILURE;
        }
        uint32_t slot;
        CHECK(kvtier_manager_prepare_load(m, reader, &k, 1, &slot));
        for (size_t o = 0; o < BLOCK; o++) {
            if (slot_memory[(size_t)slot * BLOCK + o] != example_pattern(&key_bytes[i], 1, o)) {
                fprintf(stderr, "key %u: byte %zu of slot %u is wrong\n", key_bytes[i], o, slot);
                return EXIT_FAILURE;
            }
        }
        verified++;
        CHECK(kvtier_manager_complete_load(m, reader, &k, 1));
    }
    CHECK(kvtier_manager_request_finished(m, reader));
    CHECK(kvtier_manager_reset_cache(m)); /* drains the workers */
    wait_idle(m);
    CHECK(kvtier_manager_shutdown(m));
    kvtier_manager_free(m);
    free(slot_memory);
    printf("threaded_completions: %zu blocks promoted back from worker threads, %zu verified, %zu jobs completed\n",
           promoted, verified, destroyed_completed);
    if (promoted == 0 || verified != KEYS || destroyed_failures != 0) {
        fprintf(stderr, "threaded_completions: expected promotions and no failed completion report\n");
        return EXIT_FAILURE;
    }
    return EXIT_SUCCESS;
}
