//go:build !no_wasm

package cli

// What the table says of the wasm driver, in every build that can run it
// (the front hands it off: drivers_wazero.go makes it).
func init() {
	aboutDriver(driverAbout{name: "wasm", help: "WebAssembly in-process: python3 and WASI modules, no network",
		flags: map[string]string{"module": ""}})
}
