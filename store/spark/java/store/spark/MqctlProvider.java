package store.spark;

import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("mqctl")} on the JVM: batch and streaming reads here ({@link MqctlScan},
 * {@link MqctlStream}); writes and reads this reader cannot serve (a user schema asking for a
 * cast, {@code shape=kafka}, {@code reader=python}) are handed to the Python source,
 * registered as {@code mqctl_python} by {@code register(spark)}.
 */
public final class MqctlProvider implements TableProvider, DataSourceRegister {
  static final String PYTHON_SOURCE = "mqctl_python";
  static final StructType SCHEMA = StructType.fromDDL(
      "topic STRING, queueId INT, queueOffset BIGINT, msgId STRING, keys ARRAY<STRING>, "
      + "tags STRING, properties MAP<STRING,STRING>, body BINARY, bornTimestamp TIMESTAMP, "
      + "storeTimestamp TIMESTAMP");

  /** {@code shape=kafka} (store.spark.kafka): Kafka's columns, read by the Python source. */
  static final StructType KAFKA_SCHEMA = StructType.fromDDL(
      "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
      + "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>");

  static boolean kafka(Map<String, String> options) {
    return "kafka".equalsIgnoreCase(new CaseInsensitiveStringMap(options).getOrDefault("shape", "").trim());
  }

  @Override
  public String shortName() {
    return "mqctl";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    // What the Python source's schema() refuses when a read is loaded: an unknown option, a
    // missing store (so that a stream fails here, not in the background).
    if (!"python".equalsIgnoreCase(options.getOrDefault("reader", ""))) {
      Planner.plan(options, Planner.request().put("check", true));
    }
    return kafka(options) ? KAFKA_SCHEMA : SCHEMA;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    String reader = new CaseInsensitiveStringMap(properties).getOrDefault("reader", "jvm");
    if ("python".equalsIgnoreCase(reader) || kafka(properties) || !servable(schema)) {
      return python(schema, partitioning, properties);
    }
    return new MqctlTable(schema, partitioning, properties);
  }

  static Table python(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    PythonDataSourceV2 source = new PythonDataSourceV2();
    source.setShortName(PYTHON_SOURCE);
    return source.getTable(schema, partitioning, properties);
  }

  /** Every column one of ours, with its own type (a body may also be read as a string). */
  static boolean servable(StructType schema) {
    for (StructField f : schema.fields()) {
      if (!java.util.Arrays.asList(SCHEMA.fieldNames()).contains(f.name())) return false;
      DataType native_ = SCHEMA.apply(f.name()).dataType();
      boolean bodyAsText = f.name().equals("body") && f.dataType().equals(DataTypes.StringType);
      if (!f.dataType().equals(native_) && !bodyAsText) return false;
    }
    return true;
  }

  /** Reads on the JVM; writes through the Python source's own table. */
  static final class MqctlTable implements SupportsRead, SupportsWrite {
    private final StructType schema;
    private final Transform[] partitioning;
    private final Map<String, String> properties;
    private Table python;

    MqctlTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
      this.schema = schema;
      this.partitioning = partitioning;
      this.properties = properties;
    }

    private Table python() {
      if (python == null) python = MqctlProvider.python(schema, partitioning, properties);
      return python;
    }

    @Override
    public String name() {
      return "mqctl";
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      Set<TableCapability> caps = new HashSet<>();
      caps.add(TableCapability.BATCH_READ);
      caps.add(TableCapability.MICRO_BATCH_READ);
      caps.add(TableCapability.BATCH_WRITE);
      caps.add(TableCapability.STREAMING_WRITE);
      caps.add(TableCapability.TRUNCATE);
      caps.add(TableCapability.OVERWRITE_BY_FILTER);
      caps.add(TableCapability.OVERWRITE_DYNAMIC);
      return caps;
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new MqctlScan(schema, options);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return ((SupportsWrite) python()).newWriteBuilder(info);
    }
  }
}
