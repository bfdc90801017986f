package store.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.NetworkInterface;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.Locale;
import java.util.Set;

/**
 * The names of the machine a task runs on, to tell whether a {@code stores} entry's HOST is
 * this machine: a store is found by its directory alone, and the same directory exists on
 * every host, so a task Spark placed off its store's host would read another store.
 */
final class ThisHost {
  private ThisHost() {}

  /** Whether {@code host} (a name or an address, as the option gives it) is this machine. */
  static boolean is(String host) {
    String h = host.trim().toLowerCase(Locale.ROOT);
    if (h.equals("localhost") || h.startsWith("127.") || h.equals("::1")) return true;
    if (names().contains(h)) return true;
    try {   // an alias of this machine: a name that resolves to one of its addresses
      for (InetAddress a : InetAddress.getAllByName(h)) {
        if (a.isLoopbackAddress() || NetworkInterface.getByInetAddress(a) != null) return true;
      }
    } catch (IOException e) {
      return false;    // unknown to this machine's resolver: not one of its names
    }
    return false;
  }

  /** This machine's name as an error shows it (its first name, or its first address). */
  static String name() {
    Set<String> all = names();
    return all.isEmpty() ? "this host" : all.iterator().next();
  }

  /** Host name (the resolver's and {@code hostname}'s), canonical name, every interface's
   *  addresses; lower case. A name that cannot be found is left out, not an error: the
   *  others may still match. */
  private static Set<String> names() {
    Set<String> out = new LinkedHashSet<>();
    try {
      InetAddress self = InetAddress.getLocalHost();
      out.add(self.getHostName().toLowerCase(Locale.ROOT));
      out.add(self.getCanonicalHostName().toLowerCase(Locale.ROOT));
    } catch (IOException e) {
      // no address for this machine's name in its resolver: `hostname` still names it
    }
    try {
      Process p = new ProcessBuilder("hostname").redirectErrorStream(true).start();
      try (BufferedReader r = new BufferedReader(
          new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
        String line = r.readLine();
        if (p.waitFor() == 0 && line != null && !line.isBlank()) {
          out.add(line.trim().toLowerCase(Locale.ROOT));
        }
      }
    } catch (IOException e) {
      // no `hostname` command: the resolver's names and the addresses remain
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    try {
      for (NetworkInterface nic : Collections.list(NetworkInterface.getNetworkInterfaces())) {
        for (InetAddress a : Collections.list(nic.getInetAddresses())) {
          String addr = a.getHostAddress();
          int scope = addr.indexOf('%');   // fe80::1%eth0: the option cannot name a scope
          out.add((scope < 0 ? addr : addr.substring(0, scope)).toLowerCase(Locale.ROOT));
        }
      }
    } catch (IOException e) {
      // interfaces not listed: the names remain
    }
    return out;
  }
}
