// Package metricstest reads a Prometheus text exposition the way a scraper
// does (Prometheus's own text parser) and looks up samples, for tests that
// check how dsec's metrics moved. Production code must not import it.
package metricstest

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is a parsed exposition, by metric name.
type Families map[string]*dto.MetricFamily

// Parse parses a text exposition.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("the exposition does not parse: %w", err)
	}
	return f, nil
}

// Scrape GETs url (with a bearer token unless it is empty) and parses the
// answer.
func Scrape(url, token string) (Families, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return Parse(resp.Body)
}

// Value sums the samples of name whose labels include every "k=v" pair: a
// counter's or gauge's value, or for NAME_count a histogram's sample count. A
// series that does not exist is 0.
func (fams Families) Value(name string, labels ...string) float64 {
	histCount := false
	f := fams[name]
	if f == nil && strings.HasSuffix(name, "_count") {
		f, histCount = fams[strings.TrimSuffix(name, "_count")], true
	}
	if f == nil {
		return 0
	}
	sum := 0.0
next:
	for _, mt := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range mt.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case histCount:
			sum += float64(mt.GetHistogram().GetSampleCount())
		case mt.Counter != nil:
			sum += mt.GetCounter().GetValue()
		case mt.Gauge != nil:
			sum += mt.GetGauge().GetValue()
		}
	}
	return sum
}

// Labels calls fn with every label value of every sample (to check that none
// carries what it must not).
func (fams Families) Labels(fn func(metric, label, value string)) {
	for name, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				fn(name, lp.GetName(), lp.GetValue())
			}
		}
	}
}
