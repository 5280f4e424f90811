//go:build !no_docker

package cli

// What the table says of the docker driver, in every build that can run
// it (the front hands it off: drivers_docker.go makes it).
func init() {
	aboutDriver(driverAbout{name: "docker", help: "a container of a Docker Engine: DOCKER_HOST, else the local socket",
		flags: map[string]string{
			"image":   "one the engine has (docker images)",
			"runtime": `the engine's runtime, "runc" (default), "runsc" (gVisor) or "kata", as registered with the engine`,
		}})
}
