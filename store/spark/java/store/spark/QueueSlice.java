package store.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Messages {@code [start, end)} of one queue: one partition, preferring the store's host. */
record QueueSlice(String topic, int queueId, long start, long end, String queueDir, String[] tags,
    String host) implements InputPartition {
  @Override
  public String[] preferredLocations() {
    return new String[] {host};
  }
}
