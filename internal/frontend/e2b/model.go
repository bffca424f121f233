package e2b

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Labels the front end keeps on a sandbox it created, next to the E2B metadata
// (which are the other labels, verbatim). Metadata keys may not use the prefix.
const (
	labelPrefix     = "dsec.e2b/"
	labelTemplate   = labelPrefix + "template"
	labelTimeout    = labelPrefix + "timeout"    // seconds, as created
	labelOnTimeout  = labelPrefix + "on-timeout" // kill or pause
	labelAutoResume = labelPrefix + "auto-resume"
)

const (
	actionKill  = "kill"
	actionPause = "pause"
	// clientID is the deprecated field E2B still requires in its answers.
	clientID = "dsec"
	// baseTemplate is E2B's default template; it means the node's default image.
	baseTemplate = "base"
)

// farFuture is endAt for a sandbox without a deadline (created through /v1).
var farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// sandboxJSON is E2B's Sandbox: the answer of create, connect and resume.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	Domain             *string `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

// lifecycleJSON is E2B's SandboxLifecycle.
type lifecycleJSON struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// detailJSON is E2B's SandboxDetail (GET /sandboxes/{id}) and, without the
// access token and lifecycle, its ListedSandbox.
type detailJSON struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain,omitempty"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	Lifecycle       *lifecycleJSON    `json:"lifecycle,omitempty"`
	VolumeMounts    []struct{}        `json:"volumeMounts"`
}

// templateOf is the template a sandbox was created from.
func templateOf(sb api.Sandbox) string {
	if t := sb.Labels[labelTemplate]; t != "" {
		return t
	}
	if sb.Image == "" {
		return baseTemplate
	}
	return sb.Image
}

// metadataOf is a sandbox's E2B metadata: its labels but the front end's own.
func metadataOf(sb api.Sandbox) map[string]string {
	md := map[string]string{}
	for k, v := range sb.Labels {
		if !strings.HasPrefix(k, labelPrefix) {
			md[k] = v
		}
	}
	return md
}

// onTimeoutOf is what happens to sb at its deadline.
func onTimeoutOf(sb api.Sandbox) string {
	if sb.Labels[labelOnTimeout] == actionPause {
		return actionPause
	}
	return actionKill
}

// e2bMade says whether sb was created through the E2B API (rather than /v1).
func e2bMade(sb api.Sandbox) bool { return sb.Labels[labelTemplate] != "" }

// timeoutOf is the timeout sb was created with (0: none).
func timeoutOf(sb api.Sandbox) time.Duration {
	n, err := strconv.ParseInt(sb.Labels[labelTimeout], 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

func (h *Handler) sandboxJSON(sb api.Sandbox) sandboxJSON {
	return sandboxJSON{TemplateID: templateOf(sb), SandboxID: sb.ID, Alias: templateOf(sb), ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: h.accessToken(sb.ID)}
}

func (h *Handler) detailJSON(sb api.Sandbox, full bool) detailJSON {
	end := farFuture
	if sb.ExpiresAt != nil {
		end = *sb.ExpiresAt
	}
	d := detailJSON{TemplateID: templateOf(sb), Alias: templateOf(sb), SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.CreatedAt.UTC(), EndAt: end.UTC(), EnvdVersion: EnvdVersion,
		CPUCount: int(math.Ceil(sb.CPU)), MemoryMB: sb.MemoryBytes >> 20, DiskSizeMB: sb.DiskBytes >> 20,
		Metadata: metadataOf(sb), State: sb.State, VolumeMounts: []struct{}{}}
	if full {
		d.EnvdAccessToken = h.accessToken(sb.ID)
		d.Lifecycle = &lifecycleJSON{AutoResume: sb.Labels[labelAutoResume] == "true", OnTimeout: onTimeoutOf(sb)}
	}
	return d
}

// visible says whether E2B shows the sandbox: running or paused, not exited.
func visible(sb api.Sandbox) bool {
	return sb.State == api.StateRunning || sb.State == api.StatePaused
}
