/* The check loop of a bulk read, in C: store.log.columns.check_run's common case.
 *
 * A consumer that writes raw bodies, or builds messages from columns, spends most of its
 * CPU going over records one by one in the interpreter (about 1.5 us a 4 KiB record, of which
 * the CRC is a tenth); the same checks in C cost the CRC and little else. This module is that
 * loop and nothing more: it takes the records of one queue's run that lie in one read of the
 * log, checks each exactly as check_run does, and appends the columns. It stops at the first
 * record it cannot serve (outside the read, too small, failing any check) and hands it back:
 * check_run reads and checks that record in Python, names what is wrong, and calls here again
 * for the rest. So the Python loop stays the definition of the checks and of every message;
 * tests/log/test_nativecheck.py runs both on the same records, damaged ones included.
 * A long sparse run (a member of a group holding one queue of 16: its records between 15 other
 * queues' ones) is read through a mapping of the segment, each record's own bytes copied out
 * (map_run; no other queue's bytes copied, the mapping gone before the call returns); a page of
 * it that fails (a truncation after the mapping was made) raises SIGBUS, which the copies catch
 * (copy_batch, GIL released) and the record goes back to the Python loop; test_mappedreads.py.
 * Besides, cut_entries: the valid prefix of a run of raw consume-queue entries, as tuples, the
 * walk every bulk read does before it reads a record (a few hundred entries a read, where the
 * interpreter's loop cost about as much as the C check loop over the records themselves).
 * And frame_run: the producer's loop of store.log.framing (big bodies, or a sharding key per
 * body), which writes records instead of checking them; framing.py's Python loops stay its
 * definition and tests/log/test_framing.py compares the bytes of the two (log, queues, index).
 *
 * The record layout is store/log/format.py's (RocketMQ's CommitLog message, big-endian):
 *
 *     0 TOTALSIZE  4 MAGIC  8 BODYCRC  12 QUEUEID  16 FLAG  20 QUEUEOFFSET  28 PHYSICALOFFSET
 *     36 SYSFLAG  40 BORNTIMESTAMP  48 BORNHOST  56 STORETIMESTAMP  64 STOREHOST
 *     72 RECONSUMETIMES  76 PREPAREDTRANSACTIONOFFSET  84 BODYLENGTH  88 BODY
 *     then TOPICLENGTH (1) TOPIC, PROPERTIESLENGTH (2) PROPERTIES; the properties end with the
 *     record CRC property: "__CRC32#" 0x01, ten decimal digits least significant first, 0x02,
 *     the CRC-32 (& 0x7FFFFFFF) of every byte of the record before that property.
 *
 * The CRC is ISA-L's (the isal package the store depends on, found in its loaded module) or
 * zlib's: the same CRC-32 either way. The module fails to import when neither is found, and
 * the store then reads with the Python loop alone. It is built by `pip install` when a C
 * compiler is there (pyproject.toml, optional).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef __linux__
#include <sys/inotify.h>
#include <sys/vfs.h>
#endif

#define HEADER_SIZE 88
#define CRC_PROPERTY_SIZE 20
#define MIN_RECORD_SIZE (HEADER_SIZE + 1 + 2 + CRC_PROPERTY_SIZE)
#define MAGIC_V1 0xDAA320A7u
#define VIEW_MIN_SIZE 2048       /* as columns._VIEW_MIN_SIZE: bodies of such records as views */
#define UNLOCKED_CRC_MIN 65536   /* records this big are CRC'd with the GIL released */
/* Records outside the span are read together with the ones after them while the bytes between
 * two are at most GATHER_GAP (other queues' records: copying them costs less than a read of
 * its own) and the read at most GATHER_MAX (it stays in the core's cache while checked).
 * Measured, 16 members of a group on 16 queues (100-byte bodies: 3.4 KiB between a queue's
 * records), 2 CPU hogs on 2 cores: reads of up to 256 KiB ~15 % less CPU than a read per
 * record, up to 64 KiB a little less again (less system time); a 4 MiB span ~25 % more. */
#define GATHER_GAP 4096
#define GATHER_MAX (64 * 1024)

/* columns.check_run's flags */
#define BODIES_ONLY 1
#define WITH_PHYS 2
#define VIEWS 4

static const unsigned char CRC_HEAD[9] = {'_', '_', 'C', 'R', 'C', '3', '2', '#', 0x01};

typedef uint32_t (*isal_crc_t)(uint32_t, const unsigned char *, uint64_t);
typedef unsigned long (*zlib_crc_t)(unsigned long, const unsigned char *, unsigned int);
static isal_crc_t isal_crc;
static zlib_crc_t zlib_crc;

static inline uint32_t crc32_of(const unsigned char *p, int64_t n)
{
    if (isal_crc != NULL)
        return isal_crc(0, p, (uint64_t)n);
    return (uint32_t)zlib_crc(0, p, (unsigned int)n);   /* records are < 4 GiB */
}

static inline int32_t be32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static inline int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint32_t)be32(p + 4));
}

/* Whether the record at r (size bytes, its entry's commit-log offset phys) passes every check
 * of check_run; *body_end and *props_at are where its body ends and its properties start. */
static int record_ok(const unsigned char *r, int64_t size, int64_t phys, int64_t qoff, int32_t queue_id,
                     const unsigned char *topic_field, Py_ssize_t tf_len, int64_t *body_end, int64_t *props_at)
{
    int32_t blen = be32(r + 84);
    int64_t t = HEADER_SIZE + (int64_t)blen;
    int64_t p = t + tf_len + 2;
    if (be32(r) != size || (uint32_t)be32(r + 4) != MAGIC_V1 || be64(r + 28) != phys || be64(r + 20) != qoff
        || be32(r + 12) != queue_id || blen < 0 || p > size || memcmp(r + t, topic_field, (size_t)tf_len) != 0
        || p + ((int64_t)r[p - 2] << 8 | r[p - 1]) != size)
        return 0;
    const unsigned char *c = r + size - CRC_PROPERTY_SIZE;
    if (memcmp(c, CRC_HEAD, sizeof CRC_HEAD) != 0 || r[size - 1] != 0x02)
        return 0;
    uint32_t crc;
    if (size >= UNLOCKED_CRC_MIN) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_of(r, size - CRC_PROPERTY_SIZE);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32_of(r, size - CRC_PROPERTY_SIZE);
    }
    crc &= 0x7FFFFFFFu;
    for (int k = 0; k < 10; k++) {
        if (c[9 + k] != (unsigned char)('0' + crc % 10))
            return 0;
        crc /= 10;
    }
    *body_end = t;
    *props_at = p;
    return 1;
}

static int append_new(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* The commit-log offset and size of entry k of ``entries``; 0 when it is not a (phys, size)
 * tuple of 64-bit integers (no error left set). */
static int entry_at(PyObject *entries, Py_ssize_t k, int64_t *phys, int64_t *size)
{
    PyObject *e = PyList_GET_ITEM(entries, k);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 2)
        return 0;
    *phys = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 0));
    *size = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* One read from ``fd`` (the segment at commit-log offset ``fd_base``) of the record of entry i
 * (at ``phys``, ``size`` bytes) and of the entries after it that follow in log order, each
 * within GATHER_GAP bytes of the one before, all within GATHER_MAX bytes and the segment. A
 * new bytes object with what was read (possibly short: a record it does not hold whole is
 * read again, and its failure named, by the Python loop), *got its length; NULL with an
 * error set only when out of memory. */
static PyObject *read_gather(int fd, int64_t fd_base, int64_t seg_size, PyObject *entries, Py_ssize_t i,
                             int64_t phys, int64_t size, Py_ssize_t *got)
{
    int64_t hi = phys + size;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    for (Py_ssize_t k = i + 1; k < n; k++) {
        int64_t p, z;
        /* (p >= hi >= 0 and z > 0: none of the sums below can overflow) */
        if (!entry_at(entries, k, &p, &z) || z < MIN_RECORD_SIZE || p < hi || p - hi > GATHER_GAP
            || z > GATHER_MAX || p - phys > GATHER_MAX - z || p - fd_base > seg_size - z)
            break;
        hi = p + z;
    }
    PyObject *buf = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(hi - phys));
    if (buf == NULL)
        return NULL;
    ssize_t r;
    Py_BEGIN_ALLOW_THREADS
    r = pread(fd, PyBytes_AS_STRING(buf), (size_t)(hi - phys), (off_t)(phys - fd_base));
    Py_END_ALLOW_THREADS
    *got = r < 0 ? 0 : (Py_ssize_t)r;
    return buf;
}

/* -- a sparse run read through a mapping --------------------------------------------------------
 *
 * A member of a group holding one queue of 16 reads a sparse run: its queue's records lie in the
 * log between 15 other queues' ones. read_gather copies a record and those after it within
 * GATHER_GAP, so with 154-byte records (100-byte bodies) it copies ~16 times the run's own bytes
 * out of the page cache (measured, 16 members on 16 queues, 1M messages: 0.45 s of system time
 * against 0.09 s for one member reading them all). check_run instead maps the part of the
 * segment the run's remaining entries lie in (read-only, shared: the page cache's own pages, no
 * copy) and copies out of it each of its own records alone, then checks that copy as any other.
 * The mapping is unmapped before check_run returns: none outlives a call, so a reader's RSS does
 * not grow with what it has read. It never reaches past the file's size at the time it is made
 * (fstat), so a record cut by a truncation before the read is outside it and handed back.
 *
 * A mapped page can still fail while read: the file truncated by another process after the
 * fstat, an I/O error. The kernel then raises SIGBUS in the reading thread. The records of a
 * run are copied out of the mapping in batches (copy_batch), each batch with the GIL released
 * (a page fault on a cold or network file system blocks this thread only, as read_gather's
 * pread did) and with our SIGBUS handler installed for that batch alone: installed with the
 * GIL held before it (guard_enter), the one it replaced restored with the GIL held after it
 * (guard_leave; threads copying at once share one installation, counted under the GIL; a
 * child of a fork has no other thread, so no batch: pthread_atfork ends those counted). The
 * handler jumps back out of the batch when the faulting thread is inside one and the address in
 * its mapping, and the loop hands that record back (as a short read) for the Python loop to
 * name. Found displaced after a batch (another thread's faulthandler.enable() during it: the
 * handler in front took ours for the one it replaced), ours is left where it is for good and
 * SIGBUS is never touched again: later runs are read with read_gather (test_mappedreads.py).
 * Any other SIGBUS (another thread's, or one reaching ours left so) goes to the handler ours
 * replaced, called directly, once: when that one returns from a fault that repeats (a stale
 * one: faulthandler's after faulthandler.disable()), the fault comes back here and the default
 * action ends the process; when there is none, the default action ends it at once; a
 * non-repeating one (BUS_MCEERR_AO, a kill) is ignored only where SIG_IGN was. So a SIGBUS not ours ends the
 * process or reaches a live handler: it never repeats for ever, nor vanishes. No Python call,
 * no allocation and no lazily allocated thread-local happens inside a batch or the handler.
 * Outside batches ours is not installed at all, unless left so. */
/* Measured, one queue of 16 read whole (tests' store, 2 CPU hogs on 2 cores, CPU a message):
 * 100-byte bodies, pulls of 1000: 0.59 us read_gather, 0.42 mapped (0.52 without the prefetch
 * below); of 256: 0.70 and 0.67; of 128: 0.83 and 0.94; of 16: 2.4 and 3.4 (mmap, its page
 * faults and munmap cost tens of us a call on this VM). 1000-byte bodies,
 * pulls of 256: 1.50 and 1.16; 8000-byte ones: 3.07 and 2.72; 16000: even; 60000: 42 and 47
 * (a page fault a record, no copy saved). So a run is mapped from MAP_MIN_RECORDS records of
 * at most MAP_MAX_MEAN bytes on average on. A group (tests/bench/bench_members.py, 1M messages
 * of 100 bytes, 16 queues, 2 hogs, two runs against read_gather alone): 16 members 1.26 and
 * 1.37 CPU us a message across members, against 1.47 and 1.59; one member 0.50 and 0.61
 * against 0.52 and 0.56 (noise: the machine's load was 5 to 9). Copied in batches with the GIL
 * released, the handler installed around each (4 sigaction calls a batch of up to 256 records),
 * median (min-max) of 3, same bench without hogs: 16 members 1.28 (1.27-1.35) against 1.39 (1.28-1.50) with
 * the handler left installed and the GIL held, one member 0.51 (0.51-0.54) against 0.55
 * (0.50-0.56) (other work: load 2.6 to 8.6); against read_gather alone, 1.28 (1.16-1.37) and 1.56
 * (1.47-1.57), one member 0.55 and 0.52. */
#define MAP_MIN_RECORDS 256
#define MAP_MAX_MEAN 8192
#define PREFETCH_AHEAD 2
#define BATCH_RECORDS 256            /* records copied with the GIL released at a time */
#define BATCH_BYTES (128 * 1024)     /* ... and at most these bytes (the scratch buffer) */
static int page_size = 4096;
static struct sigaction prev_bus;            /* what ours replaced: restored by guard_leave */
static int guard_users;                      /* threads between guard_enter and guard_leave (GIL) */
static int bus_left;                         /* ours was displaced once: no more mapping (GIL) */
/* This thread's batch while it copies one (initial-exec: read in the handler with no call that
 * could allocate); whether it is handing a SIGBUS not ours to prev_bus (cleared by its next
 * guard_enter too: a handler handed to may leave by a longjmp), and the address of the
 * repeating fault it handed on last (until its next SIGBUS: that fault come back unresolved, or
 * another; and its next guard_enter) */
typedef struct {
    sigjmp_buf env;
    const unsigned char *lo, *hi;   /* the mapping: a fault in it is the batch's */
} Guard;
static __thread Guard *volatile cur_guard __attribute__((tls_model("initial-exec")));
static __thread volatile sig_atomic_t handing_on __attribute__((tls_model("initial-exec")));
static __thread void *volatile handed_addr __attribute__((tls_model("initial-exec")));
/* Tests only (tests/log/test_mappedreads.py): MQCTL_TEST_TRUNCATE_AFTER_MAP=<path>:<length>
 * (<length> decimal digits), read at import, truncates that file to that length right after the
 * first mapping the process makes, if it is of that same file (device and inode), so a read of
 * the mapping faults as it would if another process truncated the segment between the fstat and
 * the read. Unset (always, outside those tests), malformed, or naming another file: nothing. */
static char *truncate_after_map;

static void on_sigbus(int sig, siginfo_t *si, void *ctx);

static int is_ours(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == on_sigbus;
}

/* The default action for sig, now (a fault that repeats would reach it on return anyway). */
static void die_of(int sig)
{
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A SIGBUS not a batch's: to the handler ours replaced (see above). */
static void hand_on(int sig, siginfo_t *si, void *ctx)
{
    int fault = si != NULL && si->si_code > 0;   /* from the kernel, not sent */
    int repeats = fault;                          /* re-executed on return: a synchronous fault */
#ifdef BUS_MCEERR_AO
    if (fault && si->si_code == BUS_MCEERR_AO)
        repeats = 0;                              /* (a machine check reported, not hit) */
#endif
    struct sigaction prev = prev_bus;
    int is_fn = (prev.sa_flags & SA_SIGINFO) ? !is_ours(&prev)
                                             : prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN;
    void *last = handed_addr;
    handed_addr = NULL;
    if (handing_on || !is_fn || (repeats && last == si->si_addr)) {
        /* called back from the handler handed to (faulthandler re-raises into the one it
         * replaced), none to hand to, or the fault handed on came back unresolved */
        if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler == SIG_IGN && !repeats && !handing_on)
            return;   /* ignored, as it was before ours */
        die_of(sig);
        return;
    }
    handing_on = 1;
    if (prev.sa_flags & SA_SIGINFO)
        prev.sa_sigaction(sig, si, ctx);
    else
        prev.sa_handler(sig);
    handing_on = 0;
    if (repeats)
        handed_addr = si->si_addr;   /* if it comes back unresolved: the default action */
}

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    Guard *g = cur_guard;
    if (g != NULL && si != NULL && si->si_code > 0) {
        const unsigned char *a = (const unsigned char *)si->si_addr;
        if (a >= g->lo && a < g->hi) {
            cur_guard = NULL;
            siglongjmp(g->env, 1);   /* (SA_NODEFER: SIGBUS is not left blocked) */
        }
    }
    hand_on(sig, si, ctx);
}

/* Our handler installed for a batch (GIL held); 0 if it is not (sigaction failed, or ours was
 * displaced: see guard_leave), and the batch is not copied. */
static int guard_enter(void)
{
    struct sigaction cur, sa;
    handing_on = 0;      /* (this thread is in no handler now: one handed to that left by a */
    handed_addr = NULL;  /* longjmp, or a fault that it resolved, is over) */
    if (bus_left || sigaction(SIGBUS, NULL, &cur) != 0)
        return 0;
    if (guard_users > 0) {
        if (!is_ours(&cur)) {
            bus_left = 1;   /* displaced during another thread's batch */
            return 0;
        }
    } else {
        if (is_ours(&cur)) {
            bus_left = 1;   /* put back by another since ours was restored: left to it */
            return 0;
        }
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        /* (ours is not installed: a fault cannot be reading prev_bus) */
        prev_bus = cur;
        if (sigaction(SIGBUS, &sa, NULL) != 0)
            return 0;
    }
    guard_users++;
    return 1;
}

/* After a batch (GIL held): the last one out restores the handler ours replaced. Found
 * displaced (faulthandler.enable() in another thread during a batch: the handler in front may
 * have taken ours for the one it replaced, and may put ours back later), ours is left where it
 * is and SIGBUS is never touched again: no later run is mapped (bus_left), no later batch
 * copied. prev_bus then stays what it is, so ours, wherever it is called from, hands a SIGBUS
 * not its own to the handler it replaced, as that one expects of it. */
static void guard_leave(void)
{
    struct sigaction cur;
    guard_users--;
    if (bus_left)
        return;
    if (sigaction(SIGBUS, NULL, &cur) != 0 || !is_ours(&cur)) {
        bus_left = 1;
        return;
    }
    if (guard_users == 0)
        sigaction(SIGBUS, &prev_bus, NULL);
}

/* In the child of a fork (pthread_atfork): only the forking thread is there, in no batch (it
 * held the GIL): any batch counted was another thread's, and ends here as guard_leave ends it. */
static void guard_after_fork(void)
{
    if (guard_users > 0) {
        guard_users = 1;
        guard_leave();
    }
}

/* One record's copy out of a mapping */
typedef struct {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
} Copy;

/* The copies of ``ops`` (count of them, all out of the mapping at [lo, hi)) with the GIL
 * released and our handler installed; how many were made: fewer than count when a page of the
 * next one failed (SIGBUS), or none when the handler could not be installed (*unguarded). */
static Py_ssize_t copy_batch(const Copy *ops, Py_ssize_t count, const unsigned char *lo, const unsigned char *hi,
                             int *unguarded)
{
    if (!guard_enter()) {
        *unguarded = 1;
        return 0;
    }
    volatile Py_ssize_t done = 0;
    Py_BEGIN_ALLOW_THREADS
    Guard g;
    g.lo = lo;
    g.hi = hi;
    if (sigsetjmp(g.env, 0) == 0) {
        cur_guard = &g;
        __asm__ __volatile__("" ::: "memory");
        for (Py_ssize_t k = 0; k < count; k++) {
            if (k + PREFETCH_AHEAD < count) {
                /* the start of a record two ahead into the cache meanwhile: each lies on a page
                 * of its own, where the hardware does not look ahead (a prefetch never faults) */
                const unsigned char *a = ops[k + PREFETCH_AHEAD].src;
                __builtin_prefetch(a);
                __builtin_prefetch(a + 64);
                __builtin_prefetch(a + 128);
            }
            memcpy(ops[k].dst, ops[k].src, ops[k].n);
            done = k + 1;
        }
        __asm__ __volatile__("" ::: "memory");
    }
    cur_guard = NULL;
    Py_END_ALLOW_THREADS
    guard_leave();
    return done;
}

/* A mapping of part of a segment: ``addr`` holds the log from commit-log offset ``lo``; records
 * are read from it up to ``end`` (the file's end at the fstat, or the run's last record). */
typedef struct {
    unsigned char *addr;   /* NULL: none */
    size_t len;
    int64_t lo, end;
} RunMap;

/* Map what entries i, i+1, ... of ``entries`` need of the segment at ``fd`` (commit-log offset
 * ``fd_base``) from ``phys`` (entry i's record) on, where it pays: the run is sparse (its
 * records take under a quarter of the log they lie in; else read_gather's reads copy little
 * besides them), long (MAP_MIN_RECORDS) and of small records (MAP_MAX_MEAN). Leaves m->addr
 * NULL when it does not map (it would not pay, nothing is there, mmap failed, SIGBUS is left to
 * another handler: bus_left): read_gather then reads the records. */
static void map_run(RunMap *m, int fd, int64_t fd_base, int64_t seg_size, PyObject *entries, Py_ssize_t i,
                    int64_t phys)
{
    int64_t hi = phys, own = 0, count = 0;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    if (n - i < MAP_MIN_RECORDS || bus_left)
        return;
    for (Py_ssize_t k = i; k < n; k++) {
        int64_t p, z;
        if (entry_at(entries, k, &p, &z) && z >= MIN_RECORD_SIZE && p >= phys && p - fd_base <= seg_size - z) {
            own += z;
            count++;
            if (p + z > hi)
                hi = p + z;
        }
    }
    if (count < MAP_MIN_RECORDS || own > count * MAP_MAX_MEAN || hi - phys <= own * 4)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return;
    if (hi - fd_base > (int64_t)st.st_size)
        hi = fd_base + (int64_t)st.st_size;   /* nothing past the file's end is mapped */
    int64_t off = (phys - fd_base) & ~(int64_t)(page_size - 1);
    if (hi - fd_base <= off)
        return;
    size_t len = (size_t)(hi - fd_base - off);
    void *a = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
    if (a == MAP_FAILED)
        return;
    m->addr = (unsigned char *)a;
    m->len = len;
    m->lo = fd_base + off;
    m->end = hi;
    if (truncate_after_map != NULL) {   /* tests only: see its definition */
        char *colon = strrchr(truncate_after_map, ':');
        struct stat ts;
        if (colon != NULL && colon > truncate_after_map && colon[1] != '\0'
            && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
            *colon = '\0';
            if (stat(truncate_after_map, &ts) == 0 && ts.st_dev == st.st_dev && ts.st_ino == st.st_ino
                && truncate(truncate_after_map, (off_t)strtoll(colon + 1, NULL, 10)) != 0)
                perror("nativecheck: MQCTL_TEST_TRUNCATE_AFTER_MAP");
        }
        free(truncate_after_map);
        truncate_after_map = NULL;
    }
}

/* check_run(span, view, lo, entries, i, offset, queue_id, topic_field, max_bytes, total_bytes,
 *           flags, offsets, bodies, born, stored, props, phys, reconsume, fd, fd_base, seg_size)
 *           -> (i, total_bytes)
 *
 * Entries i, i+1, ... of ``entries`` ((phys, size, tags) tuples; entry k is queue offset
 * offset + k), checked and appended to the column lists as check_run appends them. A record
 * lies in ``span`` (the log from commit-log offset ``lo``) or is read from ``fd``, the segment
 * at commit-log offset ``fd_base`` (-1: none): through a mapping of the segment for a long
 * sparse run (map_run), else with the records after it that lie close by (read_gather), each
 * record still checked on its own. Stops before the first entry it
 * cannot serve, or after the record that brings total_bytes to max_bytes; returns the index of
 * the next entry and the new total. ``view``: a memoryview of span (bodies of big records are
 * cut from it with VIEWS), or None. */
static PyObject *check_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 21) {
        PyErr_SetString(PyExc_TypeError, "check_run takes 21 arguments");
        return NULL;
    }
    PyObject *view = args[1], *entries = args[3];
    PyObject *offs = args[11], *bodies = args[12], *born = args[13], *stored = args[14], *props = args[15];
    PyObject *phys_l = args[16], *reconsume = args[17];
    if (!PyList_Check(entries) || !PyList_Check(offs) || !PyList_Check(bodies) || !PyList_Check(born)
        || !PyList_Check(stored) || !PyList_Check(props) || !PyList_Check(phys_l) || !PyList_Check(reconsume)) {
        PyErr_SetString(PyExc_TypeError, "check_run: entries and columns must be lists");
        return NULL;
    }
    if (!PyBytes_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "check_run: topic_field must be bytes");
        return NULL;
    }
    int64_t lo = PyLong_AsLongLong(args[2]);
    Py_ssize_t i = PyLong_AsSsize_t(args[4]);
    int64_t offset = PyLong_AsLongLong(args[5]);
    long queue_id_l = PyLong_AsLong(args[6]);
    int64_t max_bytes = PyLong_AsLongLong(args[8]);
    int64_t total = PyLong_AsLongLong(args[9]);
    long flags = PyLong_AsLong(args[10]);
    int fd = (int)PyLong_AsLong(args[18]);
    int64_t fd_base = PyLong_AsLongLong(args[19]);
    int64_t seg_size = PyLong_AsLongLong(args[20]);
    if (PyErr_Occurred())
        return NULL;
    int32_t queue_id = (int32_t)queue_id_l;
    const unsigned char *topic_field = (const unsigned char *)PyBytes_AS_STRING(args[7]);
    Py_ssize_t tf_len = PyBytes_GET_SIZE(args[7]);
    int use_views = (flags & VIEWS) && view != Py_None;

    Py_buffer span;
    if (PyObject_GetBuffer(args[0], &span, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)span.buf;
    int64_t span_len = (int64_t)span.len;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    int failed = 0;
    /* The last read outside the span (read_gather): it holds the log from commit-log offset
     * own_lo, own_len bytes; own_view a memoryview of it, made when a body is cut from it. */
    PyObject *own = NULL, *own_view = NULL;
    int64_t own_lo = 0, own_len = 0;
    /* The mapping of a sparse run (map_run), made at its first record outside the span; records
     * copied out of it into ``scratch`` (unless their bodies are views) */
    RunMap map = {NULL, 0, 0, 0};
    int map_tried = 0;
    unsigned char *scratch = NULL;
    int64_t scratch_len = 0;
    /* The last batch copied out of it: entries b_first .. b_first + b_count - 1, the first b_done
     * of them copied (to ops[k - b_first].dst), a page of the next one failed if fewer */
    Copy *ops = NULL;
    Py_ssize_t b_first = 0, b_count = 0, b_done = 0;
    for (; i < n; i++) {
        int64_t phys, size;
        if (!entry_at(entries, i, &phys, &size))
            break;   /* the Python loop takes the entry and says what it is */
        /* phys (>= 0) and size come from a consume-queue entry, any value of a damaged one:
         * the bounds are compared without a sum that could overflow (phys near 2**63) */
        if (size < MIN_RECORD_SIZE || phys < 0)
            break;
        int64_t start = phys - lo;
        const unsigned char *r;
        int in_own = 0;   /* the record lies in ``own``, not in the span */
        if (start < 0 || size > span_len || start > span_len - size) {
            if (i > b_first && i < b_first + b_count) {
                /* in the batch copied out of the mapping (below) */
                if (i - b_first >= b_done)
                    break;   /* a page of it failed: the Python loop reads it again and names why */
                const Copy *c = &ops[i - b_first];
                if (map.addr == NULL || phys < map.lo || phys - map.lo > map.end - map.lo
                    || c->src != map.addr + (phys - map.lo) || c->n != (size_t)size)
                    break;   /* not the record copied for this entry: the Python loop reads it */
                r = c->dst;
                goto read;
            }
            if (own == NULL || phys < own_lo || size > own_len || phys - own_lo > own_len - size) {
                if (fd < 0 || phys < fd_base || size > seg_size || phys - fd_base > seg_size - size)
                    break;
                if (!map_tried) {
                    map_tried = 1;
                    map_run(&map, fd, fd_base, seg_size, entries, i, phys);
                }
                if (map.addr != NULL && phys >= map.lo && size <= map.end - map.lo
                    && phys - map.lo <= map.end - map.lo - size) {
                    /* its own bytes out of the mapping (above), with those of the entries after
                     * it that lie in it too (a batch, into ``scratch``); alone into a buffer of its
                     * own when its body is handed out as a view of it */
                    int unguarded = 0;
                    const unsigned char *mhi = map.addr + (map.end - map.lo);
                    if (ops == NULL && (ops = PyMem_Malloc(BATCH_RECORDS * sizeof *ops)) == NULL) {
                        PyErr_NoMemory();
                        goto error;
                    }
                    if (use_views && size >= VIEW_MIN_SIZE) {
                        Py_XDECREF(own);
                        Py_CLEAR(own_view);
                        own = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
                        if (own == NULL)
                            goto error;
                        own_lo = phys;
                        own_len = 0;   /* (until copied) */
                        ops[0].dst = (unsigned char *)PyBytes_AS_STRING(own);
                        ops[0].src = map.addr + (phys - map.lo);
                        ops[0].n = (size_t)size;
                        b_count = 0;
                        Py_ssize_t done = copy_batch(ops, 1, map.addr, mhi, &unguarded);
                        if (done == 1) {
                            own_len = size;
                            r = (const unsigned char *)PyBytes_AS_STRING(own);
                            in_own = 1;
                            goto read;
                        }
                        if (!unguarded)
                            break;   /* a page failed: the Python loop reads it again and names why */
                    } else {
                        if (size > scratch_len) {
                            PyMem_Free(scratch);
                            scratch_len = size > BATCH_BYTES ? size : BATCH_BYTES;
                            scratch = PyMem_Malloc((size_t)scratch_len);
                            if (scratch == NULL) {
                                scratch_len = 0;
                                PyErr_NoMemory();
                                goto error;
                            }
                        }
                        /* the batch: entries i, i+1, ... while each is in the mapping, not in the
                         * span, not handed out as a view, and fits in scratch */
                        int64_t used = 0;
                        Py_ssize_t count = 0;
                        for (Py_ssize_t k = i; k < n && count < BATCH_RECORDS; k++) {
                            int64_t p, z;
                            if (!entry_at(entries, k, &p, &z) || z < MIN_RECORD_SIZE || p < 0
                                || (p - lo >= 0 && z <= span_len && p - lo <= span_len - z)
                                || p < map.lo || z > map.end - map.lo || p - map.lo > map.end - map.lo - z
                                || (use_views && z >= VIEW_MIN_SIZE) || z > scratch_len - used)
                                break;
                            ops[count].dst = scratch + used;
                            ops[count].src = map.addr + (p - map.lo);
                            ops[count].n = (size_t)z;
                            used += z;
                            count++;
                        }
                        b_first = i;
                        b_count = count;
                        b_done = copy_batch(ops, count, map.addr, mhi, &unguarded);
                        if (b_done > 0) {
                            r = ops[0].dst;
                            goto read;
                        }
                        b_count = 0;
                        if (!unguarded)
                            break;   /* a page failed: the Python loop reads it again and names why */
                    }
                    /* (our handler could not be installed: no more reads of the mapping) */
                    munmap(map.addr, map.len);
                    map.addr = NULL;
                }
                Py_ssize_t got;
                Py_XDECREF(own);
                Py_CLEAR(own_view);
                own = read_gather(fd, fd_base, seg_size, entries, i, phys, size, &got);
                if (own == NULL)
                    goto error;
                own_lo = phys;
                own_len = got;
                if (got < size)
                    break;   /* short or failed: the Python loop reads it again and names why */
            }
            r = (const unsigned char *)PyBytes_AS_STRING(own) + (phys - own_lo);
            in_own = 1;
        } else {
            r = buf + start;
        }
    read:;
        int64_t qoff = offset + i, t, p;
        if (!record_ok(r, size, phys, qoff, queue_id, topic_field, tf_len, &t, &p))
            break;
        PyObject *body;
        if (use_views && size >= VIEW_MIN_SIZE) {
            if (!in_own) {
                body = PySequence_GetSlice(view, (Py_ssize_t)(start + HEADER_SIZE), (Py_ssize_t)(start + t));
            } else {
                if (own_view == NULL)
                    own_view = PyMemoryView_FromObject(own);
                Py_ssize_t at = (Py_ssize_t)(phys - own_lo);
                body = own_view == NULL ? NULL : PySequence_GetSlice(own_view, at + HEADER_SIZE, at + (Py_ssize_t)t);
            }
        } else {
            body = PyBytes_FromStringAndSize((const char *)r + HEADER_SIZE, (Py_ssize_t)(t - HEADER_SIZE));
        }
        if (body == NULL || append_new(offs, PyLong_FromLongLong(qoff)) < 0) {
            Py_XDECREF(body);
            goto error;
        }
        if (append_new(bodies, body) < 0)
            goto error;
        if (!(flags & BODIES_ONLY)) {
            if (append_new(born, PyLong_FromLongLong(be64(r + 40))) < 0
                || append_new(stored, PyLong_FromLongLong(be64(r + 56))) < 0
                || append_new(props, PyBytes_FromStringAndSize((const char *)r + p,
                                                               (Py_ssize_t)(size - CRC_PROPERTY_SIZE - p))) < 0)
                goto error;
        }
        if (flags & WITH_PHYS) {
            if (append_new(phys_l, PyLong_FromLongLong(phys)) < 0
                || (!(flags & BODIES_ONLY) && append_new(reconsume, PyLong_FromLong(be32(r + 72))) < 0))
                goto error;
        }
        total += size;
        if (total >= max_bytes) {
            i++;
            break;
        }
    }
    goto done;
error:
    failed = 1;
done:
    if (map.addr != NULL)
        munmap(map.addr, map.len);
    PyMem_Free(scratch);
    PyMem_Free(ops);
    Py_XDECREF(own_view);
    Py_XDECREF(own);
    PyBuffer_Release(&span);
    if (failed)
        return NULL;
    return Py_BuildValue("(nL)", i, (long long)total);
}

/* CRC-32 arithmetic (zlib's crc32_combine, 1.2.12 and later): combine(crc(A), crc(B), op) ==
 * crc(A + B) where op = x^(8 len(B)) mod P. A record's CRC is combined from its header's and its
 * body's, so a big body is read once, for BODYCRC. */
#define CRC_POLY 0xedb88320u

static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return p;
}

static uint32_t x2n_table[32];   /* x^(2^n) mod P */

static void init_x2n(void)
{
    uint32_t p = 1u << 30;   /* x^1 */
    x2n_table[0] = p;
    for (int n = 1; n < 32; n++)
        x2n_table[n] = p = multmodp(p, p);
}

/* x^(8 len) mod P: the operator that shifts a CRC past len bytes; the last few lengths kept
 * (a batch's bodies mostly share one) */
#define OP_CACHE 16
static int64_t op_len[OP_CACHE] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
static uint32_t op_val[OP_CACHE];

static uint32_t shift_op(int64_t len)
{
    unsigned slot = (unsigned)(len % OP_CACHE);
    if (op_len[slot] == len)
        return op_val[slot];
    uint32_t p = 1u << 31;   /* x^0 */
    unsigned k = 3;
    for (int64_t n = len; n; n >>= 1, k++)
        if (n & 1)
            p = multmodp(x2n_table[k & 31], p);
    op_len[slot] = len;
    op_val[slot] = p;
    return p;
}

static inline uint32_t crc32_more(uint32_t crc, const unsigned char *p, int64_t n)
{
    if (isal_crc != NULL)
        return isal_crc(crc, p, (uint64_t)n);
    return (uint32_t)zlib_crc(crc, p, (unsigned int)n);
}

static inline void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static int cmp_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Bodies at least this big are CRC'd once and the record CRC combined; smaller ones are
 * CRC'd again within their record (cheaper than the combine's shift of a new length). */
#define COMBINE_MIN 4096

/* The record bytes of frame_run that are not the body, gathered between two referenced
 * bodies: a bytearray grown in place, handed to ``parts`` whole. */
typedef struct {
    PyObject *buf;   /* bytearray, or NULL */
    Py_ssize_t used;
} Glue;

static unsigned char *glue_take(Glue *g, Py_ssize_t n)
{
    if (g->buf == NULL) {
        g->buf = PyByteArray_FromStringAndSize(NULL, n < 4096 ? 4096 : n);
        if (g->buf == NULL)
            return NULL;
    } else if (g->used + n > PyByteArray_GET_SIZE(g->buf)) {
        Py_ssize_t want = 2 * PyByteArray_GET_SIZE(g->buf);
        if (want < g->used + n)
            want = g->used + n;
        if (PyByteArray_Resize(g->buf, want) < 0)
            return NULL;
    }
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(g->buf) + g->used;
    g->used += n;
    return p;
}

static int glue_flush(Glue *g, PyObject *parts)
{
    if (g->buf == NULL)
        return 0;
    PyObject *b = g->buf;
    g->buf = NULL;
    int rc = PyByteArray_Resize(b, g->used);
    g->used = 0;
    if (rc == 0)
        rc = PyList_Append(parts, b);
    Py_DECREF(b);
    return rc;
}

static int append_int(PyObject *list, int64_t v)
{
    return append_new(list, PyLong_FromLongLong(v));
}

/* frame_run(bodies, i, qids, tails, tail, topic_field, uk_field, first_counter, key_crc0,
 *           const48, pos, room_end, nxt, cqb, tags, offs, physs, hashes, parts, refer_from)
 *           -> (i, pos, total)
 *
 * Records for bodies i, i+1, ... of ``bodies`` (a list or tuple of bytes-like objects; body k
 * goes to queue qids[k]), placed from commit-log offset ``pos``, as the loops of
 * store.log.framing frame them (format.py's layout):
 *
 *     header (88 bytes: TOTALSIZE, MAGIC_V1, BODYCRC, QUEUEID, FLAG 0, QUEUEOFFSET nxt[qid],
 *     PHYSICALOFFSET, then const48: SYSFLAG .. PREPARED TX OFFSET, then BODYLENGTH), body,
 *     topic_field (its length byte and the topic), PROPLENGTH, uk_field ("UNIQ_KEY" 0x01 and
 *     the unique key's head), the key's counter (first_counter + k mod 2^16) as 4 upper-case
 *     hex digits, the tail (tails[k], or ``tail`` when tails is None: 0x02 and the rest of the
 *     properties), then the record CRC property.
 *
 * Per record: the 20-byte consume-queue entry (pos, total, tags) appended to the bytearray
 * cqb[qid], nxt[qid] moved on, the queue offset, pos and the unique key's index hash
 * (crc32(hex4, key_crc0) & 0x7FFFFFFF) appended to offs, physs and hashes. The bytes go to
 * ``parts`` (a list of buffers written in order): bodies of at least ``refer_from`` bytes as
 * the objects themselves, everything else copied into bytearrays between them. Every queue
 * of qids must have its nxt and cqb set. Stops before a record that does not fit below
 * ``room_end`` (the caller rolls the segment and calls again) and returns its index, the
 * position and its size; (len(bodies), pos, 0) when all are framed. */
static PyObject *frame_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 20) {
        PyErr_SetString(PyExc_TypeError, "frame_run takes 20 arguments");
        return NULL;
    }
    PyObject *qids = args[2], *tails = args[3], *tail_obj = args[4], *topic_obj = args[5], *uk_obj = args[6];
    PyObject *c48 = args[9], *nxt = args[12], *cqb = args[13];
    PyObject *offs = args[15], *physs = args[16], *hashes = args[17], *parts = args[18];
    if (!PyList_Check(qids) || !PyList_Check(nxt) || !PyList_Check(cqb) || !PyList_Check(offs)
        || !PyList_Check(physs) || !PyList_Check(hashes) || !PyList_Check(parts)
        || (tails != Py_None && !PyList_Check(tails))) {
        PyErr_SetString(PyExc_TypeError, "frame_run: qids, tails, nxt, cqb and the results must be lists");
        return NULL;
    }
    if (!PyBytes_Check(tail_obj) || !PyBytes_Check(topic_obj) || !PyBytes_Check(uk_obj) || !PyBytes_Check(c48)
        || PyBytes_GET_SIZE(c48) != 48) {
        PyErr_SetString(PyExc_TypeError, "frame_run: tail, topic_field, uk_field and const48 (48) must be bytes");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    long long first_counter = PyLong_AsLongLong(args[7]);
    unsigned long long key_crc0 = PyLong_AsUnsignedLongLong(args[8]);
    int64_t pos = PyLong_AsLongLong(args[10]);
    int64_t room_end = PyLong_AsLongLong(args[11]);
    int64_t tags = PyLong_AsLongLong(args[14]);
    int64_t refer_from = PyLong_AsLongLong(args[19]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "frame_run: bodies must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (PyList_GET_SIZE(qids) != n || (tails != Py_None && PyList_GET_SIZE(tails) != n) || i < 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "frame_run: one queue id (and tail) per body");
        return NULL;
    }
    const unsigned char *topic_field = (const unsigned char *)PyBytes_AS_STRING(topic_obj);
    Py_ssize_t tf_len = PyBytes_GET_SIZE(topic_obj);
    const unsigned char *uk_field = (const unsigned char *)PyBytes_AS_STRING(uk_obj);
    Py_ssize_t uk_len = PyBytes_GET_SIZE(uk_obj);
    const unsigned char *const48 = (const unsigned char *)PyBytes_AS_STRING(c48);
    static const char HEX[] = "0123456789ABCDEF";
    Glue glue = {NULL, 0};
    int64_t need = 0;   /* the size of the record that did not fit */
    for (; i < n; i++) {
        PyObject *tail_i = tails == Py_None ? tail_obj : PyList_GET_ITEM(tails, i);
        if (!PyBytes_Check(tail_i)) {
            PyErr_SetString(PyExc_TypeError, "frame_run: tails must be bytes");
            goto error;
        }
        Py_ssize_t tl = PyBytes_GET_SIZE(tail_i);
        int64_t props_len = (int64_t)uk_len + 4 + tl + CRC_PROPERTY_SIZE;
        long qid = PyLong_AsLong(PyList_GET_ITEM(qids, i));
        if (qid == -1 && PyErr_Occurred())
            goto error;
        if (props_len > 0xFFFF || qid < 0 || qid >= PyList_GET_SIZE(nxt)) {
            PyErr_SetString(PyExc_ValueError, "frame_run: properties too long, or a queue id out of range");
            goto error;
        }
        PyObject *cq = PyList_GET_ITEM(cqb, qid);
        if (!PyByteArray_Check(cq)) {
            PyErr_SetString(PyExc_TypeError, "frame_run: cqb[qid] must be a bytearray for every queue of qids");
            goto error;
        }
        long long qoff = PyLong_AsLongLong(PyList_GET_ITEM(nxt, qid));
        if (qoff == -1 && PyErr_Occurred())
            goto error;
        Py_buffer body;
        if (PyObject_GetBuffer(items[i], &body, PyBUF_SIMPLE) < 0)
            goto error;
        int64_t blen = (int64_t)body.len;
        int64_t total = HEADER_SIZE + blen + tf_len + 2 + props_len;
        if (total > INT32_MAX) {
            PyBuffer_Release(&body);
            PyErr_SetString(PyExc_ValueError, "frame_run: record too large");
            goto error;
        }
        if (pos + total > room_end) {
            PyBuffer_Release(&body);
            need = total;
            break;
        }
        const unsigned char *b = (const unsigned char *)body.buf;
        uint32_t bcrc = crc32_more(0, b, blen);
        int refer = blen >= refer_from;
        /* the header, the body when copied, and the rest of the record */
        Py_ssize_t rest = tf_len + 2 + uk_len + 4 + tl + CRC_PROPERTY_SIZE;
        unsigned char *h = glue_take(&glue, HEADER_SIZE + (refer ? 0 : blen) + (refer ? 0 : rest));
        if (h == NULL) {
            PyBuffer_Release(&body);
            goto error;
        }
        put_be32(h, (uint32_t)total);
        put_be32(h + 4, MAGIC_V1);
        put_be32(h + 8, bcrc & 0x7FFFFFFFu);
        put_be32(h + 12, (uint32_t)qid);
        put_be32(h + 16, 0);
        put_be64(h + 20, (uint64_t)qoff);
        put_be64(h + 28, (uint64_t)pos);
        memcpy(h + 36, const48, 48);
        put_be32(h + 84, (uint32_t)blen);
        uint32_t rcrc;
        if (blen >= COMBINE_MIN)
            rcrc = multmodp(shift_op(blen), crc32_more(0, h, HEADER_SIZE)) ^ bcrc;
        else
            rcrc = crc32_more(crc32_more(0, h, HEADER_SIZE), b, blen);
        unsigned char *a;
        if (refer) {
            /* (h may move when the glue grows: not used past here) */
            if (glue_flush(&glue, parts) < 0 || PyList_Append(parts, items[i]) < 0) {
                PyBuffer_Release(&body);
                goto error;
            }
            a = glue_take(&glue, rest);
            if (a == NULL) {
                PyBuffer_Release(&body);
                goto error;
            }
        } else {
            memcpy(h + HEADER_SIZE, b, (size_t)blen);
            a = h + HEADER_SIZE + blen;
        }
        PyBuffer_Release(&body);
        unsigned char *r = a;
        memcpy(r, topic_field, (size_t)tf_len);
        r += tf_len;
        *r++ = (unsigned char)(props_len >> 8);
        *r++ = (unsigned char)props_len;
        memcpy(r, uk_field, (size_t)uk_len);
        r += uk_len;
        unsigned counter = (unsigned)((first_counter + i) & 0xFFFF);
        unsigned char *h4 = r;
        for (int k = 3; k >= 0; k--, counter >>= 4)
            h4[k] = (unsigned char)HEX[counter & 15];
        r += 4;
        memcpy(r, PyBytes_AS_STRING(tail_i), (size_t)tl);
        r += tl;
        uint32_t c = crc32_more(rcrc, a, r - a) & 0x7FFFFFFFu;
        memcpy(r, CRC_HEAD, sizeof CRC_HEAD);
        for (int k = 0; k < 10; k++, c /= 10)
            r[9 + k] = (unsigned char)('0' + c % 10);
        r[19] = 0x02;
        /* the queue entry, the columns */
        Py_ssize_t cl = PyByteArray_GET_SIZE(cq);
        if (PyByteArray_Resize(cq, cl + 20) < 0)
            goto error;
        unsigned char *e = (unsigned char *)PyByteArray_AS_STRING(cq) + cl;
        put_be64(e, (uint64_t)pos);
        put_be32(e + 8, (uint32_t)total);
        put_be64(e + 12, (uint64_t)tags);
        PyObject *next = PyLong_FromLongLong(qoff + 1);
        if (next == NULL || PyList_SetItem(nxt, qid, next) < 0)
            goto error;
        if (append_int(offs, qoff) < 0 || append_int(physs, pos) < 0
            || append_int(hashes, (int64_t)(crc32_more((uint32_t)key_crc0, h4, 4) & 0x7FFFFFFFu)) < 0)
            goto error;
        pos += total;
    }
    if (glue_flush(&glue, parts) < 0)
        goto error;
    Py_DECREF(seq);
    return Py_BuildValue("(nLL)", i, (long long)pos, (long long)need);
error:
    Py_XDECREF(glue.buf);
    Py_DECREF(seq);
    return NULL;
}

/* index_add(table, slots, hashes, physs, tdiff, count, gap) -> (entries, runs) or None
 *
 * The loop of store.log.index.KeyIndex._add_to over a current copy of an index file's slot
 * table, which is its definition (tests/log/test_index_native.py compares the two). ``table``
 * is a bytearray holding the slot table at the file's positions (slot s at 40 + 4 s,
 * big-endian int32); ``hashes`` and ``physs`` are lists of equal length (key hashes
 * 0..2^31-1, commit-log offsets); the batch's entries are numbered from ``count`` on.
 * Entry k (20 bytes: keyHash int32, phyOffset int64, timeDiff int32 ``tdiff``, prevIndex
 * int32) gets as prevIndex its slot's value at that point, the slot then k + count; the
 * slots are updated in ``table``. ``runs`` lists the (start, stop) byte ranges of ``table``
 * that hold the slots changed, ascending, two slots at most ``gap`` bytes apart in one range:
 * what to write back. None (``table`` untouched) when a slot the batch uses holds a value
 * outside 1..count-1 other than 0 (left by a killed writer: the caller follows its chain). */
static PyObject *index_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "index_add(table, slots, hashes, physs, tdiff, count, gap)");
        return NULL;
    }
    PyObject *table = args[0], *hashes = args[2], *physs = args[3];
    if (!PyByteArray_Check(table) || !PyList_Check(hashes) || !PyList_Check(physs)
        || PyList_GET_SIZE(hashes) != PyList_GET_SIZE(physs)) {
        PyErr_SetString(PyExc_TypeError, "index_add: a bytearray and two lists of equal length");
        return NULL;
    }
    long long slots = PyLong_AsLongLong(args[1]);
    long long tdiff = slots == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[4]);
    long long count = tdiff == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[5]);
    long long gap = count == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[6]);
    if (gap == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t k = PyList_GET_SIZE(hashes);
    if (slots <= 0 || 40 + 4 * slots > PyByteArray_GET_SIZE(table) || count < 0 || count + k > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "index_add: slots, table or count out of range");
        return NULL;
    }
    unsigned char *t = (unsigned char *)PyByteArray_AS_STRING(table);
    /* per entry: its slot's position, hash and offset */
    int64_t *pos = PyMem_Malloc((size_t)(k > 0 ? k : 1) * 3 * sizeof(int64_t));
    PyObject *entries = PyBytes_FromStringAndSize(NULL, 20 * k);
    if (pos == NULL || entries == NULL) {
        PyMem_Free(pos);
        Py_XDECREF(entries);
        return PyErr_NoMemory();
    }
    int64_t *hs = pos + k, *ps = pos + 2 * k;
    /* every argument and slot checked before any slot is changed */
    for (Py_ssize_t i = 0; i < k; i++) {
        long long h = PyLong_AsLongLong(PyList_GET_ITEM(hashes, i));
        long long phys = h == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(PyList_GET_ITEM(physs, i));
        if (phys == -1 && PyErr_Occurred())
            goto error;
        if (h < 0 || h > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "index_add: a key hash out of range");
            goto error;
        }
        hs[i] = h;
        ps[i] = phys;
        pos[i] = 40 + 4 * (h % slots);
        int32_t v = be32(t + pos[i]);
        if (v < 0 || v >= count) {
            PyMem_Free(pos);
            Py_DECREF(entries);
            Py_RETURN_NONE;
        }
    }
    unsigned char *e = (unsigned char *)PyBytes_AS_STRING(entries);
    for (Py_ssize_t i = 0; i < k; i++, e += 20) {
        put_be32(e, (uint32_t)hs[i]);
        put_be64(e + 4, (uint64_t)ps[i]);
        put_be32(e + 12, (uint32_t)tdiff);
        memcpy(e + 16, t + pos[i], 4);
        put_be32(t + pos[i], (uint32_t)(count + i));
    }
    /* the ranges to write back */
    qsort(pos, (size_t)k, sizeof(int64_t), cmp_int64);
    PyObject *runs = PyList_New(0);
    if (runs == NULL)
        goto error;
    Py_ssize_t i = 0;
    while (i < k) {
        int64_t start = pos[i], last = pos[i];
        for (i++; i < k && pos[i] - last <= gap; i++)
            last = pos[i];
        if (append_new(runs, Py_BuildValue("(LL)", (long long)start, (long long)last + 4)) < 0) {
            Py_DECREF(runs);
            goto error;
        }
    }
    PyMem_Free(pos);
    return Py_BuildValue("(NN)", entries, runs);
error:
    PyMem_Free(pos);
    Py_DECREF(entries);
    return NULL;
}

/* unique_keys(head, first, n) -> list of str: head + the 4 upper-case hex digits of
 * (first + k) mod 2^16 for k in 0..n-1, a batch's unique keys as store.log.results._keys
 * makes them (its definition; head is ASCII, as every key's head is). */
static PyObject *unique_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "unique_keys(head: str, first, n)");
        return NULL;
    }
    Py_ssize_t hl;
    const char *head = PyUnicode_AsUTF8AndSize(args[0], &hl);
    if (head == NULL)
        return NULL;
    long long first = PyLong_AsLongLong(args[1]);
    Py_ssize_t n = first == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[2]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0 || !PyUnicode_IS_ASCII(args[0])) {
        PyErr_SetString(PyExc_ValueError, "unique_keys: an ASCII head and n >= 0");
        return NULL;
    }
    static const char HEX[] = "0123456789ABCDEF";
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *s = PyUnicode_New(hl + 4, 127);
        if (s == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        char *d = (char *)PyUnicode_DATA(s);
        memcpy(d, head, (size_t)hl);
        unsigned c = (unsigned)((first + k) & 0xFFFF);
        for (int j = 3; j >= 0; j--, c >>= 4)
            d[hl + j] = HEX[c & 15];
        PyList_SET_ITEM(out, k, s);
    }
    return out;
}

/* cut_entries(raw, lo, limit, max_bytes, ordered) -> (entries, end, taken): the loop of
 * store.log.consumequeue.cut_entries, which is its definition (tests/log/test_nativecheck.py
 * and the fuzz test compare the two). raw holds whole 20-byte consume-queue entries (phys int64,
 * size int32, tags int64, big-endian; a trailing partial entry is ignored). The entries are
 * taken as (phys, size, tags) tuples up to, not including, the first that is invalid (phys < 0,
 * size <= 0), ends past limit, or, when ordered, begins before the previous one ends (the first
 * before lo); and up to, including, the one that brings the sizes taken to max_bytes. end is
 * where the last entry taken ends (lo when none), taken the sum of their sizes. The integers
 * must fit in 64 bits (else OverflowError); no sum here can overflow. */
static PyObject *cut_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "cut_entries(raw, lo, limit, max_bytes, ordered)");
        return NULL;
    }
    long long lo = PyLong_AsLongLong(args[1]);
    long long limit = lo == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[2]);
    long long max_bytes = limit == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[3]);
    if (max_bytes == -1 && PyErr_Occurred())
        return NULL;
    int ordered = PyObject_IsTrue(args[4]);
    if (ordered < 0)
        return NULL;
    Py_buffer raw;
    if (PyObject_GetBuffer(args[0], &raw, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)raw.buf;
    Py_ssize_t n = raw.len / 20;
    long long end = lo;
    uint64_t taken = 0;   /* < max_bytes (< 2^63) before each entry, plus a size (< 2^31): fits */
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *e = p + i * 20;
        int64_t phys = be64(e);
        int32_t size = be32(e + 8);
        /* phys + size > limit, without the sum: phys >= 0 here, so limit - phys cannot overflow */
        if (phys < 0 || size <= 0 || (ordered && phys < end) || phys > limit || size > limit - phys)
            break;
        PyObject *t = PyTuple_New(3);
        if (t == NULL) {
            Py_DECREF(out);
            PyBuffer_Release(&raw);
            return NULL;
        }
        PyObject *a = PyLong_FromLongLong(phys), *b = PyLong_FromLong(size), *c = PyLong_FromLongLong(be64(e + 12));
        PyTuple_SET_ITEM(t, 0, a);
        PyTuple_SET_ITEM(t, 1, b);
        PyTuple_SET_ITEM(t, 2, c);
        if (a == NULL || b == NULL || c == NULL || append_new(out, t) < 0) {
            if (a == NULL || b == NULL || c == NULL)
                Py_DECREF(t);
            Py_DECREF(out);
            PyBuffer_Release(&raw);
            return NULL;
        }
        end = phys + size;
        taken += (uint64_t)size;
        if (max_bytes <= 0 || taken >= (uint64_t)max_bytes)
            break;
    }
    PyBuffer_Release(&raw);
    return Py_BuildValue("(NLK)", out, end, (unsigned long long)taken);
}

/* crc32(data) -> int: the CRC this module checks records with (tests compare it with zlib's) */
static PyObject *crc32(PyObject *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c = crc32_of((const unsigned char *)b.buf, (int64_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

/* ISA-L's CRC from the isal module the store loads anyway (unless MQCTL_PURE_ZLIB asks for
 * zlib's, as store.log.record does), else zlib's from the system library. */
static int find_crc(void)
{
    const char *pure = getenv("MQCTL_PURE_ZLIB");
    if (pure == NULL || pure[0] == '\0' || strcmp(pure, "0") == 0) {
        PyObject *mod = PyImport_ImportModule("isal.isal_zlib");
        if (mod == NULL) {
            PyErr_Clear();
        } else {
            PyObject *file = PyObject_GetAttrString(mod, "__file__");
            const char *path = file != NULL ? PyUnicode_AsUTF8(file) : NULL;
            if (path != NULL) {
                void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
                if (h != NULL)
                    isal_crc = (isal_crc_t)dlsym(h, "crc32_gzip_refl");
            }
            PyErr_Clear();
            Py_XDECREF(file);
            Py_DECREF(mod);
        }
    }
    if (isal_crc == NULL) {
        void *h = dlopen("libz.so.1", RTLD_NOW);
        if (h != NULL)
            zlib_crc = (zlib_crc_t)dlsym(h, "crc32");
    }
    if (isal_crc == NULL && zlib_crc == NULL) {
        PyErr_SetString(PyExc_ImportError, "nativecheck: no CRC-32 found (isal or libz)");
        return -1;
    }
    return 0;
}

/* links_size(fd) -> (st_nlink, st_size) of fstat(fd), and stat_stamp(path) -> (st_ino,
 * st_mtime_ns, st_size) of stat(path), None when it does not exist: what a writer checks of
 * the files it keeps open (still linked? how long?) and of a topic's config (changed?) before
 * every batch, without making an os.stat_result (its 19 fields, three of them nanosecond
 * ints, cost ~1.5 us of a ~2 us os.fstat on a loaded machine; a single send made five).
 * store/log/filestat.py holds their definitions in Python. */
static PyObject *links_size(PyObject *self, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "file descriptor out of range");
        return NULL;
    }
    int fd = (int)v;
    struct stat st;
    int r, err = 0;
    Py_BEGIN_ALLOW_THREADS
    do    /* (retried as os.fstat is, PEP 475: a FUSE file system may be interrupted) */
        r = fstat(fd, &st);
    while (r != 0 && errno == EINTR);
    if (r != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    if (r != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("(KL)", (unsigned long long)st.st_nlink, (long long)st.st_size);
}

static PyObject *stat_stamp(PyObject *self, PyObject *arg)
{
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    struct stat st;
    int r, err = 0;
    Py_BEGIN_ALLOW_THREADS
    do
        r = stat(PyBytes_AS_STRING(path), &st);
    while (r != 0 && errno == EINTR);
    if (r != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (r != 0) {
        if (err == ENOENT)
            Py_RETURN_NONE;
        errno = err;
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
    }
#ifdef __APPLE__
    long long mtime_ns = (long long)st.st_mtimespec.tv_sec * 1000000000LL + (long long)st.st_mtimespec.tv_nsec;
#else
    long long mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + (long long)st.st_mtim.tv_nsec;
#endif
    return Py_BuildValue("(KLL)", (unsigned long long)st.st_ino, mtime_ns, (long long)st.st_size);
}

/* untimed_stat(fd or path) -> (st_nlink, st_size, st_ino) by statx(STATX_NLINK | STATX_SIZE |
 * STATX_INO): no timestamp asked for. On Linux >= 6.13 (multigrain timestamps) a look that
 * asks for ctime or mtime (fstat, stat) makes the file's next write take a fine-grained
 * timestamp and dirty its inode, so the fdatasync after an overwrite waits for a journal
 * commit as an append's does (3 voluntary context switches a sync send instead of 2,
 * measured). Every look at a file a sync writer overwrites, the writer's and its readers',
 * goes through this (store/log/filestat.py, which holds its definition in Python). An int is
 * a descriptor, else a path; OSError as os.fstat / os.stat raise it. Without statx: fstat/stat. */
static PyObject *untimed_stat(PyObject *self, PyObject *arg)
{
    int fd = -1;
    PyObject *path = NULL;
    if (PyLong_Check(arg)) {
        long v = PyLong_AsLong(arg);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < INT_MIN || v > INT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "file descriptor out of range");
            return NULL;
        }
        fd = (int)v;
    } else if (!PyUnicode_FSConverter(arg, &path)) {
        return NULL;
    }
    unsigned long long links = 0, ino = 0;
    long long size = 0;
    int r, err = 0;
    Py_BEGIN_ALLOW_THREADS
#ifdef STATX_NLINK
    struct statx stx;
    do    /* (retried as os.fstat is, PEP 475) */
        r = path == NULL ? statx(fd, "", AT_EMPTY_PATH, STATX_NLINK | STATX_SIZE | STATX_INO, &stx)
                         : statx(AT_FDCWD, PyBytes_AS_STRING(path), 0, STATX_NLINK | STATX_SIZE | STATX_INO, &stx);
    while (r != 0 && errno == EINTR);
    if (r == 0) {
        links = stx.stx_nlink;
        size = (long long)stx.stx_size;
        ino = stx.stx_ino;
    }
#else
    struct stat st;
    do
        r = path == NULL ? fstat(fd, &st) : stat(PyBytes_AS_STRING(path), &st);
    while (r != 0 && errno == EINTR);
    if (r == 0) {
        links = st.st_nlink;
        size = (long long)st.st_size;
        ino = st.st_ino;
    }
#endif
    if (r != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    if (r != 0) {
        errno = err;
        PyObject *res = path == NULL ? PyErr_SetFromErrno(PyExc_OSError)
                                     : PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
        Py_XDECREF(path);
        return res;
    }
    Py_XDECREF(path);
    return Py_BuildValue("(KLK)", links, size, ino);
}

/* keep_big_buffers() -> bool: glibc's allocator told to serve buffers up to 32 MiB from the heap
 * and to keep up to 64 MiB of it free (store/buffers.py says why); False where there is no
 * glibc. Here, not through ctypes: loading ctypes costs a big send or consume ~1-2 ms. */
static PyObject *keep_big_buffers(PyObject *self, PyObject *unused)
{
#ifdef __GLIBC__
    int ok = mallopt(M_MMAP_THRESHOLD, 32 << 20);
    ok = mallopt(M_TRIM_THRESHOLD, 64 << 20) && ok;
    return PyBool_FromLong(ok);
#else
    Py_RETURN_FALSE;
#endif
}

/* The calls of store/inotify.py: inotify_open() -> fd (non-blocking, close-on-exec; OSError
 * where there is none), inotify_add(fd, path, mask) -> watch descriptor or -1,
 * inotify_rm(fd, wd), fs_type(path) -> statfs's f_type or -1. Here, not through ctypes:
 * loading ctypes cost a consumer's first turn 3-5 ms (9 under a profiler), before its first
 * message. */
static PyObject *inotify_open(PyObject *self, PyObject *unused)
{
#ifdef __linux__
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(fd);
#else
    errno = ENOSYS;
    return PyErr_SetFromErrno(PyExc_OSError);
#endif
}

/* A path argument as a C string: bytes without a NUL (ValueError otherwise, as os's calls). */
static const char *path_arg(PyObject *path)
{
    if (!PyBytes_Check(path)) {
        PyErr_SetString(PyExc_TypeError, "path must be bytes");
        return NULL;
    }
    const char *s = PyBytes_AS_STRING(path);
    if ((Py_ssize_t)strlen(s) != PyBytes_GET_SIZE(path)) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        return NULL;
    }
    return s;
}

static PyObject *inotify_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "inotify_add takes 3 arguments");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    unsigned long mask = PyLong_AsUnsignedLong(args[2]);
    const char *path = path_arg(args[1]);
    if (path == NULL || PyErr_Occurred())
        return NULL;
#ifdef __linux__
    return PyLong_FromLong(inotify_add_watch(fd, path, (uint32_t)mask));
#else
    return PyLong_FromLong(-1);
#endif
}

static PyObject *inotify_rm(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "inotify_rm takes 2 arguments");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    int wd = (int)PyLong_AsLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
#ifdef __linux__
    inotify_rm_watch(fd, wd);
#endif
    Py_RETURN_NONE;
}

static PyObject *fs_type(PyObject *self, PyObject *arg)
{
    const char *path = path_arg(arg);
    if (path == NULL)
        return NULL;
#ifdef __linux__
    struct statfs st;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = statfs(path, &st);
    Py_END_ALLOW_THREADS
    if (r == 0)
        return PyLong_FromLongLong((long long)((unsigned long)st.f_type & 0xFFFFFFFFul));
#endif
    return PyLong_FromLong(-1);
}

static PyMethodDef methods[] = {
    {"check_run", (PyCFunction)(void (*)(void))check_run, METH_FASTCALL,
     "The common case of store.log.columns.check_run (see the module's source)."},
    {"cut_entries", (PyCFunction)(void (*)(void))cut_entries, METH_FASTCALL,
     "The loop of store.log.consumequeue.cut_entries (see the module's source)."},
    {"frame_run", (PyCFunction)(void (*)(void))frame_run, METH_FASTCALL,
     "The record loop of store.log.framing (see the module's source)."},
    {"index_add", (PyCFunction)(void (*)(void))index_add, METH_FASTCALL,
     "The loop of store.log.index.KeyIndex._add_to (see the module's source)."},
    {"unique_keys", (PyCFunction)(void (*)(void))unique_keys, METH_FASTCALL,
     "A batch's unique keys, as store.log.results._keys makes them (see the module's source)."},
    {"crc32", crc32, METH_O, "The CRC-32 records are checked with."},
    {"links_size", links_size, METH_O, "(st_nlink, st_size) of os.fstat(fd) (store.log.filestat)."},
    {"stat_stamp", stat_stamp, METH_O,
     "(st_ino, st_mtime_ns, st_size) of os.stat(path), None when missing (store.log.filestat)."},
    {"untimed_stat", untimed_stat, METH_O,
     "(st_nlink, st_size, st_ino) of a descriptor or path by statx, no timestamps asked (store.log.filestat)."},
    {"keep_big_buffers", keep_big_buffers, METH_NOARGS,
     "glibc's mallopt: big buffers from the heap, kept (store/buffers.py)."},
    {"inotify_open", inotify_open, METH_NOARGS, "inotify_init1(IN_NONBLOCK | IN_CLOEXEC) (store/inotify.py)."},
    {"inotify_add", (PyCFunction)(void (*)(void))inotify_add, METH_FASTCALL,
     "inotify_add_watch(fd, path, mask): the watch descriptor or -1 (store/inotify.py)."},
    {"inotify_rm", (PyCFunction)(void (*)(void))inotify_rm, METH_FASTCALL, "inotify_rm_watch(fd, wd) (store/inotify.py)."},
    {"fs_type", fs_type, METH_O, "statfs(path).f_type, or -1 (store/inotify.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "nativecheck", "The check loop of a bulk read, in C.", -1, methods,
};

/* What columns.py and consumequeue.py expect of this module; a build of an older source has
 * another (or none), and the store then reads with the Python loops. Raise it with any change
 * of a function's arguments or results, or a new function that its callers do not look up
 * with getattr (filestat.py's and buffers.py's do, and fall back to Python). */
#define INTERFACE 3

PyMODINIT_FUNC PyInit_nativecheck(void)
{
    if (find_crc() < 0)
        return NULL;
    init_x2n();
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0)
        page_size = (int)ps;
    static int at_fork;
    if (!at_fork && pthread_atfork(NULL, NULL, guard_after_fork) == 0)
        at_fork = 1;
    if (!at_fork)
        bus_left = 1;   /* (no mapping where a fork could leave a batch counted) */
    const char *t = getenv("MQCTL_TEST_TRUNCATE_AFTER_MAP");
    if (t != NULL && t[0] != '\0')
        truncate_after_map = strdup(t);
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "INTERFACE", INTERFACE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
