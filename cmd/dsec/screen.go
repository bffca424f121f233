package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// screenshotCmd is `dsec screenshot ID FILE` (FILE "-" is stdout).
func screenshotCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "screenshot ID FILE",
		Short: "Save a sandbox's display as a PNG (fullvm; FILE - is stdout)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			png, err := cl.Screenshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if args[1] == "-" {
				_, err = os.Stdout.Write(png)
				return err
			}
			return os.WriteFile(args[1], png, 0o644)
		},
	}
}

// inputCmd is `dsec input ID --text ... | --key ... | --click X,Y`.
func inputCmd() *cobra.Command {
	var text, key, click, button string
	c := &cobra.Command{
		Use:   "input ID (--text TEXT | --key KEY | --click X,Y)",
		Short: "Type text, press a key (chord) or click on a sandbox's display (fullvm)",
		Long: "Type text (\\n in TEXT is Return, \\t Tab, as escapes or real characters), press one key or\n" +
			"chord by QEMU key name (ret, esc, ctrl-c, alt-f4, a, f1, up) or click at display pixel X,Y.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := inputRequest(text, key, click, button)
			if err != nil {
				return err
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			res, err := cl.SendInput(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "%d input events sent\n", res.Events)
			return nil
		},
	}
	c.Flags().StringVar(&text, "text", "", `text to type ("\n" is Return)`)
	c.Flags().StringVar(&key, "key", "", "a key or chord to press (ret, ctrl-c, alt-f4)")
	c.Flags().StringVar(&click, "click", "", "click at X,Y (display pixels)")
	c.Flags().StringVar(&button, "button", "left", "mouse button for --click: left, right, middle")
	return c
}

// inputRequest builds the request from exactly one of the flags.
func inputRequest(text, key, click, button string) (api.InputRequest, error) {
	var req api.InputRequest
	n := 0
	if text != "" {
		n++
		req.Text = strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\\`, `\`).Replace(text)
	}
	if key != "" {
		n++
		req.Key = key
	}
	if click != "" {
		n++
		xs, ys, ok := strings.Cut(click, ",")
		x, errX := strconv.Atoi(strings.TrimSpace(xs))
		y, errY := strconv.Atoi(strings.TrimSpace(ys))
		if !ok || errX != nil || errY != nil {
			return req, fmt.Errorf("input: --click wants X,Y (pixels), got %q", click)
		}
		req.Click = &api.Click{X: x, Y: y, Button: button}
	}
	if n != 1 {
		return req, fmt.Errorf("input: give exactly one of --text, --key, --click")
	}
	return req, nil
}
