// Package pprof is `memstat pprof`: the memory allocated at one moment of
// a trace, by allocation stack, as a pprof profile.
package pprof

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/atomicfile"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/live"
	"github.com/memstat/memstat/pkg/report"
	rpprof "github.com/memstat/memstat/pkg/report/pprof"
)

// Options are `memstat pprof`'s inputs.
type Options struct {
	IO        *iostreams.IOStreams
	File      string
	Output    string
	At        string
	Device    int
	AllFrames bool

	moment live.Moment
}

// NewCmdPprof returns the pprof command. runF replaces runPprof in tests
// of flag parsing.
func NewCmdPprof(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "pprof FILE -o OUT.pb.gz [--at peak|end|ENTRY] [--device N]",
		Short: "Write live memory by allocation stack as a pprof profile",
		Long: `Write the memory tensors held at one moment, by the Python (and C++) stack
that allocated it, as a pprof profile: sample types inuse_objects (blocks)
and inuse_space (bytes, as the allocator rounded them: what
allocated_bytes counts). Open it with the pprof tool for top lists,
flame graphs and source views, or compare two runs with -diff_base.

--at picks the moment: peak (the default: when allocated memory was
highest in the trace), end (the snapshot's final state), or a trace entry
index (the state right after it). Each stack keeps the frames peak and oom
show (your code and libraries; PyTorch's own code, the allocator, the
interpreter and the frames PyTorch's viewers hide are dropped), so -top and
flame graphs start at your code; --all-frames keeps every frame. The state comes from replaying the trace
through memstat's allocator model, following the recorded decisions.`,
		Example: `  memstat pprof snapshot.pickle -o peak.pb.gz
  go tool pprof -top peak.pb.gz
  go tool pprof -http=:8080 peak.pb.gz
  memstat pprof before.pickle -o before.pb.gz && memstat pprof after.pickle -o after.pb.gz
  go tool pprof -diff_base before.pb.gz after.pb.gz`,
		Args: command.OneSnapshot("memstat pprof FILE -o OUT.pb.gz"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if opts.Output == "" {
				return command.FlagErrorf("-o OUT.pb.gz is required")
			}
			m, err := live.ParseMoment(opts.At)
			if err != nil {
				return command.FlagErrorf("--at: %v", err)
			}
			opts.moment = m
			if runF != nil {
				return runF(opts)
			}
			return runPprof(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Output, "output", "o", "", "profile to write (gzipped protobuf, e.g. peak.pb.gz)")
	fl.StringVar(&opts.At, "at", "peak", "moment: peak, end, or a trace entry index")
	fl.IntVar(&opts.Device, "device", -1, "device (default: the first with a trace, or with segments)")
	fl.BoolVar(&opts.AllFrames, "all-frames", false, "keep every recorded frame (default: the frames peak and oom show; the allocator's, the interpreter's and PyTorch's own dropped)")
	return cmd
}

func runPprof(opts *Options) error {
	if err := atomicfile.RefuseInput("-o", opts.Output, opts.File); err != nil {
		return err
	}
	// The heap limit counts the allocated blocks it keeps (88-byte
	// allocator.BlockInfo, half the blocks or so) and the addresses the
	// trace frees before it allocates them (live.At).
	command.NeedHeap(command.HeapNeed{PerEntry: 8, PerBlock: 96})
	snap, scan, err := command.LoadSnapshotScanned(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	if scan != nil {
		defer scan.Stop()
	}
	var device int
	if opts.moment.Kind == live.End {
		device, err = command.StateDevice(snap, opts.File, opts.Device)
	} else if device, err = command.TraceDevice(snap, opts.File, opts.Device); err != nil && opts.moment.Kind == live.Peak {
		// Without a trace the peak is unknown; the final state is all
		// there is.
		if device, err = command.StateDevice(snap, opts.File, opts.Device); err == nil {
			fmt.Fprintf(opts.IO.ErrOut, "memstat: %s: device %d has no trace; writing its final state\n", opts.File, device)
			opts.moment = live.Moment{Kind: live.End}
		}
	}
	if err != nil {
		return err
	}
	st, err := live.AtScanned(snap, device, opts.moment, scan)
	if err != nil {
		return fmt.Errorf("%s: %w", opts.File, err)
	}
	when := describe(st)
	comment := fmt.Sprintf("memstat: %s, device %d, %s: %s allocated in %d blocks", filepath.Base(opts.File), device, when, report.Size(st.Allocated), len(st.Blocks))
	if err := atomicfile.Write(opts.Output, func(w io.Writer) error {
		return rpprof.Write(w, st, rpprof.Options{AllFrames: opts.AllFrames, Comments: []string{comment}})
	}); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.Out, "%s: device %d, %s: %s allocated in %d blocks from %d stacks\n",
		opts.Output, device, when, report.Size(st.Allocated), len(st.Blocks), len(st.ByStack()))
	return nil
}

// describe says which moment a state is.
func describe(st *live.State) string {
	var s string
	switch {
	case st.Moment.Kind == live.End:
		s = "at the end"
	case st.Index < 0:
		s = st.Moment.String() + ", before the first trace entry"
	default:
		s = fmt.Sprintf("%s, after trace entry %d", st.Moment, st.Index)
	}
	if st.TimeUS != 0 && st.Moment.Kind != live.End {
		s += " (" + time.UnixMicro(st.TimeUS).UTC().Format("2006-01-02 15:04:05.000000") + " UTC)"
	}
	return s
}
