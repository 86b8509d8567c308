package kafkaio

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// build runs f in a new pipeline and returns what it panicked with.
func build(f func(s beam.Scope)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	_, s := beam.NewPipelineWithRoot()
	f(s)
	return nil
}

// TestReadRefusals: bad reads panic at construction with ErrConfig, naming
// what is wrong, before any broker is asked.
func TestReadRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(s beam.Scope)
		want string
	}{
		{"no topic", func(s beam.Scope) { ReadTopics(s, nil) }, "no topic"},
		{"a topic twice", func(s beam.Scope) { ReadTopics(s, []string{"a", "b", "a"}) }, `"a" twice`},
		{"empty topic", func(s beam.Scope) { ReadTopics(s, []string{"a", " "}) }, "empty topic"},
		{"start before 1970", func(s beam.Scope) { Read(s, "a", WithStartAt(time.UnixMilli(-1))) }, "before the Unix epoch"},
		{"bad pattern", func(s beam.Scope) { ReadPattern(s, "orders-(", WithBootstrapServers("127.0.0.1:1")) }, `ReadPattern("orders-(")`},
		{"zero idleness", func(s beam.Scope) { Read(s, "a", WithIdleness(0)) }, "WithIdleness(0)"},
		{"negative delay", func(s beam.Scope) { Read(s, "a", WithLimitedDelay(-time.Second)) }, "WithLimitedDelay: negative delay"},
		{"limited delay and idleness", func(s beam.Scope) { Read(s, "a", WithLimitedDelay(time.Second), WithIdleness(time.Second)) }, "WithLimitedDelay with WithIdleness"},
		{"limited delay and alignment", func(s beam.Scope) {
			Read(s, "a", WithLimitedDelay(time.Second), WithWatermarkAlignment("g", time.Second))
		}, "WithLimitedDelay with WithWatermarkAlignment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := build(tc.f)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrConfig naming %q", err, tc.want)
			}
		})
	}
}

// TestReadTopicsIsOneReadPerTopic: ReadTopics of three topics configures
// three reads, one per topic, each with the shared options.
func TestReadTopicsIsOneReadPerTopic(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	ReadTopics(s, []string{"x", "y", "z"}, WithStartAt(time.UnixMilli(42)), Bounded())
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range edges {
		if e.DoFn == nil {
			continue
		}
		if c, ok := SourceConfig(e.DoFn.Recv); ok {
			if c.Start != AtTimestamp || c.StartAtMs != 42 || !c.Bounded {
				t.Errorf("read of %v: %v, want bounded from 42 ms", c.Topics, c)
			}
			got = append(got, c.Topics...)
		}
	}
	if fmt.Sprint(got) != "[x y z]" {
		t.Errorf("reads of %v, want [x y z]", got)
	}
}

// TestPropertyTheRunnerOwnsRefused: WithProperty of a property the runner
// sets itself (its value was overridden quietly) is refused, naming the
// option to use instead.
func TestPropertyTheRunnerOwnsRefused(t *testing.T) {
	c := newConfig([]string{"t"}, []Option{WithProperty("isolation.level", "read_uncommitted")})
	err := c.Validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `WithProperty("isolation.level", …)`) || !strings.Contains(err.Error(), "WithReadUncommitted") {
		t.Fatalf("Validate = %v, want an ErrConfig naming isolation.level and WithReadUncommitted", err)
	}
	if err := newConfig([]string{"t"}, []Option{WithProperty("fetch.min.bytes", "1000")}).Validate(); err != nil {
		t.Fatalf("a tuning property: %v", err)
	}
}
