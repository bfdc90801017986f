package store.spark;

/**
 * An error of the store, named as Python names it ({@code store.errors.DataError: ...}) in its
 * message itself, as Spark shows a stream's failure by its cause's message: the CLI and
 * {@code store.spark.errors} map that name to the store's error, and a data engineer reads
 * the message first. No stack trace is kept: it would only say where in this reader the
 * message was made.
 */
public final class StoreError extends RuntimeException {
  public StoreError(String kind, String message) {
    super("store.errors." + kind + ": " + message, null, false, false);
  }

  @Override
  public String toString() {
    return getMessage();
  }
}
