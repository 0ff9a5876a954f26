package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/view"
)

func init() { register(newViewCmd) }

func newViewCmd() *cobra.Command {
	var (
		lo          loadOptions
		af          attributionFlags
		addr        string
		top         int
		allowRemote bool
	)
	c := &cobra.Command{
		Use:   "view PATH [--http ADDR]",
		Short: "Open an interactive page of the snapshot: zoomable timeline, stacks, segment map",
		Long: `view loads the snapshot once and serves a local page (its scripts are built into the binary:
no CDN, nothing leaves the machine) at a loopback address, printed when ready.

The page opens the device with an OOM, else the one with the highest allocated peak, and says
what the other devices hold. The timeline shows allocated memory stacked in bands by site (the
sites highest over the trace; a shade of their role's colour), each column pale between its
events' minimum and maximum, reserved memory as a black line, the peak, each OOM, every step
start (a line per step, or a step-count axis when dense) and the phases as a strip. Wheel to
zoom, drag to pan, double-click for the whole trace; every zoom asks the server for exactly one
column per pixel, cut from an index built at load, so a gigabyte snapshot stays responsive
(pytorch.org/memory_viz holds the whole trace in the browser instead). Point at a band to see its
site, role and bytes; click it for its stack. Peak and OOM buttons jump there; the OOM button
also explains it (request, free memory, verdict, live sites, stack). Allocations switches to
one band per live allocation in allocation order (memory_viz's Active Memory Timeline; those
under a pixel are summed): point at one for its size, events and stack, click to pin it. Below,
the segment map: every segment with its blocks coloured by role and state, a legend, pools and
streams, at the end of the file or, after a click on the timeline, rebuilt at that event; a
file without a trace lists its top sites beside it.`,
		Example: `  memsnap view snapshot.pickle
  memsnap view snapshot.pickle --http 127.0.0.1:8770`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return fmt.Errorf("--http %q: give HOST:PORT (e.g. 127.0.0.1:8770; port 0 picks a free one)", addr)
			}
			if !allowRemote && !isLoopback(host) {
				return fmt.Errorf("--http %q is not a loopback address: use 127.0.0.1 or localhost, or pass --allow-remote (the page has no password: anyone who reaches it reads the snapshot's file paths and code lines)", addr)
			}
			if top < 1 || top > 40 {
				return fmt.Errorf("--top %d: must be 1 to 40", top)
			}
			snap, err := loadSnapshot(c.Context(), args[0], lo)
			if err != nil {
				return err
			}
			snap.Compact()
			srv := view.New(snap, view.Options{Attribution: af.options(), Top: top, AnyHost: allowRemote})
			if len(snap.Devices()) > 0 { // the page opens on its default device: index it now
				if err := srv.Prepare(c.Context(), srv.DefaultDevice()); err != nil {
					return err
				}
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--http %s: %w", addr, err)
			}
			hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(c.OutOrStdout(), "memsnap view: http://%s/ (Ctrl-C to stop)\n", ln.Addr())
			done := make(chan error, 1)
			go func() { done <- hs.Serve(ln) }()
			select {
			case err := <-done:
				if !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				return nil
			case <-c.Context().Done():
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				hs.Shutdown(ctx)
				return nil
			}
		},
	}
	lo.addFlags(c)
	af.addFlags(c)
	c.Flags().StringVar(&addr, "http", "127.0.0.1:0", "listen address (loopback; port 0 picks a free port)")
	c.Flags().IntVar(&top, "top", 12, "sites drawn as their own band (the highest over the trace)")
	c.Flags().BoolVar(&allowRemote, "allow-remote", false, "allow a non-loopback listen address (the page has no password)")
	return c
}
