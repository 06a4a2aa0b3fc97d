import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.HexFormat;

import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;

/**
 * Reads lines "KEYHEX VALUEHEX" ("-" for a tombstone), decodes each record with Kafka's own group
 * coordinator serde, encodes it again and prints "KEYHEX VALUEHEX<TAB>record": groupgate's test
 * compares the bytes with its own and looks at the decoded fields.
 */
public class RecordRoundTrip {
    public static void main(String[] args) throws IOException {
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        HexFormat hex = HexFormat.of();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.trim().split(" ");
            ByteBuffer key = ByteBuffer.wrap(hex.parseHex(parts[0]));
            ByteBuffer value = parts[1].equals("-") ? null : ByteBuffer.wrap(hex.parseHex(parts[1]));
            CoordinatorRecord record = serde.deserialize(key, value);
            byte[] k = serde.serializeKey(record);
            byte[] v = serde.serializeValue(record);
            System.out.println(hex.formatHex(k) + " " + (v == null ? "-" : hex.formatHex(v)) + "\t" + record);
        }
    }
}
