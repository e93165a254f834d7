/*
 * quickstart.c: the smallest whole use of kvtier, the README's C quick
 * start (which ctest runs as it stands: examples/readme/quickstart_c.c)
 * with the manager built from JSON (64 slots of 4 KiB, an fs tier in a
 * fresh directory) instead of a region and options; one request stores
 * two blocks, a second request finds them and loads them back.  Exits
 * non-zero on any failed call or wrong byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier.h"
#include "example_util.h"

int main(void) {
    char dir[64];
    if (example_temp_dir(dir, sizeof dir, "quickstart") == NULL) return EXIT_FAILURE;
    char json[512];
    snprintf(json, sizeof json,
             "{\"block_bytes\": 4096, \"primary\": {\"capacity\": 64, \"policy\": \"lru\"},"
             " \"tiers\": [{\"type\": \"fs\", \"options\": {\"directory\": \"%s/kv\"}}]}",
             dir);
    kvtier_manager *m = NULL;
    CHECK(kvtier_manager_new_from_json(json, strlen(json), &m));
    void *base = NULL;
    size_t stride = 0, slot_bytes = 0;
    uint32_t slot_count = 0;
    CHECK(kvtier_manager_slot_memory(m, &base, &stride, &slot_bytes, &slot_count));

    /* Two blocks named by 12-byte keys (vLLM: block hash + group index). */
    kvtier_key keys[2];
    keys[0].data = (const uint8_t *)"block-hash-0";
    keys[0].len = 12;
    keys[1].data = (const uint8_t *)"block-hash-1";
    keys[1].len = 12;

    /* Request 1 computed the blocks on the GPU: store them. */
    kvtier_request_handle req1 = 0, req2 = 0;
    CHECK(kvtier_manager_request_begin(m, "req-1", NULL, &req1, NULL));
    size_t positions[2];
    uint32_t slots[2];
    kvtier_store_plan plan = {positions, slots, NULL, 0, 0, false};
    CHECK(kvtier_manager_prepare_store(m, req1, keys, 2, &plan));
    for (size_t j = 0; j < plan.store_count; j++) { /* the GPU -> CPU copy */
        memset((char *)base + slots[j] * stride, 'A' + (int)positions[j], slot_bytes);
    }
    CHECK(kvtier_manager_complete_store(m, req1, keys, 2, true, NULL)); /* ready; cascades to fs */
    CHECK(kvtier_manager_request_finished(m, req1));
    CHECK(kvtier_manager_schedule_end(m));

    /* Request 2 shares the prefix: one lookup of all its keys.  Blocks
     * only the fs tier still has come back in two steps: this step's
     * lookup starts their promotions (`pending` of them), the next step's
     * finds them ready.  Once nothing is pending, load the `hits` and compute the
     * rest.  (Here both blocks are still in the primary tier: 2 hits.) */
    CHECK(kvtier_manager_request_begin(m, "req-2", NULL, &req2, NULL));
    kvtier_lookup_answer answer;
    CHECK(kvtier_manager_lookup(m, req2, keys, 2, &answer));
    while (answer.pending > 0) {
        CHECK(kvtier_manager_schedule_end(m)); /* the step ends; ask again in the next */
        usleep(1000);
        CHECK(kvtier_manager_lookup(m, req2, keys, 2, &answer));
    }
    if (answer.hits != 2) return EXIT_FAILURE;
    CHECK(kvtier_manager_prepare_load(m, req2, keys, answer.hits, slots)); /* pinned */
    for (int i = 0; i < 2; i++) { /* the CPU -> GPU copy */
        const unsigned char *block = (const unsigned char *)base + slots[i] * stride;
        if (block[0] != 'A' + i || block[slot_bytes - 1] != 'A' + i) return EXIT_FAILURE;
    }
    CHECK(kvtier_manager_complete_load(m, req2, keys, 2));
    CHECK(kvtier_manager_request_finished(m, req2));

    /* Let the cascades reach the disk, then stop. */
    bool pending = true;
    for (int i = 0; i < 5000 && pending; i++) {
        CHECK(kvtier_manager_schedule_end(m));
        CHECK(kvtier_manager_has_pending_work(m, &pending));
        if (pending) usleep(1000);
    }
    CHECK(kvtier_manager_shutdown(m));
    kvtier_manager_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return EXIT_FAILURE;
    printf("quickstart: stored 2 blocks, loaded them back, cascaded to the fs tier\n");
    return pending ? EXIT_FAILURE : EXIT_SUCCESS;
}
