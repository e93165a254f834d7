/*
 * kvtierd_harness.c: the helpers of kvtierd_harness.h.
 */
#include "kvtierd_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void kh_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kvtierd-check[%d]: ", (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void kh_expect(kvtier_status st, kvtier_status want, const char *what, const char *file, int line) {
    if (st != want) {
        kh_fail("%s:%d: %s: %s (wanted %s): %s", file, line, what, kvtier_status_str(st),
                kvtier_status_str(want), st == KVTIER_STATUS_OK ? "" : kvtier_last_error_message());
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void kh_server_init(kh_server *s, const char *name, uint32_t capacity, const char *server_json) {
    memset(s, 0, sizeof *s);
    int n = snprintf(s->dir, sizeof s->dir, "/tmp/kvtierd-%s-XXXXXX", name);
    if (n < 0 || (size_t)n >= sizeof s->dir || mkdtemp(s->dir) == NULL) kh_fail("mkdtemp: %s", strerror(errno));
    snprintf(s->socket, sizeof s->socket, "%s/kvtierd.sock", s->dir);
    snprintf(s->config, sizeof s->config, "%s/kvtierd.json", s->dir);
    FILE *f = fopen(s->config, "w");
    if (f == NULL) kh_fail("%s: %s", s->config, strerror(errno));
    fprintf(f,
            "{\"block_bytes\": %u,\n"
            " \"primary\": {\"capacity\": %u, \"policy\": \"lru\"},\n"
            " \"region\": {\"name\": \"kvtierd-check\", \"directory\": \"%s\"},\n"
            " \"server\": {%s}}\n",
            KH_BLOCK_BYTES, capacity, s->dir, server_json);
    if (fclose(f) != 0) kh_fail("%s: %s", s->config, strerror(errno));
}

/* Whether a connect() to the socket succeeds now (closed at once: the
 * server sees a connection that ends before its handshake). */
static int socket_listens(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) kh_fail("socket: %s", strerror(errno));
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path) kh_fail("socket path too long: %s", path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

void kh_server_start(kh_server *s, const char *kvtierd_path) {
    pid_t pid = fork();
    if (pid < 0) kh_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a check that dies leaves no server */
        execl(kvtierd_path, kvtierd_path, "--config", s->config, "--socket", s->socket, "--log-level", "warn",
              (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", kvtierd_path, strerror(errno));
        _exit(127);
    }
    s->pid = pid;
    double deadline = now_s() + 10.0;
    while (!socket_listens(s->socket)) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            s->pid = 0;
            kh_fail("kvtierd exited before it listened (status %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
        if (now_s() > deadline) kh_fail("kvtierd did not listen on %s within 10 s", s->socket);
        usleep(5000);
    }
}

/* Waits at most `seconds` for `pid`; returns its wait status or -1. */
static int wait_bounded(pid_t pid, double seconds) {
    double deadline = now_s() + seconds;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0 && errno != EINTR) kh_fail("waitpid: %s", strerror(errno));
        if (now_s() > deadline) return -1;
        usleep(2000);
    }
}

void kh_server_stop(kh_server *s) {
    if (s->pid <= 0) return;
    kill(s->pid, SIGTERM);
    int status = wait_bounded(s->pid, 10.0);
    if (status == -1) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
        kh_fail("kvtierd did not stop within 10 s of SIGTERM");
    }
    s->pid = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        kh_fail("kvtierd stopped with %s %d after SIGTERM", WIFEXITED(status) ? "status" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
}

void kh_server_kill(kh_server *s) {
    if (s->pid <= 0) return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

void kh_server_cleanup(kh_server *s) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (s->dir[0] != '\0' && system(cmd) != 0) fprintf(stderr, "kvtierd-check: could not remove %s\n", s->dir);
}

kh_child kh_spawn(kh_child_fn fn, void *arg) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) kh_fail("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) kh_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(30); /* no child outlives a hang */
        close(down[1]);
        close(up[0]);
        kh_link link = {down[0], up[1]};
        int rc = fn(&link, arg);
        fflush(NULL);
        _exit(rc);
    }
    close(down[0]);
    close(up[1]);
    kh_child c = {pid, down[1], up[0]};
    return c;
}

void kh_send(int fd, uint64_t value) {
    if (write(fd, &value, sizeof value) != (ssize_t)sizeof value) kh_fail("pipe write: %s", strerror(errno));
}

uint64_t kh_receive(int fd) {
    uint64_t value;
    size_t got = 0;
    while (got < sizeof value) {
        ssize_t r = read(fd, (char *)&value + got, sizeof value - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) kh_fail("the other end of a pipe closed");
        got += (size_t)r;
    }
    return value;
}

int kh_wait(kh_child *c) {
    int status;
    while (waitpid(c->pid, &status, 0) < 0) {
        if (errno != EINTR) kh_fail("waitpid: %s", strerror(errno));
    }
    close(c->to_child);
    close(c->from_child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static uint8_t pattern_byte(uint32_t h, size_t offset) { return (uint8_t)((h >> 8) + offset * 31u + (offset >> 8)); }

static uint32_t key_hash(const char *key) {
    uint32_t h = 2166136261u;
    for (const char *p = key; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
    return h;
}

void kh_fill(uint8_t *slot, size_t bytes, const char *key) {
    uint32_t h = key_hash(key);
    for (size_t i = 0; i < bytes; i++) slot[i] = pattern_byte(h, i);
}

int kh_bytes_match(const uint8_t *slot, size_t bytes, const char *key) {
    uint32_t h = key_hash(key);
    for (size_t i = 0; i < bytes; i++) {
        if (slot[i] != pattern_byte(h, i)) return 0;
    }
    return 1;
}

kvtier_manager *kh_connect(const char *socket, const char *name, uint64_t timeout_ms) {
    kvtier_connect_options o = kvtier_connect_options_default();
    o.block_bytes = KH_BLOCK_BYTES;
    o.name = name;
    o.call_timeout_ms = timeout_ms;
    kvtier_manager *m = NULL;
    KH_CHECK(kvtier_manager_connect(socket, &o, &m));
    return m;
}

void kh_keys_make(kh_keys *k, const char *prefix, size_t first, size_t n) {
    if (n > 64) kh_fail("kh_keys_make: %zu keys, at most 64", n);
    k->n = n;
    for (size_t i = 0; i < n; i++) {
        snprintf(k->text[i], sizeof k->text[i], "%s-%zu", prefix, first + i);
        k->keys[i].data = (const uint8_t *)k->text[i];
        k->keys[i].len = strlen(k->text[i]);
    }
}

typedef struct {
    uint8_t *base;
    size_t stride, slot_bytes;
} slot_memory;

static slot_memory slots_of(kvtier_manager *m) {
    void *base = NULL;
    slot_memory s = {NULL, 0, 0};
    uint32_t count = 0;
    KH_CHECK(kvtier_manager_slot_memory(m, &base, &s.stride, &s.slot_bytes, &count));
    s.base = (uint8_t *)base;
    return s;
}

size_t kh_store(kvtier_manager *m, const char *request, const kh_keys *k) {
    slot_memory mem = slots_of(m);
    kvtier_request_handle req = 0;
    KH_CHECK(kvtier_manager_request_begin(m, request, NULL, &req, NULL));
    size_t positions[64];
    uint32_t slots[64];
    kvtier_store_plan plan = {positions, slots, NULL, 0, 0, false};
    KH_CHECK(kvtier_manager_prepare_store(m, req, k->keys, k->n, &plan));
    for (size_t j = 0; j < plan.store_count; j++) {
        kh_fill(mem.base + (size_t)slots[j] * mem.stride, mem.slot_bytes, k->text[positions[j]]);
    }
    if (!plan.refused) KH_CHECK(kvtier_manager_complete_store(m, req, k->keys, k->n, true, NULL));
    KH_CHECK(kvtier_manager_request_finished(m, req));
    return plan.refused ? 0 : plan.store_count;
}

size_t kh_load(kvtier_manager *m, const char *request, const kh_keys *k) {
    slot_memory mem = slots_of(m);
    kvtier_request_handle req = 0;
    KH_CHECK(kvtier_manager_request_begin(m, request, NULL, &req, NULL));
    kvtier_lookup_answer a;
    KH_CHECK(kvtier_manager_lookup(m, req, k->keys, k->n, &a));
    for (int i = 0; i < 5000 && a.pending > 0; i++) {
        KH_CHECK(kvtier_manager_schedule_end(m));
        usleep(1000);
        KH_CHECK(kvtier_manager_lookup(m, req, k->keys, k->n, &a));
    }
    uint32_t slots[64];
    if (a.hits > 0) {
        KH_CHECK(kvtier_manager_prepare_load(m, req, k->keys, a.hits, slots));
        for (size_t j = 0; j < a.hits; j++) {
            if (!kh_bytes_match(mem.base + (size_t)slots[j] * mem.stride, mem.slot_bytes, k->text[j])) {
                kh_fail("request %s: block %s (slot %u) does not hold its bytes", request, k->text[j], slots[j]);
            }
        }
        KH_CHECK(kvtier_manager_complete_load(m, req, k->keys, a.hits));
    }
    KH_CHECK(kvtier_manager_request_finished(m, req));
    return a.hits;
}

double kh_primary_stat(kvtier_manager *m, const char *name) {
    kvtier_tier_stat stats[256];
    size_t written = 0;
    KH_CHECK(kvtier_manager_read_tier_stats(m, 0, stats, 256, &written));
    for (size_t i = 0; i < written; i++) {
        if (strcmp(stats[i].name, name) == 0) return stats[i].value;
    }
    kh_fail("the primary tier has no statistic %s", name);
}

char *kh_prometheus(kvtier_manager *m) {
    size_t need = 0;
    KH_EXPECT(kvtier_manager_metrics_prometheus(m, NULL, 0, &need), KVTIER_STATUS_BUFFER_TOO_SMALL);
    size_t cap = need + 4096;
    char *text = (char *)malloc(cap);
    if (text == NULL) kh_fail("out of memory");
    KH_CHECK(kvtier_manager_metrics_prometheus(m, text, cap, &need));
    return text;
}
