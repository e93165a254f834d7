/*
 * kvtier-demo's proofs of progress.
 *
 * --stress: many concurrent requests over Zipf-skewed documents, through a
 * small primary tier and a small fs tier, with real bytes (demo_engine.c;
 * a request joins as soon as one leaves).  It fails (exit 1, saying why)
 * if a request does not finish, if one looks its keys up more than the
 * manager's wait bound allows (progress_wait_steps + 2 lookups from its
 * first to its load), if no request finishes for --stall-steps steps, or
 * if a loaded block has wrong bytes.  With --vllm-rules the engine and the
 * manager behave as vLLM 0.33 (per-key lookups up to the first key not
 * ready, no holds, no bound): the same figures, for comparison, and no
 * failure for slow or stalled requests.
 *
 * --prefix: one request's N-block prefix, stored, evicted from the primary
 * tier by other blocks and kept by the fs tier, is looked up again; each
 * step lasts until the promotions it started have arrived.  It prints the
 * steps the batched lookup takes to serve the prefix (2: one to start
 * every promotion, one to find them ready) and the steps of per-key
 * lookups under vLLM's rules (N + 1: one promotion per step), and fails if
 * the batched lookup takes more than --max-steps or serves fewer than N
 * blocks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demo.h"

/* ---- --stress ----------------------------------------------------------- */

static void stress_usage(void) {
    fprintf(stderr,
            "usage: %s --stress [--policy lru|arc] [--slots N] [--block-kib N] [--fs-capacity-mib N]\n"
            "          [--fs-threads N] [--fs-layout segments|files] [--concurrency N] [--requests N]\n"
            "          [--documents N] [--min-blocks N] [--max-blocks N] [--seed N] [--step-us N]\n"
            "          [--wait-steps N] [--max-lookups N] [--stall-steps N] [--vllm-rules] [--dir PARENT]\n"
            "  defaults: lru, 1024 slots of 16 KiB, a 48 MiB fs tier, 24 concurrent requests, 2000\n"
            "  requests over 200 documents of 4-24 blocks, seed 1, 1000 us of GPU work per step,\n"
            "  the manager's wait bound (16 steps), at most wait bound + 2 lookups per request,\n"
            "  stalled after 1000 steps without a finished request\n",
            prog);
    exit(2);
}

int stress_main(int argc, char **argv) {
    engine_config c = engine_config_default();
    c.slots = 1024;
    c.fs_cap_mib = 48;
    c.fs_threads = 2;
    c.batch = 24;
    c.step_us = 1000;
    c.stall_steps = 1000;
    zipf_shape z = {2000, 200, 4, 24, 1};
    unsigned long max_lookups = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--policy") == 0 && i + 1 < argc) c.policy = argv[++i];
        else if (strcmp(a, "--slots") == 0) c.slots = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--block-kib") == 0) c.block_kib = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--fs-capacity-mib") == 0) c.fs_cap_mib = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--fs-threads") == 0) c.fs_threads = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--fs-layout") == 0 && i + 1 < argc) {
            const char *l = argv[++i];
            if (strcmp(l, "segments") == 0) c.fs_layout = KVTIER_FS_LAYOUT_SEGMENTS;
            else if (strcmp(l, "files") == 0) c.fs_layout = KVTIER_FS_LAYOUT_FILES;
            else stress_usage();
        } else if (strcmp(a, "--concurrency") == 0) c.batch = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--requests") == 0) z.requests = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--documents") == 0) z.documents = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--min-blocks") == 0) z.min_blocks = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--max-blocks") == 0) z.max_blocks = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--seed") == 0) z.seed = num_arg(argc, argv, &i, false, stress_usage);
        else if (strcmp(a, "--step-us") == 0) c.step_us = num_arg(argc, argv, &i, false, stress_usage);
        else if (strcmp(a, "--wait-steps") == 0) c.wait_steps = (uint32_t)num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--max-lookups") == 0) max_lookups = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--stall-steps") == 0) c.stall_steps = num_arg(argc, argv, &i, true, stress_usage);
        else if (strcmp(a, "--vllm-rules") == 0) c.vllm_rules = true;
        else if (strcmp(a, "--dir") == 0 && i + 1 < argc) c.parent = argv[++i];
        else stress_usage();
    }
    if (c.slots > UINT32_MAX || c.block_kib % 4 != 0 || z.max_blocks < z.min_blocks) stress_usage();
    if (max_lookups == 0) max_lookups = (unsigned long)c.wait_steps + 2;

    workload wl;
    workload_zipf(&z, &wl);
    engine_result t;
    engine_run(&c, &wl, &t);

    printf("kvtier stress: %s, %lu slots x %lu KiB, fs tier %lu MiB; %lu concurrent requests, %zu requests over\n"
           "  %zu documents of %zu-%zu blocks (Zipf), seed %llu; %s\n",
           c.policy, c.slots, c.block_kib, c.fs_cap_mib, c.batch, z.requests, z.documents, z.min_blocks,
           z.max_blocks, (unsigned long long)z.seed,
           c.vllm_rules ? "vLLM 0.33's rules: per-key lookups, no holds, no wait bound"
                        : "kvtier_manager_lookup, holds on, wait bound");
    printf("  finished     %zu of %zu requests in %zu steps, %.2f s%s\n", t.finished, z.requests, t.steps, t.wall,
           t.stalled ? " (stalled)" : "");
    printf("  lookups      per request from the first to its load: mean %.2f, max %zu (%s)",
           t.finished ? (double)t.sum_lookups / (double)t.finished : 0.0, t.max_lookups,
           t.max_name[0] ? t.max_name : "-");
    if (c.vllm_rules) printf("\n");
    else printf("; bound %lu\n", max_lookups);
    printf("  served       %zu requests at their first lookup; %zu after waiting\n", t.served_first,
           t.finished - t.served_first);
    printf("  timeouts     %zu requests loaded after the wait bound passed; %zu prefixes ended for want of room\n",
           t.timed_out, t.no_room);
    printf("  blocks       %zu loaded ready at the first lookup, %zu came in while waiting; %zu computed,\n"
           "               %zu stored (%zu stores refused for want of room)\n",
           t.primary_hits, t.waited_hits, t.computed, t.stored, t.refused);
    printf("  promotions   %llu started, %.0f blocks in %.0f jobs (%.0f failed); %llu refused for want of room\n",
           (unsigned long long)t.stats.promotions_started, t.promo_blocks, t.promo_jobs, t.promo_fail,
           (unsigned long long)t.stats.allocation_failures);
    printf("  evictions    %.0f from the primary tier, %.0f from the fs tier (%.0f blocks in it at the end)\n",
           t.evictions, t.fs_evictions, t.fs_blocks);
    printf("  verification %zu failures in %zu loaded blocks\n", t.failures, t.primary_hits + t.waited_hits);

    int rc = EXIT_SUCCESS;
    if (t.failures > 0 || t.pending_left || t.cleanup_failed) rc = EXIT_FAILURE;
    if (!c.vllm_rules) {
        if (t.stalled || t.finished != z.requests) {
            fprintf(stderr, "%s: FAILED: %zu of %zu requests finished; none in the last %zu steps\n", prog,
                    t.finished, z.requests, c.stall_steps);
            rc = EXIT_FAILURE;
        }
        if (t.max_lookups > max_lookups) {
            fprintf(stderr, "%s: FAILED: request %s looked up %zu times before its load (bound %lu)\n", prog,
                    t.max_name, t.max_lookups, max_lookups);
            rc = EXIT_FAILURE;
        }
    } else if (t.stalled) {
        printf("  stalled      no request finished in the last %zu steps\n", c.stall_steps);
    }
    printf("  result       %s\n", rc == EXIT_SUCCESS ? "ok" : "FAILED");
    workload_free(&wl);
    return rc;
}

/* ---- --prefix ----------------------------------------------------------- */

static void prefix_usage(void) {
    fprintf(stderr,
            "usage: %s --prefix [--blocks N] [--policy lru|arc] [--block-kib N] [--max-steps N] [--dir PARENT]\n"
            "  defaults: 64 blocks of 16 KiB, lru, fails if the batched lookup takes more than 3 steps\n",
            prog);
    exit(2);
}

/* `n` 16-byte keys tagged `tag`, in `pool` (room for 16 * n bytes). */
static void make_keys(kvtier_key *keys, uint8_t *pool, size_t n, char tag) {
    for (size_t i = 0; i < n; i++) {
        uint8_t *k = pool + 16 * i;
        memset(k, 0, 16);
        k[0] = (uint8_t)tag;
        memcpy(k + 1, &i, sizeof i);
        keys[i].data = k;
        keys[i].len = 16;
    }
}

/* Stores `n` keys in one request, then waits until they reached the fs tier. */
static void store_all(kvtier_manager *m, int wake, const char *name, const kvtier_key *keys, size_t n,
                      uint8_t *base, size_t stride, size_t block_bytes) {
    kvtier_request_handle r;
    CALL("request_begin", kvtier_manager_request_begin(m, name, NULL, &r, NULL));
    size_t *idx = (size_t *)xmalloc(n * sizeof *idx);
    uint32_t *slots = (uint32_t *)xmalloc(n * sizeof *slots);
    kvtier_store_plan plan = {idx, slots, NULL, 0, 0, false};
    CALL("prepare_store", kvtier_manager_prepare_store(m, r, keys, n, &plan));
    if (plan.refused || plan.store_count != n) die("the prefix run's store was refused");
    for (size_t j = 0; j < n; j++) write_block(base + (size_t)slots[j] * stride, block_bytes, &keys[idx[j]]);
    CALL("complete_store", kvtier_manager_complete_store(m, r, keys, n, true, NULL));
    CALL("request_finished", kvtier_manager_request_finished(m, r));
    free(idx);
    free(slots);
    bool pending = true;
    double start = now_s();
    while (pending && now_s() - start < WAIT_LIMIT_S) {
        CALL("schedule_end", kvtier_manager_schedule_end(m));
        CALL("has_pending_work", kvtier_manager_has_pending_work(m, &pending));
        if (pending) wait_wake(wake, 100);
    }
    if (pending) die("the fs tier did not take the prefix run's blocks in time");
}

typedef struct {
    size_t steps, hits, first_hits, first_pending, failures;
} prefix_result;

static prefix_result prefix_once(size_t n, const char *policy, size_t block_kib, const char *parent, bool vllm) {
    prefix_result res;
    memset(&res, 0, sizeof res);
    size_t block_bytes = block_kib * 1024, slots = 2 * n;
    char dir[4096], region_name[96];
    snprintf(region_name, sizeof region_name, "kvtier-demo-prefix-%ld-%ld", (long)getpid(), (long)time(NULL));
    make_demo_dir(parent, dir);
    kvtier_region_options ro = kvtier_region_options_default();
    ro.name = region_name;
    ro.slot_count = (uint32_t)slots;
    ro.slot_bytes = block_bytes;
    kvtier_region *region = NULL;
    CALL("kvtier_region_new", kvtier_region_new(&ro, &region));
    bool unlinked = false;
    CALL("kvtier_region_unlink", kvtier_region_unlink(region, &unlinked));
    void *base_v = NULL;
    size_t stride = 0;
    CALL("kvtier_region_base", kvtier_region_base(region, &base_v));
    CALL("kvtier_region_stride", kvtier_region_stride(region, &stride));
    uint8_t *base = (uint8_t *)base_v;

    kvtier_manager_options mo = kvtier_manager_options_default();
    mo.capacity = (uint32_t)slots;
    mo.block_bytes = block_bytes;
    mo.policy = policy;
    if (vllm) {
        mo.progress_hold = false;
        mo.progress_wait_steps = 0;
        mo.progress_wait_ms = 0;
    }
    kvtier_manager *m = NULL;
    CALL("kvtier_manager_new", kvtier_manager_new(&mo, region, &m));
    kvtier_fs_options fo = kvtier_fs_options_default();
    fo.directory = dir;
    fo.read_threads = 2;
    fo.write_threads = 2;
    fo.layout = KVTIER_FS_LAYOUT_FILES;
    size_t fs_tier = 0;
    CALL("kvtier_manager_add_fs_tier", kvtier_manager_add_fs_tier(m, &fo, &fs_tier));
    int wake = -1;
    CALL("kvtier_manager_wake_fd", kvtier_manager_wake_fd(m, &wake));

    /* The prefix, then twice as many other blocks: the prefix leaves the
     * primary tier and stays in the fs tier. */
    kvtier_key *prefix = (kvtier_key *)xmalloc(n * sizeof *prefix);
    kvtier_key *other = (kvtier_key *)xmalloc(slots * sizeof *other);
    uint8_t *pool = (uint8_t *)xmalloc(16 * (n + slots));
    make_keys(prefix, pool, n, 'p');
    make_keys(other, pool + 16 * n, slots, 'o');
    store_all(m, wake, "writer", prefix, n, base, stride, block_bytes);
    store_all(m, wake, "others", other, slots, base, stride, block_bytes);
    wait_wake(wake, 0); /* forget the wake-ups so far */

    /* The reader: one lookup a step; a step lasts until the promotions it
     * submitted have arrived. */
    kvtier_request_handle r;
    CALL("request_begin", kvtier_manager_request_begin(m, "reader", NULL, &r, NULL));
    kvtier_lookup_answer a;
    for (;;) {
        res.steps++;
        if (vllm) CALL("lookup_per_key", kvtier_manager_lookup_per_key(m, r, prefix, n, &a));
        else CALL("lookup", kvtier_manager_lookup(m, r, prefix, n, &a));
        if (res.steps == 1) {
            res.first_hits = a.hits;
            res.first_pending = a.pending;
        }
        if (a.pending == 0 || res.steps > 4 * n) break;
        double jobs = stat_value(m, fs_tier, "promotion_jobs");
        CALL("schedule_end", kvtier_manager_schedule_end(m));
        double submitted = stat_value(m, fs_tier, "promotion_jobs") - jobs;
        double done = 0, start = now_s();
        while (done < submitted && now_s() - start < WAIT_LIMIT_S) done += (double)wait_wake(wake, 100);
    }
    res.hits = a.hits;
    uint32_t *load = (uint32_t *)xmalloc((n ? n : 1) * sizeof *load);
    if (res.hits) {
        CALL("prepare_load", kvtier_manager_prepare_load(m, r, prefix, res.hits, load));
        for (size_t j = 0; j < res.hits; j++)
            if (!check_block(base + (size_t)load[j] * stride, block_bytes, &prefix[j])) res.failures++;
        CALL("complete_load", kvtier_manager_complete_load(m, r, prefix, res.hits));
    }
    CALL("request_finished", kvtier_manager_request_finished(m, r));

    kvtier_status sd = kvtier_manager_shutdown(m);
    kvtier_manager_free(m);
    bool kept = false;
    kvtier_status sc = kvtier_region_close(region, &kept);
    if (sd != KVTIER_STATUS_OK || sc != KVTIER_STATUS_OK || remove_demo_dir(dir) != 0)
        die("the prefix run's clean-up failed");
    free(load);
    free(prefix);
    free(other);
    free(pool);
    return res;
}

int prefix_main(int argc, char **argv) {
    unsigned long n = 64, block_kib = 16, max_steps = 3;
    const char *policy = "lru", *parent = getenv("TMPDIR");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--blocks") == 0) n = num_arg(argc, argv, &i, true, prefix_usage);
        else if (strcmp(argv[i], "--block-kib") == 0) block_kib = num_arg(argc, argv, &i, true, prefix_usage);
        else if (strcmp(argv[i], "--max-steps") == 0) max_steps = num_arg(argc, argv, &i, true, prefix_usage);
        else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc) policy = argv[++i];
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) parent = argv[++i];
        else prefix_usage();
    }
    if (block_kib % 4 != 0 || n > UINT32_MAX / 4) prefix_usage();
    prefix_result b = prefix_once(n, policy, block_kib, parent, false);
    prefix_result v = prefix_once(n, policy, block_kib, parent, true);
    printf("kvtier prefix: %lu blocks of %lu KiB in the fs tier only, %s, a primary tier of %lu slots;\n"
           "  each step lasts until the promotions it started have arrived\n",
           n, block_kib, policy, 2 * n);
    printf("  kvtier_manager_lookup            %zu steps (first lookup: %zu hits, %zu pending); %zu blocks served\n",
           b.steps, b.first_hits, b.first_pending, b.hits);
    printf("  per key, vLLM 0.33's rules       %zu steps (first lookup: %zu hits, %zu pending); %zu blocks served\n",
           v.steps, v.first_hits, v.first_pending, v.hits);
    int rc = EXIT_SUCCESS;
    if (b.failures || v.failures) {
        fprintf(stderr, "%s: FAILED: %zu loaded blocks had wrong bytes\n", prog, b.failures + v.failures);
        rc = EXIT_FAILURE;
    }
    if (b.steps > max_steps || b.hits != n) {
        fprintf(stderr, "%s: FAILED: the batched lookup served %zu of %lu blocks in %zu steps (at most %lu)\n",
                prog, b.hits, n, b.steps, max_steps);
        rc = EXIT_FAILURE;
    }
    return rc;
}
