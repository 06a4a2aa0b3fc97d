/*
 * Times Apache Kafka's own server-side assignors on groupgate's benchmark cases.
 *
 * Usage: java -cp <kafka jars>:<classes> AssignorBench <min-warmup-ms> <runs> <case-file>...
 *    or: java -cp <kafka jars>:<classes> AssignorBench --serve   (requests on stdin, see main)
 *
 * Each case file (written by bench/assignors.py) describes one assignment input:
 *   assignor <uniform|range>
 *   type <HOMOGENEOUS|HETEROGENEOUS>
 *   topics <T>                      then T lines: <num_partitions>   (topic i has id Uuid(1, i + 1))
 *   subs <S>                        then S lines: <topic index>...   (one subscription per line)
 *   members <M>                     then M lines: <member id> <instance id or -> <subscription index>
 *                                                 [<topic index>:<p>,<p>,...]...   (current target)
 * For every case it prints one line:
 *   "case <file> median_ms <ms> runs <n> input <i> checksum <c> min_ms <ms>".
 * Both sums use the member's position m in the file and the topic index t: the result checksum adds
 * (m * 31 + t) * 1000003 + p for every assigned partition p; the input checksum adds (t + 1) * partitions
 * of every topic, m * 31 + t for every subscribed topic and the same term as above for every partition of
 * the current targets. The caller computes both on its side to prove that the inputs were identical (and,
 * for the stateless range assignor, that the results are). With -Ddump=true it also prints the result
 * as "assign <member> <topic index> <p>,<p>,..." lines.
 */

import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;

public class AssignorBench {

    static final class Case {
        ConsumerGroupPartitionAssignor assignor;
        GroupSpecImpl spec;
        SubscribedTopicDescriber topics;
        Map<Uuid, Integer> topicIndex = new HashMap<>();
        List<String> memberOrder = new ArrayList<>();
        long inputChecksum;
    }

    static Uuid topicId(int index) {
        return new Uuid(1L, index + 1L);
    }

    static Case load(String path) throws IOException {
        Case c = new Case();
        try (BufferedReader in = Files.newBufferedReader(Paths.get(path))) {
            String name = field(in.readLine(), "assignor");
            c.assignor = name.equals("range") ? new RangeAssignor() : new UniformAssignor();
            SubscriptionType type = SubscriptionType.valueOf(field(in.readLine(), "type"));
            int topicCount = Integer.parseInt(field(in.readLine(), "topics"));
            Map<Uuid, Integer> partitions = new HashMap<>();
            Uuid[] ids = new Uuid[topicCount];
            for (int i = 0; i < topicCount; i++) {
                ids[i] = topicId(i);
                int n = Integer.parseInt(in.readLine().trim());
                partitions.put(ids[i], n);
                c.topicIndex.put(ids[i], i);
                c.inputChecksum += (long) (i + 1) * n;
            }
            int subCount = Integer.parseInt(field(in.readLine(), "subs"));
            List<Set<Uuid>> subs = new ArrayList<>();
            List<Long> subSums = new ArrayList<>();
            for (int s = 0; s < subCount; s++) {
                Set<Uuid> sub = new HashSet<>();
                long subSum = 0;
                String line = in.readLine().trim();
                if (!line.isEmpty()) {
                    for (String t : line.split(" ")) {
                        sub.add(ids[Integer.parseInt(t)]);
                        subSum += Integer.parseInt(t);
                    }
                }
                subs.add(Collections.unmodifiableSet(sub));
                subSums.add(subSum);
            }
            int memberCount = Integer.parseInt(field(in.readLine(), "members"));
            Map<String, MemberSubscriptionAndAssignmentImpl> members = new HashMap<>();
            Map<Uuid, Map<Integer, String>> inverted = new HashMap<>();
            for (int m = 0; m < memberCount; m++) {
                String[] parts = in.readLine().trim().split(" ");
                String memberId = parts[0];
                Optional<String> instanceId = parts[1].equals("-") ? Optional.empty() : Optional.of(parts[1]);
                int subIndex = Integer.parseInt(parts[2]);
                Set<Uuid> sub = subs.get(subIndex);
                c.inputChecksum += (long) m * 31 * sub.size() + subSums.get(subIndex);
                Map<Uuid, Set<Integer>> assigned = new HashMap<>();
                for (int k = 3; k < parts.length; k++) {
                    int colon = parts[k].indexOf(':');
                    int t = Integer.parseInt(parts[k].substring(0, colon));
                    Uuid tid = ids[t];
                    Set<Integer> ps = new HashSet<>();
                    Map<Integer, String> owners = inverted.computeIfAbsent(tid, x -> new HashMap<>());
                    for (String p : parts[k].substring(colon + 1).split(",")) {
                        int partition = Integer.parseInt(p);
                        ps.add(partition);
                        owners.put(partition, memberId);
                        c.inputChecksum += ((long) m * 31 + t) * 1000003L + partition;
                    }
                    assigned.put(tid, ps);
                }
                members.put(memberId, new MemberSubscriptionAndAssignmentImpl(
                    Optional.empty(), instanceId, sub, new Assignment(assigned)));
                c.memberOrder.add(memberId);
            }
            c.spec = new GroupSpecImpl(members, type, inverted);
            c.topics = new SubscribedTopicDescriber() {
                @Override
                public int numPartitions(Uuid topicId) {
                    Integer n = partitions.get(topicId);
                    return n == null ? -1 : n;
                }

                @Override
                public Set<String> racksForPartition(Uuid topicId, int partition) {
                    return Collections.emptySet();
                }
            };
        }
        return c;
    }

    static String field(String line, String key) {
        String[] kv = line.trim().split(" ", 2);
        if (!kv[0].equals(key)) throw new IllegalArgumentException("expected " + key + ", got " + line);
        return kv.length > 1 ? kv[1] : "";
    }

    static long checksum(Case c, GroupAssignment result) {
        long sum = 0;
        for (int m = 0; m < c.memberOrder.size(); m++) {
            MemberAssignment a = result.members().get(c.memberOrder.get(m));
            if (a == null) continue;
            for (Map.Entry<Uuid, Set<Integer>> e : a.partitions().entrySet()) {
                long t = c.topicIndex.get(e.getKey());
                for (int p : e.getValue()) sum += ((long) m * 31 + t) * 1000003L + p;
            }
        }
        return sum;
    }

    public static void main(String[] args) throws Exception {
        boolean dump = Boolean.getBoolean("dump");
        if (args.length == 1 && args[0].equals("--serve")) {
            // One case per request line "<min-warmup-ms> <runs> <case-file>", answered at once, so the
            // caller can time both sides of a case back to back on a machine whose load varies.
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String line;
            while ((line = in.readLine()) != null) {
                String[] p = line.trim().split(" ", 3);
                runCase(p[2], Long.parseLong(p[0]), Integer.parseInt(p[1]), dump);
                System.out.flush();
            }
            return;
        }
        long minWarmupMs = Long.parseLong(args[0]);
        int runs = Integer.parseInt(args[1]);
        for (int f = 2; f < args.length; f++) {
            runCase(args[f], minWarmupMs, runs, dump);
        }
    }

    static void runCase(String path, long minWarmupMs, int runs, boolean dump) throws IOException {
        Case c = load(path);
        GroupAssignment result = null;
        // Warm up: at least a few calls and minWarmupMs of them, so the JIT has compiled the path.
        long warmStart = System.nanoTime();
        int warm = 0;
        while (warm < 5 || (System.nanoTime() - warmStart) / 1_000_000 < minWarmupMs) {
            result = c.assignor.assign(c.spec, c.topics);
            warm++;
        }
        System.gc();  // start the measured calls with a clean heap
        double[] times = new double[runs];
        for (int r = 0; r < runs; r++) {
            long t0 = System.nanoTime();
            result = c.assignor.assign(c.spec, c.topics);
            times[r] = (System.nanoTime() - t0) / 1e6;
        }
        Arrays.sort(times);
        double median = times[runs / 2];
        System.out.println("case " + path + " median_ms " + median + " runs " + runs
            + " input " + c.inputChecksum + " checksum " + checksum(c, result) + " min_ms " + times[0]);
        if (dump) {
            for (String m : c.memberOrder) {
                MemberAssignment a = result.members().get(m);
                if (a == null) continue;
                for (Map.Entry<Integer, Set<Integer>> e : byTopicIndex(c, a).entrySet()) {
                    List<Integer> ps = new ArrayList<>(e.getValue());
                    Collections.sort(ps);
                    StringBuilder sb = new StringBuilder();
                    for (int p : ps) sb.append(sb.length() == 0 ? "" : ",").append(p);
                    System.out.println("assign " + m + " " + e.getKey() + " " + sb);
                }
            }
        }
    }

    static TreeMap<Integer, Set<Integer>> byTopicIndex(Case c, MemberAssignment a) {
        TreeMap<Integer, Set<Integer>> out = new TreeMap<>();
        for (Map.Entry<Uuid, Set<Integer>> e : a.partitions().entrySet()) {
            out.put(c.topicIndex.get(e.getKey()), e.getValue());
        }
        return out;
    }
}
