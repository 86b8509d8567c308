package kafkaenv

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These are unit tests: none starts a broker. The real broker is exercised by
// the integration package.

func quiet(t *testing.T) Options {
	return Options{Logf: t.Logf}
}

// listen occupies a free loopback port for the duration of the test.
func listen(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

func TestStartFailsNamingAGivenPortInUse(t *testing.T) {
	t.Setenv(EnvBootstrapServers, "")
	taken := listen(t)
	for _, tc := range []struct {
		name string
		opts func(*Options)
		role string
	}{
		{"broker", func(o *Options) { o.BrokerPort = taken }, "broker"},
		{"controller", func(o *Options) { o.ControllerPort = taken }, "controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := quiet(t)
			o.Mode = ModeProcess
			tc.opts(&o)
			_, err := Start(context.Background(), o)
			if !errors.Is(err, ErrPortInUse) {
				t.Fatalf("Start = %v, want ErrPortInUse", err)
			}
			want := tc.role + " port 127.0.0.1:" + strconv.Itoa(taken)
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %q", err, want)
			}
		})
	}
}

func TestChoosePorts(t *testing.T) {
	b, c, err := choosePorts(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b == c || b <= 0 || c <= 0 {
		t.Fatalf("choosePorts(0, 0) = %d, %d: want two distinct free ports", b, c)
	}
	if _, _, err := choosePorts(4000, 4000); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("choosePorts(4000, 4000) = %v, want ErrBadOptions", err)
	}
}

func TestStartProcessWithoutJavaSaysInstallJDK17(t *testing.T) {
	t.Setenv(EnvBootstrapServers, "")
	t.Setenv("JAVA_HOME", "")
	t.Setenv("PATH", t.TempDir()) // no java anywhere
	o := quiet(t)
	o.Mode = ModeProcess
	_, err := Start(context.Background(), o)
	if !errors.Is(err, ErrNoJava) {
		t.Fatalf("Start = %v, want ErrNoJava", err)
	}
	if !strings.Contains(err.Error(), "install a JDK 17") {
		t.Fatalf("error %q does not say to install a JDK 17", err)
	}
}

func TestJavaMajor(t *testing.T) {
	for out, want := range map[string]int{
		`openjdk version "17.0.15" 2025-04-15`: 17,
		`java version "1.8.0_392"`:             8,
		`openjdk version "25" 2025-09-16`:      25,
		`openjdk version "21.0.1" 2023-10-17`:  21,
	} {
		if got, ok := javaMajor(out); !ok || got != want {
			t.Errorf("javaMajor(%q) = %d, %v; want %d", out, got, ok, want)
		}
	}
	if _, ok := javaMajor("garbage"); ok {
		t.Errorf("javaMajor(garbage) ok")
	}
}

func TestBadModes(t *testing.T) {
	t.Setenv(EnvBootstrapServers, "")
	o := quiet(t)
	o.Mode = "kubernetes"
	if _, err := Start(context.Background(), o); !errors.Is(err, ErrBadOptions) {
		t.Errorf("unknown mode: %v, want ErrBadOptions", err)
	}
	o.Mode = ModeExternal
	if _, err := Start(context.Background(), o); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), EnvBootstrapServers) {
		t.Errorf("external without %s: %v, want ErrBadOptions naming it", EnvBootstrapServers, err)
	}
}

func TestModeFromEnvironment(t *testing.T) {
	t.Setenv(EnvMode, "process")
	if got := (Options{}).withDefaults().Mode; got != ModeProcess {
		t.Errorf("mode = %q, want process", got)
	}
	t.Setenv(EnvMode, "auto")
	if got := (Options{}).withDefaults().Mode; got != ModeAuto {
		t.Errorf("mode = %q, want auto", got)
	}
}

func TestExternalClusterThatDoesNotAnswer(t *testing.T) {
	port := listen(t) // accepts TCP, never speaks Kafka
	t.Setenv(EnvBootstrapServers, "127.0.0.1:"+strconv.Itoa(port))
	o := quiet(t)
	o.Mode = ModeExternal // not KAFKASTREAMS_KAFKA_MODE's (.ci/run sets container)
	o.ReadyTimeout = 2 * time.Second
	b, err := Start(context.Background(), o)
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("Start = %v, %v; want ErrNotReady", b, err)
	}
	if !strings.Contains(err.Error(), EnvBootstrapServers) {
		t.Fatalf("error %q does not name %s", err, EnvBootstrapServers)
	}
}

func TestDockerHostThatDoesNotAnswer(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	if err := probeDocker(context.Background(), 2*time.Second); err == nil {
		t.Fatal("probeDocker succeeded against a socket that does not exist")
	}
	t.Setenv(EnvBootstrapServers, "")
	o := quiet(t)
	o.Mode = ModeContainer
	if _, err := Start(context.Background(), o); !errors.Is(err, ErrNoDocker) {
		t.Fatalf("Start(container) = %v, want ErrNoDocker", err)
	}
}

func TestFirstAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9092":                  "127.0.0.1:9092",
		"a:1,b:2":                         "a:1",
		"PLAINTEXT://127.0.0.1:9092, b:2": "127.0.0.1:9092",
		" 127.0.0.1:9092 ":                "127.0.0.1:9092",
	} {
		if got := firstAddr(in); got != want {
			t.Errorf("firstAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPomVersionMatches(t *testing.T) {
	data, err := os.ReadFile("pom.xml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<kafka.version>([^<]+)</kafka.version>`).FindSubmatch(data)
	if m == nil || string(m[1]) != DefaultKafkaVersion {
		t.Fatalf("pom.xml kafka.version = %q, DefaultKafkaVersion = %q: keep them equal", m, DefaultKafkaVersion)
	}
}

func TestMavenFailurePicksTheErrorLines(t *testing.T) {
	out := `[INFO] Scanning for projects...
[ERROR] Failed to execute goal on project kafkaenv-jars: Could not resolve dependencies for project io.github.kafkastreams:kafkaenv-jars:pom:0: Could not transfer artifact org.apache.kafka:kafka_2.13:jar:4.1.1 from/to central (https://repo.maven.apache.org/maven2): Connection refused -> [Help 1]
[ERROR] 
[ERROR] To see the full stack trace of the errors, re-run Maven with the -e switch.`
	got := mavenFailure(out, errors.New("exit status 1"))
	for _, want := range []string{"org.apache.kafka:kafka_2.13:jar:4.1.1", "https://repo.maven.apache.org/maven2"} {
		if !strings.Contains(got, want) {
			t.Errorf("mavenFailure = %q, lacks %q", got, want)
		}
	}
}

// TestFetchJarsTellsAMissingArtifactFromAnUnreachableRepository runs mvn
// against local repositories only (no network): an HTTP server acting as
// the Maven repository, serving the Maven plugins from the local
// repository (~/.m2, filled by `make kafka-jars`) and answering 404 for
// Kafka's artifacts, then a port that refuses connections. fetchJars must
// name the missing artifact and the URL that answered 404 in the first
// case, the repository it could not reach in the second, and tell them
// apart; neither leaves a partial download.
func TestFetchJarsTellsAMissingArtifactFromAnUnreachableRepository(t *testing.T) {
	if _, err := exec.LookPath("mvn"); err != nil {
		t.Skip("needs mvn on PATH")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skipf("needs a home directory for ~/.m2 (the Maven plugins the fake repository serves): %v", err)
	}
	m2 := filepath.Join(home, ".m2", "repository")
	if _, err := os.Stat(filepath.Join(m2, "org/apache/maven/plugins/maven-dependency-plugin")); err != nil {
		t.Skipf("needs maven-dependency-plugin in %s (run `make kafka-jars` once): the fake repository serves it from there", m2)
	}
	const version = "0.0.0-kafkaenv-test"
	var mu sync.Mutex
	var kafkaAsked []string
	repo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := path.Clean(r.URL.Path)
		if strings.HasPrefix(p, "/org/apache/kafka/") {
			mu.Lock()
			kafkaAsked = append(kafkaAsked, p)
			mu.Unlock()
			http.NotFound(w, r)
			return
		}
		file := filepath.Join(m2, filepath.FromSlash(p))
		if path.Base(p) == "maven-metadata.xml" { // stored per repository id in the local repository
			file = filepath.Join(filepath.Dir(file), "maven-metadata-central.xml")
		}
		http.ServeFile(w, r, file)
	}))
	defer repo.Close()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedURL := "http://" + refused.Addr().String() + "/maven2"
	refused.Close() // nothing listens there now: connections are refused

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pom, _ := filepath.Abs("pom.xml")
	fetch := func(url string) error {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "libs")
		err := fetchJars(ctx, pom, version, dir, mavenRepo{URL: url, Local: t.TempDir()})
		if !errors.Is(err, ErrNoJars) {
			t.Fatalf("fetchJars from %s = %v, want ErrNoJars", url, err)
		}
		if _, serr := os.Stat(dir + ".partial"); serr == nil {
			t.Errorf("partial download left behind")
		}
		t.Log(err)
		return err
	}

	err = fetch(repo.URL)
	want := "artifact org.apache.kafka:kafka_2.13:jar:" + version + " not found at " + repo.URL
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("404 for Kafka's artifacts: error %q, want one saying %q and not \"cannot reach\"", err, want)
	}
	mu.Lock()
	asked := len(kafkaAsked)
	mu.Unlock()
	if asked == 0 {
		t.Errorf("mvn never asked the fake repository %s for a Kafka artifact", repo.URL)
	}

	err = fetch(refusedURL)
	want = "cannot reach the Maven repository " + refusedURL
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "not found at") {
		t.Errorf("refused connections: error %q, want one saying %q and not \"not found at\"", err, want)
	}
}

func TestPartitionForIsKafkas(t *testing.T) {
	// Java's String.hashCode and Kafka's Utils.abs(h) % n, computed by a
	// JVM (hashCode, then abs with Integer.MIN_VALUE as 0, then % 8).
	for key, want := range map[string]struct {
		hash int32
		p    int
	}{
		"hello":                             {99162322, 2},
		"polygenelubricants":                {-2147483648, 0},
		"kafkaenv-warm-group-0":             {-1816712928, 0},
		"kafkaenv-warm-txn-3":               {300793294, 6},
		"commitactivity-20261201-061500-s3": {-823156255, 7},
	} {
		if h := javaHash(key); h != want.hash {
			t.Errorf("javaHash(%q) = %d, want %d", key, h, want.hash)
		}
		if p := partitionFor(key, 8); p != want.p {
			t.Errorf("partitionFor(%q, 8) = %d, want %d", key, p, want.p)
		}
	}
}

func TestNameForPartitionCoversEveryPartition(t *testing.T) {
	for _, n := range []int{1, 3, 8, 50} {
		seen := map[string]bool{}
		for p := 0; p < n; p++ {
			name := nameForPartition(warmGroupPrefix, p, n)
			if got := partitionFor(name, n); got != p {
				t.Errorf("nameForPartition(%d of %d) = %q, in partition %d", p, n, name, got)
			}
			if seen[name] {
				t.Errorf("nameForPartition(%d of %d) = %q twice", p, n, name)
			}
			seen[name] = true
		}
	}
}

func TestInternalPartitionsFollowTheConfig(t *testing.T) {
	g, x, err := internalPartitions(node{})
	if err != nil || g != 8 || x != 8 {
		t.Fatalf("internalPartitions(defaults) = %d, %d, %v; want kraftconfig's 8, 8", g, x, err)
	}
	g, x, err = internalPartitions(node{overrides: map[string]string{"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "2"}})
	if err != nil || g != 3 || x != 2 {
		t.Fatalf("internalPartitions(3, 2) = %d, %d, %v", g, x, err)
	}
	if _, _, err := internalPartitions(node{overrides: map[string]string{"offsets.topic.num.partitions": "0"}}); err == nil {
		t.Fatal("internalPartitions(0 partitions) = nil error")
	}
}
