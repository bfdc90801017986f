/* What one durable write costs the file system, apart from any program around it: N times
 * pwrite SIZE bytes at the end of what was written, then fdatasync, in one of two ways:
 *
 *   append     the file grows with each write (as mqctl's commit log does: a segment's
 *              size is its write position), so every fdatasync commits the new size (on
 *              ext4, a journal commit);
 *   overwrite  the file was written to its full length (zeros) and synced first, so each
 *              write only replaces data and fdatasync needs no metadata.
 *
 * Prints "MODE SIZE N SECONDS". tests/bench/bench_produce.py --durable-only compiles and runs
 * it beside the durable runs (the floors of a single send and of a batch of 100):
 *
 *     cc -O2 -o fsync_floor fsync_floor.c && ./fsync_floor append 254 2000 /tmp/f.dat
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pwrite_all(int fd, const char *p, size_t n, off_t off) {
    while (n) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w <= 0) { perror("pwrite"); exit(1); }
        p += w; n -= (size_t)w; off += w;
    }
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "append") && strcmp(argv[1], "overwrite"))) {
        fprintf(stderr, "usage: %s append|overwrite SIZE N FILE\n", argv[0]);
        return 2;
    }
    size_t size = (size_t)atol(argv[2]);
    long n = atol(argv[3]);
    static char block[1 << 16];
    char *buf = malloc(size ? size : 1);
    if (!buf) return 1;
    memset(buf, 'x', size);
    unlink(argv[4]);
    int fd = open(argv[4], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) { perror("open"); return 1; }
    if (!strcmp(argv[1], "overwrite")) {
        off_t total = (off_t)size * n;
        for (off_t off = 0; off < total; off += sizeof block)
            pwrite_all(fd, block, (size_t)(total - off < (off_t)sizeof block ? total - off : (off_t)sizeof block), off);
    }
    if (fsync(fd)) { perror("fsync"); return 1; }
    double t = now();
    for (long i = 0; i < n; i++) {
        pwrite_all(fd, buf, size, (off_t)size * i);
        if (fdatasync(fd)) { perror("fdatasync"); return 1; }
    }
    double dt = now() - t;
    printf("%s %zu %ld %.6f\n", argv[1], size, n, dt);
    close(fd);
    unlink(argv[4]);
    return 0;
}
