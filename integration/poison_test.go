package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
)

// Issue 23, poison records: a record that fails a DoFn every time (a
// panic, an error) failed its bundle, then its stage, on every instance
// given its partition, for ever, and the job's error named no record.
// --error_policy=fail (the default) now ends the job naming the record's
// stage, topic, partition and offset; --error_policy=dead_letter writes
// it to the dead-letter topic with the error and its origin, exactly
// once, and goes on.

// poisonValue is the value the poison DoFns fail on.
const poisonValue = "poison"

// poisonPanics passes (k, v) on, and panics on the poison value.
func poisonPanics(k, v []byte, emit func([]byte, []byte)) {
	if string(v) == poisonValue {
		panic("poison record with key " + string(k))
	}
	emit(k, v)
}

// poisonErrs passes (k, v) on, and fails on the poison value.
func poisonErrs(k, v []byte, emit func([]byte, []byte)) error {
	if string(v) == poisonValue {
		return fmt.Errorf("poison record with key %s", k)
	}
	emit(k, v)
	return nil
}

// poisonGroup passes every value of a grouped key on, and panics on a
// group holding the poison value (a pane: no input record of its own).
func poisonGroup(k []byte, vs func(*[]byte) bool, emit func([]byte, []byte)) {
	var v []byte
	var all [][]byte
	for vs(&v) {
		if string(v) == poisonValue {
			panic("poison pane of key " + string(k))
		}
		all = append(all, append([]byte(nil), v...))
	}
	for _, x := range all {
		emit(k, x)
	}
}

func init() {
	register.Function3x0(poisonPanics)
	register.Function3x1(poisonErrs)
	register.Function3x0(poisonGroup)
}

// poisonTopics makes a poison test's topics: its input with n records,
// the poison one at offset at (poisonInputOf), and an output topic of one
// partition; it returns their names and the application id.
func poisonTopics(t *testing.T, ctx context.Context, bs string, n, at int) (in, out, app string) {
	t.Helper()
	in, out, app = uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	poisonInputOf(t, ctx, bs, in, n, at)
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: out, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	return in, out, app
}

// boundedRead is the poison tests' read of their input: bounded, in
// order (no out-of-orderness), idleness off.
func boundedRead(s beam.Scope, in string) beam.PCollection {
	return kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1))
}

// poisonInputOf creates topic in (one partition) holding n records, keys
// k00…, values v00… (at least two digits) but for offset at's, the poison
// value, with a header trace=t<at>, all produced before the job starts:
// the stage's first attempts hold them all, so the record must be found.
func poisonInputOf(t *testing.T, ctx context.Context, bs, in string, n, at int) {
	t.Helper()
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	var recs []kafkaenv.Record
	for i := 0; i < n; i++ {
		r := kafkaenv.Record{Key: []byte(fmt.Sprintf("k%02d", i)), Value: []byte(fmt.Sprintf("v%02d", i))}
		if i == at {
			r.Value = []byte(poisonValue)
			r.Headers = []kafka.Header{{Key: "trace", Value: []byte(fmt.Sprintf("t%02d", i))}}
		}
		recs = append(recs, r)
	}
	if err := kafkaenv.Produce(ctx, bs, in, recs...); err != nil {
		t.Fatal(err)
	}
}

// valuesBut is v00…v<upTo-1> but for those of the offsets left out,
// sorted as readValues sorts (as strings).
func valuesBut(upTo int, out ...int) string {
	var vs []string
	for i := 0; i < upTo; i++ {
		if !containsInt(out, i) {
			vs = append(vs, fmt.Sprintf("v%02d", i))
		}
	}
	sort.Strings(vs)
	return strings.Join(vs, "|")
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// runPoisonJob runs p for application app with set applied, bounded by
// 2 minutes, and returns its result and error.
func runPoisonJob(t *testing.T, ctx context.Context, bs, app string, p *beam.Pipeline, set ...func(*runner.Options)) (*runner.Result, time.Duration, error) {
	t.Helper()
	jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := beam.Run(withJob(jctx, bs, app, set...), runner.Name, p)
	took := time.Since(start).Round(time.Millisecond)
	if jctx.Err() != nil {
		t.Fatalf("the job did not end within 2 minutes (%v): a poison record stops it for ever", err)
	}
	r, _ := res.(*runner.Result)
	return r, took, err
}

// TestPoisonRecordFailNamesIt: under the default --error_policy=fail, a
// DoFn fused into the Kafka source's stage that panics on one record of
// 40 ends the job with an error naming the record's input topic,
// partition and offset (found by taking the attempt's records one at a
// time), and the sink holds every record before it, each once, and none
// after it. Before: the job ended with "stage: bundle failed: … after 4
// attempts" naming no record.
func TestPoisonRecordFailNamesIt(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := poisonTopics(t, ctx, bs, 40, 17)
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, beam.ParDo(s, poisonPanics, boundedRead(s, in)))
	_, took, err := runPoisonJob(t, ctx, bs, app, p)
	t.Logf("the job ended after %v: %v", took, err)
	if err == nil {
		t.Fatal("the job ended without an error, want the poison record's")
	}
	for _, w := range []string{
		fmt.Sprintf("the record at input topic %s, partition 0, offset 17 fails its bundle alone in its attempt", in),
		"--error_policy=fail",
		"poison record with key k17",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the job's error does not say %q", w)
		}
	}
	if !errors.Is(err, stage.ErrBundleFailed) {
		t.Errorf("the job's error is not stage.ErrBundleFailed: %v", err)
	}
	got := readValues(t, bs, out, -1, 30*time.Second)
	if w := valuesBut(17); strings.Join(got, "|") != w {
		t.Errorf("%s holds %q, want the records before the poison one, each once: %q", out, got, w)
	}
}

// TestPoisonRecordDeadLetterSource: under --error_policy=dead_letter, a
// DoFn fused into the Kafka source's stage that returns an error on one
// record of 40: the job completes, the sink holds the 39 others, each
// once, the dead-letter topic (the default, <application_id>.dead-letters,
// created by the runner) holds exactly that record, its key, value and
// header, with the headers saying the error, the stage, the input topic,
// partition and offset, the time and that the value is the record's;
// the stage's Stats count one dead letter.
func TestPoisonRecordDeadLetterSource(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := poisonTopics(t, ctx, bs, 40, 17)
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, beam.ParDo(s, poisonErrs, boundedRead(s, in)))
	before := time.Now().UTC()
	res, took, err := runPoisonJob(t, ctx, bs, app, p, func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
	t.Logf("the job ended after %v: %v", took, err)
	if err != nil {
		t.Fatalf("the job failed: %v", err)
	}
	if got, w := strings.Join(readValues(t, bs, out, -1, 30*time.Second), "|"), valuesBut(40, 17); got != w {
		t.Errorf("%s holds %q, want every record but the poison one, each once: %q", out, got, w)
	}
	dl := checkDeadLetter(t, bs, app+".dead-letters", "k17", poisonValue, "record", in, 17, before)
	if v := header(dl, "trace"); v != "t17" {
		t.Errorf("the dead letter's header trace = %q, want the input record's t17", v)
	}
	if dl.Headers[0].Key != "trace" {
		t.Errorf("the dead letter's first header is %s, want the input record's own first", dl.Headers[0].Key)
	}
	checkDeadLetterCount(t, res, header(dl, stage.DeadLetterHeaderStage))
}

// TestPoisonRecordDeadLetterAfterReshuffle: the same with the DoFn in the
// stage after a Reshuffle, which reads an internal topic (4 partitions:
// the record is among those of its partition's first attempt) and
// panics: the dead letter's value is the Beam element (header value
// "element"), its origin the internal topic's partition and offset; the
// sink holds the 39 others, each once.
func TestPoisonRecordDeadLetterAfterReshuffle(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := poisonTopics(t, ctx, bs, 40, 17)
	p, s := beam.NewPipelineWithRoot()
	read := boundedRead(s, in)
	kafkaio.Write(s, out, beam.ParDo(s, poisonPanics, beam.Reshuffle(s, read)))
	before := time.Now().UTC()
	res, took, err := runPoisonJob(t, ctx, bs, app, p, func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
	t.Logf("the job ended after %v: %v", took, err)
	if err != nil {
		t.Fatalf("the job failed: %v", err)
	}
	if got, w := strings.Join(readValues(t, bs, out, -1, 30*time.Second), "|"), valuesBut(40, 17); got != w {
		t.Errorf("%s holds %q, want every record but the poison one, each once: %q", out, got, w)
	}
	dl := checkDeadLetter(t, bs, app+".dead-letters", "", "", "element", "", -1, before)
	if !strings.Contains(string(dl.Value), poisonValue) || !strings.Contains(string(dl.Value), "k17") {
		t.Errorf("the dead letter's value %q does not hold the element (k17, %s)", dl.Value, poisonValue)
	}
	if topic := header(dl, stage.DeadLetterHeaderTopic); !strings.HasPrefix(topic, app) {
		t.Errorf("the dead letter's input topic %q is not one of the application's internal topics", topic)
	}
	checkDeadLetterCount(t, res, header(dl, stage.DeadLetterHeaderStage))
}

// TestPoisonPaneFailsUnderDeadLetter: a DoFn after a GroupByKey that
// panics on a pane (a group holding the poison value) has no input record
// to set aside: the pane is made due by the watermark's reports. Under
// --error_policy=dead_letter too the job ends with an error naming the
// reports' topic, partition and offset, and the dead-letter topic holds
// nothing.
func TestPoisonPaneFailsUnderDeadLetter(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := poisonTopics(t, ctx, bs, 40, 17)
	p, s := beam.NewPipelineWithRoot()
	read := boundedRead(s, in)
	kafkaio.Write(s, out, beam.ParDo(s, poisonGroup, beam.GroupByKey(s, read)))
	_, took, err := runPoisonJob(t, ctx, bs, app, p, func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
	t.Logf("the job ended after %v: %v", took, err)
	if err == nil {
		t.Fatal("the job ended without an error, want the pane's")
	}
	for _, w := range []string{"the watermark reports at input topic " + app, "made work due (a pane, a timer) whose bundle fails alone in its attempt", "poison pane of key k17"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the job's error does not say %q", w)
		}
	}
	recs, cerr := kafkaenv.Consume(context.Background(), bs, app+".dead-letters", -1, kafkaenv.ReadCommitted, 20*time.Second)
	if cerr != nil && !errors.Is(cerr, kafkaenv.ErrTimeout) {
		t.Fatal(cerr)
	}
	if len(recs) != 0 {
		t.Errorf("the dead-letter topic holds %d records, want none (a pane is not set aside)", len(recs))
	}
}

// checkDeadLetter reads topic to its end and checks it holds exactly one
// record, with key and value (unless empty), the DeadLetterHeader*
// headers: value kind, input topic (unless empty) and offset (unless
// negative), partition, a stage, an error message, a time from before
// on; it returns the record.
func checkDeadLetter(t *testing.T, bs, topic, key, value, kind, inTopic string, offset int64, before time.Time) kafkaenv.Record {
	t.Helper()
	return checkDeadLetterSaying(t, bs, topic, key, value, kind, inTopic, offset, before, "poison record with key k17")
}

// checkDeadLetterSaying is checkDeadLetter with the error message the
// dead letter's header must hold.
func checkDeadLetterSaying(t *testing.T, bs, topic, key, value, kind, inTopic string, offset int64, before time.Time, message string) kafkaenv.Record {
	t.Helper()
	recs, err := kafkaenv.Consume(context.Background(), bs, topic, -1, kafkaenv.ReadCommitted, 30*time.Second)
	if err != nil && !errors.Is(err, kafkaenv.ErrTimeout) {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("the dead-letter topic %s holds %d records, want exactly the poison one", topic, len(recs))
	}
	dl := recs[0]
	var hs []string
	for _, h := range dl.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	t.Logf("the dead letter: key %q value %q headers %s", dl.Key, dl.Value, strings.Join(hs, " "))
	if key != "" && string(dl.Key) != key || value != "" && string(dl.Value) != value {
		t.Errorf("the dead letter is (%q, %q), want (%q, %q)", dl.Key, dl.Value, key, value)
	}
	if v := header(dl, stage.DeadLetterHeaderValue); v != kind {
		t.Errorf("header %s = %q, want %q", stage.DeadLetterHeaderValue, v, kind)
	}
	if v := header(dl, stage.DeadLetterHeaderTopic); inTopic != "" && v != inTopic {
		t.Errorf("header %s = %q, want %q", stage.DeadLetterHeaderTopic, v, inTopic)
	}
	if v := header(dl, stage.DeadLetterHeaderOffset); offset >= 0 && v != strconv.FormatInt(offset, 10) {
		t.Errorf("header %s = %q, want %d", stage.DeadLetterHeaderOffset, v, offset)
	}
	if _, err := strconv.Atoi(header(dl, stage.DeadLetterHeaderPartition)); err != nil {
		t.Errorf("header %s: %v", stage.DeadLetterHeaderPartition, err)
	}
	if header(dl, stage.DeadLetterHeaderStage) == "" {
		t.Errorf("no header %s", stage.DeadLetterHeaderStage)
	}
	if m := header(dl, stage.DeadLetterHeaderMessage); !strings.Contains(m, message) {
		t.Errorf("header %s = %q, want the DoFn's error", stage.DeadLetterHeaderMessage, m)
	}
	if at, err := time.Parse(time.RFC3339Nano, header(dl, stage.DeadLetterHeaderTime)); err != nil || at.Before(before.Truncate(time.Millisecond)) || at.After(time.Now()) {
		t.Errorf("header %s = %q (%v), want a time since %v", stage.DeadLetterHeaderTime, header(dl, stage.DeadLetterHeaderTime), err, before)
	}
	return dl
}

// header is r's last header named key ("" if none).
func header(r kafkaenv.Record, key string) string {
	v := ""
	for _, h := range r.Headers {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}

// checkDeadLetterCount checks that stage name counted one dead letter and
// no other stage any (the job's Result: this instance's Stats).
func checkDeadLetterCount(t *testing.T, res *runner.Result, name string) {
	t.Helper()
	if res == nil {
		t.Fatal("no runner.Result")
	}
	for s, st := range res.Stats {
		want := uint64(0)
		if s == name {
			want = 1
		}
		if st.DeadLetters != want {
			t.Errorf("stage %s counted %d dead letters, want %d", s, st.DeadLetters, want)
		}
	}
}

// TestPoisonRecordDeadLetterCounted: a running job (an unbounded read)
// that set a record aside shows it on its /metrics,
// kafkastreams_dead_letter_records_total{stage} 1 for the stage that did,
// and on its live page's state (GET /state: the stage's local
// deadLetters 1), while the sink holds the 39 others.
func TestPoisonRecordDeadLetterCounted(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := poisonTopics(t, ctx, bs, 40, 17)
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, beam.ParDo(s, poisonErrs, kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(0))))
	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, app, p, func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
	defer func() {
		jcancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("the job did not stop within a minute of its cancel")
		}
	}()
	addr := servingAddr(t, addrOf)
	if got, w := strings.Join(readValues(t, bs, out, 39, time.Minute), "|"), valuesBut(40, 17); got != w {
		t.Fatalf("%s holds %q, want every record but the poison one, each once: %q", out, got, w)
	}
	dl := checkDeadLetter(t, bs, app+".dead-letters", "k17", poisonValue, "record", in, 17, time.Time{})
	name := header(dl, stage.DeadLetterHeaderStage)
	// The counts are the committed transaction's: the dead letter is
	// read_committed, so they are there.
	metric := fmt.Sprintf("kafkastreams_dead_letter_records_total{stage=%q} 1", name)
	if body := httpGet(t, "http://"+addr+"/metrics"); !strings.Contains(body, metric) {
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "kafkastreams_dead_letter_records_total") {
				lines = append(lines, l)
			}
		}
		t.Errorf("GET /metrics has no %q: %q", metric, lines)
	}
	var page struct {
		Stages []struct {
			Info  struct{ Name string }
			Local *struct{ DeadLetters uint64 }
		}
	}
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+addr+"/state")), &page); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, st := range page.Stages {
		if st.Info.Name == name {
			found = true
			if st.Local == nil || st.Local.DeadLetters != 1 {
				t.Errorf("the page's stage %s: local %+v, want deadLetters 1", name, st.Local)
			}
		}
	}
	if !found {
		t.Errorf("the page has no stage %s", name)
	}
}

// httpGet returns the body of GET url, failing t on an error or a status
// other than 200.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(body)
}

// poisonStatefulFn passes (k, v) on, counting each key's values in user
// state, and panics on the poison value (before touching the state).
type poisonStatefulFn struct {
	Seen state.Value[int]
}

func (f *poisonStatefulFn) ProcessElement(sp state.Provider, k, v []byte, emit func([]byte, []byte)) error {
	if string(v) == poisonValue {
		panic("poison record with key " + string(k))
	}
	n, _, err := f.Seen.Read(sp)
	if err != nil {
		return err
	}
	if err := f.Seen.Write(sp, n+1); err != nil {
		return err
	}
	emit(k, v)
	return nil
}

func init() {
	register.DoFn4x1[state.Provider, []byte, []byte, func([]byte, []byte), error](&poisonStatefulFn{})
}

// TestPoisonRecordDeadLetterStateful: the same with a stateful DoFn (its
// stage reads a keyed internal topic, its state in the task's store):
// the record is set aside, its element in the dead-letter topic, and the
// sink holds the 39 others, each once.
func TestPoisonRecordDeadLetterStateful(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := poisonTopics(t, ctx, bs, 40, 17)
	p, s := beam.NewPipelineWithRoot()
	read := boundedRead(s, in)
	kafkaio.Write(s, out, beam.ParDo(s, &poisonStatefulFn{Seen: state.MakeValueState[int]("seen")}, read))
	before := time.Now().UTC()
	res, took, err := runPoisonJob(t, ctx, bs, app, p, func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
	t.Logf("the job ended after %v: %v", took, err)
	if err != nil {
		t.Fatalf("the job failed: %v", err)
	}
	if got, w := strings.Join(readValues(t, bs, out, -1, 30*time.Second), "|"), valuesBut(40, 17); got != w {
		t.Errorf("%s holds %q, want every record but the poison one, each once: %q", out, got, w)
	}
	dl := checkDeadLetter(t, bs, app+".dead-letters", "", "", "element", "", -1, before)
	if !strings.Contains(string(dl.Value), poisonValue) || !strings.Contains(string(dl.Value), "k17") {
		t.Errorf("the dead letter's value %q does not hold the element (k17, %s)", dl.Value, poisonValue)
	}
	checkDeadLetterCount(t, res, header(dl, stage.DeadLetterHeaderStage))
}

// TestPoisonRecordDeadLetterManyRecords: 3000 records, the poison one at
// offset 1717, all in the stage's first attempts: the record is found by
// halving the failed attempt (Loop.isolateMost), not by a transaction per
// record, and set aside; the sink holds the 2999 others, each once. It
// logs how long the job took (the figure: one record at a time
// took a transaction each).
func TestPoisonRecordDeadLetterManyRecords(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n, at = 3000, 1717
	in, out, app := poisonTopics(t, ctx, bs, n, at)
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, beam.ParDo(s, poisonErrs, boundedRead(s, in)))
	res, took, err := runPoisonJob(t, ctx, bs, app, p, func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
	var commits uint64
	if res != nil {
		for _, st := range res.Stats {
			commits += st.Commits
		}
	}
	t.Logf("the job ended after %v, %d commits: %v", took, commits, err)
	if err != nil {
		t.Fatalf("the job failed: %v", err)
	}
	if got, w := strings.Join(readValues(t, bs, out, -1, 30*time.Second), "|"), valuesBut(n, at); got != w {
		t.Errorf("%s holds %d values, want every record but the poison one, each once (%d)", out, len(strings.Split(got, "|")), n-1)
	}
	recs, cerr := kafkaenv.Consume(context.Background(), bs, app+".dead-letters", -1, kafkaenv.ReadCommitted, 30*time.Second)
	if cerr != nil && !errors.Is(cerr, kafkaenv.ErrTimeout) {
		t.Fatal(cerr)
	}
	if len(recs) != 1 || header(recs[0], stage.DeadLetterHeaderOffset) != strconv.Itoa(at) {
		t.Fatalf("the dead-letter topic holds %d records (%v), want the one at offset %d", len(recs), recs, at)
	}
	checkDeadLetterCount(t, res, header(recs[0], stage.DeadLetterHeaderStage))
}
