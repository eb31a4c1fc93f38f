package atomicfile

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// RefuseInput returns an error when output names one of inputs: the same
// file by the same name, through a symbolic link or as a hard link
// (os.SameFile), so that `memstat export -o snap.pickle snap.pickle`
// cannot replace the snapshot it reads. "" and "-" (standard input or
// output) and files that do not exist yet name nothing.
func RefuseInput(flag, output string, inputs ...string) error {
	if output == "" || output == "-" {
		return nil
	}
	out, err := os.Stat(output)
	if err != nil {
		return nil
	}
	for _, in := range inputs {
		if in == "" || in == "-" {
			continue
		}
		if st, err := os.Stat(in); err == nil && os.SameFile(out, st) {
			if in == output {
				return fmt.Errorf("%s %s names an input file: refusing to overwrite it", flag, output)
			}
			return fmt.Errorf("%s %s is the input file %s: refusing to overwrite it", flag, output, in)
		}
	}
	return nil
}

// Temporary files being written, removed if the process is interrupted:
// SIGINT or SIGTERM during a write removes them and exits with 130 or 143
// (128 + the signal, as a shell reports a process the signal killed),
// instead of leaving a hidden .NAME.tmp-NNNN file of up to the output's
// size behind.
var (
	tempsMu    sync.Mutex
	temps      = map[string]bool{}
	signalOnce sync.Once
)

func register(tmp string) {
	signalOnce.Do(watchSignals)
	tempsMu.Lock()
	temps[tmp] = true
	tempsMu.Unlock()
}

func unregister(tmp string) {
	tempsMu.Lock()
	delete(temps, tmp)
	tempsMu.Unlock()
}

func watchSignals() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-c
		tempsMu.Lock() // held to the end: no write registers or renames after this
		for tmp := range temps {
			os.Remove(tmp)
		}
		code := 130
		if sig == syscall.SIGTERM {
			code = 143
		}
		os.Exit(code)
	}()
}
