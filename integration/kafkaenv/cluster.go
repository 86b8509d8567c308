package kafkaenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv/kraftconfig"
)

// node is one KRaft node to launch: its node.id, its two ports on
// 127.0.0.1, the cluster id every node of a cluster shares, and extra
// server.properties entries (a cluster's voters and replication settings;
// none for the single broker of Start).
type node struct {
	id                         int
	brokerPort, controllerPort int
	clusterID                  string
	overrides                  map[string]string
	// scram are the SCRAM credentials its format step creates
	// (kraftconfig.Config.ScramCredentials; Options.SCRAM).
	scram []string
}

// containerArgs returns the image entrypoint's flags for n.
func (n node) containerArgs(o Options) []string {
	args := []string{
		"-broker-port", strconv.Itoa(n.brokerPort),
		"-controller-port", strconv.Itoa(n.controllerPort),
		"-heap-mb", strconv.Itoa(o.HeapMB),
		"-cluster-id", n.clusterID,
		"-set", "node.id=" + strconv.Itoa(n.id),
	}
	for k, v := range n.overrides {
		args = append(args, "-set", k+"="+v)
	}
	return args
}

// Cluster is a KRaft cluster of several combined broker+controller nodes on
// 127.0.0.1, started by StartCluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	// Nodes are the cluster's nodes; Nodes[i] has node.id i+1.
	Nodes []*Broker
	// Replication is the replication factor of the internal topics and
	// the default of new topics (default.replication.factor).
	Replication int
	// MinISR is min.insync.replicas: a write with acks=all (every
	// transactional and idempotent producer) needs this many in-sync
	// replicas.
	MinISR int

	bootstrap string

	// admin is the cluster's one admin client, made by the first call
	// that needs it (Leader) and used by every later one: a client per
	// call, polled every 100 ms while a node is dead, made thousands of
	// librdkafka handles in one test (a CI run segfaulted inside
	// librdkafka among them). adminUse is held shared by every use of
	// admin and exclusively by Stop, which closes it once no use is in
	// flight; adminMu guards its lazy creation; stopped is set by Stop,
	// after which no client is made.
	adminUse sync.RWMutex
	adminMu  sync.Mutex
	admin    *kafka.AdminClient
	stopped  bool
}

// ErrClusterStopped is returned by a Cluster's client methods (Leader)
// once Stop has been called.
var ErrClusterStopped = errors.New("kafkaenv: cluster stopped")

// withAdmin runs f with the cluster's admin client, made on first use.
// Stop waits for f to return before it closes the client. It returns
// ErrClusterStopped after Stop, or the client's creation error.
func (c *Cluster) withAdmin(f func(*kafka.AdminClient) error) error {
	c.adminUse.RLock()
	defer c.adminUse.RUnlock()
	c.adminMu.Lock()
	if c.stopped {
		c.adminMu.Unlock()
		return ErrClusterStopped
	}
	if c.admin == nil {
		a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": c.bootstrap})
		if err != nil {
			c.adminMu.Unlock()
			return fmt.Errorf("kafkaenv: admin client: %w", err)
		}
		c.admin = a
	}
	a := c.admin
	c.adminMu.Unlock()
	return f(a)
}

// closeAdmin closes the admin client, if one was made, once every use in
// flight has returned (Leader's metadata request waits up to 10 s), and
// keeps any new one from being made. It may be called more than once.
func (c *Cluster) closeAdmin() {
	c.adminUse.Lock()
	defer c.adminUse.Unlock()
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	c.stopped = true
	if c.admin != nil {
		c.admin.Close()
		c.admin = nil
	}
}

// BootstrapServers returns every node's client address, comma-separated
// (Kafka's bootstrap.servers).
func (c *Cluster) BootstrapServers() string { return c.bootstrap }

// Broker returns the cluster as one *Broker whose BootstrapServers lists
// every node, for helpers that take a *Broker. Its Stop stops the cluster.
func (c *Cluster) Broker() *Broker {
	return &Broker{mode: c.Nodes[0].mode, bootstrap: c.bootstrap, describe: c.Describe(), stop: c.Stop}
}

// Describe returns one line for logs naming every node.
func (c *Cluster) Describe() string {
	var parts []string
	for i, n := range c.Nodes {
		parts = append(parts, fmt.Sprintf("node %d: %s", i+1, n.Describe()))
	}
	return fmt.Sprintf("%d-node KRaft cluster (replication factor %d, min.insync.replicas %d): %s", len(c.Nodes), c.Replication, c.MinISR, strings.Join(parts, "; "))
}

// Stop closes the cluster's admin client (after any Leader call in
// flight returns), then stops every node (see Broker.Stop) and returns the
// first error. Leader returns ErrClusterStopped after it.
func (c *Cluster) Stop() error {
	c.closeAdmin()
	var first error
	for _, n := range c.Nodes {
		if err := n.Stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Kill kills node id (1-based, its node.id) at once, as a power cut would:
// SIGKILL of its JVM (waiting for its exit), or of its container.
// The node stays dead (Restart starts it again in ModeProcess); Stop
// still cleans up after it.
func (c *Cluster) Kill(id int) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	return n.kill()
}

// node returns node id (1-based) or an error naming the cluster's size.
func (c *Cluster) node(id int) (*Broker, error) {
	if id < 1 || id > len(c.Nodes) {
		return nil, fmt.Errorf("%w: no node %d in a %d-node cluster", ErrBadOptions, id, len(c.Nodes))
	}
	return c.Nodes[id-1], nil
}

// Terminate stops node id (1-based) cleanly, as an operator's SIGTERM
// does: Kafka's controlled shutdown (the node hands its partitions'
// leadership over, resigns from the KRaft quorum's leadership if it held
// it, and exits). It waits up to grace for the exit; a node that has not
// exited by then is SIGKILLed and ErrKilled returned. The node stays down
// (Restart starts it again; Stop still cleans up after it). ModeProcess
// only: the image's entrypoint formats its log directory at every start,
// so a container cannot be restarted; another mode is ErrBadOptions.
func (c *Cluster) Terminate(id int, grace time.Duration) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if n.terminate == nil {
		return fmt.Errorf("%w: Terminate needs mode %q (node %d runs in mode %q)", ErrBadOptions, ModeProcess, id, n.mode)
	}
	return n.terminate(grace)
}

// Restart starts node id (1-based) again after Kill or Terminate, on its
// configuration and log directory (it recovers its logs, catches up from
// the leaders and rejoins the ISRs), and returns once it answers a
// metadata request (Options.ReadyTimeout, within ctx). A node still
// running is an error. ModeProcess only (see Terminate).
func (c *Cluster) Restart(ctx context.Context, id int) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if n.restart == nil {
		return fmt.Errorf("%w: Restart needs mode %q (node %d runs in mode %q)", ErrBadOptions, ModeProcess, id, n.mode)
	}
	return n.restart(ctx)
}

// Controller returns the node.id of the active controller, the KRaft
// quorum's leader (every node is a voter), and its epoch: the answer of
// the first node in skip's complement that answers a DescribeQuorum
// request on its controller listener (see quorum.go: DescribeCluster's
// controller is a random broker in KRaft). Nodes in skip (down ones) are
// not asked. It returns an error when no node answered or none knew a
// leader (an election under way: ask again).
func (c *Cluster) Controller(ctx context.Context, skip ...int) (id int, epoch int, err error) {
	var errs []error
	for i, n := range c.Nodes {
		if slices.Contains(skip, i+1) {
			continue
		}
		leader, ep, err := describeQuorumLeader(ctx, n.controllerAddr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if leader < 0 {
			errs = append(errs, fmt.Errorf("node %d: no leader in epoch %d", i+1, ep))
			continue
		}
		return int(leader), int(ep), nil
	}
	return 0, 0, fmt.Errorf("%w: %w", errNoController, errors.Join(errs...))
}

// Leader returns the node.id of the leader of partition p of topic, as the
// cluster's metadata says now (a metadata request to one live node, up to
// 10 s; librdkafka sends one per call, it does not answer from its cache).
// Every call uses the cluster's one admin client; it is safe to call
// concurrently, and returns ErrClusterStopped after Stop.
func (c *Cluster) Leader(topic string, p int32) (int, error) {
	st, err := c.Partition(topic, p)
	return st.Leader, err
}

// PartitionState is a partition's leader, replicas and in-sync replicas
// (node.ids), as the cluster's metadata says at one moment. Leader is -1
// when the partition has none.
type PartitionState struct {
	Leader   int
	Replicas []int
	ISR      []int
}

// String is e.g. "leader 3, replicas [3 1 2], in sync [3 1]".
func (s PartitionState) String() string {
	return fmt.Sprintf("leader %d, replicas %v, in sync %v", s.Leader, s.Replicas, s.ISR)
}

// AllInSync reports whether every replica is in the ISR.
func (s PartitionState) AllInSync() bool {
	for _, r := range s.Replicas {
		if !slices.Contains(s.ISR, r) {
			return false
		}
	}
	return len(s.Replicas) > 0
}

// Partition returns the state of partition p of topic as the cluster's
// metadata says now (one metadata request, as Leader's).
func (c *Cluster) Partition(topic string, p int32) (PartitionState, error) {
	var st PartitionState
	err := c.withAdmin(func(admin *kafka.AdminClient) error {
		md, err := admin.GetMetadata(&topic, false, 10000)
		if err != nil {
			return fmt.Errorf("kafkaenv: metadata of %s: %w", topic, err)
		}
		for _, pm := range md.Topics[topic].Partitions {
			if pm.ID == p {
				st.Leader = int(pm.Leader)
				for _, r := range pm.Replicas {
					st.Replicas = append(st.Replicas, int(r))
				}
				for _, r := range pm.Isrs {
					st.ISR = append(st.ISR, int(r))
				}
				return nil
			}
		}
		return fmt.Errorf("kafkaenv: topic %s has no partition %d", topic, p)
	})
	return st, err
}

// StartCluster starts a KRaft cluster of size nodes (3 or more; every node
// both broker and controller, the static voter set of all of them), where
// Options.Mode says (Options.BrokerPort and ControllerPort are ignored:
// every port is picked free). Every replication setting is size with
// min.insync.replicas size-1: the internal topics (__consumer_offsets,
// __transaction_state) and, by default.replication.factor, every topic
// created without a replication factor, the runner's included. It returns
// once every node answers a metadata request. The KRaft quorum's fetch
// timeout is 10 s (see quorumFetchTimeoutMs). ModeExternal is refused.
func StartCluster(ctx context.Context, opts Options, size int) (*Cluster, error) {
	o := opts.withDefaults()
	if size < 3 {
		return nil, fmt.Errorf("%w: a cluster of %d nodes (want 3 or more: a KRaft quorum that survives the loss of a node)", ErrBadOptions, size)
	}
	if o.Mode == ModeExternal {
		return nil, fmt.Errorf("%w: StartCluster starts its own nodes; mode %q starts nothing", ErrBadOptions, ModeExternal)
	}
	launch, err := chooseLauncher(ctx, o)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * size)
	if err != nil {
		return nil, err
	}
	clusterID, err := kraftconfig.NewClusterID()
	if err != nil {
		return nil, err
	}
	var voters []string
	for i := 0; i < size; i++ {
		voters = append(voters, fmt.Sprintf("%d@%s:%d", i+1, loopback, ports[2*i+1]))
	}
	rf, isr := strconv.Itoa(size), strconv.Itoa(size-1)
	overrides := map[string]string{
		"controller.quorum.voters":                         strings.Join(voters, ","),
		"controller.quorum.fetch.timeout.ms":               strconv.Itoa(quorumFetchTimeoutMs),
		"default.replication.factor":                       rf,
		"min.insync.replicas":                              isr,
		"offsets.topic.replication.factor":                 rf,
		"transaction.state.log.replication.factor":         rf,
		"transaction.state.log.min.isr":                    isr,
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            isr,
	}
	// The nodes start together: none answers before a quorum has formed.
	c := &Cluster{Nodes: make([]*Broker, size), Replication: size, MinISR: size - 1}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := 0; i < size; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Nodes[i], errs[i] = launch(ctx, o, node{id: i + 1, brokerPort: ports[2*i], controllerPort: ports[2*i+1], clusterID: clusterID, overrides: overrides})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range c.Nodes {
			if n != nil {
				n.Stop()
			}
		}
		return nil, fmt.Errorf("kafkaenv: %d-node cluster: %w", size, err)
	}
	var addrs []string
	for i := 0; i < size; i++ {
		addrs = append(addrs, fmt.Sprintf("%s:%d", loopback, ports[2*i]))
	}
	c.bootstrap = strings.Join(addrs, ",")
	return c, nil
}

// quorumFetchTimeoutMs is a cluster's controller.quorum.fetch.timeout.ms
// (Kafka's default 2000): how long a KRaft follower goes without a fetch
// answered by the quorum's leader before it calls an election, and, times
// 1.5, how long the leader goes without fetches from a majority before it
// resigns. Once a node of a 3-node cluster is down, each of the two left
// must hear from the other within these bounds, and on a loaded 2-core
// machine the nodes stall for several seconds (runs of
// TestScenarioBrokerFailover with a busy machine logged "Did not receive
// fetch request from the majority of the voters within 3000ms", leaders
// resigning again and again, and the fencing of the dead node, written
// but never committed, lost with each resignation: its partitions kept
// the dead leader 33 s and 55 s after the kill; the CI run that failed
// saw the same symptom past 60 s, its nodes' logs not kept).
// 10 s rides out such stalls; the price is up to 8 s more before the
// quorum notices that its leader, the active controller, is dead.
const quorumFetchTimeoutMs = 10000

// freePorts returns n distinct free ports on 127.0.0.1, picked by the
// kernel (each held until all are picked, then released; see choosePorts
// for the race this leaves).
func freePorts(n int) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	out := make([]int, n)
	for i := range out {
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return nil, fmt.Errorf("kafkaenv: pick a free port on %s: %w", loopback, err)
		}
		held = append(held, l)
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}
