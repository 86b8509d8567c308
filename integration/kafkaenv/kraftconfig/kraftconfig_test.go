package kraftconfig

import (
	"errors"
	"strings"
	"testing"
)

func valid() Config {
	return Config{BrokerPort: 19092, ControllerPort: 19093, LogDir: "/tmp/x", ClusterID: "MkU3OEVBNTcwNTJENDM2Qk"}
}

func TestServerPropertiesBindLoopbackWithRF1(t *testing.T) {
	props := valid().ServerProperties()
	for _, want := range []string{
		"listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n",
		"advertised.listeners=PLAINTEXT://127.0.0.1:19092\n",
		"controller.quorum.voters=1@127.0.0.1:19093\n",
		"process.roles=broker,controller\n",
		"offsets.topic.replication.factor=1\n",
		"transaction.state.log.replication.factor=1\n",
		"transaction.state.log.min.isr=1\n",
		"default.replication.factor=1\n",
		"min.insync.replicas=1\n",
		"group.initial.rebalance.delay.ms=0\n",
		"log.dirs=/tmp/x\n",
	} {
		if !strings.Contains(props, want) {
			t.Errorf("server.properties lacks %q:\n%s", want, props)
		}
	}
	if strings.Contains(props, "0.0.0.0") {
		t.Errorf("server.properties binds a wildcard address:\n%s", props)
	}
}

func TestOverridesReplaceDefaults(t *testing.T) {
	c := valid()
	c.Overrides = map[string]string{"num.partitions": "3"}
	if got := c.Properties()["num.partitions"]; got != "3" {
		t.Fatalf("num.partitions = %q, want 3", got)
	}
}

func TestValidate(t *testing.T) {
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"same ports":   func(c *Config) { c.ControllerPort = c.BrokerPort },
		"no port":      func(c *Config) { c.BrokerPort = 0 },
		"wildcard":     func(c *Config) { c.Host = "0.0.0.0" },
		"no log dir":   func(c *Config) { c.LogDir = "" },
		"bad cluster":  func(c *Config) { c.ClusterID = "abc" },
		"port too big": func(c *Config) { c.ControllerPort = 70000 },
	} {
		c := valid()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestNewClusterIDIs22Chars(t *testing.T) {
	id, err := NewClusterID()
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 22 || strings.ContainsAny(id, "+/=") {
		t.Fatalf("cluster id %q is not 22 base64url characters", id)
	}
}

func TestLaunchArgs(t *testing.T) {
	l := Launch{Java: "java", LibsDir: "/opt/kafka/libs"}
	c := valid()
	f := strings.Join(l.FormatArgs(c, "/c/server.properties", "/c/log4j2.properties"), " ")
	if !strings.Contains(f, "-cp /opt/kafka/libs/* kafka.tools.StorageTool format -t "+c.ClusterID+" -c /c/server.properties") {
		t.Errorf("format args: %s", f)
	}
	c.ScramCredentials = []string{"SCRAM-SHA-256=[name=app,password=a]", "SCRAM-SHA-256=[name=other,password=o]"}
	f = strings.Join(l.FormatArgs(c, "/c/server.properties", "/c/log4j2.properties"), " ")
	if !strings.HasSuffix(f, "-c /c/server.properties --add-scram SCRAM-SHA-256=[name=app,password=a] --add-scram SCRAM-SHA-256=[name=other,password=o]") {
		t.Errorf("format args with SCRAM credentials: %s", f)
	}
	s := strings.Join(l.ServerArgs("/c/server.properties", "/c/log4j2.properties"), " ")
	if !strings.HasSuffix(s, "-cp /opt/kafka/libs/* kafka.Kafka /c/server.properties") {
		t.Errorf("server args: %s", s)
	}
}

// TestClusterIDNeverStartsWithDash guards the fix for a broker that failed
// to start about once in 64: an id starting with '-' was read by
// kafka-storage format as an option. 4 096 ids would hold ~64 such ids.
func TestClusterIDNeverStartsWithDash(t *testing.T) {
	for i := 0; i < 4096; i++ {
		id, err := NewClusterID()
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 22 || id[0] == '-' {
			t.Fatalf("cluster id %q", id)
		}
	}
}
