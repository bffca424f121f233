package e2b

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Labels the front end keeps on a sandbox it created, next to the E2B metadata
// (which are the other labels, verbatim). Metadata keys may not use the prefix.
const (
	labelPrefix     = "dsec.e2b/"
	labelTemplate   = labelPrefix + "template"
	labelTimeout    = labelPrefix + "timeout"    // seconds, as created
	labelOnTimeout  = labelPrefix + "on-timeout" // kill, pause or pause-filesystem
	labelAutoResume = labelPrefix + "auto-resume"
	labelInternet   = labelPrefix + "internet"      // allow_internet_access, when given
	labelPrivate    = labelPrefix + "private-ports" // network.allowPublicTraffic false
)

const (
	actionKill  = "kill"
	actionPause = "pause"
	// actionPauseFS: pause without memory (autoPauseMemory false); E2B
	// reports it as pause.
	actionPauseFS = "pause-filesystem"
	// clientID is the deprecated field E2B still requires in its answers.
	clientID = "dsec"
	// baseTemplate is E2B's default template; it means the node's default image.
	baseTemplate = "base"
)

// farFuture is endAt for a sandbox without a deadline (created through /v1).
var farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// sandboxAnswer is E2B's Sandbox, the answer of create, connect and resume.
// E2B's SDKs read its traffic token as null rather than absent (the generated
// type omits it when nil); the domain is always dsec's (Handler.Domain), so
// getHost never names a host outside the deployment.
type sandboxAnswer struct {
	e2bapi.Sandbox
	Domain             *string `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
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
	if a := sb.Labels[labelOnTimeout]; a == actionPause || a == actionPauseFS {
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

func (h *Handler) sandboxAnswer(sb api.Sandbox) sandboxAnswer {
	template := templateOf(sb)
	a := sandboxAnswer{Sandbox: e2bapi.Sandbox{TemplateID: template, SandboxID: sb.ID, Alias: &template,
		ClientID: clientID, EnvdVersion: EnvdVersion, EnvdAccessToken: nonEmpty(h.accessToken(sb.ID))},
		Domain: nonEmpty(h.Domain())}
	if privatePorts(sb) {
		a.TrafficAccessToken = nonEmpty(h.trafficToken(sb.ID))
	}
	return a
}

// privatePorts says whether sb's ports need its traffic access token.
func privatePorts(sb api.Sandbox) bool { return sb.Labels[labelPrivate] == "true" }

// internetOf is allow_internet_access as sb was created with (nil: not given).
func internetOf(sb api.Sandbox) *bool {
	v, err := strconv.ParseBool(sb.Labels[labelInternet])
	if err != nil {
		return nil
	}
	return &v
}

// detail is E2B's SandboxDetail (GET /sandboxes/{id}).
func (h *Handler) detail(sb api.Sandbox) e2bapi.SandboxDetail {
	l := listed(sb)
	return e2bapi.SandboxDetail{TemplateID: l.TemplateID, Alias: l.Alias, SandboxID: l.SandboxID, ClientID: l.ClientID,
		StartedAt: l.StartedAt, EndAt: l.EndAt, EnvdVersion: l.EnvdVersion, EnvdAccessToken: nonEmpty(h.accessToken(sb.ID)),
		Domain: nonEmpty(h.Domain()), AllowInternetAccess: internetOf(sb),
		CpuCount: l.CpuCount, MemoryMB: l.MemoryMB, DiskSizeMB: l.DiskSizeMB, Metadata: l.Metadata, State: l.State,
		Lifecycle: &e2bapi.SandboxLifecycle{AutoResume: sb.Labels[labelAutoResume] == "true",
			OnTimeout: e2bapi.SandboxOnTimeout(onTimeoutOf(sb))},
		VolumeMounts: l.VolumeMounts, Network: networkInfo(sb)}
}

// listed is E2B's ListedSandbox (GET /sandboxes, /v2/sandboxes): metadata and
// volume mounts always present, as the SDKs read them.
func listed(sb api.Sandbox) e2bapi.ListedSandbox {
	end := farFuture
	if sb.ExpiresAt != nil {
		end = *sb.ExpiresAt
	}
	template := templateOf(sb)
	md := e2bapi.SandboxMetadata(metadataOf(sb))
	return e2bapi.ListedSandbox{TemplateID: template, Alias: &template, SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.CreatedAt.UTC(), EndAt: end.UTC(), EnvdVersion: EnvdVersion,
		CpuCount: e2bapi.CPUCount(math.Ceil(sb.CPU)), MemoryMB: e2bapi.MemoryMB(sb.MemoryBytes >> 20),
		DiskSizeMB: e2bapi.DiskSizeMB(sb.DiskBytes >> 20), Metadata: &md, State: e2bapi.SandboxState(sb.State),
		VolumeMounts: &[]e2bapi.SandboxVolumeMount{}}
}

// nonEmpty is s as an optional field: nil when empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// visible says whether E2B shows the sandbox: running or paused, not exited.
func visible(sb api.Sandbox) bool {
	return sb.State == api.StateRunning || sb.State == api.StatePaused
}
