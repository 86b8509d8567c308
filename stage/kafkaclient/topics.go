package kafkaclient

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

// DeadLetterTopic is the default dead-letter topic of an application's
// stages under --error_policy=dead_letter, "<application_id>.dead-letters":
// the input records whose bundle fails every time (stage.ErrorPolicy).
// Unlike the topics above it is the user's to read: the runner creates it
// if it is missing and never deletes or purges it.
func DeadLetterTopic(applicationID string) string { return applicationID + ".dead-letters" }
