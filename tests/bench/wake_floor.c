/* The floor of a waiting consumer's delivery: what the wait -> read -> write of `mqctl consume
 * --json` costs with no Python and no bookkeeping, on the same store, woken the same way.
 *
 * It waits as mqctl's consumer waits (store/watch.py): inotify on the store's directory, a
 * change of the `checkpoint` file (rewritten by the writer after every batch) being the news.
 * Then, for each queue of TOPIC, it reads the consume-queue entries past the last one it saw
 * (20 bytes each: commit-log offset, size), reads each record from its commit-log segment and
 * writes one JSON line per message to stdout ({"body": ..., "storeTimestamp": ..., "latencyUs":
 * now - store timestamp}) with one write(2) per wake-up. No offsets, no locks, no group: the
 * work a consumer cannot avoid, against which tests/bench/bench_startup.py measures mqctl and
 * Redis (it compiles this at run time: `cc -O2 -o wake_floor wake_floor.c`).
 *
 *     wake_floor STORE TOPIC QUEUES          (starts at the queues' current ends)
 *
 * Record layout: store/log/format.py (TOTALSIZE at 0, STORETIMESTAMP at 56, BODYLENGTH at 84,
 * all big-endian); 64 MiB commit-log segments, 300,000-entry consume-queue segments, both named
 * by their 20-digit base offset.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#define SEGMENT (64LL << 20)
#define CQ_ENTRY 20
#define CQ_SEGMENT_BYTES (300000LL * CQ_ENTRY)
#define MAXQ 64

static const char *store_dir, *topic;
static int cq_fd[MAXQ];
static long long cq_base[MAXQ] = {0}, cq_pos[MAXQ];   /* byte position in the queue */
static int log_fd = -1;
static long long log_base = -1;

static uint64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}
static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int open_cq(int q, long long base) {
    char path[4096];
    snprintf(path, sizeof path, "%s/consumequeue/%s/%d/%020lld", store_dir, topic, q, base);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static int log_for(long long off) {
    long long base = off - off % SEGMENT;
    if (base != log_base) {
        char path[4096];
        if (log_fd >= 0) close(log_fd);
        snprintf(path, sizeof path, "%s/commitlog/%020lld", store_dir, base);
        log_fd = open(path, O_RDONLY | O_CLOEXEC);
        log_base = log_fd >= 0 ? base : -1;
    }
    return log_fd;
}

/* Append the JSON-escaped body to out; returns the new end. */
static char *put_body(char *o, const unsigned char *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        unsigned char c = b[i];
        if (c == '"' || c == '\\') { *o++ = '\\'; *o++ = (char)c; }
        else if (c < 0x20) o += sprintf(o, "\\u%04x", c);
        else *o++ = (char)c;
    }
    return o;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s STORE TOPIC QUEUES\n", argv[0]); return 2; }
    store_dir = argv[1];
    topic = argv[2];
    int queues = atoi(argv[3]);
    if (queues < 1 || queues > MAXQ) { fprintf(stderr, "QUEUES: 1-%d\n", MAXQ); return 2; }
    int in = inotify_init1(IN_CLOEXEC);
    if (in < 0 || inotify_add_watch(in, store_dir, IN_MODIFY) < 0) { perror("inotify"); return 1; }
    for (int q = 0; q < queues; q++) {   /* from the current end of each queue */
        cq_fd[q] = open_cq(q, 0);
        cq_pos[q] = cq_fd[q] >= 0 ? lseek(cq_fd[q], 0, SEEK_END) / CQ_ENTRY * CQ_ENTRY : 0;
    }
    fputs("ready\n", stdout);
    fflush(stdout);
    static char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    static unsigned char rec[1 << 16];
    static char out[1 << 20];
    for (;;) {
        ssize_t n = read(in, events, sizeof events);   /* the wait */
        if (n < 0) { if (errno == EINTR) continue; perror("read"); return 1; }
        int news = 0;
        for (char *p = events; p < events + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            if (e->len && strcmp(e->name, "checkpoint") == 0) news = 1;
            p += sizeof *e + e->len;
        }
        if (!news) continue;
        char *o = out;
        for (int q = 0; q < queues; q++) {
            for (;;) {
                long long base = cq_pos[q] - cq_pos[q] % CQ_SEGMENT_BYTES;
                if (cq_fd[q] < 0 || base != cq_base[q]) {
                    if (cq_fd[q] >= 0) close(cq_fd[q]);
                    cq_fd[q] = open_cq(q, base);
                    cq_base[q] = base;
                    if (cq_fd[q] < 0) break;
                }
                unsigned char ent[CQ_ENTRY];
                if (pread(cq_fd[q], ent, CQ_ENTRY, cq_pos[q] - base) != CQ_ENTRY) break;
                cq_pos[q] += CQ_ENTRY;
                long long off = (long long)be64(ent);
                uint32_t size = be32(ent + 8);
                int fd = log_for(off);
                if (fd < 0 || size > sizeof rec || pread(fd, rec, size, off - log_base) != (ssize_t)size) continue;
                uint32_t blen = be32(rec + 84);
                if (blen > size - 88 || (size_t)(o - out) + blen * 6 + 128 > sizeof out) continue;
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                long long sts = (long long)be64(rec + 56);
                long long now_us = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
                o += sprintf(o, "{\"queueId\":%d,\"body\":\"", q);
                o = put_body(o, rec + 88, blen);
                o += sprintf(o, "\",\"storeTimestamp\":%lld,\"latencyUs\":%lld}\n", sts, now_us - sts * 1000);
            }
        }
        for (char *w = out; w < o;) {
            ssize_t k = write(1, w, (size_t)(o - w));
            if (k < 0) { if (errno == EINTR) continue; return errno == EPIPE ? 0 : 1; }
            w += k;
        }
    }
}
