package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
)

func main() {
	log.SetPrefix("localkafka: ")
	var (
		mode      = flag.String("mode", "auto", "where the broker runs: auto, container, process or external")
		bport     = flag.Int("broker-port", 0, "client listener port on 127.0.0.1; 0 picks a free one")
		cport     = flag.Int("controller-port", 0, "controller listener port on 127.0.0.1; 0 picks a free one")
		once      = flag.Bool("once", false, "stop the broker right after it is ready")
		brokerLog = flag.Bool("broker-log", false, "copy the broker's own log to stderr")
	)
	flag.Parse()
	if err := run(*mode, *bport, *cport, *once, *brokerLog); err != nil {
		log.Fatal(err)
	}
}

func run(mode string, bport, cport int, once, brokerLog bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := kafkaenv.Options{
		BrokerPort:     bport,
		ControllerPort: cport,
		Logf:           log.Printf,
	}
	if mode != "auto" {
		opts.Mode = kafkaenv.Mode(mode)
	}
	if brokerLog {
		opts.BrokerOutput = os.Stderr
	}
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	b, err := kafkaenv.Start(startCtx, opts)
	cancel()
	if err != nil {
		return err
	}
	log.Printf("broker: %s", b.Describe())
	fmt.Printf("%s=%s\n", kafkaenv.EnvBootstrapServers, b.BootstrapServers())
	if !once {
		log.Printf("running; stop with Ctrl-C (SIGINT) or SIGTERM")
		<-ctx.Done()
	}
	log.Printf("stopping the broker")
	if err := b.Stop(); err != nil {
		return err
	}
	log.Printf("stopped")
	return nil
}
