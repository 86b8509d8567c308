package activity

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	bexec "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// OutputTopic returns the job's output topic in a kafkastreams plan: the
// input topic of the stage headed by the Reshuffle in scope OutputScope.
// Its records are the runner's Envelopes (proto/kafkastreams/v1): an
// element is one output row, a Beam string in the global window encoded
// with the windowed-value coder; the others are watermark reports. Read it
// read_committed: every row is there exactly once (the stage upstream
// writes it in the same Kafka transaction as its consumed offsets).
func OutputTopic(pl *plan.Plan) (string, error) {
	for _, s := range pl.Stages {
		if strings.HasPrefix(s.HeadUniqueName, OutputScope+"/") && s.Head == plan.HeadReshuffle {
			return s.InputTopic, nil
		}
	}
	return "", fmt.Errorf("commitactivity: no Reshuffle stage under %s in the plan of %s", OutputScope, pl.ApplicationID)
}

// FindOutputTopic finds the output topic of application app on the cluster
// by name ("<app>-s<N>-<OutputScope>…"), for a process that did not run
// the job itself. It fails unless exactly one topic matches.
func FindOutputTopic(bootstrap, app string) (string, error) {
	ac, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap})
	if err != nil {
		return "", fmt.Errorf("commitactivity: admin client: %w", err)
	}
	defer ac.Close()
	md, err := ac.GetMetadata(nil, true, 10000)
	if err != nil {
		return "", fmt.Errorf("commitactivity: list topics on %s: %w", bootstrap, err)
	}
	re := regexp.MustCompile("^" + regexp.QuoteMeta(app) + `-s[0-9]+-` + OutputScope + "_")
	var found []string
	for name := range md.Topics {
		if re.MatchString(name) {
			found = append(found, name)
		}
	}
	sort.Strings(found)
	if len(found) != 1 {
		return "", fmt.Errorf("commitactivity: %d topics on %s match %s (want 1): %v; did the job run with --application_id=%s?", len(found), bootstrap, re, found, app)
	}
	return found[0], nil
}

// ReadTopic reads every output row of the output topic, read_committed, to
// its end, in no particular order.
func ReadTopic(ctx context.Context, bootstrap, topic string) ([]string, error) {
	recs, err := kafkaenv.Consume(ctx, bootstrap, topic, -1, kafkaenv.ReadCommitted, time.Minute)
	if err != nil {
		return nil, err
	}
	dec := bexec.MakeElementDecoder(coder.NewW(coder.NewString(), coder.NewGlobalWindow()))
	var rows []string
	for _, r := range recs {
		env := &pb.Envelope{}
		if err := proto.Unmarshal(r.Value, env); err != nil {
			return nil, fmt.Errorf("commitactivity: a record of %s is not an Envelope: %w", topic, err)
		}
		if env.GetElement() == nil {
			continue // a watermark report
		}
		fv, err := dec.Decode(bytes.NewReader(env.GetElement()))
		if err != nil {
			return nil, fmt.Errorf("commitactivity: an element of %s does not decode as a string: %w", topic, err)
		}
		s, ok := fv.Elm.(string)
		if !ok {
			return nil, fmt.Errorf("commitactivity: an element of %s is a %T, not a string", topic, fv.Elm)
		}
		rows = append(rows, s)
	}
	return rows, nil
}
