package store.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * Partitions that cut the commit log instead of the queues, for reads that open records.
 * A topic's queues take turns in the log, so a task that reads one queue strides over the
 * whole log touching a record in every few (each a cache and TLB miss); a task that reads
 * every planned queue's records in one part of the log walks that part forwards. So the
 * ranges of a read (as many as it has) become as many parts of the log between the first and
 * the last record they hold, and each partition reads, of every range, the messages whose
 * records lie in its part ({@link SliceReader} merges them in log order). Each message still
 * belongs to exactly one partition: the cuts are queue offsets found by binary search on the
 * consume queue (its commit-log offsets grow with the queue offset).
 */
final class LogOrder {
  private static final int CQ_ENTRY = 20;
  // The cuts cost (ranges - 1) binary searches per range, on the driver: beyond this many
  // ranges a read keeps its partition per range (and has parallelism enough from them).
  private static final int MAX_CUT = 32;

  /** Slices of several queues read together, in commit-log order. */
  record LogSlice(QueueSlice[] parts) implements InputPartition {}

  private LogOrder() {}

  /** {@code slices} cut by the log (unchanged when there is nothing to gain, or a consume
   *  queue cannot be read now: the read then reports what is wrong). */
  static InputPartition[] cut(InputPartition[] slices, int cqEntries) {
    if (slices.length < 2 || slices.length > MAX_CUT) return slices;
    QueueSlice[] qs = new QueueSlice[slices.length];
    long lo = Long.MAX_VALUE;
    long hi = Long.MIN_VALUE;
    try {
      for (int i = 0; i < slices.length; i++) {
        if (!(slices[i] instanceof QueueSlice q) || q.host() != null) return slices;
        qs[i] = q;
        if (q.start() >= q.end()) continue;
        lo = Math.min(lo, phys(q, q.start(), cqEntries));
        hi = Math.max(hi, phys(q, q.end() - 1, cqEntries) + 1);
      }
      if (lo >= hi) return slices;
      int n = slices.length;
      long[][] bounds = new long[qs.length][n + 1];
      for (int i = 0; i < qs.length; i++) {
        bounds[i][0] = qs[i].start();
        bounds[i][n] = qs[i].end();
        for (int k = 1; k < n; k++) {
          long at = lo + (long) ((double) (hi - lo) * k / n);
          bounds[i][k] = Math.max(bounds[i][k - 1], first(qs[i], at, cqEntries));
        }
      }
      List<InputPartition> out = new ArrayList<>();
      for (int k = 0; k < n; k++) {
        List<QueueSlice> parts = new ArrayList<>();
        for (int i = 0; i < qs.length; i++) {
          QueueSlice q = qs[i];
          if (bounds[i][k] < bounds[i][k + 1]) {
            parts.add(new QueueSlice(q.topic(), q.queueId(), bounds[i][k], bounds[i][k + 1], q.queueDir(),
                q.tags(), null));
          }
        }
        if (!parts.isEmpty()) out.add(new LogSlice(parts.toArray(new QueueSlice[0])));
      }
      return out.toArray(new InputPartition[0]);
    } catch (IOException | RuntimeException e) {
      return slices;
    }
  }

  /** The first queue offset of {@code q} whose record starts at or after {@code at}. */
  private static long first(QueueSlice q, long at, int cqEntries) throws IOException {
    long a = q.start();
    long b = q.end();
    while (a < b) {
      long m = (a + b) >>> 1;
      if (phys(q, m, cqEntries) < at) a = m + 1;
      else b = m;
    }
    return a;
  }

  /** The commit-log offset in the consume-queue entry of queue offset {@code offset}. */
  private static long phys(QueueSlice q, long offset, int cqEntries) throws IOException {
    long segBytes = (long) cqEntries * CQ_ENTRY;
    long byteOff = offset * CQ_ENTRY;
    long base = byteOff - byteOff % segBytes;
    try (FileChannel ch = FileChannel.open(Paths.get(q.queueDir(), SliceReader.segmentName(base)),
        StandardOpenOption.READ)) {
      ByteBuffer b = ByteBuffer.allocate(8);
      while (b.hasRemaining()) {
        if (ch.read(b, byteOff - base + b.position()) <= 0) throw new IOException("short consume queue");
      }
      return b.getLong(0);
    }
  }
}
