/* kvtier-replay: replays a workload through the tiering manager's C API, as
 * an engine's scheduler would, and reports what happened as one JSON object.
 *
 *   kvtier-replay --workload FILE --blocks N [--policy lru|arc] [--batch B]
 *                 [--tiers none|mem] [--repeat K] [--hit-pending] [--positions]
 *                 [--max-calls C]
 *
 * It moves no KV bytes: transfers "finish" when the driver says so.  Every
 * step follows the benchmark rules exactly (requests in file order, B per
 * step):
 *   1. request_begin for every request of the batch (its handle is what
 *      every later call of the request takes);
 *   2. per request: one batched per-key lookup of its keys
 *      (kvtier_manager_lookup_per_key: vLLM 0.33's answers, key by key),
 *      which looks them up in order and stops at the first that is not
 *      HIT: h leading HITs.  A
 *      HIT_PENDING or RETRY stop defers the request (it loads and stores
 *      nothing this step, and its h hits are not counted).  Otherwise
 *      prepare_load + touch the first h keys (if h > 0) and, on a MISS
 *      stop, prepare_store the rest;
 *   3. schedule_end;
 *   4. per request: complete_load of its h loaded keys, complete_store
 *      (success) of the keys prepare_store said to store, then
 *      request_finished;
 *   5. drain the manager's events.
 * After the last batch: while the manager reports pending work, at most 10
 * times, a step with no requests (schedule_end, then the event drain);
 * `steps` counts batches only.
 *
 * The manager follows vLLM 0.33's rules: no holds and no wait bound
 * (progress_hold false, progress_wait_steps 0), so every counter is
 * comparable with vLLM's.
 *
 * `--tiers mem` adds one secondary tier written in C against the vtable
 * (kvtier_tier_vtable): unbounded, HIT for every key it has stored, every
 * submitted job reported finished, successfully, at its next poll.
 * `--hit-pending` makes a lookup that starts a promotion answer HIT_PENDING
 * instead of RETRY.  `--repeat K` runs the replay K times, each on a fresh
 * manager, checks that the counters agree, and reports the median time.
 * `--max-calls C` starts no batch once C manager calls were made (the
 * batch under way finishes, then the trailing steps): runs over tables of
 * different sizes, whose hits and misses make different numbers of calls
 * for the same workload, then time the same number of calls (at most one
 * batch's more), the same leading requests' worth for each.
 * `--positions` gives every request's keys token positions right after its
 * request_begin, before its first other call: block i (0-based) ends at
 * token 16 * (i + 1) (kvtier_manager_set_positions).  That call is not
 * counted in manager_calls: in vLLM the scheduler writes positions into
 * the request's context, not through the manager.  With one step per
 * request, positions change no counter (the finish commits every request
 * head to tail either way).
 *
 * Output fields: requests, steps (batches), manager_calls (the calls
 * vLLM's scheduler makes for the same work: one lookup per key looked up,
 * one per event drain, has_pending_work included; kvtier's own C calls are
 * fewer, a batched lookup being one call, so ns_per_call compares with
 * vLLM's and with earlier versions of this driver), lookups (keys looked
 * up), hit_blocks, stops_miss, stops_pending, blocks_stored,
 * rejected_stores, blocks_evicted (keys of drained "removed" events of the
 * primary tier), promotion_blocks and cascade_blocks (keys of load and
 * store jobs submitted to the mem tier), events (keys of all drained
 * events), wall_s (the replay loop alone) and ns_per_call (wall_s over
 * manager_calls). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "replay_common.h"

/* ---- counters ------------------------------------------------------------ */

typedef struct {
    uint64_t requests, steps, manager_calls, lookups, hit_blocks, stops_miss, stops_pending,
        blocks_stored, rejected_stores, blocks_evicted, promotion_blocks, cascade_blocks, events;
    double wall_s;
} counters;

static int counters_equal(const counters *a, const counters *b) {
    return a->requests == b->requests && a->steps == b->steps &&
           a->manager_calls == b->manager_calls && a->lookups == b->lookups &&
           a->hit_blocks == b->hit_blocks && a->stops_miss == b->stops_miss &&
           a->stops_pending == b->stops_pending && a->blocks_stored == b->blocks_stored &&
           a->rejected_stores == b->rejected_stores && a->blocks_evicted == b->blocks_evicted &&
           a->promotion_blocks == b->promotion_blocks &&
           a->cascade_blocks == b->cascade_blocks && a->events == b->events;
}

/* ---- the `mem` tier ------------------------------------------------------ */

typedef struct {
    key_set keys;        /* every key stored into the tier */
    uint64_t *pending;   /* ids of submitted jobs not yet reported */
    size_t n_pending, cap_pending;
    counters *count;     /* promotion_blocks and cascade_blocks go here */
} mem_tier;

static void mem_push_job(mem_tier *t, uint64_t id) {
    if (t->n_pending == t->cap_pending) {
        t->cap_pending = t->cap_pending ? t->cap_pending * 2 : 256;
        t->pending = (uint64_t *)xrealloc(t->pending, t->cap_pending * sizeof(uint64_t));
    }
    t->pending[t->n_pending++] = id;
}

static int32_t mem_lookup(void *user_data, const kvtier_key *key, const kvtier_request *request,
                          kvtier_lookup_result *answer) {
    (void)request;
    mem_tier *t = (mem_tier *)user_data;
    *answer = key_set_contains(&t->keys, key->data, key->len) ? KVTIER_LOOKUP_HIT
                                                                : KVTIER_LOOKUP_MISS;
    return KVTIER_STATUS_OK;
}

static int32_t mem_submit_store(void *user_data, const kvtier_job *job) {
    mem_tier *t = (mem_tier *)user_data;
    for (size_t i = 0; i < job->len; i++) key_set_insert(&t->keys, job->keys[i].data, job->keys[i].len);
    t->count->cascade_blocks += job->len;
    mem_push_job(t, job->id);
    return KVTIER_STATUS_OK;
}

static int32_t mem_submit_load(void *user_data, const kvtier_job *job) {
    mem_tier *t = (mem_tier *)user_data;
    t->count->promotion_blocks += job->len;
    mem_push_job(t, job->id);
    return KVTIER_STATUS_OK;
}

static int32_t mem_poll_finished(void *user_data, kvtier_job_result *out, size_t capacity,
                                 size_t *written) {
    mem_tier *t = (mem_tier *)user_data;
    size_t n = t->n_pending < capacity ? t->n_pending : capacity;
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].id = t->pending[i];
        out[i].success = true;
    }
    memmove(t->pending, t->pending + n, (t->n_pending - n) * sizeof(uint64_t));
    t->n_pending -= n;
    *written = n;
    return KVTIER_STATUS_OK;
}

static int32_t mem_has_pending_work(void *user_data, bool *pending) {
    *pending = ((mem_tier *)user_data)->n_pending > 0;
    return KVTIER_STATUS_OK;
}

static void mem_destroy(void *user_data) {
    mem_tier *t = (mem_tier *)user_data;
    key_set_free(&t->keys);
    free(t->pending);
    free(t);
}

/* ---- the replay ------------------------------------------------------------ */

typedef struct {
    const char *workload_path;
    uint32_t blocks;
    const char *policy;
    size_t batch;
    bool mem;
    bool hit_pending;
    bool positions;
    unsigned repeat;
    uint64_t max_calls; /* 0: no bound */
} options;

static void die_status(const char *what, kvtier_status st) {
    fprintf(stderr, "kvtier-replay: %s: %s: %s\n", what, kvtier_status_str(st),
            kvtier_last_error_message());
    exit(1);
}

#define CHECK(call, what)                         \
    do {                                          \
        kvtier_status st_ = (call);               \
        if (st_ != KVTIER_STATUS_OK) die_status(what, st_); \
    } while (0)

/* Per-request state within one step. */
typedef struct {
    kvtier_request_handle request;
    size_t h;            /* leading hits loaded (0 if deferred) */
    bool deferred;
    size_t n_store;      /* keys prepare_store said to store */
    kvtier_key *store;   /* those keys (capacity: max keys per request) */
} step_req;

enum { EVENT_BUF = 4096 };

/* Drains every event (one drain, as vLLM counts it, whatever the number of
 * take_events calls); counts keys and primary removals. */
static void drain_events(const kvtier_manager *m, kvtier_event_buffer *keys, kvtier_event *buf, counters *c) {
    bool more = true;
    c->manager_calls++;
    while (more) {
        size_t n = 0;
        CHECK(kvtier_manager_take_events(m, keys, buf, EVENT_BUF, &n, &more), "take_events");
        for (size_t i = 0; i < n; i++) {
            if (buf[i].kind == KVTIER_EVENT_CLEARED) continue;
            c->events += buf[i].len;
            if (buf[i].kind == KVTIER_EVENT_REMOVED && buf[i].tier == 0)
                c->blocks_evicted += buf[i].len;
        }
    }
}

static counters replay_once(const options *o, const workload *wl) {
    counters c;
    memset(&c, 0, sizeof c);

    kvtier_manager_options mo = kvtier_manager_options_default();
    mo.capacity = o->blocks;
    mo.policy = o->policy;
    /* A bound only (nothing is allocated up front): events are drained
     * every step, and one step produces at most two per key it names. */
    mo.event_capacity = (size_t)1 << 24;
    mo.promotion_answer =
        o->hit_pending ? KVTIER_PROMOTION_ANSWER_HIT_PENDING : KVTIER_PROMOTION_ANSWER_RETRY;
    /* vLLM's rules: nothing held, no wait bound. */
    mo.progress_hold = false;
    mo.progress_wait_steps = 0;
    mo.progress_wait_ms = 0;
    kvtier_manager *m = NULL;
    CHECK(kvtier_manager_new(&mo, NULL, &m), "manager_new");

    if (o->mem) {
        mem_tier *t = (mem_tier *)calloc(1, sizeof(mem_tier));
        if (!t) {
            fprintf(stderr, "kvtier-replay: out of memory\n");
            exit(1);
        }
        key_set_init(&t->keys);
        t->count = &c;
        kvtier_tier_vtable vt = kvtier_tier_vtable_default();
        vt.user_data = t;
        vt.name = "mem";
        vt.medium = KVTIER_MEDIUM_CPU;
        vt.locality = KVTIER_LOCALITY_LOCAL;
        vt.lookup = mem_lookup;
        vt.submit_store = mem_submit_store;
        vt.submit_load = mem_submit_load;
        vt.poll_finished = mem_poll_finished;
        vt.has_pending_work = mem_has_pending_work;
        vt.destroy = mem_destroy;
        size_t index = 0;
        kvtier_status st = kvtier_manager_add_tier(m, &vt, NULL, &index);
        if (st != KVTIER_STATUS_OK) {
            mem_destroy(t); /* not registered: still ours */
            die_status("add_tier", st);
        }
    }

    size_t max_keys = wl->max_keys_per_request ? wl->max_keys_per_request : 1;
    step_req *reqs = (step_req *)calloc(o->batch, sizeof(step_req));
    size_t *store_index = (size_t *)xrealloc(NULL, max_keys * sizeof(size_t));
    uint32_t *slots = (uint32_t *)xrealloc(NULL, max_keys * sizeof(uint32_t));
    uint64_t *positions = (uint64_t *)xrealloc(NULL, max_keys * sizeof(uint64_t));
    for (size_t i = 0; i < max_keys; i++) positions[i] = 16 * (uint64_t)(i + 1);
    kvtier_event *events = (kvtier_event *)xrealloc(NULL, EVENT_BUF * sizeof(kvtier_event));
    kvtier_event_buffer *event_keys = NULL;
    CHECK(kvtier_event_buffer_new(&event_keys), "event_buffer_new");
    if (!reqs) {
        fprintf(stderr, "kvtier-replay: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < o->batch; i++)
        reqs[i].store = (kvtier_key *)xrealloc(NULL, max_keys * sizeof(kvtier_key));

    double start = now_s();
    for (size_t first = 0; first < wl->n_requests; first += o->batch) {
        if (o->max_calls && c.manager_calls >= o->max_calls) break;
        size_t n = wl->n_requests - first < o->batch ? wl->n_requests - first : o->batch;
        c.steps++;
        /* 1. start the batch's requests */
        for (size_t i = 0; i < n; i++) {
            const wl_request *r = &wl->requests[first + i];
            c.manager_calls++;
            CHECK(kvtier_manager_request_begin(m, r->name, NULL, &reqs[i].request, NULL),
                  "request_begin");
            c.requests++;
            if (o->positions) {
                CHECK(kvtier_manager_set_positions(m, reqs[i].request, wl->keys + r->first_key,
                                                   r->n_keys, positions),
                      "set_positions");
            }
        }
        /* 2. lookups, loads of the leading hits, stores of the rest */
        for (size_t i = 0; i < n; i++) {
            const wl_request *r = &wl->requests[first + i];
            const kvtier_key *keys = wl->keys + r->first_key;
            step_req *s = &reqs[i];
            s->h = 0;
            s->deferred = false;
            s->n_store = 0;
            kvtier_lookup_answer answer;
            CHECK(kvtier_manager_lookup_per_key(m, s->request, keys, r->n_keys, &answer), "lookup");
            /* Counted as vLLM's one lookup call per key looked up. */
            size_t looked = answer.hits + (answer.stop != KVTIER_LOOKUP_HIT);
            c.manager_calls += looked;
            c.lookups += looked;
            size_t h = answer.hits;
            kvtier_lookup_result stop = answer.stop;
            if (stop == KVTIER_LOOKUP_HIT_PENDING || stop == KVTIER_LOOKUP_RETRY) {
                c.stops_pending++;
                s->deferred = true;
                continue;
            }
            if (h > 0) {
                c.manager_calls += 2;
                CHECK(kvtier_manager_prepare_load(m, s->request, keys, h, slots), "prepare_load");
                CHECK(kvtier_manager_touch(m, s->request, keys, h), "touch");
                c.hit_blocks += h;
                s->h = h;
            }
            if (stop == KVTIER_LOOKUP_MISS) {
                c.stops_miss++;
                size_t rest = r->n_keys - h;
                kvtier_store_plan plan;
                memset(&plan, 0, sizeof plan);
                plan.store_indices = store_index;
                plan.slots = slots;
                plan.evicted = NULL; /* evictions are counted from the events */
                c.manager_calls++;
                CHECK(kvtier_manager_prepare_store(m, s->request, keys + h, rest, &plan),
                      "prepare_store");
                if (plan.refused) {
                    c.rejected_stores++;
                } else {
                    for (size_t k = 0; k < plan.store_count; k++)
                        s->store[k] = keys[h + store_index[k]];
                    s->n_store = plan.store_count;
                    c.blocks_stored += plan.store_count;
                }
            }
        }
        /* 3. end of the step */
        c.manager_calls++;
        CHECK(kvtier_manager_schedule_end(m), "schedule_end");
        /* 4. transfers finish, requests finish */
        for (size_t i = 0; i < n; i++) {
            const wl_request *r = &wl->requests[first + i];
            step_req *s = &reqs[i];
            if (s->h > 0) {
                c.manager_calls++;
                CHECK(kvtier_manager_complete_load(m, s->request, wl->keys + r->first_key, s->h),
                      "complete_load");
            }
            if (s->n_store > 0) {
                c.manager_calls++;
                CHECK(kvtier_manager_complete_store(m, s->request, s->store, s->n_store, true,
                                                    NULL),
                      "complete_store");
            }
            c.manager_calls++;
            CHECK(kvtier_manager_request_finished(m, s->request), "request_finished");
        }
        /* 5. events */
        drain_events(m, event_keys, events, &c);
    }
    /* Trailing steps: steps with no requests (schedule_end, then the
     * event drain) while work is pending, at most 10.  They are not counted
     * in `steps`. */
    for (int i = 0; i < 10; i++) {
        bool pending = false;
        c.manager_calls++;
        CHECK(kvtier_manager_has_pending_work(m, &pending), "has_pending_work");
        if (!pending) break;
        c.manager_calls++;
        CHECK(kvtier_manager_schedule_end(m), "schedule_end");
        drain_events(m, event_keys, events, &c);
    }
    c.wall_s = now_s() - start;

    CHECK(kvtier_manager_shutdown(m), "shutdown");
    kvtier_manager_free(m);
    for (size_t i = 0; i < o->batch; i++) free(reqs[i].store);
    free(reqs);
    free(store_index);
    free(slots);
    free(positions);
    free(events);
    kvtier_event_buffer_free(event_keys);
    return c;
}

/* ---- command line and output ------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvtier-replay --workload FILE --blocks N [--policy lru|arc] [--batch B]\n"
            "                     [--tiers none|mem] [--repeat K] [--hit-pending] [--positions]\n"
            "                     [--max-calls C]\n"
            "Replays a workload (kvtier-workload's format) through the tiering manager and\n"
            "prints one JSON object of counters and time.\n"
            "  --blocks N      primary-tier capacity in blocks\n"
            "  --policy P      eviction policy: lru (default) or arc\n"
            "  --batch B       requests per engine step (default 16)\n"
            "  --tiers T       none (default), or mem: one unbounded in-memory C tier\n"
            "  --repeat K      run K times on fresh managers, report the median time\n"
            "  --hit-pending   a lookup that starts a promotion answers HIT_PENDING, not RETRY\n"
            "  --positions     give each request's block i the token position 16 * (i + 1)\n"
            "  --max-calls C   start no batch once C manager calls were made\n");
}

static unsigned long long parse_count(const char *flag, const char *v, unsigned long long max) {
    char *end = NULL;
    errno = 0;
    unsigned long long x = v ? strtoull(v, &end, 10) : 0;
    if (!v || *v == '\0' || *v == '-' || *end != '\0' || errno != 0 || x == 0 || x > max) {
        fprintf(stderr, "kvtier-replay: %s needs a whole number from 1 to %llu, got '%s'\n", flag,
                max, v ? v : "");
        exit(2);
    }
    return x;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    o.policy = "lru";
    o.batch = 16;
    o.repeat = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--hit-pending") == 0) {
            o.hit_pending = true;
            continue;
        } else if (strcmp(a, "--positions") == 0) {
            o.positions = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "kvtier-replay: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--workload") == 0) {
            o.workload_path = v;
        } else if (strcmp(a, "--blocks") == 0) {
            o.blocks = (uint32_t)parse_count(a, v, 0xfffffffeull);
        } else if (strcmp(a, "--policy") == 0) {
            if (strcmp(v, "lru") != 0 && strcmp(v, "arc") != 0) {
                fprintf(stderr, "kvtier-replay: --policy is lru or arc, got '%s'\n", v);
                return 2;
            }
            o.policy = v;
        } else if (strcmp(a, "--batch") == 0) {
            o.batch = (size_t)parse_count(a, v, 1u << 20);
        } else if (strcmp(a, "--tiers") == 0) {
            if (strcmp(v, "none") == 0) {
                o.mem = false;
            } else if (strcmp(v, "mem") == 0) {
                o.mem = true;
            } else {
                fprintf(stderr, "kvtier-replay: --tiers is none or mem, got '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--repeat") == 0) {
            o.repeat = (unsigned)parse_count(a, v, 1000);
        } else if (strcmp(a, "--max-calls") == 0) {
            o.max_calls = (uint64_t)parse_count(a, v, 0xffffffffffffffffull);
        } else {
            fprintf(stderr, "kvtier-replay: unknown flag %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o.workload_path || o.blocks == 0) {
        fprintf(stderr, "kvtier-replay: --workload and --blocks are required\n");
        usage(stderr);
        return 2;
    }

    workload wl;
    if (workload_load(o.workload_path, &wl) != 0) return 1;

    double *walls = (double *)xrealloc(NULL, o.repeat * sizeof(double));
    counters first;
    memset(&first, 0, sizeof first);
    for (unsigned k = 0; k < o.repeat; k++) {
        counters c = replay_once(&o, &wl);
        walls[k] = c.wall_s;
        if (k == 0) {
            first = c;
        } else if (!counters_equal(&first, &c)) {
            fprintf(stderr, "kvtier-replay: run %u reported different counters than run 1\n",
                    k + 1);
            return 1;
        }
    }
    qsort(walls, o.repeat, sizeof(double), cmp_double);
    double wall = o.repeat % 2 ? walls[o.repeat / 2]
                               : (walls[o.repeat / 2 - 1] + walls[o.repeat / 2]) / 2;
    double ns = first.manager_calls ? wall * 1e9 / (double)first.manager_calls : 0.0;
    printf("{\"requests\": %llu, \"steps\": %llu, \"manager_calls\": %llu, \"lookups\": %llu, "
           "\"hit_blocks\": %llu, \"stops_miss\": %llu, \"stops_pending\": %llu, "
           "\"blocks_stored\": %llu, \"rejected_stores\": %llu, \"blocks_evicted\": %llu, "
           "\"promotion_blocks\": %llu, \"cascade_blocks\": %llu, \"events\": %llu, "
           "\"wall_s\": %.6f, \"ns_per_call\": %.1f}\n",
           (unsigned long long)first.requests, (unsigned long long)first.steps,
           (unsigned long long)first.manager_calls, (unsigned long long)first.lookups,
           (unsigned long long)first.hit_blocks, (unsigned long long)first.stops_miss,
           (unsigned long long)first.stops_pending, (unsigned long long)first.blocks_stored,
           (unsigned long long)first.rejected_stores, (unsigned long long)first.blocks_evicted,
           (unsigned long long)first.promotion_blocks, (unsigned long long)first.cascade_blocks,
           (unsigned long long)first.events, wall, ns);
    free(walls);
    workload_free(&wl);
    return 0;
}
