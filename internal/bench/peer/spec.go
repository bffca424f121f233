package peer

// A minimal subset of the OCI runtime spec (config.json), enough for the
// peers' idle containers. Field names follow
// https://github.com/opencontainers/runtime-spec/blob/main/config.md.

// OCISpec is the top-level config.json.
type OCISpec struct {
	OCIVersion string     `json:"ociVersion"`
	Process    OCIProcess `json:"process"`
	Root       OCIRoot    `json:"root"`
	Hostname   string     `json:"hostname,omitempty"`
	Mounts     []OCIMount `json:"mounts"`
	Linux      OCILinux   `json:"linux"`
}

type OCIProcess struct {
	Terminal        bool            `json:"terminal"`
	User            OCIUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	Capabilities    OCICapabilities `json:"capabilities"`
	Rlimits         []OCIRlimit     `json:"rlimits,omitempty"`
	NoNewPrivileges bool            `json:"noNewPrivileges"`
}

type OCIUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type OCICapabilities struct {
	Bounding  []string `json:"bounding"`
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
}

type OCIRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type OCIRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type OCIMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type OCILinux struct {
	Namespaces    []OCINamespace `json:"namespaces"`
	MaskedPaths   []string       `json:"maskedPaths"`
	ReadonlyPaths []string       `json:"readonlyPaths"`
	CgroupsPath   string         `json:"cgroupsPath,omitempty"`
	Resources     *OCIResources  `json:"resources,omitempty"`
	Seccomp       *OCISeccomp    `json:"seccomp,omitempty"`
}

// OCIResources are the cgroup limits of a container.
type OCIResources struct {
	Memory *OCIMemory `json:"memory,omitempty"`
	CPU    *OCICPU    `json:"cpu,omitempty"`
	Pids   *OCIPids   `json:"pids,omitempty"`
}

type OCIMemory struct {
	Limit int64 `json:"limit"`
}

type OCICPU struct {
	Quota  int64  `json:"quota"`
	Period uint64 `json:"period"`
}

type OCIPids struct {
	Limit int64 `json:"limit"`
}

// OCISeccomp is a seccomp profile in the runtime spec's (libseccomp's) terms.
type OCISeccomp struct {
	DefaultAction   string           `json:"defaultAction"`
	DefaultErrnoRet *uint            `json:"defaultErrnoRet,omitempty"`
	Architectures   []string         `json:"architectures"`
	Syscalls        []OCISyscallRule `json:"syscalls"`
}

type OCISyscallRule struct {
	Names    []string     `json:"names"`
	Action   string       `json:"action"`
	ErrnoRet *uint        `json:"errnoRet,omitempty"`
	Args     []OCISeccArg `json:"args,omitempty"`
}

type OCISeccArg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

type OCINamespace struct {
	Type string `json:"type"`
}

// Spec returns the config for an idle "sleep infinity" container on a
// read-only rootfs, modelled on "runc spec" defaults.
func Spec(rootfs, hostname string) OCISpec {
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	return OCISpec{
		OCIVersion: "1.0.2",
		Process: OCIProcess{
			Terminal: false,
			Args:     []string{"sleep", "infinity"},
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME=/root",
			},
			Cwd:             "/",
			Capabilities:    OCICapabilities{Bounding: caps, Effective: caps, Permitted: caps},
			Rlimits:         []OCIRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Root:     OCIRoot{Path: rootfs, Readonly: true},
		Hostname: hostname,
		Mounts: []OCIMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
				Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
				Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
				Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs",
				Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: OCILinux{
			Namespaces: []OCINamespace{
				{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "network"},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
				"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
				"/proc/sched_debug", "/proc/scsi", "/sys/firmware",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
}
