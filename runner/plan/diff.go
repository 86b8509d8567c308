package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// ErrPlanMismatch is returned by Diff when two plans differ.
var ErrPlanMismatch = errors.New("plan: this instance's plan differs from the plan recorded for the application")

// Encode is the plan's canonical recorded form (JSON, fields in a fixed order).
func (p *Plan) Encode() ([]byte, error) { return json.Marshal(p) }

// Decode reads a plan written by Encode.
func Decode(b []byte) (*Plan, error) {
	p := &Plan{}
	if err := json.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("%w: recorded plan does not decode: %v", ErrMalformed, err)
	}
	return p, nil
}

// Diff returns nil if current equals recorded, else an error wrapping
// ErrPlanMismatch that lists every difference, stage by stage, e.g.
// `stage s2-main.Count: transforms: recorded [a b], this instance [a c]`.
func Diff(recorded, current *Plan) error {
	var d []string
	if recorded.ApplicationID != current.ApplicationID {
		d = append(d, fmt.Sprintf("application id: recorded %q, this instance %q", recorded.ApplicationID, current.ApplicationID))
	}
	n := max(len(recorded.Stages), len(current.Stages))
	for i := 0; i < n; i++ {
		switch {
		case i >= len(recorded.Stages):
			d = append(d, fmt.Sprintf("stage %s: not in the recorded plan", current.Stages[i].Name))
			continue
		case i >= len(current.Stages):
			d = append(d, fmt.Sprintf("stage %s: recorded, but not in this instance's plan", recorded.Stages[i].Name))
			continue
		}
		r, c := recorded.Stages[i], current.Stages[i]
		field := func(what string, a, b any) {
			if !reflect.DeepEqual(a, b) {
				d = append(d, fmt.Sprintf("stage %s: %s: recorded %v, this instance %v", c.Name, what, a, b))
			}
		}
		field("name", r.Name, c.Name)
		field("head", r.Head, c.Head)
		field("input topic", r.InputTopic, c.InputTopic)
		field("partitions", r.Partitions, c.Partitions)
		field("transforms", r.TransformNames, c.TransformNames)
		field("URNs", r.URNs, c.URNs)
		field("upstreams", r.Upstreams, c.Upstreams)
		field("outputs", r.Outputs, c.Outputs)
		field("side inputs", r.SideInputs, c.SideInputs)
	}
	if len(d) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n  %s", ErrPlanMismatch, strings.Join(d, "\n  "))
}
