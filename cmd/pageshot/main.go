// Command pageshot takes screenshots (PNG) of the live page of a running
// kafkastreams instance or cmd/watermarkmgr, in headless Chromium (Debian's
// chromium package) driven by chromedp: the README's screenshot comes from
// it. It waits for the page to be live (its first server-sent event), then
// writes a full-page screenshot every --interval into --out_dir
// (page-000.png, page-001.png, …) until --count shots or the page's server
// goes away (the job ended).
//
//	WATERMARKS_PORT=8089 make run-stream &
//	go run ./cmd/pageshot --url=http://127.0.0.1:8089/ --out_dir=bin/pageshots
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"
)

func main() {
	var (
		url      = flag.String("url", "http://127.0.0.1:8089/", "the page's address (an instance's --watermarks_addr)")
		outDir   = flag.String("out_dir", "bin/pageshots", "directory for the PNG files")
		interval = flag.Duration("interval", time.Second, "time between two screenshots")
		count    = flag.Int("count", 60, "most screenshots to take")
		wait     = flag.Duration("wait", 5*time.Minute, "how long to wait for the page to answer")
		width    = flag.Int("width", 1400, "browser window width in CSS pixels")
		height   = flag.Int("height", 900, "browser window height in CSS pixels (the screenshot is of the whole page)")
	)
	flag.Parse()
	if err := run(*url, *outDir, *interval, *count, *wait, *width, *height); err != nil {
		log.Fatal("pageshot: ", err)
	}
}

func run(url, outDir string, interval time.Duration, count int, wait time.Duration, width, height int) error {
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		return fmt.Errorf("no chromium in PATH (apt-get install chromium)")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v", url, wait)
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(width, height))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		live, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("conn").textContent === "live"`))
		if err != nil {
			return err
		}
		if live {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the page at %s did not go live (no server-sent event) within 30 s", url)
		}
	}
	for i := 0; i < count; i++ {
		if i > 0 {
			time.Sleep(interval)
		}
		live, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("conn").textContent === "live"`))
		if err != nil {
			return err
		}
		if !live {
			log.Printf("pageshot: the page is no longer live (the job ended): %d screenshots", i)
			return nil
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			return err
		}
		path := filepath.Join(outDir, fmt.Sprintf("page-%03d.png", i))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			return err
		}
		log.Printf("pageshot: %s", path)
	}
	return nil
}
