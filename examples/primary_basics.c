/*
 * primary_basics.c: the CPU primary tier through the C API.  Stores keys,
 * looks them up in order, loads them, evicts under pressure, sees a
 * refusal, reads events and stats, and checks every result.  Exits
 * non-zero on the first mismatch.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, kvtier_last_error_message());               \
            exit(EXIT_FAILURE);                                                  \
        }                                                                        \
    } while (0)

#define OK(call) CHECK((call) == KVTIER_STATUS_OK)
#define MAXN 8

/* Keys are 8-byte block hashes here; any 1..64 bytes work. */
static uint64_t hashes[16];

static kvtier_key key_of(int i) {
    kvtier_key k;
    k.data = (const uint8_t *)&hashes[i];
    k.len = sizeof hashes[i];
    return k;
}

/* The arrays of one store plan: room for one entry per key passed. */
typedef struct {
    size_t store_indices[MAXN];
    uint32_t slots[MAXN];
    kvtier_key_buf evicted[MAXN];
    kvtier_store_plan plan;
} store_out;

static kvtier_status store(kvtier_primary *p, kvtier_request_handle r, const int *ids, size_t n,
                           store_out *o) {
    kvtier_key keys[MAXN];
    for (size_t i = 0; i < n; i++) keys[i] = key_of(ids[i]);
    o->plan.store_indices = o->store_indices;
    o->plan.slots = o->slots;
    o->plan.evicted = o->evicted;
    return kvtier_primary_prepare_store(p, r, keys, n, &o->plan);
}

/* Completes keys `ids` for `r`; the status must be `expected`:
   KVTIER_STATUS_KEYS_IGNORED when a key named is not `r`'s to complete (the
   counts are written all the same). */
static void complete(kvtier_primary *p, kvtier_request_handle r, const int *ids, size_t n,
                     bool success, kvtier_store_completion *c, kvtier_status expected) {
    kvtier_key keys[MAXN];
    for (size_t i = 0; i < n; i++) keys[i] = key_of(ids[i]);
    CHECK(kvtier_primary_complete_store(p, r, keys, n, success, c) == expected);
}

/* Which of the 16 keys an evicted copy is (-1: none). */
static int key_id(const kvtier_key_buf *k) {
    CHECK(k->len == sizeof(uint64_t));
    uint64_t h;
    memcpy(&h, k->bytes, sizeof h);
    for (int i = 0; i < 16; i++)
        if (hashes[i] == h) return i;
    return -1;
}

/* Which of the 16 keys an event key is (-1: none). */
static int event_key_id(const kvtier_key *k) {
    CHECK(k->len == sizeof(uint64_t));
    for (int i = 0; i < 16; i++)
        if (memcmp(k->data, &hashes[i], sizeof(uint64_t)) == 0) return i;
    return -1;
}

int main(void) {
    for (int i = 0; i < 16; i++) hashes[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);

    kvtier_primary_options opts = kvtier_primary_options_default();
    opts.capacity = 4;
    opts.policy = "lru";
    opts.event_capacity = 64;
    kvtier_primary *p = NULL;

    /* Bad options are an error, and *out is left alone. */
    kvtier_primary_options bad = opts;
    bad.policy = "mru";
    CHECK(kvtier_primary_new(&bad, &p) == KVTIER_STATUS_INVALID_ARGUMENT);
    CHECK(p == NULL);
    CHECK(strstr(kvtier_last_error_message(), "\"arc\"") != NULL);
    OK(kvtier_primary_new(&opts, &p));

    /* A request starts by name; every later call takes its handle. */
    kvtier_request_handle r1 = 0, dup = 0;
    OK(kvtier_primary_request_begin(p, "req-1", &r1));
    CHECK(r1 != 0);
    CHECK(kvtier_primary_request_begin(p, "req-1", &dup) == KVTIER_STATUS_DUPLICATE_REQUEST);
    CHECK(dup == 0);

    /* Store keys 0..3: fresh slots 0..3, write pending until completed. */
    store_out o;
    const int first[] = {0, 1, 2, 3};
    OK(store(p, r1, first, 4, &o));
    CHECK(!o.plan.refused && o.plan.store_count == 4 && o.plan.evicted_count == 0);
    for (size_t i = 0; i < 4; i++) CHECK(o.store_indices[i] == i && o.slots[i] == i);

    /* A lookup answers how many leading keys are ready and how the next
       one answered: key 0 is still being written. */
    kvtier_key look[3] = {key_of(0), key_of(3), key_of(9)};
    kvtier_lookup_answer a;
    OK(kvtier_primary_lookup(p, look, 3, &a));
    CHECK(a.hits == 0 && a.stop == KVTIER_LOOKUP_HIT_PENDING && a.reason == KVTIER_MISS_NONE);

    kvtier_store_completion c;
    complete(p, r1, first, 4, true, &c, KVTIER_STATUS_OK);
    CHECK(c.ready == 4 && c.dropped == 0 && c.ignored == 0);
    OK(kvtier_primary_lookup(p, look, 3, &a));
    CHECK(a.hits == 2 && a.stop == KVTIER_LOOKUP_MISS && a.reason == KVTIER_MISS_ABSENT);
    OK(kvtier_primary_lookup(p, look, 2, &a));
    CHECK(a.hits == 2 && a.stop == KVTIER_LOOKUP_HIT);

    /* Load keys 1 and 0: slots in key order, pinned (not evictable). */
    kvtier_key load[2] = {key_of(1), key_of(0)};
    uint32_t slots[2];
    OK(kvtier_primary_prepare_load(p, r1, load, 2, slots));
    CHECK(slots[0] == 1 && slots[1] == 0);

    /* Misuse names the key's position and changes nothing. */
    kvtier_key wrong[2] = {key_of(2), key_of(9)};
    CHECK(kvtier_primary_prepare_load(p, r1, wrong, 2, slots) == KVTIER_STATUS_KEY_STATE);
    CHECK(strstr(kvtier_last_error_message(), "position 1") != NULL);
    CHECK(kvtier_primary_prepare_load(p, r1 + 100, load, 2, slots) == KVTIER_STATUS_UNKNOWN_REQUEST);

    /* Three new keys need three evictions; only 2 and 3 are idle: refused. */
    const int three[] = {4, 5, 6};
    OK(store(p, r1, three, 3, &o));
    CHECK(o.plan.refused && o.plan.store_count == 0 && o.plan.evicted_count == 0);

    /* Two new keys: keys 2 and 3 (least recent idle) are evicted. */
    const int two[] = {1, 4, 5};
    OK(store(p, r1, two, 3, &o));
    CHECK(!o.plan.refused && o.plan.store_count == 2 && o.plan.evicted_count == 2);
    CHECK(o.store_indices[0] == 1 && o.store_indices[1] == 2);
    CHECK(key_id(&o.evicted[0]) == 2 && key_id(&o.evicted[1]) == 3);
    CHECK(o.slots[0] == 3 && o.slots[1] == 2); /* most recently freed first */

    /* Only the request that planned a key completes it: req-2 naming keys
       4 and 5, which req-1 is writing, changes nothing (counted, and the
       status says so). */
    const int theirs[] = {4, 5};
    kvtier_request_handle r2 = 0;
    OK(kvtier_primary_request_begin(p, "req-2", &r2));
    CHECK(r2 != r1);
    complete(p, r2, theirs, 2, true, &c, KVTIER_STATUS_KEYS_IGNORED);
    CHECK(c.ready == 0 && c.dropped == 0 && c.foreign == 2);
    OK(kvtier_primary_request_finished(p, r2));

    /* One write fails, one succeeds; a late completion is ignored (and
       reported). */
    const int fail[] = {5};
    const int ok_late[] = {4, 9};
    complete(p, r1, fail, 1, false, &c, KVTIER_STATUS_OK);
    CHECK(c.dropped == 1);
    complete(p, r1, ok_late, 2, true, &c, KVTIER_STATUS_KEYS_IGNORED);
    CHECK(c.ready == 1 && c.ignored == 1);

    OK(kvtier_primary_complete_load(p, r1, load, 2));
    CHECK(kvtier_primary_complete_load(p, r1, load, 2) == KVTIER_STATUS_KEY_STATE);
    OK(kvtier_primary_touch(p, r1, load, 2));
    OK(kvtier_primary_request_finished(p, r1));
    /* A finished handle is refused by every call, never reused. */
    CHECK(kvtier_primary_request_finished(p, r1) == KVTIER_STATUS_UNKNOWN_REQUEST);
    CHECK(kvtier_primary_touch(p, r1, load, 2) == KVTIER_STATUS_UNKNOWN_REQUEST);

    /* Events, runs of one kind: stored 0..3 | removed 2, 3 | stored 4 (5
       never announced).  Their keys stay valid until the next take. */
    kvtier_event ev[4];
    size_t written = 0;
    bool more = false;
    OK(kvtier_primary_take_events(p, ev, 2, &written, &more));
    CHECK(written == 2 && more);
    CHECK(ev[0].tier == 0 && ev[0].medium == KVTIER_MEDIUM_CPU && ev[0].locality == KVTIER_LOCALITY_LOCAL);
    CHECK(ev[0].kind == KVTIER_EVENT_STORED && ev[0].len == 4);
    for (int i = 0; i < 4; i++) CHECK(event_key_id(&ev[0].keys[i]) == i);
    CHECK(ev[1].kind == KVTIER_EVENT_REMOVED && ev[1].len == 2);
    CHECK(event_key_id(&ev[1].keys[0]) == 2 && event_key_id(&ev[1].keys[1]) == 3);
    OK(kvtier_primary_take_events(p, ev, 4, &written, &more));
    CHECK(written == 1 && !more);
    CHECK(ev[0].kind == KVTIER_EVENT_STORED && ev[0].len == 1 && event_key_id(&ev[0].keys[0]) == 4);

    /* Stats under the growth rule: struct_size says what the caller has. */
    kvtier_primary_stats st;
    st.struct_size = sizeof st;
    OK(kvtier_primary_read_stats(p, &st));
    CHECK(st.capacity == 4 && st.used == 3 && st.idle == 3 && st.pinned == 0);
    CHECK(st.evictions == 2 && st.refusals == 1 && st.late_completions == 1 && st.stores_failed == 1);
    CHECK(st.foreign_completions == 2);
    printf("primary: used %u/%u, evictions %llu, refusals %llu, usage %.2f\n", st.used, st.capacity,
           (unsigned long long)st.evictions, (unsigned long long)st.refusals, st.usage);

    /* Reset forgets everything and announces it. */
    OK(kvtier_primary_reset(p));
    OK(kvtier_primary_take_events(p, ev, 4, &written, &more));
    CHECK(written == 1 && ev[0].kind == KVTIER_EVENT_CLEARED && ev[0].len == 0 && ev[0].keys == NULL);
    OK(kvtier_primary_read_stats(p, &st));
    CHECK(st.used == 0 && st.allocated == 0);

    CHECK(kvtier_primary_read_stats(NULL, &st) == KVTIER_STATUS_NULL_ARGUMENT);
    kvtier_primary_free(p);
    kvtier_primary_free(NULL);
    printf("ok\n");
    return EXIT_SUCCESS;
}
