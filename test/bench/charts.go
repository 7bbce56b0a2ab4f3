/*
Copyright 2026 The edgepool Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package bench

import (
	"fmt"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Chart files, in the output folder.
const (
	D1Chart = "d1-hot-latency.png"
	D4Chart = "d4-pool-sizes.png"
)

// WriteCharts draws the hot client's latency percentiles per configuration: D1's open
// loop and D4's pool sizes, as PNG files in dir. It returns the files written (none for
// a scenario that did not run).
func (res *Results) WriteCharts(dir string) ([]string, error) {
	var written []string
	d1 := res.latencySeries("D1", func(r *Run) bool { return r.Hot != nil && r.Hot.open() })
	if len(d1) > 0 {
		path := filepath.Join(dir, D1Chart)
		if err := latencyChart("D1: hot client latency from intended send time (open loop, half its unloaded rate)", d1, path); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	d4 := res.latencySeries("D4", func(r *Run) bool { return r.Hot != nil })
	if len(d4) > 0 {
		path := filepath.Join(dir, D4Chart)
		if err := latencyChart("D4: hot client latency by the HDD's pool size (wrk, 50 connections)", d4, path); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

// latencySeries is one configuration under one load: its hot client in every round.
type latencySeries struct {
	name string
	hot  []*clientResult
}

// latencySeries groups scenario's runs that keep by configuration and load.
func (res *Results) latencySeries(scenario string, keep func(*Run) bool) []latencySeries {
	var series []latencySeries
	for _, r := range res.Runs {
		if r.Scenario != scenario || !keep(r) {
			continue
		}
		name := r.Config + ", " + r.Chart
		i := slices.IndexFunc(series, func(s latencySeries) bool { return s.name == name })
		if i < 0 {
			series, i = append(series, latencySeries{name: name}), len(series)
		}
		series[i].hot = append(series[i].hot, r.Hot)
	}
	return series
}

var percentileNames = []string{"p50", "p90", "p99", "p99.9", "max"}

// percentiles are c's latency percentiles in ms, in the order of percentileNames.
func (c *clientResult) percentiles() []float64 {
	return []float64{c.LatP50Us / 1e3, c.LatP90Us / 1e3, c.LatP99Us / 1e3, c.LatP999Us / 1e3, c.LatMaxUs / 1e3}
}

// latencyChart draws a line per series through its percentiles (the median over
// rounds), on a log scale, into a PNG file.
func latencyChart(title string, series []latencySeries, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "latency (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.NominalX(percentileNames...)
	p.Legend.Top, p.Legend.Left = true, true
	for i, s := range series {
		pts := make(plotter.XYs, len(percentileNames))
		bounded := false
		for j := range pts {
			var vs []Value
			for _, c := range s.hot {
				vs = append(vs, exact(c.percentiles()[j]))
				bounded = bounded || c.latencyBounded()
			}
			// A log scale cannot show 0 (no request took under a microsecond).
			pts[j].X, pts[j].Y = float64(j), max(median(vs).V, 1e-3)
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("chart %s: %w", path, err)
		}
		line.Color, points.Color, points.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		p.Add(line, points)
		name := s.name
		if bounded {
			name += " (lower bounds: requests unfinished)"
		}
		p.Legend.Add(name, line, points)
	}
	// Room above the lines for the legend: a decade and a half on the log scale.
	p.Y.Max *= 30
	p.X.Label.Text = "percentile of the hot client's requests"
	p.Add(plotter.NewGrid())
	if err := p.Save(10*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}
