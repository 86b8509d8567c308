package kafkaenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// ModulePath is the Go module whose checkout holds pom.xml and .cache/.
const ModulePath = "github.com/kafkastreams/kafkastreams"

// MavenCentral is where pom.xml fetches the Kafka jars from.
const MavenCentral = "https://repo.maven.apache.org/maven2"

// repoRoot returns the directory of the checkout of ModulePath that
// contains the working directory, walking up from it.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module "+ModulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("kafkaenv: no checkout of %s above the working directory", ModulePath)
		}
		dir = parent
	}
}

// findJava returns the java binary to use: o.Java, else $JAVA_HOME/bin/java,
// else java in PATH; and checks that it is Java 17 or newer.
func findJava(ctx context.Context, o Options) (string, error) {
	java := o.Java
	if java == "" {
		if home := os.Getenv("JAVA_HOME"); home != "" {
			if p := filepath.Join(home, "bin", "java"); isExecutable(p) {
				java = p
			}
		}
	}
	if java == "" {
		java = "java"
	}
	path, err := exec.LookPath(java)
	if err != nil {
		return "", fmt.Errorf("%w: %q not found (%v): install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless), or start a Docker daemon and run `make kafka-image`", ErrNoJava, java, err)
	}
	out, err := exec.CommandContext(ctx, path, "-version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: %s -version failed: %v: %s", ErrNoJava, path, err, strings.TrimSpace(string(out)))
	}
	major, ok := javaMajor(string(out))
	if !ok {
		return "", fmt.Errorf("%w: cannot read the version of %s from %q", ErrNoJava, path, firstLine(string(out)))
	}
	if major < 17 {
		return "", fmt.Errorf("%w: %s is Java %d; Kafka 4 needs 17 or newer: install a JDK 17", ErrNoJava, path, major)
	}
	return path, nil
}

// ansiRE matches the colour escapes Maven prints even in batch mode.
var ansiRE = regexp.MustCompile("\x1b\\[[0-9;]*m")

var javaVersionRE = regexp.MustCompile(`version "(\d+)(?:\.(\d+))?`)

// javaMajor parses the major version out of `java -version` output
// ("1.8.0_392" is 8, "17.0.15" is 17).
func javaMajor(out string) (int, bool) {
	m := javaVersionRE.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	major, _ := strconv.Atoi(m[1])
	if major == 1 && m[2] != "" {
		major, _ = strconv.Atoi(m[2])
	}
	return major, true
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// jarsPresent reports whether dir holds the core and server jars of version.
func jarsPresent(dir, version string) bool {
	for _, j := range []string{"kafka_2.13-" + version + ".jar", "kafka-server-" + version + ".jar"} {
		if _, err := os.Stat(filepath.Join(dir, j)); err != nil {
			return false
		}
	}
	return true
}

// ensureJars returns the jars directory of o, fetching the jars with Maven
// when they are missing and the directory is the default one.
func ensureJars(ctx context.Context, o Options) (string, error) {
	if o.JarsDir != "" {
		if !jarsPresent(o.JarsDir, o.KafkaVersion) {
			return "", fmt.Errorf("%w: %s has no kafka_2.13-%s.jar (set by Options.JarsDir or %s)", ErrNoJars, o.JarsDir, o.KafkaVersion, EnvJarsDir)
		}
		return o.JarsDir, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("%w: %v; set %s to a directory of Kafka %s jars", ErrNoJars, err, EnvJarsDir, o.KafkaVersion)
	}
	dir := filepath.Join(root, ".cache", "kafka", o.KafkaVersion, "libs")
	if jarsPresent(dir, o.KafkaVersion) {
		return dir, nil
	}
	o.Logf("Kafka %s jars missing in %s: fetching them from Maven Central with mvn (as `make kafka-jars` does)", o.KafkaVersion, dir)
	pom := filepath.Join(root, "integration", "kafkaenv", "pom.xml")
	if err := fetchJars(ctx, pom, o.KafkaVersion, dir, mavenRepo{}); err != nil {
		return "", err
	}
	return dir, nil
}

// mavenRepo is where fetchJars' mvn resolves artifacts from. The zero
// value is Maven's own configuration: Maven Central, or the mirrors of the
// user's settings.xml.
type mavenRepo struct {
	// URL, if set, mirrors every remote repository (a settings file with
	// <mirrorOf>*</mirrorOf>, replacing the user's): tests point it at a
	// local fake repository.
	URL string
	// Local, if set, is the local repository directory (maven.repo.local;
	// default ~/.m2/repository).
	Local string
}

// fetchJars runs Maven on pom to copy the jars of Kafka version into dir,
// resolving from repo. A failure says which of the two Maven reported: an
// artifact the repository does not have ("artifact <coordinates> not found
// at <url>": a 404, e.g. a Kafka version that was never released) or a
// repository it could not reach ("cannot reach the Maven repository
// <url>": refused, no route, a proxy); else Maven's error lines.
func fetchJars(ctx context.Context, pom, version, dir string, repo mavenRepo) error {
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return fmt.Errorf("%w: mvn not found (%v): the Kafka jars come from Maven Central through %s; install Maven (Debian: apt-get install maven) or set %s", ErrNoJars, err, pom, EnvJarsDir)
	}
	tmp := dir + ".partial"
	os.RemoveAll(tmp)
	args := []string{"-B", "-q", "-Dstyle.color=never", "-f", pom}
	if repo.URL != "" {
		settings, err := mirrorSettings(repo.URL)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNoJars, err)
		}
		defer os.Remove(settings)
		args = append(args, "-s", settings)
	}
	if repo.Local != "" {
		args = append(args, "-Dmaven.repo.local="+repo.Local)
	}
	// The goal by its plugin's coordinates (the version is the pom's), not
	// the prefix "dependency:": resolving a prefix needs the repository's
	// metadata, and Maven reports an unreachable repository then only as
	// "No plugin found for prefix", without the repository's error.
	args = append(args, "-Dkafka.version="+version, "-DoutputDirectory="+tmp, "org.apache.maven.plugins:maven-dependency-plugin:copy-dependencies")
	out, err := exec.CommandContext(ctx, mvn, args...).CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		if what, ok := mavenCause(string(out)); ok {
			return fmt.Errorf("%w: %s (mvn, for the jars of Kafka %s)", ErrNoJars, what, version)
		}
		return fmt.Errorf("%w: %s (the jars of org.apache.kafka:kafka_2.13:%s come from Maven Central, %s; is it reachable?)", ErrNoJars, mavenFailure(string(out), err), version, MavenCentral)
	}
	if !jarsPresent(tmp, version) {
		os.RemoveAll(tmp)
		return fmt.Errorf("%w: mvn succeeded but %s lacks kafka_2.13-%s.jar", ErrNoJars, tmp, version)
	}
	// The marker `make kafka-jars` writes: without it, make fetches again.
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return fmt.Errorf("%w: %v", ErrNoJars, err)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("%w: %v", ErrNoJars, err)
	}
	return nil
}

// mirrorSettings writes a Maven settings file whose one mirror, of every
// repository, is url, and returns its path.
func mirrorSettings(url string) (string, error) {
	f, err := os.CreateTemp("", "kafkaenv-settings-*.xml")
	if err != nil {
		return "", err
	}
	_, err = fmt.Fprintf(f, `<settings><mirrors><mirror><id>kafkaenv-mirror</id><mirrorOf>*</mirrorOf><url>%s</url></mirror></mirrors></settings>`+"\n", url)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

var (
	// mavenNotFoundRE: the repository answered 404 for an artifact.
	mavenNotFoundRE = regexp.MustCompile(`Could not find artifact (\S+) in \S+ \((\S+?)\)`)
	// mavenTransferRE: Maven could not fetch from the repository at all.
	mavenTransferRE = regexp.MustCompile(`Could not transfer (?:artifact|metadata) (\S+) from/to \S+ \((\S+?)\): (.*?)(?: -> \[Help|$)`)
)

// mavenCause says which of the two failures Maven's output reports, if
// either: an artifact not found at a repository (a 404), or a repository it
// could not reach (the transfer failed).
func mavenCause(out string) (string, bool) {
	out = ansiRE.ReplaceAllString(out, "")
	if m := mavenNotFoundRE.FindStringSubmatch(out); m != nil {
		return fmt.Sprintf("artifact %s not found at %s", m[1], m[2]), true
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := mavenTransferRE.FindStringSubmatch(sc.Text()); m != nil {
			return fmt.Sprintf("cannot reach the Maven repository %s: %s (fetching %s)", m[2], strings.TrimSpace(m[3]), m[1]), true
		}
	}
	return "", false
}

// mavenFailure picks the informative lines out of Maven's output: the
// "[ERROR] Failed to execute goal ... Could not resolve/transfer ..." ones.
func mavenFailure(out string, err error) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(ansiRE.ReplaceAllString(sc.Text(), ""))
		if strings.HasPrefix(line, "[ERROR]") && (strings.Contains(line, "Could not") || strings.Contains(line, "Failed to")) {
			lines = append(lines, strings.TrimSpace(strings.TrimPrefix(line, "[ERROR]")))
		}
		if len(lines) == 3 {
			break
		}
	}
	if len(lines) == 0 {
		return fmt.Sprintf("mvn failed (%v): %s", err, lastLines(out, 5))
	}
	return "mvn failed: " + strings.Join(lines, "; ")
}

// lastLines returns the last n non-empty lines of s, joined by " | ".
func lastLines(s string, n int) string {
	all := strings.Split(strings.TrimSpace(s), "\n")
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return strings.Join(all, " | ")
}

// tailFile returns the last n lines of the file at path, for error messages.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var errExited = errors.New("broker process exited")
