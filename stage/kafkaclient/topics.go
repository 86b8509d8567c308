package kafkaclient

import "strconv"

// The names of an application's internal topics and transactional ids, all
// prefixed by its application id (DESIGN.md: the ACLs an application needs
// are prefixed on it). The data topics between stages and the side input
// topics are named by the plan (runner/plan.Stage.InputTopic,
// plan.SideInput.Topic).

// PlanTopic is the compacted one-partition topic holding an application's
// recorded plan, "<application_id>-plan", written in one transaction by the
// first instance (transactional.id the same name).
func PlanTopic(applicationID string) string { return applicationID + "-plan" }

// ReportTopic is the name of an application's report topic,
// "<application_id>-watermarks": every task writes its WatermarkReport
// there on every commit, keyed "<stage>/<partition>", in the same
// transaction as its data.
func ReportTopic(applicationID string) string { return applicationID + "-watermarks" }

// MetricsTopic is an application's metrics topic,
// "<application_id>-metrics", one partition. Key: the stage name; value: a
// Beam fnexecution_v1.ProcessBundleResponse holding either a bundle's
// aggregated monitoring infos or, once per committed transaction, one
// URNStageCommit info with the transaction's counts (runner's
// commitMetricsRecords), which cmd/watermarkmgr's page sums
// (watermarkmgr/service.AppCounts).
func MetricsTopic(applicationID string) string { return applicationID + "-metrics" }

// ControlTopic is an application's control topic (one partition),
// "<application_id>-control": drain requests.
func ControlTopic(applicationID string) string { return applicationID + "-control" }

// ChangelogTopic is the changelog topic of a stage's state:
// "<application_id>-<stage>-changelog", compacted, with as many partitions
// as the stage's input topic (partition p belongs to task p).
func ChangelogTopic(applicationID, stage string) string {
	return applicationID + "-" + stage + "-changelog"
}

// TransactionalID is the transactional.id of stage stageName's producer in
// instance instanceID of application applicationID:
// "<application_id>-<stage>-<instance id>" (stage.Config.InstanceID).
func TransactionalID(applicationID, stageName, instanceID string) string {
	return applicationID + "-" + stageName + "-" + instanceID
}

// DataTopicConfig returns the settings of an application's internal data
// topics (the input topics of the stages that read no user's topic, and
// the side input topics), set when the runner creates one and on one made
// before with others, as Kafka Streams creates its repartition topics
// (RepartitionTopicConfig):
//
//   - retention.ms -1 and retention.bytes -1: no deletion by time or size.
//     The broker's default retention (7 days, or what the cluster sets)
//     deleted records of an application stopped longer, or of a backlog
//     larger than retention.bytes, before their stage had read them. A
//     stage's input topic is purged instead: the records its consumer
//     group committed past are deleted (DeleteRecords,
//     stage.Config.PurgeInterval), as Kafka Streams purges repartition
//     topics after commits.
//   - segment.bytes InternalTopicMaxMessageBytes (64 MiB; Kafka Streams:
//     50 MB): the broker frees the disk of purged records a segment at a
//     time, once the whole segment is below the log start (at its
//     log.retention.check.interval.ms, 5 min by default), and never the
//     active segment's; under the broker's default segment.bytes, 1 GiB,
//     a partition held up to 1 GiB of purged records. Not smaller: the
//     broker refuses a batch larger than a segment, and these topics take
//     batches of InternalTopicMaxMessageBytes.
//
// A new map each call.
func DataTopicConfig() map[string]string {
	return map[string]string{
		"retention.ms":    "-1",
		"retention.bytes": "-1",
		"segment.bytes":   strconv.Itoa(InternalTopicMaxMessageBytes),
	}
}

// KeptTopicConfig returns the settings of the internal topics whose every
// record matters and whose readers read them from their start: the
// metrics topic (MetricsTopic: the application-wide totals are the sum of
// every committed transaction's record; a record the broker deleted would
// be missing from them, after the broker's default 7 days) and the
// control topic (ControlTopic: a drain request must reach an instance
// started at any later time; few records). cleanup.policy delete (not
// compact: each metrics record is a delta under its stage's key, and a
// compacted drain key could be replaced), retention.ms -1 and
// retention.bytes -1: never deleted by time or size. Set when the runner
// creates one and on one made before with others. The metrics topic
// grows by one small record (the counts, the stage and instance names, a
// URN, a header) per committed transaction of each stage, never purged. A new map each call.
func KeptTopicConfig() map[string]string {
	return map[string]string{
		"cleanup.policy":  "delete",
		"retention.ms":    "-1",
		"retention.bytes": "-1",
	}
}

// CompactedTopicConfig returns the settings of the internal topics where a
// key's last record is all that matters: the report topic (a task's last
// report, keyed "<stage>/<partition>"; its watermark only grows), the plan
// topic and the state changelogs, as Kafka Streams' changelog topics:
// cleanup.policy compact alone (compact,delete would also delete records
// by the broker's retention, a plan or a store's key among them). A new
// map each call.
func CompactedTopicConfig() map[string]string {
	return map[string]string{"cleanup.policy": "compact"}
}

// DeadLetterTopic is the default dead-letter topic of an application's
// stages under --error_policy=dead_letter, "<application_id>.dead-letters":
// the input records whose bundle fails every time (stage.ErrorPolicy).
// Unlike the topics above it is the user's to read: the runner creates it
// if it is missing and never deletes or purges it.
func DeadLetterTopic(applicationID string) string { return applicationID + ".dead-letters" }
