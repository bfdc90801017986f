/* The floor of `cat FILE | <a program that stores lines as records>`: read the pipe in big
 * reads, cut it into lines, frame each line as a record (a fixed header of the size of
 * mqctl's, the body's CRC-32 in it) and write the records to a file in big appends. No
 * index, no queue entries, no Python: what a C writer of the same pipe reaches, against
 * which `mqctl send` is measured (tests/bench/bench_produce.py compiles and runs it).
 *
 *     cc -O2 -o pipe_floor pipe_floor.c -lz && cat in | ./pipe_floor out.log
 *
 * Built by bench_produce.py with libdeflate's CRC-32 when the machine has it (-DWITH_LIBDEFLATE
 * -l:libdeflate.so.0), else zlib's: zlib's is 3-4x slower than the ISA-L CRC mqctl uses, which
 * made this floor slower than mqctl itself at 4 KiB.
 */
#define _GNU_SOURCE
#include <fcntl.h>
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

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s OUT\n", argv[0]); return 2; }
    int out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0) { perror("open"); return 1; }
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
            if (used + HEADER + len > OUT_SIZE) { write_all(out, buf, used); used = 0; }
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
    write_all(out, buf, used);
    close(out);
    printf("%llu\n", (unsigned long long)records);
    return 0;
}
