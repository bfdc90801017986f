package store.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import java.util.zip.CRC32;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads {@link QueueSlice}s as column batches: one, or several read together in commit-log
 * order (a {@link LogOrder.LogSlice}: the records of the queues it holds lie among each other
 * in the log, and walking them in log order reads the log forwards instead of striding over
 * it once per queue: 5 M x 100 B bodies, 1.0 to 0.55 s on one core). The byte layouts are those of
 * {@code store/log/format.py}: 20-byte consume-queue entries (commit-log offset long, size
 * int, tags code long) and commit-log records (header fields at the offsets named below,
 * then body, topic, properties ending with the {@code __CRC32#} property).
 *
 * <p>Records are opened only when a column needs them or a tag must be confirmed (a matching
 * code is checked against the record's tag, as codes collide; an entry whose code is not a
 * wanted tag's has its record's TAGS read in place, unchecked, as the code is derived data and a
 * damaged one must hide nothing: {@link #mayBeTagged}). Every record opened is checked as {@code store/log/columns.py}
 * checks it, in the same order and with the same words: one that fails ends the read with
 * the message the Python reader gives, unless it was opened only because its own TAGS, read
 * unchecked, named a wanted tag against its entry's code: a damaged record is then passed
 * over on the code's word, as {@code store/log/reads.py}'s pull does (its tags cannot be
 * trusted, and a byte of them damaged must not fail a read of other tags).
 */
final class SliceReader implements PartitionReader<ColumnarBatch> {
  private static final int BATCH = 4096;
  static final int CQ_ENTRY = 20;
  private static final int WARM = 256;   // records warmed at a time (see warm): a few hundred KiB
  // record header (format.py): TOTALSIZE 0, MAGICCODE 4, QUEUEID 12, QUEUEOFFSET 20,
  // PHYSICALOFFSET 28, BORNTIMESTAMP 40, STORETIMESTAMP 56, BODYLENGTH 84
  private static final byte[] TAGS = bytes("TAGS");
  private static final byte[] KEYS = bytes("KEYS");
  private static final byte[] UNIQ = bytes("UNIQ_KEY");
  private static final Set<String> RECORD_COLUMNS = Set.of(
      "msgId", "keys", "tags", "properties", "body", "bornTimestamp", "storeTimestamp");

  /** What every slice of a read shares; from the plan (format constants included). */
  static final class Factory implements PartitionReaderFactory, Serializable {
    final StructType schema;
    final String store;
    final String commitlogDir;
    final long segmentSize;
    final int cqEntries;
    final String offsetIdPrefix;
    final String[] reserved;
    final int magic;
    final int headerSize;
    final int crcSize;
    final byte[] crcHead;
    final boolean failOnDataLoss;

    Factory(StructType schema, JsonNode plan) {
      this.schema = schema;
      this.store = plan.get("store").asText();
      this.commitlogDir = plan.get("commitlogDir").asText();
      this.segmentSize = plan.get("segmentSize").asLong();
      this.cqEntries = plan.get("cqEntries").asInt();
      this.offsetIdPrefix = plan.get("offsetIdPrefix").asText();
      JsonNode fmt = plan.get("format");
      this.reserved = new String[fmt.get("reserved").size()];
      for (int i = 0; i < reserved.length; i++) reserved[i] = fmt.get("reserved").get(i).asText();
      this.magic = (int) fmt.get("magicV1").asLong();
      this.headerSize = fmt.get("headerSize").asInt();
      this.crcSize = fmt.get("crcPropertySize").asInt();
      this.crcHead = fmt.get("crcPropertyHead").asText().getBytes(StandardCharsets.ISO_8859_1);
      this.failOnDataLoss = plan.get("failOnDataLoss").asBoolean(true);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition p) {
      throw new UnsupportedOperationException("the mqctl reader returns column batches");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition p) {
      return new SliceReader(this, p instanceof LogOrder.LogSlice l ? l.parts() : new QueueSlice[] {(QueueSlice) p});
    }

    @Override
    public boolean supportColumnarReads(InputPartition p) {
      return true;
    }
  }

  private final Factory f;
  private final QueueCursor[] cursors;
  private QueueSlice s;              // the slice of the entry being read
  private byte[] topicField;         // its topic field
  private final long[] tagCodes;
  private final Set<String> tags;
  private final Set<String> reserved;
  private final boolean needRecord;
  private final boolean needProps;   // a column (or the tag check) needs TAGS, KEYS or UNIQ_KEY
  private final WritableColumnVector[] vectors;
  private final ColumnarBatch batch;
  private final int cTopic, cQueue, cOffset, cMsgId, cKeys, cTags, cProps, cBody, cBorn, cStored;
  private final Map<Long, MappedByteBuffer> segments = new HashMap<>();
  private long lastBase = -1;          // the segment of the last record: no map lookup per record
  private MappedByteBuffer last;
  private final CRC32 crc = new CRC32();
  private byte[] rec = new byte[4096];
  private ByteBuffer recView = ByteBuffer.wrap(rec);
  private int keyCount;
  private int propCount;
  private int warmed;

  SliceReader(Factory f, QueueSlice[] slices) {
    this.f = f;
    String[] wanted = slices[0].tags();   // one read's slices want the same tags
    this.tags = wanted == null ? null : new HashSet<>(Arrays.asList(wanted));
    this.tagCodes = wanted == null ? null : Arrays.stream(wanted).mapToLong(t -> (long) t.hashCode()).toArray();
    this.cursors = new QueueCursor[slices.length];
    for (int i = 0; i < slices.length; i++) cursors[i] = new QueueCursor(f, slices[i], BATCH);
    use(cursors[0]);
    this.reserved = new HashSet<>(Arrays.asList(f.reserved));
    String[] names = f.schema.fieldNames();
    this.needRecord = opensRecords(f.schema, tags != null);
    java.util.List<String> named = Arrays.asList(names);
    this.needProps = tags != null || named.contains("msgId") || named.contains("tags") || named.contains("keys");
    this.vectors = OnHeapColumnVector.allocateColumns(BATCH, f.schema);
    this.batch = new ColumnarBatch(vectors);
    java.util.List<String> list = Arrays.asList(names);
    cTopic = list.indexOf("topic");
    cQueue = list.indexOf("queueId");
    cOffset = list.indexOf("queueOffset");
    cMsgId = list.indexOf("msgId");
    cKeys = list.indexOf("keys");
    cTags = list.indexOf("tags");
    cProps = list.indexOf("properties");
    cBody = list.indexOf("body");
    cBorn = list.indexOf("bornTimestamp");
    cStored = list.indexOf("storeTimestamp");
  }

  /** Whether a read of these columns opens records (or only reads consume queues). */
  static boolean opensRecords(StructType schema, boolean tagged) {
    boolean need = tagged;
    for (String n : schema.fieldNames()) need |= RECORD_COLUMNS.contains(n);
    return need;
  }

  private void use(QueueCursor c) {
    s = c.s;
    topicField = c.topicField;
  }

  @Override
  public boolean next() throws IOException {
    for (WritableColumnVector v : vectors) v.reset();
    keyCount = 0;
    propCount = 0;
    int rows = 0;
    if (cursors.length == 1) {        // one queue: its entries in turn, warmed ahead
      QueueCursor c = cursors[0];
      while (rows < BATCH && c.phys() != Long.MAX_VALUE) {
        if (needRecord && c.at >= c.warmTo) {
          c.warmTo = Math.min(c.got, c.at + WARM);
          warm(c, c.at, c.warmTo);
        }
        if (take(c, rows)) rows++;
      }
    } else {                          // several: the entry first in the log next
      while (rows < BATCH) {
        QueueCursor first = null;
        long least = Long.MAX_VALUE;
        for (QueueCursor c : cursors) {
          long p = c.phys();
          if (p < least) {
            least = p;
            first = c;
          }
        }
        if (first == null) break;
        if (take(first, rows)) rows++;
      }
    }
    batch.setNumRows(rows);
    return rows > 0;
  }

  /** The cursor's next entry into row {@code row}; false when it gives no row (another tag,
   *  removed by retention, a tag code collision). */
  private boolean take(QueueCursor c, int row) throws IOException {
    use(c);
    int i = c.at++;
    long qoff = c.next + i;
    ByteBuffer entries = c.entries;
    long phys = entries.getLong(i * CQ_ENTRY);
    int size = entries.getInt(i * CQ_ENTRY + 8);
    long code = entries.getLong(i * CQ_ENTRY + 12);
    if (phys < 0 || size <= 0) {
      throw damaged(qoff, "consume-queue entry " + qoff + " is invalid (offset " + phys + ", size "
          + size + "): no record to deliver");
    }
    boolean byCode = tagCodes == null || QueueCursor.wanted(tagCodes, code);
    if (!byCode && !mayBeTagged(phys, size)) return false;
    if (needRecord) {
      return load(qoff, phys, size, byCode) && fill(row, qoff, phys, size);
    }
    queueColumns(row, qoff);
    return true;
  }

  /**
   * Reads one byte of every cache line of the batch's records before any is checked. A
   * queue's records are spread over the log among other queues' ones, so each record is a
   * cache miss; taken one record at a time (copy, CRC, columns) the misses wait for each other,
   * while these independent loads overlap: the batch's bytes are then in the cache when the
   * records are opened (5 M x 100 B bodies: 1.0 to 0.6 CPU-s for the reader). Entries that
   * are invalid or outside a mapped segment are left for {@link #next} to report.
   */
  private void warm(QueueCursor c, int from, int to) throws IOException {
    int acc = 0;
    ByteBuffer entries = c.entries;
    for (int i = from; i < to; i++) {
      long phys = entries.getLong(i * CQ_ENTRY);
      int size = entries.getInt(i * CQ_ENTRY + 8);
      if (phys < 0 || size <= 0 || (tagCodes != null && !QueueCursor.wanted(tagCodes, entries.getLong(i * CQ_ENTRY + 12)))) continue;
      long base = phys - phys % f.segmentSize;
      MappedByteBuffer seg = segment(base, phys - base + size);
      int pos = (int) (phys - base);
      if (seg == null || pos + size > seg.capacity()) return;
      for (int k = pos; k < pos + size; k += 64) acc += seg.get(k);
      acc += seg.get(pos + size - 1);
    }
    warmed += acc;   // kept, so that the compiler cannot drop the loads
  }

  /**
   * Whether the record at {@code phys} may carry a wanted tag, for an entry whose tag code is
   * another's: the code is derived data, and one flipped bit in it must not hide a record (the
   * Python reader and the consumer do the same). Its TAGS is read in place through its
   * lengths, unchecked; a record that names a wanted tag is then opened and checked as any.
   */
  private boolean mayBeTagged(long phys, int size) throws IOException {
    long base = phys - phys % f.segmentSize;
    MappedByteBuffer seg = segment(base, phys - base + size);
    int pos = (int) (phys - base);
    if (seg == null || size < f.headerSize + 3 || pos + size > seg.capacity()) return false;
    int blen = seg.getInt(pos + f.headerSize - 4);
    long t = (long) pos + f.headerSize + blen;
    if (blen < 0 || t >= pos + size) return false;
    int a = (int) t + 1 + (seg.get((int) t) & 0xFF) + 2;
    int end = pos + size;
    while (a < end) {   // name 0x01 value 0x02 pieces, as fill() reads them
      int e = a;
      while (e < end && seg.get(e) != 2) e++;
      int sep = a;
      while (sep < e && seg.get(sep) != 1) sep++;
      if (sep - a == TAGS.length && sep + 1 < e) {
        boolean named = true;
        for (int k = 0; k < TAGS.length && named; k++) named = seg.get(a + k) == TAGS[k];
        if (named) {
          byte[] v = new byte[e - sep - 1];
          seg.get(sep + 1, v, 0, v.length);
          return tags.contains(new String(v, StandardCharsets.UTF_8));
        }
      }
      a = e + 1;
    }
    return false;
  }

  /**
   * The record into {@code rec}, checked; false for one retention removed since the plan, and
   * for a damaged one not {@code byCode} (its entry's code is another tag's: opened only on its
   * own unchecked TAGS' word, see {@link SliceReader}), which is passed over.
   */
  private boolean load(long qoff, long phys, int size, boolean byCode) throws IOException {
    long base = phys - phys % f.segmentSize;
    MappedByteBuffer seg = segment(base, phys - base + size);
    if (seg == null) {
      if (phys < firstSegment(Paths.get(f.commitlogDir))) {
        QueueCursor.lost(f, s, qoff, qoff + 1);
        return false;
      }
      return failOrPass(qoff, phys, "the commit-log segment is missing", byCode);
    }
    int pos = (int) (phys - base);
    if (pos + size > seg.capacity()) {
      return failOrPass(qoff, phys, "record of " + size + " bytes runs past the end", byCode);
    }
    if (rec.length < size) {
      rec = new byte[Math.max(size, rec.length * 2)];
      recView = ByteBuffer.wrap(rec);
    }
    seg.get(pos, rec, 0, size);
    if (size < f.headerSize + 3 + f.crcSize) {
      return failOrPass(qoff, phys, "impossible record size " + size, byCode);
    }
    String why = check(qoff, phys, size);
    return why == null || failOrPass(qoff, phys, why, byCode);
  }

  /** A damaged record: the read fails when its entry's code is a wanted tag's (or there is
   *  no tag filter); else false, the record passed over. */
  private boolean failOrPass(long qoff, long phys, String why, boolean byCode) {
    if (byCode) throw damaged(qoff, "commit-log offset " + phys + ": " + why);
    return false;
  }

  /** columns.py's checks and its words for what failed (its _why order); null: the record is sound. */
  private String check(long qoff, long phys, int size) {
    ByteBuffer b = recView;
    int blen = b.getInt(84);
    boolean entryOk = b.getInt(0) == size && b.getInt(4) == f.magic && b.getLong(28) == phys;
    if (!entryOk) return "record does not match its consume-queue entry";
    if (!crcOk(size)) return "record CRC mismatch";
    int t = f.headerSize + blen;
    int p = t + topicField.length + 2;
    if (b.getLong(20) != qoff || b.getInt(12) != s.queueId() || blen < 0 || p > size
        || !Arrays.equals(rec, t, t + topicField.length, topicField, 0, topicField.length)) {
      return "record does not match its consume-queue entry";
    }
    int plen = ((rec[p - 2] & 0xFF) << 8) | (rec[p - 1] & 0xFF);
    if (p + plen != size) return "field lengths do not add up to TOTALSIZE";
    return null;
  }

  /** The {@code __CRC32#} property: the CRC of every byte before it, ten digits least significant first. */
  private boolean crcOk(int size) {
    int at = size - f.crcSize;
    crc.reset();
    crc.update(rec, 0, at);
    if (!Arrays.equals(rec, at, at + f.crcHead.length, f.crcHead, 0, f.crcHead.length)) return false;
    // the digits read back into a number (multiplications: ten divisions cost more than the CRC)
    long v = 0;
    for (int i = at + f.crcHead.length + 9; i >= at + f.crcHead.length; i--) {
      int d = rec[i] - '0';
      if (d < 0 || d > 9) return false;
      v = v * 10 + d;
    }
    return v == (crc.getValue() & 0x7FFFFFFFL) && rec[size - 1] == 2;
  }

  private void queueColumns(int row, long qoff) {
    if (cTopic >= 0) vectors[cTopic].putByteArray(row, topicField, 1, topicField.length - 1);
    if (cQueue >= 0) vectors[cQueue].putInt(row, s.queueId());
    if (cOffset >= 0) vectors[cOffset].putLong(row, qoff);
  }

  /** One row from the record in {@code rec}; false when its tag is not wanted (a code collision). */
  private boolean fill(int row, long qoff, long phys, int size) {
    ByteBuffer b = recView;
    int blen = b.getInt(84);
    int p = f.headerSize + blen + topicField.length + 2;
    int propsEnd = size - f.crcSize;
    // properties: name 0x01 value 0x02 pieces; the last of a name counts (as a dict)
    int tagA = -1, tagB = -1, keyA = -1, keyB = -1, uniqA = -1, uniqB = -1;
    int a = needProps ? p : propsEnd;   // the scan costs more than the rest of a body-only row
    while (a < propsEnd) {
      int e = a;
      while (e < propsEnd && rec[e] != 2) e++;
      int sep = a;
      while (sep < e && rec[sep] != 1) sep++;
      if (sep > a && sep + 1 < e) {
        if (is(a, sep, TAGS)) { tagA = sep + 1; tagB = e; }
        else if (is(a, sep, KEYS)) { keyA = sep + 1; keyB = e; }
        else if (is(a, sep, UNIQ)) { uniqA = sep + 1; uniqB = e; }
      }
      a = e + 1;
    }
    if (tags != null && (tagA < 0 || !tags.contains(new String(rec, tagA, tagB - tagA, StandardCharsets.UTF_8)))) {
      return false;
    }
    queueColumns(row, qoff);
    if (cMsgId >= 0) {
      if (uniqA >= 0) vectors[cMsgId].putByteArray(row, rec, uniqA, uniqB - uniqA);
      else vectors[cMsgId].putByteArray(row, bytes(f.offsetIdPrefix + String.format("%016X", phys)));
    }
    if (cTags >= 0) {
      if (tagA >= 0) vectors[cTags].putByteArray(row, rec, tagA, tagB - tagA);
      else vectors[cTags].putNull(row);
    }
    if (cKeys >= 0) keys(row, keyA, keyB);
    if (cProps >= 0) properties(row, p, propsEnd);
    if (cBody >= 0) vectors[cBody].putByteArray(row, rec, f.headerSize, blen);
    if (cBorn >= 0) vectors[cBorn].putLong(row, b.getLong(40) * 1000L);
    if (cStored >= 0) vectors[cStored].putLong(row, b.getLong(56) * 1000L);
    return true;
  }

  private boolean is(int a, int b, byte[] name) {
    return b - a == name.length && Arrays.equals(rec, a, b, name, 0, name.length);
  }

  /** KEYS split on spaces, empty keys dropped. */
  private void keys(int row, int a, int b) {
    WritableColumnVector out = vectors[cKeys];
    WritableColumnVector child = out.arrayData();
    int first = keyCount;
    int i = a;
    while (a >= 0 && i < b) {
      int j = i;
      while (j < b && rec[j] != ' ') j++;
      if (j > i) {
        child.reserve(keyCount + 1);
        child.putByteArray(keyCount++, rec, i, j - i);
      }
      i = j + 1;
    }
    out.putArray(row, first, keyCount - first);
  }

  /** The properties that are not the store's own. */
  private void properties(int row, int p, int propsEnd) {
    WritableColumnVector out = vectors[cProps];
    WritableColumnVector names = (WritableColumnVector) out.getChild(0);
    WritableColumnVector values = (WritableColumnVector) out.getChild(1);
    int first = propCount;
    int a = p;
    while (a < propsEnd) {
      int e = a;
      while (e < propsEnd && rec[e] != 2) e++;
      int sep = a;
      while (sep < e && rec[sep] != 1) sep++;
      if (sep > a && sep + 1 < e && !reserved.contains(new String(rec, a, sep - a, StandardCharsets.UTF_8))) {
        names.reserve(propCount + 1);
        values.reserve(propCount + 1);
        names.putByteArray(propCount, rec, a, sep - a);
        values.putByteArray(propCount++, rec, sep + 1, e - sep - 1);
      }
      a = e + 1;
    }
    out.putArray(row, first, propCount - first);
  }

  private StoreError damaged(long qoff, String why) {
    return new StoreError("DataError", "damaged message " + s.topic() + "/" + s.queueId() + "@" + qoff
        + " in store " + f.store + ": " + why + " (run: mqctl store check)");
  }

  /** Segment {@code base} mapped to at least {@code need} bytes (a growing file is mapped again). */
  private MappedByteBuffer segment(long base, long need) throws IOException {
    if (base == lastBase && last.capacity() >= need) return last;
    MappedByteBuffer m = segments.get(base);
    if (m != null && m.capacity() >= need) {
      lastBase = base;
      last = m;
      return m;
    }
    try (FileChannel ch = FileChannel.open(Paths.get(f.commitlogDir, segmentName(base)), StandardOpenOption.READ)) {
      m = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
    } catch (NoSuchFileException e) {
      return null;
    }
    segments.put(base, m);
    lastBase = base;
    last = m;
    return m;
  }

  /** A segment file's name: its base offset in 20 digits (format.py's segment_name). */
  static String segmentName(long base) {
    return String.format("%020d", base);
  }

  static long firstSegment(Path dir) throws IOException {
    try (Stream<Path> files = Files.list(dir)) {
      return files.map(x -> x.getFileName().toString()).filter(n -> n.matches("\\d{20}"))
          .mapToLong(Long::parseLong).min().orElse(Long.MAX_VALUE);
    } catch (NoSuchFileException e) {
      return Long.MAX_VALUE;
    }
  }

  static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() throws IOException {
    for (QueueCursor c : cursors) c.close();
    batch.close();
    segments.clear();
  }
}
