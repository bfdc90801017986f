package store.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One store per host (the {@code stores} option, {@code HOST:DIR,...}): each store is one
 * partition preferring its host, and is planned there, when its task starts, by the planner
 * of that host's executor (the driver cannot open another host's disk). Then its queues are
 * read together, in commit-log order, by one {@link SliceReader}. A task that Spark runs on
 * another host fails (and is retried elsewhere, up to {@code spark.task.maxFailures}).
 */
final class StoreReader implements PartitionReader<ColumnarBatch> {

  /** A store on {@code host}'s own disk at {@code dir}; {@code prefer}: name the host to Spark. */
  record StoreSlice(String host, String dir, boolean prefer) implements InputPartition {
    @Override
    public String[] preferredLocations() {
      return prefer ? new String[] {host} : new String[0];
    }
  }

  /** The stores the option lists (parsed by the planner: one definition of the option). In
   *  local mode, where every store is on the one host, they name no host: a local master
   *  offers its cores again only when a task ends, so a task waiting for a host it has not
   *  would never start. */
  static InputPartition[] slices(CaseInsensitiveStringMap options) {
    JsonNode answer = Planner.plan(options, Planner.request().put("stores", true));
    boolean prefer = !SparkSession.active().sparkContext().isLocal();
    InputPartition[] out = new InputPartition[answer.get("stores").size()];
    for (int i = 0; i < out.length; i++) {
      JsonNode s = answer.get("stores").get(i);
      out[i] = new StoreSlice(s.get(0).asText(), s.get(1).asText(), prefer);
    }
    return out;
  }

  static final class Factory implements PartitionReaderFactory, Serializable {
    final StructType schema;
    final HashMap<String, String> options = new HashMap<>();
    final String pushed;          // the planner request of the predicates pushed down
    final String[] tags;
    final String python;
    final String pythonPath;

    Factory(StructType schema, CaseInsensitiveStringMap options, ObjectNode pushed, String[] tags) {
      this.schema = schema;
      options.forEach((k, v) -> {
        if (!k.equalsIgnoreCase("stores")) this.options.put(k, v);
      });
      this.pushed = pushed.toString();
      this.tags = tags;
      String[] interpreter = Planner.interpreter();   // the driver's: mqctl is where it is there
      this.python = interpreter[0];
      this.pythonPath = interpreter[1];
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition p) {
      throw new UnsupportedOperationException("the mqctl reader returns column batches");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition p) {
      return new StoreReader(this, (StoreSlice) p);
    }

    @Override
    public boolean supportColumnarReads(InputPartition p) {
      return true;
    }
  }

  private final Factory f;
  private final StoreSlice store;
  private SliceReader queues;

  StoreReader(Factory f, StoreSlice store) {
    this.f = f;
    this.store = store;
  }

  @Override
  public boolean next() throws IOException {
    if (queues == null) {
      // Spark takes a preferred host as a hint only (spark.locality.wait): off it, DIR may
      // still be a store (the same path on every host), another one, read in this one's place.
      if (!ThisHost.is(store.host())) {
        throw new StoreError("OperationError", "the store " + store.host() + ":" + store.dir()
            + " was read on " + ThisHost.name() + ": a task of one store per host must run on"
            + " its host (raise spark.locality.wait, or put the store on shared storage and"
            + " use store=)");
      }
      Map<String, String> opts = new HashMap<>(f.options);
      opts.put("store", store.dir());
      JsonNode plan = Planner.plan(opts, Planner.parse(f.pushed), f.python, f.pythonPath);
      InputPartition[] slices = MqctlScan.slices(plan, f.tags);
      if (slices.length == 0) return false;
      QueueSlice[] all = new QueueSlice[slices.length];
      for (int i = 0; i < all.length; i++) all[i] = (QueueSlice) slices[i];
      queues = new SliceReader(new SliceReader.Factory(f.schema, plan), all);
    }
    return queues.next();
  }

  @Override
  public ColumnarBatch get() {
    return queues.get();
  }

  @Override
  public void close() throws IOException {
    if (queues != null) queues.close();
  }
}
