package service

import (
	"errors"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// TestConsumerTrust guards issue 23's "a well-formed report written by
// anything to the report topic can announce the end of time for the sinks
// and end a job mid-stream": with ConsumerConfig.ApplicationID and Stages,
// only a report carrying the application's header and naming a stage of
// the plan is applied.
func TestConsumerTrust(t *testing.T) {
	c := &Consumer{cfg: ConsumerConfig{ApplicationID: "app"}, stages: map[string]bool{"s1": true}}
	topic := "app-reports"
	msg := func(hs ...kafka.Header) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic}, Headers: hs}
	}
	own := kafka.Header{Key: envelope.WriterHeader, Value: []byte("app")}
	r := &pb.WatermarkReport{Stage: "s1", TotalSourcePartitions: 1}
	for _, tc := range []struct {
		name string
		m    *kafka.Message
		r    *pb.WatermarkReport
		err  error
		want string // a part of the reason; "" for applied
	}{
		{"the runner's", msg(own), r, nil, ""},
		{"a plain producer's", msg(), r, nil, envelope.WriterHeader},
		{"another application's", msg(kafka.Header{Key: envelope.WriterHeader, Value: []byte("other")}), r, nil, envelope.WriterHeader},
		{"a stage not in the plan", msg(own), &pb.WatermarkReport{Stage: "s9", TotalSourcePartitions: 1}, nil, "not in the application's plan"},
		{"not a report", msg(own), &pb.WatermarkReport{}, errors.New("proto: cannot parse"), "not a WatermarkReport"},
	} {
		got := c.trust(tc.m, tc.r, tc.err)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: reason %q, want %q", tc.name, got, tc.want)
		}
	}
	// Without an application id (a --report_topic read alone) every
	// well-formed report is applied, as before.
	c = &Consumer{}
	if got := c.trust(msg(), r, nil); got != "" {
		t.Errorf("without ApplicationID: %q, want applied", got)
	}
}
