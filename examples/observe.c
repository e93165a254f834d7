/*
 * observe.c: what an engine watches a manager with, in C.
 *
 * A manager from one JSON document (a 4-slot primary tier in private
 * memory and the built-in fs tier in a scratch directory), plus a small C
 * tier that counts the blocks it is sent and reports that count as its own
 * statistic.  An event callback counts what is stored and removed, per
 * tier, as it happens; the loop sleeps in poll() on the wake-up descriptor
 * while the fs workers copy; an evicted block comes back from disk with its
 * bytes; finally the metrics are written in the Prometheus text format
 * (every family is listed in docs/metrics.md).
 *
 * Each finished request is reported to a callback, which writes it as one
 * line of JSON (a JSONL trace: keys looked up, hits per tier, blocks
 * loaded, stored, promoted, failed, time waiting for blocks, blocks asked
 * for, served by each tier, recomputed, steps waited).
 *
 *   observe [--metrics FILE] [--requests FILE]
 *
 * With --metrics, the whole text goes to FILE (for `promtool check
 * metrics FILE`, or a look); the job counters are printed.  With
 * --requests, the JSONL trace goes to FILE, else to standard output.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier.h"
#include "example_util.h"

#define BLOCK 4096
#define KEYS 8

/* The C tier: remembers nothing, misses every lookup, takes every store
 * (reporting it done at the next poll) and counts the blocks it was sent. */
#define C_TIER_RESULTS 64

struct counting_tier {
    kvtier_job_result results[C_TIER_RESULTS];
    size_t n_results;
    uint64_t blocks_seen;
};

static int32_t c_lookup(void *ud, const kvtier_key *k, const kvtier_request *r, kvtier_lookup_result *answer) {
    (void)ud, (void)k, (void)r;
    *answer = KVTIER_LOOKUP_MISS;
    return KVTIER_STATUS_OK;
}

static int32_t c_submit(void *ud, const kvtier_job *job) {
    struct counting_tier *t = (struct counting_tier *)ud;
    if (t->n_results == C_TIER_RESULTS) return KVTIER_STATUS_NO_SPACE;
    kvtier_job_result *res = &t->results[t->n_results++];
    memset(res, 0, sizeof *res);
    res->id = job->id;
    res->success = true;
    t->blocks_seen += job->len;
    return KVTIER_STATUS_OK;
}

static int32_t c_poll(void *ud, kvtier_job_result *out, size_t cap, size_t *written) {
    struct counting_tier *t = (struct counting_tier *)ud;
    size_t n = t->n_results < cap ? t->n_results : cap;
    memcpy(out, t->results, n * sizeof *out);
    memmove(t->results, t->results + n, (t->n_results - n) * sizeof *out);
    t->n_results -= n;
    *written = n;
    return KVTIER_STATUS_OK;
}

static int32_t c_stats(void *ud, kvtier_tier_stat *out, size_t cap, size_t *written) {
    struct counting_tier *t = (struct counting_tier *)ud;
    *written = 1;
    if (cap < 1) return KVTIER_STATUS_BUFFER_TOO_SMALL;
    memset(&out[0], 0, sizeof out[0]);
    snprintf(out[0].name, sizeof out[0].name, "blocks_seen");
    out[0].kind = KVTIER_STAT_COUNTER;
    out[0].value = (double)t->blocks_seen;
    return KVTIER_STATUS_OK;
}

static void c_destroy(void *ud) { free(ud); }

static kvtier_status add_counting_tier(const kvtier_manager *m) {
    struct counting_tier *t = (struct counting_tier *)calloc(1, sizeof *t);
    if (!t) return KVTIER_STATUS_OUT_OF_MEMORY;
    kvtier_tier_vtable vt = kvtier_tier_vtable_default();
    vt.user_data = t;
    vt.name = "counting";
    vt.medium = KVTIER_MEDIUM_CPU;
    vt.locality = KVTIER_LOCALITY_REMOTE;
    vt.lookup = c_lookup;
    vt.submit_store = c_submit;
    vt.submit_load = c_submit;
    vt.poll_finished = c_poll;
    vt.stats = c_stats;
    vt.destroy = c_destroy;
    size_t index = 0;
    kvtier_status s = kvtier_manager_add_tier(m, &vt, NULL, &index);
    if (s != KVTIER_STATUS_OK) free(t); /* on failure the manager keeps nothing */
    return s;
}

/* The request reports: written as JSONL to `out`, the last kept to check. */
struct trace {
    FILE *out;
    size_t reports;
    kvtier_request_report last;
    uint64_t last_hits[4];
    uint64_t last_served[4];
};

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void on_request_report(void *user_data, const kvtier_request_report *r) {
    struct trace *t = (struct trace *)user_data;
    fprintf(t->out, "{\"request\": %llu, \"name\": ", (unsigned long long)r->request);
    json_string(t->out, r->name);
    fprintf(t->out, ", \"lookups\": %llu, \"tier_hits\": [", (unsigned long long)r->lookups);
    for (size_t i = 0; i < r->tier_count; i++)
        fprintf(t->out, "%s%llu", i ? ", " : "", (unsigned long long)r->tier_hits[i]);
    fprintf(t->out,
            "], \"loaded\": %llu, \"stored\": %llu, \"promoted\": %llu, \"failed\": %llu,"
            " \"promotion_wait_ms\": %.3f, \"asked\": %llu, \"tier_served\": [",
            (unsigned long long)r->loaded, (unsigned long long)r->stored, (unsigned long long)r->promoted,
            (unsigned long long)r->failed, (double)r->promotion_wait_ns / 1e6, (unsigned long long)r->asked);
    for (size_t i = 0; i < r->tier_count; i++)
        fprintf(t->out, "%s%llu", i ? ", " : "", (unsigned long long)r->tier_served[i]);
    fprintf(t->out, "], \"recomputed\": %llu, \"steps_waited\": %llu}\n", (unsigned long long)r->recomputed,
            (unsigned long long)r->steps_waited);
    fflush(t->out);
    t->reports++;
    t->last = *r;
    memset(t->last_hits, 0, sizeof t->last_hits);
    memset(t->last_served, 0, sizeof t->last_served);
    for (size_t i = 0; i < r->tier_count && i < 4; i++) {
        t->last_hits[i] = r->tier_hits[i];
        t->last_served[i] = r->tier_served[i];
    }
}

static int fail(const char *what, kvtier_status s) {
    fprintf(stderr, "observe: %s: %s: %s\n", what, kvtier_status_str(s), kvtier_last_error_message());
    return EXIT_FAILURE;
}

struct seen {
    size_t stored[3];
    size_t removed[3];
    int medium_ok;
};

static void on_events(void *user_data, const kvtier_event *b) {
    struct seen *s = (struct seen *)user_data;
    if (b->tier > 2) return;
    if (b->kind == KVTIER_EVENT_STORED) s->stored[b->tier] += b->len;
    if (b->kind == KVTIER_EVENT_REMOVED) s->removed[b->tier] += b->len;
    if (b->tier == 0 && b->medium != KVTIER_MEDIUM_CPU) s->medium_ok = 0;
    if (b->tier == 1 && b->medium != KVTIER_MEDIUM_STORAGE) s->medium_ok = 0;
}

/* Ends the step, then sleeps on the descriptor between empty steps until
 * no work is pending; returns the number of wake-ups (0 when the step's
 * end already collected every job: a fast tier needs no wake-up), or -1.
 * While work is pending the descriptor must wake the loop: a poll that
 * waits a whole minute for a few 4 KiB blocks is a lost wake-up, and
 * fails. */
static int settle(const kvtier_manager *m, int fd) {
    int wakes = 0;
    if (kvtier_manager_schedule_end(m) != KVTIER_STATUS_OK) return -1;
    for (;;) {
        bool pending = true;
        if (kvtier_manager_schedule_end(m) != KVTIER_STATUS_OK) return -1;
        if (kvtier_manager_has_pending_work(m, &pending) != KVTIER_STATUS_OK) return -1;
        if (!pending) return wakes;
        struct pollfd p;
        p.fd = fd;
        p.events = POLLIN;
        p.revents = 0;
        int r = poll(&p, 1, 60000);
        if (r == 0) {
            fprintf(stderr, "observe: work was pending and poll() was never woken\n");
            return -1;
        }
        if (r == 1) {
            uint64_t v;
            if (read(fd, &v, sizeof v) == (ssize_t)sizeof v) wakes++;
        }
    }
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int run(const kvtier_manager *m, char *base, size_t stride, int fd, struct seen *seen,
               const char *metrics_path, struct trace *trace) {
    uint8_t kb[KEYS][8];
    kvtier_key keys[KEYS];
    for (int i = 0; i < KEYS; i++) {
        memset(kb[i], 'a' + i, sizeof kb[i]);
        keys[i].data = kb[i];
        keys[i].len = sizeof kb[i];
    }
    kvtier_request_handle req = 0;
    kvtier_status s = kvtier_manager_request_begin(m, "req-1", NULL, &req, NULL);
    if (s != KVTIER_STATUS_OK) return fail("request_begin", s);

    int wakes = 0;
    for (int half = 0; half < 2; half++) {
        const kvtier_key *batch = keys + half * 4;
        size_t idx[4];
        uint32_t slots[4];
        kvtier_store_plan plan = {idx, slots, NULL, 0, 0, true};
        s = kvtier_manager_prepare_store(m, req, batch, 4, &plan);
        if (s != KVTIER_STATUS_OK) return fail("prepare_store", s);
        if (plan.refused || plan.store_count != 4) {
            fprintf(stderr, "observe: the store was refused\n");
            return EXIT_FAILURE;
        }
        for (size_t j = 0; j < plan.store_count; j++) /* the "GPU" writes the block */
            memset(base + (size_t)slots[j] * stride, batch[idx[j]].data[0], BLOCK);
        s = kvtier_manager_complete_store(m, req, batch, 4, true, NULL);
        if (s != KVTIER_STATUS_OK) return fail("complete_store", s);
        int w = settle(m, fd); /* the cascade to the fs tier */
        if (w < 0) return fail("settle", KVTIER_STATUS_TIMEOUT);
        wakes += w;
    }

    /* Block 'a' was evicted by the second half: the lookup starts its
     * promotion from disk (`pending`), the next step's finds it ready. */
    kvtier_lookup_answer answer;
    s = kvtier_manager_lookup(m, req, &keys[0], 1, &answer);
    if (s != KVTIER_STATUS_OK) return fail("lookup", s);
    for (int i = 0; i < 50 && answer.pending > 0; i++) {
        int w = settle(m, fd);
        if (w < 0) return fail("settle", KVTIER_STATUS_TIMEOUT);
        wakes += w;
        s = kvtier_manager_lookup(m, req, &keys[0], 1, &answer);
        if (s != KVTIER_STATUS_OK) return fail("lookup", s);
    }
    if (answer.hits != 1) {
        fprintf(stderr, "observe: the fs tier lost block a\n");
        return EXIT_FAILURE;
    }
    uint32_t slot = 0;
    s = kvtier_manager_prepare_load(m, req, &keys[0], 1, &slot);
    if (s != KVTIER_STATUS_OK) return fail("prepare_load", s);
    const char *got = base + (size_t)slot * stride;
    for (size_t i = 0; i < BLOCK; i++)
        if (got[i] != 'a') {
            fprintf(stderr, "observe: byte %zu of the promoted block is wrong\n", i);
            return EXIT_FAILURE;
        }
    s = kvtier_manager_complete_load(m, req, &keys[0], 1);
    if (s != KVTIER_STATUS_OK) return fail("complete_load", s);
    s = kvtier_manager_request_finished(m, req);
    if (s != KVTIER_STATUS_OK) return fail("request_finished", s);

    size_t needed = 0;
    s = kvtier_manager_metrics_prometheus(m, NULL, 0, &needed);
    if (s != KVTIER_STATUS_BUFFER_TOO_SMALL) return fail("metrics size", s);
    char *text = (char *)malloc(needed + 1024);
    if (!text) return EXIT_FAILURE;
    s = kvtier_manager_metrics_prometheus(m, text, needed + 1024, &needed);
    if (s != KVTIER_STATUS_OK) {
        free(text);
        return fail("metrics", s);
    }
    int ok = strstr(text, "kvtier_tier_jobs_total{tier=\"fs\",medium=\"storage\",direction=\"load\"} 1\n") != NULL &&
             strstr(text, "kvtier_tier_jobs_total{tier=\"fs\",medium=\"storage\",direction=\"store\"} 2\n") != NULL &&
             strstr(text, "kvtier_custom_blocks_seen_total{tier=\"counting\",medium=\"cpu\"} 8\n") != NULL;
    if (metrics_path) {
        FILE *f = fopen(metrics_path, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "observe: cannot write %s\n", metrics_path);
            free(text);
            return EXIT_FAILURE;
        }
        printf("metrics: %zu bytes written to %s\n", strlen(text), metrics_path);
    }
    /* Show the job counters. */
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "kvtier_tier_jobs_total{", 23) == 0) printf("  %s\n", line);
    free(text);

    printf("events: primary stored %zu removed %zu; fs stored %zu; %d wake-ups\n", seen->stored[0],
           seen->removed[0], seen->stored[1], wakes);
    if (!ok) fprintf(stderr, "observe: metrics lack the fs tier's jobs or the C tier's count\n");
    if (seen->stored[1] != KEYS || seen->removed[0] < 4 || !seen->medium_ok) {
        fprintf(stderr, "observe: unexpected events\n");
        ok = 0;
    }
    /* One report: 8 blocks stored, block a promoted from the fs tier
     * (tier 1) and loaded to the "GPU": served by the fs tier. */
    if (trace->reports != 1 || trace->last.stored != KEYS || trace->last.promoted != 1 ||
        trace->last.loaded != 1 || trace->last.tier_count != 3 || trace->last_hits[1] != 1 ||
        trace->last_served[1] != 1 || trace->last_served[0] != 0) {
        fprintf(stderr, "observe: unexpected request report (%zu reports)\n", trace->reports);
        ok = 0;
    }
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}

int main(int argc, char **argv) {
    const char *metrics_path = NULL;
    struct trace trace;
    memset(&trace, 0, sizeof trace);
    trace.out = stdout;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--metrics") == 0 && i + 1 < argc) {
            metrics_path = argv[++i];
        } else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc) {
            if (trace.out != stdout) fclose(trace.out);
            trace.out = fopen(argv[++i], "w");
            if (!trace.out) {
                fprintf(stderr, "observe: cannot write %s\n", argv[i]);
                return EXIT_FAILURE;
            }
        } else {
            fprintf(stderr, "usage: %s [--metrics FILE] [--requests FILE]\n", argv[0]);
            return EXIT_FAILURE;
        }
    }
    char dir[64];
    if (!example_temp_dir(dir, sizeof dir, "observe")) return EXIT_FAILURE;
    char json[1024];
    snprintf(json, sizeof json,
             "{\"block_bytes\": %d, \"primary\": {\"capacity\": 4, \"event_capacity\": 256},"
             " \"tiers\": [{\"type\": \"fs\", \"options\": {\"directory\": \"%s\","
             " \"read_threads\": 1, \"write_threads\": 1, \"direct_io\": false}}]}",
             BLOCK, dir);
    kvtier_manager *m = NULL;
    kvtier_status s = kvtier_manager_new_from_json(json, strlen(json), &m);
    int rc = EXIT_FAILURE;
    if (s != KVTIER_STATUS_OK) {
        rc = fail("new_from_json", s);
    } else {
        void *base = NULL;
        size_t stride = 0, slot_bytes = 0;
        uint32_t count = 0;
        int fd = -1;
        struct seen seen;
        memset(&seen, 0, sizeof seen);
        seen.medium_ok = 1;
        if ((s = add_counting_tier(m)) != KVTIER_STATUS_OK)
            rc = fail("add_tier", s);
        else if ((s = kvtier_manager_slot_memory(m, &base, &stride, &slot_bytes, &count)) != KVTIER_STATUS_OK)
            rc = fail("slot_memory", s);
        else if ((s = kvtier_manager_set_event_callback(m, on_events, &seen, false)) != KVTIER_STATUS_OK)
            rc = fail("set_event_callback", s);
        else if ((s = kvtier_manager_wake_fd(m, &fd)) != KVTIER_STATUS_OK)
            rc = fail("wake_fd", s);
        else if ((s = kvtier_manager_set_request_report_callback(m, on_request_report, &trace)) != KVTIER_STATUS_OK)
            rc = fail("set_request_report_callback", s);
        else
            rc = run(m, (char *)base, stride, fd, &seen, metrics_path, &trace);
        kvtier_manager_free(m);
    }
    if (trace.out != stdout) fclose(trace.out);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (rc == EXIT_SUCCESS) printf("observe: ok\n");
    return rc;
}
