/*
 * redis_tier.c: two engine instances share KV blocks through Redis.
 *
 * Instance A (its own region and manager with a redis tier) stores 16
 * blocks; the completed stores cascade to Redis.  Instance B (another
 * region and manager, same server and namespace) finds the blocks through
 * its redis tier, promotes them into its own region and checks every byte.
 *
 * The server address comes from KVTIER_REDIS_ADDR (host:port); ctest runs
 * this program through examples/redis_tier_test.sh, which starts a
 * redis-server on a free loopback port and sets it.  Without the variable
 * the program says so and exits 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvtier.h"
#include "example_util.h"

#define SLOTS 32
#define BLOCK 4096
#define NKEYS 16

static uint8_t key_bytes[NKEYS][12];
static kvtier_key keys[NKEYS];

static void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

/* Seconds on the monotonic clock. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* How long Redis work may take before it counts as hung: a deadline, not a
 * number of steps, so a loaded machine or a sanitizer build passes too. */
#define HANG_SECONDS 120.0

typedef struct {
    kvtier_region *region;
    kvtier_manager *manager;
    size_t tier;
} instance;

static void open_instance(instance *in, const char *name, const char *addr, const char *ns) {
    kvtier_region_options ro = kvtier_region_options_default();
    ro.name = name;
    ro.slot_count = SLOTS;
    ro.slot_bytes = BLOCK;
    ro.open = KVTIER_REGION_OPEN_MODE_CREATE;
    CHECK(kvtier_region_new(&ro, &in->region));

    kvtier_manager_options mo = kvtier_manager_options_default();
    mo.capacity = SLOTS;
    /* This program's steps last 10 ms, far less than an engine's, and a
     * loaded machine may be slow: bound a request's wait for its blocks in
     * time, not in steps. */
    mo.progress_wait_steps = 0;
    mo.progress_wait_ms = (uint32_t)(HANG_SECONDS * 1000);
    CHECK(kvtier_manager_new(&mo, in->region, &in->manager));

    kvtier_redis_options o = kvtier_redis_options_default();
    o.nodes = addr;
    o.key_namespace = ns;
    o.connections = 2;
    /* Generous: a local server that a loaded machine runs slowly is slow,
     * not down. */
    o.connect_timeout_ms = 30000;
    o.command_timeout_ms = 30000;
    CHECK(kvtier_manager_add_redis_tier(in->manager, &o, &in->tier));
}

static void close_instance(instance *in) {
    CHECK(kvtier_manager_shutdown(in->manager));
    kvtier_manager_free(in->manager);
    CHECK(kvtier_region_close(in->region, NULL));
}

static double tier_stat(instance *in, const char *name) {
    kvtier_tier_stat stats[256];
    size_t n = 0;
    CHECK(kvtier_manager_read_tier_stats(in->manager, in->tier, stats, 256, &n));
    for (size_t i = 0; i < n; i++)
        if (strcmp(stats[i].name, name) == 0) return stats[i].value;
    return -1;
}

static uint8_t *slot(instance *in, uint32_t s) {
    void *p = NULL;
    CHECK(kvtier_region_slot_address(in->region, s, &p));
    return (uint8_t *)p;
}

int main(void) {
    const char *addr = getenv("KVTIER_REDIS_ADDR");
    if (!addr || !*addr) {
        printf("redis_tier: skipped: KVTIER_REDIS_ADDR is not set (ctest sets it through "
               "examples/redis_tier_test.sh, which starts redis-server)\n");
        return EXIT_SUCCESS;
    }
    char ns[64], name_a[64], name_b[64];
    snprintf(ns, sizeof ns, "redis-tier-example-%ld", (long)getpid());
    snprintf(name_a, sizeof name_a, "kvtier-redis-example-a-%ld", (long)getpid());
    snprintf(name_b, sizeof name_b, "kvtier-redis-example-b-%ld", (long)getpid());
    for (size_t i = 0; i < NKEYS; i++) {
        memset(key_bytes[i], 0, sizeof key_bytes[i]);
        key_bytes[i][0] = 0xab;
        key_bytes[i][11] = (uint8_t)i;
        keys[i].data = key_bytes[i];
        keys[i].len = sizeof key_bytes[i];
    }

    /* Instance A stores the blocks; completed stores cascade to Redis. */
    instance a;
    open_instance(&a, name_a, addr, ns);
    kvtier_request_handle req_a = 0, req_b = 0;
    CHECK(kvtier_manager_request_begin(a.manager, "a", NULL, &req_a, NULL));
    size_t index[NKEYS];
    uint32_t slots[NKEYS];
    kvtier_store_plan plan = {index, slots, NULL, 0, 0, false};
    CHECK(kvtier_manager_prepare_store(a.manager, req_a, keys, NKEYS, &plan));
    size_t n_store = plan.store_count;
    if (plan.refused || n_store != NKEYS) {
        fprintf(stderr, "redis_tier: instance A could not plan the store\n");
        return EXIT_FAILURE;
    }
    for (size_t s = 0; s < n_store; s++) {
        uint8_t *blk = slot(&a, slots[s]);
        for (size_t o = 0; o < BLOCK; o++) blk[o] = example_pattern(key_bytes[index[s]], sizeof key_bytes[0], o);
    }
    CHECK(kvtier_manager_schedule_end(a.manager));
    CHECK(kvtier_manager_complete_store(a.manager, req_a, keys, NKEYS, true, NULL));
    CHECK(kvtier_manager_request_finished(a.manager, req_a));
    bool pending = true;
    for (double deadline = now_s() + HANG_SECONDS; pending && now_s() < deadline;) {
        CHECK(kvtier_manager_schedule_end(a.manager));
        CHECK(kvtier_manager_has_pending_work(a.manager, &pending));
        if (pending) sleep_ms(10);
    }
    double stored = tier_stat(&a, "blocks_stored");
    close_instance(&a);
    if (pending || stored != NKEYS) {
        fprintf(stderr, "redis_tier: instance A stored %.0f of %d blocks in Redis\n", stored, NKEYS);
        return EXIT_FAILURE;
    }

    /* Instance B finds them through Redis and promotes them. */
    instance b;
    open_instance(&b, name_b, addr, ns);
    CHECK(kvtier_manager_request_begin(b.manager, "b", NULL, &req_b, NULL));
    /* One lookup of all the keys starts every block's promotion in the
     * first step; ask again each step while some are on their way. */
    kvtier_lookup_answer answer;
    CHECK(kvtier_manager_lookup(b.manager, req_b, keys, NKEYS, &answer));
    int steps = 1;
    for (double deadline = now_s() + HANG_SECONDS; answer.pending > 0 && now_s() < deadline; steps++) {
        CHECK(kvtier_manager_schedule_end(b.manager));
        sleep_ms(10);
        CHECK(kvtier_manager_lookup(b.manager, req_b, keys, NKEYS, &answer));
    }
    size_t hits = answer.hits;
    if (hits != NKEYS) {
        fprintf(stderr, "redis_tier: only %zu of %d blocks promoted\n", hits, NKEYS);
        return EXIT_FAILURE;
    }
    CHECK(kvtier_manager_prepare_load(b.manager, req_b, keys, NKEYS, slots));
    for (size_t i = 0; i < NKEYS; i++) {
        const uint8_t *blk = slot(&b, slots[i]);
        for (size_t o = 0; o < BLOCK; o++) {
            if (blk[o] != example_pattern(key_bytes[i], sizeof key_bytes[0], o)) {
                fprintf(stderr, "redis_tier: block %zu byte %zu is wrong in instance B\n", i, o);
                return EXIT_FAILURE;
            }
        }
    }
    CHECK(kvtier_manager_complete_load(b.manager, req_b, keys, NKEYS));
    CHECK(kvtier_manager_request_finished(b.manager, req_b));
    double loaded = tier_stat(&b, "blocks_loaded");
    double corrupt = tier_stat(&b, "blocks_corrupt");
    close_instance(&b);
    printf("redis_tier: instance A stored %d blocks in Redis at %s; instance B promoted and verified "
           "%zu (%.0f loaded by its redis tier, %.0f corrupt) in %d steps\n",
           NKEYS, addr, hits, loaded, corrupt, steps);
    return loaded == NKEYS && corrupt == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
