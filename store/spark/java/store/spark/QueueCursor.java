package store.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

/**
 * Where a {@link SliceReader} is in one {@link QueueSlice}: its consume-queue entries
 * (20 bytes: commit-log offset long, size int, tags code long), read a batch at a time.
 */
final class QueueCursor {
  private static final int CQ_ENTRY = SliceReader.CQ_ENTRY;

  final QueueSlice s;
  final byte[] topicField;         // the record's topic field: length byte, then the name
  final ByteBuffer entries;
  private final SliceReader.Factory f;
  private final int batch;
  private FileChannel cq;
  private long cqBase = -1;
  long next;                       // the queue offset of entries[0]
  long end;
  int got;                         // entries read into the buffer
  int at;                          // the entry to take next
  int warmTo;                      // entries before it are warmed (see SliceReader.warm)

  QueueCursor(SliceReader.Factory f, QueueSlice s, int batch) {
    this.f = f;
    this.s = s;
    this.batch = batch;
    this.entries = ByteBuffer.allocate(batch * CQ_ENTRY);
    this.next = s.start();
    this.end = s.end();
    byte[] tb = SliceReader.bytes(s.topic());
    this.topicField = new byte[tb.length + 1];
    topicField[0] = (byte) tb.length;
    System.arraycopy(tb, 0, topicField, 1, tb.length);
  }

  /** The commit-log offset of the entry to take next; MAX_VALUE when the slice is done.
   *  Every entry is taken, whatever its tags code: the code is derived data, and the reader
   *  looks at the record of one that is not a wanted tag's (SliceReader.mayBeTagged). */
  long phys() throws IOException {
    if (at == got) {
      next += got;
      at = 0;
      warmTo = 0;
      got = next < end ? readEntries() : 0;
      if (got == 0) end = next;   // the queue is shorter than planned (a topic deleted meanwhile)
      if (got == 0) return Long.MAX_VALUE;
    }
    return entries.getLong(at * CQ_ENTRY);
  }

  static boolean wanted(long[] tagCodes, long code) {
    for (long c : tagCodes) if (c == code) return true;
    return false;
  }

  /** Up to a batch of entries from {@code next}, within one segment; 0 at the queue's end. */
  private int readEntries() throws IOException {
    long byteOff = next * CQ_ENTRY;
    long segBytes = (long) f.cqEntries * CQ_ENTRY;
    long base = byteOff - byteOff % segBytes;
    if (base != cqBase) {
      close();
      cqBase = base;
      Path path = Paths.get(s.queueDir(), SliceReader.segmentName(base));
      try {
        cq = FileChannel.open(path, StandardOpenOption.READ);
      } catch (NoSuchFileException e) {
        long first = SliceReader.firstSegment(Paths.get(s.queueDir()));
        if (first > base) {   // removed by retention since the plan: start at what is left
          lost(f, s, next, first / CQ_ENTRY);
          next = Math.min(end, first / CQ_ENTRY);
          cqBase = -1;
          return next < end ? readEntries() : 0;
        }
        return 0;
      }
    }
    int want = (int) Math.min(Math.min(batch, end - next), (base + segBytes - byteOff) / CQ_ENTRY);
    entries.clear().limit(want * CQ_ENTRY);
    long pos = byteOff - base;
    while (entries.hasRemaining()) {
      int n = cq.read(entries, pos + entries.position());
      if (n <= 0) break;
    }
    return entries.position() / CQ_ENTRY;
  }

  /** Messages {@code [from, to)} of {@code s} removed by retention before this read reached
   *  them: the read fails unless {@code failOnDataLoss} is false (then a warning), as
   *  {@code options.data_lost}. */
  static void lost(SliceReader.Factory f, QueueSlice s, long from, long to) {
    String what = "messages " + s.topic() + "/" + s.queueId() + "@" + from + "-" + (to - 1)
        + " were removed by retention before this read reached them";
    if (f.failOnDataLoss) {
      throw new StoreError("DataError", what + " (give failOnDataLoss=false to skip what is gone)");
    }
    System.err.println("mqctl: warning: " + what + ": skipped (failOnDataLoss=false)");
  }

  void close() throws IOException {
    if (cq != null) cq.close();
    cq = null;
  }
}
