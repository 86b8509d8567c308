package service

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/logend"
)

// StageInfos is the plan's stage graph as the WatermarkManager service's
// page and explanations need it (StageInfo), in plan order.
// Both the runner and cmd/watermarkmgr (which reads the plan topic,
// ReadPlan) call it.
func StageInfos(pl *plan.Plan) []StageInfo {
	out := make([]StageInfo, 0, len(pl.Stages))
	for _, s := range pl.Stages {
		si := StageInfo{
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

// PlanTopic is application applicationID's plan topic (the runner's
// runner.PlanTopic): one partition, the plan as runner/plan encodes it,
// written in one transaction by the first instance.
func PlanTopic(applicationID string) string { return applicationID + "-plan" }

// ReadPlan returns the application's committed plan from its plan topic, or
// nil if none is there yet. It reads read_committed up to the log end offset
// as it was when it began (stage/logend). Errors name the topic.
func ReadPlan(ctx context.Context, bootstrap string, props map[string]string, applicationID string) (*plan.Plan, error) {
	base := kafka.ConfigMap{}
	for k, v := range props {
		base[k] = v
	}
	base["bootstrap.servers"] = bootstrap
	cc := logend.Config(base, applicationID+"-plan-watermarkmgr")
	c, err := kafka.NewConsumer(&cc)
	if err != nil {
		return nil, fmt.Errorf("watermarkmgr/service: plan topic %s: %w", PlanTopic(applicationID), err)
	}
	defer c.Close()
	var last []byte
	if _, err := logend.Read(ctx, c, PlanTopic(applicationID), 0, func(m *kafka.Message) error {
		last = m.Value
		return nil
	}); err != nil {
		return nil, fmt.Errorf("watermarkmgr/service: plan topic %s: %w", PlanTopic(applicationID), err)
	}
	if last == nil {
		return nil, nil
	}
	p, err := plan.Decode(last)
	if err != nil {
		return nil, fmt.Errorf("watermarkmgr/service: plan topic %s: %w", PlanTopic(applicationID), err)
	}
	return p, nil
}
