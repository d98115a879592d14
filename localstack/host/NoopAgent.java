/**
 * A Java agent that does nothing. LocalStack starts DynamoDB Local with its own agent jar
 * (which lifts DynamoDB Local's limit of 20 global secondary indexes), downloaded from GitHub
 * at first use; scripts/localstack installs this jar in its place so that nothing is fetched.
 * The dynalimit table has fewer indexes, so the limit never matters.
 */
public final class NoopAgent {
    private NoopAgent() {}

    /** Called by the JVM before main; leaves everything as it is. */
    public static void premain(String args) {}
}
