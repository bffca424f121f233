package v1

import (
	"net/http"
)

// route is one registered pattern; the table is also what the OpenAPI test checks.
type route struct {
	pattern string // Go 1.22 ServeMux pattern, "METHOD /path"
	handler http.HandlerFunc
}

const sb = "/v1/sandboxes/{id}"

func (s *Server) routes() []route {
	return []route{
		{"GET /v1/health", s.health},
		{"GET /v1/info", s.info},
		{"GET /v1/openapi.yaml", s.openAPI},
		{"GET /v1/debug/runtime", s.debugRuntime},
		{"GET /v1/images", s.listImages},
		{"GET /v1/images/{name}", s.getImage},
		{"POST /v1/images", s.composeImage},
		{"DELETE /v1/images/{name}", s.deleteImage},
		{"POST /v1/images:prune", s.pruneImages},
		{"GET /v1/images:pulls", s.pullsInFlight},
		{"POST /v1/images/{name}/record", s.recordImage},
		{"POST /v1/images:build", s.buildImage},

		{"POST /v1/sandboxes", s.createSandbox},
		{"POST /v1/sandboxes:batch", s.createBatch},
		{"POST /v1/sandboxes:run", s.runSandbox},
		{"GET /v1/sandboxes", s.listSandboxes},
		{"GET " + sb, s.getSandbox},
		{"DELETE " + sb, s.deleteSandbox},
		{"POST " + sb + "/pause", s.pauseSandbox},
		{"POST " + sb + "/resume", s.resumeSandbox},
		{"PUT " + sb + "/cpu-class", s.setCPUClass},
		{"PUT " + sb + "/deadline", s.setDeadline},
		{"POST " + sb + "/reset", s.resetSandbox},
		{"POST " + sb + "/fork", s.forkSandbox},
		{"POST " + sb + "/commit", s.commitSandbox},
		{"PUT " + sb + "/network", s.setNetwork},
		{"GET " + sb + "/screen", s.screenshot},
		{"POST " + sb + "/input", s.sendInput},

		{"POST " + sb + "/exec", s.step(s.exec)},
		{"POST " + sb + "/exec/stream", s.step(s.execStream)},
		{"POST " + sb + "/code:run", s.step(s.runCode)},
		{"GET " + sb + "/code/contexts", s.listCodeContexts},
		{"POST " + sb + "/code/contexts", s.createCodeContext},
		{"POST " + sb + "/code/contexts/{ctx}/restart", s.restartCodeContext},
		{"DELETE " + sb + "/code/contexts/{ctx}", s.deleteCodeContext},

		{"POST " + sb + "/processes", s.step(s.startProcess)},
		{"GET " + sb + "/processes", s.listProcesses},
		{"GET " + sb + "/processes/{pid}", s.getProcess},
		{"POST " + sb + "/processes/{pid}/wait", s.waitProcess},
		{"POST " + sb + "/processes/{pid}/kill", s.killProcess},
		{"POST " + sb + "/processes/{pid}/input", s.processInput},
		{"GET " + sb + "/processes/{pid}/logs", s.processLogs},
		{"GET " + sb + "/processes/{pid}/output", s.followProcess},

		{"GET " + sb + "/files", s.step(s.readFile)},
		{"PUT " + sb + "/files", s.step(s.writeFile)},
		{"DELETE " + sb + "/files", s.step(s.removeFile)},
		{"POST " + sb + "/files/mkdir", s.step(s.mkdir)},
		{"GET " + sb + "/files/list", s.listFiles},
		{"GET " + sb + "/files/stat", s.statFile},
		{"GET " + sb + "/files/archive", s.downloadArchive},
		{"PUT " + sb + "/files/archive", s.step(s.uploadArchive)},

		// Every method; dispatch sends proxy paths here before the mux so that the
		// path is forwarded verbatim (the mux would clean and redirect it).
		{proxyRoute, s.proxyHTTP},

		{"GET /v1/nodes", s.listNodes},
		{"DELETE /v1/nodes/{name}", s.removeNode},
		{"POST /v1/nodes/{name}/drain", s.drainNode},
		{"POST /v1/nodes/{name}/undrain", s.undrainNode},

		{"GET /v1/projects", s.listProjects},
		{"POST /v1/projects", s.createProject},
		{"GET /v1/projects/{name}", s.getProject},
		{"DELETE /v1/projects/{name}", s.deleteProject},
		{"PUT /v1/projects/{name}/quota", s.setQuota},
		{"POST /v1/projects/{name}/tokens", s.addToken},
		{"DELETE /v1/projects/{name}/tokens/{tid}", s.removeToken},
		{"PUT /v1/projects/{name}/registries/{host}", s.setRegistryAuth},
		{"DELETE /v1/projects/{name}/registries/{host}", s.removeRegistryAuth},

		{"GET /v1/trajectories", s.listTrajectories},
		{"GET /v1/trajectories/{traj}", s.getTrajectory},
		{"DELETE /v1/trajectories/{traj}", s.deleteTrajectory},
		{"GET /v1/trajectories/{traj}/export", s.exportTrajectory},
		{"POST /v1/trajectories/{traj}/rebuild", s.rebuildTrajectory},

		{"POST /v1/fncall", s.step(s.fnCall)},
		{"POST /v1/fncall/batch", s.fnCallBatch},
	}
}
