// Package export is `memstat export`: a snapshot's events, blocks or
// segments as a flat table for pandas, DuckDB or a spreadsheet.
package export

import (
	"bufio"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/atomicfile"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/export"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options are `memstat export`'s inputs.
type Options struct {
	IO     *iostreams.IOStreams
	File   string
	Format string
	What   string
	Output string
	Device int

	format export.Format
	table  export.Table
}

// NewCmdExport returns the export command. runF replaces runExport in
// tests of flag parsing.
func NewCmdExport(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "export FILE [--format csv|json|jsonl] [--what events|blocks|segments|stacks] [-o OUT] [--device N]",
		Short: "Write events, blocks, segments or stacks as a flat table (CSV, JSON) for data tools",
		Long: `Write one table of a snapshot for pandas, DuckDB or a spreadsheet, to stdout
or to -o OUT (written atomically). Rows are streamed as they are produced.

--what events (the default): one row per trace entry:
  device, index, time_us, action, addr, size, stream, segment, offset,
  device_free, stack_id, top_function, top_file, top_line
segment and offset place the address in the segment (cudaMalloc'd range, or
expandable segment's reservation) that held it right after the event, found
by replaying the trace; device_free is set on oom rows, whose addr is empty.

--what blocks: one row per block of the final state:
  device, segment, address, offset, size, requested_size, state, stream,
  pool, expandable, stack_id, top_function, top_file, top_line

--what segments: one row per segment of the final state:
  device, address, total_size, allocated_size, active_size, requested_size,
  stream, pool, pool_id, expandable, blocks, stack_id, top_function,
  top_file, top_line

--what stacks: one row per frame of each stack, what stack_id stands for:
  stack_id, depth (0: innermost), function, file, line, kind (user,
  library, internal), shown (whether peak, oom, diff and pprof show it
  without --all-frames); stacks belong to the file, so --device is ignored

Sizes and addresses are integers (bytes). stack_id numbers the distinct
stacks of the file (--what stacks lists their frames); top_* is the
allocation site, the frame peak names a stack by: the innermost frame of
the program's own code, else of a library, else a Python frame, else a
native frame that is not the allocator's or the interpreter's. Values that do not apply
are empty in CSV and null in JSON. --format json writes one array of
objects, jsonl one object per line.`,
		Example: `  memstat export snapshot.pickle -o events.csv
  memstat export snapshot.pickle --what blocks --format json -o blocks.json
  memstat export snapshot.pickle --format jsonl | duckdb -c "SELECT action, count(*) FROM read_json_auto('/dev/stdin') GROUP BY 1"
  python -c "import pandas as pd; print(pd.read_csv('events.csv').groupby('top_function')['size'].sum())"`,
		Args: command.OneSnapshot("memstat export FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			var err error
			if opts.format, err = export.ParseFormat(opts.Format); err != nil {
				return command.FlagErrorf("--format: %v", err)
			}
			if opts.table, err = export.ParseTable(opts.What); err != nil {
				return command.FlagErrorf("--what: %v", err)
			}
			if runF != nil {
				return runF(opts)
			}
			return runExport(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Format, "format", "csv", "table format: {csv|json|jsonl}")
	fl.StringVar(&opts.What, "what", "events", "table: {events|blocks|segments|stacks}")
	fl.StringVarP(&opts.Output, "output", "o", "", "file to write (default: stdout)")
	fl.IntVar(&opts.Device, "device", -1, "export only this device (default: every device)")
	return cmd
}

func runExport(opts *Options) error {
	if err := atomicfile.RefuseInput("-o", opts.Output, opts.File); err != nil {
		return err
	}
	// The heap limit follows the need: events keep the replay's state
	// and a row at a time (each stack's columns once); the other tables
	// read the loaded snapshot only.
	command.NeedHeap(command.HeapNeed{})
	// The events' replay rebuilds the state before the trace: its pass
	// over the trace runs beside the reading, as stats' does.
	var snap *snapshot.Snapshot
	var scan *replay.StartScan
	var err error
	if opts.table == export.Events {
		snap, scan, err = command.LoadSnapshotScanned(opts.IO.ErrOut, opts.File)
	} else {
		snap, err = command.LoadSnapshot(opts.IO.ErrOut, opts.File)
	}
	if err != nil {
		return err
	}
	if scan != nil {
		defer scan.Stop()
	}
	if opts.Device >= snap.Devices() {
		return fmt.Errorf("%s: device %d does not exist (the snapshot has %d)", opts.File, opts.Device, snap.Devices())
	}
	o := export.Options{Table: opts.table, Format: opts.format, Device: opts.Device, StartScan: scan}
	write := func(w io.Writer) error {
		_, err := export.Write(w, snap, o)
		if err != nil {
			return fmt.Errorf("%s: %w", opts.File, err)
		}
		return nil
	}
	if opts.Output == "" || opts.Output == "-" {
		bw := bufio.NewWriterSize(opts.IO.Out, 256<<10)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	}
	return atomicfile.Write(opts.Output, write)
}
