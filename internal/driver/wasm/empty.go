package wasm

// EmptyCommand is the smallest WASI command module: one page of memory and
// an empty _start. `airlock bench` instantiates it to time what a wasm
// exec costs beyond the program itself.
func EmptyCommand() []byte {
	return []byte{
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: () -> ()
		0x03, 0x02, 0x01, 0x00, // function section: one function of type 0
		0x05, 0x03, 0x01, 0x00, 0x01, // memory section: min 1 page
		0x07, 0x13, 0x02, // export section, 2 exports
		0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // "_start": function 0
		0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00, // "memory": memory 0
		0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code section: an empty body
	}
}
