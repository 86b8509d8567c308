package integration

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
)

// aclRow is one row of the README's table of the ACLs an application
// needs (README, "Security: what an application needs and trusts"): the
// operations a principal is allowed on one resource pattern.
type aclRow struct {
	resource kafka.ResourceType
	// name is the pattern; "{app}", "{source}" and "{sink}" stand for the
	// application id and the user's topics.
	name    string
	pattern kafka.ResourcePatternType
	ops     []kafka.ACLOperation
}

// resourceTransactionalID is Kafka's TRANSACTIONAL_ID resource type (5 in
// the protocol and in librdkafka's rd_kafka_ResourceType_t), which
// confluent-kafka-go names no constant for.
const resourceTransactionalID = kafka.ResourceType(5)

// readmeACLs is the README's table, row for row: what
// TestApplicationRunsUnderTheREADMEACLs grants and nothing more.
var readmeACLs = []aclRow{
	{kafka.ResourceTopic, "{app}", kafka.ResourcePatternTypePrefixed, []kafka.ACLOperation{
		kafka.ACLOperationCreate, kafka.ACLOperationDescribe, kafka.ACLOperationRead, kafka.ACLOperationWrite,
		kafka.ACLOperationDescribeConfigs, kafka.ACLOperationAlterConfigs, kafka.ACLOperationDelete}},
	{kafka.ResourceGroup, "{app}", kafka.ResourcePatternTypePrefixed, []kafka.ACLOperation{kafka.ACLOperationRead, kafka.ACLOperationDescribe}},
	{resourceTransactionalID, "{app}", kafka.ResourcePatternTypePrefixed, []kafka.ACLOperation{kafka.ACLOperationWrite, kafka.ACLOperationDescribe}},
	{kafka.ResourceTopic, "{source}", kafka.ResourcePatternTypeLiteral, []kafka.ACLOperation{kafka.ACLOperationRead, kafka.ACLOperationDescribe}},
	{kafka.ResourceTopic, "{sink}", kafka.ResourcePatternTypeLiteral, []kafka.ACLOperation{kafka.ACLOperationWrite, kafka.ACLOperationDescribe, kafka.ACLOperationDescribeConfigs}},
}

// grantACLs grants principal the rows with names expanded by names, as
// the operator (the broker's PLAINTEXT listener, a super user).
func grantACLs(ctx context.Context, t *testing.T, admin *kafka.AdminClient, principal string, rows []aclRow, names map[string][]string) {
	t.Helper()
	var bs []kafka.ACLBinding
	for _, r := range rows {
		for _, name := range names[r.name] {
			for _, op := range r.ops {
				bs = append(bs, kafka.ACLBinding{Type: r.resource, Name: name, ResourcePatternType: r.pattern,
					Principal: principal, Host: "*", Operation: op, PermissionType: kafka.ACLPermissionTypeAllow})
			}
		}
	}
	res, err := admin.CreateACLs(ctx, bs)
	if err != nil {
		t.Fatalf("CreateACLs: %v", err)
	}
	for i, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("CreateACLs %+v: %v", bs[i], r.Error)
		}
	}
}

// TestApplicationRunsUnderTheREADMEACLs (issue 23, the ACL table): on a
// broker that enforces ACLs (SASL_PLAINTEXT with SCRAM-SHA-256,
// StandardAuthorizer, no access without an ACL), a job with a Kafka
// source, a GroupByKey (an internal topic and a changelog) and two sinks
// runs as User:app under exactly the README's ACLs and writes exact
// output (and, under the table less its TransactionalId row, stops with
// the broker's refusal and writes nothing); then User:other, with no ACL
// but on groups of its own, can neither read nor write any of the
// application's topics (TOPIC_AUTHORIZATION_FAILED) nor join its stage's
// group (GROUP_AUTHORIZATION_FAILED).
func TestApplicationRunsUnderTheREADMEACLs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts a broker of its own (SASL/SCRAM, StandardAuthorizer, a java process); run it without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const appPassword, otherPassword = "app-secret", "other-secret"
	b, err := kafkaenv.Start(ctx, kafkaenv.Options{Mode: kafkaenv.ModeProcess, Logf: t.Logf,
		SCRAM: &kafkaenv.SCRAM{Users: map[string]string{"app": appPassword, "other": otherPassword}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	t.Logf("broker: %s; SASL_PLAINTEXT at %s", b.Describe(), b.SASLBootstrapServers())
	opBS, appBS := b.BootstrapServers(), b.SASLBootstrapServers()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": opBS})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	app, in, out, counts := "aclapp", "acl-in", "acl-out", "acl-counts"
	if err := kafkaenv.CreateTopics(ctx, opBS, userTopic(in, 2), userTopic(out, 2), userTopic(counts, 1)); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_040_000 // a minute boundary
	wantOut, windowCounts := map[string]bool{}, map[string]int{}
	for p := int32(0); p < 2; p++ {
		var recs []kioRec
		for i := 0; i < 50; i++ {
			key, value, ts := fmt.Sprintf("k%d", i%3), fmt.Sprintf("p%d-%d", p, i), int64(base+i*2000)
			recs = append(recs, kioRec{key: []byte(key), value: []byte(value), ts: ts})
			wantOut["B:"+value] = true
			start := ts - (ts-base)%60_000
			windowCounts[fmt.Sprintf("%s [%d,%d)", key, start, start+60_000)]++
		}
		produceAt(t, opBS, in, p, recs...)
	}
	run := func(app string) error {
		jctx, jcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer jcancel()
		_, err := beam.Run(runner.WithOptions(jctx, jobOptions(appBS, app, func(o *runner.Options) {
			o.KafkaProperties = kafkaenv.ClientProperties("app", appPassword)
			o.StateDir = t.TempDir()
			o.PurgeInterval = 100 * time.Millisecond // the purge runs under the table too
			o.StandbyReplicas = 1                    // the standby followers' DescribeConsumerGroups too
		})), runner.Name, kioEOSPipeline(in, out, counts, 0))
		return err
	}
	// The table less its TransactionalId row (under another application
	// id, "acldenied": not of the prefix "aclapp"): the job stops, naming
	// the refusal, and writes nothing.
	var noTxn []aclRow
	for _, r := range readmeACLs {
		if r.resource != resourceTransactionalID {
			noTxn = append(noTxn, r)
		}
	}
	grantACLs(ctx, t, admin, "User:app", noTxn, map[string][]string{"{app}": {"acldenied"}, "{source}": {in}, "{sink}": {out, counts}})
	if err := run("acldenied"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authoriz") {
		t.Fatalf("the job without the TransactionalId ACLs: %v, want an authorization failure", err)
	} else {
		t.Logf("the job without the TransactionalId ACLs stopped: %v", err)
	}
	if got := readValues(t, opBS, out, 0, 10*time.Second); len(got) != 0 {
		t.Fatalf("the job without the TransactionalId ACLs wrote %d records to %s", len(got), out)
	}

	// The job, as User:app on the SASL listener, under the whole table.
	grantACLs(ctx, t, admin, "User:app", readmeACLs, map[string][]string{"{app}": {app}, "{source}": {in}, "{sink}": {out, counts}})
	began := time.Now()
	if err := run(app); err != nil {
		t.Fatalf("the job under the README's ACLs: %v", err)
	}
	t.Logf("the job ran in %v under the README's ACLs", time.Since(began).Round(time.Millisecond))
	// The standby followers describe the stage groups (--standby_replicas):
	// the Group row's Describe lets User:app do it.
	describeGroupsAs(ctx, t, admin, appBS, kafkaenv.ClientProperties("app", appPassword), app)
	gotOut := readValues(t, opBS, out, 0, 30*time.Second)
	if len(gotOut) != len(wantOut) {
		t.Fatalf("%s holds %d records, want %d", out, len(gotOut), len(wantOut))
	}
	for _, v := range gotOut {
		if !wantOut[v] {
			t.Fatalf("%s holds %q", out, v)
		}
	}
	var wantC []string
	for w, c := range windowCounts {
		wantC = append(wantC, fmt.Sprintf("%s %d", w, c))
	}
	sort.Strings(wantC)
	if gotC := readValues(t, opBS, counts, 0, 30*time.Second); strings.Join(gotC, "\n") != strings.Join(wantC, "\n") {
		t.Fatalf("%s:\n%s\nwant\n%s", counts, strings.Join(gotC, "\n"), strings.Join(wantC, "\n"))
	}

	// User:other: no ACL, nothing of the application's.
	md, err := admin.GetMetadata(nil, true, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var internal []string
	for name := range md.Topics {
		if strings.HasPrefix(name, app) {
			internal = append(internal, name)
		}
	}
	sort.Strings(internal)
	if len(internal) < 3 {
		t.Fatalf("internal topics of %s: %v", app, internal)
	}
	t.Logf("internal topics of %s: %v", app, internal)
	// The purge ran under the table (Topic Delete): a stage's input topic
	// that it purges starts past offset 0 on some partition.
	purged := false
	for topic := range dataTopics(t, admin, app) {
		for p, low := range offsetsOf(t, ctx, admin, topic, len(md.Topics[topic].Partitions), kafka.EarliestOffsetSpec) {
			if low > 0 {
				purged = true
				t.Logf("%s partition %d purged up to %d", topic, p, low)
			}
		}
	}
	if !purged {
		t.Errorf("no internal data topic of %s was purged (--purge_interval 100ms): DeleteRecords refused under the table?", app)
	}
	// User:other may use groups of its own ("other…"), so that what
	// refuses its reads is the topic's ACL, not its group's.
	grantACLs(ctx, t, admin, "User:other", []aclRow{{kafka.ResourceGroup, "other", kafka.ResourcePatternTypePrefixed, []kafka.ACLOperation{kafka.ACLOperationRead, kafka.ACLOperationDescribe}}}, map[string][]string{"other": {"other"}})
	other := kafkaenv.ClientProperties("other", otherPassword)
	for _, topic := range internal {
		if err := otherReads(appBS, other, topic); !errors.Is(err, errDenied) || !strings.Contains(err.Error(), "Topic authorization failed") {
			t.Errorf("User:other reading %s: %v, want TOPIC_AUTHORIZATION_FAILED", topic, err)
		}
		if err := otherWrites(appBS, other, topic); !errors.Is(err, errDenied) || !strings.Contains(err.Error(), "Topic authorization failed") {
			t.Errorf("User:other writing %s: %v, want TOPIC_AUTHORIZATION_FAILED", topic, err)
		}
	}
	// Nor join the application's groups: the GroupByKey stage's consumer
	// group "<app>.<stage>", its input topic "<app>-<stage>".
	for _, topic := range internal {
		if !strings.HasPrefix(topic, app+"-s") || strings.HasSuffix(topic, "-changelog") {
			continue
		}
		group := app + "." + strings.TrimPrefix(topic, app+"-")
		if err := otherJoins(appBS, other, group, topic); !errors.Is(err, errDenied) || !strings.Contains(err.Error(), "Group authorization failed") {
			t.Errorf("User:other joining group %s: %v, want GROUP_AUTHORIZATION_FAILED", group, err)
		}
	}
}

// errDenied wraps an authorization failure the broker answered.
var errDenied = errors.New("denied")

// denied wraps err in errDenied when it is an authorization failure.
func denied(err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke.Code() {
		case kafka.ErrTopicAuthorizationFailed, kafka.ErrGroupAuthorizationFailed, kafka.ErrTransactionalIDAuthorizationFailed, kafka.ErrClusterAuthorizationFailed:
			return fmt.Errorf("%w: %v", errDenied, err)
		}
	}
	return err
}

// otherReads subscribes to topic with props in a group of its own
// ("other-reader", which User:other may use), and returns the first error
// the consumer gets within 20 s (nil if it read a record). (An assigned
// partition of a topic an ACL hides is only never fetched: librdkafka
// reports the refusal for a subscribed topic.)
func otherReads(bs string, props map[string]string, topic string) error {
	return otherJoins(bs, props, "other-reader", topic)
}

// otherJoins subscribes to topic with props as a member of group, and
// returns the first error the consumer gets within 20 s (nil if it read
// a record).
func otherJoins(bs string, props map[string]string, group, topic string) error {
	c, err := otherConsumer(bs, props, group)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Subscribe(topic, nil); err != nil {
		return denied(err)
	}
	return firstEvent(c)
}

// otherConsumer is a read_committed consumer with props in group.
func otherConsumer(bs string, props map[string]string, group string) (*kafka.Consumer, error) {
	cm := kafka.ConfigMap{"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
	for k, v := range props {
		cm[k] = v
	}
	return kafka.NewConsumer(&cm)
}

// firstEvent returns the first error c gets within 20 s (denied when an
// ACL refused), or nil at its first record.
func firstEvent(c *kafka.Consumer) error {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		switch e := c.Poll(200).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				return denied(e.TopicPartition.Error)
			}
			return nil
		case kafka.Error:
			return denied(e)
		}
	}
	return errors.New("no record and no error in 20 s")
}

// otherWrites writes a record to partition 0 of topic with props and
// returns its delivery error (nil if it was written).
func otherWrites(bs string, props map[string]string, topic string) error {
	cm := kafka.ConfigMap{"bootstrap.servers": bs, "message.timeout.ms": 15000}
	for k, v := range props {
		cm[k] = v
	}
	pr, err := kafka.NewProducer(&cm)
	if err != nil {
		return err
	}
	defer pr.Close()
	ch := make(chan kafka.Event, 1)
	if err := pr.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte("intruder"), Value: []byte("intruder")}, ch); err != nil {
		return denied(err)
	}
	select {
	case e := <-ch:
		return denied(e.(*kafka.Message).TopicPartition.Error)
	case <-time.After(20 * time.Second):
		return errors.New("no delivery report in 20 s")
	}
}

// describeGroupsAs describes, as the client of props on bs, every consumer
// group of app's stages (listed through admin, the operator's), failing
// the test on a refusal.
func describeGroupsAs(ctx context.Context, t *testing.T, admin *kafka.AdminClient, bs string, props map[string]string, app string) {
	t.Helper()
	ls, err := admin.ListConsumerGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var groups []string
	for _, g := range ls.Valid {
		if strings.HasPrefix(g.GroupID, app+".s") {
			groups = append(groups, g.GroupID)
		}
	}
	if len(groups) == 0 {
		t.Fatalf("no consumer group of %s's stages", app)
	}
	cm := kafka.ConfigMap{"bootstrap.servers": bs}
	for k, v := range props {
		cm[k] = v
	}
	as, err := kafka.NewAdminClient(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()
	res, err := as.DescribeConsumerGroups(ctx, groups)
	if err != nil {
		t.Fatalf("DescribeConsumerGroups of %v under the README's ACLs: %v", groups, err)
	}
	for _, d := range res.ConsumerGroupDescriptions {
		if d.Error.Code() != kafka.ErrNoError {
			t.Fatalf("DescribeConsumerGroups of %s under the README's ACLs: %v", d.GroupID, d.Error)
		}
	}
	t.Logf("described %d stage groups under the README's ACLs (the standby followers' placement)", len(groups))
}
