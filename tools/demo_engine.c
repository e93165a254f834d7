/*
 * kvtier-demo's engine: replays a workload with real bytes, through a
 * primary tier in a shared memory region and the file-system tier in a
 * fresh directory, as an engine's scheduler does.
 *
 * Each step serves a batch of requests; a request joins as soon as one
 * leaves.  Per request, the engine's pattern:
 *
 *   1. kvtier_manager_lookup of all its keys: `hits` leading keys are
 *      ready, `pending` more are on their way (the lookup started the
 *      promotions of every block of the prefix the fs tier holds);
 *   2. while `pending` > 0 the request waits: it asks again next step;
 *   3. then it loads its `hits` keys (prepare_load, touch) and stores the
 *      rest (prepare_store).  If the primary tier has no room for the
 *      store, the blocks are computed and not kept, as in vLLM, or, with
 *      `retry_refused`, the request gives its loads back and runs again
 *      in a later step.
 *
 * The end of the step (schedule_end) submits the promotions.  Then the
 * "GPU" runs: it reads every loaded block, checking its bytes against its
 * key's pattern, and writes each computed block's pattern into its slot;
 * the loads and stores complete, the stores cascade to the fs tier, and
 * the request finishes.  When every request of the batch waits, the engine
 * sleeps on the manager's wake-up descriptor.
 *
 * With `vllm_rules` the engine asks as vLLM 0.33's scheduler does, one key
 * at a time up to the first that is not ready
 * (kvtier_manager_lookup_per_key: one promotion per step), and the manager
 * holds nothing for waiting requests and has no wait bound.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demo.h"

engine_config engine_config_default(void) {
    engine_config c;
    memset(&c, 0, sizeof c);
    c.slots = 4096;
    c.block_kib = 16;
    c.batch = 16;
    c.fs_threads = 4;
    c.fs_cap_mib = 2048;
    c.fs_layout = KVTIER_FS_LAYOUT_SEGMENTS;
    c.parent = getenv("TMPDIR");
    c.policy = "lru";
    c.step_us = 1000;
    c.wait_steps = kvtier_manager_options_default().progress_wait_steps;
    return c;
}

/* One request in the running batch, with buffers sized for the longest. */
typedef struct {
    const wl_request *r;
    kvtier_request_handle handle; /* from kvtier_manager_request_begin */
    size_t lookups;               /* its lookups so far (since its last refused store) */
    size_t refusals;              /* its stores refused so far (retry_refused) */
    size_t first_hits;            /* the hits of its first lookup */
    double since;                 /* when its first lookup was */
    bool waiting;                 /* blocks on their way: asks again next step */
    size_t h;                     /* blocks loaded */
    uint32_t *slots;              /* their slots */
    size_t n_store;               /* blocks stored (computed and kept) */
    size_t *store_idx;            /* their positions after h */
    uint32_t *store_slots;
    kvtier_key *store_keys;
} active_req;

static void sleep_us(unsigned long us) {
    struct timespec ts;
    ts.tv_sec = (time_t)(us / 1000000);
    ts.tv_nsec = (long)(us % 1000000) * 1000;
    nanosleep(&ts, NULL);
}

/* Step 1 and 3 for one request: its lookup, then (unless it waits) its
 * loads and stores. */
static void serve(const engine_config *c, kvtier_manager *m, active_req *q, const workload *wl,
                  engine_result *t) {
    const kvtier_key *keys = wl->keys + q->r->first;
    size_t n = q->r->n;
    kvtier_lookup_answer a;
    if (c->vllm_rules) CALL("lookup_per_key", kvtier_manager_lookup_per_key(m, q->handle, keys, n, &a));
    else CALL("lookup", kvtier_manager_lookup(m, q->handle, keys, n, &a));
    t->lookups++;
    if (q->lookups++ == 0 && q->refusals == 0) {
        q->first_hits = a.hits;
        q->since = now_s();
    }
    q->h = 0;
    q->n_store = 0;
    q->waiting = a.pending > 0;
    if (q->waiting) {
        t->deferrals++;
        if (now_s() - q->since > WAIT_LIMIT_S) {
            fprintf(stderr, "%s: request %s waited %.0f s (%zu lookups)\n", prog, q->r->name, WAIT_LIMIT_S,
                    q->lookups);
            exit(EXIT_FAILURE);
        }
        return;
    }
    /* Nothing on its way: load the hits, compute the rest. */
    q->h = a.hits;
    if (q->h > 0) {
        CALL("prepare_load", kvtier_manager_prepare_load(m, q->handle, keys, q->h, q->slots));
        CALL("touch", kvtier_manager_touch(m, q->handle, keys, q->h));
    }
    if (q->h < n) {
        kvtier_store_plan plan = {q->store_idx, q->store_slots, NULL, 0, 0, false};
        CALL("prepare_store", kvtier_manager_prepare_store(m, q->handle, keys + q->h, n - q->h, &plan));
        q->n_store = plan.store_count;
        if (plan.refused) {
            /* No free slot (they are pinned by loads, holds, and stores
             * still on their way to disk). */
            t->refused++;
            if (c->retry_refused) {
                /* Give the loaded blocks back and run the whole request
                 * in a later step. */
                if (q->h) CALL("complete_load", kvtier_manager_complete_load(m, q->handle, keys, q->h));
                q->h = 0;
                q->n_store = 0;
                q->waiting = true;
                q->lookups = 0;
                if (++q->refusals > t->max_refusals) t->max_refusals = q->refusals;
                return;
            }
            /* Else the blocks are computed and not kept, as in vLLM. */
        }
    }
    if (a.reason == KVTIER_MISS_TIMED_OUT) t->timed_out++;
    if (a.reason == KVTIER_MISS_NO_ROOM) t->no_room++;
    if (q->lookups == 1) t->served_first++;
    t->sum_lookups += q->lookups;
    if (q->lookups > t->max_lookups) {
        t->max_lookups = q->lookups;
        snprintf(t->max_name, sizeof t->max_name, "%s", q->r->name);
    }
}

/* Step 4 for one request that did not wait: the "GPU" reads its loaded
 * blocks and writes its computed ones; then it finishes. */
static void run_on_gpu(const engine_config *c, kvtier_manager *m, active_req *q, const workload *wl,
                       uint8_t *base, size_t stride, engine_result *t) {
    size_t block_bytes = (size_t)c->block_kib * 1024;
    const kvtier_key *keys = wl->keys + q->r->first;
    for (size_t j = 0; j < q->h; j++) {
        if (!check_block(base + (size_t)q->slots[j] * stride, block_bytes, &keys[j])) {
            if (t->failures++ < 10)
                fprintf(stderr, "%s: request %s: block %zu (slot %u) has wrong bytes\n", prog, q->r->name, j,
                        q->slots[j]);
        }
    }
    size_t ready_first = q->first_hits < q->h ? q->first_hits : q->h;
    t->primary_hits += ready_first;
    t->waited_hits += q->h - ready_first;
    if (q->h) CALL("complete_load", kvtier_manager_complete_load(m, q->handle, keys, q->h));
    for (size_t s = 0; s < q->n_store; s++) {
        const kvtier_key *k = &keys[q->h + q->store_idx[s]];
        write_block(base + (size_t)q->store_slots[s] * stride, block_bytes, k);
        q->store_keys[s] = *k;
    }
    if (q->n_store)
        CALL("complete_store", kvtier_manager_complete_store(m, q->handle, q->store_keys, q->n_store, true, NULL));
    t->computed += q->r->n - q->h;
    t->stored += q->n_store;
    CALL("request_finished", kvtier_manager_request_finished(m, q->handle));
    t->finished++;
}

void engine_run(const engine_config *c, const workload *wl, engine_result *t) {
    memset(t, 0, sizeof *t);
    size_t block_bytes = (size_t)c->block_kib * 1024;
    snprintf(t->region_name, sizeof t->region_name, "kvtier-demo-%ld-%ld", (long)getpid(), (long)time(NULL));
    make_demo_dir(c->parent, t->dir);

    kvtier_region_options ro = kvtier_region_options_default();
    ro.name = t->region_name;
    ro.slot_count = (uint32_t)c->slots;
    ro.slot_bytes = block_bytes;
    kvtier_region *region = NULL;
    CALL("kvtier_region_new", kvtier_region_new(&ro, &region));
    /* Every process that maps the region (only this one here) has it:
     * remove its name now, so that even a crash leaves nothing in /dev/shm.
     * The mapping stays until the region is closed and the manager freed. */
    bool unlinked = false;
    CALL("kvtier_region_unlink", kvtier_region_unlink(region, &unlinked));
    void *base_v = NULL;
    size_t stride = 0;
    CALL("kvtier_region_base", kvtier_region_base(region, &base_v));
    CALL("kvtier_region_stride", kvtier_region_stride(region, &stride));
    uint8_t *base = (uint8_t *)base_v;

    kvtier_manager_options mo = kvtier_manager_options_default();
    mo.capacity = (uint32_t)c->slots;
    mo.block_bytes = block_bytes;
    mo.policy = c->policy;
    mo.progress_hold = !c->vllm_rules;
    mo.progress_wait_steps = c->vllm_rules ? 0 : c->wait_steps;
    mo.progress_wait_ms = 0;
    kvtier_manager *m = NULL;
    /* The manager's slots are the region's: the fs tier copies through them. */
    CALL("kvtier_manager_new", kvtier_manager_new(&mo, region, &m));

    kvtier_fs_options fo = kvtier_fs_options_default();
    fo.directory = t->dir;
    fo.read_threads = (uint32_t)c->fs_threads;
    fo.write_threads = (uint32_t)c->fs_threads;
    fo.capacity_bytes = (uint64_t)c->fs_cap_mib << 20;
    fo.layout = c->fs_layout;
    size_t fs_tier = 0;
    CALL("kvtier_manager_add_fs_tier", kvtier_manager_add_fs_tier(m, &fo, &fs_tier));
    int wake = -1;
    CALL("kvtier_manager_wake_fd", kvtier_manager_wake_fd(m, &wake));

    size_t batch = c->batch, mk = wl->max_keys ? wl->max_keys : 1;
    active_req *act = (active_req *)xmalloc(batch * sizeof *act);
    for (size_t a = 0; a < batch; a++) {
        act[a].slots = (uint32_t *)xmalloc(mk * sizeof(uint32_t));
        act[a].store_idx = (size_t *)xmalloc(mk * sizeof(size_t));
        act[a].store_slots = (uint32_t *)xmalloc(mk * sizeof(uint32_t));
        act[a].store_keys = (kvtier_key *)xmalloc(mk * sizeof(kvtier_key));
    }
    active_req **run = (active_req **)xmalloc(batch * sizeof *run);
    active_req **spare = (active_req **)xmalloc(batch * sizeof *spare);
    for (size_t a = 0; a < batch; a++) spare[a] = &act[batch - 1 - a];
    size_t n_run = 0, n_spare = batch, next = 0, last_finish = 0;
    double t0 = now_s();

    while (next < wl->n_reqs || n_run > 0) {
        t->steps++;
        /* 1. New requests join the batch. */
        while (n_run < batch && next < wl->n_reqs) {
            active_req *q = spare[--n_spare];
            q->r = &wl->reqs[next++];
            q->lookups = 0;
            q->refusals = 0;
            CALL("request_begin", kvtier_manager_request_begin(m, q->r->name, NULL, &q->handle, NULL));
            run[n_run++] = q;
            t->started++;
        }
        /* 2. Lookups; loads of leading hits; stores of the rest. */
        for (size_t a = 0; a < n_run; a++) serve(c, m, run[a], wl, t);
        /* 3. End of the scheduler step: promotions go to the fs tier. */
        CALL("schedule_end", kvtier_manager_schedule_end(m));
        /* 4. The "GPU" runs: reads the loaded blocks, computes the rest. */
        size_t kept = 0;
        for (size_t a = 0; a < n_run; a++) {
            active_req *q = run[a];
            if (q->waiting) {
                run[kept++] = q;
                continue;
            }
            run_on_gpu(c, m, q, wl, base, stride, t);
            last_finish = t->steps;
            spare[n_spare++] = q;
        }
        if (c->step_us) sleep_us(c->step_us);
        /* No request could run (all wait on the disk): sleep until a job
         * ends, if one is on its way. */
        if (kept > 0 && kept == n_run) {
            bool pending = false;
            CALL("has_pending_work", kvtier_manager_has_pending_work(m, &pending));
            if (pending) {
                t->idle_waits++;
                wait_wake(wake, 100);
            }
        }
        n_run = kept;
        if (c->stall_steps && t->steps - last_finish >= c->stall_steps) {
            t->stalled = true;
            break;
        }
    }
    /* A stalled run leaves requests waiting: they give up (nothing pinned). */
    for (size_t a = 0; a < n_run; a++) CALL("request_finished", kvtier_manager_request_finished(m, run[a]->handle));

    /* The last cascades reach the disk (bounded wait on the wake fd). */
    bool pending = true;
    double drain_start = now_s();
    for (;;) {
        CALL("schedule_end", kvtier_manager_schedule_end(m));
        CALL("has_pending_work", kvtier_manager_has_pending_work(m, &pending));
        if (!pending || now_s() - drain_start > WAIT_LIMIT_S) break;
        wait_wake(wake, 100);
    }
    t->pending_left = pending;
    t->wall = now_s() - t0;

    t->promo_blocks = stat_value(m, fs_tier, "promotion_blocks");
    t->promo_jobs = stat_value(m, fs_tier, "promotion_jobs");
    t->promo_fail = stat_value(m, fs_tier, "promotion_failures");
    t->cascade_blocks = stat_value(m, fs_tier, "cascade_blocks");
    t->cascade_fail = stat_value(m, fs_tier, "cascade_failures");
    t->read_bytes = stat_value(m, fs_tier, "read_bytes");
    t->write_bytes = stat_value(m, fs_tier, "write_bytes");
    t->read_us = stat_value(m, fs_tier, "read_time_us");
    t->write_us = stat_value(m, fs_tier, "write_time_us");
    t->fs_blocks = stat_value(m, fs_tier, "blocks");
    t->direct = stat_value(m, fs_tier, "direct_io");
    t->evictions = stat_value(m, 0, "evictions");
    t->fs_evictions = stat_value(m, fs_tier, "evictions");
    t->stats.struct_size = sizeof t->stats;
    CALL("read_stats", kvtier_manager_read_stats(m, &t->stats));

    kvtier_status sd = kvtier_manager_shutdown(m);
    kvtier_manager_free(m);
    bool kept_mapping = false;
    kvtier_status sc = kvtier_region_close(region, &kept_mapping);
    int removed = remove_demo_dir(t->dir);
    if (sd != KVTIER_STATUS_OK || sc != KVTIER_STATUS_OK || kept_mapping || !unlinked || removed != 0) {
        fprintf(stderr, "%s: clean-up failed (shutdown %s, region close %s, directory removal %d)\n", prog,
                kvtier_status_str(sd), kvtier_status_str(sc), removed);
        t->cleanup_failed = true;
    }

    for (size_t a = 0; a < batch; a++) {
        free(act[a].slots);
        free(act[a].store_idx);
        free(act[a].store_slots);
        free(act[a].store_keys);
    }
    free(act);
    free(run);
    free(spare);
}
