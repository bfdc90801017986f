package store.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A streaming read on the JVM. Its offsets, read limit and micro-batch ranges come from
 * {@code store.spark.plan} (which computes them with {@code store/spark/streamplan.py}, as the
 * Python reader does), in the same JSON text: a checkpoint written by either reader resumes
 * with the other. Each micro-batch is read by {@link SliceReader}, one partition per queue range.
 */
final class MqctlStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private final StructType schema;
  private final CaseInsensitiveStringMap options;
  private final ObjectNode pushed;
  private final String[] pushedTags;
  private final Long maxRows;
  private String target;   // an availableNow trigger's last offset
  private JsonNode plan;

  MqctlStream(StructType schema, CaseInsensitiveStringMap options, ObjectNode pushed, String[] pushedTags) {
    this.schema = schema;
    this.options = options;
    this.pushed = pushed;
    this.pushedTags = pushedTags;
    JsonNode opened = ask(Planner.request().put("stream", "open"));
    this.maxRows = opened.get("maxRows").isNull() ? null : opened.get("maxRows").asLong();
  }

  private JsonNode ask(ObjectNode request) {
    return Planner.plan(options, request);
  }

  private Offset offset(String what) {
    return new JsonOffset(ask(Planner.request().put("stream", what)).get("offset").asText());
  }

  @Override
  public Offset initialOffset() {
    return offset("initial");
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new JsonOffset(json);
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is called instead");
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return maxRows == null ? ReadLimit.allAvailable() : ReadLimit.maxRows(maxRows);
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    ObjectNode request = Planner.request().put("stream", "next").put("start", start.json());
    if (target != null) request.put("target", target);
    if (limit instanceof ReadMaxRows m) request.put("maxRows", m.maxRows());
    return new JsonOffset(ask(request).get("offset").asText());
  }

  @Override
  public Offset reportLatestOffset() {
    return offset("latest");
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    target = offset("latest").json();
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    plan = ask(pushed.deepCopy().put("stream", "partitions").put("start", start.json()).put("end", end.json()));
    return MqctlScan.slices(plan, pushedTags);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    if (plan == null) planInputPartitions(new JsonOffset("{}"), new JsonOffset("{}"));
    return new SliceReader.Factory(schema, plan);
  }

  @Override
  public void commit(Offset end) {
    // nothing: the checkpoint's offsets are the stream's position
  }

  @Override
  public void stop() {
    // nothing held: the planner process serves the whole JVM
  }

  /** An offset as the JSON text Spark keeps in the checkpoint (and compares). */
  static final class JsonOffset extends Offset {
    private final String json;

    JsonOffset(String json) {
      this.json = json;
    }

    @Override
    public String json() {
      return json;
    }
  }
}
