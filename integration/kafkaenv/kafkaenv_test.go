package kafkaenv

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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

// TestFetchJarsNamesTheMissingArtifact asks Maven Central for a Kafka
// version that does not exist: one small request.
func TestFetchJarsNamesTheMissingArtifact(t *testing.T) {
	if testing.Short() {
		t.Skip("asks Maven Central; -short")
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		t.Skip("needs mvn on PATH to ask Maven Central")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pom, _ := filepath.Abs("pom.xml")
	dir := filepath.Join(t.TempDir(), "libs")
	err := fetchJars(ctx, pom, "0.0.0-kafkaenv-test", dir)
	if !errors.Is(err, ErrNoJars) {
		t.Fatalf("fetchJars = %v, want ErrNoJars", err)
	}
	for _, want := range []string{"kafka_2.13", "0.0.0-kafkaenv-test", "Maven Central"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	t.Log(err)
	if _, serr := os.Stat(dir + ".partial"); serr == nil {
		t.Errorf("partial download left behind")
	}
}
