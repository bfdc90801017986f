/* The floor of `cat FILE | <a program that stores lines as records>`: read the pipe in big
 * reads, cut it into lines, frame each line as a record (a fixed header of the size of
 * mqctl's, the body's CRC-32 in it) and write the records to a file in big appends. No
 * index, no queue entries, no Python: what a C writer of the same pipe reaches, against
 * which `mqctl send` is measured (tests/bench/bench_produce.py compiles and runs it).
 *
 *     cc -O2 -o pipe_floor pipe_floor.c -lz && cat in | ./pipe_floor out.log [SEGMENT]
 *
 * With SEGMENT (bytes; mqctl's is 64 MiB) it also does the durability work an async `mqctl send`
 * does: the records go to files of SEGMENT bytes (OUT.0, OUT.1, ...), each new file's directory
 * entry fsynced when the file is made, and a second thread fdatasyncs what was written each
 * time SEGMENT more bytes are written and the oldest of them is 0.5 s old (mqctl's background
 * flush); the process exits without waiting for a flush under way, as mqctl leaves a big one.
 * The bytes and the writes are the same; this is the floor of a writer with those promises.
 *
 * Built by bench_produce.py with libdeflate's CRC-32 when the machine has it (-DWITH_LIBDEFLATE
 * -l:libdeflate.so.0), else zlib's: zlib's is 3-4x slower than the ISA-L CRC mqctl uses, which
 * made this floor slower than mqctl itself at 4 KiB.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef WITH_LIBDEFLATE
uint32_t libdeflate_crc32(uint32_t crc, const void *buf, size_t len);
#define crc32(crc, buf, len) libdeflate_crc32((crc), (buf), (len))
#else
#include <zlib.h>
#endif

#define READ_SIZE (4 << 20)
#define HEADER 91            /* mqctl's fixed record part (format.RECORD_FIXED_SIZE) */
#define OUT_SIZE (1 << 20)   /* 8 MiB writes ran 4x slower now and then (kernel time) */

static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) { perror("write"); exit(1); }
        p += w; n -= (size_t)w;
    }
}

/* The SEGMENT mode: segment files, and the background flush (see the top). */
#define MAX_SEGMENTS 4096
static const char *out_name;
static uint64_t segment;                       /* 0: one file, no syncs */
static int seg_fds[MAX_SEGMENTS], dir_fd = -1;
static uint64_t written, synced;               /* bytes; guarded by mu */
static double unsynced_since;                  /* when the first write past `synced` was made */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int segment_fd(uint64_t index) {
    if (seg_fds[index] > 0) return seg_fds[index];
    char path[4096];
    snprintf(path, sizeof path, "%s.%llu", out_name, (unsigned long long)index);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || fsync(dir_fd) != 0) { perror(path); exit(1); }   /* the new name made durable */
    pthread_mutex_lock(&mu);
    seg_fds[index] = fd;
    pthread_mutex_unlock(&mu);
    return fd;
}

static void *flusher(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (written - synced < segment || now() - unsynced_since < 0.5) {
            if (written - synced >= segment) {   /* old enough soon: wait for the rest */
                pthread_mutex_unlock(&mu);
                usleep(10000);
                pthread_mutex_lock(&mu);
            } else {
                pthread_cond_wait(&cv, &mu);
            }
        }
        uint64_t from = synced / segment, to = written, last = (to - 1) / segment;
        unsynced_since = 0;
        pthread_mutex_unlock(&mu);
        for (uint64_t i = from; i <= last; i++)
            if (seg_fds[i] > 0) fdatasync(seg_fds[i]);
        pthread_mutex_lock(&mu);
        synced = to;
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* Append n bytes at `pos` (SEGMENT mode: split across the segment files). */
static void append(int out, uint64_t pos, const char *p, size_t n) {
    if (!segment) { write_all(out, p, n); return; }
    while (n) {
        uint64_t index = pos / segment, room = segment - pos % segment;
        size_t part = n < room ? n : (size_t)room;
        if (index >= MAX_SEGMENTS) { fprintf(stderr, "too many segments\n"); exit(1); }
        write_all(segment_fd(index), p, part);
        pos += part; p += part; n -= part;
        pthread_mutex_lock(&mu);
        if (written == synced) unsynced_since = now();
        written = pos;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) { fprintf(stderr, "usage: %s OUT [SEGMENT]\n", argv[0]); return 2; }
    int out = -1;
    out_name = argv[1];
    segment = argc == 3 ? strtoull(argv[2], NULL, 10) : 0;
    if (segment) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", out_name);
        dir_fd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
        pthread_t t;
        if (dir_fd < 0 || pthread_create(&t, NULL, flusher, NULL) != 0) { perror("segment mode"); return 1; }
    } else {
        out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (out < 0) { perror("open"); return 1; }
    }
    uint64_t flushed = 0;   /* bytes appended so far */
    fcntl(0, F_SETPIPE_SZ, 1 << 20);   /* as mqctl send does */
    char *in = malloc(READ_SIZE * 2), *buf = malloc(OUT_SIZE + READ_SIZE * 2 + HEADER);
    size_t have = 0, used = 0;
    uint64_t records = 0, pos = 0;
    for (;;) {
        ssize_t r = read(0, in + have, READ_SIZE);
        if (r < 0) { perror("read"); return 1; }
        have += (size_t)r;
        size_t start = 0;
        for (;;) {
            char *nl = memchr(in + start, '\n', have - start);
            if (!nl) break;
            size_t len = (size_t)(nl - (in + start));
            if (used + HEADER + len > OUT_SIZE) { append(out, flushed, buf, used); flushed += used; used = 0; }
            char *h = buf + used;
            memset(h, 0, HEADER);
            uint32_t total = HEADER + (uint32_t)len, crc = (uint32_t)crc32(0, (const unsigned char *)in + start, len);
            memcpy(h, &total, 4);
            memcpy(h + 8, &crc, 4);
            memcpy(h + 20, &records, 8);
            memcpy(h + 28, &pos, 8);
            memcpy(h + HEADER - 4, &len, 4);
            memcpy(h + HEADER, in + start, len);
            used += HEADER + len;
            pos += HEADER + len;
            records++;
            start += len + 1;
        }
        memmove(in, in + start, have - start);
        have -= start;
        if (r == 0) break;
    }
    append(out, flushed, buf, used);
    if (out >= 0) close(out);
    printf("%llu\n", (unsigned long long)records);
    return 0;
}
