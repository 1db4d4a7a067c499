// Evaluates SQL92 filter cases with RocketMQ's own SelectorParser (rocketmq-filter 5.3.3).
// Input on stdin, one case a line: base64(expression) then base64(key):base64(value) fields,
// tab-separated. Output, one line a case: ERROR | TRUE | FALSE | NULL | EXCEPTION.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.filter.expression.BooleanExpression;
import org.apache.rocketmq.filter.expression.EvaluationContext;
import org.apache.rocketmq.filter.expression.MQFilterException;
import org.apache.rocketmq.filter.parser.SelectorParser;

public class FilterCases {
    static String decode(String field) {
        return new String(Base64.getDecoder().decode(field), StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] fields = line.split("\t", -1);
            final Map<String, Object> properties = new HashMap<>();
            for (int i = 1; i < fields.length; i++) {
                String[] kv = fields[i].split(":", 2);
                properties.put(decode(kv[0]), decode(kv[1]));
            }
            EvaluationContext context = new EvaluationContext() {
                public Object get(String name) { return properties.get(name); }
                public Map<String, Object> keyValues() { return properties; }
            };
            BooleanExpression expression;
            try {
                expression = SelectorParser.parse(decode(fields[0]));
            } catch (MQFilterException e) {
                System.out.println("ERROR");
                continue;
            }
            try {
                Object result = expression.evaluate(context);
                System.out.println(result == null ? "NULL" : (result == Boolean.TRUE ? "TRUE" : (result == Boolean.FALSE ? "FALSE" : "VALUE:" + result)));
            } catch (Throwable e) {
                System.out.println("EXCEPTION");
            }
        }
    }
}
