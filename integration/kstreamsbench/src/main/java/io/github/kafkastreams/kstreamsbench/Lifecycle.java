package io.github.kafkastreams.kstreamsbench;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;

/** How the benchmark's Kafka Streams applications run and stop. */
final class Lifecycle {
  private Lifecycle() {}

  /**
   * Starts streams and blocks until it stops: prints "RUNNING" once it
   * first reaches state RUNNING; a stream thread's uncaught exception is
   * printed (prefixed by name) and shuts the client down; SIGTERM closes it
   * (within 10 s; leaving the consumer group, KIP-812, if leaveGroup). Exits
   * the JVM with status 1 if the application ended in state ERROR.
   */
  static void runUntilStopped(KafkaStreams streams, String name, boolean leaveGroup)
      throws InterruptedException {
    CountDownLatch done = new CountDownLatch(1);
    AtomicBoolean announced = new AtomicBoolean();
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING && !announced.getAndSet(true)) {
        System.out.println("RUNNING");
        System.out.flush();
      }
      if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
        done.countDown();
      }
    });
    streams.setUncaughtExceptionHandler(e -> {
      System.err.println(name + ": " + e);
      e.printStackTrace();
      return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close(new KafkaStreams.CloseOptions().timeout(Duration.ofSeconds(10)).leaveGroup(leaveGroup));
      done.countDown();
    }));
    streams.start();
    done.await();
    if (streams.state() == KafkaStreams.State.ERROR) {
      System.exit(1);
    }
  }
}
