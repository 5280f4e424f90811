package image

import "errors"

// ErrRefused is what the errors of a layer refused as hostile or too
// large wrap; the message names the entry.
var ErrRefused = errors.New("refused")

// Limits bound what one image may unpack to, so that a hostile image
// cannot fill the host's disk. A zero field means its default.
type Limits struct {
	// MaxFileBytes is the largest file (its logical size: a sparse file
	// counts whole). 4 GiB.
	MaxFileBytes int64
	// MaxTotalBytes is the most all of an image's files may hold, and
	// what a layer may decompress to. 32 GiB.
	MaxTotalBytes int64
	// MaxEntries is the most entries all of an image's layers may have.
	// 1 Mi.
	MaxEntries int
}

func (l Limits) withDefaults() Limits {
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = 4 << 30
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = 32 << 30
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 1 << 20
	}
	return l
}
