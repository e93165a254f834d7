/*
 * request_level_tier.c: a C tier that asks for request-level offload
 * receives every block of a request, including blocks that were already
 * resident in the primary tier (ready ones at once, write-pending ones once
 * their write completes).  The tier records, per request, which keys its
 * store jobs carried; when the manager tells it a request finished, the
 * set must be the request's whole key list.  Exits non-zero otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "example_util.h"

#define MAX_REQ 8
#define MAX_KEYS 16
#define MAX_RESULTS 64

typedef struct {
    char id[32];
    uint8_t seen[256]; /* seen[k] = 1 when key byte k reached the tier for this request */
    int finished;
} req_record;

typedef struct {
    req_record reqs[MAX_REQ];
    size_t n_reqs;
    kvtier_job_result results[MAX_RESULTS];
    size_t n_results;
} rl_tier;

static req_record *record(rl_tier *t, const kvtier_request *r) {
    for (size_t i = 0; i < t->n_reqs; i++)
        if (strcmp(t->reqs[i].id, r->id) == 0) return &t->reqs[i];
    if (t->n_reqs == MAX_REQ || r->id_len >= sizeof t->reqs[0].id) return NULL;
    req_record *rec = &t->reqs[t->n_reqs++];
    memset(rec, 0, sizeof *rec);
    memcpy(rec->id, r->id, r->id_len + 1);
    return rec;
}

static int32_t rl_lookup(void *ud, const kvtier_key *k, const kvtier_request *r, kvtier_lookup_result *answer) {
    (void)ud, (void)k, (void)r;
    *answer = KVTIER_LOOKUP_MISS;
    return KVTIER_STATUS_OK;
}

static int32_t rl_new_request(void *ud, const kvtier_request *r, kvtier_offload_policy *policy) {
    if (!record((rl_tier *)ud, r)) return KVTIER_STATUS_NO_SPACE;
    *policy = KVTIER_OFFLOAD_REQUEST_LEVEL;
    return KVTIER_STATUS_OK;
}

static int32_t rl_submit_store(void *ud, const kvtier_job *job) {
    rl_tier *t = (rl_tier *)ud;
    req_record *rec = record(t, job->request);
    if (!rec || t->n_results == MAX_RESULTS) return KVTIER_STATUS_NO_SPACE;
    for (size_t i = 0; i < job->len; i++) rec->seen[job->keys[i].data[0]] = 1;
    kvtier_job_result res;
    memset(&res, 0, sizeof res);
    res.id = job->id;
    res.success = true;
    t->results[t->n_results++] = res;
    return KVTIER_STATUS_OK;
}

static int32_t rl_submit_load(void *ud, const kvtier_job *job) {
    (void)ud, (void)job;
    return KVTIER_STATUS_UNSUPPORTED; /* never has a key, so never asked */
}

static int32_t rl_poll(void *ud, kvtier_job_result *out, size_t cap, size_t *written) {
    rl_tier *t = (rl_tier *)ud;
    size_t n = t->n_results < cap ? t->n_results : cap;
    memcpy(out, t->results, n * sizeof *out);
    memmove(t->results, t->results + n, (t->n_results - n) * sizeof *out);
    t->n_results -= n;
    *written = n;
    return KVTIER_STATUS_OK;
}

static int32_t rl_finished(void *ud, const kvtier_request *r) {
    req_record *rec = record((rl_tier *)ud, r);
    if (!rec) return KVTIER_STATUS_NOT_FOUND;
    rec->finished = 1;
    return KVTIER_STATUS_OK;
}

static void rl_destroy(void *ud) { free(ud); }

/* Stores keys (one byte each) for `req`: prepare_store, then complete_store
 * at once unless `hold` (then the caller completes later). */
static size_t store(const kvtier_manager *m, kvtier_request_handle req, const uint8_t *bytes, size_t n,
                    int hold, kvtier_key *held, size_t *n_held) {
    kvtier_key keys[MAX_KEYS], done[MAX_KEYS];
    size_t idx[MAX_KEYS];
    uint32_t slots[MAX_KEYS];
    kvtier_store_plan plan = {idx, slots, NULL, 0, 0, false};
    example_byte_keys(bytes, n, keys);
    CHECK(kvtier_manager_prepare_store(m, req, keys, n, &plan));
    size_t n_store = plan.store_count;
    if (plan.refused) {
        fprintf(stderr, "store refused\n");
        exit(EXIT_FAILURE);
    }
    for (size_t s = 0; s < n_store; s++) done[s] = keys[idx[s]];
    if (hold) {
        memcpy(held, done, n_store * sizeof *done);
        *n_held = n_store;
    } else if (n_store) {
        CHECK(kvtier_manager_complete_store(m, req, done, n_store, true, NULL));
    }
    return n_store;
}

static int check_all(rl_tier *t, const char *req, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < t->n_reqs; i++) {
        if (strcmp(t->reqs[i].id, req) != 0) continue;
        if (!t->reqs[i].finished) {
            fprintf(stderr, "%s: the tier was not told the request finished\n", req);
            return 0;
        }
        for (size_t j = 0; j < n; j++) {
            if (!t->reqs[i].seen[bytes[j]]) {
                fprintf(stderr, "%s: key %u never reached the request-level tier\n", req, bytes[j]);
                return 0;
            }
        }
        return 1;
    }
    fprintf(stderr, "%s: unknown to the tier\n", req);
    return 0;
}

int main(void) {
    static const uint8_t a_keys[] = {1, 2, 3, 4};
    static const uint8_t b_keys[] = {1, 2, 3, 4, 5, 6}; /* 1..4 resident and ready */
    static const uint8_t c_keys[] = {7, 8};
    static const uint8_t d_keys[] = {7, 8, 9}; /* 7, 8 resident but write pending */

    kvtier_manager_options opts = kvtier_manager_options_default();
    opts.capacity = 32;
    kvtier_manager *m = NULL;
    CHECK(kvtier_manager_new(&opts, NULL, &m));
    rl_tier *t = (rl_tier *)calloc(1, sizeof *t);
    if (!t) return EXIT_FAILURE;
    kvtier_tier_vtable vt = kvtier_tier_vtable_default();
    vt.user_data = t;
    vt.name = "request-level";
    vt.lookup = rl_lookup;
    vt.submit_store = rl_submit_store;
    vt.submit_load = rl_submit_load;
    vt.poll_finished = rl_poll;
    vt.on_new_request = rl_new_request;
    vt.on_request_finished = rl_finished;
    vt.destroy = rl_destroy;
    size_t index = 0;
    CHECK(kvtier_manager_add_tier(m, &vt, NULL, &index));

    kvtier_offload_policy policy = -1;
    const char *names[] = {"A", "B", "C", "D"};
    kvtier_request_handle reqs[4];
    for (int i = 0; i < 4; i++) {
        CHECK(kvtier_manager_request_begin(m, names[i], NULL, &reqs[i], &policy));
        if (policy != KVTIER_OFFLOAD_REQUEST_LEVEL) {
            fprintf(stderr, "expected request-level policy\n");
            return EXIT_FAILURE;
        }
    }
    kvtier_key held[MAX_KEYS];
    size_t n_held = 0, unused = 0;
    store(m, reqs[0], a_keys, 4, 0, held, &unused);
    if (store(m, reqs[1], b_keys, 6, 0, held, &unused) != 2) {
        fprintf(stderr, "B should store only its two new keys\n");
        return EXIT_FAILURE;
    }
    store(m, reqs[2], c_keys, 2, 1, held, &n_held); /* C's write still in flight */
    store(m, reqs[3], d_keys, 3, 0, held, &unused);  /* 7, 8 parked for D */
    for (int i = 0; i < 4; i++) CHECK(kvtier_manager_request_finished(m, reqs[i]));
    CHECK(kvtier_manager_schedule_end(m));
    /* C is finished but its store is in flight: its handle still completes it. */
    CHECK(kvtier_manager_complete_store(m, reqs[2], held, n_held, true, NULL)); /* 7, 8 ready now */
    bool pending = true;
    for (int i = 0; i < 10 && pending; i++) {
        CHECK(kvtier_manager_schedule_end(m));
        CHECK(kvtier_manager_has_pending_work(m, &pending));
    }
    int ok = !pending && check_all(t, "A", a_keys, 4) && check_all(t, "B", b_keys, 6) &&
             check_all(t, "C", c_keys, 2) && check_all(t, "D", d_keys, 3);
    CHECK(kvtier_manager_shutdown(m));
    kvtier_manager_free(m);
    if (!ok) return EXIT_FAILURE;
    printf("request_level_tier: every request's blocks reached the tier, resident and parked ones included\n");
    return EXIT_SUCCESS;
}
