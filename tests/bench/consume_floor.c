/* The floor of a consume in C: `consume_floor STORE TOPIC > out`.
 *
 * What `mqctl consume TOPIC -g G --from first -e > out` must do at least, in a program with
 * no interpreter: read every queue of the topic's consume-queue files (20-byte entries:
 * commit-log offset, size, tags code; store/log/format.py), map the commit-log segments the
 * entries point into, check each record as mqctl does before serving it (TOTALSIZE equal to
 * the entry's size, MAGICCODE, its own QUEUEID, QUEUEOFFSET and PHYSICALOFFSET against the
 * entry that led to it, the topic, the field lengths adding up, and the record CRC property
 * `__CRC32#` against zlib's CRC-32 of every byte before it, masked with 0x7FFFFFFF), write each
 * body and a newline to stdout (writev, bodies not copied), and persist where each queue got
 * to (one file written, fsynced and renamed in). No group, no locks, no member records.
 * A record that fails a check is named on stderr and skipped (exit 5 at the end).
 *
 * Queue by queue, 1,000 entries a read (what mqctl's raw pull takes of a queue at once).
 * Built by tests/bench/floors.py (cc -O2, with libdeflate's CRC-32 when the machine has it, else
 * zlib's) and run by tests/bench/bench_produce.py beside `mqctl consume`, consume_floor.py and
 * Redis's XREADGROUP + XACK: the part of the Python floor's cost that this program does not pay
 * is the interpreter's.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#ifdef WITH_LIBDEFLATE
/* libdeflate's CRC-32 (the same function as zlib's, carry-less multiplication where the CPU has
 * it): the floor's CRC as fast as the ISA-L one mqctl uses, not 3-4x slower */
uint32_t libdeflate_crc32(uint32_t crc, const void *buf, size_t len);
#define crc32(crc, buf, len) libdeflate_crc32((crc), (buf), (len))
#else
#include <zlib.h>
#endif

#define MAGIC_V1 0xDAA320A7u
#define HEADER 84          /* fixed fields before BODYLENGTH */
#define FIXED 91           /* TOTALSIZE = 91 + body + topic + properties */
#define CRC_PROP 20        /* "__CRC32#" 0x01 ten digits 0x02 */
#define CQ_ENTRY 20
#define BATCH 1000
#define IOV_N 1024

struct seg { int64_t base; int64_t size; const unsigned char *map; };

static struct seg *segs;
static int nsegs;
static struct iovec iov[IOV_N];
static int niov;
static long long damaged;

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint64_t be64(const unsigned char *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

static int is_name(const char *s) {   /* 20 ASCII digits: a segment file */
    int i;
    for (i = 0; s[i]; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return i == 20;
}

static int by_base(const void *a, const void *b) {
    int64_t x = ((const struct seg *)a)->base, y = ((const struct seg *)b)->base;
    return x < y ? -1 : x > y;
}

static int by_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int by_num(const void *a, const void *b) {
    long x = atol(*(char *const *)a), y = atol(*(char *const *)b);
    return x < y ? -1 : x > y;
}

static void flush_out(void) {
    int i = 0;
    while (i < niov) {
        ssize_t w = writev(1, iov + i, niov - i);
        if (w < 0) {
            if (errno == EINTR) continue;
            perror("writev");
            exit(1);
        }
        while (i < niov && (size_t)w >= iov[i].iov_len) w -= iov[i++].iov_len;
        if (i < niov) {   /* a short write: the rest of this piece first */
            iov[i].iov_base = (char *)iov[i].iov_base + w;
            iov[i].iov_len -= w;
        }
    }
    niov = 0;
}

static void map_log(const char *store) {
    char path[4096];
    snprintf(path, sizeof path, "%s/commitlog", store);
    DIR *d = opendir(path);
    if (!d) { perror(path); exit(1); }
    struct dirent *e;
    int cap = 16;
    segs = malloc(cap * sizeof *segs);
    while ((e = readdir(d))) {
        if (!is_name(e->d_name)) continue;
        char p[8400];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        int fd = open(p, O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st)) { perror(p); exit(1); }
        if (nsegs == cap) segs = realloc(segs, (cap *= 2) * sizeof *segs);
        segs[nsegs].base = atoll(e->d_name);
        segs[nsegs].size = st.st_size;
        segs[nsegs].map = st.st_size ? mmap(NULL, st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0) : NULL;
        if (segs[nsegs].map == MAP_FAILED) { perror("mmap"); exit(1); }
        close(fd);
        nsegs++;
    }
    closedir(d);
    qsort(segs, nsegs, sizeof *segs, by_base);
}

/* The record an entry points at, or NULL when no segment holds all of it. */
static const unsigned char *record_at(int64_t phys, int32_t size) {
    int lo = 0, hi = nsegs;
    while (hi - lo > 1) {   /* the last segment whose base is <= phys */
        int mid = (lo + hi) / 2;
        if (segs[mid].base <= phys) lo = mid; else hi = mid;
    }
    if (!nsegs || phys < segs[lo].base || phys + size > segs[lo].base + segs[lo].size) return NULL;
    return segs[lo].map + (phys - segs[lo].base);
}

/* Why the record fails its checks, or NULL when it passes. */
static const char *check(const unsigned char *r, int64_t phys, int32_t size, int qid, int64_t qoff,
                         const char *topic, int tlen) {
    if (size < FIXED + CRC_PROP) return "record too small";
    if ((int32_t)be32(r) != size || be32(r + 4) != MAGIC_V1 || (int64_t)be64(r + 28) != phys)
        return "record does not match its consume-queue entry";
    const unsigned char *t = r + size - CRC_PROP;
    uint32_t crc = crc32(0, r, (size_t)(size - CRC_PROP)) & 0x7FFFFFFFu, want = 0;
    if (memcmp(t, "__CRC32#\x01", 9) || t[19] != 2) return "record CRC mismatch";
    for (int i = 18; i >= 9; i--) {   /* least significant digit first */
        if (t[i] < '0' || t[i] > '9') return "record CRC mismatch";
        want = want * 10 + (t[i] - '0');
    }
    if (want != crc) return "record CRC mismatch";
    int32_t blen = (int32_t)be32(r + HEADER);
    int64_t p = (int64_t)HEADER + 4 + blen;
    if ((int)be32(r + 12) != qid || (int64_t)be64(r + 20) != qoff || blen < 0 || p + 1 + tlen + 2 > size
        || r[p] != tlen || memcmp(r + p + 1, topic, tlen))
        return "record does not match its consume-queue entry";
    p += 1 + tlen;
    if (p + 2 + (r[p] << 8 | r[p + 1]) != size) return "field lengths do not add up to TOTALSIZE";
    return NULL;
}

/* Every entry of one queue, its records checked and their bodies written; its next offset. */
static int64_t consume_queue(const char *dir, int qid, const char *topic, long long *count) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int64_t bases[4096];
    int nb = 0;
    while ((e = readdir(d)) && nb < 4096)
        if (is_name(e->d_name)) bases[nb++] = atoll(e->d_name);
    closedir(d);
    qsort(bases, nb, sizeof bases[0], by_i64);
    static unsigned char buf[BATCH * CQ_ENTRY];
    int tlen = (int)strlen(topic);
    int64_t next = nb ? bases[0] / CQ_ENTRY : 0;
    for (int s = 0; s < nb; s++) {
        char p[8400];
        snprintf(p, sizeof p, "%s/%020lld", dir, (long long)bases[s]);
        int fd = open(p, O_RDONLY);
        if (fd < 0) { perror(p); exit(1); }
        off_t at = 0;
        ssize_t n;
        next = bases[s] / CQ_ENTRY;
        while ((n = pread(fd, buf, sizeof buf, at)) >= CQ_ENTRY) {
            n -= n % CQ_ENTRY;
            at += n;
            for (ssize_t i = 0; i < n; i += CQ_ENTRY, next++) {
                int64_t phys = (int64_t)be64(buf + i);
                int32_t size = (int32_t)be32(buf + i + 8);
                const unsigned char *r = size > 0 && phys >= 0 ? record_at(phys, size) : NULL;
                const char *why = r ? check(r, phys, size, qid, next, topic, tlen) : "no record where the entry points";
                if (why) {
                    fprintf(stderr, "skipping damaged message %s/%d@%lld: commit-log offset %lld: %s\n",
                            topic, qid, (long long)next, (long long)phys, why);
                    damaged++;
                    continue;
                }
                int32_t blen = (int32_t)be32(r + HEADER);
                iov[niov].iov_base = (void *)(r + HEADER + 4);
                iov[niov++].iov_len = blen;
                iov[niov].iov_base = "\n";
                iov[niov++].iov_len = 1;
                (*count)++;
                if (niov == IOV_N) flush_out();
            }
            flush_out();   /* a pull's bodies out before the next pull, as mqctl's raw path */
        }
        close(fd);
    }
    return next;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: consume_floor STORE TOPIC > out\n");
        return 2;
    }
    const char *store = argv[1], *topic = argv[2];
    map_log(store);
    char qroot[4096];
    snprintf(qroot, sizeof qroot, "%s/consumequeue/%s", store, topic);
    DIR *d = opendir(qroot);
    if (!d) { perror(qroot); return 3; }
    char *names[1024];
    int nq = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nq < 1024)
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9') names[nq++] = strdup(e->d_name);
    closedir(d);
    qsort(names, nq, sizeof names[0], by_num);
    long long count = 0;
    char offsets[1 << 16];
    int olen = 0;
    for (int q = 0; q < nq; q++) {
        char dir[4400];
        snprintf(dir, sizeof dir, "%s/%s", qroot, names[q]);
        int64_t next = consume_queue(dir, atoi(names[q]), topic, &count);
        if (olen < (int)sizeof offsets - 64)
            olen += snprintf(offsets + olen, sizeof offsets - olen, "%s %lld\n", names[q], (long long)next);
    }
    char tmp[4400], dst[4400];
    snprintf(tmp, sizeof tmp, "%s/floor-offset.tmp", store);
    snprintf(dst, sizeof dst, "%s/floor-offset", store);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, offsets, olen) != olen || fsync(fd) || close(fd) || rename(tmp, dst)) {
        perror(tmp);
        return 1;
    }
    fprintf(stderr, "%lld messages\n", count);
    return damaged ? 5 : 0;
}
