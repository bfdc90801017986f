package store.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.spark.sql.internal.SQLConf;

/**
 * Asks {@code python -m store.spark.plan} what a read covers (see that module): options,
 * topics, offsets and times have one definition, in Python. The interpreter is the one the
 * session was registered from ({@code spark.mqctl.python}), else PySpark's.
 *
 * <p>One planner process serves this JVM for as long as it runs (a JSON line in, a JSON line
 * out): starting Python and importing the store costs 0.1-0.3 s, which every query paid twice
 * (the load's check and the plan) when each request had its own process. It exits when this
 * JVM closes its stdin, or dies with it; one that died meanwhile is started again.
 */
final class Planner {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static Process proc;
  private static String started;   // the command line of proc (a session may change the conf)
  private static OutputStream requests;
  private static BufferedReader answers;

  private Planner() {}

  static JsonNode plan(Map<String, String> options, ObjectNode pushed) {
    String[] interpreter = interpreter();
    return plan(options, pushed, interpreter[0], interpreter[1]);
  }

  /** The planner's Python and its {@code PYTHONPATH} addition (or null), as this session says. */
  static String[] interpreter() {
    String python = conf("spark.mqctl.python", System.getenv("PYSPARK_DRIVER_PYTHON"));
    if (python == null) python = System.getenv("PYSPARK_PYTHON");
    if (python == null) python = "python3";
    return new String[] {python, conf("spark.mqctl.pythonpath", null)};
  }

  /** The plan of a read by the planner {@code python} runs (also on an executor: one store per host). */
  static JsonNode plan(Map<String, String> options, ObjectNode pushed, String python, String path) {
    ObjectNode request = pushed.deepCopy();
    ObjectNode opts = request.putObject("options");
    for (Map.Entry<String, String> e : options.entrySet()) {
      opts.put(e.getKey().toLowerCase(java.util.Locale.ROOT), e.getValue());
    }
    String line;
    try {
      line = ask(python, path, JSON.writeValueAsString(request));
    } catch (IOException e) {
      throw new StoreError("OperationError", "cannot run the mqctl read planner " + python + ": " + e.getMessage());
    }
    if (line == null) {
      throw new StoreError("OperationError", "the mqctl read planner (" + python
          + " -m store.spark.plan) exited: is mqctl installed for that interpreter?");
    }
    JsonNode answer;
    try {
      answer = JSON.readTree(line);
    } catch (IOException e) {
      throw new StoreError("OperationError", "the mqctl read planner answered " + line);
    }
    if (answer.has("error")) {
      throw new StoreError(answer.get("error").asText(), answer.get("message").asText());
    }
    return answer;
  }

  /** One request line to the running planner (started first if needed): its answer line, or
   *  null when the planner exits without one. A planner found dead is started once more. */
  private static synchronized String ask(String python, String path, String request) throws IOException {
    String cmd = python + "\0" + path;
    for (int attempt = 0; ; attempt++) {
      boolean fresh = proc == null || !proc.isAlive() || !cmd.equals(started);
      if (fresh) start(python, path, cmd);
      try {
        requests.write((request + "\n").getBytes(StandardCharsets.UTF_8));
        requests.flush();
        String line = answers.readLine();
        if (line != null || fresh || attempt > 0) return line;
      } catch (IOException e) {
        if (fresh || attempt > 0) throw e;
      }
      proc.destroy();
    }
  }

  private static void start(String python, String path, String cmd) throws IOException {
    if (proc != null) proc.destroy();
    ProcessBuilder pb = new ProcessBuilder(python, "-m", "store.spark.plan");
    if (path != null) {
      String old = pb.environment().get("PYTHONPATH");
      pb.environment().put("PYTHONPATH", old == null || old.isEmpty() ? path : path + ":" + old);
    }
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    proc = pb.start();
    started = cmd;
    requests = proc.getOutputStream();
    answers = new BufferedReader(new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8));
  }

  static ObjectNode request() {
    return JSON.createObjectNode();
  }

  static ObjectNode parse(String json) {
    try {
      return (ObjectNode) JSON.readTree(json);
    } catch (IOException e) {
      throw new IllegalArgumentException(json, e);
    }
  }

  private static String conf(String key, String fallback) {
    String v = SQLConf.get().getConfString(key, null);
    return v != null && !v.isEmpty() ? v : fallback;
  }
}
