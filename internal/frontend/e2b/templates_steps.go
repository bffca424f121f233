package e2b

// The translation of E2B's template steps into a Dockerfile (see templates.go).

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/pkg/api"
)

// translatedTemplate is an E2B template as a Dockerfile.
type translatedTemplate struct {
	dockerfile string
	// base is the FROM image.
	base string
	// steps maps a Dockerfile line to E2B's step ("base", "1".., "finalize"),
	// which the SDK maps to the builder call that made it.
	steps map[int]string
	// what describes each line as the template's builder call made it.
	what map[int]string
	// files are the upload hashes the COPY steps read.
	files []string
	// globs are the COPY steps whose source is a pattern, by index.
	globs []templateGlob
	// auth are the credentials of the FROM image's registry the template
	// gave (fromImage with credentials): for the build's pull only.
	auth map[string]api.RegistryAuth
}

// templateGlob is a COPY step's source pattern and the files it reads.
type templateGlob struct{ hash, pattern string }

// globMatch says where a COPY of pattern puts the uploaded entry name,
// relative to its destination, as Docker copies a wildcard's matches: a
// matching file by its base name, a matching directory's contents ("" for
// the directory itself). ok is false when the entry is not copied.
func globMatch(pattern, name string) (string, bool) {
	ps, ns := strings.Split(pattern, "/"), strings.Split(name, "/")
	if len(ns) < len(ps) {
		return "", false
	}
	if ok, err := path.Match(pattern, strings.Join(ns[:len(ps)], "/")); err != nil || !ok {
		return "", false
	}
	return strings.Join(ns[len(ps)-1:], "/"), true
}

// describe names a Dockerfile line as the template wrote it.
func (t translatedTemplate) describe(line int, instruction string) string {
	if d, ok := t.what[line]; ok {
		return d
	}
	return instruction
}

// explain turns a build error into the failed step and an E2B message
// naming the template's call rather than the Dockerfile. An error that is
// not the steps' own (a registry refusing credentials, an image not found,
// a registry down) starts with its code: permission_denied: ...
func (t translatedTemplate) explain(err error) (string, string) {
	step, msg := t.explainStep(err)
	switch code := errdefs.CodeOf(err); code {
	case api.CodeInvalidArgument, api.CodeInternal:
	default:
		msg = string(code) + ": " + msg
	}
	return step, msg
}

func (t translatedTemplate) explainStep(err error) (string, string) {
	msg := err.Error()
	m := dockerfileLine.FindStringSubmatch(msg)
	if m == nil {
		return "", msg
	}
	line, _ := strconv.Atoi(m[1])
	rest := msg[len(m[0]):]
	d, ok := t.what[line]
	if !ok {
		return t.steps[line], rest
	}
	// RUN errors repeat the instruction as written; the Dockerfile form
	// means nothing to the template's author.
	if i := strings.Index(rest, "] "); strings.HasPrefix(rest, "RUN [") && i > 0 {
		rest = rest[i+2:]
	}
	return t.steps[line], fmt.Sprintf("step %s (%s): %s", t.steps[line], d, rest)
}

// templateFrom is a template's base: the image the Dockerfile starts FROM,
// as the template named it, and that image's default user.
type templateFrom struct {
	image, named, user string
}

// templateBase returns the base a template names ("" for E2B's default).
func templateBase(spec e2bapi.TemplateBuildStartV2) (string, error) {
	if spec.FromImageRegistry != nil && spec.FromImage == nil {
		return "", errdefs.Invalid("registry credentials (fromImageRegistry) come with fromImage: a template base has none")
	}
	base := ""
	switch {
	case spec.FromTemplate != nil && spec.FromImage != nil:
		return "", errdefs.Invalid("a template has one base: fromImage or fromTemplate")
	case spec.FromTemplate != nil:
		base = *spec.FromTemplate
	case spec.FromImage != nil:
		base = *spec.FromImage
	}
	if base == baseTemplate || base == e2bBaseImage {
		base = ""
	}
	if strings.ContainsAny(base, " \t\n\r$\"'\\") {
		return "", errdefs.Invalid("base image %q is not an image reference", base)
	}
	return base, nil
}

// gcpKeyUser is the user name with which a registry of Google's (Artifact
// Registry, Container Registry) takes a service account key as password.
const gcpKeyUser = "_json_key"

// templateRegistryAuth maps a template's fromImageRegistry (fromImage with
// username and password, fromGCPRegistry) to credentials for the base
// image's registry: the build's FROM pull uses them and nothing keeps them.
// AWS ECR needs a token exchange with AWS's API: not_implemented.
func templateRegistryAuth(spec e2bapi.TemplateBuildStartV2, base string) (map[string]api.RegistryAuth, error) {
	if spec.FromImageRegistry == nil {
		return nil, nil
	}
	kind, err := spec.FromImageRegistry.Discriminator()
	if err != nil {
		return nil, errdefs.Invalid("fromImageRegistry: %v", err)
	}
	var a api.RegistryAuth
	switch kind {
	case string(e2bapi.Registry):
		g, err := spec.FromImageRegistry.AsGeneralRegistry()
		if err != nil {
			return nil, errdefs.Invalid("fromImageRegistry: %v", err)
		}
		a = api.RegistryAuth{Username: g.Username, Password: g.Password}
	case string(e2bapi.Gcp):
		g, err := spec.FromImageRegistry.AsGCPRegistry()
		if err != nil {
			return nil, errdefs.Invalid("fromImageRegistry: %v", err)
		}
		if !json.Valid([]byte(g.ServiceAccountJson)) {
			return nil, errdefs.Invalid("fromGCPRegistry: the service account key is not JSON")
		}
		a = api.RegistryAuth{Username: gcpKeyUser, Password: g.ServiceAccountJson}
	case string(e2bapi.Aws):
		return nil, errdefs.New(api.CodeNotImplemented, "fromAWSRegistry: AWS ECR credentials need a token exchange with AWS (ecr:GetAuthorizationToken) that dsec does not make; give the token as fromImage(ref, {username: 'AWS', password: TOKEN}) or configure the node's Docker config.json")
	default:
		return nil, errdefs.Invalid("fromImageRegistry: unknown type %q (registry, gcp or aws)", kind)
	}
	if a.Username == "" || a.Password == "" {
		return nil, errdefs.Invalid("fromImage registry credentials need a username and a password")
	}
	if base == "" {
		return nil, errdefs.Invalid("registry credentials apply to a registry reference (REGISTRY/REPO[:TAG]), not to %s", e2bBaseImage)
	}
	ref, err := registry.Parse(base)
	if err != nil {
		return nil, err
	}
	return map[string]api.RegistryAuth{ref.Context().RegistryStr(): a}, nil
}

// translateTemplate turns the steps of an E2B build into a Dockerfile; bad
// steps are invalid_argument.
func translateTemplate(spec e2bapi.TemplateBuildStartV2, base templateFrom, alias, buildID string) (translatedTemplate, error) {
	t := translatedTemplate{steps: map[int]string{}, what: map[int]string{}}
	var lines []string
	add := func(step, what, line string) {
		lines = append(lines, line)
		t.steps[len(lines)] = step
		if what != "" {
			t.what[len(lines)] = what
		}
	}
	t.base = base.image
	var err error
	if t.auth, err = templateRegistryAuth(spec, base.named); err != nil {
		return t, err
	}
	add("base", "from "+cmp.Or(base.named, e2bBaseImage), "FROM "+base.image)

	var steps []e2bapi.TemplateStep
	if spec.Steps != nil {
		steps = *spec.Steps
	}
	user := base.user // the user of the steps so far ("": root)
	// force (the build's, or a step's: skipCache) rebuilds from there on: a
	// label naming this build changes the cache keys of every later step.
	forced := false
	force := func(step string) {
		if !forced {
			forced = true
			add(step, "", "LABEL "+tplLabelForce+"="+mustQuote(buildID))
		}
	}
	if spec.Force != nil && *spec.Force {
		force("base")
	}
	for i, s := range steps {
		n := strconv.Itoa(i + 1)
		if s.Force != nil && *s.Force {
			force(n)
		}
		var args []string
		if s.Args != nil {
			args = *s.Args
		}
		bad := func(format string, a ...any) error {
			return errdefs.Invalid("step %s (%s): %s", n, s.Type, fmt.Sprintf(format, a...))
		}
		switch strings.ToUpper(s.Type) {
		case "RUN":
			if len(args) < 1 || len(args) > 2 || strings.TrimSpace(args[0]) == "" {
				return t, bad("want a command and an optional user, got %d arguments", len(args))
			}
			runAs := ""
			if len(args) == 2 && args[1] != "" && args[1] != user {
				if !validUser(args[1]) {
					return t, bad("invalid user %q", args[1])
				}
				runAs = args[1]
				add(n, "", "USER "+runAs)
			}
			argv, _ := json.Marshal([]string{"/bin/sh", "-c", args[0]})
			add(n, "runCmd("+strconv.Quote(args[0])+")", "RUN "+string(argv))
			if runAs != "" {
				add(n, "", "USER "+cmp.Or(user, "root"))
			}
		case "COPY":
			if len(args) < 2 || len(args) > 4 || args[0] == "" || args[1] == "" {
				return t, bad("want a source, a destination, an optional user and mode, got %d arguments", len(args))
			}
			if s.FilesHash == nil || !filesHash.MatchString(*s.FilesHash) {
				return t, bad("no valid filesHash for the uploaded files")
			}
			src := path.Clean(args[0])
			if path.IsAbs(args[0]) || src == ".." || strings.HasPrefix(src, "../") {
				return t, bad("source %q must be a path inside the template's context", args[0])
			}
			flags := ""
			if len(args) > 2 && args[2] != "" {
				if !validUser(args[2]) {
					return t, bad("invalid user %q", args[2])
				}
				flags += " --chown=" + args[2]
			}
			if len(args) > 3 && args[3] != "" {
				if _, err := strconv.ParseUint(args[3], 8, 32); err != nil {
					return t, bad("mode %q is not octal", args[3])
				}
				flags += " --chmod=" + args[3]
			}
			from := "files/" + *s.FilesHash + "/" + src
			switch {
			case src == ".":
				from = "files/" + *s.FilesHash + "/"
			case strings.ContainsAny(src, "*?["):
				// The matches are staged in a directory of their own
				// (see globMatch), so that links among them are copied
				// as links, as E2B extracts them.
				if _, err := path.Match(src, ""); err != nil {
					return t, bad("source pattern %q: %v", args[0], err)
				}
				from = "globs/" + strconv.Itoa(len(t.globs)) + "/"
				t.globs = append(t.globs, templateGlob{hash: *s.FilesHash, pattern: src})
			}
			sd, _ := json.Marshal([]string{from, args[1]})
			add(n, "copy("+strconv.Quote(args[0])+", "+strconv.Quote(args[1])+")", "COPY"+flags+" "+string(sd))
			t.files = append(t.files, *s.FilesHash)
		case "ENV":
			if len(args) == 0 || len(args)%2 != 0 {
				return t, bad("want KEY, VALUE pairs, got %d arguments", len(args))
			}
			kvs := make([]string, 0, len(args)/2)
			for j := 0; j < len(args); j += 2 {
				if !envKey.MatchString(args[j]) {
					return t, bad("invalid variable name %q", args[j])
				}
				v, err := dfQuote(args[j+1])
				if err != nil {
					return t, bad("%s: %v", args[j], err)
				}
				kvs = append(kvs, args[j]+"="+v)
			}
			add(n, "setEnvs", "ENV "+strings.Join(kvs, " "))
		case "WORKDIR":
			if len(args) != 1 || args[0] == "" {
				return t, bad("want one directory")
			}
			d, err := dfQuote(args[0])
			if err != nil {
				return t, bad("%v", err)
			}
			add(n, "setWorkdir("+strconv.Quote(args[0])+")", "WORKDIR "+d)
		case "USER":
			if len(args) != 1 || !validUser(args[0]) {
				return t, bad("want one user name or UID[:GID]")
			}
			user = args[0]
			add(n, "setUser("+strconv.Quote(user)+")", "USER "+user)
		default:
			return t, bad("unknown step type (dsec builds RUN, COPY, ENV, WORKDIR and USER steps)")
		}
	}

	labels := []string{tplLabelTemplate + "=" + mustQuote(alias), tplLabelBuild + "=" + mustQuote(buildID)}
	for _, c := range []struct {
		label string
		v     *string
	}{{tplLabelStart, spec.StartCmd}, {tplLabelReady, spec.ReadyCmd}} {
		if c.v == nil || strings.TrimSpace(*c.v) == "" {
			continue
		}
		q, err := dfQuote(*c.v)
		if err != nil {
			return t, errdefs.Invalid("%s: %v", strings.TrimPrefix(c.label, "dev.dsec.e2b."), err)
		}
		labels = append(labels, c.label+"="+q)
	}
	if spec.ReadyCmd != nil && strings.TrimSpace(*spec.ReadyCmd) != "" && (spec.StartCmd == nil || strings.TrimSpace(*spec.StartCmd) == "") {
		return t, errdefs.Invalid("a ready command checks a start command: setStartCmd first")
	}
	add("finalize", "", "LABEL "+strings.Join(labels, " "))
	t.dockerfile = strings.Join(lines, "\n") + "\n"
	return t, nil
}

// label adds LABEL key=value at the end of the Dockerfile (step finalize).
func (t *translatedTemplate) label(key, value string) {
	t.dockerfile += "LABEL " + key + "=" + mustQuote(value) + "\n"
	t.steps[strings.Count(t.dockerfile, "\n")] = "finalize"
}

// validUser says whether u is a user name or UID[:GID] (group names too).
func validUser(u string) bool {
	return u != "" && len(u) <= 64 && !strings.ContainsAny(u, " \t\n\r\"'$\\/\x00")
}

// dfQuote quotes s as a Dockerfile word: double quotes, with \, " and $
// escaped. A line break cannot be written on a Dockerfile line.
func dfQuote(s string) (string, error) {
	if strings.ContainsAny(s, "\n\r\x00") {
		return "", errors.New("line breaks and NUL bytes are not supported in this value")
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(s) + `"`, nil
}

func mustQuote(s string) string {
	q, _ := dfQuote(s)
	return q
}
