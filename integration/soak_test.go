package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
)

// The soak (issue 23, "a Kafka system test of our own"): what Kafka
// Streams' own system tests do (tests/kafkatest/tests/streams/
// streams_eos_test.py and streams_broker_bounce_test.py: three processors
// on three brokers, bounced and killed -9 again and again, then a
// verifier), on this runner. The scenario job (scenariojob_test.go) runs
// on a 3-node KRaft cluster (kafkaenv.StartCluster: every node broker and
// controller; replication factor 3 and min.insync.replicas 2 for every
// topic, the runner's internal ones included: it creates them with the
// broker's default.replication.factor, which the test checks) under the
// scenario producer's steady load, while, at random from a seed:
//
//   - an instance is SIGKILLed, SIGTERMed (a clean stop expected), or
//     SIGSTOPped and, after a pause longer than the session timeout (6 s)
//     and the transaction timeout (10 s), SIGCONTed: its transaction
//     aborted by the broker, its tasks moved, it is fenced and must
//     rejoin; 1-3 instances run, replacements started (in a fresh or a
//     vacant --state_dir);
//   - a broker node is SIGTERMed (Kafka's controlled shutdown) or
//     SIGKILLed and restarted after a while; at most one node is down at
//     a time, and the next node fault waits until every partition of
//     every topic is back to 3 in-sync replicas, so min ISR 2 always
//     holds. The first node fault is the active controller's (the KRaft
//     quorum's leader, kafkaenv.Cluster.Controller); later ones pick it
//     one time in three.
//
// At the end the load stops, the job catches up, and the output is
// checked exactly (checkScenarioOutput: every key's window once, its sum
// and running total). The test fails unless faults landed: an instance
// fault on an instance that held tasks, a node fault on a node that led
// partitions of the job's topics; a run of soakFullMinutes or more needs
// each kind (SIGKILL, SIGSTOP, SIGTERM of an instance landed; a node
// SIGKILL, a node SIGTERM, the controller among them). Figures on lines
// "figures soak: …".
//
// make test runs the short version (soakShort of faults);
// KAFKASTREAMS_SOAK_MINUTES=<minutes> (make soak MINUTES=N) a long one.
// The seed is logged; KAFKASTREAMS_SOAK_SEED=<seed> replays its schedule
// (the choices; a loaded machine's timing differs, and a node fault that
// must wait for the ISRs takes an instance fault's turn).
const (
	envSoakMinutes = "KAFKASTREAMS_SOAK_MINUTES"
	envSoakSeed    = "KAFKASTREAMS_SOAK_SEED"
)

const (
	// soakShort is the short version's length of faults.
	soakShort = 60 * time.Second
	// soakFullMinutes: a run at least this long must have had every kind
	// of fault land.
	soakFullMinutes = 10
	// soakPauseMin and soakPauseMax bound a SIGSTOP's pause: longer than
	// the stage consumers' session timeout (runner --session_timeout, 6 s)
	// and the transaction timeout (kafkaclient.TransactionTimeout, 10 s).
	soakPauseMin = 12 * time.Second
	soakPauseMax = 18 * time.Second
	// soakNodeGrace bounds a node's controlled shutdown after SIGTERM.
	soakNodeGrace = 2 * time.Minute
	// soakWoken is how long after its SIGCONT a paused instance's
	// revoked tasks are counted (its figures: what being fenced cost it).
	soakWoken = 30 * time.Second
)

// soakKind is what a soak event did.
type soakKind string

const (
	soakStart    soakKind = "start"
	soakKill     soakKind = "SIGKILL"
	soakTerm     soakKind = "SIGTERM"
	soakStop     soakKind = "SIGSTOP"
	soakNodeKill soakKind = "node SIGKILL"
	soakNodeTerm soakKind = "node SIGTERM"
)

// soakEvent is one event of the soak.
type soakEvent struct {
	kind soakKind
	at   time.Time
	// An instance's: kid, the tasks it held at the signal (from its log),
	// how long after the signal it had exited, whether a SIGKILL killed
	// it, a start's slot; for SIGSTOP, the pause and where its log stood
	// at the SIGCONT (what it logged after is its recovery).
	kid    *scKid
	tasks  []scTask
	exited time.Duration
	died   bool
	slot   string
	pause  time.Duration
	cont   time.Time
	logAt  int
	// A node's: see soakNode.
	node *soakNode
}

func (e soakEvent) instanceFault() bool {
	return e.kind == soakKill || e.kind == soakTerm || e.kind == soakStop
}

// soakNode is a node fault, written by its goroutine (under mu) while the
// soak goes on.
type soakNode struct {
	id         int
	controller bool // the active controller at the fault
	led        int  // partitions of the job's topics it led at the fault
	mu         sync.Mutex
	clean      error         // a SIGTERM's: nil when it exited within soakNodeGrace
	stopped    time.Duration // the signal → the process gone
	moved      time.Duration // the signal → none of the job's partitions led by it
	newCtl     int           // after a controller's fault: the new controller
	ctlMoved   time.Duration // and when it was seen
	down       time.Duration // the signal → Restart called
	ready      time.Duration // Restart → it answers
	inSync     time.Duration // Restart → every partition of every topic 3 in sync
	err        error         // what went wrong (the test fails on it)
	done       bool
}

func (n *soakNode) set(f func(n *soakNode)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

func (n *soakNode) finished() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.done
}

// TestSoak is the soak (see the top of this file): the short version in
// make test, KAFKASTREAMS_SOAK_MINUTES for a long one (make soak).
func TestSoak(t *testing.T) {
	needBroker(t) // -short skips it, as every broker test
	length := soakShort
	if s := os.Getenv(envSoakMinutes); s != "" {
		m, err := strconv.ParseFloat(s, 64)
		if err != nil || m <= 0 {
			t.Fatalf("%s=%q: want a positive number of minutes", envSoakMinutes, s)
		}
		length = time.Duration(m * float64(time.Minute))
	}
	full := length >= soakFullMinutes*time.Minute
	seed := time.Now().UnixNano()
	if s := os.Getenv(envSoakSeed); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSoakSeed, s, err)
		}
		seed = v
	}
	t.Logf("soak seed %d (replay with %s=%d), %v of faults", seed, envSoakSeed, seed, length)
	rng := rand.New(rand.NewSource(seed))
	begun := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	// Local JVMs: a node is restarted on its own log directory
	// (kafkaenv.Cluster.Restart), which the image's containers cannot.
	c, err := kafkaenv.StartCluster(ctx, kafkaenv.Options{Mode: kafkaenv.ModeProcess, Logf: t.Logf}, 3)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	t.Logf("cluster ready in %v: %s", time.Since(begun).Round(time.Millisecond), c.Describe())
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": c.BootstrapServers()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)

	r := newScenarioOn(t, "soak", c.Broker())
	// A fault just before the end leaves tasks for the session timeout,
	// a restore, a node's restart: more than a scenario's catch-up.
	r.catchUp = 5 * time.Minute
	initial := chaosMinLive + rng.Intn(chaosMaxLive-chaosMinLive+1)

	var (
		dirs    []*chaosSlotDir
		events  []soakEvent
		live    []*scKid
		watched *scKid
		nodes   []*soakNode // node faults, in order
	)
	start := func(d *chaosSlotDir, slot string) {
		k := r.startKid(d.dir)
		d.holder = k
		live = append(live, k)
		events = append(events, soakEvent{kind: soakStart, at: k.started, kid: k, slot: slot})
	}
	fresh := func() *chaosSlotDir {
		d := &chaosSlotDir{dir: t.TempDir()}
		dirs = append(dirs, d)
		return d
	}
	start(fresh(), chaosFresh)
	r.begin(live[0])
	watched = live[0]
	for i := 1; i < initial; i++ {
		start(fresh(), chaosFresh)
	}
	soakCheckReplication(t, admin, r, c.Replication, c.MinISR)

	// A node fault runs until its node is back and in sync; one that
	// failed (its node may still be down) keeps every later one off, so
	// that two nodes are never down at once.
	nodeBusy := func() bool {
		if len(nodes) == 0 {
			return false
		}
		n := nodes[len(nodes)-1]
		n.mu.Lock()
		defer n.mu.Unlock()
		return !n.done || n.err != nil
	}
	faultsBegan := time.Now()
	t.Logf("%s: %d instances at first; faults for %v", r.since(), initial, length)
	for {
		wait := time.Duration(2000+rng.Intn(10_001)) * time.Millisecond // 2-12 s
		if !full {
			wait = time.Duration(2000+rng.Intn(4_001)) * time.Millisecond // 2-6 s
		}
		if time.Since(faultsBegan)+wait > length {
			break
		}
		time.Sleep(wait)
		live = r.stillRunning(t, live)

		// 0 SIGKILL, 1 SIGTERM, 2 SIGSTOP, 3 start, 4 node fault.
		act := rng.Intn(5)
		nodeFaults := len(nodes)
		switch {
		case nodeFaults == 0 && time.Since(faultsBegan) > length/3 && !nodeBusy():
			act = 4 // one node fault at least, the controller's
		case act == 4 && nodeBusy():
			act = rng.Intn(3)
		}
		switch {
		case act == 4:
		case len(live) <= chaosMinLive && act != 2:
			act = 3
		case len(live) >= chaosMaxLive && act == 3:
			act = rng.Intn(3)
		}
		switch act {
		case 4:
			sig := syscall.SIGKILL
			if (nodeFaults+int(seed&1))%2 == 1 {
				sig = syscall.SIGTERM
			}
			victim := 0
			if nodeFaults > 0 && rng.Intn(3) != 0 {
				victim = 1 + rng.Intn(len(c.Nodes))
			}
			down := time.Duration(5000+rng.Intn(15_001)) * time.Millisecond // 5-20 s
			n, ev := soakNodeFault(t, c, admin, r, victim, sig, down)
			if n != nil {
				nodes = append(nodes, n)
				events = append(events, ev)
			}
		case 3:
			var vacant []*chaosSlotDir
			for _, d := range dirs {
				if d.holder.exited() {
					vacant = append(vacant, d)
				}
			}
			if len(vacant) > 0 && rng.Intn(2) == 0 {
				d := vacant[rng.Intn(len(vacant))]
				start(d, fmt.Sprintf("instance %d's slot", d.holder.idx))
			} else {
				start(fresh(), chaosFresh)
			}
		case 2:
			k := live[rng.Intn(len(live))]
			pause := soakPauseMin + time.Duration(rng.Int63n(int64(soakPauseMax-soakPauseMin)))
			at := r.signal(k, syscall.SIGSTOP)
			ev := soakEvent{kind: soakStop, at: at, kid: k, tasks: r.owned(k, at), pause: pause}
			time.Sleep(pause)
			ev.logAt, ev.cont = len(k.log.String()), time.Now()
			if err := k.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatalf("SIGCONT to instance %d: %v", k.idx, err)
			}
			t.Logf("%s: SIGCONT to instance %d after %v", r.since(), k.idx, pause.Round(time.Millisecond))
			events = append(events, ev)
		default:
			sig := syscall.SIGKILL
			if act == 1 {
				sig = syscall.SIGTERM
			}
			i := rng.Intn(len(live))
			k := live[i]
			live = append(live[:i:i], live[i+1:]...)
			at := r.signal(k, sig)
			ev := soakEvent{kind: soakKill, at: at, kid: k, tasks: r.owned(k, at)}
			if sig == syscall.SIGTERM {
				ev.kind = soakTerm
			}
			ev.exited = r.waitExit(k, 2*time.Minute).Sub(at)
			ev.died = killedBy(k.err, syscall.SIGKILL)
			events = append(events, ev)
			if k == watched {
				watched = chaosRewatch(r, live)
			}
		}
	}
	faultsEnded := time.Now()
	// Every node up before the end: the last fault's restart.
	for deadline := time.Now().Add(10 * time.Minute); len(nodes) > 0 && !nodes[len(nodes)-1].finished(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the last node fault (node %d) has not finished 10 minutes after the faults ended", nodes[len(nodes)-1].id)
		}
	}
	if len(live) == 0 {
		start(fresh(), chaosFresh)
	}
	t.Logf("%s: %v of faults done, %d events; instances running %v; stopping the load", r.since(), faultsEnded.Sub(faultsBegan).Round(time.Millisecond), len(events)-initial, chaosIdxs(live))
	if err := soakLanded(events, full); err != nil {
		t.Errorf("%v (seed %d)", err, seed)
	}
	for _, n := range nodes {
		if n.err != nil {
			t.Errorf("node %d's fault: %v (seed %d)", n.id, n.err, seed)
		}
	}

	r.finish(fmt.Sprintf("soak %v of faults (seed %d): %s", faultsEnded.Sub(faultsBegan).Round(time.Second), seed, soakCounts(events, initial)))
	windows := len(r.prod.expected())
	r.stopAll()
	for _, e := range events {
		switch e.kind {
		case soakTerm:
			chaosCheckStopped(t, e.kid)
		case soakKill:
			if !e.died {
				t.Errorf("the SIGKILL of instance %d did not kill it (it exited with %v)", e.kid.idx, e.kid.err)
			}
		}
	}
	for _, k := range live {
		checkCleanExit(t, k)
	}
	lat := r.outs.latencies(r.measureFrom, r.measureUntil.Add(-scWindow-scOutOfOrder))
	t.Logf("figures soak: %d events produced, %d windows checked, %s; %s; end-to-end lag (window end → output visible) median %v, p99 %v, max %v (%d windows); %v in all (%v of faults, cluster start included)",
		r.prod.written(), windows, soakCounts(events, initial), soakNodeCounts(events), lat.p50, lat.p99, lat.max, lat.n, time.Since(begun).Round(time.Second), faultsEnded.Sub(faultsBegan).Round(time.Second))
	t.Logf("figures soak: events (seed %d):\n  %s", seed, strings.Join(soakEventLines(r, events, faultsBegan), "\n  "))
	if t.Failed() {
		var ces []chaosEvent
		for _, e := range events {
			if e.kind == soakStart {
				ces = append(ces, chaosEvent{kid: e.kid})
			}
		}
		chaosKeepLogs(t, ces, seed, c.Nodes...)
		t.Logf("FAILED with seed %d (%s=%d replays the schedule)", seed, envSoakSeed, seed)
	}
}

// soakCheckReplication fails the test unless every topic of the job (the
// input, the output and every topic the runner created, named after the
// application id) has rf replicas of each partition and min.insync.replicas
// minISR: the runner creates its topics with the broker's
// default.replication.factor (ReplicationFactor -1, as Kafka Streams'
// replication.factor of -1 since 3.0), and the cluster's default is rf.
func soakCheckReplication(t *testing.T, admin *kafka.AdminClient, r *scRun, rf, minISR int) {
	t.Helper()
	md, err := admin.GetMetadata(nil, true, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for name := range md.Topics {
		if name == r.in || name == r.out || strings.HasPrefix(name, r.app+"-") {
			topics = append(topics, name)
		}
	}
	sort.Strings(topics)
	if len(topics) < 5 {
		t.Fatalf("the job's topics are %v: too few (want the input, the output and the runner's)", topics)
	}
	var bad []string
	var res []kafka.ConfigResource
	for _, name := range topics {
		for _, p := range md.Topics[name].Partitions {
			if len(p.Replicas) != rf {
				bad = append(bad, fmt.Sprintf("%s/%d has %d replicas", name, p.ID, len(p.Replicas)))
			}
		}
		res = append(res, kafka.ConfigResource{Type: kafka.ResourceTopic, Name: name})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfgs, err := admin.DescribeConfigs(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfgs {
		if v := c.Config["min.insync.replicas"].Value; v != strconv.Itoa(minISR) {
			bad = append(bad, fmt.Sprintf("%s has min.insync.replicas %q", c.Name, v))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("want replication factor %d and min.insync.replicas %d for every topic of the job: %s", rf, minISR, strings.Join(bad, "; "))
	}
	t.Logf("%s: %d topics of the job, every partition with %d replicas and min.insync.replicas %d: %s", r.since(), len(topics), rf, minISR, strings.Join(topics, ", "))
}

// soakNodeFault signals node victim (0: the active controller) with sig
// and returns the fault, whose goroutine waits until none of the job's
// partitions is led by the node, lets it stay down for down, restarts it
// and waits until every partition of every topic has rf in-sync replicas
// again (then the fault is done). It returns nil when the controller
// could not be found (logged; the schedule goes on).
func soakNodeFault(t *testing.T, c *kafkaenv.Cluster, admin *kafka.AdminClient, r *scRun, victim int, sig syscall.Signal, down time.Duration) (*soakNode, soakEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ctl int
	for {
		id, _, err := c.Controller(ctx)
		if err == nil {
			ctl = id
			break
		}
		if ctx.Err() != nil {
			t.Logf("%s: no node fault: the active controller was not found: %v", r.since(), err)
			return nil, soakEvent{}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if victim == 0 {
		victim = ctl
	}
	n := &soakNode{id: victim, controller: victim == ctl}
	led, err := soakLedBy(admin, r, victim)
	if err != nil {
		t.Logf("%s: the job's partition leaders before the fault: %v", r.since(), err)
	}
	n.led = led
	kind := soakNodeKill
	if sig == syscall.SIGTERM {
		kind = soakNodeTerm
	}
	at := time.Now()
	ev := soakEvent{kind: kind, at: at, node: n}
	what := ""
	if n.controller {
		what = ", the active controller"
	}
	t.Logf("%s: %s to node %d%s (leader of %d of the job's partitions), down for %v", r.since(), kind, victim, what, led, down.Round(time.Millisecond))
	gone := make(chan error, 1)
	if sig == syscall.SIGTERM {
		go func() { gone <- c.Terminate(victim, soakNodeGrace) }()
	} else {
		go func() { gone <- c.Kill(victim) }()
	}
	go func() {
		defer n.set(func(n *soakNode) { n.done = true })
		fail := func(err error) { n.set(func(n *soakNode) { n.err = err }) }
		// Leaders move while it stops: watch from the signal on.
		movedCh := make(chan time.Duration, 1)
		go func() {
			for deadline := at.Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
				if l, err := soakLedBy(admin, r, victim); err == nil && l == 0 {
					movedCh <- time.Since(at)
					return
				}
			}
			movedCh <- -1
		}()
		err := <-gone
		stopped := time.Since(at)
		n.set(func(n *soakNode) { n.stopped, n.clean = stopped, err })
		if err != nil && !(sig == syscall.SIGTERM && errors.Is(err, kafkaenv.ErrKilled)) {
			fail(fmt.Errorf("%s: %w", kind, err))
			return
		}
		moved := <-movedCh
		n.set(func(n *soakNode) { n.moved = moved })
		if moved < 0 {
			fail(fmt.Errorf("the job's partitions were still led by node %d 2 minutes after its %s", victim, kind))
		}
		if n.controller {
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
				id, _, err := c.Controller(cctx, victim)
				ccancel()
				if err == nil && id != victim {
					d := time.Since(at)
					n.set(func(n *soakNode) { n.newCtl, n.ctlMoved = id, d })
					break
				}
			}
		}
		if d := time.Until(at.Add(down)); d > 0 {
			time.Sleep(d)
		}
		restarted := time.Now()
		n.set(func(n *soakNode) { n.down = restarted.Sub(at) })
		rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		err = c.Restart(rctx, victim)
		rcancel()
		if err != nil {
			fail(err)
			return
		}
		ready := time.Since(restarted)
		n.set(func(n *soakNode) { n.ready = ready })
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
			under, err := soakUnderReplicated(admin, c.Replication)
			if err == nil && under == "" {
				break
			}
			if time.Now().After(deadline) {
				fail(fmt.Errorf("node %d restarted, but 5 minutes later not every partition had %d in-sync replicas: %v %s", victim, c.Replication, err, under))
				return
			}
		}
		inSync := time.Since(restarted)
		n.set(func(n *soakNode) { n.inSync = inSync })
	}()
	return n, ev
}

// soakLedBy counts the partitions of the job's topics (input, output, the
// runner's) whose leader is node id, as the cluster's metadata says now.
func soakLedBy(admin *kafka.AdminClient, r *scRun, id int) (int, error) {
	md, err := admin.GetMetadata(nil, true, 5000)
	if err != nil {
		return 0, err
	}
	n := 0
	for name, tm := range md.Topics {
		if name != r.in && name != r.out && !strings.HasPrefix(name, r.app+"-") {
			continue
		}
		for _, p := range tm.Partitions {
			if int(p.Leader) == id {
				n++
			}
		}
	}
	return n, nil
}

// soakUnderReplicated names the first partitions of any topic (Kafka's own
// included) with fewer than rf in-sync replicas, or a leader missing; ""
// when none.
func soakUnderReplicated(admin *kafka.AdminClient, rf int) (string, error) {
	md, err := admin.GetMetadata(nil, true, 5000)
	if err != nil {
		return "", err
	}
	var under []string
	for name, tm := range md.Topics {
		for _, p := range tm.Partitions {
			if len(p.Isrs) < rf || p.Leader < 0 {
				under = append(under, fmt.Sprintf("%s/%d (in sync %v, leader %d)", name, p.ID, p.Isrs, p.Leader))
			}
		}
	}
	sort.Strings(under)
	return strings.Join(firstN(under, 3), ", "), nil
}

// soakLanded checks that the faults tested something (issue 23: a fault
// counted without checking it landed): an instance fault landed when the
// instance held tasks at the signal (and a SIGKILL killed it), a node
// fault when the node led partitions of the job's topics. Any run needs
// one of each; a full run (soakFullMinutes) a SIGKILL, a SIGSTOP and a
// SIGTERM of instances, a node SIGKILL and a node SIGTERM, and a fault of
// the active controller.
func soakLanded(events []soakEvent, full bool) error {
	landed := map[soakKind]int{}
	ctl := 0
	for _, e := range events {
		switch {
		case e.instanceFault():
			if len(e.tasks) > 0 && (e.kind != soakKill || e.died) {
				landed[e.kind]++
			}
		case e.node != nil:
			if e.node.led > 0 {
				landed[e.kind]++
			}
			if e.node.controller {
				ctl++
			}
		}
	}
	var errs []error
	inst := landed[soakKill] + landed[soakStop] + landed[soakTerm]
	nodes := landed[soakNodeKill] + landed[soakNodeTerm]
	if inst == 0 {
		errs = append(errs, fmt.Errorf("no instance fault came to an instance holding tasks"))
	}
	if nodes == 0 {
		errs = append(errs, fmt.Errorf("no node fault came to a node leading partitions of the job"))
	}
	if full {
		for _, k := range []soakKind{soakKill, soakStop, soakTerm, soakNodeKill, soakNodeTerm} {
			if landed[k] == 0 {
				errs = append(errs, fmt.Errorf("no %s landed in a run of %d minutes or more", k, soakFullMinutes))
			}
		}
		if ctl == 0 {
			errs = append(errs, fmt.Errorf("the active controller was never a node fault's victim"))
		}
	}
	return errors.Join(errs...)
}

// soakCounts: the instance events, each kind with how many landed.
func soakCounts(events []soakEvent, initial int) string {
	all, landed := map[soakKind]int{}, map[soakKind]int{}
	for _, e := range events {
		all[e.kind]++
		if e.instanceFault() && len(e.tasks) > 0 {
			landed[e.kind]++
		}
	}
	return fmt.Sprintf("instances: %d SIGKILL (%d holding tasks), %d SIGSTOP+SIGCONT (%d), %d SIGTERM (%d), %d starts after %d at first",
		all[soakKill], landed[soakKill], all[soakStop], landed[soakStop], all[soakTerm], landed[soakTerm], all[soakStart]-initial, initial)
}

// soakNodeCounts: the node faults of each kind, with how many came to
// the active controller and to a node leading the job's partitions, and
// how many SIGTERMs ended in a clean exit.
func soakNodeCounts(events []soakEvent) string {
	all, ctl, led := map[soakKind]int{}, map[soakKind]int{}, map[soakKind]int{}
	clean := 0
	for _, e := range events {
		n := e.node
		if n == nil {
			continue
		}
		n.mu.Lock()
		all[e.kind]++
		if n.controller {
			ctl[e.kind]++
		}
		if n.led > 0 {
			led[e.kind]++
		}
		if e.kind == soakNodeTerm && n.clean == nil && n.stopped > 0 {
			clean++
		}
		n.mu.Unlock()
	}
	return fmt.Sprintf("nodes: %d SIGKILL (%d of the controller, %d leading the job's partitions), %d SIGTERM (%d, %d; %d clean exits)",
		all[soakNodeKill], ctl[soakNodeKill], led[soakNodeKill], all[soakNodeTerm], ctl[soakNodeTerm], led[soakNodeTerm], clean)
}

// restartingRe finds a stage's client restarts in an instance's log, with
// their time (slog's time=).
var restartingRe = regexp.MustCompile(`time=(\S+) [^\n]*restarting the stage's Kafka clients[^\n]*`)

// soakEventLines describes each event: when (since the faults began),
// what, and its handover: for an instance's signal, how long after it the
// first and the last of its tasks committed again (after a SIGTERM, from
// its exit; after a SIGSTOP, by whichever instance, while it was stopped
// or after), and what a paused instance did once woken; for a node fault,
// how long the node took to go, the leaders to move, the source tasks to
// commit again, and its restart; for a start, its first task.
func soakEventLines(r *scRun, events []soakEvent, began time.Time) []string {
	var out []string
	for _, e := range events {
		when := fmt.Sprintf("%+8.1fs", e.at.Sub(began).Seconds())
		switch {
		case e.kind == soakStart:
			first := "no task yet"
			for _, te := range parseTaskEvents(e.kid.log.String()) {
				if te.assigned && len(te.partitions) > 0 {
					first = fmt.Sprintf("first task %v after its start", te.at.Sub(e.kid.started).Round(time.Millisecond))
					break
				}
			}
			out = append(out, fmt.Sprintf("%s start instance %d in %s: %s", when, e.kid.idx, e.slot, first))
		case e.node != nil:
			n := e.node
			n.mu.Lock()
			what := fmt.Sprintf("node %d", n.id)
			if n.controller {
				what += fmt.Sprintf(" (the active controller; node %d leads the quorum %v after)", n.newCtl, n.ctlMoved.Round(time.Millisecond))
			}
			clean := ""
			if e.kind == soakNodeTerm {
				clean = "clean exit"
				if n.clean != nil {
					clean = fmt.Sprintf("NOT clean: %v", n.clean)
				}
				clean = "; " + clean
			}
			line := fmt.Sprintf("%s %s %s, leading %d of the job's partitions: gone in %v%s; its partitions led elsewhere %v after; restarted %v after, answering in %v, all partitions in sync %v after the restart",
				when, e.kind, what, n.led, n.stopped.Round(time.Millisecond), clean, n.moved.Round(time.Millisecond), n.down.Round(time.Millisecond), n.ready.Round(time.Millisecond), n.inSync.Round(time.Millisecond))
			n.mu.Unlock()
			var ds []time.Duration
			for p := int32(0); p < scInputPartitions; p++ {
				if c, ok := r.offs.firstCommitAfter(scTask{r.stages[0], p}, e.at); ok {
					ds = append(ds, c.Sub(e.at))
				}
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			if len(ds) > 0 {
				line += fmt.Sprintf("; the %d source tasks committed again: the first %v, the last %v after the signal", len(ds), ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
			}
			out = append(out, line)
		default:
			from := e.at
			if e.kind == soakTerm {
				from = e.at.Add(e.exited)
			}
			_, handover := r.offs.handover(e.tasks, from, e.at, "")
			extra := fmt.Sprintf("exited in %v", e.exited.Round(time.Millisecond))
			if e.kind == soakStop {
				after := e.kid.log.String()[e.logAt:]
				restarts, fenced, revoked := 0, 0, 0
				for _, m := range restartingRe.FindAllStringSubmatch(after, -1) {
					if at, err := time.Parse(time.RFC3339Nano, m[1]); err != nil || !at.Before(e.cont.Add(soakWoken)) {
						continue
					}
					restarts++
					if strings.Contains(strings.ToLower(m[0]), "fenc") {
						fenced++
					}
				}
				for _, te := range parseTaskEvents(after) {
					if !te.assigned && te.at.Before(e.cont.Add(soakWoken)) {
						revoked += len(te.partitions)
					}
				}
				extra = fmt.Sprintf("SIGCONT after %v; woken, it restarted its clients %d times (%d naming a fence) and had %d tasks revoked or lost in %v", e.pause.Round(time.Millisecond), restarts, fenced, revoked, soakWoken)
			}
			out = append(out, fmt.Sprintf("%s %s instance %d (up %v; %s): %s", when, e.kind, e.kid.idx, e.at.Sub(e.kid.started).Round(time.Millisecond), extra, handover))
		}
	}
	return out
}

// soakLanded fails a run whose faults tested nothing: a SIGKILL to an
// instance that held no tasks or did not die of it, a node fault to a
// node that led none of the job's partitions; a full run that missed a
// kind or the controller. No broker needed.
func TestSoakLandedNeedsFaultsThatLanded(t *testing.T) {
	held := []scTask{{"s0", 1}}
	kid := &scKid{idx: 1}
	node := func(led int, ctl bool) *soakNode { return &soakNode{id: 2, led: led, controller: ctl} }
	for _, c := range []struct {
		name   string
		events []soakEvent
		full   bool
		want   []string // "" for none
	}{
		{"nothing landed", []soakEvent{
			{kind: soakKill, kid: kid, died: true},
			{kind: soakKill, kid: kid, tasks: held}, // did not die of it
			{kind: soakNodeKill, node: node(0, true)},
		}, false, []string{"no instance fault came to an instance holding tasks", "no node fault came to a node leading partitions of the job"}},
		{"short run, both landed", []soakEvent{
			{kind: soakStop, kid: kid, tasks: held},
			{kind: soakNodeTerm, node: node(3, false)},
		}, false, nil},
		{"full run missing kinds and the controller", []soakEvent{
			{kind: soakStop, kid: kid, tasks: held},
			{kind: soakNodeTerm, node: node(3, false)},
		}, true, []string{"no SIGKILL landed", "no SIGTERM landed", "no node SIGKILL landed", "the active controller was never"}},
		{"full run, every kind", []soakEvent{
			{kind: soakKill, kid: kid, tasks: held, died: true},
			{kind: soakStop, kid: kid, tasks: held},
			{kind: soakTerm, kid: kid, tasks: held},
			{kind: soakNodeKill, node: node(1, true)},
			{kind: soakNodeTerm, node: node(3, false)},
		}, true, nil},
	} {
		err := soakLanded(c.events, c.full)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want no error", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error, want %q", c.name, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", c.name, err, w)
			}
		}
	}
}
