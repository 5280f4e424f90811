//go:build !no_microvm

package cli

// What the table says of the microvm driver, in every build that can run
// it (the front hands it off: drivers_microvm.go makes it).
func init() {
	aboutDriver(driverAbout{name: "microvm", help: "a QEMU virtual machine with its own kernel", flags: imageRootFlags})
}
