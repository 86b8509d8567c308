package stage

import (
	"fmt"
	"testing"
)

// ConsumerLag reads librdkafka's statistics (STATISTICS.md): per partition
// of the topic, consumer_lag; the internal partition -1 and unknown lags
// (-1) are left out, other topics ignored.
func TestConsumerLag(t *testing.T) {
	doc := `{"name":"c#consumer-1","type":"consumer","topics":{
	  "in":{"topic":"in","partitions":{
	    "0":{"partition":0,"consumer_lag":-1,"ls_offset":112,"hi_offset":115,"app_offset":100,"fetch_offset":110},
	    "1":{"partition":1,"consumer_lag":-1,"ls_offset":-1001,"hi_offset":40,"app_offset":-1001,"fetch_offset":40},
	    "2":{"partition":2,"consumer_lag":-1,"ls_offset":-1001,"hi_offset":-1001,"app_offset":-1001,"fetch_offset":0},
	    "3":{"partition":3,"consumer_lag":-1,"ls_offset":50,"hi_offset":50,"app_offset":-1001,"fetch_offset":-1001},
	    "-1":{"partition":-1,"consumer_lag":-1,"ls_offset":5,"hi_offset":5,"app_offset":0,"fetch_offset":0}}},
	  "other":{"topic":"other","partitions":{"0":{"partition":0,"ls_offset":99,"app_offset":0}}}}}`
	got, err := ConsumerLag(doc, "in")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != 12 || got[1] != 0 {
		t.Errorf("got %v, want map[0:12 1:0]", got)
	}
	if _, err := ConsumerLag("{not json", "in"); err == nil {
		t.Error("a document that does not parse: want an error")
	}
}

func TestPartitionsReachable(t *testing.T) {
	doc := `{"name":"c#consumer-1","type":"consumer",
	  "brokers":{
	    "127.0.0.1:9092/1":{"name":"127.0.0.1:9092/1","nodeid":1,"state":"DOWN"},
	    "127.0.0.1:9093/2":{"name":"127.0.0.1:9093/2","nodeid":2,"state":"UP"},
	    "127.0.0.1:9094/3":{"name":"127.0.0.1:9094/3","nodeid":3,"state":"CONNECT"},
	    "GroupCoordinator":{"name":"GroupCoordinator","nodeid":-1,"state":"UP"}},
	  "topics":{"in":{"topic":"in","partitions":{
	    "0":{"partition":0,"leader":1},
	    "1":{"partition":1,"leader":2},
	    "2":{"partition":2,"leader":-1},
	    "3":{"partition":3,"leader":3},
	    "4":{"partition":4,"leader":7},
	    "-1":{"partition":-1,"leader":-1}}},
	  "other":{"topic":"other","partitions":{"5":{"partition":5,"leader":2}}}}}`
	got, err := PartitionsReachable(doc, "in")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]bool{0: false, 1: true, 2: false, 3: false, 4: false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v (only a partition whose leader's broker is UP)", got, want)
	}
	if _, err := PartitionsReachable("{not json", "in"); err == nil {
		t.Error("a document that does not parse: want an error")
	}
}
