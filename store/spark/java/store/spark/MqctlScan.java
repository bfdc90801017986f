package store.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A batch read's plan: the columns it needs (pruning), the predicates it serves itself
 * (topic and queue id sets, the tag set through the consume queue's tags code, the store time
 * as an offset range), and one partition per queue range that {@code store.spark.plan} gives.
 * A stream is a {@link MqctlStream} with the same predicates.
 */
final class MqctlScan implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters,
    Scan, Batch {
  private StructType schema;
  private final CaseInsensitiveStringMap options;
  private final List<Filter> pushed = new ArrayList<>();
  private Set<String> topics;
  private Set<Integer> queueIds;
  private Set<String> tags;
  private Long fromMs;
  private Long untilMs;
  private JsonNode plan;

  MqctlScan(StructType schema, CaseInsensitiveStringMap options) {
    this.schema = schema;
    this.options = options;
  }

  @Override
  public void pruneColumns(StructType required) {
    schema = required;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    List<Filter> rest = new ArrayList<>();
    for (Filter f : filters) {
      if (push(f)) pushed.add(f);
      else rest.add(f);
    }
    return rest.toArray(new Filter[0]);
  }

  private boolean push(Filter f) {
    if (f instanceof EqualTo e) return pushValues(e.attribute(), new Object[] {e.value()}, e.value(), 0);
    if (f instanceof In in) return pushValues(in.attribute(), in.values(), null, 0);
    if (f instanceof GreaterThanOrEqual g) return pushValues(g.attribute(), null, g.value(), 1);
    if (f instanceof GreaterThan g) return pushValues(g.attribute(), null, g.value(), 2);
    if (f instanceof LessThan l) return pushValues(l.attribute(), null, l.value(), 3);
    if (f instanceof LessThanOrEqual l) return pushValues(l.attribute(), null, l.value(), 4);
    return false;
  }

  /** {@code op}: 0 equal or in, 1 >=, 2 >, 3 <, 4 <= (the last four for the store time). */
  private boolean pushValues(String column, Object[] values, Object bound, int op) {
    switch (column) {
      case "topic", "tags" -> {
        if (values == null) return false;
        Set<String> set = new LinkedHashSet<>();
        for (Object v : values) if (v instanceof String s) set.add(s);
        if (column.equals("topic")) topics = intersect(topics, set);
        else tags = intersect(tags, set);
        return true;
      }
      case "queueId" -> {
        if (values == null) return false;
        Set<Integer> set = new LinkedHashSet<>();
        for (Object v : values) if (v instanceof Integer i) set.add(i);
        queueIds = intersect(queueIds, set);
        return true;
      }
      case "storeTimestamp" -> {
        Long us = micros(bound);
        if (us == null) return false;
        // the store keeps milliseconds: t_ms * 1000 against a bound in microseconds
        long floor = Math.floorDiv(us, 1000L);
        long ceil = -Math.floorDiv(-us, 1000L);
        if (op == 0 || op == 1) fromMs = max(fromMs, ceil);
        if (op == 2) fromMs = max(fromMs, floor + 1);
        if (op == 0 || op == 4) untilMs = min(untilMs, floor + 1);
        if (op == 3) untilMs = min(untilMs, ceil);
        return true;
      }
      default -> {
        return false;
      }
    }
  }

  private static Long micros(Object v) {
    if (v instanceof Timestamp t) v = t.toInstant();
    if (v instanceof Instant i) return i.getEpochSecond() * 1_000_000L + i.getNano() / 1000;
    return null;
  }

  private static Long max(Long a, long b) {
    return a == null ? b : Math.max(a, b);
  }

  private static Long min(Long a, long b) {
    return a == null ? b : Math.min(a, b);
  }

  private static <T> Set<T> intersect(Set<T> have, Set<T> more) {
    if (have == null) return more;
    have.retainAll(more);
    return have;
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed.toArray(new Filter[0]);
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "mqctl" + Arrays.toString(schema.fieldNames()) + (pushed.isEmpty() ? "" : " pushed " + pushed);
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new MqctlStream(schema, options, pushedRequest(), tags == null ? null : tags.toArray(new String[0]));
  }

  /** The predicates pushed down, as a planner request. */
  private ObjectNode pushedRequest() {
    ObjectNode request = Planner.request();
    if (topics != null) {
      ArrayNode a = request.putArray("topics");
      topics.forEach(a::add);
    }
    if (queueIds != null) {
      ArrayNode a = request.putArray("queueIds");
      queueIds.forEach(a::add);
    }
    if (fromMs != null) request.put("fromMs", fromMs);
    if (untilMs != null) request.put("untilMs", untilMs);
    return request;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    if (options.containsKey("stores")) return StoreReader.slices(options);
    plan = Planner.plan(options, pushedRequest());
    InputPartition[] slices = slices(plan, tags == null ? null : tags.toArray(new String[0]));
    boolean tagged = slices.length > 0 && ((QueueSlice) slices[0]).tags() != null;
    return SliceReader.opensRecords(schema, tagged) ? LogOrder.cut(slices, plan.get("cqEntries").asInt()) : slices;
  }

  /** One partition per range of a plan. A store given by {@code store} is on storage every
   *  host sees: its partitions prefer no host (preferring the driver's would queue them there). */
  static InputPartition[] slices(JsonNode plan, String[] pushedTags) {
    String[] tagSet = tagSet(pushedTags, plan.get("tags"));
    String host = null;
    List<InputPartition> out = new ArrayList<>();
    for (JsonNode r : plan.get("ranges")) {
      out.add(new QueueSlice(r.get(0).asText(), r.get(1).asInt(), r.get(2).asLong(), r.get(3).asLong(),
          r.get(4).asText(), tagSet, host));
    }
    return out.toArray(new InputPartition[0]);
  }

  /** The tags a row must have: the option's, the pushed predicate's, or both's common ones. */
  private static String[] tagSet(String[] pushedTags, JsonNode option) {
    Set<String> set = pushedTags == null ? null : new LinkedHashSet<>(Arrays.asList(pushedTags));
    if (option != null && !option.isNull()) {
      Set<String> opt = new LinkedHashSet<>();
      option.forEach(t -> opt.add(t.asText()));
      set = intersect(set, opt);
    }
    return set == null ? null : set.toArray(new String[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    if (options.containsKey("stores")) {
      return new StoreReader.Factory(schema, options, pushedRequest(), tags == null ? null : tags.toArray(new String[0]));
    }
    if (plan == null) planInputPartitions();
    return new SliceReader.Factory(schema, plan);
  }
}
