package runner

import (
	"bytes"
	"sort"
	"strings"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Monitoring info URNs this runner sums across bundles (beam_runner_api.proto
// MonitoringInfoSpecs).
const (
	urnUserSum      = "beam:metric:user:sum_int64:v1"
	urnUserDist     = "beam:metric:user:distribution_int64:v1"
	urnUserLatest   = "beam:metric:user:latest_int64:v1"
	urnElementCount = "beam:metric:element_count:v1"
)

// aggregated are the URNs committedMetrics.add merges, with the number of
// varints in their payloads.
var aggregated = map[string]int{urnUserSum: 1, urnElementCount: 1, urnUserDist: 4, urnUserLatest: 2}

// committedMetrics merges the monitoring infos of committed bundles: sums
// add, distributions combine (count, sum, min, max), gauges keep the latest
// by timestamp. Infos of other URNs are dropped. Safe for concurrent use.
type committedMetrics struct {
	mu    sync.Mutex
	infos map[string]*pipepb.MonitoringInfo // by urn + sorted labels
}

func newCommittedMetrics() *committedMetrics {
	return &committedMetrics{infos: map[string]*pipepb.MonitoringInfo{}}
}

func infoKey(mi *pipepb.MonitoringInfo) string {
	var b strings.Builder
	b.WriteString(mi.GetUrn())
	keys := make([]string, 0, len(mi.GetLabels()))
	for k := range mi.GetLabels() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString("\x00" + k + "=" + mi.GetLabels()[k])
	}
	return b.String()
}

func varints(payload []byte, n int) ([]int64, bool) {
	r := bytes.NewReader(payload)
	out := make([]int64, n)
	for i := range out {
		v, err := coder.DecodeVarInt(r)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func encodeVarints(vs ...int64) []byte {
	var b bytes.Buffer
	for _, v := range vs {
		_ = coder.EncodeVarInt(v, &b)
	}
	return b.Bytes()
}

// add merges one committed bundle's infos.
func (m *committedMetrics) add(infos []*pipepb.MonitoringInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mi := range infos {
		n, ok := aggregated[mi.GetUrn()]
		if !ok {
			continue
		}
		v, ok := varints(mi.GetPayload(), n)
		if !ok {
			continue
		}
		k := infoKey(mi)
		prev := m.infos[k]
		if prev == nil {
			m.infos[k] = &pipepb.MonitoringInfo{Urn: mi.GetUrn(), Type: mi.GetType(), Labels: mi.GetLabels(), Payload: mi.GetPayload()}
			continue
		}
		p, _ := varints(prev.GetPayload(), n)
		switch mi.GetUrn() {
		case urnUserSum, urnElementCount:
			prev.Payload = encodeVarints(p[0] + v[0])
		case urnUserDist:
			prev.Payload = encodeVarints(p[0]+v[0], p[1]+v[1], min(p[2], v[2]), max(p[3], v[3]))
		case urnUserLatest:
			if v[0] >= p[0] {
				prev.Payload = mi.GetPayload()
			}
		}
	}
}

// snapshot returns copies of the merged infos.
func (m *committedMetrics) snapshot() []*pipepb.MonitoringInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*pipepb.MonitoringInfo, 0, len(m.infos))
	for _, mi := range m.infos {
		out = append(out, &pipepb.MonitoringInfo{Urn: mi.GetUrn(), Type: mi.GetType(), Labels: mi.GetLabels(), Payload: append([]byte(nil), mi.GetPayload()...)})
	}
	return out
}
