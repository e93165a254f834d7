/*
 * engine_loop.c: an engine-like scheduler loop over the tiering manager
 * with one in-memory secondary tier written in C.
 *
 * The "GPU" writes a pattern derived from each key into the primary slot
 * it is given; completed stores cascade to the C tier, which copies the
 * slot bytes into its own memory.  Requests share prefixes, so blocks are
 * evicted from the small primary tier, found again in the C tier, promoted
 * back (the tier copies its bytes into the reserved slot) and loaded: every
 * loaded block must carry its key's pattern.  Exits non-zero on any
 * mismatch or failed call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "example_util.h"

#define SLOTS 32
#define BLOCK 256
#define MAX_STORED 1024
#define MAX_RESULTS 256
#define KEYS_PER_REQ 6
#define REQUESTS 96
#define BATCH 4

static uint8_t *slot_memory; /* SLOTS * BLOCK bytes: the primary tier's slots */

/* ---- the C tier: unbounded in-memory block store ---- */

typedef struct {
    uint8_t key[64];
    size_t len;
    uint8_t data[BLOCK];
} stored_block;

typedef struct {
    stored_block *blocks;
    size_t count;
    kvtier_job_result results[MAX_RESULTS];
    size_t n_results;
    size_t store_jobs, load_jobs, blocks_loaded;
} mem_tier;

static stored_block *find(mem_tier *t, const kvtier_key *k) {
    for (size_t i = 0; i < t->count; i++)
        if (t->blocks[i].len == k->len && memcmp(t->blocks[i].key, k->data, k->len) == 0)
            return &t->blocks[i];
    return NULL;
}

static int32_t tier_lookup(void *ud, const kvtier_key *key, const kvtier_request *req,
                           kvtier_lookup_result *answer) {
    (void)req;
    *answer = find((mem_tier *)ud, key) ? KVTIER_LOOKUP_HIT : KVTIER_LOOKUP_MISS;
    return KVTIER_STATUS_OK;
}

static int32_t finish(mem_tier *t, uint64_t id, bool ok, size_t n) {
    if (t->n_results == MAX_RESULTS) return KVTIER_STATUS_NO_SPACE;
    kvtier_job_result r;
    memset(&r, 0, sizeof r);
    r.id = id;
    r.success = ok;
    r.bytes = (uint64_t)n * BLOCK;
    t->results[t->n_results++] = r;
    return KVTIER_STATUS_OK;
}

static int32_t tier_submit_store(void *ud, const kvtier_job *job) {
    mem_tier *t = (mem_tier *)ud;
    t->store_jobs++;
    for (size_t i = 0; i < job->len; i++) {
        if (find(t, &job->keys[i])) continue; /* skip keys it has */
        if (t->count == MAX_STORED) return KVTIER_STATUS_NO_SPACE;
        stored_block *b = &t->blocks[t->count++];
        memcpy(b->key, job->keys[i].data, job->keys[i].len);
        b->len = job->keys[i].len;
        memcpy(b->data, slot_memory + (size_t)job->slots[i] * BLOCK, BLOCK);
    }
    return finish(t, job->id, true, job->len);
}

static int32_t tier_submit_load(void *ud, const kvtier_job *job) {
    mem_tier *t = (mem_tier *)ud;
    t->load_jobs++;
    for (size_t i = 0; i < job->len; i++) {
        stored_block *b = find(t, &job->keys[i]);
        if (!b) return finish(t, job->id, false, 0);
        memcpy(slot_memory + (size_t)job->slots[i] * BLOCK, b->data, BLOCK);
        t->blocks_loaded++;
    }
    return finish(t, job->id, true, job->len);
}

static int32_t tier_poll(void *ud, kvtier_job_result *out, size_t cap, size_t *written) {
    mem_tier *t = (mem_tier *)ud;
    size_t n = t->n_results < cap ? t->n_results : cap;
    memcpy(out, t->results, n * sizeof *out);
    memmove(t->results, t->results + n, (t->n_results - n) * sizeof *out);
    t->n_results -= n;
    *written = n;
    return KVTIER_STATUS_OK;
}

static int32_t tier_pending(void *ud, bool *pending) {
    *pending = ((mem_tier *)ud)->n_results > 0;
    return KVTIER_STATUS_OK;
}

static size_t final_store_jobs, final_load_jobs, final_blocks_loaded;

static void tier_destroy(void *ud) {
    mem_tier *t = (mem_tier *)ud;
    final_store_jobs = t->store_jobs;
    final_load_jobs = t->load_jobs;
    final_blocks_loaded = t->blocks_loaded;
    free(t->blocks);
    free(t);
}

/* ---- the engine ---- */

typedef struct {
    char id[32];
    kvtier_request_handle handle; /* from kvtier_manager_request_begin */
    uint8_t keys[KEYS_PER_REQ][8];
    kvtier_key ckeys[KEYS_PER_REQ];
    int started;
    size_t hits;
    size_t to_store[KEYS_PER_REQ];
    size_t n_store;
} request;

static void make_request(request *r, int i) {
    snprintf(r->id, sizeof r->id, "req-%d", i);
    int prefix = i % 10; /* ten conversations, each re-sent */
    for (int j = 0; j < KEYS_PER_REQ; j++) {
        uint64_t v = (uint64_t)prefix * 1000 + (uint64_t)j;
        for (int b = 0; b < 8; b++) r->keys[j][b] = (uint8_t)(v >> (56 - 8 * b));
        r->ckeys[j].data = r->keys[j];
        r->ckeys[j].len = 8;
    }
    r->started = 0;
}

int main(void) {
    slot_memory = (uint8_t *)calloc(SLOTS, BLOCK);
    mem_tier *tier = (mem_tier *)calloc(1, sizeof *tier);
    tier->blocks = (stored_block *)calloc(MAX_STORED, sizeof *tier->blocks);
    if (!slot_memory || !tier || !tier->blocks) return EXIT_FAILURE;

    kvtier_manager_options opts = kvtier_manager_options_default();
    opts.capacity = SLOTS;
    opts.event_capacity = 4096;
    kvtier_manager *m = NULL;
    CHECK(kvtier_manager_new(&opts, NULL, &m));

    kvtier_tier_vtable vt = kvtier_tier_vtable_default();
    vt.user_data = tier;
    vt.name = "mem";
    vt.medium = KVTIER_MEDIUM_CPU;
    vt.locality = KVTIER_LOCALITY_LOCAL;
    vt.lookup = tier_lookup;
    vt.submit_store = tier_submit_store;
    vt.submit_load = tier_submit_load;
    vt.poll_finished = tier_poll;
    vt.has_pending_work = tier_pending;
    vt.destroy = tier_destroy;
    size_t tier_index = 0;
    CHECK(kvtier_manager_add_tier(m, &vt, NULL, &tier_index));

    request reqs[REQUESTS];
    for (int i = 0; i < REQUESTS; i++) make_request(&reqs[i], i);

    size_t next = 0, verified = 0, stored_blocks = 0, deferrals = 0, steps = 0;
    request *active[BATCH];
    size_t n_active = 0;
    uint32_t slots[KEYS_PER_REQ];
    size_t index[KEYS_PER_REQ];
    kvtier_event events[64];
    /* The keys of the events taken live in this buffer, this loop's own,
       until its next take. */
    kvtier_event_buffer *event_keys = NULL;
    CHECK(kvtier_event_buffer_new(&event_keys));

    while ((next < REQUESTS || n_active > 0) && steps < 1000) {
        steps++;
        while (n_active < BATCH && next < REQUESTS) active[n_active++] = &reqs[next++];
        int deferred[BATCH] = {0};
        for (size_t a = 0; a < n_active; a++) {
            request *r = active[a];
            if (!r->started) {
                CHECK(kvtier_manager_request_begin(m, r->id, NULL, &r->handle, NULL));
                r->started = 1;
            }
            /* One lookup of all the request's keys: `hits` leading keys are
             * ready; it started the promotions of every later block of the
             * prefix the C tier has, and `pending` of them are on their way. */
            kvtier_lookup_answer answer;
            CHECK(kvtier_manager_lookup(m, r->handle, r->ckeys, KEYS_PER_REQ, &answer));
            size_t h = answer.hits;
            r->hits = 0;
            r->n_store = 0;
            if (answer.pending > 0) {
                deferred[a] = 1; /* ask again next step, after schedule_end */
                deferrals++;
                continue;
            }
            /* Nothing on its way: load the hits, compute and store the rest. */
            if (h > 0) {
                CHECK(kvtier_manager_prepare_load(m, r->handle, r->ckeys, h, slots));
                CHECK(kvtier_manager_touch(m, r->handle, r->ckeys, h));
                for (size_t j = 0; j < h; j++) { /* the "GPU" reads the block */
                    const uint8_t *blk = slot_memory + (size_t)slots[j] * BLOCK;
                    for (size_t o = 0; o < BLOCK; o++) {
                        if (blk[o] != example_pattern(r->keys[j], 8, o)) {
                            fprintf(stderr, "%s: block %zu (slot %u) byte %zu is wrong\n", r->id, j, slots[j], o);
                            return EXIT_FAILURE;
                        }
                    }
                    verified++;
                }
                r->hits = h;
            }
            if (h < KEYS_PER_REQ) {
                kvtier_store_plan plan = {index, slots, NULL, 0, 0, false};
                CHECK(kvtier_manager_prepare_store(m, r->handle, r->ckeys + h, KEYS_PER_REQ - h, &plan));
                for (size_t s = 0; !plan.refused && s < plan.store_count; s++) { /* the "GPU" writes the block */
                    size_t j = h + index[s];
                    uint8_t *blk = slot_memory + (size_t)slots[s] * BLOCK;
                    for (size_t o = 0; o < BLOCK; o++) blk[o] = example_pattern(r->keys[j], 8, o);
                    r->to_store[r->n_store++] = j;
                }
            }
        }
        CHECK(kvtier_manager_schedule_end(m));
        size_t kept = 0;
        for (size_t a = 0; a < n_active; a++) {
            request *r = active[a];
            if (deferred[a]) {
                active[kept++] = r;
                continue;
            }
            if (r->hits) CHECK(kvtier_manager_complete_load(m, r->handle, r->ckeys, r->hits));
            kvtier_key done[KEYS_PER_REQ];
            for (size_t s = 0; s < r->n_store; s++) done[s] = r->ckeys[r->to_store[s]];
            if (r->n_store) CHECK(kvtier_manager_complete_store(m, r->handle, done, r->n_store, true, NULL));
            stored_blocks += r->n_store;
            CHECK(kvtier_manager_request_finished(m, r->handle));
        }
        n_active = kept;
        size_t n_ev = 0;
        bool more = true;
        while (more) CHECK(kvtier_manager_take_events(m, event_keys, events, 64, &n_ev, &more));
    }
    bool pending = true;
    for (int i = 0; i < 10 && pending; i++) {
        CHECK(kvtier_manager_schedule_end(m));
        CHECK(kvtier_manager_has_pending_work(m, &pending));
    }
    /* Tier statistics are name/value pairs (docs/statistics.md lists them). */
    size_t n_stats = 0;
    kvtier_tier_stat stats[128];
    double promotions = -1, pinned = -1;
    CHECK(kvtier_manager_read_tier_stats(m, tier_index, stats, 128, &n_stats));
    for (size_t i = 0; i < n_stats; i++)
        if (strcmp(stats[i].name, "promotion_blocks") == 0) promotions = stats[i].value;
    CHECK(kvtier_manager_read_tier_stats(m, 0, stats, 128, &n_stats));
    for (size_t i = 0; i < n_stats; i++)
        if (strcmp(stats[i].name, "pinned") == 0) pinned = stats[i].value;
    CHECK(kvtier_manager_shutdown(m));
    kvtier_manager_free(m);
    kvtier_event_buffer_free(event_keys);
    free(slot_memory);

    printf("engine_loop: %zu steps, %zu blocks stored, %zu loaded blocks verified, %zu deferrals, "
           "%zu store jobs, %zu load jobs (%zu blocks promoted, %.0f by stats)\n",
           steps, stored_blocks, verified, deferrals, final_store_jobs, final_load_jobs, final_blocks_loaded,
           promotions);
    if (pending || pinned != 0 || final_load_jobs == 0 || final_blocks_loaded == 0 ||
        (double)final_blocks_loaded != promotions || verified == 0 || next != REQUESTS) {
        fprintf(stderr, "engine_loop: expected promotions, verified loads and no pinned slot at the end\n");
        return EXIT_FAILURE;
    }
    return EXIT_SUCCESS;
}
