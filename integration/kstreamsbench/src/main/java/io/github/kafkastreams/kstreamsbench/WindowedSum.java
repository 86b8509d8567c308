package io.github.kafkastreams.kstreamsbench;

import java.time.Duration;
import java.util.Properties;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * The Kafka Streams side of the windowed-sum benchmark (issue 24): the
 * application a Kafka user would write for the job the Beam Go pipeline of
 * integration/kstreams_bench_test.go runs on this runner.
 *
 * <p>Input: records keyed by a string, the value a decimal long, the event
 * time the record's timestamp. Output: one record per key and closed 10 s
 * window, the key unchanged and the value "windowStartMs sum" (the format
 * the Beam pipeline writes too, so the benchmark can compare the rows).
 *
 * <p>Settings: processing.guarantee=exactly_once_v2,
 * commit.interval.ms=100, num.stream.threads from the arguments; everything
 * else Kafka Streams' defaults. The key is never changed before
 * groupByKey, so Kafka Streams groups in place (no repartition topic).
 *
 * <p>Arguments: bootstrap.servers application.id input-topic output-topic
 * state.dir num.stream.threads. Prints "RUNNING" once the application
 * first reaches state RUNNING; stops cleanly on SIGTERM.
 */
public final class WindowedSum {
  private WindowedSum() {}

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 6) {
      System.err.println(
          "usage: WindowedSum bootstrap.servers application.id input output state.dir threads");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args[5]));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
        .mapValues(value -> Long.parseLong(value))
        .groupByKey(Grouped.with(Serdes.String(), Serdes.Long()))
        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(1)))
        .aggregate(() -> 0L, (key, value, sum) -> sum + value,
            Materialized.with(Serdes.String(), Serdes.Long()))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map((windowed, sum) ->
            KeyValue.pair(windowed.key(), windowed.window().start() + " " + sum))
        .to(args[3], Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    Lifecycle.runUntilStopped(streams, "WindowedSum", false);
  }
}
