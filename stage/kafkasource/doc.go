// Package kafkasource holds the pure core of a Kafka source's event time:
// the watermark generator of one source partition and the alignment of a
// group of them (seed 002, "Making the watermark move"; FLIP-217 for
// alignment).
//
// # What lives here
//
//   - Strategy (watermark.go): a source's watermark strategy — the kind
//     (BoundedOutOfOrderness, Monotonous, NoWatermarks, LimitedDelay), the
//     out-of-orderness bound (LimitedDelay's delay), the idleness timeout
//     and the alignment group and drift — and
//     Strategy.Validate, which checks the fields against each other.
//   - Partition (watermark.go): the generator of ONE source partition. The
//     caller feeds it every record's event time with Observe and reads its
//     watermark (WatermarkAt(now, caughtUp); Watermark for the kinds that
//     do not read the clock; WatermarkWith, what it would be after one
//     more record), whether it is Idle, and when it will be
//     (IdleAt, for a wake-up). View is the per-partition row of the operator's
//     GET /watermarks.
//   - Reading (logend.go): where one partition's consumer stands against
//     the end of the partition's log — its partition EOFs, its records,
//     the broker's ListOffsets answers (LogEnd: high watermark and last
//     stable offset) — and whether the broker holds nothing past its
//     position that will become readable (Quiet), or what it holds
//     (Unread, Because: the operator's "holds records it cannot read yet
//     because …"). Issue 21, section 2.
//   - Align (align.go): for the partitions of one alignment group, the group
//     minimum over the partitions that count, each one's drift from it, and
//     which partitions are ahead by more than their MaxDrift and must be held
//     (paused) by the caller.
//
// The minimum over all of a stage's source partitions (the stage's
// watermark report) is not here: the task reports each partition's
// watermark and idle flag, and watermarkmgr takes the minimum over the
// non-idle ones.
//
// Tests: testdata/*.txt are datadriven scenarios (datadriven_test.go;
// go test -rewrite regenerates their expected output), testdata/logend/*.txt
// Reading's (logend_test.go; the Head's side is in sourcehead); reference_test.go
// checks Partition and Align against a dumb big-integer model on random
// record sequences; fuzz_test.go holds FuzzPartition against the same
// model.
//
// The shell is subpackage sourcehead: Head, the step.Head (and
// step.LogEnds) of a Kafka source stage, built on this core.
//
// # What it may import
//
// Only the standard library and Beam's mtime package: no cgo, nothing of
// stage, so that runner/kafkaio, the API a user's binary links (on Prism
// too), uses Strategy and Partition without linking the stage loop or a
// Kafka client (stage/archtest checks kafkaio's
// side). It does no I/O, starts no goroutine and reads no clock:
// wall-clock time arrives as a now time.Time argument, from the caller's
// single clock read per poll. Nothing of Kafka: the caller maps a Kafka
// record's timestamp to an event time (and decides what a record without
// one, timestamp -1, means). A Partition is not safe for concurrent use;
// the task that consumes the partition owns it.
//
// # Units
//
// Event times and watermarks are Beam mtime.Time: milliseconds since the
// Unix epoch, within [mtime.MinTimestamp, mtime.MaxTimestamp]. Durations
// (bound, idleness, drift) are time.Duration; wall-clock instants are
// time.Time.
//
// # Invariants
//
// Each is tested directly; the doc comment of the function that keeps it
// states it as a formula.
//
//  1. Watermark: before any record mtime.MinTimestamp; after records it is
//     max(event time) − MaxOutOfOrderness (bounded), max(event time) − 1 ms
//     (monotonous) or mtime.MinTimestamp (no watermarks), clamped to
//     [mtime.MinTimestamp, mtime.MaxTimestamp]. It never decreases, whatever
//     the order of the records. LimitedDelay (Beam Java KafkaIO's
//     CustomTimestampPolicyWithLimitedDelay, delay d) reads the clock:
//     WatermarkAt is min(max event time, now) − d, and now − d once the
//     partition is caught up and its max event time is more than d behind
//     now (an empty caught-up partition too); it never idles out. It may
//     drop when the partition stops being caught up: the caller keeps the
//     largest it reported (the task's output watermark, the SDF estimator).
//  2. Idleness is measured from the partition's last activity: its
//     assignment or its latest record, whichever is later. A partition that
//     never receives a record idles out after the timeout like any other
//     (seed 002: the liveness clock is seeded at registration). A record
//     makes the partition non-idle at once. Idleness 0 switches it off.
//     The Head (sourcehead) adds what the pure Partition cannot see: it
//     reports a partition idle only once its consumer has reached the
//     partition's end after its latest record, so a partition with a
//     backlog never leaves the minimum, and never while the consumer cannot
//     fetch it (its leader is gone: step.Reachability, from the
//     consumer's statistics); once it can again, its idleness clock starts
//     afresh. A broker failover is not a quiet partition: the records its
//     producers hold back meanwhile come later with their event times.
//     Nor is a partition whose log holds records its consumer was not
//     handed (issue 21, section 2): librdkafka's EOF says only that the
//     consumer got all it could get, so a partition is idle only once a
//     ListOffsets answer asked at or after its idleness deadline shows the
//     high watermark at or below its EOF (Reading.Quiet): Idle(p) ⇔
//     Partition.Idle(now) ∧ ¬held ∧ ¬unreachable ∧ CaughtUp ∧
//     answer.Asked ≥ IdleAt ∧ answer.High ≤ eof. The ways a partition holds such records, each told apart from a
//     quiet partition by the answer: (a) a transaction open on it — the
//     source reads read_committed, so its fetch and its EOF stop at the
//     last stable offset while the high watermark is past it (Stable ≤
//     eof < High); (b) its fetch paused after an EOF (alignment holds it:
//     never idle; side inputs hold a task back: the loop seeks it back,
//     Rewound, and it is not caught up until it reads to its end again);
//     (c) records written after its last EOF that a fetch has not returned
//     yet (a fetch waiting for fetch.min.bytes up to fetch.wait.max.ms, or
//     just in flight at the deadline); (d) a fetch stopped or backing off
//     after an error while the leader is up (eof < High). An idle partition
//     that a later answer shows unread records for (a transaction opened
//     on it) stops being idle at once. The loop asks (step.LogEnds) at
//     most every step.LogEndInterval, so a partition goes idle up to
//     0.5 s plus a round trip after its idleness timeout; a partition whose
//     answer does not come (the broker cannot be asked) stays non-idle.
//  3. Alignment: the group minimum is the min over the members that have
//     had a record and are not idle; a member is held iff its watermark is
//     more than its MaxDrift ahead of that minimum. With no member counting,
//     nothing is held.
//  4. Errors: an invalid strategy or alignment group returns an error
//     wrapping one of the Err* sentinels; nothing panics on input from
//     outside the process (extreme timestamps are clamped, not refused).
package kafkasource
