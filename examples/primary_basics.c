/*
 * primary_basics.c: the CPU primary tier through the C API.  Stores keys,
 * loads them, evicts under pressure, sees a refusal, reads events and
 * stats, and checks every result.  Exits non-zero on the first mismatch.
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

/* The outputs of one prepare_store, sized by the input count. */
typedef struct {
    size_t to_store[MAXN];
    uint32_t slots[MAXN];
    uint8_t evicted[MAXN * KVTIER_MAX_KEY_LEN];
    size_t evicted_lens[MAXN];
    kvtier_primary_store_result result;
} store_out;

static kvtier_status store(kvtier_primary *p, const char *req, const int *ids, size_t n,
                           store_out *o) {
    kvtier_key keys[MAXN];
    for (size_t i = 0; i < n; i++) keys[i] = key_of(ids[i]);
    return kvtier_primary_prepare_store(p, req, keys, n, o->to_store, MAXN, o->slots, MAXN,
                                        o->evicted, sizeof o->evicted, o->evicted_lens, MAXN,
                                        &o->result);
}

static void complete(kvtier_primary *p, const char *req, const int *ids, size_t n, bool success,
                     kvtier_primary_complete_result *r) {
    kvtier_key keys[MAXN];
    for (size_t i = 0; i < n; i++) keys[i] = key_of(ids[i]);
    OK(kvtier_primary_complete_store(p, req, keys, n, success, r));
}

static int evicted_id(const store_out *o, size_t i) {
    CHECK(o->evicted_lens[i] == sizeof(uint64_t));
    uint64_t h;
    memcpy(&h, o->evicted + i * KVTIER_MAX_KEY_LEN, sizeof h);
    for (int k = 0; k < 16; k++)
        if (hashes[k] == h) return k;
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

    OK(kvtier_primary_request_begin(p, "req-1"));
    CHECK(kvtier_primary_request_begin(p, "req-1") == KVTIER_STATUS_DUPLICATE_REQUEST);

    /* Store keys 0..3: fresh slots 0..3, write pending until completed. */
    store_out o;
    const int first[] = {0, 1, 2, 3};
    OK(store(p, "req-1", first, 4, &o));
    CHECK(!o.result.refused && o.result.stored == 4 && o.result.evicted == 0);
    for (size_t i = 0; i < 4; i++) CHECK(o.to_store[i] == i && o.slots[i] == i);

    kvtier_key look[3] = {key_of(0), key_of(3), key_of(9)};
    kvtier_primary_lookup_result res[3];
    OK(kvtier_primary_lookup(p, look, 3, res, 3));
    CHECK(res[0] == KVTIER_PRIMARY_LOOKUP_RESULT_HIT_PENDING);
    CHECK(res[2] == KVTIER_PRIMARY_LOOKUP_RESULT_MISS);

    kvtier_primary_complete_result cr;
    complete(p, "req-1", first, 4, true, &cr);
    CHECK(cr.ready == 4 && cr.dropped == 0 && cr.ignored == 0);
    OK(kvtier_primary_lookup(p, look, 3, res, 3));
    CHECK(res[0] == KVTIER_PRIMARY_LOOKUP_RESULT_HIT && res[1] == KVTIER_PRIMARY_LOOKUP_RESULT_HIT);

    /* Load keys 1 and 0: slots in key order, pinned (not evictable). */
    kvtier_key load[2] = {key_of(1), key_of(0)};
    uint32_t slots[2];
    OK(kvtier_primary_prepare_load(p, "req-1", load, 2, slots, 2));
    CHECK(slots[0] == 1 && slots[1] == 0);

    /* Misuse names the key's position and changes nothing. */
    kvtier_key wrong[2] = {key_of(2), key_of(9)};
    CHECK(kvtier_primary_prepare_load(p, "req-1", wrong, 2, slots, 2) == KVTIER_STATUS_KEY_STATE);
    CHECK(strstr(kvtier_last_error_message(), "position 1") != NULL);
    CHECK(kvtier_primary_prepare_load(p, "nobody", load, 2, slots, 2) ==
          KVTIER_STATUS_UNKNOWN_REQUEST);

    /* Three new keys need three evictions; only 2 and 3 are idle: refused. */
    const int three[] = {4, 5, 6};
    OK(store(p, "req-1", three, 3, &o));
    CHECK(o.result.refused);

    /* Two new keys: keys 2 and 3 (least recent idle) are evicted. */
    const int two[] = {1, 4, 5};
    OK(store(p, "req-1", two, 3, &o));
    CHECK(!o.result.refused && o.result.stored == 2 && o.result.evicted == 2);
    CHECK(o.to_store[0] == 1 && o.to_store[1] == 2);
    CHECK(evicted_id(&o, 0) == 2 && evicted_id(&o, 1) == 3);
    CHECK(o.slots[0] == 3 && o.slots[1] == 2); /* most recently freed first */

    /* Only the request that planned a key completes it: req-2 naming keys
       4 and 5, which req-1 is writing, changes nothing (counted). */
    const int theirs[] = {4, 5};
    OK(kvtier_primary_request_begin(p, "req-2"));
    complete(p, "req-2", theirs, 2, true, &cr);
    CHECK(cr.ready == 0 && cr.dropped == 0 && cr.foreign == 2);
    OK(kvtier_primary_request_finished(p, "req-2"));

    /* One write fails, one succeeds; a late completion is ignored. */
    const int fail[] = {5};
    const int ok_late[] = {4, 9};
    complete(p, "req-1", fail, 1, false, &cr);
    CHECK(cr.dropped == 1);
    complete(p, "req-1", ok_late, 2, true, &cr);
    CHECK(cr.ready == 1 && cr.ignored == 1);

    OK(kvtier_primary_complete_load(p, "req-1", load, 2));
    CHECK(kvtier_primary_complete_load(p, "req-1", load, 2) == KVTIER_STATUS_KEY_STATE);
    OK(kvtier_primary_touch(p, "req-1", load, 2));
    OK(kvtier_primary_request_finished(p, "req-1"));
    CHECK(kvtier_primary_request_finished(p, "req-1") == KVTIER_STATUS_UNKNOWN_REQUEST);

    /* Events: stored 0..3, removed 2 and 3, stored 4 (5 never announced). */
    kvtier_primary_event ev[4];
    size_t count = 0;
    bool more = false;
    OK(kvtier_primary_take_events(p, ev, 4, &count, &more));
    CHECK(count == 4 && more);
    for (int i = 0; i < 4; i++) CHECK(ev[i].kind == KVTIER_PRIMARY_EVENT_KIND_STORED);
    OK(kvtier_primary_take_events(p, ev, 4, &count, &more));
    CHECK(count == 3 && !more);
    CHECK(ev[0].kind == KVTIER_PRIMARY_EVENT_KIND_REMOVED && ev[1].kind == KVTIER_PRIMARY_EVENT_KIND_REMOVED);
    CHECK(ev[2].kind == KVTIER_PRIMARY_EVENT_KIND_STORED && ev[2].key_len == 8 &&
          memcmp(ev[2].key, &hashes[4], 8) == 0);

    kvtier_primary_stats st;
    OK(kvtier_primary_read_stats(p, &st));
    CHECK(st.capacity == 4 && st.used == 3 && st.idle == 3 && st.pinned == 0);
    CHECK(st.evictions == 2 && st.refusals == 1 && st.late_completions == 1 && st.stores_failed == 1);
    CHECK(st.foreign_completions == 2);
    printf("primary: used %u/%u, evictions %llu, refusals %llu, usage %.2f\n", st.used, st.capacity,
           (unsigned long long)st.evictions, (unsigned long long)st.refusals, st.usage);

    /* Reset forgets everything and announces it. */
    OK(kvtier_primary_reset(p));
    OK(kvtier_primary_take_events(p, ev, 4, &count, &more));
    CHECK(count == 1 && ev[0].kind == KVTIER_PRIMARY_EVENT_KIND_CLEARED && ev[0].key_len == 0);
    OK(kvtier_primary_read_stats(p, &st));
    CHECK(st.used == 0 && st.allocated == 0);

    CHECK(kvtier_primary_read_stats(NULL, &st) == KVTIER_STATUS_NULL_ARGUMENT);
    kvtier_primary_free(p);
    kvtier_primary_free(NULL);
    printf("ok\n");
    return EXIT_SUCCESS;
}
