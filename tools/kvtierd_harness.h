/*
 * kvtierd_harness.h: what the node server checks (tools/kvtierd-check.c)
 * share: starting and stopping `kvtierd` in a fresh directory, engine
 * processes that talk to their parent through pipes, and an engine's
 * store and load of blocks with recognizable bytes.
 *
 * Every helper that fails prints why (file, line, status and the
 * library's message) to stderr and exits the process with status 1.
 */
#ifndef KVTIERD_HARNESS_H
#define KVTIERD_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvtier.h"

/* Bytes per block of every server the checks start. */
#define KH_BLOCK_BYTES 4096u

/* Exits with status 1 after printing `st`'s name and the library's
 * message, unless `st` is `want`. */
void kh_expect(kvtier_status st, kvtier_status want, const char *what, const char *file, int line);
#define KH_CHECK(call) kh_expect((call), KVTIER_STATUS_OK, #call, __FILE__, __LINE__)
#define KH_EXPECT(call, want) kh_expect((call), (want), #call, __FILE__, __LINE__)

/* Prints the message (printf-style) to stderr and exits with status 1. */
void kh_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A kvtierd process and where it lives. */
typedef struct {
    pid_t pid;
    char dir[64];      /* a fresh private directory (config, region, socket) */
    char socket[128];  /* dir/kvtierd.sock */
    char config[128];  /* dir/kvtierd.json */
} kh_server;

/* Makes the directory and writes the configuration: `capacity` slots of
 * KH_BLOCK_BYTES in a region in the directory, and `server_json` (the
 * members of the "server" object, without braces; "" for none). */
void kh_server_init(kh_server *s, const char *name, uint32_t capacity, const char *server_json);

/* Starts `kvtierd` (the program at `kvtierd_path`) with the server's
 * configuration and socket, and waits (at most 10 s) until the socket
 * takes connections. */
void kh_server_start(kh_server *s, const char *kvtierd_path);

/* SIGTERM, then waits for the server: exits the check unless it stopped
 * with status 0 within 10 s. */
void kh_server_stop(kh_server *s);

/* SIGKILL, then reaps it. */
void kh_server_kill(kh_server *s);

/* Removes the directory and what is in it. */
void kh_server_cleanup(kh_server *s);

/* A forked process and the two pipes between it and its parent. */
typedef struct {
    pid_t pid;
    int to_child;    /* parent's end: writes reach the child's `from_parent` */
    int from_child;  /* parent's end: reads what the child sent */
} kh_child;

/* The child's ends of its pipes (what a kh_child_fn gets). */
typedef struct {
    int from_parent;
    int to_parent;
} kh_link;

/* A child's body: its return value is its exit status. */
typedef int (*kh_child_fn)(const kh_link *link, void *arg);

/* Forks a child that runs `fn(link, arg)` and exits with its result. */
kh_child kh_spawn(kh_child_fn fn, void *arg);

/* Sends one 64-bit value over a pipe; receives one (waits; exits the
 * process if the other end closed first). */
void kh_send(int fd, uint64_t value);
uint64_t kh_receive(int fd);

/* Waits for the child; returns its exit status, or 128 + the signal
 * that ended it.  Closes the parent's pipe ends. */
int kh_wait(kh_child *c);

/* Writes the recognizable bytes of the block named `key` (the engine's
 * "GPU -> CPU" copy). */
void kh_fill(uint8_t *slot, size_t bytes, const char *key);

/* Whether `slot` holds exactly the bytes kh_fill writes for `key`. */
int kh_bytes_match(const uint8_t *slot, size_t bytes, const char *key);

/* Connects as an engine named `name` with the layout of the checks'
 * servers (block bytes KH_BLOCK_BYTES, empty fingerprint) and a call
 * timeout of `timeout_ms`. */
kvtier_manager *kh_connect(const char *socket, const char *name, uint64_t timeout_ms);

/* Key names `<prefix>-<first+i>` for i < n, at most 64. */
typedef struct {
    char text[64][24];
    kvtier_key keys[64];
    size_t n;
} kh_keys;
void kh_keys_make(kh_keys *k, const char *prefix, size_t first, size_t n);

/* Request `request` stores every key: plans the store, fills each planned
 * slot with the key's bytes, completes it and finishes the request.
 * Returns the number of keys written (0 if the plan was refused). */
size_t kh_store(kvtier_manager *m, const char *request, const kh_keys *k);

/* Request `request` looks the keys up (waiting, at most 5 s, for any
 * pending), loads the leading hits, checks every byte of each against
 * kh_fill's and finishes.  Returns the number of blocks loaded and
 * checked; exits on a wrong byte. */
size_t kh_load(kvtier_manager *m, const char *request, const kh_keys *k);

/* The value of the primary tier's statistic `name` (a gauge or counter
 * of docs/statistics.md). */
double kh_primary_stat(kvtier_manager *m, const char *name);

/* The manager's Prometheus text, in a buffer to free(). */
char *kh_prometheus(kvtier_manager *m);

#endif /* KVTIERD_HARNESS_H */
