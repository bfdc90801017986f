package store.spark;

/**
 * An error of the store, named as Python names it ({@code store.errors.DataError: ...}): the
 * CLI maps that name to its exit code, and a data engineer reads the message first. No stack
 * trace is kept: it would only say where in this reader the message was made.
 */
public final class StoreError extends RuntimeException {
  private final String kind;

  public StoreError(String kind, String message) {
    super(message, null, false, false);
    this.kind = kind;
  }

  @Override
  public String toString() {
    return "store.errors." + kind + ": " + getMessage();
  }
}
