// Package plantopic reads an application's recorded plan from its plan
// topic (kafkaclient.PlanTopic) and turns it into the stage graph the
// WatermarkManager service shows (StageInfos): the one plan reader of the
// runner (runner's recordPlan) and of cmd/watermarkmgr.
//
// It may import runner/plan, stage/kafkaclient and watermarkmgr/service
// (for its StageInfo); nothing of stage's loop, and not package runner,
// whose flags a standalone cmd/watermarkmgr must not register.
package plantopic

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// Read returns application appID's committed plan, or nil if none. It
// reads the plan topic read_committed up to its log end offset as it was
// when it began (kafkaclient.ReadToEnd), so a plan another instance
// committed a moment ago, whose commit marker is not written yet, is
// waited for rather than read as absent. c must be made with
// kafkaclient.EndReaderConfig (kafkaclient.NewEndReader) and be assigned
// nothing yet; the caller closes it. Errors name the plan topic.
func Read(ctx context.Context, c *kafka.Consumer, appID string) (*plan.Plan, error) {
	topic := kafkaclient.PlanTopic(appID)
	last, err := kafkaclient.ReadLast(ctx, c, topic)
	if err != nil {
		return nil, fmt.Errorf("plan topic %s: %w", topic, err)
	}
	if last == nil {
		return nil, nil
	}
	p, err := plan.Decode(last)
	if err != nil {
		return nil, fmt.Errorf("plan topic %s: %w", topic, err)
	}
	return p, nil
}

// ReadNew is Read with a reader of its own in group group (never joined),
// made with the client properties props and closed before it returns.
func ReadNew(ctx context.Context, bootstrap string, props map[string]string, appID, group string) (*plan.Plan, error) {
	c, err := kafkaclient.NewEndReader(bootstrap, props, group)
	if err != nil {
		return nil, fmt.Errorf("plan topic %s: %w", kafkaclient.PlanTopic(appID), err)
	}
	defer func() { _ = c.Close() }()
	return Read(ctx, c, appID)
}

// StageInfos is the plan's stage graph as the WatermarkManager service's
// page and explanations need it (service.StageInfo), in plan order. Both
// the runner and cmd/watermarkmgr (which reads the plan topic, ReadNew)
// call it.
func StageInfos(pl *plan.Plan) []service.StageInfo {
	out := make([]service.StageInfo, 0, len(pl.Stages))
	for _, s := range pl.Stages {
		si := service.StageInfo{
			Name: s.Name, Head: string(s.Head), HeadTransform: s.HeadUniqueName,
			InputTopic: s.InputTopic, Partitions: s.Partitions,
			Upstreams:  append([]string{}, s.Upstreams...),
			Transforms: append([]string{}, s.TransformNames...),
		}
		seen := map[string]bool{}
		for _, in := range s.SideInputs {
			if !seen[in.Upstream] {
				seen[in.Upstream] = true
				si.SideUpstreams = append(si.SideUpstreams, in.Upstream)
			}
		}
		for _, k := range s.KafkaSinks {
			si.KafkaSinks = append(si.KafkaSinks, k.Topic)
		}
		out = append(out, si)
	}
	return out
}
