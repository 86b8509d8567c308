package runner

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
)

// requestDrain is execute with --drain: it writes a drain request to the
// application's control topic and returns an empty Result; the running
// instances stop reading their sources, fire every window and timer, and
// exit.
func requestDrain(ctx context.Context, log *slog.Logger, o Options) (beam.PipelineResult, error) {
	if err := Drain(ctx, o.BootstrapServers, o.KafkaProperties, o.ApplicationID, drainBy("")); err != nil {
		return nil, err
	}
	log.Info("kafkastreams: drain requested (--drain): the application's instances stop reading their sources, fire every window and timer, and exit", "application_id", o.ApplicationID)
	return &Result{jobID: o.ApplicationID, Stats: map[string]stage.Stats{}}, nil
}

// planPipeline builds p's pipeline proto and plan and checks them before
// anything exists on the cluster: plan.Build refuses head kinds that are
// not registered (Supported), every stage's kind checks its stage
// (checkStages), Kafka sinks must be on the runner's cluster
// (checkKafkaSinks), and every stage's descriptor must build (an
// unbounded splittable DoFn, say, is refused there). Errors name the
// transform or stage.
func planPipeline(log *slog.Logger, p *beam.Pipeline, o Options) (*pipepb.Pipeline, *plan.Plan, *checkedPlan, error) {
	edges, _, err := p.Build()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kafkastreams: invalid pipeline: %w", err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kafkastreams: marshal pipeline: %w", err)
	}
	pl, err := plan.Build(pipe, plan.Options{ApplicationID: o.ApplicationID, Partitions: int32(o.InternalTopicPartitions), Supported: Supported()})
	if err != nil {
		return nil, nil, nil, err
	}
	log.Info("kafkastreams: plan", "application_id", o.ApplicationID, "stages", len(pl.Stages), "bootstrap_servers", o.BootstrapServers)
	for _, s := range pl.Stages {
		log.Info("kafkastreams: stage", "stage", s.Name, "head", s.Head, "tasks", s.Partitions, "fused", s.TransformNames, "upstreams", s.Upstreams)
	}
	comps := pipe.GetComponents()
	cp, err := checkStages(&checkEnv{comps: comps, pl: pl, o: o, log: log})
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkKafkaSinks(comps, pl, o.BootstrapServers); err != nil {
		return nil, nil, nil, err
	}
	for _, s := range pl.Stages {
		if len(s.Transforms) > 0 {
			if _, err := fnapi.BuildStage(comps, stageSpec(s), "127.0.0.1:0"); err != nil {
				return nil, nil, nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
			}
		}
	}
	return pipe, pl, cp, nil
}

// startProducers starts every stage's transactional producer
// (stage.StartProducer, for instance instanceID): their InitTransactions
// run in the background until the stages' loops take them over.
func startProducers(ctx context.Context, o Options, pl *plan.Plan, instanceID string, log *slog.Logger) map[string]*stage.Producer {
	producers := map[string]*stage.Producer{}
	for _, s := range pl.Stages {
		producers[s.Name] = stage.StartProducer(ctx, o.BootstrapServers, o.KafkaProperties, pl.ApplicationID, s.Name, instanceID, log)
	}
	return producers
}

// setupTopics checks the brokers, reads the partition counts of the
// users' topics (cp.users; userTopics) and creates the application's
// topics (createTopics) and its dead-letter topic if it has one
// (ensureDeadLetterTopic), and sets planProducer.empty. It returns the
// users' topics' partition counts and the max.message.bytes of the
// internal and the users' topics the broker described, by topic.
//
// The broker check runs beside the users' topics and the topics: on a
// cluster that answers, its client's connection and metadata request
// (80-260 ms measured) need not come first. Its error, when it has one,
// is the one returned, the others cancelled: a failed SASL or TLS
// handshake is said at once, not as createTopics' timeout 30 s later.
// The timeline marks the three steps in the order they end. An error
// saying the brokers could not be reached names the bootstrap servers and
// where they came from.
func setupTopics(ctx context.Context, tl *timeline, o Options, pl *plan.Plan, cp *checkedPlan, planProducer *planProducer) (map[string]int32, map[string]int, map[string]time.Duration, error) {
	bootstrap, props := o.BootstrapServers, o.KafkaProperties
	brokerErr := func(err error) error {
		if unreachable(err) {
			return fmt.Errorf("%w (bootstrap servers %s, from %s: is a broker running there?)", err, bootstrap, o.bootstrapFrom)
		}
		return fmt.Errorf("%w (bootstrap servers %s, from %s)", err, bootstrap, o.bootstrapFrom)
	}
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	var (
		users                    map[string]int32
		userLimits, limits       map[string]int
		afterMax                 map[string]time.Duration
		usersErr, topicsErr      error
		initialised, planCreated bool
		deadLimit                int
	)
	topicsDone := make(chan struct{})
	go func() {
		defer close(topicsDone)
		if users, userLimits, afterMax, usersErr = userTopics(tctx, bootstrap, props, cp.users); usersErr != nil {
			return
		}
		tl.mark("users' topics")
		// Checked before the topics are asked for: a plan topic created
		// after the plan producer's InitTransactions is read by no first
		// attempt (planProducer.empty).
		initialised = planProducer.initialised()
		if planCreated, limits, topicsErr = createTopics(tctx, bootstrap, props, pl, cp); topicsErr != nil {
			return
		}
		if deadLimit, topicsErr = ensureDeadLetterTopic(tctx, o, pl, cp); topicsErr == nil {
			tl.mark("topics")
		}
	}()
	if err := checkBrokers(ctx, bootstrap, props); err != nil {
		tcancel()
		<-topicsDone
		return nil, nil, nil, brokerErr(err)
	}
	tl.mark("brokers")
	<-topicsDone
	if usersErr != nil {
		if unreachable(usersErr) {
			return nil, nil, nil, brokerErr(usersErr)
		}
		return nil, nil, nil, usersErr
	}
	if topicsErr != nil {
		return nil, nil, nil, brokerErr(topicsErr)
	}
	planProducer.empty = initialised && planCreated
	if limits == nil {
		limits = map[string]int{}
	}
	for t, n := range userLimits {
		limits[t] = n
	}
	if deadLimit > 0 {
		limits[o.DeadLetterTopic] = deadLimit
	}
	warnSmallSinks(pl, props, limits)
	return users, limits, afterMax, nil
}

// warnSmallSinks logs, once per topic, each Kafka sink of pl whose
// max.message.bytes (limits) is below the producers' batch.size
// (librdkafka's default 1 000 000, or props'): librdkafka batches a
// partition's records up to batch.size whatever the topic takes, and the
// broker refuses a larger batch whole (MESSAGE_TOO_LARGE), which fails
// the stage (stage.ErrRecordTooLarge) though each record fits.
func warnSmallSinks(pl *plan.Plan, props map[string]string, limits map[string]int) {
	batch := 1_000_000
	if n, err := strconv.Atoi(props["batch.size"]); err == nil {
		batch = n
	}
	seen := map[string]bool{}
	for _, s := range pl.Stages {
		for _, k := range s.KafkaSinks {
			if n, ok := limits[k.Topic]; ok && n < batch && !seen[k.Topic] {
				seen[k.Topic] = true
				slog.Default().With("runner", Name).Warn("kafkastreams: a Kafka sink's max.message.bytes is below the producers' batch.size: a batch of records that fit one by one can be refused whole, failing the stage; set --kafka_property batch.size at most the topic's limit", "topic", k.Topic, "max_message_bytes", n, "batch_size", batch)
			}
		}
	}
}
