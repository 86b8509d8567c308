package fnapi

import (
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// WireCoder returns the wire coder of PCollection pcoll of comps (the
// pipeline's components) by BuildStage's rule
//
//	windowed_value(wireSafe(coder(P)), windowCoder(P))
//
// as the id of the windowed-value coder in coders, which holds the
// pipeline's coders and the ones added for the wire. A stage whose head
// makes elements itself (TestStream) encodes them with it, whether or not
// the stage has a descriptor: the bytes are those the SDK harness and the
// downstream stages expect. Errors name the PCollection and the coder.
func WireCoder(comps *pipepb.Components, pcoll string) (id string, coders map[string]*pipepb.Coder, err error) {
	col, ok := comps.GetPcollections()[pcoll]
	if !ok {
		return "", nil, fmt.Errorf("fnapi: pcollection %q not found", pcoll)
	}
	ws, ok := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
	if !ok {
		return "", nil, fmt.Errorf("fnapi: pcollection %q: windowing strategy %q not found", pcoll, col.GetWindowingStrategyId())
	}
	cs := &coderSet{base: comps.GetCoders(), added: map[string]*pipepb.Coder{}}
	elm, err := cs.wireSafe(col.GetCoderId(), 0)
	if err != nil {
		return "", nil, fmt.Errorf("fnapi: pcollection %q: %w", pcoll, err)
	}
	if _, ok := cs.get(ws.GetWindowCoderId()); !ok {
		return "", nil, fmt.Errorf("fnapi: pcollection %q: window coder %q not found", pcoll, ws.GetWindowCoderId())
	}
	id = cs.freshID("wire_" + pcoll)
	cs.added[id] = &pipepb.Coder{
		Spec:              &pipepb.FunctionSpec{Urn: urnCoderWindowedValue},
		ComponentCoderIds: []string{elm, ws.GetWindowCoderId()},
	}
	coders = make(map[string]*pipepb.Coder, len(cs.base)+len(cs.added))
	for k, c := range cs.base {
		coders[k] = c
	}
	for k, c := range cs.added {
		coders[k] = c
	}
	return id, coders, nil
}
