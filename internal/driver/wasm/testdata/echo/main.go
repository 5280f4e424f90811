// Command echo is a WASI command module for the wasm driver's tests: it
// prints its arguments, then the file /workspace/in.txt, and writes
// /workspace/out.txt; it exits with the code in $EXIT.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	fmt.Println(strings.Join(os.Args[1:], " "))
	if b, err := os.ReadFile("/workspace/in.txt"); err == nil {
		fmt.Print(string(b))
	}
	if err := os.WriteFile("/workspace/out.txt", []byte("from the module\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	code, _ := strconv.Atoi(os.Getenv("EXIT"))
	os.Exit(code)
}
