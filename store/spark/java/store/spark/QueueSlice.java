package store.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Messages {@code [start, end)} of one queue: one partition, preferring {@code host} unless null. */
record QueueSlice(String topic, int queueId, long start, long end, String queueDir, String[] tags,
    String host) implements InputPartition {
  @Override
  public String[] preferredLocations() {
    return host == null ? new String[0] : new String[] {host};
  }
}
