package runner

import (
	"flag"
	"strings"
	"testing"
)

// TestValidateFlags: a zero or negative numeric or duration flag is refused
// with an error naming the flag and its value (--commit_interval=-1s was
// accepted and the job ran, with the default interval instead); a good value
// passes. The flags are set as a user's command line sets them.
func TestValidateFlags(t *testing.T) {
	for _, tc := range []struct {
		flag, value string
		want        string // "" for a good value
	}{
		{"commit_interval", "-1s", "kafkastreams: --commit_interval=-1s: must be positive"},
		{"commit_interval", "0", "kafkastreams: --commit_interval=0s: must be positive"},
		{"commit_interval", "-5ms", "kafkastreams: --commit_interval=-5ms: must be positive"},
		{"commit_interval", "250ms", ""},
		{"watermark_stuck_threshold", "0", "kafkastreams: --watermark_stuck_threshold=0s: must be positive"},
		{"watermark_stuck_threshold", "5s", ""},
		{"commit_interval", "1ns", ""},
		{"max_bundle_size", "0", "kafkastreams: --max_bundle_size=0: must be positive"},
		{"max_bundle_size", "-3", "kafkastreams: --max_bundle_size=-3: must be positive"},
		{"max_bundle_size", "1", ""},
		{"max_bundle_size", "500", ""},
		{"internal_topic_partitions", "0", "kafkastreams: --internal_topic_partitions=0: must be positive"},
		{"internal_topic_partitions", "-1", "kafkastreams: --internal_topic_partitions=-1: must be positive"},
		{"internal_topic_partitions", "4294967297", "kafkastreams: --internal_topic_partitions=4294967297: must be at most 2147483647 (a Kafka partition count is an int32)"},
		{"internal_topic_partitions", "1", ""},
		{"internal_topic_partitions", "2147483647", ""},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			setFlag(t, tc.flag, tc.value)
			err := validateFlags()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("--%s=%s: want no error, got %v", tc.flag, tc.value, err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("--%s=%s: want error %q, got %v", tc.flag, tc.value, tc.want, err)
			}
		})
	}
}

// TestValidateFlagsNamesEveryBadFlag: several bad flags are all named, one
// line each, so a user fixes them in one go.
func TestValidateFlagsNamesEveryBadFlag(t *testing.T) {
	setFlag(t, "commit_interval", "-1s")
	setFlag(t, "max_bundle_size", "0")
	setFlag(t, "internal_topic_partitions", "-2")
	err := validateFlags()
	if err == nil {
		t.Fatal("want an error, got none")
	}
	want := []string{
		"kafkastreams: --internal_topic_partitions=-2: must be positive",
		"kafkastreams: --commit_interval=-1s: must be positive",
		"kafkastreams: --max_bundle_size=0: must be positive",
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("want the lines\n%s\ngot\n%s", strings.Join(want, "\n"), err)
	}
}

// TestValidateFlagsDefaults: the defaults pass.
func TestValidateFlagsDefaults(t *testing.T) {
	for _, name := range []string{"commit_interval", "max_bundle_size", "internal_topic_partitions"} {
		setFlag(t, name, flag.Lookup(name).DefValue)
	}
	if err := validateFlags(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
}

// setFlag sets the command-line flag name to value for the test's duration.
func setFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag --%s", name)
	}
	old := f.Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatalf("--%s=%s: %v", name, value, err)
	}
	t.Cleanup(func() {
		if err := flag.Set(name, old); err != nil {
			t.Errorf("restore --%s=%s: %v", name, old, err)
		}
	})
}
