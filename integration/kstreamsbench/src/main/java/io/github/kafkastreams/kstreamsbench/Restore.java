package io.github.kafkastreams.kstreamsbench;

import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The Kafka Streams side of the restore benchmark (issue 24, "state that
 * moves in seconds"): an application with one key-value store, "store",
 * materialised from its input topic ({@code builder.table}), whose
 * changelog {@code <application.id>-store-changelog} the benchmark has
 * filled before the start. With an empty state directory Kafka Streams
 * restores the store from the whole changelog (no checkpoint file) before
 * it runs; this runner's side of the benchmark restores a task store from
 * the same changelog partition.
 *
 * <p>Settings: processing.guarantee=exactly_once_v2 (its restore reads
 * read_committed, as this runner's does), one stream thread, everything
 * else Kafka Streams' defaults (RocksDB, the restore consumer's
 * max.poll.records 1000).
 *
 * <p>Arguments: bootstrap.servers application.id input-topic state.dir.
 * Prints "RESTORE_START &lt;start offset&gt; &lt;end offset&gt;" when the
 * restore of the store's partition begins, "RESTORED &lt;records&gt;
 * &lt;nanoseconds from the start of the restore to its end&gt;" when it
 * ends (the StateRestoreListener's calls), and "RUNNING" once the
 * application first reaches state RUNNING; stops cleanly on SIGTERM,
 * leaving the consumer group.
 */
public final class Restore {
  private Restore() {}

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 4) {
      System.err.println("usage: Restore bootstrap.servers application.id input state.dir");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);

    StreamsBuilder builder = new StreamsBuilder();
    builder.table(args[2], Consumed.with(Serdes.Bytes(), Serdes.ByteArray()),
        Materialized.<Bytes, byte[], KeyValueStore<Bytes, byte[]>>as("store"));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    AtomicLong began = new AtomicLong();
    streams.setGlobalStateRestoreListener(new StateRestoreListener() {
      @Override
      public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
        began.set(System.nanoTime());
        System.out.println("RESTORE_START " + start + " " + end);
        System.out.flush();
      }

      @Override
      public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {}

      @Override
      public void onRestoreEnd(TopicPartition tp, String store, long total) {
        System.out.println("RESTORED " + total + " " + (System.nanoTime() - began.get()));
        System.out.flush();
      }
    });
    // Leave the group on SIGTERM: the benchmark's next round starts the
    // same application id at once.
    Lifecycle.runUntilStopped(streams, "Restore", true);
  }
}
