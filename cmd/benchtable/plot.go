package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotScale writes a PNG (the extension of path decides the format, as
// gonum's plot.Save does) of wall time in seconds against input size in
// events for this runner and Prism, one point per size each ran; sizes
// Prism was not run at are named in its legend entry. It fails if no size
// was measured.
func PlotScale(path, title string, pts []ScalePoint) error {
	var ours, prism plotter.XYs
	var skipped []string
	for _, p := range pts {
		if p.OursSeconds > 0 {
			ours = append(ours, plotter.XY{X: float64(p.Events), Y: p.OursSeconds})
		}
		if p.PrismSeconds > 0 {
			prism = append(prism, plotter.XY{X: float64(p.Events), Y: p.PrismSeconds})
		} else if p.PrismNeed > 0 {
			skipped = append(skipped, fmt.Sprintf("%s: would need ~%.1f GB", num(float64(p.Events)), p.PrismNeed/1e9))
		}
	}
	if len(ours) == 0 && len(prism) == 0 {
		return fmt.Errorf("benchtable: no scale size measured: nothing to plot")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "input size (events)"
	p.Y.Label.Text = "wall time (s), start-up included"
	p.X.Min, p.Y.Min = 0, 0
	p.X.Tick.Marker = eventTicks{}
	p.Add(plotter.NewGrid())
	var series []any
	if len(ours) > 0 {
		series = append(series, "kafkastreams (1 instance, real broker)", ours)
	}
	if len(prism) > 0 || len(skipped) > 0 {
		label := "Prism (in process)"
		if len(skipped) > 0 {
			label += "; not run at " + strings.Join(skipped, ", ")
		}
		if len(prism) == 0 {
			prism = plotter.XYs{} // a legend entry only
		}
		series = append(series, label, prism)
	}
	if err := plotutil.AddLinePoints(p, series...); err != nil {
		return fmt.Errorf("benchtable: %w", err)
	}
	p.Legend.Top, p.Legend.Left = true, true
	// Room above the highest point for the legend, right of the last for
	// its tick label.
	p.Y.Max *= 1.3
	p.X.Max *= 1.06
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, path)
}

// eventTicks labels an axis of event counts as 500k, 1M, 2.5M.
type eventTicks struct{}

// Ticks returns gonum's default ticks between min and max, relabelled.
func (eventTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ts {
		if t.Label != "" {
			ts[i].Label = events(t.Value)
		}
	}
	return ts
}

// events formats an event count briefly: 0, 999, 500k, 1M, 2.5M.
func events(x float64) string {
	switch {
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', -1, 64) + "M"
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}
