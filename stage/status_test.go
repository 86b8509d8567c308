package stage

import "testing"

// ConsumerLag reads librdkafka's statistics (STATISTICS.md): per partition
// of the topic, consumer_lag; the internal partition -1 and unknown lags
// (-1) are left out, other topics ignored.
func TestConsumerLag(t *testing.T) {
	doc := `{"name":"c#consumer-1","type":"consumer","topics":{
	  "in":{"topic":"in","partitions":{
	    "0":{"partition":0,"consumer_lag":12},
	    "1":{"partition":1,"consumer_lag":0},
	    "2":{"partition":2,"consumer_lag":-1},
	    "-1":{"partition":-1,"consumer_lag":-1}}},
	  "other":{"topic":"other","partitions":{"0":{"partition":0,"consumer_lag":99}}}}}`
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
