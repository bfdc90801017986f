package store.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.spark.sql.internal.SQLConf;

/**
 * Asks {@code python -m store.spark.plan} what a batch read covers (see that module): options,
 * topics, offsets and times have one definition, in Python. The interpreter is the one the
 * session was registered from ({@code spark.mqctl.python}), else PySpark's.
 */
final class Planner {
  private static final ObjectMapper JSON = new ObjectMapper();

  private Planner() {}

  static JsonNode plan(Map<String, String> options, ObjectNode pushed) {
    ObjectNode request = pushed.deepCopy();
    ObjectNode opts = request.putObject("options");
    for (Map.Entry<String, String> e : options.entrySet()) {
      opts.put(e.getKey().toLowerCase(java.util.Locale.ROOT), e.getValue());
    }
    String python = conf("spark.mqctl.python", System.getenv("PYSPARK_DRIVER_PYTHON"));
    if (python == null) python = System.getenv("PYSPARK_PYTHON");
    if (python == null) python = "python3";
    ProcessBuilder pb = new ProcessBuilder(python, "-m", "store.spark.plan");
    String path = conf("spark.mqctl.pythonpath", null);
    if (path != null) {
      String old = pb.environment().get("PYTHONPATH");
      pb.environment().put("PYTHONPATH", old == null || old.isEmpty() ? path : path + ":" + old);
    }
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    try {
      Process proc = pb.start();
      try (OutputStream in = proc.getOutputStream()) {
        in.write(JSON.writeValueAsBytes(request));
      }
      byte[] out = readAll(proc.getInputStream());
      int rc = proc.waitFor();
      if (rc != 0 || out.length == 0) {
        throw new StoreError("OperationError", "the mqctl read planner (" + python
            + " -m store.spark.plan) failed with exit status " + rc
            + ": is mqctl installed for that interpreter?");
      }
      JsonNode answer = JSON.readTree(new String(out, StandardCharsets.UTF_8));
      if (answer.has("error")) {
        throw new StoreError(answer.get("error").asText(), answer.get("message").asText());
      }
      return answer;
    } catch (IOException e) {
      throw new StoreError("OperationError", "cannot run the mqctl read planner " + python + ": " + e.getMessage());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new StoreError("OperationError", "interrupted while planning the read");
    }
  }

  static ObjectNode request() {
    return JSON.createObjectNode();
  }

  private static String conf(String key, String fallback) {
    String v = SQLConf.get().getConfString(key, null);
    return v != null && !v.isEmpty() ? v : fallback;
  }

  private static byte[] readAll(InputStream in) throws IOException {
    ByteArrayOutputStream buf = new ByteArrayOutputStream();
    in.transferTo(buf);
    return buf.toByteArray();
  }
}
