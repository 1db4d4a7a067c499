// Prints Guava's Hashing.consistentHash(group.hashCode(), buckets), as RocketMQ 5.3.3's
// proxy picks a FIFO message group's queue. Input: base64(group) TAB buckets per line.
import com.google.common.hash.Hashing;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

public class ConsistentHashCases {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] fields = line.split("\t");
            String group = new String(Base64.getDecoder().decode(fields[0]), StandardCharsets.UTF_8);
            System.out.println(Hashing.consistentHash(group.hashCode(), Integer.parseInt(fields[1])));
        }
    }
}
