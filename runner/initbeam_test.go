package runner

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// envInitBeamChild makes the test binary a child of
// TestInitBeamKeepsTheCallersLogger: a fresh process in which beam.Init
// has not run. "mine": the child sets a default logger first; "none": it
// does not.
const envInitBeamChild = "KAFKASTREAMS_TEST_INITBEAM_CHILD"

// TestInitBeamKeepsTheCallersLogger: a program that set slog's default
// logger before Execute keeps it through Execute's beam.Init (Beam's init
// hook sets its own text handler); one that set none gets Beam's. Before
// the fix the first child ended with Beam's *slog.TextHandler as the
// default.
func TestInitBeamKeepsTheCallersLogger(t *testing.T) {
	switch os.Getenv(envInitBeamChild) {
	case "mine":
		if beam.Initialized() {
			fmt.Println("beam.Init ran before the child's test")
			os.Exit(2)
		}
		mine := slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil))
		slog.SetDefault(mine)
		initBeam()
		if !beam.Initialized() || slog.Default() != mine {
			fmt.Printf("after initBeam: initialized %v, default handler %T, want the program's JSON handler\n", beam.Initialized(), slog.Default().Handler())
			os.Exit(3)
		}
		os.Exit(0)
	case "none":
		initBeam()
		if !beam.Initialized() || slog.Default() == startLogger {
			fmt.Printf("after initBeam: initialized %v, default handler %T, want Beam's\n", beam.Initialized(), slog.Default().Handler())
			os.Exit(3)
		}
		os.Exit(0)
	}
	for _, mode := range []string{"mine", "none"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestInitBeamKeepsTheCallersLogger$", "-test.count=1")
		cmd.Env = append(os.Environ(), envInitBeamChild+"="+mode)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("child %q: %v\n%s", mode, err, out)
		}
	}
}
